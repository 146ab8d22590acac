"""The call path (callpath.py): each route (guard, replay, interpreter, and inside them a site's
prepared callers) is taken when it should be and says so in its records, and every route gives
the same answer, bit for bit, for the same call."""

import msvm as ms
import numpy as np
import pytest
from msvm import callpath, events, nn, ops
from msvm.compiler import callconv, entry, tiers
from msvm.interp.interpreter import set_trace


class Block(nn.Cell):
    """A matmul by a transposed weight with a bias and GELU, a flag-guarded ReLU, softmax and
    layer norm: each kind of compiled site."""

    def __init__(self, n=16):
        super().__init__()
        self.dense = nn.Dense(n, n)
        self.norm = nn.LayerNorm((n,))

    def construct(self, x, y, training=True):
        h = ops.gelu(self.dense(x))
        m = ops.matmul(h, y) * 0.5 + x
        if training:
            m = ops.relu(m)
        return self.norm(ops.softmax(m, -1) + h)


def _signature(net) -> callpath.Signature:
    (sig,) = net.__dict__["_runner"].memo.values()
    assert isinstance(sig, callpath.Signature)
    return sig


def _counts(sig) -> tuple:
    return sig.interpreted, sig.replays, sig.fallbacks


@pytest.mark.skipif(not entry.LAYOUT, reason="ndarray header layout not the probed one")
def test_each_route_is_taken_when_expected_and_recorded(rng):
    ms.set_context(jit_config={"l3_after": 2})
    try:
        net = Block()
        tx = ms.Tensor(rng.standard_normal((4, 16)).astype(np.float32))
        ty = ms.Tensor(rng.standard_normal((16, 16)).astype(np.float32))
        net(tx, ty, training=True)
        sig = _signature(net)
        assert _counts(sig) == (1, 0, 0) and sig.replay is None     # a new signature: the interpreter
        net(tx, ty, training=True)
        assert _counts(sig) == (2, 0, 0) and sig.replay is None
        net(tx, ty, training=True)              # REPLAY_AFTER interpreted calls: its replay is written
        assert _counts(sig) == (3, 0, 0) and callable(sig.replay)
        runner = net.__dict__["_runner"]
        for _ in range(12):                     # the replay runs and asks for its guard
            if runner.guard is not None:
                break
            net(tx, ty, training=True)
            tiers.wait_for_compiles()
        g = runner.guard
        assert isinstance(g, callpath.Guard) and g.signature is sig, "the replayed signature got its guard"
        assert net.__dict__["_guard"] is g, "the Cell holds the same guard"
        assert sig.replays >= 1 and sig.fallbacks == 0
        before = _counts(sig)
        for _ in range(3):
            out = net(tx, ty, training=True)    # the guard: nothing in Python counts it
        assert _counts(sig) == before and type(out) is ms.Tensor
        # a site's prepared callers: every compiled site has a Prepared for these inputs, with the
        # native entry the replay calls; the replay remembers those Prepared
        sites = [s for c in sig.bound.code.all_codes() for s in c.__dict__.get("jit_sites", {}).values()]
        assert sites and all(s.fast for s in sites)
        assert all(isinstance(p, callconv.Prepared) for s in sites for p in s.fast.values())
        remembered = [p for p in sig.replay.__globals__["G"] if p is not None]
        assert remembered and all(isinstance(p, callconv.Prepared) and isinstance(p.native, callconv.Native)
                                  for p in remembered)
        # another flag value is another signature; the guard refuses it
        net(tx, ty, training=False)
        assert len(runner.memo) == 2 and _counts(sig) == before
    finally:
        ms.set_context(jit_config={"l3_after": 5})


@pytest.mark.skipif(not entry.LAYOUT, reason="ndarray header layout not the probed one")
def test_every_route_gives_the_same_answer(rng):
    """The same call by each route, the route checked in the records: guard, replay (the guard
    dropped), the runner with its values bound by keyword, the interpreter (an event subscriber,
    a trace hook), jit_level L2 (the replay's L2 callers) — all equal, bit for bit, to the first
    answer of the steady state; L1 and numpy agree to rounding."""
    ms.set_context(jit_config={"l3_after": 2})
    try:
        net = Block()
        x = rng.standard_normal((5, 16)).astype(np.float32)
        y = rng.standard_normal((16, 16)).astype(np.float32)
        tx, ty = ms.Tensor(x), ms.Tensor(y)
        runner = net.__dict__["_runner"]
        for _ in range(12):
            net(tx, ty, True)
            tiers.wait_for_compiles()
            runner = net.__dict__["_runner"]
            if runner.guard is not None:
                break
        sig = _signature(net)
        assert runner.guard is not None
        answers = {}
        before = _counts(sig)
        answers["guard"] = net(tx, ty, True).asnumpy()
        assert _counts(sig) == before
        callpath.point(runner, None)              # no guard: the runner's memo and its replay
        answers["replay"] = net(tx, ty, True).asnumpy()
        assert _counts(sig) == (before[0], before[1] + 1, 0)
        assert runner.guard is not None, "the replay points the guard at its signature again"
        answers["by keyword"] = net(tx, training=True, y=ty).asnumpy()    # bound by the runner, then its guard
        seen = []
        unsubscribe = events.subscribe(seen.append, {"exec"})
        try:
            answers["interpreter (events)"] = net(tx, ty, True).asnumpy()
        finally:
            unsubscribe()
        assert seen and _counts(sig)[0] == before[0] + 1
        old = set_trace(lambda *a: None)
        try:
            answers["interpreter (trace)"] = net(tx, ty, True).asnumpy()
        finally:
            set_trace(old)
        assert _counts(sig)[0] == before[0] + 2
        first = answers["guard"]
        for route, got in answers.items():
            np.testing.assert_array_equal(got, first, err_msg=f"the {route} route disagrees with the guard")
        ms.set_context(jit_config={"jit_level": "L1"})
        l1 = net(tx, ty, True).asnumpy()
        np.testing.assert_allclose(l1, first, rtol=2e-4, atol=2e-5)
        ms.set_context(jit_config={"jit_level": "L2"})
        l2 = [net(tx, ty, True).asnumpy() for _ in range(3)]          # the interpreter, then replays at L2
        for got in l2[1:]:
            np.testing.assert_array_equal(got, l2[0], err_msg="L2: the replay disagrees with the interpreter")
        np.testing.assert_allclose(l2[0], first, rtol=2e-4, atol=2e-5)
    finally:
        ms.set_context(jit_config={"jit_level": "auto", "l3_after": 5})


def test_a_replay_that_raises_falls_back_and_is_counted(rng):
    net = Block()
    tx = ms.Tensor(rng.standard_normal((3, 16)).astype(np.float32))
    ty = ms.Tensor(rng.standard_normal((16, 16)).astype(np.float32))
    want = None
    for _ in range(4):
        want = net(tx, ty, False).asnumpy()
    sig = _signature(net)
    assert callable(sig.replay)
    callpath.point(net.__dict__["_runner"], None)
    real = sig.replay
    sig.replay = lambda *a: callpath.FALLBACK          # (what a replay that raised returns)
    before = _counts(sig)
    np.testing.assert_array_equal(net(tx, ty, False).asnumpy(), want)
    assert _counts(sig) == (before[0] + 1, before[1] + 1, before[2] + 1)
    sig.replay = real


def test_callers_prepared_when_a_kernel_lands_are_frozen(rng):
    """A Site that prepares the fast caller of an L3 kernel compiled in the background settles
    (gcpolicy): a later collection of the young generations, which the first call at a new size
    triggers, walks none of a warm model's callers."""
    import gc

    from msvm import gcpolicy

    if not gcpolicy.enabled():
        pytest.skip("the collector is disabled or MSVM_GC_FREEZE=0")
    ms.set_context(jit_config={"l3_after": 2})
    try:
        net = Block()
        x = ms.Tensor(rng.standard_normal((8, 16)).astype(np.float32))
        y = ms.Tensor(rng.standard_normal((16, 16)).astype(np.float32))
        for _ in range(8):
            net(x, y)
            tiers.wait_for_compiles()
    finally:
        ms.set_context(jit_config={"l3_after": 5})
    sig = _signature(net)
    fast = [p for c in sig.bound.code.all_codes() for s in c.__dict__.get("jit_sites", {}).values()
            for p in s.fast.values()]
    assert fast                                 # (the kernels landed and their callers were prepared)
    young = {id(o) for g in range(3) for o in gc.get_objects(g) if type(o) is callconv.Prepared}
    assert not young & {id(p) for p in fast}, "prepared callers left for the collector to walk"
