"""MindSpore APIs issue 21 added beside functional.py's: printing, unique values, and composites
(padding modes, strided slices, linspace/range, ...). ``ops/registry.py`` gives each its primitive,
function and Tensor-method names.

``print_`` inside construct is one PRINT instruction at the call's place in the program (an effect
row: it runs when the Cell runs, in program order, at every tier); outside it prints at once.
"""

from __future__ import annotations

import numpy as np

from ..bytecode.symbolic import Expr
from ..errors import UnknownDim
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


def _const_dim(d, what):
    if isinstance(d, Expr):
        if d.is_const():
            return d.const_value()
        raise UnknownDim(f"{what}: the padded dim {d} must be known when the Cell compiles")
    return int(d)


def pad_pairs(x, pairs, mode="constant", value=0, exact=False):
    """Pad x by (before, after) per dim from the first (fewer pairs: the last dims), in mode
    constant (value; negative pads crop), reflect, symmetric, edge/replicate or circular. The
    non-constant modes gather x along each padded axis with the indices numpy's np.pad gives."""
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
    out = x
    for axis, (lo, hi) in enumerate(pairs):
        lo, hi = int(lo), int(hi)
        if lo == 0 and hi == 0:
            continue
        n = _const_dim(F._shape(out)[axis], f"pad ({mode})")
        if mode == "reflect" and (lo >= n or hi >= n):
            raise ValueError(f"pad (reflect): pads ({lo}, {hi}) must be less than the dim {n} of axis {axis}")
        if mode == "symmetric" and (lo > n or hi > n):
            raise ValueError(f"pad (symmetric): pads ({lo}, {hi}) must not exceed the dim {n} of axis {axis}")
        idx = np.arange(n)
        if lo < 0 or hi < 0:      # (circular pads may be negative: crop first)
            idx = idx[max(-lo, 0):n - max(-hi, 0)]
        idx = np.pad(idx, (max(lo, 0), max(hi, 0)), mode=_NP_MODES[mode])
        out = F.gather(out, Tensor(idx.astype(np.int32)), axis)
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
