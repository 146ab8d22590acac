"""In-place Parameter updates (ASSIGN_PARAM, issue 21) through the compiled tiers: a Cell that
updates its weights on every call gives, over repeated calls, the same results and the same
Parameter values at L2, L3 and auto as at L1 and as a numpy model of the state. The weight the
update changes also feeds a matmul by its transpose (whose L3 site keeps a transposed copy per
weight array) and fused elementwise chains, so a cache that missed the update would show."""

import msvm as ms
import numpy as np
import pytest
from msvm import nn, ops
from msvm.compiler import tiers

LEVELS = ["L1", "L2", "L3", "auto"]


class Learner(nn.Cell):
    """y = tanh(x @ W.T + b) * 2 + 1; then W += lr * y.T @ x and b := b + mean(y) (an SGD-like step)."""

    def __init__(self, w, b):
        super().__init__()
        self.w = ms.Parameter(ms.Tensor(w), name="w")
        self.b = ms.Parameter(ms.Tensor(b), name="b")
        self.step = ops.AssignAdd()
        self.dense = ops.MatMul(transpose_b=True)      # x @ W.T as nn.Dense computes it

    def construct(self, x):
        y = ops.tanh(self.dense(x, self.w) + self.b) * 2.0 + 1.0
        self.step(self.w, ops.matmul(y.T, x) * 0.01)
        ops.assign(self.b, self.b + ops.mean(y))
        return y, ops.relu(self.dense(x, self.w) - self.b)


def numpy_learner(w, b, x):
    y = np.tanh(x @ w.T + b) * np.float32(2) + np.float32(1)
    w = (w + (y.T @ x) * np.float32(0.01)).astype(np.float32)
    b = (b + y.mean()).astype(np.float32)
    return y, np.maximum(x @ w.T - b, 0), w, b


@pytest.mark.parametrize("tier", LEVELS)
def test_weight_updates_match_l1_and_numpy_over_calls(level, tier):
    rng = np.random.default_rng(7)
    w0 = (rng.standard_normal((16, 32)) * 0.1).astype(np.float32)
    b0 = (rng.standard_normal(16) * 0.1).astype(np.float32)
    xs = [rng.standard_normal((n, 32)).astype(np.float32) for n in (8, 8, 8, 5, 8, 8, 8, 8)]
    results = {}
    for lv in ("L1", tier):
        level(lv)
        net = Learner(w0, b0)
        w, b = w0.copy(), b0.copy()
        outs = []
        for k, x in enumerate(xs):
            y, z = net(ms.Tensor(x))
            ry, rz, w, b = numpy_learner(w, b, x)
            np.testing.assert_allclose(y.asnumpy(), ry, rtol=1e-4, atol=1e-5, err_msg=f"{lv} call {k}")
            np.testing.assert_allclose(z.asnumpy(), rz, rtol=1e-4, atol=1e-4, err_msg=f"{lv} call {k}")
            np.testing.assert_allclose(net.w.asnumpy(), w, rtol=1e-4, atol=1e-5, err_msg=f"{lv} call {k}")
            np.testing.assert_allclose(net.b.asnumpy(), b, rtol=1e-4, atol=1e-5, err_msg=f"{lv} call {k}")
            outs.append((y.asnumpy(), z.asnumpy(), net.w.asnumpy().copy()))
            tiers.wait_for_compiles(30)
        if lv in ("L3", "auto"):     # the matmuls by W.T ran as compiled kernels on a kept transposed (or packed) copy
            sites = [s for v in net._runner.variants.values() for c in v.code.all_codes()
                     for s in c.jit_sites.values() if s.weight_t]
            assert sites and all(s.wcache or s.pcache for s in sites), lv
        assert net.w.version == len(xs) and net.b.version == len(xs)
        results[lv] = outs
        if lv != "L1":
            # the Code has an effect: its calls are never replayed (a replay that raised would be run
            # again by the interpreter, updating twice), and no guard is aimed at it
            memo = net._runner.memo
            assert memo and all(not hit.replay for hit in memo.values()), "a Code with an effect was replayed"
            assert net._guard is None
    for (y1, z1, w1), (y2, z2, w2) in zip(results["L1"], results[tier]):
        np.testing.assert_allclose(y2, y1, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(z2, z1, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(w2, w1, rtol=1e-5, atol=1e-6)


class ScatterInto(nn.Cell):
    def __init__(self, x):
        super().__init__()
        self.x = ms.Parameter(ms.Tensor(x), name="x")
        self.add = ops.ScatterNdAdd()

    def construct(self, idx, upd):
        self.add(self.x, idx, upd)
        return ops.exp(self.x * 0.1) + self.x


@pytest.mark.parametrize("tier", LEVELS)
def test_scatter_into_a_parameter_then_a_fused_read(level, tier):
    level(tier)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 4)).astype(np.float32)
    net = ScatterInto(x)
    for k in range(8):
        idx = rng.integers(0, 5, size=(3, 1)).astype(np.int32)
        upd = rng.standard_normal((3, 4)).astype(np.float32)
        np.add.at(x, (idx[:, 0],), upd)
        out = net(ms.Tensor(idx), ms.Tensor(upd))
        np.testing.assert_allclose(out.asnumpy(), np.exp(x * np.float32(0.1)) + x, rtol=1e-5, atol=1e-5,
                                   err_msg=f"{tier} call {k}")
        tiers.wait_for_compiles(30)
    np.testing.assert_allclose(net.x.asnumpy(), x, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("tier", LEVELS)
def test_batch_norm_training_over_calls(level, tier):
    level(tier)
    rng = np.random.default_rng(5)
    bn = nn.BatchNorm2d(4, momentum=0.9)
    bn.set_train()
    mm, mv = np.zeros(4, np.float32), np.ones(4, np.float32)
    for k in range(6):
        x = (rng.standard_normal((2, 4, 6, 6)) * 3 - 1).astype(np.float32)
        m, v = x.mean((0, 2, 3)), x.var((0, 2, 3))
        want = (x - m[None, :, None, None]) / np.sqrt(v[None, :, None, None] + 1e-5)
        mm, mv = mm * np.float32(0.9) + m * np.float32(0.1), mv * np.float32(0.9) + v * np.float32(0.1)
        np.testing.assert_allclose(bn(ms.Tensor(x)).asnumpy(), want, rtol=1e-4, atol=1e-4, err_msg=f"{tier} {k}")
        np.testing.assert_allclose(bn.moving_mean.asnumpy(), mm, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(bn.moving_variance.asnumpy(), mv, rtol=1e-5, atol=1e-5)
        tiers.wait_for_compiles(30)
