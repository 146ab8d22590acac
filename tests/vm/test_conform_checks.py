"""Input checks MindSpore makes and msvm now makes too, and frontend forms its tests use (issue 21):
each case runs eagerly and, where it compiles, in a Cell at L1, against numpy or the expected error."""

import msvm as ms
import numpy as np
import pytest
from cells import Fn
from msvm import nn, ops

R = np.random.default_rng(2103)


def t(a):
    return ms.Tensor(np.asarray(a))


@pytest.mark.parametrize("mode", [ms.PYNATIVE_MODE, ms.GRAPH_MODE])
def test_mindspore_input_checks(mode):
    ms.set_context(mode=mode)
    f32 = R.standard_normal((3, 2)).astype(np.float32)
    with pytest.raises(TypeError, match="the type of 'tolerance' should be 'float'"):
        Fn(lambda a, b: ops.approximate_equal(a, b, "str"))(t(f32), t(f32))
    # (in a Cell the symbolic dims are unified: the entry check says which argument differs)
    with pytest.raises(ValueError, match="'x1' must have the same shape as 'x2'|argument xs_1 has dim 0 = 2"):
        Fn(lambda a, b: ops.approximate_equal(a, b, 0.5))(t(f32), t(np.zeros((2, 2), np.float32)))
    with pytest.raises(RuntimeError, match="rank should be less than 8"):
        z = np.zeros((1,) * 8, np.float32)
        Fn(lambda a, b: ops.approximate_equal(a, b, 0.5))(t(z), t(z))
    with pytest.raises(TypeError, match="one dtype"):
        Fn(ops.SquareSumAll())(t(f32.astype(np.float16)), t(f32))
    with pytest.raises(TypeError, match="float16 or float32"):
        Fn(ops.SquareSumAll())(t(f32.astype(np.float64)), t(f32.astype(np.float64)))
    with pytest.raises(ValueError, match="one shape|argument xs_1 has dim 0 = 2"):
        Fn(ops.SquareSumAll())(t(np.ones(3, np.float32)), t(np.ones(2, np.float32)))
    a, b = Fn(ops.SquareSumAll())(t(f32), t(f32 * 2))
    np.testing.assert_allclose([a.asnumpy(), b.asnumpy()], [(f32 ** 2).sum(), (4 * f32 ** 2).sum()], rtol=1e-5)
    with pytest.raises(TypeError, match="must not both be bool"):
        Fn(ops.TruncateDiv())(t([True, False]), t([True]))
    np.testing.assert_array_equal(Fn(ops.TruncateDiv())(t(np.array([7, -7], np.int32)), t([True])).asnumpy(), [7, -7])
    with pytest.raises(TypeError, match="SquaredDifference"):
        Fn(ops.SquaredDifference())(t([True]), t([False]))
    with pytest.raises(TypeError, match="'Rank', 'input_x' must be a Tensor"):
        Fn(ops.Rank())(1)
    assert Fn(ops.Rank())(t(f32)) == 2
    ids = t(np.array([0, 0, 1, 2], np.int32))
    with pytest.raises(RuntimeError, match="segment id 2 is not below num_segments 2"):
        Fn(lambda x, i: ops.unsorted_segment_max(x, i, 2))(t(np.arange(4, dtype=np.float32)), ids)
    np.testing.assert_array_equal(       # sum drops ids outside, as MindSpore's
        Fn(lambda x, i: ops.unsorted_segment_sum(x, i, 2))(t(np.arange(4, dtype=np.float32)), ids).asnumpy(), [1, 2])
    with pytest.raises(RuntimeError, match="For 'Gather', the 'input_indices' should be in the range"):
        Fn(lambda x, i: ops.gather(x, i, 0))(t(np.arange(7.0)), t(np.array([0, 100], np.int32)))


def test_broadcast_to_minus_one_needs_an_input_dim():
    x = np.arange(20, dtype=np.float32).reshape(4, 5)
    with pytest.raises(ValueError, match="has no dim to keep"):
        ops.BroadcastTo((2, -1, 4, 5))(t(x))
    np.testing.assert_array_equal(ops.BroadcastTo((3, -1, 5))(t(x)).asnumpy(), np.broadcast_to(x, (3, 4, 5)))


def test_shape_mismatch_is_a_value_error():
    net = Fn(lambda a, b: a + b)
    net.set_inputs(ms.Tensor(shape=[None, 3], dtype=ms.float32), ms.Tensor(shape=[None, 3], dtype=ms.float32))
    with pytest.raises(ValueError):
        net(t(np.ones((2, 4), np.float32)), t(np.ones((2, 4), np.float32)))
    assert issubclass(ms.ShapeMismatch, ValueError)


def test_dynamic_rank_placeholder_and_a_1d_dense():
    x3, w, b = R.standard_normal((2, 5, 3)).astype(np.float32), R.standard_normal((4, 3)).astype(np.float32), \
        R.standard_normal(4).astype(np.float32)
    p = ms.Tensor(dtype=ms.float32)
    assert p.shape == (-2,) and p.is_placeholder
    net = Fn(ops.Dense())
    net.set_inputs(ms.Tensor(dtype=ms.float32), ms.Tensor(dtype=ms.float32), t(b))
    for x in (x3, x3[0], x3[0, 0]):      # one variant per rank
        np.testing.assert_allclose(net(t(x), t(w), t(b)).asnumpy(), x @ w.T + b, rtol=1e-5, atol=1e-6)
    with pytest.raises(ms.ShapeMismatch, match="any rank"):
        net(t(x3.astype(np.float64)), t(w), t(b))
    v1, w1 = np.array([1, 2, 3], np.float32), np.array([1, 2, 3], np.float32)
    out = Fn(ops.Dense())(t(v1), t(w1), t(np.array(7, np.float32)))
    assert out.shape == () and float(out.asnumpy()) == 21.0


class Bits(nn.Cell):
    def construct(self, a, b):
        out = [a & b]
        out.append(a | b)
        out.extend([a ^ b, ~a])
        return tuple(out)


@pytest.mark.parametrize("dtype", [np.bool_, np.int32, np.uint8])
def test_bit_operators_and_list_append_in_construct(dtype):
    a = R.integers(0, 2 if dtype == np.bool_ else 200, 6).astype(dtype)
    b = R.integers(0, 2 if dtype == np.bool_ else 200, 6).astype(dtype)
    got = [x.asnumpy() for x in Bits()(t(a), t(b))]
    for g, w in zip(got, (a & b, a | b, a ^ b, ~a)):
        np.testing.assert_array_equal(g, w)


@ms.jit
def outer_rows(xs, ys):
    rows = []
    for i in range(xs.shape[0]):          # a loop over a shape: compiled for the exact shape, unrolled
        rows.append(ops.ger(xs[i], ys[i]))
    return ops.stack(rows)


def test_list_grown_in_a_loop_over_a_shape():
    for n in (3, 5):
        x, y = R.standard_normal((n, 2)).astype(np.float32), R.standard_normal((n, 4)).astype(np.float32)
        np.testing.assert_allclose(outer_rows(t(x), t(y)).asnumpy(), np.einsum("bi,bj->bij", x, y), rtol=1e-6)


def test_tensor_mod_and_index_add_method():
    x = t(np.array([5, -3, 7], np.int32))
    x %= 3
    np.testing.assert_array_equal(x.asnumpy(), [2, 0, 1])
    np.testing.assert_array_equal((7 % t(np.array([4, -4], np.int32))).asnumpy(), [3, -1])
    p = ms.Parameter(t(np.arange(9, dtype=np.float32).reshape(3, 3)), name="p")
    src = np.array([[0.5, 1.0], [1.0, 1.5], [2.0, 2.5]], np.float32)
    want = np.arange(9, dtype=np.float32).reshape(3, 3)
    want[:, [0, 2]] += src
    np.testing.assert_array_equal(p.index_add(1, t(np.array([0, 2], np.int32)), t(src)).asnumpy(), want)


def test_errors_keep_their_kind_inside_a_cell():
    """A run-time TypeError / ValueError of an op is one inside a Cell too (and an ExecutionError
    naming the instruction); a shape rule's error while compiling is a ValueError, as MindSpore's."""
    with pytest.raises(TypeError) as e:                        # numpy refuses bool - bool at run time
        Fn(lambda a, b: a - b)(t([True]), t([False]))
    assert isinstance(e.value, ms.ExecutionError) and "BROADCAST_SUB" in str(e.value)

    class Scatter(nn.Cell):
        def __init__(self):
            super().__init__()
            self.x = ms.Parameter(t(np.ones((1, 4, 1), np.float32)), name="x")
            self.op = ops.ScatterNdUpdate()

        def construct(self, i, u):
            return self.op(self.x, i, u)

    with pytest.raises(ValueError, match="index 3 is out of range for dim 0 of size 1") as e:
        Scatter()(t(np.array([[0, 2], [3, 2]], np.int32)), t(np.ones((2, 1), np.float32)))
    assert isinstance(e.value, RuntimeError) and isinstance(e.value, IndexError)
    args = (t(np.zeros((2, 3), np.int8)), t(np.array([[0, 1, 2]], np.int32)), t(np.array([1], np.int8)))
    with pytest.raises(ValueError, match="TENSOR_SCATTER: indices index 3 dims of a rank-2 x") as e:
        Fn(ops.TensorScatterAdd())(*args)              # dims of arguments are symbols: found when it runs
    assert isinstance(e.value, ms.ExecutionError)

    class Known(nn.Cell):
        def __init__(self):
            super().__init__()
            self.x, self.i, self.u = (ms.Parameter(a, name=n) for a, n in zip(args, "xiu"))
            self.op = ops.TensorScatterAdd()

        def construct(self):
            return self.op(self.x, self.i, self.u)

    with pytest.raises(ValueError, match="TENSOR_SCATTER: indices index 3 dims of a rank-2 x") as e:
        Known()()                                       # known dims: found by the shape rule, at its line
    assert isinstance(e.value, ms.FrontendError) and ":" in str(e.value).split(" ")[0]


def test_activation_roundings_as_mindspore():
    x = np.array([-1, -2, 0, 2, 1, -4, 4], np.float32)
    want = np.clip((x + np.float32(3)) / np.float32(6), 0, 1)          # relu6(x + 3) / 6
    for mode in (ms.PYNATIVE_MODE, ms.GRAPH_MODE):
        ms.set_context(mode=mode)
        np.testing.assert_array_equal(Fn(ops.HSigmoid())(t(x)).asnumpy(), want)
        np.testing.assert_array_equal(Fn(ops.HSwish())(t(x)).asnumpy(), x * want)
    h = R.random((4, 5, 7)).astype(np.float16)
    ref = (h.astype(np.float64) * np.tanh(np.log1p(np.exp(h.astype(np.float64))))).astype(np.float16)
    got = Fn(ops.Mish())(t(h)).asnumpy()
    assert got.dtype == np.float16
    np.testing.assert_allclose(got, ref, rtol=1e-3)           # float16 rounded once, from float32


def test_split_of_a_dynamic_dim_checks_divisibility_when_it_runs():
    net = Fn(ops.Split(-1, 2))
    net.set_inputs(ms.Tensor(shape=[2, None], dtype=ms.int32))
    for n in (6, 10, 2):
        x = np.arange(2 * n, dtype=np.int32).reshape(2, n)
        got = net(t(x))
        assert len(got) == 2
        for g, w in zip(got, np.split(x, 2, -1)):
            np.testing.assert_array_equal(g.asnumpy(), w)
    with pytest.raises(ValueError, match="Split: the size of axis 1, 7, is not divisible by output_num 2"):
        net(t(np.zeros((2, 7), np.int32)))


def test_matmul_dtypes_as_mindspore():
    x = R.standard_normal((2, 3)).astype(np.float32)
    assert ms.complex64 in ms.dtype.all_types and ms.uint16 in ms.dtype.uint_type
    for d in ms.dtype.all_types:
        a = t(x).astype(d)
        if d.kind in "ifc" or d is ms.uint8:
            out = ops.MatMul()(a, ops.transpose(a, (1, 0)))
            assert out.dtype is d
            np.testing.assert_allclose(out.asnumpy().astype(np.complex128),
                                       (a.asnumpy() @ a.asnumpy().T).astype(np.complex128), rtol=1e-2, atol=1e-2)
        else:
            with pytest.raises(TypeError, match="For 'MatMul'"):
                ops.MatMul()(a, ops.transpose(a, (1, 0)))


@ms.jit
def renorm_rows(x, p, axis, maxnorm):
    out = []
    for i in range(x.shape[0]):
        y = ops.Renorm(p, axis, maxnorm)(x[i])      # p, axis: int arguments a primitive needs as values
        out.append(y)                                # y's slot is written again in the next iteration
    return ops.stack(out)


def test_list_items_keep_their_values_and_int_arguments_compile_as_values():
    x = (R.standard_normal((3, 2, 4)) * 4).astype(np.float32)
    for p, axis, maxnorm in ((1, 0, 3.0), (2, 1, 2.0), (1, 0, 3.0)):
        want = []
        for i in range(3):
            n = np.linalg.norm(x[i], p, axis=1 - axis, keepdims=True) if p == 2 else \
                np.abs(x[i]).sum(axis=1 - axis, keepdims=True)
            want.append(x[i] * np.where(n > maxnorm, maxnorm / (n + 1e-7), 1.0))
        np.testing.assert_allclose(renorm_rows(t(x), p, axis, maxnorm).asnumpy(), np.stack(want), rtol=1e-5)


def test_vmap_over_a_tuple_input_with_a_tuple_of_axes():
    x = R.integers(0, 10, (3, 2)).astype(np.int32)
    y = R.integers(0, 10, (4, 2)).astype(np.int32)
    a, b = ops.vmap(lambda xy: ops.meshgrid(*xy, indexing="xy"), in_axes=((1, 1),))((t(x), t(y)))
    wa, wb = zip(*(np.meshgrid(x[:, i], y[:, i], indexing="xy") for i in range(2)))
    np.testing.assert_array_equal(a.asnumpy(), np.stack(wa))
    np.testing.assert_array_equal(b.asnumpy(), np.stack(wb))
    with pytest.raises(ValueError, match="has 1 entries for a tuple of 2"):
        ops.vmap(lambda xy: xy[0], in_axes=((1,),))((t(x), t(y)))
