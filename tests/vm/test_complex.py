"""complex64 / complex128 (issue 21): the dtypes, their promotion, and the ops MindSpore's CPU
computes on them (math, layout, matmul, band part, gathers, casts, Real/Imag/Conj/Angle/Complex),
eagerly and in a Cell at L1, against numpy (tests/jit runs the compiled tiers)."""

import msvm as ms
import numpy as np
import pytest
from cells import Fn
from msvm import dtype as dt
from msvm import nn, ops

R = np.random.default_rng(2102)
CDTYPES = [np.complex64, np.complex128]


def cx(shape, d):
    return (R.standard_normal(shape) + 1j * R.standard_normal(shape)).astype(d)


def both(fn, *arrays):
    """fn's results eagerly and from a Cell at L1, as numpy arrays (each a tuple)."""
    out = []
    for mode in (ms.PYNATIVE_MODE, ms.GRAPH_MODE):
        ms.set_context(mode=mode)
        r = Fn(fn)(*[ms.Tensor(a) for a in arrays])
        out.append(tuple(x.asnumpy() for x in (r if isinstance(r, tuple) else (r,))))
    ms.set_context(mode=ms.GRAPH_MODE)
    return out


def test_dtypes_names_and_promotion():
    assert str(ms.complex64) == "Complex64" and str(ms.complex128) == "Complex128"
    assert dt.from_numpy(np.complex128) is ms.complex128 and dt.by_name("Complex64") is ms.complex64
    assert dt.promote(ms.complex64, ms.float32) is ms.complex64
    assert dt.promote(ms.complex64, ms.float64) is ms.complex128      # as numpy
    assert dt.promote(ms.int32, ms.complex128) is ms.complex128
    assert dt.result_of([ms.float64], ["c"]) is ms.complex128 and dt.result_of([ms.int8], ["c"]) is ms.complex64
    assert dt.real_of(ms.complex64) is ms.float32 and dt.complex_of(ms.float64) is ms.complex128
    assert ms.Tensor(np.array(1 + 2j)).dtype is ms.complex128 and ms.Tensor(np.array(1 + 2j)).shape == ()


UNARY = [("tanh", ops.tanh, np.tanh), ("exp", ops.exp, np.exp), ("neg", ops.neg, np.negative),
         ("atan", ops.atan, np.arctan), ("sqrt", ops.sqrt, np.sqrt), ("square", ops.square, np.square),
         ("conj", ops.conj, np.conj), ("reciprocal", ops.reciprocal, lambda z: 1 / z),
         ("sin", ops.sin, np.sin), ("log", ops.log, np.log)]


@pytest.mark.parametrize("d", CDTYPES)
@pytest.mark.parametrize("name,fn,ref", UNARY, ids=[u[0] for u in UNARY])
def test_unary_math_keeps_complex(name, fn, ref, d):
    z = cx((3, 4), d)
    z[0, 0] = 0.5 + 0j               # a real value and an imaginary one among them
    z[0, 1] = -1.5j
    for (got,) in both(fn, z):
        assert got.dtype == d, name
        np.testing.assert_allclose(got, ref(z), rtol=2e-5 if d == np.complex64 else 1e-12, atol=1e-6)


@pytest.mark.parametrize("d", CDTYPES)
def test_parts_abs_angle_are_real(d):
    z = cx((2, 5), d)
    real = np.float32 if d == np.complex64 else np.float64
    for got in both(lambda a: (ops.abs(a), ops.real(a), ops.imag(a), ops.angle(a)), z):
        for g, want in zip(got, (np.abs(z), z.real, z.imag, np.angle(z))):
            assert g.dtype == real
            np.testing.assert_allclose(g, want, rtol=1e-6, atol=1e-6)
    x = R.standard_normal(4).astype(np.float32)        # on a real tensor: x, 0, x
    for r, i, c in both(lambda a: (ops.real(a), ops.imag(a), ops.conj(a)), x):
        np.testing.assert_array_equal(r, x)
        np.testing.assert_array_equal(i, np.zeros(4, np.float32))
        np.testing.assert_array_equal(c, x)


@pytest.mark.parametrize("part", [np.float32, np.float64])
def test_complex_from_parts_and_arithmetic(part):
    re, im = R.standard_normal((3, 1)).astype(part), R.standard_normal(4).astype(part)
    want = re + 1j * im
    for (z,) in both(lambda a, b: ops.Complex()(a, b), re, im):
        assert z.dtype == (np.complex64 if part == np.float32 else np.complex128)
        np.testing.assert_allclose(z, want, rtol=1e-6)
    a, b = cx((3, 4), np.complex64), cx((4,), np.complex64)
    for got in both(lambda x, y: (x + y, x * y, x / y, x - 2.0, ops.pow(x, y), x == y), a, b):
        for g, w in zip(got, (a + b, a * b, a / b, a - 2, np.power(a, b), a == b)):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("d", CDTYPES)
def test_layout_matmul_band_gather_on_complex(d):
    z, w = cx((2, 3, 4), d), cx((4, 5), d)
    idx = np.array([2, 0, 1, 1], np.int32)
    fns = (lambda a, b, i: (ops.reshape(a, (6, 4)), ops.transpose(a, (2, 0, 1)), ops.expand_dims(a, 1),
                            ops.concat((a, a), 1), ops.matmul(a, b), ops.matrix_band_part(a, 1, 0),
                            ops.gather(a, i, 1), a[:, ::-1, 1:3], ops.flatten(a), ops.ConjugateTranspose()(a, (0, 2, 1)),
                            ops.sum(a, 1), ops.mean(a)))
    want = (z.reshape(6, 4), z.transpose(2, 0, 1), z[:, None], np.concatenate((z, z), 1), z @ w,
            np.tril(np.triu(z, -1), 0), np.take(z, idx, 1), z[:, ::-1, 1:3], z.reshape(2, 12),
            np.conj(z.transpose(0, 2, 1)), z.sum(1), z.mean())
    for got in both(fns, z, w, idx):
        for k, (g, x) in enumerate(zip(got, want)):
            assert g.dtype == d, k
            np.testing.assert_allclose(g, x, rtol=1e-5, atol=1e-6, err_msg=str(k))


def test_casts_to_and_from_complex():
    z = cx((5,), np.complex64)
    z[1] = 0
    for f, b, c in both(lambda a: (ops.cast(a, ms.float32), ops.cast(a, ms.bool_), ops.cast(a, ms.complex128)), z):
        np.testing.assert_array_equal(f, z.real)                 # complex to real: the real part
        np.testing.assert_array_equal(b, z != 0)
        assert c.dtype == np.complex128
        np.testing.assert_array_equal(c, z.astype(np.complex128))
    x = np.arange(4, dtype=np.int32)
    for (c,) in both(lambda a: ops.cast(a, ms.complex64), x):
        np.testing.assert_array_equal(c, x.astype(np.complex64))


def test_complex_parts_must_be_real():
    z = cx((2,), np.complex64)
    with pytest.raises(ms.FrontendError, match="COMPLEX: the parts must be real"):
        Fn(lambda a, b: ops.Complex()(a, b))(ms.Tensor(z), ms.Tensor(z))


class WithComplexConstant(nn.Cell):
    def __init__(self):
        super().__init__()
        self.c = ms.Tensor(np.array([1 + 2j, 3 - 1j], np.complex64))

    def construct(self, x):
        return ops.cast(x, ms.complex64) * ms.Tensor(np.array([2j, 1], np.complex64)) + self.c


def test_complex_constants_in_the_binary_format():
    from msvm.bytecode import binary
    from msvm.bytecode.disasm import value_to_data
    from msvm.bytecode.tables import value_from_data
    from msvm.errors import BytecodeError

    net = WithComplexConstant()
    x = R.standard_normal(2).astype(np.float32)
    np.testing.assert_allclose(net(ms.Tensor(x)).asnumpy(), x * np.array([2j, 1]) + np.array([1 + 2j, 3 - 1j]),
                               rtol=1e-6)
    code = next(iter(net._runner.variants.values())).code
    back = binary.loads(binary.dumps(code))
    assert back == code
    z = cx((2, 3), np.complex128)
    d = value_to_data(z)
    assert np.array(d["array"]).shape == (2, 3, 2)          # [re, im] pairs: JSON has no complex numbers
    got = value_from_data(d)
    assert got.dtype == np.complex128 and np.array_equal(got, z)
    with pytest.raises(BytecodeError, match="re, im"):
        value_from_data({"array": [1.0, 2.0], "dtype": "complex64", "shape": [2]})
