"""MindSpore's random ops (RANDOM), Print (PRINT) and Unique (UNIQUE), issue 21.

Random ops are checked for what a seeded generator can promise: shapes and dtypes (also with
symbolic and data-dependent dims), ranges, statistics over large draws, MindSpore's seed
semantics (same (seed, seed2): same numbers; one primitive's calls continue its sequence; a
Cell without inputs is not constant-folded), in PyNative and GRAPH mode alike."""

import msvm as ms
import numpy as np
import pytest
from msvm import nn, ops
from scipy import stats


class Draw(nn.Cell):
    """construct calls one primitive on the given arguments (shape tuples are baked in)."""

    def __init__(self, prim, *consts):
        super().__init__()
        self.prim = prim
        self.consts = consts

    def construct(self, *xs):
        return self.prim(*self.consts, *xs)


class NoInputs(nn.Cell):
    def __init__(self, seed, seed2):
        super().__init__()
        self.normal = ops.StandardNormal(seed, seed2)

    def construct(self):
        return self.normal((64, 3))


def _graph_and_eager(make, *args):
    """The first draw of a fresh primitive, in construct and eagerly (same seeds: same numbers)."""
    g = Draw(make()).__call__(*args)
    e = make()(*args)
    return g, e


@pytest.mark.parametrize("name,make,args,shape,dtype", [
    ("StandardNormal", lambda: ops.StandardNormal(3, 4), [(5, 6, 7)], (5, 6, 7), ms.float32),
    ("StandardLaplace", lambda: ops.StandardLaplace(3, 4), [(40, 3)], (40, 3), ms.float32),
    ("UniformReal", lambda: ops.UniformReal(3, 4), [(9,)], (9,), ms.float32),
    ("TruncatedNormal", lambda: ops.TruncatedNormal(3, 4, ms.float64), [ms.Tensor(np.array([4, 2], np.int32))],
     (4, 2), ms.float64),
    ("RandomPoisson", lambda: ops.RandomPoisson(3, 4, ms.int32),
     [ms.Tensor(np.array([3, 2], np.int32)), ms.Tensor(np.array([1.0, 5.0], np.float32))], (3, 2, 2), ms.int32),
    ("RandomGamma", lambda: ops.RandomGamma(3, 4),
     [ms.Tensor(np.array([6], np.int64)), ms.Tensor(np.array([[2.0], [0.5]], np.float64))], (6, 2, 1), ms.float64),
])
def test_shapes_dtypes_and_same_seed_in_both_modes(name, make, args, shape, dtype):
    g = Draw(make(), *[a for a in args if isinstance(a, tuple)])(*[a for a in args if not isinstance(a, tuple)])
    e = make()(*args)
    assert g.shape == shape and g.dtype == dtype, name
    np.testing.assert_array_equal(g.asnumpy(), e.asnumpy())
    p = make()
    first, second = p(*args), p(*args)
    np.testing.assert_array_equal(first.asnumpy(), e.asnumpy())
    assert not np.array_equal(first.asnumpy(), second.asnumpy()), f"{name}: a primitive's calls must continue"


def test_statistics_of_large_draws():
    n = 200_000
    x = ops.StandardNormal(1, 2)((n,)).asnumpy().astype(np.float64)
    assert abs(x.mean()) < 0.02 and abs(x.std() - 1) < 0.02
    lap = ops.StandardLaplace(1, 2)((n,)).asnumpy().astype(np.float64)
    assert abs(lap.mean()) < 0.03 and abs(lap.var() - 2) < 0.05
    u = ops.UniformReal(5, 0)((n,)).asnumpy()
    assert u.min() >= 0 and u.max() < 1 and abs(u.mean() - 0.5) < 0.01
    t = ops.TruncatedNormal(5, 0)(ms.Tensor(np.array([n], np.int32))).asnumpy()
    assert t.min() >= -2 and t.max() <= 2 and abs(t.std() - stats.truncnorm.std(-2, 2)) < 0.01
    ui = ops.UniformInt(7, 7)((n,), ms.Tensor(np.int32(-3)), ms.Tensor(np.int32(4))).asnumpy()
    assert ui.dtype == np.int32 and set(np.unique(ui)) == set(range(-3, 4))
    rate = ms.Tensor(np.array([0.5, 20.0], np.float32))
    po = ops.RandomPoisson(1, 1, ms.float64)(ms.Tensor(np.array([n // 2], np.int32)), rate).asnumpy()
    np.testing.assert_allclose(po.mean(0), [0.5, 20.0], rtol=0.03)
    ga = ops.RandomGamma(2, 2)(ms.Tensor(np.array([n // 2], np.int32)), ms.Tensor(np.array([3.0], np.float32)))
    assert abs(ga.asnumpy().mean() - 3.0) < 0.05
    un = ops.Uniform(minval=-2.0, maxval=3.0)(ms.Tensor(np.zeros((n,), np.float16))).asnumpy()
    assert un.dtype == np.float16 and un.min() >= -2 and un.max() <= 3 and abs(un.mean() - 0.5) < 0.05


def test_parameterized_truncated_normal_keeps_each_row_in_its_window():
    op = ops.ParameterizedTruncatedNormal(10, 20)
    out = op(ms.Tensor(np.array([3, 5000], np.int32)), *[ms.Tensor(np.array(v, np.float32)) for v in
                                                          ([6, 8, -1], [0.5, 2, 1], [5, 7, -1.5], [7, 20, 0])])
    o = out.asnumpy()
    assert o.shape == (3, 5000)
    for row, (lo, hi) in zip(o, [(5, 7), (7, 20), (-1.5, 0)]):
        assert row.min() >= lo and row.max() <= hi
    assert abs(o[0].mean() - stats.truncnorm.mean(-2, 2, 6, 0.5)) < 0.03


def test_a_cell_without_inputs_is_not_constant_folded():
    net = NoInputs(5, 6)
    a, b = net().asnumpy(), net().asnumpy()
    assert a.shape == (64, 3) and not np.array_equal(a, b)
    np.testing.assert_array_equal(NoInputs(5, 6)().asnumpy(), a)          # the same seeds start the same


def test_zero_seeds_follow_the_global_seed():
    ms.set_seed(42)
    a = [NoInputs(0, 0)().asnumpy() for _ in range(2)]
    ms.set_seed(42)
    b = [NoInputs(0, 0)().asnumpy() for _ in range(2)]
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a[0], a[1])
    f1 = ops.standard_normal((4,), seed=3)
    f2 = ops.standard_normal((4,), seed=3)           # (the function's cached stream continues)
    ms.set_seed(42)
    np.testing.assert_array_equal(ops.standard_normal((4,), seed=3).asnumpy(), f1.asnumpy())
    assert not np.array_equal(f1.asnumpy(), f2.asnumpy())


def test_symbolic_and_data_dependent_dims():
    class Like(nn.Cell):
        def __init__(self):
            super().__init__()
            self.u = ops.Uniform(minval=1.0, maxval=2.0)
            self.n = ops.StandardNormal(1, 1)

        def construct(self, x):
            return self.u(x), self.n((x.shape[0], 2))

    net = Like()
    net.set_inputs(ms.Tensor(shape=[None, 3], dtype=ms.float32))
    for b in (2, 5, 1):
        u, n = net(ms.Tensor(np.zeros((b, 3), np.float32)))
        assert u.shape == (b, 3) and n.shape == (b, 2)
        assert (u.asnumpy() >= 1).all() and (u.asnumpy() < 2).all()

    class FromTensor(nn.Cell):
        def __init__(self):
            super().__init__()
            self.p = ops.RandomPoisson(2, 3, ms.int64)

        def construct(self, shape, rate):
            return self.p(shape, rate) * 1

    net = FromTensor()
    for s in ([2, 3], [4, 1], [0, 2]):
        out = net(ms.Tensor(np.array(s, np.int32)), ms.Tensor(np.array([2.0], np.float32)))
        assert out.shape == tuple(s) + (1,) and out.dtype == ms.int64


def test_shuffle_permutes_rows():
    x = np.arange(60).reshape(12, 5)
    sh = ops.RandomShuffle(3, 1)
    out = Draw(sh)(ms.Tensor(x)).asnumpy()
    assert out.shape == x.shape and not np.array_equal(out, x)
    np.testing.assert_array_equal(np.sort(out[:, 0]), x[:, 0])
    np.testing.assert_array_equal(out[:, 1:] - out[:, :1], x[:, 1:] - x[:, :1])   # whole rows move
    np.testing.assert_array_equal(ops.shuffle(ms.Tensor(np.float32(2.5)), seed=1).asnumpy(), np.float32(2.5))
    with pytest.raises(TypeError):
        ops.shuffle(2, seed=3)
    with pytest.raises(ValueError):
        ops.shuffle(ms.Tensor(x), seed=-3)
    for bad in (1.6, True):
        with pytest.raises(TypeError):
            ops.shuffle(ms.Tensor(x), seed=bad)


@pytest.mark.parametrize("keep", [0.0, 0.3, 1.0])
@pytest.mark.parametrize("nd", [0, 2, 3])
def test_dropout_masks_and_scaling(keep, nd, rng):
    shape = {0: (40, 50), 2: (8, 30, 4, 5), 3: (6, 20, 2, 3, 4)}[nd]
    x = rng.uniform(1, 2, shape).astype(np.float32)
    prim = ops.Dropout(keep_prob=keep) if nd == 0 else getattr(ops, f"Dropout{nd}D")(keep)
    out, mask = Draw(prim)(ms.Tensor(x))
    out, mask = out.asnumpy(), mask.asnumpy()
    assert out.shape == mask.shape == shape
    kept = mask.astype(bool)
    assert mask.dtype == (np.float32 if nd == 0 else np.bool_)
    np.testing.assert_allclose(out[kept], (x / keep)[kept] if keep else [], rtol=1e-6)
    assert (out[~kept] == 0).all()
    if nd:
        per_channel = kept.reshape(shape[0] * shape[1], -1)
        assert (per_channel.all(1) | ~per_channel.any(1)).all()       # whole channels
    frac = kept.mean()
    assert abs(frac - keep) < (0.01 if nd == 0 else 0.12)


def test_dropout_functions():
    x = ms.Tensor(np.ones((64, 64), np.float32))
    y = ops.dropout(x, p=0.25, seed=1).asnumpy()
    assert set(np.unique(y)) <= {0.0, np.float32(1 / 0.75)} and abs((y > 0).mean() - 0.75) < 0.03
    assert ops.dropout(x, p=0.25, training=False) is x
    assert ops.dropout3d(ms.Tensor(np.zeros((0, 1, 2, 1, 2), np.float32)), p=0.5).shape == (0, 1, 2, 1, 2)
    with pytest.raises(ValueError):
        ops.Dropout2D(0.5)(ms.Tensor(np.ones((2, 3, 4), np.float32)))


@pytest.mark.parametrize("unique", [True, False])
@pytest.mark.parametrize("log_uniform", [False, True])
def test_candidate_samplers(unique, log_uniform):
    true = ms.Tensor(np.array([[1, 2], [3, 2], [4, 2], [6, 2], [3, 2]], np.int32))
    if log_uniform:
        op = ops.LogUniformCandidateSampler(2, 5, unique, 20, seed=4)
        p = lambda k: np.log((np.asarray(k) + 2.0) / (np.asarray(k) + 1.0)) / np.log(21.0)  # noqa: E731
    else:
        op = ops.UniformCandidateSampler(2, 5, unique, 20, seed=4)
        p = lambda k: np.full(np.shape(k), 1 / 20)  # noqa: E731
    sampled, true_exp, samp_exp = Draw(op)(true)
    s = sampled.asnumpy()
    assert s.shape == (5,) and s.dtype == np.int32 and ((0 <= s) & (s < 20)).all()
    assert true_exp.shape == (5, 2) and samp_exp.shape == (5,)
    if unique:
        assert len(set(s.tolist())) == 5
        # the expected counts come from the number of tries: the same for every class of one p
        tries = np.log1p(-samp_exp.asnumpy()) / np.log1p(-p(s))
        assert np.allclose(tries, tries[0], rtol=1e-3) and tries[0] >= 5 - 1e-3
    else:
        np.testing.assert_allclose(true_exp.asnumpy(), p(true.asnumpy()) * 5, rtol=1e-6)
        np.testing.assert_allclose(samp_exp.asnumpy(), p(s) * 5, rtol=1e-6)
    hits = ops.UniformCandidateSampler(1, 3, True, 4, seed=1, remove_accidental_hits=True)(
        ms.Tensor(np.array([[1]], np.int32)))[0].asnumpy()
    assert 1 not in hits.tolist() and sorted(hits.tolist()) == [0, 2, 3]
    with pytest.raises(ValueError):
        ops.UniformCandidateSampler(1, 5, True, 4)(ms.Tensor(np.array([[1]], np.int32)))


def test_multinomial_and_categorical():
    probs = np.array([[0.0, 0.7, 0.3], [1.0, 0.0, 0.0]], np.float32)
    out = ops.multinomial(ms.Tensor(probs), 20000, True, seed=3).asnumpy()
    assert out.shape == (2, 20000) and out.dtype == np.int32
    np.testing.assert_allclose(np.bincount(out[0], minlength=3) / 20000, [0, 0.7, 0.3], atol=0.015)
    assert (out[1] == 0).all()
    wo = ops.multinomial(ms.Tensor(probs[0]), 2, False, seed=3).asnumpy()
    assert sorted(wo.tolist()) == [1, 2]
    logits = np.log(np.array([[0.2, 0.8], [0.5, 0.5]], np.float32))
    cat = ops.RandomCategorical(ms.int16)(ms.Tensor(logits), 10000, 7).asnumpy()
    assert cat.shape == (2, 10000) and cat.dtype == np.int16 and abs(cat[0].mean() - 0.8) < 0.02
    m = Draw(ops.Multinomial(1, 2))(ms.Tensor(probs[:1]), 7)
    assert m.shape == (1, 7)
    with pytest.raises(ValueError):
        ops.multinomial(ms.Tensor(probs[1]), 2, False)


def test_choice_with_mask():
    x = np.zeros((4, 5), bool)
    x[[0, 2, 3], [1, 4, 0]] = True
    idx, mask = Draw(ops.RandomChoiceWithMask(count=6, seed=1))(ms.Tensor(x))
    idx, mask = idx.asnumpy(), mask.asnumpy()
    assert idx.shape == (6, 2) and mask.tolist() == [True] * 3 + [False] * 3
    assert sorted(map(tuple, idx[:3].tolist())) == [(0, 1), (2, 4), (3, 0)] and (idx[3:] == 0).all()
    with pytest.raises(RuntimeError, match="2 GiB"):
        ops.RandomChoiceWithMask(count=2 ** 31)(ms.Tensor(x))


def test_bad_arguments_raise_the_errors_mindspore_names():
    r = ms.Tensor(np.array([0.5], np.float32))
    with pytest.raises(TypeError):
        ops.random_poisson((3, 5), r, seed=1)
    with pytest.raises(ValueError):
        ops.random_poisson(ms.Tensor(np.array([[1, 2]], np.int32)), r)
    with pytest.raises(TypeError):
        ops.random_poisson(ms.Tensor(np.array([3.0], np.float32)), r)
    with pytest.raises(ValueError):
        ops.random_poisson(ms.Tensor(np.array([-3, 5], np.int32)), r)
    with pytest.raises(TypeError):
        ops.random_poisson(ms.Tensor(np.array([3], np.int32)), [0.5])
    with pytest.raises(TypeError):
        ops.random_poisson(ms.Tensor(np.array([3], np.int32)), ms.Tensor(np.array([True])))
    with pytest.raises(TypeError):
        ops.random_poisson(ms.Tensor(np.array([3], np.int32)), r, seed=0.5)
    with pytest.raises(TypeError):
        ops.random_poisson(ms.Tensor(np.array([3], np.int32)), r, dtype=ms.bool_)
    with pytest.raises(TypeError):
        ops.Uniform()(ms.Tensor(np.zeros((2,), np.int32)))


# ---------------------------------------------------------------- Print

class Printer(nn.Cell):
    def __init__(self):
        super().__init__()
        self.print = ops.Print()

    def construct(self, x, flag: bool):
        self.print("first", x.shape[0], x)
        y = x * 2
        if flag:
            ops.print_("flag on", (1, 2), y)
        self.print("last", 1.5, False)
        return y


def test_print_runs_in_order_at_each_call(capsys):
    net = Printer()
    x = np.arange(3, dtype=np.float32)
    for flag in (True, False, True):
        out = net(ms.Tensor(x), flag)
        np.testing.assert_array_equal(out.asnumpy(), x * 2)
    lines = capsys.readouterr().out.splitlines()
    t = "Tensor(shape=[3], dtype=float32, value=[0. 1. 2.])"
    t2 = "Tensor(shape=[3], dtype=float32, value=[0. 2. 4.])"
    one_on = ["first", "3", t, "flag on", "(1, 2)", t2, "last", "1.5", "False"]
    one_off = ["first", "3", t, "last", "1.5", "False"]
    assert lines == one_on + one_off + one_on
    ops.print_("eager", ms.Tensor(np.array(7, np.int8)))
    assert capsys.readouterr().out.splitlines() == ["eager", "Tensor(shape=[], dtype=int8, value=7)"]


# ---------------------------------------------------------------- Unique

def _unique_ref(x):
    flat = x.reshape(-1)
    vals, first = np.unique(flat, return_index=True)
    order = np.sort(first)
    y = flat[order]
    idx = np.array([np.flatnonzero(y == v)[0] for v in flat], np.int32).reshape(x.shape)
    return y, idx


@pytest.mark.parametrize("dtype", [np.int32, np.float32, np.int8, np.bool_])
def test_unique_against_numpy(dtype, rng):
    for shape in [(7,), (3, 4), (0,), (2, 1, 5)]:
        x = rng.integers(-3, 4, shape).astype(dtype)
        ref_y, ref_i = _unique_ref(x)
        y, i = ops.unique(ms.Tensor(x))
        np.testing.assert_array_equal(y.asnumpy(), ref_y)
        np.testing.assert_array_equal(i.asnumpy(), ref_i)
        gy, gi = Draw(ops.Unique())(ms.Tensor(x))
        np.testing.assert_array_equal(gy.asnumpy(), ref_y)
        np.testing.assert_array_equal(gi.asnumpy(), ref_i)


class UniqueReshape(nn.Cell):
    def __init__(self):
        super().__init__()
        self.unique = ops.Unique()

    def construct(self, x):
        y, _ = self.unique(x)
        return ops.reshape(y, (3, 3)) * 2


def test_unique_size_pinned_by_a_later_reshape():
    x = np.array([1, 2, 2, 3, 4, 5, 6, 7, 7, 8, 9, 1], np.float32)
    np.testing.assert_array_equal(UniqueReshape()(ms.Tensor(x)).asnumpy(), np.arange(1, 10).reshape(3, 3) * 2)
    with pytest.raises(Exception, match="reshape|RESHAPE"):
        UniqueReshape()(ms.Tensor(np.array([1, 1, 2], np.float32)))


def test_unique_with_pad(rng):
    x = np.array([1, 2, 5, 2], np.int32)
    y, i = Draw(ops.UniqueWithPad(), )(ms.Tensor(x), 0)
    np.testing.assert_array_equal(y.asnumpy(), [1, 2, 5, 0])
    np.testing.assert_array_equal(i.asnumpy(), [0, 1, 2, 1])
    f = rng.integers(0, 5, 30).astype(np.float32)
    y, i = ops.UniqueWithPad()(ms.Tensor(f), -1.0)
    ref_y, ref_i = _unique_ref(f)
    np.testing.assert_array_equal(y.asnumpy(), np.concatenate([ref_y, np.full(30 - ref_y.size, -1.0, np.float32)]))
    np.testing.assert_array_equal(i.asnumpy(), ref_i)


class BuiltinPrint(nn.Cell):
    def __init__(self):
        super().__init__()
        self.w = ms.Parameter(ms.Tensor(np.eye(2, dtype=np.float32)), name="w")

    def construct(self, x):
        out = ops.matmul(x, self.w)
        print("matmul:", out, x.shape[0], sep=" ")
        out = out + 1
        print("add", end="!\n")
        ops.print_("then", out)
        return out


def test_builtin_print_in_construct_prints_when_the_cell_runs(capsys):
    net = BuiltinPrint()
    x = np.array([[1, 2], [3, 4]], np.float32)
    assert capsys.readouterr().out == ""
    for _ in range(2):
        net(ms.Tensor(x))
    t = "Tensor(shape=[2, 2], dtype=float32, value=[[1. 2.]\n [3. 4.]])"
    t1 = "Tensor(shape=[2, 2], dtype=float32, value=[[2. 3.]\n [4. 5.]])"
    once = f"matmul: {t} 2\nadd!\nthen\n{t1}\n"
    assert capsys.readouterr().out == once * 2


def test_rrelu_draws_its_slopes(rng):
    x = rng.standard_normal((300, 40)).astype(np.float32)
    net = nn.RReLU(0.1, 0.3)
    a, b = net(ms.Tensor(x)).asnumpy(), net(ms.Tensor(x)).asnumpy()
    neg = x < 0
    np.testing.assert_array_equal(a[~neg], x[~neg])
    slope = a[neg] / x[neg]
    assert slope.min() >= 0.1 - 1e-6 and slope.max() <= 0.3 + 1e-6 and abs(slope.mean() - 0.2) < 0.005
    assert not np.array_equal(a, b)
    np.testing.assert_array_equal(nn.RReLU(0.5, 0.5)(ms.Tensor(x)).asnumpy(), np.where(neg, x * 0.5, x))
    with pytest.raises(ValueError):
        nn.RReLU(0.5, 0.1)


def test_effect_rows_survive_the_binary_format_and_the_disassembler(tmp_path):
    from msvm import bytecode
    from msvm.static import analyze_file

    src = tmp_path / "effects.py"
    src.write_text(PROGRAM)
    (entry,) = [e for e in analyze_file(str(src)) if e.name == "Effects"]
    code = entry.code
    names = [i.op.name for i in code.instrs]
    assert {"RANDOM", "PRINT", "UNIQUE"} <= set(names)
    p = tmp_path / "e.msbc"
    bytecode.save(code, p)
    back = bytecode.load(p)
    assert back == code and bytecode.dump(back) == bytecode.dump(code)
    again = bytecode.assemble(bytecode.disassemble(code))
    assert again == code
    bytecode.verify(again)


PROGRAM = """
import msvm as ms
from msvm import nn, ops


class Effects(nn.Cell):
    def __init__(self):
        super().__init__()
        self.normal = ops.StandardNormal(3, 4)
        self.drop = ops.Dropout2D(0.5)
        self.print = ops.Print()

    def construct(self, x):
        n = self.normal((x.shape[0], 3))
        self.print("rows", x.shape[0], x)
        y, m = self.drop(x)
        u, i = ops.unique(ops.reshape(y, (-1,)))
        return n, y * 2.0, m, u, i
"""


class UniqueDims(nn.Cell):
    """The data-dependent size of unique's result used where a dim's value is needed."""

    def construct(self, x):
        u, idx = ops.unique(x)
        pairs = ops.reshape(u, (-1, 2))                     # (u // 2 rows: a run-time dim)
        n = u.shape[0]
        pos = ops.arange(n, dtype=ms.float32) * 1.0          # (an ARANGE of a data-dependent length)
        return pairs * 2.0, pos + u, ops.gather(u, idx, 0)


def test_data_dependent_dims_are_bound_when_the_cell_runs():
    net = UniqueDims()
    for x in ([3, 1, 3, 2, 5, 6, 7], [7, 7, 1, 2, 9], [4, 4, 4, 9, 8, 1, 2, 3]):
        xs = np.array(x, np.float32)
        ref_u = np.array(list(dict.fromkeys(x)), np.float32)
        pairs, pos, back = net(ms.Tensor(xs))
        np.testing.assert_array_equal(pairs.asnumpy(), ref_u.reshape(-1, 2) * 2)
        np.testing.assert_array_equal(pos.asnumpy(), np.arange(len(ref_u)) + ref_u)
        np.testing.assert_array_equal(back.asnumpy(), xs)
    assert len(net._runner.variants) == 1
    with pytest.raises(Exception, match="reshape|RESHAPE"):
        net(ms.Tensor(np.array([1, 2, 3], np.float32)))          # three values do not make pairs
    names = [i.op.name for v in net._runner.variants.values() for i in v.code.instrs]
    assert "BIND_DIMS" in names


def test_streams_are_forgotten_safely_while_the_generators_are_in_use():
    """A primitive collected (its finalizer runs) while another draw holds the streams' lock:
    no deadlock (the lock is re-entrant), and the stream is gone."""
    import gc

    from msvm.interp import rng

    for _ in range(200):
        p = ops.StandardNormal(0, 0)
        p((2,))
        sid = p._call_kw["stream"]
        with rng._lock:                      # (as if a draw held it when the collector ran)
            del p
            gc.collect()
        assert not any(k[0] == sid for k in rng._streams)
