"""BROADCAST_POW at L2/L3 without libm's pow (compiler/lower_pow.py), against L1 and numpy.

A constant exponent lowers to multiplies, a square root or a reciprocal; any other exponent in
float32 to a vector exp(y log|x|) in double with numpy's special cases. Each form is checked
on every edge value (NaN, ±inf, ±0.0, subnormals, values whose powers overflow, negative
bases), on random values, against L1 (np.power) and a float64 (or exact-integer) numpy
reference, to a couple of ulps; the special values must be numpy's exactly (NaN positions,
infinities and the signs of zeros).
"""

import math

import msvm as ms
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from msvm import nn, ops
from msvm.compiler import lower, tiers
from msvm.compiler.kir import Elementwise
from special_values import assert_numpy_equal, edge_values
from test_special_values import run_fused

TIERS = ["L2", "L3"]
DTYPES = [np.float32, np.float64]
CONSTS = [0.0, -0.0, 1.0, -1.0, 2.0, 3.0, 4.0, 5.0, 7.0, -2.0, -3.0, -4.0, 0.5, -0.5, 1.5, -1.5, 1 / 3,
          2.5, 31.0, 32.0, -32.0, 33.0, 1e10, -1e10, math.inf, -math.inf, math.nan, 1e-45]
ULPS = {np.float32: 2, np.float64: 4}


def assert_ulps(got, want, dtype, ulps, msg=""):
    """NaN/inf/zero signs exactly numpy's, finite values within ``ulps`` of want's spacing."""
    with np.errstate(over="ignore"):
        assert_numpy_equal(got, want, rtol=0, atol=1e308, msg=msg)     # (the finite values: below)
    fin = np.isfinite(want) & np.isfinite(got)
    g, w = got[fin].astype(np.float64), want[fin].astype(np.float64)
    err = np.abs(g - w) / np.spacing(np.abs(want[fin]).astype(dtype)).astype(np.float64)
    assert err.size == 0 or err.max() <= ulps, f"{msg}: {err.max():.2f} ulps at {g[err.argmax()]} vs {w[err.argmax()]}"


def _bases(dtype, n=64, seed=0):
    rng = np.random.default_rng(seed)
    e = edge_values(dtype)
    r = np.concatenate([rng.standard_normal(n) * 3, rng.uniform(0, 2, n), -rng.uniform(0, 2, n),
                        np.exp(rng.uniform(-20, 20, n)), [1.0000001, 0.9999999, -1.0000001, 7.0, -7.0]])
    return np.concatenate([e, r]).astype(dtype).reshape(1, -1)


def _reference(x, c, dtype):
    """pow in float64 (float32 inputs and the exponent as the kernel holds it are exact there)
    rounded once to dtype."""
    with np.errstate(all="ignore"):
        if c == 0.5:         # (numpy's fast path for a scalar 0.5, which L1 takes: sqrt, not C's pow)
            return np.sqrt(x.astype(np.float64)).astype(dtype)
        return np.power(x.astype(np.float64), np.full(x.shape, dtype(c), np.float64)).astype(dtype)


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("c", CONSTS)
def test_constant_exponents_match_numpy(c, dtype, tier):
    x = _bases(dtype)
    prog = [("in", 0), ("c", c), ("BROADCAST_POW",)]
    l1 = run_fused(prog, [x], "L1", dtype)
    got = run_fused(prog, [x], tier, dtype)
    assert got.dtype == dtype
    assert_ulps(got, l1, dtype, ULPS[dtype], msg=f"x ** {c} {np.dtype(dtype)} {tier} vs L1")
    if dtype == np.float32:       # (float64's own pow is the reference there: L1 above)
        assert_ulps(got, _reference(x, c, dtype), dtype, 1, msg=f"x ** {c} {tier} vs float64 numpy")


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_tensor_exponents_on_every_pair_of_edge_values(dtype, tier):
    e = np.concatenate([edge_values(dtype), np.array([2.0, -3.0, 0.25, -0.5, 1e10, 7.0, -1.5], dtype=dtype)])
    a, b = np.repeat(e, e.size).reshape(e.size, e.size), np.tile(e, e.size).reshape(e.size, e.size)
    prog = [("in", 0), ("in", 1), ("BROADCAST_POW",)]
    l1 = run_fused(prog, [a, b], "L1", dtype)
    got = run_fused(prog, [a, b], tier, dtype)
    assert_ulps(got, l1, dtype, ULPS[dtype], msg=f"a ** b {np.dtype(dtype)} {tier}")
    if dtype == np.float32:
        with np.errstate(all="ignore"):
            ref = np.power(a.astype(np.float64), b.astype(np.float64)).astype(dtype)
        assert_ulps(got, ref, dtype, 1, msg=f"a ** b {tier} vs float64 numpy")


@pytest.mark.parametrize("tier", TIERS)
def test_random_float32_bases_and_exponents(tier):
    """Ordinary values over the whole float32 range, with results that overflow and underflow."""
    rng = np.random.default_rng(3)
    a = np.exp(rng.uniform(-30, 30, (7, 131))) * rng.choice([1, -1], (7, 131))
    b = rng.uniform(-6, 6, (7, 131))
    b[:, ::3] = np.round(b[:, ::3])                   # integer exponents with negative bases
    a, b = a.astype(np.float32), b.astype(np.float32)
    prog = [("in", 0), ("in", 1), ("BROADCAST_POW",)]
    got = run_fused(prog, [a, b], tier, np.float32)
    with np.errstate(all="ignore"):
        ref = np.power(a.astype(np.float64), b.astype(np.float64)).astype(np.float32)
    assert np.isfinite(ref).mean() > 0.5 and np.isinf(ref).any() and (ref == 0).any()
    assert_ulps(got, ref, np.float32, 1, msg=tier)
    assert_ulps(got, run_fused(prog, [a, b], "L1", np.float32), np.float32, 2, msg=f"{tier} vs L1")


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_a_scalar_exponent_takes_the_general_pow(dtype, tier):
    x = _bases(dtype)
    for c in (3.0, 0.5, -2.0, 1.7, math.nan, -math.inf):
        prog = [("in", 0), ("in", 1), ("BROADCAST_POW",)]
        got = run_fused(prog, [x, c], tier, dtype)
        assert_ulps(got, run_fused(prog, [x, c], "L1", dtype), dtype, ULPS[dtype], msg=f"x ** s{c} {tier}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_kernels_call_no_libm_pow_where_they_need_not(dtype):
    t = "f32" if dtype == np.float32 else "f64"
    d = np.dtype(dtype).name
    full = (False, False, False)
    for prog, kinds, bcast, libm in (
            ((("in", 0), ("c", 3.0), ("BROADCAST_POW",)), ("t",), (full,), False),
            ((("in", 0), ("c", -0.5), ("BROADCAST_POW",)), ("t",), (full,), False),
            ((("in", 0), ("in", 1), ("BROADCAST_POW",)), ("t", "t"), (full, full), dtype == np.float64),
            ((("in", 0), ("c", 1.5), ("BROADCAST_POW",)), ("t",), (full,), dtype == np.float64)):
        ir = lower.lower(Elementwise(prog, kinds, bcast, d, None), "k", "+avx2")
        assert (f"@llvm.pow.v8{t}" in ir or f"@llvm.pow.v4{t}" in ir) == libm, (prog, d)


class _NewGELU(nn.Cell):         # GPT-2's activation (tests/models/gpt2.py), with x ** 3 as pow
    def construct(self, x):
        return 0.5 * x * (1.0 + ops.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * ops.pow(x, 3.0))))


class _Powers(nn.Cell):
    def construct(self, x, y):
        return ops.pow(x, 2.0) + ops.pow(x, -1.0) * ops.pow(ops.abs(x), 0.5), ops.pow(ops.abs(x), y)


@pytest.mark.parametrize("tier", ["L1", "L2", "L3"])
@given(shape=st.sampled_from([(), (0,), (3, 0), (1,), (5, 7), (2, 3, 33), (4, 1, 16)]), seed=st.integers(0, 2**16))
@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
def test_cells_with_pow_at_each_tier(level, tier, shape, seed):
    """GPT-2's GELU and a mix of powers through Cells (fusion builds the FUSED_ rows), against
    numpy op by op in float32 (edge values sprinkled in) and float64 numpy (ordinary values),
    random shapes with 0-d and empty ones."""
    from special_values import sprinkle

    level(tier)
    rng = np.random.default_rng(seed)
    clean = (rng.standard_normal(shape) * 3).astype(np.float32)
    y = rng.uniform(-3, 3, shape).astype(np.float32)
    f = np.float32
    for x in (clean, sprinkle(rng, clean, 0.2)):
        with np.errstate(all="ignore"):
            gelu = f(0.5) * x * (f(1) + np.tanh(f(math.sqrt(2.0 / math.pi)) * (x + f(0.044715) * np.power(x, f(3)))))
            p1 = np.power(x, f(2)) + np.power(x, f(-1)) * np.power(np.abs(x), f(0.5))
            p2 = np.power(np.abs(x), y)
            got = _NewGELU()(ms.Tensor(x)).asnumpy()
            g1, g2 = (t.asnumpy() for t in _Powers()(ms.Tensor(x), ms.Tensor(y)))
        assert got.shape == shape and g1.shape == shape
        assert_numpy_equal(got, gelu, rtol=2e-6, atol=1e-6, msg=f"gelu {tier}")
        assert_numpy_equal(g1, p1, rtol=2e-6, atol=0, msg=f"powers {tier}")
        assert_numpy_equal(g2, p2, rtol=2e-6, atol=0, msg=f"|x| ** y {tier}")
    xd, yd = clean.astype(np.float64), y.astype(np.float64)
    with np.errstate(all="ignore"):
        gelu = 0.5 * xd * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (xd + 0.044715 * xd ** 3)))
    np.testing.assert_allclose(_NewGELU()(ms.Tensor(clean)).asnumpy(), gelu, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_Powers()(ms.Tensor(clean), ms.Tensor(y))[1].asnumpy(), np.abs(xd) ** yd, rtol=1e-6)


def test_gpt2_gelu_is_one_compiled_kernel(level):
    level("L3")
    net = _NewGELU()
    x = ms.Tensor(np.random.default_rng(0).standard_normal((4, 96)).astype(np.float32))
    for _ in range(2):
        net(x)
    tiers.wait_for_compiles(60)
    net(x)
    (var,) = net.__dict__["_runner"].variants.values()
    sites = var.code.__dict__.get("jit_sites", {})
    assert any(isinstance(k, tiers.Compiled) for s in sites.values() for k in s.l3.values())
