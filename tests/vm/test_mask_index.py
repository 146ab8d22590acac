"""Boolean-mask indexing (MindSpore's getitem/setitem by a bool tensor): ``x[mask]`` gives the
rows of x where mask (over x's leading dims) is True, a first dim the data decides — a fresh
symbol (``masked0``) bound when BOOL_INDEX runs, usable as any dim (``y.shape[0]``, reshapes);
``x[mask] = value`` is value where mask is True, else x. Checked against numpy's boolean
indexing eagerly and compiled (L1), on ordinary, NaN/inf, empty and all-False/all-True masks."""

import msvm as ms
import numpy as np
import pytest
from msvm import nn, ops

SPECIAL = np.array([np.nan, np.inf, -np.inf, -0.0, 1e-40], np.float32)


class Select(nn.Cell):
    def construct(self, x, m, rows):
        y = x[m]
        z = x[rows]
        flat = z.reshape(z.shape[0] * z.shape[1], 1)
        return y * 2.0, flat, ops.relu(y).sum(), y.shape[0] + 1


def data(rng, b, n, share=0.0, fill=None):
    x = rng.standard_normal((b, n)).astype(np.float32)
    if share:
        at = rng.random(x.shape) < share
        x[at] = rng.choice(SPECIAL, int(at.sum()))
    m = rng.random((b, n)) < 0.5 if fill is None else np.full((b, n), fill)
    rows = rng.random(b) < 0.5 if fill is None else np.full(b, fill)
    return x, m, rows


@pytest.mark.parametrize("mode", ["graph", "pynative"])
def test_getitem_by_mask_matches_numpy(mode, rng):
    net = Select()
    ms.set_context(mode=ms.GRAPH_MODE if mode == "graph" else ms.PYNATIVE_MODE)
    try:
        cases = [data(rng, 4, 5), data(rng, 4, 5), data(rng, 6, 3, share=0.3), data(rng, 0, 5),
                 data(rng, 3, 5, fill=False), data(rng, 3, 5, fill=True), data(rng, 4, 5)]
        for x, m, rows in cases:
            with np.errstate(all="ignore"):
                y, flat, total, count = net(ms.Tensor(x), ms.Tensor(m), ms.Tensor(rows))
                np.testing.assert_array_equal(y.asnumpy(), x[m] * np.float32(2))
                np.testing.assert_array_equal(flat.asnumpy(), x[rows].reshape(-1, 1))
                np.testing.assert_allclose(total.asnumpy(), np.maximum(x[m], 0).sum(), rtol=1e-5)
            assert int(count) == int(m.sum()) + 1 and y.dtype == ms.float32
        if mode == "graph":
            assert len(net._runner.variants) <= 2, "one bytecode (and one for a dim of 0) serves every count"
    finally:
        ms.set_context(mode=ms.GRAPH_MODE)


def test_the_count_is_a_fresh_symbol_in_the_bytecode():
    @ms.jit
    def f(x, m):
        return x[m]

    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = f(ms.Tensor(x), ms.Tensor(x > 2))
    np.testing.assert_array_equal(out.asnumpy(), [3, 4, 5])
    code = next(iter(f._runner.variants.values())).code
    assert [i.op.name for i in code.instrs if i.op.binds] == ["BOOL_INDEX"]
    assert str(code.result_type) == "Tensor[float32, [masked0]]"


def test_setitem_by_mask_matches_numpy(rng):
    class Fill(nn.Cell):
        def construct(self, x, m, rows, ints):
            x[m] = 0.5
            x[rows] = ops.arange(0, x.shape[1], 1, dtype=ms.float32)       # one item: broadcast over the rows
            ints[m] = 2.7                                            # cast to the tensor's dtype, as MindSpore
            return x, ints

    net = Fill()
    for x, m, rows in [data(rng, 4, 5), data(rng, 0, 5), data(rng, 3, 5, share=0.4), data(rng, 2, 5, fill=True)]:
        ints = (x * 10).astype(np.int32) if not np.isnan(x).any() else np.zeros(x.shape, np.int32)
        want, want_i = x.copy(), ints.copy()
        want[m] = 0.5
        want[rows] = np.arange(5)
        want_i[m] = 2
        got, got_i = net(ms.Tensor(x), ms.Tensor(m), ms.Tensor(rows), ms.Tensor(ints))
        np.testing.assert_array_equal(got.asnumpy(), want)
        np.testing.assert_array_equal(got_i.asnumpy(), want_i)
        assert got_i.dtype == ms.int32


def test_setitem_eagerly_is_in_place_and_a_parameter_takes_it_through_set_data():
    t = ms.Tensor(np.arange(6, dtype=np.float32))
    t[t > 2.5] = -1.0
    np.testing.assert_array_equal(t.asnumpy(), [0, 1, 2, -1, -1, -1])
    p = ms.Parameter(ms.Tensor(np.zeros(3, np.float32)), name="w")
    old, version = p._data, p.version
    p[ms.Tensor(np.array([True, False, True]))] = 1.0
    p.data[1] = 2.0                       # (convit edits its weights so while it initializes)
    np.testing.assert_array_equal(p.asnumpy(), [1, 2, 1])
    assert p.version == version + 2 and p._data is not old
    np.testing.assert_array_equal(ms.Tensor(old).asnumpy(), [0, 0, 0])    # (what was made from the old array stays)


def test_a_count_used_with_an_arguments_dim_is_checked_when_it_runs():
    """``x[m] + v``: the count must equal v's length (MindSpore checks it at run time): the same
    program runs when it does and names the instruction when it does not."""
    @ms.jit
    def f(x, m, v):
        return x[m] + v

    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(f(ms.Tensor(x), ms.Tensor(x > 4.5), ms.Tensor(np.ones(7, np.float32))).asnumpy(),
                                  x[x > 4.5] + 1)
    with pytest.raises(ms.ShapeMismatch, match=r"BOOL_INDEX gives 7 items, but the bytecode was verified for "
                                               r"masked0 = 4"):
        f(ms.Tensor(x), ms.Tensor(x > 4.5), ms.Tensor(np.ones(4, np.float32)))


def test_a_sub_cells_masked_result_gets_a_symbol_of_the_caller():
    """A sub-Cell returning x[mask]: the caller binds the count under a name of its own (BIND_DIM),
    so its own x[mask] (another count) is never confused with it."""
    class Sel(nn.Cell):
        def construct(self, x, m):
            return x[m]

    class Outer(nn.Cell):
        def __init__(self):
            super().__init__()
            self.sel = Sel()

        def construct(self, x, m, k):
            mine = x[k]
            theirs = self.sel(x, m)
            return mine.reshape(mine.shape[0], 1), theirs.reshape(1, theirs.shape[0]), mine.shape[0] - theirs.shape[0]

    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    a, b, d = Outer()(ms.Tensor(x), ms.Tensor(x > 4.5), ms.Tensor(x < 2.5))
    np.testing.assert_array_equal(a.asnumpy(), x[x < 2.5].reshape(-1, 1))
    np.testing.assert_array_equal(b.asnumpy(), x[x > 4.5].reshape(1, -1))
    assert int(d) == 3 - 7


def _with_a_column(x, m, s):
    return x[m, 0]


def _chained(x, m, s):
    return x[ops.cast(m, ms.float32) > 0.5][0:1]


def _of_a_scalar(x, m, s):
    return s[m]


@pytest.mark.parametrize("fn, match", [(_with_a_column, "a bool tensor index goes alone"), (_chained, None),
                                       (_of_a_scalar, r"mask must be bools of rank 1\.\.0")])
def test_mask_index_errors_name_the_problem(fn, match):
    f = ms.jit(fn)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    args = (ms.Tensor(x), ms.Tensor(x > 1), ms.Tensor(np.float32(1.0)))
    if match is None:
        np.testing.assert_array_equal(f(*args).asnumpy(), x[x > 1][0:1])
        return
    with pytest.raises(ms.MsvmError, match=match):
        f(*args)


def test_value_with_one_item_per_selected_element_is_refused():
    class Bad(nn.Cell):
        def construct(self, x, m, v):
            x[m] = v
            return x

    x = np.zeros((2, 3), np.float32)
    with pytest.raises(ms.MsvmError, match="one value per selected item is not supported"):
        Bad()(ms.Tensor(x), ms.Tensor(x == 0), ms.Tensor(np.ones(6, np.float32)))


def test_a_branch_on_the_count():
    """The count is a symbol like any other: ``if y.shape[0] > 3`` branches on it where it runs."""
    @ms.jit
    def f(x):
        y = x[x > 0.0]
        if y.shape[0] > 3:
            return y * 2.0
        return y - 1.0

    for x in (np.array([1, -1, 2, 3, 4], np.float32), np.array([1, -1, 2], np.float32), np.zeros(0, np.float32)):
        y = x[x > 0]
        np.testing.assert_array_equal(f(ms.Tensor(x)).asnumpy(), y * 2 if y.size > 3 else y - 1)
