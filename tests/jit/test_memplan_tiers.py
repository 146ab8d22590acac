"""The memory plan (issue 18) with the compiled tiers: the sites (FUSED_ELEMENTWISE, FUSED_MATMUL,
SOFTMAX, LAYER_NORM) and FUSED_CONV write into the arena through ``out=``, at L2, L3 and auto, in
the interpreter and in the replays the executor runs (with the native entries of L3 kernels); the
plan on and off agree bit for bit on random programs, a conv net, the BERT layer and ResNet-18;
results stay intact over later calls; two threads calling one Cell through its replay never share
an arena. (tests/vm/test_memplan.py: the plan itself, its checks and the interpreter.)"""

import threading

import msvm as ms
import numpy as np
import pytest
from cells import SmallConvNet
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from msvm import memory, nn, ops
from msvm.bytecode import verify
from msvm.compiler import memplan, tiers
from msvm.compiler.fuse import fuse
from msvm.interp import replay
from msvm.interp.interpreter import BoundCode
from random_programs import build, inputs, ref, trees
from special_values import assert_numpy_equal

ARGS = ("x", "v", "c", "s")


def bits(a):
    a = np.asarray(a)
    return a.shape, a.dtype, a.tobytes()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree=trees(), B=st.sampled_from([0, 2, 3, 5]), N=st.integers(6, 9), seed=st.integers(0, 2 ** 16),
       share=st.sampled_from([0.0, 0.15]), strided=st.booleans(), jit_level=st.sampled_from(["L2", "L3"]))
def test_random_programs_in_the_tiers_agree_with_the_plan_on_and_off(tree, B, N, seed, share, strided, jit_level):
    env = inputs(B, N, seed, share, strided)
    code = build(tree, N).finish()
    try:
        verify(code)
        with np.errstate(all="ignore"):
            want = np.asarray(ref(tree, env))
    except (ms.VerifyError, ValueError):
        return
    off = fuse(code)
    on = memplan.apply(off)
    assert memplan.check(on, on.memplan) == [] if on.memplan is not None else True
    ms.set_context(jit_config={"jit_level": jit_level})
    W = ms.Tensor(env["W"])
    args = [env[k] for k in ARGS]
    b_off = BoundCode(off, None, {"W": W}, None, accelerator=tiers.ACCELERATOR)
    b_on = BoundCode(on, None, {"W": W}, None, accelerator=tiers.ACCELERATOR)
    with np.errstate(all="ignore"):
        try:
            r_off = np.array(b_off.call(args))
        except ms.ShapeMismatch:
            return
        got = [np.array(b_on.call(args)) for _ in range(2)]
        rp = replay.build(b_on, b_on.fast_bind(args))
        assert rp is not None
        got += [np.array(rp(*args)) for _ in range(3)]
    for g in got:
        assert bits(g) == bits(r_off), (tree, jit_level)
    assert_numpy_equal(got[-1], want.astype(np.float32) if want.shape else want, rtol=2e-4, atol=1e-5, msg=str(tree))


def _warm(net, xs, calls=8):
    for _ in range(calls):
        for x in xs:
            net(x)
        tiers.wait_for_compiles(60)


def _unplanned(net, xs, calls=8) -> list:
    """net's results for xs with the memory plan off (warmed through the tiers first), the option set
    back on after: what the planned net must give bit for bit. (The option is read when a Cell
    compiles, and changing it compiles every Cell again: a net made with the plan off and first
    called with it on was planned, and these tests compared the plan with itself.)"""
    ms.set_context(jit_config={"memory_plan": False})
    try:
        _warm(net, xs, calls)
        assert _planned_ops(net) == set()
        return [net(x).asnumpy() for x in xs]
    finally:
        ms.set_context(jit_config={"memory_plan": True})


def _planned_ops(net) -> set:
    return {code.instrs[i].op.name for v in net._runner.variants.values() for code in v.code.all_codes()
            if code.memplan is not None for i in code.memplan.values}


class DenseConvNet(nn.Cell):
    """SmallConvNet (direct kernels: 3 input channels, depthwise) then the dense routes: a stride-1 3x3
    (the shifted GEMMs), a 1x1 and a stride-2 3x3 (phases) with batch norm and ReLU."""

    def __init__(self):
        super().__init__()
        self.stem = SmallConvNet()
        self.c1 = nn.Conv2d(3, 8, 3, pad_mode="pad", padding=1, has_bias=True)
        self.c2 = nn.Conv2d(8, 16, 3, pad_mode="pad", padding=1)
        self.bn2 = nn.BatchNorm2d(16)
        self.c3 = nn.Conv2d(16, 8, 1)
        self.c4 = nn.Conv2d(8, 8, 3, stride=2, pad_mode="pad", padding=1)
        self.relu = nn.ReLU()

    def construct(self, x):
        h = self.relu(self.c1(x))
        h = self.relu(self.bn2(self.c2(h)))
        h = self.relu(self.c4(self.relu(self.c3(h))))
        return self.stem(x) + ops.mean(h, (1, 2, 3)).reshape(-1, 1)


@pytest.mark.parametrize("jit_level", ["L2", "L3", "auto"])
def test_a_conv_net_writes_fused_conv_into_the_arena(jit_level, monkeypatch):
    from msvm.compiler import conv
    from msvm.interp import kernels as K

    # every dense convolution's product (the BLAS route, the shifted GEMMs, msvm's own GEMM) handed a
    # planned buffer records whether it wrote into it: all must have (an L2/L3 caller that ignored
    # ``out`` left the arena's slot unused and allocated anyway)
    wrote = []
    gemm, bc, taps = K.conv_gemm, conv.BlasConv.__call__, conv.TapsConv.__call__

    def spy_gemm(*a, **k):
        res = gemm(*a, **k)
        out = a[8] if len(a) > 8 else k.get("out")
        if out is not None:
            wrote.append(np.shares_memory(res, out))
        return res

    def spy_blas(self, x, wt, out=None, *rest):
        res = bc(self, x, wt, out, *rest)
        if out is not None:
            wrote.append(np.shares_memory(res, out))
        return res
    def spy_taps(self, x, a, out=None, *rest):
        res = taps(self, x, a, out, *rest)
        if out is not None:
            wrote.append(np.shares_memory(res, out))
        return res
    monkeypatch.setattr(K, "conv_gemm", spy_gemm)
    monkeypatch.setattr(conv.BlasConv, "__call__", spy_blas)
    monkeypatch.setattr(conv.TapsConv, "__call__", spy_taps)
    ms.set_context(jit_config={"jit_level": jit_level})
    base, off, net = DenseConvNet(), DenseConvNet(), DenseConvNet()
    for other in (off, net):
        for (_n, p), (_, q) in zip(other.parameters_and_names(), base.parameters_and_names()):
            p.set_data(ms.Tensor(q.asnumpy()))
    rng = np.random.default_rng(7)
    xs = [ms.Tensor(rng.standard_normal((b, 3, s, s)).astype(np.float32)) for b, s in ((2, 16), (1, 12), (3, 16))]
    want = _unplanned(off, xs, 3 if jit_level != "auto" else 8)
    _warm(net, xs, 3 if jit_level != "auto" else 8)
    wrote.clear()
    for x in xs:
        net(x)
    assert wrote and all(wrote), wrote
    first = net(xs[0])
    snapshot = first.asnumpy().copy()
    for x, w in zip(xs, want):
        assert bits(net(x).asnumpy()) == bits(w)
    np.testing.assert_array_equal(first.asnumpy(), snapshot)
    assert "FUSED_CONV" in _planned_ops(net)
    assert memory.report(net)["arena_bytes"] > 0


class Mlp(nn.Cell):
    def __init__(self):
        super().__init__()
        rng = np.random.default_rng(8)
        self.w1 = ms.Parameter(ms.Tensor((rng.standard_normal((32, 64)) / 6).astype(np.float32)))
        self.w2 = ms.Parameter(ms.Tensor((rng.standard_normal((64, 32)) / 8).astype(np.float32)))
        self.norm = nn.LayerNorm((32,))

    def construct(self, x):
        h = ops.gelu(ops.matmul(x, self.w1) + 0.1)
        y = ops.matmul(h, self.w2) + x
        return ops.softmax(self.norm(y) * 2.0, -1) + y


def np_mlp(net, x):
    from scipy import special

    w1, w2 = net.w1.asnumpy().astype(np.float64), net.w2.asnumpy().astype(np.float64)
    t = x.astype(np.float64) @ w1 + 0.1
    h = 0.5 * t * (1 + special.erf(t / np.sqrt(2)))
    y = h @ w2 + x
    m, v = y.mean(-1, keepdims=True), y.var(-1, keepdims=True)
    z = (y - m) / np.sqrt(v + 1e-7) * 2.0
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True) + y


def test_replayed_calls_keep_results_and_threads_never_share_an_arena():
    rng = np.random.default_rng(9)
    shapes = [(4, 32), (7, 32), (4, 32)]
    xs = [ms.Tensor(rng.standard_normal(s).astype(np.float32)) for s in shapes]
    unplanned = _unplanned(Mlp(), xs)
    net = Mlp()
    _warm(net, xs)
    assert {"FUSED_MATMUL", "SOFTMAX"} <= _planned_ops(net) or "FUSED_ELEMENTWISE" in _planned_ops(net)
    hit = next(h for h in net._runner.memo.values() if h.replay)
    assert "ar.bind(KEY, LAY)" in hit.replay.source          # the replay runs on the arena
    firsts = [net(x) for x in xs]
    snaps = [f.asnumpy().copy() for f in firsts]
    for x in xs * 3:
        net(x)
    for f, s in zip(firsts, snaps):
        np.testing.assert_array_equal(f.asnumpy(), s)      # no later call wrote over an earlier result
    for x, w in zip(xs, unplanned):
        assert bits(net(x).asnumpy()) == bits(w)
        np.testing.assert_allclose(net(x).asnumpy(), np_mlp(net, x.asnumpy()), rtol=2e-4, atol=2e-4)
    # two threads, each its own inputs and shapes, through the replays and native entries
    want = {id(x): w for x, w in zip(xs, unplanned)}
    bad = []
    start = threading.Barrier(2)

    def work(order):
        start.wait()
        for _ in range(30):
            for x in order:
                if bits(net(x).asnumpy()) != bits(want[id(x)]):
                    bad.append(x.shape)
    threads = [threading.Thread(target=work, args=(o,)) for o in (xs, xs[::-1])]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert bad == []


def test_the_bert_layer_agrees_with_the_plan_on_and_off():
    import bert_layer

    x = ms.Tensor(np.random.default_rng(10).standard_normal((2, 9, 768)).astype(np.float32))
    outs = {}
    try:
        for plan in (True, False):
            ms.set_context(jit_config={"memory_plan": plan})
            bert_layer.layer.set_inputs(ms.Tensor(shape=[None, None, 768], dtype=ms.float32))   # recompile
            for _ in range(7):
                outs[plan] = bert_layer.layer(x).asnumpy()
                tiers.wait_for_compiles(60)
            if plan:
                assert _planned_ops(bert_layer.layer)
    finally:
        ms.set_context(jit_config={"memory_plan": True})
    assert bits(outs[True]) == bits(outs[False])
    np.testing.assert_allclose(outs[True], bert_layer.numpy_reference(bert_layer.layer, x.asnumpy()),
                               rtol=1e-5, atol=2e-5)


def test_resnet18_agrees_with_the_plan_on_and_off():
    ms.as_mindspore()
    import mindcv
    from refs import cv

    nets = {}
    weights = None
    for plan in (True, False):
        net = mindcv.create_model("resnet18")
        net.set_train(False)
        params = net.parameters_dict()
        weights = weights or cv.test_weights([(k, p.shape) for k, p in params.items()])
        for k, v in weights.items():
            params[k].set_data(ms.Tensor(v))
        nets[plan] = net
    rng = np.random.default_rng(11)
    xs = [ms.Tensor(rng.standard_normal((1, 3, s, s)).astype(np.float32)) for s in (64, 48)]
    want = _unplanned(nets[False], xs, 6)
    _warm(nets[True], xs, 6)
    for x, w in zip(xs, want):
        assert bits(nets[True](x).asnumpy()) == bits(w)
    rep = memory.report(nets[True])
    slack = 64 * sum(c["buffers"] for c in rep["codes"])
    assert rep["codes"] and 0 < rep["arena_bytes"] <= rep["unplanned_bytes"] + slack
