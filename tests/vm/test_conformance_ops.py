"""Issue 21 (conformance): the ops MindSpore's own CPU tests need, against numpy, through each
of their three faces (ms.ops function, primitive, Tensor method), eagerly and inside a
compiled Cell (the interpreter here; tests/jit/test_conformance_tiers.py runs L2/L3)."""

import warnings

import msvm as ms
import numpy as np
import pytest
from cells import Fn as Apply
from msvm import nn, ops
from msvm.compat import MindSporeGap
from msvm.ops import registry
from scipy import special

from tests.special_values import assert_numpy_equal, edge_values, sprinkle

# (function name, primitive name, Tensor method, numpy reference, input domain)
UNARY = [
    ("sin", "Sin", "sin", np.sin, "any"), ("cos", "Cos", "cos", np.cos, "any"), ("tan", "Tan", "tan", np.tan, "any"),
    ("asin", "Asin", "asin", np.arcsin, "unit"), ("acos", "ACos", "acos", np.arccos, "unit"),
    ("atan", "Atan", "atan", np.arctan, "any"), ("sinh", "Sinh", "sinh", np.sinh, "any"),
    ("cosh", "Cosh", "cosh", np.cosh, "any"), ("asinh", "Asinh", "asinh", np.arcsinh, "any"),
    ("acosh", "Acosh", "acosh", np.arccosh, "ge1"), ("atanh", "Atanh", "atanh", np.arctanh, "unit"),
    ("floor", "Floor", "floor", np.floor, "any"), ("ceil", "Ceil", "ceil", np.ceil, "any"),
    ("round", "Round", "round", np.rint, "any"), ("trunc", "Trunc", "trunc", np.trunc, "any"),
    ("sign", "Sign", "sign", np.sign, "any"), ("isnan", "IsNan", "isnan", np.isnan, "any"),
    ("isinf", "IsInf", "isinf", np.isinf, "any"), ("isfinite", "IsFinite", "isfinite", np.isfinite, "any"),
    ("square", "Square", "square", np.square, "any"), ("log1p", "Log1p", "log1p", np.log1p, "gt-1"),
    ("expm1", "Expm1", "expm1", np.expm1, "any"), ("erfc", "Erfc", "erfc", special.erfc, "any"),
    ("inv", "Inv", "inv", lambda x: np.float32(1) / x, "any"),
    ("softplus", "Softplus", "softplus", lambda x: np.logaddexp(np.float32(0), x), "any"),
    ("abs", "Abs", "abs", np.abs, "any"), ("exp", "Exp", "exp", np.exp, "any"),
    ("erfinv", "Erfinv", "erfinv", special.erfinv, "unit"),
]


def _input(rng, shape, domain, dtype=np.float32):
    x = rng.standard_normal(shape).astype(dtype) * 3
    if domain == "unit":
        x = np.tanh(x).astype(dtype)
    elif domain == "ge1":
        x = (np.abs(x) + 1).astype(dtype)
    elif domain == "gt-1":
        x = (np.abs(x) - 0.9).astype(dtype)
    return x


def _ref(fn, x):
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return fn(x)


@pytest.mark.parametrize("fname,pname,mname,ref,domain", UNARY, ids=[u[0] for u in UNARY])
def test_unary_three_faces_agree_with_numpy(fname, pname, mname, ref, domain, rng):
    for shape in [(), (0,), (3,), tuple(rng.integers(1, 5, 3))]:
        x = _input(rng, shape, domain)
        want = _ref(ref, x)
        faces = {"function": getattr(ops, fname)(ms.Tensor(x)), "primitive": getattr(ops, pname)()(ms.Tensor(x)),
                 "method": getattr(ms.Tensor(x), mname)(), "Cell": Apply(getattr(ops, pname)())(ms.Tensor(x))}
        for face, out in faces.items():
            assert out.shape == want.shape, (face, shape)
            assert out.asnumpy().dtype == want.dtype, (face, out.asnumpy().dtype, want.dtype)
            assert_numpy_equal(out.asnumpy(), want, rtol=1e-5, atol=1e-6, msg=f"{fname} {face} {shape}")


@pytest.mark.parametrize("fname,pname,mname,ref,domain", UNARY, ids=[u[0] for u in UNARY])
def test_unary_edge_values(fname, pname, mname, ref, domain, rng):
    for dtype in (np.float32, np.float64):
        x = edge_values(dtype)
        want = _ref(ref, x)
        with np.errstate(all="ignore"):
            eager = getattr(ops, fname)(ms.Tensor(x)).asnumpy()
            graph = Apply(getattr(ops, fname))(ms.Tensor(sprinkle(rng, x, 0)))
        assert_numpy_equal(eager, want.astype(eager.dtype) if want.dtype != bool else want, msg=f"{fname} {dtype}")
        assert_numpy_equal(graph.asnumpy(), eager, msg=f"{fname} graph {dtype}")


@pytest.mark.parametrize("op", ["floor", "ceil", "round", "trunc", "sign", "square"])
def test_rounding_keeps_int_dtypes(op):
    x = np.array([-3, 0, 2, 7], np.int32)
    out = getattr(ops, op)(ms.Tensor(x)).asnumpy()
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, {"sign": np.sign, "square": np.square}.get(op, lambda v: v)(x))


def test_inv_of_ints_stays_int():
    out = ops.Inv()(ms.Tensor(np.array([1, 2, -1, 4], np.int32))).asnumpy()
    assert out.dtype == np.int32 and list(out) == [1, 0, -1, 0]


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64, np.bool_])
def test_bitwise_ops_and_operators(dtype, rng):
    a = rng.integers(0, 100, (3, 4)).astype(dtype)
    b = rng.integers(0, 100, (4,)).astype(dtype)
    for fn, prim, ref, sym in [("bitwise_and", "BitwiseAnd", np.bitwise_and, "__and__"),
                               ("bitwise_or", "BitwiseOr", np.bitwise_or, "__or__"),
                               ("bitwise_xor", "BitwiseXor", np.bitwise_xor, "__xor__")]:
        want = ref(a, b)
        for out in (getattr(ops, fn)(ms.Tensor(a), ms.Tensor(b)), getattr(ops, prim)()(ms.Tensor(a), ms.Tensor(b)),
                    getattr(ms.Tensor(a), fn)(ms.Tensor(b)), getattr(ms.Tensor(a), sym)(ms.Tensor(b))):
            np.testing.assert_array_equal(out.asnumpy(), want)
            assert out.asnumpy().dtype == want.dtype
    np.testing.assert_array_equal((~ms.Tensor(a)).asnumpy(), np.invert(a))
    np.testing.assert_array_equal(ops.Invert()(ms.Tensor(a)).asnumpy(), np.invert(a))


def test_bitwise_on_floats_is_an_error():
    with pytest.raises(TypeError, match="int or bool"):
        ops.bitwise_and(ms.Tensor(np.ones(3, np.float32)), ms.Tensor(np.ones(3, np.float32)))


@pytest.mark.parametrize("lower,upper", [(0, 0), (1, 2), (-1, 0), (0, -1), (-1, -1), (5, 1)])
def test_matrix_band_part(lower, upper, rng):
    for shape in [(4, 4), (2, 3, 5), (2, 1, 6, 3), (0, 3)]:
        x = rng.standard_normal(shape).astype(np.float32)
        m, n = shape[-2:]
        i, j = np.arange(m)[:, None], np.arange(n)[None, :]
        keep = ((lower < 0) | (i - j <= lower)) & ((upper < 0) | (j - i <= upper))
        want = np.where(keep, x, 0)
        np.testing.assert_array_equal(ops.matrix_band_part(ms.Tensor(x), lower, upper).asnumpy(), want)
        net = Apply(lambda t: ops.matrix_band_part(t, lower, upper))
        np.testing.assert_array_equal(net(ms.Tensor(x)).asnumpy(), want)


def test_matrix_band_part_needs_a_matrix():
    with pytest.raises(Exception, match="rank >= 2"):
        Apply(lambda t: ops.matrix_band_part(t, 1, 1))(ms.Tensor(np.ones(3, np.float32)))


@pytest.mark.parametrize("axis,keep", [(None, False), (0, True), ((1, 2), False), (-1, True)])
def test_reductions(axis, keep, rng):
    x = sprinkle(rng, rng.standard_normal((3, 4, 5)).astype(np.float32), 0.1)
    b = x > 0
    np_axis = axis
    close = dict(rtol=1e-5, atol=1e-5, equal_nan=True)
    np.testing.assert_allclose(ops.prod(ms.Tensor(x), axis, keep).asnumpy(), np.prod(x, np_axis, keepdims=keep), **close)
    np.testing.assert_array_equal(ops.all(ms.Tensor(b), axis, keep).asnumpy(), np.all(b, np_axis, keepdims=keep))
    np.testing.assert_array_equal(ops.any(ms.Tensor(b), axis, keep).asnumpy(), np.any(b, np_axis, keepdims=keep))
    np.testing.assert_array_equal(ms.Tensor(b).all(axis, keep).asnumpy(), np.all(b, np_axis, keepdims=keep))
    y = rng.standard_normal((3, 4, 5)).astype(np.float32)
    for ddof in (0, 1):
        np.testing.assert_allclose(ops.var(ms.Tensor(y), axis, ddof, keep).asnumpy(),
                                   np.var(y, np_axis, ddof=ddof, keepdims=keep), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(ops.std(ms.Tensor(y), axis, ddof, keep).asnumpy(),
                                   np.std(y, np_axis, ddof=ddof, keepdims=keep), rtol=1e-5, atol=1e-6)
    if axis is not None:
        np.testing.assert_allclose(ops.logsumexp(ms.Tensor(y), axis, keep).asnumpy(),
                                   special.logsumexp(y, np_axis, keepdims=keep), rtol=1e-5, atol=1e-6)
    for ordv in (None, 1, 2, 3, float("inf")):
        want = np.linalg.norm(y.reshape(-1), ordv) if axis is None else None
        if want is not None:
            np.testing.assert_allclose(ops.norm(ms.Tensor(y), ordv).asnumpy(), want, rtol=1e-5)
    prim = ops.ReduceProd(keep_dims=keep)
    np.testing.assert_allclose(prim(ms.Tensor(x), () if axis is None else axis).asnumpy(),
                               np.prod(x, np_axis, keepdims=keep), **close)


def test_argmin_and_argmax_primitives(rng):
    x = rng.standard_normal((4, 6)).astype(np.float32)
    assert ops.Argmax()(ms.Tensor(x)).asnumpy().tolist() == np.argmax(x, -1).tolist()
    assert ops.Argmin(axis=0)(ms.Tensor(x)).asnumpy().tolist() == np.argmin(x, 0).tolist()
    assert ms.Tensor(x).argmin(1).asnumpy().tolist() == np.argmin(x, 1).tolist()
    assert int(ops.argmin(ms.Tensor(x)).asnumpy()) == int(np.argmin(x))


ACTIVATIONS = [
    ("elu", lambda x: np.where(x > 0, x, np.expm1(x))),
    ("celu", lambda x: np.where(x > 0, x, np.expm1(x))),
    ("selu", lambda x: 1.0507009873554805 * np.where(x > 0, x, 1.6732632423543772 * np.expm1(x))),
    ("softsign", lambda x: x / (1 + np.abs(x))),
    ("mish", lambda x: x * np.tanh(np.logaddexp(0, x))),
    ("relu6", lambda x: np.clip(x, 0, 6)),
    ("hardtanh", lambda x: np.clip(x, -1, 1)),
    ("hardshrink", lambda x: np.where(np.abs(x) > 0.5, x, 0)),
    ("softshrink", lambda x: np.where(x > 0.5, x - 0.5, np.where(x < -0.5, x + 0.5, 0))),
    ("hardsigmoid", lambda x: np.clip(x / 6 + 0.5, 0, 1)),
    ("hardswish", lambda x: x * np.clip(x / 6 + 0.5, 0, 1)),
    ("fast_gelu", lambda x: x / (1 + np.exp(-1.702 * np.abs(x))) * np.exp(0.851 * (x - np.abs(x)))),
]


@pytest.mark.parametrize("name,ref", ACTIVATIONS, ids=[a[0] for a in ACTIVATIONS])
def test_activations(name, ref, rng):
    x = rng.standard_normal((3, 7)).astype(np.float32) * 4
    x[0, :3] = [0.0, 0.5, -0.5]
    want = ref(x.astype(np.float64))
    np.testing.assert_allclose(getattr(ops, name)(ms.Tensor(x)).asnumpy(), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(Apply(getattr(ops, name))(ms.Tensor(x)).asnumpy(), want, rtol=1e-5, atol=1e-6)


def test_primitive_attrs_reach_the_implementation(rng):
    x = rng.standard_normal((5,)).astype(np.float32)
    np.testing.assert_allclose(ops.Elu(alpha=0.3)(ms.Tensor(x)).asnumpy(), np.where(x > 0, x, 0.3 * np.expm1(x)),
                               rtol=1e-6)
    np.testing.assert_allclose(ops.HShrink(2.0)(ms.Tensor(x)).asnumpy(), np.where(np.abs(x) > 2, x, 0))
    with pytest.raises(TypeError, match="unexpected argument 'beta'.*alpha"):
        ops.Elu(beta=1)


def test_names_for_existing_ops(rng):
    a, b = rng.standard_normal((2, 3)).astype(np.float32), rng.standard_normal((2, 3)).astype(np.float32)
    ta, tb = ms.Tensor(a), ms.Tensor(b)
    np.testing.assert_array_equal(ops.GreaterEqual()(ta, tb).asnumpy(), a >= b)
    np.testing.assert_array_equal(ops.LessEqual()(ta, tb).asnumpy(), a <= b)
    np.testing.assert_array_equal(ops.NotEqual()(ta, tb).asnumpy(), a != b)
    np.testing.assert_array_equal(ops.gt(ta, tb).asnumpy(), a > b)
    np.testing.assert_array_equal(ops.ge(ta, tb).asnumpy(), a >= b)
    np.testing.assert_array_equal(ops.select(ta > tb, ta, tb).asnumpy(), np.where(a > b, a, b))
    np.testing.assert_array_equal(ta.neg().asnumpy(), -a)
    np.testing.assert_allclose(ta.add(tb).asnumpy(), a + b)
    np.testing.assert_allclose(ta.mul(tb).asnumpy(), a * b)
    np.testing.assert_allclose(ta.div(tb).asnumpy(), a / b)
    np.testing.assert_allclose(ta.matmul(tb.T).asnumpy(), a @ b.T, rtol=1e-6)
    np.testing.assert_array_equal(ops.LogicalXor()(ta > 0, tb > 0).asnumpy(), (a > 0) ^ (b > 0))
    x4 = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    assert ops.Flatten()(ms.Tensor(x4)).shape == (2, 60)
    bias = rng.standard_normal(3).astype(np.float32)
    np.testing.assert_allclose(ops.BiasAdd()(ms.Tensor(x4), ms.Tensor(bias)).asnumpy(),
                               x4 + bias.reshape(1, 3, 1, 1), rtol=1e-6)
    np.testing.assert_allclose(ops.LogSoftmax()(ta).asnumpy(), a - special.logsumexp(a, -1, keepdims=True),
                               rtol=1e-5, atol=1e-6)
    assert ops.BroadcastTo((4, 2, 3))(ta).shape == (4, 2, 3)
    np.testing.assert_array_equal(ops.OnesLike()(ta).asnumpy(), np.ones_like(a))
    np.testing.assert_array_equal(ops.ZerosLike()(ta).asnumpy(), np.zeros_like(a))
    np.testing.assert_allclose(ops.SquaredDifference()(ta, tb).asnumpy(), (a - b) ** 2, rtol=1e-6)
    np.testing.assert_allclose(ops.atan2(ta, tb).asnumpy(), np.arctan2(a, b), rtol=1e-6)
    np.testing.assert_allclose(ops.remainder(ta, tb).asnumpy(), np.mod(a, b), rtol=1e-5, atol=1e-6)


def test_registry_is_the_one_definition():
    """Every face a row names exists and calls the row's implementation; no name is defined twice."""
    seen = {"function": {}, "primitive": {}, "method": {}}
    for row in registry.API:
        for n in row.functions:
            assert getattr(ops, n) is row.impl, n
            assert n not in seen["function"], f"ops.{n} in two rows"
            seen["function"][n] = row
        for n in row.primitives:
            assert getattr(ops, n)._row is row, n
            assert n not in seen["primitive"], f"ops.{n} in two rows"
            seen["primitive"][n] = row
        for n in row.methods:
            assert n not in seen["method"], f"Tensor.{n} in two rows"
            seen["method"][n] = row
            assert hasattr(ms.Tensor, n), n


def test_vmap_is_a_loop_and_stack(rng):
    x = rng.standard_normal((4, 3, 5)).astype(np.float32)
    y = rng.standard_normal((5,)).astype(np.float32)
    out = ops.vmap(lambda a, b: ops.relu(a) + b, in_axes=(1, None))(ms.Tensor(x), ms.Tensor(y))
    np.testing.assert_allclose(out.asnumpy(), np.maximum(x.transpose(1, 0, 2), 0) + y, rtol=1e-6)
    out = ops.vmap(ops.sin, in_axes=0, out_axes=1)(ms.Tensor(x))
    np.testing.assert_allclose(out.asnumpy(), np.sin(x).transpose(1, 0, 2), rtol=1e-6)


def test_shift_primitive_defined_the_mindspore_way(rng):
    """A user's PrimitiveWithInfer named Shift runs msvm's Shift, in a Cell with symbolic dims."""
    class Shift(ops.PrimitiveWithInfer):
        @ops.prim_attr_register
        def __init__(self, periods=1, axis=-1):
            self.init_prim_io_names(inputs=["x", "fill_value"], outputs=["output"])

    class Net(nn.Cell):
        def __init__(self, periods, axis):
            super().__init__()
            self.shift = Shift(periods, axis)

        def construct(self, x, fill):
            return self.shift(x, fill)

    for periods, axis in [(2, 0), (-3, 1), (9, 1), (0, 0), (-1, -1)]:
        x = rng.standard_normal((4, 6)).astype(np.float32)
        want = np.full_like(x, np.nan)
        n = x.shape[axis]
        src = [slice(None)] * 2
        dst = [slice(None)] * 2
        if periods >= 0:
            src[axis], dst[axis] = slice(0, max(n - periods, 0)), slice(min(periods, n), None)
        else:
            src[axis], dst[axis] = slice(-periods, None), slice(0, max(n + periods, 0))
        want[tuple(dst)] = x[tuple(src)]
        out = Net(periods, axis)(ms.Tensor(x), float("nan")).asnumpy()
        np.testing.assert_array_equal(out, want, err_msg=f"periods={periods} axis={axis}")


def test_unknown_user_primitive_says_so():
    class Frobnicate(ops.PrimitiveWithInfer):
        @ops.prim_attr_register
        def __init__(self):
            pass

    with pytest.raises(NotImplementedError, match="'Frobnicate'.*no implementation"):
        Frobnicate()(ms.Tensor(np.ones(2, np.float32)))


def test_training_and_export_names_import_and_raise_clearly():
    import msvm.compat as compat

    compat.as_mindspore()
    import mindspore.ops as ops
    import mindspore.ops.composite as C
    from mindspore.common.api import _pynative_executor
    from mindspore.train.serialization import export

    # (MindSpore 2.10 has ops.grad; its composite module has no grad any more: AttributeError there)
    for thing in (lambda: C.GradOperation(get_all=True), lambda: export(None), lambda: ops.grad(None)):
        with pytest.raises(MindSporeGap, match="msvm does not do training/export"):
            thing()
    assert _pynative_executor.sync() is None      # msvm runs ops at once: nothing to wait for


def test_uint_dtypes():
    for name in ("uint16", "uint32", "uint64"):
        d = getattr(ms, name)
        t = ms.Tensor(np.arange(3, dtype=name))
        assert t.dtype is d and str(d) == f"UInt{name[4:]}"
        np.testing.assert_array_equal((t + t).asnumpy(), np.arange(3, dtype=name) * 2)


@pytest.mark.parametrize("mode", ["update", "add", "sub", "mul", "div", "max", "min"])
def test_tensor_scatter_modes(mode, rng):
    x = rng.standard_normal((5, 4, 3)).astype(np.float32)
    idx = np.array([[0, 1], [3, 2], [0, 1], [4, 0]], np.int32)     # (0, 1) twice
    upd = rng.standard_normal((4, 3)).astype(np.float32) + 2
    want = x.copy()
    for (i, j), u in zip(idx, upd):
        want[i, j] = {"update": lambda a, b: b, "add": np.add, "sub": np.subtract, "mul": np.multiply,
                      "div": np.divide, "max": np.maximum, "min": np.minimum}[mode](want[i, j], u)
    fn = getattr(ops, f"tensor_scatter_{mode}")
    prim = getattr(ops, f"TensorScatter{mode.capitalize()}")()
    for out in (fn(ms.Tensor(x), ms.Tensor(idx), ms.Tensor(upd)),
                prim(ms.Tensor(x), ms.Tensor(idx), ms.Tensor(upd)),
                Apply(lambda a: fn(a, ms.Tensor(idx), ms.Tensor(upd)))(ms.Tensor(x))):
        np.testing.assert_allclose(out.asnumpy(), want, rtol=1e-6)
    rows = np.array([4, 1], np.int32)
    want_rows = x.copy()
    if mode == "add":
        want_rows[rows] += x[:2]
        np.testing.assert_allclose(ops.ScatterAdd()(ms.Tensor(x), ms.Tensor(rows), ms.Tensor(x[:2])).asnumpy(),
                                   want_rows, rtol=1e-6)
        np.testing.assert_allclose(ops.inplace_add(ms.Tensor(x), ms.Tensor(x[:2]), (4, 1)).asnumpy(), want_rows,
                                   rtol=1e-6)


def test_tensor_scatter_checks_indices(rng):
    x = ms.Tensor(np.zeros((3, 2), np.float32))
    with pytest.raises(IndexError, match="index 3 is out of range for dim 0 of size 3"):
        ops.tensor_scatter_add(x, ms.Tensor(np.array([[3]], np.int32)), ms.Tensor(np.ones((1, 2), np.float32)))
    with pytest.raises(TypeError, match="indices must be int32 or int64"):
        Apply(lambda a: ops.tensor_scatter_add(a, ms.Tensor(np.array([[0.0]], np.float32)),
                                               ms.Tensor(np.ones((1, 2), np.float32))))(x)
    with pytest.raises(Exception, match="index 3 dims of a rank-2 x"):
        Apply(lambda a: ops.tensor_scatter_add(a, ms.Tensor(np.zeros((1, 3), np.int32)),
                                               ms.Tensor(np.ones((1,), np.float32))))(x)


def test_index_add_along_an_axis(rng):
    x = rng.standard_normal((3, 5)).astype(np.float32)
    y = rng.standard_normal((3, 2)).astype(np.float32)
    idx = np.array([4, 0], np.int32)
    want = x.copy()
    want[:, idx] += y
    np.testing.assert_allclose(ops.IndexAdd(axis=1)(ms.Tensor(x), ms.Tensor(idx), ms.Tensor(y)).asnumpy(), want,
                               rtol=1e-6)


class SplitMap(nn.Cell):
    """Needs the size of axis 0 while compiling (chunk into parts, vmap's loop)."""

    def construct(self, x):
        a, b = ops.chunk(x, 2, 0)
        return ops.vmap(ops.relu)(a) + b


def test_construct_that_needs_dims_compiles_for_exact_shapes(rng):
    net = SplitMap()
    for shape in [(4, 3), (4, 3), (6, 2), (4, 3)]:
        x = rng.standard_normal(shape).astype(np.float32)
        n = shape[0] // 2
        np.testing.assert_allclose(net(ms.Tensor(x)).asnumpy(), np.maximum(x[:n], 0) + x[n:], rtol=1e-6)
    assert net._runner.exact_shapes and len(net._runner.variants) == 2      # one per exact shape


def test_jit_function_that_needs_dims(rng):
    @ms.jit
    def halves(x):
        a, b = ops.chunk(x, 2, 1)
        return a * b

    for shape in [(2, 4), (3, 6)]:
        x = rng.standard_normal(shape).astype(np.float32)
        n = shape[1] // 2
        np.testing.assert_allclose(halves(ms.Tensor(x)).asnumpy(), x[:, :n] * x[:, n:], rtol=1e-6)


def test_declared_dynamic_dims_compile_for_exact_shapes_too(rng):
    """set_inputs' None dims: where compiling needs their value, a variant per exact shape (issue 21;
    before, this was a FrontendError)."""
    net = SplitMap()
    net.set_inputs(ms.Tensor(shape=[None, 3], dtype=ms.float32))
    for rows in (4, 6, 4):
        x = rng.standard_normal((rows, 3)).astype(np.float32)
        np.testing.assert_allclose(net(ms.Tensor(x)).asnumpy(), np.maximum(x[:rows // 2], 0) + x[rows // 2:],
                                   rtol=1e-6)
    assert net._runner.exact_shapes and len(net._runner.variants) == 2


class PosMask(nn.Cell):
    """edgenext's position encoding: a sub-Cell given its caller's dims as ints, which makes numpy arrays
    of them (``np.zeros((B, H, W))``) and inverts a Tensor made in construct."""

    def construct(self, B, H, W):
        mask = ms.Tensor(np.zeros((B, H, W))).astype(ms.bool_)
        return (~mask).cumsum(1, dtype=ms.float32)


class WithPos(nn.Cell):
    def __init__(self):
        super().__init__()
        self.pos = PosMask()

    def construct(self, x):
        B, C, H, W = x.shape
        return x + self.pos(B, H, W).reshape(B, 1, H, W)


def test_a_sub_cell_that_needs_its_int_arguments_values(rng):
    """The ints are baked into the sub-Cell's compile where the call site knows them; the caller,
    whose dims are symbolic, compiles per exact shape for it."""
    net = WithPos()
    for shape in [(2, 3, 4, 5), (1, 2, 3, 3), (2, 3, 4, 5)]:
        x = rng.standard_normal(shape).astype(np.float32)
        b, _, h, w = shape
        want = x + np.cumsum(np.ones((b, h, w), np.float32), 1).reshape(b, 1, h, w)
        np.testing.assert_array_equal(net(ms.Tensor(x)).asnumpy(), want)
    assert net._runner.exact_shapes and len(net._runner.variants) == 2


class _Inner(nn.Cell):
    def construct(self, a, b):
        return a * b + 1.0


class VmapCell(nn.Cell):
    def __init__(self):
        super().__init__()
        self.net = _Inner()

    def construct(self, x, y):
        return ops.vmap(self.net, (0, None), 1)(x, y)


def test_vmap_of_a_sub_cell_inside_construct(rng):
    x, y = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    np.testing.assert_allclose(VmapCell()(ms.Tensor(x), ms.Tensor(y)).asnumpy(), (x * y + 1).T, rtol=1e-6)


def test_gather_nd_and_gather_d(rng):
    x = rng.standard_normal((4, 5, 3)).astype(np.float32)
    idx = np.array([[[0, 1], [3, 4]], [[2, 2], [1, 0]]], np.int32)
    want = x[idx[..., 0], idx[..., 1]]
    np.testing.assert_array_equal(ops.GatherNd()(ms.Tensor(x), ms.Tensor(idx)).asnumpy(), want)
    np.testing.assert_array_equal(Apply(lambda t: ops.gather_nd(t, ms.Tensor(idx)))(ms.Tensor(x)).asnumpy(), want)
    with pytest.raises(IndexError, match="out of range for dim 0"):
        ops.gather_nd(ms.Tensor(x), ms.Tensor(np.array([[4]], np.int32)))
    ix = rng.integers(0, 5, (4, 2, 3)).astype(np.int64)
    np.testing.assert_array_equal(ops.GatherD()(ms.Tensor(x), 1, ms.Tensor(ix)).asnumpy(),
                                  np.take_along_axis(x, ix, 1))


def test_cdist_and_block_rearrangements(rng):
    a, b = rng.standard_normal((2, 3, 4)).astype(np.float32), rng.standard_normal((2, 5, 4)).astype(np.float32)
    want = np.sqrt(((a[:, :, None] - b[:, None]) ** 2).sum(-1))
    np.testing.assert_allclose(ops.Cdist(2.0)(ms.Tensor(a), ms.Tensor(b)).asnumpy(), want, rtol=1e-5)
    x = rng.standard_normal((1, 2, 4, 6)).astype(np.float32)
    s2b = ops.SpaceToBatchND(2, ((0, 0), (0, 2)))(ms.Tensor(x))
    assert s2b.shape == (4, 2, 2, 4)
    back = ops.BatchToSpaceND(2, ((0, 0), (0, 2)))(s2b)
    np.testing.assert_array_equal(back.asnumpy(), x)
    d2s = ops.DepthToSpace(2)(ms.Tensor(rng.standard_normal((1, 8, 2, 3)).astype(np.float32)))
    np.testing.assert_array_equal(ops.SpaceToDepth(2)(d2s).shape, (1, 8, 2, 3))


def test_time_distributed(rng):
    layer = nn.Dense(4, 3)
    x = rng.standard_normal((2, 5, 4)).astype(np.float32)
    out = nn.TimeDistributed(layer, time_axis=1)(ms.Tensor(x)).asnumpy()
    w, b = layer.weight.asnumpy(), layer.bias.asnumpy()
    np.testing.assert_allclose(out, x @ w.T + b, rtol=1e-5, atol=1e-6)


class Methods(nn.Cell):
    def construct(self, x, y):
        return x.sin().add(y).pow(2).floor(), (x > 0).all(), x.atan2(y)


def test_registry_methods_work_inside_construct(rng):
    x, y = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((3, 4)).astype(np.float32)
    a, b, c = Methods()(ms.Tensor(x), ms.Tensor(y))
    np.testing.assert_allclose(a.asnumpy(), np.floor((np.sin(x) + y) ** 2), rtol=1e-6)
    assert bool(b.asnumpy()) == bool((x > 0).all())
    np.testing.assert_allclose(c.asnumpy(), np.arctan2(x, y), rtol=1e-6)


@pytest.mark.parametrize("descending", [False, True])
def test_sort_is_stable_with_nan_last(descending, rng):
    x = rng.integers(0, 4, (3, 7)).astype(np.float32)
    x[0, 2] = np.nan
    vals, idx = ops.Sort(axis=1, descending=descending)(ms.Tensor(x))
    key = np.where(np.isnan(x), np.inf, -x if descending else x)
    want = np.argsort(key, 1, kind="stable")
    np.testing.assert_array_equal(idx.asnumpy(), want)
    np.testing.assert_array_equal(vals.asnumpy(), np.take_along_axis(x, want, 1))
    assert idx.asnumpy().dtype == np.int32


def test_topk(rng):
    x = rng.standard_normal((3, 6)).astype(np.float32)
    vals, idx = ops.TopK()(ms.Tensor(x), 2)
    np.testing.assert_array_equal(idx.asnumpy(), np.argsort(-x, 1)[:, :2])
    vals, idx = ops.topk(ms.Tensor(x), 3, sorted=False)
    np.testing.assert_array_equal(idx.asnumpy(), np.sort(np.argsort(-x, 1)[:, :3], 1))
    np.testing.assert_array_equal(vals.asnumpy(), np.take_along_axis(x, idx.asnumpy(), 1))


@pytest.mark.parametrize("mode", ["sum", "prod", "max", "min"])
def test_unsorted_segments(mode, rng):
    x = rng.standard_normal((5, 3)).astype(np.float32)
    ids = np.array([0, 2, 0, -1, 7], np.int32)        # -1 and 7 are dropped; segment 1 and 3 stay empty
    n = 4
    if mode in ("max", "min"):      # (issue 21) an id >= num_segments raises there, as MindSpore's CPU
        with pytest.raises(RuntimeError, match="segment id 7 is not below num_segments 4"):
            getattr(ops, f"UnsortedSegment{mode.capitalize()}")()(ms.Tensor(x), ms.Tensor(ids), n)
        ids[4] = -2
    ufunc = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}[mode]
    init = {"sum": 0, "prod": 1, "max": np.finfo(np.float32).min, "min": np.finfo(np.float32).max}[mode]
    want = np.full((n, 3), init, np.float32)
    for i, k in enumerate(ids):
        if 0 <= k < n:
            want[k] = ufunc(want[k], x[i])
    prim = getattr(ops, f"UnsortedSegment{mode.capitalize()}")()
    np.testing.assert_allclose(prim(ms.Tensor(x), ms.Tensor(ids), n).asnumpy(), want, rtol=1e-6)
    net = Apply(lambda t: prim(t, ms.Tensor(ids), n))
    np.testing.assert_allclose(net(ms.Tensor(x)).asnumpy(), want, rtol=1e-6)


def test_dtype_methods_and_renorm(rng):
    x = ms.Tensor(np.array([1.7, -2.2, 0.0], np.float32))
    assert x.int().dtype is ms.int32 and x.long().dtype is ms.int64 and x.half().dtype is ms.float16
    assert x.bool().asnumpy().tolist() == [True, True, False]
    y = rng.standard_normal((3, 4)).astype(np.float32) * 3
    norms = np.linalg.norm(y, 2, axis=1, keepdims=True)
    want = y * np.where(norms > 1.0, 1.0 / (norms + 1e-7), 1.0)
    np.testing.assert_allclose(ops.renorm(ms.Tensor(y), 2, 0, 1.0).asnumpy(), want, rtol=1e-5)


@pytest.mark.parametrize("reduction", ["none", "add"])
def test_tensor_scatter_elements(reduction, rng):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    idx = np.array([[1, 3], [0, 0], [2, 1]], np.int32)        # row 1 hits column 0 twice
    upd = rng.standard_normal((3, 2)).astype(np.float32)
    want = x.copy()
    for i in range(3):
        for j in range(2):
            want[i, idx[i, j]] = (want[i, idx[i, j]] + upd[i, j]) if reduction == "add" else upd[i, j]
    out = ops.TensorScatterElements(1, reduction)(ms.Tensor(x), ms.Tensor(idx), ms.Tensor(upd)).asnumpy()
    if reduction == "add":
        np.testing.assert_allclose(out, want, rtol=1e-6)
    else:                      # (a repeated index keeps one of its updates)
        np.testing.assert_allclose(np.delete(out, 1, 0), np.delete(want, 1, 0), rtol=1e-6)
    graph = Apply(lambda t: ops.tensor_scatter_elements(t, ms.Tensor(idx), ms.Tensor(upd), 1, reduction))
    np.testing.assert_allclose(graph(ms.Tensor(x)).asnumpy(), out, rtol=1e-6)
