"""The captured forward (interp/capture.py): a top-level replay recorded once and run again as one
straight program. Every answer against the interpreter (L1) and numpy: new images at every call with
NaN and inf, random source programs; results the caller keeps are never overwritten; the program is
dropped for a new Parameter array or a weight made writable, is not run on another thread, at another
jit_level or for a strided input, nor kept where it would copy more than it saves. Each test checks
that a program ran (a test that passed without one would test nothing)."""

import threading

import msvm as ms
import numpy as np
import pytest
from attention_cells import STYLES, numpy_style, style_inputs
from msvm import nn, ops
from msvm.compiler import tiers
from msvm.interp import capture
from random_programs import SOURCE_ARGS, SourceProgram, source_case, source_inputs
from special_values import assert_numpy_equal


@pytest.fixture(autouse=True)
def eager(monkeypatch):
    """Record after one replay (the default waits for CAPTURE_AFTER), and count the programs' runs."""
    monkeypatch.setattr(capture, "CAPTURE_AFTER", 1)
    monkeypatch.setattr(capture, "ENABLED", True)
    runs = {"n": 0}
    real = capture.Slot.__call__

    def counted(self, *args):
        ran = self.program is not None
        r = real(self, *args)
        if ran and r is not capture.MISS:
            runs["n"] += 1
        return r
    monkeypatch.setattr(capture.Slot, "__call__", counted)
    return runs


class Block(nn.Cell):
    """A residual block: 3x3 conv + BN + ReLU, depthwise 3x3, 1x1 + BN, the input added."""

    def __init__(self, c):
        super().__init__()
        self.body = nn.SequentialCell([nn.Conv2d(c, c, 3, pad_mode="same", has_bias=False), nn.BatchNorm2d(c), nn.ReLU(),
                                       nn.Conv2d(c, c, 3, pad_mode="same", group=c, has_bias=False), nn.ReLU6(),
                                       nn.Conv2d(c, c, 1, has_bias=False), nn.BatchNorm2d(c)])

    def construct(self, x):
        return ops.relu(x + self.body(x))


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.stem = nn.SequentialCell([nn.Conv2d(3, 8, 3, stride=2, pad_mode="pad", padding=1), nn.BatchNorm2d(8),
                                       nn.ReLU()])
        self.pool = nn.MaxPool2d(3, 2, pad_mode="same")
        self.a, self.b = Block(8), Block(8)
        self.fc = nn.Dense(8, 5)

    def construct(self, x):
        h = self.b(self.a(self.pool(self.stem(x))))
        return self.fc(ops.flatten(h.mean((2, 3), keep_dims=True)))


def _net():
    net = Net()
    net.set_train(False)
    rng = np.random.default_rng(3)
    for p in net.get_parameters():
        v = rng.standard_normal(p.shape)
        p.set_data(ms.Tensor((np.abs(v) + 0.5 if "variance" in p.name else v * 0.5).astype(np.float32)))
    return net


def _images(rng, n):
    xs = []
    for i in range(n):
        x = rng.standard_normal((2, 3, 13, 11)).astype(np.float32)
        if i % 3 == 1:
            x[0, 0, 0, :3] = [np.nan, np.inf, -np.inf]
        xs.append(x)
    return xs


def _answers(net, xs, level):
    ms.set_context(jit_config={"jit_level": level})
    with np.errstate(all="ignore"):
        return [net(ms.Tensor(x)).asnumpy() for x in xs]


def _slot(net):
    (sig,) = net.__dict__["_runner"].memo.values()
    return sig.replay.__globals__["C"] if sig.replay else None


def _settle(net, x, most=80):
    """Call until the forward is captured (its sites compiled at L3 first), or ``most`` calls."""
    ms.set_context(jit_config={"jit_level": "auto"})
    for _ in range(most):
        with np.errstate(all="ignore"):
            net(ms.Tensor(x))
        tiers.wait_for_compiles()
        slot = _slot(net)
        if slot is not None and (slot.program is not None or not slot.on):
            return


def test_a_captured_forward_answers_as_the_interpreter(eager):
    net, rng = _net(), np.random.default_rng(0)
    xs = _images(rng, 12)
    want = _answers(net, xs, "L1")
    _settle(net, xs[0])
    laid = _slot(net).program.laid
    assert laid is not None and laid[1] < laid[0], laid     # (the buffers the steps made, laid out by lifetime)
    got = _answers(net, xs, "auto")
    for g, w, x in zip(got, want, xs):
        assert_numpy_equal(g, w, rtol=2e-5, atol=2e-5)
        assert np.isnan(g).any() == np.isnan(x).any()
    assert eager["n"] >= len(xs)
    again = _answers(net, xs[:3], "auto")      # (the kept answers were not written over by later calls)
    for g, w in zip(got[:3] + again, want[:3] * 2):
        assert_numpy_equal(g, w, rtol=2e-5, atol=2e-5)


def test_a_new_parameter_array_or_a_writable_one_drops_the_program(eager):
    net, rng = _net(), np.random.default_rng(1)
    x = _images(rng, 1)[0]
    _settle(net, x)
    slot = _slot(net)
    assert slot.program is not None
    w = net.fc.weight
    w.set_data(ms.Tensor(rng.standard_normal(w.shape).astype(np.float32)))
    want = _answers(net, [x], "L1")[0]
    assert_numpy_equal(_answers(net, [x], "auto")[0], want, rtol=2e-5, atol=2e-5)
    _settle(net, x)
    slot = _slot(net)
    assert slot.program is not None          # (recorded again with the new array)
    arr = net.b.body[0].weight._data
    assert arr.flags.owndata                 # (a Parameter's own array: numpy can make it writable)
    arr.flags.writeable = True
    arr *= -1.5
    runs = eager["n"]
    want = _answers(net, [x], "L1")[0]
    assert_numpy_equal(_answers(net, [x], "auto")[0], want, rtol=2e-5, atol=2e-5)
    assert eager["n"] == runs and slot.program is None


def test_another_thread_and_another_level_run_the_replay(eager):
    net, rng = _net(), np.random.default_rng(2)
    xs = _images(rng, 6)
    want = _answers(net, xs, "L1")
    _settle(net, xs[0])
    assert _slot(net).program is not None
    got, errors = {}, []

    def worker(k):
        try:
            with np.errstate(all="ignore"):
                got[k] = [net(ms.Tensor(x)).asnumpy() for x in xs]
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
    ms.set_context(jit_config={"jit_level": "auto"})
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    mine = _answers(net, xs, "auto")
    for t in threads:
        t.join()
    assert not errors
    for answers in [mine, *got.values()]:
        for g, w in zip(answers, want):
            assert_numpy_equal(g, w, rtol=2e-5, atol=2e-5)
    runs = eager["n"]
    for g, w in zip(_answers(net, xs, "L2"), want):
        assert_numpy_equal(g, w, rtol=2e-5, atol=2e-5)
    assert eager["n"] == runs                 # (recorded at auto: L2 runs the replay)


def test_a_thread_that_reuses_an_exited_threads_identifier_does_not_run_its_program(eager):
    """A program recorded on a thread points into that thread's arenas and convolution workspaces,
    freed when it exits; the next thread often gets the same identifier. That thread never runs the
    exited thread's program: the program is dropped, the call replays (and answers as the
    interpreter), and a program of the caller's own is recorded."""
    from test_conv_memo import run_on_a_thread_with_the_identifier_of

    net, rng = _net(), np.random.default_rng(6)
    xs = _images(rng, 3)
    want = _answers(net, xs, "L1")
    ms.set_context(jit_config={"jit_level": "auto"})
    first, ran = {}, []

    def a():
        first["id"] = threading.get_ident()
        _settle(net, xs[0])
        first["program"] = p = _slot(net).program
        fn = p.fn
        p.fn = lambda: (ran.append(1), fn())[1]
    t = threading.Thread(target=a)
    t.start()
    t.join()
    assert first["program"] is not None

    def b():
        with np.errstate(all="ignore"):
            out = [net(ms.Tensor(x)).asnumpy() for x in xs]
        p = _slot(net).program
        return out, p is None or p.owner() is capture._stack()
    r = run_on_a_thread_with_the_identifier_of(first["id"], b)
    assert r is not None, "no new thread got the exited thread's identifier"
    assert not ran, "the exited thread's program ran on the new one"
    assert r[1] and _slot(net).program is not first["program"]
    for g, w in zip(r[0], want):
        assert_numpy_equal(g, w, rtol=2e-5, atol=2e-5)
    _settle(net, xs[0])                       # (and on this thread: a program of its own)
    assert _slot(net).program is not None and _slot(net).program.owner() is capture._stack()
    runs = eager["n"]
    for g, w in zip(_answers(net, xs, "auto"), want):
        assert_numpy_equal(g, w, rtol=2e-5, atol=2e-5)
    assert eager["n"] == runs + len(xs)
    assert not ran


def _sites(net):
    """Every tier Site of the net's Cells (their runners' bound codes)."""
    out = []
    for _name, cell in net.cells_and_names():
        runner = cell.__dict__.get("_runner")
        for var in (runner.variants.values() if runner is not None else ()):
            for bound in [var.bound, *var.runs.values()]:
                for code in bound.code.all_codes() if bound is not None else ():
                    out += [s for s in code.jit_sites.values() if isinstance(s, tiers.Site)]
    return out


def test_a_stream_of_more_sizes_than_a_site_specializes_is_captured_at_each(eager):
    """Four image sizes in turn (more than L3_SHAPES): the convolution sites go polymorphic and stay on
    their L2 kernels, whose callers are then final, so every size's forward is still captured, and
    each answers as the interpreter (NaN and inf in one image)."""
    net, rng = _net(), np.random.default_rng(5)
    sizes = [(13, 11), (9, 9), (16, 7), (11, 14)]
    xs = {hw: rng.standard_normal((2, 3) + hw).astype(np.float32) for hw in sizes}
    xs[(9, 9)][1, 2, 0, :2] = [np.nan, np.inf]
    want = {hw: _answers(net, [x], "L1")[0] for hw, x in xs.items()}
    ms.set_context(jit_config={"jit_level": "auto"})
    memo = net.__dict__["_runner"].memo
    for _ in range(60):
        _answers(net, xs.values(), "auto")
        tiers.wait_for_compiles()
        slots = [sig.replay.__globals__["C"] for sig in memo.values() if sig.replay]
        if len(slots) == len(sizes) and all(s.program is not None for s in slots):
            break
    assert [s.why for s in slots] == [None] * len(sizes) and all(s.program is not None for s in slots)
    conv = [s for s in _sites(net) if s.op == "FUSED_CONV"]
    assert conv and all(s.polymorphic and not any(isinstance(k, tiers.Compiled) for k in s.l3.values())
                        for s in conv)
    runs = eager["n"]
    for _ in range(2):
        got = {hw: _answers(net, [x], "auto")[0] for hw, x in xs.items()}
        for hw in sizes:
            assert_numpy_equal(got[hw], want[hw], rtol=2e-5, atol=2e-5)
    assert eager["n"] - runs == 2 * len(sizes)


def test_a_cell_keeps_at_most_programs_most_programs(eager, monkeypatch):
    """Each program holds its own buffers: a Cell called at more signatures than PROGRAMS_MOST captures
    that many, replays the rest (and says why), answers each as the interpreter; a program dropped
    (a new Parameter array) makes room for another."""
    monkeypatch.setattr(capture, "PROGRAMS_MOST", 2)
    net, rng = _net(), np.random.default_rng(8)
    xs = [rng.standard_normal((1, 3, 9 + k, 10)).astype(np.float32) for k in range(4)]
    want = _answers(net, xs, "L1")
    memo = net.__dict__["_runner"].memo
    for _ in range(40):
        _answers(net, xs, "auto")
        tiers.wait_for_compiles()
    slots = [sig.replay.__globals__["C"] for sig in memo.values() if sig.replay]
    kept = [sl for sl in slots if sl.program is not None]
    assert len(slots) == 4 and len(kept) == 2 and slots[0].alive == [2]
    assert all("MSVM_CAPTURE_PROGRAMS=2" in sl.why for sl in slots if sl.program is None)
    for g, w in zip(_answers(net, xs, "auto"), want):
        assert_numpy_equal(g, w, rtol=2e-5, atol=2e-5)
    w = net.fc.weight
    w.set_data(ms.Tensor(w.asnumpy() * 2))
    want = _answers(net, xs, "L1")
    _answers(net, xs, "auto")                   # (the two programs are stale: dropped)
    assert slots[0].alive == [0]
    for sl in slots:
        sl.on, sl.count, sl.tries, sl.wait = True, 0, 0, 1
    for _ in range(3):
        got = _answers(net, xs, "auto")
    assert slots[0].alive == [2]
    for g, w in zip(got, want):
        assert_numpy_equal(g, w, rtol=2e-5, atol=2e-5)


class WithTable(nn.Cell):
    """An attention block that also returns a Parameter (as BertModel returns its embedding table)."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner
        self.table = ms.Parameter(ms.Tensor(np.arange(12, dtype=np.float32).reshape(3, 4)), name="table")

    def construct(self, q, k, v, mask):
        return self.inner(q, k, v, mask), self.table


@pytest.mark.parametrize("style", sorted(STYLES))
def test_attention_is_captured_at_each_length(eager, style):
    """BERT's, GPT-2's and LLaMA's attention at four lengths in turn (more than L3_SHAPES): each length's
    forward is captured with its attention site's final kernels, and answers as the interpreter and
    float64 numpy (NaN in one query); the Parameter it returns is returned as it is, not copied."""
    rng = np.random.default_rng(6)
    h, d = 2, 8
    net = WithTable(STYLES[style](d))
    ins = {s: style_inputs(rng, style, 2, s, h, d) for s in (5, 7, 9, 11)}
    ins[7][0][1, 2, 0, 0] = np.nan
    ms.set_context(jit_config={"jit_level": "L1"})
    with np.errstate(all="ignore"):
        want = {s: net(*map(ms.Tensor, a))[0].asnumpy() for s, a in ins.items()}
    ms.set_context(jit_config={"jit_level": "auto"})
    memo = net.__dict__["_runner"].memo
    for _ in range(60):
        with np.errstate(all="ignore"):
            for a in ins.values():
                net(*map(ms.Tensor, a))
        tiers.wait_for_compiles()
        slots = [sig.replay.__globals__["C"] for sig in memo.values() if sig.replay]
        if len(slots) == len(ins) and all(sl.program is not None for sl in slots):
            break
    assert [sl.why for sl in slots] == [None] * len(ins) and all(sl.program is not None for sl in slots)
    runs = eager["n"]
    for _ in range(2):
        for s, a in ins.items():
            with np.errstate(all="ignore"):
                out, table = net(*map(ms.Tensor, a))
            got = out.asnumpy()
            assert_numpy_equal(got, want[s], rtol=2e-5, atol=2e-6)
            ref = numpy_style(style, *a, d)
            fin = np.isfinite(ref)
            assert np.isnan(got[~fin]).all() and np.allclose(got[fin], ref[fin], rtol=1e-4, atol=1e-5)
            assert table._data is net.table._data          # (the Parameter itself: asnumpy would copy it)
    assert eager["n"] - runs == 2 * len(ins)


class Flip(nn.Cell):
    def construct(self, x):
        return ops.transpose(x * 2.0, (0, 1, 3, 2))     # a view: the next Cell gets a strided tensor


def test_a_strided_input_or_large_copies_are_not_captured(eager):
    net, flip, rng = _net(), Flip(), np.random.default_rng(4)
    x = _images(rng, 1)[0]
    xt = np.ascontiguousarray(x.transpose(0, 1, 3, 2) / 2)
    want = _answers(net, [x], "L1")[0]
    ms.set_context(jit_config={"jit_level": "auto"})
    for _ in range(40):
        t = flip(ms.Tensor(xt))
        assert not t.asnumpy().flags.c_contiguous
        with np.errstate(all="ignore"):
            assert_numpy_equal(net(t).asnumpy(), want, rtol=2e-5, atol=2e-5)
        tiers.wait_for_compiles()
    sigs = [sig for sig in net.__dict__["_runner"].memo.values() if sig.replay]
    assert sigs
    for sig in sigs:
        slot = sig.replay.__globals__["C"]
        assert not slot.on and slot.program is None and "contiguous" in slot.why

    @ms.jit
    def chain(a, b):
        return ops.relu(a * 1.5 + b)
    a, b = (rng.standard_normal((512, 1024)).astype(np.float32) for _ in range(2))
    for _ in range(60):
        out = chain(ms.Tensor(a), ms.Tensor(b)).asnumpy()
        np.testing.assert_allclose(out, np.maximum(a * 1.5 + b, 0), rtol=1e-6)
        tiers.wait_for_compiles()
        (sig,) = chain._runner.memo.values()
        if sig.replay and not sig.replay.__globals__["C"].on:
            break
    slot = sig.replay.__globals__["C"]
    assert not slot.on and slot.program is None and "bytes copied" in slot.why    # (6 MB for one kernel)


def _source_calls(seed, most=40):
    """(program, its answers to the seed's inputs at auto, called until captured or refused, the
    slots of its replays), after checking each answer against numpy's and L1's."""
    prog = SourceProgram(seed)
    mod = prog.load()
    env = source_inputs(*source_case(seed)[:4], seed, source_case(seed)[4])
    args = [ms.Tensor(env[k]) for k in SOURCE_ARGS]
    want = prog.ref(env)
    ms.set_context(jit_config={"jit_level": "L1"})
    with np.errstate(all="ignore"):
        first = [g.asnumpy() for g in ms.jit(mod.prog)(*args)]
    ms.set_context(jit_config={"jit_level": "auto"})
    f = ms.jit(mod.prog)
    for call in range(most):
        with np.errstate(all="ignore"):
            got = [g.asnumpy() for g in f(*args)]
        for g, r, l1 in zip(got, want, first):
            assert_numpy_equal(g, r, rtol=2e-4, atol=1e-4, msg=f"call {call}\n{prog.source()}")
            assert_numpy_equal(g, l1, rtol=2e-5, atol=2e-5, msg=f"against L1, call {call}\n{prog.source()}")
        tiers.wait_for_compiles(30)
        slots = [s.replay.__globals__["C"] for s in f._runner.memo.values() if s.replay]
        if call > 4 and all(c.program is not None or not c.on for c in slots):
            break
    return slots


@pytest.mark.filterwarnings("ignore:Mean of empty slice")
@pytest.mark.parametrize("seed", range(1, 80, 4))
def test_random_source_programs_captured(eager, seed):
    """The random source programs (conv2d, pooling, gather, indexing, split, helpers plain, @ms.jit and
    factory-made, defaults omitted) at auto, called until captured: every answer is numpy's and L1's,
    before and after; a replay either has a program or says why it has none."""
    for c in _source_calls(seed):
        assert c.program is not None or (not c.on and c.why)


@pytest.mark.filterwarnings("ignore:Mean of empty slice")
def test_random_source_programs_are_captured_at_all(eager):
    """(The test above would pass with nothing captured: most of these programs are.)"""
    made = [any(c.program is not None for c in _source_calls(seed)) for seed in range(0, 80, 8)]
    assert sum(made) >= len(made) // 2, made


class WithConstant(nn.Cell):
    """A tensor made in construct from no input (FILL: the program never makes it again), used after
    sub-Cells whose results are laid out by lifetime (found on mindcv's DenseNet-121)."""

    def __init__(self):
        super().__init__()
        self.a, self.b = Block(8), Block(8)
        self.stem = nn.Conv2d(3, 8, 3, pad_mode="same")

    def construct(self, x):
        ones = ops.ones((x.shape[0], 8, x.shape[2], x.shape[3]), ms.float32)
        return self.b(self.a(self.stem(x)) + ones) * ones


def test_a_constant_made_in_construct_keeps_its_value(eager):
    net, rng = WithConstant(), np.random.default_rng(6)
    net.set_train(False)
    xs = _images(rng, 12)
    want = _answers(net, xs, "L1")
    _settle(net, xs[1])                        # (recorded on an image with NaN in it)
    assert _slot(net).program is not None
    for g, w in zip(_answers(net, xs, "auto"), want):
        assert_numpy_equal(g, w, rtol=2e-5, atol=2e-5)
