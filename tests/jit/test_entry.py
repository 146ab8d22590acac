"""Native entries (compiler/entry.py): the builtin a replay calls instead of a kernel's ctypes
caller. Every kind that has one gives numpy's answer in a fresh array; bad arguments raise
TypeError instead of reaching native code; the returned array's references are counted right;
a large kernel lets other threads run; a new process loads trampolines from the disk cache."""

import gc
import os
import subprocess
import sys
import threading
import time
import weakref

import msvm as ms
import numpy as np
import pytest
from msvm import nn, ops
from msvm.compiler import entry, tiers

pytestmark = pytest.mark.skipif(not entry.LAYOUT, reason="ndarray header layout not the probed one")


class Kinds(nn.Cell):
    """A matmul by a transposed weight with a bias and GELU, a plain matmul with a broadcast
    epilogue, an elementwise chain with broadcasting, softmax and layer norm."""

    def __init__(self, n):
        super().__init__()
        self.dense = nn.Dense(n, n)
        self.norm = nn.LayerNorm((n,))

    def construct(self, x, y, b):
        h = ops.gelu(self.dense(x))
        m = ops.relu(ops.matmul(h, y) + b)
        e = ops.tanh(m * 0.5 + b) - x
        return self.norm(ops.softmax(e, -1) + h)


def _ref(net, x, y, b):
    from math import erf, sqrt

    w, bias = net.dense.weight.asnumpy(), net.dense.bias.asnumpy()
    v = x @ w.T + bias
    h = 0.5 * v * (1 + np.vectorize(lambda t: erf(t / sqrt(2)))(v))
    m = np.maximum(h @ y + b, 0)
    e = np.tanh(m * 0.5 + b) - x
    s = np.exp(e - e.max(-1, keepdims=True))
    s = s / s.sum(-1, keepdims=True) + h
    mu, var = s.mean(-1, keepdims=True), s.var(-1, keepdims=True)
    return (s - mu) / np.sqrt(var + 1e-5) * net.norm.gamma.asnumpy() + net.norm.beta.asnumpy()


def _replays(fn) -> list:
    """A replay and the sub-Cell replays it calls (interp/replay.py ``nested``), recursively."""
    out = [fn]
    for name, v in fn.__globals__.items():
        if name.startswith("cell") and callable(v) and v.__closure__:
            for c in v.__closure__:
                if isinstance(c.cell_contents, dict):
                    out += [r for sub in c.cell_contents.values() if sub for r in _replays(sub)]
    return out


def _site_calls(net) -> tuple:
    """(the ops of the sites the Cell's replays call, [native entry or None] per remembered caller)."""
    ops_, natives = set(), []
    for hit in net.__dict__["_runner"].memo.values():
        if hit.replay:
            for fn in _replays(hit.replay):
                ops_ |= {v.op for k, v in fn.__globals__.items() if k.startswith("site")}
                natives += [g.native for g in fn.__globals__.get("G", []) if g is not None]
    return ops_, natives


def _natives(net) -> list:
    return [n for n in _site_calls(net)[1] if n is not None]


def _settle(net, *args, calls=12):
    for _ in range(calls):
        net(*args)
        tiers.wait_for_compiles()


def test_every_kind_runs_through_its_entry_and_matches_numpy():
    rng = np.random.default_rng(0)
    n = 24
    net = Kinds(n)
    x = rng.standard_normal((5, n)).astype(np.float32)
    y = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    tx, ty, tb = ms.Tensor(x), ms.Tensor(y), ms.Tensor(b)
    _settle(net, tx, ty, tb)
    ops_, natives = _site_calls(net)
    # (the residual add + layer norm is one row kernel: FUSED_ADD_LAYER_NORM, compiler/norm.py)
    assert ops_ == {"FUSED_MATMUL", "FUSED_ELEMENTWISE", "SOFTMAX", "FUSED_ADD_LAYER_NORM"}
    assert len(natives) >= 5 and None not in natives, natives
    ms.set_context(jit_config={"jit_level": "L1"})       # the interpreter is the reference
    x2 = rng.standard_normal((5, n)).astype(np.float32)
    want = [net(tx, ty, tb).asnumpy(), net(ms.Tensor(x2), ty, tb).asnumpy()]
    ms.set_context(jit_config={"jit_level": "auto"})
    outs = [net(tx, ty, tb).asnumpy() for _ in range(3)]
    for o in outs:                       # each call's result is its own array, intact after the next
        np.testing.assert_allclose(o, want[0], rtol=1e-5, atol=1e-5)
    assert len({id(o) for o in outs}) == 3
    np.testing.assert_allclose(net(ms.Tensor(x2), ty, tb).asnumpy(), want[1], rtol=1e-5, atol=1e-5)
    # (layer norm amplifies float32 rounding where a row varies little: numpy in float64 is looser)
    np.testing.assert_allclose(outs[0], _ref(net, x, y, b), rtol=2e-3, atol=2e-3)


def _matmul_entry(m=6, k=8, n=5):
    """An entry for a plain L3 matmul + ReLU kernel, with its arrays."""
    class MM(nn.Cell):
        def construct(self, a, b):
            return ops.relu(ops.matmul(a, b))

    rng = np.random.default_rng(1)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    net = MM()
    _settle(net, ms.Tensor(a), ms.Tensor(b))
    (nat,) = _natives(net)
    return nat, a, b


def test_an_entry_refuses_what_it_was_not_made_for():
    nat, a, b = _matmul_entry()
    e, alloc, shape, dtype = nat.entry, nat.alloc, nat.shape, nat.dtype
    out = e(a, b, alloc(shape, dtype))
    np.testing.assert_allclose(out, np.maximum(a @ b, 0), rtol=1e-5, atol=1e-5)

    class Sub(np.ndarray):
        pass

    for args in [(a, b), (a, b, alloc(shape, dtype), a), (a.tolist(), b, alloc(shape, dtype)),
                 (a, b, None), (a.view(Sub), b, alloc(shape, dtype)), (a, np.float32(1.0), alloc(shape, dtype))]:
        with pytest.raises(TypeError, match="native entry"):
            e(*args)
    np.testing.assert_allclose(e(a, b, alloc(shape, dtype)), np.maximum(a @ b, 0), rtol=1e-5, atol=1e-5)


def test_references_are_counted():
    nat, a, b = _matmul_entry()
    e, alloc, shape, dtype = nat.entry, nat.alloc, nat.shape, nat.dtype
    gc.collect()
    before = (sys.getrefcount(a), sys.getrefcount(b))
    refs = []
    for _ in range(50):
        out = e(a, b, alloc(shape, dtype))
        assert sys.getrefcount(out) == 2          # `out` and getrefcount's argument
        refs.append(weakref.ref(out))
        del out
    gc.collect()
    assert all(r() is None for r in refs)         # every result was freed
    assert (sys.getrefcount(a), sys.getrefcount(b)) == before


def test_a_large_kernel_lets_other_threads_run():
    nat, a, b = _matmul_entry(256, 768, 1024)
    e, alloc, shape, dtype = nat.entry, nat.alloc, nat.shape, nat.dtype
    count, stop = [0], threading.Event()

    def spin():
        while not stop.is_set():
            count[0] += 1

    old = sys.getswitchinterval()
    sys.setswitchinterval(0.5)        # the spinning thread runs only when the caller lets go of the GIL
    t = threading.Thread(target=spin)
    t.start()
    try:
        time.sleep(0.6)
        grew = 0
        for _ in range(5):
            c0 = count[0]
            e(a, b, alloc(shape, dtype))
            grew = max(grew, count[0] - c0)
    finally:
        stop.set()
        sys.setswitchinterval(old)
        t.join()
    assert grew > 0


CHILD = """
import sys
sys.path.insert(0, {tests!r})
import numpy as np, msvm as ms
from msvm.compiler import codegen, tiers
compiled = []
orig = codegen.Codegen.compile
def spy(self, ir, level):
    compiled.extend(w for w in ir.split() if w.startswith("@msvm_entry_"))
    return orig(self, ir, level)
codegen.Codegen.compile = spy
from test_entry import Kinds, _natives, _settle
ms.set_context(mode=ms.GRAPH_MODE)
net = Kinds(16)
rng = np.random.default_rng(3)
args = [ms.Tensor(rng.standard_normal(s).astype(np.float32)) for s in ((4, 16), (16, 16), (16,))]
_settle(net, *args)
print(len(_natives(net)), len(compiled))
"""


def test_a_new_process_loads_trampolines_from_disk(tmp_path):
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, MSVM_CACHE_DIR=str(tmp_path))
    runs = [subprocess.run([sys.executable, "-c", CHILD.format(tests=here)], env=env, capture_output=True,
                           text=True, timeout=300) for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr
    (n1, c1), (n2, c2) = (map(int, r.stdout.split()) for r in runs)
    assert n1 == n2 >= 4
    assert c1 >= 1 and c2 == 0


# ---------------------------------------------------------------- call guards

def _guarded(net, *args, **kwargs):
    """Settle a Cell at one call until its runner's guard is built; returns the guard."""
    for _ in range(12):
        net(*args, **kwargs)
        tiers.wait_for_compiles()
    g = net.__dict__["_runner"].guard
    assert g is not None, "the repeated signature has a guard"
    return g


def test_a_guard_runs_its_signature_and_refuses_every_other():
    """The guard answers its own signature with the replay's result as a new Tensor; any other
    call (shape, strides, dtype, flag, argument kinds and count, keyword order) goes the Python
    way and gets its own right answer."""
    from cells import DynamicMatmulCell

    rng = np.random.default_rng(5)
    net = DynamicMatmulCell()
    x = rng.standard_normal((6, 8)).astype(np.float32)
    y = rng.standard_normal((8, 5)).astype(np.float32)
    tx, ty = ms.Tensor(x), ms.Tensor(y)
    g = _guarded(net, tx, ty, training=True)
    outs = [net(tx, ty, training=True) for _ in range(3)]
    for o in outs:
        assert type(o) is ms.Tensor and o.dtype == ms.float32 and o.shape == (6, 5)
        np.testing.assert_allclose(o.asnumpy(), np.maximum(x @ y, 0), rtol=1e-5, atol=1e-5)
    assert len({id(o) for o in outs}) == 3 and len({id(o.asnumpy()) for o in outs}) == 3
    assert g.fn(tx, ty, True) is not g.no
    x64 = rng.standard_normal((6, 8))
    others = [((ms.Tensor(x[:3]), ty), {"training": True}, np.maximum(x[:3] @ y, 0)),
              ((tx, ty), {"training": False}, x @ y),
              ((tx, ty, False), {}, x @ y),
              ((ms.Tensor(np.asfortranarray(x)), ty), {"training": True}, np.maximum(x @ y, 0)),
              ((ms.Tensor(x64), ms.Tensor(y.astype(np.float64))), {"training": True}, np.maximum(x64 @ y, 0)),
              ((ms.Parameter(ms.Tensor(x), name="p"), ty), {"training": True}, np.maximum(x @ y, 0)),
              ((tx, ty), {}, np.maximum(x @ y, 0))]
    for args, kwargs, want in others:
        got = net(*args, **kwargs)
        np.testing.assert_allclose(got.asnumpy(), want, rtol=1e-5, atol=1e-5)
    for bad in [(x, ty, True), (tx, ty), (tx, ty, True, True), (tx, ty, 1), (tx, tx, True)]:
        assert g.fn(*bad) is g.no         # refused, natively, without running anything
    # by keyword: each value under its own parameter's name, in any order the Python way
    assert net.__dict__["_guard"] is not None, "the Cell calls its guard itself"
    assert type(g.fn(tx, y=ty, training=True)) is ms.Tensor
    assert g.fn(tx, training=True, y=ty) is g.no and g.fn(tx, ty, trainin=True) is g.no
    want = np.maximum(x @ y, 0)
    for kwargs in ({"y": ty, "training": True}, {"training": True, "y": ty}, {"x": tx, "y": ty, "training": True}):
        got = net(**kwargs) if "x" in kwargs else net(tx, **kwargs)
        np.testing.assert_allclose(got.asnumpy(), want, rtol=1e-5, atol=1e-5)
    with pytest.raises(TypeError, match="trainin"):
        net(tx, ty, trainin=True)
    np.testing.assert_allclose(net(tx, ty, training=True).asnumpy(), np.maximum(x @ y, 0), rtol=1e-5, atol=1e-5)


def test_guards_step_aside_for_the_debugger_events_and_l1(level):
    from cells import DynamicMatmulCell
    from msvm import events
    from msvm.interp.interpreter import set_trace

    rng = np.random.default_rng(6)
    net = DynamicMatmulCell()
    tx, ty = (ms.Tensor(rng.standard_normal(s).astype(np.float32)) for s in ((4, 8), (8, 3)))
    _guarded(net, tx, ty, training=True)
    seen = []
    old = set_trace(lambda frame, pc, *rest: seen.append(pc))
    try:
        net(tx, ty, training=True)
    finally:
        set_trace(old)
    assert seen, "the trace hook saw the call's instructions"
    got = []
    unsubscribe = events.subscribe(got.append, {"exec"})
    try:
        net(tx, ty, training=True)
    finally:
        unsubscribe()
    assert got
    level("L1")
    before = tiers.kernel_cache().stats["hits"]
    np.testing.assert_allclose(net(tx, ty, training=True).asnumpy(), np.maximum(tx.asnumpy() @ ty.asnumpy(), 0),
                               rtol=1e-5, atol=1e-5)
    assert tiers.kernel_cache().stats["hits"] == before      # L1 ran no compiled kernel


def test_a_guard_is_dropped_when_a_parameter_changes_shape():
    rng = np.random.default_rng(7)

    class Lin(nn.Cell):
        def __init__(self):
            super().__init__()
            self.w = ms.Parameter(ms.Tensor(rng.standard_normal((6, 4)).astype(np.float32)), name="w")

        def construct(self, x):
            return ops.relu(ops.matmul(x, self.w))

    net = Lin()
    x = rng.standard_normal((3, 6)).astype(np.float32)
    _guarded(net, ms.Tensor(x))
    old = net.__dict__["_guard"]
    w2 = rng.standard_normal((6, 9)).astype(np.float32)
    net.w.set_data(ms.Tensor(w2))
    out = net(ms.Tensor(x))            # the old guard is not asked: its Parameter shapes are stale
    assert out.shape == (3, 9)
    np.testing.assert_allclose(out.asnumpy(), np.maximum(x @ w2, 0), rtol=1e-5, atol=1e-5)
    assert net.__dict__["_runner"].guard is None and net.__dict__["_guard"] is not old


def test_guarded_calls_count_references_right():
    from cells import DynamicMatmulCell

    rng = np.random.default_rng(8)
    net = DynamicMatmulCell()
    tx, ty = (ms.Tensor(rng.standard_normal(s).astype(np.float32)) for s in ((4, 8), (8, 3)))
    _guarded(net, tx, ty, training=True)
    gc.collect()
    before = [sys.getrefcount(o) for o in (tx, ty, tx.asnumpy(), ty.asnumpy(), None, True)]
    refs = []
    for _ in range(100):
        out = net(tx, ty, training=True)
        refs.append((weakref.ref(out), weakref.ref(out.asnumpy())))
        del out
    gc.collect()
    assert all(a() is None and b() is None for a, b in refs)
    after = [sys.getrefcount(o) for o in (tx, ty, tx.asnumpy(), ty.asnumpy(), None, True)]
    assert after[:4] == before[:4]
    assert abs(after[4] - before[4]) < 50 and abs(after[5] - before[5]) < 50     # None, True: not leaked per call


class Mixed(nn.Cell):
    """Two tensors, a flag with a default and a sub-Cell: what guards see in practice."""

    def __init__(self, n):
        super().__init__()
        self.dense = nn.Dense(n, n)

    def construct(self, x, b, flag=True):
        h = self.dense(x) + b
        if flag:
            h = ops.relu(h) * 2.0
        return ops.softmax(h, -1)


def _mixed_ref(net, x, b, flag):
    h = x @ net.dense.weight.asnumpy().T + net.dense.bias.asnumpy() + b
    if flag:
        h = np.maximum(h, 0) * 2
    e = np.exp(h - h.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_random_call_sequences_through_guards_give_numpys_answers():
    """Calls mixing shapes, layouts (reversed, F order), dtypes, the flag given or not, by
    position or by keyword, in a random order with repeats (so guards are built, aimed and
    refused over and over): every answer is numpy's, and earlier results stay intact."""
    rng = np.random.default_rng(11)
    n = 8
    net = Mixed(n)
    xs = []
    for rows in (1, 3, 5):
        a = rng.standard_normal((rows, n)).astype(np.float32)
        xs += [a, np.asfortranarray(a), a[:, ::-1], a.astype(np.float64)]
    bs = [rng.standard_normal(n).astype(np.float32), rng.standard_normal((1, n)).astype(np.float32)]
    kept, guarded = [], 0
    for step in range(300):
        x, b = xs[rng.integers(len(xs))], bs[rng.integers(len(bs))]
        if rng.random() < 0.7 and kept:             # repeat a recent call: a guard's own signature
            x, b = kept[-int(rng.integers(1, min(4, len(kept)) + 1))][:2]
        flag = [True, False, None][rng.integers(3)]
        tx, tb = ms.Tensor(x), ms.Tensor(b)
        style = rng.integers(3)
        f = net.__dict__["_guard"]
        if flag is None:
            out = net(tx, tb) if style else net(x=tx, b=tb)
        elif style == 0:
            out = net(tx, tb, flag)
        elif style == 1:
            out = net(tx, tb, flag=flag)
        else:
            out = net(tx, b=tb, flag=flag)
        guarded += f is not None and f.fn(tx, tb, True if flag is None else flag) is not f.no
        kept.append((x, b, True if flag is None else flag, out))
        if step % 10 == 9:
            tiers.wait_for_compiles()
    for x, b, flag, out in kept:
        np.testing.assert_allclose(out.asnumpy(), _mixed_ref(net, x, b, flag), rtol=2e-4, atol=2e-5)
    assert guarded > 30, f"only {guarded} of 300 calls had a guard that accepted them"


@ms.jit
def _scaled(x, y, flip=False):
    h = ops.relu(x * 2.0 + y)
    if flip:
        h = -h
    return h


def test_a_jit_function_calls_its_guard_itself():
    rng = np.random.default_rng(12)
    x, y = (rng.standard_normal((4, 6)).astype(np.float32) for _ in range(2))
    tx, ty = ms.Tensor(x), ms.Tensor(y)
    for _ in range(12):
        _scaled(tx, ty, flip=True)
        tiers.wait_for_compiles()
    f = _scaled._guard
    assert f is not None and type(f.fn(tx, ty, flip=True)) is ms.Tensor
    want = -np.maximum(x * 2 + y, 0)
    for got in (_scaled(tx, ty, flip=True), _scaled(tx, ty, True), _scaled(tx, y=ty, flip=True)):
        np.testing.assert_allclose(got.asnumpy(), want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(_scaled(tx, ty).asnumpy(), -want, rtol=1e-6, atol=1e-6)     # refused: the flag
    np.testing.assert_allclose(_scaled(ty, tx, flip=True).asnumpy(), -np.maximum(y * 2 + x, 0), rtol=1e-6, atol=1e-6)


class Pair(nn.Cell):
    def construct(self, x, y):
        return ops.relu(ops.matmul(x, y)), x


def test_a_guarded_call_with_a_tuple_result_runs_its_replay_once():
    """A result the guard does not make a Tensor of (a tuple) is wrapped by the caller, not
    computed again: one compiled-site hit per call."""
    rng = np.random.default_rng(13)
    net = Pair()
    x, y = (rng.standard_normal(s).astype(np.float32) for s in ((4, 6), (6, 5)))
    tx, ty = ms.Tensor(x), ms.Tensor(y)
    _guarded(net, tx, ty)
    stats = tiers.kernel_cache().stats
    before = stats["hits"] + stats["misses"]
    for _ in range(10):
        out = net(tx, ty)
    assert stats["hits"] + stats["misses"] - before == 10
    assert isinstance(out, tuple) and out[1] is not None
    np.testing.assert_allclose(out[0].asnumpy(), np.maximum(x @ y, 0), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(out[1].asnumpy(), x)
