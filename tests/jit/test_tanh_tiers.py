"""(issue 18) The tanh of ``1 + tanh(...)`` (the tanh GELU, as GPT-2 writes it and as GELU_TANH
computes it) runs the rational approximation in float32 kernels (lower.Vals.tanh_rational); a tanh
used any other way keeps the accurate route. Both at L2 and L3 against float64 numpy over a sweep
of float32 values: NaN, +-inf, +-0, subnormals, the saturation region around +-9, huge values."""

import math

import msvm as ms
import numpy as np
import pytest
from msvm import nn, ops
from msvm.compiler import tiers
from msvm.compiler.lower import one_plus_tanh


class Tanhs(nn.Cell):
    def construct(self, x):
        gpt2 = 0.5 * x * (1.0 + ops.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * ops.pow(x, 3.0))))
        return ops.tanh(x) * 1.0, (ops.tanh(x) + 1.0) * 1.0, gpt2, ops.gelu(x, approximate="tanh") * 1.0


def _sweep():
    f = np.float32
    tiny = np.finfo(f).tiny
    xs = [np.linspace(-12, 12, 40001, dtype=f), np.geomspace(tiny / 64, 20, 4000).astype(f),
          np.array([0.0, -0.0, np.nan, np.inf, -np.inf, 9.0, -9.0, 8.999, 9.001, 1e30, -1e30, 3e38, 4e-4, -4e-4], f)]
    xs.append(-xs[1])
    return np.concatenate(xs)


def _outputs(x):
    net = Tanhs()
    for _ in range(3):
        with np.errstate(all="ignore"):
            outs = [o.asnumpy() for o in net(ms.Tensor(x))]
        tiers.wait_for_compiles(60)
    return outs


@pytest.mark.parametrize("tier", ["L2", "L3"])
def test_tanh_routes_against_the_interpreter_and_float64_numpy(level, tier):
    x = _sweep()
    level("L1")
    ref = _outputs(x)
    level(tier)
    got = _outputs(x)
    xd = x.astype(np.float64)
    # the same NaN and inf as the interpreter's (GELU_TANH's (1 + t) * x overflows at 3e38 in both), and
    # within a few ulps of 1 in the tanh (4e-7), which the GELUs scale by x; tanh: to its float32 rounding
    for g, want, abs_err, what in zip(got, ref, (0.0, 4e-7, 4e-7, 4e-7), ("tanh", "1 + tanh", "GPT-2's GELU", "GELU_TANH")):
        assert np.array_equal(np.isnan(g), np.isnan(want)), what
        ok = np.isfinite(want)
        assert np.array_equal(g[~ok & ~np.isnan(want)], want[~ok & ~np.isnan(want)]), what
        err = np.abs(g[ok].astype(np.float64) - want[ok])
        scale = np.maximum(np.abs(xd[ok]), 1.0) if what in ("GPT-2's GELU", "GELU_TANH") else 1.0
        bound = 4e-7 * np.abs(want[ok]) + abs_err * scale + 1e-37
        worst = np.argmax(err / bound)
        assert err[worst] <= bound[worst], f"{what} at {tier}: {g[ok][worst]!r} for {want[ok][worst]!r} at {x[ok][worst]!r}"
    t, one_plus = got[0], got[1]
    mid = np.abs(x) < 8
    np.testing.assert_allclose(t[mid], np.tanh(xd[mid]), rtol=3e-7, atol=1e-37)     # (float64 numpy)
    np.testing.assert_allclose(one_plus[mid], 1.0 + np.tanh(xd[mid]), rtol=0, atol=4e-7)
    assert np.all(np.abs(one_plus[~np.isnan(x)] - 1.0) <= 1.0)      # (tanh itself never past +-1)
    assert np.signbit(t[x == 0]).tolist() == np.signbit(x[x == 0]).tolist()


def test_which_tanhs_feed_one_plus():
    t, one = ("TANH",), ("c", 1.0)
    assert one_plus_tanh((("in", 0), t, one, ("BROADCAST_ADD",))) == {0}
    assert one_plus_tanh((one, ("in", 0), t, ("BROADCAST_ADD",))) == {0}
    assert one_plus_tanh((("in", 0), t, ("c", 2.0), ("BROADCAST_ADD",))) == set()
    assert one_plus_tanh((("in", 0), t, one, ("BROADCAST_SUB",))) == set()
    assert one_plus_tanh((("in", 0), t)) == set()
    # (GPT-2's: 0.5 * x * (1 + tanh(c * (x + 0.044715 * x ** 3))); the TANH is the 6th operation)
    gpt2 = (("c", 0.5), ("in", 0), ("BROADCAST_MUL",), one, ("c", 0.79788), ("in", 0), ("c", 0.044715), ("in", 0),
            ("c", 3.0), ("BROADCAST_POW",), ("BROADCAST_MUL",), ("BROADCAST_ADD",), ("BROADCAST_MUL",), t,
            ("BROADCAST_ADD",), ("BROADCAST_MUL",))
    assert one_plus_tanh(gpt2) == {5}
