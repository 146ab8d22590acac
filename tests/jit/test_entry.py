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
        if hit[3]:
            for fn in _replays(hit[3]):
                ops_ |= {v.op for k, v in fn.__globals__.items() if k.startswith("site")}
                natives += [g[2] for g in fn.__globals__.get("G", []) if g is not None]
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
    assert ops_ == {"FUSED_MATMUL", "FUSED_ELEMENTWISE", "SOFTMAX", "LAYER_NORM"}
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
    e, alloc, shape, dtype = nat[:4]
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
    e, alloc, shape, dtype = nat[:4]
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
    e, alloc, shape, dtype = nat[:4]
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
