"""Winograd's F(2x2, 3x3) for the dense 3x3 convolutions of stride 1 (issue 18: ResNet's 3x3 layers).

A 3x3 convolution computes each 2x2 block of output pixels from a 4x4 patch of the image with 36
multiplies a channel pair; Winograd's minimal filtering (Lavin & Gray, "Fast Algorithms for
Convolutional Neural Networks", 2016) does it with 16, as 16 independent matrix products:

    V[xi][c][t] = (B^T d_(c,t) B)[xi]         the image's patches, t = ty * tw + tx (tiles of 2x2 pixels)
    U[xi][o][c] = (G g_(o,c) G^T)[xi]         the weight, a panel of 32 output channels at a time per call
    M[xi][o][t] = sum_c U[xi][o][c] V[xi][c][t]   16 products, gemm_cout's tiles (vectors over o)
    Y[o][2ty + a][2tx + b] = (A^T M_(o,t) A)[a][b], then the convolution's epilogue

with B^T = [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], G = [[1, 0, 0], [1/2, 1/2, 1/2],
[1/2, -1/2, 1/2], [0, 0, 1]], A^T = [[1, 1, 1, 0], [0, 1, -1, -1]]: 2.25x fewer multiplies than the
direct product, for the price of two transforms that read and write each element a few times and a
weight 16/9 as large. F(2x2, 3x3) is the variant whose rounding stays near the direct product's
(its transforms add and subtract, G halves): results agree with L1 to ~1e-6 relative (the larger
tiles, F(4x4, 3x3), multiply by up to 8 and lose about a digit).

Three kernels a convolution calls per image (``conv.TapsConv`` with ``wino``), each over a range of
channels or panels so that two threads share them:

    in(x*, c0, c1, H, W, pt, pl, th, tw, V*, vs, flag*, force)   the image's channels [c0, c1) -> V (xi
                                                       stride vs); flag: a V not finite (or force)
    mm(o, ci, Gp*, V*, T, M*, j0, j1, flags*, nf, S*)  the 16 products, panels [j0, j1) of 32 channels,
                                                       each panel's U transformed into the scratch S first
    out(M*, ms, o0, o1, th, tw, Y*, H, W, ys, hasb, scale*, bias*, res*, lo, hi, flags*, nf, x*, C, Hin, Win,
        pt, pl, w*)                                    M -> the NCHW result (channels ys apart), or the direct sum

``in`` runs vectors over a tile row (each tile's four columns: the even and odd columns of two
loads, shifted by one lane), zero past the image's borders (masked loads: the padding is never
copied); ``mm`` transforms a panel of the weight (packed [panel][C][9][32], ``pack_weight``: U would be
16/9 of the weight, held for every call) into its 16 points [16][C][32] in S, then runs gemm_cout's
product (``ir_cout``) on that panel 16 times (given U itself, S null, it reads U: a small weight,
conv.prepared_wino); ``out`` runs vectors over a tile row again, interleaves each output row's
even and odd pixels into place and applies the epilogue as gemm_cout's store does (* scale[o] +
bias[o], + res, max lo, min hi with NaN kept) before a masked store. A block of tile rows [ty0, ty1)
is the same call with the top padding pt - 2 ty0, th = ty1 - ty0 and the result's rows from 2 ty0
(``conv.TapsConv._run_wino``: V and M of a block stay in L2 where a map's do not).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from .gemm import clamp, pack
from .gemm_cout import ir_cout
from .lower import TYPES, vec_width

VERSION = 3                 # (in the kernel text, so the cache key: bump it when the IR changes)
XI = 16                     # the products: 4 x 4 points
BT = ((1, 0, -1, 0), (0, 1, 1, 0), (0, -1, 1, 0), (0, 1, 0, -1))
G = ((1, 0, 0), (0.5, 0.5, 0.5), (0.5, -0.5, 0.5), (0, 0, 1))
AT = ((1, 1, 1, 0), (0, 1, -1, -1))
SIGNATURES = {"in": ("ptr", "i64", "i64", "i64", "i64", "i64", "i64", "i64", "i64", "ptr", "i64", "ptr", "i64"),
              "mm": ("i64", "i64", "ptr", "ptr", "i64", "ptr", "i64", "i64", "ptr", "i64", "ptr"),
              "out": ("ptr", "i64", "i64", "i64", "i64", "i64", "ptr", "i64", "i64", "i64", "i64", "ptr", "ptr", "ptr",
                      "T", "T", "ptr", "i64", "ptr", "i64", "i64", "i64", "i64", "i64", "ptr")}


def _intrinsics(t: str, w: int) -> tuple:
    vt = f"<{w} x {t}>"
    sfx = f"v{w}f{32 if t == 'float' else 64}"
    mload, mstore = f"@llvm.masked.load.{sfx}.p0{sfx}", f"@llvm.masked.store.{sfx}.p0{sfx}"
    return vt, mload, mstore, [f"declare {vt} {mload}({vt}*, i32, <{w} x i1>, {vt})",
                               f"declare void {mstore}({vt}, {vt}*, i32, <{w} x i1>)"]


def _splat(L, name: str, ty: str, w: int, value: str) -> None:
    L(f"  %{name}b = insertelement <{w} x {ty}> undef, {ty} {value}, i32 0")
    L(f"  %{name} = shufflevector <{w} x {ty}> %{name}b, <{w} x {ty}> undef, <{w} x i32> zeroinitializer")


def _lanes_below(L, name: str, w: int, first: str, limit: str) -> None:
    """%{name}: lanes l with first + l < limit (i64 scalars)."""
    iota = "<" + ", ".join(f"i64 {x}" for x in range(w)) + ">"
    _splat(L, f"{name}f", "i64", w, first)
    _splat(L, f"{name}n", "i64", w, limit)
    L(f"  %{name}i = add <{w} x i64> %{name}f, {iota}")
    L(f"  %{name} = icmp slt <{w} x i64> %{name}i, %{name}n")


def _vptr(L, name: str, t: str, vt: str, base: str, off: str) -> str:
    """%{name}: a vector pointer at element ``off`` of ``base`` (a t*)."""
    L(f"  %{name}e = getelementptr {t}, {t}* {base}, i64 {off}")
    L(f"  %{name} = bitcast {t}* %{name}e to {vt}*")
    return f"%{name}"


def _tile_loop(L) -> None:
    """From block %tyb into the loop over a tile row's w tiles at a time: %tx from 0 while < %tw, the
    body at %txb (which steps %txn and branches back to %txl), left at %txd."""
    L("  br label %txl")
    L("txl:")
    L("  %tx = phi i64 [ 0, %tyb ], [ %txn, %txb ]")
    L("  %txc = icmp slt i64 %tx, %tw")
    L("  br i1 %txc, label %txb, label %txd")
    L("txb:")


def _combine(L, vt: str, out: str, rows: tuple, ins: list) -> list:
    """Vectors ``%{out}{r}_k`` = sum_k rows[r][k] * ins[k] for coefficients 0, 1 or -1 (every row of
    BT and AT has a 1): from its first term of coefficient 1, then adds and subtracts in k order."""
    res = []
    for r, coef in enumerate(rows):
        first = coef.index(1)
        acc = ins[first]
        for k, cf in enumerate(coef):
            if cf == 0 or k == first:
                continue
            L(f"  %{out}{r}_{k} = {'fadd' if cf == 1 else 'fsub'} {vt} {acc}, {ins[k]}")
            acc = f"%{out}{r}_{k}"
        res.append(acc)
    return res


def ir_in(features: str, dtype: str = "float32", name: str = "msvm_wino_in") -> str:
    """The input transform (module docstring): per channel, tile row and w tiles of it, the 4 x 4
    patches' rows as the even and odd columns of three masked loads, then V = B^T d B."""
    t = TYPES[dtype]
    w = vec_width(features, t)
    vt, mload, mstore, lines = _intrinsics(t, w)
    L = lines.append
    even = "<" + ", ".join(f"i32 {2 * x}" for x in range(w)) + ">"
    odd = "<" + ", ".join(f"i32 {2 * x + 1}" for x in range(w)) + ">"
    next0 = "<" + ", ".join(f"i32 {x + 1}" for x in range(w)) + ">"                    # lanes 1.. and L2[0]
    next1 = "<" + ", ".join(f"i32 {x + 1 if x + 1 < w else w + 1}" for x in range(w)) + ">"   # ... and L2[1]
    two = "<" + ", ".join(f"i1 {1 if x < 2 else 0}" for x in range(w)) + ">"
    L(f"define void @{name}({t}* noalias %x, i64 %c0, i64 %c1, i64 %H, i64 %W, i64 %pt, i64 %pl, i64 %th, "
      f"i64 %tw, {t}* noalias %V, i64 %vs, i64* noalias %flag, i64 %force) nounwind {{")
    L("entry:")
    L(f"  %badp = alloca <{w} x i1>")
    L(f"  store <{w} x i1> zeroinitializer, <{w} x i1>* %badp")
    L("  %T = mul i64 %th, %tw")
    L("  %HW = mul i64 %H, %W")
    for xi in range(XI):
        L(f"  %vx{xi} = mul i64 %vs, {xi}")
    L("  br label %cl")
    L("cl:")
    L("  %c = phi i64 [ %c0, %entry ], [ %cn, %cd ]")
    L("  %cc = icmp slt i64 %c, %c1")
    L("  br i1 %cc, label %cb, label %done")
    L("cb:")
    L("  %xo = mul i64 %c, %HW")
    L(f"  %xc = getelementptr {t}, {t}* %x, i64 %xo")
    L("  %vo = mul i64 %c, %T")
    L(f"  %vc = getelementptr {t}, {t}* %V, i64 %vo")
    L("  br label %tyl")
    L("tyl:")
    L("  %ty = phi i64 [ 0, %cb ], [ %tyn, %txd ]")
    L("  %tyc = icmp slt i64 %ty, %th")
    L("  br i1 %tyc, label %tyb, label %cd")
    L("tyb:")
    L("  %y2 = shl i64 %ty, 1")
    L("  %y0 = sub i64 %y2, %pt")
    for i in range(4):
        L(f"  %y{i}r = add i64 %y0, {i}")
        L(f"  %ok{i}a = icmp sge i64 %y{i}r, 0")
        L(f"  %ok{i}b = icmp slt i64 %y{i}r, %H")
        L(f"  %ok{i} = and i1 %ok{i}a, %ok{i}b")
        L(f"  %ro{i} = mul i64 %y{i}r, %W")
    L("  %tro = mul i64 %ty, %tw")
    _tile_loop(L)
    L("  %b2 = shl i64 %tx, 1")
    L("  %base = sub i64 %b2, %pl")
    d = {}
    for k in range(3):
        L(f"  %cs{k} = add i64 %base, {k * w}")
        _lanes_below(L, f"hi{k}", w, f"%cs{k}", "%W")
        L(f"  %lo{k} = icmp sge <{w} x i64> %hi{k}i, zeroinitializer")
        L(f"  %in{k} = and <{w} x i1> %hi{k}, %lo{k}")
    L(f"  %in2t = and <{w} x i1> %in2, {two}")       # (the third load: two columns)
    for i in range(4):
        for k in range(3):
            L(f"  %m{i}_{k} = select i1 %ok{i}, <{w} x i1> %in{k}{'t' if k == 2 else ''}, <{w} x i1> zeroinitializer")
            L(f"  %po{i}_{k} = add i64 %ro{i}, %cs{k}")
            L(f"  %p{i}_{k} = getelementptr {t}, {t}* %xc, i64 %po{i}_{k}")
            L(f"  %q{i}_{k} = bitcast {t}* %p{i}_{k} to {vt}*")
            L(f"  %l{i}_{k} = call {vt} {mload}({vt}* %q{i}_{k}, i32 4, <{w} x i1> %m{i}_{k}, {vt} zeroinitializer)")
        L(f"  %d{i}_0 = shufflevector {vt} %l{i}_0, {vt} %l{i}_1, <{w} x i32> {even}")
        L(f"  %d{i}_1 = shufflevector {vt} %l{i}_0, {vt} %l{i}_1, <{w} x i32> {odd}")
        L(f"  %d{i}_2 = shufflevector {vt} %d{i}_0, {vt} %l{i}_2, <{w} x i32> {next0}")
        L(f"  %d{i}_3 = shufflevector {vt} %d{i}_1, {vt} %l{i}_2, <{w} x i32> {next1}")
        # the row's B^T d^T: its four columns combined
        d[i] = _combine(L, vt, f"r{i}_", BT, [f"%d{i}_{j}" for j in range(4)])
    _lanes_below(L, "lm", w, "%tx", "%tw")
    L("  %to = add i64 %tro, %tx")
    vs = []
    for j in range(4):
        col = _combine(L, vt, f"v{j}_", BT, [d[i][j] for i in range(4)])
        vs += col
        for a in range(4):
            xi = 4 * a + j
            L(f"  %so{xi} = add i64 %vx{xi}, %to")
            q = _vptr(L, f"sq{xi}", t, vt, "%vc", f"%so{xi}")
            L(f"  call void {mstore}({vt} {col[a]}, {vt}* {q}, i32 4, <{w} x i1> %lm)")
    # (a non-finite V, from an inf or NaN in the image or an overflow, sets the flag: their sum times 0 is NaN)
    acc = vs[0]
    for k, v in enumerate(vs[1:]):
        L(f"  %vsum{k} = fadd {vt} {acc}, {v}")
        acc = f"%vsum{k}"
    L(f"  %vz = fmul {vt} {acc}, zeroinitializer")
    L(f"  %vu = fcmp uno {vt} %vz, %vz")
    L(f"  %bad0 = load <{w} x i1>, <{w} x i1>* %badp")
    L(f"  %bad1 = or <{w} x i1> %bad0, %vu")
    L(f"  store <{w} x i1> %bad1, <{w} x i1>* %badp")
    L(f"  %txn = add i64 %tx, {w}")
    L("  br label %txl")
    L("txd:")
    L("  %tyn = add i64 %ty, 1")
    L("  br label %tyl")
    L("cd:")
    L("  %cn = add i64 %c, 1")
    L("  br label %cl")
    L("done:")
    L(f"  %badv = load <{w} x i1>, <{w} x i1>* %badp")
    L(f"  %bad = call i1 @llvm.vector.reduce.or.v{w}i1(<{w} x i1> %badv)")
    L("  %badi = zext i1 %bad to i64")
    L("  %badf = or i64 %badi, %force")
    L("  store i64 %badf, i64* %flag")
    L("  ret void")
    L("}")
    L(f"declare i1 @llvm.vector.reduce.or.v{w}i1(<{w} x i1>)")
    return "\n".join(lines) + "\n"


def _flagged(L, head: str) -> None:
    """%bad: any of the nf flags the input transforms wrote is set."""
    L(f"  br label %fl{head}")
    L(f"fl{head}:")
    L(f"  %fi = phi i64 [ 0, %{head} ], [ %fin, %fb ]")
    L("  %fa = phi i1 [ false, %" + head + " ], [ %fan, %fb ]")
    L("  %fc = icmp slt i64 %fi, %nf")
    L("  br i1 %fc, label %fb, label %fd")
    L("fb:")
    L("  %fp = getelementptr i64, i64* %flags, i64 %fi")
    L("  %fv = load i64, i64* %fp")
    L("  %fs = icmp ne i64 %fv, 0")
    L("  %fan = or i1 %fa, %fs")
    L("  %fin = add i64 %fi, 1")
    L(f"  br label %fl{head}")
    L("fd:")
    L("  %bad = or i1 %fa, false")


def ir_mm(features: str, dtype: str = "float32", name: str = "msvm_wino_mm") -> str:
    """The 16 products over the panels [j0, j1), per panel: gemm_cout (``ir_cout``, as ``{name}_c``) once
    per xi on that one panel, reading the panel's U [C][nr] of each xi. Where the scratch S is given, Gp
    is the packed weight (``pack_weight``) and each panel's U [16][C][nr] is transformed into S first
    (``{name}_u``: G g G^T), gemm_cout reading S with its base moved back by j panels (so that its panel
    offset lands on S); where S is null, Gp is U itself ([16][panels][C][nr], ``transform_weight``)."""
    t = TYPES[dtype]
    w = vec_width(features, t)
    nr = 2 * w
    text = ir_cout(features, dtype, f"{name}_c") + _ir_transform(t, w, f"{name}_u")
    lines = []
    L = lines.append
    L(f"define void @{name}(i64 %o, i64 %ci, {t}* noalias %Gp, {t}* noalias %V, i64 %T, {t}* noalias %M, "
      f"i64 %j0, i64 %j1, i64* noalias %flags, i64 %nf, {t}* noalias %S) nounwind {{")
    L("entry:")
    L("  %tap = alloca i64")
    L("  store i64 0, i64* %tap")
    _flagged(L, "entry")
    L("  br i1 %bad, label %done, label %go")
    L("go:")
    L(f"  %pre = icmp eq {t}* %S, null")
    L(f"  %us = mul i64 %ci, {nr}")              # (one xi's panel: C x nr)
    L("  %gs = mul i64 %us, 9")                 # (one panel of the packed weight: C x 9 x nr)
    L(f"  %pn0 = add i64 %o, {nr - 1}")
    L(f"  %pn = udiv i64 %pn0, {nr}")
    L("  %ua = mul i64 %pn, %us")               # (one xi of U: every panel)
    L("  %vs = mul i64 %ci, %T")
    L("  %ms = mul i64 %o, %T")
    L("  br label %jl")
    L("jl:")
    L("  %j = phi i64 [ %j0, %go ], [ %jn, %xd ]")
    L("  %jc = icmp slt i64 %j, %j1")
    L("  br i1 %jc, label %jb, label %done")
    L("jb:")
    L("  %back = mul i64 %j, %us")
    L("  br i1 %pre, label %xl, label %jt")
    L("jt:")
    L("  %go0 = mul i64 %j, %gs")
    L(f"  %gp = getelementptr {t}, {t}* %Gp, i64 %go0")
    L(f"  call void @{name}_u({t}* %gp, {t}* %S, i64 %ci)")
    L("  br label %xl")
    L("xl:")
    L("  %xi = phi i64 [ 0, %jb ], [ 0, %jt ], [ %xn, %xb ]")
    L(f"  %xc = icmp slt i64 %xi, {XI}")
    L("  br i1 %xc, label %xb, label %xd")
    L("xb:")
    L("  %uq = mul i64 %xi, %ua")
    L("  %uo0 = mul i64 %xi, %us")
    L("  %ut = sub i64 %uo0, %back")
    L("  %uo = select i1 %pre, i64 %uq, i64 %ut")
    L(f"  %ub = select i1 %pre, {t}* %Gp, {t}* %S")
    L(f"  %up = getelementptr {t}, {t}* %ub, i64 %uo")
    for s_, base, stride in (("v", "V", "vs"), ("m", "M", "ms")):
        L(f"  %{s_}o = mul i64 %xi, %{stride}")
        L(f"  %{s_}p = getelementptr {t}, {t}* %{base}, i64 %{s_}o")
    L("  %j1p = add i64 %j, 1")
    inf = "0x7FF0000000000000"
    L(f"  call void @{name}_c(i64 %o, i64 %ci, i64 1, i64* %tap, {t}* %up, {t}* %vp, i64 %T, i64 1, i64 %T, "
      f"i64 %T, {t}* %mp, i64 %T, i64 %j, i64 %j1p, i64 0, {t}* null, {t}* null, {t}* null, {t} 0xFFF0000000000000, "
      f"{t} {inf})")
    L("  %xn = add i64 %xi, 1")
    L("  br label %xl")
    L("xd:")
    L("  %jn = add i64 %j, 1")
    L("  br label %jl")
    L("done:")
    L("  ret void")
    L("}")
    return text + "\n".join(lines) + "\n"


def _ir_transform(t: str, w: int, name: str) -> str:
    """``void name(t* g, t* S, i64 C)``: one panel's U = G g G^T, S[xi][c][lane] for its nr = 2w output
    channels (lanes), from g [C][9][nr] (``pack_weight``): per channel and half-panel vector, the
    kernel's rows combined by G (t0, (t0 + t2 + t1) / 2, (t0 + t2 - t1) / 2, t2), then each result's
    columns the same way; the same operations in the same order as ``transform_weight``, so the same
    bits."""
    vt = f"<{w} x {t}>"
    nr, isz = 2 * w, 4 if t == "float" else 8
    lines = []
    L = lines.append
    L(f"define internal void @{name}({t}* noalias %g, {t}* noalias %S, i64 %ci) nounwind {{")
    L("entry:")
    _splat(L, "half", t, w, "0x3FE0000000000000")
    L(f"  %xs = mul i64 %ci, {nr}")              # (one xi of S)
    L("  br label %cl")
    L("cl:")
    L("  %c = phi i64 [ 0, %entry ], [ %cn, %cb ]")
    L("  %cc = icmp slt i64 %c, %ci")
    L("  br i1 %cc, label %cb, label %done")
    L("cb:")
    L(f"  %gc = mul i64 %c, {9 * nr}")
    L(f"  %sc = mul i64 %c, {nr}")
    for hv in range(2):
        g = {}
        for k in range(9):
            L(f"  %o{hv}_{k} = add i64 %gc, {k * nr + hv * w}")
            q = _vptr(L, f"q{hv}_{k}", t, vt, "%g", f"%o{hv}_{k}")
            L(f"  %g{hv}_{k} = load {vt}, {vt}* {q}, align {isz}")
            g[k] = f"%g{hv}_{k}"

        def grows(pre, r0, r1, r2):
            """G over three vectors: [r0, (r0 + r2 + r1) * 1/2, (r0 + r2 - r1) * 1/2, r2]."""
            L(f"  %{pre}s = fadd {vt} {r0}, {r2}")
            L(f"  %{pre}a = fadd {vt} %{pre}s, {r1}")
            L(f"  %{pre}b = fsub {vt} %{pre}s, {r1}")
            L(f"  %{pre}1 = fmul {vt} %{pre}a, %half")
            L(f"  %{pre}2 = fmul {vt} %{pre}b, %half")
            return [r0, f"%{pre}1", f"%{pre}2", r2]
        cols = [grows(f"r{hv}_{jj}_", g[jj], g[3 + jj], g[6 + jj]) for jj in range(3)]    # G over the rows, per column
        for a in range(4):
            u = grows(f"u{hv}_{a}_", cols[0][a], cols[1][a], cols[2][a])                  # then over the columns
            for b in range(4):
                xi = 4 * a + b
                L(f"  %so{hv}_{xi}_a = mul i64 %xs, {xi}")
                L(f"  %so{hv}_{xi}_b = add i64 %so{hv}_{xi}_a, %sc")
                L(f"  %so{hv}_{xi} = add i64 %so{hv}_{xi}_b, {hv * w}")
                q = _vptr(L, f"sq{hv}_{xi}", t, vt, "%S", f"%so{hv}_{xi}")
                L(f"  store {vt} {u[b]}, {vt}* {q}, align {isz}")
    L("  %cn = add i64 %c, 1")
    L("  br label %cl")
    L("done:")
    L("  ret void")
    L("}")
    return "\n".join(lines) + "\n"


def ir_out(features: str, dtype: str = "float32", name: str = "msvm_wino_out") -> str:
    """The output transform (module docstring): per channel, tile row and w tiles of it, Y = A^T M A,
    each output row's two pixels of a tile interleaved into place, the epilogue, a masked store."""
    t = TYPES[dtype]
    w = vec_width(features, t)
    vt, mload, mstore, lines = _intrinsics(t, w)
    L = lines.append
    half = w // 2
    lo_half = "<" + ", ".join(f"i32 {x // 2 + (w if x % 2 else 0)}" for x in range(w)) + ">"
    hi_half = "<" + ", ".join(f"i32 {half + x // 2 + (w if x % 2 else 0)}" for x in range(w)) + ">"
    L(f"define void @{name}({t}* noalias %M, i64 %ms, i64 %o0, i64 %o1, i64 %th, i64 %tw, {t}* noalias %Y, i64 %H, "
      f"i64 %W, i64 %ys, i64 %hasb0, {t}* %scale, {t}* %bias, {t}* %res, {t} %lo, {t} %hi, i64* noalias %flags, i64 %nf, "
      f"{t}* noalias %x, i64 %C, i64 %Hin, i64 %Win, i64 %pt, i64 %pl, {t}* noalias %wd) nounwind {{")
    L("entry:")
    _flagged(L, "entry")
    # (M null: the whole map's check after its blocks, conv.TapsConv._run_wino: the direct sum where a flag
    # is set, else nothing)
    L(f"  %mnull = icmp eq {t}* %M, null")
    L("  %good = xor i1 %bad, true")
    L("  %skip = and i1 %mnull, %good")
    L("  br i1 %skip, label %done, label %go")
    L("go:")
    L("  %T = mul i64 %th, %tw")
    L("  %hasb = icmp ne i64 %hasb0, 0")
    L(f"  %hasr = icmp ne {t}* %res, null")
    _splat(L, "lov", t, w, "%lo")
    _splat(L, "hiv", t, w, "%hi")
    for xi in range(XI):
        L(f"  %mx{xi} = mul i64 %ms, {xi}")
    L("  br label %ol")
    L("ol:")
    L("  %o = phi i64 [ %o0, %go ], [ %on, %od ]")
    L("  %oc = icmp slt i64 %o, %o1")
    L("  br i1 %oc, label %ob, label %done")
    L("ob:")
    L("  %mo = mul i64 %o, %T")
    L(f"  %mc = getelementptr {t}, {t}* %M, i64 %mo")
    L("  %yo = mul i64 %o, %ys")
    L(f"  %sp = getelementptr {t}, {t}* %scale, i64 %o")
    L(f"  %bp = getelementptr {t}, {t}* %bias, i64 %o")
    L("  br i1 %hasb, label %ld, label %nold")
    L("ld:")
    L(f"  %s1 = load {t}, {t}* %sp")
    L(f"  %b1 = load {t}, {t}* %bp")
    L("  br label %nold")
    L("nold:")
    L(f"  %s = phi {t} [ %s1, %ld ], [ 1.0, %ob ]")
    L(f"  %b = phi {t} [ %b1, %ld ], [ 0.0, %ob ]")
    _splat(L, "sv", t, w, "%s")
    _splat(L, "bv", t, w, "%b")
    L("  br i1 %bad, label %dir, label %tyl")
    L("dir:")
    L("  %wdo0 = mul i64 %o, %C")
    L("  %wdo = mul i64 %wdo0, 9")
    L(f"  %wdc = getelementptr {t}, {t}* %wd, i64 %wdo")
    L(f"  %ydc = getelementptr {t}, {t}* %Y, i64 %yo")
    L(f"  %rdc = getelementptr {t}, {t}* %res, i64 %yo")
    L(f"  call void @{name}_d({t}* %x, i64 %C, i64 %Hin, i64 %Win, i64 %pt, i64 %pl, {t}* %wdc, i64 %H, i64 %W, "
      f"{t}* %ydc, i1 %hasb, {vt} %sv, {vt} %bv, i1 %hasr, {t}* %rdc, {vt} %lov, {vt} %hiv)")
    L("  br label %od")
    L("tyl:")
    L("  %ty = phi i64 [ 0, %nold ], [ %tyn, %txd ]")
    L("  %tyc = icmp slt i64 %ty, %th")
    L("  br i1 %tyc, label %tyb, label %od")
    L("tyb:")
    L("  %tro = mul i64 %ty, %tw")
    L("  %y0 = shl i64 %ty, 1")
    for a in range(2):
        L(f"  %y{a}r = add i64 %y0, {a}")
        L(f"  %ok{a} = icmp slt i64 %y{a}r, %H")
        L(f"  %yo{a}a = mul i64 %y{a}r, %W")
        L(f"  %yo{a} = add i64 %yo{a}a, %yo")
    _tile_loop(L)
    _lanes_below(L, "lm", w, "%tx", "%tw")
    L("  %to = add i64 %tro, %tx")
    m = {}
    for xi in range(XI):
        L(f"  %mo{xi} = add i64 %mx{xi}, %to")
        L(f"  %mp{xi} = getelementptr {t}, {t}* %mc, i64 %mo{xi}")
        L(f"  %mq{xi} = bitcast {t}* %mp{xi} to {vt}*")
        L(f"  %m{xi} = call {vt} {mload}({vt}* %mq{xi}, i32 4, <{w} x i1> %lm, {vt} zeroinitializer)")
        m[xi] = f"%m{xi}"
    rows = [_combine(L, vt, f"s{i}_", AT, [m[4 * i + j] for j in range(4)]) for i in range(4)]
    ys = [_combine(L, vt, f"y{j}_", AT, [rows[i][j] for i in range(4)]) for j in range(2)]   # ys[b][a]
    L("  %x0 = shl i64 %tx, 1")
    for a in range(2):
        for k, mask in enumerate((lo_half, hi_half)):
            tag = f"{a}_{k}"
            L(f"  %z{tag} = shufflevector {vt} {ys[0][a]}, {vt} {ys[1][a]}, <{w} x i32> {mask}")
            L(f"  %xc{tag} = add i64 %x0, {k * w}")
            _lanes_below(L, f"cm{tag}", w, f"%xc{tag}", "%W")
            L(f"  %cr{tag} = select i1 %ok{a}, <{w} x i1> %cm{tag}, <{w} x i1> zeroinitializer")
            L(f"  %rm{tag} = select i1 %hasr, <{w} x i1> %cr{tag}, <{w} x i1> zeroinitializer")
            L(f"  %off{tag} = add i64 %yo{a}, %xc{tag}")
            L(f"  %fs{tag} = fmul {vt} %z{tag}, %sv")         # (a multiply, then an add: gemm's epilogue)
            L(f"  %fb{tag} = fadd {vt} %fs{tag}, %bv")
            L(f"  %g{tag} = select i1 %hasb, {vt} %fb{tag}, {vt} %z{tag}")
            L(f"  %rp{tag} = getelementptr {t}, {t}* %res, i64 %off{tag}")
            L(f"  %rq{tag} = bitcast {t}* %rp{tag} to {vt}*")
            L(f"  %rl{tag} = call {vt} {mload}({vt}* %rq{tag}, i32 4, <{w} x i1> %rm{tag}, {vt} zeroinitializer)")
            L(f"  %gr{tag} = fadd {vt} %g{tag}, %rl{tag}")
            L(f"  %h{tag} = select i1 %hasr, {vt} %gr{tag}, {vt} %g{tag}")
            clamp(L, w, vt, tag)
            L(f"  %cp{tag} = getelementptr {t}, {t}* %Y, i64 %off{tag}")
            L(f"  %cq{tag} = bitcast {t}* %cp{tag} to {vt}*")
            L(f"  call void {mstore}({vt} %hn{tag}, {vt}* %cq{tag}, i32 4, <{w} x i1> %cr{tag})")
    L(f"  %txn = add i64 %tx, {w}")
    L("  br label %txl")
    L("txd:")
    L("  %tyn = add i64 %ty, 1")
    L("  br label %tyl")
    L("od:")
    L("  %on = add i64 %o, 1")
    L("  br label %ol")
    L("done:")
    L("  ret void")
    L("}")
    _direct(L, name, t, w, vt, mload, mstore)
    return "\n".join(lines) + "\n"


def _direct(L, name, t, w, vt, mload, mstore) -> None:
    """@{name}_d: one output channel of the convolution itself (where an input transform flagged a
    non-finite value, whose Winograd transforms would spread it as NaN over its tiles where the direct
    sum gives inf, or NaN over fewer pixels): per output row and w pixels of it, every channel's 9
    taps (masked loads: zero past the borders), a multiply and an add each, then the epilogue."""
    L(f"define internal void @{name}_d({t}* noalias %x, i64 %C, i64 %H, i64 %W, i64 %pt, i64 %pl, {t}* noalias %wd, "
      f"i64 %ho, i64 %wo, {t}* noalias %Y, i1 %hasb, {vt} %sv, {vt} %bv, i1 %hasr, {t}* %res, {vt} %lov, "
      f"{vt} %hiv) nounwind {{")
    L("entry:")
    L("  %HW = mul i64 %H, %W")
    L("  br label %yl")
    L("yl:")
    L("  %oy = phi i64 [ 0, %entry ], [ %oyn, %xd ]")
    L("  %yc = icmp slt i64 %oy, %ho")
    L("  br i1 %yc, label %yb, label %done")
    L("yb:")
    L("  %iyb = sub i64 %oy, %pt")
    L("  br label %xl")
    L("xl:")
    L("  %ox = phi i64 [ 0, %yb ], [ %oxn, %st ]")
    L("  %xc = icmp slt i64 %ox, %wo")
    L("  br i1 %xc, label %xb, label %xd")
    L("xb:")
    _lanes_below(L, "om", w, "%ox", "%wo")
    L("  %ix0 = sub i64 %ox, %pl")
    for kx in range(3):
        L(f"  %ix{kx}s = add i64 %ix0, {kx}")
        _lanes_below(L, f"ih{kx}", w, f"%ix{kx}s", "%W")
        L(f"  %il{kx} = icmp sge <{w} x i64> %ih{kx}i, zeroinitializer")
        L(f"  %im{kx}a = and <{w} x i1> %ih{kx}, %il{kx}")
        L(f"  %im{kx} = and <{w} x i1> %im{kx}a, %om")
    L("  br label %cl")
    L("cl:")
    L("  %c = phi i64 [ 0, %xb ], [ %cn, %cb ]")
    L(f"  %acc = phi {vt} [ zeroinitializer, %xb ], [ %acc9, %cb ]")
    L("  %cc = icmp slt i64 %c, %C")
    L("  br i1 %cc, label %cb, label %st")
    L("cb:")
    L("  %xo = mul i64 %c, %HW")
    L("  %wo9 = mul i64 %c, 9")
    acc = "%acc"
    for ky in range(3):
        L(f"  %iy{ky} = add i64 %iyb, {ky}")
        L(f"  %yok{ky}a = icmp sge i64 %iy{ky}, 0")
        L(f"  %yok{ky}b = icmp slt i64 %iy{ky}, %H")
        L(f"  %yok{ky} = and i1 %yok{ky}a, %yok{ky}b")
        L(f"  %ro{ky}0 = mul i64 %iy{ky}, %W")
        L(f"  %ro{ky} = add i64 %ro{ky}0, %xo")
        for kx in range(3):
            tag = f"{ky}{kx}"
            L(f"  %m{tag} = select i1 %yok{ky}, <{w} x i1> %im{kx}, <{w} x i1> zeroinitializer")
            L(f"  %po{tag} = add i64 %ro{ky}, %ix{kx}s")
            L(f"  %p{tag} = getelementptr {t}, {t}* %x, i64 %po{tag}")
            L(f"  %q{tag} = bitcast {t}* %p{tag} to {vt}*")
            L(f"  %l{tag} = call {vt} {mload}({vt}* %q{tag}, i32 4, <{w} x i1> %m{tag}, {vt} zeroinitializer)")
            L(f"  %wi{tag} = add i64 %wo9, {ky * 3 + kx}")
            L(f"  %wp{tag} = getelementptr {t}, {t}* %wd, i64 %wi{tag}")
            L(f"  %ws{tag} = load {t}, {t}* %wp{tag}")
            _splat(L, f"wv{tag}", t, w, f"%ws{tag}")
            L(f"  %f{tag} = fmul {vt} %l{tag}, %wv{tag}")
            nxt = "%acc9" if ky == kx == 2 else f"%a{tag}"
            L(f"  {nxt} = fadd {vt} {acc}, %f{tag}")
            acc = nxt
    L("  %cn = add i64 %c, 1")
    L("  br label %cl")
    L("st:")
    L("  %oo0 = mul i64 %oy, %wo")
    L("  %oo = add i64 %oo0, %ox")
    L(f"  %fs = fmul {vt} %acc, %sv")
    L(f"  %fb = fadd {vt} %fs, %bv")
    L(f"  %g = select i1 %hasb, {vt} %fb, {vt} %acc")
    L(f"  %rm = select i1 %hasr, <{w} x i1> %om, <{w} x i1> zeroinitializer")
    L(f"  %rp = getelementptr {t}, {t}* %res, i64 %oo")
    L(f"  %rq = bitcast {t}* %rp to {vt}*")
    L(f"  %rl = call {vt} {mload}({vt}* %rq, i32 4, <{w} x i1> %rm, {vt} zeroinitializer)")
    L(f"  %gr = fadd {vt} %g, %rl")
    L(f"  %h = select i1 %hasr, {vt} %gr, {vt} %g")
    clamp(L, w, vt, "")
    L(f"  %cp = getelementptr {t}, {t}* %Y, i64 %oo")
    L(f"  %cq = bitcast {t}* %cp to {vt}*")
    L(f"  call void {mstore}({vt} %hn, {vt}* %cq, i32 4, <{w} x i1> %om)")
    L(f"  %oxn = add i64 %ox, {w}")
    L("  br label %xl")
    L("xd:")
    L("  %oyn = add i64 %oy, 1")
    L("  br label %yl")
    L("done:")
    L("  ret void")
    L("}")


@dataclass(frozen=True)
class WinoGemm:
    """The kernel-cache entry of one of this module's functions (one per dtype and target): ``part``
    "in", "mm" or "out" (module docstring)."""
    dtype: str
    part: str = "mm"

    kind = "gemm"
    opt_level = 3

    @property
    def name(self) -> str:
        return f"wino_{self.part}"

    def text(self) -> str:
        return f"wino_{self.part} v{VERSION} dtype={self.dtype}"

    def lower(self, name: str, features: str) -> str:
        return {"in": ir_in, "mm": ir_mm, "out": ir_out}[self.part](features, self.dtype, name)


@functools.lru_cache(maxsize=64)      # (every caller at a new shape asks: the entry is hashed)
def function(dtype: str, part: str):
    """ctypes function of ``part`` (WinoGemm) for dtype, compiled (or loaded from the kernel cache)
    once per process."""
    from .build import kernel_function
    from .kir import dtype_name

    return kernel_function(WinoGemm(dtype_name(dtype), part), f"WINO_{part.upper()}", SIGNATURES[part])


def tiles(ho: int, wo: int) -> tuple:
    """(th, tw): the 2x2 tiles covering an ho x wo result."""
    return -(-ho // 2), -(-wo // 2)


def transform_weight(w: np.ndarray, nr: int) -> np.ndarray:
    """U = G g G^T of the weight w [O, C, 3, 3], each of its 16 points [O, C] packed for gemm_cout
    (gemm.pack's layout: [ceil(O/nr)][C][nr], zero past O), as one array [16][ceil(O/nr)][C][nr], made
    per block of WEIGHT_BLOCK channels (their taps transposed to [C][3][3][O] there, in cache). With
    G's halves and sums in the weight's dtype: its rounding is the transform's own. (On small pages:
    a huge page's first touch waited 40 ms for the kernel's compaction in some calls, in a first call
    at a new size.)"""
    o, c = w.shape[:2]
    panels, full = -(-o // nr), o // nr
    u = np.empty((XI, panels, c, nr), w.dtype)
    if o % nr:
        u[:, full, :, o % nr:] = 0
    half = w.dtype.type(0.5)
    for c0 in range(0, c, WEIGHT_BLOCK):
        c1 = min(c, c0 + WEIGHT_BLOCK)
        wt = np.ascontiguousarray(w[:, c0:c1].reshape(o, -1).T).reshape(c1 - c0, 3, 3, o)
        for a, ta in enumerate(_g_rows(wt, 1, half)):           # G over the kernel's rows, then its columns
            for b, plane in enumerate(_g_rows(ta, 1, half)):    # [c1 - c0][O]
                dst = u[4 * a + b, :, c0:c1]
                dst[:full] = plane[:, :full * nr].reshape(c1 - c0, full, nr).transpose(1, 0, 2)
                if full < panels:
                    dst[full, :, :o % nr] = plane[:, full * nr:]
    return u


def pack_weight(w: np.ndarray, nr: int) -> np.ndarray:
    """The weight w [O, C, 3, 3] as the products' transform reads it (``ir_mm``): per panel of nr output
    channels, per channel and tap, the panel's nr weights, [ceil(O/nr)][C][9][nr] (zero past O): the
    weight's own size (U, ``transform_weight``, is 16/9 of it), so the prepared weight is held at the
    size of the Parameter it replaces (its pages spilled) and each call transforms one panel at a time
    into the task's scratch (``conv.TapsConv._run_wino``). It is gemm_cout's packed weight, [ceil(O/nr)][C
    * 9][nr] (gemm.pack of the rows [O, C * 9]), seen per channel and tap: one array serves both routes
    (``conv.prepared_wino``)."""
    o, c = w.shape[:2]
    return pack(w.reshape(o, c * 9), nr, transposed=True).reshape(-(-o // nr), c, 9, nr)


def _g_rows(t: np.ndarray, axis: int, half) -> list:
    """G applied along ``axis`` (of length 3) of t: four arrays, t0, (t0 + t1 + t2) / 2, (t0 - t1 + t2) / 2, t2."""
    t0, t1, t2 = (np.take(t, i, axis=axis) for i in range(3))
    s = t0 + t2
    return [t0, (s + t1) * half, (s - t1) * half, t2]


WEIGHT_BLOCK = 32           # channels per block of transform_weight


def finite(w: np.ndarray) -> bool:
    """Whether the transform of w is finite (every weight finite and below a quarter of the dtype's
    largest: G sums at most 2.25 times a weight)."""
    with np.errstate(invalid="ignore"):
        return bool(np.abs(w).max(initial=0) < np.finfo(w.dtype).max / 4)
