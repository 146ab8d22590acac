"""The effect rows (RANDOM, PRINT; issue 21) at every tier: each call draws new numbers and prints
again (nothing folded, cached or replayed), the same seeds give the same numbers at L1, L2, L3 and
auto, and the compiled elementwise work around a draw matches numpy."""

import msvm as ms
import numpy as np
import pytest
from msvm import nn, ops
from msvm.compiler import tiers

LEVELS = ["L1", "L2", "L3", "auto"]


class Noisy(nn.Cell):
    def __init__(self, seed):
        super().__init__()
        self.normal = ops.StandardNormal(seed, 1)
        self.drop = ops.Dropout(keep_prob=0.5, Seed0=seed)
        self.print = ops.Print()

    def construct(self, x):
        n = self.normal((x.shape[0], 16))
        self.print("call", x.shape[0])
        d, mask = self.drop(x)
        return n, mask, ops.tanh(x * 2.0 + n) - 1.0, d


@pytest.mark.parametrize("tier", LEVELS)
def test_draws_and_prints_once_per_call_at_every_tier(level, tier, rng, capsys):
    level(tier)
    net, twin = Noisy(7), Noisy(7)
    xs = [rng.standard_normal((b, 16)).astype(np.float32) for b in (4, 4, 6, 4, 4, 4)]
    seen = []
    for k, x in enumerate(xs):
        n, mask, y, d = net(ms.Tensor(x))
        n, mask, y, d = n.asnumpy(), mask.asnumpy(), y.asnumpy(), d.asnumpy()
        assert n.shape == (x.shape[0], 16)
        np.testing.assert_allclose(y, np.tanh(x * np.float32(2) + n) - np.float32(1), rtol=2e-5, atol=2e-6,
                                   err_msg=f"{tier} call {k}")
        np.testing.assert_allclose(d, np.where(mask > 0, x * 2, 0), rtol=1e-6)
        assert all(not np.array_equal(n, s) for s in seen if s.shape == n.shape), f"{tier}: call {k} repeated a draw"
        seen.append(n)
        t = twin(ms.Tensor(x))
        np.testing.assert_array_equal(t[0].asnumpy(), n)
        np.testing.assert_array_equal(t[1].asnumpy(), mask)
        tiers.wait_for_compiles(30)
    sites = [s for v in net._runner.variants.values() for c in v.code.all_codes()
             for s in c.__dict__.get("jit_sites", {}).values()]
    levels = {k.level for s in sites for k in list(s.l2.values()) + list(s.l3.values()) if isinstance(k, tiers.Compiled)}
    assert levels == {"L1": set(), "L2": {2}, "L3": {3}}.get(tier, levels) and (tier != "auto" or 2 in levels), levels
    out = capsys.readouterr().out.splitlines()          # (net, then its twin, at each call)
    assert out == [w for x in xs for _ in range(2) for w in ("call", str(x.shape[0]))]


@pytest.mark.parametrize("tier", LEVELS)
def test_same_seed_gives_the_same_numbers_across_tiers(level, tier):
    level(tier)
    got = [Noisy(11)(ms.Tensor(np.ones((3, 16), np.float32)))[0].asnumpy() for _ in range(2)]
    ms.set_context(jit_config={"jit_level": "L1"})
    ref = Noisy(11)(ms.Tensor(np.ones((3, 16), np.float32)))[0].asnumpy()
    np.testing.assert_array_equal(got[0], ref)
    np.testing.assert_array_equal(got[1], ref)
