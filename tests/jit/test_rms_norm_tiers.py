"""FUSED_RMS_NORM (compiler/norm.py): LLaMA's RMSNorm as one row kernel, at L1/L2/L3 against L1
unfused and float64 numpy, fusion on and off, NaN/inf, empty batches, other spellings."""

import msvm as ms
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from msvm import nn, ops
from msvm.bytecode.disasm import display_name
from msvm.compiler import tiers
from special_values import assert_numpy_equal, sprinkle

ms.as_mindspore()                    # (the model zoo's modules import mindspore: test_model_zoo_nlp does the same)
from models import llama  # noqa: E402


class _PowSpelling(nn.Cell):      # the same three stages written with pow and a local weight cast away
    def __init__(self, n):
        super().__init__()
        self.weight = ms.Parameter(ms.Tensor(np.linspace(0.5, 2, n).astype(np.float32)), "weight")

    def construct(self, x):
        r = ops.rsqrt(ops.mean(ops.pow(x, 2.0), -1, keep_dims=True) + 1e-5)
        return x * r * self.weight


def _numpy(x, w, eps):
    xd = x.astype(np.float64)
    return xd / np.sqrt((xd * xd).mean(-1, keepdims=True) + eps) * w


def _ops(net):
    return [(i, c) for v in net._runner.variants.values() for c in v.code.all_codes() for i in c.instrs
            if i.op.name == "FUSED_RMS_NORM"]


def _ran(net):
    return [k for v in net._runner.variants.values() for c in v.code.all_codes()
            for s in c.__dict__.get("jit_sites", {}).values() if s.op == "FUSED_RMS_NORM"
            for k in (*s.l2.values(), *s.l3.values()) if isinstance(k, tiers.Compiled)]


def test_llamas_rms_norm_is_one_instruction_named_after_its_parts():
    net = llama.LlamaRMSNorm(16)
    net(ms.Tensor(np.ones((2, 16), np.float32)))
    ((ins, code),) = _ops(net)
    assert display_name(ins) == "FUSED_CAST_SQUARE_REDUCE_MEAN_ADD_RSQRT_CAST_MUL_CAST_MUL"
    src = llama.LlamaRMSNorm.construct.__code__.co_firstlineno
    assert [loc.line - src for _, loc in ins.parts] == [2, 2, 3, 4, 5, 6, 6, 7, 7]
    assert [i.op.name for i in code.instrs if i.op.kind != "memory" or i.op.name == "LOAD_PARAM"][-2:] == \
        ["FUSED_RMS_NORM", "RETURN"]


@pytest.mark.parametrize("tier", ["L1", "L2", "L3"])
@given(shape=st.sampled_from([(1, 1), (3, 16), (2, 5, 64), (7, 37), (0, 16), (1, 4096)]), seed=st.integers(0, 2**16))
@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
def test_against_l1_unfused_and_float64_numpy(tier, shape, seed):
    rng = np.random.default_rng(seed)
    n = shape[-1]
    x = (rng.standard_normal(shape) * 2).astype(np.float32)
    w = rng.uniform(0.5, 1.5, n).astype(np.float32)
    outs = []
    for fusion in (True, False):
        ms.set_context(jit_config={"enable_fusion": fusion, "jit_level": tier if fusion else "L1"})
        net = llama.LlamaRMSNorm(n)
        net.weight.set_data(ms.Tensor(w))
        net(ms.Tensor(x))
        tiers.wait_for_compiles(60)
        outs.append(net(ms.Tensor(x)).asnumpy())
        assert bool(_ops(net)) == fusion
        if fusion:
            assert bool(_ran(net)) == (tier != "L1") or not x.size
    ms.set_context(jit_config={"enable_fusion": True, "jit_level": "auto"})
    got, want = outs
    assert got.shape == shape and got.dtype == np.float32
    if tier == "L1":
        np.testing.assert_array_equal(got, want)        # (each part's kernel, in order)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6)
    np.testing.assert_allclose(got, _numpy(x, w, 1e-6), rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("tier", ["L2", "L3"])
@pytest.mark.parametrize("n", [5, 32, 37])
def test_special_values(level, tier, n):
    level(tier)
    rng = np.random.default_rng(n)
    x = sprinkle(rng, rng.standard_normal((9, n)).astype(np.float32), 0.1)
    x[0, :] = 0.0                     # rsqrt(0 + eps): finite
    x[1, :] = -0.0
    x[2, 1] = 1e30                    # its square overflows float32: the row is 0 and NaN (inf / inf)
    net = llama.LlamaRMSNorm(n)
    with np.errstate(all="ignore"):
        net(ms.Tensor(x))
        tiers.wait_for_compiles(60)
        got = net(ms.Tensor(x)).asnumpy()
        xs = x * x
        ref = x * (1 / np.sqrt(xs.mean(-1, keepdims=True) + np.float32(1e-6))) * np.ones(n, np.float32)
    assert _ran(net), "the row kernel must have run"
    assert_numpy_equal(got, ref, rtol=2e-6, atol=1e-6, msg=tier)


@pytest.mark.parametrize("tier", ["L1", "L2", "L3"])
def test_another_spelling_and_float64(level, tier):
    level(tier)
    rng = np.random.default_rng(4)
    x = rng.standard_normal((6, 33)).astype(np.float32)
    net = _PowSpelling(33)
    net(ms.Tensor(x))
    tiers.wait_for_compiles(60)
    got = net(ms.Tensor(x)).asnumpy()
    assert _ops(net)
    np.testing.assert_allclose(got, _numpy(x, net.weight.asnumpy(), 1e-5), rtol=2e-6, atol=1e-6)
    x64 = rng.standard_normal((3, 16))
    net64 = llama.LlamaRMSNorm(16, compute_type=ms.float64, param_init_type=ms.float64)
    net64(ms.Tensor(x64))
    tiers.wait_for_compiles(60)
    got = net64(ms.Tensor(x64)).asnumpy()
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, _numpy(x64, 1.0, 1e-6), rtol=1e-13, atol=1e-13)
    if tier != "L1":
        assert _ran(net) and _ran(net64)


def test_a_float16_input_cast_up_stays_correct(level):
    """cast(x, float32) of a float16 x: the compiled kernel refuses (a CAST to another dtype), the L1 kernel runs."""
    level("L3")
    x = np.random.default_rng(5).standard_normal((4, 16)).astype(np.float16)
    net = llama.LlamaRMSNorm(16, param_init_type=ms.float16)
    net(ms.Tensor(x))
    tiers.wait_for_compiles(60)
    got = net(ms.Tensor(x)).asnumpy()
    xd = x.astype(np.float32)
    r = (1 / np.sqrt((xd * xd).mean(-1, keepdims=True) + np.float32(1e-6))).astype(np.float16)
    np.testing.assert_allclose(got.astype(np.float32), (x * r * np.ones(16, np.float16)).astype(np.float32),
                               rtol=2e-3, atol=2e-3)


class _ScaleTwice(nn.Cell):       # the third operand is r again: r's store must stay (not FUSED_RMS_NORM)
    def construct(self, x):
        r = ops.rsqrt(ops.mean(ops.pow(x, 2.0), -1, keep_dims=True) + 1e-5)
        return x * r * r


@pytest.mark.parametrize("tier", ["L1", "L2"])
def test_a_program_that_reads_the_scale_twice_is_left_alone(level, tier):
    """``x * r * r`` matched the pattern with r as its weight, dropped r's store and failed to verify."""
    level(tier)
    x = np.random.default_rng(6).standard_normal((5, 12)).astype(np.float32)
    net = _ScaleTwice()
    got = net(ms.Tensor(x)).asnumpy()
    assert not _ops(net)
    xd = x.astype(np.float64)
    np.testing.assert_allclose(got, xd / ((xd * xd).mean(-1, keepdims=True) + 1e-5), rtol=2e-6, atol=1e-6)
