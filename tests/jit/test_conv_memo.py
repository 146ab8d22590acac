"""A convolution caller's memo (compiler/conv.py ``Memo``, issue 18: the Python around each kernel call).
A replayed call that brings the same arrays runs the native calls it made last time, packed into one
(pool.Calls); an input that is a new array at every call (a sub-Cell's result, the model's input, a
residual) moves the calls' pointers with it. Every answer against the float64 numpy reference and the
interpreter: new images at every call (NaN, inf), on each route (taps, dot, cout; the depthwise kernel),
residuals, set_data, a workspace grown by another layer, strided images, two caller threads, one and
two pool threads; and the memo is used (a test that passed without it would test nothing)."""

import threading

import msvm as ms
import numpy as np
import pytest
from msvm import nn
from msvm.compiler import conv, pool, tiers
from msvm.interp import capture
from test_conv_gemm import BLOCKS
from test_conv_tiers2 import close, forward, images, make, reference


@pytest.fixture
def hits(monkeypatch):
    """How many calls each Memo answered, and how many it refused (with no capture: a captured
    program runs a memo's calls without asking it, interp/capture.py)."""
    monkeypatch.setattr(capture, "ENABLED", False)
    monkeypatch.setenv(conv.ROUTE_ENV, "taps")      # (the taps product's memo: AVX2 takes BLAS by default)
    seen = {"hit": 0, "miss": 0}
    orig = conv.Memo.hit

    def spy(self, fixed, arrays):
        r = orig(self, fixed, arrays)
        seen["hit" if r else "miss"] += 1
        return r
    monkeypatch.setattr(conv.Memo, "hit", spy)
    return seen


def _route(monkeypatch, route):
    monkeypatch.setattr(conv, "use_dot", lambda *a: route == "dot")
    monkeypatch.setattr(conv, "use_cout", lambda *a: route == "cout")
    monkeypatch.setenv(conv.ROUTE_ENV, "taps")


def _new_images(rng, cin, n, hw, calls):
    """A new array at every call (moved), NaN and inf in every other."""
    return [images(rng, cin, [(n, *hw)], special=i % 2 == 1)[0] for i in range(calls)]


@pytest.mark.parametrize("route", ["taps", "dot", "cout"])
@pytest.mark.parametrize("name", ["1x1", "1x1_residual_relu", "3x3", "1x1_s2"])
@pytest.mark.parametrize("level", ["L3", "auto"])
def test_new_images_at_every_call_get_their_own_answers(hits, monkeypatch, route, name, level):
    _route(monkeypatch, route)
    s, mode, _ = BLOCKS[name]
    rng = np.random.default_rng(7)
    net = make(s, 3)
    ms.set_context(jit_config={"jit_level": level})
    for x in _new_images(rng, s["cin"], 1, (9, 11), 4):          # (compiled, then replayed)
        net(ms.Tensor(x))
        tiers.wait_for_compiles(60)
    for x in _new_images(rng, s["cin"], 1, (9, 11), 6):
        close(net(ms.Tensor(x)).asnumpy(), reference(net, s, x))
    # every layer on every route makes whole calls, kept: their copies are native calls (the dot route's
    # columns, the padded phases or subsampled planes, the taps product's grid cropped into the result)
    assert hits["hit"] > 0, (hits, mode)


@pytest.mark.parametrize("level", ["L3", "auto"])
def test_an_inverted_residual_block_moves_its_input_and_residual(hits, level):
    """MobileNet v2's block: 1x1 expand, depthwise 3x3, 1x1 project + the block's input; the block's
    input is a new array at every call (so is the residual the project layer reads)."""

    class IR(nn.Cell):
        def __init__(self):
            super().__init__()
            self.body = nn.SequentialCell([nn.Conv2d(16, 48, 1, has_bias=False), nn.BatchNorm2d(48), nn.ReLU6(),
                                           nn.Conv2d(48, 48, 3, pad_mode="same", group=48, has_bias=False),
                                           nn.BatchNorm2d(48), nn.ReLU6(),
                                           nn.Conv2d(48, 16, 1, has_bias=False), nn.BatchNorm2d(16)])

        def construct(self, x):
            return x + self.body(x)

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.a, self.b = IR(), IR()

        def construct(self, x):
            return self.b(self.a(x))

    net = Net()
    net.set_train(False)
    rng = np.random.default_rng(2)
    for p in net.get_parameters():
        v = rng.standard_normal(p.shape)
        p.set_data(ms.Tensor((np.abs(v) + 0.5 if "variance" in p.name else v).astype(np.float32)))
    xs = _new_images(rng, 16, 1, (10, 12), 10)
    ms.set_context(jit_config={"jit_level": "L1"})
    want = [net(ms.Tensor(x)).asnumpy() for x in xs]
    ms.set_context(jit_config={"jit_level": level})
    for x in xs[:4]:
        net(ms.Tensor(x))
        tiers.wait_for_compiles(60)
    hits.update(hit=0, miss=0)
    for x, w in zip(xs, want):
        close(net(ms.Tensor(x)).asnumpy(), w, 1e-4)
    assert hits["hit"] >= 3 * len(xs), hits        # (six layers a forward; at auto some still compiling)


def test_set_data_and_a_writable_weight_are_seen(hits):
    s, _, _ = BLOCKS["1x1_residual_relu"]
    rng = np.random.default_rng(4)
    net = make(s, 5)
    x = images(rng, s["cin"], [(1, 8, 8)], special=True)[0]
    forward(net, "L3", True, [x])
    for _ in range(2):
        close(net(ms.Tensor(x)).asnumpy(), reference(net, s, x))
    assert hits["hit"] > 0
    w = rng.standard_normal(net.conv.weight.shape).astype(np.float32)
    net.conv.weight.set_data(ms.Tensor(w))
    close(net(ms.Tensor(x)).asnumpy(), reference(net, s, x))
    close(net(ms.Tensor(x)).asnumpy(), reference(net, s, x))
    arr = net.conv.weight._data
    if not arr.flags.writeable and arr.flags.owndata:     # (a small Parameter: its own array, made writable)
        arr.flags.writeable = True
        arr *= 2
        close(net(ms.Tensor(x)).asnumpy(), reference(net, s, x))


def test_a_workspace_grown_by_another_layer_is_not_read_through_stale_pointers(hits, monkeypatch):
    _route(monkeypatch, "dot")              # (dot's transposed columns live in the thread's workspace)
    s, _, _ = BLOCKS["1x1"]
    rng = np.random.default_rng(8)
    small, big = make(s, 1), make(s, 2)
    conv.thread_workspace().bufs.clear()     # (this thread's workspaces as a fresh thread has them: none)
    xs = _new_images(rng, s["cin"], 1, (6, 6), 3)
    forward(small, "L3", True, xs)
    gen = conv.thread_workspace().gen
    forward(big, "L3", True, images(rng, s["cin"], [(1, 40, 40)], special=False))   # (grows the workspace)
    assert conv.thread_workspace().gen > gen
    for x in xs:
        close(small(ms.Tensor(x)).asnumpy(), reference(small, s, x))
    assert hits["miss"] > 0


def test_strided_and_fortran_images(hits):
    s, _, _ = BLOCKS["1x1_residual_relu"]
    rng = np.random.default_rng(9)
    net = make(s, 6)
    base = images(rng, s["cin"], [(2, 12, 14)], special=True)[0]
    forward(net, "L3", True, [base])
    for x in (base[:, :, ::2, 1::2], np.asfortranarray(base), base[1:], base.copy()):
        close(net(ms.Tensor(x)).asnumpy(), reference(net, s, x))


@pytest.mark.parametrize("view", ["flipped", "every_other", "fortran"])
def test_a_depthwise_layer_on_new_strided_views(hits, view):
    """The depthwise kernel reads its image at the strides it was prepared for: new views of new arrays
    at every call (negative strides among them) move its pointer within their bytes, not past them."""
    s = dict(BLOCKS["1x1"][0], cin=8, cout=8, k=3, pad_mode="same", group=8)
    net = make(s, 12)
    rng = np.random.default_rng(12)

    def new():
        x = images(rng, 8, [(1, 9, 22)], special=True)[0]
        return {"flipped": x[:, ::-1, ::-1, ::-1], "every_other": x[:, :, :, ::2],
                "fortran": np.asfortranarray(x)}[view]
    forward(net, "L3", True, [new()])
    for _ in range(6):
        x = new()
        close(net(ms.Tensor(x)).asnumpy(), reference(net, s, np.ascontiguousarray(x)))
    assert hits["hit"] >= 5, hits


def test_a_moved_input_that_overlaps_the_output_is_refused():
    """The calls write the result while they read the input: a moved image over the result's memory
    runs the convolution's own path (a copy), not the kept calls."""
    tc = conv.TapsConv((1, 8, 4, 4), (8, 8, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1, np.float32)
    rng = np.random.default_rng(1)
    a = conv.prepared_a(rng.standard_normal((8, 8, 1, 1)).astype(np.float32), 1, np.float32, tc.inplace)
    a.flags.writeable = False
    mem = np.zeros(2 * 8 * 16, np.float32)
    out = mem[:128].reshape(1, 8, 4, 4)
    x = rng.standard_normal((1, 8, 4, 4)).astype(np.float32)
    steps = conv.Steps()
    tc(x, a, out, 1, None, None, -np.inf, np.inf, steps)
    m = conv.Memos()
    m.made((a,), (x, out, None), steps, (0, 1, 2))
    assert m.last is None                       # (a caller's first call may be its only one)
    m.made((a,), (x, out, None), steps, (0, 1, 2))
    assert m.last is not None
    x2 = x + 1
    assert m.hit((a,), (x2, out, None))
    np.testing.assert_allclose(out, tc(x2, a)[...], rtol=1e-6)
    over = mem[64:192].reshape(1, 8, 4, 4)
    over[...] = x
    assert not m.hit((a,), (over, out, None))
    both = np.zeros(3 * 8 * 16, np.float32)               # (the image and the result both moved, over each other)
    assert not m.hit((a,), (both[:128].reshape(1, 8, 4, 4), both[64:192].reshape(1, 8, 4, 4), None))
    apart = np.zeros(2 * 8 * 16, np.float32)
    x4, out4 = apart[:128].reshape(1, 8, 4, 4), apart[128:].reshape(1, 8, 4, 4)
    x4[...] = x2
    assert m.hit((a,), (x4, out4, None))
    np.testing.assert_allclose(out4, tc(x2, a)[...], rtol=1e-6)
    assert not m.hit((a.copy(),), (x, out, None))


def _warmed(name, seed, rng_seed, calls, warm=1, hw=(7, 9)):
    """(net, images, answers): BLOCKS[name] made with ``seed``, ``calls`` new images (``_new_images``)
    with their float64 references, compiled at L3 on the first ``warm`` of them."""
    s, _, _ = BLOCKS[name]
    net = make(s, seed)
    xs = _new_images(np.random.default_rng(rng_seed), s["cin"], 1, hw, calls)
    forward(net, "L3", True, xs[:warm])
    return net, xs, [reference(net, s, x) for x in xs]


def test_two_caller_threads(hits):
    net, xs, want = _warmed("1x1_residual_relu", 7, 10, 8, warm=2)
    got = {}

    def run(k):
        for _ in range(5):
            for i in range(k, len(xs), 2):
                got[i] = net(ms.Tensor(xs[i])).asnumpy()
                close(got[i], want[i])
    ts = [threading.Thread(target=run, args=(k,)) for k in (0, 1)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert sorted(got) == list(range(len(xs)))


@pytest.mark.parametrize("route,name", [("taps", "1x1_residual_relu"), ("dot", "1x1_residual_relu"),
                                        ("cout", "1x1_residual_relu"), ("cout", "3x3_pad_residual"), ("cout", "3x3_s2")])
def test_one_and_two_pool_threads_agree_bit_for_bit(hits, monkeypatch, route, name):
    """(gemm_cout on one panel of channels: two threads take halves of its output rows, or of a 1x1
    map's pixels, with the residual's)"""
    import os

    _route(monkeypatch, route)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    s, _, _ = BLOCKS[name]
    rng = np.random.default_rng(11)
    xs = _new_images(rng, s["cin"], 1, (14, 14), 5)
    outs = {}
    for threads in ("1", "2"):
        monkeypatch.setenv("MSVM_THREADS", threads)
        monkeypatch.setattr(conv, "SPLIT_MIN_FLOPS", 0.0)
        net = make(s, 8)
        forward(net, "L3", True, xs[:1])
        outs[threads] = [net(ms.Tensor(x)).asnumpy() for x in xs]
    for a, b in zip(outs["1"], outs["2"]):
        np.testing.assert_array_equal(a, b)
    for x, o in zip(xs, outs["2"]):
        close(o, reference(make(s, 8), s, x))
    assert hits["hit"] > 0


def test_calls_run_packed_and_move_a_pointer():
    """pool.Calls: the calls in one native call (or over two threads), a pointer argument changed in
    its words."""
    from msvm.compiler import gemm_dot

    fn = gemm_dot.function("float32", "xt1")           # (c, row, src*, dst*, p0, p1, ldd): a transpose
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = a + 100
    dst = np.zeros((4, 3), np.float32)
    calls = pool.Calls([[(fn, (3, 4, conv.data_pointer(a), conv.data_pointer(dst), 0, 4, 3))]], True)
    calls()
    np.testing.assert_array_equal(dst, a.T)
    calls.set(0, 2, conv.data_pointer(b))
    calls()
    np.testing.assert_array_equal(dst, b.T)
    halves = pool.Calls([[(fn, (3, 4, conv.data_pointer(a), conv.data_pointer(dst), p0, p1, 3))] for p0, p1 in
                         ((0, 2), (2, 4))], False)
    halves()
    np.testing.assert_array_equal(dst, a.T)
    halves.set(1, 2, conv.data_pointer(b))
    halves()
    np.testing.assert_array_equal(dst[:2], a.T[:2])
    np.testing.assert_array_equal(dst[2:], b.T[2:])


def run_on_a_thread_with_the_identifier_of(ident, fn, tries=50):
    """fn() on a new thread whose ``threading.get_ident()`` is ``ident`` (an exited thread's: the C
    library hands the next thread the exited one's stack and control block, though not always the
    first time); its result, or None where no thread got that identifier in ``tries`` threads."""
    got = {}

    def body():
        if threading.get_ident() == ident:
            got["r"] = fn()
    for _ in range(tries):
        t = threading.Thread(target=body)
        t.start()
        t.join()
        if "r" in got:
            return got["r"]
    return None


def test_a_thread_that_reuses_an_exited_threads_identifier_does_not_run_its_memos(hits, monkeypatch):
    """A memo's pointers lead into its thread's workspace, which is freed when the thread exits; the
    next thread often gets the same identifier, and a memo checked by identifier ran into the freed
    buffers (wrong answers, a corrupted heap). The new thread's first call makes its own calls."""
    _route(monkeypatch, "taps")
    # (stride 2: the image's phases are copied into the workspace)
    net, xs, want = _warmed("1x1_s2", 13, 13, 4, hw=(9, 11))
    first = {}

    def a():
        first["id"] = threading.get_ident()
        for x in xs:
            net(ms.Tensor(x))
        first["hits"] = hits["hit"]
    t = threading.Thread(target=a)
    t.start()
    t.join()
    assert first["hits"] > 0                   # (memos were made and used on that thread)

    def b():
        before = hits["hit"]
        out = net(ms.Tensor(xs[0])).asnumpy()
        return hits["hit"] - before, out
    r = run_on_a_thread_with_the_identifier_of(first["id"], b)
    assert r is not None, "no new thread got the exited thread's identifier"
    assert r[0] == 0, "a memo made on the exited thread ran on the new one"
    close(r[1], want[0])


def test_threads_taking_turns_do_not_stop_a_callers_memos(hits, monkeypatch):
    """Two threads that call one Cell in turn replace each other's memo (each is its thread's); that is
    not a miss of the caller's arrays, and once one thread is left its memos run again."""
    _route(monkeypatch, "taps")
    net, xs, want = _warmed("1x1_residual_relu", 14, 14, 4)
    turns = [threading.Event() for _ in range(2)]
    got = {}

    def run(k):
        for i in range(3 * conv.MEMO_MISSES):
            turns[k].wait()
            turns[k].clear()
            got[k, i] = net(ms.Tensor(xs[i % len(xs)])).asnumpy()
            turns[1 - k].set()
    ts = [threading.Thread(target=run, args=(k,)) for k in (0, 1)]
    for t in ts:
        t.start()
    turns[0].set()
    for t in ts:
        t.join()
    for (_k, i), g in got.items():
        close(g, want[i % len(xs)])
    for x in xs:
        net(ms.Tensor(x))
    hits.update(hit=0, miss=0)
    for x, w in zip(xs, want):
        close(net(ms.Tensor(x)).asnumpy(), w)
    assert hits["hit"] >= len(xs), hits
