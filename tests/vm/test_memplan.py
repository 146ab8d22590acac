"""The memory plan (compiler/memplan.py, interp/arena.py; issue 18) in the interpreter and the
replay, without LLVM: random programs with the plan on and off agree bit for bit (and with numpy);
no two values live at one point share a buffer, checked over the plan and, independently, at run
time by watching every value's bytes while it is live; results are never arena memory a later call
overwrites; arenas are reused across calls and shapes, per call (threads), dropped when a frame
raises, and not used under a debugger's trace hook; the dump, the JSON and the profile show the plan.
(tests/jit/test_memplan_tiers.py: the compiled tiers, FUSED_CONV and the models.)"""

import threading

import msvm as ms
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from msvm import memory, nn, ops
from msvm.bytecode import CodeBuilder, verify
from msvm.bytecode import symbolic as S
from msvm.bytecode.disasm import dump, to_json
from msvm.bytecode.types import TensorType
from msvm.compiler import memplan
from msvm.compiler.fuse import fuse
from msvm.interp import replay
from msvm.interp.interpreter import BoundCode, set_trace
from random_programs import SOURCE_ARGS, SourceProgram, build, inputs, ref, source_case, source_inputs, trees
from special_values import assert_numpy_equal

ARGS = ("x", "v", "c", "s")


def bits(a):
    a = np.asarray(a)
    return a.shape, a.dtype, a.tobytes()


class Watch:
    """A trace hook that keeps the plan (``keeps_plan``) and records, before every instruction of every
    frame, the bytes of each array on the operand stack and in the locals. ``problems()`` then finds,
    from the recorded path alone (not from the plan), each array that was still to be read, on the
    stack or in a local loaded later, whose bytes had changed since it was first seen: a value
    overwritten while live."""

    keeps_plan = True

    def __init__(self):
        self.frames: dict = {}
        self.pointers: dict = {}          # data pointer -> ids of the distinct arrays seen there

    def __call__(self, frame, pc):
        rec = self.frames.setdefault(id(frame), (frame, []))[1]
        items = []
        for where, values in (("s", list(frame.stack)), ("l", list(frame.locals))):
            for key, v in enumerate(values):
                for a in (v if isinstance(v, tuple) else (v,)):
                    if type(a) is np.ndarray:
                        items.append((where, key, id(a), a, a.tobytes()))
                        if a.nbytes:
                            self.pointers.setdefault(a.ctypes.data, set()).add(id(a))
        ins = frame.code.instrs[frame.index]
        rec.append((ins.op.name, ins.args[0] if ins.args else None, items))

    def problems(self) -> list:
        out = []
        for frame, steps in self.frames.values():
            # dynamic liveness of the locals: slot l is live at step t if a later step loads it before storing it
            live_after, live = [None] * len(steps), set()
            for t in range(len(steps) - 1, -1, -1):
                name, arg, _ = steps[t]
                if name == "STORE_TENSOR":
                    live.discard(arg)
                elif name == "LOAD_TENSOR":
                    live.add(arg)
                live_after[t] = set(live)
            first: dict = {}
            for t, (name, _arg, items) in enumerate(steps):
                for where, key, ident, _a, data in items:
                    if ident not in first:
                        first[ident] = (t, data)
                        continue
                    if (where == "s" or key in live_after[t]) and first[ident][1] != data:
                        out.append(f"{frame.code.name}: step {t} ({name}): the {where}[{key}] array first seen at "
                                   f"step {first[ident][0]} changed while live")
        return out

    def shared(self) -> int:
        """Distinct arrays that started at one address (the plan reusing a buffer, seen at run time)."""
        return sum(len(v) - 1 for v in self.pointers.values())


def watched(fn):
    w = Watch()
    old = set_trace(w)
    try:
        with np.errstate(all="ignore"):
            out = fn()
    finally:
        set_trace(old)
    return out, w


def planned(code, fused=True):
    run = fuse(code) if fused else code
    return run, memplan.apply(run)


def all_checks(code) -> list:
    return [p for c in code.all_codes() if c.memplan is not None for p in memplan.check(c, c.memplan)]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree=trees(), B=st.sampled_from([0, 2, 3, 5]), N=st.integers(6, 9), seed=st.integers(0, 2 ** 16),
       share=st.sampled_from([0.0, 0.15, 0.4]), strided=st.booleans(), fused=st.booleans())
def test_random_programs_agree_with_the_plan_on_and_off(tree, B, N, seed, share, strided, fused):
    env = inputs(B, N, seed, share, strided)
    code = build(tree, N).finish()
    try:
        verify(code)
    except ms.VerifyError:
        return
    try:
        with np.errstate(all="ignore"):
            want = ref(tree, env)
    except ValueError:
        return
    off, on = planned(code, fused)
    assert all_checks(on) == []
    W = ms.Tensor(env["W"])
    args = [env[k] for k in ARGS]
    b_off, b_on = BoundCode(off, None, {"W": W}, None), BoundCode(on, None, {"W": W}, None)
    with np.errstate(all="ignore"):
        try:
            r_off = b_off.call(args)
        except ms.ShapeMismatch:
            return
        r_on = b_on.call(args)
        rp = replay.build(b_on, b_on.fast_bind(args))
        assert rp is not None
        again = [np.array(rp(*args)) for _ in range(2)]
    assert bits(r_on) == bits(r_off), tree
    for r in again:
        assert bits(r) == bits(r_off), tree
    r_watch, w = watched(lambda: b_on.call(args))
    assert bits(r_watch) == bits(r_off) and w.problems() == []
    want = np.asarray(want)
    assert_numpy_equal(np.asarray(r_on), want.astype(np.float32) if want.shape else want, rtol=2e-4, atol=1e-5,
                       msg=str(tree))


def _chain_code():
    """f(x) = ((x*2 + 1) * x - 3) * ((x - 1) * 0.5), over x [B, N]: values die early, so buffers are reused."""
    b = CodeBuilder("chain", "chain.py", 1)
    b.local("x")
    b.code.params.append(("x", TensorType((S.sym("B"), S.sym("N")), ms.float32)))
    for op, k in (("BROADCAST_MUL", 2.0), ("BROADCAST_ADD", 1.0)):
        if op == "BROADCAST_MUL":
            b.emit("LOAD_TENSOR", 0)
        b.emit("LOAD_CONST", b.const(k))
        b.emit(op)
    b.emit("LOAD_TENSOR", 0)
    b.emit("BROADCAST_MUL")
    b.emit("LOAD_CONST", b.const(3.0))
    b.emit("BROADCAST_SUB")
    b.emit("LOAD_TENSOR", 0)
    b.emit("LOAD_CONST", b.const(1.0))
    b.emit("BROADCAST_SUB")
    b.emit("LOAD_CONST", b.const(0.5))
    b.emit("BROADCAST_MUL")
    b.emit("BROADCAST_MUL")
    b.emit("RETURN")
    code = b.finish()
    verify(code)
    return code


def _chain_ref(x):
    return ((x * 2 + 1) * x - 3) * ((x - 1) * 0.5)


def test_a_chain_reuses_buffers_in_place_and_the_watch_sees_it():
    code = memplan.apply(_chain_code())
    mp = code.memplan
    assert [i.op.name for i in code.instrs][0] == "ALLOC_DEVICE_MEM"
    assert [i.op.name for i in code.instrs][-2:] == ["FREE_DEVICE_MEM", "RETURN"]
    # seven values, the last one returned: six planned; the in-place chain needs two buffers
    assert len(mp.values) == 6 and len(mp.slots) == 2, mp.summary()
    assert sum(v.in_place_of is not None for v in mp.values.values()) >= 2
    assert str(mp.peak) == "B*N*8" and str(mp.unplanned) == "B*N*24"
    assert mp.figures({"B": 4, "N": 8}) == {"planned_bytes": 256, "unplanned_bytes": 768, "live_bound_bytes": 256,
                                             "buffers": 2, "values": 6}
    assert memplan.check(code, mp) == []
    bound = BoundCode(code, None, {}, None)
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    out, w = watched(lambda: bound.call([x]))
    np.testing.assert_array_equal(out, _chain_ref(x))
    assert w.problems() == [] and w.shared() >= 3       # the watch saw buffers reused (it is not vacuous)


def test_the_checks_catch_a_plan_that_aliases_live_values():
    """A plan corrupted by hand (two values live together put in one buffer): the static check names
    the point, and the run-time watch sees a live value overwritten."""
    code = memplan.apply(_chain_code())
    mp = code.memplan
    live_pairs = [(a, b) for group in mp.live for a in group for b in group if a < b]
    a, b = live_pairs[0]
    va, vb = mp.values[a], mp.values[b]
    mp.slots[vb.slot].remove(b)
    mp.slots[va.slot].append(b)
    vb.slot = va.slot
    assert any("share buf" in p for p in memplan.check(code, mp))
    x = np.random.default_rng(1).standard_normal((4, 8)).astype(np.float32)
    out, w = watched(lambda: BoundCode(code, None, {}, None).call([x]))
    assert w.problems(), "the watch missed an overwritten value"
    assert not np.array_equal(out, _chain_ref(x))


def test_a_plain_trace_hook_runs_without_the_arena():
    """Under a debugger (a trace hook without ``keeps_plan``), every value has memory of its own: what
    the debugger shows is never overwritten."""
    code = memplan.apply(_chain_code())
    bound = BoundCode(code, None, {}, None)
    seen = []

    def hook(frame, pc):
        seen.append(frame.arena)
    x = np.ones((3, 5), np.float32)
    old = set_trace(hook)
    try:
        out = bound.call([x])
    finally:
        set_trace(old)
    assert seen and all(a is None for a in seen) and not bound.arenas
    np.testing.assert_array_equal(out, _chain_ref(x))


def test_arenas_grow_to_the_largest_shape_then_stay():
    code = memplan.apply(_chain_code())
    bound = BoundCode(code, None, {}, None)
    rng = np.random.default_rng(2)
    grown = []
    for B in (8, 4, 8, 2, 16, 8, 16, 1, 16):
        x = rng.standard_normal((B, 8)).astype(np.float32)
        np.testing.assert_array_equal(bound.call([x]), _chain_ref(x))
        assert len(bound.arenas) == 1
        grown.append((bound.arenas[0].grown, bound.arenas[0].nbytes))
    assert grown[0] == grown[3]                       # B = 4, 8, 2 after 8: nothing allocated
    assert grown[4][1] == 16 * 8 * 4 * 2 and grown[4] == grown[-1]    # after the largest (16): stays
    env = bound.fast_bind([x])                        # the replay shares the Code's arenas
    rp = replay.build(bound, env)
    np.testing.assert_array_equal(rp(x), _chain_ref(x))
    assert len(bound.arenas) == 1 and (bound.arenas[0].grown, bound.arenas[0].nbytes) == grown[-1]


def test_a_frame_that_raises_drops_its_arena():
    b = CodeBuilder("fails", "fails.py", 1)
    b.local("x")
    b.code.params.append(("x", TensorType((S.sym("n"),), ms.float32)))
    b.emit("LOAD_TENSOR", 0)
    b.emit("RELU")
    b.emit("LOAD_TENSOR", 0)
    b.emit("BROADCAST_MUL")
    b.emit("LOAD_TENSOR", 0)
    b.emit("BROADCAST_ADD")
    ok = b.new_label()
    b.emit("BRANCH_IF_SYMBOLIC", b.const(S.sym("n") > 3), ok)      # false: on to RETURN; n > 3 raises, the arena open
    b.emit("RAISE", b.const("ValueError"), b.const(("too long",)))
    b.place(ok)
    b.emit("RETURN")
    code = b.finish()
    verify(code)
    code = memplan.apply(code)
    assert code.memplan.values
    bound = BoundCode(code, None, {}, None)
    with pytest.raises(ValueError, match="too long"):
        bound.call([np.ones(4, np.float32)])
    assert bound.arenas == []
    np.testing.assert_array_equal(bound.call([np.ones(3, np.float32)]), np.full(3, 2, np.float32))
    assert len(bound.arenas) == 1


class Block(nn.Cell):
    def __init__(self):
        super().__init__()
        self.w = ms.Parameter(ms.Tensor(np.random.default_rng(3).standard_normal((8, 8)).astype(np.float32) / 8))

    def construct(self, x):
        h = ops.relu(ops.matmul(x, self.w)) * 2.0
        g = ops.exp(-ops.abs(h)) + h
        return ops.matmul(g, self.w) - h


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.a, self.b = Block(), Block()

    def construct(self, x):
        y = self.a(x) * 0.5
        return self.b(y) + y


def np_block(w, x):
    h = np.maximum(x @ w, 0) * np.float32(2.0)
    g = np.exp(-np.abs(h)) + h
    return g @ w - h


def np_net(net, x):
    y = np_block(net.a.w.asnumpy(), x) * np.float32(0.5)
    return np_block(net.b.w.asnumpy(), y) + y


@pytest.mark.parametrize("fusion", [True, False])
def test_a_cell_with_sub_cells_matches_unplanned_and_results_are_not_overwritten(fusion):
    ms.set_context(jit_config={"enable_fusion": fusion})
    try:
        outs = {}
        for plan in (True, False):
            ms.set_context(jit_config={"memory_plan": plan})
            net = Net()
            rng = np.random.default_rng(4)
            xs = [rng.standard_normal((b, 8)).astype(np.float32) for b in (5, 5, 3, 5, 7)]
            first = net(ms.Tensor(xs[0]))
            snapshot = first.asnumpy().copy()
            outs[plan] = [net(ms.Tensor(x)).asnumpy().copy() for x in xs]
            np.testing.assert_array_equal(first.asnumpy(), snapshot)   # later calls left the first result alone
            for x, o in zip(xs, outs[plan]):
                np.testing.assert_allclose(o, np_net(net, x), rtol=1e-5, atol=1e-6)
            if plan:
                codes = [c for v in net._runner.variants.values() for c in v.code.all_codes()]
                assert all(c.memplan is not None for c in codes) and all_checks(codes[-1]) == []
                rep = memory.report(net)
                assert {c["code"] for c in rep["codes"]} == {"Net.construct", "Block.construct"}
                slack = 64 * sum(c["buffers"] for c in rep["codes"])        # (each buffer 64-byte aligned)
                assert 0 < rep["arena_bytes"] <= rep["unplanned_bytes"] + slack and rep["region_bytes"] > 0
        for a, b in zip(outs[True], outs[False]):
            assert bits(a) == bits(b)
    finally:
        ms.set_context(jit_config={"enable_fusion": True, "memory_plan": True})


def test_two_threads_calling_one_cell_never_share_an_arena():
    net = Net()
    rng = np.random.default_rng(5)
    xs = [[rng.standard_normal((b, 8)).astype(np.float32) for b in (4, 6, 4, 9) * 10] for _ in range(2)]
    want = [[np_net(net, x) for x in xs[t]] for t in range(2)]
    net(ms.Tensor(xs[0][0]))
    bad = []
    start = threading.Barrier(2)

    def work(t):
        start.wait()
        for x, w in zip(xs[t], want[t]):
            got = net(ms.Tensor(x)).asnumpy()
            if not np.allclose(got, w, rtol=1e-5, atol=1e-6):
                bad.append((t, x.shape))
    threads = [threading.Thread(target=work, args=(t,)) for t in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert bad == []


class Accumulate(nn.Cell):
    """An effect: the Parameter takes a planned intermediate's value (ASSIGN_PARAM copies it)."""

    def __init__(self):
        super().__init__()
        self.acc = ms.Parameter(ms.Tensor(np.zeros((4, 3), np.float32)), name="acc")

    def construct(self, x):
        y = x * 2.0 + 1.0
        ops.assign(self.acc, y * x)
        return y - 1.0


def test_an_assigned_parameter_keeps_its_value_over_calls():
    net = Accumulate()
    xs = [np.full((4, 3), k, np.float32) for k in (1.0, 2.0, 3.0)]
    for x in xs:
        out = net(ms.Tensor(x))
        y = x * 2 + 1
        np.testing.assert_array_equal(net.acc.asnumpy(), y * x)
        np.testing.assert_array_equal(out.asnumpy(), y - 1)
    before = net.acc.asnumpy().copy()
    net(ms.Tensor(np.zeros((4, 3), np.float32)))
    assert not np.array_equal(net.acc.asnumpy(), before)      # (it did update, and to the new value)
    np.testing.assert_array_equal(net.acc.asnumpy(), np.zeros((4, 3), np.float32))


@pytest.mark.filterwarnings("ignore:Mean of empty slice")
@pytest.mark.parametrize("seed", range(0, 80, 3))
def test_random_source_programs_agree_with_the_plan_on_and_off(seed):
    """MindSpore-source programs (helpers, closures, conv and pools, masks, slices): planned and
    unplanned give the same bits; every plan passes the check."""
    prog = SourceProgram(seed)
    mod = prog.load()
    B, N, H, W, share = source_case(seed)
    env = source_inputs(B, N, H, W, seed, share)
    got = {}
    try:
        for plan in (True, False):
            ms.set_context(jit_config={"memory_plan": plan})
            f = ms.jit(mod.prog)
            with np.errstate(all="ignore"):
                got[plan] = [tuple(np.array(t.asnumpy()) for t in f(*[ms.Tensor(env[k]) for k in SOURCE_ARGS]))
                             for _ in range(2)]
            if plan:
                for v in f._runner.variants.values():
                    assert all_checks(v.code) == []
    finally:
        ms.set_context(jit_config={"memory_plan": True})
    for a, b in zip(got[True], got[False]):
        assert [bits(x) for x in a] == [bits(x) for x in b], prog.source()
    want = prog.ref(env)
    for g, r in zip(got[True][1], want):
        assert_numpy_equal(g, r, rtol=2e-4, atol=1e-4, msg=prog.source())


def test_the_dump_the_json_and_the_profile_show_the_plan():
    from msvm.profile import Profiler, render_html

    code = memplan.apply(_chain_code())
    text = dump(code)
    assert "memory plan: 2 buffers for 6 values, peak B*N*8 bytes (one buffer per value: B*N*24)" in text
    assert "buf0: B*N*4 bytes <- 0x" in text and "ALLOC_DEVICE_MEM" in text
    fn = to_json(code)["functions"][-1]
    assert fn["memoryPlan"]["buffers"] == 2 and fn["memoryPlan"]["peak"] == "B*N*8"
    prof = Profiler("t.py").start()
    try:
        net = Block()
        for b in (3, 6):
            net(ms.Tensor(np.ones((b, 8), np.float32)))
    finally:
        prof.stop()
    rec = next(c for c in prof.report()["codes"] if c["name"] == "Block.construct")
    mp = rec["memory_plan"]
    assert mp["buffers"] >= 1 and "x0" in mp["peak"]
    assert mp["arena_bytes"] > 0 and mp["unplanned_bytes"] >= mp["arena_bytes"]
    assert "Memory plan:" in render_html(prof.report())


def test_peak_bytes_of_a_forward():
    net = Block()
    x = ms.Tensor(np.ones((64, 8), np.float32))
    for _ in range(3):
        net(x)
    peak = memory.peak_bytes(net, x)
    assert 64 * 8 * 4 <= peak < 64 * 8 * 4 * 16       # the result at least; the arena is already there


def test_cells_compiled_under_a_debugger_are_not_planned():
    """A Cell compiled while a debugger's hook is installed runs the Code the debugger would show
    without the plan (no ALLOC/FREE of an arena; each value its own memory)."""
    old = set_trace(lambda frame, pc: None)
    try:
        net = Block()
        net(ms.Tensor(np.ones((3, 8), np.float32)))
    finally:
        set_trace(old)
    codes = [c for v in net._runner.variants.values() for c in v.code.all_codes()]
    assert all(c.memplan is None for c in codes)
    assert not any(i.op.name == "ALLOC_DEVICE_MEM" for c in codes for i in c.instrs)
    later = Block()
    later(ms.Tensor(np.ones((3, 8), np.float32)))
    assert all(c.memplan is not None for v in later._runner.variants.values() for c in v.code.all_codes())


def test_msvm_dump_plan_prints_the_code_as_it_runs(capsys):
    from msvm import cli

    assert cli.main(["dump", "examples/bert_layer.py", "--plan", "--cell", "BertLayer"]) == 0
    out = capsys.readouterr().out
    assert "ALLOC_DEVICE_MEM" in out and "FREE_DEVICE_MEM" in out
    # the first residual add + layer norm (FUSED_ADD_LAYER_NORM: nn.LayerNorm is inlined, its result is the
    # parent's); the GELU is the intermediate Dense's epilogue (compiler/epilogue.py) and the second
    # add + norm is returned (not planned)
    assert ("; memory plan: 1 buffer for 1 value, peak hidden_states0*hidden_states1*3072 bytes (one buffer per "
            "value: hidden_states0*hidden_states1*3072)") in out
    assert "buf0: hidden_states0*hidden_states1*3072 bytes <- 0x" in out


class Twice(nn.Cell):
    """One sub-Cell instance called twice in a row: each call site's linked Code takes its arena and gives it back."""

    def __init__(self):
        super().__init__()
        self.a = Block()

    def construct(self, x):
        return self.a(self.a(x) * 0.5) - x


def test_a_larger_shape_moves_the_arena_once_per_call():
    """ALLOC_DEVICE_MEM lays out every slot at the call's symbols: a larger batch moves the arena to
    one fresh buffer, not one per instruction whose slot is too small (each a fresh buffer of its own,
    touched page by page), and the plan's slot sizes are what the values then take."""
    code = memplan.apply(_chain_code())
    assert len(code.memplan.slots) >= 2
    bound = BoundCode(code, None, {}, None)
    rng = np.random.default_rng(3)
    for B, grows in ((4, 1), (4, 0), (32, 1), (8, 0), (64, 1)):
        ar = bound.arenas[0] if bound.arenas else None
        before = (ar.grown, ar.region.gen) if ar is not None else (0, None)
        x = rng.standard_normal((B, 8)).astype(np.float32)
        np.testing.assert_array_equal(bound.call([x]), _chain_ref(x))
        ar = bound.arenas[0]
        assert ar.grown - before[0] == grows, B
        if before[1] is not None:       # (at most one fresh buffer: none where the thread's region is large enough)
            assert ar.region.gen - before[1] <= grows, B
        assert ar.nbytes == B * 8 * 4 * len(code.memplan.slots) or grows == 0


def test_a_region_has_room_for_a_somewhat_larger_shape():
    """pages.room: a region's buffer is ROOM times its first layout, so a call at a somewhat larger
    shape lays out in the same buffer (its pages touched before stay; a new buffer would fault every
    page again); region_bytes counts what the layouts asked for, not the room; past the room, a new
    buffer with room again. (On a thread of its own: a thread's regions are its own.)"""
    import threading

    from msvm import pages

    code = memplan.apply(_chain_code())
    bound = BoundCode(code, None, {}, None)
    rng = np.random.default_rng(4)
    seen = []

    def run():
        for B in (16, 20, 24, 40):          # (room 1.5: 20 and 24 fit in 16's buffer, 40 does not)
            x = rng.standard_normal((B, 8)).astype(np.float32)
            np.testing.assert_array_equal(bound.call([x]), _chain_ref(x))
            r = bound.arenas[0].region
            seen.append((r.gen, r.buf.ctypes.data, r.used, r.size, bound.arenas[0].nbytes))
    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert len(seen) == 4 and all(used == nbytes for _, _, used, _, nbytes in seen)
    assert seen[0][:2] == seen[1][:2] == seen[2][:2] and seen[0][2] < seen[1][2] < seen[2][2]
    assert seen[0][3] == seen[2][3] == pages.room(seen[0][2])
    assert seen[3][0] == seen[0][0] + 1 and seen[3][3] == pages.room(seen[3][2])
    assert pages.room(100) == 192 and pages.ROOM == 1.5


def test_huge_buffers_are_aligned_and_advised():
    """pages.empty: ALIGN-aligned n bytes; from HUGE bytes on the buffer starts on a 2 MB boundary (its
    whole extents advised to be huge pages), and the memory is what numpy's tracer sees."""
    import tracemalloc

    from msvm import pages

    for n in (1, 100, pages.HUGE - 1, pages.HUGE, 3 * pages.HUGE + 4096):
        tracemalloc.start()
        raw, buf = pages.empty(n)
        traced = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        assert buf.nbytes == n and buf.dtype == np.uint8 and buf.base is raw and traced >= n
        assert buf.ctypes.data % (pages.HUGE if n >= pages.HUGE else pages.ALIGN) == 0
        buf[:] = 7
        assert int(buf[-1]) == 7


def test_one_sub_cell_called_twice_reuses_its_arena():
    net = Twice()
    x = np.random.default_rng(6).standard_normal((5, 8)).astype(np.float32)
    w = net.a.w.asnumpy()
    want = np_block(w, np_block(w, x) * np.float32(0.5)) - x
    for _ in range(3):
        np.testing.assert_allclose(net(ms.Tensor(x)).asnumpy(), want, rtol=1e-5, atol=1e-6)
    sub = [b for v in net._runner.variants.values() for b in v.bound.callees.values()]
    assert sub and all(len(b.arenas) == 1 for b in sub)


def test_sibling_sub_cells_share_a_region_and_nested_frames_do_not():
    """Net calls Block a, then Block b: a's and b's arenas take the same region (position 1 of the
    thread's stack), Net's another (position 0); the watch sees no live value overwritten."""
    net = Net()
    x = np.random.default_rng(12).standard_normal((6, 8)).astype(np.float32)
    want = np_net(net, x)
    out, w = watched(lambda: net(ms.Tensor(x)))
    np.testing.assert_allclose(out.asnumpy(), want, rtol=1e-5, atol=1e-6)
    assert w.problems() == []
    (var,) = net._runner.variants.values()
    top = var.bound
    subs = list(top.callees.values())
    assert len(subs) == 2 and all(len(b.arenas) == 1 for b in [top] + subs)
    ra, rb, rt = subs[0].arenas[0].region, subs[1].arenas[0].region, top.arenas[0].region
    assert ra is rb and ra is not rt
    assert ra.size >= max(subs[0].arenas[0].nbytes, subs[1].arenas[0].nbytes)
    for _ in range(3):                                # and it stays so over calls, results intact
        np.testing.assert_allclose(net(ms.Tensor(x)).asnumpy(), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out.asnumpy(), want, rtol=1e-5, atol=1e-6)
