"""Random programs over symbolic shapes, their numpy answers and their inputs (shared by the
interpreter's tests, tests/vm/test_random_programs.py, and the tiers', tests/jit).

A program is a random expression tree over inputs x [B,N], v [N], c [B,1] and s [] (0-d),
and a parameter W [N,N], emitted as bytecode with symbolic B and N. ``inputs`` draws their
values: ordinary ones, or with NaN, ±inf, ±0.0, subnormals and huge values sprinkled in, B
may be 0 (empty tensors) and x may be a strided view (odd strides).
"""

import msvm as ms
import numpy as np
from hypothesis import strategies as st
from msvm.bytecode import CodeBuilder
from msvm.bytecode import symbolic as S
from msvm.bytecode.types import TensorType
from scipy import special

UNARY = {
    "RELU": lambda x: np.maximum(x, x.dtype.type(0)), "NEG": np.negative, "ABS": np.abs, "TANH": np.tanh,
    "SIGMOID": lambda x: 1 / (1 + np.exp(-x)), "EXP": lambda x: np.exp(np.clip(x, -80, 80)),
    "GELU": lambda x: 0.5 * x * (1 + special.erf(x / np.sqrt(2))),
}
BINARY = {"BROADCAST_ADD": np.add, "BROADCAST_SUB": np.subtract, "BROADCAST_MUL": np.multiply,
          "BROADCAST_MAX": np.maximum, "BROADCAST_MIN": np.minimum}
LEAVES = ["x", "v", "c", "s", "W", 0.5, -2.0]
# sprinkled into inputs: no value whose exp is subnormal (a subnormal has few bits, and two
# correct exps may differ in the last of them by a few percent)
SPECIAL = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -1e-40, 1e30, -1e30], np.float32)


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
    """numpy's answer; ValueError where numpy refuses the program."""
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
        if a.ndim == 0:      # numpy sums a 0-d array over axis -1; the verifier, like MindSpore, refuses
            raise ValueError("axis -1 of a 0-d tensor")
        return a.sum(-1, keepdims=True)
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


def build(tree, N=None):
    """A CodeBuilder holding the program; W's type is fixed when N is given."""
    B, Ns = S.sym("B"), S.sym("N")
    b = CodeBuilder("random.construct", "random.py", 1)
    params = [("x", TensorType((B, Ns), ms.float32)), ("v", TensorType((Ns,), ms.float32)),
              ("c", TensorType((B, S.Expr.const(1)), ms.float32)), ("s", TensorType((), ms.float32))]
    for name, t in params:
        b.local(name)
        b.code.params.append((name, t))
    b.code.attr_types["W"] = None if N is None else TensorType((S.Expr.const(N), S.Expr.const(N)), ms.float32)
    emit(b, tree)
    b.emit("RETURN")
    return b


def inputs(B, N, seed, special_share=0.0, strided=False) -> dict:
    """x, v, c, s and W; ``special_share`` of x, v, c, s drawn from SPECIAL; x a strided view."""
    rng = np.random.default_rng(seed)
    env = {"x": rng.standard_normal((B, N)).astype(np.float32), "v": rng.standard_normal(N).astype(np.float32),
           "c": rng.standard_normal((B, 1)).astype(np.float32), "s": np.asarray(rng.standard_normal(), np.float32),
           "W": (rng.standard_normal((N, N)) / N).astype(np.float32)}
    if special_share:
        for k in ("x", "v", "c", "s"):
            a = env[k].reshape(-1)
            at = rng.random(a.size) < special_share
            a[at] = rng.choice(SPECIAL, int(at.sum()))
    if strided:          # the same values, every other column of a wider array
        wide = np.zeros((B, 2 * N), np.float32)
        wide[:, ::2] = env["x"]
        env["x"] = wide[:, ::2]
    return env
