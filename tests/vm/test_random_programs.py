"""Random programs, interpreted and checked against numpy (the interpreter is the
reference the compiled tiers are tested against, so it is tested against numpy).

A program is a random expression tree over three inputs of shapes [B,N], [N] and
[B,1] and a parameter W [N,N], emitted as bytecode with symbolic B and N. If the
verifier accepts it, the interpreter's result must match numpy for concrete B, N
in value, shape and dtype; if it rejects it, numpy must fail on it too; if it
accepts it only by unifying symbols with constants, the entry check must stop
the call before any instruction runs.
"""

import msvm as ms
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from msvm.bytecode import CodeBuilder, verify
from msvm.bytecode import symbolic as S
from msvm.bytecode.types import TensorType
from msvm.interp import replay
from msvm.interp.interpreter import BoundCode
from scipy import special

UNARY = {
    "RELU": lambda x: np.maximum(x, 0), "NEG": np.negative, "ABS": np.abs, "TANH": np.tanh,
    "SIGMOID": lambda x: 1 / (1 + np.exp(-x)), "EXP": lambda x: np.exp(np.clip(x, -80, 80)),
    "GELU": lambda x: 0.5 * x * (1 + special.erf(x / np.sqrt(2))),
}
BINARY = {"BROADCAST_ADD": np.add, "BROADCAST_SUB": np.subtract, "BROADCAST_MUL": np.multiply,
          "BROADCAST_MAX": np.maximum, "BROADCAST_MIN": np.minimum}
LEAVES = ["x", "v", "c", "W", 0.5, -2.0]


def trees():
    leaf = st.sampled_from(LEAVES)
    return st.recursive(leaf, lambda kids: st.one_of(
        st.tuples(st.sampled_from(sorted(UNARY)), kids),
        st.tuples(st.sampled_from(sorted(BINARY)), kids, kids),
        st.tuples(st.just("REDUCE_SUM"), kids),
        st.tuples(st.just("SOFTMAX"), kids),
        st.tuples(st.just("MATMUL"), kids),
        st.tuples(st.just("CLIPPED_EXP"), kids),
    ), max_leaves=10)


def emit(b, t):
    if isinstance(t, float):
        b.emit("LOAD_CONST", b.const(t))
    elif t == "W":
        b.emit("LOAD_PARAM", b.name("W"))
    elif isinstance(t, str):
        b.emit("LOAD_TENSOR", b.local(t))
    else:
        op = t[0]
        for k in t[1:]:
            emit(b, k)
        if op == "REDUCE_SUM":
            b.emit(op, b.const((-1,)), b.const(True))
        elif op == "SOFTMAX":
            b.emit(op, b.const(-1))
        elif op == "MATMUL":
            b.emit("LOAD_PARAM", b.name("W"))
            b.emit("BATCH_MATMUL", b.const(False), b.const(False))
        elif op == "CLIPPED_EXP":
            b.emit("LOAD_CONST", b.const(5.0))
            b.emit("BROADCAST_MIN")
            b.emit("EXP")
        elif op == "EXP":            # the program clips exactly as the reference does (float32 overflows at 88.7)
            b.emit("LOAD_CONST", b.const(80.0))
            b.emit("BROADCAST_MIN")
            b.emit("LOAD_CONST", b.const(-80.0))
            b.emit("BROADCAST_MAX")
            b.emit("EXP")
        else:
            b.emit(op)


def ref(t, env):
    if isinstance(t, float):
        return t
    if isinstance(t, str):
        return env[t]
    op, args = t[0], [ref(k, env) for k in t[1:]]
    if op in ("REDUCE_SUM", "SOFTMAX", "MATMUL") and isinstance(args[0], float):
        raise ValueError(f"{op} of a Python scalar")
    if op in UNARY and isinstance(args[0], float):     # scalars stay Python floats in the VM
        return float(UNARY[op](np.float64(args[0])))
    if op == "CLIPPED_EXP" and isinstance(args[0], float):
        return float(np.exp(min(args[0], 5.0)))
    a = np.asarray(args[0], dtype=np.float32)
    if op in UNARY:
        return np.asarray(UNARY[op](a), dtype=np.float32)
    if op in BINARY:
        if all(isinstance(x, float) for x in args):
            return float(BINARY[op](*args))
        return np.asarray(BINARY[op](*[np.float32(x) if isinstance(x, float) else x for x in args]), np.float32)
    if op == "REDUCE_SUM":
        return a.sum(-1, keepdims=True) if a.ndim else a
    if op == "SOFTMAX":
        if a.ndim == 0:
            raise ValueError("softmax of a scalar")
        e = np.exp(a - a.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)
    if op == "MATMUL":
        if a.ndim < 2:
            raise ValueError("matmul needs rank 2")
        return a @ env["W"]
    if op == "CLIPPED_EXP":
        return np.exp(np.minimum(a, np.float32(5.0)))
    raise AssertionError(op)


def build(tree):
    B, N = S.sym("B"), S.sym("N")
    b = CodeBuilder("random.construct", "random.py", 1)
    params = [("x", TensorType((B, N), ms.float32)), ("v", TensorType((N,), ms.float32)),
              ("c", TensorType((B, S.Expr.const(1)), ms.float32))]
    for name, t in params:
        b.local(name)
        b.code.params.append((name, t))
    b.code.attr_types["W"] = None
    emit(b, tree)
    b.emit("RETURN")
    return b


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree=trees(), B=st.integers(2, 5), N=st.integers(6, 9), seed=st.integers(0, 2 ** 16))
def test_random_program_matches_numpy(tree, B, N, seed):
    rng = np.random.default_rng(seed)
    env = {"x": rng.standard_normal((B, N)).astype(np.float32), "v": rng.standard_normal(N).astype(np.float32),
           "c": rng.standard_normal((B, 1)).astype(np.float32),
           "W": (rng.standard_normal((N, N)) / N).astype(np.float32)}
    b = build(tree)
    b.code.attr_types["W"] = TensorType((S.Expr.const(N), S.Expr.const(N)), ms.float32)
    code = b.finish()
    try:
        with np.errstate(all="ignore"):
            expected = ref(tree, env)
        numpy_ok = True
    except ValueError:
        numpy_ok = False
    try:
        verify(code)
    except ms.VerifyError:
        assert not numpy_ok, f"verifier rejected a program numpy runs: {tree}"
        return
    W = ms.Tensor(env["W"])
    bound = BoundCode(code, None, {"W": W}, None)
    if not numpy_ok:    # accepted by unifying symbols: the entry check must stop it before it runs
        with pytest.raises(ms.ShapeMismatch):
            bound.call([env["x"], env["v"], env["c"]])
        return
    args = [env["x"], env["v"], env["c"]]
    out = bound.call(args)
    # the straight-line replay of this call's path computes the interpreter's answer, bit for bit,
    # also on its second run (kept output buffers)
    rp = replay.build(bound, bound.fast_bind(args))
    assert rp is not None, tree
    for _ in range(2):
        again = rp(*args)
        assert again is not replay.FALLBACK
        np.testing.assert_array_equal(np.asarray(again), np.asarray(out))
    expected = np.asarray(expected)
    out = np.asarray(out)
    t = code.result_type
    if isinstance(t, TensorType):
        assert out.shape == expected.shape and out.dtype == np.float32
        assert list(out.shape) == [d.evaluate({"B": B, "N": N}) for d in t.shape]
    np.testing.assert_allclose(out, expected.astype(out.dtype) if out.shape else expected, rtol=2e-4, atol=1e-5)
