"""The tiered real-time compiler (``ms.jit`` is the decorator; this package is the engine):
fusion on bytecode, LLVM code generation (L2, L3), the kernel cache and the tier manager."""
