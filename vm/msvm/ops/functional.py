"""``ms.ops`` functions with MindSpore 2.x names, argument orders and defaults.

Each function normalizes its Python arguments and calls ``apply(OPCODE, inputs,
operands)``. On Tensors that runs the reference kernel at once (PyNative); on the
frontend's graph values it adds the instruction to the Cell's bytecode. So one
definition serves both modes, and argument handling (negative axes, RESHAPE's
-1, layer_norm's normalized_shape) is written once.
"""

from __future__ import annotations

import builtins

import numpy as np

from .. import device as _device
from .. import dtype as dt
from ..bytecode.symbolic import Expr, SymbolicError, product, smax, smin
from ..errors import UnknownDim
from ..frontend.graph import current, is_graph, trace_op
from ..interp.kernels import KERNELS
from ..tensor import Tensor, unwrap, wrap


def apply(opname: str, inputs: tuple, operands: tuple = ()):
    if any(is_graph(x) for x in inputs):
        return trace_op(opname, inputs, operands)
    for x in inputs:
        if isinstance(x, Expr):
            raise TypeError(f"{opname}: symbolic value {x} outside a compiled Cell")
    if _MIXED and _MIXED[-1] is not None:
        inputs = _mixed_cast(inputs, _MIXED[-1])
    args = [unwrap(x) for x in inputs]
    try:
        return wrap(KERNELS[opname](*args, *operands))
    except (TypeError, ValueError, RuntimeError):
        _device.check_same(opname, args, _device.device_of_any(args))   # tensors of two devices: say which
        raise


# --- PYNATIVE_MODE's mixed precision (Cell.to_float): while a marked Cell's construct runs eagerly,
# each op's float tensor inputs are cast to its dtype, as MindSpore's PyNative executor does
_MIXED: list = []


class mixed_precision:
    """Context manager: eager ops cast their float tensor inputs to ``dtype`` (nested Cells stack)."""

    def __init__(self, dtype):
        self.dtype = dtype

    def __enter__(self):
        _MIXED.append(self.dtype)

    def __exit__(self, *exc):
        _MIXED.pop()


def _mixed_cast(inputs, dtype):
    want = dtype.np
    return tuple(Tensor(unwrap(x).astype(want)) if isinstance(x, Tensor) and unwrap(x).dtype.kind == "f"
                 and unwrap(x).dtype != want else x for x in inputs)


def _shape(x):
    return tuple(x.shape) if hasattr(x, "shape") else ()


def _rank(x):
    return len(_shape(x))


def _dims(shape):
    if isinstance(shape, (int, Expr)):
        return (shape,)
    if isinstance(shape, Tensor):
        return tuple(int(v) for v in shape.asnumpy().ravel())
    return tuple(_dim_of(d) for d in shape)


def _dim_of(d):
    """A dim as given, or, for a run-time int whose value the types know (an int a sub-Cell returns:
    pvt's ``x, (H, W) = self.patch_embed(x)``), that expression."""
    if is_graph(d):
        t = d.type
        if getattr(t, "kind", None) == "i" and isinstance(getattr(t, "value", None), Expr):
            return t.value
    return d


# ---------------------------------------------------------------- elementwise

def add(input, other): return apply("BROADCAST_ADD", (input, other))
def sub(input, other): return apply("BROADCAST_SUB", (input, other))
def mul(input, other): return apply("BROADCAST_MUL", (input, other))


def div(input, other, *, rounding_mode=None):
    """True division; rounding_mode 'floor' rounds the quotient down, 'trunc' toward zero (on
    int inputs both keep the int dtype, as MindSpore's FloorDiv / TruncateDiv)."""
    if rounding_mode is None:
        return apply("BROADCAST_DIV", (input, other))
    if rounding_mode == "floor":
        return apply("BROADCAST_FLOORDIV", (input, other))
    if rounding_mode == "trunc":
        return apply("BROADCAST_TRUNCDIV", (input, other))
    raise ValueError(f"ops.div: rounding_mode must be None, 'floor' or 'trunc', got {rounding_mode!r}")


def floor_divide(input, other): return apply("BROADCAST_FLOORDIV", (input, other))


def pow(input, exponent): return apply("BROADCAST_POW", (input, exponent))  # noqa: A001
def maximum(input, other): return apply("BROADCAST_MAX", (input, other))
def minimum(input, other): return apply("BROADCAST_MIN", (input, other))
def equal(input, other): return apply("BROADCAST_EQ", (input, other))
def not_equal(input, other): return apply("BROADCAST_NE", (input, other))
def less(input, other): return apply("BROADCAST_LT", (input, other))
def less_equal(input, other): return apply("BROADCAST_LE", (input, other))
def greater(input, other): return apply("BROADCAST_GT", (input, other))
def greater_equal(input, other): return apply("BROADCAST_GE", (input, other))
def logical_and(input, other): return apply("BROADCAST_AND", (input, other))
def logical_or(input, other): return apply("BROADCAST_OR", (input, other))
def logical_not(input): return apply("LOGICAL_NOT", (input,))
def where(condition, input, other): return apply("WHERE", (condition, input, other))
def abs(input): return apply("ABS", (input,))  # noqa: A001
def neg(input): return apply("NEG", (input,))
def exp(input): return apply("EXP", (input,))
def log(input): return apply("LOG", (input,))
def sqrt(x): return apply("SQRT", (x,))
def rsqrt(input): return apply("RSQRT", (input,))
def reciprocal(input): return apply("RECIPROCAL", (input,))
def tanh(input): return apply("TANH", (input,))
def sigmoid(input): return apply("SIGMOID", (input,))
def erf(input): return apply("ERF", (input,))


def relu(input, inplace=False):
    return apply("RELU", (input,))


def gelu(input, approximate="none"):
    if approximate not in ("none", "tanh"):
        raise ValueError(f"ops.gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return apply("GELU" if approximate == "none" else "GELU_TANH", (input,))


def clip(input, min=None, max=None):  # noqa: A002
    out = input
    if min is not None:
        out = maximum(out, min)
    if max is not None:
        out = minimum(out, max)
    return out


clamp = clip


def cast(input, dtype):
    return apply("CAST", (input,), (dt.as_dtype(dtype),))


# ---------------------------------------------------------------- matmul

def matmul(input, other):
    ra, rb = _rank(input), _rank(other)
    if ra == 2 and rb == 2:
        return apply("MATMUL", (input, other), (False, False))
    if ra >= 2 and rb >= 2:
        return apply("BATCH_MATMUL", (input, other), (False, False))
    if ra >= 1 and rb >= 1:       # numpy's rule: a 1-D operand gets a dim of 1 that is dropped after
        a = expand_dims(input, 0) if ra == 1 else input
        b = expand_dims(other, -1) if rb == 1 else other
        out = matmul(a, b)
        if rb == 1:
            out = squeeze(out, -1)
        if ra == 1:
            out = squeeze(out, -2 if rb != 1 else -1)
        return out
    raise ValueError(f"ops.matmul: rank-{ra} @ rank-{rb} is not supported (needs rank >= 2 on both sides)")


def tensordot(x1, x2, axes):
    """MindSpore's ops.tensordot (numpy.tensordot): the sum of products over ``axes`` (an int n: x1's last n
    dims with x2's first n; or two sequences of dims, paired in order), the result's dims x1's others then
    x2's others, each in order: both operands transposed and flattened to one product (halonet's relative
    position logits)."""
    r1, r2 = _rank(x1), _rank(x2)
    if isinstance(axes, (int, np.integer)) and not isinstance(axes, bool):
        if not 0 <= axes <= builtins.min(r1, r2):
            raise ValueError(f"ops.tensordot: axes {axes} out of range for ranks {r1} and {r2}")
        a1, a2 = list(range(r1 - axes, r1)), list(range(axes))
    else:
        try:
            a1, a2 = axes
        except (TypeError, ValueError):
            raise TypeError(f"ops.tensordot: axes must be an int or two sequences of dims, got {axes!r}") from None
        a1 = [a1] if isinstance(a1, (int, np.integer)) else list(a1)
        a2 = [a2] if isinstance(a2, (int, np.integer)) else list(a2)
        if len(a1) != len(a2):
            raise ValueError(f"ops.tensordot: {len(a1)} dims of x1 against {len(a2)} of x2")
        a1, a2 = [_tensordot_dim(a, r1, "x1") for a in a1], [_tensordot_dim(a, r2, "x2") for a in a2]
    s1, s2 = _shape(x1), _shape(x2)
    for i, j in zip(a1, a2):
        if _known_differ(s1[i], s2[j]):
            raise ValueError(f"ops.tensordot: x1's dim {i} ({s1[i]}) does not match x2's dim {j} ({s2[j]})")
        b = current()
        if b is not None and (isinstance(s1[i], Expr) or isinstance(s2[j], Expr)):     # (each pair, not the products)
            b.env.require_eq(s1[i], s2[j], f"ops.tensordot: x1's dim {i} must match x2's dim {j}")
    f1, f2 = [i for i in range(r1) if i not in a1], [j for j in range(r2) if j not in a2]
    left = reshape(transpose(x1, tuple(f1 + a1)), (product([s1[i] for i in f1]), product([s1[i] for i in a1])))
    right = reshape(transpose(x2, tuple(a2 + f2)), (product([s2[j] for j in a2]), product([s2[j] for j in f2])))
    return reshape(matmul(left, right), tuple(s1[i] for i in f1) + tuple(s2[j] for j in f2))


def _tensordot_dim(a, rank: int, name: str) -> int:
    if not isinstance(a, (int, np.integer)) or isinstance(a, bool) or not -rank <= a < rank:
        raise ValueError(f"ops.tensordot: dim {a!r} of {name} is out of range for rank {rank}")
    return int(a) % rank


def bmm(input_x, mat2):
    return apply("BATCH_MATMUL", (input_x, mat2), (False, False))


# ---------------------------------------------------------------- reductions

def _axes(axis, what="axis"):
    """Axes as a tuple of ints (None: all). A constant Tensor gives its values; a run-time
    tensor cannot, since the result's shape depends on them."""
    if axis is None:
        return None
    if is_graph(axis):
        raise TypeError(f"{what} must be a constant int, tuple of ints or constant Tensor, got a run-time value "
                        f"{axis.type} (the axes decide the result's shape, so they must be known when compiling)")
    if isinstance(axis, Tensor):
        return tuple(int(a) for a in axis.asnumpy().ravel())
    if isinstance(axis, (list, tuple)):
        if any(is_graph(a) or isinstance(a, Expr) for a in axis):
            raise TypeError(f"{what} must hold constant ints, got {axis!r}")
        return tuple(int(a) for a in axis)
    if isinstance(axis, Expr) or isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"{what} must be a constant int, tuple of ints or constant Tensor, got {axis!r}")
    return (int(axis),)


def sum(input, dim=None, keepdim=False, *, dtype=None):  # noqa: A001
    out = apply("REDUCE_SUM", (input,), (_axes(dim, "ops.sum: dim"), bool(keepdim)))
    return cast(out, dtype) if dtype is not None else out


def mean(x, axis=None, keep_dims=False):
    return apply("REDUCE_MEAN", (x,), (_axes(axis, "ops.mean: axis"), bool(keep_dims)))


def amax(input, axis=None, keepdims=False, *, initial=None, where=None):
    return apply("REDUCE_MAX", (input,), (_axes(axis, "ops.amax: axis"), bool(keepdims)))


def amin(input, axis=None, keepdims=False, *, initial=None, where=None):
    return apply("REDUCE_MIN", (input,), (_axes(axis, "ops.amin: axis"), bool(keepdims)))


max = amax  # noqa: A001
min = amin  # noqa: A001


def argmax(input, dim=None, keepdim=False):
    return apply("ARGMAX", (input,), (None if dim is None else int(dim), bool(keepdim)))


def softmax(input, axis=-1, *, dtype=None):
    if dtype is not None:
        input = cast(input, dtype)
    return apply("SOFTMAX", (input,), (int(axis),))


def log_softmax(logits, axis=-1):
    return apply("LOG_SOFTMAX", (logits,), (int(axis),))


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-05):
    n = len(_dims(normalized_shape))
    return apply("LAYER_NORM", (input, weight, bias), (-n, -n, float(eps)))


# ---------------------------------------------------------------- convolution, pooling, gather (NCHW)

def _pair(v, what):
    if isinstance(v, int) and not isinstance(v, bool):
        return (v, v)
    v = tuple(int(x) for x in v)
    if len(v) == 1:
        return (v[0], v[0])
    if len(v) != 2:
        raise ValueError(f"{what}: expected an int or a pair of ints, got {v}")
    return v


def conv_pad(pad_mode, padding, what):
    """The pad operand of CONV2D/pools: ('same',) or (top, bottom, left, right)."""
    mode = str(pad_mode).lower()
    if mode == "same":
        return ("same",)
    if mode == "valid":
        return (0, 0, 0, 0)
    if mode != "pad":
        raise ValueError(f"{what}: pad_mode must be 'same', 'valid' or 'pad', not {pad_mode!r}")
    if isinstance(padding, int) and not isinstance(padding, bool):
        return (padding,) * 4
    p = tuple(int(x) for x in padding)
    if len(p) == 2:
        return (p[0], p[0], p[1], p[1])
    if len(p) != 4:
        raise ValueError(f"{what}: padding must be an int, 2 or 4 ints, got {p}")
    return p


def conv2d(input, weight, bias=None, stride=1, pad_mode="valid", padding=0, dilation=1, groups=1):
    out = apply("CONV2D", (input, weight), (_pair(stride, "conv2d: stride"), conv_pad(pad_mode, padding, "conv2d"),
                                            _pair(dilation, "conv2d: dilation"), int(groups)))
    if bias is not None:
        out = out + reshape(bias, (1, -1, 1, 1))
    return out


def _conv_transpose(x, weight, size, stride, pads, dilation, group):
    """The transposed convolution (the adjoint of conv2d(., weight, stride, pads, dilation, group)) of x
    [N, Cin, H, W] by ``weight`` [Cin, Cout / group, kh, kw], ``size`` (h, w) of the result: out[o] =
    sum over i, k with o = i * s + k * d - pad of x[i] * weight[k], per channel group. Composed of ops:
    x spread ``stride`` apart (zeros between), bordered (or cropped) so that a valid convolution of
    stride 1 by the flipped weight, its in and out channels swapped per group, gives rows pad ..
    pad + h of the full adjoint (zeros past it). ``pads`` (top, left): where the result starts in it."""
    n, cin, h, w = _shape(x)
    ci, cog, kh, kw = _shape(weight)
    if not all(isinstance(d, int) for d in (ci, cog, kh, kw)):
        raise ValueError(f"conv_transpose: the weight's shape must be known, got {(ci, cog, kh, kw)}")
    if ci % group:
        raise ValueError(f"conv_transpose: the weight's {ci} input channels are not divisible by group {group}")
    (sh, sw), (dh, dw), (pt, pl), (lh, lw) = stride, dilation, pads, size
    if x.dtype != weight.dtype:               # (volo's Fold keeps a float16 weight for float32 images)
        weight = cast(weight, x.dtype)
    if sh > 1 or sw > 1:                      # x spread: [N, C, H, 1, W, 1] + zeros -> [N, C, H * sh, W * sw]
        y = reshape(x, (n, cin, h, 1, w, 1))
        if sh > 1:
            y = concat((y, _fill((n, cin, h, sh - 1, w, 1), 0, x.dtype)), 3)
        if sw > 1:
            y = concat((y, _fill((n, cin, h, sh, w, sw - 1), 0, x.dtype)), 5)
        x = reshape(y, (n, cin, h * sh, w * sw))
    eh, ew = dh * (kh - 1) + 1, dw * (kw - 1) + 1
    x = pad(x, (ew - 1 - pl, lw + pl - w * sw, eh - 1 - pt, lh + pt - h * sh))
    wt = reshape(transpose(reshape(weight, (group, ci // group, cog, kh, kw)), (0, 2, 1, 3, 4)),
                 (group * cog, ci // group, kh, kw))
    wt = apply("SLICE", (wt,), ((("s", None, None, None),) * 2 + (("s", None, None, -1),) * 2,))
    return apply("CONV2D", (x, wt), ((1, 1), (0, 0, 0, 0), (dh, dw), int(group)))


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """MindSpore's ops.conv_transpose2d (torch's semantics): the result (H - 1) * stride - 2 * padding +
    dilation * (k - 1) + output_padding + 1 high (and wide), every row of it computed."""
    s, p = _pair(stride, "conv_transpose2d: stride"), _pair(padding, "conv_transpose2d: padding")
    op, d = _pair(output_padding, "conv_transpose2d: output_padding"), _pair(dilation, "conv_transpose2d: dilation")
    _, _, h, w = _shape(input)
    kh, kw = _shape(weight)[2:]
    size = tuple((n - 1) * s[i] - 2 * p[i] + d[i] * (k - 1) + op[i] + 1 for i, (n, k) in enumerate(((h, kh), (w, kw))))
    out = _conv_transpose(input, weight, size, s, p, d, int(groups))
    return out if bias is None else out + reshape(bias, (1, -1, 1, 1))


def max_pool2d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    if _pair(dilation, "max_pool2d: dilation") != (1, 1) or ceil_mode or return_indices:
        raise NotImplementedError("ops.max_pool2d: dilation, ceil_mode and return_indices are not supported yet")
    k = _pair(kernel_size, "max_pool2d: kernel_size")
    s = k if stride is None else _pair(stride, "max_pool2d: stride")
    return apply("MAX_POOL2D", (x,), (k, s, conv_pad("pad", padding, "max_pool2d")))


def avg_pool2d(input, kernel_size=1, stride=1, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    if ceil_mode or divisor_override is not None:
        raise NotImplementedError("ops.avg_pool2d: ceil_mode and divisor_override are not supported yet")
    k = _pair(kernel_size, "avg_pool2d: kernel_size")
    return apply("AVG_POOL2D", (input,), (k, _pair(stride, "avg_pool2d: stride"),
                                          conv_pad("pad", padding, "avg_pool2d"), bool(count_include_pad)))


def adaptive_avg_pool2d(input, output_size):
    size = (output_size, output_size) if isinstance(output_size, int) or output_size is None else tuple(output_size)
    return apply("ADAPTIVE_AVG_POOL2D", (input,), (tuple(None if d is None else int(d) for d in size),))


def gather(input_params, input_indices, axis, batch_dims=0):
    if batch_dims:
        raise NotImplementedError("ops.gather: batch_dims is not supported yet")
    return apply("GATHER", (input_params, input_indices), (int(axis),))


# ---------------------------------------------------------------- indexing and creation (model zoo)

def _bound(v, what):
    """An arange end or a fill size: an int, a float, a symbolic dim or a constant 0-d Tensor."""
    if isinstance(v, Tensor):
        v = v.asnumpy().item()
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, Expr):
        return v.const_value() if v.is_const() else v
    if is_graph(v) or not isinstance(v, (int, float)):
        raise TypeError(f"{what} must be a number, a shape dim or a constant Tensor, got {v!r}")
    return v


def arange(start=0, end=None, step=1, *, dtype=None):
    """MindSpore's ops.arange; the ends may be symbolic dims (``ops.arange(x.shape[1])``). Without
    dtype: int64 when start, end and step are ints, else float32."""
    if end is None:
        start, end = 0, start
    start, end, step = (_bound(v, "ops.arange: start, end and step") for v in (start, end, step))
    if dtype is None:
        d = dt.int64 if all(isinstance(v, (int, Expr)) for v in (start, end, step)) else dt.float32
    else:
        d = dt.as_dtype(dtype)
    if isinstance(start, Expr) or isinstance(end, Expr):
        return trace_op("ARANGE", (), (start, end, step, d))
    from ..frontend.graph import tracing

    if tracing():
        return trace_op("ARANGE", (), (start, end, step, d))
    return wrap(KERNELS["ARANGE"](start, end, step, d))


def full(size, fill_value, *, dtype=None):
    fill_value = _bound(fill_value, "ops.full: fill_value") if not isinstance(fill_value, bool) else fill_value
    if dtype is None:
        dtype = dt.bool_ if isinstance(fill_value, bool) else dt.int64 if isinstance(fill_value, int) else dt.float32
    return _fill(size, fill_value, dtype)


def full_like(input, fill_value, *, dtype=None):
    return _fill(_shape(input), fill_value, dtype or input.dtype)


def _tri(input, diagonal, upper):
    """triu/tril: keep where col - row >= diagonal (triu) or <= diagonal (tril), over the last two dims."""
    s = _shape(input)
    if len(s) < 2:
        raise ValueError(f"ops.{'triu' if upper else 'tril'}: input must have rank >= 2, got {len(s)}")
    rows = expand_dims(arange(s[-2], dtype=dt.int32), -1)
    cols = arange(s[-1], dtype=dt.int32)
    d = cols - rows
    keep = greater_equal(d, int(diagonal)) if upper else less_equal(d, int(diagonal))
    zero = False if input.dtype == dt.bool_ else 0
    return where(keep, input, zero)


def triu(input, diagonal=0):
    return _tri(input, diagonal, True)


def tril(input, diagonal=0):
    return _tri(input, diagonal, False)


def one_hot(indices, depth, on_value=1, off_value=0, axis=-1):
    """``on_value`` where the new axis' position equals the index, else ``off_value`` (MindSpore's
    OneHot; the result takes on_value's dtype, float32 for Python numbers)."""
    depth = int(_bound(depth, "ops.one_hot: depth"))
    rank = _rank(indices) + 1
    axis = axis % rank
    pos = arange(depth, dtype=dt.int32)
    if axis != rank - 1:
        pos = reshape(pos, (depth,) + (1,) * (rank - 1 - axis))
    hit = equal(expand_dims(indices, axis), pos)
    on, off = (v if isinstance(v, Tensor) or is_graph(v) else float(v) for v in (on_value, off_value))
    out = where(hit, on, off)
    if not isinstance(on_value, Tensor) and not is_graph(on_value):
        out = cast(out, dt.float32)
    return out


def tile(input, dims):
    """np.tile as broadcast_to between two reshapes: x [d..] -> [1, d1, 1, d2..] -> [r1, d1, ..] -> [r1*d1, ..]."""
    dims = tuple(_plain(d) for d in _dims(dims))
    s = _shape(input)
    if len(dims) < len(s):
        dims = (1,) * (len(s) - len(dims)) + dims
    s = (1,) * (len(dims) - len(s)) + tuple(s)
    if all(isinstance(r, int) and r == 1 for r in dims):
        return reshape(input, s) if len(s) != _rank(input) else input
    inter = tuple(v for r, d in zip(dims, s) for v in (1, d))
    big = tuple(v for r, d in zip(dims, s) for v in (r, d))
    return reshape(broadcast_to(reshape(input, inter), big), tuple(r * d for r, d in zip(dims, s)))


def repeat_elements(x, rep, axis=0):
    """np.repeat(x, rep, axis) for an int rep: expand after axis, broadcast, merge."""
    s = _shape(x)
    axis %= len(s)
    y = broadcast_to(expand_dims(x, axis + 1), tuple(s[:axis + 1]) + (int(rep),) + tuple(s[axis + 1:]))
    return reshape(y, tuple(s[:axis]) + (s[axis] * int(rep),) + tuple(s[axis + 1:]))


def repeat_interleave(input, repeats, axis=None):
    if axis is None:
        return repeat_elements(reshape(input, (-1,)), repeats, 0)
    return repeat_elements(input, repeats, axis)


def cumsum(input, axis, dtype=None):
    out = apply("CUMSUM", (input,), (int(axis), False, False))
    return cast(out, dtype) if dtype is not None else out


def masked_fill(input_x, mask, value):
    """value where mask is True, else input_x; the result keeps input_x's dtype."""
    if isinstance(value, Tensor) or is_graph(value):
        value = cast(value, input_x.dtype)
    elif isinstance(value, np.generic):
        value = value.item()
    return where(mask, value, input_x)


def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None):
    """MindSpore's ops.interpolate for [N, C, H, W]: 'nearest' or 'bilinear' to ``size`` (ints or
    symbolic dims) or by an integer ``scale_factor``."""
    if _rank(input) != 4:
        raise NotImplementedError(f"ops.interpolate: only 4-D [N, C, H, W] inputs are supported, got rank {_rank(input)}")
    if (size is None) == (scale_factor is None):
        raise ValueError("ops.interpolate: give exactly one of size and scale_factor")
    if mode not in ("nearest", "bilinear"):
        raise NotImplementedError(f"ops.interpolate: mode {mode!r} is not supported yet (nearest, bilinear)")
    if mode == "nearest" and align_corners:
        raise ValueError("ops.interpolate: align_corners is for the bilinear mode")
    out_size = scale = None
    if size is not None:
        out_size = tuple(_plain(d) for d in ((size, size) if isinstance(size, (int, Expr)) else size))
    else:
        sf = (scale_factor, scale_factor) if isinstance(scale_factor, (int, float)) else tuple(scale_factor)
        if not all(float(f).is_integer() and f > 0 for f in sf):
            raise NotImplementedError(f"ops.interpolate: scale_factor must be a positive integer, got {scale_factor}")
        scale = tuple(int(f) for f in sf)
    return apply("RESIZE", (input,), (out_size, scale, mode, bool(align_corners)))


def pad(input_x, padding, mode="constant", value=None):
    """Constant padding; padding pairs run from the last dim backwards (left, right, top, bottom...).
    Negative pads crop. Pads are ints or symbolic dims."""
    if mode != "constant":
        raise NotImplementedError(f"ops.pad: mode {mode!r} is not supported yet (only 'constant')")
    pads = tuple(_plain(p) for p in _dims(padding))
    if len(pads) % 2:
        raise ValueError(f"ops.pad: padding needs pairs, got {pads}")
    out = input_x
    fill_v = 0 if value is None else value
    for k in range(len(pads) // 2):
        axis = _rank(out) - 1 - k
        lo, hi = pads[2 * k], pads[2 * k + 1]
        crop = [None, None]
        parts = []
        for side, p in ((0, lo), (1, hi)):
            if isinstance(p, int) and p < 0:
                crop[side] = -p if side == 0 else p
                continue
            if isinstance(p, int) and p == 0:
                continue
            shape = list(_shape(out))
            shape[axis] = p
            parts.append((side, _fill(shape, fill_v, out.dtype)))
        if crop != [None, None]:
            spec = (("s", None, None, None),) * axis + (("s", crop[0], crop[1], None),)
            out = apply("SLICE", (out,), (spec,))
        if parts:
            before = [t for side, t in parts if side == 0]
            after = [t for side, t in parts if side == 1]
            out = concat(before + [out] + after, axis)
    return out


def scalar_to_tensor(input_x, dtype=dt.float32):
    """A Python number or a symbolic dim as a 0-d tensor."""
    if isinstance(input_x, np.generic):
        input_x = input_x.item()
    if isinstance(input_x, Expr) or is_graph(input_x):
        return trace_op("CAST", (input_x,), (dt.as_dtype(dtype),))
    return Tensor(np.asarray(input_x, dtype=dt.as_dtype(dtype).np))


class SymbolicRange:
    """``F.make_range(n)`` for a symbolic n: the tuple cannot be built while compiling, so it
    stays a range that ``F.tuple_to_array`` turns into an ARANGE."""

    __slots__ = ("start", "stop", "step")

    def __init__(self, start, stop, step):
        self.start, self.stop, self.step = start, stop, step

    def __repr__(self):
        return f"make_range({self.start}, {self.stop}, {self.step})"


def make_range(start, limit=None, delta=1):
    """MindSpore's F.make_range: the tuple of ints in [start, limit) by delta."""
    if limit is None:
        start, limit = 0, start
    start, limit, delta = (_bound(v, "F.make_range") for v in (start, limit, delta))
    if any(isinstance(v, Expr) for v in (start, limit, delta)):
        return SymbolicRange(start, limit, delta)
    return tuple(range(start, limit, delta))


def clip_by_value(x, clip_value_min=None, clip_value_max=None):
    """MindSpore's C.clip_by_value."""
    return clip(x, clip_value_min, clip_value_max)


def tuple_to_array(input_x):
    """A tuple of numbers (or shape dims) as a 1-D tensor: int64 for ints, float32 otherwise."""
    if isinstance(input_x, SymbolicRange):
        return arange(input_x.start, input_x.stop, input_x.step, dtype=dt.int64)
    vals = tuple(v.item() if isinstance(v, np.generic) else v for v in input_x)
    d = dt.int64 if all(isinstance(v, (int, Expr)) and not isinstance(v, bool) for v in vals) else dt.float32
    if any(isinstance(v, Expr) and not v.is_const() for v in vals):
        return stack([scalar_to_tensor(v, d) for v in vals])
    vals = tuple(v.const_value() if isinstance(v, Expr) else v for v in vals)
    return Tensor(np.asarray(vals, dtype=d.np))


def shape(input_x):
    """The shape as a tuple of ints and symbolic dims (F.shape, P.Shape, ops.shape)."""
    return _shape(input_x)


def dtype(input_x):
    return input_x.dtype


def depend(value, expr):
    """Execution order hint in MindSpore's graph; the bytecode already runs in program order."""
    return value


def stop_gradient(value):
    """MindSpore's ops.stop_gradient: no gradient flows through it; msvm runs forward passes, where it is the
    value itself (mindyolo's yolov10 head detaches its one-to-one branch so)."""
    return value


def addmm(input, mat1, mat2, *, beta=1, alpha=1):
    """beta * input + alpha * (mat1 @ mat2)."""
    prod = matmul(mat1, mat2)
    if alpha != 1:
        prod = prod * alpha
    return prod + (input if beta == 1 else input * beta)


def expand_as(input, other):
    return broadcast_to(input, _shape(other))


# ---------------------------------------------------------------- layout

def reshape(input, shape):
    shape = _dims(shape)
    src = _shape(input)
    if sum_(1 for d in shape if isinstance(d, int) and d == -1) > 1:
        raise ValueError(f"ops.reshape: only one -1 is allowed in {shape}")
    if any(isinstance(d, int) and d == -1 for d in shape):
        known = product(d for d in shape if not (isinstance(d, int) and d == -1))
        total = product(src)
        try:
            rest = total // known
        except (ZeroDivisionError, SymbolicError):
            raise ValueError(f"ops.reshape: cannot infer the -1 in {shape}: the other dims multiply to 0") from None
        shape = tuple(rest if (isinstance(d, int) and d == -1) else d for d in shape)
    shape = tuple(_plain(d) for d in shape)
    return apply("RESHAPE", (input,), (shape,))


def sum_(it):
    total = 0
    for v in it:
        total += v
    return total


def _plain(d):
    if isinstance(d, Expr) and d.is_const():
        return d.const_value()
    if isinstance(d, bool) or not isinstance(d, (int, Expr)):
        raise TypeError(f"shape dims must be ints, got {d!r}")
    return d


def transpose(input, dims):
    return apply("TRANSPOSE", (input,), (tuple(int(p) for p in dims),))


permute = transpose


def expand_dims(input_x, axis):
    return apply("EXPAND_DIMS", (input_x,), (int(axis),))


def unsqueeze(input, dim):
    return expand_dims(input, dim)


def squeeze(input, axis=None):
    if axis is None and is_graph(input):
        # in bytecode: SQUEEZE without axes drops the dims known to be 1 and keeps those known not to be; a dim
        # that may be 1 (a set_inputs None dim) makes the Cell compile for exact shapes (shapes.squeeze), where
        # keeping it gave a result of the wrong rank when it was 1
        axis = ()
    return apply("SQUEEZE", (input,), (_axes(axis, "ops.squeeze: axis"),))


def broadcast_to(input, shape):
    shape = _dims(shape)
    src = _shape(input)
    off = len(shape) - len(src)
    for i, d in enumerate(shape):
        if isinstance(d, int) and d == -1 and i < off:
            raise ValueError(f"broadcast_to: -1 in shape {shape} at dim {i}, where the input {src} has no dim to keep")
    shape = tuple(src[i - off] if (isinstance(d, int) and d == -1) else d for i, d in enumerate(shape))
    return apply("BROADCAST_TO", (input,), (tuple(_plain(d) for d in shape),))


def _known_dim(x, axis, what):
    rank = _rank(x)
    if not -rank <= axis < rank:
        raise ValueError(f"{what}: axis {axis} is out of range for rank {rank}")
    axis %= rank
    d = _shape(x)[axis]
    if isinstance(d, Expr):
        if d.const_value() is None:
            raise UnknownDim(f"{what}: the size of axis {axis} ({d}) must be known to split a tensor into "
                             f"a fixed number of parts")
        d = d.const_value()
    return axis, int(d)


def _take(x, axis, start, stop=None):
    """x[..., start, ...] (stop None) or x[..., start:stop, ...] along axis, as one SLICE."""
    spec = (("s", None, None, None),) * axis + ((("i", start),) if stop is None else (("s", start, stop, 1),))
    return apply("SLICE", (x,), (spec,))


def unstack(input_x, axis=0):
    """The slices of input_x along axis (whose size must be known), as a tuple."""
    axis, n = _known_dim(input_x, axis, "ops.unstack")
    return tuple(_take(input_x, axis, k) for k in range(n))


def split(tensor, split_size_or_sections, axis=0):
    """MindSpore's ops.split: pieces of split_size (the last may be smaller) or of the given sections."""
    axis, n = _known_dim(tensor, axis, "ops.split")
    if isinstance(split_size_or_sections, int) and not isinstance(split_size_or_sections, bool):
        step = split_size_or_sections
        if step <= 0:
            raise ValueError(f"ops.split: split_size must be positive, got {step}")
        sizes = [builtins.min(step, n - k) for k in range(0, n, step)]
    else:
        sizes = [int(v) for v in split_size_or_sections]
        if sum_(sizes) != n:
            raise ValueError(f"ops.split: sections {sizes} do not add up to the axis size {n}")
    out, start = [], 0
    for size in sizes:
        out.append(_take(tensor, axis, start, start + size))
        start += size
    return tuple(out)


def chunk(input, chunks, axis=0):
    """MindSpore's ops.chunk: ceil(n / chunks)-sized pieces along axis."""
    axis, n = _known_dim(input, axis, "ops.chunk")
    if chunks <= 0:
        raise ValueError(f"ops.chunk: chunks must be positive, got {chunks}")
    return split(input, builtins.max(-(-n // chunks), 1), axis)


def flatten(input, order="C", *, start_dim=1, end_dim=-1):
    s = _shape(input)
    r = len(s)
    a, b = start_dim % r, end_dim % r
    return reshape(input, tuple(s[:a]) + (product(s[a:b + 1]),) + tuple(s[b + 1:]))


def concat(tensors, axis=0):
    tensors = tuple(tensors)
    if not isinstance(axis, int) or isinstance(axis, bool):
        raise TypeError(f"ops.concat: axis must be a constant int, got {axis!r} (a symbolic axis cannot be compiled)")
    return apply("CONCAT", tensors, (len(tensors), axis))


cat = concat


def eye(n, m=None, dtype=None):
    """The n x m identity matrix (m defaults to n), MindSpore's ops.eye; n and m ints known when it is
    made (outside construct or from constants in it)."""
    m = n if m is None else m
    if not all(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) and v >= 0 for v in (n, m)):
        raise TypeError(f"ops.eye: n and m must be non-negative ints, got {n!r}, {m!r}")
    return Tensor(np.eye(int(n), int(m), dtype=dt.as_dtype(dtype or dt.float32).np))


def constexpr(fn=None, *, get_instance=True, reuse_result=True, check=True):
    """MindSpore's ``ops.constexpr``: a function construct calls with arguments known when compiling runs
    then, and its result (a Python value or a Tensor) is a constant of the bytecode (mindcv's convit
    builds its relative position indices so)."""
    def mark(f):
        f.__msvm_constexpr__ = True
        return f
    return mark(fn) if fn is not None else mark


def roll(input, shifts, dims=None):
    """Elements shifted along ``dims`` by ``shifts``, wrapping around (numpy.roll; dims None: over the
    flattened tensor): per axis, the two parts around the cut joined the other way round (SLICE and
    CONCAT), shifts ints, dims of any size (swin's shifted windows)."""
    shifts = (shifts,) if isinstance(shifts, (int, Expr)) else tuple(shifts)
    if dims is None:
        return reshape(roll(reshape(input, (-1,)), sum_(shifts), 0), _shape(input))
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    if len(shifts) != len(dims):
        raise ValueError(f"ops.roll: {len(shifts)} shifts for {len(dims)} dims")
    out, rank = input, _rank(input)
    for s, d in zip(shifts, dims):
        if not -rank <= d < rank:
            raise ValueError(f"ops.roll: dim {d} is out of range for rank {rank}")
        d %= rank
        n = _shape(out)[d]
        if isinstance(n, int):
            if n == 0 or s % n == 0:
                continue
            cut = n - s % n
        else:                          # (an empty dim cuts nowhere: the modulus is at least 1)
            m = smax(n, 1)
            cut = (m - Expr.of(s) % m) % m
        whole = [("s", None, None, None)] * d
        cut = _plain(cut)
        head = apply("SLICE", (out,), (tuple(whole + [("s", None, cut, None)]),))
        tail = apply("SLICE", (out,), (tuple(whole + [("s", cut, None, None)]),))
        out = concat((tail, head), d)
    return out


def stack(tensors, axis=0):
    tensors = tuple(tensors)
    return apply("STACK", tensors, (len(tensors), int(axis)))


def zeros(size, dtype=None):
    return _fill(size, 0, dtype)


def ones(shape, dtype=None):
    return _fill(shape, 1, dtype)


def _fill(shape, value, dtype):
    from ..frontend.graph import trace_fill, tracing

    shape = tuple(_plain(d) for d in _dims(shape))
    d = dt.as_dtype(dtype) if dtype is not None else dt.float32
    if any(isinstance(x, Expr) for x in shape) or tracing():
        return trace_fill(shape, value, d)
    return wrap(KERNELS["FILL"](shape, value, d))


def zeros_like(input, *, dtype=None):
    return _fill(_shape(input), 0, dtype or input.dtype)


def ones_like(input, *, dtype=None):
    return _fill(_shape(input), 1, dtype or input.dtype)


def dropout(input, p=0.5, training=True, seed=None):
    if training and p > 0:
        raise NotImplementedError("ops.dropout with training=True is not supported (msvm runs inference)")
    return input


# ---------------------------------------------------------------- math, bitwise, activations (conformance)
# The implementations behind MindSpore's three faces of each op: ms.ops.<function>, the primitive
# ms.ops.<Name>() and the Tensor method. ops/registry.py maps the names to these functions.

def sin(input): return apply("SIN", (input,))
def cos(input): return apply("COS", (input,))
def tan(input): return apply("TAN", (input,))
def asin(input): return apply("ASIN", (input,))
def acos(input): return apply("ACOS", (input,))
def atan(input): return apply("ATAN", (input,))
def sinh(input): return apply("SINH", (input,))
def cosh(input): return apply("COSH", (input,))
def asinh(input): return apply("ASINH", (input,))
def acosh(input): return apply("ACOSH", (input,))
def atanh(input): return apply("ATANH", (input,))
def floor(input): return apply("FLOOR", (input,))
def ceil(input): return apply("CEIL", (input,))
def trunc(input): return apply("TRUNC", (input,))
def sign(input): return apply("SIGN", (input,))
def isnan(input): return apply("ISNAN", (input,))
def isinf(input): return apply("ISINF", (input,))
def isfinite(input): return apply("ISFINITE", (input,))
def square(input): return apply("SQUARE", (input,))
def log1p(input): return apply("LOG1P", (input,))
def expm1(input): return apply("EXPM1", (input,))
def erfc(input): return apply("ERFC", (input,))
def invert(input): return apply("INVERT", (input,))
def bitwise_and(input, other): return apply("BROADCAST_BITAND", (input, other))
def bitwise_or(input, other): return apply("BROADCAST_BITOR", (input, other))
def bitwise_xor(input, other): return apply("BROADCAST_BITXOR", (input, other))
def logical_xor(input, other): return apply("BROADCAST_XOR", (input, other))
def atan2(input, other): return apply("BROADCAST_ATAN2", (input, other))
def remainder(input, other): return apply("BROADCAST_MOD", (input, other))


def round_(input, *, decimals=0):
    """Half to even, as MindSpore's Round; ints stay ints."""
    if decimals:
        scale = 10.0 ** decimals
        return div(apply("ROUND", (mul(input, scale),)), scale)
    return apply("ROUND", (input,))


def inv(input):
    """1 / x; MindSpore's Inv keeps an int input's dtype (the quotient truncated)."""
    dtype = getattr(input, "dtype", None)
    if dtype is not None and dtype.kind in "iu":
        return div(1, input, rounding_mode="trunc")
    return reciprocal(input)


def matrix_band_part(x, lower, upper):
    """x with zeros outside the band (i - j <= lower, j - i <= upper) of its last two dims; a
    negative bound keeps the whole triangle."""
    bounds = []
    for what, v in (("lower", lower), ("upper", upper)):
        if isinstance(v, Tensor):
            v = v.asnumpy()
            if v.size != 1:
                raise ValueError(f"ops.matrix_band_part: {what} must be one int, got a tensor of shape {v.shape}")
            v = v.reshape(-1)[0]
        if is_graph(v) or isinstance(v, Expr):
            raise TypeError(f"ops.matrix_band_part: {what} must be a constant int inside construct, got {v!r}")
        bounds.append(int(v))
    return apply("MATRIX_BAND_PART", (x,), (builtins.max(bounds[0], -1), builtins.max(bounds[1], -1)))


def prod(input, axis=None, keep_dims=False, dtype=None):
    out = apply("REDUCE_PROD", (input,), (_axes(axis, "ops.prod: axis"), bool(keep_dims)))
    return cast(out, dtype) if dtype is not None else out


def all_(input, axis=None, keep_dims=False):
    return apply("REDUCE_ALL", (input,), (_axes(axis, "ops.all: axis"), bool(keep_dims)))


def any_(input, axis=None, keep_dims=False):
    return apply("REDUCE_ANY", (input,), (_axes(axis, "ops.any: axis"), bool(keep_dims)))


def argmin(input, axis=None, keepdims=False):
    return apply("ARGMIN", (input,), (None if axis is None else int(axis), bool(keepdims)))


def var(input, axis=None, ddof=0, keepdims=False):
    """Variance over axis with ddof (an int, or True/False for 1/0, as MindSpore's unbiased)."""
    axes = _axes(axis, "ops.var: axis")
    shape = _shape(input)
    n = product(shape[a] for a in axes) if axes is not None else product(shape)
    xc = sub(input, mean(input, axes, True))
    cnt = Expr.of(n) - int(ddof)
    return div(sum(mul(xc, xc), axes, keepdims), cnt.const_value() if cnt.is_const() else cnt)


def std(input, axis=None, ddof=0, keepdims=False):
    return sqrt(var(input, axis, ddof, keepdims))


def logsumexp(input, axis, keep_dims=False):
    axes = _axes(axis, "ops.logsumexp: axis")
    m = amax(input, axes, True)
    m = where(isfinite(m), m, zeros_like(m))
    out = add(log(sum(exp(sub(input, m)), axes, True)), m)
    return out if keep_dims else squeeze(out, axes)


def norm(A, ord=None, dim=None, keepdim=False, *, dtype=None):  # noqa: A002
    """Vector p-norms over dim (None: all elements, 2-norm), and 'fro' over two dims."""
    x = cast(A, dtype) if dtype is not None else A
    axes = _axes(dim, "ops.norm: dim")
    p = 2 if ord in (None, "fro") else ord
    if p == float("inf"):
        return amax(abs(x), axes, keepdim)
    if p == float("-inf"):
        return amin(abs(x), axes, keepdim)
    if p == 0:
        return sum(cast(not_equal(x, 0), x.dtype), axes, keepdim)
    if p == 1:
        return sum(abs(x), axes, keepdim)
    if p == 2:
        return sqrt(sum(mul(x, x), axes, keepdim))
    return pow(sum(pow(abs(x), float(p)), axes, keepdim), 1.0 / p)


def softplus(input, beta=1, threshold=20):
    if beta == 1 and threshold == 20:
        return apply("SOFTPLUS", (input,))
    bx = mul(input, beta)
    return where(greater(bx, threshold), input, div(apply("SOFTPLUS", (bx,)), beta))


def softsign(x): return div(x, add(abs(x), 1))
def mish(x):
    """x * tanh(softplus(x)); float16 computes in float32 (its rounding at each step is 1e-3 off)."""
    if getattr(x, "dtype", None) is dt.float16:
        return cast(mish(cast(x, dt.float32)), dt.float16)
    return mul(x, tanh(softplus(x)))
def relu6(x): return clip(relu(x), None, 6)
def hardsigmoid(input): return clip(div(add(input, 3), 6), 0, 1)    # relu6(x + 3) / 6, rounded as MindSpore
def hardswish(x): return mul(x, hardsigmoid(x))
def silu(input): return mul(input, sigmoid(input))
def leaky_relu(input, alpha=0.2): return where(greater_equal(input, 0), input, mul(input, alpha))
def fast_gelu(x): return mul(div(x, add(exp(mul(abs(x), -1.702)), 1)), exp(mul(sub(x, abs(x)), 0.851)))


def elu(input_x, alpha=1.0):
    return where(greater(input_x, 0), input_x, mul(expm1(input_x), alpha))


def celu(x, alpha=1.0):
    return where(greater(x, 0), x, mul(expm1(div(x, alpha)), alpha))


def selu(input_x):
    scale, alpha = 1.0507009873554804934193349852946, 1.6732632423543772848170429916717
    return mul(where(greater(input_x, 0), input_x, mul(expm1(input_x), alpha)), scale)


def hardtanh(input, min_val=-1.0, max_val=1.0):
    return clip(input, min_val, max_val)


def hardshrink(input, lambd=0.5):
    return where(greater(abs(input), lambd), input, zeros_like(input))


def softshrink(input, lambd=0.5):
    return where(greater(input, lambd), sub(input, lambd), where(less(input, -lambd), add(input, lambd),
                                                                  zeros_like(input)))


def bias_add(input_x, bias, data_format="NCHW"):
    """x + bias along the channel axis (1 for NC..., the last for N...C)."""
    r = _rank(input_x)
    if data_format.endswith("C") and data_format != "NC":
        return add(input_x, bias)
    return add(input_x, reshape(bias, (1, -1) + (1,) * (r - 2)))


def vmap(fn, in_axes=0, out_axes=0):
    """``fn`` mapped over an axis of its inputs: a Python loop over the slices, the results stacked
    (each input's mapped axis must have a known size; in_axes None leaves an input whole)."""
    def mapped(*args):
        axes = in_axes if isinstance(in_axes, (tuple, list)) else (in_axes,) * len(args)
        if len(axes) != len(args):
            raise ValueError(f"vmap: in_axes has {len(axes)} entries for {len(args)} inputs")
        sizes = set().union(*(_vmap_sizes(a, ax) for a, ax in zip(args, axes)))
        if len(sizes) != 1:
            raise ValueError(f"vmap: the mapped axes have sizes {sorted(sizes)}; they must be equal")
        (n,) = sizes
        cols = [_vmap_slices(a, ax, n) for a, ax in zip(args, axes)]
        # a Cell mapped inside a construct being compiled: its construct runs on the graph values
        # (Python-level, like an inlined function); eagerly, the Cell is called as usual
        call = fn.construct if getattr(fn, "__msvm_cell__", False) and any_of(is_graph(a) for a in args) else fn
        outs = [call(*(c[k] for c in cols)) for k in range(n)]
        if isinstance(outs[0], (tuple, list)):
            oa = out_axes if isinstance(out_axes, (tuple, list)) else (out_axes,) * len(outs[0])
            return tuple(stack([o[i] for o in outs], oa[i]) for i in range(len(outs[0])))
        return stack(outs, out_axes)
    return mapped


def _vmap_sizes(a, ax) -> set:
    """The sizes of the mapped axes of input a (a tuple input takes a tuple of axes, or one for all)."""
    if ax is None:
        return set()
    if isinstance(a, (tuple, list)):
        sub = ax if isinstance(ax, (tuple, list)) else (ax,) * len(a)
        if len(sub) != len(a):
            raise ValueError(f"vmap: in_axes {ax} has {len(sub)} entries for a tuple of {len(a)}")
        return set().union(*(_vmap_sizes(x, y) for x, y in zip(a, sub)))
    return {_known_dim(a, ax, "vmap")[1]}


def _vmap_slices(a, ax, n) -> tuple:
    """Input a's n slices along its mapped axes (a tuple input: a tuple per slice)."""
    if ax is None:
        return (a,) * n
    if isinstance(a, (tuple, list)):
        sub = ax if isinstance(ax, (tuple, list)) else (ax,) * len(a)
        parts = [_vmap_slices(x, y, n) for x, y in zip(a, sub)]
        return tuple(tuple(p[k] for p in parts) for k in range(n))
    return unstack(a, ax)


def _ints(*xs) -> bool:
    """Every tensor among xs has an int dtype (the operators & | ^ ~ are bitwise then, logical on bools)."""
    ds = [getattr(x, "dtype", None) for x in xs]
    return any_of(d is not None and d.kind in "iu" for d in ds)


def any_of(it):
    for v in it:
        if v:
            return True
    return False


def and_(a, b): return bitwise_and(a, b) if _ints(a, b) else logical_and(a, b)
def or_(a, b): return bitwise_or(a, b) if _ints(a, b) else logical_or(a, b)
def xor_(a, b): return bitwise_xor(a, b) if _ints(a, b) else logical_xor(a, b)
def invert_(x): return invert(x) if _ints(x) else logical_not(x)


def _full_like_piece(x, shape, value):
    """A tensor of shape and x's dtype holding value (a constant or a run-time scalar)."""
    d = x.dtype
    if d is dt.bool_:
        return logical_or(zeros(shape, dt.bool_), value)
    return cast(add(zeros(shape, d), value), d)


def shift(x, fill_value, periods=1, axis=-1):
    """MindSpore's Shift: x moved by periods along axis, the vacated places set to fill_value
    (the axis may be symbolic: the pieces are slices with constant bounds)."""
    r = _rank(x)
    if not -r <= axis < r:
        raise ValueError(f"Shift: axis {axis} is out of range for rank {r}")
    axis %= r
    if periods == 0:
        return add(x, zeros_like(x)) if x.dtype is not dt.bool_ else logical_or(x, zeros_like(x))
    p = abs_int(periods)
    s = list(_shape(x))
    d = s[axis]
    s[axis] = builtins.min(p, d) if isinstance(d, int) else smin(Expr.const(p), d)
    fill = _full_like_piece(x, tuple(s), fill_value)
    lead = (("s", None, None, None),) * axis
    if periods > 0:
        return concat((fill, apply("SLICE", (x,), (lead + (("s", None, -p, 1),),))), axis)
    return concat((apply("SLICE", (x,), (lead + (("s", p, None, 1),),)), fill), axis)


def abs_int(v: int) -> int:
    return v if v >= 0 else -v


# ---------------------------------------------------------------- composites of the ops above (conformance)

def _reduced(loss, reduction, what, batch=None):
    if reduction == "none":
        return loss
    if reduction == "sum":
        return sum(loss)
    if reduction == "mean":
        return mean(loss)
    if reduction == "batchmean" and batch is not None:
        return div(sum(loss), batch)
    raise ValueError(f"{what}: reduction must be 'none', 'mean' or 'sum'{', batchmean' if batch else ''}, "
                     f"got {reduction!r}")


def padding(x, pad_dim_size=8):
    """MindSpore's Padding: the last dim (of size 1) extended with zeros to pad_dim_size."""
    s = _shape(x)
    return concat((x, zeros(tuple(s[:-1]) + (pad_dim_size - 1,), x.dtype)), -1)


def ger(input, vec2):
    """The outer product of two vectors."""
    return mul(reshape(input, (-1, 1)), reshape(vec2, (1, -1)))


def std_mean(input, axis=None, ddof=0, keepdims=False):
    return std(input, axis, ddof, keepdims), mean(input, axis, keepdims)


def var_mean(input, axis=None, ddof=0, keepdims=False):
    return var(input, axis, ddof, keepdims), mean(input, axis, keepdims)


def square_sum_all(x, y):
    """(sum of x*x, sum of y*y); MindSpore's checks: float16/float32, one dtype, one shape."""
    for v, n in ((x, "x"), (y, "y")):
        _require_tensor(v, "SquareSumAll", n)
        if v.dtype not in (dt.float16, dt.float32):
            raise TypeError(f"For 'SquareSumAll', '{n}' must be float16 or float32, got {v.dtype}")
    if x.dtype != y.dtype:
        raise TypeError(f"For 'SquareSumAll', 'x' and 'y' must have one dtype, got {x.dtype} and {y.dtype}")
    _same_shape(x, y, "For 'SquareSumAll', 'x' and 'y' must have one shape")
    return sum(mul(x, x)), sum(mul(y, y))


def l2_loss(x):
    return div(sum(mul(x, x)), 2)


def rank(input_x):
    _require_tensor(input_x, "Rank", "input_x")
    return _rank(input_x)


def size(input_x):
    p = product(_shape(input_x))
    return p.const_value() if isinstance(p, Expr) and p.is_const() else p


def dot(input, other):
    """MindSpore's dot: contracts input's last dim with other's second-to-last."""
    ra, rb = _rank(input), _rank(other)
    if ra == 2 and rb == 2:
        return matmul(input, other)
    sa, sb = _shape(input), _shape(other)
    a2 = reshape(input, (-1, sa[-1]))
    perm = (rb - 2,) + tuple(range(rb - 2)) + (rb - 1,) if rb >= 2 else (0,)
    b2 = reshape(transpose(other, perm), (sb[-2] if rb >= 2 else sb[0], -1))
    out = matmul(a2, b2)
    return reshape(out, tuple(sa[:-1]) + tuple(sb[:-2]) + tuple(sb[-1:] if rb >= 2 else ()))


def kl_div(logits, labels, reduction="mean"):
    """labels * (log(labels) - logits), 0 where labels are 0."""
    loss = where(greater(labels, 0), mul(labels, sub(log(labels), logits)), zeros_like(labels))
    return _reduced(loss, reduction, "KLDivLoss", _shape(logits)[0] if _rank(logits) else 1)


def binary_cross_entropy_with_logits(logits, label, weight=None, pos_weight=None, reduction="mean"):
    log_weight = add(mul(sub(pos_weight, 1), label), 1) if pos_weight is not None else 1
    loss = add(mul(sub(1, label), logits), mul(log_weight, add(log1p(exp(neg(abs(logits)))), relu(neg(logits)))))
    if weight is not None:
        loss = mul(loss, weight)
    return _reduced(loss, reduction, "BCEWithLogitsLoss")


def depth_to_space(x, block_size):
    n, c, h, w = _shape(x)
    b = block_size
    y = transpose(reshape(x, (n, b, b, c // (b * b), h, w)), (0, 3, 4, 1, 5, 2))
    return reshape(y, (n, c // (b * b), h * b, w * b))


def space_to_depth(x, block_size):
    n, c, h, w = _shape(x)
    b = block_size
    y = transpose(reshape(x, (n, c, h // b, b, w // b, b)), (0, 3, 5, 1, 2, 4))
    return reshape(y, (n, c * b * b, h // b, w // b))


def lp_norm(input, axis, p=2, keep_dims=False, epsilon=1e-12):
    return norm(input, p, axis, keep_dims)


def lerp(input, end, weight):
    return add(input, mul(weight, sub(end, input)))


def meshgrid(*inputs, indexing="xy"):
    if len(inputs) == 1 and isinstance(inputs[0], (tuple, list)):
        inputs = tuple(inputs[0])
    n = len(inputs)
    sizes = [_shape(x)[0] for x in inputs]
    axes = list(range(n))
    if indexing == "xy" and n >= 2:
        axes[0], axes[1] = 1, 0
    full = [None] * n
    for i, a in enumerate(axes):
        full[a] = sizes[i]
    out = []
    for i, x in enumerate(inputs):
        s = [1] * n
        s[axes[i]] = -1
        out.append(broadcast_to(reshape(x, tuple(s)), tuple(full)))
    return tuple(out)


def xdivy(x, y): return where(equal(x, 0), zeros_like(div(x, y)), div(x, y))
def xlogy(input, other): return where(equal(input, 0), zeros_like(mul(input, log(other))), mul(input, log(other)))
def div_no_nan(x1, x2): return where(equal(x2, 0), zeros_like(div(x1, x2)), div(x1, x2))
def fmod(input, other): return sub(input, mul(div(input, other, rounding_mode="trunc"), other))
def approximate_equal(x, y, tolerance=1e-5):
    """|x - y| < tolerance, with MindSpore's checks (float tolerance, one shape, rank below 8)."""
    if isinstance(tolerance, bool) or not isinstance(tolerance, (float, int)):
        raise TypeError(f"For 'ApproximateEqual', the type of 'tolerance' should be 'float', "
                        f"but got {type(tolerance).__name__}")
    sx, sy = _shape(x), _shape(y)
    if len(sx) != len(sy) or any(_known_differ(a, b) for a, b in zip(sx, sy)):
        raise ValueError(f"For 'ApproximateEqual', 'x1' must have the same shape as 'x2', got {sx} and {sy}")
    if len(sx) >= 8:
        raise RuntimeError(f"For 'ApproximateEqual', the x's rank should be less than 8, but got {len(sx)}")
    return less(abs(sub(x, y)), tolerance)
def identity(x): return add(x, zeros_like(x)) if x.dtype is not dt.bool_ else logical_or(x, zeros_like(x))


def addn(x):
    out = x[0]
    for t in x[1:]:
        out = add(out, t)
    return out


def equal_count(x, y):
    return reshape(cast(sum(cast(equal(x, y), dt.int32)), dt.int32), (1,))


def dense(input, weight, bias=None):
    """input @ weight.T + bias over input's last dim (a 1-D weight: input @ weight)."""
    s = _shape(input)
    if _rank(weight) == 1:
        out = matmul(input, weight)
        return add(out, bias) if bias is not None else out
    out = matmul(reshape(input, (-1, s[-1])) if len(s) != 2 else input, transpose(weight, (1, 0)))
    if bias is not None:
        out = add(out, bias)
    return reshape(out, tuple(s[:-1]) + (_shape(weight)[0],)) if len(s) != 2 else out


def smooth_l1_loss(input, target, beta=1.0, reduction="none"):
    d = abs(sub(input, target))
    loss = where(less(d, beta), div(mul(mul(d, d), 0.5), beta), sub(d, 0.5 * beta))
    return _reduced(loss, reduction, "SmoothL1Loss")


def binary_cross_entropy(logits, labels, weight=None, reduction="mean"):
    loss = neg(add(mul(labels, log(logits)), mul(sub(1, labels), log(sub(1, logits)))))
    if weight is not None:
        loss = mul(loss, weight)
    return _reduced(loss, reduction, "BinaryCrossEntropy")


def prelu(x, weight):
    """x where x > 0, else weight * x; a weight per channel (axis 1) or one for all."""
    r = _rank(x)
    w = reshape(weight, (1, -1) + (1,) * (r - 2)) if r >= 2 and _shape(weight) not in ((), (1,)) else weight
    return where(greater(x, 0), x, mul(w, x))


def l2_normalize(x, axis=0, epsilon=1e-4):
    s = sum(mul(x, x), axis, True)
    return div(x, sqrt(maximum(s, epsilon)))


def tanhshrink(input): return sub(input, tanh(input))


def slice(input_x, begin, size):  # noqa: A001
    """MindSpore's Slice: size[i] elements from begin[i] (-1: to the end) along each dim."""
    begin, size = _dims(begin), _dims(size)
    spec = tuple(("s", int(b), None if int(s) == -1 else int(b) + int(s), 1) for b, s in zip(begin, size))
    return apply("SLICE", (input_x,), (spec,))




def _arg_with_value(fn, red):
    def call(x, axis=0, keep_dims=False):
        return fn(x, axis, keep_dims), red(x, axis, keep_dims)
    return call


argmax_with_value = _arg_with_value(argmax, amax)
argmin_with_value = _arg_with_value(argmin, amin)


# ---------------------------------------------------------------- scatter (conformance)

def _scatter_indices(indices, what):
    """MindSpore's scatters take int32 or int64 indices (TypeError otherwise, as there)."""
    d = getattr(indices, "dtype", None)
    if d is not None and d not in (dt.int32, dt.int64):
        raise TypeError(f"{what}: indices must be int32 or int64, got {d}")
    return indices


def _scatter(mode):
    def tensor_scatter(input_x, indices, updates):
        return apply("TENSOR_SCATTER", (input_x, _scatter_indices(indices, f"tensor_scatter_{mode}"), updates),
                     (mode,))
    tensor_scatter.__name__ = f"tensor_scatter_{mode}"
    return tensor_scatter


tensor_scatter_update = _scatter("update")
tensor_scatter_add = _scatter("add")
tensor_scatter_sub = _scatter("sub")
tensor_scatter_mul = _scatter("mul")
tensor_scatter_div = _scatter("div")
tensor_scatter_max = _scatter("max")
tensor_scatter_min = _scatter("min")


def _first_axis(mode):
    """ScatterAdd & co.: indices pick rows (dim 0) of x."""
    def scatter(input_x, indices, updates):
        return apply("TENSOR_SCATTER", (input_x, expand_dims(indices, -1), updates), (mode,))
    scatter.__name__ = f"scatter_{mode}"
    return scatter


scatter_update = _first_axis("update")
scatter_add = _first_axis("add")
scatter_sub = _first_axis("sub")
scatter_mul = _first_axis("mul")
scatter_div = _first_axis("div")
scatter_max = _first_axis("max")
scatter_min = _first_axis("min")


def _const_indices(indices):
    if is_graph(indices):          # (issue 21) run-time row indices: one row index per update row
        if _rank(indices) > 1:
            raise ValueError(f"inplace ops: indices must be an int or a 1-D tensor, got rank {_rank(indices)}")
        return expand_dims(indices, -1) if _rank(indices) == 1 else reshape(indices, (1, 1))
    idx = indices.asnumpy() if isinstance(indices, Tensor) else np.asarray(indices)
    return Tensor(np.asarray(idx, dtype=np.int32).reshape(-1, 1))


def inplace_update(x, v, indices):
    """x with rows indices (an int or ints) replaced by v (a new tensor: msvm's tensors are values)."""
    return apply("TENSOR_SCATTER", (x, _const_indices(indices), v), ("update",))


def inplace_add(x, v, indices):
    return apply("TENSOR_SCATTER", (x, _const_indices(indices), v), ("add",))


def inplace_sub(x, v, indices):
    return apply("TENSOR_SCATTER", (x, _const_indices(indices), v), ("sub",))


def index_add(x, indices, y, axis, use_lock=True, check_index_bound=True):
    """x plus y's slices added at indices along axis."""
    r = _rank(x)
    axis %= r
    perm = (axis,) + tuple(i for i in range(r) if i != axis)
    back = tuple(perm.index(i) for i in range(r))
    out = apply("TENSOR_SCATTER", (transpose(x, perm), expand_dims(indices, -1), transpose(y, perm)), ("add",))
    return transpose(out, back)


# ---------------------------------------------------------------- gathers, distances, blocks (conformance)

def gather_nd(input_x, indices):
    k = _shape(indices)[-1] if _rank(indices) else None
    if isinstance(k, Expr) and not k.is_const():
        raise UnknownDim(f"ops.gather_nd: the last dim of indices ({k}) must be known: it is how many of x's "
                         f"dims each index picks")
    return apply("GATHER_ND", (input_x, indices))


def gather_elements(input, dim, index):
    return apply("GATHER_D", (input, index), (int(dim),))


def cdist(x1, x2, p=2.0):
    """Pairwise p-norm distances between the rows of x1 [..., P, M] and x2 [..., R, M]."""
    d = sub(expand_dims(x1, -2), expand_dims(x2, -3))
    return norm(d, float(p), -1)


def sigmoid_cross_entropy_with_logits(logits, label):
    return add(sub(relu(logits), mul(logits, label)), log1p(exp(neg(abs(logits)))))


def mse_loss(input, target, reduction="mean"):
    d = sub(input, target)
    return _reduced(mul(d, d), reduction, "mse_loss")


def _block(v, n=2):
    return (v,) * n if isinstance(v, int) else tuple(int(b) for b in v)


def batch_to_space_nd(input_x, block_shape, crops):
    """[N*b0*b1, C, H, W] -> [N, C, H*b0 - crops, W*b1 - crops] (MindSpore's BatchToSpaceND, NCHW)."""
    b0, b1 = _block(block_shape)
    n, c, h, w = _shape(input_x)
    y = reshape(input_x, (b0, b1, n // (b0 * b1), c, h, w))
    y = reshape(transpose(y, (2, 3, 4, 0, 5, 1)), (n // (b0 * b1), c, h * b0, w * b1))
    (t, bt), (lf, rt) = [tuple(int(v) for v in cr) for cr in crops]
    return apply("SLICE", (y,), ((("s", None, None, None), ("s", None, None, None),
                                  ("s", t, h * b0 - bt, 1), ("s", lf, w * b1 - rt, 1)),))


def space_to_batch_nd(input_x, block_size, paddings):
    """[N, C, H, W] (zero-padded by paddings) -> [N*b0*b1, C, H/b0, W/b1] (MindSpore's SpaceToBatchND)."""
    b0, b1 = _block(block_size)
    (t, bt), (lf, rt) = [tuple(int(v) for v in p) for p in paddings]
    x = input_x
    n, c, h, w = _shape(x)
    if t or bt:
        x = concat(tuple(p for p in (zeros((n, c, t, w), x.dtype) if t else None, x,
                                     zeros((n, c, bt, w), x.dtype) if bt else None) if p is not None), 2)
        h = h + t + bt
    if lf or rt:
        x = concat(tuple(p for p in (zeros((n, c, h, lf), x.dtype) if lf else None, x,
                                     zeros((n, c, h, rt), x.dtype) if rt else None) if p is not None), 3)
        w = w + lf + rt
    y = transpose(reshape(x, (n, c, h // b0, b0, w // b1, b1)), (3, 5, 0, 1, 2, 4))
    return reshape(y, (b0 * b1 * n, c, h // b0, w // b1))


def argsort(input, axis=-1, descending=False):
    return apply("ARGSORT", (input,), (int(axis), bool(descending)))


def sort(input_x, axis=-1, descending=False):
    """(values, int32 indices) of input_x sorted along axis (stable)."""
    idx = argsort(input_x, axis, descending)
    return gather_elements(input_x, axis, idx), idx


def topk(input, k, dim=None, largest=True, sorted=True):  # noqa: A002
    """The k largest (or smallest) values along dim (default: the last) and their int32 indices."""
    axis = -1 if dim is None else int(dim)
    r = _rank(input)
    axis %= builtins.max(r, 1)
    spec = (("s", None, None, None),) * axis + (("s", 0, int(k), 1),)
    idx = apply("SLICE", (argsort(input, axis, largest),), (spec,))
    if not sorted:                 # in their order in input, as MindSpore's TopK(sorted=False)
        idx = gather_elements(idx, axis, argsort(idx, axis))
    return gather_elements(input, axis, idx), idx


def _segments(mode):
    def unsorted_segment(input_x, segment_ids, num_segments):
        n = num_segments
        if isinstance(n, Tensor):
            n = n.asnumpy().reshape(-1)[0]
        if is_graph(n) or isinstance(n, Expr):
            raise TypeError(f"unsorted_segment_{mode}: num_segments must be a constant int inside construct")
        return apply("UNSORTED_SEGMENT", (input_x, segment_ids), (int(n), mode))
    unsorted_segment.__name__ = f"unsorted_segment_{mode}"
    return unsorted_segment


unsorted_segment_sum = _segments("sum")
unsorted_segment_prod = _segments("prod")
unsorted_segment_max = _segments("max")
unsorted_segment_min = _segments("min")


def erfinv(input): return apply("ERFINV", (input,))


def renorm(input, p, axis, maxnorm):
    """Each slice along axis scaled down to p-norm maxnorm where its norm is larger."""
    r = _rank(input)
    rest = tuple(i for i in range(r) if i != axis % r)
    n = norm(input, float(p), rest, True)
    scale = where(greater(n, maxnorm), div(maxnorm, add(n, 1e-7)), ones_like(n))
    return mul(input, scale)


def tensor_scatter_elements(input_x, indices, updates, axis=0, reduction="none"):
    return apply("SCATTER_ELEMENTS", (input_x, indices, updates), (int(axis), str(reduction)))


# ---------------------------------------------------------------- in-place updates (issue 21)
# MindSpore's Assign, AssignAdd, AssignSub, the Scatter*/ScatterNd* primitives, InplaceUpdate and
# inplace_index_add change their first input when it is a Parameter (in PyNative any Tensor).
# The new value is computed by the pure ops above; ``_write_back`` installs it: eagerly through
# ``Tensor._set_value``, in construct as ASSIGN_PARAM for a Parameter (an opcode with a declared
# effect, emitted in statement order; see opcodes.EFFECTS), and for an argument or intermediate by
# rebinding that graph value (graph.rebind). Assign* take Parameters only there, as MindSpore's.

def _write_back(target, value, what: str, *, must_be_param: bool = False, any_tensor: bool = True):
    """``target`` := ``value`` where target can be updated; returns what the op returns (the
    updated target, or the value where nothing is updated in place)."""
    from ..frontend.graph import param_of, rebind, trace_effect
    from ..tensor import Parameter

    if is_graph(target):
        if param_of(target) is not None:
            return trace_effect("ASSIGN_PARAM", (value,), (target.node[1],))
        if must_be_param:
            raise TypeError(f"{what}: the variable must be a Parameter of the Cell (self.<name>), got {target.type}")
        if any_tensor and target.node[0] != "param":     # an argument or an intermediate: the name is rebound
            return rebind(target, value)
        return value
    if is_graph(value):            # (a concrete Parameter while compiling: read outside construct's code)
        raise TypeError(f"{what}: in construct, update a Parameter through the Cell's attribute (self.<name>), "
                        f"not a {type(target).__name__} object reached another way")
    if isinstance(target, Parameter) or (any_tensor and isinstance(target, Tensor)):
        target._set_value(value)
        return target
    if must_be_param:
        raise TypeError(f"{what}: the variable must be a Parameter or Tensor, got {type(target).__name__}")
    return value


def _same_dtype(x, value, what):
    dx, dv = getattr(x, "dtype", None), getattr(value, "dtype", None)
    if dv is None and not isinstance(value, (bool, int, float)):
        raise TypeError(f"{what}: value must be a Tensor or a number, got {type(value).__name__}")
    if dx is not None and dv is not None and dx != dv:
        return cast(value, dx)      # MindSpore converts value to the variable's dtype
    return value


def assign(variable, value):
    """variable := value (a Parameter; in PyNative any Tensor); returns the new value."""
    if not is_graph(variable) and not isinstance(variable, Tensor):
        raise TypeError(f"assign: variable must be a Parameter, got {type(variable).__name__}")
    v = _same_dtype(variable, value, "assign")
    if not is_graph(v) and not isinstance(v, Tensor):       # a number fills the variable
        v = cast(add(zeros_like(variable), v), variable.dtype)
    return _write_back(variable, v, "assign", must_be_param=True)


def _as_dtype_of(v, x):
    return v if v.dtype == x.dtype else cast(v, x.dtype)


def assign_add(variable, value):
    """variable := variable + value; returns the new value."""
    new = add(variable, _same_dtype(variable, value, "assign_add"))
    return _write_back(variable, _as_dtype_of(new, variable), "assign_add", must_be_param=True)


def assign_sub(variable, value):
    """variable := variable - value; returns the new value."""
    new = sub(variable, _same_dtype(variable, value, "assign_sub"))
    return _write_back(variable, _as_dtype_of(new, variable), "assign_sub", must_be_param=True)


def _in_place(fn, name):
    """A scatter that updates its first input (MindSpore's ScatterNdAdd, ScatterAdd, ...)."""
    def op(input_x, indices, updates):
        return _write_back(input_x, fn(input_x, indices, updates), name)
    op.__name__ = name
    return op


for _m in ("update", "add", "sub", "mul", "div", "max", "min"):     # (the pure forms: tensor_scatter_*)
    globals()[f"scatter_nd_{_m}"] = _in_place(globals()[f"tensor_scatter_{_m}"], f"scatter_nd_{_m}")
    globals()[f"scatter_{_m}"] = _in_place(globals()[f"scatter_{_m}"], f"scatter_{_m}")


def inplace_update_param(x, v, indices):
    """InplaceUpdate / InplaceUpdateV2: x's rows replaced; a Parameter x is updated in place."""
    return _write_back(x, inplace_update(x, v, indices), "inplace_update", any_tensor=False)


def inplace_index_add(var, indices, updates, axis):
    """var's slices at indices along axis plus updates, written into var; returns it."""
    return _write_back(var, index_add(var, indices, updates, axis), "inplace_index_add")


# ---------------------------------------------------------------- complex numbers (issue 21)

def real(input): return apply("REAL", (input,))
def imag(input): return apply("IMAG", (input,))
def conj(input): return apply("CONJ", (input,))
def angle(input): return apply("ANGLE", (input,))


def complex(real, imag):  # noqa: A001
    """real + 1j * imag from two real tensors (MindSpore's ops.Complex)."""
    return apply("COMPLEX", (real, imag))


def conjugate_transpose(x, perm):
    """The conjugate of x permuted (MindSpore's ConjugateTranspose)."""
    return conj(transpose(x, tuple(perm)))


# ---------------------------------------------------------------- input checks (issue 21)

def _require_tensor(v, op: str, name: str):
    """MindSpore's TypeError for a non-tensor input (a number, a string)."""
    if isinstance(v, Tensor) or (is_graph(v) and hasattr(v.type, "dtype")):
        return
    raise TypeError(f"For '{op}', '{name}' must be a Tensor, got {type(v).__name__}"
                    + (f" {v.type}" if is_graph(v) else f" {v!r}"))


def _same_shape(x, y, why: str):
    """ValueError unless x and y have one shape; in construct, symbolic dims are unified (the
    entry check raises ShapeMismatch, a ValueError, for arguments that differ)."""
    sx, sy = _shape(x), _shape(y)
    if len(sx) != len(sy) or any(_known_differ(a, b) for a, b in zip(sx, sy)):
        raise ValueError(f"{why}, got {sx} and {sy}")
    from ..frontend.graph import current

    b = current()
    if b is not None:
        for a, c in zip(sx, sy):
            if isinstance(a, Expr) or isinstance(c, Expr):
                b.env.require_eq(a, c, f"{why}, got {sx} and {sy}")


def _known_differ(a, b) -> bool:
    """Two dims that are certainly different (ints, or constant exprs)."""
    a = a.const_value() if isinstance(a, Expr) else a
    b = b.const_value() if isinstance(b, Expr) else b
    return isinstance(a, int) and isinstance(b, int) and a != b


def truncate_div(x, y):
    """trunc(x / y) (MindSpore's TruncateDiv: numbers only, no bool)."""
    if all(getattr(v, "dtype", None) is dt.bool_ or isinstance(v, bool) for v in (x, y)):
        raise TypeError("For 'TruncateDiv', the inputs must not both be bool")
    return div(x, y, rounding_mode="trunc")


def squared_difference(x, y):
    """(x - y) ** 2 (MindSpore's SquaredDifference; bool inputs are a TypeError there)."""
    if any(getattr(v, "dtype", None) is dt.bool_ for v in (x, y)):
        raise TypeError("For 'SquaredDifference', the inputs must be numbers, got bool")
    d = sub(x, y)
    return mul(d, d)
