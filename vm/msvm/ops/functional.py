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

from .. import dtype as dt
from ..bytecode.symbolic import Expr, product
from ..frontend.graph import is_graph, trace_op
from ..interp.kernels import KERNELS
from ..tensor import Tensor, unwrap, wrap


def apply(opname: str, inputs: tuple, operands: tuple = ()):
    if any(is_graph(x) for x in inputs):
        return trace_op(opname, inputs, operands)
    for x in inputs:
        if isinstance(x, Expr):
            raise TypeError(f"{opname}: symbolic value {x} outside a compiled Cell")
    return wrap(KERNELS[opname](*(unwrap(x) for x in inputs), *operands))


def _shape(x):
    return tuple(x.shape) if hasattr(x, "shape") else ()


def _rank(x):
    return len(_shape(x))


def _dims(shape):
    if isinstance(shape, (int, Expr)):
        return (shape,)
    if isinstance(shape, Tensor):
        return tuple(int(v) for v in shape.asnumpy().ravel())
    return tuple(shape)


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
        rest = total // known
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
        # in bytecode: the dims the signature knows are 1; a symbolic dim stays (the result's rank is fixed)
        axis = tuple(i for i, d in enumerate(_shape(input)) if (d.const_value() if isinstance(d, Expr) else d) == 1)
        if not axis:
            return input
    return apply("SQUEEZE", (input,), (_axes(axis, "ops.squeeze: axis"),))


def broadcast_to(input, shape):
    shape = _dims(shape)
    src = _shape(input)
    off = len(shape) - len(src)
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
            raise ValueError(f"{what}: the size of axis {axis} ({d}) must be known to split a tensor into "
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
