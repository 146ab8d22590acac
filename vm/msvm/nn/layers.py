"""Built-in layers with MindSpore's constructor signatures. Their ``construct``
methods are ordinary msvm code, compiled like a user's Cell."""

from __future__ import annotations

import math

import numpy as np

from .. import dtype as dt
from .. import ops
from ..common.initializer import as_initializer
from ..ops.functional import _conv_transpose, _pair, apply, conv_pad
from ..tensor import Parameter, Tensor
from .cell import Cell

STATIC_INIT = False   # set by msvm.static: parameters become placeholders (no data)


def _init(init, shape, dtype, fan_in):
    """An initial value: a Tensor/array, a number, an ``Initializer`` or its name (MindSpore's
    ``weight_init``/``bias_init`` forms); ``None`` is MindSpore's default, HeUniform(sqrt(5)),
    i.e. U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
    if STATIC_INIT:
        return Tensor(shape=list(shape), dtype=dt.as_dtype(dtype))
    if isinstance(init, Tensor):
        arr = init._host()
    elif isinstance(init, np.ndarray):
        arr = init
    elif init is None:
        bound = 1.0 / math.sqrt(max(fan_in, 1))
        arr = np.random.uniform(-bound, bound, shape)
    else:
        arr = as_initializer(init)(shape)
    arr = np.asarray(arr, dtype=dt.as_dtype(dtype).np)
    if tuple(arr.shape) != tuple(shape):
        raise ValueError(f"initial value has shape {list(arr.shape)}, expected {list(shape)}")
    return Tensor(arr)


_ACTIVATIONS = {"relu": lambda: ReLU(), "gelu": lambda: GELU(), "tanh": lambda: Tanh(), "sigmoid": lambda: Sigmoid(),
                "softmax": lambda: Softmax()}


class Dense(Cell):
    """y = activation(x @ W.T + b); x may have any rank >= 2 (leading dims are flattened)."""

    def __init__(self, in_channels, out_channels, weight_init=None, bias_init=None, has_bias=True,
                 activation=None, dtype=dt.float32):
        super().__init__()
        self.in_channels = int(in_channels)
        self.out_channels = int(out_channels)
        self.has_bias = bool(has_bias)
        self.weight = Parameter(_init(weight_init, (self.out_channels, self.in_channels), dtype, self.in_channels),
                                name="weight")
        if self.has_bias:
            self.bias = Parameter(_init(bias_init if bias_init is not None else "zeros", (self.out_channels,),
                                        dtype, self.in_channels), name="bias")
        else:
            self.bias = None
        self.matmul = ops.MatMul(transpose_b=True)
        if isinstance(activation, str):
            if activation.lower() not in _ACTIVATIONS:
                raise ValueError(f"Dense: unknown activation {activation!r}")
            activation = _ACTIVATIONS[activation.lower()]()
        self.activation = activation
        self.activation_flag = activation is not None

    def construct(self, x):
        shape = x.shape
        if len(shape) != 2:
            x = ops.reshape(x, (-1, shape[-1]))
        x = self.matmul(x, self.weight)
        if self.has_bias:
            x = x + self.bias
        if self.activation_flag:
            x = self.activation(x)
        if len(shape) != 2:
            x = ops.reshape(x, shape[:-1] + (self.out_channels,))
        return x

    def extend_repr(self):
        return f"input_channels={self.in_channels}, output_channels={self.out_channels}, has_bias={self.has_bias}"


class LayerNorm(Cell):
    """Normalizes over the trailing dims from begin_norm_axis; gamma/beta from begin_params_axis."""

    def __init__(self, normalized_shape, begin_norm_axis=-1, begin_params_axis=-1, gamma_init="ones",
                 beta_init="zeros", epsilon=1e-7, dtype=dt.float32):
        super().__init__()
        shape = tuple(normalized_shape) if isinstance(normalized_shape, (tuple, list)) else (int(normalized_shape),)
        self.normalized_shape = shape
        self.begin_norm_axis = begin_norm_axis
        self.begin_params_axis = begin_params_axis
        self.epsilon = float(epsilon)
        self.gamma = Parameter(_init(gamma_init, shape, dtype, 1), name="gamma")
        self.beta = Parameter(_init(beta_init, shape, dtype, 1), name="beta")
        # MindSpore's attribute: subclasses in model zoos call it (mindcv's ConvNextLayerNorm)
        self.layer_norm = ops.LayerNorm(begin_norm_axis, begin_params_axis, self.epsilon)

    def construct(self, input_x):
        return apply("LAYER_NORM", (input_x, self.gamma, self.beta),
                     (self.begin_norm_axis, self.begin_params_axis, self.epsilon))


class ReLU(Cell):
    def construct(self, x):
        return ops.relu(x)


class GELU(Cell):
    def __init__(self, approximate=True):
        super().__init__()
        self.approximate = "tanh" if approximate else "none"

    def construct(self, x):
        return ops.gelu(x, approximate=self.approximate)


class Tanh(Cell):
    def construct(self, x):
        return ops.tanh(x)


class Sigmoid(Cell):
    def construct(self, x):
        return ops.sigmoid(x)


class Softmax(Cell):
    def __init__(self, axis=-1):
        super().__init__()
        self.axis = axis

    def construct(self, x):
        return ops.softmax(x, self.axis)


class _Conv(Cell):
    def _setup(self, in_channels, out_channels, ksize, stride, pad_mode, padding, dilation, group, has_bias,
               weight_init, bias_init, dtype):
        self.in_channels, self.out_channels, self.group = int(in_channels), int(out_channels), int(group)
        if self.in_channels % self.group or self.out_channels % self.group:
            raise ValueError(f"{type(self).__name__}: in_channels {in_channels} and out_channels {out_channels} "
                             f"must be divisible by group {group}")
        self.kernel_size, self.stride, self.dilation = ksize, stride, dilation
        self.pad_mode, self.padding = pad_mode, padding
        self.pad = conv_pad(pad_mode, padding, type(self).__name__)
        self.has_bias = bool(has_bias)
        shape = (self.out_channels, self.in_channels // self.group) + tuple(ksize)
        fan_in = (self.in_channels // self.group) * math.prod(ksize)
        self.weight = Parameter(_init(weight_init, shape, dtype, fan_in), name="weight")
        if self.has_bias:
            self.bias = Parameter(_init(bias_init if bias_init is not None else "zeros", (self.out_channels,), dtype,
                                        fan_in), name="bias")
        else:
            self.bias = None                 # as MindSpore's: model zoos test `cell.bias is not None`


class Conv2d(_Conv):
    """MindSpore's nn.Conv2d (NCHW): weight [out, in/group, kh, kw]; pad_mode 'same' (default), 'valid', 'pad'."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, pad_mode="same", padding=0, dilation=1,
                 group=1, has_bias=False, weight_init=None, bias_init=None, data_format="NCHW", dtype=dt.float32):
        super().__init__()
        if data_format != "NCHW":
            raise NotImplementedError("nn.Conv2d: only data_format='NCHW' is supported")
        self._setup(in_channels, out_channels, _pair(kernel_size, "Conv2d: kernel_size"),
                    _pair(stride, "Conv2d: stride"), pad_mode, padding, _pair(dilation, "Conv2d: dilation"),
                    group, has_bias, weight_init, bias_init, dtype)
        # MindSpore's attribute: subclasses in model zoos call it with a weight of their own (mindcv's BiT:
        # StdConv2d standardizes self.weight, then self.conv2d(x, w))
        self.conv2d = ops.Conv2D(self.out_channels, self.kernel_size, pad_mode=pad_mode, pad=padding,
                                 stride=self.stride, dilation=self.dilation, group=self.group)

    def construct(self, x):
        out = apply("CONV2D", (x, self.weight), (self.stride, self.pad, self.dilation, self.group))
        if self.has_bias:
            out = out + ops.reshape(self.bias, (1, -1, 1, 1))
        return out


class Conv1d(_Conv):
    """MindSpore's nn.Conv1d ([N, C, L]): weight [out, in/group, k]; runs as a 2-D convolution of height 1."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, pad_mode="same", padding=0, dilation=1,
                 group=1, has_bias=False, weight_init=None, bias_init=None, dtype=dt.float32):
        super().__init__()
        if isinstance(padding, (tuple, list)):
            padding = (0, 0, int(padding[0]), int(padding[-1]))
        elif pad_mode == "pad":
            padding = (0, 0, int(padding), int(padding))
        self._setup(in_channels, out_channels, (int(kernel_size),), (1, int(stride)), pad_mode, padding,
                    (1, int(dilation)), group, has_bias, weight_init, bias_init, dtype)

    def construct(self, x):
        w = ops.expand_dims(self.weight, 2)
        out = apply("CONV2D", (ops.expand_dims(x, 2), w), (self.stride, self.pad, self.dilation, self.group))
        out = ops.squeeze(out, 2)
        if self.has_bias:
            out = out + ops.reshape(self.bias, (1, -1, 1))
        return out


class _BatchNorm(Cell):
    """Batch norm over axis 1: (x - mean) / sqrt(var + eps) * gamma + beta, with the moving statistics
    (inference) or the batch's, which then update the moving ones (training, use_batch_statistics)."""

    RANKS = (2, 3, 4)

    def __init__(self, num_features, eps=1e-5, momentum=0.9, affine=True, gamma_init="ones", beta_init="zeros",
                 moving_mean_init="zeros", moving_var_init="ones", use_batch_statistics=None, data_format="NCHW",
                 dtype=dt.float32):
        super().__init__()
        if data_format != "NCHW":
            raise NotImplementedError(f"{type(self).__name__}: only data_format='NCHW' is supported")
        n = int(num_features)
        self.num_features, self.eps, self.momentum, self.use_batch_statistics = n, float(eps), momentum, \
            use_batch_statistics
        self.gamma = Parameter(_init(gamma_init, (n,), dtype, 1), name="gamma", requires_grad=affine)
        self.beta = Parameter(_init(beta_init, (n,), dtype, 1), name="beta", requires_grad=affine)
        self.moving_mean = Parameter(_init(moving_mean_init, (n,), dtype, 1), name="mean", requires_grad=False)
        self.moving_variance = Parameter(_init(moving_var_init, (n,), dtype, 1), name="variance",
                                         requires_grad=False)

    def construct(self, x):
        if self.use_batch_statistics or (self.use_batch_statistics is None and self.training):
            # (issue 21) the batch's statistics (the biased variance); they update the moving ones as
            # MindSpore's CPU kernel does: moving * momentum + batch * (1 - momentum)
            shape = (1, -1) + (1,) * (len(x.shape) - 2)
            axes = (0,) + tuple(range(2, len(x.shape)))
            mean = ops.mean(x, axes)
            var = ops.mean(ops.square(x - ops.reshape(mean, shape)), axes)
            ops.assign(self.moving_mean, self.moving_mean * self.momentum + mean * (1.0 - self.momentum))
            ops.assign(self.moving_variance, self.moving_variance * self.momentum + var * (1.0 - self.momentum))
            scale = self.gamma * ops.rsqrt(var + self.eps)
            shift = self.beta - mean * scale
            return x * ops.reshape(scale, shape) + ops.reshape(shift, shape)
        # inference: the moving statistics (BATCH_NORM; the fuser folds it into a preceding convolution)
        return apply("BATCH_NORM", (x, self.gamma, self.beta, self.moving_mean, self.moving_variance), (self.eps,))


class BatchNorm2d(_BatchNorm):
    pass


class BatchNorm1d(_BatchNorm):
    pass


class MaxPool2d(Cell):
    def __init__(self, kernel_size=1, stride=1, pad_mode="valid", padding=0, dilation=1, return_indices=False,
                 ceil_mode=False, data_format="NCHW"):
        super().__init__()
        if dilation not in (1, (1, 1)) or return_indices or ceil_mode or data_format != "NCHW":
            raise NotImplementedError("nn.MaxPool2d: dilation, return_indices, ceil_mode and NHWC are not supported yet")
        self.kernel_size = _pair(kernel_size, "MaxPool2d: kernel_size")
        self.stride = _pair(stride, "MaxPool2d: stride")
        self.pad = conv_pad(pad_mode, padding, "MaxPool2d")

    def construct(self, x):
        return apply("MAX_POOL2D", (x,), (self.kernel_size, self.stride, self.pad))


class AvgPool2d(Cell):
    def __init__(self, kernel_size=1, stride=1, pad_mode="valid", padding=0, ceil_mode=False, count_include_pad=True,
                 divisor_override=None, data_format="NCHW"):
        super().__init__()
        if ceil_mode or divisor_override is not None or data_format != "NCHW":
            raise NotImplementedError("nn.AvgPool2d: ceil_mode, divisor_override and NHWC are not supported yet")
        self.kernel_size = _pair(kernel_size, "AvgPool2d: kernel_size")
        self.stride = _pair(stride, "AvgPool2d: stride")
        self.pad = conv_pad(pad_mode, padding, "AvgPool2d")
        self.count_include_pad = bool(count_include_pad)

    def construct(self, x):
        return apply("AVG_POOL2D", (x,), (self.kernel_size, self.stride, self.pad, self.count_include_pad))


class AdaptiveAvgPool2d(Cell):
    def __init__(self, output_size):
        super().__init__()
        size = (output_size, output_size) if isinstance(output_size, int) or output_size is None else output_size
        self.output_size = tuple(None if d is None else int(d) for d in size)

    def construct(self, x):
        return apply("ADAPTIVE_AVG_POOL2D", (x,), (self.output_size,))


class Embedding(Cell):
    """A lookup table [vocab_size, embedding_size]; ids of any shape -> ids.shape + [embedding_size]."""

    def __init__(self, vocab_size, embedding_size, use_one_hot=False, embedding_table="normal", dtype=dt.int32,
                 padding_idx=None):
        super().__init__()
        self.vocab_size, self.embedding_size = int(vocab_size), int(embedding_size)
        table = _init(embedding_table, (self.vocab_size, self.embedding_size), dt.float32, self.embedding_size)
        if padding_idx is not None and not STATIC_INIT:
            arr = table.asnumpy().copy()
            arr[int(padding_idx)] = 0
            table = Tensor(arr)
        self.embedding_table = Parameter(table, name="embedding_table")
        self.padding_idx = padding_idx
        self.use_one_hot = bool(use_one_hot)
        # (use_one_hot, as MindSpore's: OneHot of the flat ids times the table, on/off values of ``dtype``)
        vd = dtype if getattr(dtype, "kind", None) == "f" else dt.float32
        self.on_value, self.off_value = Tensor(np.asarray(1.0, vd.np)), Tensor(np.asarray(0.0, vd.np))

    def construct(self, ids):
        if self.use_one_hot:
            flat = ops.reshape(ids, (-1,))
            table = ops.matmul(ops.one_hot(flat, self.vocab_size, self.on_value, self.off_value), self.embedding_table)
            return ops.reshape(table, ids.shape + (self.embedding_size,))
        return apply("GATHER", (self.embedding_table, ids), (0,))


class Flatten(Cell):
    def __init__(self, start_dim=1, end_dim=-1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def construct(self, x):
        return ops.flatten(x, start_dim=self.start_dim, end_dim=self.end_dim)


class Identity(Cell):
    def construct(self, x):
        return x


class ReLU6(Cell):
    def construct(self, x):
        return ops.relu6(x)


class HSigmoid(Cell):
    """relu6(x + 3) / 6."""

    def construct(self, x):
        return ops.hardsigmoid(x)


class HSwish(Cell):
    """x * relu6(x + 3) / 6."""

    def construct(self, x):
        return ops.hardswish(x)


class SiLU(Cell):
    def construct(self, x):
        return ops.silu(x)


class ELU(Cell):
    def __init__(self, alpha=1.0):
        super().__init__()
        self.alpha = float(alpha)

    def construct(self, x):
        return ops.elu(x, self.alpha)


class LeakyReLU(Cell):
    def __init__(self, alpha=0.2):
        super().__init__()
        self.alpha = float(alpha)

    def construct(self, x):
        return ops.leaky_relu(x, self.alpha)


class Softplus(Cell):
    """log(1 + exp(beta * x)) / beta, linear above threshold."""

    def __init__(self, beta=1.0, threshold=20.0):
        super().__init__()
        self.beta, self.threshold = float(beta), float(threshold)

    def construct(self, x):
        return ops.softplus(x, self.beta, self.threshold)


class Dropout(Cell):
    """Identity at inference (msvm runs inference; training-mode dropout is not supported)."""

    def __init__(self, keep_prob=0.5, p=None, dtype=dt.float32):
        super().__init__()
        self.p = p if p is not None else 1.0 - keep_prob

    def construct(self, x):
        return x


class GroupNorm(Cell):
    """MindSpore's nn.GroupNorm on [N, C, *]: each of ``num_groups`` groups of channels normalized over
    its channels and positions (mean, biased variance, ``eps`` inside the root), then ``gamma`` and
    ``beta`` per channel (mindcv's poolformer)."""

    def __init__(self, num_groups, num_channels, eps=1e-5, affine=True, gamma_init="ones", beta_init="zeros",
                 dtype=dt.float32):
        super().__init__()
        if num_groups < 1 or num_channels % num_groups:
            raise ValueError(f"nn.GroupNorm: num_channels ({num_channels}) must be a multiple of num_groups "
                             f"({num_groups})")
        self.num_groups, self.num_channels, self.eps, self.affine = int(num_groups), int(num_channels), float(eps), affine
        self.gamma = Parameter(_init(gamma_init, (num_channels,), dtype, 1), name="gamma", requires_grad=affine)
        self.beta = Parameter(_init(beta_init, (num_channels,), dtype, 1), name="beta", requires_grad=affine)

    def construct(self, x):
        shape = x.shape
        per_group = self.num_channels // self.num_groups
        for d in shape[2:]:
            per_group = per_group * d          # (not -1: an empty batch has no size to infer it from)
        g = ops.reshape(x, (shape[0], self.num_groups, per_group))
        d = g - ops.mean(g, -1, True)
        y = ops.reshape(d / ops.sqrt(ops.mean(d * d, -1, True) + self.eps), shape)
        per_channel = (1, self.num_channels) + (1,) * (len(shape) - 2)
        return y * ops.reshape(self.gamma, per_channel) + ops.reshape(self.beta, per_channel)


class ConstantPad2d(Cell):
    """MindSpore's nn.ConstantPad2d: the last two dims padded with ``value`` by ``padding`` (an int, or
    (left, right, top, bottom)); negative pads crop (mindcv's BiT)."""

    def __init__(self, padding, value):
        super().__init__()
        pads = (padding,) * 4 if isinstance(padding, int) else tuple(int(p) for p in padding)
        if len(pads) != 4:
            raise ValueError(f"nn.ConstantPad2d: padding must be an int or 4 ints, got {padding!r}")
        self.padding, self.value = pads, float(value)

    def construct(self, x):
        return ops.pad(x, self.padding, value=self.value)


class ZeroPad2d(ConstantPad2d):
    def __init__(self, padding):
        super().__init__(padding, 0.0)


class Unfold(Cell):
    """MindSpore's nn.Unfold (ExtractImagePatches) on NCHW: every ``ksizes`` window, its taps ``rates``
    apart, ``strides`` apart, as channels: out[n, (i * kw + j) * C + c, oh, ow] = x[n, c, oh * sh + i * rh,
    ow * sw + j * rw], the windows' depth laid out (row, column, channel) as TensorFlow's and MindSpore's
    kernels lay it out; "valid" takes the windows inside the image, "same" ceil(H / sh) x ceil(W / sw) of
    them over a zero border split as evenly as it goes, the extra on the bottom and right (mindcv's volo and
    halonet)."""

    def __init__(self, ksizes, strides, rates, padding="valid"):
        super().__init__()
        vals = []
        for name, v in (("ksizes", ksizes), ("strides", strides), ("rates", rates)):
            if not isinstance(v, (tuple, list)) or len(v) != 4 or v[0] != 1 or v[3] != 1 or \
                    not all(isinstance(d, int) and d >= 1 for d in v[1:3]):
                raise ValueError(f"nn.Unfold: {name} must be [1, {name[:-1]}_row, {name[:-1]}_col, 1] of positive "
                                 f"ints, got {v!r}")
            vals.append((int(v[1]), int(v[2])))
        if not isinstance(padding, str) or padding.lower() not in ("same", "valid"):
            raise ValueError(f"nn.Unfold: padding must be 'same' or 'valid', got {padding!r}")
        (self.kh, self.kw), (self.sh, self.sw), (self.rh, self.rw) = vals
        self.same = padding.lower() == "same"

    def construct(self, x):
        n, c, h, w = x.shape
        eh, ew = (self.kh - 1) * self.rh + 1, (self.kw - 1) * self.rw + 1        # (the windows' extent)
        if self.same:
            oh, ow = (h + self.sh - 1) // self.sh, (w + self.sw - 1) // self.sw
            ph, pw = max((oh - 1) * self.sh + eh - h, 0), max((ow - 1) * self.sw + ew - w, 0)
            x = ops.pad(x, (pw // 2, pw - pw // 2, ph // 2, ph - ph // 2))
        else:
            oh, ow = (h - eh) // self.sh + 1, (w - ew) // self.sw + 1
        parts = []
        for i in range(self.kh):
            for j in range(self.kw):
                r0, c0 = i * self.rh, j * self.rw
                parts.append(x[:, :, r0:r0 + (oh - 1) * self.sh + 1:self.sh, c0:c0 + (ow - 1) * self.sw + 1:self.sw])
        return ops.concat(parts, axis=1)


class Conv2dTranspose(_Conv):
    """MindSpore's nn.Conv2dTranspose (NCHW): weight [in, out / group, kh, kw]; the result H * stride high in
    'same' (the default), H * stride + max(e - stride, 0) in 'valid' (e = dilation * (k - 1) + 1), (H - 1) *
    stride + e - (top + bottom) in 'pad', then, after the bias, ``output_padding`` rows and columns of zeros at
    the bottom and right ('pad' only), as MindSpore's layer adds them (ops.conv_transpose2d computes them)."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, pad_mode="same", padding=0,
                 output_padding=0, dilation=1, group=1, has_bias=False, weight_init=None, bias_init=None,
                 dtype=dt.float32):
        super().__init__()
        ksize, stride = _pair(kernel_size, "Conv2dTranspose: kernel_size"), _pair(stride, "Conv2dTranspose: stride")
        dilation = _pair(dilation, "Conv2dTranspose: dilation")
        self._setup(out_channels, in_channels, ksize, stride, pad_mode, padding, dilation, group, has_bias,
                    weight_init, bias_init, dtype)
        # (_setup made the weight [in, out / group, kh, kw] and the names the other way round)
        self.in_channels, self.out_channels = int(in_channels), int(out_channels)
        if self.has_bias:
            self.bias = Parameter(_init(bias_init if bias_init is not None else "zeros", (self.out_channels,), dtype,
                                        1), name="bias")
        self.output_padding = _pair(output_padding, "Conv2dTranspose: output_padding")
        self.pads_output = any(self.output_padding)
        self.valid = str(pad_mode).lower() == "valid"
        if self.pads_output and str(pad_mode).lower() != "pad":
            raise ValueError("nn.Conv2dTranspose: output_padding needs pad_mode 'pad'")
        for op, s, d in zip(self.output_padding, stride, dilation):
            if not 0 <= op < max(s, d):
                raise ValueError(f"nn.Conv2dTranspose: output_padding {op} must be in [0, max(stride, dilation))")

    def construct(self, x):
        _, _, h, w = x.shape
        size, pads = [], []
        for i, n in enumerate((h, w)):
            e = self.dilation[i] * (self.kernel_size[i] - 1) + 1
            s = self.stride[i]
            if self.pad == ("same",):
                size.append(n * s)
                pads.append(max(e - s, 0) // 2)
            elif self.valid:
                size.append(n * s + max(e - s, 0))
                pads.append(0)
            else:
                lo, hi = self.pad[2 * i], self.pad[2 * i + 1]
                size.append((n - 1) * s + e - lo - hi)
                pads.append(lo)
        out = _conv_transpose(x, self.weight, tuple(size), self.stride, tuple(pads), self.dilation, self.group)
        if self.has_bias:
            out = out + ops.reshape(self.bias, (1, -1, 1, 1))
        if self.pads_output:             # (after the bias, as MindSpore's layer: the rows it adds are zeros)
            out = ops.pad(out, (0, self.output_padding[1], 0, self.output_padding[0]))
        return out
