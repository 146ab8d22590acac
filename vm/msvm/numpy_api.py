"""``mindspore.numpy`` as msvm serves it: the numpy-style functions models call in ``construct``
(mindcv's swin ``numpy.roll(x, shift, axis)``, edgenext ``ms.numpy.arange(dim, dtype=...)``), with
numpy's parameter names, each one msvm op (``msvm.ops``), so it compiles and runs eagerly as the op
does. A name MindSpore's module has and this one lacks is msvm's gap (``msvm.compat``)."""

from __future__ import annotations

from . import dtype as _dt
from .ops import functional as F
from .ops.extra_ops import linspace as _linspace

int32, int64, float16, float32, float64, bool_ = _dt.int32, _dt.int64, _dt.float16, _dt.float32, _dt.float64, _dt.bool_

roll = F.roll
abs = absolute = F.abs  # noqa: A001
exp, log, sqrt, square, sign, floor = F.exp, F.log, F.sqrt, F.square, F.sign, F.floor
sin, cos, tanh = F.sin, F.cos, F.tanh
add, subtract, multiply, divide, true_divide = F.add, F.sub, F.mul, F.div, F.div
maximum, minimum, negative, power, where = F.maximum, F.minimum, F.neg, F.pow, F.where
matmul, dot, tril, triu, tile, reshape = F.matmul, F.dot, F.tril, F.triu, F.tile, F.reshape
zeros_like, ones_like, expand_dims = F.zeros_like, F.ones_like, F.expand_dims


def tensordot(a, b, axes=2):
    return F.tensordot(a, b, axes)


def arange(start, stop=None, step=None, dtype=None):
    return F.arange(start, stop, 1 if step is None else step, dtype=dtype)


def linspace(start, stop, num=50, dtype=None):
    out = _linspace(start, stop, num)
    return out if dtype is None else F.cast(out, dtype)


def zeros(shape, dtype=_dt.float32):
    return F.zeros(shape, dtype)


def ones(shape, dtype=_dt.float32):
    return F.ones(shape, dtype)


def full(shape, fill_value, dtype=None):
    return F.full(shape, fill_value, dtype=dtype)


def full_like(a, fill_value, dtype=None):
    return F.full_like(a, fill_value, dtype=dtype)


def concatenate(arrays, axis=0):
    return F.concat(tuple(arrays), axis)


def stack(arrays, axis=0):
    return F.stack(tuple(arrays), axis)


def transpose(a, axes=None):
    return F.transpose(a, tuple(reversed(range(len(a.shape)))) if axes is None else tuple(axes))


def squeeze(a, axis=None):
    return F.squeeze(a, axis)


def sum(a, axis=None, dtype=None, keepdims=False):  # noqa: A001
    return F.sum(a, axis, keepdims, dtype=dtype)


def mean(a, axis=None, keepdims=False):
    return F.mean(a, axis, keepdims)


def amax(a, axis=None, keepdims=False):
    return F.amax(a, axis, keepdims)


def amin(a, axis=None, keepdims=False):
    return F.amin(a, axis, keepdims)


def cumsum(a, axis=None, dtype=None):
    return F.cumsum(F.reshape(a, (-1,)) if axis is None else a, 0 if axis is None else axis, dtype)


def clip(a, a_min, a_max):
    return F.clip(a, a_min, a_max)


def split(x, indices_or_sections, axis=0):
    """numpy.split: ``indices_or_sections`` equal parts (the axis's size known), or the parts between
    the given cut indices (any axis size: mindcv's coat cuts its channels at fixed indices)."""
    rank = len(x.shape)
    if not -rank <= axis < rank:
        raise ValueError(f"numpy.split: axis {axis} is out of range for rank {rank}")
    axis %= rank
    if isinstance(indices_or_sections, int):
        _, n = F._known_dim(x, axis, "numpy.split")
        if indices_or_sections <= 0 or n % indices_or_sections:
            raise ValueError(f"numpy.split: {n} cannot be split into {indices_or_sections} equal parts")
        return F.split(x, n // indices_or_sections, axis)
    whole = (("s", None, None, None),) * axis
    cuts = [None, *indices_or_sections, None]
    return tuple(F.apply("SLICE", (x,), (whole + (("s", a, b, None),),)) for a, b in zip(cuts, cuts[1:]))
