"""The straight-line replay of a repeated call signature (interp/replay.py) through the
Cells' call memo: it runs above L1 only, gives the interpreter's answers, steps aside for the
debugger and for event listeners, and errors inside it still name their instruction."""

import msvm as ms
import numpy as np
import pytest
from cells import DynamicMatmulCell
from msvm import events, nn, ops
from msvm.compiler import tiers
from msvm.interp import capture, replay
from msvm.interp.interpreter import set_trace


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
    answer is numpy's, and each signature seen four times runs a replay without branches."""
    level(jit_level)
    net = Outer(8)
    calls = [(b, k, t) for b in (3, 6) for k in (0, 2) for t in (True, False)] * 4
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
        assert callable(e.replay), "a signature seen four times has a replay"
        lines = [ln.strip() for ln in e.replay.source.splitlines()]
        # sub-Cells run their own replays; no branch of the program is left, only the guard's
        # and the remembered callers' tests
        assert any(ln.startswith("v1 = cell") for ln in lines)
        inner = [v for k, v in e.replay.__globals__.items() if k.startswith("cell")][0]
        assert [r for c in inner.__closure__ if isinstance(c.cell_contents, dict)
                for r in c.cell_contents.values() if callable(r)], "the sub-Cell replays too"
        ours = ("if J[", "if g is not None", "if E[2]", "if e is not None", "if n is not None", "if o is None",
                "if o is not",        # (the memory plan's: a result that is not the arena view it was given)
                "if C.on", "if r is not MISS")      # (the capture's: interp/capture.py)
        assert not [ln for ln in lines if ln.startswith(("if ", "for ", "while ")) and not ln.startswith(ours)]


def test_l1_runs_the_interpreter(level, rng):
    """jit_level L1 is the interpreter itself: a replay, even one already built, is not run."""
    level("auto")
    net = DynamicMatmulCell()
    x, y = (ms.Tensor(rng.standard_normal(s).astype(np.float32)) for s in ((4, 5), (5, 3)))
    for _ in range(3):
        net(x, y)
    (e,) = _entries(net)
    ran = []
    real = e.replay
    e.replay = lambda *a: ran.append(1) or real(*a)
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
    assert callable(_entries(net)[0].replay)
    seen = []
    old = set_trace(lambda f, pc: seen.append(pc))
    try:
        net(x, y)
    finally:
        set_trace(old)
    assert len(seen) == len(_entries(net)[0].bound.code.instrs)
    got = []
    unsub = events.subscribe(got.append, types=("exec",))
    try:
        net(x, y)
    finally:
        unsub()
    assert [e["code"] for e in got] == ["DynamicMatmulCell.construct"]


class _Sum(nn.Cell):
    def construct(self, x):
        return ops.mean(ops.relu(x * 2.0), -1)


def test_an_error_inside_a_replay_names_its_instruction(level, rng, monkeypatch):
    """A kernel that starts failing after the replay was written: the call falls back to the
    interpreter, whose error names the instruction and its source line, the same error as a
    Cell that never replayed."""
    from msvm.interp import kernels as K

    real, broken = K.KERNELS["REDUCE_MEAN"], []

    def mean(*a, **kw):
        if broken:
            raise FloatingPointError("injected")
        return real(*a, **kw)
    monkeypatch.setitem(K.KERNELS, "REDUCE_MEAN", mean)
    level("auto")
    x = ms.Tensor(rng.standard_normal((3, 6)).astype(np.float32))
    errors = []
    for replayed in (True, False):
        broken.clear()
        net = _Sum()
        for _ in range(3):
            net(x)
        (e,) = _entries(net)
        assert callable(e.replay)
        if not replayed:
            e.replay = False
        broken.append(1)
        with pytest.raises(ms.ExecutionError) as err:
            net(x)
        errors.append(str(err.value))
    assert errors[0] == errors[1]
    assert "test_replay.py:" in errors[0] and "REDUCE_MEAN" in errors[0] and "injected" in errors[0]


def test_the_replay_is_built_once_per_signature(level, rng, monkeypatch):
    level("auto")
    built = []
    real = replay.build
    # (the capture's recording variant, record=True, is built once more: interp/capture.py)
    monkeypatch.setattr(replay, "build", lambda *a, **k: (k.get("record") or built.append(1)) and None or real(*a, **k))
    net = DynamicMatmulCell()
    x, y = (ms.Tensor(rng.standard_normal(s).astype(np.float32)) for s in ((4, 5), (5, 3)))
    for _ in range(10):
        net(x, y, training=True)
    for _ in range(10):
        net(x, y, training=False)
    assert len(built) == 2


def test_a_path_written_again_at_new_sizes_is_compiled_once(level, rng, monkeypatch):
    """Each size of one path writes the same text (its shapes are names bound in its namespace,
    not literals: interp/source.py): Python compiles it once, and each size's replay still has its
    own constants and gives its own answers."""
    level("auto")
    from msvm.interp import source

    compiled = []
    real = compile
    monkeypatch.setattr(source, "compile", lambda *a: compiled.append(a[:2]) or real(*a), raising=False)
    monkeypatch.setattr(source, "_CODES", {})
    net = Outer(8)
    outs = {}
    for b in (5, 6, 7):
        x = rng.standard_normal((b, 8)).astype(np.float32)
        for _ in range(4):
            outs[b] = (net(ms.Tensor(x), 2, training=True).asnumpy(), _outer_ref(net, x, 2, True))
    for out, want in outs.values():
        np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-5)
    reps = [e.replay for e in _entries(net)]
    assert len(reps) == 3 and all(callable(r) for r in reps)
    assert len({r.__code__ for r in reps}) == 1, "one compiled path for every size"
    assert len({id(r.__globals__) for r in reps}) == 3, "each size binds its own constants"
    assert len(compiled) == len(set(compiled)), "no text compiled twice"
    assert [f for _src, f in compiled].count("<msvm replay of Outer.construct>") in (1, 2)   # (2: a capture's too)


class _Flip(nn.Cell):
    def construct(self, x):
        return ops.transpose(x * 2.0, (1, 0))     # a view: the caller gets a non-contiguous tensor


class _Rows(nn.Cell):
    def construct(self, x):
        return ops.softmax(ops.relu(x + 1.0), -1) * 3.0


@pytest.mark.parametrize("settle_every", [1, 2, 5])
def test_remembered_callers_follow_layouts_and_kernels_coming_ready(level, rng, settle_every, monkeypatch):
    """Inputs of one shape in two layouts (a transposed view from another Cell, a contiguous
    array), kernels becoming ready at different points of the stream (L3 after one call): each
    answer is numpy's. A replay calls a site's remembered caller only for the strides it was
    prepared for (an intermediate's layout changes when the kernel before it comes ready), and
    drops them when the level moves (the replay itself, not a captured program of it: no capture)."""
    monkeypatch.setattr(capture, "ENABLED", False)
    level("auto")
    ms.set_context(jit_config={"l3_after": 1})
    try:
        flip, rows = _Flip(), _Rows()
        for step in range(24):
            base = rng.standard_normal((4, 6)).astype(np.float32)
            x = flip(ms.Tensor(base)) if step % 2 else ms.Tensor((base * 2).T.copy())
            assert x.asnumpy().flags["C_CONTIGUOUS"] == (step % 2 == 0)
            h = np.maximum(base.T * 2 + 1, 0)
            e = np.exp(h - h.max(-1, keepdims=True))
            np.testing.assert_allclose(rows(x).asnumpy(), e / e.sum(-1, keepdims=True) * 3, rtol=2e-5, atol=2e-6)
            if step % settle_every == 0:
                tiers.wait_for_compiles()
            if step == 16:
                level("L2")
            if step == 20:
                level("auto")
        remembered = [e.replay.__globals__["G"] for e in _entries(rows)]
        assert len(remembered) == 2 and any(g is not None for G in remembered for g in G)
    finally:
        ms.set_context(jit_config={"l3_after": 5})


@pytest.fixture
def settled(level, rng):
    """An _Affine Cell whose L3 kernels are ready and whose replay remembers their callers."""
    level("auto")
    ms.set_context(jit_config={"l3_after": 1})
    net = _Affine(5)
    x = ms.Tensor(rng.standard_normal((3, 5)).astype(np.float32))
    for _ in range(6):
        net(x)
        tiers.wait_for_compiles()
    yield net, x
    ms.set_context(jit_config={"l3_after": 5})


class _Affine(nn.Cell):
    def __init__(self, n):
        super().__init__()
        self.w = ms.Parameter(ms.Tensor(np.eye(n, dtype=np.float32)))
        self.b = ms.Parameter(ms.Tensor(np.zeros(n, np.float32)))

    def construct(self, x):
        return ops.relu(ops.matmul(x, self.w) + self.b) * 0.5


def test_a_new_parameter_array_drops_the_remembered_callers(settled, rng):
    """set_data gives a Parameter a new array: the replay reads it and answers with it."""
    net, x = settled
    (e,) = _entries(net)
    assert all(g is not None for g in e.replay.__globals__["G"])
    for _ in range(3):
        w = rng.standard_normal((5, 5)).astype(np.float32)
        net.w.set_data(ms.Tensor(w))
        want = np.maximum(x.asnumpy() @ w + net.b.asnumpy(), 0) * 0.5
        for _ in range(2):
            np.testing.assert_allclose(net(x).asnumpy(), want, rtol=1e-5, atol=1e-6)


def test_a_parameter_of_another_shape_is_verified_again(settled, rng):
    """set_data with another shape: the Cell's bytecode was verified for the old one, so it is
    compiled and verified again. A weight that no longer fits its bias is reported at the add's
    source line before anything runs (a compiled epilogue used to read past the bias); weight
    and bias changed together give numpy's answer at the new shape."""
    net, x = settled
    w = rng.standard_normal((5, 7)).astype(np.float32)
    net.w.set_data(ms.Tensor(w))
    with pytest.raises(ms.FrontendError, match=r"test_replay.py:\d+:\d+: BROADCAST_ADD: cannot broadcast"):
        net(x)
    b = rng.standard_normal(7).astype(np.float32)
    net.b.set_data(ms.Tensor(b))
    for _ in range(4):
        np.testing.assert_allclose(net(x).asnumpy(), np.maximum(x.asnumpy() @ w + b, 0) * 0.5, rtol=1e-5)
        tiers.wait_for_compiles()
