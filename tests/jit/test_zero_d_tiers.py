"""0-d tensors through every op family in the compiled tiers (issue 15): sites, fusion, the
call memo's replays and the native guards give a Tensor of shape () and the right dtype, as
L1 does (tests/vm/test_zero_d.py). An instruction on 0-d values only is no kernel (the sites
run its reference); 0-d operands of a kernel over a matrix are its scalars."""

import msvm as ms
import numpy as np
import pytest
from msvm import nn, ops
from msvm.compiler import tiers
from zero_d_cases import CASES, inputs, run_case


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("tier", ["L2", "L3", "auto"])
def test_every_op_family_on_0d_inputs_in_compiled_tiers(level, tier, name):
    level(tier)
    run_case(name, np.float32)          # first calls: interpreter, memo, replay; compiles queued
    tiers.wait_for_compiles(30)
    run_case(name, np.float64)
    run_case(name, np.float32, calls=6)  # compiled kernels, replays and guards


class Mixed(nn.Cell):
    """0-d operands of a compiled (fused) kernel over a matrix, reduced back to a 0-d result."""

    def construct(self, x, a, b):
        h = ops.relu(x * a + b) - a
        m = ops.mean(h)
        return m * a + b, ops.sum(h, 1) * m


@pytest.mark.parametrize("tier", ["L2", "L3", "auto"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_0d_operands_of_compiled_kernels(level, tier, dtype, rng):
    level(tier)
    net = Mixed()
    x = rng.standard_normal((4, 8)).astype(dtype)
    a, b = inputs(dtype)
    h = np.maximum(x * a + b, 0) - a
    for _ in range(8):
        out, rows = net(ms.Tensor(x), ms.Tensor(a), ms.Tensor(b))
        assert type(out) is ms.Tensor and out.shape == () and out.asnumpy().dtype == dtype
        assert rows.shape == (4,) and rows.asnumpy().dtype == dtype
        np.testing.assert_allclose(out.asnumpy(), h.mean() * a + b, rtol=1e-5)
        np.testing.assert_allclose(rows.asnumpy(), h.sum(1) * h.mean(), rtol=1e-5)
        tiers.wait_for_compiles(30)
    sites = [s for c in next(iter(net._runner.variants.values())).code.all_codes()
             for s in c.__dict__.get("jit_sites", {}).values()]
    compiled = [k for s in sites for k in list(s.l2.values()) + list(s.l3.values()) if isinstance(k, tiers.Compiled)]
    assert compiled, "no kernel was compiled"
