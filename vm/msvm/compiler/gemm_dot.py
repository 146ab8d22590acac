"""msvm's inner-product GEMM for convolutions on small maps (issue 18: ResNet-50's 7x7, 5x5 and 10x10 layers).

The taps product (gemm.ir_taps) runs vectors over a convolution's output pixels: a 7 x 7 map is 49
pixels, four 16-lane vectors with 15 lanes idle (77% of the FMAs useful), a 5 x 5 map 25 of 32, and
a 3 x 3 convolution's padded grid adds two columns to every row (25 pixels on a 5 x 7 grid: 35 -> 64
lanes). The weight is read where it lies in the Parameter, rows of K = Cin x kh x kw contiguous.
Vectors over K leave no lane idle for any map: both operands' rows are contiguous in k once the
image's columns are copied into rows (B^T [P][K], P x K elements, 1/Cout of the product's work:
``ir_xt1``, a transpose in registers for a 1x1 convolution, 0.14-0.38 ns an element; ``ir_xt``, the
k x k windows from the image itself with zeros past its borders, 0.8-0.9 ns):

    dot(m, n, k, A*, lda, B*, ldb, C*, ldc, hasb, scale*, bias*, res*, ldr, lo, hi)
    C[i * ldc + j] = epi(sum_p A[i * lda + p] * B[j * ldb + p])       (i < m, j < n)

Per k block of KC (outermost: that block of B stays in L2), per TI rows of A (TI x KC, in L1 while
every column tile passes), per TJ rows of B, a register tile of TI x TJ accumulators (6 x 4: 24
vectors, 10 loads a k step for 24 FMAs; 4 x 4 and 8 x 4 measured slower) runs down the block; its
vectors are then summed across lanes (``_reduce``: a transpose-add tree, 15 adds and 30 shuffles
for 16 of them) into the tile's sums, added onto C after the first k block, and the epilogue
(gemm's: * scale + bias, + res, max lo, min hi, NaN kept as numpy does) is applied before the last
block's store. Each tile prefetches one row of the next block of A (the weights come from memory
once a forward: without it 5x5 layers ran at 94-105 GFLOP/s in ResNet-50, 125-138 with it). Edge
tiles read the last real row again and store through masks. The k order differs from the taps
product's (w interleaved partial sums per element, then the tree): results agree with it and
with L1 to rounding.

A k x k convolution's copy costs 0.8-0.9 ns an element, so those take compiler/gemm_cout.py (vectors
over output channels, the weight packed) instead: ``conv.use_dot`` and ``conv.use_cout`` split them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from .gemm import clamp
from .lower import TYPES, vec_width

NAME = "msvm_gemm_dot"
TI, TJ = 6, 4               # rows of A x rows of B per register tile
KC = 1024                   # k per block: TI rows of A (24 KB in float32) stay in L1 across the column tiles
VERSION = 3                 # (in the kernel text, so the cache key: bump it when ir_dot changes)
ARGS = ("i64", "i64", "i64", "ptr", "i64", "ptr", "i64", "ptr", "i64", "i64", "ptr", "ptr", "ptr", "i64", "T", "T")


def _reduce(L, t, w, names: list, tag: str) -> str:
    """The g vectors ``names`` (g a power of two, at most w; w lanes each) summed across lanes: one
    vector whose lane q < g is the sum of vector q's lanes. A tree of pairwise combines: at each level a
    vector holds g' sums of s lanes each (g' * s = w); two neighbours give one of 2g' sums of s/2 lanes
    (their low halves side by side, plus their high halves); with fewer than w vectors the last one's
    blocks are then folded in half until each sum is one lane."""
    vt = f"<{w} x {t}>"
    cur, g, s, n = list(names), 1, w, 0

    def combine(a, b, lo):
        nonlocal n
        mx = ", ".join(f"i32 {v}" for v in lo)
        my = ", ".join(f"i32 {v + h}" for v in lo)
        L(f"  %{tag}x{n} = shufflevector {vt} {a}, {vt} {b}, <{w} x i32> <{mx}>")
        L(f"  %{tag}y{n} = shufflevector {vt} {a}, {vt} {b}, <{w} x i32> <{my}>")
        L(f"  %{tag}s{n} = fadd {vt} %{tag}x{n}, %{tag}y{n}")
        n += 1
        return f"%{tag}s{n - 1}"

    while s > 1:
        h = s // 2
        if len(cur) > 1:
            lo = [u * s + x for u in range(g) for x in range(h)] + [w + u * s + x for u in range(g) for x in range(h)]
            cur = [combine(a, b, lo) for a, b in zip(cur[::2], cur[1::2])]
            g *= 2
        else:          # one vector of g sums in blocks of s lanes: fold each block's halves (upper lanes: don't care)
            lo = [u * s + x for u in range(g) for x in range(h)]
            cur = [combine(cur[0], cur[0], lo + lo[:1] * (w - len(lo)))]
        s = h
    return cur[0]


def _tile(L, name, t, w, fma, mload):
    """@{name}_tile(kc, a*, lda, b*, ldb, c*, ldc, ri, rj, first, last, hasb, scale*, bias*, res*, ldr,
    lo, hi): the TI x TJ tile of C at c (rows ri <= TI and columns rj <= TJ of it real) over kc
    steps of the rows at a (lda apart; rows past ri read the last real one) and b (the same)."""
    vt, v4 = f"<{w} x {t}>", f"<{TJ} x {t}>"
    sfx4 = f"v{TJ}f{32 if t == 'float' else 64}"
    L(f"define internal void @{name}_tile(i64 %kc, {t}* %a, i64 %lda, {t}* %b, i64 %ldb, {t}* %c, i64 %ldc, "
      f"i64 %ri, i64 %rj, i1 %first, i1 %last, i1 %hasb, {t}* %scale, {t}* %bias, {t}* %res, i64 %ldr, "
      f"{t} %lo, {t} %hi, {t}* %pf) nounwind alwaysinline {{")
    L("entry:")
    for tag, base, ld, rn, cnt in (("a", "%a", "%lda", "%ri", TI), ("b", "%b", "%ldb", "%rj", TJ)):
        for x in range(cnt):                       # row x, or the last real row
            L(f"  %{tag}lt{x} = icmp slt i64 {x}, {rn}")
            L(f"  %{tag}last{x} = sub i64 {rn}, 1")
            L(f"  %{tag}ix{x} = select i1 %{tag}lt{x}, i64 {x}, i64 %{tag}last{x}")
            L(f"  %{tag}of{x} = mul i64 %{tag}ix{x}, {ld}")
            L(f"  %{tag}r{x} = getelementptr {t}, {t}* {base}, i64 %{tag}of{x}")
    L(f"  %nfull = and i64 %kc, {-w}")
    L("  br label %loop")
    L("loop:")
    L("  %p = phi i64 [ 0, %entry ], [ %pn, %body ]")
    for i in range(TI):
        for j in range(TJ):
            L(f"  %acc{i}_{j} = phi {vt} [ zeroinitializer, %entry ], [ %nacc{i}_{j}, %body ]")
    L("  %more = icmp slt i64 %p, %nfull")
    L("  br i1 %more, label %body, label %tail")
    L("body:")
    for tag, cnt in (("a", TI), ("b", TJ)):
        for x in range(cnt):
            L(f"  %{tag}p{x} = getelementptr {t}, {t}* %{tag}r{x}, i64 %p")
            L(f"  %{tag}q{x} = bitcast {t}* %{tag}p{x} to {vt}*")
            L(f"  %{tag}v{x} = load {vt}, {vt}* %{tag}q{x}, align 4")
    L(f"  %pfp = getelementptr {t}, {t}* %pf, i64 %p")       # (a row of the next A block: ``ir_dot``)
    L(f"  %pfc = bitcast {t}* %pfp to i8*")
    L("  call void @llvm.prefetch.p0i8(i8* %pfc, i32 0, i32 3, i32 1)")
    for i in range(TI):
        for j in range(TJ):
            L(f"  %nacc{i}_{j} = call {vt} {fma}({vt} %av{i}, {vt} %bv{j}, {vt} %acc{i}_{j})")
    L(f"  %pn = add i64 %p, {w}")
    L("  br label %loop")
    L("tail:")                                     # the last kc % w steps: masked loads (zeros past kc)
    L("  %left = sub i64 %kc, %nfull")
    L(f"  %lb = insertelement <{w} x i64> undef, i64 %left, i32 0")
    L(f"  %lv = shufflevector <{w} x i64> %lb, <{w} x i64> undef, <{w} x i32> zeroinitializer")
    iota = "<" + ", ".join(f"i64 {x}" for x in range(w)) + ">"
    L(f"  %tm = icmp slt <{w} x i64> {iota}, %lv")
    for tag, cnt in (("a", TI), ("b", TJ)):
        for x in range(cnt):
            L(f"  %{tag}tp{x} = getelementptr {t}, {t}* %{tag}r{x}, i64 %p")
            L(f"  %{tag}tq{x} = bitcast {t}* %{tag}tp{x} to {vt}*")
            L(f"  %{tag}tv{x} = call {vt} {mload}({vt}* %{tag}tq{x}, i32 4, <{w} x i1> %tm, {vt} zeroinitializer)")
    for i in range(TI):
        for j in range(TJ):
            L(f"  %f{i}_{j} = call {vt} {fma}({vt} %atv{i}, {vt} %btv{j}, {vt} %acc{i}_{j})")
    # the 16 sums, as rows of TJ: groups of w accumulators (row-major) reduced to one vector each
    accs = [f"%f{i}_{j}" for i in range(TI) for j in range(TJ)]
    sums = [_reduce(L, t, w, accs[g:g + w], f"r{g}_") for g in range(0, len(accs), w)]
    for i in range(TI):
        q0 = i * TJ
        src = sums[q0 // w]
        idx = ", ".join(f"i32 {q0 % w + j}" for j in range(TJ))
        L(f"  %row{i} = shufflevector {vt} {src}, {vt} undef, <{TJ} x i32> <{idx}>")
    # masks: columns < rj, rows < ri
    L(f"  %jb = insertelement <{TJ} x i64> undef, i64 %rj, i32 0")
    L(f"  %jv = shufflevector <{TJ} x i64> %jb, <{TJ} x i64> undef, <{TJ} x i32> zeroinitializer")
    iota4 = "<" + ", ".join(f"i64 {x}" for x in range(TJ)) + ">"
    L(f"  %cm = icmp slt <{TJ} x i64> {iota4}, %jv")
    for i in range(TI):
        L(f"  %m{i} = select i1 %alt{i}, <{TJ} x i1> %cm, <{TJ} x i1> zeroinitializer")
        L(f"  %co{i} = mul i64 %ldc, {i}")
        L(f"  %cp{i} = getelementptr {t}, {t}* %c, i64 %co{i}")
        L(f"  %cq{i} = bitcast {t}* %cp{i} to {v4}*")
    L("  br i1 %first, label %noold, label %old")
    L("old:")
    for i in range(TI):
        L(f"  %ov{i} = call {v4} @llvm.masked.load.{sfx4}.p0{sfx4}({v4}* %cq{i}, i32 4, <{TJ} x i1> %m{i}, "
          f"{v4} zeroinitializer)")
        L(f"  %os{i} = fadd {v4} %row{i}, %ov{i}")
    L("  br label %noold")
    L("noold:")
    for i in range(TI):
        L(f"  %s{i} = phi {v4} [ %row{i}, %tail ], [ %os{i}, %old ]")
    L("  br i1 %last, label %epi, label %store")
    L("epi:")
    L(f"  %lob = insertelement {v4} undef, {t} %lo, i32 0")
    L(f"  %lov = shufflevector {v4} %lob, {v4} undef, <{TJ} x i32> zeroinitializer")
    L(f"  %hib = insertelement {v4} undef, {t} %hi, i32 0")
    L(f"  %hiv = shufflevector {v4} %hib, {v4} undef, <{TJ} x i32> zeroinitializer")
    L(f"  %hasr = icmp ne {t}* %res, null")
    for i in range(TI):
        L(f"  %ix{i} = select i1 %alt{i}, i64 {i}, i64 0")       # (rows past ri: a real row's scale, unused)
        L(f"  %esp{i} = getelementptr {t}, {t}* %scale, i64 %ix{i}")
        L(f"  %ebp{i} = getelementptr {t}, {t}* %bias, i64 %ix{i}")
        L(f"  br i1 %hasb, label %eb{i}, label %ebx{i}")
        L(f"eb{i}:")
        L(f"  %ess{i} = load {t}, {t}* %esp{i}")
        L(f"  %ebs{i} = load {t}, {t}* %ebp{i}")
        L(f"  %esi{i} = insertelement {v4} undef, {t} %ess{i}, i32 0")
        L(f"  %esv{i} = shufflevector {v4} %esi{i}, {v4} undef, <{TJ} x i32> zeroinitializer")
        L(f"  %ebi{i} = insertelement {v4} undef, {t} %ebs{i}, i32 0")
        L(f"  %ebv{i} = shufflevector {v4} %ebi{i}, {v4} undef, <{TJ} x i32> zeroinitializer")
        L(f"  %fs{i} = fmul {v4} %s{i}, %esv{i}")       # (a multiply, then an add: as gemm's epilogue)
        L(f"  %fb{i} = fadd {v4} %fs{i}, %ebv{i}")
        L(f"  br label %ebx{i}")
        L(f"ebx{i}:")
        prev = "epi" if i == 0 else f"erx{i - 1}"
        L(f"  %g{i} = phi {v4} [ %s{i}, %{prev} ], [ %fb{i}, %eb{i} ]")
        L(f"  br i1 %hasr, label %er{i}, label %erx{i}")
        L(f"er{i}:")
        L(f"  %ro{i} = mul i64 %ldr, {i}")
        L(f"  %rp{i} = getelementptr {t}, {t}* %res, i64 %ro{i}")
        L(f"  %rq{i} = bitcast {t}* %rp{i} to {v4}*")
        L(f"  %rv{i} = call {v4} @llvm.masked.load.{sfx4}.p0{sfx4}({v4}* %rq{i}, i32 4, <{TJ} x i1> %m{i}, "
          f"{v4} zeroinitializer)")
        L(f"  %gr{i} = fadd {v4} %g{i}, %rv{i}")
        L(f"  br label %erx{i}")
        L(f"erx{i}:")
        L(f"  %h{i} = phi {v4} [ %g{i}, %ebx{i} ], [ %gr{i}, %er{i} ]")
        clamp(L, TJ, v4, str(i))
    L("  br label %store")
    L("store:")
    for i in range(TI):
        L(f"  %e{i} = phi {v4} [ %s{i}, %noold ], [ %hn{i}, %erx{TI - 1} ]")
    for i in range(TI):
        L(f"  call void @llvm.masked.store.{sfx4}.p0{sfx4}({v4} %e{i}, {v4}* %cq{i}, i32 4, <{TJ} x i1> %m{i})")
    L("  ret void")
    L("}")


def ir_dot(features: str, dtype: str = "float32", name: str = NAME, kc: int = KC) -> str:
    """The LLVM IR of ``name`` (module docstring): per block of TI rows of A, per k block of kc, per
    tile of TJ rows of B, the register tile."""
    t = TYPES[dtype]
    w = vec_width(features, t)
    vt, v4 = f"<{w} x {t}>", f"<{TJ} x {t}>"
    sfx, sfx4 = f"v{w}f{32 if t == 'float' else 64}", f"v{TJ}f{32 if t == 'float' else 64}"
    fma, mload = f"@llvm.fma.{sfx}", f"@llvm.masked.load.{sfx}.p0{sfx}"
    # (once each: where w == TJ -- float64 on AVX2 -- the two masked loads are one intrinsic)
    lines = list(dict.fromkeys([f"declare {vt} {fma}({vt}, {vt}, {vt})",
                                f"declare {vt} {mload}({vt}*, i32, <{w} x i1>, {vt})",
                                f"declare {v4} @llvm.masked.load.{sfx4}.p0{sfx4}({v4}*, i32, <{TJ} x i1>, {v4})",
                                f"declare void @llvm.masked.store.{sfx4}.p0{sfx4}({v4}, {v4}*, i32, <{TJ} x i1>)",
                                "declare void @llvm.prefetch.p0i8(i8*, i32, i32, i32)"]))
    L = lines.append
    _tile(L, name, t, w, fma, mload)
    L(f"define void @{name}(i64 %m, i64 %n, i64 %k, {t}* noalias %A, i64 %lda, {t}* noalias %B, i64 %ldb, "
      f"{t}* noalias %C, i64 %ldc, i64 %hasb0, {t}* %scale, {t}* %bias, {t}* %res, i64 %ldr, {t} %lo, {t} %hi) "
      "nounwind {")
    L("entry:")
    L("  %hasb = icmp ne i64 %hasb0, 0")
    L("  %hasr = icmp ne " + f"{t}* %res, null")
    L("  br label %kloop")
    L("kloop:")                  # (runs once when k = 0: the tiles then store the epilogue of zeros)
    L("  %k0 = phi i64 [ 0, %entry ], [ %k0n, %idone ]")
    L("  %kin = icmp slt i64 %k0, %k")
    L("  %first = icmp eq i64 %k0, 0")
    L("  %kgo = or i1 %kin, %first")
    L("  br i1 %kgo, label %kbody, label %done")
    L("kbody:")
    L("  %kleft = sub i64 %k, %k0")
    L(f"  %kcs = icmp slt i64 %kleft, {kc}")
    L(f"  %kc = select i1 %kcs, i64 %kleft, i64 {kc}")
    L("  %kend = add i64 %k0, %kc")
    L("  %last = icmp sge i64 %kend, %k")
    L(f"  %ak = getelementptr {t}, {t}* %A, i64 %k0")
    L(f"  %bk = getelementptr {t}, {t}* %B, i64 %k0")
    L("  br label %iloop")
    L("iloop:")
    L("  %i = phi i64 [ 0, %kbody ], [ %in, %jdone ]")
    L("  %ic = icmp slt i64 %i, %m")
    L("  br i1 %ic, label %ibody, label %idone")
    L("ibody:")
    L("  %ileft = sub i64 %m, %i")
    L(f"  %ifew = icmp slt i64 %ileft, {TI}")
    L(f"  %ri = select i1 %ifew, i64 %ileft, i64 {TI}")
    L("  %aoff = mul i64 %i, %lda")
    L(f"  %ai = getelementptr {t}, {t}* %ak, i64 %aoff")
    L("  %coff = mul i64 %i, %ldc")
    L(f"  %ci = getelementptr {t}, {t}* %C, i64 %coff")
    L(f"  %si = getelementptr {t}, {t}* %scale, i64 %i")
    L(f"  %bi = getelementptr {t}, {t}* %bias, i64 %i")
    L("  %roff = mul i64 %i, %ldr")
    L(f"  %rsi = getelementptr {t}, {t}* %res, i64 %roff")
    L(f"  %ri_ = select i1 %hasr, {t}* %rsi, {t}* null")
    L("  br label %jloop")
    L("jloop:")
    L("  %j = phi i64 [ 0, %ibody ], [ %jn, %jbody ]")
    L("  %jc = icmp slt i64 %j, %n")
    L("  br i1 %jc, label %jbody, label %jdone")
    L("jbody:")
    L("  %jleft = sub i64 %n, %j")
    L(f"  %jfew = icmp slt i64 %jleft, {TJ}")
    L(f"  %rj = select i1 %jfew, i64 %jleft, i64 {TJ}")
    L("  %boff = mul i64 %j, %ldb")
    L(f"  %bj = getelementptr {t}, {t}* %bk, i64 %boff")
    L(f"  %cj = getelementptr {t}, {t}* %ci, i64 %j")
    L(f"  %rj_ = getelementptr {t}, {t}* %ri_, i64 %j")
    L(f"  %rjp = select i1 %hasr, {t}* %rj_, {t}* null")
    # the tile prefetches one row of the next block of A (the weights come from memory once a forward):
    # column tile jt row jt % TI, so a block of at least TI column tiles asks for every row before it starts
    L(f"  %jt = udiv i64 %j, {TJ}")
    L(f"  %pr = urem i64 %jt, {TI}")
    L(f"  %pri = add i64 %i, {TI}")
    L("  %prr = add i64 %pri, %pr")
    L("  %prok = icmp slt i64 %prr, %m")
    L("  %prs = select i1 %prok, i64 %prr, i64 %i")
    L("  %pro = mul i64 %prs, %lda")
    L(f"  %pfa = getelementptr {t}, {t}* %ak, i64 %pro")
    L(f"  call void @{name}_tile(i64 %kc, {t}* %ai, i64 %lda, {t}* %bj, i64 %ldb, {t}* %cj, i64 %ldc, i64 %ri, "
      f"i64 %rj, i1 %first, i1 %last, i1 %hasb, {t}* %si, {t}* %bi, {t}* %rjp, i64 %ldr, {t} %lo, {t} %hi, {t}* %pfa)")
    L(f"  %jn = add i64 %j, {TJ}")
    L("  br label %jloop")
    L("jdone:")
    L(f"  %in = add i64 %i, {TI}")
    L("  br label %iloop")
    L("idone:")
    L("  %k0n = add i64 %k0, %kc")
    L("  %kz = icmp eq i64 %kc, 0")
    L("  br i1 %kz, label %done, label %kloop")
    L("done:")
    L("  ret void")
    L("}")
    return "\n".join(lines) + "\n"


def ir_xt(dtype: str = "float32", name: str = NAME + "_xt") -> str:
    """The LLVM IR of ``name``, one image's columns as rows (B^T of ``dot``, "im2col" transposed):

        xt(c, h, w, kh, kw, sh, sw, pt, pl, dh, dw, ho, wo, x*, dst*, oh0, oh1, ldd)
        dst[p * ldd + (ci * kh + i) * kw + j] = x[ci, oh * sh - pt + i * dh, ow * sw - pl + j * dw]  (0 past the borders)

    for the output rows oh0 <= oh < oh1 (p = oh * wo + ow, K = c * kh * kw: the weight's own (ci, kh, kw)
    order; ldd >= K: the rows' stride). Output columns in blocks of 16 inside each (channel, tap), so a
    block reads along one input row and writes 16 rows of dst that stay in L1 across the channels; an
    address past a border is clamped to a real element and its value replaced by zero (no branch in the
    inner loop)."""
    t = TYPES[dtype]
    zero = "0.0"
    L = []
    a = L.append
    a(f"define void @{name}(i64 %c, i64 %h, i64 %w, i64 %kh, i64 %kw, i64 %sh, i64 %sw, i64 %pt, i64 %pl, "
      f"i64 %dh, i64 %dw, i64 %ho, i64 %wo, {t}* noalias %x, {t}* noalias %dst, i64 %oh0, i64 %oh1, i64 %ldd) nounwind {{")
    a("entry:")
    a("  %taps = mul i64 %kh, %kw")
    a("  %K = mul i64 %c, %taps")
    a("  %hw = mul i64 %h, %w")
    a("  br label %ohl")
    a("ohl:")
    a("  %oh = phi i64 [ %oh0, %entry ], [ %ohn, %owd ]")
    a("  %ohc = icmp slt i64 %oh, %oh1")
    a("  br i1 %ohc, label %ohb, label %done")
    a("ohb:")
    a("  %ohs = mul i64 %oh, %sh")
    a("  %ih0 = sub i64 %ohs, %pt")
    a("  %prow = mul i64 %oh, %wo")
    a("  br label %owl")
    a("owl:")
    a("  %ow0 = phi i64 [ 0, %ohb ], [ %ow0n, %cd ]")
    a("  %owc = icmp slt i64 %ow0, %wo")
    a("  br i1 %owc, label %owb, label %owd")
    a("owb:")
    a("  %owe0 = add i64 %ow0, 16")
    a("  %owo = icmp sgt i64 %owe0, %wo")
    a("  %owe = select i1 %owo, i64 %wo, i64 %owe0")
    a("  br label %cl")
    a("cl:")
    a("  %ci = phi i64 [ 0, %owb ], [ %cin, %id ]")
    a("  %cc = icmp slt i64 %ci, %c")
    a("  br i1 %cc, label %cb, label %cd")
    a("cb:")
    a("  %xco = mul i64 %ci, %hw")
    a(f"  %xc = getelementptr {t}, {t}* %x, i64 %xco")
    a("  %kc = mul i64 %ci, %taps")
    a("  br label %il")
    a("il:")
    a("  %i = phi i64 [ 0, %cb ], [ %in, %jd ]")
    a("  %icn = icmp slt i64 %i, %kh")
    a("  br i1 %icn, label %ib, label %id")
    a("ib:")
    a("  %idh = mul i64 %i, %dh")
    a("  %ih = add i64 %ih0, %idh")
    a("  %ihok = icmp ult i64 %ih, %h")
    a("  %ihc = select i1 %ihok, i64 %ih, i64 0")
    a("  %xro = mul i64 %ihc, %w")
    a(f"  %xr = getelementptr {t}, {t}* %xc, i64 %xro")
    a("  %kio = mul i64 %i, %kw")
    a("  %ki = add i64 %kc, %kio")
    a("  br label %jl")
    a("jl:")
    a("  %j = phi i64 [ 0, %ib ], [ %jn, %od ]")
    a("  %jc = icmp slt i64 %j, %kw")
    a("  br i1 %jc, label %jb, label %jd")
    a("jb:")
    a("  %jdw = mul i64 %j, %dw")
    a("  %iwj = sub i64 %jdw, %pl")
    a("  %kij = add i64 %ki, %j")
    a("  br label %ol")
    a("ol:")
    a("  %ow = phi i64 [ %ow0, %jb ], [ %own, %ob ]")
    a("  %oc = icmp slt i64 %ow, %owe")
    a("  br i1 %oc, label %ob, label %od")
    a("ob:")
    a("  %ows = mul i64 %ow, %sw")
    a("  %iw = add i64 %ows, %iwj")
    a("  %iwok = icmp ult i64 %iw, %w")
    a("  %ok = and i1 %ihok, %iwok")
    a("  %iwc = select i1 %iwok, i64 %iw, i64 0")
    a(f"  %xp = getelementptr {t}, {t}* %xr, i64 %iwc")
    a(f"  %xv = load {t}, {t}* %xp")
    a(f"  %v = select i1 %ok, {t} %xv, {t} {zero}")
    a("  %p = add i64 %prow, %ow")
    a("  %pk = mul i64 %p, %ldd")
    a("  %d = add i64 %pk, %kij")
    a(f"  %dp = getelementptr {t}, {t}* %dst, i64 %d")
    a(f"  store {t} %v, {t}* %dp")
    a("  %own = add i64 %ow, 1")
    a("  br label %ol")
    a("od:")
    a("  %jn = add i64 %j, 1")
    a("  br label %jl")
    a("jd:")
    a("  %in = add i64 %i, 1")
    a("  br label %il")
    a("id:")
    a("  %cin = add i64 %ci, 1")
    a("  br label %cl")
    a("cd:")
    a("  %ow0n = add i64 %ow0, 16")
    a("  br label %owl")
    a("owd:")
    a("  %ohn = add i64 %oh, 1")
    a("  br label %ohl")
    a("done:")
    a("  ret void")
    a("}")
    return "\n".join(L) + "\n"


def _transpose(L, t, w, rows: list, tag: str) -> list:
    """w vectors of w lanes (a w x w block, row r = ``rows[r]``) transposed: log2(w) stages, each
    swapping the off-diagonal blocks of distance d (w/2, w/4, ..., 1) between row pairs (r, r + d)."""
    vt = f"<{w} x {t}>"
    cur, d, n = list(rows), w // 2, 0
    while d >= 1:
        nxt = list(cur)
        for r in range(w):
            if (r // d) % 2:
                continue
            a, b = cur[r], cur[r + d]
            lo = [lane if (lane // d) % 2 == 0 else w + lane - d for lane in range(w)]
            hi = [lane + d if (lane // d) % 2 == 0 else w + lane for lane in range(w)]
            for dst, idx in ((r, lo), (r + d, hi)):
                m = ", ".join(f"i32 {v}" for v in idx)
                L(f"  %{tag}{n} = shufflevector {vt} {a}, {vt} {b}, <{w} x i32> <{m}>")
                nxt[dst] = f"%{tag}{n}"
                n += 1
        cur, d = nxt, d // 2
    return cur


def ir_xt1(features: str, dtype: str = "float32", name: str = NAME + "_xt1") -> str:
    """The LLVM IR of ``name``, a 1x1 convolution's columns as rows (B^T of ``dot``): a transpose,

        xt1(c, row, src*, dst*, p0, p1, ldd)   dst[p * ldd + ci] = src[ci * row + p]   (p0 <= p < p1)

    in blocks of w channels x w columns, each loaded as w vectors (lanes past p1 masked), transposed
    in registers (``_transpose``) and stored as w rows of dst (lanes past c masked)."""
    t = TYPES[dtype]
    w = vec_width(features, t)
    vt = f"<{w} x {t}>"
    sfx = f"v{w}f{32 if t == 'float' else 64}"
    mload, mstore = f"@llvm.masked.load.{sfx}.p0{sfx}", f"@llvm.masked.store.{sfx}.p0{sfx}"
    iota = "<" + ", ".join(f"i64 {x}" for x in range(w)) + ">"
    L = [f"declare {vt} {mload}({vt}*, i32, <{w} x i1>, {vt})",
         f"declare void {mstore}({vt}, {vt}*, i32, <{w} x i1>)"]
    a = L.append
    a(f"define void @{name}(i64 %c, i64 %row, {t}* noalias %src, {t}* noalias %dst, i64 %p0, i64 %p1, "
      f"i64 %ldd) nounwind {{")
    a("entry:")
    a("  br label %pl")
    a("pl:")
    a("  %pb = phi i64 [ %p0, %entry ], [ %pbn, %cd ]")
    a("  %pc = icmp slt i64 %pb, %p1")
    a("  br i1 %pc, label %pbody, label %done")
    a("pbody:")
    a("  %pleft = sub i64 %p1, %pb")
    a(f"  %plb = insertelement <{w} x i64> undef, i64 %pleft, i32 0")
    a(f"  %plv = shufflevector <{w} x i64> %plb, <{w} x i64> undef, <{w} x i32> zeroinitializer")
    a(f"  %pm = icmp slt <{w} x i64> {iota}, %plv")
    a("  br label %cl")
    a("cl:")
    a("  %cb = phi i64 [ 0, %pbody ], [ %cbn, %cbody ]")
    a("  %cc = icmp slt i64 %cb, %c")
    a("  br i1 %cc, label %cbody, label %cd")
    a("cbody:")
    a("  %cleft = sub i64 %c, %cb")
    a(f"  %clb = insertelement <{w} x i64> undef, i64 %cleft, i32 0")
    a(f"  %clv = shufflevector <{w} x i64> %clb, <{w} x i64> undef, <{w} x i32> zeroinitializer")
    a(f"  %cm = icmp slt <{w} x i64> {iota}, %clv")
    a("  %clast = sub i64 %c, 1")
    rows = []
    for r in range(w):                          # channel cb + r (or the last real one: its lanes are not stored)
        a(f"  %ch{r}_0 = add i64 %cb, {r}")
        a(f"  %chk{r} = icmp slt i64 %ch{r}_0, %c")
        a(f"  %ch{r} = select i1 %chk{r}, i64 %ch{r}_0, i64 %clast")
        a(f"  %so{r}_0 = mul i64 %ch{r}, %row")
        a(f"  %so{r} = add i64 %so{r}_0, %pb")
        a(f"  %sp{r} = getelementptr {t}, {t}* %src, i64 %so{r}")
        a(f"  %sq{r} = bitcast {t}* %sp{r} to {vt}*")
        a(f"  %v{r} = call {vt} {mload}({vt}* %sq{r}, i32 4, <{w} x i1> %pm, {vt} zeroinitializer)")
        rows.append(f"%v{r}")
    cols = _transpose(a, t, w, rows, "tr")
    for q in range(w):                          # column pb + q: a row of dst (past p1: no lanes stored)
        a(f"  %pq{q} = add i64 %pb, {q}")
        a(f"  %pk{q} = icmp slt i64 %pq{q}, %p1")
        a(f"  %m{q} = select i1 %pk{q}, <{w} x i1> %cm, <{w} x i1> zeroinitializer")
        a(f"  %do{q}_0 = mul i64 %pq{q}, %ldd")
        a(f"  %do{q} = add i64 %do{q}_0, %cb")
        a(f"  %dp{q} = getelementptr {t}, {t}* %dst, i64 %do{q}")
        a(f"  %dq{q} = bitcast {t}* %dp{q} to {vt}*")
        a(f"  call void {mstore}({vt} {cols[q]}, {vt}* %dq{q}, i32 4, <{w} x i1> %m{q})")
    a(f"  %cbn = add i64 %cb, {w}")
    a("  br label %cl")
    a("cd:")
    a(f"  %pbn = add i64 %pb, {w}")
    a("  br label %pl")
    a("done:")
    a("  ret void")
    a("}")
    return "\n".join(L) + "\n"


@dataclass(frozen=True)
class DotGemm:
    """The kernel-cache entry of one of this module's functions (one per dtype and target): ``part``
    "dot" the product (``ir_dot``), "xt" the k x k copy (``ir_xt``), "xt1" the 1x1 transpose (``ir_xt1``)."""
    dtype: str
    part: str = "dot"
    kc: int = KC

    kind = "gemm"
    opt_level = 3

    @property
    def name(self) -> str:
        return f"gemm_{self.part}"

    def text(self) -> str:
        if self.part != "dot":
            return f"gemm_{self.part} v{VERSION} dtype={self.dtype}"
        return f"gemm_dot v{VERSION} dtype={self.dtype} kc={self.kc} tile={TI}x{TJ}"

    def lower(self, name: str, features: str) -> str:
        if self.part == "xt":
            return ir_xt(self.dtype, name)
        if self.part == "xt1":
            return ir_xt1(features, self.dtype, name)
        return ir_dot(features, self.dtype, name, self.kc)


SIGNATURES = {"dot": ARGS, "xt": ("i64",) * 13 + ("ptr", "ptr", "i64", "i64", "i64"),
              "xt1": ("i64", "i64", "ptr", "ptr", "i64", "i64", "i64")}


@functools.lru_cache(maxsize=64)      # (every caller at a new shape asks: the entry is hashed)
def function(dtype: str, part: str = "dot", kc: int = KC):
    """ctypes function of ``part`` (DotGemm) for dtype: ``dot(m, n, k, A, lda, B, ldb, C, ldc, hasb,
    scale, bias, res, ldr, lo, hi)``, ``xt(c, h, w, kh, kw, sh, sw, pt, pl, dh, dw, ho, wo, x, dst,
    oh0, oh1, ldd)`` or ``xt1(c, row, src, dst, p0, p1, ldd)``; compiled (or loaded from the kernel cache) once
    per process."""
    from .build import kernel_function
    from .kir import dtype_name

    return kernel_function(DotGemm(dtype_name(dtype), part, kc), f"GEMM_{part.upper()}", SIGNATURES[part])
