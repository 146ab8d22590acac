"""Layers issue 21 added for MindSpore's tests and model zoos (nn.Pad, ...); they call msvm.ops,
so construct compiles them like any other Cell."""

from __future__ import annotations

from .. import ops
from ..ops import extra_ops as X
from .cell import Cell


class Pad(Cell):
    """nn.Pad(paddings, mode): a (before, after) pair per dim of the input (at most 4), in mode
    CONSTANT (zeros), REFLECT or SYMMETRIC."""

    def __init__(self, paddings, mode="CONSTANT"):
        super().__init__()
        if mode not in ("CONSTANT", "REFLECT", "SYMMETRIC"):
            raise ValueError(f"nn.Pad: mode must be 'CONSTANT', 'REFLECT' or 'SYMMETRIC', got {mode!r}")
        pairs = X._pairs_of(paddings, "nn.Pad")
        if len(pairs) > 4:
            raise ValueError(f"nn.Pad: at most 4 padding pairs are supported, got {len(pairs)}")
        self.negative = any(v < 0 for p in pairs for v in p)      # (MindSpore raises when it is called)
        self.paddings = tuple(pairs)
        self.mode = mode
        self.np_mode = mode.lower()

    def __call__(self, *args, **kwargs):
        if self.negative:
            raise ValueError(f"nn.Pad: paddings must be >= 0, got {self.paddings}")
        return super().__call__(*args, **kwargs)

    def construct(self, x):
        return X.pad_pairs(x, self.paddings, self.np_mode, exact=True)


class Range(Cell):
    """nn.Range(start, limit=None, delta=1): the 1-D tensor [start, limit) by delta."""

    def __init__(self, start, limit=None, delta=1):
        super().__init__()
        if limit is None:
            start, limit = 0, start
        self.start, self.limit, self.delta = start, limit, delta

    def construct(self):
        return X.range_(self.start, self.limit, self.delta)


class SoftmaxCrossEntropyWithLogits(Cell):
    """nn.SoftmaxCrossEntropyWithLogits(sparse, reduction): cross entropy of logits [N, C] against
    one-hot (or, sparse, int class) labels."""

    def __init__(self, sparse=False, reduction="none"):
        super().__init__()
        if reduction not in ("none", "mean", "sum"):
            raise ValueError(f"SoftmaxCrossEntropyWithLogits: reduction must be none, mean or sum, got {reduction!r}")
        self.sparse, self.reduction = bool(sparse), reduction

    def construct(self, logits, labels):
        if self.sparse:
            labels = ops.equal(ops.expand_dims(labels, -1), ops.arange(logits.shape[-1], dtype=labels.dtype))
        loss = ops.neg(ops.sum(ops.mul(ops.log_softmax(logits, -1), ops.cast(labels, logits.dtype)), -1))
        if self.reduction == "mean":
            return ops.mean(loss)
        if self.reduction == "sum":
            return ops.sum(loss)
        return loss


class OneHot(Cell):
    """nn.OneHot(axis, depth, on_value, off_value, dtype)."""

    def __init__(self, axis=-1, depth=1, on_value=1.0, off_value=0.0, dtype=None):
        super().__init__()
        from .. import dtype as dt

        self.axis, self.depth, self.on, self.off = axis, depth, on_value, off_value
        self.dtype = dt.as_dtype(dtype) if dtype is not None else dt.float32

    def construct(self, indices):
        return ops.cast(ops.one_hot(indices, self.depth, self.on, self.off, self.axis), self.dtype)


class Norm(Cell):
    """nn.Norm(axis, keep_dims): the 2-norm over axis."""

    def __init__(self, axis=(), keep_dims=False):
        super().__init__()
        self.axis = None if axis == () else axis
        self.keep_dims = keep_dims

    def construct(self, x):
        return ops.sqrt(ops.sum(ops.mul(x, x), self.axis, self.keep_dims))


class AdaptiveMaxPool2d(Cell):
    """nn.AdaptiveMaxPool2d(output_size, return_indices): PyTorch-style bins (None keeps a dim)."""

    def __init__(self, output_size, return_indices=False):
        super().__init__()
        self.output_size, self.return_indices = output_size, bool(return_indices)

    def construct(self, x):
        return X.adaptive_max_pool2d(x, self.output_size, self.return_indices)


class AdaptiveMaxPool1d(Cell):
    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def construct(self, x):
        return X.adaptive_max_pool1d(x, self.output_size)


class BiDense(Cell):
    """nn.BiDense(in1_channels, in2_channels, out_channels): y = x1^T W x2 + b, W [out, in1, in2]
    (weights drawn uniform in +-1/sqrt(in1_channels) when not given, as MindSpore)."""

    def __init__(self, in1_channels, in2_channels, out_channels, weight_init=None, bias_init=None, has_bias=True,
                 dtype=None):
        super().__init__()
        import numpy as np

        from ..tensor import Parameter, Tensor

        bound = 1.0 / np.sqrt(in1_channels)
        rng = np.random.default_rng()

        def init(v, shape):
            if v is None:
                return Tensor(rng.uniform(-bound, bound, shape).astype(np.float32))
            return v if isinstance(v, Tensor) else Tensor(np.asarray(v, np.float32))
        self.weight = Parameter(init(weight_init, (out_channels, in1_channels, in2_channels)), name="weight")
        self.has_bias = bool(has_bias)
        self.bias = Parameter(init(bias_init, (out_channels,)), name="bias") if has_bias else None

    def construct(self, input1, input2):
        if self.has_bias:
            return X.bidense(input1, input2, self.weight, self.bias)
        return X.bidense(input1, input2, self.weight)


class RReLU(Cell):
    """nn.RReLU(lower, upper): x where x >= 0, else x * alpha with alpha drawn uniform in
    [lower, upper] for each element at each call (MindSpore draws in inference too)."""

    def __init__(self, lower=1 / 8, upper=1 / 3):
        super().__init__()
        for name, v in (("lower", lower), ("upper", upper)):
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise TypeError(f"nn.RReLU: {name} must be a number, got {type(v).__name__}")
        if lower > upper:
            raise ValueError(f"nn.RReLU: lower ({lower}) must not exceed upper ({upper})")
        self.lower, self.upper = float(lower), float(upper)
        self.uniform = ops.UniformReal()

    def construct(self, x):
        alpha = ops.add(ops.mul(self.uniform(x.shape), self.upper - self.lower), self.lower)
        return ops.where(ops.greater_equal(x, 0), x, ops.cast(ops.mul(x, alpha), x.dtype))


class Conv3d(Cell):
    """nn.Conv3d (NCDHW): weight [out, in/group, kd, kh, kw]; pad_mode 'same' (default), 'valid', 'pad'
    (padding: one int or 6, before and after per dim)."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, pad_mode="same", padding=0, dilation=1,
                 group=1, has_bias=False, weight_init=None, bias_init=None, data_format="NCDHW", dtype=None):
        super().__init__()
        import math

        from .. import dtype as dt
        from ..tensor import Parameter
        from .layers import _init

        if data_format != "NCDHW":
            raise ValueError(f"nn.Conv3d: data_format must be 'NCDHW', got {data_format!r}")
        if in_channels % group or out_channels % group:
            raise ValueError(f"nn.Conv3d: in_channels {in_channels} and out_channels {out_channels} must be divisible "
                             f"by group {group}")
        ks = X._ntuple(kernel_size, 3, "nn.Conv3d: kernel_size")
        self.stride, self.dilation = X._ntuple(stride, 3, "nn.Conv3d"), X._ntuple(dilation, 3, "nn.Conv3d")
        self.pad_mode, self.padding, self.group = pad_mode, padding, int(group)
        X._pool_pads(pad_mode, padding, 3, "nn.Conv3d")            # (checked now)
        d = dt.as_dtype(dtype) if dtype is not None else dt.float32
        fan_in = (in_channels // group) * math.prod(ks)
        self.weight = Parameter(_init(weight_init, (out_channels, in_channels // group) + ks, d, fan_in), name="weight")
        self.has_bias = bool(has_bias)
        self.bias = Parameter(_init(bias_init if bias_init is not None else "zeros", (out_channels,), d, fan_in),
                              name="bias") if has_bias else None

    def construct(self, x):
        out = X.conv_nd(x, self.weight, self.stride, self.pad_mode, self.padding, self.dilation, self.group, 3,
                        "nn.Conv3d")
        if self.has_bias:
            out = out + ops.reshape(self.bias, (1, -1, 1, 1, 1))
        return out


__all__ = ["AdaptiveMaxPool1d", "Conv3d", "AdaptiveMaxPool2d", "BiDense", "Norm", "OneHot", "Pad", "Range", "RReLU",
           "SoftmaxCrossEntropyWithLogits", "ops"]
