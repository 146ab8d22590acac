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

Convolutions (``ir_taps``, compiler/conv.py ``TapsConv``) run the same register tiles the other
way round: A is the weight, its rows where they lie in the Parameter (or, where reading them there
costs, packed once in blocks of MR rows), and B is read where it lies (an image's channel rows at a
row stride, one shifted window per tap: no per-call packing, masked loads past the last column),
channel by channel with each channel's taps in turn, accumulating onto the tile; the convolution's
epilogue (batch norm, bias, residual add, ReLU / ReLU6) is applied in registers before the tile's
only store.
A column range [j0, j1) per call lets two threads share a product.

**Two threads** (``run_split``, issue 18: BERT-base and GPT-2 on two cores). Where two cores are
allowed (callconv.cores: the affinity, MSVM_THREADS) and a product has at least SPLIT_MIN_FLOPS
and two panels, its panels are shared: the first half of whole panels in the calling thread, the
rest on msvm's kernel pool (Bp and C offset by the first half, ldc unchanged). Each element is
computed by one thread with the same tiles in the same k order, so one and two threads give the
same bits. A Dense site's kernel (``lower_matmul_packed``, at L2 and L3) takes the column range
itself: each thread runs the product and its epilogue over its own columns, a chunk at a time
(callconv._split_caller; the epilogue had run after the product, its rows split over the two threads
where its work called for it: GPT-2 small at S=128 spent 4.5 ms of a ~100 ms forward in its 48
epilogues on one thread), and such a site has no native entry: the replay calls its caller, which
splits. On two cores every row count runs here (``use_packed``), not only 1..256.

**BLAS and the pool do not share the cores.** After a call with two threads OpenBLAS's workers
spin for a while, on the cores msvm's pool needs (the conv module's 3.3x, MobileNet's 64 -> 15 ms
in ``use_packed``). Two ways out: OpenBLAS keeps both threads and msvm's pool stays idle, or msvm's
pool splits the products and OpenBLAS runs what remains (attention's batched products) on one
thread. The second, by measurement (BERT-base, auto, two cores, OPENBLAS_NUM_THREADS=2, a shared
machine under load, ms per forward, S=16 / S=128, two rounds in turn; the figures swing 2-10x
with the other processes): before this (no split, OpenBLAS on two threads) 39-381 / 379-5284;
the split with OpenBLAS left at two threads 45 / 2657; the split with OpenBLAS set to one
thread 41-44 / 177-309 (SPLIT_MIN_FLOPS 40e6: 41 / 177; 12e6: 45 / 177); this code with
MSVM_THREADS=1 (no split) 39 / 395-400. SPLIT_MIN_FLOPS is 40e6 (as the conv split's): at S=16 only the
feed-forward's 75 MFLOP products would split and that measured no faster here (the other core
is busy with other work on this machine; the hand-off's arithmetic, 65 us against ~240 us
saved, says it should gain where the second core is free). GPT-2 on a quiet machine (same
setting, S=16 / S=128): split 38 / 175 ms, no split 47 / 235 ms.
So the first piece of work on the pool sets OpenBLAS to one thread (build.blas_single;
MSVM_BLAS_THREADS=keep leaves it, a number sets it).
The hand-off is compiler/pool.py's spinning one since (an OS wake-up took a median 90-300 us on
a KVM guest, not 65): SPLIT_MIN_FLOPS came down to 8e6 with it, for the convolutions too (AMD
Zen 3, two cores, wall clock, alternating runs: BERT-base at S=16 36.7-42.3 ms at 40e6, 28.1-37.0
at 8e6, 32.0-34.4 at 3e6; MobileNet v2 at 224 14.5-16.2 / 12.5-14.3 / 13.7-17.0 ms). The
convolutions' own threshold (conv.SPLIT_MIN_FLOPS) went on to 2e6 once a replayed convolution's
split was posted again without Python (conv.Memo).
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass

import numpy as np

from .kir import dtype_name
from .lower import TYPES, Builder, Unsupported, Vals, _scalar, avx512, emit_program, epilogue_params, vec_width

NAME = "msvm_gemm_packed"
A_BLOCK_BYTES = 1 << 20     # the taps product's rows of A (weight rows) per block, about this many bytes (L2)
# the same for the packed Dense product (``_packed_driver``): a block's k block beside its C block (mc x NB NR)
# and the panels' k blocks in L2. Measured (Intel Xeon, 2 MB L2, one core, thread CPU time, medians of 11
# calls in turn, GFLOP/s at 1 MB / 384 KB / 256 KB / 192 KB): 1024^3 119 / 143 / 150 / 154, 512x768x3072
# 132 / 137 / 138 / 146, 512x3072x768 123 / 130 / 134 / 141, 1024x768x768 125 / 151 / 153 / 155, and at
# par where A has 37-122 rows (122x768x3072 154 / 153 / 152 / 156); 128 KB lost 8% there.
DENSE_A_BLOCK_BYTES = 192 << 10
PREFETCH_ROWS = 24          # panel rows ahead that the tiles prefetch (8, 16, 24, 32, 40, 64 measured)
# panel rows ahead that the Dense tiles also ask into L2 (prefetcht2) where all of A fits in one row block
# (few rows: the weight's bandwidth is the bound). One core's misses into L1 are as many as its fill buffers,
# ~16 lines in flight; L2's own queue takes more. Measured (Intel Xeon, 12 GPT-2 weights in turn, 85 MB, the
# kernel alone, medians of 15 runs in turn, ms without / with, three runs): 16 rows one core 9.2-9.5 /
# 8.9, two cores 4.1-4.6 / 3.8-4.3 (on a busier host 12.6 / 8.6 and 4.8 / 3.3); 122 rows 40.0-40.3 / 40.1-40.5;
# the same weight over and over (in cache) 3-4% slower with. GPT-2 small at S=16 on two cores, alternating
# processes: 29.1-30.3 -> 26.3-27.5 ms; at S=128 on one core, where every tile prefetched so: 2% slower
L2_PREFETCH_ROWS = 128
L2_PREFETCH_MAX_ROWS = 64   # (and A at most this many rows: a short k fits hundreds of rows in one block)
UNROLL = 4                  # k steps per trip of a packed tile's loop (1, 2, 4 measured: see ``_tiles``)
UNROLL_WIDE = 2             # the same with AVX-512's 12-row tiles (``_tiles``: 4 spilled, 1.7x slower)
ROW_GROUP = 3               # A rows a tile reads from one pointer of its own (``_tiles``: LLVM's LSR)
# a taps product's last panel of at most one vector runs one vector's tiles (``ir_taps``): a 14x14 map is
# 6 panels and 4 columns, whose tiles did a whole panel's FMAs (one core, a forward's state: 256 -> 1024
# at 14x14 with its residual 134-137 -> 138-140 GFLOP/s, 10x10 109 -> 112-117, 20x20 135-136 -> 138-140;
# the kernel's first compile 0.7 -> 0.95 s, once: the kernel cache keeps it)
HALF_PANEL = True
LINE = 64                   # bytes per cache line (the taps tiles' A prefetch)
TAPS_GROUPS = True          # the taps tiles read A in place through ``_row_groups_start``'s pointers
RES_PREFETCH = True         # the taps tiles prefetch their residual's lines one panel on (``_tile_head``)
A_PREFETCH = 64             # k steps ahead that the taps tiles prefetch their A (0: none)
KC = 256                    # k per block: a panel's k block (KC x NR) stays in L1 across the row tiles
# The last MR + r rows, r <= SPLIT_REST, run as two tiles of about half on AVX-512 (``_packed_driver``): a tile
# of r rows alone leaves the FMA units idle, each of its 2 r accumulators waiting on the FMA before (Intel
# Xeon, one core, 37 rows of 768 x 2304: the 37th row cost 3-4.6x a row of the 36 before it)
SPLIT_REST = 3
NB = 4                      # panels per column block where A is past A_BLOCK_BYTES (``_packed_driver``)
_lock = threading.Lock()
_compiled: dict = {}        # dtype -> build.Compiled


def shape(features: str, dtype: str = "float32") -> tuple:
    """(w, V, MR): vector lanes, vectors per panel row (NR = w * V) and rows per register tile."""
    w = vec_width(features, TYPES[dtype])
    wide = wide_tiles(features)
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
    _tiles(L, name, t, w, nv, mr, vt, fma, mstore, mload, iota)
    if L2_PREFETCH_ROWS:
        _tiles(L, name, t, w, nv, mr, vt, fma, mstore, mload, iota, far=True)
    _packed_driver(L, name, t, mr, nr, dtype)
    return "\n".join(lines) + "\n"


def _tiles(L, name, t, w, nv, mr, vt, fma, mstore, mload, iota, far=False):
    """The register tiles @{name}_tile{r}, r = 1..MR, of the packed Dense product: the panel is
    packed (rows NR apart, zero-padded) and A is row-major (%lda apart). The k loop runs UNROLL
    steps a trip (the IR passes do not unroll), then the rest one at a time: the same products in
    the same order, so the same bits. Measured (AMD Zen 3, one core, the kernel alone on 48 MB of
    packed weights streaming from memory, three runs of 9 alternations, GFLOP/s UNROLL 1 / 2 / 4):
    16x768x768 46.5-49.0 / 50.7-55.4 / 51.3-56.9, 16x3072x768 49.8-70.3 / 54.9-69.3 / 57.1-69.9,
    128x3072x768 60.6-81.3 / 64.7-80.3 / 65.7-76.4, 296x768x768 61.8-63.9 / 64.2-66.0 / 66.1-68.1
    (4 ahead of 1 on 19 of 21 shape-runs); whole models, one core, alternating processes, CPU ms:
    BERT-base S=128 381-403 -> 311-314, GPT-2 S=16 55 -> 47-48 (S=16 BERT and S=128 GPT-2 within
    the noise).

    AVX-512's 12 x 32 tile holds 24 of the 32 vector registers in accumulators: unrolled 4 steps,
    LLVM's scheduler hoisted the later steps' broadcasts ahead of the first step's products and
    spilled them to the stack (a vmovups store and reload per broadcast), so those tiles ran one
    step a trip. Measured (AMD EPYC Zen 5, one core, thread CPU time, best of 5 rounds
    of repeated calls, GFLOP/s msvm unroll 4 -> 1 / onnxruntime's MatMul by a constant in the same
    process): 128x768x768 147 -> 257 / 252-256, 128x3072x768 133 -> 252 / 244-251, 16x768x3072
    158 -> 245 / 242, 1024x1024x1024 126 -> 248 / 249-252. With A's rows through group pointers
    (``_row_groups_start``: fewer registers for addresses) they run two steps a trip (UNROLL_WIDE)
    without a spill (Intel Xeon, one core: at par with one step to 5% faster)."""
    nr = w * nv
    unroll = UNROLL_WIDE if mr >= 12 else UNROLL
    for r in range(1, mr + 1):
        # C[r x cols] (+)= A[r x k] . Bpanel[k x NR]: from zero when ``first``, else onto C (a k block after the first)
        L(f"define internal void @{name}_{'f' if far else ''}tile{r}(i64 %k, {t}* noalias %a, i64 %lda, {t}* noalias %b, "
          f"{t}* noalias %c, i64 %ldc, i64 %cols, i1 %first) nounwind alwaysinline {{")
        L("entry:")
        _tile_head(L, t, w, nv, r, vt, mload, iota, prefetch_c=False)
        _k_loop(L, t, vt, r, nv, "%k", unroll, True, "e",
                lambda p, src, dst, sfx, g, r=r: _step(L, t, w, nv, r, vt, fma, nr, p, src, dst, sfx, g, far))
        _tile_store(L, w, nv, r, vt, mstore, nr)


def _k_loop(L, t, vt, r, nv, count: str, unroll: int, grouped: bool, out: str, step) -> None:
    """A register tile's k loop, from block %pre (accumulators %init): ``unroll`` steps a trip while whole
    trips remain, then the steps left one at a time, the same products in the same order either way (so the
    same bits). ``step(p, src, dst, sfx, g)`` emits step p (an i64 value) from accumulators %{src}i_v into
    %{dst}i_v, its names suffixed ``sfx``; g is the step's place in the trip where A's rows are read through
    the row groups' pointers (``grouped``: ``_row_groups_start``), None in the steps left. Leaves to %store
    with the tile's sums in %{out}i_v."""
    L(f"  %ku = and i64 {count}, {-unroll}")
    L("  %kz = icmp sle i64 %ku, 0")
    if grouped:
        _row_groups_start(L, t, r)
    L("  br i1 %kz, label %after, label %loop")
    L("loop:")
    L("  %p = phi i64 [ 0, %pre ], [ %pn, %loop ]")
    if grouped:
        _row_groups_phi(L, t, r, "ag", [("ags", "pre"), ("agn", "loop")])
    _phis(L, vt, r, nv, "acc", [("init", "pre"), ("nacc", "loop")])
    if grouped:
        _row_groups_rows(L, t, r)
    for u in range(unroll):
        L(f"  %pu{u} = add i64 %p, {u}")
        step(f"%pu{u}", "acc" if u == 0 else f"u{u - 1}_", "nacc" if u == unroll - 1 else f"u{u}_", f"_{u}",
             u if grouped else None)
    if grouped:
        _row_groups_next(L, t, r, unroll)
    L(f"  %pn = add i64 %p, {unroll}")
    L("  %more = icmp slt i64 %pn, %ku")
    L("  br i1 %more, label %loop, label %after")
    L("after:")
    L("  %q0 = phi i64 [ 0, %pre ], [ %pn, %loop ]")
    _phis(L, vt, r, nv, "kf", [("init", "pre"), ("nacc", "loop")])
    L(f"  %left = icmp slt i64 %q0, {count}")
    L("  br i1 %left, label %rest, label %store")
    L("rest:")
    L("  %q = phi i64 [ %q0, %after ], [ %qn, %rest ]")
    _phis(L, vt, r, nv, "racc", [("kf", "after"), ("rnacc", "rest")])
    step("%q", "racc", "rnacc", "_r", None)
    L("  %qn = add i64 %q, 1")
    L(f"  %rmore = icmp slt i64 %qn, {count}")
    L("  br i1 %rmore, label %rest, label %store")
    L("store:")
    _phis(L, vt, r, nv, out, [("kf", "after"), ("rnacc", "rest")])


def _step(L, t, w, nv, r, vt, fma, nr, p, src, dst, sfx, grouped=None, far=False):
    """One k step at %p of a packed tile: the panel row's NR values, a prefetch of the row
    PREFETCH_ROWS ahead (one cache line per vector) and (``far``) into L2 of the row L2_PREFETCH_ROWS
    ahead, each A row's element broadcast times them onto
    %{src}i_v, into %{dst}i_v (names suffixed ``sfx``). ``grouped``: the step's place in the loop's
    trip, A's rows read from the trip's group pointers (``_tiles``), else at %a + i * lda + p."""
    L(f"  %boff{sfx} = mul i64 {p}, {nr}")
    for v in range(nv):
        L(f"  %bo{v}{sfx} = add i64 %boff{sfx}, {v * w}")
        L(f"  %bp{v}{sfx} = getelementptr {t}, {t}* %b, i64 %bo{v}{sfx}")
        L(f"  %bv{v}p{sfx} = bitcast {t}* %bp{v}{sfx} to {vt}*")
        L(f"  %bv{v}{sfx} = load {vt}, {vt}* %bv{v}p{sfx}, align 4")
    L(f"  %pfo{sfx} = add i64 %boff{sfx}, {PREFETCH_ROWS * nr}")
    for v in range(nv):
        L(f"  %pfo{v}{sfx} = add i64 %pfo{sfx}, {v * w}")
        L(f"  %pfp{v}{sfx} = getelementptr {t}, {t}* %b, i64 %pfo{v}{sfx}")
        L(f"  %pfc{v}{sfx} = bitcast {t}* %pfp{v}{sfx} to i8*")
        L(f"  call void @llvm.prefetch.p0i8(i8* %pfc{v}{sfx}, i32 0, i32 3, i32 1)")
    if far:
        L(f"  %fpo{sfx} = add i64 %boff{sfx}, {L2_PREFETCH_ROWS * nr}")
        for v in range(nv):
            L(f"  %fpo{v}{sfx} = add i64 %fpo{sfx}, {v * w}")
            L(f"  %fpp{v}{sfx} = getelementptr {t}, {t}* %b, i64 %fpo{v}{sfx}")
            L(f"  %fpc{v}{sfx} = bitcast {t}* %fpp{v}{sfx} to i8*")
            L(f"  call void @llvm.prefetch.p0i8(i8* %fpc{v}{sfx}, i32 0, i32 1, i32 1)")
    for i in range(r):
        if grouped is not None:
            _fma_row(L, t, vt, fma, w, nv, i, _row_at(i), str(grouped), src, dst, sfx)
            continue
        L(f"  %ar{i}{sfx} = mul i64 %lda, {i}")
        L(f"  %ao{i}{sfx} = add i64 %ar{i}{sfx}, {p}")
        _fma_row(L, t, vt, fma, w, nv, i, "%a", f"%ao{i}{sfx}", src, dst, sfx)


def _row_groups_start(L, t, r) -> None:
    """A tile's rows of A (``%a``, rows ``%lda`` apart) in groups of ROW_GROUP, each group a pointer
    of its own (%ags{g}, its first row): the tile's k loop reads row g + j at [%ag{g} + j * lda], one
    addressing mode with lda in a register, and steps each pointer on through an empty asm
    (``_row_groups_next``), so that LLVM's loop strength reduction keeps them apart. Left to it, the
    reduction rebuilt all 12 rows' addresses from one index at every k step: 13 integer instructions
    beside the step's 24 FMAs and 12 broadcasts. Measured (Intel Xeon, AVX-512, one core, thread CPU
    time, medians of 31 calls in turn, the packed Dense product, same bits; GFLOP/s before -> grouped with
    two k steps a trip): 122x768x2304 143 -> 155, 122x768x768 153 -> 163, 122x768x3072 145 -> 154,
    122x3072x768 143 -> 148, 64x3072x768 143 -> 149, 256x1024x1024 134 -> 146, 37x768x768 152 -> 159
    (with lda a constant of the kernel, one register for all rows: 146-167, a compile per stride; AVX2's
    6-row tiles: the same speed either way)."""
    for j in range(2, ROW_GROUP):
        L(f"  %lda{j} = mul i64 %lda, {j}")
    for g in range(0, r, ROW_GROUP):
        L(f"  %ags{g}o = mul i64 %lda, {g}")
        L(f"  %ags{g} = getelementptr {t}, {t}* %a, i64 %ags{g}o")


def _row_groups_phi(L, t, r, name, incoming) -> None:
    """%{name}{g} = phi of the group pointers from each (prefix, block) of ``incoming``."""
    for g in range(0, r, ROW_GROUP):
        srcs = ", ".join(f"[ %{pfx}{g}, %{b} ]" for pfx, b in incoming)
        L(f"  %{name}{g} = phi {t}* {srcs}")


def _row_groups_rows(L, t, r) -> None:
    """The group pointers' other rows, %ag{g}_{j} = %ag{g} + j * lda (``_row_at``)."""
    for g in range(0, r, ROW_GROUP):
        for j in range(1, min(ROW_GROUP, r - g)):
            L(f"  %ag{g}_{j} = getelementptr {t}, {t}* %ag{g}, i64 {'%lda' if j == 1 else f'%lda{j}'}")


def _row_at(i: int) -> str:
    """The pointer to row i's element at the loop's k step (``_row_groups_start``)."""
    g, j = i - i % ROW_GROUP, i % ROW_GROUP
    return f"%ag{g}_{j}" if j else f"%ag{g}"


def _row_groups_next(L, t, r, steps) -> None:
    """%agn{g}: each group pointer ``steps`` elements on, through an empty asm (opaque to LLVM)."""
    for g in range(0, r, ROW_GROUP):
        L(f"  %agi{g} = getelementptr {t}, {t}* %ag{g}, i64 {steps}")
        L(f"  %agn{g} = call {t}* asm \"\", \"=r,0\"({t}* %agi{g})")


def _tile_head(L, t, w, nv, r, vt, mload, iota, prefetch_c, full=False, prefetch_r=False):
    """A tile's entry: the column masks (lanes < %cols), its C rows' pointers (``prefetch_c``: the
    lines of the same rows one panel on are asked for, to write: the driver reaches them after every
    other row tile of the block, while this tile's own would come too late where k is short;
    MobileNet v2's 1x1 layers of 16-96 channels 25-49 -> 33-61 GFLOP/s, the rest at par), and the
    accumulators' start (%init: zero when %first, else C's values), leaving in block %pre. ``full``:
    the caller passes whole panels only (cols >= NR), so the masks are constant and fold away.
    ``prefetch_r``: in the last k block with a residual (``%hasr``), the residual's lines of the same
    rows one panel on are asked for too (its rows, a channel's plane apart, are as many streams as the
    tile has rows beside C's and B's: ResNet-50's 1x1 expand layers with their residual add, one core,
    the product alone, GFLOP/s warm / caches flushed, two runs: 64 -> 256 at 56x56 144-148 / 92-95 ->
    168-172 / 115-117, 128 -> 512 at 28x28 171-184 / 117-130 -> 197-199 / 148-150, 256 -> 1024 at 14x14
    186-187 / 129-133 -> 191-192 / 124-128)."""
    L(f"  %cb = insertelement <{w} x i64> undef, i64 {w * nv if full else '%cols'}, i32 0")
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
            if prefetch_c:           # (the same rows of the next panel: this tile's are too late at small k)
                L(f"  %cz{i}_{v} = getelementptr {t}, {t}* %cq{i}_{v}, i64 {w * nv}")
                L(f"  %cw{i}_{v} = bitcast {t}* %cz{i}_{v} to i8*")
                L(f"  call void @llvm.prefetch.p0i8(i8* %cw{i}_{v}, i32 1, i32 3, i32 1)")
    if prefetch_r:
        L("  %pr = and i1 %hasr, %last")
        L("  br i1 %pr, label %rpf, label %rpfx")
        L("rpf:")
        for i in range(r):
            L(f"  %rpo{i} = mul i64 %ldr, {i}")
            for v in range(nv):
                L(f"  %rpp{i}_{v} = getelementptr {t}, {t}* %res, i64 {v * w + w * nv}")
                L(f"  %rpq{i}_{v} = getelementptr {t}, {t}* %rpp{i}_{v}, i64 %rpo{i}")
                L(f"  %rpc{i}_{v} = bitcast {t}* %rpq{i}_{v} to i8*")
                L(f"  call void @llvm.prefetch.p0i8(i8* %rpc{i}_{v}, i32 0, i32 3, i32 1)")
        L("  br label %rpfx")
        L("rpfx:")
    L("  br i1 %first, label %pre, label %onto")
    L("onto:")
    for i in range(r):
        for v in range(nv):
            L(f"  %old{i}_{v} = call {vt} {mload}({vt}* %cr{i}_{v}, i32 4, <{w} x i1> %mask{v}, "
              f"{vt} zeroinitializer)")
    L("  br label %pre")
    L("pre:")
    _phis(L, vt, r, nv, "init", [("zeroinitializer", "rpfx" if prefetch_r else "entry"), ("old", "onto")])


def _phis(L, vt, r, nv, dst, incoming) -> None:
    """%{dst}{i}_{v} = phi over the tile's r x nv vectors, from each (value prefix, block) of
    ``incoming`` (the prefix "zeroinitializer": that constant)."""
    for i in range(r):
        for v in range(nv):
            srcs = ", ".join(f"[ {s if s == 'zeroinitializer' else f'%{s}{i}_{v}'}, %{b} ]" for s, b in incoming)
            L(f"  %{dst}{i}_{v} = phi {vt} {srcs}")


def _fma_row(L, t, vt, fma, w, nv, i, a, off, acc, dst="nacc", sfx=""):
    """Row i of a tile: A's element at ``off`` broadcast, times each B vector %bv{v}{sfx}, onto
    %{acc}{i}_v, into %{dst}{i}_v (its own names suffixed ``sfx``: one per step of an unrolled loop)."""
    L(f"  %ap{i}{sfx} = getelementptr {t}, {t}* {a}, i64 {off}")
    L(f"  %as{i}{sfx} = load {t}, {t}* %ap{i}{sfx}")
    L(f"  %ai{i}{sfx} = insertelement {vt} undef, {t} %as{i}{sfx}, i32 0")
    L(f"  %av{i}{sfx} = shufflevector {vt} %ai{i}{sfx}, {vt} undef, <{w} x i32> zeroinitializer")
    for v in range(nv):
        L(f"  %{dst}{i}_{v} = call {vt} {fma}({vt} %av{i}{sfx}, {vt} %bv{v}{sfx}, {vt} %{acc}{i}_{v})")


def _tile_store(L, w, nv, r, vt, mstore, nr):
    """The tile's only store of %e: whole vectors where the panel is full, else through the masks."""
    L(f"  %full = icmp sge i64 %cols, {nr}")
    L("  br i1 %full, label %sfull, label %smask")
    for label, masked in (("sfull", False), ("smask", True)):
        L(f"{label}:")
        for i in range(r):
            for v in range(nv):
                if masked:
                    L(f"  call void {mstore}({vt} %e{i}_{v}, {vt}* %cr{i}_{v}, i32 4, <{w} x i1> %mask{v})")
                else:
                    L(f"  store {vt} %e{i}_{v}, {vt}* %cr{i}_{v}, align 4")
        L("  ret void")
    L("}")


def _tile_epilogue(L, t, w, nv, r, vt, mload):
    """After the last k block (``%last``), the convolution's epilogue on the tile in registers, in
    the L1 kernel's order: the batch norm, * scale[row] then + bias[row] (``%hasb``), + res
    (``%hasr``: a tensor of C's layout, rows %ldr apart), then max(., lo) and min(., hi) as numpy's
    maximum / minimum (NaN stays; lo = -inf, hi = +inf leave every value as it is): ReLU is lo = 0, ReLU6 lo = 0, hi = 6.
    The tile's %f values become the epilogue's results (renamed in place: %f -> %e)."""
    L("  br i1 %last, label %epi, label %noepi")
    L("epi:")
    L(f"  %lob = insertelement {vt} undef, {t} %lo, i32 0")
    L(f"  %lov = shufflevector {vt} %lob, {vt} undef, <{w} x i32> zeroinitializer")
    L(f"  %hib = insertelement {vt} undef, {t} %hi, i32 0")
    L(f"  %hiv = shufflevector {vt} %hib, {vt} undef, <{w} x i32> zeroinitializer")
    L("  br i1 %hasb, label %eb, label %ebx")
    L("eb:")
    for i in range(r):
        L(f"  %sp{i}_ = getelementptr {t}, {t}* %scale, i64 {i}")
        L(f"  %ss{i}_ = load {t}, {t}* %sp{i}_")
        L(f"  %si{i}_ = insertelement {vt} undef, {t} %ss{i}_, i32 0")
        L(f"  %sb{i}_ = shufflevector {vt} %si{i}_, {vt} undef, <{w} x i32> zeroinitializer")
        L(f"  %bp{i}_ = getelementptr {t}, {t}* %bias, i64 {i}")
        L(f"  %bs{i}_ = load {t}, {t}* %bp{i}_")
        L(f"  %bi{i}_ = insertelement {vt} undef, {t} %bs{i}_, i32 0")
        L(f"  %bb{i}_ = shufflevector {vt} %bi{i}_, {vt} undef, <{w} x i32> zeroinitializer")
        for v in range(nv):          # (a multiply, then an add: two roundings, as the L1 kernel's two passes)
            L(f"  %fs{i}_{v} = fmul {vt} %f{i}_{v}, %sb{i}_")
            L(f"  %fb{i}_{v} = fadd {vt} %fs{i}_{v}, %bb{i}_")
    L("  br label %ebx")
    L("ebx:")
    _phis(L, vt, r, nv, "g", [("f", "epi"), ("fb", "eb")])
    L("  br i1 %hasr, label %er, label %erx")
    L("er:")
    for i in range(r):
        L(f"  %ro{i} = mul i64 %ldr, {i}")
        for v in range(nv):
            L(f"  %rq{i}_{v} = getelementptr {t}, {t}* %res, i64 {v * w}")
            L(f"  %rr{i}_{v} = getelementptr {t}, {t}* %rq{i}_{v}, i64 %ro{i}")
            L(f"  %rv{i}_{v}p = bitcast {t}* %rr{i}_{v} to {vt}*")
            L(f"  %rv{i}_{v} = call {vt} {mload}({vt}* %rv{i}_{v}p, i32 4, <{w} x i1> %mask{v}, {vt} zeroinitializer)")
            L(f"  %gr{i}_{v} = fadd {vt} %g{i}_{v}, %rv{i}_{v}")
    L("  br label %erx")
    L("erx:")
    _phis(L, vt, r, nv, "h", [("g", "ebx"), ("gr", "er")])
    for i in range(r):
        for v in range(nv):
            clamp(L, w, vt, f"{i}_{v}")
    L("  br label %noepi")
    L("noepi:")
    _phis(L, vt, r, nv, "e", [("f", "store"), ("hn", "erx")])


def clamp(L, w: int, vt: str, tag: str) -> None:
    """%hn{tag} = min(max(%h{tag}, %lov), %hiv) as numpy's maximum and minimum (NaN stays: the compares
    are unordered ones), the last step of every GEMM epilogue (ReLU: lo = 0; ReLU6: lo = 0, hi = 6)."""
    L(f"  %hl{tag} = fcmp ugt {vt} %h{tag}, %lov")
    L(f"  %hm{tag} = select <{w} x i1> %hl{tag}, {vt} %h{tag}, {vt} %lov")
    L(f"  %hh{tag} = fcmp ult {vt} %hm{tag}, %hiv")
    L(f"  %hn{tag} = select <{w} x i1> %hh{tag}, {vt} %hm{tag}, {vt} %hiv")


def _row_blocks(L, k: str, a_block: int, mr: int, head: str = "entry") -> None:
    """The drivers' outer loop head: blocks of ``mc`` rows of A (about a_block elements of k each, a
    multiple of MR, at least MR), from the entry block into ``ploop`` (closed by ``pdone``, left at ``done``)."""
    L(f"  %kpos = icmp sgt i64 {k}, 0")
    L(f"  %kk = select i1 %kpos, i64 {k}, i64 1")
    L(f"  %mcq = udiv i64 {a_block}, %kk")
    L(f"  %mcr = udiv i64 %mcq, {mr}")
    L(f"  %mcm = mul i64 %mcr, {mr}")
    L(f"  %mcs = icmp slt i64 %mcm, {mr}")
    L(f"  %mc = select i1 %mcs, i64 {mr}, i64 %mcm")
    L("  br label %iloop")
    L("iloop:")
    L(f"  %i0 = phi i64 [ 0, %{head} ], [ %i0n, %pdone ]")
    L("  %ic = icmp slt i64 %i0, %m")
    L("  br i1 %ic, label %ibody, label %done")
    L("ibody:")
    L("  %iend0 = add i64 %i0, %mc")
    L("  %iover = icmp sgt i64 %iend0, %m")
    L("  %iend = select i1 %iover, i64 %m, i64 %iend0")
    L("  br label %ploop")


def _packed_driver(L, name, t, mr, nr, dtype):
    # the driver: A blocks of mc rows x column blocks of NB panels x k blocks of KC x the block's panels x row
    # tiles: A's k block (mc x KC) stays in L2 across the block's panels, each panel's k block (KC x NR) in L1
    # across the row tiles, C's block (mc x NB NR) in L2 across the k blocks, and the weight is read once for
    # up to mc = DENSE_A_BLOCK_BYTES / KC rows. Where all of A fits in it a block is one panel: its k
    # blocks follow each other in memory, so the panel streams front to back under the tiles' prefetch (few
    # rows: the weight's bandwidth is the bound). (Before, row blocks of A_BLOCK_BYTES over all of k, each
    # panel's k blocks in turn: a K=3072 product of 128 rows was two row blocks, the 9.4 MB weight read twice.
    # Measured, Intel Xeon, one core, 12 weights in turn, GFLOP/s old -> new / onnxruntime's MatMul by a
    # constant: 128x3072x768 128-130 -> 140-142 / 144-146, 128x768x768 151-157 -> 152-154 / 142-152,
    # 128x768x3072 148 -> 146 / 143; two cores 128x3072x768 251 -> 273-281 / 286-291. NB = 1, 2, 4, 8 measured
    # within 2% of each other at 128 rows.)
    a_block = DENSE_A_BLOCK_BYTES // np.dtype(dtype).itemsize
    L(f"define void @{name}(i64 %m, i64 %k, i64 %n, {t}* noalias %A, i64 %lda, {t}* noalias %B, {t}* noalias %C, "
      f"i64 %ldc) nounwind {{")
    L("entry:")
    L(f"  %kshort = icmp slt i64 %k, {KC}")
    L(f"  %kb = select i1 %kshort, i64 %k, i64 {KC}")
    L("  %mk = mul i64 %m, %k")                 # (all of A in L2: one panel a block, streamed front to back)
    L(f"  %afits = icmp sle i64 %mk, {a_block}")
    L(f"  %nbw = select i1 %afits, i64 {nr}, i64 {NB * nr}")
    L(f"  %fewm = icmp sle i64 %m, {L2_PREFETCH_MAX_ROWS}")
    L("  %farp = and i1 %afits, %fewm")
    _row_blocks(L, "%kb", a_block, mr)
    L("ploop:")             # (column blocks of NB panels)
    L("  %jb = phi i64 [ 0, %ibody ], [ %jbn, %kdone ]")
    L("  %pc = icmp slt i64 %jb, %n")
    L("  br i1 %pc, label %pbody, label %pdone")
    L("pbody:")
    L("  %jbe0 = add i64 %jb, %nbw")
    L("  %jbo = icmp sgt i64 %jbe0, %n")
    L("  %jbe = select i1 %jbo, i64 %n, i64 %jbe0")
    L("  br label %kloop")
    L("kloop:")           # (runs once when k = 0: the tiles then store zeros)
    L("  %k0 = phi i64 [ 0, %pbody ], [ %k0n, %jdone ]")
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
    L("  br label %jloop")
    L("jloop:")           # (the block's panels)
    L("  %j = phi i64 [ %jb, %kbody ], [ %jn, %rdone ]")
    L("  %jc = icmp slt i64 %j, %jbe")
    L("  br i1 %jc, label %jbody, label %jdone")
    L("jbody:")
    L("  %left = sub i64 %n, %j")
    L(f"  %pidx = udiv i64 %j, {nr}")
    L("  %pstride = mul i64 %pidx, %k")
    L(f"  %poff = mul i64 %pstride, {nr}")
    L(f"  %panel = getelementptr {t}, {t}* %B, i64 %poff")
    L(f"  %bk = getelementptr {t}, {t}* %panel, i64 %bk0")
    L(f"  %cj = getelementptr {t}, {t}* %C, i64 %j")
    L("  br label %rloop")
    L("rloop:")
    L("  %i = phi i64 [ %i0, %jbody ], [ %in, %rnext ]")
    L("  %rc = icmp slt i64 %i, %iend")
    L("  br i1 %rc, label %rbody, label %rdone")
    L("rbody:")
    L("  %rem = sub i64 %iend, %i")
    L(f"  %few = icmp slt i64 %rem, {mr}")
    L(f"  %rows0 = select i1 %few, i64 %rem, i64 {mr}")
    if mr >= 12:
        # (the last MR + 1 to MR + 3 rows as two tiles of about half: a tile of 1-3 rows alone has 2-6
        # accumulators, each FMA waiting on the one before; each element's sum is the same either way)
        L(f"  %tail = icmp sgt i64 %rem, {mr}")
        L(f"  %tail2 = icmp slt i64 %rem, {mr + SPLIT_REST + 1}")
        L("  %halve = and i1 %tail, %tail2")
        L("  %half0 = add i64 %rem, 1")
        L("  %half = lshr i64 %half0, 1")
        L("  %rows = select i1 %halve, i64 %half, i64 %rows0")
    else:
        L("  %rows = add i64 %rows0, 0")
    L("  %aoff = mul i64 %i, %lda")
    L(f"  %ai = getelementptr {t}, {t}* %ak, i64 %aoff")
    L("  %coff = mul i64 %i, %ldc")
    L(f"  %ci = getelementptr {t}, {t}* %cj, i64 %coff")
    # (all of A in one block, few rows: the tiles that prefetch the panel into L2 far ahead, L2_PREFETCH_ROWS)
    L(f"  br i1 {'%farp' if L2_PREFETCH_ROWS else 'false'}, label %far, label %near")
    for tiles, tag in (("tile", "near"), ("ftile", "far")) if L2_PREFETCH_ROWS else (("tile", "near"),):
        L(f"{tag}:")
        cases = " ".join(f"i64 {r}, label %{tag}{r}" for r in range(1, mr))
        L(f"  switch i64 %rows, label %{tag}{mr} [ {cases} ]")
        for r in range(1, mr + 1):
            L(f"{tag}{r}:")
            L(f"  call void @{name}_{tiles}{r}(i64 %kc, {t}* %ai, i64 %lda, {t}* %bk, {t}* %ci, i64 %ldc, i64 %left, "
              "i1 %first)")
            L("  br label %rnext")
    if not L2_PREFETCH_ROWS:
        L("far:")
        L("  br label %near")
    L("rnext:")
    L("  %in = add i64 %i, %rows")
    L("  br label %rloop")
    L("rdone:")
    L(f"  %jn = add i64 %j, {nr}")
    L("  br label %jloop")
    L("jdone:")
    L(f"  %k0n = add i64 %k0, {KC}")
    L("  br label %kloop")
    L("kdone:")
    L("  %jbn = add i64 %jb, %nbw")
    L("  br label %ploop")
    L("pdone:")
    L("  %i0n = add i64 %i0, %mc")
    L("  br label %iloop")
    L("done:")
    L("  ret void")
    L("}")


# ---------------------------------------------------------------- when, and the kernels around it

ROWS = (1, 256)     # rows of A for which the packed product beats OpenBLAS (measured; see ``use_packed``)


def use_packed(m: int, dtype) -> bool:
    """Whether a product of m rows by a packed weight runs here rather than in BLAS. Measured on
    BERT's weights (768x768, 768x3072, 3072x768; one thread, bench in the module doc's numbers):
    1.5-3.9x faster than OpenBLAS from 5 to 37 rows, 1.1-1.25x at 128, even at 512 and 10% slower
    at 2048 (OpenBLAS packs A too and blocks for L3). At one row (a classifier's x @ W.T) both
    are bound by reading the weight (1x1280 @ 1280x1000: 189 us here, 180 us OpenBLAS's gemv;
    1x2048 @ 2048x1000 305 / 298 us), but OpenBLAS's call wakes its worker threads, which then
    spin on the cores msvm's kernel pool splits work over: MobileNet v2 at 224 on two cores with
    OPENBLAS_NUM_THREADS=2 took 64-68 ms per forward with its classifier in OpenBLAS, 14-15 ms with
    it here (16-17 ms with OPENBLAS_NUM_THREADS=1). So one row runs here too. Those figures are
    an Intel Xeon's; where OpenBLAS runs narrower tiles than ours (``wider_than_blas``: AMD Zen 5,
    OpenBLAS on its AVX2 kernels) every row count runs here.

    Where two cores are allowed (callconv.cores), every row count runs here: two threads share
    the product (``run_split``) and the BLAS is set to one thread once they do (build.blas_single);
    measured on two cores (OPENBLAS_NUM_THREADS=2, shared machine): 1024x768 @ 768x768 36 ms here,
    57 / 58 ms OpenBLAS on one / two threads; 1024x768 @ 768x3072 198 / 269 / 209 ms; 2048x3072 @
    3072x768 232 / 371 / 232 ms."""
    if not (ROWS[0] <= m and dtype_name(np.dtype(dtype)) in TYPES):
        return False
    if m <= ROWS[1]:
        return True
    from .callconv import cores

    return cores() >= 2 or wider_than_blas()


def wide_tiles(features: str | None = None) -> bool:
    """Whether this target runs the 12 x 32 register tiles (AVX-512: 32 vector registers; ``shape``)."""
    if features is None:
        from .codegen import codegen

        features = codegen().features
    return avx512(features)


AVX512_BLAS = ("skylakex", "cooperlake", "sapphirerapids")   # OpenBLAS's kernel families with AVX-512 tiles


def wider_than_blas(features: str | None = None, core: str | None = "ask") -> bool:
    """Whether this target's register tile is AVX-512 while numpy's OpenBLAS runs an AVX2 (or
    narrower) kernel family (``build.blas_core``): then the packed product is about twice BLAS's
    speed at every row count, and ``use_packed`` takes it above ROWS too.

    Measured (issue 18, AMD EPYC Zen 5 with AVX-512, where OpenBLAS 0.3.31 picks "Haswell"; one
    thread, GFLOP/s, packed / numpy's OpenBLAS, a shared machine): 512x768x768 188 / 98,
    1024x768x768 97 / 50, 2048x768x768 116 / 54, 1024x768x3072 128 / 68, 2048x768x3072 127 / 79,
    1024x3072x768 86 / 82, 2048x3072x768 102 / 71 (every shape faster here, 1.05-2.1x). On the Intel
    Xeon of the figures above (OpenBLAS on its SkylakeX kernels) the packed product was even at 512 rows
    and 10% slower at 2048: there ROWS holds. Whole BERT-base at batch 8 (296 and 512 rows), one
    thread, msvm / onnxruntime in one run each: S=37 1.60 -> 0.99, S=64 1.61 -> 0.95."""
    if features is None:
        from .codegen import codegen

        features = codegen().features
    if core == "ask":
        from .build import blas_core

        core = blas_core()
    return wide_tiles(features) and core is not None and core not in AVX512_BLAS


@dataclass(frozen=True)
class PackedGemm:
    """The kernel-cache entry of the packed product itself (one per dtype and target)."""
    dtype: str

    kind = "gemm"
    name = "gemm_packed"

    def text(self) -> str:
        return (f"gemm_packed dtype={self.dtype} a_block={DENSE_A_BLOCK_BYTES} kc={KC} "
                f"prefetch={PREFETCH_ROWS}/{L2_PREFETCH_ROWS} unroll={UNROLL}/{UNROLL_WIDE} split_rest={SPLIT_REST} "
                f"group={ROW_GROUP} far_rows={L2_PREFETCH_MAX_ROWS}")


def lower_gemm(k, name: str, features: str) -> str:
    own = getattr(k, "lower", None)      # (gemm_dot.DotGemm, gemm_cout.CoutGemm, phases.PhaseCopy)
    if own is not None:
        return own(name, features)
    if isinstance(k, TapsGemm):
        return ir_taps(features, k.dtype, name, k.kc, k.a_inplace, k.rows, k.pack_b)
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
    """ctypes ``gemm(m, k, n, A, lda, Bp, C, ldc)`` (callconv.HEAD["gemm"]): the compiled kernel's own
    function, one object per process (pool.share knows a function by identity)."""
    pointer(dtype)
    return _compiled[dtype].fn


@functools.lru_cache(maxsize=64)       # (a plan and a caller ask per site: str(dtype) is slow)
def panel_width(dtype) -> int:
    from .codegen import codegen

    w, nv, _ = shape(codegen().features, str(np.dtype(dtype)))
    return w * nv


B_IN_CACHE = 1 << 20        # bytes of a matmul's B below which its kernel works in row blocks (planning.kernel_ir)
EPI_PANELS = 4               # panels per column chunk a packed Dense kernel's epilogue follows (``lower_matmul_packed``)


def lower_matmul_packed(k, name: str, features: str) -> str:
    """A FUSED_MATMUL by a packed weight (kir.MatmulEpilogue with ``packed``), over the output columns
    [j0, j1) (j0 a multiple of NR: two threads share a product by columns, callconv._split_caller): per
    row block, the packed product of a chunk of EPI_PANELS panels through its pointer, then the epilogue
    over that chunk while it is in cache, inline (``_chunk_epilogue``).

    The epilogue ran as a pass of its own over the whole output after the product, and there the output
    had left the cache: the product streams the weight through it (GPT-2 small's 768 x 3072 at 64 rows:
    9.4 MB of weight against 786 KB of output). Measured (Intel Xeon, 12 such products with a bias in
    turn, weights from memory, medians of 25, ms, msvm / onnxruntime's MatMul + Add): one core 32.1 /
    32.6, two cores 19.5 / 18.6, where the same products without a bias ran 31.4 / 17.6 (on two cores the
    pass ran on one thread while the other waited)."""
    t = TYPES.get(k.dtype)
    if t is None or k.ta or k.tb or k.batch != 1:
        raise Unsupported("a packed product of a transposed or batched A")
    extra = [i for i, kind in enumerate(k.epilogue.kinds) if i > 0] if k.epilogue is not None else []
    params = [f"void (i64, i64, i64, {t}*, i64, {t}*, {t}*, i64)* %gemm", f"{t}* %A", f"{t}* %B", f"{t}* %C"]
    params += epilogue_params(k, extra, t) + ["i64 %j0", "i64 %j1"]
    generic = k.m is None           # (L2: one kernel for every product of its class: m, k, n arguments)
    if generic:
        params += ["i64 %dm", "i64 %dk", "i64 %dn"]
    w, nv, _ = shape(features, k.dtype)
    nr = w * nv
    ch = EPI_PANELS * nr
    b = Builder()
    intrinsics: set = set()
    b.raw(f"define void @{name}({', '.join(params)}) nounwind {{")
    b.raw("entry:")
    if generic:      # (row blocks as planning.kernel_ir picks them: 64 rows while B is in cache, else all)
        m, kk, n = "%dm", "%dk", "%dn"
        kn = b.op("mul i64 %dk, %dn")
        small = b.op(f"icmp ule i64 {b.op(f'mul i64 {kn}, {np.dtype(k.dtype).itemsize}')}, {B_IN_CACHE}")
        big = b.op(f"select i1 {b.op('icmp sgt i64 %dm, 1')}, i64 %dm, i64 1")
        bs = b.op(f"select i1 {small}, i64 64, i64 {big}")
        knr = b.op(f"mul i64 %dk, {nr}")
    else:
        m, kk, n, bs = k.m, k.k, k.n, k.block
        knr = kk * nr
    b.raw("  br label %rloop")
    b.raw("rloop:")
    b.raw("  %r0 = phi i64 [ 0, %entry ], [ %r0n, %jdone ]")
    b.raw(f"  %rc = icmp slt i64 %r0, {m}")
    b.raw("  br i1 %rc, label %rbody, label %done")
    b.raw("rbody:")
    rem = b.op(f"sub i64 {m}, %r0")
    lt = b.op(f"icmp slt i64 {rem}, {bs}")
    b.raw(f"  %rows = select i1 {lt}, i64 {rem}, i64 {bs}")
    b.raw(f"  %ablk = getelementptr {t}, {t}* %A, i64 {b.op(f'mul i64 %r0, {kk}')}")
    b.raw(f"  %cblk = getelementptr {t}, {t}* %C, i64 {b.op(f'mul i64 %r0, {n}')}")
    b.raw("  br label %jloop")
    b.raw("jloop:")
    b.raw("  %jc = phi i64 [ %j0, %rbody ], [ %jcn, %jnext ]")
    b.raw("  %jin = icmp slt i64 %jc, %j1")
    b.raw("  br i1 %jin, label %jbody, label %jdone")
    b.raw("jbody:")
    left = b.op("sub i64 %j1, %jc")
    few = b.op(f"icmp slt i64 {left}, {ch}")
    b.raw(f"  %wd = select i1 {few}, i64 {left}, i64 {ch}")
    boff = b.op(f"mul i64 {b.op(f'udiv i64 %jc, {nr}')}, {knr}")       # (jc is a multiple of NR)
    bj = b.op(f"getelementptr {t}, {t}* %B, i64 {boff}")
    b.raw(f"  %cj = getelementptr {t}, {t}* %cblk, i64 %jc")
    b.raw(f"  call void %gemm(i64 %rows, i64 {kk}, i64 %wd, {t}* %ablk, i64 {kk}, {t}* {bj}, {t}* %cj, i64 {n})")
    if k.epilogue is not None:           # (it leaves to %jnext)
        _chunk_epilogue(b, k, extra, t, w, n, intrinsics)
    else:
        b.raw("  br label %jnext")
    b.raw("jnext:")
    b.raw(f"  %jcn = add i64 %jc, {ch}")
    b.raw("  br label %jloop")
    b.raw("jdone:")
    b.raw(f"  %r0n = add i64 %r0, {bs}")
    b.raw("  br label %rloop")
    b.raw("done:")
    b.raw("  ret void")
    b.raw("}")
    sfx = f"v{w}f{32 if t == 'float' else 64}"
    vt = f"<{w} x {t}>"
    decl = [f"declare {vt} @llvm.masked.load.{sfx}.p0{sfx}({vt}*, i32, <{w} x i1>, {vt})",
            f"declare void @llvm.masked.store.{sfx}.p0{sfx}({vt}, {vt}*, i32, <{w} x i1>)"]
    return "\n".join(sorted(intrinsics | set(decl))) + "\n\n" + "\n".join(b.lines) + "\n"


def _chunk_epilogue(b, k, extra, t, w, n, intrinsics: set) -> None:
    """``lower_matmul_packed``'s epilogue over its chunk: rows [0, %rows) of the row block (global row
    %r0 + i), columns [%jc, %jc + %wd) of C, in place, w lanes at a time and a masked last vector, each
    extra tensor input read at its row (``%xs0_i`` apart: 0 for a bias, broadcast along the rows) and
    column (one value a row where it is broadcast along the row: its bcast's third flag), each scalar
    input (a double) as the kernel's type. The same program, by ``lower.emit_program``, as the
    elementwise epilogue it replaces, so the same values."""
    vt = f"<{w} x {t}>"
    sfx = f"v{w}f{32 if t == 'float' else 64}"
    mload, mstore = f"@llvm.masked.load.{sfx}.p0{sfx}", f"@llvm.masked.store.{sfx}.p0{sfx}"
    iota = "<" + ", ".join(f"i64 {i}" for i in range(w)) + ">"
    kinds, bcast = k.epilogue.kinds, k.epilogue.bcast
    scal = {i: (b.op(f"fptrunc double %xc{i} to float") if t == "float" else f"%xc{i}")
            for i in extra if kinds[i] != "t"}
    b.raw("  br label %eloop")
    b.raw("eloop:")
    b.raw("  %ei = phi i64 [ 0, %jbody ], [ %ein, %evdone ]")
    b.raw("  %eic = icmp slt i64 %ei, %rows")
    b.raw("  br i1 %eic, label %erow, label %jnext")
    b.raw("erow:")
    gi = b.op("add i64 %r0, %ei")
    b.raw(f"  %crow = getelementptr {t}, {t}* %cj, i64 {b.op(f'mul i64 %ei, {n}')}")
    for i in extra:
        if kinds[i] != "t":
            continue
        b.raw(f"  %xr{i} = getelementptr {t}, {t}* %x{i}, i64 {b.op(f'mul i64 {gi}, %xs0_{i}')}")
        if not bcast[i][2]:
            b.raw(f"  %xj{i} = getelementptr {t}, {t}* %xr{i}, i64 %jc")
    b.raw("  br label %evloop")
    b.raw("evloop:")
    b.raw("  %ej = phi i64 [ 0, %erow ], [ %ejn, %evbody ]")
    b.raw(f"  %ejw = add i64 %ej, {w}")
    b.raw("  %ejf = icmp sle i64 %ejw, %wd")
    b.raw("  br i1 %ejf, label %evbody, label %evtail")
    for label, masked in (("evbody", False), ("evtail", True)):
        b.raw(f"{label}:")
        mask = None
        if masked:
            b.raw("  %ejl = icmp slt i64 %ej, %wd")
            b.raw("  br i1 %ejl, label %evtailm, label %evdone")
            b.raw("evtailm:")
            lim = b.op("sub i64 %wd, %ej")
            ins = b.op(f"insertelement <{w} x i64> undef, i64 {lim}, i32 0")
            spl = b.op(f"shufflevector <{w} x i64> {ins}, <{w} x i64> undef, <{w} x i32> zeroinitializer")
            mask = b.op(f"icmp slt <{w} x i64> {iota}, {spl}")

        def vload(ptr, mask=mask):
            pv = b.op(f"bitcast {t}* {ptr} to {vt}*")
            if mask is None:
                return b.op(f"load {vt}, {vt}* {pv}, align 4")
            return b.op(f"call {vt} {mload}({vt}* {pv}, i32 4, <{w} x i1> {mask}, {vt} zeroinitializer)")

        v = Vals(b, t, w)
        cp = b.op(f"getelementptr {t}, {t}* %crow, i64 %ej")
        vals = {0: vload(cp)}
        for i in extra:
            if kinds[i] != "t":
                one = b.op(f"insertelement {vt} undef, {t} {scal[i]}, i32 0")
                vals[i] = _scalar(b.op(f"shufflevector {vt} {one}, {vt} undef, <{w} x i32> zeroinitializer"))
            elif bcast[i][2]:
                one = b.op(f"insertelement {vt} undef, {t} {b.op(f'load {t}, {t}* %xr{i}')}, i32 0")
                vals[i] = b.op(f"shufflevector {vt} {one}, {vt} undef, <{w} x i32> zeroinitializer")
            else:
                vals[i] = vload(b.op(f"getelementptr {t}, {t}* %xj{i}, i64 %ej"))
        r = emit_program(v, k.epilogue.program, [vals.get(i) for i in range(len(kinds))])
        intrinsics |= v.intrinsics
        pv = b.op(f"bitcast {t}* {cp} to {vt}*")
        if mask is None:
            b.raw(f"  store {vt} {r}, {vt}* {pv}, align 4")
            b.raw(f"  %ejn = add i64 %ej, {w}")
            b.raw("  br label %evloop")
        else:
            b.raw(f"  call void {mstore}({vt} {r}, {vt}* {pv}, i32 4, <{w} x i1> {mask})")
            b.raw("  br label %evdone")
    b.raw("evdone:")
    b.raw("  %ein = add i64 %ei, 1")
    b.raw("  br label %eloop")


# ---------------------------------------------------------------- convolutions: B read in place, channel by channel

TAPS_NAME = "msvm_gemm_taps"
TAPS_KC = 256               # k steps (channels x taps) per block
TAPS_UNROLL = 2             # channels a trip of a one-tap tile's loop (``_ct_tile_unrolled``)
TAPS_VERSION = 14           # (in the kernel text, so the cache key: bump it when ir_taps changes)


def _ct_tiles(L, name, t, w, nv, mr, vt, fma, mstore, mload, iota, a_inplace, one_tap, full):
    """The register tiles @{name}_tile{r} of ``ir_taps``: C[r x cols] (+)= sum over kc channels c
    and the taps t of A[., (c, t)] * src[c * ldb + taps[t] + .]. A: packed ([k][MR], k = c * ntaps + t)
    or, ``a_inplace``, the weight's rows as they lie (A[i * lda + k]). ``one_tap``: ntaps is 1
    (taps[0] added once; no tap loop: ``_ct_tile_unrolled``). ``full``: @{name}_tile{r}f, for whole
    panels (``_tile_head``)."""
    nr = w * nv
    for r in range(1, mr + 1):
        if one_tap:
            _ct_tile_unrolled(L, name, t, w, nv, mr, r, vt, fma, mstore, mload, iota, a_inplace, full)
            continue
        _ct_define(L, name, t, w, nv, r, vt, mload, iota, full)
        L("  %t0p = getelementptr i64, i64* %taps, i64 0")
        L("  %t0 = load i64, i64* %t0p")
        L("  %tlp = getelementptr i64, i64* %taps, i64 %ntaps")
        L("  %tlq = getelementptr i64, i64* %tlp, i64 -1")
        L("  %tl = load i64, i64* %tlq")
        L("  %kz = icmp sle i64 %kc, 0")
        if a_inplace and TAPS_GROUPS:
            _row_groups_start(L, t, r)
        L("  br i1 %kz, label %store, label %cloop")
        L("cloop:")
        L("  %ch = phi i64 [ 0, %pre ], [ %chn, %cend ]")
        _phis(L, vt, r, nv, "acc", [("init", "pre"), ("nacc", "cend")])
        if a_inplace and TAPS_GROUPS:           # (the channel's first tap: A's k index ch * ntaps)
            _row_groups_phi(L, t, r, "agc", [("ags", "pre"), ("agn", "cend")])
        L("  %boc = mul i64 %ch, %ldb")
        L("  %aoc = mul i64 %ch, %ntaps")
        # this channel's rows one panel on (the first and the last tap's windows): the driver reaches
        # them after every row tile of this panel; rows PREFETCH_ROWS channels ahead in this panel
        # measured 0.55-1.05x that (a k block of a few channels ends before them)
        L("  %pfc = mul i64 %ch, %ldb")
        L(f"  %pfr = add i64 %pfc, {w * nv}")
        for tag, tap in (("f", "%t0"), ("l", "%tl")):
            L(f"  %pf{tag} = add i64 %pfr, {tap}")
            for v in range(nv):
                L(f"  %pf{tag}{v} = add i64 %pf{tag}, {v * w}")
                L(f"  %pfp{tag}{v} = getelementptr {t}, {t}* %b, i64 %pf{tag}{v}")
                L(f"  %pfq{tag}{v} = bitcast {t}* %pfp{tag}{v} to i8*")
                L(f"  call void @llvm.prefetch.p0i8(i8* %pfq{tag}{v}, i32 0, i32 3, i32 1)")
        L("  br label %tbody")
        L("tbody:")
        L("  %tp = phi i64 [ 0, %cloop ], [ %tn, %tbody ]")
        _phis(L, vt, r, nv, "tacc", [("acc", "cloop"), ("nacc", "tbody")])
        if a_inplace and TAPS_GROUPS:
            _row_groups_phi(L, t, r, "ag", [("agc", "cloop"), ("agn", "tbody")])
        L("  %tofp = getelementptr i64, i64* %taps, i64 %tp")
        L("  %tof = load i64, i64* %tofp")
        L("  %bo = add i64 %boc, %tof")
        for v in range(nv):
            L(f"  %bo{v} = add i64 %bo, {v * w}")
            L(f"  %bp{v} = getelementptr {t}, {t}* %b, i64 %bo{v}")
            L(f"  %bv{v}p = bitcast {t}* %bp{v} to {vt}*")
            L(f"  %bv{v} = call {vt} {mload}({vt}* %bv{v}p, i32 4, <{w} x i1> %mask{v}, {vt} zeroinitializer)")
        L("  %p = add i64 %aoc, %tp")
        if A_PREFETCH:        # (the weights stream from memory: see the A_PREFETCH measurements)
            _a_prefetch(L, t, mr, r, a_inplace, "%p")
        if not a_inplace:
            L(f"  %pm = mul i64 %p, {mr}")
        if a_inplace and TAPS_GROUPS:
            _row_groups_rows(L, t, r)
        for i in range(r):
            if a_inplace and TAPS_GROUPS:
                _fma_row(L, t, vt, fma, w, nv, i, _row_at(i), "0", "tacc")
                continue
            if a_inplace:
                L(f"  %ar{i} = mul i64 %lda, {i}")
                L(f"  %ao{i} = add i64 %ar{i}, %p")
            else:
                L(f"  %ao{i} = add i64 %pm, {i}")
            _fma_row(L, t, vt, fma, w, nv, i, "%a", f"%ao{i}", "tacc")
        if a_inplace and TAPS_GROUPS:
            _row_groups_next(L, t, r, 1)
        L("  %tn = add i64 %tp, 1")
        L("  %tm = icmp slt i64 %tn, %ntaps")
        L("  br i1 %tm, label %tbody, label %cend")
        L("cend:")
        L("  %chn = add i64 %ch, 1")
        L("  %chm = icmp slt i64 %chn, %kc")
        L("  br i1 %chm, label %cloop, label %store")
        L("store:")
        _phis(L, vt, r, nv, "f", [("init", "pre"), ("nacc", "cend")])
        _tile_epilogue(L, t, w, nv, r, vt, mload)
        _tile_store(L, w, nv, r, vt, mstore, nr)


def _ct_tile_unrolled(L, name, t, w, nv, mr, r, vt, fma, mstore, mload, iota, a_inplace, full):
    """``_ct_tiles``' tile of r rows for one tap (a 1x1 convolution), its channel loop TAPS_UNROLL
    channels a trip, then the channels left one at a time: the same products in the same order as one
    a trip, so the same bits. A in place is read through the row groups' pointers (``_row_groups_start``),
    stepped once a trip (one step a trip, LLVM kept the 12 A rows' addresses and the A prefetch's index in
    13 integer instructions beside the step's 24 FMAs). Measured (Intel Xeon, AVX-512, one core, the
    kernel alone, A in place, medians of 300 calls, GFLOP/s one -> two channels a trip): m x ci x pixels
    64x256x784 121 -> 141, 64x256x3136 107 -> 119, 256x64x3136 112 -> 125, 1024x256x196 126 -> 130; in the
    models (thread CPU time, medians of 25 forwards, alternating processes, three rounds) MobileNet v2 at
    224 8.48-8.67 -> 8.16-8.46 ms, ResNet-50 65.6-65.8 -> 65.5-65.7 ms (there its 1x1 layers are bound by
    their memory traffic, not the loop)."""
    _ct_define(L, name, t, w, nv, r, vt, mload, iota, full)
    L("  %t0 = load i64, i64* %taps")
    _k_loop(L, t, vt, r, nv, "%kc", TAPS_UNROLL, a_inplace and TAPS_GROUPS, "f",
            lambda p, src, dst, sfx, g: _ct_step(L, t, w, nv, mr, r, vt, fma, mload, a_inplace, p, src, dst, sfx, g))
    _tile_epilogue(L, t, w, nv, r, vt, mload)
    _tile_store(L, w, nv, r, vt, mstore, w * nv)


def _ct_define(L, name, t, w, nv, r, vt, mload, iota, full) -> None:
    """A taps tile's definition line and its head (``_tile_head``), leaving in block %pre."""
    L(f"define internal void @{name}_tile{r}{'f' if full else ''}(i64 %kc, {t}* noalias %a, i64 %lda, "
      f"{t}* noalias %b, i64 %ldb, "
      f"i64* noalias %taps, i64 %ntaps, {t}* noalias %c, i64 %ldc, i64 %cols, i1 %first, i1 %last, i1 %hasb, "
      f"{t}* %scale, {t}* %bias, i1 %hasr, {t}* %res, i64 %ldr, {t} %lo, {t} %hi) nounwind alwaysinline {{")
    L("entry:")
    _tile_head(L, t, w, nv, r, vt, mload, iota, prefetch_c=True, full=full, prefetch_r=RES_PREFETCH)


def _ct_step(L, t, w, nv, mr, r, vt, fma, mload, a_inplace, ch, src, dst, sfx, grouped):
    """One channel ``ch`` of a one-tap tile (``_ct_tile_unrolled``): the same row one panel on
    prefetched, the A prefetch, B's vectors (masked: %mask) and each row's broadcast times them, from
    %{src}i_v into %{dst}i_v (names suffixed ``sfx``). ``grouped``: A's rows at the group pointers plus
    this offset, else at %a + i * lda + ch (in place) or packed."""
    L(f"  %boc{sfx} = mul i64 {ch}, %ldb")
    L(f"  %bo{sfx} = add i64 %boc{sfx}, %t0")
    L(f"  %pfr{sfx} = add i64 %bo{sfx}, {w * nv}")
    for v in range(nv):
        L(f"  %pfb{v}{sfx} = add i64 %pfr{sfx}, {v * w}")
        L(f"  %pfp{v}{sfx} = getelementptr {t}, {t}* %b, i64 %pfb{v}{sfx}")
        L(f"  %pfq{v}{sfx} = bitcast {t}* %pfp{v}{sfx} to i8*")
        L(f"  call void @llvm.prefetch.p0i8(i8* %pfq{v}{sfx}, i32 0, i32 3, i32 1)")
    for v in range(nv):
        L(f"  %bo{v}{sfx} = add i64 %bo{sfx}, {v * w}")
        L(f"  %bp{v}{sfx} = getelementptr {t}, {t}* %b, i64 %bo{v}{sfx}")
        L(f"  %bv{v}p{sfx} = bitcast {t}* %bp{v}{sfx} to {vt}*")
        L(f"  %bv{v}{sfx} = call {vt} {mload}({vt}* %bv{v}p{sfx}, i32 4, <{w} x i1> %mask{v}, {vt} zeroinitializer)")
    if A_PREFETCH:
        _a_prefetch(L, t, mr, r, a_inplace, ch, sfx)
    for i in range(r):
        if grouped is not None:
            _fma_row(L, t, vt, fma, w, nv, i, _row_at(i), str(grouped), src, dst, sfx)
            continue
        if a_inplace:
            L(f"  %ar{i}{sfx} = mul i64 %lda, {i}")
            L(f"  %ao{i}{sfx} = add i64 %ar{i}{sfx}, {ch}")
        else:
            L(f"  %am{i}{sfx} = mul i64 {ch}, {mr}")
            L(f"  %ao{i}{sfx} = add i64 %am{i}{sfx}, {i}")
        _fma_row(L, t, vt, fma, w, nv, i, "%a", f"%ao{i}{sfx}", src, dst, sfx)


def _a_prefetch(L, t, mr, r, a_inplace, p, sfx="") -> None:
    """The taps tiles' prefetch of A, A_PREFETCH k steps ahead of step ``p``: in place, one of the r rows a
    step, in turn (each row needs a line every LINE / itemsize steps); packed, the step's MR values."""
    if a_inplace:
        per_line = LINE // (4 if t == "float" else 8)
        if per_line >= r:     # (row p % 16, past the tile's r rows harmless: an AND, not a division)
            L(f"  %pfi{sfx} = and i64 {p}, {per_line - 1}")
        else:
            L(f"  %pfi{sfx} = urem i64 {p}, {r}")
        L(f"  %pfo0{sfx} = mul i64 %pfi{sfx}, %lda")
        L(f"  %pfo1{sfx} = add i64 %pfo0{sfx}, {p}")
        L(f"  %pfa{sfx} = add i64 %pfo1{sfx}, {A_PREFETCH}")
    else:
        L(f"  %pfa0{sfx} = add i64 {p}, {A_PREFETCH}")
        L(f"  %pfa{sfx} = mul i64 %pfa0{sfx}, {mr}")
    L(f"  %pfap{sfx} = getelementptr {t}, {t}* %a, i64 %pfa{sfx}")
    L(f"  %pfac{sfx} = bitcast {t}* %pfap{sfx} to i8*")
    L(f"  call void @llvm.prefetch.p0i8(i8* %pfac{sfx}, i32 0, i32 3, i32 1)")


def ir_taps(features: str, dtype: str = "float32", name: str = TAPS_NAME, kc: int = TAPS_KC,
            a_inplace: bool = False, rows: int = 0, pack_b: bool = False) -> str:
    """The LLVM IR of ``name``, a convolution's product with B read where it lies (no packing):

        taps(m, ci, ntaps, taps*, q, A*, lda, src*, row, C*, ldc, j0, j1, hasb, scale*, bias*, res*, ldr, lo, hi)
        C[i, j] = epi(sum_c sum_t A[i, c * ntaps + t] * src[c * row + taps[t] + j])  (i < m, j0 <= j < j1)
        epi(v) = min(max(v [* scale[i] + bias[i]] [+ res[i * ldr + j]], lo), hi)  (``_tile_epilogue``; res: null = none)

    A is the weight [m, ci * ntaps] in the Parameter's own (ci, kh, kw) order (the batch norm is
    the epilogue's scale and bias, not folded into a copy): ``a_inplace``, its rows as they lie,
    lda apart; else packed in blocks of MR rows (``pack_rows``: [ceil(m / MR)][ci * ntaps][MR]).
    src holds ci rows, ``row`` apart, of an image (an NCHW plane for a 1x1 convolution, the padded
    image's rows for a k x k one, its stride phases side by side for a strided one) and
    ``taps[t]`` is where tap t's window starts in them, so B[(c, t), j] is src[c * row + taps[t] + j].
    The k loop is channel-major (each channel's taps in turn: they read neighbouring windows of its
    rows, and A's row is read front to back), in blocks of ceil(kc / ntaps) channels accumulating
    onto the tile's C; a tile family for ntaps = 1 has no tap loop. The same 12 x 32 register tiles
    as the packed Dense product run over panels of NR output columns (j0 a multiple of NR; columns
    past q are neither read nor written). Each tile prefetches its A A_PREFETCH k steps ahead (in
    place: one of its rows a step, in turn) and, one panel on, its source rows (the first and last
    taps' windows) and, at its start, the C lines of its rows (to write)."""
    t = TYPES[dtype]
    w, nv, mr = shape(features, dtype)
    mr = rows or mr
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
    for full in (False, True):
        _ct_tiles(L, name + "_1", t, w, nv, mr, vt, fma, mstore, mload, iota, a_inplace, True, full)
        _ct_tiles(L, name + "_n", t, w, nv, mr, vt, fma, mstore, mload, iota, a_inplace, False, full)
    if HALF_PANEL and nv > 1:    # (a last panel of at most w columns: one vector's tiles)
        _ct_tiles(L, name + "_1h", t, w, 1, mr, vt, fma, mstore, mload, iota, a_inplace, True, False)
        _ct_tiles(L, name + "_nh", t, w, 1, mr, vt, fma, mstore, mload, iota, a_inplace, False, False)
    a_block = A_BLOCK_BYTES // np.dtype(dtype).itemsize
    L(f"define void @{name}(i64 %m, i64 %ci, i64 %ntaps, i64* noalias %taps, i64 %q, {t}* noalias %A, i64 %lda, "
      f"{t}* noalias %S, i64 %row, {t}* noalias %C, i64 %ldc, i64 %j0, i64 %j1, i64 %hasb0, {t}* %scale, {t}* %bias, "
      f"{t}* %res, i64 %ldr, {t} %lo, {t} %hi) nounwind {{")
    L("entry:")
    L("  %hasb = icmp ne i64 %hasb0, 0")
    L(f"  %hasr = icmp ne {t}* %res, null")
    L("  %one = icmp eq i64 %ntaps, 1")
    L(f"  %kcq = add i64 {kc - 1}, %ntaps")
    L("  %kch = udiv i64 %kcq, %ntaps")             # channels per k block: ceil(kc / ntaps)
    if pack_b:       # a k block's panel of B, [(c, t)][NR], and the taps into it (t * NR)
        L("  %pbr = mul i64 %kch, %ntaps")
        L(f"  %pbn = mul i64 %pbr, {nv}")
        L(f"  %pbv = alloca {vt}, i64 %pbn, align 64")
        L(f"  %pb = bitcast {vt}* %pbv to {t}*")
        L("  %ptaps = alloca i64, i64 %ntaps, align 8")
        L(f"  %pldb = mul i64 %ntaps, {nr}")
        L("  br label %ptl")
        L("ptl:")
        L("  %pti = phi i64 [ 0, %entry ], [ %ptn, %ptl ]")
        L(f"  %ptv = mul i64 %pti, {nr}")
        L("  %ptp = getelementptr i64, i64* %ptaps, i64 %pti")
        L("  store i64 %ptv, i64* %ptp")
        L("  %ptn = add i64 %pti, 1")
        L("  %ptm = icmp slt i64 %ptn, %ntaps")
        L("  br i1 %ptm, label %ptl, label %ptd")
        L("ptd:")
    _row_blocks(L, "%lda", a_block, mr, "ptd" if pack_b else "entry")
    L("ploop:")
    L("  %j = phi i64 [ %j0, %ibody ], [ %jn, %kdone ]")
    L("  %pc = icmp slt i64 %j, %j1")
    L("  br i1 %pc, label %pbody, label %pdone")
    L("pbody:")
    L("  %left = sub i64 %q, %j")
    L(f"  %pfull = icmp sge i64 %left, {nr}")
    half = HALF_PANEL and nv > 1
    if half:
        L(f"  %phalf = icmp sle i64 %left, {w}")
    L(f"  %cj = getelementptr {t}, {t}* %C, i64 %j")
    L(f"  %sj = getelementptr {t}, {t}* %S, i64 %j")
    L(f"  %rj = getelementptr {t}, {t}* %res, i64 %j")
    L("  br label %kloop")
    L("kloop:")
    L("  %k0 = phi i64 [ 0, %pbody ], [ %k0n, %rdone ]")
    L("  %kin = icmp slt i64 %k0, %ci")
    L("  br i1 %kin, label %kbody, label %kdone")
    L("kbody:")
    L("  %first = icmp eq i64 %k0, 0")
    L("  %kleft = sub i64 %ci, %k0")
    L("  %kcs = icmp slt i64 %kleft, %kch")
    L("  %kcc = select i1 %kcs, i64 %kleft, i64 %kch")
    L("  %kend = add i64 %k0, %kcc")
    L("  %last = icmp sge i64 %kend, %ci")
    L("  %ak1 = mul i64 %k0, %ntaps")
    L(f"  %ak0 = mul i64 %ak1, {1 if a_inplace else mr}")
    L(f"  %ak = getelementptr {t}, {t}* %A, i64 %ak0")
    L("  %bk0 = mul i64 %k0, %row")
    L(f"  %bk = getelementptr {t}, {t}* %sj, i64 %bk0")
    if pack_b:
        _pack_panel(L, t, w, nv, nr, vt, mload, iota)
        bk, ldb, taps = "%pb", "%pldb", "%ptaps"
    else:
        L("  br label %rloop")
        bk, ldb, taps = "%bk", "%row", "%taps"
    L("rloop:")
    L(f"  %i = phi i64 [ %i0, {'%packed' if pack_b else '%kbody'} ], [ %in, %rnext ]")
    L("  %rc = icmp slt i64 %i, %iend")
    L("  br i1 %rc, label %rbody, label %rdone")
    L("rbody:")
    L("  %rem = sub i64 %iend, %i")
    L(f"  %few = icmp slt i64 %rem, {mr}")
    L(f"  %rows = select i1 %few, i64 %rem, i64 {mr}")
    L("  %aoff = mul i64 %i, %lda")          # (row block i / MR starts at i * lda: MR rows of lda)
    L(f"  %ai = getelementptr {t}, {t}* %ak, i64 %aoff")
    L("  %coff = mul i64 %i, %ldc")
    L(f"  %ci_ = getelementptr {t}, {t}* %cj, i64 %coff")
    L(f"  %bi_ = getelementptr {t}, {t}* %bias, i64 %i")
    L(f"  %sc_ = getelementptr {t}, {t}* %scale, i64 %i")
    L("  %roff = mul i64 %i, %ldr")
    L(f"  %ri_ = getelementptr {t}, {t}* %rj, i64 %roff")
    L("  br i1 %one, label %one_, label %many_")
    for fam in ("1", "n"):
        L(f"{'one_' if fam == '1' else 'many_'}:")
        cases = " ".join(f"i64 {r}, label %t{fam}{r}" for r in range(1, mr))
        L(f"  switch i64 %rows, label %t{fam}{mr} [ {cases} ]")
        for r in range(1, mr + 1):
            # a full panel runs the tile whose masks are constant, so its loads are plain (AVX2 keeps
            # masks in vector registers: beside 12 accumulators a masked load's mask was spilled and
            # rebuilt every k step; the product ran at 0.6x OpenBLAS on an AMD Zen 3)
            L(f"t{fam}{r}:")
            L(f"  br i1 %pfull, label %t{fam}{r}f, label %t{fam}{r}{'p' if half else 'm'}")
            if half:
                L(f"t{fam}{r}p:")
                L(f"  br i1 %phalf, label %t{fam}{r}h, label %t{fam}{r}m")
            kinds = [("f", f"{fam}_tile{r}f"), ("m", f"{fam}_tile{r}")] + ([("h", f"{fam}h_tile{r}")] if half else [])
            for sfx, fn in kinds:
                L(f"t{fam}{r}{sfx}:")
                L(f"  call void @{name}_{fn}(i64 %kcc, {t}* %ai, i64 %lda, {t}* {bk}, i64 {ldb}, i64* {taps}, "
                  f"i64 %ntaps, {t}* %ci_, i64 %ldc, i64 %left, i1 %first, i1 %last, i1 %hasb, {t}* %sc_, "
                  f"{t}* %bi_, i1 %hasr, {t}* %ri_, i64 %ldr, {t} %lo, {t} %hi)")
                L("  br label %rnext")
    L("rnext:")
    L(f"  %in = add i64 %i, {mr}")
    L("  br label %rloop")
    L("rdone:")
    L("  %k0n = add i64 %k0, %kcc")
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


def _pack_panel(L, t, w, nv, nr, vt, mload, iota):
    """``ir_taps`` with ``pack_b``: the k block's kcc channels x ntaps taps of this panel's columns
    (lanes past %left zero) copied from the source rows at %bk into %pb, [(c, t)][NR], so that every
    row tile reads one contiguous panel; then to %rloop (from block %packed)."""
    L(f"  %pkb = insertelement <{w} x i64> undef, i64 %left, i32 0")
    L(f"  %pkv = shufflevector <{w} x i64> %pkb, <{w} x i64> undef, <{w} x i32> zeroinitializer")
    for v in range(nv):
        L(f"  %pkl{v} = add <{w} x i64> {iota}, " + "<" + ", ".join([f"i64 {v * w}"] * w) + ">")
        L(f"  %pkm{v} = icmp slt <{w} x i64> %pkl{v}, %pkv")
    L("  br label %pkc")
    L("pkc:")
    L("  %pc_ = phi i64 [ 0, %kbody ], [ %pcn, %pkt ]")
    L("  %pso = mul i64 %pc_, %row")
    L("  %pdo = mul i64 %pc_, %ntaps")
    L("  br label %pkt0")
    L("pkt0:")
    L("  %pt = phi i64 [ 0, %pkc ], [ %ptn_, %pkt0e ]")
    L("  %pto = getelementptr i64, i64* %taps, i64 %pt")
    L("  %ptof = load i64, i64* %pto")
    L("  %psrc0 = add i64 %pso, %ptof")
    L(f"  %psrc = getelementptr {t}, {t}* %bk, i64 %psrc0")
    L("  %pdr = add i64 %pdo, %pt")
    L(f"  %pdst0 = mul i64 %pdr, {nr}")
    L(f"  %pdst = getelementptr {t}, {t}* %pb, i64 %pdst0")
    L(f"  %pnx = getelementptr {t}, {t}* %psrc, i64 {nr}")      # (the same rows of the next panel)
    L("  %pnq = bitcast " + f"{t}* %pnx to i8*")
    L("  call void @llvm.prefetch.p0i8(i8* %pnq, i32 0, i32 3, i32 1)")
    L("  br i1 %pfull, label %pkf, label %pkm")
    for lab, masked in (("pkf", False), ("pkm", True)):
        L(f"{lab}:")
        for v in range(nv):
            L(f"  %{lab}s{v} = getelementptr {t}, {t}* %psrc, i64 {v * w}")
            L(f"  %{lab}p{v} = bitcast {t}* %{lab}s{v} to {vt}*")
            if masked:
                L(f"  %{lab}v{v} = call {vt} {mload}({vt}* %{lab}p{v}, i32 4, <{w} x i1> %pkm{v}, {vt} zeroinitializer)")
            else:
                L(f"  %{lab}v{v} = load {vt}, {vt}* %{lab}p{v}, align 4")
            L(f"  %{lab}d{v} = getelementptr {t}, {t}* %pdst, i64 {v * w}")
            L(f"  %{lab}q{v} = bitcast {t}* %{lab}d{v} to {vt}*")
            L(f"  store {vt} %{lab}v{v}, {vt}* %{lab}q{v}, align 32")
        L("  br label %pkt0e")
    L("pkt0e:")
    L("  %ptn_ = add i64 %pt, 1")
    L("  %ptm_ = icmp slt i64 %ptn_, %ntaps")
    L("  br i1 %ptm_, label %pkt0, label %pkt")
    L("pkt:")
    L("  %pcn = add i64 %pc_, 1")
    L("  %pcm = icmp slt i64 %pcn, %kcc")
    L("  br i1 %pcm, label %pkc, label %packed")
    L("packed:")
    L("  br label %rloop")


@dataclass(frozen=True)
class TapsGemm:
    """The kernel-cache entry of the convolutions' product (``ir_taps``; one per dtype and target)."""
    dtype: str
    kc: int = TAPS_KC
    a_inplace: bool = False
    rows: int = 0             # rows per register tile (0: gemm.shape's MR)
    pack_b: bool = False      # each k block of a panel copied before the row tiles read it

    kind = "gemm"
    opt_level = 3             # (also when a site asks at L2: it is the one shape-generic product)

    @property
    def name(self) -> str:
        return "gemm_taps_w" if self.a_inplace else "gemm_taps"

    def text(self) -> str:
        return (f"gemm_taps v{TAPS_VERSION} dtype={self.dtype} a_block={A_BLOCK_BYTES} kc={self.kc} "
                f"a_prefetch={A_PREFETCH} res_prefetch={RES_PREFETCH} half={HALF_PANEL} unroll={TAPS_UNROLL}"
                + (" a_inplace" + (" groups" if TAPS_GROUPS else "") if self.a_inplace else "")
                + (f" rows={self.rows}" if self.rows else "") + (" pack_b" if self.pack_b else ""))


TAPS_ARGS = ("i64", "i64", "i64", "ptr", "i64", "ptr", "i64", "ptr", "i64", "ptr", "i64", "i64", "i64",
             "i64", "ptr", "ptr", "ptr", "i64", "T", "T")


def taps_function(dtype: str, kc: int = TAPS_KC, a_inplace: bool = False, rows: int = 0, pack_b=None):
    """ctypes ``taps(m, ci, ntaps, taps, q, A, lda, src, row, C, ldc, j0, j1, hasb, scale, bias, res, ldr,
    lo, hi)`` (``ir_taps``), compiled (or loaded from the kernel cache) once per process."""
    from .build import kernel_function

    if pack_b is None:
        pack_b = packs_b()
    return kernel_function(TapsGemm(dtype, kc, a_inplace, rows, pack_b), "GEMM_TAPS", TAPS_ARGS)


def pack_rows(a: np.ndarray, mr: int) -> np.ndarray:
    """A [M, K] as ``ir_taps`` reads it: blocks of mr rows, [ceil(M/mr)][K][mr], zero-padded."""
    m, k = a.shape
    blocks = -(-m // mr)
    out = np.zeros((blocks * mr, k), dtype=a.dtype)
    out[:m] = a
    return np.ascontiguousarray(out.reshape(blocks, mr, k).transpose(0, 2, 1))


@functools.lru_cache(maxsize=64)       # (a plan and a caller ask per site: str(dtype) is slow)
def packs_b(features: str | None = None) -> bool:
    """Whether the taps product copies each k block of a panel before its row tiles read it
    (``ir_taps`` ``pack_b``): on targets without AVX-512. There a panel is 16 floats, one cache line
    per k step, and a k block's 256 source rows, a plane apart, fall into few sets of an 8-way L1
    (56x56 planes: 16 sets, 128 lines) and are evicted between row tiles. Measured (AMD EPYC Zen 3,
    one pinned core, taps / OpenBLAS, medians of 40 interleaved calls, A in place, m x k x n):
    128x512x784 0.60 -> 0.66, 256x1024x196 0.52 -> 0.57, 512x2048x49 0.54 -> 0.57, 2048x512x49
    0.62 -> 0.67, 1024^3 0.47 -> 0.55, 256x64x3136 0.67 -> 0.69, 64x256x3136 0.84 -> 0.80. On an AVX-512
    target (32-float panels, a 12-way L1) the same copy measured 0.83-1.0x on AMD Zen 5; on an Intel Xeon
    (Emerald Rapids, one core) the 1x1 products alone ran 1.04-1.23x faster with it at maps from 16x16 to
    64x64 (a plane's row stride there puts a k block in few L1 sets), but ResNet-50's forward not (CPU time,
    three alternating pairs of processes: 224 64.7-65.5 -> 64.8-68.0 ms, 256 86.5-89.1 -> 84.4-87.5): not there."""
    return not wide_tiles(features)


@functools.lru_cache(maxsize=64)       # (a plan and a caller ask per site: str(dtype) is slow)
def tile_rows(dtype) -> int:
    from .codegen import codegen

    return shape(codegen().features, str(np.dtype(dtype)))[2]


# ---------------------------------------------------------------- (issue 18) two threads on one packed product

SPLIT_MIN_FLOPS = 8e6       # 2*m*k*n from which two threads share a product (pool.share; docstring)
splits = [0]                # products split so far (tests read it: the split happened)


def threads(m: int, k: int, n: int, dtype) -> int:
    """How many threads share the product m x k by k x n: 2 where the cores allow it (callconv.cores:
    the affinity, MSVM_THREADS), from SPLIT_MIN_FLOPS, and where there are two panels to share."""
    from .callconv import cores

    if 2.0 * m * k * n < SPLIT_MIN_FLOPS or n <= panel_width(dtype):
        return 1
    return min(cores(), 2)


def run_split(fn, m, k, n, a, lda, bp, c, ldc, nr: int, isz: int) -> None:
    """``fn`` (the packed product) over the columns of C in pool.parts of whole panels, shared by this
    thread and the pool's (pool.share): each column is computed by one thread, with the same tiles
    in the same k order as in one call, so the result is the one-thread result bit for bit (the
    columns [j0, j1) are the product by the panels from j0 / NR: B and C offset, ldc unchanged)."""
    from .pool import parts, share

    splits[0] += 1
    share([[(fn, (m, k, j1 - j0, a, lda, bp + (j0 // nr) * k * nr * isz, c + j0 * isz, ldc))]
           for j0, j1 in parts(n, nr)])
