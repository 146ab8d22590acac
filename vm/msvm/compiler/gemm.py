"""msvm's own matrix product on a packed weight (issue 18: weights prepared once).

A Dense layer multiplies activations ``x [M, K]`` by a fixed weight. OpenBLAS packs the weight
into its panel layout on every call: for the few rows of a short sequence (BERT at S=16: M=16)
that copy costs as much as the arithmetic (bench: 768x3072 at M=16 runs at ~55 GFLOP/s, a copy
of the weight alone is half of that time). Here the weight is packed once per Parameter array
(``pack``; the Site keeps it while the same read-only array is in place, so ``set_data`` gives a
new array and a new pack), into panels of NR columns, ``[ceil(N/NR)][K][NR]`` (zero-padded), and
one LLVM function multiplies any ``M x K`` row-major block by it:

    gemm(m, k, n, A*, lda, Bp*, C*, ldc)      C[i, j] = sum_p A[i, p] * B[p, j]

For each panel (K x NR, kept in L2 across row blocks), MR rows at a time, a register tile of MR x
NR accumulators (NR = two vector registers; MR = 12 with AVX-512's 32 registers, 6 with AVX2's 16)
runs down k with one fused multiply-add per (row, vector); the last panel's extra columns are
stored through a mask. One function serves every shape (dims are arguments); it is compiled once
per process (and cached on disk like any kernel).

The products are summed in k order with FMA (as BLAS does): results agree with numpy's to
rounding, not bit for bit.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from .lower import TYPES, Unsupported, vec_width

NAME = "msvm_gemm_packed"
A_BLOCK_BYTES = 1 << 20     # rows of A per pass over the panels: about this many bytes (L2)
PREFETCH_ROWS = 24          # panel rows ahead that the tiles prefetch (8, 16, 24, 32, 40, 64 measured)
KC = 256                    # k per block: a panel's k block (KC x NR) stays in L1 across the row tiles
_lock = threading.Lock()
_compiled: dict = {}        # dtype -> build.Compiled


def shape(features: str, dtype: str = "float32") -> tuple:
    """(w, V, MR): vector lanes, vectors per panel row (NR = w * V) and rows per register tile."""
    w = vec_width(features, TYPES[dtype])
    wide = "+avx512f" in features        # 32 vector registers (else 16)
    return w, 2, 12 if wide else 6


def pack(b: np.ndarray, nr: int, transposed: bool) -> np.ndarray:
    """B [K, N] (or, transposed, the weight W [N, K] with B = W.T) as NR-column panels:
    ``[ceil(N/NR), K, NR]``, zero-padded, contiguous."""
    bt = b if transposed else b.T            # [N, K]
    n, k = bt.shape
    panels = -(-n // nr)
    out = np.zeros((panels * nr, k), dtype=b.dtype)
    out[:n] = bt
    return np.ascontiguousarray(out.reshape(panels, nr, k).transpose(0, 2, 1))


def ir(features: str, dtype: str = "float32", name: str = NAME) -> str:
    """The LLVM IR of the function ``name`` (and its per-row-count tiles) for this target."""
    t = TYPES[dtype]
    w, nv, mr = shape(features, dtype)
    nr = w * nv
    vt = f"<{w} x {t}>"
    sfx = f"v{w}f{32 if t == 'float' else 64}"
    fma, mstore, mload = f"@llvm.fma.{sfx}", f"@llvm.masked.store.{sfx}.p0{sfx}", f"@llvm.masked.load.{sfx}.p0{sfx}"
    lines = [f"declare {vt} {fma}({vt}, {vt}, {vt})",
             f"declare void {mstore}({vt}, {vt}*, i32, <{w} x i1>)",
             f"declare {vt} {mload}({vt}*, i32, <{w} x i1>, {vt})",
             "declare void @llvm.prefetch.p0i8(i8*, i32, i32, i32)"]
    iota = "<" + ", ".join(f"i64 {i}" for i in range(w)) + ">"
    L = lines.append
    for r in range(1, mr + 1):
        # C[r x cols] (+)= A[r x k] . Bpanel[k x NR]: from zero when ``first``, else onto C (a k block after the first)
        L(f"define internal void @{name}_tile{r}(i64 %k, {t}* noalias %a, i64 %lda, {t}* noalias %b, "
          f"{t}* noalias %c, i64 %ldc, i64 %cols, i1 %first) nounwind alwaysinline {{")
        L("entry:")
        L(f"  %cb = insertelement <{w} x i64> undef, i64 %cols, i32 0")
        L(f"  %cv = shufflevector <{w} x i64> %cb, <{w} x i64> undef, <{w} x i32> zeroinitializer")
        for v in range(nv):
            L(f"  %lane{v} = add <{w} x i64> {iota}, " + "<" + ", ".join([f"i64 {v * w}"] * w) + ">")
            L(f"  %mask{v} = icmp slt <{w} x i64> %lane{v}, %cv")
        for i in range(r):
            L(f"  %co{i} = mul i64 %ldc, {i}")
            for v in range(nv):
                L(f"  %cp{i}_{v} = getelementptr {t}, {t}* %c, i64 {v * w}")
                L(f"  %cq{i}_{v} = getelementptr {t}, {t}* %cp{i}_{v}, i64 %co{i}")
                L(f"  %cr{i}_{v} = bitcast {t}* %cq{i}_{v} to {vt}*")
        L("  br i1 %first, label %pre, label %onto")
        L("onto:")
        for i in range(r):
            for v in range(nv):
                L(f"  %old{i}_{v} = call {vt} {mload}({vt}* %cr{i}_{v}, i32 4, <{w} x i1> %mask{v}, "
                  f"{vt} zeroinitializer)")
        L("  br label %pre")
        L("pre:")
        for i in range(r):
            for v in range(nv):
                L(f"  %init{i}_{v} = phi {vt} [ zeroinitializer, %entry ], [ %old{i}_{v}, %onto ]")
        L("  %kz = icmp sle i64 %k, 0")
        L("  br i1 %kz, label %store, label %loop")
        L("loop:")
        L("  %p = phi i64 [ 0, %pre ], [ %pn, %loop ]")
        for i in range(r):
            for v in range(nv):
                L(f"  %acc{i}_{v} = phi {vt} [ %init{i}_{v}, %pre ], [ %nacc{i}_{v}, %loop ]")
        L(f"  %boff = mul i64 %p, {nr}")
        for v in range(nv):
            L(f"  %bo{v} = add i64 %boff, {v * w}")
            L(f"  %bp{v} = getelementptr {t}, {t}* %b, i64 %bo{v}")
            L(f"  %bv{v}p = bitcast {t}* %bp{v} to {vt}*")
            L(f"  %bv{v} = load {vt}, {vt}* %bv{v}p, align 4")
        # the panel streams from memory: ask for its rows PREFETCH_ROWS ahead (one cache line per vector)
        L(f"  %pfo = add i64 %boff, {PREFETCH_ROWS * nr}")
        for v in range(0, nv):
            L(f"  %pfo{v} = add i64 %pfo, {v * w}")
            L(f"  %pfp{v} = getelementptr {t}, {t}* %b, i64 %pfo{v}")
            L(f"  %pfc{v} = bitcast {t}* %pfp{v} to i8*")
            L(f"  call void @llvm.prefetch.p0i8(i8* %pfc{v}, i32 0, i32 3, i32 1)")
        for i in range(r):
            L(f"  %ar{i} = mul i64 %lda, {i}")
            L(f"  %ao{i} = add i64 %ar{i}, %p")
            L(f"  %ap{i} = getelementptr {t}, {t}* %a, i64 %ao{i}")
            L(f"  %as{i} = load {t}, {t}* %ap{i}")
            L(f"  %ai{i} = insertelement {vt} undef, {t} %as{i}, i32 0")
            L(f"  %av{i} = shufflevector {vt} %ai{i}, {vt} undef, <{w} x i32> zeroinitializer")
            for v in range(nv):
                L(f"  %nacc{i}_{v} = call {vt} {fma}({vt} %av{i}, {vt} %bv{v}, {vt} %acc{i}_{v})")
        L("  %pn = add i64 %p, 1")
        L("  %more = icmp slt i64 %pn, %k")
        L("  br i1 %more, label %loop, label %store")
        L("store:")
        for i in range(r):
            for v in range(nv):
                L(f"  %f{i}_{v} = phi {vt} [ %init{i}_{v}, %pre ], [ %nacc{i}_{v}, %loop ]")
        L(f"  %full = icmp sge i64 %cols, {nr}")
        L("  br i1 %full, label %sfull, label %smask")
        for label, masked in (("sfull", False), ("smask", True)):
            L(f"{label}:")
            for i in range(r):
                for v in range(nv):
                    if masked:
                        L(f"  call void {mstore}({vt} %f{i}_{v}, {vt}* %cr{i}_{v}, i32 4, <{w} x i1> %mask{v})")
                    else:
                        L(f"  store {vt} %f{i}_{v}, {vt}* %cr{i}_{v}, align 4")
            L("  ret void")
        L("}")
    # the driver: A blocks of mc rows (L2) x panels (each read once from memory, front to back) x k blocks
    # of KC (the panel's k block, KC x NR, stays in L1 while every row tile of the A block multiplies it)
    a_block = A_BLOCK_BYTES // np.dtype(dtype).itemsize
    L(f"define void @{name}(i64 %m, i64 %k, i64 %n, {t}* noalias %A, i64 %lda, {t}* noalias %B, {t}* noalias %C, "
      f"i64 %ldc) nounwind {{")
    L("entry:")
    L("  %kpos = icmp sgt i64 %k, 0")
    L("  %kk = select i1 %kpos, i64 %k, i64 1")
    L(f"  %mcq = udiv i64 {a_block}, %kk")
    L(f"  %mcr = udiv i64 %mcq, {mr}")
    L(f"  %mcm = mul i64 %mcr, {mr}")
    L(f"  %mcs = icmp slt i64 %mcm, {mr}")
    L(f"  %mc = select i1 %mcs, i64 {mr}, i64 %mcm")
    L("  br label %iloop")
    L("iloop:")
    L("  %i0 = phi i64 [ 0, %entry ], [ %i0n, %pdone ]")
    L("  %ic = icmp slt i64 %i0, %m")
    L("  br i1 %ic, label %ibody, label %done")
    L("ibody:")
    L("  %iend0 = add i64 %i0, %mc")
    L("  %iover = icmp sgt i64 %iend0, %m")
    L("  %iend = select i1 %iover, i64 %m, i64 %iend0")
    L("  br label %ploop")
    L("ploop:")
    L("  %j = phi i64 [ 0, %ibody ], [ %jn, %kdone ]")
    L("  %pc = icmp slt i64 %j, %n")
    L("  br i1 %pc, label %pbody, label %pdone")
    L("pbody:")
    L("  %left = sub i64 %n, %j")
    L(f"  %pidx = udiv i64 %j, {nr}")
    L("  %pstride = mul i64 %pidx, %k")
    L(f"  %poff = mul i64 %pstride, {nr}")
    L(f"  %panel = getelementptr {t}, {t}* %B, i64 %poff")
    L(f"  %cj = getelementptr {t}, {t}* %C, i64 %j")
    L("  br label %kloop")
    L("kloop:")           # (runs once when k = 0: the tiles then store zeros)
    L("  %k0 = phi i64 [ 0, %pbody ], [ %k0n, %rdone ]")
    L("  %kin = icmp slt i64 %k0, %k")
    L("  %first = icmp eq i64 %k0, 0")
    L("  %kgo = or i1 %kin, %first")
    L("  br i1 %kgo, label %kbody, label %kdone")
    L("kbody:")
    L("  %kleft = sub i64 %k, %k0")
    L(f"  %kcs = icmp slt i64 %kleft, {KC}")
    L(f"  %kc = select i1 %kcs, i64 %kleft, i64 {KC}")
    L(f"  %ak = getelementptr {t}, {t}* %A, i64 %k0")
    L(f"  %bk0 = mul i64 %k0, {nr}")
    L(f"  %bk = getelementptr {t}, {t}* %panel, i64 %bk0")
    L("  br label %rloop")
    L("rloop:")
    L("  %i = phi i64 [ %i0, %kbody ], [ %in, %rnext ]")
    L("  %rc = icmp slt i64 %i, %iend")
    L("  br i1 %rc, label %rbody, label %rdone")
    L("rbody:")
    L("  %rem = sub i64 %iend, %i")
    L(f"  %few = icmp slt i64 %rem, {mr}")
    L(f"  %rows = select i1 %few, i64 %rem, i64 {mr}")
    L("  %aoff = mul i64 %i, %lda")
    L(f"  %ai = getelementptr {t}, {t}* %ak, i64 %aoff")
    L("  %coff = mul i64 %i, %ldc")
    L(f"  %ci = getelementptr {t}, {t}* %cj, i64 %coff")
    cases = " ".join(f"i64 {r}, label %t{r}" for r in range(1, mr))
    L(f"  switch i64 %rows, label %t{mr} [ {cases} ]")
    for r in range(1, mr + 1):
        L(f"t{r}:")
        L(f"  call void @{name}_tile{r}(i64 %kc, {t}* %ai, i64 %lda, {t}* %bk, {t}* %ci, i64 %ldc, i64 %left, "
          "i1 %first)")
        L("  br label %rnext")
    L("rnext:")
    L(f"  %in = add i64 %i, {mr}")
    L("  br label %rloop")
    L("rdone:")
    L(f"  %k0n = add i64 %k0, {KC}")
    L("  br label %kloop")
    L("kdone:")
    L(f"  %jn = add i64 %j, {nr}")
    L("  br label %ploop")
    L("pdone:")
    L("  %i0n = add i64 %i0, %mc")
    L("  br label %iloop")
    L("done:")
    L("  ret void")
    L("}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- when, and the kernels around it

ROWS = (2, 256)     # rows of A for which the packed product beats OpenBLAS (measured; see ``use_packed``)


def use_packed(m: int, dtype) -> bool:
    """Whether a product of m rows by a packed weight runs here rather than in BLAS. Measured on
    BERT's weights (768x768, 768x3072, 3072x768; one thread, bench in the module doc's numbers):
    1.5-3.9x faster than OpenBLAS from 5 to 37 rows, 1.1-1.25x at 128, even at 512 and 10% slower
    at 2048 (OpenBLAS packs A too and blocks for L3); at one row OpenBLAS's gemv is as fast."""
    return ROWS[0] <= m <= ROWS[1] and str(np.dtype(dtype)) in TYPES


@dataclass(frozen=True)
class PackedGemm:
    """The kernel-cache entry of the packed product itself (one per dtype and target)."""
    dtype: str

    kind = "gemm"
    name = "gemm_packed"

    def text(self) -> str:
        return f"gemm_packed dtype={self.dtype} a_block={A_BLOCK_BYTES} kc={KC} prefetch={PREFETCH_ROWS}"


def lower_gemm(k: PackedGemm, name: str, features: str) -> str:
    return ir(features, k.dtype, name)


def pointer(dtype: str) -> int:
    """The packed product's address for dtype, compiled (or loaded from the kernel cache) once."""
    hit = _compiled.get(dtype)
    if hit is None:
        from .build import compile_kernel

        with _lock:
            hit = _compiled.get(dtype)
            if hit is None:
                c = compile_kernel(PackedGemm(dtype), 3, {"op": "GEMM_PACKED", "shape": [], "dtype": dtype})
                hit = _compiled[dtype] = c
    return hit.addr


def function(dtype: str):
    """ctypes ``gemm(m, k, n, A, lda, Bp, C, ldc)`` (callconv.HEAD["gemm"])."""
    from .callconv import prototype

    pointer(dtype)
    return prototype(_compiled[dtype].kernel, _compiled[dtype].addr)


def panel_width(dtype) -> int:
    from .codegen import codegen

    w, nv, _ = shape(codegen().features, str(np.dtype(dtype)))
    return w * nv


def lower_matmul_packed(k, name: str, features: str) -> str:
    """A FUSED_MATMUL by a packed weight (kir.MatmulEpilogue with ``packed``): row blocks of the
    packed product through its pointer, then the epilogue over the block while it is in cache."""
    from .lower import Builder, block_epilogue, epilogue_params, lower_elementwise

    t = TYPES.get(k.dtype)
    if t is None or k.ta or k.tb or k.batch != 1:
        raise Unsupported("a packed product of a transposed or batched A")
    epi_name = f"{name}_epi"
    epi_ir = lower_elementwise(k.epilogue, epi_name, features) if k.epilogue is not None else ""
    extra = [i for i, kind in enumerate(k.epilogue.kinds) if i > 0] if k.epilogue is not None else []
    params = [f"void (i64, i64, i64, {t}*, i64, {t}*, {t}*, i64)* %gemm", f"{t}* %A", f"{t}* %B", f"{t}* %C"]
    params += epilogue_params(k, extra, t)
    m, kk, n, bs = k.m, k.k, k.n, k.block
    b = Builder()
    b.raw(f"define void @{name}({', '.join(params)}) nounwind {{")
    b.raw("entry:")
    b.raw("  br label %rloop")
    b.raw("rloop:")
    b.raw("  %r0 = phi i64 [ 0, %entry ], [ %r0n, %rbody ]")
    b.raw(f"  %rc = icmp slt i64 %r0, {m}")
    b.raw("  br i1 %rc, label %rbody, label %done")
    b.raw("rbody:")
    rem = b.op(f"sub i64 {m}, %r0")
    lt = b.op(f"icmp slt i64 {rem}, {bs}")
    rows = b.op(f"select i1 {lt}, i64 {rem}, i64 {bs}")
    a_blk = b.op(f"getelementptr {t}, {t}* %A, i64 {b.op(f'mul i64 %r0, {kk}')}")
    c_blk = b.op(f"getelementptr {t}, {t}* %C, i64 {b.op(f'mul i64 %r0, {n}')}")
    b.raw(f"  call void %gemm(i64 {rows}, i64 {kk}, i64 {n}, {t}* {a_blk}, i64 {kk}, {t}* %B, {t}* {c_blk}, i64 {n})")
    if k.epilogue is not None:
        block_epilogue(b, k, extra, epi_name, t, rows, n, c_blk)
    b.raw(f"  %r0n = add i64 %r0, {bs}")
    b.raw("  br label %rloop")
    b.raw("done:")
    b.raw("  ret void")
    b.raw("}")
    return epi_ir + "\n" + "\n".join(b.lines) + "\n"
