"""A convolution's product with vectors over output channels (issue 18: onnxruntime's NCHWc, without the layout).

The taps product (gemm.ir_taps) runs vectors over output pixels and leaves lanes idle wherever a map's
row is not a multiple of the vector (7x7: 49 of 64; a 3x3 convolution's padded grid adds two columns a
row), and reads the weight's rows in place, 12 broadcasts a k step from 12 rows far apart. Here the
roles turn round: the weight is packed once into panels of NR = 32 output channels, [ceil(O/NR)][K][NR]
(gemm.pack of W [O, K]: K in the weight's own (ci, kh, kw) order), and a register tile of R <= 12 output
pixels of one output row x NR channels (24 vectors) runs down K (a row's pixels in tiles of about equal
size, 14 = 7 + 7: a tile of 2 pixels' 4 accumulators left the FMA units idle, each waiting on the one
before; 3x3 on 14x14 256 210-214 -> 226-237 GFLOP/s, 3x3 stride 2 at 28 188-193 -> 210-211): per k
step two vector loads from the panel and R broadcasts of the image where it lies (the taps kernel's B:
src[c * row + taps[t] + g], g the pixel's column on the grid of the padded image or its stride phases),
so no lane is idle for any map or channel count that is a multiple of 32, and the tile reads the packed Dense product's way
(measured on ResNet-50's layer shapes, one Zen 5 core, the product alone, warm / caches flushed,
GFLOP/s, taps -> this: 7x7 3x3 512 184 -> 227 / 156 -> 171, 7x7 1x1 2048 -> 512 176 -> 227 / 143 ->
186, 14x14 1x1 1024 -> 256 179 -> 248 / 142 -> 215, 56x56 3x3 64 225 -> 260 / 188 -> 231).

The tile's 24 accumulators (R pixels x 32 channels) go through a stack buffer to ``{name}_st``, which
transposes each 16 x 16 block in registers (gemm_dot._transpose) into rows of one channel's R pixels
and applies the convolution's epilogue on them (* scale[c] + bias[c], + res, max lo, min hi: gemm's,
NaN kept as numpy does) before a masked store into the NCHW result: the output stays in msvm's layout
(no reorder nodes), at the price of a transpose per tile (~2% of a tile at K = 576, which is why
``conv.use_cout`` leaves K below COUT_MIN_K to the taps product).

    cout(o, ci, ntaps, taps*, Wp*, src*, row, ho, wo, wq, C*, P, j0, j1, hasb, scale*, bias*, res*, lo, hi)
    C[c * P + oh * wo + ow] = epi(sum_(ci, t) Wp[c][(ci, t)] * src[ci * row + taps[t] + oh * wq + ow])

for the panels j0 <= j < j1 (channels 32 j ..), every output row and pixel. Sums in k order with FMA:
results agree with the taps product and L1 to rounding.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from .gemm import clamp
from .gemm_dot import _transpose
from .lower import TYPES, vec_width

NAME = "msvm_gemm_cout"
ROWS = 12                   # pixels per register tile (12 x 2 vectors: 24 accumulators)
PREFETCH = 32               # elements ahead in the tile's channel row that each k step prefetches (0: none; ``_tile``)
STORE_PREFETCH = 32         # elements ahead in each channel's row of C (and of the residual) that the store prefetches
# channels ahead whose same pixels each k step prefetches, (k x k taps, one tap): a channel's plane is
# past the L1 stride prefetcher's 2 KB reach from 28x28 on. ResNet-50 on one core (Intel Xeon, alternating
# processes, medians of 15, ms), none / (1, 4) / (2, 8) / (3, 16): at 224 67.2 / 66.1 / 65.6 / 66.1; at 160
# 38.0 / - / 38.0 / -; MobileNet v2 at 224 8.0-8.1 / - / 7.9-8.0 / -
CHANNEL_PREFETCH = (2, 8)
VERSION = 6                 # (in the kernel text, so the cache key: bump it when ir_cout changes)
ROWS_NAME = "msvm_gemm_rows"
ROWS_VERSION = 1            # (the same for ir_rows)
ROWS_ARGS = ("i64", "ptr", "i64", "i64", "i64", "ptr", "i64", "i64", "i64", "ptr", "ptr", "ptr", "T", "T")
ARGS = ("i64", "i64", "i64", "ptr", "ptr", "ptr", "i64", "i64", "i64", "i64", "ptr", "i64", "i64", "i64",
        "i64", "ptr", "ptr", "ptr", "T", "T")


def _tile(L, name, t, w, r, vt, fma, one=False):
    """@{name}_t{r}(ci, ntaps, taps*, a*, row, wp*, buf*): r pixels (a[0 .. r) on the grid, each channel's
    rows ``row`` apart, tap t at taps[t]) x 2w channels (the panel wp, [K][2w]) over every (ci, t), the
    accumulators stored to buf as r rows of 2w. ``one``: @{name}_o{r}, for one tap (a 1x1 convolution:
    no tap loop, taps[0] added once)."""
    L(f"define internal void @{name}_{'o' if one else 't'}{r}(i64 %ci, i64 %ntaps, i64* noalias %taps, "
      f"{t}* noalias %a, i64 %row, {t}* noalias %wp, {t}* noalias %buf) nounwind alwaysinline {{")
    L("entry:")
    L("  %t0 = load i64, i64* %taps")
    if CHANNEL_PREFETCH:
        L(f"  %pfd = mul i64 %row, {CHANNEL_PREFETCH[one]}")
    L("  br label %cl")
    L("cl:")
    L("  %c = phi i64 [ 0, %entry ], [ %cn, %td ]")
    for i in range(r):
        for v in range(2):
            L(f"  %acc{i}_{v} = phi {vt} [ zeroinitializer, %entry ], [ %tacc{i}_{v}, %td ]")
    L("  %cc = icmp slt i64 %c, %ci")
    L("  br i1 %cc, label %cb, label %done")
    L("cb:")
    L("  %co = mul i64 %c, %row")
    L("  %kc = mul i64 %c, %ntaps")
    L("  br label %tl")
    L("tl:")
    if one:
        for i in range(r):
            for v in range(2):
                L(f"  %s{i}_{v} = phi {vt} [ %acc{i}_{v}, %cb ]")
        L("  %tp = add i64 0, 0")
        L("  %toff = add i64 %t0, 0")
    else:
        L("  %tp = phi i64 [ 0, %cb ], [ %tn, %tl ]")
        for i in range(r):
            for v in range(2):
                L(f"  %s{i}_{v} = phi {vt} [ %acc{i}_{v}, %cb ], [ %tacc{i}_{v}, %tl ]")
        L("  %tpp = getelementptr i64, i64* %taps, i64 %tp")
        L("  %toff = load i64, i64* %tpp")
    L("  %ao = add i64 %co, %toff")
    L(f"  %ap = getelementptr {t}, {t}* %a, i64 %ao")
    # the row's pixels PREFETCH on (the next tiles' lines of this channel row): one core, caches flushed
    # before each call as a forward leaves them, GFLOP/s without / with 24 / 32 / 48: the RGB stem 125-157 /
    # 166-171 / 177 / 157-174, 1x1 256 -> 64 at 56x56 92-95 / 183 / 192 / 183-193, 3x3 64 at 56x56 140-192 /
    # 197-199 / 213 / 197-207 (the taps product: 159, 155, 199)
    if PREFETCH:
        L(f"  %pfp = getelementptr {t}, {t}* %ap, i64 {PREFETCH}")
        L(f"  %pfc = bitcast {t}* %pfp to i8*")
        L("  call void @llvm.prefetch.p0i8(i8* %pfc, i32 0, i32 3, i32 1)")
    if CHANNEL_PREFETCH:     # (the same pixels some channels on: planes far apart, past the stride prefetcher's reach)
        L(f"  %pnp = getelementptr {t}, {t}* %ap, i64 %pfd")
        L(f"  %pnc = bitcast {t}* %pnp to i8*")
        L("  call void @llvm.prefetch.p0i8(i8* %pnc, i32 0, i32 3, i32 1)")
    L("  %k = add i64 %kc, %tp")
    L(f"  %wo = mul i64 %k, {2 * w}")
    for v in range(2):
        L(f"  %wo{v} = add i64 %wo, {v * w}")
        L(f"  %wq{v} = getelementptr {t}, {t}* %wp, i64 %wo{v}")
        L(f"  %wr{v} = bitcast {t}* %wq{v} to {vt}*")
        L(f"  %wv{v} = load {vt}, {vt}* %wr{v}, align 4")
    for i in range(r):
        L(f"  %x{i}p = getelementptr {t}, {t}* %ap, i64 {i}")
        L(f"  %x{i} = load {t}, {t}* %x{i}p")
        L(f"  %x{i}i = insertelement {vt} undef, {t} %x{i}, i32 0")
        L(f"  %x{i}v = shufflevector {vt} %x{i}i, {vt} undef, <{w} x i32> zeroinitializer")
        for v in range(2):
            L(f"  %tacc{i}_{v} = call {vt} {fma}({vt} %x{i}v, {vt} %wv{v}, {vt} %s{i}_{v})")
    if one:
        L("  br label %td")
    else:
        L("  %tn = add i64 %tp, 1")
        L("  %tm = icmp slt i64 %tn, %ntaps")
        L("  br i1 %tm, label %tl, label %td")
    L("td:")
    L("  %cn = add i64 %c, 1")
    L("  br label %cl")
    L("done:")
    for i in range(r):
        for v in range(2):
            L(f"  %bp{i}_{v} = getelementptr {t}, {t}* %buf, i64 {(i * 2 + v) * w}")
            L(f"  %bq{i}_{v} = bitcast {t}* %bp{i}_{v} to {vt}*")
            L(f"  store {vt} %acc{i}_{v}, {vt}* %bq{i}_{v}, align 64")
    L("  ret void")
    L("}")


def _store(L, name, t, w, vt, mload, mstore, ld=False):
    """@{name}_st(buf*, r, c0, o, C*, P, p0, hasb, scale*, bias*, res*, lo, hi): the tile in buf (w rows
    of 2w, rows >= r unused) per block of w channels transposed, each channel c = c0 + l < o a vector
    of its r pixels: the epilogue, then a store of r lanes at C + c * P + p0. ``ld``: @{name}_sts, the
    same with the tile's rows %ld elements apart (an argument after buf) instead of 2w."""
    iota = "<" + ", ".join(f"i64 {x}" for x in range(w)) + ">"
    L(f"define internal void @{name}_{'sts' if ld else 'st'}({t}* noalias %buf, {'i64 %ld, ' if ld else ''}i64 %r, "
      f"i64 %c0, i64 %o, {t}* noalias %C, i64 %P, "
      f"i64 %p0, i1 %hasb, {t}* %scale, {t}* %bias, {t}* %res, {t} %lo, {t} %hi) nounwind {{")
    L("entry:")
    L(f"  %rb = insertelement <{w} x i64> undef, i64 %r, i32 0")
    L(f"  %rv = shufflevector <{w} x i64> %rb, <{w} x i64> undef, <{w} x i32> zeroinitializer")
    L(f"  %lm = icmp slt <{w} x i64> {iota}, %rv")
    L(f"  %hasr = icmp ne {t}* %res, null")
    L(f"  %lob = insertelement {vt} undef, {t} %lo, i32 0")
    L(f"  %lov = shufflevector {vt} %lob, {vt} undef, <{w} x i32> zeroinitializer")
    L(f"  %hib = insertelement {vt} undef, {t} %hi, i32 0")
    L(f"  %hiv = shufflevector {vt} %hib, {vt} undef, <{w} x i32> zeroinitializer")
    # (the tile's 2w scales and biases as four vectors, applied to the tile's rows before the transpose:
    # per channel after it, a broadcast each, the store ran out of registers and spilled)
    L(f"  %ob = insertelement <{w} x i64> undef, i64 %o, i32 0")
    L(f"  %ov = shufflevector <{w} x i64> %ob, <{w} x i64> undef, <{w} x i32> zeroinitializer")
    L(f"  %cb = insertelement <{w} x i64> undef, i64 %c0, i32 0")
    L(f"  %cv = shufflevector <{w} x i64> %cb, <{w} x i64> undef, <{w} x i32> zeroinitializer")
    L("  br i1 %hasb, label %pre, label %b0")
    L("pre:")
    for v in range(2):
        L(f"  %cl{v} = add <{w} x i64> %cv, <" + ", ".join(f"i64 {v * w + x}" for x in range(w)) + ">")
        L(f"  %cm{v} = icmp slt <{w} x i64> %cl{v}, %ov")
        L(f"  %co{v} = add i64 %c0, {v * w}")
        for nm, arr in (("sc", "scale"), ("bc", "bias")):
            L(f"  %{nm}p{v} = getelementptr {t}, {t}* %{arr}, i64 %co{v}")
            L(f"  %{nm}q{v} = bitcast {t}* %{nm}p{v} to {vt}*")
            L(f"  %{nm}{v} = call {vt} {mload}({vt}* %{nm}q{v}, i32 4, <{w} x i1> %cm{v}, {vt} zeroinitializer)")
    L("  br label %b0")
    for v in range(2):
        L(f"b{v}:")
        if v == 0:
            for nm in ("sc", "bc"):
                for u in range(2):
                    L(f"  %{nm}h{u} = phi {vt} [ zeroinitializer, %entry ], [ %{nm}{u}, %pre ]")
        rows = []
        for i in range(w):
            if ld:
                L(f"  %l{v}_{i}o = mul i64 %ld, {i}")
                L(f"  %l{v}_{i}q0 = add i64 %l{v}_{i}o, {v * w}")
                L(f"  %l{v}_{i}p = getelementptr {t}, {t}* %buf, i64 %l{v}_{i}q0")
            else:
                L(f"  %l{v}_{i}p = getelementptr {t}, {t}* %buf, i64 {(i * 2 + v) * w}")
            L(f"  %l{v}_{i}q = bitcast {t}* %l{v}_{i}p to {vt}*")
            L(f"  %l{v}_{i} = load {vt}, {vt}* %l{v}_{i}q, align {4 if ld else 64}")
            rows.append(f"%l{v}_{i}")
        # (the batch norm on each pixel's row of channels, before the transpose: a vector of scales and one
        # of biases per block, the same multiply and add per element as gemm's epilogue)
        L(f"  br i1 %hasb, label %s{v}, label %x{v}")
        L(f"s{v}:")
        for i in range(w):
            L(f"  %m{v}_{i} = fmul {vt} %l{v}_{i}, %sch{v}")
            L(f"  %a{v}_{i} = fadd {vt} %m{v}_{i}, %bch{v}")
        L(f"  br label %x{v}")
        L(f"x{v}:")
        for i in range(w):
            L(f"  %y{v}_{i} = phi {vt} [ %l{v}_{i}, %b{v} ], [ %a{v}_{i}, %s{v} ]")
        rows = [f"%y{v}_{i}" for i in range(w)]
        cols = _transpose(L, t, w, rows, f"tr{v}_")
        L(f"  br label %c{v}_0")
        for lane in range(w):
            tag = f"{v}_{lane}"
            nxt = f"c{v}_{lane + 1}" if lane + 1 < w else (f"b{v + 1}" if v == 0 else "done")
            L(f"c{tag}:")
            L(f"  %ch{tag} = add i64 %c0, {v * w + lane}")
            L(f"  %in{tag} = icmp slt i64 %ch{tag}, %o")
            L(f"  br i1 %in{tag}, label %e{tag}, label %{nxt}")
            L(f"e{tag}:")
            g = cols[lane]
            L(f"  %offm{tag} = mul i64 %ch{tag}, %P")
            L(f"  %off{tag} = add i64 %offm{tag}, %p0")
            L(f"  br i1 %hasr, label %er{tag}, label %erx{tag}")
            L(f"er{tag}:")
            if STORE_PREFETCH:
                L(f"  %rf{tag}o = add i64 %off{tag}, {STORE_PREFETCH}")
                L(f"  %rf{tag}p = getelementptr {t}, {t}* %res, i64 %rf{tag}o")
                L(f"  %rf{tag}c = bitcast {t}* %rf{tag}p to i8*")
                L(f"  call void @llvm.prefetch.p0i8(i8* %rf{tag}c, i32 0, i32 3, i32 1)")
            L(f"  %rp{tag} = getelementptr {t}, {t}* %res, i64 %off{tag}")
            L(f"  %rq{tag} = bitcast {t}* %rp{tag} to {vt}*")
            L(f"  %rl{tag} = call {vt} {mload}({vt}* %rq{tag}, i32 4, <{w} x i1> %lm, {vt} zeroinitializer)")
            L(f"  %gr{tag} = fadd {vt} {g}, %rl{tag}")
            L(f"  br label %erx{tag}")
            L(f"erx{tag}:")
            L(f"  %h{tag} = phi {vt} [ {g}, %e{tag} ], [ %gr{tag}, %er{tag} ]")
            clamp(L, w, vt, tag)
            if STORE_PREFETCH:
                L(f"  %cf{tag}o = add i64 %off{tag}, {STORE_PREFETCH}")
                L(f"  %cf{tag}p = getelementptr {t}, {t}* %C, i64 %cf{tag}o")
                L(f"  %cf{tag}c = bitcast {t}* %cf{tag}p to i8*")
                L(f"  call void @llvm.prefetch.p0i8(i8* %cf{tag}c, i32 1, i32 3, i32 1)")
            L(f"  %cp{tag} = getelementptr {t}, {t}* %C, i64 %off{tag}")
            L(f"  %cq{tag} = bitcast {t}* %cp{tag} to {vt}*")
            L(f"  call void {mstore}({vt} %hn{tag}, {vt}* %cq{tag}, i32 4, <{w} x i1> %lm)")
            L(f"  br label %{nxt}")
    L("done:")
    L("  ret void")
    L("}")


def ir_cout(features: str, dtype: str = "float32", name: str = NAME) -> str:
    """The LLVM IR of ``name`` (module docstring): per panel, per output row, per tile of at most ROWS
    pixels of the row, the tile of that many rows (``_tile``) and its transposed store (``_store``)."""
    t = TYPES[dtype]
    w = vec_width(features, t)
    vt = f"<{w} x {t}>"
    sfx = f"v{w}f{32 if t == 'float' else 64}"
    fma, mload, mstore = f"@llvm.fma.{sfx}", f"@llvm.masked.load.{sfx}.p0{sfx}", f"@llvm.masked.store.{sfx}.p0{sfx}"
    mr = min(ROWS, w)                     # (the transposed store takes at most w pixels a tile)
    lines = [f"declare {vt} {fma}({vt}, {vt}, {vt})",
             f"declare {vt} {mload}({vt}*, i32, <{w} x i1>, {vt})",
             f"declare void {mstore}({vt}, {vt}*, i32, <{w} x i1>)",
             "declare void @llvm.prefetch.p0i8(i8*, i32, i32, i32)",
             "declare void @llvm.memset.p0i8.i64(i8*, i8, i64, i1)"]
    L = lines.append
    for r in range(1, mr + 1):
        _tile(L, name, t, w, r, vt, fma)
        _tile(L, name, t, w, r, vt, fma, one=True)
    _store(L, name, t, w, vt, mload, mstore)
    L(f"define void @{name}(i64 %o, i64 %ci, i64 %ntaps, i64* noalias %taps, {t}* noalias %Wp, {t}* noalias %src, "
      f"i64 %row, i64 %ho, i64 %wo, i64 %wq, {t}* noalias %C, i64 %P, i64 %j0, i64 %j1, i64 %hasb0, {t}* %scale, "
      f"{t}* %bias, {t}* %res, {t} %lo, {t} %hi) nounwind {{")
    L("entry:")
    L("  %hasb = icmp ne i64 %hasb0, 0")
    L(f"  %buf = alloca {vt}, i64 {2 * w}, align 64")
    L(f"  %bufp = bitcast {vt}* %buf to {t}*")
    # (zeroed once: a tile writes its r rows and the store transposes all w, so rows r.. of a stack left
    # unwritten were arithmetic on whatever lay there: denormals, each a microcode assist on an Intel Xeon,
    # where the stem's batch norm then took 1.8x its product's time)
    L(f"  %bufc = bitcast {vt}* %buf to i8*")
    L(f"  call void @llvm.memset.p0i8.i64(i8* align 64 %bufc, i8 0, i64 {2 * w * w * (4 if t == 'float' else 8)}, i1 false)")
    L("  %K = mul i64 %ci, %ntaps")
    L("  %one = icmp eq i64 %ntaps, 1")
    L("  br label %jl")
    L("jl:")
    L("  %j = phi i64 [ %j0, %entry ], [ %jn, %ohd ]")
    L("  %jc = icmp slt i64 %j, %j1")
    L("  br i1 %jc, label %jb, label %done")
    L("jb:")
    L(f"  %po0 = mul i64 %j, {2 * w}")
    L("  %po = mul i64 %po0, %K")
    L(f"  %wp = getelementptr {t}, {t}* %Wp, i64 %po")
    L(f"  %c0 = mul i64 %j, {2 * w}")
    L("  br label %ohl")
    L("ohl:")
    L("  %oh = phi i64 [ 0, %jb ], [ %ohn, %owd ]")
    L("  %ohc = icmp slt i64 %oh, %ho")
    L("  br i1 %ohc, label %ohb, label %ohd")
    L("ohb:")
    L("  %gq = mul i64 %oh, %wq")
    L("  %pq = mul i64 %oh, %wo")
    L("  br label %owl")
    L("owl:")
    L("  %ow = phi i64 [ 0, %ohb ], [ %own, %st ]")
    L("  %owc = icmp slt i64 %ow, %wo")
    L("  br i1 %owc, label %owb, label %owd")
    L("owb:")
    # the row's pixels left in tiles of about equal size (14: 7 + 7, not 12 + 2, whose 4 accumulators
    # leave the FMA units idle while each waits on the one before)
    L("  %left = sub i64 %wo, %ow")
    L(f"  %ntl0 = add i64 %left, {mr - 1}")
    L(f"  %ntl = udiv i64 %ntl0, {mr}")
    L("  %r0 = add i64 %left, %ntl")
    L("  %r1 = sub i64 %r0, 1")
    L("  %r = udiv i64 %r1, %ntl")
    L("  %g = add i64 %gq, %ow")
    L(f"  %a = getelementptr {t}, {t}* %src, i64 %g")
    L("  %p0 = add i64 %pq, %ow")
    L("  br i1 %one, label %fo, label %ft")
    for fam in ("o", "t"):
        L(f"f{fam}:")
        cases = " ".join(f"i64 {r}, label %{fam}{r}" for r in range(1, mr))
        L(f"  switch i64 %r, label %{fam}{mr} [ {cases} ]")
        for r in range(1, mr + 1):
            L(f"{fam}{r}:")
            L(f"  call void @{name}_{fam}{r}(i64 %ci, i64 %ntaps, i64* %taps, {t}* %a, i64 %row, {t}* %wp, {t}* %bufp)")
            L("  br label %st")
    L("st:")
    L(f"  call void @{name}_st({t}* %bufp, i64 %r, i64 %c0, i64 %o, {t}* %C, i64 %P, i64 %p0, i1 %hasb, "
      f"{t}* %scale, {t}* %bias, {t}* %res, {t} %lo, {t} %hi)")
    L("  %own = add i64 %ow, %r")
    L("  br label %owl")
    L("owd:")
    L("  %ohn = add i64 %oh, 1")
    L("  br label %ohl")
    L("ohd:")
    L("  %jn = add i64 %j, 1")
    L("  br label %jl")
    L("done:")
    L("  ret void")
    L("}")
    return "\n".join(lines) + "\n"


def ir_rows(features: str, dtype: str = "float32", name: str = ROWS_NAME) -> str:
    """The LLVM IR of ``name``, the transposed store of a product whose rows are pixels (``conv.TapsConv``'s
    im2col route: the packed Dense product of the image's windows as rows by ``prepared_cout``'s panels):

        rows(o, Cw*, ldc, nimg, P, Y*, j0, j1, hasb, scale*, bias*, res*, lo, hi)
        Y[b][c][p] = epi(Cw[(b * P + p) * ldc + c])       (b < nimg, p < P, panels j0 <= j < j1)

    per image, per tile of w pixels and per panel of 2w channels, gemm_cout's store (``_store``, its rows
    ldc apart): the same epilogue (* scale[c] + bias[c], + res, max lo, min hi) and masked stores into
    the NCHW result. A tile of fewer than w pixels is copied to a stack tile first, so that no row past
    the product is read; each row is read a panel (2w) wide from its panel's start, so ldc holds whole
    panels (the caller's: conv.TapsConv._run_im2col)."""
    t = TYPES[dtype]
    w = vec_width(features, t)
    vt = f"<{w} x {t}>"
    sfx = f"v{w}f{32 if t == 'float' else 64}"
    mload, mstore = f"@llvm.masked.load.{sfx}.p0{sfx}", f"@llvm.masked.store.{sfx}.p0{sfx}"
    lines = [f"declare {vt} {mload}({vt}*, i32, <{w} x i1>, {vt})",
             f"declare void {mstore}({vt}, {vt}*, i32, <{w} x i1>)",
             "declare void @llvm.memset.p0i8.i64(i8*, i8, i64, i1)"]
    L = lines.append
    _store(L, name, t, w, vt, mload, mstore, ld=True)
    L(f"define void @{name}(i64 %o, {t}* noalias %Cw, i64 %ldc, i64 %nimg, i64 %P, {t}* noalias %Y, i64 %j0, "
      f"i64 %j1, i64 %hasb0, {t}* %scale, {t}* %bias, {t}* %res, {t} %lo, {t} %hi) nounwind {{")
    L("entry:")
    L("  %hasb = icmp ne i64 %hasb0, 0")
    L("  %hasr = icmp ne {t}* %res, null".format(t=t))
    L(f"  %buf = alloca {vt}, i64 {2 * w}, align 64")
    L(f"  %bufp = bitcast {vt}* %buf to {t}*")
    L(f"  %bufc = bitcast {vt}* %buf to i8*")
    L(f"  call void @llvm.memset.p0i8.i64(i8* align 64 %bufc, i8 0, i64 {2 * w * w * (4 if t == 'float' else 8)}, i1 false)")
    L("  %OP = mul i64 %o, %P")
    L("  %PL = mul i64 %P, %ldc")
    L("  br label %bl")
    L("bl:")
    L("  %b = phi i64 [ 0, %entry ], [ %bn, %pd ]")
    L("  %bc = icmp slt i64 %b, %nimg")
    L("  br i1 %bc, label %bb, label %done")
    L("bb:")
    L("  %yo = mul i64 %b, %OP")
    L(f"  %yb = getelementptr {t}, {t}* %Y, i64 %yo")
    L(f"  %rb0 = getelementptr {t}, {t}* %res, i64 %yo")
    L(f"  %rb = select i1 %hasr, {t}* %rb0, {t}* null")
    L("  %co = mul i64 %b, %PL")
    L(f"  %cb = getelementptr {t}, {t}* %Cw, i64 %co")
    L("  br label %pl")
    L("pl:")
    L("  %p0 = phi i64 [ 0, %bb ], [ %p0n, %jd ]")
    L("  %pc = icmp slt i64 %p0, %P")
    L("  br i1 %pc, label %pb, label %pd")
    L("pb:")
    L("  %left = sub i64 %P, %p0")
    L(f"  %few = icmp slt i64 %left, {w}")
    L(f"  %r = select i1 %few, i64 %left, i64 {w}")
    L("  %to = mul i64 %p0, %ldc")
    L(f"  %tp = getelementptr {t}, {t}* %cb, i64 %to")
    L("  br label %jl")
    L("jl:")
    L("  %j = phi i64 [ %j0, %pb ], [ %jn, %jx ]")
    L("  %jc = icmp slt i64 %j, %j1")
    L("  br i1 %jc, label %jb, label %jd")
    L("jb:")
    L(f"  %c0 = mul i64 %j, {2 * w}")
    L(f"  %src = getelementptr {t}, {t}* %tp, i64 %c0")
    L("  br i1 %few, label %cp, label %jf")
    L("jf:")
    L(f"  call void @{name}_sts({t}* %src, i64 %ldc, i64 %r, i64 %c0, i64 %o, {t}* %yb, i64 %P, i64 %p0, i1 %hasb, "
      f"{t}* %scale, {t}* %bias, {t}* %rb, {t} %lo, {t} %hi)")
    L("  br label %jx")
    L("cp:")
    L("  %i = phi i64 [ 0, %jb ], [ %in, %cp ]")
    L("  %io = mul i64 %i, %ldc")
    L(f"  %ib = mul i64 %i, {2 * w}")
    for v in range(2):
        L(f"  %so{v} = add i64 %io, {v * w}")
        L(f"  %sp{v} = getelementptr {t}, {t}* %src, i64 %so{v}")
        L(f"  %sq{v} = bitcast {t}* %sp{v} to {vt}*")
        L(f"  %sv{v} = load {vt}, {vt}* %sq{v}, align 4")
        L(f"  %do{v} = add i64 %ib, {v * w}")
        L(f"  %dp{v} = getelementptr {t}, {t}* %bufp, i64 %do{v}")
        L(f"  %dq{v} = bitcast {t}* %dp{v} to {vt}*")
        L(f"  store {vt} %sv{v}, {vt}* %dq{v}, align 64")
    L("  %in = add i64 %i, 1")
    L("  %ic = icmp slt i64 %in, %r")
    L("  br i1 %ic, label %cp, label %cs")
    L("cs:")
    L(f"  call void @{name}_sts({t}* %bufp, i64 {2 * w}, i64 %r, i64 %c0, i64 %o, {t}* %yb, i64 %P, i64 %p0, i1 %hasb, "
      f"{t}* %scale, {t}* %bias, {t}* %rb, {t} %lo, {t} %hi)")
    L("  br label %jx")
    L("jx:")
    L("  %jn = add i64 %j, 1")
    L("  br label %jl")
    L("jd:")
    L(f"  %p0n = add i64 %p0, {w}")
    L("  br label %pl")
    L("pd:")
    L("  %bn = add i64 %b, 1")
    L("  br label %bl")
    L("done:")
    L("  ret void")
    L("}")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class CoutGemm:
    """The kernel-cache entry of one of this module's functions (one per dtype and target): ``part`` "cout"
    the product (``ir_cout``), "rows" the transposed store of a product whose rows are pixels (``ir_rows``)."""
    dtype: str
    part: str = "cout"

    kind = "gemm"
    opt_level = 3

    @property
    def name(self) -> str:
        return f"gemm_{self.part}"

    def text(self) -> str:
        if self.part == "rows":
            return f"gemm_rows v{ROWS_VERSION} dtype={self.dtype} store_prefetch={STORE_PREFETCH}"
        return (f"gemm_cout v{VERSION} dtype={self.dtype} rows={ROWS} prefetch={PREFETCH} store_prefetch={STORE_PREFETCH}"
                f" channel_prefetch={CHANNEL_PREFETCH}")

    def lower(self, name: str, features: str) -> str:
        return (ir_rows if self.part == "rows" else ir_cout)(features, self.dtype, name)


SIGNATURES = {"cout": ARGS, "rows": ROWS_ARGS}


@functools.lru_cache(maxsize=64)      # (every caller at a new shape asks: the entry is hashed)
def function(dtype: str, part: str = "cout"):
    """ctypes ``cout(o, ci, ntaps, taps, Wp, src, row, ho, wo, wq, C, P, j0, j1, hasb, scale, bias, res,
    lo, hi)`` (``ir_cout``) or ``rows(o, Cw, ldc, nimg, P, Y, j0, j1, hasb, scale, bias, res, lo, hi)``
    (``ir_rows``), compiled (or loaded from the kernel cache) once per process."""
    from .build import kernel_function
    from .kir import dtype_name

    return kernel_function(CoutGemm(dtype_name(dtype), part), f"GEMM_{part.upper()}", SIGNATURES[part])
