"""Boolean-mask indexing at the compiled tiers, fused and unfused: x[mask]'s count is decided by
the data, so a call signature no longer fixes every shape: the straight-line replay is not built
for such code (it would bake the count in) and the interpreter runs it, with compiled sites for
the elementwise work around it. Repeated calls with the same shapes and different masks, with
NaN/inf, empty and all-False masks, give numpy's answer at every tier."""

import msvm as ms
import numpy as np
import pytest
from msvm import nn, ops
from special_values import assert_numpy_equal


class Net(nn.Cell):
    def construct(self, x, m, rows):
        y = ops.exp(ops.minimum(x[m], 5.0)) * 2.0 + 1.0
        z = ops.tanh(x[rows]) * 3.0
        x[m] = -1.0
        return y, z.reshape(z.shape[0] * z.shape[1]), ops.relu(x) + 0.5


def want(x, m, rows):
    y = np.exp(np.minimum(x[m], np.float32(5))) * np.float32(2) + np.float32(1)
    z = (np.tanh(x[rows]) * np.float32(3)).reshape(-1)
    x = x.copy()
    x[m] = -1
    return y, z, np.maximum(x, np.float32(0)) + np.float32(0.5)


@pytest.mark.parametrize("level", ["L2", "L3", "auto"])
@pytest.mark.parametrize("fusion", [True, False])
def test_mask_index_at_every_tier(level, fusion, rng):
    net = Net()
    ms.set_context(jit_config={"jit_level": level, "enable_fusion": fusion, "l3_after": 1})
    try:
        for k in range(8):
            b = (4, 4, 4, 0, 4, 6, 4, 4)[k]          # the same shapes again and again, other masks
            x = rng.standard_normal((b, 33)).astype(np.float32)
            x[rng.random(x.shape) < 0.1] = np.nan
            x[:, 0] = np.inf
            m = rng.random(x.shape) < (0.5 if k != 6 else 0.0)
            rows = rng.random(b) < 0.5
            with np.errstate(all="ignore"):
                got = net(ms.Tensor(x), ms.Tensor(m), ms.Tensor(rows))
                for g, w in zip(got, want(x, m, rows)):
                    assert g.shape == w.shape, (k, g.shape, w.shape)
                    assert_numpy_equal(g.asnumpy(), w, rtol=2e-6, atol=1e-6, msg=f"{level} fusion={fusion} call {k}")
            from msvm.compiler import tiers

            tiers.wait_for_compiles(30)
    finally:
        ms.set_context(jit_config={"jit_level": "auto", "enable_fusion": True, "l3_after": 5})
    assert net._runner.memo and all(not entry.replay for entry in net._runner.memo.values()), "a replay baked a count in"
