"""Built-in layers with MindSpore's constructor signatures. Their ``construct``
methods are ordinary msvm code, compiled like a user's Cell."""

from __future__ import annotations

import math

import numpy as np

from .. import dtype as dt
from .. import ops
from ..common.initializer import as_initializer
from ..ops.functional import apply
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
        arr = init.asnumpy()
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


class Dropout(Cell):
    """Identity at inference (msvm runs inference; training-mode dropout is not supported)."""

    def __init__(self, keep_prob=0.5, p=None, dtype=dt.float32):
        super().__init__()
        self.p = p if p is not None else 1.0 - keep_prob

    def construct(self, x):
        return x
