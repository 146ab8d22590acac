"""Reference numpy implementations of every compute instruction.

``KERNELS[name](*inputs, *operands, out=None)`` is "the living definition" of an
op: the interpreter calls it, eager (PyNative) ops call it, and compiled tiers
are tested against it. They run on any device's arrays: computing numpy functions dispatch on
their arguments (NEP 13/18, as CuPy's arrays take them), and ``np`` here is ``device.XNP``, numpy
with array creation (``np.asarray``, ``np.full``, ...) on the current device; ``_device.ARRAYS``
is "an array of any device" where a kernel tells arrays from Python scalars. ``out`` is a buffer
of the right shape and dtype that the kernel may write into (reused across calls); kernels that cannot use it
ignore it. Dtypes follow ``msvm.dtype.promote``.
"""

from __future__ import annotations

import math

from .. import device as _device
from .. import dtype as dt
from ..bytecode.opcodes import TABLE
from ..bytecode.program import evaluate
from ..device import XNP as np  # numpy, with array creation on the current device (device.py)
from . import kernels_more as _kernels_more

_special = None


def _sp():
    """scipy.special, imported on first use (it costs ~0.3 s, more than the rest of ``import msvm``)."""
    global _special
    if _special is None:
        from scipy import special

        _special = special
    return _special


def _dtype_of(v):
    if isinstance(v, _device.ARRAYS):
        return dt.from_numpy(v.dtype), None
    return None, dt.scalar_kind(v)


def result_dtype(*vals) -> dt.DType:
    """Promotion over arrays and Python scalars (see msvm.dtype.result_of)."""
    strong, weak = [], []
    for v in vals:
        d, k = _dtype_of(v)
        (strong.append(d) if d is not None else weak.append(k))
    return dt.result_of(strong, weak)


def _arr(v, d: dt.DType):
    """An ndarray of dtype d (no copy when it already is one)."""
    if isinstance(v, np.ndarray) and v.dtype == d.np:
        return v
    return np.asarray(v, dtype=d.np)


def _scalar(a, b):
    return not isinstance(a, _device.ARRAYS) and not isinstance(b, _device.ARRAYS)


def _py(v, d: dt.DType):
    """A Python scalar of the kind of dtype d (scalars stay Python values at run time)."""
    return bool(v) if d.kind == "b" else int(v) if d.kind in "iu" else complex(v) if d.kind == "c" else float(v)


def _binary(ufunc, force_float=False):
    def kern(a, b, out=None):
        if _scalar(a, b):
            d = result_dtype(a, b)
            if force_float and not d.is_inexact:
                d = dt.float32
            return _py(ufunc(np.float64(a) if d.is_float else a, b), d)
        if (type(a) is np.ndarray and type(b) is np.ndarray and a.dtype == b.dtype
                and not (force_float and a.dtype.kind not in "fc")):
            return ufunc(a, b, out=out) if out is not None else ufunc(a, b)
        d = result_dtype(a, b)
        if force_float and not d.is_inexact:
            d = dt.float32
        r = ufunc(_arr(a, d), _arr(b, d), out=out) if out is not None else ufunc(_arr(a, d), _arr(b, d))
        return np.asarray(r)
    return kern


def _compare(ufunc):
    def kern(a, b, out=None):
        if _scalar(a, b):
            return bool(ufunc(a, b))
        d = result_dtype(a, b)
        return np.asarray(ufunc(_arr(a, d), _arr(b, d)))
    return kern


def _logical(ufunc):
    def kern(a, b, out=None):
        return np.asarray(ufunc(np.asarray(a, dtype=bool), np.asarray(b, dtype=bool)))
    return kern


def _unary(fn, to_float=False):
    def kern(x, out=None):
        if not isinstance(x, _device.ARRAYS):
            r = fn(np.atleast_1d(np.asarray(x, dtype=np.float64 if (to_float or isinstance(x, float)) else None)), None)
            return _py(np.asarray(r).reshape(-1)[0], dt.float32 if to_float or isinstance(x, float) else result_dtype(x))
        if isinstance(x, np.generic):
            x = np.asarray(x, dtype=result_dtype(x).np)
        if to_float and x.dtype.kind not in "fc":
            x = x.astype(np.float32)
        if out is not None:
            return fn(x, out)
        r = fn(x, None)
        # a float tensor keeps its dtype (scipy's erf and expit compute float16 in float64)
        return r.astype(x.dtype) if x.dtype.kind == "f" and r.dtype != x.dtype else r
    return kern


def _with_out(ufunc):
    return lambda x, out: ufunc(x, out=out) if out is not None else np.asarray(ufunc(x))


def _rsqrt(x, out):
    r = np.sqrt(x, out=out) if out is not None else np.asarray(np.sqrt(x))    # (a 0-d x gives a numpy scalar)
    return np.divide(1, r, out=r)


def _sigmoid(x, out):
    return np.asarray(_sp().expit(x, out=out) if out is not None else _sp().expit(x))


def _relu(x, out):
    return np.maximum(x, x.dtype.type(0), out=out) if out is not None else np.maximum(x, x.dtype.type(0))


_SQRT1_2 = 1.0 / math.sqrt(2.0)
_SQRT_2_PI = math.sqrt(2.0 / math.pi)


def _gelu(x, out):
    # x Phi(x) = x (erfc(-x / sqrt 2) / 2), as JAX: erfc keeps its relative accuracy in the negative
    # tail, where 1 + erf(x / sqrt 2) cancels (in float32 up to 5% off at -4, all of it below -5), and
    # the halving first keeps GELU(3e38) finite. The argument in float64: erfc's tail is steep (a
    # relative error e in a is 2 a^2 e in erfc a)
    r = np.asarray(_sp().erfc(np.multiply(x, -_SQRT1_2, dtype=np.float64)), dtype=x.dtype)
    r *= x.dtype.type(0.5)
    return np.multiply(r, x, out=out) if out is not None else r * x


def _gelu_tanh(x, out):
    # x (1 + tanh u) / 2 = x sigmoid(2 u), u = sqrt(2 / pi) (x + 0.044715 x^3): the sigmoid keeps its
    # relative accuracy where 1 + tanh u cancels (in float32 up to half off at -4, 13x below -5)
    t = x.dtype.type
    inner = np.asarray(x * x)          # (an array to work in, also for a 0-d x)
    inner *= t(0.044715)
    inner += t(1.0)
    inner *= x
    inner *= t(2 * _SQRT_2_PI)
    _sp().expit(inner, out=inner)
    return np.multiply(inner, x, out=out) if out is not None else inner * x


def _reciprocal(x, out):
    return np.divide(x.dtype.type(1), x, out=out) if out is not None else np.divide(x.dtype.type(1), x)


def as_array(kern):
    """``kern`` for an instruction whose result is a 0-d tensor: numpy gives a numpy scalar for
    most ops on 0-d arrays, and the VM's tensors are ndarrays (what the binder, sub-Cell calls,
    sites and the caller's Tensor expect), so the result becomes a 0-d array of its dtype.
    Linked only where the verified result type is rank 0 (``ComputeSpec``)."""
    def kern0(*args, **kwargs):
        r = kern(*args, **kwargs)
        return r if type(r) is np.ndarray else np.asarray(r)
    return kern0


def where(c, a, b, out=None):
    d = result_dtype(a, b)
    return np.asarray(np.where(np.asarray(c, dtype=bool), _arr(a, d), _arr(b, d)))


def cast(x, to: dt.DType, out=None):
    x = np.asarray(x)
    if x.dtype.kind == "c" and to.kind != "c":      # complex to real: the real part (bool: nonzero)
        return np.asarray(x != 0) if to.kind == "b" else x.real.astype(to.np)
    if out is not None:
        np.copyto(out, x, casting="unsafe")
        return out
    return x.astype(to.np)


def fill(shape, value, dtype, out=None):
    return np.full(shape, value, dtype=dtype.np)


def _half_matmul(a, b, out):
    """float16 operands: products summed in float32, the result rounded to float16 (as float16
    hardware accumulates; numpy's own float16 matmul has no BLAS and is ~100x slower)."""
    r = np.matmul(a.astype(np.float32), b.astype(np.float32))
    if out is not None:
        np.copyto(out, r, casting="unsafe")
        return out
    return r.astype(np.float16)


def matmul(a, b, ta, tb, out=None):
    if a.dtype == np.float16 and b.dtype == np.float16:
        return _half_matmul(a.T if ta else a, b.T if tb else b, out)
    if not ta and not tb and a.dtype == b.dtype:
        return np.matmul(a, b, out=out) if out is not None else np.matmul(a, b)
    if ta:
        a = a.T
    if tb:
        b = b.T
    d = result_dtype(a, b)
    a, b = _arr(a, d), _arr(b, d)
    return np.matmul(a, b, out=out) if out is not None else np.matmul(a, b)


def batch_matmul(a, b, ta, tb, out=None):
    if ta:
        a = np.swapaxes(a, -1, -2)
    if tb:
        b = np.swapaxes(b, -1, -2)
    d = result_dtype(a, b)
    a, b = _arr(a, d), _arr(b, d)
    if a.dtype == np.float16 and b.dtype == np.float16:
        return _half_matmul(a, b, out)
    return np.matmul(a, b, out=out) if out is not None else np.matmul(a, b)


def run_program(program, inputs):
    """Reference semantics of a fused program: each part's own kernel, in order."""
    return evaluate(program, inputs.__getitem__, lambda v: v,
                    lambda row, args, operands: KERNELS[row.name](*args, *operands))


def fused_elementwise(*args, out=None):
    *inputs, program, n = args
    return run_program(program, inputs)


def fused_matmul(*args, out=None):
    *inputs, ta, tb, batched, program, n = args
    mm = (batch_matmul if batched else matmul)(inputs[0], inputs[1], ta, tb)
    return run_program(program, [mm] + list(inputs[2:]))


def _axes(axes):
    if axes is None or axes == ():
        return None
    return tuple(axes) if isinstance(axes, (tuple, list)) else axes


def _reduce(fn, to_float=False):
    def kern(x, axes, keep, out=None):
        x = np.asarray(x)
        if to_float and x.dtype.kind not in "fc":
            x = x.astype(np.float32)
        if fn is np.sum and x.dtype == np.bool_:
            x = x.astype(np.int64)
        r = fn(x, axis=_axes(axes), keepdims=bool(keep), out=out) if out is not None else \
            fn(x, axis=_axes(axes), keepdims=bool(keep))
        return np.asarray(r, dtype=x.dtype) if not isinstance(r, np.ndarray) else r
    return kern


def argmax(x, axis, keep, out=None):
    x = np.asarray(x)
    if axis is None:
        return np.asarray(np.argmax(x), dtype=np.int32)
    return np.argmax(x, axis=axis, keepdims=bool(keep)).astype(np.int32)


def softmax(x, axis, out=None):
    x = np.asarray(x)
    if x.dtype.kind != "f":
        x = x.astype(np.float32)
    e = x - x.max(axis=axis, keepdims=True)
    np.exp(e, out=e)
    e /= e.sum(axis=axis, keepdims=True)
    return e


def log_softmax(x, axis, out=None):
    x = np.asarray(x)
    if x.dtype.kind != "f":
        x = x.astype(np.float32)
    s = x - x.max(axis=axis, keepdims=True)
    return s - np.log(np.exp(s).sum(axis=axis, keepdims=True))


def layer_norm(x, gamma, beta, begin_norm_axis, begin_params_axis, eps, out=None):
    x = np.asarray(x)
    if x.dtype.kind != "f":
        x = x.astype(np.float32)
    axes = tuple(range(begin_norm_axis % x.ndim, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    xc = x - mean
    var = np.mean(xc * xc, axis=axes, keepdims=True)
    var += x.dtype.type(eps)
    np.sqrt(var, out=var)
    xc /= var
    if gamma is not None:
        xc *= gamma
    if beta is not None:
        xc += beta
    return xc


def reshape(x, shape, out=None):
    return np.reshape(x, shape)


def transpose(x, perm, out=None):
    return np.transpose(x, perm)


def expand_dims(x, axis, out=None):
    return np.expand_dims(x, axis)


def squeeze(x, axes, out=None):
    if axes is None or axes == ():
        return np.squeeze(x)
    return np.squeeze(x, axis=tuple(axes) if isinstance(axes, (tuple, list)) else axes)


def broadcast_to(x, shape, out=None):
    return np.broadcast_to(x, shape)


def concat(*args, out=None):
    *ts, n, axis = args
    d = result_dtype(*ts)
    return np.concatenate([_arr(t, d) for t in ts], axis=axis)


def stack(*args, out=None):
    *ts, n, axis = args
    d = result_dtype(*ts)
    return np.stack([_arr(t, d) for t in ts], axis=axis)


def index_of(spec, env=None):
    """Turn a SLICE operand into a numpy index tuple."""
    out = []
    for s in spec:
        if s[0] == "i":
            out.append(s[1])
        elif s[0] == "s":
            out.append(slice(s[1], s[2], s[3]))
        elif s[0] == "n":
            out.append(None)
        else:
            out.append(Ellipsis)
    return tuple(out)


def slice_(x, spec, out=None):
    return np.asarray(x[index_of(spec)])


# ---------------------------------------------------------------- convolution and pooling (NCHW)

def _same_pads(d, k, s, dil):
    """MindSpore's (and TensorFlow's) 'same': output ceil(d / s), the extra pixel after."""
    total = max((-(-d // s) - 1) * s + dil * (k - 1) + 1 - d, 0)
    return total // 2, total - total // 2


def _padded(x, kernel, stride, dil, pad, value):
    if pad == ("same",):
        ph = _same_pads(x.shape[2], kernel[0], stride[0], dil[0])
        pw = _same_pads(x.shape[3], kernel[1], stride[1], dil[1])
    else:
        ph, pw = (pad[0], pad[1]), (pad[2], pad[3])
    if any(ph) or any(pw):
        x = np.pad(x, ((0, 0), (0, 0), ph, pw), constant_values=value)
    return x, ph, pw


def _windows(x, kernel, stride, dil):
    """[N, C, Ho, Wo, kh, kw] views of x's (dilated, strided) windows; no copy."""
    kh, kw = kernel
    span = (dil[0] * (kh - 1) + 1, dil[1] * (kw - 1) + 1)
    if span[0] > x.shape[2] or span[1] > x.shape[3]:
        raise ValueError(f"the window ({span[0]}x{span[1]}) is larger than the padded input "
                         f"({x.shape[2]}x{x.shape[3]}); use a larger input or more padding")
    v = np.lib.stride_tricks.sliding_window_view(x, span, axis=(2, 3))
    return v[:, :, ::stride[0], ::stride[1], ::dil[0], ::dil[1]]


def conv2d(x, w, stride, pad, dilation, group, out=None):
    x, w = np.asarray(x), np.asarray(w)
    dtype = np.result_type(x, w)
    if dtype == np.float16:        # summed in float32, rounded to float16 (see _half_matmul)
        return conv2d(x.astype(np.float32), w.astype(np.float32), stride, pad, dilation, group).astype(np.float16)
    o, cg, kh, kw = w.shape
    xp, _, _ = _padded(x, (kh, kw), stride, dilation, pad, 0)
    win = _windows(xp, (kh, kw), stride, dilation)            # N, C, Ho, Wo, kh, kw
    n, c, ho, wo = win.shape[:4]
    if c != cg * group:
        raise ValueError(f"CONV2D: input has {c} channels, the weight expects {cg} x group {group}")
    if group == 1:
        cols = win.transpose(0, 2, 3, 1, 4, 5).reshape(n * ho * wo, c * kh * kw)
        res = (cols @ w.reshape(o, -1).T).reshape(n, ho, wo, o).transpose(0, 3, 1, 2)
    elif cg == 1 and o == group:                                # depthwise
        res = np.einsum("nchwij,cij->nchw", win, w[:, 0], optimize=True)
    else:
        og = o // group
        wg = w.reshape(group, og, cg * kh * kw)
        res = np.empty((n, o, ho, wo), dtype=dtype)
        for g in range(group):
            cols = win[:, g * cg:(g + 1) * cg].transpose(0, 2, 3, 1, 4, 5).reshape(n * ho * wo, cg * kh * kw)
            res[:, g * og:(g + 1) * og] = (cols @ wg[g].T).reshape(n, ho, wo, og).transpose(0, 3, 1, 2)
    return np.ascontiguousarray(res, dtype=dtype)


def max_pool2d(x, kernel, stride, pad, out=None):
    x = np.asarray(x)
    low = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min if x.dtype.kind in "iu" else False
    xp, _, _ = _padded(x, kernel, stride, (1, 1), pad, low)
    return np.ascontiguousarray(_windows(xp, kernel, stride, (1, 1)).max(axis=(4, 5)))


def avg_pool2d(x, kernel, stride, pad, count_pad, out=None):
    x = np.asarray(x)
    if x.dtype.kind != "f":
        x = x.astype(np.float32)
    xp, ph, pw = _padded(x, kernel, stride, (1, 1), pad, 0)
    total = _windows(xp, kernel, stride, (1, 1)).sum(axis=(4, 5))
    if count_pad and pad != ("same",):
        return np.ascontiguousarray(total / x.dtype.type(kernel[0] * kernel[1]))
    ones = np.pad(np.ones((1, 1) + x.shape[2:], dtype=x.dtype), ((0, 0), (0, 0), ph, pw))
    count = _windows(ones, kernel, stride, (1, 1)).sum(axis=(4, 5))
    return np.ascontiguousarray(total / count)


def _source(n_out, n_in, align, nearest, asymmetric=False):
    """Where each output index samples its input (MindSpore's and PyTorch's conventions; ``asymmetric``:
    dst * in / out, MindSpore's ResizeBilinear and TensorFlow's legacy resize)."""
    i = np.arange(n_out, dtype=np.float64)
    if nearest == "half_pixel":          # (TensorFlow's and MindSpore's nearest with half_pixel_centers)
        return np.minimum(np.floor((i + 0.5) * (n_in / n_out)).astype(np.int64), n_in - 1)
    if nearest and align:                # (the corners aligned, each source rounded: round(dst * (in-1)/(out-1)))
        return np.minimum(np.floor(i * ((n_in - 1) / (n_out - 1)) + 0.5).astype(np.int64) if n_out > 1
                          else np.zeros(n_out, np.int64), n_in - 1)
    if nearest:
        return np.minimum(np.floor(i * (n_in / n_out)).astype(np.int64), n_in - 1)
    if asymmetric:
        return i * (n_in / n_out)
    if align:
        return i * ((n_in - 1) / (n_out - 1)) if n_out > 1 else np.zeros(n_out)
    return np.maximum((i + 0.5) * (n_in / n_out) - 0.5, 0.0)


def resize(x, size, scale, mode, align_corners, out=None):
    x = np.asarray(x)
    if x.dtype.kind != "f":
        x = x.astype(np.float32)
    h, w = x.shape[2:]
    oh, ow = (int(size[0]), int(size[1])) if size is not None else (h * scale[0], w * scale[1])
    if mode in ("nearest", "nearest_half_pixel"):
        near = "half_pixel" if mode == "nearest_half_pixel" else True
        return np.ascontiguousarray(x[:, :, _source(oh, h, align_corners, near)][:, :, :,
                                                                               _source(ow, w, align_corners, near)])
    asym = mode == "bilinear_asymmetric"
    sy, sx = _source(oh, h, align_corners, False, asym), _source(ow, w, align_corners, False, asym)
    y0 = np.minimum(np.floor(sy).astype(np.int64), h - 1)
    x0 = np.minimum(np.floor(sx).astype(np.int64), w - 1)
    y1, x1 = np.minimum(y0 + 1, h - 1), np.minimum(x0 + 1, w - 1)
    fy = (sy - y0).astype(x.dtype)[:, None]
    fx = (sx - x0).astype(x.dtype)[None, :]
    top = x[:, :, y0][:, :, :, x0] * (1 - fx) + x[:, :, y0][:, :, :, x1] * fx
    bottom = x[:, :, y1][:, :, :, x0] * (1 - fx) + x[:, :, y1][:, :, :, x1] * fx
    return np.ascontiguousarray(top * (1 - fy) + bottom * fy)


def adaptive_avg_pool2d(x, size, out=None):
    x = np.asarray(x)
    if x.dtype.kind != "f":
        x = x.astype(np.float32)
    h, w = x.shape[2:]
    oh, ow = (x.shape[2 + i] if size[i] is None else size[i] for i in range(2))
    if h % oh == 0 and w % ow == 0:
        return x.reshape(x.shape[0], x.shape[1], oh, h // oh, ow, w // ow).mean(axis=(3, 5))
    res = np.empty(x.shape[:2] + (oh, ow), dtype=x.dtype)
    for i in range(oh):
        h0, h1 = (i * h) // oh, -(-((i + 1) * h) // oh)
        for j in range(ow):
            w0, w1 = (j * w) // ow, -(-((j + 1) * w) // ow)
            res[:, :, i, j] = x[:, :, h0:h1, w0:w1].mean(axis=(2, 3))
    return res


def gather(x, idx, axis, out=None):
    x, idx = np.asarray(x), np.asarray(idx)
    size = x.shape[axis]
    if idx.size and (idx.min() < -size or idx.max() >= size):
        bad = idx.max() if idx.max() >= size else idx.min()
        raise IndexOutOfRange(f"GATHER: index {int(bad)} is out of range for axis {axis} of size {size} "
                              f"(For 'Gather', the 'input_indices' should be in the range [{-size}, {size}))")
    return np.take(x, idx, axis=axis)

# ---------------------------------------------------------------- indexing and creation (model zoo)

def arange(start, stop, step, dtype, out=None):
    return np.arange(start, stop, step, dtype=dtype.np)


def cumsum(x, axis, exclusive, reverse, out=None):
    x = np.asarray(x)
    d = x.dtype if x.dtype.kind == "f" or x.dtype.itemsize >= 4 and x.dtype.kind in "iu" else np.int64
    if reverse:
        x = np.flip(x, axis)
    r = np.cumsum(x, axis=axis, dtype=d)
    if exclusive:        # shifted by one: 0, x0, x0+x1, ...
        r = np.moveaxis(r, axis, 0)
        r = np.moveaxis(np.concatenate([np.zeros_like(r[:1]), r[:-1]]), 0, axis)
    if reverse:
        r = np.flip(r, axis)
    return np.ascontiguousarray(r)


def _floordiv(a, b, out=None):
    """floor(a / b): numpy's floor_divide on ints; on floats the floor of the true quotient, as
    MindSpore's div(rounding_mode='floor') (numpy's float floor_divide gives 1.0 // 0.1 == 9)."""
    if np.result_type(a, b).kind != "f":
        return np.floor_divide(a, b, out=out) if out is not None else np.floor_divide(a, b)
    q = np.true_divide(a, b, out=out) if out is not None else np.true_divide(a, b)
    return np.floor(q, out=q) if isinstance(q, np.ndarray) else np.floor(q)


def _truncdiv(a, b, out=None):
    """trunc(a / b): the quotient rounded toward zero (C's integer division)."""
    if np.result_type(a, b).kind != "f":
        q = np.floor_divide(a, b)
        q = q + ((np.remainder(a, b) != 0) & ((np.asarray(a) < 0) != (np.asarray(b) < 0)))
        return np.asarray(q, dtype=np.result_type(a, b))
    q = np.true_divide(a, b, out=out) if out is not None else np.true_divide(a, b)
    return np.trunc(q, out=q) if isinstance(q, np.ndarray) else np.trunc(q)


# ---------------------------------------------------------------- conformance (issue 21)

def _bool_unary(ufunc):
    """x -> bool array (NaN/inf tests); a Python scalar gives a Python bool."""
    def kern(x, out=None):
        r = ufunc(np.asarray(x))
        return bool(r) if not isinstance(x, _device.ARRAYS) else np.asarray(r)
    return kern


def _int_kept(ufunc):
    """floor/ceil/round/trunc: identity on ints and bools (numpy would keep them too, but
    np.round on a bool array fails)."""
    def kern(x, out):
        if x.dtype.kind != "f":
            return np.array(x, copy=True) if out is None else np.copyto(out, x) or out
        return ufunc(x, out=out) if out is not None else np.asarray(ufunc(x))
    return kern


def _sign(x, out):
    if x.dtype == np.bool_:
        return x.copy()
    return np.sign(x, out=out) if out is not None else np.asarray(np.sign(x))


def _square(x, out):
    if x.dtype == np.bool_:
        return np.logical_and(x, x)
    return np.multiply(x, x, out=out) if out is not None else np.asarray(np.multiply(x, x))


def _invert(x, out):
    if x.dtype.kind == "f":
        raise TypeError(f"INVERT: bitwise not needs an int or bool tensor, got {x.dtype}")
    return np.invert(x, out=out) if out is not None else np.asarray(np.invert(x))


def _softplus(x, out):
    return np.logaddexp(x.dtype.type(0), x, out=out) if out is not None else np.asarray(np.logaddexp(x.dtype.type(0), x))


def _erfc(x, out):
    return np.asarray(_sp().erfc(x) if out is None else _sp().erfc(x, out=out))


def _bitwise(ufunc, name):
    def kern(a, b, out=None):
        for v in (a, b):
            if np.asarray(v).dtype.kind == "f":
                raise TypeError(f"{name}: needs int or bool inputs, got {np.asarray(v).dtype}")
        return _binary(ufunc)(a, b, out)
    return kern


def _mod(a, b, out=None):
    """numpy's mod (Python's %: the sign of b); on ints a zero divisor gives 0, as numpy."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return _binary(np.mod)(a, b, out)


def matrix_band_part(x, lower, upper, out=None):
    x = np.asarray(x)
    m, n = x.shape[-2:]
    i = np.arange(m)[:, None]
    j = np.arange(n)[None, :]
    keep = np.ones((m, n), dtype=bool)
    if lower >= 0:
        keep &= (i - j) <= lower
    if upper >= 0:
        keep &= (j - i) <= upper
    return np.where(keep, x, np.zeros((), x.dtype))


def argmin(x, axis, keep, out=None):
    x = np.asarray(x)
    if axis is None:
        return np.asarray(np.argmin(x), dtype=np.int32)
    return np.argmin(x, axis=axis, keepdims=bool(keep)).astype(np.int32)


def _bool_reduce(fn):
    def kern(x, axes, keep, out=None):
        return np.asarray(fn(np.asarray(x), axis=_axes(axes), keepdims=bool(keep)), dtype=np.bool_)
    return kern


class IndexOutOfRange(IndexError, RuntimeError, ValueError):
    """An index a gather or scatter was given lies outside the tensor (MindSpore raises RuntimeError
    for it from some ops, ValueError from others, such as ScatterNdUpdate: it is both)."""


_SCATTER = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def tensor_scatter(x, idx, upd, mode, out=None):
    """x with x[indices] updated (repeated indices: update keeps the last, the others combine all)."""
    x = np.array(x, copy=True)
    idx = np.asarray(idx)
    k = idx.shape[-1]
    if k > x.ndim:                 # (the shape rule says so where it knows k)
        raise ValueError(f"TENSOR_SCATTER: indices index {k} dims of a rank-{x.ndim} x")
    want = idx.shape[:-1] + x.shape[k:]
    try:
        np.broadcast_to(np.asarray(upd), want)
    except ValueError:
        raise ValueError(f"TENSOR_SCATTER: updates must have shape {list(want)}, got {list(np.shape(upd))}") from None
    flat = idx.reshape(-1, k).astype(np.int64)
    for d in range(k):
        bad = (flat[:, d] < 0) | (flat[:, d] >= x.shape[d])
        if bad.any():
            raise IndexOutOfRange(f"TENSOR_SCATTER: index {int(flat[bad.argmax(), d])} is out of range for dim {d} "
                             f"of size {x.shape[d]}")
    u = np.broadcast_to(np.asarray(upd), idx.shape[:-1] + x.shape[k:]).reshape((flat.shape[0],) + x.shape[k:])
    keys = tuple(flat.T)
    if mode == "update":
        x[keys] = u
    elif mode == "div" and x.dtype.kind == "f":
        with np.errstate(divide="ignore", invalid="ignore"):
            np.true_divide.at(x, keys, u.astype(x.dtype))
    elif mode == "div":          # ints: the true quotient converted back, as MindSpore (and a / b then astype)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            for r in range(flat.shape[0]):
                x[keys_at(keys, r)] = (x[keys_at(keys, r)] / u[r]).astype(x.dtype)
    else:
        _SCATTER[mode].at(x, keys, u.astype(x.dtype))
    return x


def bool_index(x, mask, out=None):
    """x[mask] (numpy's boolean indexing: the rows where mask is True, in order)."""
    return np.ascontiguousarray(np.asarray(x)[np.asarray(mask, dtype=bool)])


def keys_at(keys, r):
    return tuple(int(k[r]) for k in keys)


def gather_nd(x, idx, out=None):
    x, idx = np.asarray(x), np.asarray(idx).astype(np.int64)
    k = idx.shape[-1]
    for d in range(k):
        col = idx[..., d]
        if col.size and (col.min() < -x.shape[d] or col.max() >= x.shape[d]):
            raise IndexOutOfRange(f"GATHER_ND: an index is out of range for dim {d} of size {x.shape[d]}")
    return np.asarray(x[tuple(np.moveaxis(idx, -1, 0))])


def gather_d(x, idx, dim, out=None):
    x, idx = np.asarray(x), np.asarray(idx).astype(np.int64)
    size = x.shape[dim]
    if idx.size and (idx.min() < -size or idx.max() >= size):
        raise IndexOutOfRange(f"GATHER_D: an index is out of range for dim {dim} of size {size}")
    return np.take_along_axis(x, idx, axis=dim)


def argsort(x, axis, descending, out=None):
    """Stable: equal values keep their order, ascending or descending; NaN sorts last either way."""
    x = np.asarray(x)
    if x.ndim == 0:
        return np.zeros((), np.int32)
    if not descending:
        return np.argsort(x, axis=axis, kind="stable").astype(np.int32)
    key = x.astype(np.float64) if x.dtype.kind in "biu" else x
    with np.errstate(invalid="ignore"):
        key = np.where(np.isnan(key), np.inf, -key) if key.dtype.kind == "f" else -key
    return np.argsort(key, axis=axis, kind="stable").astype(np.int32)


def unsorted_segment(x, ids, n, mode, out=None):
    x, ids = np.asarray(x), np.asarray(ids).astype(np.int64)
    rest = x.shape[ids.ndim:]
    if mode in ("sum", "prod"):
        init = 0 if mode == "sum" else 1
    else:
        info = np.finfo(x.dtype) if x.dtype.kind == "f" else np.iinfo(x.dtype) if x.dtype.kind in "iu" else None
        init = (info.max if mode == "min" else info.min) if info is not None else (mode == "min")
    res = np.full((n,) + rest, init, dtype=x.dtype)
    flat_ids = ids.reshape(-1)
    rows = x.reshape((-1,) + rest)
    keep = (flat_ids >= 0) & (flat_ids < n)
    if mode in ("max", "min") and flat_ids.size and flat_ids.max() >= n:     # (MindSpore's CPU raises here)
        raise IndexOutOfRange(f"UNSORTED_SEGMENT: segment id {int(flat_ids.max())} is not below num_segments {n}")
    ufunc = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}[mode]
    ufunc.at(res, flat_ids[keep], rows[keep])
    return res


def scatter_elements(x, idx, upd, axis, reduction, out=None):
    x = np.array(x, copy=True)
    idx = np.asarray(idx).astype(np.int64)
    upd = np.broadcast_to(np.asarray(upd, dtype=x.dtype), idx.shape)
    size = x.shape[axis]
    if idx.size and (idx.min() < -size or idx.max() >= size):
        raise IndexOutOfRange(f"SCATTER_ELEMENTS: an index is out of range for axis {axis} of size {size}")
    grid = list(np.indices(idx.shape, sparse=True))
    grid[axis] = idx
    if reduction == "add":
        np.add.at(x, tuple(grid), upd)
    else:
        x[tuple(grid)] = upd
    return x


_CONFORMANCE = {
    "SCATTER_ELEMENTS": scatter_elements,
    "UNSORTED_SEGMENT": unsorted_segment,
    "ARGSORT": argsort,
    "GATHER_ND": gather_nd, "GATHER_D": gather_d,
    "TENSOR_SCATTER": tensor_scatter,
    "SIN": _unary(_with_out(np.sin), True), "COS": _unary(_with_out(np.cos), True),
    "TAN": _unary(_with_out(np.tan), True), "ASIN": _unary(_with_out(np.arcsin), True),
    "ACOS": _unary(_with_out(np.arccos), True), "ATAN": _unary(_with_out(np.arctan), True),
    "SINH": _unary(_with_out(np.sinh), True), "COSH": _unary(_with_out(np.cosh), True),
    "ASINH": _unary(_with_out(np.arcsinh), True), "ACOSH": _unary(_with_out(np.arccosh), True),
    "ATANH": _unary(_with_out(np.arctanh), True),
    "FLOOR": _unary(_int_kept(np.floor)), "CEIL": _unary(_int_kept(np.ceil)),
    "ROUND": _unary(_int_kept(np.rint)), "TRUNC": _unary(_int_kept(np.trunc)), "SIGN": _unary(_sign),
    "ISNAN": _bool_unary(np.isnan), "ISINF": _bool_unary(np.isinf), "ISFINITE": _bool_unary(np.isfinite),
    "SQUARE": _unary(_square), "LOG1P": _unary(_with_out(np.log1p), True),
    "EXPM1": _unary(_with_out(np.expm1), True), "ERFC": _unary(_erfc, True), "INVERT": _unary(_invert),
    "SOFTPLUS": _unary(_softplus, True),
    "ERFINV": _unary(lambda x, out: np.asarray(_sp().erfinv(x) if out is None else _sp().erfinv(x, out=out)), True),
    "BROADCAST_BITAND": _bitwise(np.bitwise_and, "BROADCAST_BITAND"),
    "BROADCAST_BITOR": _bitwise(np.bitwise_or, "BROADCAST_BITOR"),
    "BROADCAST_BITXOR": _bitwise(np.bitwise_xor, "BROADCAST_BITXOR"),
    "BROADCAST_XOR": _logical(np.logical_xor), "BROADCAST_ATAN2": _binary(np.arctan2, force_float=True),
    "BROADCAST_MOD": _mod, "MATRIX_BAND_PART": matrix_band_part,
    "REDUCE_PROD": _reduce(np.prod), "REDUCE_ALL": _bool_reduce(np.all), "REDUCE_ANY": _bool_reduce(np.any),
    "ARGMIN": argmin,
}


# (issue 21) complex numbers: parts, conjugate, angle, and a complex from two real tensors
def _real(x, out):
    return np.array(x.real) if x.dtype.kind == "c" else np.array(x)


def _imag(x, out):
    return np.array(x.imag) if x.dtype.kind == "c" else np.zeros_like(x)


def _complex(re, im, out=None):
    d = result_dtype(re, im)
    c = dt.complex_of(d if d.is_float else dt.float32)
    r = np.empty(np.broadcast_shapes(np.shape(re), np.shape(im)), dtype=c.np)
    r.real, r.imag = re, im
    return r


_COMPLEX = {
    "REAL": _unary(_real), "IMAG": _unary(_imag), "CONJ": _unary(_with_out(np.conjugate)),
    "ANGLE": _unary(_with_out(np.angle), True), "COMPLEX": _complex,
}


KERNELS = {
    "BROADCAST_ADD": _binary(np.add), "BROADCAST_SUB": _binary(np.subtract),
    "BROADCAST_MUL": _binary(np.multiply), "BROADCAST_DIV": _binary(np.true_divide, force_float=True),
    "BROADCAST_POW": _binary(np.power), "BROADCAST_MAX": _binary(np.maximum),
    "BROADCAST_MIN": _binary(np.minimum),
    "BROADCAST_FLOORDIV": _binary(_floordiv), "BROADCAST_TRUNCDIV": _binary(_truncdiv),
    "BROADCAST_EQ": _compare(np.equal), "BROADCAST_NE": _compare(np.not_equal),
    "BROADCAST_LT": _compare(np.less), "BROADCAST_LE": _compare(np.less_equal),
    "BROADCAST_GT": _compare(np.greater), "BROADCAST_GE": _compare(np.greater_equal),
    "BROADCAST_AND": _logical(np.logical_and), "BROADCAST_OR": _logical(np.logical_or),
    "WHERE": where,
    "NEG": _unary(_with_out(np.negative)), "ABS": _unary(_with_out(np.abs)),
    "EXP": _unary(_with_out(np.exp), True), "LOG": _unary(_with_out(np.log), True),
    "SQRT": _unary(_with_out(np.sqrt), True), "RSQRT": _unary(_rsqrt, True),
    "TANH": _unary(_with_out(np.tanh), True), "SIGMOID": _unary(_sigmoid, True),
    "RELU": _unary(_relu), "GELU": _unary(_gelu, True), "GELU_TANH": _unary(_gelu_tanh, True),
    "ERF": _unary(lambda x, out: np.asarray(_sp().erf(x) if out is None else _sp().erf(x, out=out)), True),
    "RECIPROCAL": _unary(_reciprocal, True),
    "LOGICAL_NOT": _unary(lambda x, out: np.logical_not(x)),
    "CAST": cast, "FILL": fill,
    "MATMUL": matmul, "BATCH_MATMUL": batch_matmul,
    "FUSED_ELEMENTWISE": fused_elementwise, "FUSED_MATMUL": fused_matmul,
    "REDUCE_SUM": _reduce(np.sum), "REDUCE_MEAN": _reduce(np.mean, True),
    "REDUCE_MAX": _reduce(np.max), "REDUCE_MIN": _reduce(np.min), "ARGMAX": argmax,
    "SOFTMAX": softmax, "LOG_SOFTMAX": log_softmax, "LAYER_NORM": layer_norm,
    "RESHAPE": reshape, "TRANSPOSE": transpose, "EXPAND_DIMS": expand_dims, "SQUEEZE": squeeze,
    "BROADCAST_TO": broadcast_to, "CONCAT": concat, "STACK": stack, "SLICE": slice_,
    "CONV2D": conv2d, "MAX_POOL2D": max_pool2d, "AVG_POOL2D": avg_pool2d,
    "ADAPTIVE_AVG_POOL2D": adaptive_avg_pool2d, "GATHER": gather,
    "ARANGE": arange, "CUMSUM": cumsum, "RESIZE": resize,
    **_CONFORMANCE,
    **_COMPLEX,
}
KERNELS.update(_kernels_more.KERNELS_MORE)         # (issue 21: RANDOM, UNIQUE, ...)

KERNELS["BOOL_INDEX"] = bool_index       # (boolean-mask indexing; the interpreter binds its symbol)


# ---------------------------------------------------------------- issue 18: batch norm, fused convolution
# FUSED_CONV (compiler/fuse.py makes it from CONV2D + BATCH_NORM + an elementwise epilogue) runs BLAS
# sgemms straight into the NCHW result; the batch norm is folded into W and a bias once per
# Parameter array, and the epilogue runs in place on the GEMM's output. Algorithms, chosen by
# measurement on ResNet-50's layers (one thread, OpenBLAS):
# - 1x1 stride 1: W[O, C] @ x[C, H*W], x itself (no im2col): 1.3-9x CONV2D's im2col + cols @ W.T +
#   NCHW transpose (o256 c64 56x56: 10.2 -> 1.15 ms);
# - stride 1, k > 1, width >= 8: kh*kw sgemms over contiguous runs of the flattened padded image
#   ("shifted", no im2col copy): 1.1-1.5x the im2col GEMM at widths 10-56, slower at 5x5;
# - otherwise (strided, narrow): one im2col copy, W[O, K] @ cols[K, Ho*Wo];
# - depthwise: the taps summed by einsum (no GEMM);
# - rejected: a row-tiled im2col (column blocks kept in cache, epilogue per block) and NHWC tiles
#   (cols @ W.T per tile): 0.2-1.5x, slower on most layers (numpy's per-tile overhead, small GEMMs).

def _bn_affine(gamma, beta, mean, var, eps):
    scale = gamma * _rsqrt(var + eps, None)
    return scale, beta - mean * scale


def batch_norm(x, gamma, beta, mean, var, eps, out=None):
    x = np.asarray(x)
    scale, shift = _bn_affine(gamma, beta, mean, var, eps)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    r = np.multiply(x, scale.reshape(shape), out=out) if out is not None else x * scale.reshape(shape)
    return np.add(r, shift.reshape(shape), out=r)


_PREPARED: dict = {}      # (id of each array, eps, dtype) -> (weakrefs, (folded weight [O, K], bias [O] | None))
PREPARED_LIMIT = 4096


def _frozen(a) -> bool:
    flags = getattr(a, "flags", None)
    return flags is not None and getattr(flags, "writeable", True) is False


def _cached(cache, arrays, extra, make):
    """make() once per tuple of read-only arrays (a Parameter's data; set_data gives a new one), cached
    by identity and checked through weak references so a recycled id never hits; arrays that may
    change in place are not cached."""
    import weakref

    cacheable = all(_frozen(a) for a in arrays)
    key = tuple(id(a) for a in arrays) + extra
    if cacheable:
        hit = cache.get(key)
        if hit is not None and all(r() is a for r, a in zip(hit[0], arrays)):
            return hit[1]
    val = make()
    if cacheable:
        if len(cache) >= PREPARED_LIMIT:
            cache.clear()
        try:
            cache[key] = (tuple(weakref.ref(a) for a in arrays), val)
        except TypeError:              # (an array type without weak references: not cached)
            pass
    return val


def prepared_weight(w, bn, eps, dtype):
    """The conv weight as [O, C/group*kh*kw] with the batch norm folded in (W * scale, bias = shift), made
    once per Parameter array (``_cached``). Only for the convolutions that ``folds``: small weights."""
    arrays = (w,) + tuple(bn)                      # bn: [conv bias,] gamma, beta, mean, var

    def make():
        o = w.shape[0]
        wm = np.asarray(w).reshape(o, -1)
        bias = None
        if bn:
            scale, bias = _affine64(bn, eps)
            wm = wm.astype(np.float64) * scale[:, None]
            bias = np.ascontiguousarray(bias, dtype=dtype)
        return np.ascontiguousarray(wm, dtype=dtype), bias
    return _cached(_PREPARED, arrays, (eps, np.dtype(dtype).str), make)


# ------------------------------------------------- issue 18: the batch norm after the product, not in a copy of W
# Folding the batch norm into the weight costs a copy of every weight (ResNet-50: 90 MB next to its
# 98 MB of Parameters). Dense and grouped convolutions instead run the product on the Parameter's own
# values and apply out * scale[o] + shift[o] after it (the compiled tiers in the GEMM's epilogue, in
# registers); only the small weights of the convolutions ``folds`` names are folded (depthwise and
# few-channel ones, whose compiled kernel reads a folded weight; a few KB each).
DIRECT_MAX_CHANNELS = 4         # (compiler/conv.py's direct kernel takes these: cg <= 4 and cg * kh * kw <= 36)
DIRECT_MAX_TAPS = 36
_AFFINE: dict = {}


def folds(wshape, group) -> bool:
    """Whether FUSED_CONV folds its batch norm into a (small) copy of the weight: depthwise, or
    grouped with at most DIRECT_MAX_CHANNELS input channels per group and DIRECT_MAX_TAPS weights
    per output. (A dense one of few channels, an RGB stem, runs on the taps product since that
    reads each channel's taps in turn: MobileNet v2's 3x3 stride-2 stem on 3 channels at 224,
    0.64 ms on the direct kernel, 0.24 on the taps product's phases.)"""
    o, cg, kh, kw = wshape
    return group > 1 and (cg == 1 or (cg <= DIRECT_MAX_CHANNELS and cg * kh * kw <= DIRECT_MAX_TAPS))


def _affine64(bn, eps):
    """(scale, shift) in float64 of [conv bias,] gamma, beta, mean, var: BN(conv + cb) = conv*s + cb*s + shift."""
    g, b, m, v = (np.asarray(a, dtype=np.float64) for a in bn[-4:])
    scale = g / np.sqrt(v + eps)
    cb = np.asarray(bn[0], dtype=np.float64) if len(bn) == 5 else 0.0
    return scale, (cb - m) * scale + b


def conv_affine(bn, eps, dtype):
    """The batch norm as (scale [O], shift [O]) in ``dtype``, once per Parameter arrays."""
    def make():
        scale, shift = _affine64(bn, eps)
        return np.ascontiguousarray(scale, dtype=dtype), np.ascontiguousarray(shift, dtype=dtype)
    return _cached(_AFFINE, tuple(bn), (eps, np.dtype(dtype).str), make)


def weight_view(w):
    """The Parameter's weight as [O, C/group*kh*kw], a view where it is contiguous (no copy kept)."""
    w = np.asarray(w)
    return w.reshape(w.shape[0], -1)


def conv_gemm(x, wm, wshape, stride, pad, dil, group, dtype, out=None):
    """CONV2D(x, w) with w given as [O, K]: one sgemm per image and group into an [N, O, Ho, Wo] result
    (``out``, when it is a C-contiguous array of that shape and dtype: the memory plan's buffer)."""
    o, cg, kh, kw = wshape
    n, c = x.shape[:2]
    if c != cg * group:
        raise ValueError(f"CONV2D: input has {c} channels, the weight expects {cg} x group {group}")
    xp, _, _ = _padded(x, (kh, kw), stride, dil, pad, 0)
    direct = kh == kw == 1 and tuple(stride) == (1, 1) and xp is x
    if direct:
        ho, wo = x.shape[2:]
        xr = x.reshape(n, c, ho * wo)
    else:
        win = _windows(xp, (kh, kw), stride, dil)                 # N, C, Ho, Wo, kh, kw (a view)
        ho, wo = win.shape[2:4]
    if out is not None and not (out.shape == (n, o, ho, wo) and out.dtype == dtype and out.flags.c_contiguous):
        out = None
    if not direct and group == 1 and wo >= SHIFTED_MIN_WIDTH and tuple(stride) == (1, 1) and n and ho > 0:
        return _conv_shifted(xp, wm, wshape, dil, ho, wo, dtype, out)
    res = np.empty((n, o, ho * wo), dtype=dtype) if out is None else out.reshape(n, o, ho * wo)
    if res.size == 0:
        return res.reshape(n, o, ho, wo)
    if cg == 1 and o == group and group > 1:     # depthwise: a multiply-add per tap over strided views
        return _depthwise_taps(xp, wm.reshape(o, kh, kw), stride, dil, res.reshape(n, o, ho, wo))
    og = o // group
    for i in range(n):
        for g in range(group):
            if direct:
                cols = xr[i, g * cg:(g + 1) * cg]
            else:
                cols = win[i, g * cg:(g + 1) * cg].transpose(0, 3, 4, 1, 2).reshape(cg * kh * kw, ho * wo)
            np.matmul(wm[g * og:(g + 1) * og], cols, out=res[i, g * og:(g + 1) * og])
    return res.reshape(n, o, ho, wo)


SHIFTED_MIN_WIDTH = 8      # below it the padded columns' waste outweighs the im2col copy saved


def _conv_shifted(xp, wm, wshape, dil, ho, wo, dtype, out=None):
    """A stride-1 convolution without im2col: over the padded image flattened to [C, Hp*Wp], tap (i, j)
    reads the contiguous run starting at i*dh*Wp + j*dw, so the output on the padded width [O, Ho*Wp] is
    the sum of kh*kw sgemms W[i, j] @ run (the Wp - Wo extra columns are dropped at the end)."""
    o, c, kh, kw = wshape
    n, _, hp, wp = xp.shape
    wt = np.ascontiguousarray(wm.reshape(o, c, kh, kw).transpose(2, 3, 0, 1)).reshape(kh * kw, o, c)   # (per call)
    tail = (kw - 1) * dil[1]
    flat = np.empty((n, c, hp * wp + tail), dtype=dtype)
    flat[:, :, :hp * wp] = xp.reshape(n, c, hp * wp)
    flat[:, :, hp * wp:] = 0
    acc = np.empty((o, ho * wp), dtype=dtype)
    tmp = np.empty_like(acc)
    res = np.empty((n, o, ho, wo), dtype=dtype) if out is None else out
    for b in range(n):
        for i in range(kh):
            for j in range(kw):
                off = i * dil[0] * wp + j * dil[1]
                run = flat[b, :, off:off + ho * wp]
                if i == 0 and j == 0:
                    np.matmul(wt[0], run, out=acc)
                else:
                    np.matmul(wt[i * kw + j], run, out=tmp)
                    acc += tmp
        res[b] = acc.reshape(o, ho, wp)[:, :, :wo]
    return res


def _depthwise_taps(xp, wk, stride, dil, res):
    """Depthwise: res[:, c] = sum over taps of w[c, i, j] * the tap's strided view of xp (einsum over the
    [N, C, Ho, Wo, kh, kw] windows was 10x slower: MobileNet v2 spent 60% of its time there)."""
    n, o, ho, wo = res.shape
    kh, kw = wk.shape[1:]
    tmp = np.empty_like(res)
    for i in range(kh):
        for j in range(kw):
            r0, c0 = i * dil[0], j * dil[1]
            tap = xp[:, :, r0:r0 + stride[0] * (ho - 1) + 1:stride[0], c0:c0 + stride[1] * (wo - 1) + 1:stride[1]]
            wcol = wk[:, i, j].reshape(1, o, 1, 1)
            if i == 0 and j == 0:
                np.multiply(tap, wcol, out=res)
            else:
                np.multiply(tap, wcol, out=tmp)
                res += tmp
    return res


def epilogue(program, res, extras):
    """The fused program over (res, extras...), each step in place on res once nothing later reads it
    (a relu, a residual add, a clip: no full-size temporaries)."""
    from ..bytecode.opcodes import BY_NAME

    if program == (("in", 0),):
        return res
    vals = [res] + list(extras)
    later = sum(1 for node in program if node == ("in", 0))
    stack: list = []
    cur = res                                      # the array that may be overwritten
    for node in program:
        if node[0] == "in":
            if node[1] == 0:
                later -= 1
            stack.append(vals[node[1]])
            continue
        if node[0] == "c":
            stack.append(node[1])
            continue
        row = BY_NAME[node[0]]
        k = row.pops
        args = stack[len(stack) - k:]
        del stack[len(stack) - k:]
        fn = KERNELS[node[0]]
        inplace = (row.out and later == 0 and any(a is cur for a in args) and not any(a is cur for a in stack)
                   and np.broadcast_shapes(*(np.shape(a) for a in args)) == cur.shape
                   and np.result_type(*args) == cur.dtype)
        stack.append(fn(*args, *node[1:], out=cur) if inplace else fn(*args, *node[1:]))
    return stack[0]


def fused_conv(*args, out=None):
    *inputs, stride, pad, dil, group, bn, program, n = args
    x, w = np.asarray(inputs[0]), np.asarray(inputs[1])
    has_bias = isinstance(bn, tuple)
    eps = bn[1] if has_bias else bn
    k = 2 if bn is None else 7 if has_bias else 6
    bnp, extras = list(inputs[2:k]), list(inputs[k:])
    dtype = np.result_type(x, w, *bnp)
    if dtype not in (np.float32, np.float64):       # (float16, ints: the reference sequence)
        res = conv2d(x, w, stride, pad, dil, group)
        if has_bias:
            res = res + bnp[0].reshape(1, -1, 1, 1)
        if bn is not None:
            res = batch_norm(res, *bnp[-4:], eps)
        return run_program(program, [res] + extras)
    if folds(w.shape, group):
        wm, bias = prepared_weight(w, bnp, eps, dtype)
        res = conv_gemm(x.astype(dtype, copy=False), wm, w.shape, stride, pad, dil, group, dtype, out)
        if bias is not None and res.size:
            np.add(res, bias.reshape(1, -1, 1, 1), out=res)
        return epilogue(program, res, extras)
    res = conv_gemm(x.astype(dtype, copy=False), weight_view(w), w.shape, stride, pad, dil, group, dtype, out)
    if bnp and res.size:                 # (the batch norm after the product: two roundings, as the tiers)
        scale, shift = conv_affine(bnp, eps, dtype)
        np.multiply(res, scale.reshape(1, -1, 1, 1), out=res)
        np.add(res, shift.reshape(1, -1, 1, 1), out=res)
    return epilogue(program, res, extras)


KERNELS.update({"BATCH_NORM": batch_norm, "FUSED_CONV": fused_conv})


def max_pool2d_taps(x, kernel, stride, pad, out=None):
    """MAX_POOL2D as a running maximum over the kernel's taps (kh*kw strided passes, each a fast
    elementwise maximum) instead of one strided reduction over [N, C, Ho, Wo, kh, kw] windows,
    which numpy runs about 10x slower (ResNet's stem pool cost more than its stem convolution)."""
    x = np.asarray(x)
    low = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min if x.dtype.kind in "iu" else False
    xp, _, _ = _padded(x, kernel, stride, (1, 1), pad, low)
    win = _windows(xp, kernel, stride, (1, 1))                 # (checks the window fits)
    ho, wo = win.shape[2:4]
    kh, kw = kernel
    sh, sw = stride
    res = np.empty(x.shape[:2] + (ho, wo), dtype=x.dtype)
    for i in range(kh):
        for j in range(kw):
            tap = xp[:, :, i:i + sh * (ho - 1) + 1:sh, j:j + sw * (wo - 1) + 1:sw]
            if i == 0 and j == 0:
                np.copyto(res, tap)
            else:
                np.maximum(res, tap, out=res)
    return res


KERNELS["MAX_POOL2D"] = max_pool2d_taps     # (the windowed reduction above is the same op, 10x slower)


# ---------------------------------------------------------------- issue 18: FUSED_ATTENTION's reference
# (compiler/attention.py fuses q @ k^T, its scale and mask, the softmax and the product by v into one
# instruction; this is each part's own kernel in order, so fusion on and off agree at L1)

def fused_attention(*args, out=None):
    *inputs, program, layout = args
    q, k, extras, v = inputs[0], inputs[1], list(inputs[2:-1]), inputs[-1]
    scores = run_program(program, [batch_matmul(q, k, False, True)] + extras)
    ctx = batch_matmul(softmax(scores, -1), v, False, False)
    return transpose(ctx, tuple(layout)) if layout else ctx


KERNELS["FUSED_ATTENTION"] = fused_attention


# ---------------------------------------------------------------- issue 18: FUSED_ADD_LAYER_NORM's reference
# (compiler/norm.py fuses a residual add into the layer norm that reads it; each part's own kernel, in order)

def fused_add_layer_norm(a, b, gamma, beta, begin_norm_axis, begin_params_axis, eps, out=None):
    return layer_norm(KERNELS["BROADCAST_ADD"](a, b), gamma, beta, begin_norm_axis, begin_params_axis, eps)


KERNELS["FUSED_ADD_LAYER_NORM"] = fused_add_layer_norm


def fused_rms_norm(x, w, prologue, scale, program, out=None):     # (issue 18: each part in order)
    m = KERNELS["REDUCE_MEAN"](run_program(prologue, [x]), (-1,), True)
    return run_program(program, [x, run_program(scale, [m]), w])


KERNELS["FUSED_RMS_NORM"] = fused_rms_norm


COMPUTE = frozenset(r.name for r in TABLE if r.kind not in ("control", "memory") or r.name == "FILL")
_missing = COMPUTE - set(KERNELS)
assert not _missing, f"ops without a reference kernel: {sorted(_missing)}"

