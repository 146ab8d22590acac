"""``mindspore.common.initializer``: the weight initializers MindSpore's layers and model zoos use.

An ``Initializer`` fills an array of a given shape; ``initializer(init, shape, dtype)`` makes a
Tensor from an Initializer, a name (``'normal'``, ``'he_uniform'``, ``'zeros'``...), a number or
an array, as MindSpore's does. MindSpore returns a lazily initialised Tensor whose data appears
at ``init_data()``; msvm fills it at once (``init_data()`` returns the Tensor itself), so a
Parameter built from it holds its values from the start.

Fan-in and fan-out follow MindSpore (and PyTorch): for a weight of shape ``[out, in, *k]``,
``fan_in = in * prod(k)`` and ``fan_out = out * prod(k)``; a 1-d shape has both equal to its size.
The random values come from numpy's global generator (``np.random.seed`` makes them repeatable);
they match MindSpore's distributions, not its bits.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from .. import dtype as dt

__all__ = ["Constant", "HeNormal", "HeUniform", "Initializer", "Normal", "One", "TruncatedNormal", "Uniform",
           "XavierNormal", "XavierUniform", "Zero", "initializer"]


def _fans(shape) -> tuple[int, int]:
    shape = tuple(int(d) for d in shape)
    if len(shape) == 0:
        return 1, 1
    if len(shape) == 1:
        return shape[0], shape[0]
    receptive = math.prod(shape[2:])
    return shape[1] * receptive, shape[0] * receptive


def _gain(nonlinearity: str, param=None) -> float:
    """``calculate_gain`` of MindSpore/PyTorch."""
    nonlinearity = nonlinearity.lower()
    if nonlinearity in ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
                        "conv_transpose3d", "sigmoid"):
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else float(param)
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"initializer: unknown nonlinearity {nonlinearity!r}")


class Initializer:
    """Base class: ``Initializer()(shape)`` returns a float64 array of that shape."""

    def __init__(self, **kwargs):
        self._kwargs = kwargs

    def __call__(self, shape) -> np.ndarray:
        return np.asarray(self._fill(tuple(int(d) for d in shape)), dtype=np.float64)

    def _fill(self, shape):
        raise NotImplementedError(type(self).__name__)

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self._kwargs.items())
        return f"{type(self).__name__}({args})"


class Zero(Initializer):
    def _fill(self, shape):
        return np.zeros(shape)


class One(Initializer):
    def _fill(self, shape):
        return np.ones(shape)


class Constant(Initializer):
    def __init__(self, value):
        super().__init__(value=value)
        self.value = value

    def _fill(self, shape):
        return np.full(shape, self.value, dtype=np.float64)


class Normal(Initializer):
    """N(mean, sigma^2)."""

    def __init__(self, sigma=0.01, mean=0.0):
        super().__init__(sigma=sigma, mean=mean)
        self.sigma, self.mean = float(sigma), float(mean)

    def _fill(self, shape):
        return np.random.normal(self.mean, self.sigma, shape)


class Uniform(Initializer):
    """U(-scale, scale)."""

    def __init__(self, scale=0.07):
        super().__init__(scale=scale)
        self.scale = float(scale)

    def _fill(self, shape):
        return np.random.uniform(-self.scale, self.scale, shape)


class TruncatedNormal(Initializer):
    """N(mean, sigma^2) redrawn outside [a, b] (MindSpore's defaults: a=-2, b=2, absolute values)."""

    def __init__(self, sigma=0.01, mean=0.0, a=-2.0, b=2.0):
        super().__init__(sigma=sigma, mean=mean, a=a, b=b)
        self.sigma, self.mean, self.a, self.b = float(sigma), float(mean), float(a), float(b)

    def _fill(self, shape):
        n = math.prod(shape)
        out = np.random.normal(self.mean, self.sigma, n)
        if self.sigma > 0 and self.a < self.b:
            for _ in range(64):                    # each pass redraws the few values outside [a, b]
                bad = (out < self.a) | (out > self.b)
                if not bad.any():
                    break
                out[bad] = np.random.normal(self.mean, self.sigma, int(bad.sum()))
            np.clip(out, self.a, self.b, out=out)
        return out.reshape(shape)


class _He(Initializer):
    def __init__(self, negative_slope=0, mode="fan_in", nonlinearity="leaky_relu"):
        super().__init__(negative_slope=negative_slope, mode=mode, nonlinearity=nonlinearity)
        if mode not in ("fan_in", "fan_out"):
            raise ValueError(f"{type(self).__name__}: mode must be 'fan_in' or 'fan_out', not {mode!r}")
        self.slope, self.mode, self.nonlinearity = negative_slope, mode, nonlinearity

    def _std(self, shape):
        fan_in, fan_out = _fans(shape)
        fan = fan_in if self.mode == "fan_in" else fan_out
        return _gain(self.nonlinearity, self.slope) / math.sqrt(max(fan, 1))


class HeNormal(_He):
    """Kaiming normal: N(0, (gain / sqrt(fan))^2)."""

    def _fill(self, shape):
        return np.random.normal(0.0, self._std(shape), shape)


class HeUniform(_He):
    """Kaiming uniform: U(-b, b) with b = gain * sqrt(3 / fan)."""

    def _fill(self, shape):
        bound = math.sqrt(3.0) * self._std(shape)
        return np.random.uniform(-bound, bound, shape)


class XavierUniform(Initializer):
    """Glorot uniform: U(-b, b) with b = gain * sqrt(6 / (fan_in + fan_out))."""

    def __init__(self, gain=1):
        super().__init__(gain=gain)
        self.gain = float(gain)

    def _fill(self, shape):
        fan_in, fan_out = _fans(shape)
        bound = self.gain * math.sqrt(6.0 / max(fan_in + fan_out, 1))
        return np.random.uniform(-bound, bound, shape)


class XavierNormal(Initializer):
    """Glorot normal: N(0, gain^2 * 2 / (fan_in + fan_out))."""

    def __init__(self, gain=1):
        super().__init__(gain=gain)
        self.gain = float(gain)

    def _fill(self, shape):
        fan_in, fan_out = _fans(shape)
        return np.random.normal(0.0, self.gain * math.sqrt(2.0 / max(fan_in + fan_out, 1)), shape)


# the names MindSpore accepts for weight_init / bias_init / initializer(...)
_BY_NAME = {
    "zeros": Zero, "zero": Zero, "ones": One, "one": One,
    "normal": Normal, "uniform": Uniform, "truncatednormal": TruncatedNormal,
    "he_normal": HeNormal, "henormal": HeNormal, "he_uniform": HeUniform, "heuniform": HeUniform,
    "xavier_uniform": XavierUniform, "xavieruniform": XavierUniform,
    "xavier_normal": XavierNormal, "xaviernormal": XavierNormal,
}


def as_initializer(init) -> Initializer:
    """An Initializer from an Initializer, a name or a number (arrays and Tensors are handled by the caller)."""
    if isinstance(init, Initializer):
        return init
    if isinstance(init, str):
        cls = _BY_NAME.get(init.lower())
        if cls is None:
            raise ValueError(f"unknown initializer {init!r}; known: {', '.join(sorted(_BY_NAME))}")
        return cls()
    if isinstance(init, numbers.Number) and not isinstance(init, bool):
        return Constant(init)
    raise TypeError(f"an initializer must be an Initializer, a name, a number, an array or a Tensor, "
                    f"not {type(init).__name__}")


def initializer(init, shape=None, dtype=dt.float32):
    """A Tensor of ``shape`` and ``dtype`` filled by ``init`` (MindSpore's ``initializer``)."""
    from ..tensor import Tensor

    if isinstance(init, Tensor):
        arr = init._host()
    elif isinstance(init, np.ndarray):
        arr = init
    else:
        if shape is None:
            raise ValueError("initializer: a shape is needed unless init is a Tensor or an array")
        shape = (int(shape),) if isinstance(shape, numbers.Integral) else tuple(int(d) for d in shape)
        arr = as_initializer(init)(shape)
    if shape is not None:
        shape = (int(shape),) if isinstance(shape, numbers.Integral) else tuple(int(d) for d in shape)
        if tuple(arr.shape) != shape:
            raise ValueError(f"initializer: the value has shape {list(arr.shape)}, expected {list(shape)}")
    return Tensor(np.asarray(arr, dtype=dt.as_dtype(dtype).np))
