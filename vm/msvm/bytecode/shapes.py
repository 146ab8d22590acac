"""Shape and dtype rules: one function per instruction family.

A rule is ``rule(ctx, ins, args) -> Type | None``: ``ins`` are the static types
popped from the metadata stack (bottom first), ``args`` the decoded operands,
``ctx.env`` the ``ShapeEnv``. It returns the type pushed (None when nothing is
pushed) or raises ``ShapeError`` with a message that names both shapes. The
frontend calls the same rules while it emits, so it and the verifier agree.
"""

from __future__ import annotations

import math

from .. import dtype as dt
from .symbolic import Expr, UnknownValue, fmt_shape, product, smax, smin, sym
from .types import NONE, ScalarType, ShapeError, TensorType, TupleType, type_of_const

# ---------------------------------------------------------------- helpers

def _tensor(t, what: str, i: int = 0) -> TensorType:
    if isinstance(t, TensorType):
        return t
    raise ShapeError(f"{what}: operand {i} must be a tensor, got {t}")


def _as_tensorish(t):
    """(shape, dtype, weak kind) of a tensor or scalar operand."""
    if isinstance(t, TensorType):
        return t.shape, t.dtype, None
    if isinstance(t, ScalarType):
        return (), None, t.kind
    raise ShapeError(f"expected a tensor or a scalar, got {t}")


def result_dtype(types) -> dt.DType:
    """Promotion over tensors and weak scalars (see msvm.dtype.result_of)."""
    return dt.result_of([t.dtype for t in types if isinstance(t, TensorType)],
                        [t.kind for t in types if isinstance(t, ScalarType)])


def norm_axis(axis: int, rank: int, what: str) -> int:
    if not isinstance(axis, int) or isinstance(axis, bool):
        raise ShapeError(f"{what}: axis must be a constant int, got {axis!r}")
    if not -rank <= axis < max(rank, 1):
        raise ShapeError(f"{what}: axis {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0


def _shape_str(t) -> str:
    return fmt_shape(t.shape) if isinstance(t, TensorType) else str(t)


# ---------------------------------------------------------------- elementwise

REAL_OF_COMPLEX = frozenset({"ABS", "REAL", "IMAG", "ANGLE"})    # unary ops whose complex result is real

def binary(ctx, ins, args, *, name: str, out_dtype=None):
    shapes = [_as_tensorish(t)[0] for t in ins]
    shape = ctx.env.broadcast(shapes, name)
    if all(isinstance(t, ScalarType) for t in ins):
        return ScalarType("b" if out_dtype == "bool" else result_dtype(ins).kind)
    if out_dtype == "bool":
        return TensorType(shape, dt.bool_)
    d = result_dtype(ins)
    if out_dtype == "float" and not d.is_inexact:
        d = dt.float32
    if out_dtype == "complex":
        if d.is_complex:
            raise ShapeError(f"{name}: the parts must be real, got {d}")
        d = dt.complex_of(d if d.is_float else dt.float32)
    return TensorType(shape, d)


def unary(ctx, ins, args, *, name: str, out_dtype=None):
    (t,) = ins
    if isinstance(t, ScalarType):
        return ScalarType("b" if out_dtype == "bool" else "f" if out_dtype == "float" else t.kind)
    t = _tensor(t, name)
    if t.dtype.is_complex and name in REAL_OF_COMPLEX:       # |z|, Re z, Im z, arg z are real
        return TensorType(t.shape, dt.real_of(t.dtype))
    if out_dtype == "float" and not t.dtype.is_inexact:
        return TensorType(t.shape, dt.float32)
    if out_dtype == "bool":
        return TensorType(t.shape, dt.bool_)
    return t


def where(ctx, ins, args):
    cond, a, b = ins
    shapes = [_as_tensorish(t)[0] for t in ins]
    shape = ctx.env.broadcast(shapes, "WHERE")
    return TensorType(shape, result_dtype([a, b]))


def cast(ctx, ins, args):
    (t,) = ins
    (to,) = args
    if not isinstance(to, dt.DType):
        raise ShapeError(f"CAST: target must be a dtype, got {to!r}")
    if isinstance(t, ScalarType):
        return TensorType((), to)
    return TensorType(_tensor(t, "CAST").shape, to)


def fill(ctx, ins, args):
    shape, value, dtype = args
    return TensorType(_shape_operand(shape, "FILL"), dtype)


# ---------------------------------------------------------------- matmul

def _mm_dims(a: TensorType, b: TensorType, ta: bool, tb: bool):
    m, k1 = (a.shape[-1], a.shape[-2]) if ta else (a.shape[-2], a.shape[-1])
    k2, n = (b.shape[-1], b.shape[-2]) if tb else (b.shape[-2], b.shape[-1])
    return m, k1, k2, n


def matmul(ctx, ins, args, *, name="MATMUL"):
    a, b = (_tensor(t, name, i) for i, t in enumerate(ins))
    ta, tb = args[0], args[1]
    if a.rank != 2 or b.rank != 2:
        raise ShapeError(f"{name}: needs two 2-D tensors, got {fmt_shape(a.shape)} @ {fmt_shape(b.shape)}"
                         " (use BATCH_MATMUL / ops.bmm for batches)")
    m, k1, k2, n = _mm_dims(a, b, ta, tb)
    _check_k(ctx, a, b, k1, k2, name)
    return TensorType((ctx.env.norm(m), ctx.env.norm(n)), result_dtype([a, b]))


def _check_k(ctx, a, b, k1, k2, name):
    ctx.env.require_eq(k1, k2, f"{name}: shapes {fmt_shape(ctx.env.norm_type(a).shape)} @ "
                       f"{fmt_shape(ctx.env.norm_type(b).shape)} do not match "
                       f"(contracted dims {ctx.env.norm(k1)} and {ctx.env.norm(k2)})")


def batch_matmul(ctx, ins, args, *, name="BATCH_MATMUL"):
    a, b = (_tensor(t, name, i) for i, t in enumerate(ins))
    ta, tb = args[0], args[1]
    if a.rank < 2 or b.rank < 2:
        raise ShapeError(f"{name}: needs tensors of rank >= 2, got {fmt_shape(a.shape)} @ {fmt_shape(b.shape)}")
    m, k1, k2, n = _mm_dims(a, b, ta, tb)
    _check_k(ctx, a, b, k1, k2, name)
    batch = ctx.env.broadcast([a.shape[:-2], b.shape[:-2]], f"{name} batch dims")
    return TensorType(batch + (ctx.env.norm(m), ctx.env.norm(n)), result_dtype([a, b]))


# ---------------------------------------------------------------- reductions, normalization

def _axes(axes, rank, what):
    if axes is None or axes == ():
        return tuple(range(rank))
    if isinstance(axes, int):
        axes = (axes,)
    out = tuple(sorted({norm_axis(a, rank, what) for a in axes}))
    return out


def reduce(ctx, ins, args, *, name: str, out_dtype=None):
    t = _tensor(ins[0], name)
    axes, keep = args
    ax = _axes(axes, t.rank, name)
    shape = tuple(Expr.const(1) if i in ax else d for i, d in enumerate(t.shape) if keep or i not in ax)
    d = t.dtype
    if out_dtype == "float" and not d.is_inexact:
        d = dt.float32
    if out_dtype == "index":
        d = dt.int32
    if name in ("REDUCE_SUM", "REDUCE_PROD") and d is dt.bool_:
        d = dt.int64
    if out_dtype == "bool":
        d = dt.bool_
    return TensorType(shape, d)


def argreduce(ctx, ins, args, *, name: str):
    _tensor(ins[0], name)
    axis, keep = args
    if axis is None:
        return TensorType((), dt.int32)
    return reduce(ctx, ins, ((axis,), keep), name=name, out_dtype="index")


def softmax(ctx, ins, args, *, name="SOFTMAX"):
    t = _tensor(ins[0], name)
    norm_axis(args[0], t.rank, name)
    return unary(ctx, [t], (), name=name, out_dtype="float")


def layer_norm(ctx, ins, args):
    x = _tensor(ins[0], "LAYER_NORM")
    begin_norm, begin_params, _eps = args
    b = norm_axis(begin_norm, x.rank, "LAYER_NORM")
    p = norm_axis(begin_params, x.rank, "LAYER_NORM")
    for i, g in enumerate(ins[1:3]):
        if g is NONE:
            continue
        g = _tensor(g, "LAYER_NORM", i + 1)
        want = x.shape[p:]
        if g.rank != len(want):
            raise ShapeError(f"LAYER_NORM: {'gamma' if i == 0 else 'beta'} has shape {fmt_shape(g.shape)}, "
                             f"expected {fmt_shape(want)} for input {fmt_shape(x.shape)}")
        for d1, d2 in zip(g.shape, want):
            ctx.env.require_eq(d1, d2, f"LAYER_NORM: {'gamma' if i == 0 else 'beta'} {fmt_shape(g.shape)} "
                               f"does not match input {fmt_shape(x.shape)} from axis {p}")
    del b
    return unary(ctx, [ctx.env.norm_type(x)], (), name="LAYER_NORM", out_dtype="float")


# ---------------------------------------------------------------- convolution and pooling

def _window_dim(ctx, d, k, s, pad, dil, what):
    """Output length of a window of k (dilated by dil) stepping s over d with pad (before, after) or 'same'."""
    if pad == "same":
        return (d + (s - 1)) // s
    span = dil * (k - 1) + 1
    n = d + (pad[0] + pad[1])
    c = n.const_value() if isinstance(n, Expr) else n
    if c is not None and c < span:
        raise ShapeError(f"{what}: the window ({span}) is larger than the padded input ({c})")
    return (n - span) // s + 1


def _pads(pad, what):
    if pad == ("same",):
        return "same", "same"
    if len(pad) != 4 or not all(isinstance(p, int) and p >= 0 for p in pad):
        raise ShapeError(f"{what}: padding must be ('same',) or 4 non-negative ints, got {pad!r}")
    return (pad[0], pad[1]), (pad[2], pad[3])


def _nchw(t, what, i=0):
    t = _tensor(t, what, i)
    if t.rank != 4:
        raise ShapeError(f"{what}: needs a 4-D [N, C, H, W] tensor, got {fmt_shape(t.shape)}")
    return t


def conv2d(ctx, ins, args):
    x, w = _nchw(ins[0], "CONV2D"), _nchw(ins[1], "CONV2D", 1)
    stride, pad, dil, group = args
    ph, pw = _pads(pad, "CONV2D")
    n, c, h, wd = (ctx.env.norm(d) for d in x.shape)
    o, cg, kh, kw = (ctx.env.norm(d) for d in w.shape)
    if not isinstance(group, int) or group < 1:
        raise ShapeError(f"CONV2D: group must be a positive int, got {group!r}")
    khc, kwc = kh.const_value() if isinstance(kh, Expr) else kh, kw.const_value() if isinstance(kw, Expr) else kw
    if khc is None or kwc is None:
        raise ShapeError(f"CONV2D: the kernel size must be known, got weight {fmt_shape(w.shape)}")
    ctx.env.require_eq(c, cg * group, f"CONV2D: input {fmt_shape(x.shape)} has {c} channels, the weight "
                       f"{fmt_shape(w.shape)} expects {cg} x group {group}")
    oc = o.const_value() if isinstance(o, Expr) else o
    if oc is not None and oc % group:
        raise ShapeError(f"CONV2D: {oc} output channels are not divisible by group {group}")
    ho = _window_dim(ctx, h, khc, stride[0], ph, dil[0], "CONV2D")
    wo = _window_dim(ctx, wd, kwc, stride[1], pw, dil[1], "CONV2D")
    return TensorType((n, o, ctx.env.norm(Expr.of(ho)), ctx.env.norm(Expr.of(wo))), result_dtype([x, w]))


def pool2d(ctx, ins, args, *, name):
    x = _nchw(ins[0], name)
    kernel, stride, pad = args[:3]
    ph, pw = _pads(pad, name)
    n, c, h, w = (ctx.env.norm(d) for d in x.shape)
    ho = _window_dim(ctx, h, kernel[0], stride[0], ph, 1, name)
    wo = _window_dim(ctx, w, kernel[1], stride[1], pw, 1, name)
    d = x.dtype if name == "MAX_POOL2D" or x.dtype.is_float else dt.float32
    return TensorType((n, c, ctx.env.norm(Expr.of(ho)), ctx.env.norm(Expr.of(wo))), d)


# (bilinear_asymmetric: source dst * in / out; nearest_half_pixel: floor((dst + 0.5) * in / out))
RESIZE_MODES = ("nearest", "bilinear", "bilinear_asymmetric", "nearest_half_pixel")


def resize(ctx, ins, args):
    x = _nchw(ins[0], "RESIZE")
    size, scale, mode, _ = args
    if mode not in RESIZE_MODES:
        raise ShapeError(f"RESIZE: mode must be one of {RESIZE_MODES}, got {mode!r}")
    n, c, h, w = (ctx.env.norm(d) for d in x.shape)
    if size is not None:
        oh, ow = (Expr.of(d) for d in size)
    else:
        oh, ow = h * scale[0], w * scale[1]
    return TensorType((n, c, ctx.env.norm(oh), ctx.env.norm(ow)), x.dtype if x.dtype.is_float else dt.float32)


def adaptive_pool2d(ctx, ins, args):
    x = _nchw(ins[0], "ADAPTIVE_AVG_POOL2D")
    (size,) = args
    n, c = (ctx.env.norm(d) for d in x.shape[:2])
    oh, ow = (x.shape[2 + i] if size[i] is None else size[i] for i in range(2))
    return TensorType((n, c, ctx.env.norm(Expr.of(oh)), ctx.env.norm(Expr.of(ow))),
                      x.dtype if x.dtype.is_float else dt.float32)


def gather(ctx, ins, args):
    x = _tensor(ins[0], "GATHER")
    idx = ins[1]
    if isinstance(idx, ScalarType):
        if idx.kind not in "iu":
            raise ShapeError(f"GATHER: indices must be ints, got {idx}")
        ishape = ()
    else:
        idx = _tensor(idx, "GATHER", 1)
        if idx.dtype.kind not in "iu":
            raise ShapeError(f"GATHER: indices must be an int tensor, got {idx.dtype}")
        ishape = tuple(idx.shape)
    a = norm_axis(args[0], x.rank, "GATHER")
    shape = tuple(x.shape[:a]) + ishape + tuple(x.shape[a + 1:])
    return TensorType(tuple(ctx.env.norm(d) for d in shape), x.dtype)


# ---------------------------------------------------------------- indexing and creation (model zoo)

def arange(ctx, ins, args):
    start, stop, step, dtype = args
    if step == 0:
        raise ShapeError("ARANGE: step cannot be zero")
    sym = [b for b in (start, stop) if isinstance(b, Expr) and not b.is_const()]
    if sym:
        if not isinstance(step, int) or isinstance(step, bool):
            raise ShapeError(f"ARANGE: with a symbolic end the step must be an int, got {step!r}")
        lo, hi = Expr.of(start), Expr.of(stop)
        span = hi - lo if step > 0 else lo - hi
        # a symbolic end lies past the start (ops.arange(x.shape[1]), ops.arange(p, p + s)): the
        # entry checks it, and the length stays a plain expression
        ctx.env.assume(smax(span, 0), span, f"ARANGE: a symbolic range from {lo} to {hi} by {step} must not run backwards")
        n = span if abs(step) == 1 else (span + (abs(step) - 1)) // abs(step)
    else:
        start, stop = (b.const_value() if isinstance(b, Expr) else b for b in (start, stop))
        n = Expr.const(max(math.ceil((stop - start) / step), 0))     # numpy's length, float ends too
    return TensorType((ctx.env.norm(n),), dtype)


def cumsum(ctx, ins, args):
    t = _tensor(ins[0], "CUMSUM")
    norm_axis(args[0], t.rank, "CUMSUM")
    out = t.dtype
    if out.kind == "b" or (out.kind in "iu" and out.itemsize < 4):
        out = dt.int64
    return TensorType(t.shape, out)


# ---------------------------------------------------------------- layout

def _shape_operand(shape, what):
    if not isinstance(shape, tuple):
        raise ShapeError(f"{what}: shape operand must be a tuple, got {shape!r}")
    out = []
    for d in shape:
        if isinstance(d, Expr):
            out.append(d)
        elif isinstance(d, int) and not isinstance(d, bool) and d >= 0:
            out.append(Expr.const(d))
        else:
            raise ShapeError(f"{what}: bad dimension {d!r} (bytecode stores resolved dims, never -1)")
    return tuple(out)


def reshape(ctx, ins, args):
    t = _tensor(ins[0], "RESHAPE")
    shape = _shape_operand(args[0], "RESHAPE")
    ctx.env.require_eq(product(t.shape), product(shape),
                       f"RESHAPE: cannot reshape {fmt_shape(t.shape)} ({product(t.shape)} elements) "
                       f"to {fmt_shape(shape)} ({product(shape)} elements)")
    return TensorType(tuple(ctx.env.norm(d) for d in shape), t.dtype)


def transpose(ctx, ins, args):
    t = _tensor(ins[0], "TRANSPOSE")
    (perm,) = args
    if not isinstance(perm, tuple) or sorted(norm_axis(p, t.rank, "TRANSPOSE") for p in perm) != list(range(t.rank)):
        raise ShapeError(f"TRANSPOSE: {perm!r} is not a permutation of the {t.rank} axes of {fmt_shape(t.shape)}")
    return TensorType(tuple(t.shape[p % t.rank] for p in perm), t.dtype)


def expand_dims(ctx, ins, args):
    t = _tensor(ins[0], "EXPAND_DIMS")
    axis = norm_axis(args[0], t.rank + 1, "EXPAND_DIMS")
    shape = list(t.shape)
    shape.insert(axis, Expr.const(1))
    return TensorType(tuple(shape), t.dtype)


def squeeze(ctx, ins, args):
    t = _tensor(ins[0], "SQUEEZE")
    axes = args[0]
    if axes is None or axes == ():
        # (a dim known not to be 1 stays; one that may be 1 needs the call's exact shapes: UnknownValue)
        unknown = [str(d) for d in t.shape if not d.is_const() and not ctx.env.not_one(d)]
        if unknown:
            raise UnknownValue(f"SQUEEZE without axes drops the dims of size 1: {fmt_shape(t.shape)} has "
                               f"{', '.join(unknown)}, which may be 1")
        drop = {i for i, d in enumerate(t.shape) if d.is_const() and d == 1}
    else:
        drop = set(_axes(axes, t.rank, "SQUEEZE"))
        for i in drop:
            ctx.env.require_eq(t.shape[i], 1, f"SQUEEZE: axis {i} of {fmt_shape(t.shape)} is not 1")
    return TensorType(tuple(d for i, d in enumerate(t.shape) if i not in drop), t.dtype)


def broadcast_to(ctx, ins, args):
    t = _tensor(ins[0], "BROADCAST_TO")
    shape = _shape_operand(args[0], "BROADCAST_TO")
    out = ctx.env.broadcast([t.shape, shape], "BROADCAST_TO")
    if len(out) != len(shape):
        raise ShapeError(f"BROADCAST_TO: cannot broadcast {fmt_shape(t.shape)} to {fmt_shape(shape)}")
    return TensorType(out, t.dtype)


def concat(ctx, ins, args, *, name="CONCAT"):
    count, axis = args
    ts = [_tensor(t, name, i) for i, t in enumerate(ins)]
    if not ts:
        raise ShapeError(f"{name}: needs at least one tensor")
    rank = ts[0].rank
    for t in ts:
        if t.rank != rank:
            raise ShapeError(f"{name}: ranks differ: " + ", ".join(fmt_shape(t.shape) for t in ts))
    if name == "STACK":
        ax = norm_axis(axis, rank + 1, name)
        shape = list(ts[0].shape)
        for t in ts[1:]:
            for i in range(rank):
                shape[i] = ctx.env.require_eq(shape[i], t.shape[i], "STACK: shapes differ: "
                                              + ", ".join(fmt_shape(t.shape) for t in ts))
        shape.insert(ax, Expr.const(len(ts)))
        return TensorType(tuple(shape), result_dtype(ts))
    ax = norm_axis(axis, rank, name)
    shape = list(ts[0].shape)
    for t in ts[1:]:
        for i in range(rank):
            if i == ax:
                shape[i] = shape[i] + t.shape[i]
            else:
                shape[i] = ctx.env.require_eq(shape[i], t.shape[i], f"{name}: dim {i} differs: "
                                              + ", ".join(fmt_shape(t.shape) for t in ts))
    return TensorType(tuple(ctx.env.norm(d) for d in shape), result_dtype(ts))


def slice_(ctx, ins, args):
    """Basic indexing: operand is a tuple of ('i', k) | ('s', start, stop, step) | ('n',) | ('e',)."""
    t = _tensor(ins[0], "SLICE")
    (spec,) = args
    n_real = sum(1 for s in spec if s[0] in ("i", "s"))
    if n_real > t.rank:
        raise ShapeError(f"SLICE: too many indices for {fmt_shape(t.shape)}")
    full = []
    for s in spec:
        if s[0] == "e":
            full.extend([("s", None, None, None)] * (t.rank - n_real))
        else:
            full.append(s)
    full.extend([("s", None, None, None)] * (t.rank - sum(1 for s in full if s[0] in ("i", "s"))))
    out, dim = [], 0
    for s in full:
        if s[0] == "n":
            out.append(Expr.const(1))
            continue
        d = t.shape[dim]
        dim += 1
        if s[0] == "i":
            k = s[1]
            if d.is_const() and not -d.const_value() <= k < d.const_value():
                raise ShapeError(f"SLICE: index {k} is out of range for dim {dim - 1} of {fmt_shape(t.shape)}")
            continue
        out.append(_slice_len(d, s[1], s[2], s[3], ctx.env))
    return TensorType(tuple(ctx.env.norm(d) for d in out), t.dtype)


def _slice_len(d: Expr, start, stop, step, env=None):
    """len(range(n)[start:stop:step]) for a possibly symbolic n; bounds are ints or symbolic
    exprs over dims (``x[:, :S]``, ``bias[..., k - q:k, :k]``)."""
    step = 1 if step is None else step
    if step == 0:
        raise ShapeError("SLICE: slice step cannot be zero")
    start, stop = (b.const_value() if isinstance(b, Expr) and b.is_const() else b for b in (start, stop))
    if isinstance(start, Expr) or isinstance(stop, Expr):
        return _symbolic_slice_len(d, start, stop, step, env)
    if d.is_const():
        return Expr.const(len(range(*slice(start, stop, step).indices(d.const_value()))))
    if step > 0:
        def bound(b, default):
            if b is None:
                return default
            return smax(d + b, 0) if b < 0 else smin(Expr.const(b), d)
        lo, hi = bound(start, Expr.const(0)), bound(stop, d)
    else:      # Python's clamping for a negative step: indices run from start down to stop + 1, within [-1, d-1]
        def bound(b, default):
            if b is None:
                return default
            return smax(d + b, -1) if b < 0 else smin(Expr.const(b), d - 1)
        hi, lo = bound(start, d - 1), bound(stop, Expr.const(-1))
    # a full slice (``x[:, :k]``'s leading ``:``) is the dim itself: a dim is never negative
    n = d if step == 1 and start is None and stop is None else smax(hi - lo, 0)
    return n if abs(step) == 1 else (n + (abs(step) - 1)) // abs(step)


def _symbolic_slice_len(d: Expr, start, stop, step, env):
    """A slice with a symbolic bound (a dim expression, so never negative): its length is
    ``ceil((stop - start) / step)``, with ``0 <= start <= stop <= d`` left for the VM to check when the
    symbols are bound (numpy would clamp; a model that slices a table by a length means the
    length to fit)."""
    if not isinstance(step, int) or step < 1:
        raise ShapeError(f"SLICE: a slice with a symbolic bound needs a positive constant step, got {step}")
    for b in (start, stop):
        if isinstance(b, int) and b < 0:
            raise ShapeError(f"SLICE: a slice with a symbolic bound cannot also have a negative bound ({b})")
    lo = Expr.of(0 if start is None else start)
    hi = d if stop is None else Expr.of(stop)
    if env is not None:
        why = f"SLICE: bounds [{lo}:{hi}] must lie within a dim of size {d}"
        if stop is not None and not (d.is_const() and hi.is_const()):
            env.assume(smin(hi, d), hi, why)
        if start is not None:
            env.assume(smin(lo, hi), lo, why)
    return hi - lo if step == 1 else (hi - lo + (step - 1)) // step


# ---------------------------------------------------------------- data movement and control

def load_tensor(ctx, ins, args):
    return ctx.local_type(args[0])


def store_tensor(ctx, ins, args):
    ctx.set_local(args[0], ins[0])


def load_const(ctx, ins, args):
    return type_of_const(args[0])


def load_param(ctx, ins, args):
    return ctx.attr_type(args[0])


def load_sym(ctx, ins, args):
    e = args[0]
    if isinstance(e, Expr):
        return ScalarType("i", ctx.env.norm(e))
    return ScalarType("b", e)


def set_sym(ctx, ins, args):
    ctx.set_symbol(args[0], args[1])


def build_tuple(ctx, ins, args):
    return TupleType(tuple(ins))


def unpack_tuple(ctx, ins, args):
    (t,) = ins
    if not isinstance(t, TupleType) or len(t.items) != args[0]:
        raise ShapeError(f"UNPACK_TUPLE: expected a tuple of {args[0]}, got {t}")
    return list(reversed(t.items))  # pushed so that item 0 ends up on top


def call_cell(ctx, ins, args):
    return ctx.call(args[0], list(ins))


def nothing(ctx, ins, args):
    return None


def branch(ctx, ins, args):
    ctx.branch(args[0])


# ---------------------------------------------------------------- fused

def run_program(ctx, program, ins, what: str):
    """Type a fused program by applying each part's own rule; returns the result type."""
    from .program import evaluate

    def leaf(k):
        if not 0 <= k < len(ins):
            raise ShapeError(f"{what}: program reads input {k} of {len(ins)}")
        return ins[k]

    return evaluate(program, leaf, type_of_const,
                    lambda row, args, operands: row.rule(ctx, [ctx.env.norm_type(a) for a in args], operands), what)


def fused_elementwise(ctx, ins, args):
    program, n = args
    return run_program(ctx, program, ins, "FUSED_ELEMENTWISE")


def fused_matmul(ctx, ins, args):
    ta, tb, batched, program, n = args
    if n < 2:
        raise ShapeError("FUSED_MATMUL needs at least the two matmul operands")
    mm = (batch_matmul if batched else matmul)(ctx, ins[:2], (ta, tb))
    return run_program(ctx, program, [mm] + list(ins[2:]), "FUSED_MATMUL")


# ---------------------------------------------------------------- conformance (issue 21)

def band_part(ctx, ins, args):
    """MATRIX_BAND_PART: x's type; x needs rank >= 2, the bounds are ints (-1: no limit)."""
    t = _tensor(ins[0], "MATRIX_BAND_PART")
    if t.rank < 2:
        raise ShapeError(f"MATRIX_BAND_PART: x must have rank >= 2, got rank {t.rank}")
    for what, v in zip(("lower", "upper"), args):
        if isinstance(v, bool) or not isinstance(v, int):
            raise ShapeError(f"MATRIX_BAND_PART: {what} must be an int, got {v!r}")
    return t


SCATTER_MODES = ("update", "add", "sub", "mul", "div", "max", "min")


def tensor_scatter(ctx, ins, args):
    """TENSOR_SCATTER: x's type; int indices [..., K] with K <= rank(x); updates of
    indices.shape[:-1] + x.shape[K:] (checked where both are known)."""
    x = _tensor(ins[0], "TENSOR_SCATTER")
    idx = _tensor(ins[1], "TENSOR_SCATTER", 1)
    upd = ins[2]
    (mode,) = args
    if mode not in SCATTER_MODES:
        raise ShapeError(f"TENSOR_SCATTER: mode must be one of {', '.join(SCATTER_MODES)}, got {mode!r}")
    if idx.dtype.kind not in "iu":
        raise ShapeError(f"TENSOR_SCATTER: indices must be ints, got {idx.dtype}")
    if idx.rank == 0:
        raise ShapeError("TENSOR_SCATTER: indices must have rank >= 1 (the last dim indexes x)")
    k = idx.shape[-1]
    if k.is_const() and k.const_value() > x.rank:
        raise ShapeError(f"TENSOR_SCATTER: indices index {k.const_value()} dims of a rank-{x.rank} x")
    if isinstance(upd, TensorType) and k.is_const():
        want = tuple(idx.shape[:-1]) + tuple(x.shape[k.const_value():])
        if len(want) == upd.rank and all(a.is_const() and b.is_const() and a.const_value() != b.const_value()
                                         for a, b in zip(want, upd.shape)):
            raise ShapeError(f"TENSOR_SCATTER: updates must have shape {fmt_shape(want)}, got {fmt_shape(upd.shape)}")
    return x


def bool_index(ctx, ins, args):
    """x[mask]: the mask's dims are x's leading dims; the count of True is the fresh symbol args[0]."""
    x = _tensor(ins[0], "BOOL_INDEX")
    mask = _tensor(ins[1], "BOOL_INDEX", 1)
    if mask.dtype != dt.bool_ or not 1 <= mask.rank <= x.rank:
        raise ShapeError(f"BOOL_INDEX: the mask must be bools of rank 1..{x.rank} (x is {_shape_str(x)}), "
                         f"got {mask.dtype}{_shape_str(mask)}")
    for i, (a, b) in enumerate(zip(x.shape, mask.shape)):
        ctx.env.require_eq(a, b, f"BOOL_INDEX: mask {_shape_str(mask)} does not match the leading dims of x "
                                 f"{_shape_str(x)} (dim {i})")
    return TensorType((sym(args[0]),) + tuple(x.shape[mask.rank:]), x.dtype)


def bind_dim(ctx, ins, args):
    x = _tensor(ins[0], "BIND_DIM")
    name, axis = args
    a = norm_axis(axis, x.rank, "BIND_DIM")
    return TensorType(x.shape[:a] + (sym(name),) + x.shape[a + 1:], x.dtype)


def gather_nd(ctx, ins, args):
    x = _tensor(ins[0], "GATHER_ND")
    idx = _tensor(ins[1], "GATHER_ND", 1)
    if idx.dtype.kind not in "iu" or idx.rank == 0:
        raise ShapeError(f"GATHER_ND: indices must be ints of rank >= 1, got {idx.dtype} of rank {idx.rank}")
    k = idx.shape[-1]
    if not k.is_const() or k.const_value() > x.rank:
        raise ShapeError(f"GATHER_ND: the last dim of indices ({k}) must be a known int <= rank {x.rank}")
    return TensorType(tuple(idx.shape[:-1]) + tuple(x.shape[k.const_value():]), x.dtype)


def gather_d(ctx, ins, args):
    x = _tensor(ins[0], "GATHER_D")
    idx = _tensor(ins[1], "GATHER_D", 1)
    (dim,) = args
    if idx.dtype.kind not in "iu" or idx.rank != x.rank:
        raise ShapeError(f"GATHER_D: index must be ints of x's rank {x.rank}, got {idx.dtype} of rank {idx.rank}")
    norm_axis(dim, x.rank, "GATHER_D")
    return TensorType(idx.shape, x.dtype)


def argsort(ctx, ins, args):
    t = _tensor(ins[0], "ARGSORT")
    norm_axis(args[0], builtin_max(t.rank, 1), "ARGSORT")
    return TensorType(t.shape, dt.int32)


def builtin_max(a, b):
    return a if a >= b else b


def unsorted_segment(ctx, ins, args):
    x = _tensor(ins[0], "UNSORTED_SEGMENT")
    ids = _tensor(ins[1], "UNSORTED_SEGMENT", 1)
    n, mode = args
    if mode not in ("sum", "prod", "max", "min"):
        raise ShapeError(f"UNSORTED_SEGMENT: mode must be sum, prod, max or min, got {mode!r}")
    if ids.dtype.kind not in "iu" or ids.rank > x.rank:
        raise ShapeError(f"UNSORTED_SEGMENT: segment_ids must be ints of rank <= {x.rank}, got {ids.dtype} "
                         f"of rank {ids.rank}")
    if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
        raise ShapeError(f"UNSORTED_SEGMENT: num_segments must be a positive int, got {n!r}")
    return TensorType((Expr.const(n),) + tuple(x.shape[ids.rank:]), x.dtype)


def scatter_elements(ctx, ins, args):
    x = _tensor(ins[0], "SCATTER_ELEMENTS")
    idx = _tensor(ins[1], "SCATTER_ELEMENTS", 1)
    axis, reduction = args
    if reduction not in ("none", "add"):
        raise ShapeError(f"SCATTER_ELEMENTS: reduction must be 'none' or 'add', got {reduction!r}")
    if idx.dtype.kind not in "iu" or idx.rank != x.rank:
        raise ShapeError(f"SCATTER_ELEMENTS: indices must be ints of x's rank {x.rank}, got {idx.dtype} of rank "
                         f"{idx.rank}")
    norm_axis(axis, x.rank, "SCATTER_ELEMENTS")
    return x


# ---------------------------------------------------------------- side effects (issue 21)

def assign_param(ctx, ins, args):
    """ASSIGN_PARAM: the value must have the Parameter's dtype and shape (MindSpore's Assign);
    the result is the Parameter's type."""
    (v,) = ins
    (attr,) = args
    p = ctx.attr_type(attr)
    if isinstance(v, ScalarType):
        v = TensorType((), p.dtype)
    v = _tensor(v, "ASSIGN_PARAM")
    if v.dtype != p.dtype:
        raise ShapeError(f"ASSIGN_PARAM: Parameter '{attr}' is {p.dtype}, the value is {v.dtype}")
    if v.rank != p.rank:
        raise ShapeError(f"ASSIGN_PARAM: Parameter '{attr}' has shape {fmt_shape(p.shape)}, "
                         f"the value {fmt_shape(v.shape)}")
    for a, b in zip(p.shape, v.shape):
        ctx.env.require_eq(a, b, f"ASSIGN_PARAM: Parameter '{attr}' has shape {fmt_shape(p.shape)}, "
                                 f"the value {fmt_shape(v.shape)}")
    return p


# ---------------------------------------------------------------- issue 18: batch norm, fused convolution

_BN_NAMES = ("gamma", "beta", "mean", "variance")


def _bn_params(ctx, x, params, what):
    if x.rank < 2:
        raise ShapeError(f"{what}: the input must have a channel axis (rank >= 2), got {fmt_shape(x.shape)}")
    for name, p in zip(_BN_NAMES, params):
        p = _tensor(p, what)
        if p.rank != 1:
            raise ShapeError(f"{what}: {name} must be 1-D [C], got {fmt_shape(p.shape)}")
        ctx.env.require_eq(p.shape[0], x.shape[1], f"{what}: {name} {fmt_shape(p.shape)} does not match the "
                           f"{x.shape[1]} channels of input {fmt_shape(x.shape)}")


def batch_norm(ctx, ins, args):
    x = _tensor(ins[0], "BATCH_NORM")
    _bn_params(ctx, x, ins[1:5], "BATCH_NORM")
    d = result_dtype(list(ins[:5]))
    return TensorType(tuple(ctx.env.norm(s) for s in x.shape), d if d.is_float else dt.float32)


def fused_conv(ctx, ins, args):
    stride, pad, dil, group, bn, program, n = args
    has_bias = isinstance(bn, tuple)
    k = 2 if bn is None else 7 if has_bias else 6
    if n < k:
        raise ShapeError(f"FUSED_CONV needs {k} operands (x, w{', a bias' if has_bias else ''}"
                         f"{', 4 batch norm parameters' if k > 2 else ''}), got {n}")
    out = conv2d(ctx, ins[:2], (stride, pad, dil, group))
    if has_bias:
        _bn_params(ctx, out, ins[2:3], "FUSED_CONV bias")
    if bn is not None:
        out = batch_norm(ctx, [out] + list(ins[k - 4:k]), (bn[1] if has_bias else bn,))
    return run_program(ctx, program, [out] + list(ins[k:]), "FUSED_CONV")
