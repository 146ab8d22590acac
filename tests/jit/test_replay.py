"""The straight-line replay of a repeated call signature (interp/replay.py) through the
Cells' call memo: it runs above L1 only, gives the interpreter's answers, steps aside for the
debugger and for event listeners, and errors inside it still name their instruction."""

import msvm as ms
import numpy as np
import pytest
from cells import DynamicMatmulCell
from msvm import events, nn, ops
from msvm.compiler import tiers
from msvm.interp import replay
from msvm.interp.interpreter import set_trace


@pytest.fixture
def level():
    def set_level(name):
        ms.set_context(jit_config={"jit_level": name})
    yield set_level
    ms.set_context(jit_config={"jit_level": "auto", "enable_fusion": True})


class Inner(nn.Cell):
    def __init__(self, n):
        super().__init__()
        self.dense = nn.Dense(n, n)

    def construct(self, x):
        return ops.relu(self.dense(x)) * 0.5


class Outer(nn.Cell):
    """Sub-cells, a shape predicate, a bool flag, a loop over an int argument, a reshape with a
    symbolic shape and an intermediate whose buffer the interpreter keeps between calls."""

    def __init__(self, n):
        super().__init__()
        self.inner = Inner(n)

    def construct(self, x, k, training=True):
        h = self.inner(x)
        if x.shape[0] > 4:
            h = h + 1.0
        for _ in range(k):
            h = ops.tanh(h) * 2.0
        if training:
            h = ops.softmax(h, -1)
        b, n = x.shape
        return ops.reshape(h, (n, b)) - ops.reshape(x, (n, b))


def _outer_ref(net, x, k, training):
    w, bias = net.inner.dense.weight.asnumpy(), net.inner.dense.bias.asnumpy()
    h = np.maximum(x @ w.T + bias, 0) * 0.5
    if x.shape[0] > 4:
        h = h + 1
    for _ in range(k):
        h = np.tanh(h) * 2
    if training:
        e = np.exp(h - h.max(-1, keepdims=True))
        h = e / e.sum(-1, keepdims=True)
    b, n = x.shape
    return h.reshape(n, b) - x.reshape(n, b)


def _entries(net):
    return list(net.__dict__["_runner"].memo.values())


@pytest.mark.parametrize("jit_level", ["auto", "L2", "L3"])
def test_repeated_signatures_replay_the_interpreters_answers(level, jit_level, rng):
    """Signatures interleaved (shapes, the int, the flag), each called several times: every
    answer is numpy's, and each signature seen twice runs a replay without branches."""
    level(jit_level)
    net = Outer(8)
    calls = [(b, k, t) for b in (3, 6) for k in (0, 2) for t in (True, False)] * 3
    results = []
    for b, k, t in calls:
        x = rng.standard_normal((b, 8)).astype(np.float32)
        out = net(ms.Tensor(x), k, training=t)
        results.append((out, _outer_ref(net, x, k, t)))
        tiers.wait_for_compiles()
    for out, want in results:         # earlier results are not overwritten by later calls
        np.testing.assert_allclose(out.asnumpy(), want, rtol=2e-5, atol=2e-5)
    entries = _entries(net)
    assert len(entries) == 8
    for e in entries:
        assert callable(e[3]), "a signature seen three times has a replay"
        lines = [ln.strip() for ln in e[3].source.splitlines()]
        assert not [ln for ln in lines if ln.startswith(("if ", "for ", "while ")) and "e is not None" not in ln]


def test_l1_runs_the_interpreter(level, rng, monkeypatch):
    """jit_level L1 is the interpreter itself: a replay, even one already built, is not run."""
    level("auto")
    net = DynamicMatmulCell()
    x, y = (ms.Tensor(rng.standard_normal(s).astype(np.float32)) for s in ((4, 5), (5, 3)))
    for _ in range(3):
        net(x, y)
    (e,) = _entries(net)
    ran = []
    real = e[3]
    e[3] = lambda *a: ran.append(1) or real(*a)
    net(x, y)
    assert ran == [1]
    level("L1")
    np.testing.assert_allclose(net(x, y).asnumpy(), np.maximum(x.asnumpy() @ y.asnumpy(), 0), rtol=1e-5)
    assert ran == [1]


def test_the_debugger_and_event_listeners_see_every_instruction(level, rng):
    """With a trace hook installed or an event subscriber, a replayed signature runs in the
    interpreter again: the hook sees each instruction, the listener gets its exec event."""
    level("auto")
    net = DynamicMatmulCell()
    x, y = (ms.Tensor(rng.standard_normal(s).astype(np.float32)) for s in ((4, 5), (5, 3)))
    for _ in range(3):
        net(x, y)
    assert callable(_entries(net)[0][3])
    seen = []
    old = set_trace(lambda f, pc: seen.append(pc))
    try:
        net(x, y)
    finally:
        set_trace(old)
    assert len(seen) == len(_entries(net)[0][1].code.instrs)
    got = []
    unsub = events.subscribe(got.append, types=("exec",))
    try:
        net(x, y)
    finally:
        unsub()
    assert [e["code"] for e in got] == ["DynamicMatmulCell.construct"]


def test_an_error_inside_a_replay_names_its_instruction(level, rng):
    """A weight replaced by one of another shape after the replay was written: the call falls
    back to the interpreter, whose error names the matmul and its source line, the same error
    as a Cell that never replayed."""
    level("auto")
    x = ms.Tensor(rng.standard_normal((3, 6)).astype(np.float32))
    errors = []
    for replayed in (True, False):
        net = Inner(6)
        for _ in range(3):
            net(x)
        (e,) = _entries(net)
        assert callable(e[3])
        if not replayed:
            e[3] = False
        net.dense.weight.set_data(ms.Tensor(np.ones((6, 5), np.float32)))
        with pytest.raises(ms.ExecutionError) as err:
            net(x)
        errors.append(str(err.value))
    assert errors[0] == errors[1]
    assert "layers.py:" in errors[0] and "FUSED_MATMUL" in errors[0] and "Dense.construct" in errors[0]


def test_the_replay_is_built_once_per_signature(level, rng, monkeypatch):
    level("auto")
    built = []
    real = replay.build
    monkeypatch.setattr(replay, "build", lambda *a: built.append(1) or real(*a))
    net = DynamicMatmulCell()
    x, y = (ms.Tensor(rng.standard_normal(s).astype(np.float32)) for s in ((4, 5), (5, 3)))
    for _ in range(10):
        net(x, y, training=True)
    for _ in range(10):
        net(x, y, training=False)
    assert len(built) == 2
