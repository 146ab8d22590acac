"""0-d tensors through every op family (issue 15, issue 21): the cases tests/vm (L1, PyNative)
and tests/jit (L2, L3, replays) run. Each case: an msvm function of two 0-d tensors, its numpy
reference, and the dtype of its result ("same": the inputs')."""

import msvm as ms
import numpy as np
from msvm import nn, ops

# name: (msvm function, numpy reference, result dtype); one lambda a line (the frontend finds each by its line)
CASES = {
    "add": (lambda a, b: ops.add(a, b), lambda a, b: a + b, "same"),
    "sub": (lambda a, b: a - b, lambda a, b: a - b, "same"),
    "mul": (lambda a, b: a * b, lambda a, b: a * b, "same"),
    "div": (lambda a, b: a / b, lambda a, b: a / b, "same"),
    "pow": (lambda a, b: ops.pow(ops.abs(a), b), lambda a, b: np.abs(a) ** b, "same"),
    "maximum": (lambda a, b: ops.maximum(a, b), np.maximum, "same"),
    "minimum": (lambda a, b: ops.minimum(a, b), np.minimum, "same"),
    "scalar_operand": (lambda a, b: a * 2.0 - 1.0, lambda a, b: a * 2.0 - 1.0, "same"),
    "equal": (lambda a, b: ops.equal(a, b), np.equal, "bool"),
    "less": (lambda a, b: a < b, np.less, "bool"),
    "greater_equal": (lambda a, b: ops.greater_equal(a, b), np.greater_equal, "bool"),
    "logical_and": (lambda a, b: ops.logical_and(a > 0, b > 0), lambda a, b: (a > 0) & (b > 0), "bool"),
    "logical_not": (lambda a, b: ops.logical_not(a > b), lambda a, b: ~(a > b), "bool"),
    "where": (lambda a, b: ops.where(a > b, a, b), lambda a, b: np.where(a > b, a, b), "same"),
    "neg": (lambda a, b: -a, lambda a, b: -a, "same"),
    "abs": (lambda a, b: ops.abs(a), lambda a, b: np.abs(a), "same"),
    "exp": (lambda a, b: ops.exp(a), lambda a, b: np.exp(a), "same"),
    "log": (lambda a, b: ops.log(ops.abs(a) + 1.0), lambda a, b: np.log(np.abs(a) + 1), "same"),
    "sqrt": (lambda a, b: ops.sqrt(ops.abs(a)), lambda a, b: np.sqrt(np.abs(a)), "same"),
    "rsqrt": (lambda a, b: ops.rsqrt(ops.abs(a) + 1.0), lambda a, b: 1 / np.sqrt(np.abs(a) + 1), "same"),
    "reciprocal": (lambda a, b: ops.reciprocal(ops.abs(a) + 2.0), lambda a, b: 1 / (np.abs(a) + 2), "same"),
    "tanh": (lambda a, b: ops.tanh(a), lambda a, b: np.tanh(a), "same"),
    "sigmoid": (lambda a, b: ops.sigmoid(a), lambda a, b: 1 / (1 + np.exp(-a)), "same"),
    "relu": (lambda a, b: ops.relu(a), lambda a, b: np.maximum(a, 0), "same"),
    "gelu": (lambda a, b: ops.gelu(a), lambda a, b: _gelu(a), "same"),
    "gelu_tanh": (lambda a, b: ops.gelu(a, approximate="tanh"), lambda a, b: _gelu_tanh(a), "same"),
    "erf": (lambda a, b: ops.erf(a), lambda a, b: _erf(a), "same"),
    "clip": (lambda a, b: ops.clip(a, -0.5, 0.5), lambda a, b: np.clip(a, -0.5, 0.5), "same"),
    "cast": (lambda a, b: ops.cast(a * 10.0, ms.int32), lambda a, b: (a * 10).astype(np.int32), "int32"),
    "sum": (lambda a, b: ops.sum(a), lambda a, b: a, "same"),
    "mean": (lambda a, b: ops.mean(a), lambda a, b: a, "same"),
    "amax": (lambda a, b: ops.amax(a), lambda a, b: a, "same"),
    "amin": (lambda a, b: ops.amin(a), lambda a, b: a, "same"),
    "argmax": (lambda a, b: ops.argmax(a), lambda a, b: np.int32(0), "int32"),
    "sum_of_vector": (lambda a, b: ops.sum(ops.broadcast_to(a, (3,))), lambda a, b: a * 3, "same"),
    "mean_max": (lambda a, b: ops.maximum(ops.mean(a), ops.mean(a)), lambda a, b: a, "same"),
    "reshape_to_0d": (lambda a, b: ops.reshape(ops.reshape(a, (1, 1)), ()), lambda a, b: a, "same"),
    "squeeze": (lambda a, b: ops.squeeze(ops.expand_dims(a, 0)), lambda a, b: a, "same"),
    "index": (lambda a, b: ops.expand_dims(a, 0)[0], lambda a, b: a, "same"),
    "transpose": (lambda a, b: ops.transpose(a, ()), lambda a, b: a, "same"),
    "matmul_1x1": (lambda a, b: ops.matmul(ops.reshape(a, (1, 1)), ops.reshape(b, (1, 1)))[0, 0],
                   lambda a, b: a * b, "same"),
    "softmax_of_1": (lambda a, b: ops.softmax(ops.expand_dims(a, 0))[0], lambda a, b: np.ones_like(a), "same"),
    "zeros_like": (lambda a, b: ops.zeros_like(a) + b, lambda a, b: b, "same"),
    "chain": (lambda a, b: ops.relu(a * b + 1.0) - 0.5, lambda a, b: np.maximum(a * b + 1, 0) - 0.5, "same"),
}


def _erf(a):
    from scipy.special import erf

    return erf(a).astype(a.dtype)


def _gelu(a):
    return (a * 0.5 * (1 + _erf(a / np.sqrt(a.dtype.type(2))))).astype(a.dtype)


def _gelu_tanh(a):
    return (0.5 * a * (1 + np.tanh(np.sqrt(2 / np.pi) * (a + 0.044715 * a ** 3)))).astype(a.dtype)


def inputs(dtype, seed=0):
    rng = np.random.default_rng(seed)
    return np.array(rng.uniform(-2, 2), dtype), np.array(rng.uniform(0.5, 2), dtype)


class One(nn.Cell):
    """The case's result, returned alone."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def construct(self, x, y):
        return self.fn(x, y)


class Nested(nn.Cell):
    """The case's result in a tuple, in a nested tuple, and through a sub-Cell that takes it."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn
        self.inner = One(lambda a, b: ops.squeeze(ops.expand_dims(a, 0)))

    def construct(self, x, y):
        r = self.fn(x, y)
        return r, (self.inner(r, r), ops.mean(x))


def check(out, want, dtype, kind):
    """``out`` is a Tensor of shape () and the expected dtype, close to ``want``."""
    assert type(out) is ms.Tensor, f"{type(out).__name__}, not a Tensor"
    a = out.asnumpy()
    assert type(a) is np.ndarray and a.shape == (), a.shape
    want_dtype = np.dtype(dtype) if kind == "same" else np.dtype(kind)
    assert a.dtype == want_dtype, (a.dtype, want_dtype)
    np.testing.assert_allclose(a.astype(np.float64), np.asarray(want).astype(np.float64), rtol=1e-5, atol=1e-6)


def run_case(name, dtype, calls=4):
    """Every return path of one case, called ``calls`` times (the call memo, then its replay)."""
    fn, ref, kind = CASES[name]
    x, y = inputs(dtype)
    want = ref(x, y)
    one, nested = One(fn), Nested(fn)
    jitted = ms.jit(lambda a, b: fn(a, b))
    for _ in range(calls):
        tx, ty = ms.Tensor(x), ms.Tensor(y)
        assert tx.shape == () and ty.shape == ()
        check(one(tx, ty), want, dtype, kind)
        check(jitted(tx, ty), want, dtype, kind)
        r, (s, m) = nested(tx, ty)
        check(r, want, dtype, kind)
        check(s, want, dtype, kind)
        check(m, x, dtype, "same")
