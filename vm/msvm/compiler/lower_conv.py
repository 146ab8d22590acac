"""Lowering of convolution kernels (compiler/conv.py's kernel IR) to LLVM IR text.

``DepthwiseConv``::

    void @k(i64 start, i64 end, i64 C, i64 H, i64 W, i64 Ho, i64 Wo, i64 pt, i64 pl, i64 lo, i64 hi,
            T* out, T* x, T* w, T* bias, T* zero_row, {T* extra | double scalar} per epilogue input)

For each plane r in [start, end) (image n, channel r % C) and output row oh: the tap rows are
pointers into x, or to the zero row where the row is padding; output columns [0, lo) and the
columns past the vector loops are computed one at a time with padded columns masked to zero;
[lo, hi) by a vector loop of ``width`` lanes and then one of 4 (a strided conv loads stride x
lanes and keeps every stride-th). The sum runs over the taps in the L1 kernel's order (the first
product, then adding each next one; no FMA contraction), then the bias, then the epilogue
(lower.emit_program), with numpy's answers on NaN and inf. L3 passes the same arguments, but
the kernel uses its own constants (``dims``). Its flat form (``lower_flat``, stride 1 with Wo = W on
narrow rows: conv.flat_ok) runs vectors over the whole plane instead of rows, each tap a masked load;
its fifth pointer is then the lane-mask table (conv.flat_masks) in place of the zero row.
"""

from __future__ import annotations

from .callconv import CONV_DIMS as DIMS  # the kernel's shape arguments, in order
from .lower import TYPES, Builder, Unsupported, Vals, avx512, emit_program


def lower_depthwise(k, name: str, features: str) -> str:
    t = TYPES.get(k.dtype)
    if t is None:
        raise Unsupported(f"depthwise kernels in {k.dtype}")
    if k.flat:
        return lower_flat(k, name, t, avx512(features))
    es = 4 if t == "float" else 8
    b = Builder()
    intrinsics: set = set()
    dim, scal = _signature(b, k, t, name, "zrow")
    C, H, W, Ho, Wo, pt, pl, lo, hi = (dim[d] for d in DIMS)
    kh, kw = k.kh, k.kw
    (sh, sw), (dh, dw) = k.stride, k.dilation
    cg = k.cg
    pool = k.reduce == "max"
    xbases, ws, bias = _plane(b, k, t, dim, "row")
    obase = b.op(f"mul i64 %r, {b.op(f'mul i64 {Ho}, {Wo}')}")
    widths = [k.width] + ([4] if k.width > 4 else [])
    splats = {}
    pad = float("-inf") if pool else 0.0      # what a padded tap reads (the L1 kernels pad with it)
    for wd in widths:
        v = Vals(b, t, wd)
        splats[wd] = ([v.splat(x) for x in ws], v.splat(bias) if bias is not None else None,
                      {j: v.splat(s) for j, s in scal.items()})
    b.raw("  br label %row_pre")
    b.raw("row_pre:")
    b.raw("  br label %rowh")
    b.raw("rowh:")
    b.raw("  %oh = phi i64 [ 0, %row_pre ], [ %ohn, %s1_x ]")
    b.raw(f"  %ohc = icmp slt i64 %oh, {Ho}")
    b.raw("  br i1 %ohc, label %row_body, label %row")
    b.raw("row_body:")
    ih0 = b.op(f"sub i64 {b.op(f'mul i64 %oh, {sh}')}, {pt}")
    rows = []                            # per (input channel, tap row): its row, or the zero row
    for xbase in xbases:
        for i in range(kh):
            ih = b.op(f"add i64 {ih0}, {i * dh}")
            valid = b.op(f"icmp ult i64 {ih}, {H}")
            roff = b.op(f"add i64 {xbase}, {b.op(f'mul i64 {ih}, {W}')}")
            p = b.op(f"getelementptr {t}, {t}* %x, i64 {roff}")
            rows.append(b.op(f"select i1 {valid}, {t}* {p}, {t}* %zrow"))
    orow = b.op(f"add i64 {obase}, {b.op(f'mul i64 %oh, {Wo}')}")
    state = {"prev": "row_body"}

    def loop(label, start, cond, step, body):
        """A loop over ow from ``start`` while ``cond(ow)``; returns the exit value of ow."""
        b.raw(f"  br label %{label}_p")
        b.raw(f"{label}_p:")
        b.raw(f"  br label %{label}")
        b.raw(f"{label}:")
        b.raw(f"  %ow_{label} = phi i64 [ {start}, %{label}_p ], [ %own_{label}, %{label}_b ]")
        c = cond(f"%ow_{label}")
        b.raw(f"  br i1 {c}, label %{label}_b, label %{label}_x")
        b.raw(f"{label}_b:")
        body(f"%ow_{label}")
        b.raw(f"  %own_{label} = add i64 %ow_{label}, {step}")
        b.raw(f"  br label %{label}")
        b.raw(f"{label}_x:")
        state["prev"] = f"{label}_x"
        return f"%ow_{label}"

    def finish(v, acc, ow, extras_vec):
        nonlocal intrinsics
        if bias is not None:
            acc = v.bin("fadd", acc, extras_vec[0])
        ins = [acc]
        off = b.op(f"add i64 {orow}, {ow}")
        for j, kind in enumerate(k.kinds):
            if kind == "t":
                p = b.op(f"getelementptr {t}, {t}* %e{j}, i64 {off}")
                if v.w == 1:
                    ins.append(b.op(f"load {t}, {t}* {p}"))
                else:
                    ins.append(b.op(f"load {v.vt}, {v.vt}* {b.op(f'bitcast {t}* {p} to {v.vt}*')}, align {es}"))
            else:
                ins.append(extras_vec[1][j])
        r = emit_program(v, k.program, ins)
        intrinsics |= v.intrinsics
        p = b.op(f"getelementptr {t}, {t}* %out, i64 {off}")
        if v.w == 1:
            b.raw(f"  store {t} {r}, {t}* {p}")
        else:
            b.raw(f"  store {v.vt} {r}, {v.vt}* {b.op(f'bitcast {t}* {p} to {v.vt}*')}, align {es}")

    def combine(v, acc, x, wt):
        """The next tap into the running value: + x * w (conv) or numpy's maximum(acc, x) (max pool)."""
        if wt is None:
            return x if acc is None else v.maximum(acc, x)
        prod = v.bin("fmul", x, wt)
        return prod if acc is None else v.bin("fadd", acc, prod)

    def scalar_body(ow):
        v = Vals(b, t, 1)
        col0 = b.op(f"sub i64 {b.op(f'mul i64 {ow}, {sw}')}, {pl}")
        acc = None
        for q in range(cg * kh):
            for j in range(kw):
                col = b.op(f"add i64 {col0}, {j * dw}")
                inr = b.op(f"icmp ult i64 {col}, {W}")
                colc = b.op(f"select i1 {inr}, i64 {col}, i64 0")
                x = b.op(f"load {t}, {t}* {b.op(f'getelementptr {t}, {t}* {rows[q]}, i64 {colc}')}")
                x = b.op(f"select i1 {inr}, {t} {x}, {t} {v.const(pad)}")
                acc = combine(v, acc, x, ws[q * kw + j] if not pool else None)
        finish(v, acc, ow, (bias, scal))

    def vector_body(wd):
        def body(ow):
            v = Vals(b, t, wd)
            wv, bv, sv = splats[wd]
            col0 = b.op(f"sub i64 {b.op(f'mul i64 {ow}, {sw}')}, {pl}")
            acc = None
            wide = f"<{wd * sw} x {t}>"
            mask = ", ".join(f"i32 {q * sw}" for q in range(wd))
            for q in range(cg * kh):
                for j in range(kw):
                    col = b.op(f"add i64 {col0}, {j * dw}")
                    p = b.op(f"getelementptr {t}, {t}* {rows[q]}, i64 {col}")
                    if sw == 1:
                        x = b.op(f"load {v.vt}, {v.vt}* {b.op(f'bitcast {t}* {p} to {v.vt}*')}, align {es}")
                    else:
                        xw = b.op(f"load {wide}, {wide}* {b.op(f'bitcast {t}* {p} to {wide}*')}, align {es}")
                        x = b.op(f"shufflevector {wide} {xw}, {wide} undef, <{wd} x i32> <{mask}>")
                    acc = combine(v, acc, x, wv[q * kw + j] if not pool else None)
            finish(v, acc, ow, (bv, sv))
        return body

    loop("s0", "0", lambda ow: b.op(f"icmp slt i64 {ow}, {lo}"), 1, scalar_body)
    ow = lo
    for q, wd in enumerate(widths):
        ow = loop(f"v{q}", ow, lambda o, wd=wd: b.op(f"icmp sle i64 {b.op(f'add i64 {o}, {wd}')}, {hi}"),
                  wd, vector_body(wd))
    loop("s1", ow, lambda o: b.op(f"icmp slt i64 {o}, {Wo}"), 1, scalar_body)
    b.raw("  %ohn = add i64 %oh, 1")
    b.raw("  br label %rowh")
    b.raw("row:")
    b.raw("  %rn = add i64 %r, 1")
    b.raw("  br label %plane")
    b.raw("done:")
    b.raw("  ret void")
    b.raw("}")
    return "\n".join(sorted(intrinsics)) + "\n\n" + "\n".join(b.lines) + "\n"


def _signature(b, k, t: str, name: str, aux: str) -> tuple:
    """The define line of a DepthwiseConv kernel (callconv.HEAD["depthwise"]; ``aux`` names the fifth
    pointer: the zero row, or the flat form's lane masks) and its entry block: (its dims by name,
    the L3 kernel's constants or the L2 one's arguments; the epilogue's scalars in T)."""
    params = ["i64 %start", "i64 %end"] + [f"i64 %{d}_a" for d in DIMS]
    params += [f"{t}* noalias %out", f"{t}* noalias %x", f"{t}* noalias %w", f"{t}* noalias %bias",
               f"{t}* noalias %{aux}"]
    for j, kind in enumerate(k.kinds):
        params.append(f"{t}* noalias %e{j}" if kind == "t" else f"double %s{j}")
    b.raw(f"define void @{name}({', '.join(params)}) nounwind {{")
    b.raw("entry:")
    dim = {d: (str(k.dims[q]) if k.dims is not None else f"%{d}_a") for q, d in enumerate(DIMS)}
    scal = {j: (b.op(f"fptrunc double %s{j} to float") if t == "float" else f"%s{j}")
            for j, kind in enumerate(k.kinds) if kind == "s"}
    return dim, scal


def _plane(b, k, t: str, dim: dict, back: str) -> tuple:
    """The loop over the planes %r in [start, end) (``back``: the block that ends a plane's body and
    goes to the next; %rn its successor) and, in its body, (the offsets of the input planes it reads,
    the channel's weights and its bias: scalars of T, no weights for a max pool)."""
    C, H, W = dim["C"], dim["H"], dim["W"]
    cg, og = k.cg, k.og                  # input channels summed per output channel; output channels per group
    b.raw("  br label %plane")
    b.raw("plane:")
    b.raw(f"  %r = phi i64 [ %start, %entry ], [ %rn, %{back} ]")
    b.raw("  %rc = icmp slt i64 %r, %end")
    b.raw("  br i1 %rc, label %plane_body, label %done")
    b.raw("plane_body:")
    ch = b.op(f"urem i64 %r, {C}")
    hw = b.op(f"mul i64 {H}, {W}")
    if cg == og == 1:                    # depthwise (and pooling): the input plane is the output plane
        xbases = [b.op(f"mul i64 %r, {hw}")]
    else:                                # image r / C, input channels (ch / og) * cg + c
        cin = b.op(f"mul i64 {b.op(f'udiv i64 {C}, {og}')}, {cg}")
        image = b.op(f"udiv i64 %r, {C}")
        group = b.op(f"udiv i64 {ch}, {og}")
        first = b.op(f"add i64 {b.op(f'mul i64 {image}, {cin}')}, {b.op(f'mul i64 {group}, {cg}')}")
        xbases = [b.op(f"mul i64 {b.op(f'add i64 {first}, {c}')}, {hw}") for c in range(cg)]
    taps = k.kh * k.kw
    wbase = b.op(f"mul i64 {ch}, {taps * cg}")
    ws = []
    for q in range(taps * cg if k.reduce != "max" else 0):
        wq = b.op(f"getelementptr {t}, {t}* %w, i64 {b.op(f'add i64 {wbase}, {q}')}")
        ws.append(b.op(f"load {t}, {t}* {wq}"))
    bias = b.op(f"load {t}, {t}* {b.op(f'getelementptr {t}, {t}* %bias, i64 {ch}')}") if k.has_bias else None
    return xbases, ws, bias


def lower_flat(k, name: str, t: str, mask_regs: bool = True) -> str:
    """The flat form of ``DepthwiseConv`` (``k.flat``: stride 1, Wo = W, so tap (i, j) of output q = oh * W + ow
    reads input q + (i * dh - pt) * W + (j * dw - pl) of the plane): per plane, vectors of ``k.width``
    consecutive outputs over the whole plane, each tap one masked load at a constant offset. The fifth
    pointer argument is the lane-mask table (conv.flat_masks: per output vector and tap, an i32 whose
    low ``width`` bits say which lanes read inside the plane; masked-off lanes read the padding, 0 or
    -inf), so a 7 x 7 plane is 4 vectors rather than 7 rows of 1 vector lane and 3 scalar columns.
    The same sum in the same order as the row form (and L1), the same bias and epilogue; the last
    vector's lanes past Ho * Wo are neither stored nor read from the epilogue's tensors: it alone
    stores (and reads the epilogue's tensors) masked, every vector before it plainly.

    ``mask_regs``: the target has mask registers (AVX-512), where a tap's bits are its mask as they
    are (a bitcast: one kmov). Without them (AVX2) the bits are tested in a vector (a broadcast,
    an and, a compare): LLVM expanded the bitcast lane by lane into general registers (five scalar
    instructions and an insert per lane, for every tap of every vector) and a masked store of
    every vector is microcoded on AMD Zen. Measured (AMD EPYC Zen 3, one core, MobileNet v2's 3x3
    depthwise layers + batch norm + ReLU6 at L3 in the model, us, flat before / by rows / flat
    now): 384x14x14 2222 / 547 / 526, 192x28x28 2167 / 620 / 425, 576x14x14 1601 / 389 / 354,
    960x7x7 1164 / 726 / 299."""
    es = 4 if t == "float" else 8
    wd = k.width
    b = Builder()
    v = Vals(b, t, wd)
    mload, mstore = f"@llvm.masked.load.{v.suffix}.p0{v.suffix}", f"@llvm.masked.store.{v.suffix}.p0{v.suffix}"
    intrinsics = {f"declare {v.vt} {mload}({v.vt}*, i32, <{wd} x i1>, {v.vt})",
                  f"declare void {mstore}({v.vt}, {v.vt}*, i32, <{wd} x i1>)"}
    dim, scal = _signature(b, k, t, name, "masks0")
    H, W, Ho, Wo, pt, pl = (dim[d] for d in DIMS[1:7])
    masks = b.op(f"bitcast {t}* %masks0 to i32*")
    kh, kw = k.kh, k.kw
    dh, dw = k.dilation
    taps = kh * kw
    pool = k.reduce == "max"
    pad = v.const(float("-inf") if pool else 0.0)
    q_end = b.op(f"mul i64 {Ho}, {Wo}")
    nvec = b.op(f"udiv i64 {b.op(f'add i64 {q_end}, {wd - 1}')}, {wd}")
    offs = []                   # each tap's offset in the plane: (i * dh - pt) * W + j * dw - pl
    for i in range(kh):
        row = b.op(f"mul i64 {b.op(f'sub i64 {i * dh}, {pt}')}, {W}")
        offs += [b.op(f"add i64 {row}, {b.op(f'sub i64 {j * dw}, {pl}')}") for j in range(kw)]
    iota = "<" + ", ".join(f"i64 {q}" for q in range(wd)) + ">"
    ivec, bits = Vals(b, "i32", wd), "<" + ", ".join(f"i32 {1 << q}" for q in range(wd)) + ">"
    nfull = b.op(f"udiv i64 {q_end}, {wd}")             # (vectors whose every lane is an output)
    xbases, ws, bias = _plane(b, k, t, dim, "vdone")
    obase = b.op(f"mul i64 %r, {q_end}")
    ws = [v.splat(x) for x in ws]
    bias = v.splat(bias) if bias is not None else None
    svals = {j: v.splat(x) for j, x in scal.items()}
    b.raw("  br label %vloop")
    b.raw("vloop:")
    b.raw("  %vi = phi i64 [ 0, %plane_body ], [ %vn, %vnext ]")
    b.raw(f"  %vc = icmp slt i64 %vi, {nvec}")
    b.raw("  br i1 %vc, label %vbody, label %vdone")
    b.raw("vbody:")
    q0 = b.op(f"mul i64 %vi, {wd}")
    mrow = b.op(f"mul i64 %vi, {taps}")
    acc = None
    for c, xbase in enumerate(xbases):
        base = b.op(f"add i64 {xbase}, {q0}")
        for tp in range(taps):
            mi = b.op(f"add i64 {mrow}, {tp}")
            mw = b.op(f"load i32, i32* {b.op(f'getelementptr i32, i32* {masks}, i64 {mi}')}")
            if mask_regs:
                mb = b.op(f"bitcast i{wd} {b.op(f'trunc i32 {mw} to i{wd}')} to <{wd} x i1>")
            else:
                mb = b.op(f"icmp eq <{wd} x i32> {b.op(f'and <{wd} x i32> {ivec.splat(mw)}, {bits}')}, {bits}")
            ptr = b.op(f"getelementptr {t}, {t}* %x, i64 {b.op(f'add i64 {base}, {offs[tp]}')}")
            x = b.op(f"call {v.vt} {mload}({v.vt}* {b.op(f'bitcast {t}* {ptr} to {v.vt}*')}, i32 {es}, "
                     f"<{wd} x i1> {mb}, {v.vt} {pad})")
            if pool:
                acc = x if acc is None else v.maximum(acc, x)
            else:
                prod = v.bin("fmul", x, ws[c * taps + tp])
                acc = prod if acc is None else v.bin("fadd", acc, prod)
    if bias is not None:
        acc = v.bin("fadd", acc, bias)
    off = b.op(f"add i64 {obase}, {q0}")
    full = b.op(f"icmp slt i64 %vi, {nfull}")
    b.raw(f"  br i1 {full}, label %vfull, label %vpart")
    for block in ("vfull", "vpart"):
        b.raw(f"{block}:")
        live = None
        if block == "vpart":          # the lanes of this vector that are outputs (q < Ho * Wo)
            iv = Vals(b, "i64", wd)
            live = b.op(f"icmp slt <{wd} x i64> {b.op(f'add <{wd} x i64> {iv.splat(q0)}, {iota}')}, {iv.splat(q_end)}")
        ins = [acc]
        for j, kind in enumerate(k.kinds):
            if kind == "t":
                ep = b.op(f"bitcast {t}* {b.op(f'getelementptr {t}, {t}* %e{j}, i64 {off}')} to {v.vt}*")
                ins.append(b.op(f"load {v.vt}, {v.vt}* {ep}, align {es}") if live is None else
                           b.op(f"call {v.vt} {mload}({v.vt}* {ep}, i32 {es}, <{wd} x i1> {live}, {v.vt} zeroinitializer)"))
            else:
                ins.append(svals[j])
        res = emit_program(v, k.program, ins)
        op = b.op(f"bitcast {t}* {b.op(f'getelementptr {t}, {t}* %out, i64 {off}')} to {v.vt}*")
        if live is None:
            b.raw(f"  store {v.vt} {res}, {v.vt}* {op}, align {es}")
        else:
            b.raw(f"  call void {mstore}({v.vt} {res}, {v.vt}* {op}, i32 {es}, <{wd} x i1> {live})")
        b.raw("  br label %vnext")
    b.raw("vnext:")
    b.raw("  %vn = add i64 %vi, 1")
    b.raw("  br label %vloop")
    b.raw("vdone:")
    b.raw("  %rn = add i64 %r, 1")
    b.raw("  br label %plane")
    b.raw("done:")
    b.raw("  ret void")
    b.raw("}")
    return "\n".join(sorted(intrinsics | v.intrinsics)) + "\n\n" + "\n".join(b.lines) + "\n"


# ---------------------------------------------------------------- im2col (conv.Im2col)
def lower_im2col(k, name: str, features: str) -> str:
    """``void @k(i64 c0, i64 c1, i64 oh0, i64 oh1, i64 H, i64 W, i64 Wo, i64 kh, i64 kw, i64 sh,
    i64 dh, i64 dw, i64 pt, i64 pl, T* dst, T* x, T* zrow)``: the windows of the channels
    [c0, c1) of one NCHW image x (C x H x W) for the output rows [oh0, oh1), written as the rows
    of B of a convolution's product: dst[c, i, j, oh - oh0, ow] = x[c, oh*sh + i*dh - pt,
    ow*sw + j*dw - pl], zero where that is padding (a padded row reads ``zrow``, W zeros). Per
    (channel, tap row, output row, tap column) the output columns whose source column lies in
    the row are copied by vector loops (a stride-sw kernel loads sw x lanes and keeps every
    sw-th), then one at a time; the rest are stored zeros. The output rows are the inner loop, so
    every row of a tap runs the same trip counts (the branches are predicted: 7 and 14 wide maps
    are 21-42 rows of copies per channel and tap). ``k.sw`` (the column stride) is the
    kernel's constant; every other size is an argument."""
    from .lower import vec_width

    t = TYPES.get(k.dtype)
    if t is None:
        raise Unsupported(f"im2col in {k.dtype}")
    es = 4 if t == "float" else 8
    v = vec_width(features, t)
    sw = k.sw
    widths = [v] + ([4] if v > 4 else [])          # (then a loop of 4 lanes: 7 and 14 wide maps)
    b = Builder()
    names = ("c0", "c1", "oh0", "oh1", "H", "W", "Wo", "kh", "kw", "sh", "dh", "dw", "pt", "pl")
    params = [f"i64 %{n}" for n in names] + [f"{t}* noalias %dst", f"{t}* noalias %x", f"{t}* noalias %zrow"]
    b.raw(f"define void @{name}({', '.join(params)}) nounwind {{")
    b.raw("entry:")
    hw = b.op("mul i64 %H, %W")
    nb = b.op("sub i64 %oh1, %oh0")
    plane = b.op(f"mul i64 {nb}, %Wo")                 # one tap's block of B: (oh1 - oh0) x Wo

    def loop(n, start, end, body, step="1", cond=None):
        """for %n in [start, end) by step (or while cond(%n)); the body emits its own blocks.
        Returns the value of %n at the exit (dominates what follows)."""
        b.raw(f"  br label %{n}_p")
        b.raw(f"{n}_p:")
        b.raw(f"  br label %{n}_h")
        b.raw(f"{n}_h:")
        b.raw(f"  %{n} = phi i64 [ {start}, %{n}_p ], [ %{n}_nx, %{n}_l ]")
        c = cond(f"%{n}") if cond is not None else b.op(f"icmp slt i64 %{n}, {end}")
        b.raw(f"  br i1 {c}, label %{n}_b, label %{n}_x")
        b.raw(f"{n}_b:")
        body(f"%{n}")
        b.raw(f"  br label %{n}_l")
        b.raw(f"{n}_l:")
        b.raw(f"  %{n}_nx = add i64 %{n}, {step}")
        b.raw(f"  br label %{n}_h")
        b.raw(f"{n}_x:")
        return f"%{n}"

    def at(p, i):
        return b.op(f"getelementptr {t}, {t}* {p}, i64 {i}")

    def channel(c):
        xc = at("%x", b.op(f"mul i64 {c}, {hw}"))
        ck = b.op(f"mul i64 {c}, %kh")

        def tap_row(i):
            cki = b.op(f"mul i64 {b.op(f'add i64 {ck}, {i}')}, %kw")
            ioff = b.op(f"sub i64 {b.op(f'mul i64 {i}, %dh')}, %pt")

            def tap_col(j):
                dtap = at("%dst", b.op(f"mul i64 {b.op(f'add i64 {cki}, {j}')}, {plane}"))
                shift = b.op(f"sub i64 {b.op(f'mul i64 {j}, %dw')}, %pl")      # column = ow*sw + shift
                # lo: the first ow whose column >= 0; hi: past the last whose column < W (in [lo, Wo])
                neg = b.op(f"sub i64 0, {shift}")
                up = b.op(f"udiv i64 {b.op(f'add i64 {neg}, {sw - 1}')}, {sw}")
                lo = b.op(f"select i1 {b.op(f'icmp sgt i64 {neg}, 0')}, i64 {up}, i64 0")
                lo = b.op(f"select i1 {b.op(f'icmp slt i64 {lo}, %Wo')}, i64 {lo}, i64 %Wo")
                last = b.op(f"sub i64 {b.op('sub i64 %W, 1')}, {shift}")
                cols = b.op(f"add i64 {b.op(f'udiv i64 {last}, {sw}')}, 1")
                hi = b.op(f"select i1 {b.op(f'icmp slt i64 {last}, 0')}, i64 0, i64 {cols}")
                hi = b.op(f"select i1 {b.op(f'icmp slt i64 {hi}, %Wo')}, i64 {hi}, i64 %Wo")
                hi = b.op(f"select i1 {b.op(f'icmp slt i64 {hi}, {lo}')}, i64 {lo}, i64 {hi}")

                def out_row(oh):          # (the same trip counts for every row of a tap: predicted)
                    ih = b.op(f"add i64 {b.op(f'mul i64 {oh}, %sh')}, {ioff}")
                    valid = b.op(f"icmp ult i64 {ih}, %H")
                    src = b.op(f"select i1 {valid}, {t}* {at(xc, b.op(f'mul i64 {ih}, %W'))}, {t}* %zrow")
                    drow = at(dtap, b.op(f"mul i64 {b.op(f'sub i64 {oh}, %oh0')}, %Wo"))

                    def put_zero(ow):
                        b.raw(f"  store {t} 0.0, {t}* {at(drow, ow)}")
                    loop("zl", "0", lo, put_zero)

                    def vec(w):
                        vt, wide = f"<{w} x {t}>", f"<{w * sw} x {t}>"

                        def body(ow):
                            col = b.op(f"add i64 {b.op(f'mul i64 {ow}, {sw}')}, {shift}")
                            p = at(src, col)
                            if sw == 1:
                                val = b.op(f"load {vt}, {vt}* {b.op(f'bitcast {t}* {p} to {vt}*')}, align {es}")
                            else:
                                xw = b.op(f"load {wide}, {wide}* {b.op(f'bitcast {t}* {p} to {wide}*')}, align {es}")
                                mask = ", ".join(f"i32 {q * sw}" for q in range(w))
                                val = b.op(f"shufflevector {wide} {xw}, {wide} undef, <{w} x i32> <{mask}>")
                            b.raw(f"  store {vt} {val}, {vt}* {b.op(f'bitcast {t}* {at(drow, ow)} to {vt}*')}, "
                                  f"align {es}")

                        def fits(ow):             # ow + w <= hi, and the wide load stays in the row
                            inside = b.op(f"icmp sle i64 {b.op(f'add i64 {ow}, {w}')}, {hi}")
                            if sw == 1:
                                return inside
                            col = b.op(f"add i64 {b.op(f'mul i64 {ow}, {sw}')}, {shift}")
                            end = b.op(f"add i64 {col}, {w * sw}")
                            return b.op(f"and i1 {inside}, {b.op(f'icmp sle i64 {end}, %W')}")
                        return body, fits
                    ow = lo
                    for q, w in enumerate(widths):
                        body, fits = vec(w)
                        ow = loop(f"v{q}", ow, None, body, step=str(w), cond=fits)

                    def one(ow):
                        col = b.op(f"add i64 {b.op(f'mul i64 {ow}, {sw}')}, {shift}")
                        val = b.op(f"load {t}, {t}* {at(src, col)}")
                        b.raw(f"  store {t} {val}, {t}* {at(drow, ow)}")
                    loop("sc", ow, hi, one)
                    loop("zr", hi, "%Wo", put_zero)
                loop("oh", "%oh0", "%oh1", out_row)
            loop("j", "0", "%kw", tap_col)
        loop("i", "0", "%kh", tap_row)
    loop("c", "%c0", "%c1", channel)
    b.raw("  ret void")
    b.raw("}")
    return "\n".join(b.lines) + "\n"
