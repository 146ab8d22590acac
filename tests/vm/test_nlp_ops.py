"""Issue 16's indexing and creation ops (model zoo), each against numpy on random shapes whose
lengths change between calls of one bytecode, in L1, L2 and L3: symbolic slice bounds, int
tensor indexing, arange, triu/tril, full/ones/zeros, one_hot, StridedSlice, tile, cumsum,
masked_fill, pad, scalar_to_tensor, tuple_to_array, F.shape/P.Shape/P.DType/F.depend, Tensor
methods, 1-D matmul, numpy scalar operands, tuple arguments of sub-Cells, Cell.to_float."""

import msvm as ms
import numpy as np
import pytest
from msvm import nn, ops
from msvm.compiler import tiers
from msvm.ops import functional as F
from msvm.ops import primitives as P

LEVELS = ["L1", "L2", "L3"]
LENGTHS = (5, 9, 3, 12)


@pytest.fixture(params=LEVELS)
def level(request):
    ms.set_context(jit_config={"jit_level": request.param})
    yield request.param
    ms.set_context(jit_config={"jit_level": "L1"})


def _calls(net, make, ref, lengths=LENGTHS, rtol=1e-5, atol=1e-6):
    """Call net at each length twice (the second call runs the compiled code) and compare."""
    for n in lengths:
        args = make(n)
        for _ in range(2):
            out = net(*[ms.Tensor(a) for a in args])
            want = ref(*args)
            outs = out if isinstance(out, tuple) else (out,)
            wants = want if isinstance(want, tuple) else (want,)
            assert len(outs) == len(wants)
            for k, (o, w) in enumerate(zip(outs, wants)):
                o = o.asnumpy()
                assert o.shape == np.shape(w), (n, k, o.shape, np.shape(w))
                assert o.dtype == np.asarray(w).dtype, (n, k, o.dtype, np.asarray(w).dtype)
                np.testing.assert_allclose(o, w, rtol=rtol, atol=atol, err_msg=f"length {n}, output {k}")
            tiers.wait_for_compiles(30)
    assert len(net._runner.variants) == 1, "one bytecode for every length"


class Slices(nn.Cell):
    def __init__(self, rng):
        super().__init__()
        self.table = ms.Tensor(rng.standard_normal((1, 20, 6)).astype(np.float32))
        self.bias = ms.Tensor(np.tril(np.ones((20, 20), bool)).reshape(1, 1, 20, 20))
        self.slice = P.StridedSlice()

    def construct(self, x, y):
        q, k = x.shape[1], y.shape[1]
        a = self.table[:, :x.shape[1]] + x                       # position_ids[:, :x.shape[1]]
        b = self.bias[:, :, k - q:k, :k]                         # GPT-2's causal window
        c = x[..., :x.shape[-1] // 2]                            # rotate_half
        d = x[:, 1:q - 1]
        e = self.slice(y, (0, 0, 0), (ops.shape(y)[0], k, 3), (1, 2, 1))
        return a, b, c, d, e


def test_symbolic_slice_bounds(level, rng):
    net = Slices(rng)
    table = net.table.asnumpy()
    bias = np.tril(np.ones((20, 20), bool)).reshape(1, 1, 20, 20)

    def make(n):
        return (rng.standard_normal((2, n, 6)).astype(np.float32), rng.standard_normal((2, n + 3, 6)).astype(np.float32))

    def ref(x, y):
        q, k = x.shape[1], y.shape[1]
        return (table[:, :q] + x, bias[:, :, k - q:k, :k], x[..., :3], x[:, 1:q - 1], y[:, 0:k:2, 0:3])
    _calls(net, make, ref)


class Indexing(nn.Cell):
    def __init__(self, rng):
        super().__init__()
        self.table = ms.Tensor(rng.standard_normal((10, 4)).astype(np.float32))

    def construct(self, ids, x):
        return self.table[ids], x[:, ids[0]], self.table[ids[1], :], self.table[ids[0], ...]


def test_int_tensor_index_is_a_gather(level, rng):
    net = Indexing(rng)
    t = net.table.asnumpy()
    _calls(net, lambda n: (rng.integers(0, 10, (2, n)).astype(np.int32), rng.standard_normal((3, 10)).astype(np.float32)),
           lambda ids, x: (t[ids], x[:, ids[0]], t[ids[1], :], t[ids[0], ...]))


class Creation(nn.Cell):
    def construct(self, x):
        n = x.shape[1]
        pos = ops.arange(n)                                      # int64, as MindSpore's
        pos2 = ops.arange(2, n + 2, 3, dtype=ms.float32)
        tri = ops.triu(ops.full((n, n), float("-inf")), diagonal=1)
        low = ops.tril(x, -1)
        ones = ops.ones((x.shape[0], n), ms.int32) + ops.zeros((1, n), ms.int32)
        filled = ops.full((n,), 7)
        return pos, pos2, tri, low, ones, filled


def test_arange_triu_tril_full_with_symbolic_sizes(level, rng):
    def ref(x):
        n = x.shape[1]
        return (np.arange(n, dtype=np.int64), np.arange(2, n + 2, 3, dtype=np.float32),
                np.triu(np.full((n, n), -np.inf, np.float32), 1), np.tril(x, -1), np.ones((x.shape[0], n), np.int32),
                np.full((n,), 7, np.int64))
    _calls(Creation(), lambda n: (rng.standard_normal((n + 1, n)).astype(np.float32),), ref)


class Encodings(nn.Cell):
    def __init__(self):
        super().__init__()
        self.one_hot = P.OneHot()
        self.on, self.off = ms.Tensor(1.0, ms.float32), ms.Tensor(0.25, ms.float32)
        self.cum = P.CumSum(exclusive=True, reverse=True)
        self.tile = P.Tile()

    def construct(self, ids, x):
        a = self.one_hot(ids, 6, self.on, self.off)
        b = ops.one_hot(ids, 6, 1.0, 0.0, axis=0)
        c = ops.cumsum(x, 1)
        d = self.cum(x, 1)
        e = self.tile(x, (2, 1, 3))
        f = x.repeat(2, 1)
        return a, b, c, d, e, f


def _one_hot(ids, depth, on, off, axis=-1):
    h = (ids[..., None] == np.arange(depth)).astype(np.float32)
    h = np.where(h > 0, np.float32(on), np.float32(off))
    return np.moveaxis(h, -1, axis)


def test_one_hot_cumsum_tile_repeat(level, rng):
    def ref(ids, x):
        rev = np.flip(np.cumsum(np.flip(x, 1), 1), 1) - x
        return (_one_hot(ids, 6, 1.0, 0.25), _one_hot(ids, 6, 1.0, 0.0, 0), np.cumsum(x, 1), rev,
                np.tile(x, (2, 1, 3)), np.repeat(x, 2, 1))
    _calls(Encodings(), lambda n: (rng.integers(0, 6, (2, n)).astype(np.int32),
                                   rng.standard_normal((2, n)).astype(np.float32)), ref, rtol=1e-5, atol=1e-5)


class Masks(nn.Cell):
    def construct(self, x, mask):
        a = ops.masked_fill(x, mask, -1e9)
        b = x.masked_fill(ops.logical_not(mask), ms.Tensor(2.0, ms.float32))
        c = ops.softmax(ops.masked_fill(x, mask, float("-inf")), -1)
        d = ops.pad(x, (1, 2, 0, 1), value=0.5)
        e = ops.pad(x, (-1, 0))
        return a, b, c, d, e


def test_masked_fill_and_pad(level, rng):
    def make(n):
        m = rng.random((3, n)) < 0.4
        m[:, 0] = False
        return rng.standard_normal((3, n)).astype(np.float32), m

    def ref(x, m):
        c = np.where(m, -np.inf, x)
        c = np.exp(c - c.max(-1, keepdims=True))
        return (np.where(m, np.float32(-1e9), x), np.where(~m, np.float32(2.0), x), c / c.sum(-1, keepdims=True),
                np.pad(x, ((0, 1), (1, 2)), constant_values=0.5), x[:, 1:])
    _calls(Masks(), make, ref)


class Scalars(nn.Cell):
    def __init__(self):
        super().__init__()
        self.get_dtype = P.DType()
        self.dense = nn.Dense(4, 4).to_float(ms.float32)

    def construct(self, x, v):
        n = F.shape(x)[0]
        x = F.depend(x, n)
        a = ops.scalar_to_tensor(n, ms.float32) * x
        b = ops.cast(F.tuple_to_array((1.0,)), self.get_dtype(x)) - x * np.float32(0.5)
        c = ops.matmul(x, v)                                     # [n, 4] @ [4]
        d = ops.matmul(v, ops.transpose(x, (1, 0)))              # [4] @ [4, n]
        e = ops.matmul(v, v)
        f = ops.expand_dims(v, 0).broadcast_to((n, 4)) + ops.expand_dims(v, 0).expand_as(x)
        g = self.dense(x).view(-1) if hasattr(self, "dense") and isinstance(n, int) and isinstance(x, ms.Tensor) else x
        return a, b, c, d, e, f, g


def test_scalars_shapes_and_1d_matmul(level, rng):
    net = Scalars()
    w, bias = net.dense.weight.asnumpy(), net.dense.bias.asnumpy()

    def ref(x, v):
        n = x.shape[0]
        return (np.float32(n) * x, 1 - x * np.float32(0.5), x @ v, v @ x.T, np.asarray(v @ v),
                np.broadcast_to(v, (n, 4)) * 2, (x @ w.T + bias).reshape(-1))
    _calls(net, lambda n: (rng.standard_normal((n, 4)).astype(np.float32), rng.standard_normal(4).astype(np.float32)),
           ref, rtol=1e-5, atol=1e-5)


class Rotary(nn.Cell):
    def construct(self, x, cos_sin):
        cos, sin = cos_sin
        return x * cos + x * sin


class TupleArg(nn.Cell):
    def __init__(self, rng):
        super().__init__()
        self.cos = ms.Tensor(rng.standard_normal((16, 4)).astype(np.float32))
        self.sin = ms.Tensor(rng.standard_normal((16, 4)).astype(np.float32))
        self.rot = Rotary()

    def construct(self, x):
        s = x.shape[1]
        return self.rot(x, (self.cos[:s], self.sin[:s]))


def test_tuple_of_tensors_passed_to_a_sub_cell(level, rng):
    net = TupleArg(rng)
    cos, sin = net.cos.asnumpy(), net.sin.asnumpy()
    _calls(net, lambda n: (rng.standard_normal((2, n, 4)).astype(np.float32),),
           lambda x: x * cos[:x.shape[1]] + x * sin[:x.shape[1]])


def test_eager_ops_match_numpy(rng):
    """The same functions on Tensors (PyNative): creation, tri masks, one_hot, tile, pad."""
    x = rng.standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_array_equal(ops.arange(5).asnumpy(), np.arange(5))
    np.testing.assert_array_equal(ops.triu(ms.Tensor(x), 1).asnumpy(), np.triu(x, 1))
    np.testing.assert_array_equal(ops.tril(ops.ones((4, 4), dtype=ms.bool_)).asnumpy(), np.tril(np.ones((4, 4), bool)))
    np.testing.assert_array_equal(ops.tile(ms.Tensor(x), (2, 2)).asnumpy(), np.tile(x, (2, 2)))
    np.testing.assert_array_equal(ops.pad(ms.Tensor(x), (1, 1)).asnumpy(), np.pad(x, ((0, 0), (1, 1))))
    np.testing.assert_array_equal(ops.one_hot(ms.Tensor(np.array([0, 2])), 3, 1.0, 0.0).asnumpy(),
                                  np.eye(3, dtype=np.float32)[[0, 2]])
    np.testing.assert_array_equal(ms.Tensor(x).cumsum(0).asnumpy(), np.cumsum(x, 0))
    assert ms.dtype_to_nptype(ms.float32) is np.float32


def test_slice_bound_past_the_dim_fails_at_entry(rng):
    net = Slices(rng)
    net(ms.Tensor(np.ones((2, 4, 6), np.float32)), ms.Tensor(np.ones((2, 7, 6), np.float32)))
    with pytest.raises(Exception, match="SLICE: bounds"):
        net(ms.Tensor(np.ones((2, 24, 6), np.float32)), ms.Tensor(np.ones((2, 27, 6), np.float32)))


class Distances(nn.Cell):
    """BERT's relative positions: make_range of a dim, then an int chain that fusion keeps int."""

    def construct(self, x):
        n = x.shape[0]
        row = ops.cast(F.tuple_to_array(F.make_range(n)), ms.int32)
        d = ops.tile(row, (n,)).reshape(n, n) - ops.tile(row.reshape(n, -1), (1, n)).reshape(n, n)
        return ops.clip_by_value(d, -3, 3) + 3


def test_make_range_and_an_int_chain_keep_int32(level, rng):
    def ref(x):
        n = x.shape[0]
        return (np.clip(np.arange(n)[None, :] - np.arange(n)[:, None], -3, 3) + 3).astype(np.int32)
    _calls(Distances(), lambda n: (np.zeros((n,), np.float32),), ref)


def test_parameter_value_in_construct_and_eagerly():
    """(found by bert_model.py's EmbeddingLookup) ``self.table.value()`` in construct is the Parameter;
    eagerly a Tensor with its values."""
    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.table = ms.Parameter(ms.Tensor(np.arange(6, dtype=np.float32).reshape(2, 3)), name="table")

        def construct(self, x):
            return x + self.table.value(), self.table.value()

    net = Net()
    out, tab = net(ms.Tensor(np.ones((2, 3), np.float32)))
    np.testing.assert_array_equal(out.asnumpy(), np.arange(6).reshape(2, 3) + 1)
    np.testing.assert_array_equal(tab.asnumpy(), net.table.asnumpy())
    assert isinstance(net.table.value(), ms.Tensor) and not isinstance(net.table.value(), ms.Parameter)


@pytest.mark.parametrize("shape", [(2, 5), (7,), (0, 3)])
def test_embedding_use_one_hot_is_onehot_times_table(shape, rng):
    """nn.Embedding(use_one_hot=True), as MindSpore's: OneHot of the flat ids times the table, reshaped
    to ids.shape + [E] (the rows of the table; empty ids give an empty result), compiled and eager."""
    emb = nn.Embedding(9, 4, use_one_hot=True)
    table = emb.embedding_table.asnumpy()
    ids = rng.integers(0, 9, shape).astype(np.int32)
    out = emb(ms.Tensor(ids))
    assert out.shape == shape + (4,) and out.dtype == ms.float32
    np.testing.assert_allclose(out.asnumpy(), table[ids], rtol=1e-6, atol=1e-7)
    ms.set_context(mode=ms.PYNATIVE_MODE)
    try:
        np.testing.assert_allclose(emb(ms.Tensor(ids)).asnumpy(), table[ids], rtol=1e-6, atol=1e-7)
    finally:
        ms.set_context(mode=ms.GRAPH_MODE)
