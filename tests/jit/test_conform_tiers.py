"""Issue 21's fixes through the compiled tiers (needs LLVM): fused GELU faces, broadcasting of
dims that may be 1, negative slice steps, div rounding modes and *inputs, each against numpy
at L1, L2, L3 and auto, over repeated calls (so compiled kernels and replays run)."""

import msvm as ms
import numpy as np
import pytest
from msvm import nn, ops
from msvm.compiler import tiers
from scipy import special

LEVELS = ["L1", "L2", "L3", "auto"]


def gelu_erf(x):
    return 0.5 * x * (1 + special.erf(x / np.float32(np.sqrt(2))))


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(np.float32(np.sqrt(2 / np.pi)) * (x + 0.044715 * x ** 3)))


class DenseAct(nn.Cell):
    """matmul + bias + a GELU face: fuses into FUSED_MATMUL_BIAS_GELU(_TANH)."""

    def __init__(self, act, rng):
        super().__init__()
        self.w = ms.Parameter(ms.Tensor(rng.standard_normal((16, 24)).astype(np.float32)))
        self.b = ms.Parameter(ms.Tensor(rng.standard_normal(24).astype(np.float32)))
        self.act = act

    def construct(self, x):
        return self.act(ops.matmul(x, self.w) + self.b) * 1.5


FACES = [("ops.GeLU", lambda: ops.GeLU(), gelu_tanh), ("nn.GELU", lambda: nn.GELU(), gelu_tanh),
         ("nn.GELU_exact", lambda: nn.GELU(approximate=False), gelu_erf), ("ops.gelu", lambda: ops.gelu, gelu_erf)]


def _calls(tier, net, make_args, ref, n=6, rtol=2e-5, atol=2e-6):
    for k in range(n):
        args = make_args(k)
        out = net(*[ms.Tensor(a) for a in args])
        np.testing.assert_allclose(out.asnumpy(), ref(*args), rtol=rtol, atol=atol, err_msg=f"{tier} call {k}")
        tiers.wait_for_compiles(30)


def _check_compiled(net, tier):
    got = _compiled(net)
    assert (2 in got) if tier == "auto" else got == {"L1": set(), "L2": {2}, "L3": {3}}[tier], (tier, got)


def _compiled(net) -> set:
    """The levels of the kernels compiled for the net's sites."""
    sites = [s for v in net._runner.variants.values() for c in v.code.all_codes()
             for s in c.__dict__.get("jit_sites", {}).values()]
    return {k.level for s in sites for k in list(s.l2.values()) + list(s.l3.values()) if isinstance(k, tiers.Compiled)}


@pytest.mark.parametrize("name,make,ref", FACES, ids=[f[0] for f in FACES])
@pytest.mark.parametrize("tier", LEVELS)
def test_gelu_faces_in_every_tier(level, tier, name, make, ref, rng):
    level(tier)
    net = DenseAct(make(), rng)
    w, b = net.w.asnumpy(), net.b.asnumpy()
    xs = [rng.standard_normal((n, 16)).astype(np.float32) for n in (3, 5, 3, 3, 3, 3)]
    _calls(tier, net, lambda k: (xs[k],), lambda x: ref(x @ w + b) * np.float32(1.5), rtol=1e-4, atol=1e-5)
    _check_compiled(net, tier)


class Chain(nn.Cell):
    def construct(self, a, b):
        return ops.relu(a - b) * 2.0 + 1.0


SHAPES = [((2, 3, 4, 4), (4, 1)), ((2, 3, 4, 4), (4, 4)), ((2, 3, 1, 4), (4, 1)), ((2, 3, 4, 4), (4, 1)),
          ((2, 3, 4, 4), (4, 1)), ((1, 1, 1, 1), (4, 5)), ((2, 3, 4, 4), (4, 1))]


@pytest.mark.parametrize("tier", LEVELS)
def test_none_dims_broadcast_in_every_tier(level, tier, rng):
    level(tier)
    net = Chain()
    net.set_inputs(ms.Tensor(shape=[None] * 4, dtype=ms.float32), ms.Tensor(shape=[None] * 2, dtype=ms.float32))
    args = [(rng.standard_normal(sa).astype(np.float32), rng.standard_normal(sb).astype(np.float32))
            for sa, sb in SHAPES]
    _calls(tier, net, lambda k: args[k], lambda a, b: np.maximum(a - b, 0) * np.float32(2) + np.float32(1),
           n=len(SHAPES))
    _check_compiled(net, tier)
    with pytest.raises(ms.ShapeMismatch, match="BROADCAST_SUB: cannot broadcast"):
        net(ms.Tensor(args[0][0]), ms.Tensor(rng.standard_normal((3, 1)).astype(np.float32)))


class Flip(nn.Cell):
    def construct(self, x):
        return ops.tanh(x[:, ::-1] * 2.0 + x) + x[::-2, 2:0:-1].sum()


@pytest.mark.parametrize("tier", LEVELS)
def test_negative_slice_steps_in_every_tier(level, tier, rng):
    level(tier)
    xs = [rng.standard_normal((n, 8)).astype(np.float32) for n in (4, 4, 7, 4, 4, 4)]
    _calls(tier, Flip(), lambda k: (xs[k],),
           lambda x: np.tanh(x[:, ::-1] * np.float32(2) + x) + x[::-2, 2:0:-1].sum(), rtol=1e-5, atol=1e-5)


class DivChain(nn.Cell):
    def construct(self, a, b):
        return ops.div(a * 3.0, b, rounding_mode="floor") + ops.div(a, b, rounding_mode="trunc") * 0.5


@pytest.mark.parametrize("tier", LEVELS)
def test_div_rounding_modes_in_every_tier(level, tier, rng):
    level(tier)
    args = [(rng.standard_normal((5, 6)).astype(np.float32) * 4, rng.random(6).astype(np.float32) + 0.5)
            for _ in range(6)]
    _calls(tier, DivChain(), lambda k: args[k],
           lambda a, b: np.floor(a * np.float32(3) / b) + np.trunc(a / b) * np.float32(0.5))


class Star(nn.Cell):
    def construct(self, *inputs):
        a, b = inputs[:2]
        out = ops.relu(a * b)
        for t in inputs[2:]:
            out = out + t * 2.0
        return out


@pytest.mark.parametrize("tier", LEVELS)
def test_varargs_in_every_tier(level, tier, rng):
    level(tier)
    net = Star()
    args = [tuple(rng.standard_normal((4, 6)).astype(np.float32) for _ in range(n)) for n in (3, 3, 3, 2, 3, 4)]

    def ref(*xs):
        out = np.maximum(xs[0] * xs[1], 0)
        for t in xs[2:]:
            out = out + t * np.float32(2)
        return out
    _calls(tier, net, lambda k: args[k], ref)
