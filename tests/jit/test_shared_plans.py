"""Plans shared by every site of one key (compiler/planning.py ``shared_plan``): repeated layers plan
a shape once between them and still compute with their own weights; a one-row product by a weight
plans per site (its plan reads that weight's state); a planner's knob in the key."""

import msvm as ms
import numpy as np
import pytest
from msvm import nn, ops
from msvm.compiler import attention_plan, planning, tiers


class Block(nn.Cell):
    """A Dense, a tanh GELU epilogue and a residual: GPT-2's MLP in small."""

    def __init__(self, seed, d=24, h=40):
        super().__init__()
        rng = np.random.default_rng(seed)
        self.up = nn.Dense(d, h)
        self.down = nn.Dense(h, d)
        for p in self.get_parameters():
            p.set_data(ms.Tensor(rng.standard_normal(p.shape).astype(np.float32) * 0.3))

    def construct(self, x):
        y = self.up(x)
        y = 0.5 * y * (1.0 + ops.tanh(0.7978845608 * (y + 0.044715 * y * y * y)))
        return self.down(y) + x


class Stack(nn.Cell):
    def __init__(self, n=3):
        super().__init__()
        self.blocks = nn.CellList([Block(seed) for seed in range(n)])

    def construct(self, x):
        for b in self.blocks:
            x = b(x)
        return x


def _reference(net, x):
    x = x.astype(np.float64)
    for b in net.blocks:
        w1, b1, w2, b2 = (p.asnumpy().astype(np.float64) for p in (b.up.weight, b.up.bias, b.down.weight, b.down.bias))
        y = x @ w1.T + b1
        y = 0.5 * y * (1.0 + np.tanh(0.7978845608 * (y + 0.044715 * y * y * y)))
        x = y @ w2.T + b2 + x
    return x


def _sites(net, op):
    return [s for v in net._runner.variants.values() for c in v.code.all_codes() for s in c.jit_sites.values()
            if s.op == op]


@pytest.mark.parametrize("rows", [1, 7])
@pytest.mark.parametrize("tier", ["L2", "L3"])
def test_repeated_layers_share_plans_and_keep_their_weights(tier, rows):
    ms.set_context(jit_config={"jit_level": tier})
    net = Stack()
    rng = np.random.default_rng(rows)
    for n in (rows, rows + 3):                 # (a second shape: new plans, shared again)
        x = rng.standard_normal((n, 24)).astype(np.float32)
        x[0, :3] = [np.nan, np.inf, -0.0]
        for _ in range(3):
            got = net(ms.Tensor(x)).asnumpy()
            tiers.wait_for_compiles(60)
        ref = _reference(net, x)
        np.testing.assert_allclose(got[1:], ref[1:], rtol=2e-4, atol=2e-4)
        assert np.isnan(got[0]).any() and np.array_equal(np.isnan(got[0]), np.isnan(ref[0]))
    sites = _sites(net, "FUSED_MATMUL")
    assert len(sites) >= 6, "each block's Dense layers have sites of their own"
    plans: dict = {}
    for s in sites:
        for key, p in s.plans.items():
            if p is not None:
                plans.setdefault((s.args, key), []).append(p)
    shared = [ps for (_args, key), ps in plans.items() if len(ps) > 1]
    assert shared, "the blocks' sites met the same keys"
    for (_args, key), ps in plans.items():
        if len(ps) > 1:                        # (several sites met this key: one plan, unless one row)
            one_row = np.prod(key[0][0][:-1]) == 1
            assert all(p is ps[0] for p in ps) == (not one_row), (key, one_row)


def test_a_one_row_product_counts_its_rows_as_the_planner_does():
    """x^T @ W^T with x [K, 1]: one row (the first input read transposed), though x has K rows."""
    class Site:
        args = (True, True, False, (), 0)

    assert planning.product_rows(Site(), np.zeros((5, 1), np.float32)) == 1
    assert planning.product_rows(Site(), np.zeros((2, 5, 3), np.float32)) == 6
    Site.args = (False,) + Site.args[1:]
    assert planning.product_rows(Site(), np.zeros((5, 1), np.float32)) == 5


class Attn(nn.Cell):
    def construct(self, q, k, v, mask):
        s = ops.matmul(q, k.swapaxes(-1, -2)) * 0.125 + mask
        return ops.matmul(ops.softmax(s, -1), v)


def test_a_planner_knob_is_in_the_key(monkeypatch):
    """Two attention sites of one key share a plan; turning FUSE_SOFTMAX off plans afresh."""
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((1, 2, 6, 8)).astype(np.float32) for _ in range(3))
    mask = np.where(rng.random((1, 1, 6, 6)) < 0.3, -1e9, 0.0).astype(np.float32)
    ms.set_context(jit_config={"jit_level": "L2", "enable_fusion": True})
    a, b = Attn(), Attn()
    outs = [net(*[ms.Tensor(t) for t in (q, k, v, mask)]).asnumpy() for net in (a, b)]
    pa, pb = ([p for s in _sites(net, "FUSED_ATTENTION") for p in s.plans.values()] for net in (a, b))
    assert pa and pb, "the attention was not fused into a FUSED_ATTENTION site"
    assert pa[0] is pb[0]
    monkeypatch.setattr(attention_plan, "FUSE_SOFTMAX", not attention_plan.FUSE_SOFTMAX)
    c = Attn()
    again = c(*[ms.Tensor(t) for t in (q, k, v, mask)]).asnumpy()
    pc = [p for s in _sites(c, "FUSED_ATTENTION") for p in s.plans.values()]
    assert pc and pc[0] is not pa[0]
    np.testing.assert_allclose(again, outs[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(outs[0], outs[1])
