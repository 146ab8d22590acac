"""complex64 / complex128 through the compiled tiers (issue 21): the tiers' planners take
float32/float64 inputs only, so complex instructions (fused programs too) run their L1 kernels
while the float instructions beside them compile; results equal L1 and numpy at every tier,
over repeated calls."""

import msvm as ms
import numpy as np
import pytest
from msvm import nn, ops
from msvm.compiler import tiers

LEVELS = ["L1", "L2", "L3", "auto"]


class Mixed(nn.Cell):
    """A fusable complex chain, a complex matmul, and a float chain that compiles."""

    def construct(self, z, w, x):
        c = ops.tanh(z) * 2.0 + z * z - 1.0
        m = ops.matmul(c, w)
        f = ops.exp(x * 0.5) + ops.relu(x) * 3.0
        return c, m, f, ops.abs(m) + f[:, :3]


def numpy_mixed(z, w, x):
    c = np.tanh(z) * 2 + z * z - 1
    m = c @ w
    f = np.exp(x * np.float32(0.5)) + np.maximum(x, 0) * np.float32(3)
    return c, m, f, np.abs(m) + f[:, :3]


@pytest.mark.parametrize("d", [np.complex64, np.complex128])
@pytest.mark.parametrize("tier", LEVELS)
def test_complex_stays_in_l1_and_matches_numpy(level, tier, d):
    level(tier)
    rng = np.random.default_rng(11)
    net = Mixed()
    tol = dict(rtol=2e-5, atol=2e-5) if d == np.complex64 else dict(rtol=1e-6, atol=1e-5)
    for k in range(6):
        n = 4 if k != 3 else 6
        z = (rng.standard_normal((n, 5)) + 1j * rng.standard_normal((n, 5))).astype(d)
        w = (rng.standard_normal((5, 3)) + 1j * rng.standard_normal((5, 3))).astype(d)
        x = rng.standard_normal((n, 8)).astype(np.float32)
        got = net(ms.Tensor(z), ms.Tensor(w), ms.Tensor(x))
        for g, want in zip(got, numpy_mixed(z, w, x)):
            assert g.asnumpy().dtype == np.result_type(want), k
            np.testing.assert_allclose(g.asnumpy(), want, **tol, err_msg=f"{tier} call {k}")
        tiers.wait_for_compiles(30)
    compiled = {s.name: [k for k in list(s.l2.values()) + list(s.l3.values()) if isinstance(k, tiers.Compiled)]
                for v in net._runner.variants.values() for c in v.code.all_codes() for s in c.jit_sites.values()}
    complex_sites = [n for n in compiled if "TANH" in n or "MATMUL" in n]
    assert complex_sites and all(not compiled[n] for n in complex_sites), compiled
    if tier != "L1":      # the float chain beside them did compile
        assert any(compiled[n] for n in compiled if "EXP" in n), compiled
