"""Issue 21's conformance ops through the compiled tiers (needs LLVM): the rounding ops, square,
sin and cos fuse into compiled kernels; the others (inverse trig, NaN tests, bitwise, band part,
prod/all/any, Shift) run their reference kernels between compiled ones. Each against numpy at
L1, L2, L3 and auto over repeated calls, NaN/inf/-0.0 included, and 0-d and empty inputs."""

import msvm as ms
import numpy as np
import pytest
from msvm import nn, ops
from msvm.compiler import tiers

from tests.special_values import assert_numpy_equal, sprinkle

LEVELS = ["L1", "L2", "L3", "auto"]


class Rounding(nn.Cell):
    """Fuses: floor, ceil, round, trunc, square, sin, cos in one elementwise kernel."""

    def construct(self, x):
        return ops.floor(x * 2.5) + ops.ceil(x) - ops.round(x) * ops.trunc(x) + ops.square(x) * 0.5 \
            + ops.sin(x) * ops.cos(x)


def rounding_ref(x):
    with np.errstate(all="ignore"):
        return (np.floor(x * np.float32(2.5)) + np.ceil(x) - np.rint(x) * np.trunc(x) + np.square(x) * np.float32(0.5)
                + np.sin(x) * np.cos(x))


class Mixed(nn.Cell):
    """Compiled elementwise runs around ops that stay in the interpreter."""

    def construct(self, x, m):
        a = ops.atan(x) + ops.asinh(x) * 2.0
        b = ops.where(ops.isfinite(x), ops.erfc(x), ops.expm1(x))
        band = ops.matrix_band_part(m, 1, 0)
        return a * b + ops.floor(a), ops.bitwise_xor(ops.cast(m, ms.int32), 3), ops.prod(band, -1), \
            ops.any(ops.isnan(x), 1)


def mixed_ref(x, m):
    from scipy import special

    with np.errstate(all="ignore"):
        a = np.arctan(x) + np.arcsinh(x) * np.float32(2)
        b = np.where(np.isfinite(x), special.erfc(x), np.expm1(x))
        i, j = np.arange(m.shape[-2])[:, None], np.arange(m.shape[-1])[None, :]
        band = np.where((i - j <= 1) & (j - i <= 0), m, 0)
        return (a * b + np.floor(a), np.bitwise_xor(m.astype(np.int32), 3), np.prod(band, -1),
                np.any(np.isnan(x), 1))


def _compiled(net) -> set:
    sites = [s for v in net._runner.variants.values() for c in v.code.all_codes()
             for s in c.__dict__.get("jit_sites", {}).values()]
    return {k.level for s in sites for k in list(s.l2.values()) + list(s.l3.values()) if isinstance(k, tiers.Compiled)}


@pytest.mark.parametrize("tier", LEVELS)
def test_rounding_and_trig_fuse_in_every_tier(level, tier, rng):
    level(tier)
    net = Rounding()
    for k, n in enumerate((7, 7, 12, 7, 7, 7)):
        x = sprinkle(rng, (rng.standard_normal((n, 9)) * 3).astype(np.float32), 0.2)
        x[0, :4] = [0.5, 1.5, -2.5, -0.0]          # halves round to even
        out = net(ms.Tensor(x)).asnumpy()
        assert_numpy_equal(out, rounding_ref(x), rtol=1e-5, atol=1e-5, msg=f"{tier} call {k}")
        tiers.wait_for_compiles(30)
    got = _compiled(net)
    assert (2 in got) if tier == "auto" else got == {"L1": set(), "L2": {2}, "L3": {3}}[tier], (tier, got)


@pytest.mark.parametrize("tier", LEVELS)
def test_interpreter_only_ops_between_compiled_kernels(level, tier, rng):
    level(tier)
    net = Mixed()
    for k, (n, r) in enumerate([(4, 5), (4, 5), (6, 3), (4, 5), (0, 5), (4, 5)]):
        x = sprinkle(rng, rng.standard_normal((n, 6)).astype(np.float32), 0.2)
        m = rng.integers(-3, 4, (2, r, 4)).astype(np.float32)
        outs = net(ms.Tensor(x), ms.Tensor(m))
        for got, want in zip(outs, mixed_ref(x, m)):
            assert got.shape == want.shape
            assert_numpy_equal(got.asnumpy(), want, rtol=1e-5, atol=1e-5, msg=f"{tier} call {k}")
        tiers.wait_for_compiles(30)


class ZeroD(nn.Cell):
    def construct(self, x):
        return ops.round(x) + ops.sin(x) + ops.square(ops.floor(x))


@pytest.mark.parametrize("tier", LEVELS)
def test_zero_d_inputs(level, tier):
    level(tier)
    net = ZeroD()
    for v in (2.5, -0.5, float("nan"), float("inf"), 3.0, 3.0):
        x = np.array(v, np.float32)
        with np.errstate(all="ignore"):
            want = np.rint(x) + np.sin(x) + np.square(np.floor(x))
        out = net(ms.Tensor(x))
        assert out.shape == ()
        assert_numpy_equal(out.asnumpy(), want, msg=f"{tier} {v}")
        tiers.wait_for_compiles(30)
