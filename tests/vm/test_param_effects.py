"""In-place Parameter updates (issue 21): MindSpore's Assign, AssignAdd, AssignSub, the ScatterNd*
and Scatter* primitives, InplaceUpdate(V2) and inplace_index_add change their first input. In a
Cell that is the ASSIGN_PARAM instruction, whose effect is declared in the opcode table; eagerly
the tensor gets a new array. Each case runs over repeated calls against a numpy model of the
state, at L1 (tests/jit runs the compiled tiers)."""

import msvm as ms
import numpy as np
import pytest
from msvm import nn, ops
from msvm.bytecode import binary
from msvm.bytecode.opcodes import BY_NAME, EFFECTS, FUSABLE, JITABLE, LEAVES
from msvm.errors import FrontendError

R = np.random.default_rng(2101)

NP_MODES = {"update": lambda a, b: b, "add": np.add, "sub": np.subtract, "mul": np.multiply,
            "div": np.divide, "max": np.maximum, "min": np.minimum}


def np_scatter_nd(mode, x, idx, upd):
    out = x.copy()
    for k in np.ndindex(idx.shape[:-1]):
        at = tuple(idx[k])
        out[at] = NP_MODES[mode](out[at], upd[k]).astype(x.dtype)
    return out


def codes_of(net):
    return [c for v in net._runner.variants.values() for c in v.code.all_codes()]


class ScatterNet(nn.Cell):
    def __init__(self, prim, x):
        super().__init__()
        self.op = prim
        self.x = ms.Parameter(ms.Tensor(x), name="x")

    def construct(self, idx, upd):
        self.op(self.x, idx, upd)        # a call as a statement: its result is not used
        return self.x


@pytest.mark.parametrize("mode", list(NP_MODES))
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_scatter_nd_updates_the_parameter_over_calls(mode, dtype):
    x = (R.standard_normal((4, 3, 2)) * 4).astype(dtype) + (dtype(5) if mode == "div" else 0)
    net = ScatterNet(getattr(ops, f"ScatterNd{mode.capitalize()}")(), x)
    state = x.copy()
    for call in range(4):
        idx = R.integers(0, [4, 3], size=(2, 2)).astype(np.int32)
        idx[1] = (idx[0] + 1) % [4, 3]                     # distinct rows: the order cannot matter
        upd = ((R.standard_normal((2, 2)) * 3).astype(dtype) + (dtype(2) if mode == "div" else 0))
        if mode == "div":
            upd[upd == 0] = 1
        state = np_scatter_nd(mode, state, idx, upd)
        out = net(ms.Tensor(idx), ms.Tensor(upd))
        np.testing.assert_allclose(out.asnumpy(), state, rtol=1e-6, err_msg=f"{mode} call {call}")
        np.testing.assert_allclose(net.x.asnumpy(), state, rtol=1e-6)
    assert net.x.version == 4
    assert any(i.op.name == "ASSIGN_PARAM" for c in codes_of(net) for i in c.instrs)


@pytest.mark.parametrize("mode", ["update", "add", "max"])
def test_scatter_rows_update_the_parameter(mode):
    x = R.standard_normal((5, 3)).astype(np.float32)
    net = ScatterNet(getattr(ops, f"Scatter{mode.capitalize()}")(), x)
    state = x.copy()
    for _ in range(3):
        idx = R.choice(5, 2, replace=False).astype(np.int32)
        upd = R.standard_normal((2, 3)).astype(np.float32)
        state = np_scatter_nd(mode, state, idx[:, None], upd)
        np.testing.assert_allclose(net(ms.Tensor(idx), ms.Tensor(upd)).asnumpy(), state, rtol=1e-6)


class AssignNet(nn.Cell):
    """Reads before and after the update, and a value derived from the Parameter."""

    def __init__(self, prim, v):
        super().__init__()
        self.v = ms.Parameter(ms.Tensor(v), name="v")
        self.op = prim

    def construct(self, y):
        before = self.v * 2.0
        self.op(self.v, y)
        return before, self.v + 0.5, self.v


@pytest.mark.parametrize("name,step", [("Assign", lambda v, y: y), ("AssignAdd", np.add),
                                       ("AssignSub", np.subtract)])
def test_assign_family_reads_in_program_order(name, step):
    v = R.standard_normal((3, 4)).astype(np.float32)
    net = AssignNet(getattr(ops, name)(), v)
    state = v.copy()
    for _ in range(4):
        y = R.standard_normal((3, 4)).astype(np.float32)
        before, after, cur = net(ms.Tensor(y))
        np.testing.assert_allclose(before.asnumpy(), state * 2, rtol=1e-6)
        state = step(state, y).astype(np.float32)
        np.testing.assert_allclose(after.asnumpy(), state + 0.5, rtol=1e-6)
        np.testing.assert_allclose(cur.asnumpy(), state, rtol=1e-6)


def test_eager_updates_change_the_tensor_itself():
    ms.set_context(mode=ms.PYNATIVE_MODE)
    x = ms.Tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    view = x.asnumpy()
    ops.assign_sub(x, ms.Tensor(np.ones((2, 3), np.float32)))
    np.testing.assert_array_equal(x.asnumpy(), np.arange(6).reshape(2, 3) - 1)
    np.testing.assert_array_equal(view, np.arange(6).reshape(2, 3))     # an earlier view keeps its values
    p = ms.Parameter(ms.Tensor(np.zeros(4, np.int32)), name="p")
    out = ops.ScatterNdAdd()(p, ms.Tensor(np.array([[1], [3]], np.int32)), ms.Tensor(np.array([5, 7], np.int32)))
    assert out is p and p.version == 1
    np.testing.assert_array_equal(p.asnumpy(), [0, 5, 0, 7])
    assert not p._data.flags.writeable                  # a Parameter's array stays read-only;
    mine = p.asnumpy()                                  # asnumpy gives a writable copy (MindSpore's is writable)
    mine[0] = 99
    np.testing.assert_array_equal(p.asnumpy(), [0, 5, 0, 7])
    ops.assign(p, 3)                                    # a number fills it, in its dtype
    np.testing.assert_array_equal(p.asnumpy(), [3, 3, 3, 3])
    assert p.dtype == ms.int32 and p.version == 2
    got = ops.inplace_index_add(ms.Tensor(np.ones((3, 2), np.float32)), ms.Tensor(np.array([0, 2], np.int32)),
                                ms.Tensor(np.full((2, 2), 4, np.float32)), 0)
    np.testing.assert_array_equal(got.asnumpy(), [[5, 5], [1, 1], [5, 5]])


def test_inplace_update_of_a_parameter():
    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.x = ms.Parameter(ms.Tensor(np.zeros((4, 2), np.float32)), name="x")
            self.op = ops.InplaceUpdateV2()

        def construct(self, v):
            return self.op(self.x, (1, 3), v)

    net = Net()
    v = R.standard_normal((2, 2)).astype(np.float32)
    out = net(ms.Tensor(v))
    want = np.zeros((4, 2), np.float32)
    want[[1, 3]] = v
    np.testing.assert_array_equal(out.asnumpy(), want)
    np.testing.assert_array_equal(net.x.asnumpy(), want)


class Counter(nn.Cell):
    def __init__(self):
        super().__init__()
        self.n = ms.Parameter(ms.Tensor(np.zeros(2, np.float32)), name="n")

    def construct(self, x):
        ops.assign_add(self.n, x)
        return self.n * 1.0


class Outer(nn.Cell):
    """A sub-Cell with an effect called as a statement of its own still runs, once per call."""

    def __init__(self):
        super().__init__()
        self.c = Counter()

    def construct(self, x):
        self.c(x)
        self.c(x * 2.0)
        return x + 0.0


def test_a_sub_cell_with_an_effect_runs_where_it_is_called():
    net = Outer()
    for k in range(1, 4):
        net(ms.Tensor(np.ones(2, np.float32)))
        np.testing.assert_array_equal(net.c.n.asnumpy(), [3.0 * k] * 2)
    top = next(iter(net._runner.variants.values())).code
    assert top.has_effects() and [i.op.name for i in top.instrs].count("CALL_CELL") == 2


def test_the_row_declares_its_effect_and_nothing_fuses_or_compiles_it():
    row = BY_NAME["ASSIGN_PARAM"]
    assert row.effect == "param" and "ASSIGN_PARAM" in EFFECTS
    assert not EFFECTS & (FUSABLE | JITABLE | LEAVES)
    net = AssignNet(ops.AssignAdd(), np.ones((2, 2), np.float32))
    net(ms.Tensor(np.ones((2, 2), np.float32)))
    code = next(iter(net._runner.variants.values())).code
    back = binary.loads(binary.dumps(code))             # the binary format carries it
    assert [i.op.name for i in back.instrs] == [i.op.name for i in code.instrs]
    from msvm.compiler.fuse import fuse
    fused = fuse(code)
    names = [i.op.name for i in fused.instrs]
    k = names.index("ASSIGN_PARAM")
    # the read before the update stays before it, the read after stays after it
    assert any(n == "LOAD_PARAM" for n in names[:k]) and any(n == "LOAD_PARAM" for n in names[k + 1:])


def test_bad_updates_are_errors():
    class ToTensorAttr(nn.Cell):
        def __init__(self):
            super().__init__()
            self.t = ms.Tensor(np.zeros(3, np.float32))

        def construct(self, y):
            ops.assign(self.t, y)
            return y

    with pytest.raises(FrontendError, match="must be a Parameter"):
        ToTensorAttr()(ms.Tensor(np.ones(3, np.float32)))
    net = AssignNet(ops.Assign(), np.zeros((2, 3), np.float32))
    with pytest.raises(FrontendError, match=r"ASSIGN_PARAM: Parameter 'v' has shape \[2,3\], the value \[y0\]"):
        net(ms.Tensor(np.ones(6, np.float32)))
    with pytest.raises(ms.ShapeMismatch, match="argument y has dim 0 = 3"):      # dims unified with v's
        net(ms.Tensor(np.ones((3, 2), np.float32)))
    ms.set_context(mode=ms.PYNATIVE_MODE)
    with pytest.raises(ValueError, match="cannot assign a value of shape"):
        ops.assign(ms.Parameter(ms.Tensor(np.zeros((2, 3), np.float32))), ms.Tensor(np.ones((3, 2), np.float32)))


def test_a_read_before_the_update_keeps_the_old_value_even_if_emitted_later():
    """Graph values are emitted where they are stored or returned; a read of the Parameter made
    before the update (left of it in one tuple) is pinned to the value it had."""
    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.p = ms.Parameter(ms.Tensor(np.ones(3, np.float32)), name="p")

        def construct(self, v):
            return self.p * 2.0, ops.assign(self.p, self.p + v), self.p

    net = Net()
    state = np.ones(3, np.float32)
    for _ in range(3):
        v = R.standard_normal(3).astype(np.float32)
        old, ret, new = net(ms.Tensor(v))
        np.testing.assert_allclose(old.asnumpy(), state * 2, rtol=1e-6)
        state = state + v
        np.testing.assert_allclose(ret.asnumpy(), state, rtol=1e-6)
        np.testing.assert_allclose(new.asnumpy(), state, rtol=1e-6)


class IntoArgument(nn.Cell):
    """A scatter into an argument (not a Parameter): the name reads the update afterwards."""

    def __init__(self):
        super().__init__()
        self.op = ops.ScatterNdSub()

    def construct(self, x, idx, upd):
        before = x * 1.0
        self.op(x, idx, upd)
        return before, x


class VmapOuter(nn.Cell):
    def __init__(self, x):
        super().__init__()
        self.x = ms.Parameter(ms.Tensor(x), name="x")
        self.inner = IntoArgument()

    def construct(self, idx, upd):
        return ops.vmap(self.inner, (0, 0, None), 0)(self.x, idx, upd)


def test_in_place_on_an_argument_rebinds_it_and_maps_under_vmap():
    x = R.standard_normal((3, 4)).astype(np.float32)
    idx = np.array([[1], [3]], np.int32)
    upd = R.standard_normal(2).astype(np.float32)
    before, after = IntoArgument()(ms.Tensor(x[0]), ms.Tensor(idx), ms.Tensor(upd))
    np.testing.assert_array_equal(before.asnumpy(), x[0])
    np.testing.assert_allclose(after.asnumpy(), np_scatter_nd("sub", x[0], idx, upd), rtol=1e-6)
    bidx = np.stack([idx, [[0], [2]], idx])
    b, a = VmapOuter(x)(ms.Tensor(bidx), ms.Tensor(upd))
    np.testing.assert_array_equal(b.asnumpy(), x)
    np.testing.assert_allclose(a.asnumpy(), np.stack([np_scatter_nd("sub", x[k], bidx[k], upd) for k in range(3)]),
                               rtol=1e-6)


def test_inplace_update_with_run_time_indices():
    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.x = ms.Parameter(ms.Tensor(np.arange(8, dtype=np.float16).reshape(4, 2)), name="x")
            self.v = ms.Tensor(np.array([[0.5, 1.0], [1.0, 1.5]], np.float16))
            self.op = ops.InplaceUpdateV2()

        def construct(self, i):
            return self.op(self.x, i, self.v)

    net = Net()
    net.set_inputs(ms.Tensor(shape=[None], dtype=ms.int32))
    want = np.arange(8, dtype=np.float16).reshape(4, 2)
    for rows in ([0, 1], [3, 2]):
        want[rows] = [[0.5, 1.0], [1.0, 1.5]]
        np.testing.assert_array_equal(net(ms.Tensor(np.array(rows, np.int32))).asnumpy(), want)
        np.testing.assert_array_equal(net.x.asnumpy(), want)


def np_bn_train(x, mm, mv, momentum, eps=1e-5):
    axes = (0,) + tuple(range(2, x.ndim))
    shape = (1, -1) + (1,) * (x.ndim - 2)
    m, v = x.mean(axes), x.var(axes)
    y = (x - m.reshape(shape)) / np.sqrt(v.reshape(shape) + eps)
    new_m = (mm * momentum + m * (1 - momentum)).astype(np.float32)
    return y, new_m, (mv * momentum + v * (1 - momentum)).astype(np.float32)


@pytest.mark.parametrize("mode", [ms.PYNATIVE_MODE, ms.GRAPH_MODE])
@pytest.mark.parametrize("layer,shape", [(nn.BatchNorm2d, (2, 3, 4, 5)), (nn.BatchNorm1d, (6, 3))])
def test_batch_norm_in_training_updates_its_moving_statistics(mode, layer, shape):
    ms.set_context(mode=mode)
    bn = layer(3, momentum=0.8)
    mm, mv = np.zeros(3, np.float32), np.ones(3, np.float32)
    bn.set_train()
    for _ in range(3):
        x = (R.standard_normal(shape) * 2 + 1).astype(np.float32)
        want, mm, mv = np_bn_train(x, mm, mv, 0.8)
        np.testing.assert_allclose(bn(ms.Tensor(x)).asnumpy(), want, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(bn.moving_mean.asnumpy(), mm, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(bn.moving_variance.asnumpy(), mv, rtol=1e-5, atol=1e-6)
    bn.set_train(False)                  # inference: the moving statistics, left as they are
    x = R.standard_normal(shape).astype(np.float32)
    s = (1, -1) + (1,) * (len(shape) - 2)
    np.testing.assert_allclose(bn(ms.Tensor(x)).asnumpy(), (x - mm.reshape(s)) / np.sqrt(mv.reshape(s) + 1e-5),
                               rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(bn.moving_mean.asnumpy(), mm, rtol=1e-5, atol=1e-6)


class Bump(nn.Cell):
    """An update made by a helper under a shape condition."""

    def __init__(self):
        super().__init__()
        self.p = ms.Parameter(ms.Tensor(np.zeros(3, np.float32)), name="p")

    def bump(self, x):
        if x.shape[0] > 2:
            ops.assign(self.p, self.p + x[:3])
        return x

    def construct(self, x):
        y = self.bump(x)
        return y * 1.0, self.p


class BumpInOneExpression(Bump):
    def construct(self, x):
        return self.p * 2.0, self.bump(x)


def test_an_update_under_a_shape_condition():
    net = Bump()
    for k in range(1, 4):
        x = R.standard_normal(4).astype(np.float32)
        y, p = net(ms.Tensor(x))
        np.testing.assert_array_equal(y.asnumpy(), x)
        assert net.p.version == k
    np.testing.assert_allclose(p.asnumpy(), net.p.asnumpy())
    # a read left of the update in one expression, the update inside the helper's branch: the read
    # could only be pinned on one path, so it is refused with what to do
    with pytest.raises(FrontendError, match="store the read in a name first"):
        BumpInOneExpression()(ms.Tensor(np.ones(4, np.float32)))
