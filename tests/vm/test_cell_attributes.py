"""An attribute set on a compiled Cell after its first calls is seen by the next call, at every
jit level and through every call route (guard, replay, interpreter): construct reads attributes
as constants, and a parent's Code holds its sub-Cells' (nn/cell.py ``__setattr__``)."""

import msvm as ms
import numpy as np
import pytest
from msvm import events, nn, ops


class Lin(nn.Cell):
    def __init__(self):
        super().__init__()
        w = np.random.default_rng(0).standard_normal((4, 4)).astype(np.float32) * 0.3
        self.w = ms.Parameter(ms.Tensor(w), "w")

    def construct(self, x):
        return ops.matmul(x, self.w)


class Scale(nn.Cell):
    def __init__(self, k):
        super().__init__()
        self.k = k

    def construct(self, x):
        return x * self.k + 1.0


class Square(nn.Cell):
    def construct(self, x):
        return x * x + 1.0


class Net(nn.Cell):
    def __init__(self, act):
        super().__init__()
        self.lin = Lin()
        self.act = act

    def construct(self, x):
        return self.act(self.lin(x))


LEVELS = ["L1", "auto"]


@pytest.fixture(params=[(lvl, fusion) for lvl in LEVELS for fusion in (True, False)],
                ids=lambda p: f"{p[0]}-{'fused' if p[1] else 'unfused'}")
def level(request):
    lvl, fusion = request.param
    ms.set_context(mode=ms.GRAPH_MODE, jit_config={"jit_level": lvl, "enable_fusion": fusion})
    yield lvl
    ms.set_context(jit_config={"jit_level": "auto", "enable_fusion": True})


def _x():
    return np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)


def _warm(net, x, n=5):          # past REPLAY_AFTER: the replay (and where it builds, the guard) answers
    for _ in range(n):
        out = net(ms.Tensor(x))
    return out.asnumpy()


def test_a_sub_cells_constant_attribute(level):
    x = _x()
    net = Net(Scale(0.5))
    h = x @ net.lin.w.asnumpy()
    np.testing.assert_allclose(_warm(net, x), h * 0.5 + 1.0, rtol=1e-5, atol=1e-6)
    net.act.k = 2.0
    np.testing.assert_allclose(_warm(net, x), h * 2.0 + 1.0, rtol=1e-5, atol=1e-6)


def test_a_sub_cell_swapped_for_another(level):
    x = _x()
    net = Net(Square())
    h = x @ net.lin.w.asnumpy()
    np.testing.assert_allclose(_warm(net, x), h * h + 1.0, rtol=1e-5, atol=1e-6)
    net.act = Scale(3.0)
    np.testing.assert_allclose(_warm(net, x), h * 3.0 + 1.0, rtol=1e-5, atol=1e-6)


def test_a_parameter_replaced_by_a_new_one(level):
    x = _x()
    net = Net(Square())
    _warm(net, x)
    w2 = np.eye(4, dtype=np.float32) * 2.0
    net.lin.w = ms.Parameter(ms.Tensor(w2), "w")
    h = x @ w2
    np.testing.assert_allclose(_warm(net, x), h * h + 1.0, rtol=1e-5, atol=1e-6)


def test_a_tensor_assigned_to_a_parameters_name_is_its_new_data(level):
    """As MindSpore's Cell: ``cell.w = Tensor(...)`` where ``w`` is a Parameter sets that Parameter's data
    (mindcv's CaiT initializes its Dense layers so, ``m.weight = initializer(...)``): the Parameter stays
    registered under its name (a checkpoint fills it), read-only, and the next call multiplies by it. Before,
    the plain Tensor took its place and the Parameter left ``get_parameters`` (CaiT lost 159 of 374)."""
    from msvm.common.initializer import initializer

    x = _x()
    net = Net(Square())
    _warm(net, x)
    w = net.lin.w
    net.lin.w = ms.Tensor(np.eye(4, dtype=np.float32) * 2.0)
    assert net.lin.w is w and [n for n, _ in net.parameters_and_names()].count("lin.w") == 1
    assert not w._data.flags.writeable
    h = x @ (np.eye(4, dtype=np.float32) * 2.0)
    np.testing.assert_allclose(_warm(net, x), h * h + 1.0, rtol=1e-5, atol=1e-6)
    net.lin.w = initializer("zeros", (4, 4), ms.float32)
    assert net.lin.w is w and not w.asnumpy().any()
    np.testing.assert_array_equal(_warm(net, x), np.ones((3, 4), np.float32))
    # (the static view builds Cells on placeholders: one assigned so leaves the Parameter a placeholder of its dims)
    net.lin.w = ms.Tensor(shape=[4, "n"], dtype=ms.float32)
    assert net.lin.w is w and w.is_placeholder and w.placeholder_shape == (4, "n")


def test_the_recompile_says_which_attribute():
    ms.set_context(mode=ms.GRAPH_MODE, jit_config={"jit_level": "auto"})
    x = _x()
    net = Net(Scale(0.5))
    _warm(net, x)
    seen = []
    unsub = events.subscribe(seen.append, ("bytecode",))
    try:
        net.act.k = 2.0
        net(ms.Tensor(x))
    finally:
        unsub()
    reasons = [e.get("reason", "") for e in seen if e.get("reason")]
    assert any("Scale.k was set" in r for r in reasons), reasons


def test_attributes_set_before_any_call_compile_nothing_again():
    """Building a model sets many attributes: none of them costs a recompile (nothing is compiled yet),
    and set_train keeps its own specialization (no recompile of every Cell)."""
    from msvm.tensor import PARAMETER_SHAPES

    before = PARAMETER_SHAPES[0]
    net = Net(Scale(0.5))
    net.act.k = 0.25
    assert PARAMETER_SHAPES[0] == before
    x = _x()
    _warm(net, x, 2)
    net.set_train(True)
    net.set_train(False)
    assert PARAMETER_SHAPES[0] == before


def test_a_plain_attribute_may_be_set_before_init_a_parameter_or_cell_may_not():
    """As MindSpore's Cell: mindcv's SKNet sets ``self.sk_kwargs`` before ``super().__init__()``."""
    class Early(Scale):
        def __init__(self):
            self.note = {"k": 2.0}
            super().__init__(self.note["k"])

    net = Early()
    assert net.note == {"k": 2.0}
    np.testing.assert_array_equal(net(ms.Tensor(np.ones(3, np.float32))).asnumpy(), np.full(3, 3.0, np.float32))

    class EarlyParameter(nn.Cell):
        def __init__(self):
            self.w = ms.Parameter(ms.Tensor(np.ones(2, np.float32)), "w")
            super().__init__()

    class EarlyCell(nn.Cell):
        def __init__(self):
            self.inner = Scale(1.0)
            super().__init__()

    for cls, what in ((EarlyParameter, "Parameter 'w'"), (EarlyCell, "Scale 'inner'")):
        with pytest.raises(RuntimeError, match=f"call super\\(\\).__init__\\(\\) before assigning the {what}"):
            cls()
