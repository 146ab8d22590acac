"""A hot site's shape-generic kernels compiled again optimized (compiler/tiers.py ``Site._promote``,
issue 18): once a site's first specialized (L3) kernel lands, each of its L2 kernels compiled light (O0, no
IR passes) is compiled again with the IR passes and O3 in the background, after every other queued
compile, and put in its place, with a compile record that says why -- so a site whose shapes then keep
changing past L3_SHAPES, which keeps its L2 kernels for good, runs them optimized at once; replays and
captured programs made before drop the light kernel's callers (events.KERNELS_MOVED). Every answer
against the interpreter (L1), with NaN, inf and -0.0, before and after the swap; on an elementwise
chain, a layer norm and a Dense + GELU."""

import msvm as ms
import numpy as np
import pytest
from msvm import events, nn, ops
from msvm.compiler import tiers
from msvm.interp import capture
from special_values import assert_numpy_equal


class Chain(nn.Cell):
    def construct(self, x):
        return ops.tanh(x * 2.0 + 1.0) - x * x


class Norm(nn.Cell):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm((16,))

    def construct(self, x):
        return self.norm(x) * 3.0


class DenseGelu(nn.Cell):
    def __init__(self):
        super().__init__()
        self.dense = nn.Dense(16, 40)
        self.act = nn.GELU()

    def construct(self, x):
        return self.act(self.dense(x))


NETS = {"chain": Chain, "norm": Norm, "dense_gelu": DenseGelu}


def _sites(net):
    out = []
    for var in net.__dict__["_runner"].variants.values():
        for bound in [var.bound, *var.runs.values()]:
            for code in bound.code.all_codes() if bound is not None else ():
                out += [s for s in code.jit_sites.values() if isinstance(s, tiers.Site)]
    return out


def _inputs(rng, lengths):
    xs = {}
    for s in lengths:
        x = rng.standard_normal((2, s, 16)).astype(np.float32)
        x[0, 0, :3] = [np.nan, np.inf, -0.0]
        xs[s] = x
    return xs


def _answers(net, xs, level):
    ms.set_context(jit_config={"jit_level": level})
    return {s: net(ms.Tensor(x)).asnumpy() for s, x in xs.items()}


@pytest.mark.parametrize("name", sorted(NETS))
def test_a_polymorphic_sites_light_kernels_are_compiled_again_optimized(name, monkeypatch):
    monkeypatch.setattr(capture, "CAPTURE_AFTER", 1)
    monkeypatch.setattr(capture, "ENABLED", True)
    net, rng = NETS[name](), np.random.default_rng(7)
    first = _inputs(rng, (5,))
    want = _answers(net, first, "L1")
    moved = events.KERNELS_MOVED[0]
    for _ in range(12):                           # one length: specialized (L3), replayed, captured
        got = _answers(net, first, "auto")
        tiers.wait_for_compiles(60)
    assert_numpy_equal(got[5], want[5], rtol=1e-5, atol=1e-5)
    hot = [s for s in _sites(net) if any(isinstance(k, tiers.Compiled) for k in s.l3.values())]
    assert hot
    for site in hot:                              # (already optimized: ahead of any other shape)
        assert all(k.kernel.opt_level == 3 for k in site.l2.values() if isinstance(k, tiers.Compiled)), site.name
        assert any(r.kind == "hot" and "O3" in r.text for key, r in site.why.items() if key[0] == 2), site.name
    xs = _inputs(rng, (3, 7, 9, 12, 5))
    want = _answers(net, xs, "L1")
    for _ in range(6):                            # more lengths than L3_SHAPES: polymorphic
        got = _answers(net, xs, "auto")
        for s in xs:
            assert_numpy_equal(got[s], want[s], rtol=1e-5, atol=1e-5)
        tiers.wait_for_compiles(60)
    sites = [s for s in _sites(net) if s.polymorphic]
    assert sites
    for site in sites:
        kernels = [k for k in site.l2.values() if isinstance(k, tiers.Compiled)]
        assert kernels and all(k.kernel.opt_level == 3 for k in kernels), site.name
        assert any(r.kind in ("hot", "polymorphic") and "O3" in r.text for key, r in site.why.items() if key[0] == 2)
        assert any(h.get("optimized") for h in site.tier_history)
        # (the callers made since are the optimized kernel's)
        assert all(p.compiled.kernel.opt_level == 3 for p in site.fast.values()
                   if p.compiled.level == 2), site.name
    assert events.KERNELS_MOVED[0] > moved
    for _ in range(3):                            # replays and programs made since: the same answers
        got = _answers(net, xs, "auto")
        for s in xs:
            assert_numpy_equal(got[s], want[s], rtol=1e-5, atol=1e-5)


def test_a_program_recorded_before_a_kernel_moved_is_stale():
    """events.KERNELS_MOVED: a captured program made before a site's kernel was replaced no longer runs
    (its steps call the replaced kernel's callers); the replay runs, then records again."""
    net, rng = Chain(), np.random.default_rng(3)
    x = _inputs(rng, (6,))
    for _ in range(16):
        _answers(net, x, "auto")
        tiers.wait_for_compiles(60)
    memo = net.__dict__["_runner"].memo
    (slot,) = [sig.replay.__globals__["C"] for sig in memo.values() if sig.replay]
    program, tries = slot.program, slot.tries
    assert program is not None and program.valid()
    events.KERNELS_MOVED[0] += 1
    assert not program.valid()
    got = _answers(net, x, "auto")[6]
    assert slot.program is None                   # (dropped at this call, which the replay answered)
    assert_numpy_equal(got, _answers(net, x, "L1")[6], rtol=1e-5, atol=1e-5)
    # (not counted against capture.TRIES: another model's promotions must not turn capturing off here)
    assert slot.tries == tries - 1 and slot.on
    for _ in range(2 * capture.CAPTURE_AFTER + 2):
        got = _answers(net, x, "auto")[6]
    assert slot.program is not None and slot.program is not program and slot.program.valid()
    assert_numpy_equal(got, _answers(net, x, "L1")[6], rtol=1e-5, atol=1e-5)


def test_a_compile_submitted_later_runs_after_every_other_queued_one():
    """build._Worker: a hot site's optimized L2 compile (``submit(later=True)``) waits for the compiles
    queued before and after it (another site's first kernel must not wait on it)."""
    import threading

    from msvm.compiler import build

    w = build._Worker()
    try:
        assert w.ready.wait(60)
        gate, ran = threading.Event(), []
        w.submit(gate.wait)                      # (holds the worker while the rest is queued)
        w.submit(lambda: ran.append("later 1"), later=True)
        w.submit(lambda: ran.append("first"))
        w.submit(lambda: ran.append("later 2"), later=True)
        w.submit(lambda: ran.append("second"))
        gate.set()
        assert w.drain(60)
        assert ran == ["first", "second", "later 1", "later 2"]
    finally:
        w.stop()
