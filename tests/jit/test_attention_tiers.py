"""FUSED_ATTENTION in the compiled tiers (compiler/attention_site.py, issue 18): at L2, L3 and auto
against the interpreter (L1) and float64 numpy, with fusion on and off, on random shapes: one
query, cross attention, an empty batch, masks with -inf and large negatives, a causal mask,
NaN, float64, the context kept in heads or merged back."""

import math

import msvm as ms
import numpy as np
import pytest
from attention_cells import Attention, _fused, _inputs, numpy_attention
from msvm.compiler import tiers
from msvm.compiler.attention_site import Kernels

CASES = {      # (b, sq, sk, h, d, mask shape or None: [b, 1, 1, sk])
    "bert16": (1, 16, 16, 4, 16, None),
    "s1": (2, 1, 1, 3, 8, None),
    "cross": (1, 3, 7, 2, 8, None),
    "causal": (1, 9, 9, 2, 8, "causal"),
    "per_query_mask": (2, 5, 5, 2, 4, (2, 1, 5, 5)),
    "odd": (3, 13, 13, 5, 6, None),
}


def _run(net, level, args, calls=3):
    ms.set_context(jit_config={"jit_level": level})
    out = None
    for _ in range(calls):
        out = net(*map(ms.Tensor, args)).asnumpy()
        tiers.wait_for_compiles(60)
    return out


def _compiled(net) -> bool:
    sites = [s for v in net._runner.variants.values() for c in v.code.all_codes() for s in c.jit_sites.values()
             if s.op == "FUSED_ATTENTION"]
    return bool(sites) and any(isinstance(k, Kernels) for s in sites for k in list(s.l2.values()) + list(s.l3.values()))


@pytest.mark.parametrize("merge", [True, False])
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("tier", ["L2", "L3", "auto"])
def test_attention_tiers_match_l1_and_numpy(tier, case, merge):
    b, sq, sk, h, d, mshape = CASES[case]
    rng = np.random.default_rng(abs(hash((case, merge))) % 2**32)
    q, k, v, mask = _inputs(rng, b, sq, sk, h, d, None if mshape in (None, "causal") else mshape)
    if mshape == "causal":
        mask = np.triu(np.full((sq, sk), -1e9, np.float32), 1)[None, None]
    net = Attention(d, merge=merge)
    ref1 = _run(net, "L1", (q, k, v, mask), 1)
    got = _run(net, tier, (q, k, v, mask))
    assert _fused(net) and _compiled(net), "the attention did not run compiled"
    np.testing.assert_allclose(got, ref1, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got, numpy_attention(q, k, v, mask, d, merge), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("tier", ["L2", "L3"])
def test_minus_infinity_large_negatives_and_nan(tier):
    rng = np.random.default_rng(7)
    q, k, v, mask = _inputs(rng, 3, 6, 6, 2, 8)
    mask[0, :, :, :3] = -np.inf
    mask[1] = -np.inf                  # every key masked: 0/0, NaN rows (as numpy gives)
    mask[2, :, :, 1::2] = -3e38
    q[2, 4, 1, 5] = np.nan
    net = Attention(8)
    ref1 = _run(net, "L1", (q, k, v, mask), 1)
    with np.errstate(invalid="ignore"):
        got = _run(net, tier, (q, k, v, mask))
    assert _compiled(net)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref1))
    assert np.isnan(got[1]).all() and np.isnan(got[2, 4, 1]).all() and not np.isnan(got[0]).any()
    np.testing.assert_allclose(got, ref1, rtol=1e-5, atol=1e-6, equal_nan=True)


def test_float64_and_fusion_off(level):
    rng = np.random.default_rng(8)
    q, k, v, mask = _inputs(rng, 2, 11, 11, 3, 5, dtype=np.float64)
    ref = numpy_attention(q, k, v, mask, 5)
    for fusion in (True, False):
        ms.set_context(jit_config={"enable_fusion": fusion})
        net = Attention(5)
        got = _run(net, "L3", (q, k, v, mask))
        assert got.dtype == np.float64 and _compiled(net) == fusion
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)


def test_empty_batch_runs_the_reference_and_a_sliced_mask(level):
    rng = np.random.default_rng(9)
    net = Attention(4)
    q, k, v, mask = _inputs(rng, 0, 5, 5, 2, 4)
    got = _run(net, "L3", (q, k, v, mask))
    assert got.shape == (0, 5, 2, 4)
    q, k, v, _ = _inputs(rng, 2, 5, 5, 2, 4)
    wide = rng.standard_normal((2, 1, 1, 10)).astype(np.float32)
    mask = wide[..., ::2]               # (a Tensor of a strided view)
    got = _run(net, "L3", (q, k, v, mask))
    np.testing.assert_allclose(got, numpy_attention(q, k, v, mask, 4), rtol=1e-5, atol=1e-6)


def test_a_stream_of_lengths_stays_on_l2(level):
    """auto: more lengths than L3_SHAPES make the site polymorphic; every answer stays right."""
    rng = np.random.default_rng(10)
    net = Attention(8)
    ms.set_context(jit_config={"jit_level": "auto"})
    for s in (3, 5, 8, 13, 21, 5, 3, 34):
        q, k, v, mask = _inputs(rng, 1, s, s, 2, 8)
        got = net(*map(ms.Tensor, (q, k, v, mask))).asnumpy()
        tiers.wait_for_compiles(60)
        np.testing.assert_allclose(got, numpy_attention(q, k, v, mask, 8), rtol=1e-5, atol=1e-5, err_msg=str(s))
    assert _compiled(net)
    assert math.isfinite(float(got.sum()))
