"""MindSpore APIs issue 21 added beside functional.py's: printing, unique values, and composites
(padding modes, strided slices, linspace/range, ...). ``ops/registry.py`` gives each its primitive,
function and Tensor-method names.

``print_`` inside construct is one PRINT instruction at the call's place in the program (an effect
row: it runs when the Cell runs, in program order, at every tier); outside it prints at once.
"""

from __future__ import annotations

import numpy as np

from .. import dtype as dt
from ..bytecode import symbolic as S
from ..bytecode.symbolic import Expr
from ..frontend.graph import GraphValue, current, is_graph, tracing
from ..interp.kernels_more import print_parts
from ..tensor import Tensor, unwrap
from . import functional as F


def _print_items(args, parts: list, vals: list):
    for v in args:
        if isinstance(v, str):
            parts.append(v)
        elif is_graph(v) or isinstance(v, (Tensor, Expr)):
            parts.append(None)
            vals.append(v)
        elif isinstance(v, (tuple, list)) and any(is_graph(x) or isinstance(x, (Tensor, Expr)) for x in v):
            _print_items(v, parts, vals)
        else:
            parts.append(str(v))


def print_(*input_x):
    """MindSpore's ops.print_ / ops.Print: strings, numbers, tuples and tensors, one item a line."""
    parts: list = []
    vals: list = []
    _print_items(input_x, parts, vals)
    if tracing():
        b = current()
        for v in vals:
            b.push(v)
        b.emit("PRINT", len(vals), b.cb.const(tuple(parts)))
        return None
    print_parts(tuple(parts), [np.asarray(unwrap(v)) if isinstance(v, Tensor) else v for v in vals])
    return None


def unique(input):  # noqa: A002
    """(the distinct values of input, flattened, in order of first appearance; each element's index
    among them, int32)."""
    return F.apply("UNIQUE", (input,), (None,))


def unique_with_pad(x, pad_num):
    """UniqueWithPad: unique of a 1-D x, the values padded with pad_num to x's length."""
    if isinstance(pad_num, Tensor):
        pad_num = pad_num.asnumpy().reshape(-1)[0].item()
    if is_graph(pad_num) or isinstance(pad_num, GraphValue):
        raise TypeError("UniqueWithPad: pad_num must be a constant inside construct")
    if isinstance(pad_num, np.generic):
        pad_num = pad_num.item()
    return F.apply("UNIQUE", (x,), (pad_num,))


# ---------------------------------------------------------------- padding modes

_NP_MODES = {"reflect": "reflect", "symmetric": "symmetric", "edge": "edge", "replicate": "edge",
             "circular": "wrap"}


def _slice_axis(x, axis, start, stop, step):
    spec = (("s", None, None, None),) * axis + (("s", start, stop, step),)
    return F.apply("SLICE", (x,), (spec,))


def _check_at_run_time(pred, message: str) -> None:
    """Inside construct: a RAISE of ValueError(message) when pred is false when the Cell runs
    (as ``assert`` under a shape predicate compiles); eagerly pred is a constant."""
    c = pred.const_value()
    if c is not None:
        if not c:
            raise ValueError(message)
        return
    b = current()
    b.keep_symbolic(pred, *b.branch_preds)
    ok = b.cb.new_label()
    b.emit("BRANCH_IF_SYMBOLIC", b.cb.const(S.pnot(pred)), ok)
    b.emit("RAISE", b.cb.const("ValueError"), b.cb.const((message,)))
    b.cb.place(ok)


def _mode_parts(x, axis, lo, hi, mode):
    """The slices of x along axis that pad it by lo before and hi after (constant bounds, so the
    dim may stay symbolic)."""
    before, after = [], []
    if mode == "reflect":             # x[p], ..., x[1] | x | x[-2], ..., x[-1-q]
        if lo:
            before.append(_slice_axis(x, axis, lo, 0, -1))
        if hi:
            after.append(_slice_axis(x, axis, -2, -2 - hi, -1))
    elif mode == "symmetric":         # x[p-1], ..., x[0] | x | x[-1], ..., x[-q]
        if lo:
            before.append(_slice_axis(x, axis, lo - 1, None, -1))
        if hi:
            after.append(_slice_axis(x, axis, -1, -1 - hi, -1))
    elif mode == "circular":          # x[-p:] | x | x[:q]
        if lo:
            before.append(_slice_axis(x, axis, -lo, None, None))
        if hi:
            after.append(_slice_axis(x, axis, 0, hi, None))
    else:                             # edge: x[0] p times | x | x[-1] q times
        before += [_slice_axis(x, axis, 0, 1, None)] * lo
        after += [_slice_axis(x, axis, -1, None, None)] * hi
    return before, after


def pad_pairs(x, pairs, mode="constant", value=0, exact=False):
    """Pad x by (before, after) per dim from the first (fewer pairs: the last dims), in mode
    constant (value; negative pads crop), reflect, symmetric, edge/replicate or circular (negative
    pads crop first). The non-constant modes concatenate slices of x with constant bounds, so a
    padded dim may be symbolic."""
    r = F._rank(x)
    pairs = [tuple(p) for p in pairs]
    if len(pairs) > r or (exact and len(pairs) != r):
        raise ValueError(f"pad: {len(pairs)} padding pairs for a rank-{r} input")
    pairs = [(0, 0)] * (r - len(pairs)) + pairs
    if mode == "constant":
        flat = tuple(v for lo, hi in reversed(pairs) for v in (lo, hi))
        return F.pad(x, flat, "constant", value)
    if mode not in _NP_MODES:
        raise ValueError(f"pad: mode must be constant, reflect, symmetric, edge, replicate or circular, got {mode!r}")
    mode = "edge" if mode == "replicate" else mode
    out = x
    for axis, (lo, hi) in enumerate(pairs):
        lo, hi = int(lo), int(hi)
        if lo == 0 and hi == 0:
            continue
        if lo < 0 or hi < 0:
            out = _slice_axis(out, axis, max(-lo, 0) or None, min(hi, 0) or None, None)
            lo, hi = max(lo, 0), max(hi, 0)
        n = F._shape(out)[axis]
        n = n.const_value() if isinstance(n, Expr) and n.is_const() else n
        limit = {"reflect": 1, "symmetric": 0, "circular": 0, "edge": -1}[mode]   # pads <= n - limit
        why = (f"pad ({mode}): pads ({lo}, {hi}) must be {'less than' if limit == 1 else 'at most'} the dim "
               f"of axis {axis}" if limit >= 0 else f"pad (edge): axis {axis} must not be empty")
        need = max(lo, hi) + limit if limit >= 0 else 1
        if isinstance(n, int):
            if n < need:
                raise ValueError(f"{why} ({n})")
        else:
            _check_at_run_time(S.compare(">=", n, need), why)
        before, after = _mode_parts(out, axis, lo, hi, mode)
        out = F.concat(before + [out] + after, axis)
    return out


def _pairs_of(paddings, what):
    if isinstance(paddings, Tensor):
        paddings = paddings.asnumpy().tolist()
    if not isinstance(paddings, (tuple, list)) or not all(
            isinstance(p, (tuple, list)) and len(p) == 2 and all(isinstance(v, (int, np.integer)) and
                                                                 not isinstance(v, bool) for v in p)
            for p in paddings):
        raise TypeError(f"{what}: paddings must be a tuple of (before, after) int pairs, got {paddings!r}")
    return [(int(a), int(b)) for a, b in paddings]


def pad_prim(x, paddings):
    """ops.Pad(paddings)(x): constant zeros, one (before, after) pair per dim of x."""
    pairs = _pairs_of(paddings, "Pad")
    if len(pairs) != F._rank(x):
        raise ValueError(f"Pad: {len(pairs)} padding pairs for a rank-{F._rank(x)} input")
    if any(v < 0 for p in pairs for v in p):
        raise ValueError(f"Pad: paddings must be >= 0, got {pairs}")
    return pad_pairs(x, pairs)


def mirror_pad(x, paddings, mode="REFLECT"):
    """MirrorPad(mode)(x, paddings): REFLECT or SYMMETRIC, a pair per dim."""
    m = str(mode).lower()
    if m not in ("reflect", "symmetric"):
        raise ValueError(f"MirrorPad: mode must be 'REFLECT' or 'SYMMETRIC', got {mode!r}")
    return pad_pairs(x, _pairs_of(paddings, "MirrorPad"), m)


def pad(input_x, padding, mode="constant", value=None):
    """ops.pad: pairs from the last dim backwards (left, right, top, bottom, ...); modes constant,
    reflect, replicate, circular."""
    if mode == "constant":
        return F.pad(input_x, padding, mode, value)
    flat = tuple(int(v) for v in (padding.asnumpy().tolist() if isinstance(padding, Tensor) else padding))
    if len(flat) % 2:
        raise ValueError(f"ops.pad: padding needs pairs, got {flat}")
    pairs = [(flat[2 * k], flat[2 * k + 1]) for k in range(len(flat) // 2)][::-1]
    return pad_pairs(input_x, pairs, mode)


# ---------------------------------------------------------------- slicing

def _int_tuple(v, what):
    if isinstance(v, Tensor):
        return tuple(int(a) for a in v.asnumpy().reshape(-1))
    if is_graph(v):
        raise TypeError(f"strided_slice: {what} must be a constant (a tuple or a Tensor of ints) inside construct")
    return tuple(v)


def strided_slice(input_x, begin, end, strides, begin_mask=0, end_mask=0, ellipsis_mask=0, new_axis_mask=0,
                  shrink_axis_mask=0):
    """ops.strided_slice: the StridedSlice primitive as a function (begin, end and strides may be
    int Tensors)."""
    from .primitives import StridedSlice

    return StridedSlice(begin_mask, end_mask, ellipsis_mask, new_axis_mask, shrink_axis_mask)(
        input_x, _int_tuple(begin, "begin"), _int_tuple(end, "end"), _int_tuple(strides, "strides"))


# ---------------------------------------------------------------- cumulative ops

def _axis(axis, x, what):
    if isinstance(axis, Tensor):
        axis = int(axis.asnumpy())
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"{what}: axis must be an int, got {axis!r}")
    r = F._rank(x)
    if not -max(r, 1) <= axis < max(r, 1):
        raise ValueError(f"{what}: axis {axis} is out of range for rank {r}")
    return int(axis)


def cummin(input, axis):  # noqa: A002
    """(running minimum along axis, int64 index of each: the last of equal values)."""
    return F.apply("CUMULATE", (input,), (_axis(axis, input, "cummin"), "min", False, False))


def cummax(input, axis):  # noqa: A002
    return F.apply("CUMULATE", (input,), (_axis(axis, input, "cummax"), "max", False, False))


def cumprod(input, dim, dtype=None, exclusive=False, reverse=False):  # noqa: A002
    x = F.cast(input, dtype) if dtype is not None else input
    return F.apply("CUMULATE", (x,), (_axis(dim, input, "cumprod"), "prod", bool(exclusive), bool(reverse)))


def cumprod_prim(x, axis, exclusive=False, reverse=False):
    return cumprod(x, axis, None, exclusive, reverse)


# ---------------------------------------------------------------- linear algebra

def matrix_solve(matrix, rhs, adjoint=False):
    """x with matrix @ x = rhs (adjoint: the matrix transposed), batched."""
    return F.apply("LINALG", (matrix, rhs), (2, "solve", (bool(adjoint),)))


def cholesky(input_x, upper=False):
    return F.apply("LINALG", (input_x,), (1, "cholesky", (bool(upper),)))


def cholesky_inverse(input_x, upper=False):
    """The inverse of A from its Cholesky factor (lower L: A = L L^T; upper U: A = U^T U)."""
    return F.apply("LINALG", (input_x,), (1, "cholesky_inverse", (bool(upper),)))


def lstsq(input, A):  # noqa: A002,N803
    """MindSpore's ops.lstsq(input [M, N], A [M, K]): the least-squares solution X [N, K] of input X = A."""
    return F.apply("LINALG", (input, A), (2, "lstsq", ()))


def pinv(x, *, atol=None, rtol=None, hermitian=False):
    if atol is not None or rtol is not None:
        raise NotImplementedError("ops.pinv: atol / rtol are not supported (numpy's default cutoff is used)")
    return F.apply("LINALG", (x,), (1, "pinv", (bool(hermitian),)))


def matrix_inverse(x, adjoint=False):
    out = F.apply("LINALG", (x,), (1, "inv", ()))
    r = F._rank(out)
    return F.transpose(out, tuple(range(r - 2)) + (r - 1, r - 2)) if adjoint else out


# ---------------------------------------------------------------- masks, ranges

def masked_select(input, mask):  # noqa: A002
    """The elements of input (broadcast with mask) where mask is True, as a 1-D tensor."""
    return F.apply("MASKED_SELECT", (input, mask))


def _scalar(v, what):
    if isinstance(v, Tensor):
        a = v.asnumpy()
        if a.size != 1:
            raise ValueError(f"{what} must be a scalar or a 0-d tensor, got shape {a.shape}")
        return a.reshape(()).item()
    return v


def linspace(start, end, steps):
    """steps values from start to end (both included), evenly spaced; start and end may be
    run-time 0-d tensors, steps is a constant int."""
    n = _scalar(steps, "linspace: steps")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n <= 0:
        raise ValueError(f"linspace: steps must be a positive int, got {steps!r}")
    n = int(n)
    k = F.arange(0, n, 1, dtype=dt.float32)
    lo = F.cast(start, dt.float32) if (isinstance(start, Tensor) or is_graph(start)) else float(start)
    hi = F.cast(end, dt.float32) if (isinstance(end, Tensor) or is_graph(end)) else float(end)
    if n == 1:
        return F.add(F.mul(k, 0.0), lo)
    step = F.div(F.sub(hi, lo), float(n - 1))
    out = F.add(F.mul(k, step), lo)
    last = F.cast(F.equal(k, float(n - 1)), dt.float32)        # the last is end itself, as numpy's
    return F.add(F.mul(out, F.sub(1.0, last)), F.mul(last, hi))


def range_(start, end, step):
    """ops.range / the Range primitive: [start, end) by step; the ends are constants (the length
    depends on them). Ints give int64 unless the tensors say otherwise; floats float32."""
    vals = [(_scalar(v, "range"), v) for v in (start, end, step)]
    if any(is_graph(v) for _, v in vals):
        raise TypeError("range: start, end and step must be constants inside construct (they set the length)")
    s, e, d = (v for v, _ in vals)
    if d == 0:
        raise ValueError("range: step must not be 0")
    dtypes = [v.dtype for _, v in vals if isinstance(v, Tensor)]
    dtype = dtypes[0] if dtypes else (dt.int64 if all(isinstance(v, int) for v in (s, e, d)) else dt.float32)
    return F.arange(s, e, d, dtype=dtype)
