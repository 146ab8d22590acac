"""An image's padded stride phases in native code (issue 18: the k x k convolutions' copy of B).

The taps product and gemm_cout read a k x k convolution's image as its padded stride phases side by
side, each tap a shift in one phase (compiler/conv.py ``TapsConv``, mode "phase"). numpy made them in
~10 passes (zero the borders, one strided copy per phase): ResNet-50's 3x3 layers 37-47 us a call at
stride 1, 220 us for the 3x3 stride 2 at 56x56, the RGB stem 81 us, ~1.1 ms a forward on the caller's
thread while the pool's waited, and a Python copy kept the layer's native calls from being kept
(``conv.Memo``). Here one kernel writes every row of every phase once, borders and tails included:

    phases(c, h, w, sh, sw, pt, pl, hq, wq, row, nph, x*, dst*, c0, c1)
    dst[((a * sw + b) * c + ci) * row + i * wq + j] = x[ci, a + sh * i - pt, b + sw * j - pl]
                                                      (0 past the image's borders and for i * wq + j >= hq * wq)

for the first nph phases a * sw + b (all sh * sw of them; 1: the subsampled image a strided 1x1
convolution reads, ``x[:, ::sh, ::sw]``) and the channels c0 <= ci < c1 (two threads take halves), x
C-contiguous [c, h, w]. At stride 1 without padding, a grid of rows w wide cropped to rows of wq (the
taps product's wider grid into the result). Per destination row,
vectors of the target's width: a masked load (stride 1: lanes past the borders are not read), two and
their even lanes (stride 2) or a masked gather (wider strides), stored whole but for the row's last vector.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from .lower import TYPES, vec_width

VERSION = 3
ARGS = ("i64",) * 11 + ("ptr", "ptr", "i64", "i64")


def ir_phases(features: str, dtype: str = "float32", name: str = "msvm_phases") -> str:
    """The LLVM IR of ``name`` (module docstring)."""
    t = TYPES[dtype]
    w = vec_width(features, t)
    vt, it = f"<{w} x {t}>", f"<{w} x i64>"
    sfx = f"v{w}f{32 if t == 'float' else 64}"
    mload, mstore = f"@llvm.masked.load.{sfx}.p0{sfx}", f"@llvm.masked.store.{sfx}.p0{sfx}"
    gather = f"@llvm.masked.gather.{sfx}.v{w}p0f{32 if t == 'float' else 64}"
    iota = "<" + ", ".join(f"i64 {i}" for i in range(w)) + ">"
    L = [f"declare {vt} {mload}({vt}*, i32, <{w} x i1>, {vt})",
         f"declare void {mstore}({vt}, {vt}*, i32, <{w} x i1>)",
         f"declare {vt} {gather}(<{w} x {t}*>, i32, <{w} x i1>, {vt})"]
    a = L.append

    def splat(dst, val, ty="i64", vty=it):
        a(f"  %{dst}b = insertelement {vty} undef, {ty} {val}, i32 0")
        a(f"  %{dst} = shufflevector {vty} %{dst}b, {vty} undef, <{w} x i32> zeroinitializer")

    a(f"define void @{name}(i64 %c, i64 %h, i64 %w, i64 %sh, i64 %sw, i64 %pt, i64 %pl, i64 %hq, i64 %wq, "
      f"i64 %row, i64 %nph, {t}* noalias %x, {t}* noalias %dst, i64 %c0, i64 %c1) nounwind {{")
    a("entry:")
    a("  %hw = mul i64 %h, %w")
    a("  %grid = mul i64 %hq, %wq")
    a("  %one = icmp eq i64 %sw, 1")
    splat("wv", "%w")
    splat("wqv", "%wq")
    splat("swv", "%sw")
    splat("rowv", "%row")
    a("  br label %pl_")
    a("pl_:")                                    # phase (pa, pb)
    a("  %ph = phi i64 [ 0, %entry ], [ %phn, %cd ]")
    a("  %phc = icmp slt i64 %ph, %nph")
    a("  br i1 %phc, label %pb_, label %done")
    a("pb_:")
    a("  %pa = udiv i64 %ph, %sw")
    a("  %pbm = urem i64 %ph, %sw")
    a("  %col0 = sub i64 %pbm, %pl")              # input column of the phase's column 0
    a("  %phc0 = mul i64 %ph, %c")
    splat("col0v", "%col0")
    a("  br label %cl")
    a("cl:")
    a("  %ci = phi i64 [ %c0, %pb_ ], [ %cin, %il_done ]")
    a("  %cc = icmp slt i64 %ci, %c1")
    a("  br i1 %cc, label %cb, label %cd")
    a("cb:")
    a("  %drow0 = add i64 %phc0, %ci")
    a("  %doff = mul i64 %drow0, %row")
    a(f"  %drow = getelementptr {t}, {t}* %dst, i64 %doff")
    a("  %xoff = mul i64 %ci, %hw")
    a(f"  %xc = getelementptr {t}, {t}* %x, i64 %xoff")
    a("  br label %il")
    a("il:")                                      # destination rows i of the grid, then the tail
    a("  %i = phi i64 [ 0, %cb ], [ %in, %jd ]")
    a("  %ic = icmp slt i64 %i, %hq")
    a("  br i1 %ic, label %ib, label %tail")
    a("ib:")
    a("  %ish = mul i64 %i, %sh")
    a("  %r0 = add i64 %pa, %ish")
    a("  %r = sub i64 %r0, %pt")
    a("  %rok = icmp ult i64 %r, %h")
    a("  %rc = select i1 %rok, i64 %r, i64 0")
    a("  %xro = mul i64 %rc, %w")
    a(f"  %xr = getelementptr {t}, {t}* %xc, i64 %xro")
    a("  %dio = mul i64 %i, %wq")
    a(f"  %di = getelementptr {t}, {t}* %drow, i64 %dio")
    splat("rokv", "%rok", "i1", f"<{w} x i1>")
    a("  br label %jl")
    a("jl:")
    a("  %j = phi i64 [ 0, %ib ], [ %jn, %jnext ]")
    a("  %jc = icmp slt i64 %j, %wq")
    a("  br i1 %jc, label %jb, label %jd")
    a("jb:")                                      # a whole vector inside the image's row: no masks
    a("  %jsc = mul i64 %j, %sw")
    a("  %cs = add i64 %jsc, %col0")
    a(f"  %je = add i64 %j, {w}")
    a("  %swl = mul i64 %sw, " + str(w))
    a("  %ce = add i64 %cs, %swl")
    a("  %f0 = icmp sge i64 %cs, 0")
    a("  %f1 = icmp sle i64 %ce, %w")
    a("  %f2 = icmp sle i64 %je, %wq")
    a("  %f01 = and i1 %f0, %f1")
    a("  %f012 = and i1 %f01, %f2")
    a("  %f3 = and i1 %f012, %rok")
    a("  %fs = icmp ule i64 %sw, 2")
    a("  %full = and i1 %f3, %fs")
    a("  br i1 %full, label %jf, label %jm")
    a("jf:")
    a(f"  %fp = getelementptr {t}, {t}* %xr, i64 %cs")
    a(f"  %fq = bitcast {t}* %fp to {vt}*")
    a(f"  %fv0 = load {vt}, {vt}* %fq, align 4")
    a("  br i1 %one, label %jf1, label %jf2")
    a("jf2:")
    a(f"  %fq1 = getelementptr {vt}, {vt}* %fq, i64 1")
    a(f"  %fv1 = load {vt}, {vt}* %fq1, align 4")
    a(f"  %fve = shufflevector {vt} %fv0, {vt} %fv1, <{w} x i32> <" + ", ".join(f"i32 {2 * i}" for i in range(w)) + ">")
    a("  br label %jf1")
    a("jf1:")
    a(f"  %fv = phi {vt} [ %fv0, %jf ], [ %fve, %jf2 ]")
    a(f"  %fdp = getelementptr {t}, {t}* %di, i64 %j")
    a(f"  %fdq = bitcast {t}* %fdp to {vt}*")
    a(f"  store {vt} %fv, {vt}* %fdq, align 4")
    a("  br label %jnext")
    a("jm:")
    splat("jv", "%j")
    a(f"  %jl_ = add {it} %jv, {iota}")
    a(f"  %inrow = icmp slt {it} %jl_, %wqv")          # (lanes of this row)
    a(f"  %jsw = mul {it} %jl_, %swv")
    a(f"  %col = add {it} %jsw, %col0v")
    a(f"  %cge = icmp sge {it} %col, zeroinitializer")
    a(f"  %clt = icmp slt {it} %col, %wv")
    a(f"  %cin_ = and <{w} x i1> %cge, %clt")
    a(f"  %m0 = and <{w} x i1> %cin_, %inrow")
    a(f"  %m = and <{w} x i1> %m0, %rokv")
    a("  br i1 %one, label %jc1, label %jcs")
    a("jc1:")                                     # stride 1: the columns are contiguous
    a("  %c1o = add i64 %j, %col0")
    a(f"  %c1p = getelementptr {t}, {t}* %xr, i64 %c1o")
    a(f"  %c1q = bitcast {t}* %c1p to {vt}*")
    a(f"  %v1 = call {vt} {mload}({vt}* %c1q, i32 4, <{w} x i1> %m, {vt} zeroinitializer)")
    a("  br label %jst")
    a("jcs:")
    a("  %two = icmp eq i64 %sw, 2")
    a("  br i1 %two, label %jc2, label %jcg")
    a("jc2:")                                     # stride 2: two vectors of the row, their even lanes
    a("  %j2 = mul i64 %j, 2")
    a("  %c2o = add i64 %j2, %col0")
    splat("c2v", "%c2o")
    even = ", ".join(f"i32 {2 * i}" for i in range(w))
    for h_, off in (("lo", "0"), ("hi", str(w))):
        a(f"  %c2{h_}o = add i64 %c2o, {off}")
        a(f"  %c2{h_}l = add {it} %c2v, {iota}")
        a(f"  %c2{h_}c = add {it} %c2{h_}l, <" + ", ".join([f"i64 {off}"] * w) + ">")
        a(f"  %c2{h_}ge = icmp sge {it} %c2{h_}c, zeroinitializer")
        a(f"  %c2{h_}lt = icmp slt {it} %c2{h_}c, %wv")
        a(f"  %c2{h_}in = and <{w} x i1> %c2{h_}ge, %c2{h_}lt")
        a(f"  %c2{h_}m = and <{w} x i1> %c2{h_}in, %rokv")
        a(f"  %c2{h_}p = getelementptr {t}, {t}* %xr, i64 %c2{h_}o")
        a(f"  %c2{h_}q = bitcast {t}* %c2{h_}p to {vt}*")
        a(f"  %v2{h_} = call {vt} {mload}({vt}* %c2{h_}q, i32 4, <{w} x i1> %c2{h_}m, {vt} zeroinitializer)")
    a(f"  %v2 = shufflevector {vt} %v2lo, {vt} %v2hi, <{w} x i32> <{even}>")
    a("  br label %jst")
    a("jcg:")
    a(f"  %ptrs = getelementptr {t}, {t}* %xr, {it} %col")
    a(f"  %vs = call {vt} {gather}(<{w} x {t}*> %ptrs, i32 4, <{w} x i1> %m, {vt} zeroinitializer)")
    a("  br label %jst")
    a("jst:")
    a(f"  %v = phi {vt} [ %v1, %jc1 ], [ %v2, %jc2 ], [ %vs, %jcg ]")
    a(f"  %dp = getelementptr {t}, {t}* %di, i64 %j")
    a(f"  %dq = bitcast {t}* %dp to {vt}*")
    a(f"  call void {mstore}({vt} %v, {vt}* %dq, i32 4, <{w} x i1> %inrow)")
    a("  br label %jnext")
    a("jnext:")
    a(f"  %jn = add i64 %j, {w}")
    a("  br label %jl")
    a("jd:")
    a("  %in = add i64 %i, 1")
    a("  br label %il")
    a("tail:")                                    # [hq * wq, row): zeros (the taps read past the grid)
    a(f"  %tp = getelementptr {t}, {t}* %drow, i64 %grid")
    a("  %tn = sub i64 %row, %grid")
    splat("tnv", "%tn")
    a("  br label %tl")
    a("tl:")
    a("  %k = phi i64 [ 0, %tail ], [ %kn, %tb ]")
    a("  %kc = icmp slt i64 %k, %tn")
    a("  br i1 %kc, label %tb, label %il_done")
    a("tb:")
    splat("kv", "%k")
    a(f"  %kl = add {it} %kv, {iota}")
    a(f"  %km = icmp slt {it} %kl, %tnv")
    a(f"  %kp = getelementptr {t}, {t}* %tp, i64 %k")
    a(f"  %kq = bitcast {t}* %kp to {vt}*")
    a(f"  call void {mstore}({vt} zeroinitializer, {vt}* %kq, i32 4, <{w} x i1> %km)")
    a(f"  %kn = add i64 %k, {w}")
    a("  br label %tl")
    a("il_done:")
    a("  %cin = add i64 %ci, 1")
    a("  br label %cl")
    a("cd:")
    a("  %phn = add i64 %ph, 1")
    a("  br label %pl_")
    a("done:")
    a("  ret void")
    a("}")
    return "\n".join(L) + "\n"


@dataclass(frozen=True)
class PhaseCopy:
    """The kernel-cache entry of ``ir_phases`` (one per dtype and target)."""
    dtype: str

    kind = "gemm"
    opt_level = 3
    name = "phases"

    def text(self) -> str:
        return f"phases v{VERSION} dtype={self.dtype}"

    def lower(self, name: str, features: str) -> str:
        return ir_phases(features, self.dtype, name)


@functools.lru_cache(maxsize=64)      # (every caller at a new shape asks: the entry is hashed)
def function(dtype: str):
    """ctypes ``phases(c, h, w, sh, sw, pt, pl, hq, wq, row, nph, x, dst, c0, c1)`` (``ir_phases``), compiled
    (or loaded from the kernel cache) once per process."""
    from .build import kernel_function
    from .kir import dtype_name

    return kernel_function(PhaseCopy(dtype_name(dtype)), "PHASES", ARGS)
