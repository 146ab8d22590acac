"""NaN, ±inf, signed zeros and subnormals at every tier (needs LLVM).

Each compiled op family (the lowering's UNARY and BINARY tables, the row kernels, the matmul
epilogue) is run at L1 (the numpy reference), L2 and L3 on every edge value, in float32 and
float64, and must give numpy's answer: NaN where numpy has NaN, its infinities and the signs
of its zeros (``special_values.assert_numpy_equal``). The ops that stay in the interpreter
(reductions, comparisons, where, casts to integers) are run through a jitted function at
each tier, so what the tiers do around them is checked too.

Casting NaN or ±inf to an integer dtype is undefined in C, and numpy's answer is whatever
the machine's conversion gives (INT_MIN on x86, with a RuntimeWarning). The compiled tiers
never cast to another dtype (the planner keeps such a program in the interpreter), so every
tier gives numpy's answer, whatever it is on that machine.
"""

import math

import msvm as ms
import numpy as np
import pytest
import random_programs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from msvm import nn, ops
from msvm.compiler import lower, tiers
from msvm.interp.kernels import run_program
from scipy import special
from special_values import assert_numpy_equal, edge_values

TIERS = ["L1", "L2", "L3"]
DTYPES = [np.float32, np.float64]

# numpy's definition of each op, written independently of the interpreter's kernels
NUMPY_UNARY = {
    "NEG": np.negative, "ABS": np.abs, "EXP": np.exp, "LOG": np.log, "SQRT": np.sqrt,
    "RSQRT": lambda x: 1 / np.sqrt(x), "TANH": np.tanh, "SIGMOID": special.expit,
    "RELU": lambda x: np.maximum(x, x.dtype.type(0)), "RECIPROCAL": lambda x: 1 / x, "ERF": special.erf,
    "GELU": lambda x: (special.erf(x * x.dtype.type(1 / math.sqrt(2))) + 1) * x * x.dtype.type(0.5),
    "GELU_TANH": lambda x: (np.tanh((x * x * x.dtype.type(0.044715) + 1) * x * x.dtype.type(math.sqrt(2 / math.pi)))
                            + 1) * x * x.dtype.type(0.5),
    # issue 21's conformance ops
    "FLOOR": np.floor, "CEIL": np.ceil, "ROUND": np.rint, "TRUNC": np.trunc, "SQUARE": np.square, "SIN": np.sin,
    "COS": np.cos,
}
NUMPY_BINARY = {
    "BROADCAST_ADD": np.add, "BROADCAST_SUB": np.subtract, "BROADCAST_MUL": np.multiply,
    "BROADCAST_DIV": np.divide, "BROADCAST_MAX": np.maximum, "BROADCAST_MIN": np.minimum,
    "BROADCAST_POW": np.power,
}


def test_every_lowered_op_is_checked_here():
    assert set(NUMPY_UNARY) == set(lower.UNARY) and set(NUMPY_BINARY) == set(lower.BINARY)


def _site(prog, inputs, dtype):
    from msvm.bytecode import CodeBuilder, verify
    from msvm.bytecode import symbolic as S
    from msvm.bytecode.types import ScalarType, TensorType

    b = CodeBuilder("p", "p.py", 1)
    for k, v in enumerate(inputs):
        b.local(f"i{k}")
        t = TensorType(tuple(S.Expr.const(d) for d in v.shape), ms.float32 if dtype == np.float32 else ms.float64) \
            if isinstance(v, np.ndarray) else ScalarType("f")
        b.code.params.append((f"i{k}", t))
        b.emit("LOAD_TENSOR", k)
    b.emit("FUSED_ELEMENTWISE", b.const(tuple(prog)), len(inputs))
    b.emit("RETURN")
    return tiers.Site(verify(b.finish()), len(inputs))


def run_fused(prog, inputs, tier, dtype):
    """One FUSED_ELEMENTWISE program at a tier: L1 runs the reference kernels, L2/L3 the kernel
    compiled for these inputs (a program the lowering cannot emit is skipped)."""
    prog = tuple(prog)
    with np.errstate(all="ignore"):
        if tier == "L1":
            return np.asarray(run_program(prog, inputs))
        site = _site(prog, inputs, dtype)
        plan = site.plan(inputs)
        assert plan is not None, prog
        lvl = int(tier[1])
        try:
            kern = site.kernel_ir(lvl, plan)
            lower.lower(kern, "probe", "")
        except lower.Unsupported as e:
            pytest.skip(str(e))
        compiled = tiers.compile_kernel(kern, lvl, site.info(plan.out_shape, plan.dtype))
        return site.run(compiled, plan, inputs, None)


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", sorted(NUMPY_UNARY))
@pytest.mark.parametrize("n", [37, 32])          # a row with a scalar tail, and one of whole vectors
def test_unary_ops_on_edge_values(op, dtype, tier, n):
    e = edge_values(dtype)
    x = np.stack([np.resize(e, n), np.resize(e[::-1], n)])
    with np.errstate(all="ignore"):
        want = np.asarray(NUMPY_UNARY[op](x), dtype=dtype)
    got = run_fused([("in", 0), (op,)], [x], tier, dtype)
    assert got.dtype == dtype
    assert_numpy_equal(got, want, msg=f"{op} {np.dtype(dtype)} {tier}")


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["TANH", "ERF", "GELU", "GELU_TANH", "SIGMOID", "EXP"])
def test_approximations_keep_relative_accuracy_near_zero(op, dtype, tier):
    """tanh x ~ x and erf x ~ 2x/sqrt(pi) down to subnormal x (so 1 / tanh(1e-40) is not 1 / 0)."""
    tiny = edge_values(dtype)[6]
    x = np.array([[tiny, -tiny, 1e-30, -1e-20, 1e-8, -1e-6, 1e-4, -0.01, 0.3, -0.6, 0.62, 0.63, -0.9, 0.99, 1.01]],
                 dtype=dtype)
    with np.errstate(all="ignore"):
        want = np.asarray(NUMPY_UNARY[op](x), dtype=dtype)
    got = run_fused([("in", 0), (op,)], [x], tier, dtype)
    np.testing.assert_allclose(got, want, rtol=1e-6 if dtype == np.float32 else 1e-12, atol=0, err_msg=f"{op} {tier}")


@pytest.mark.parametrize("tier", TIERS)
def test_float32_exp_through_its_underflow(tier):
    """exp over the band where float32 results go subnormal, then 0 (-87.34 .. -103.97), and far below
    it (a softmax row under a -1e4 or -inf mask): numpy's answers to 2 ulp, exactly 0 below the band
    (those lanes compute on 0 and are zeroed, never through an underflowing product), NaN kept."""
    x = np.linspace(-106, -86, 4099, dtype=np.float32)
    lo = np.float32(-104.0)
    x = np.concatenate([x, [lo, np.nextafter(lo, np.float32(0)), np.nextafter(lo, np.float32(-1e9)), -1e4,
                            np.float32(np.finfo(np.float32).min), -np.inf, np.nan, -103.97, -103.98]]).astype(np.float32)
    x = np.stack([x, x[::-1]])
    got = run_fused([("in", 0), ("EXP",)], [x], tier, np.float32)
    want = np.exp(x)
    assert np.all(got[x < -104] == 0) and np.all(np.isnan(got[np.isnan(x)]))
    ok = np.isfinite(x)
    ulps = np.abs(got[ok].view(np.int32).astype(np.int64) - want[ok].view(np.int32).astype(np.int64))
    assert ulps.max() <= 2, x[ok][ulps.argmax()]


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", sorted(NUMPY_BINARY))
def test_binary_ops_on_every_pair_of_edge_values(op, dtype, tier):
    e = edge_values(dtype)
    a, b = np.repeat(e, e.size).reshape(e.size, e.size), np.tile(e, e.size).reshape(e.size, e.size)
    with np.errstate(all="ignore"):
        want = NUMPY_BINARY[op](a, b)
    got = run_fused([("in", 0), ("in", 1), (op,)], [a, b], tier, dtype)
    # pow's finite values come from two libms (numpy's SIMD one, the C library's): close, not equal
    assert_numpy_equal(got, want, rtol=1e-5 if op == "BROADCAST_POW" else 0, atol=0,
                       msg=f"{op} {np.dtype(dtype)} {tier}")


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("const", [math.nan, math.inf, -math.inf, -0.0, 1e300])
def test_constants_and_scalars_that_are_special(const, dtype, tier):
    """max/min against a NaN constant or scalar argument propagate it; a constant too big for
    float32 is inf there, as numpy makes it."""
    x = np.resize(edge_values(dtype), (3, 21))
    for prog, inputs in (([("in", 0), ("c", const), ("BROADCAST_MAX",)], [x]),
                         ([("in", 0), ("in", 1), ("BROADCAST_MIN",)], [x, const]),
                         ([("c", const), ("in", 0), ("BROADCAST_ADD",)], [x])):
        with np.errstate(all="ignore"):
            want = np.asarray(run_program(tuple(prog), inputs))
            c = dtype(const)
            ref = {"BROADCAST_MAX": np.maximum(x, c), "BROADCAST_MIN": np.minimum(x, c), "BROADCAST_ADD": c + x}
        assert_numpy_equal(want, ref[prog[-1][0]], rtol=0, atol=0, msg=f"L1 {prog}")
        assert_numpy_equal(run_fused(prog, inputs, tier, dtype), want, rtol=0, atol=0, msg=f"{tier} {prog}")


class _Rows(nn.Cell):
    def __init__(self, n, dtype):
        super().__init__()
        self.norm = nn.LayerNorm((n,), epsilon=1e-5, dtype=ms.float32 if dtype == np.float32 else ms.float64)

    def construct(self, x):
        return ops.softmax(x, -1), self.norm(x)


def _special_rows(n, dtype):
    rng = np.random.default_rng(n)
    x = rng.standard_normal((9, n)).astype(dtype)
    x[1, 3] = np.inf                       # inf - inf = NaN: the whole row is NaN
    x[2, 1] = -np.inf                      # exp(-inf) = 0
    x[3, :] = -np.inf                      # every element -inf: NaN
    x[4, n // 2] = np.nan
    x[5, 0], x[5, -1] = 1e30, -1e30        # huge but finite (squares overflow in float32)
    x[6, :] = -0.0                         # zero variance
    x[7, :] = np.inf
    x[8, 2] = edge_values(dtype)[6]        # a subnormal
    return x


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [37, 32, 5])
def test_softmax_and_layer_norm_rows_with_special_values(level, tier, dtype, n):
    level(tier)
    x = _special_rows(n, dtype)
    net = _Rows(n, dtype)
    with np.errstate(all="ignore"):
        s = x - x.max(-1, keepdims=True)
        e = np.exp(s)
        sm = e / e.sum(-1, keepdims=True)
        mean = x.mean(-1, keepdims=True)
        ln = (x - mean) / np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + dtype(1e-5))
        ln = ln * net.norm.gamma.asnumpy() + net.norm.beta.asnumpy()      # (+ 0.0 makes a -0.0 +0.0)
        got_sm, got_ln = (t.asnumpy() for t in net(ms.Tensor(x)))
    assert_numpy_equal(got_sm, sm, msg=f"softmax {tier}")
    assert_numpy_equal(got_ln, ln, rtol=1e-4, atol=2e-4, msg=f"layer norm {tier}")
    if tier != "L1":
        (var,) = net.__dict__["_runner"].variants.values()
        sites = var.code.__dict__.get("jit_sites", {})
        assert any(isinstance(k, tiers.Compiled) for s_ in sites.values()
                   for k in (s_.l2 if tier == "L2" else s_.l3).values()), "the row kernels must have been compiled"


@pytest.mark.parametrize("shape", [(3, 0), (0, 5), (0, 0)])
def test_empty_tensors_give_the_same_answer_at_every_tier(level, shape):
    """Softmax over an empty row is numpy's error (a max of nothing) at every tier; the rest is
    an empty result of the right shape."""
    x = np.zeros(shape, np.float32)
    answers = []
    for tier in TIERS:
        level(tier)
        net = _Rows(shape[-1], np.float32)
        try:
            sm, ln = net(ms.Tensor(x))
            answers.append((sm.shape, ln.shape))
        except ms.ExecutionError as e:
            answers.append(type(e.__cause__ or e).__name__)
        out = _interpreted_ops(ms.Tensor(x), ms.Tensor(x)) if shape[-1] else None
        if out is not None:
            assert [o.shape for o in out[4:]] == [shape] * (len(out) - 4), tier
    assert answers[1:] == answers[:-1], answers
    assert answers[0] == ("ValueError" if shape[-1] == 0 else (shape, shape)), answers


class _Dense(nn.Cell):
    def __init__(self, w, b):
        super().__init__()
        self.w, self.b = ms.Parameter(ms.Tensor(w)), ms.Parameter(ms.Tensor(b))

    def construct(self, x):
        return ops.relu(ops.matmul(x, self.w) + self.b), ops.maximum(ops.matmul(x, self.w), 0.0) * 2.0


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_matmul_epilogue_keeps_overflow_and_nan(level, tier, dtype):
    """A product that overflows to ±inf, or is NaN (inf * 0, inf - inf), keeps it through the
    fused bias and relu: relu(NaN) is NaN, relu(inf) is inf, relu(-inf) is 0."""
    level(tier)
    rng = np.random.default_rng(7)
    k, n = 16, 24
    w = (np.abs(rng.standard_normal((k, n))) + 0.1).astype(dtype)
    w[:, 0] = 1e10
    x = rng.standard_normal((70, k)).astype(dtype)      # more rows than one L3 block
    x[1, 2] = np.inf
    x[2, 2] = -np.inf
    x[3, 4] = np.nan
    x[4, 1], x[4, 5] = np.inf, -np.inf
    big = 1e30 if dtype == np.float32 else 1e300        # big * 1e10 overflows term by term
    x[5, :] = big
    x[6, :] = -big
    x[66, 0] = np.inf
    w[3, 5] = 0.0                                       # x[:, 3] = inf would give inf * 0 = NaN
    x[7, 3] = np.inf
    b = rng.standard_normal(n).astype(dtype)
    b[7] = np.nan
    net = _Dense(w, b)
    with np.errstate(all="ignore"):
        p = x @ w
        want = (np.maximum(p + b, 0), np.maximum(p, 0) * 2)
        for _ in range(2):
            got = [t.asnumpy() for t in net(ms.Tensor(x))]
            for g, r in zip(got, want):
                assert_numpy_equal(g, r, rtol=1e-5, atol=1e-5, msg=f"matmul epilogue {tier}")
    assert np.isnan(want[0][:, 7]).all() and np.isinf(want[0][5, 0])


@ms.jit
def _interpreted_ops(x, y):
    return (ops.amax(x, -1), ops.amin(x, -1), ops.sum(x, -1), ops.mean(x, -1), ops.log_softmax(x, -1),
            ops.where(x > y, x, y), ops.clip(x, -1.0, 1.0), ops.equal(x, y), ops.not_equal(x, x),
            ops.less(x, y), ops.greater_equal(x, y), ops.cast(x, ms.float64), ops.relu(x) * 1.0)


@pytest.mark.parametrize("tier", TIERS)
def test_interpreted_ops_around_compiled_ones(level, tier):
    """Reductions (numpy's amax/amin propagate NaN), comparisons (NaN is unequal to all),
    where, clip (compiled: max then min), log_softmax, a cast."""
    level(tier)
    e = edge_values(np.float32)
    x = np.stack([e, e[::-1], np.roll(e, 3)])
    y = np.roll(x, 5, axis=1)
    with np.errstate(all="ignore"):
        s = x - x.max(-1, keepdims=True)
        want = (x.max(-1), x.min(-1), x.sum(-1), x.mean(-1), s - np.log(np.exp(s).sum(-1, keepdims=True)),
                np.where(x > y, x, y), np.minimum(np.maximum(x, np.float32(-1)), np.float32(1)), x == y, x != x,
                x < y, x >= y, x.astype(np.float64), np.maximum(x, np.float32(0)))
        for _ in range(3):
            got = _interpreted_ops(ms.Tensor(x), ms.Tensor(y))
            for i, (g, r) in enumerate(zip(got, want)):
                assert_numpy_equal(g.asnumpy(), r, msg=f"output {i} at {tier}")


@pytest.mark.parametrize("tier", TIERS)
def test_casts_of_nan_and_inf_to_integers_give_numpys_answer(level, tier):
    """Undefined in C; every tier gives what numpy gives on this machine (the compiled tiers
    leave casts to another dtype in the interpreter)."""
    level(tier)

    @ms.jit
    def f(x):
        return ops.cast(ops.relu(x) + 1.0, ms.int32)

    x = np.resize(edge_values(np.float32), (2, 17))
    with np.errstate(all="ignore"):
        want = (np.maximum(x, np.float32(0)) + np.float32(1)).astype(np.int32)
        got = f(ms.Tensor(x)).asnumpy()
    np.testing.assert_array_equal(got, want)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree=random_programs.trees(), B=st.sampled_from([0, 2, 3, 5]), N=st.integers(6, 9),
       seed=st.integers(0, 2 ** 16), share=st.sampled_from([0.0, 0.15, 0.4]), strided=st.booleans())
def test_random_programs_at_every_tier_with_and_without_fusion(tree, B, N, seed, share, strided):
    """The interpreter's random programs (tests/random_programs.py: NaN, ±inf, ±0.0, subnormals,
    empty, 0-d and strided inputs) run unfused and fused, at L1, L2 and L3, twice each: every
    answer is numpy's (NaN for NaN, inf for inf, the signs of zeros)."""
    from msvm.bytecode import verify
    from msvm.compiler.fuse import fuse
    from msvm.interp.interpreter import BoundCode

    env = random_programs.inputs(B, N, seed, share, strided)
    try:
        with np.errstate(all="ignore"):
            want = np.asarray(random_programs.ref(tree, env))
        code = verify(random_programs.build(tree, N).finish())
    except (ValueError, ms.VerifyError):
        return
    args = [env[k] for k in ("x", "v", "c", "s")]
    W = ms.Tensor(env["W"])
    try:
        for fused in (False, True):
            run = fuse(code) if fused else code
            for tier in TIERS:
                ms.set_context(jit_config={"jit_level": tier})
                bound = BoundCode(run, None, {"W": W}, None, accelerator=tiers.ACCELERATOR)
                for _ in range(2):
                    try:
                        with np.errstate(all="ignore"):
                            out = bound.call(args)
                    except ms.ShapeMismatch:     # accepted only by unifying symbols (see tests/vm)
                        return
                    got = np.asarray(out)
                    assert_numpy_equal(got, want.astype(got.dtype) if got.shape else want, rtol=2e-4, atol=1e-5,
                                       msg=f"{tier} fused={fused} {tree}")
    finally:
        ms.set_context(jit_config={"jit_level": "auto"})
