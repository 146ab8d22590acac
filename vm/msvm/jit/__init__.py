"""The tiered real-time compiler: fusion on bytecode, LLVM code generation (L2, L3),
the kernel cache and the tier manager."""
