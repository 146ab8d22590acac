"""One line per op against numpy: values, broadcasting and dtypes, eagerly (PyNative)
and compiled to bytecode (a jit function), which must agree with each other."""

import msvm as ms
import numpy as np
import pytest
from msvm import ops
from scipy import special

R = np.random.default_rng(7)


def f32(*shape):
    return R.standard_normal(shape).astype(np.float32)


def pos(*shape):
    return (R.random(shape) + 0.5).astype(np.float32)


def gelu_ref(x):
    return 0.5 * x * (1 + special.erf(x / np.float32(np.sqrt(2))))


def gelu_tanh_ref(x):
    return 0.5 * x * (1 + np.tanh(np.float32(np.sqrt(2 / np.pi)) * (x + 0.044715 * x ** 3)))


def softmax_ref(x, axis):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def ln_ref(x, g, b, eps):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / np.sqrt(v + eps) * g + b


# (name, msvm function, inputs, numpy reference)
CASES = [
    ("add", lambda a, b: ops.add(a, b), [f32(4, 5), f32(5)], lambda a, b: a + b),
    ("add_bcast", lambda a, b: a + b, [f32(3, 1, 5), f32(4, 1)], lambda a, b: a + b),
    ("sub", lambda a, b: ops.sub(a, b), [f32(4, 5), f32(4, 5)], lambda a, b: a - b),
    ("mul_scalar", lambda a: a * 2.5, [f32(4, 5)], lambda a: a * np.float32(2.5)),
    ("rsub_scalar", lambda a: 1.0 - a, [f32(4, 5)], lambda a: np.float32(1) - a),
    ("div", lambda a, b: ops.div(a, b), [f32(4, 5), pos(4, 5)], lambda a, b: a / b),
    ("pow", lambda a: ops.pow(a, 2.0), [pos(3, 4)], lambda a: a ** 2),
    ("maximum", lambda a, b: ops.maximum(a, b), [f32(4, 5), f32(1, 5)], np.maximum),
    ("minimum", lambda a, b: ops.minimum(a, b), [f32(4, 5), f32(4, 1)], np.minimum),
    ("abs", lambda a: ops.abs(a), [f32(6)], np.abs),
    ("neg", lambda a: -a, [f32(2, 3)], np.negative),
    ("exp", lambda a: ops.exp(a), [f32(3, 4)], np.exp),
    ("log", lambda a: ops.log(a), [pos(3, 4)], np.log),
    ("sqrt", lambda a: ops.sqrt(a), [pos(3, 4)], np.sqrt),
    ("rsqrt", lambda a: ops.rsqrt(a), [pos(3, 4)], lambda a: 1 / np.sqrt(a)),
    ("reciprocal", lambda a: ops.reciprocal(a), [pos(3, 4)], lambda a: 1 / a),
    ("tanh", lambda a: ops.tanh(a), [f32(3, 4)], np.tanh),
    ("sigmoid", lambda a: ops.sigmoid(a), [f32(3, 4)], lambda a: 1 / (1 + np.exp(-a))),
    ("relu", lambda a: ops.relu(a), [f32(3, 4)], lambda a: np.maximum(a, 0)),
    ("gelu", lambda a: ops.gelu(a), [f32(3, 4)], gelu_ref),
    ("gelu_tanh", lambda a: ops.gelu(a, approximate="tanh"), [f32(3, 4)], gelu_tanh_ref),
    ("erf", lambda a: ops.erf(a), [f32(3, 4)], special.erf),
    ("matmul", lambda a, b: ops.matmul(a, b), [f32(5, 6), f32(6, 7)], np.matmul),
    ("matmul_op", lambda a, b: a @ b, [f32(5, 6), f32(6, 7)], np.matmul),
    ("MatMul_tb", lambda a, b: ops.MatMul(transpose_b=True)(a, b), [f32(5, 6), f32(7, 6)], lambda a, b: a @ b.T),
    ("MatMul_ta", lambda a, b: ops.MatMul(transpose_a=True)(a, b), [f32(6, 5), f32(6, 7)], lambda a, b: a.T @ b),
    ("bmm", lambda a, b: ops.bmm(a, b), [f32(2, 3, 4, 5), f32(2, 3, 5, 6)], np.matmul),
    ("bmm_bcast", lambda a, b: ops.matmul(a, b), [f32(2, 3, 4, 5), f32(5, 6)], np.matmul),
    ("softmax", lambda a: ops.softmax(a, -1), [f32(3, 7)], lambda a: softmax_ref(a, -1)),
    ("softmax_0", lambda a: ops.Softmax(0)(a), [f32(3, 7)], lambda a: softmax_ref(a, 0)),
    ("log_softmax", lambda a: ops.log_softmax(a), [f32(3, 7)], lambda a: np.log(softmax_ref(a, -1))),
    ("layer_norm", lambda a, g, b: ops.layer_norm(a, (8,), g, b, 1e-5), [f32(2, 3, 8), f32(8), f32(8)],
     lambda a, g, b: ln_ref(a, g, b, 1e-5)),
    ("sum", lambda a: ops.sum(a), [f32(3, 4)], lambda a: np.sum(a)),
    ("sum_axis", lambda a: ops.sum(a, 1, True), [f32(3, 4)], lambda a: np.sum(a, 1, keepdims=True)),
    ("mean", lambda a: ops.mean(a, (0, 2)), [f32(3, 4, 5)], lambda a: a.mean((0, 2))),
    ("mean_method", lambda a: a.mean(-1, keep_dims=True), [f32(3, 4)], lambda a: a.mean(-1, keepdims=True)),
    ("max", lambda a: ops.max(a, 0), [f32(3, 4)], lambda a: a.max(0)),
    ("min", lambda a: ops.min(a, 1, True), [f32(3, 4)], lambda a: a.min(1, keepdims=True)),
    ("argmax", lambda a: ops.argmax(a, 1), [f32(3, 4)], lambda a: a.argmax(1).astype(np.int32)),
    ("reshape", lambda a: ops.reshape(a, (2, -1)), [f32(4, 6)], lambda a: a.reshape(2, -1)),
    ("reshape_method", lambda a: a.reshape(3, 8), [f32(4, 6)], lambda a: a.reshape(3, 8)),
    ("transpose", lambda a: ops.transpose(a, (2, 0, 1)), [f32(2, 3, 4)], lambda a: a.transpose(2, 0, 1)),
    ("T", lambda a: a.T, [f32(2, 3)], lambda a: a.T),
    ("expand_dims", lambda a: ops.expand_dims(a, 1), [f32(2, 3)], lambda a: a[:, None]),
    ("squeeze", lambda a: ops.squeeze(a, 1), [f32(2, 1, 3)], lambda a: a.squeeze(1)),
    ("concat", lambda a, b: ops.concat((a, b), 1), [f32(2, 3), f32(2, 5)], lambda a, b: np.concatenate([a, b], 1)),
    ("Concat", lambda a, b: ops.Concat(0)((a, b)), [f32(2, 3), f32(4, 3)], lambda a, b: np.concatenate([a, b], 0)),
    ("stack", lambda a, b: ops.stack((a, b), 0), [f32(2, 3), f32(2, 3)], lambda a, b: np.stack([a, b])),
    ("cast_f16", lambda a: ops.cast(a, ms.float16), [f32(3, 4)], lambda a: a.astype(np.float16)),
    ("cast_i32", lambda a: ops.cast(a, ms.int32), [f32(3, 4) * 10], lambda a: a.astype(np.int32)),
    ("astype", lambda a: a.astype(ms.float64), [f32(3)], lambda a: a.astype(np.float64)),
    ("where", lambda c, a, b: ops.where(c > 0, a, b), [f32(3, 4), f32(3, 4), f32(4)],
     lambda c, a, b: np.where(c > 0, a, b)),
    ("greater", lambda a, b: ops.greater(a, b), [f32(3, 4), f32(4)], np.greater),
    ("less", lambda a, b: a < b, [f32(3, 4), f32(3, 4)], np.less),
    ("equal", lambda a: ops.equal(a, a), [f32(3)], lambda a: a == a),
    ("le_ge", lambda a, b: ops.logical_and(a <= b, a >= b), [f32(3), f32(3)], lambda a, b: (a <= b) & (a >= b)),
    ("int_add", lambda a, b: a + b, [np.arange(6, dtype=np.int32).reshape(2, 3), np.ones(3, np.int32)],
     lambda a, b: a + b),
    ("int_float_promote", lambda a, b: a + b, [np.arange(6, dtype=np.int32), f32(6)],
     lambda a, b: a.astype(np.float32) + b),
    ("int_div_is_float", lambda a, b: a / b, [np.arange(1, 7, dtype=np.int32), np.full(6, 4, np.int32)],
     lambda a, b: (a / b).astype(np.float32)),
    ("f16_mul", lambda a, b: a * b, [f32(4).astype(np.float16), f32(4).astype(np.float16)], lambda a, b: a * b),
    ("f64_scalar_stays_f64", lambda a: a * 3.0, [f32(4).astype(np.float64)], lambda a: a * 3.0),
    ("zeros_like", lambda a: ops.zeros_like(a) + a, [f32(2, 3)], lambda a: a),
    ("clip", lambda a: ops.clip(a, -0.5, 0.5), [f32(4, 4)], lambda a: np.clip(a, -0.5, 0.5)),
    ("flatten", lambda a: ops.flatten(a), [f32(2, 3, 4)], lambda a: a.reshape(2, 12)),
    ("slice", lambda a: a[:, 1:3], [f32(4, 5)], lambda a: a[:, 1:3]),
    ("index", lambda a: a[0, :4], [f32(4, 5)], lambda a: a[0, :4]),
    ("broadcast_to", lambda a: ops.broadcast_to(a, (3, 4)), [f32(1, 4)], lambda a: np.broadcast_to(a, (3, 4))),
]


def _check(out, ref):
    out = out.asnumpy() if hasattr(out, "asnumpy") else np.asarray(out)
    ref = np.asarray(ref)
    assert out.shape == ref.shape
    assert out.dtype == ref.dtype, (out.dtype, ref.dtype)
    tol = 2e-3 if out.dtype == np.float16 else 1e-5
    if out.dtype.kind == "f":
        np.testing.assert_allclose(out, ref, rtol=tol, atol=tol)
    else:
        np.testing.assert_array_equal(out, ref)


@pytest.mark.parametrize("name,fn,inputs,ref", CASES, ids=[c[0] for c in CASES])
def test_op_eager(name, fn, inputs, ref):
    ms.set_context(mode=ms.PYNATIVE_MODE)
    _check(fn(*[ms.Tensor(x) for x in inputs]), ref(*inputs))


@pytest.mark.parametrize("name,fn,inputs,ref", CASES, ids=[c[0] for c in CASES])
def test_op_bytecode(name, fn, inputs, ref):
    global _CURRENT
    _CURRENT = fn
    out = _JIT[len(inputs)](*[ms.Tensor(x) for x in inputs])
    _check(out, ref(*inputs))


# jit functions whose body calls the op under test (a module global, read at compile time)
_CURRENT = None


def _call1(a):
    return _CURRENT(a)


def _call2(a, b):
    return _CURRENT(a, b)


def _call3(a, b, c):
    return _CURRENT(a, b, c)


class _Fresh:
    """A new jit wrapper per call so each case compiles its own bytecode."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, *args):
        return ms.jit(self.fn)(*args)


_JIT = {1: _Fresh(_call1), 2: _Fresh(_call2), 3: _Fresh(_call3)}
