"""``Cell.to_float(float16)`` at the compiled tiers, fused and unfused: the same float16 answer
as the interpreter (L1), bit for bit, on repeated calls and two batch sizes; the sites that see
float16 stay in the interpreter and say why."""

import msvm as ms
import numpy as np
import pytest
from msvm import nn, ops


class Block(nn.Cell):
    def __init__(self):
        super().__init__()
        self.dense = nn.Dense(12, 12)
        self.norm = nn.LayerNorm((12,))

    def construct(self, x, mask):
        h = ops.gelu(self.dense(x)) + x
        return self.norm(ops.masked_fill(h, mask, -1.0)) * 2.0


@pytest.mark.parametrize("level", ["L2", "L3"])
@pytest.mark.parametrize("fusion", [True, False])
def test_float16_cell_at_compiled_tiers_matches_l1(level, fusion, rng):
    net = Block().to_float(ms.float16)
    for p in net.get_parameters():
        p.set_data(ms.Tensor((rng.standard_normal(p.shape) * 0.3 + (1 if "gamma" in p.name else 0))
                             .astype(np.float32)))
    cases = []
    for b in (3, 5):
        x = rng.standard_normal((b, 12)).astype(np.float32)
        x[0, :3] = [np.nan, np.inf, -np.inf]
        cases.append((ms.Tensor(x), ms.Tensor(rng.random((b, 12)) < 0.2)))
    try:
        ms.set_context(jit_config={"jit_level": "L1", "enable_fusion": fusion})
        want = [net(*c).asnumpy() for c in cases]
        ms.set_context(jit_config={"jit_level": level, "enable_fusion": fusion})
        net.set_train(False)
        for _ in range(3):
            for c, w in zip(cases, want):
                out = net(*c)
                assert out.dtype == ms.float16
                np.testing.assert_array_equal(out.asnumpy(), w)
        codes = next(iter(net._runner.variants.values())).code.all_codes()
        whys = {w for cd in codes for s in cd.__dict__.get("jit_sites", {}).values() for w in s.l1_why.values()}
        assert "dtype float16" in whys, whys
    finally:
        ms.set_context(jit_config={"jit_level": "auto", "enable_fusion": True})
    assert np.isnan(want[0][0]).all() and np.isfinite(want[0][1:]).all()
