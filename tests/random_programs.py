"""Random programs over symbolic shapes, their numpy answers and their inputs (shared by the
interpreter's tests, tests/vm/test_random_programs.py, and the tiers', tests/jit).

A program is a random expression tree over inputs x [B,N], v [N], c [B,1] and s [] (0-d),
and a parameter W [N,N], emitted as bytecode with symbolic B and N. ``inputs`` draws their
values: ordinary ones, or with NaN, ±inf, ±0.0, subnormals and huge values sprinkled in, B
may be 0 (empty tensors) and x may be a strided view (odd strides).

``SourceProgram(seed)`` (issue 16) is the other kind: a random ``@ms.jit`` program written as MindSpore
source, over the model zoo's ops and through helper functions, with its own numpy answer (below).
"""

import atexit
import importlib.util
import math
import os
import random
import shutil
import sys
import tempfile

import msvm as ms
import numpy as np
from hypothesis import strategies as st
from msvm.bytecode import CodeBuilder
from msvm.bytecode import symbolic as S
from msvm.bytecode.types import TensorType
from refs import cv as _cv
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


ARGS = ("x", "v", "c", "s")      # build's parameters, in order (W is the Cell's parameter)


def cpu_reference(tree, B, N, seed, special_share=0.0):
    """A drawn program and the CPU interpreter's answer, the reference a device or tier is checked
    against: ``(code, args, W, want)`` with ``args`` host arrays in ``ARGS`` order and ``W`` the
    parameter's host array; None where the program does not verify or the inputs do not meet its
    shapes (the verifier's and the entry check's own tests cover those)."""
    from msvm.bytecode import verify
    from msvm.interp.interpreter import BoundCode

    env = inputs(B, N, seed, special_share)
    code = build(tree, N).finish()
    try:
        verify(code)
    except ms.VerifyError:
        return None
    args = [env[k] for k in ARGS]
    old = ms.get_context("device_target")
    ms.set_context(device_target="CPU")
    try:
        with np.errstate(all="ignore"):
            want = BoundCode(code, None, {"W": ms.Tensor(env["W"])}, None).call(args)
    except ms.ShapeMismatch:
        return None
    finally:
        ms.set_context(device_target=old)
    return code, args, env["W"], want


# ================================================================ programs as MindSpore source
# (issue 16) Random ``@ms.jit`` programs written as a user writes them, drawing the model zoo's
# ops — conv2d (stride, pad modes, dilation, groups), max/avg/adaptive pooling, gather and int-tensor
# indexing, resize (nearest, bilinear), arange, cumsum, split/chunk, slices with bounds derived from
# shapes (``a[..., :a.shape[-1] // 2]``), masked_fill, tile, triu/tril, boolean-mask indexing
# (``a[a > 0]``, ``a[mask] = v``) — through helper functions
# (plain, ``@ms.jit``, and closures made by a factory), called with their default arguments omitted
# or given. Each program comes with its own numpy answer (``SourceProgram.ref``, written
# independently of msvm's kernels: numpy's float32 ops; the image ops from tests/refs/cv.py).
#
# A program is ``prog(x, v, c, s, w, mask, ids, cols, img)``: x [B, N], v [N], c [B, 1], a 0-d s,
# w [N, N], mask [B, N] bools, ids [B] ints in [0, B), cols [N] ints in [0, N), img [B, 4, H, W]; it
# returns (a [B, N] from a tree of matrix ops, and the mean over H, W of a chain of image ops
# [B, 4] or a 2x2 adaptive pool of it flattened [B, 16]).

# special values for the source programs: NaN, ±inf, ±0.0, subnormals (no huge values: convolutions,
# matmuls and cumsums of them cancel, and float32 against float64 would differ far above a tolerance)
SOURCE_SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -1e-40], np.float32)
IMG_C = 4


def _expit(a):
    with np.errstate(over="ignore"):
        return 1 / (1 + np.exp(-a))


_M_UNARY = {"relu": ("ops.relu({})", lambda a: np.maximum(a, 0.0)), "tanh": ("ops.tanh({})", np.tanh),
            "sigmoid": ("ops.sigmoid({})", _expit), "neg": ("-{}", np.negative), "abs": ("ops.abs({})", np.abs)}
_M_BINARY = {"add": ("{} + {}", np.add), "sub": ("{} - {}", np.subtract), "mul": ("{} * {}", np.multiply),
             "max": ("ops.maximum({}, {})", np.maximum), "min": ("ops.minimum({}, {})", np.minimum)}


class SourceProgram:
    """The source of one random program (a module), its numpy answer and the constants it holds."""

    def __init__(self, seed: int):
        self.seed = seed
        self.rng = random.Random(seed)
        self.consts: dict = {}            # name -> float32 array (conv weights), module globals
        self.helpers: list = []           # source lines of the helper functions, in order
        self.helper_refs: dict = {}       # helper name -> (its statements' refs, default k)
        self.body: list = []              # (source line, ref(env) -> None) of prog
        self.n = 0
        self.kinds: set = set()           # the op kinds drawn (a test checks the generator covers them all)
        a = self.matrix(self.body, "x", self.rng.randint(3, 6), top=True)
        h, w = 5, 5                       # the smallest image inputs() draws
        b, _, _ = self.image(self.body, "img", self.rng.randint(1, 4), h, w)
        if self.rng.random() < 0.5:
            self.emit(self.body, "r_img", f"ops.mean({b}, (2, 3))", lambda e, b=b: e[b].mean(axis=(2, 3)))
        else:
            self.emit(self.body, "r_img", f"ops.adaptive_avg_pool2d({b}, (2, 2)).reshape({b}.shape[0], {4 * IMG_C})",
                      lambda e, b=b: _cv.adaptive_avg_pool2d(e[b], (2, 2)).reshape(e[b].shape[0], 4 * IMG_C))
        self.result = (a, "r_img")

    # --- emission
    def var(self) -> str:
        self.n += 1
        return f"t{self.n}"

    def emit(self, block, name, src, ref):
        block.append((f"{name} = {src}", name, ref))
        return name

    def const(self, array) -> str:
        name = f"K{len(self.consts)}"
        self.consts[name] = array.astype(np.float32)
        return name

    # --- the matrix tree [B, N]
    def matrix(self, block, leaf, depth, top=False):
        r = self.rng
        if depth <= 0 or r.random() < 0.15:
            return leaf
        kind = r.choice(["unary", "unary", "binary", "binary", "masked_fill", "band", "cumsum", "halves", "chunk", "split",
                         "tile", "gather_rows", "gather_cols", "arange", "reduce", "mean0d", "matmul", "softmax",
                         "middle", "rows_half", "mask_select", "mask_assign"]
                        + (["helper"] * 4 if top else []) + (["nested"] * 3 if self.helpers else []))
        if leaf == "t" and kind in ("tile", "gather_rows", "gather_cols", "matmul", "binary", "mask_assign"):
            kind = "unary"               # a helper sees its argument t alone
        self.kinds.add(kind)
        a = self.matrix(block, leaf, depth - 1, top)
        out = self.var()
        if kind == "unary":
            name = r.choice(sorted(_M_UNARY))
            self.kinds.add(f"unary:{name}")
            src, fn = _M_UNARY[name]
            return self.emit(block, out, src.format(a), lambda e, a=a, fn=fn: fn(e[a]))
        if kind == "binary":
            name = r.choice(sorted(_M_BINARY))
            self.kinds.add(f"binary:{name}")
            src, fn = _M_BINARY[name]
            other = r.choice(["matrix", "v", "c", "s", "const"])
            if other == "matrix":
                other = self.matrix(block, leaf, depth - 2, top)
            elif other == "const":
                other = repr(r.choice([0.5, -2.0, 3.0]))
            if other[0].isdigit() or other[0] == "-":
                value = float(other)
                return self.emit(block, out, src.format(a, other), lambda e, a=a, fn=fn, value=value: fn(e[a], value))
            if r.random() < 0.5:
                a, other = other, a
            return self.emit(block, out, src.format(a, other), lambda e, a=a, b=other, fn=fn: fn(e[a], e[b]))
        if kind == "masked_fill":
            if leaf == "t" or r.random() < 0.5:       # a mask from the data, through the Tensor method
                t = r.choice([0.5, -0.25])
                return self.emit(block, out, f"{a}.masked_fill({a} > {t}, 0.0)",
                                 lambda e, a=a, t=t: np.where(e[a] > t, 0.0, e[a]))
            value = r.choice([-1.0, 2.5])
            return self.emit(block, out, f"ops.masked_fill({a}, mask, {value})",
                             lambda e, a=a, value=value: np.where(e["mask"], value, e[a]))
        if kind == "band":
            fn, k = r.choice(["triu", "tril"]), r.choice([-1, 0, 1])
            return self.emit(block, out, f"ops.{fn}({a}, {k})", lambda e, a=a, f=getattr(np, fn), k=k: f(e[a], k))
        if kind == "cumsum":
            axis = r.choice([0, 1, -1])
            return self.emit(block, out, f"ops.cumsum({a}, {axis})", lambda e, a=a, axis=axis: np.cumsum(e[a], axis))
        if kind == "halves":                  # slices with bounds derived from the shape
            return self.emit(block, out, f"ops.concat(({a}[..., {a}.shape[-1] // 2:], {a}[..., :{a}.shape[-1] // 2]), -1)",
                             lambda e, a=a: np.concatenate((e[a][..., e[a].shape[-1] // 2:],
                                                            e[a][..., :e[a].shape[-1] // 2]), -1))
        if kind == "chunk":                   # MindSpore's chunk: pieces of ceil(N / 2)
            p, q = self.var(), self.var()
            block.append((f"{p}, {q} = ops.chunk({a}, 2, 1)", None, None))
            return self.emit(block, out, f"ops.concat(({q}, {p}), 1)",
                             lambda e, a=a: np.concatenate((e[a][:, -(-e[a].shape[1] // 2):],
                                                            e[a][:, :-(-e[a].shape[1] // 2)]), 1))
        if kind == "split":
            p, q = self.var(), self.var()
            block.append((f"{p}, {q} = ops.split({a}, [2, {a}.shape[1] - 2], 1)", None, None))
            return self.emit(block, out, f"ops.concat(({q}, {p} * 2.0), 1)",
                             lambda e, a=a: np.concatenate((e[a][:, 2:], e[a][:, :2] * 2), 1))
        if kind == "middle":                  # three slices, bounds from the shape
            return self.emit(block, out, f"ops.concat(({a}[:, :1], {a}[:, 1:{a}.shape[1] - 1] * 0.5, "
                                         f"{a}[:, {a}.shape[1] - 1:]), 1)",
                             lambda e, a=a: np.concatenate((e[a][:, :1], e[a][:, 1:-1] * np.float32(0.5),
                                                            e[a][:, -1:]), 1))
        if kind == "rows_half":               # slicing the batch dim by its half (B may be 0)
            return self.emit(block, out, f"ops.concat(({a}[{a}.shape[0] // 2:], {a}[:{a}.shape[0] // 2]), 0)",
                             lambda e, a=a: np.concatenate((e[a][e[a].shape[0] // 2:], e[a][:e[a].shape[0] // 2]), 0))
        if kind == "nested":                  # an earlier helper called again (inside a helper, too)
            name = r.choice(sorted(self.helper_refs))
            ref, call = self.helper_refs[name]
            return self.emit(block, out, call.format(a), lambda e, a=a, ref=ref: ref(e, a))
        if kind == "tile":
            return self.emit(block, out, f"{a} + ops.tile(v.reshape(1, -1), ({a}.shape[0], 1))",
                             lambda e, a=a: e[a] + np.tile(e["v"], (e[a].shape[0], 1)))
        if kind == "gather_rows":             # an int tensor index
            return self.emit(block, out, f"{a}[ids]", lambda e, a=a: e[a][e["ids"]])
        if kind == "gather_cols":
            return self.emit(block, out, f"ops.gather({a}, cols, 1)", lambda e, a=a: e[a][:, e["cols"]])
        if kind == "arange":
            return self.emit(block, out, f"{a} * (ops.arange({a}.shape[1], dtype=ms.float32) * 0.25)",
                             lambda e, a=a: e[a] * (np.arange(e[a].shape[1], dtype=np.float32) * 0.25))
        if kind == "mask_select":             # x[mask]: a count the data decides, summed back to 0-d
            t = r.choice([0.0, 0.5])
            return self.emit(block, out, f"{a} + ops.sum({a}[{a} > {t}]) * 0.125",
                             lambda e, a=a, t=t: e[a] + e[a][e[a] > t].sum() * np.float32(0.125))
        if kind == "mask_assign":             # x[mask] = value, a statement on a copy
            value = r.choice([0.5, -3.0])
            block.append((f"{out} = {a} * 1.0", out, lambda e, a=a: e[a] * np.float32(1)))
            block.append((f"{out}[mask] = {value}", None, None))
            return self.emit(block, out, f"{out} + 0.0",
                             lambda e, out=out, value=value: np.where(e["mask"], np.float32(value), e[out]) + np.float32(0))
        if kind == "mean0d":                  # a 0-d result (the mean of every element) broadcast back
            return self.emit(block, out, f"{a} - ops.mean({a}) * 0.5",
                             lambda e, a=a: e[a] - (e[a].mean() if e[a].size else np.float32(np.nan)) * np.float32(0.5))
        if kind == "reduce":
            return self.emit(block, out, f"{a} - ops.mean({a}, -1, True)",
                             lambda e, a=a: e[a] - e[a].mean(-1, keepdims=True))
        if kind == "matmul":
            return self.emit(block, out, f"ops.matmul({a}, w)", lambda e, a=a: e[a] @ e["w"])
        if kind == "softmax":
            return self.emit(block, out, f"ops.softmax({a}, -1)", lambda e, a=a: _softmax(e[a]))
        if kind == "helper":
            return self.helper(block, a, out)
        raise AssertionError(kind)

    def helper(self, block, a, out):
        """A helper function over t: plain, @ms.jit or made by a factory (a closure over k); called
        with its default k omitted, or given."""
        r = self.rng
        name = f"h{len(self.helpers)}"
        inner: list = []
        res = self.matrix(inner, "t", r.randint(1, 3))
        k_default, k_given = 0.5, r.choice([None, 2.0])
        style = r.choice(["plain", "jit", "closure", "closure_tensor"])
        self.kinds.add(f"helper:{style}:{'default' if style.startswith('closure') or k_given is None else 'given'}")
        lines = [ln for ln, _, _ in inner]
        bias = 0.0
        if style == "closure":
            src = [f"def make_{name}(k):", f"    def {name}(t):"] + [f"        {ln}" for ln in lines]
            src += [f"        return {res} * k", f"    return {name}", "", "",
                    f"{name} = make_{name}({k_default})"]
            call, k, template = f"{name}({a})", k_default, f"{name}({{}})"
        elif style == "closure_tensor":       # the factory's argument is a tensor the closure adds
            src = [f"def make_{name}(b):", f"    def {name}(t, k={k_default}):"] + [f"        {ln}" for ln in lines]
            src += [f"        return {res} * k + b", f"    return {name}", "", "",
                    f"{name} = make_{name}(ms.Tensor(np.array([0.25], np.float32)))"]
            call, k, bias, template = f"{name}({a})", k_default, 0.25, f"{name}({{}})"
        else:
            src = (["@ms.jit"] if style == "jit" else []) + [f"def {name}(t, k={k_default}):"]
            src += [f"    {ln}" for ln in lines] + [f"    return {res} * k"]
            given = r.choice([f"{k_given}", f"k={k_given}"])          # positionally or by keyword
            call = f"{name}({a})" if k_given is None else f"{name}({a}, {given})"
            template = call.replace(f"({a}", "({}", 1)
            k = k_default if k_given is None else k_given
        self.helpers.append("\n".join(src))
        steps = [(n, f) for _, n, f in inner if n is not None]
        chunked = [ln for ln, n, _ in inner if n is None]

        def ref(e, a=a, steps=steps, res=res, k=k, bias=bias):
            env = dict(e, t=e[a])
            for n, f in steps:
                r = np.asarray(f(env))
                env[n] = r.astype(np.float32) if r.dtype == np.float64 else r
            return env[res] * np.float32(k) + np.float32(bias) if bias else env[res] * np.float32(k)
        del chunked
        self.helper_refs[name] = (ref, template)
        return self.emit(block, out, call, lambda e, a=a, ref=ref: ref(e, a))

    # --- the image chain [B, 4, H, W]; h, w: the smallest sizes it can have here
    def image(self, block, leaf, depth, h, w):
        r = self.rng
        a = leaf
        for _ in range(depth):
            kinds = ["conv", "conv", "relu", "avg_pool", "resize"]
            if h >= 2 and w >= 2:
                kinds += ["max_pool"]
            if h >= 2 and w >= 3:
                kinds += ["adaptive"]
            kind = r.choice(kinds)
            self.kinds.add(kind)
            out = self.var()
            if kind == "conv":
                g = r.choice([1, 2, 4])
                k, s, d = r.choice([1, 3]), r.choice([1, 1, 2]), r.choice([1, 1, 2])
                span = d * (k - 1) + 1
                mode = r.choice(["same", "pad", "valid"] if min(h, w) >= span else ["same", "pad"])
                p = (span - 1) // 2 if mode == "pad" else 0
                wt = self.const(np.random.default_rng(self.seed + self.n).standard_normal((IMG_C, IMG_C // g, k, k))
                                * 0.5)
                self.emit(block, out, f"ops.conv2d({a}, {wt}, stride={s}, pad_mode={mode!r}, padding={p}, dilation={d}, "
                                      f"groups={g})",
                          lambda e, a=a, wt=wt, s=s, mode=mode, p=p, d=d, g=g:
                          _cv.conv2d(e[a], self.consts[wt], stride=s, pad="same" if mode == "same" else p, dilation=d,
                                     groups=g))
                if mode == "same":
                    h, w = -(-h // s), -(-w // s)
                else:
                    h, w = (h + 2 * p - span) // s + 1, (w + 2 * p - span) // s + 1
            elif kind == "relu":
                self.emit(block, out, f"ops.relu({a}) - 0.5 * {a}", lambda e, a=a: np.maximum(e[a], 0) - 0.5 * e[a])
            elif kind == "avg_pool":
                count = r.choice([True, False])
                self.emit(block, out, f"ops.avg_pool2d({a}, 3, 1, 1, count_include_pad={count})",
                          lambda e, a=a, count=count: _cv.avg_pool2d(e[a], 3, 1, 1, count_include_pad=count))
            elif kind == "max_pool":
                s = r.choice([1, 2])
                self.emit(block, out, f"ops.max_pool2d({a}, 2, {s})", lambda e, a=a, s=s: _cv.max_pool2d(e[a], 2, s))
                h, w = (h - 2) // s + 1, (w - 2) // s + 1
            elif kind == "adaptive":
                self.emit(block, out, f"ops.adaptive_avg_pool2d({a}, (2, 3))",
                          lambda e, a=a: _cv.adaptive_avg_pool2d(e[a], (2, 3)))
                h, w = 2, 3
            elif kind == "resize":
                mode = r.choice(["nearest", "bilinear"])
                if r.random() < 0.5:
                    self.emit(block, out, f"ops.interpolate({a}, size=({a}.shape[2] * 2, {a}.shape[3] + 1), mode={mode!r})",
                              lambda e, a=a, mode=mode: _cv.resize(e[a], e[a].shape[2] * 2, e[a].shape[3] + 1, mode))
                    h, w = h * 2, w + 1
                else:
                    self.emit(block, out, f"ops.interpolate({a}, scale_factor=2.0, mode={mode!r})",
                              lambda e, a=a, mode=mode: _cv.resize(e[a], e[a].shape[2] * 2, e[a].shape[3] * 2, mode))
                    h, w = h * 2, w * 2
            a = out
        return a, h, w

    # --- the module
    def source(self) -> str:
        lines = ['"""A random program (tests/random_programs.py, seed %d)."""' % self.seed, "", "import msvm as ms",
                 "import numpy as np", "from msvm import ops", "", ""]
        for name, arr in self.consts.items():
            lines.append(f"{name} = ms.Tensor(np.array({arr.tolist()!r}, np.float32))")
        lines += ["", ""]
        for h in self.helpers:
            lines += [h, "", ""]
        lines.append("def prog(x, v, c, s, w, mask, ids, cols, img):")
        lines += [f"    {ln}" for ln, _, _ in self.body]
        lines.append(f"    return {self.result[0]}, {self.result[1]}")
        return "\n".join(lines) + "\n"

    def ref(self, env: dict) -> tuple:
        """numpy's answer: numpy's float32 ops on the float32 inputs (so underflow, overflow and the
        signs of zeros are float32's); the image ops (tests/refs/cv.py) sum in float64, rounded to
        float32 after each op."""
        e = {k: np.asarray(v) for k, v in env.items()}
        with np.errstate(all="ignore"):
            for _, name, f in self.body:
                if name is not None:
                    r = np.asarray(f(e))
                    e[name] = r.astype(np.float32) if r.dtype == np.float64 else r
            return tuple(np.asarray(e[n], np.float32) for n in self.result)

    def load(self):
        """The module, written to a file (the frontend reads a function's source) and imported."""
        if not _DIR:
            _DIR.append(tempfile.mkdtemp(prefix="msvm_rp_"))
            atexit.register(shutil.rmtree, _DIR[0], True)
        path = os.path.join(_DIR[0], f"rp_{self.seed}_{id(self)}.py")
        with open(path, "w") as f:
            f.write(self.source())
        spec = importlib.util.spec_from_file_location(f"rp_{self.seed}_{id(self)}", path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod
        spec.loader.exec_module(mod)
        return mod


_DIR: list = []        # one directory per process for the programs' files, removed at exit


def _softmax(a):
    m = a.max(-1, keepdims=True) if a.shape[-1] else a
    ex = np.exp(a - m)
    return ex / ex.sum(-1, keepdims=True)


SOURCE_ARGS = ("x", "v", "c", "s", "w", "mask", "ids", "cols", "img")
# every kind of op, helper and argument style the generator draws: SOURCE_SEEDS must cover them all
SOURCE_KINDS = frozenset(
    {"binary", "masked_fill", "band", "cumsum", "halves", "chunk", "split", "tile", "gather_rows", "gather_cols",
     "arange", "reduce", "mean0d", "matmul", "softmax", "middle", "rows_half", "mask_select", "mask_assign", "helper",
     "nested", "conv", "relu", "avg_pool", "max_pool", "adaptive", "resize"}
    | {f"unary:{n}" for n in _M_UNARY} | {f"binary:{n}" for n in _M_BINARY}
    | {f"helper:{s}:{d}" for s in ("plain", "jit") for d in ("default", "given")}
    | {"helper:closure:default", "helper:closure_tensor:default"})


def source_case(seed: int) -> tuple:
    """(B, N, H, W, special share) for a seed: empty batches, odd sizes, special values."""
    r = random.Random(seed * 7919 + 1)
    return r.choice([0, 2, 3, 5]), r.randint(6, 9), r.randint(5, 8), r.randint(5, 8), r.choice([0.0, 0.0, 0.2])


def source_inputs(B, N, H, W, seed, special_share=0.0) -> dict:
    """The source programs' inputs; ``special_share`` of x, v, c, s and img from SOURCE_SPECIAL."""
    rng = np.random.default_rng(seed)
    env = {"x": rng.standard_normal((B, N)).astype(np.float32), "v": rng.standard_normal(N).astype(np.float32),
           "c": rng.standard_normal((B, 1)).astype(np.float32), "s": np.asarray(rng.standard_normal(), np.float32),
           "w": (rng.standard_normal((N, N)) / math.sqrt(N)).astype(np.float32),
           "mask": rng.random((B, N)) < 0.4, "ids": rng.integers(0, max(B, 1), B).astype(np.int32),
           "cols": rng.permutation(N).astype(np.int32),
           "img": rng.standard_normal((B, IMG_C, H, W)).astype(np.float32)}
    if special_share:
        for k in ("x", "v", "c", "s", "img"):
            a = env[k].reshape(-1)
            at = rng.random(a.size) < special_share
            a[at] = rng.choice(SOURCE_SPECIAL, int(at.sum()))
    return env
