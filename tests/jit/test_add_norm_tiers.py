"""FUSED_ADD_LAYER_NORM (compiler/norm.py): the residual add and the layer norm after it as one
row kernel, at L1/L2/L3 against L1 unfused and float64 numpy, with fusion on and off."""

import msvm as ms
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from msvm import nn, ops
from msvm.bytecode.disasm import display_name
from msvm.compiler import tiers
from special_values import assert_numpy_equal, edge_values


class _AddNorm(nn.Cell):          # BERT's BertOutput: layernorm(dense_output + input_tensor)
    def __init__(self, n, dtype=ms.float32, eps=1e-5):
        super().__init__()
        self.layernorm = nn.LayerNorm((n,), epsilon=eps, dtype=dtype)

    def construct(self, x, y):
        return self.layernorm(ops.relu(x) + y)


class _KeptSum(nn.Cell):          # GPT-2's pre-norm block: the sum is read again, so it is not fused
    def __init__(self, n):
        super().__init__()
        self.ln = nn.LayerNorm((n,), epsilon=1e-5)

    def construct(self, x, y):
        h = x + y
        return self.ln(h) * 2.0 + h


def _reference(x, y, g, b, eps):
    s = np.maximum(x.astype(np.float64), 0) + y.astype(np.float64)
    mean = s.mean(-1, keepdims=True)
    var = ((s - mean) ** 2).mean(-1, keepdims=True)
    return (s - mean) / np.sqrt(var + eps) * g + b


def _set_params(net, rng, n):
    g = rng.uniform(0.5, 1.5, n).astype(net.layernorm.gamma.asnumpy().dtype)
    b = rng.standard_normal(n).astype(g.dtype)
    net.layernorm.gamma.set_data(ms.Tensor(g))
    net.layernorm.beta.set_data(ms.Tensor(b))
    return g, b


def _sites(net):
    (var,) = net.__dict__["_runner"].variants.values()
    return var.code.__dict__.get("jit_sites", {})


def test_the_fusion_makes_one_named_instruction_at_the_source_lines():
    net = _AddNorm(8)
    net(ms.Tensor(np.ones((2, 8), np.float32)), ms.Tensor(np.ones((2, 8), np.float32)))
    (var,) = net.__dict__["_runner"].variants.values()
    (ins,) = [i for i in var.code.instrs if i.op.name == "FUSED_ADD_LAYER_NORM"]
    assert display_name(ins) == "FUSED_ADD_LAYER_NORM"
    assert [p for p, _ in ins.parts] == ["BROADCAST_ADD", "LAYER_NORM"]
    assert ins.parts[0][1].line == ins.parts[1][1].line          # (both on ``self.layernorm(relu(x) + y)``)


def test_a_sum_read_again_is_not_fused():
    net = _KeptSum(8)
    x = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)
    got = net(ms.Tensor(x), ms.Tensor(x)).asnumpy()
    (var,) = net.__dict__["_runner"].variants.values()
    assert not any(i.op.name == "FUSED_ADD_LAYER_NORM" for i in var.code.instrs)
    assert any(i.op.name == "LAYER_NORM" for i in var.code.instrs)
    s = x + x
    ln = (s - s.mean(-1, keepdims=True)) / np.sqrt(s.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(got, ln * 2 + s, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("tier", ["L1", "L2", "L3"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@given(shape=st.sampled_from([(1, 1), (3, 5), (2, 16), (7, 37), (4, 64), (2, 3, 33), (0, 8), (1, 768)]),
       seed=st.integers(0, 2**16))
@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
def test_against_l1_unfused_and_float64_numpy(level, tier, dtype, shape, seed):
    ms.set_context(jit_config={"enable_fusion": True, "jit_level": tier})     # (each example: fusion on, then off)
    rng = np.random.default_rng(seed)
    n = shape[-1]
    x = rng.standard_normal(shape).astype(dtype)
    y = (rng.standard_normal(shape) * 3).astype(dtype)
    net = _AddNorm(n, ms.float32 if dtype == np.float32 else ms.float64)
    g, b = _set_params(net, rng, n)
    net(ms.Tensor(x), ms.Tensor(y))
    tiers.wait_for_compiles(60)
    got = net(ms.Tensor(x), ms.Tensor(y)).asnumpy()
    assert got.dtype == dtype and got.shape == shape
    ran = [k for s in _sites(net).values() if s.op == "FUSED_ADD_LAYER_NORM" for k in (*s.l2.values(), *s.l3.values())]
    assert bool(ran) == (tier != "L1") or not x.size       # (an empty batch: the L1 kernel, any kernels kept)
    tol = 2e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got, _reference(x, y, g, b, 1e-5), rtol=tol, atol=tol)
    ms.set_context(jit_config={"enable_fusion": False, "jit_level": "L1"})
    unfused = _AddNorm(n, ms.float32 if dtype == np.float32 else ms.float64)
    unfused.layernorm.gamma.set_data(ms.Tensor(g))
    unfused.layernorm.beta.set_data(ms.Tensor(b))
    want = unfused(ms.Tensor(x), ms.Tensor(y)).asnumpy()
    assert not any(i.op.name == "FUSED_ADD_LAYER_NORM" for v in unfused.__dict__["_runner"].variants.values()
                   for i in v.code.instrs)
    if tier == "L1":
        np.testing.assert_array_equal(got, want)       # (each part's own kernel, in order)
    else:
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("tier", ["L2", "L3"])
@pytest.mark.parametrize("n", [37, 32, 5])
def test_special_values_and_that_the_row_kernel_ran(level, tier, n):
    level(tier)
    rng = np.random.default_rng(n)
    x = rng.standard_normal((6, n)).astype(np.float32)
    y = rng.standard_normal((6, n)).astype(np.float32)
    y[1, 2] = np.inf                       # inf - inf: the row is NaN
    x[2, n // 2] = np.nan
    y[3, :] = -x[3, :].clip(0)             # a sum of zeros: zero variance
    x[4, 0], y[4, -1] = 1e30, -1e30
    y[5, 1] = edge_values(np.float32)[6]
    net = _AddNorm(n)
    g, b = _set_params(net, rng, n)
    with np.errstate(all="ignore"):
        got = net(ms.Tensor(x), ms.Tensor(y)).asnumpy()
        tiers.wait_for_compiles(60)
        got = net(ms.Tensor(x), ms.Tensor(y)).asnumpy()
        s = np.maximum(x, np.float32(0)) + y            # (in float32, as every tier computes it)
        mean = s.mean(-1, keepdims=True)
        ref = (s - mean) / np.sqrt(((s - mean) ** 2).mean(-1, keepdims=True) + np.float32(1e-5)) * g + b
    assert_numpy_equal(got, ref, rtol=1e-4, atol=2e-4, msg=tier)
    compiled = [k for s in _sites(net).values() if s.op == "FUSED_ADD_LAYER_NORM"
                for k in (s.l2 if tier == "L2" else s.l3).values() if isinstance(k, tiers.Compiled)]
    assert compiled and compiled[0].kernel.residual, "the residual row kernel must have been compiled"


@pytest.mark.parametrize("tier", ["L2", "L3"])
def test_a_broadcast_residual_runs_the_l1_kernel_and_agrees(level, tier):
    level(tier)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 16)).astype(np.float32)
    y = rng.standard_normal((1, 16)).astype(np.float32)
    net = _AddNorm(16)
    g, b = _set_params(net, rng, 16)
    for _ in range(3):
        got = net(ms.Tensor(x), ms.Tensor(y)).asnumpy()
    np.testing.assert_allclose(got, _reference(x, y, g, b, 1e-5), rtol=2e-5, atol=2e-5)


def test_fusion_for_a_gpu_keeps_the_layer_norm():
    """FUSED_ADD_LAYER_NORM has CPU kernels only: the Code made for a GPU keeps LAYER_NORM (its GPU row kernel)."""
    from msvm.compiler.fuse import fuse

    net = _AddNorm(8)
    net(ms.Tensor(np.ones((2, 8), np.float32)), ms.Tensor(np.ones((2, 8), np.float32)))
    (var,) = net.__dict__["_runner"].variants.values()
    src = var.code.fused_from
    names = lambda c: [i.op.name for i in c.instrs]      # noqa: E731
    assert "FUSED_ADD_LAYER_NORM" in names(fuse(src)) and "LAYER_NORM" not in names(fuse(src))
    assert "LAYER_NORM" in names(fuse(src, cpu=False)) and "FUSED_ADD_LAYER_NORM" not in names(fuse(src, cpu=False))
