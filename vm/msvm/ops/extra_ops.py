"""MindSpore APIs issue 21 added beside functional.py's: printing, unique values, and composites
(padding modes, strided slices, linspace/range, ...). ``ops/registry.py`` gives each its primitive,
function and Tensor-method names.

``print_`` inside construct is one PRINT instruction at the call's place in the program (an effect
row: it runs when the Cell runs, in program order, at every tier); outside it prints at once.
"""

from __future__ import annotations

import itertools

import numpy as np

from .. import dtype as dt
from ..bytecode import symbolic as S
from ..bytecode.symbolic import Expr
from ..errors import UnknownDim
from ..frontend.graph import GraphValue, current, is_graph, print_template, trace_print, tracing
from ..interp.kernels_more import print_parts
from ..tensor import Tensor, unwrap
from . import functional as F


def print_(*input_x, sep="\n", end="\n"):
    """MindSpore's ops.print_ / ops.Print: strings, numbers, tuples and tensors, one item a line."""
    parts, vals = print_template(input_x, sep, end)
    if tracing():
        trace_print(parts, vals)
        return None
    print_parts(parts, [np.asarray(unwrap(v)) if isinstance(v, Tensor) else v for v in vals])
    return None


def _tup(v):
    """A tuple result inside construct as a Python tuple of graph values (UNPACK_TUPLE into slots),
    so it can be indexed, unpacked or stacked by vmap like MindSpore's; other values unchanged."""
    from ..bytecode.types import TupleType

    if is_graph(v) and isinstance(v.type, TupleType):
        return current().unpack_graph_tuple(v, f"%tuple{next(_tuple_hints)}")
    return v


_tuple_hints = itertools.count()


def _apply_n(opname: str, inputs: tuple, operands: tuple):
    """F.apply for a row whose first operand counts its inputs: the interpreter's kernels get the
    operands without the count, so an eager call leaves it out too."""
    if tracing() and any(is_graph(x) for x in inputs):
        return F.apply(opname, inputs, operands)
    if tracing():
        from ..frontend.graph import trace_op

        return trace_op(opname, inputs, operands)
    from ..interp.kernels import KERNELS
    from ..tensor import wrap

    return wrap(KERNELS[opname](*(unwrap(x) for x in inputs), *operands[1:]))


def unique(input):  # noqa: A002
    """(the distinct values of input, flattened, in order of first appearance; each element's index
    among them, int32)."""
    return _tup(F.apply("UNIQUE", (input,), (None,)))


def unique_with_pad(x, pad_num):
    """UniqueWithPad: unique of a 1-D x, the values padded with pad_num to x's length."""
    if isinstance(pad_num, Tensor):
        pad_num = pad_num.asnumpy().reshape(-1)[0].item()
    if is_graph(pad_num) or isinstance(pad_num, GraphValue):
        raise TypeError("UniqueWithPad: pad_num must be a constant inside construct")
    if isinstance(pad_num, np.generic):
        pad_num = pad_num.item()
    return _tup(F.apply("UNIQUE", (x,), (pad_num,)))


# ---------------------------------------------------------------- padding modes

_NP_MODES = {"reflect": "reflect", "symmetric": "symmetric", "edge": "edge", "replicate": "edge",
             "circular": "wrap"}


def _slice_axis(x, axis, start, stop, step):
    spec = (("s", None, None, None),) * axis + (("s", start, stop, step),)
    return F.apply("SLICE", (x,), (spec,))


def _check_at_run_time(pred, message: str, exc: str = "ValueError") -> None:
    """Inside construct: a RAISE of exc(message) when pred is false when the Cell runs (as
    ``assert`` under a shape predicate compiles); eagerly pred is a constant."""
    c = pred.const_value()
    if c is not None:
        if not c:
            import builtins

            raise getattr(builtins, exc)(message)
        return
    b = current()
    b.keep_symbolic(pred, *b.branch_preds)
    ok = b.cb.new_label()
    b.emit("BRANCH_IF_SYMBOLIC", b.cb.const(S.pnot(pred)), ok)
    b.emit("RAISE", b.cb.const(exc), b.cb.const((message,)))
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


def pad(input_x, padding=None, mode="constant", value=None, *, paddings=None):
    """ops.pad: pairs from the last dim backwards (left, right, top, bottom, ...); modes constant,
    reflect, replicate, circular. MindSpore 1.x's form, ``paddings`` as (before, after) pairs from the
    first dim, P.Pad's (mindcv's volo and halonet: ``ops.pad(x, paddings=((0, 0), (0, 1)))``), is taken too."""
    if (padding is None) == (paddings is None):
        raise TypeError("ops.pad: give padding (or MindSpore 1.x's paddings), once")
    padding = paddings if padding is None else padding
    if isinstance(padding, (tuple, list)) and padding and all(isinstance(p, (tuple, list)) for p in padding):
        if not all(len(p) == 2 for p in padding) or len(padding) != F._rank(input_x):
            raise ValueError(f"ops.pad: paddings must be (before, after) pairs, one per dim of the rank-"
                             f"{F._rank(input_x)} input, got {padding!r}")
        padding = tuple(v for p in reversed(padding) for v in p)
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
    return _tup(F.apply("CUMULATE", (input,), (_axis(axis, input, "cummin"), "min", False, False)))


def cummax(input, axis):  # noqa: A002
    return _tup(F.apply("CUMULATE", (input,), (_axis(axis, input, "cummax"), "max", False, False)))


def cumprod(input, dim, dtype=None, exclusive=False, reverse=False):  # noqa: A002
    x = F.cast(input, dtype) if dtype is not None else input
    return _tup(F.apply("CUMULATE", (x,), (_axis(dim, input, "cumprod"), "prod", bool(exclusive), bool(reverse))))


def cumprod_prim(x, axis, exclusive=False, reverse=False):
    return cumprod(x, axis, None, exclusive, reverse)


# ---------------------------------------------------------------- linear algebra

def matrix_solve(matrix, rhs, adjoint=False):
    """x with matrix @ x = rhs (adjoint: the matrix transposed), batched."""
    return _apply_n("LINALG", (matrix, rhs), (2, "solve", (bool(adjoint),)))


def cholesky(input_x, upper=False):
    return _apply_n("LINALG", (input_x,), (1, "cholesky", (bool(upper),)))


def cholesky_inverse(input_x, upper=False):
    """The inverse of A from its Cholesky factor (lower L: A = L L^T; upper U: A = U^T U)."""
    return _apply_n("LINALG", (input_x,), (1, "cholesky_inverse", (bool(upper),)))


def lstsq(input, A):  # noqa: A002,N803
    """MindSpore's ops.lstsq(input [M, N], A [M, K]): the least-squares solution X [N, K] of input X = A."""
    return _apply_n("LINALG", (input, A), (2, "lstsq", ()))


def pinv(x, *, atol=None, rtol=None, hermitian=False):
    if atol is not None or rtol is not None:
        raise NotImplementedError("ops.pinv: atol / rtol are not supported (numpy's default cutoff is used)")
    return _apply_n("LINALG", (x,), (1, "pinv", (bool(hermitian),)))


def matrix_inverse(x, adjoint=False):
    out = _apply_n("LINALG", (x,), (1, "inv", ()))
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


# ---------------------------------------------------------------- boxes, ranking, sequences (composites)

def _col(x, k):
    """x[..., k]."""
    return F.apply("SLICE", (x,), ((("e",), ("i", k)),))


def iou(anchor_boxes, gt_boxes, mode="iou"):
    """[M, N] overlaps of gt_boxes [M, 4] with anchor_boxes [N, 4] (x0, y0, x1, y1; MindSpore's +1
    pixel widths): iou = overlap / union, iof = overlap / the ground truth's area."""
    if mode not in ("iou", "iof"):
        raise KeyError(f"IOU: mode must be 'iou' or 'iof', got {mode!r}")
    a = [F.expand_dims(_col(anchor_boxes, k), 0) for k in range(4)]      # [1, N]
    g = [F.expand_dims(_col(gt_boxes, k), 1) for k in range(4)]          # [M, 1]
    w = F.maximum(F.add(F.sub(F.minimum(a[2], g[2]), F.maximum(a[0], g[0])), 1.0), 0.0)
    h = F.maximum(F.add(F.sub(F.minimum(a[3], g[3]), F.maximum(a[1], g[1])), 1.0), 0.0)
    inter = F.mul(w, h)
    area_a = F.mul(F.add(F.sub(a[2], a[0]), 1.0), F.add(F.sub(a[3], a[1]), 1.0))
    area_g = F.mul(F.add(F.sub(g[2], g[0]), 1.0), F.add(F.sub(g[3], g[1]), 1.0))
    den = F.sub(F.add(area_a, area_g), inter) if mode == "iou" else area_g
    return F.cast(F.div(inter, den), anchor_boxes.dtype)


def check_valid(bboxes, img_metas):
    """bool [N]: each box (x0, y0, x1, y1) inside the image of img_metas (height, width, ratio)."""
    h = F.mul(_col(img_metas, 0), _col(img_metas, 2))
    w = F.mul(_col(img_metas, 1), _col(img_metas, 2))
    x0, y0, x1, y1 = (_col(bboxes, k) for k in range(4))
    ok = F.logical_and(F.greater_equal(x0, 0), F.greater_equal(y0, 0))
    ok = F.logical_and(ok, F.less_equal(x1, F.sub(w, 1)))
    return F.logical_and(ok, F.less_equal(y1, F.sub(h, 1)))


def _centers(b):
    x0, y0, x1, y1 = (_col(b, k) for k in range(4))
    pw, ph = F.add(F.sub(x1, x0), 1.0), F.add(F.sub(y1, y0), 1.0)
    return F.mul(F.add(x0, x1), 0.5), F.mul(F.add(y0, y1), 0.5), pw, ph


def bounding_box_encode(anchor_box, groundtruth_box, means=(0.0, 0.0, 0.0, 0.0), stds=(1.0, 1.0, 1.0, 1.0)):
    """The deltas (dx, dy, dw, dh) from anchors to ground-truth boxes, normalized by means and stds."""
    px, py, pw, ph = _centers(anchor_box)
    gx, gy, gw, gh = _centers(groundtruth_box)
    d = (F.div(F.sub(gx, px), pw), F.div(F.sub(gy, py), ph), F.log(F.div(gw, pw)), F.log(F.div(gh, ph)))
    d = [F.div(F.sub(v, float(m)), float(s)) for v, m, s in zip(d, means, stds)]
    return F.cast(F.stack(d, -1), anchor_box.dtype)


def bounding_box_decode(anchor_box, deltas, max_shape, means=(0.0, 0.0, 0.0, 0.0), stds=(1.0, 1.0, 1.0, 1.0),
                        wh_ratio_clip=0.016):
    """Boxes from anchors and deltas (the inverse of encode), clipped to max_shape (height, width)."""
    dx, dy, dw, dh = (F.add(F.mul(_col(deltas, k), float(s)), float(m)) for k, m, s in zip(range(4), means, stds))
    r = abs(float(np.log(wh_ratio_clip)))
    dw, dh = F.clip(dw, -r, r), F.clip(dh, -r, r)
    px, py, pw, ph = _centers(anchor_box)
    gw, gh = F.mul(pw, F.exp(dw)), F.mul(ph, F.exp(dh))
    gx, gy = F.add(px, F.mul(pw, dx)), F.add(py, F.mul(ph, dy))
    x1 = F.add(F.sub(gx, F.mul(gw, 0.5)), 0.5)
    y1 = F.add(F.sub(gy, F.mul(gh, 0.5)), 0.5)
    x2 = F.sub(F.add(gx, F.mul(gw, 0.5)), 0.5)
    y2 = F.sub(F.add(gy, F.mul(gh, 0.5)), 0.5)
    hmax, wmax = float(max_shape[0]) - 1, float(max_shape[1]) - 1
    out = [F.clip(x1, 0.0, wmax), F.clip(y1, 0.0, hmax), F.clip(x2, 0.0, wmax), F.clip(y2, 0.0, hmax)]
    return F.cast(F.stack(out, -1), anchor_box.dtype)


def in_top_k(predictions, targets, k):
    """bool [N]: whether targets[i] is among the k largest predictions[i] (ties at the boundary
    count as in; a non-finite target score or an index outside the classes is not)."""
    if F._rank(predictions) != 2 or F._rank(targets) != 1:
        raise ValueError(f"InTopK: predictions must be 2-D and targets 1-D, got ranks {F._rank(predictions)} and "
                         f"{F._rank(targets)}")
    t = F.expand_dims(F.cast(targets, dt.int32), 1)
    n_cls = F._shape(predictions)[1]
    valid = F.logical_and(F.greater_equal(t, 0), F.less(t, n_cls))
    score = F.gather_elements(predictions, 1, F.where(valid, t, 0))
    above = F.sum(F.cast(F.greater(predictions, score), dt.int32), 1, True)
    ok = F.logical_and(F.logical_and(F.less(above, int(k)), valid), F.isfinite(score))
    return F.squeeze(ok, 1)


def searchsorted(sorted_sequence, values, *, out_int32=False, right=False, side=None, sorter=None, dtype=None):
    """For each value, the index where it would be inserted into the sorted last dim of
    sorted_sequence (right: after equal values)."""
    if sorter is not None:
        raise NotImplementedError("searchsorted: sorter is not supported")
    right = right or side == "right"
    d = dtype if dtype is not None else (dt.int32 if out_int32 else dt.int64)
    seq = F.expand_dims(sorted_sequence, -2)                     # [..., 1, M]
    v = F.expand_dims(values, -1)                                # [..., K, 1]
    before = F.less_equal(seq, v) if right else F.less(seq, v)
    return F.cast(F.sum(F.cast(before, dt.int32), -1), dt.as_dtype(d))


def searchsorted_prim(sorted_sequence, values, dtype=dt.int64, right=False):
    return searchsorted(sorted_sequence, values, right=right, dtype=dtype)


def reverse_sequence(x, seq_lengths, seq_dim, batch_dim=0):
    """x with the first seq_lengths[b] elements along seq_dim reversed, for each b along batch_dim."""
    r = F._rank(x)
    seq_dim, batch_dim = seq_dim % r, batch_dim % r
    if seq_dim == batch_dim:
        raise ValueError(f"ReverseSequence: seq_dim and batch_dim must differ, got {seq_dim}")
    shape = F._shape(x)
    pos = F.arange(0, shape[seq_dim], 1, dtype=dt.int64)
    pos = F.reshape(pos, tuple(-1 if i == seq_dim else 1 for i in range(r)))
    lens = F.reshape(F.cast(seq_lengths, dt.int64), tuple(-1 if i == batch_dim else 1 for i in range(r)))
    idx = F.where(F.less(pos, lens), F.sub(F.sub(lens, 1), pos), pos)
    return F.gather_elements(x, seq_dim, F.broadcast_to(idx, shape))


def expand(input_x, size):
    """input_x broadcast to size (-1 keeps a dim)."""
    if isinstance(size, Tensor):
        size = tuple(int(v) for v in size.asnumpy().reshape(-1))
    return F.broadcast_to(input_x, tuple(size))


def embedding_lookup(input_params, input_indices, offset):
    """Rows input_indices - offset of input_params; an index outside the rows gives zeros."""
    if isinstance(offset, Tensor):
        offset = int(offset.asnumpy())
    idx = F.sub(F.cast(input_indices, dt.int32), offset if isinstance(offset, Expr) else int(offset))
    n = F._shape(input_params)[0]
    ok = F.logical_and(F.greater_equal(idx, 0), F.less(idx, n))
    rows = F.gather(input_params, F.where(ok, idx, 0), 0)
    mask = F.reshape(ok, tuple(F._shape(idx)) + (1,) * (F._rank(input_params) - 1))
    return F.where(mask, rows, F.zeros((), input_params.dtype))


def fill_diagonal(input_x, fill_value, wrap=False):
    """input_x with its main diagonal set to fill_value (numpy's fill_diagonal: every dim equal
    for rank > 2; for a tall matrix wrap continues below the first square)."""
    shape = F._shape(input_x)
    r = len(shape)
    if r < 2:
        raise ValueError(f"FillDiagonal: input_x must have rank >= 2, got {r}")
    if r > 2:
        if any(isinstance(d, Expr) and not d.is_const() for d in shape):
            raise UnknownDim(f"FillDiagonal: the dims of a rank-{r} input must be known when the Cell compiles")
        dims = set(int(d) if not isinstance(d, Expr) else d.const_value() for d in shape)
        if len(dims) != 1:
            raise ValueError(f"FillDiagonal: every dim must be equal for rank {r}, got {shape}")
        n = shape[0]
        pos = F.reshape(F.arange(0, n, 1, dtype=dt.int64), (-1,) + (1,) * (r - 1))
        hit = None
        for k in range(1, r):
            other = F.reshape(F.arange(0, n, 1, dtype=dt.int64), (1,) * k + (-1,) + (1,) * (r - 1 - k))
            e = F.equal(pos, other)
            hit = e if hit is None else F.logical_and(hit, e)
    else:
        rows, cols = shape
        i = F.reshape(F.arange(0, rows, 1, dtype=dt.int64), (-1, 1))
        j = F.reshape(F.arange(0, cols, 1, dtype=dt.int64), (1, -1))
        flat = F.add(F.mul(i, cols), j)
        hit = F.equal(F.remainder(flat, cols + 1), 0)
        if not wrap:
            hit = F.logical_and(hit, F.less(i, cols))
    return F.where(hit, F.cast(F.scalar_to_tensor(float(fill_value), input_x.dtype), input_x.dtype), input_x)


def cross(input, other, dim=None):  # noqa: A002
    """The 3-vector cross product along dim (None: the first dim of size 3)."""
    shape = F._shape(input)
    if any(isinstance(d, Expr) and not d.is_const() for d in (shape if dim is None else (shape[dim],))):
        raise UnknownDim(f"cross: the size of the crossed dim must be known when the Cell compiles, got {shape}")
    shape = tuple(d.const_value() if isinstance(d, Expr) else d for d in shape)
    if dim is None:
        dim = next((i for i, d in enumerate(shape) if isinstance(d, int) and d == 3), None)
        if dim is None:
            raise ValueError(f"cross: no dim of size 3 in {shape}")
    dim %= len(shape)
    if not (isinstance(shape[dim], int) and shape[dim] == 3):
        raise ValueError(f"cross: dim {dim} must have size 3, got {shape}")

    def c(x, k):
        spec = (("s", None, None, None),) * dim + (("s", k, k + 1, None),)
        return F.apply("SLICE", (x,), (spec,))
    a, b = [c(input, k) for k in range(3)], [c(other, k) for k in range(3)]
    parts = [F.sub(F.mul(a[1], b[2]), F.mul(a[2], b[1])), F.sub(F.mul(a[2], b[0]), F.mul(a[0], b[2])),
             F.sub(F.mul(a[0], b[1]), F.mul(a[1], b[0]))]
    return F.concat(parts, dim)


def addmv(input, mat, vec, *, beta=1, alpha=1):  # noqa: A002
    """beta * input + alpha * (mat @ vec)."""
    return F.add(F.mul(input, beta), F.mul(F.matmul(mat, vec), alpha))


def addr(x, vec1, vec2, *, beta=1, alpha=1):
    """beta * x + alpha * outer(vec1, vec2)."""
    outer = F.mul(F.expand_dims(vec1, 1), F.expand_dims(vec2, 0))
    return F.add(F.mul(x, beta), F.mul(outer, alpha))


def batch_dot(x1, x2, axes=None):
    """MindSpore's batch_dot for [B, ...] pairs: contract axes (default: x1's last with x2's
    second-to-last, or last for 2-D x2) per batch row."""
    r1, r2 = F._rank(x1), F._rank(x2)
    if axes is None:
        axes = (r1 - 1, r2 - 1 if r2 == 2 else r2 - 2)
    if isinstance(axes, int):
        axes = (axes, axes) if axes >= 0 else (r1 + axes, r2 + axes)
    a1, a2 = axes[0] % r1, axes[1] % r2
    if a1 == 0 or a2 == 0:
        raise ValueError("batch_dot: the batch axis 0 cannot be contracted")
    p1 = [0] + [i for i in range(1, r1) if i != a1] + [a1]
    p2 = [0, a2] + [i for i in range(1, r2) if i != a2]
    t1, t2 = F.transpose(x1, tuple(p1)), F.transpose(x2, tuple(p2))
    s1, s2 = F._shape(t1), F._shape(t2)
    m = F.reshape(t1, (s1[0], -1, s1[-1]))
    n = F.reshape(t2, (s2[0], s2[1], -1))
    out = F.bmm(m, n)
    rest = tuple(s1[1:-1]) + tuple(s2[2:])
    return F.reshape(out, (s1[0],) + (rest or (1,)))


def pdist(input, p=2.0):  # noqa: A002
    """The p-norm distances between each pair of rows of input [..., N, M], the upper triangle
    of cdist flattened: [..., N*(N-1)/2]."""
    shape = F._shape(input)
    n = shape[-2]
    if isinstance(n, Expr):
        if not n.is_const():
            raise UnknownDim(f"pdist: the number of rows {n} must be known when the Cell compiles")
        n = n.const_value()
    d = F.cdist(input, input, p)
    i, j = np.triu_indices(int(n), 1)
    flat = F.reshape(d, tuple(shape[:-2]) + (int(n) * int(n),))
    return F.gather(flat, Tensor((i * int(n) + j).astype(np.int32)), len(shape) - 2)


def data_format_dim_map(x, src_format="NHWC", dst_format="NCHW"):
    """Each dim index of x (in [-4, 4)) in src_format mapped to its index in dst_format."""
    if sorted(src_format) != sorted(dst_format) or len(src_format) != 4:
        raise ValueError(f"DataFormatDimMap: {src_format!r} and {dst_format!r} must be permutations of 4 letters")
    table = Tensor(np.array([src_format.index(c) for c in dst_format], np.int32))   # (TF's DataFormatDimMap)
    idx = F.remainder(F.add(F.cast(x, dt.int32), 4), 4)
    return F.cast(F.gather(table, idx, 0), x.dtype)


def nll_loss(logits, labels, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    """Negative log likelihood of log-probabilities logits [N, C] (or [N, C, ...]) at int labels."""
    c_axis = 1 if F._rank(logits) > 1 else 0
    lab = F.expand_dims(F.cast(labels, dt.int32), c_axis)
    keep = F.not_equal(lab, ignore_index)
    picked = F.neg(F.gather_elements(logits, c_axis, F.where(keep, lab, 0)))
    w = F.ones_like(picked) if weight is None else F.gather(weight, F.where(keep, lab, 0), 0)
    w = F.where(keep, w, F.zeros((), picked.dtype))
    loss = F.squeeze(F.mul(picked, w), c_axis)
    wsum = F.sum(w)
    if label_smoothing:
        raise NotImplementedError("nll_loss: label_smoothing is not supported")
    if reduction == "none":
        return loss
    if reduction == "sum":
        return F.sum(loss)
    if reduction == "mean":
        return F.div(F.sum(loss), wsum)
    raise ValueError(f"nll_loss: reduction must be 'none', 'mean' or 'sum', got {reduction!r}")


def nll_loss_prim(logits, labels, weight, reduction="mean", ignore_index=-100):
    """The NLLLoss primitive: (loss, total_weight)."""
    c_axis = 1 if F._rank(logits) > 1 else 0
    lab = F.expand_dims(F.cast(labels, dt.int32), c_axis)
    keep = F.not_equal(lab, ignore_index)
    w = F.where(keep, F.gather(weight, F.where(keep, lab, 0), 0), F.zeros((), weight.dtype))
    total = F.sum(w)
    return nll_loss(logits, labels, weight, ignore_index, reduction), total


def cross_entropy(input, target, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):  # noqa: A002
    """Cross entropy of logits input [N, C, ...] against int class indices or class probabilities."""
    c_axis = 1 if F._rank(input) > 1 else 0
    logp = F.log_softmax(input, c_axis)
    if target.dtype.is_float:                       # probabilities
        if label_smoothing:
            n_cls = F._shape(input)[c_axis]
            target = F.add(F.mul(target, 1.0 - label_smoothing), label_smoothing / n_cls)
        t = target if weight is None else F.mul(target, F.reshape(weight, (-1,) + (1,) * (F._rank(input) - 2)))
        loss = F.neg(F.sum(F.mul(logp, t), c_axis))
        if reduction == "none":
            return loss
        if reduction == "sum":
            return F.sum(loss)
        n = 1
        for d in F._shape(loss):
            n = n * d
        return F.div(F.sum(loss), n)
    if label_smoothing:
        raise NotImplementedError("cross_entropy: label_smoothing with class indices is not supported")
    return nll_loss(logp, target, weight, ignore_index, reduction)


def softmax_cross_entropy_with_logits(logits, labels):
    """The SoftmaxCrossEntropyWithLogits primitive: (loss [N], its gradient softmax - labels)."""
    logp = F.log_softmax(logits, -1)
    loss = F.neg(F.sum(F.mul(logp, labels), -1))
    return loss, F.sub(F.exp(logp), labels)


# ---------------------------------------------------------------- resizing

def crop_and_resize(image, boxes, box_index, crop_size, method="bilinear", extrapolation_value=0.0):
    if isinstance(crop_size, Tensor):
        crop_size = tuple(int(v) for v in crop_size.asnumpy())
    if not (isinstance(crop_size, (tuple, list)) and len(crop_size) == 2 and
            all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in crop_size)):
        raise ValueError(f"CropAndResize: crop_size must be a pair of positive ints, got {crop_size!r}")
    if method == "bilinear_v2":
        raise NotImplementedError("CropAndResize: method 'bilinear_v2' is not supported (bilinear and nearest are)")
    return F.apply("CROP_AND_RESIZE", (image, boxes, box_index),
                   (tuple(crop_size), method, float(extrapolation_value)))


def crop_and_resize_prim(image, boxes, box_index, crop_size, method="bilinear", extrapolation_value=0.0):
    return crop_and_resize(image, boxes, box_index, crop_size, method, extrapolation_value)


def resize_linear_1d(x, size, coordinate_transformation_mode="align_corners"):
    """[N, C, W] resized linearly to [N, C, size] (align_corners or half_pixel coordinates), as a
    gather of the two neighbours and a lerp with constant weights (W must be known)."""
    if isinstance(size, Tensor):
        size = size.asnumpy().reshape(-1).tolist()
    n = int(size[0] if isinstance(size, (tuple, list)) else size)
    if F._rank(x) != 3:
        raise ValueError(f"ResizeLinear1D: x must be 3-D [N, C, W], got rank {F._rank(x)}")
    w = F._shape(x)[2]
    if isinstance(w, Expr):
        if not w.is_const():
            raise UnknownDim(f"ResizeLinear1D: the width {w} must be known when the Cell compiles")
        w = w.const_value()
    i = np.arange(n, dtype=np.float64)
    if coordinate_transformation_mode == "align_corners":
        src = i * (w - 1) / (n - 1) if n > 1 else np.zeros(n)
    elif coordinate_transformation_mode == "half_pixel":
        src = np.clip((i + 0.5) * w / n - 0.5, 0, w - 1)
    else:
        raise ValueError(f"ResizeLinear1D: coordinate_transformation_mode must be align_corners or half_pixel, got "
                         f"{coordinate_transformation_mode!r}")
    lo = np.floor(src).astype(np.int32)
    hi = np.minimum(lo + 1, w - 1).astype(np.int32)
    frac = Tensor((src - lo).astype(x.dtype.np if x.dtype.is_float else np.float32))
    a, b = F.gather(x, Tensor(lo), 2), F.gather(x, Tensor(hi), 2)
    return F.cast(F.add(a, F.mul(F.sub(b, a), frac)), x.dtype)


# ---------------------------------------------------------------- 1-D / 3-D pools, adaptive max pools

def _ntuple(v, n, what):
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return (int(v),) * n
    v = tuple(int(a) for a in v)
    if len(v) != n:
        raise ValueError(f"{what}: needs {n} values, got {v}")
    return v


def _pool_pads(pad_mode, padding, n, what):
    mode = str(pad_mode).lower()
    if mode == "same":
        return ("same",)
    if mode not in ("valid", "pad"):
        raise ValueError(f"{what}: pad_mode must be 'valid', 'same' or 'pad', got {pad_mode!r}")
    if mode == "valid":
        return (0,) * (2 * n)
    p = _ntuple(padding, n, what) if not (isinstance(padding, (tuple, list)) and len(padding) == 2 * n) \
        else tuple(int(a) for a in padding)
    return tuple(v for a in p for v in (a, a)) if len(p) == n else p


def pool_nd(x, mode, kernel_size, stride, pad_mode="valid", padding=0, ceil_mode=False, count_include_pad=True,
            n=None, what="pool"):
    n = n or (F._rank(x) - 2)
    k = _ntuple(kernel_size, n, what)
    s = k if stride is None else _ntuple(stride, n, what)
    window = (mode, k, s, _pool_pads(pad_mode, padding, n, what), bool(count_include_pad), bool(ceil_mode))
    return _tup(F.apply("POOL_ND", (x,), (window,)))


def avg_pool1d(input_x, kernel_size=1, stride=1, padding=0, ceil_mode=False, count_include_pad=True):
    return pool_nd(input_x, "avg", kernel_size, stride, "pad", padding, ceil_mode, count_include_pad, 1, "avg_pool1d")


def avg_pool3d(input_x, kernel_size=1, stride=1, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    if divisor_override:
        raise NotImplementedError("avg_pool3d: divisor_override is not supported")
    return pool_nd(input_x, "avg", kernel_size, stride, "pad", padding, ceil_mode, count_include_pad, 3, "avg_pool3d")


def max_pool3d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    if _ntuple(dilation, 3, "max_pool3d") != (1, 1, 1) or return_indices:
        raise NotImplementedError("max_pool3d: dilation and return_indices are not supported")
    return pool_nd(x, "max", kernel_size, stride, "pad", padding, ceil_mode, True, 3, "max_pool3d")


def max_pool3d_prim(x, kernel_size=1, strides=1, pad_mode="VALID", pad_list=0, ceil_mode=None, data_format="NCDHW"):
    if data_format != "NCDHW":
        raise ValueError(f"MaxPool3D: data_format must be 'NCDHW', got {data_format!r}")
    return pool_nd(x, "max", kernel_size, strides, pad_mode, pad_list, bool(ceil_mode), True, 3, "MaxPool3D")


def avg_pool3d_prim(x, kernel_size=1, strides=1, pad_mode="valid", pad=0, ceil_mode=False, count_include_pad=True,
                    divisor_override=0, data_format="NCDHW"):
    if divisor_override:
        raise NotImplementedError("AvgPool3D: divisor_override is not supported")
    return pool_nd(x, "avg", kernel_size, strides, pad_mode, pad, ceil_mode, count_include_pad, 3, "AvgPool3D")


def _bins(output_size, n):
    if output_size is None or isinstance(output_size, (int, np.integer)):
        return (None if output_size is None else int(output_size),) * n
    return tuple(None if v is None else int(v) for v in output_size)


def adaptive_max_pool1d(input, output_size):  # noqa: A002
    return _tup(F.apply("ADAPTIVE_MAX_POOL", (input,), (_bins(output_size, 1), False)))


def adaptive_max_pool2d(input, output_size, return_indices=False):  # noqa: A002
    return _tup(F.apply("ADAPTIVE_MAX_POOL", (input,), (_bins(output_size, 2), bool(return_indices))))


def adaptive_max_pool3d(input, output_size, return_indices=False):  # noqa: A002
    return _tup(F.apply("ADAPTIVE_MAX_POOL", (input,), (_bins(output_size, 3), bool(return_indices))))


# ---------------------------------------------------------------- small math and layers

def nextafter(input, other):  # noqa: A002
    return F.apply("BROADCAST_NEXTAFTER", (input, other))


def population_count(input_x):
    return F.apply("POPULATION_COUNT", (input_x,))


def lrn(x, depth_radius=5, bias=1.0, alpha=1.0, beta=0.5, norm_region="ACROSS_CHANNELS"):
    """Local response normalization across channels of [N, C, H, W]: x / (bias + alpha * the sum of
    squares over channels c-r..c+r) ** beta (a cumulative sum along C, differenced)."""
    if norm_region != "ACROSS_CHANNELS":
        raise ValueError(f"LRN: norm_region must be 'ACROSS_CHANNELS', got {norm_region!r}")
    if F._rank(x) != 4:
        raise ValueError(f"LRN: x must be 4-D [N, C, H, W], got rank {F._rank(x)}")
    r = int(depth_radius)
    xf = F.cast(x, dt.float32) if x.dtype != dt.float64 else x
    sq = pad_pairs(F.mul(xf, xf), ((0, 0), (r + 1, r), (0, 0), (0, 0)))
    cs = F.cumsum(sq, 1)
    win = F.sub(_slice_axis(cs, 1, 2 * r + 1, None, None), _slice_axis(cs, 1, None, -(2 * r + 1), None))
    return F.cast(F.div(xf, F.pow(F.add(F.mul(win, float(alpha)), float(bias)), float(beta))), x.dtype)


def bidense(input1, input2, weight, bias=None):
    """y[..., o] = sum_ij input1[..., i] weight[o, i, j] input2[..., j] (+ bias[o])."""
    out_c, in1, in2 = F._shape(weight)
    lead = tuple(F._shape(input1)[:-1])
    a = F.reshape(input1, (-1, in1))
    b = F.reshape(input2, (-1, in2))
    w = F.reshape(F.transpose(weight, (1, 0, 2)), (in1, -1))              # [in1, out * in2]
    t = F.reshape(F.matmul(a, w), (-1, out_c, in2))
    y = F.sum(F.mul(t, F.expand_dims(b, 1)), -1)
    if bias is not None:
        y = F.add(y, bias)
    return F.reshape(y, lead + (out_c,))


def tensor_shape(x):
    """TensorShape: the shape as a 1-D int64 tensor."""
    return F.tuple_to_array(F._shape(x)) if F._shape(x) else F.zeros((0,), dt.int64)


def mutable(input_data, dynamic_len=False):
    """ms.mutable: MindSpore's mark that a value changes between calls; msvm already treats int
    and bool arguments as run-time values and tensors' dims as symbols, so it returns the value."""
    return input_data


def max_pool_with_argmax(x, kernel_size=1, strides=1, pad_mode="valid", data_format="NCHW"):
    """MaxPoolWithArgmax: (the 2-D max pool, int32 index of each max flattened over C, H, W: TF's)."""
    if data_format != "NCHW":
        raise ValueError(f"MaxPoolWithArgmax: data_format must be 'NCHW', got {data_format!r}")
    return pool_nd(x, "argmax", kernel_size, strides, pad_mode, 0, False, True, 2, "MaxPoolWithArgmax")


# ---------------------------------------------------------------- diagonals

def _as_tensor(v, dtype):
    if isinstance(v, Tensor) or is_graph(v):
        return v
    return Tensor(np.asarray(v, dtype=dtype.np))


def _known_k(k, what):
    """k's length decides the output's rank: a run-time k of symbolic length recompiles per shape."""
    if is_graph(k) and len(k.shape) == 1 and isinstance(k.shape[0], Expr) and not k.shape[0].is_const():
        raise UnknownDim(f"{what}: the number of values in k ({k.shape[0]}) sets the output's rank")
    return k


def matrix_diag(x, k=0, num_rows=-1, num_cols=-1, padding_value=0, align="RIGHT_LEFT"):
    """TF's MatrixDiagV3: matrices whose diagonals k (one, or a band k[0]..k[1]) are x."""
    ins = (x, _known_k(_as_tensor(k, dt.int32), "MatrixDiagV3"), _as_tensor(num_rows, dt.int32),
           _as_tensor(num_cols, dt.int32), _as_tensor(padding_value, x.dtype))
    return _apply_n("MATRIX_DIAG", ins, (5, "diag", align))


def matrix_diag_part(x, k=0, padding_value=0, align="RIGHT_LEFT"):
    """TF's MatrixDiagPartV3: the diagonals k (one, or a band) of x [..., M, N]."""
    k = _known_k(_as_tensor(k, dt.int32), "MatrixDiagPartV3")
    return _apply_n("MATRIX_DIAG", (x, k, _as_tensor(padding_value, x.dtype)), (3, "part", align))


# ---------------------------------------------------------------- unfold / fold (im2col, col2im)

def _pair2(v, what):
    return _ntuple(v, 2, what)


def unfold(input, kernel_size, dilation=1, padding=0, stride=1):  # noqa: A002
    """im2col: [N, C, H, W] -> [N, C*kh*kw, L], each column one sliding window (row-major over
    the windows), the window's elements channel-major, as PyTorch / MindSpore."""
    kh, kw = _pair2(kernel_size, "unfold: kernel_size")
    dh, dw = _pair2(dilation, "unfold: dilation")
    ph, pw = _pair2(padding, "unfold: padding")
    sh, sw = _pair2(stride, "unfold: stride")
    if F._rank(input) != 4:
        raise ValueError(f"unfold: input must be 4-D [N, C, H, W], got rank {F._rank(input)}")
    x = pad_pairs(input, ((0, 0), (0, 0), (ph, ph), (pw, pw))) if ph or pw else input
    n, c, h, w = F._shape(x)
    oh = (h - (dh * (kh - 1) + 1)) // sh + 1
    ow = (w - (dw * (kw - 1) + 1)) // sw + 1
    cols = []
    for i in range(kh):
        for j in range(kw):
            spec = (("s", None, None, None), ("s", None, None, None),
                    ("s", i * dh, i * dh + sh * (oh - 1) + 1, sh), ("s", j * dw, j * dw + sw * (ow - 1) + 1, sw))
            cols.append(F.apply("SLICE", (x,), (spec,)))
    y = F.stack(cols, 2)                                        # [N, C, kh*kw, oh, ow]
    return F.reshape(y, (n, c * kh * kw, oh * ow))


def fold(input, output_size, kernel_size, dilation=1, padding=0, stride=1):  # noqa: A002
    """col2im, unfold's adjoint: [N, C*kh*kw, L] -> [N, C, H, W], overlapping windows summed."""
    if isinstance(output_size, Tensor):
        output_size = tuple(int(v) for v in output_size.asnumpy().reshape(-1))
    oh_out, ow_out = _pair2(output_size, "fold: output_size")
    if oh_out < 0 or ow_out < 0:
        raise ValueError(f"fold: the value of 'output_size' must not be negative, got {(oh_out, ow_out)}")
    kh, kw = _pair2(kernel_size, "fold: kernel_size")
    dh, dw = _pair2(dilation, "fold: dilation")
    ph, pw = _pair2(padding, "fold: padding")
    sh, sw = _pair2(stride, "fold: stride")
    hp, wp = oh_out + 2 * ph, ow_out + 2 * pw
    oh, ow = (hp - (dh * (kh - 1) + 1)) // sh + 1, (wp - (dw * (kw - 1) + 1)) // sw + 1
    n, ckk, length = F._shape(input)
    if isinstance(length, int) and length != oh * ow:
        raise ValueError(f"fold: input has {length} windows, output_size {output_size} gives {oh * ow}")
    c = ckk // (kh * kw)
    x = F.reshape(input, (n, c, kh * kw, oh, ow))
    total = None
    for i in range(kh):
        for j in range(kw):
            part = F.apply("SLICE", (x,), ((("s", None, None, None),) * 2 + (("i", i * kw + j),),))  # [N, C, oh, ow]
            part = _spread(part, 2, sh, i * dh, hp)
            part = _spread(part, 3, sw, j * dw, wp)
            total = part if total is None else F.add(total, part)
    return _slice_axis(_slice_axis(total, 2, ph, ph + oh_out, None), 3, pw, pw + ow_out, None)


def _spread(x, axis, step, offset, size):
    """x's entries along axis placed every step-th position from offset in a zero tensor of size."""
    shape = list(F._shape(x))
    m = shape[axis]
    if step > 1:
        z = F.zeros(tuple(shape[:axis + 1]) + (step - 1,) + tuple(shape[axis + 1:]), x.dtype)
        y = F.concat([F.expand_dims(x, axis + 1), z], axis + 1)
        shape[axis] = m * step
        y = F.reshape(y, tuple(shape))
        y = _slice_axis(y, axis, 0, step * (m - 1) + 1, None)
    else:
        y = x
    used = step * (m - 1) + 1
    pairs = [(0, 0)] * len(shape)
    pairs[axis] = (offset, size - offset - used)
    return pad_pairs(y, pairs)


def check_ps_roi_pooling(values):
    for name in ("spatial_scale", "group_size", "output_dim"):
        v = values[name]
        ok_type = (isinstance(v, (int, float)) if name == "spatial_scale" else isinstance(v, int)) \
            and not isinstance(v, bool)
        if not ok_type:
            raise TypeError(f"PSROIPooling: {name} must be {'a number' if name == 'spatial_scale' else 'an int'}, "
                            f"got {type(v).__name__}")
        if v <= 0:
            raise ValueError(f"PSROIPooling: {name} must be positive, got {v}")


def ps_roi_pooling(x, rois, *rest, spatial_scale=1.0, group_size=1, output_dim=1):
    if rest:
        raise TypeError(f"PSROIPooling takes 2 inputs (x, rois), got {2 + len(rest)}")
    for v, name in ((x, "x"), (rois, "rois")):
        if not (isinstance(v, Tensor) or is_graph(v)):
            raise TypeError(f"PSROIPooling: {name} must be a Tensor, got {type(v).__name__}")
    return F.apply("PS_ROI_POOLING", (x, rois), (float(spatial_scale), int(group_size), int(output_dim)))


# ---------------------------------------------------------------- NMS, lgamma, windows

def nms_with_mask(bboxes, iou_threshold=0.5):
    return _tup(F.apply("NMS_WITH_MASK", (bboxes,), (float(iou_threshold),)))


def lgamma(input):  # noqa: A002
    return F.apply("LGAMMA", (input,))


def mvlgamma(input, p):  # noqa: A002
    """The multivariate log-gamma: p(p-1)/4 ln(pi) + sum_j lgamma(input - j/2), j < p (elements
    must exceed (p-1)/2)."""
    if isinstance(p, bool) or not isinstance(p, int) or p < 1:
        raise ValueError(f"mvlgamma: p must be an int >= 1, got {p!r}")
    if isinstance(input, Tensor) and not (input.asnumpy() > (p - 1) / 2).all():
        raise ValueError(f"mvlgamma: every element of input must be greater than (p - 1) / 2 = {(p - 1) / 2}")
    x = F.cast(input, dt.float32) if not input.dtype.is_float else input
    total = None
    for j in range(p):
        term = lgamma(F.sub(x, j / 2))
        total = term if total is None else F.add(total, term)
    return F.add(total, float(p * (p - 1) / 4 * np.log(np.pi)))


def blackman_window(window_length, periodic=True, *, dtype=None):
    """0.42 - 0.5 cos(2 pi n / N) + 0.08 cos(4 pi n / N), N = window_length (periodic) or - 1."""
    n = int(np.asarray(unwrap(window_length))) if isinstance(window_length, Tensor) else int(window_length)
    if n < 0:
        raise ValueError(f"blackman_window: window_length must be >= 0, got {n}")
    d = dt.as_dtype(dtype) if dtype is not None else dt.float32
    if n <= 1:
        return F.ones((n,), d)
    big = n if periodic else n - 1
    k = F.mul(F.arange(0, n, 1, dtype=dt.float32), 2 * np.pi / big)
    w = F.add(F.sub(0.42, F.mul(F.cos(k), 0.5)), F.mul(F.cos(F.mul(k, 2.0)), 0.08))
    return F.cast(w, d)


def pad_v3(x, paddings, value=None, mode="constant", paddings_contiguous=True):
    """PadV3(mode, paddings_contiguous)(x, paddings[, value]): paddings may be a run-time tensor."""
    m = {"replicate": "edge"}.get(mode, mode)
    if m not in ("constant", "reflect", "edge", "circular"):
        raise ValueError(f"PadV3: mode must be constant, reflect, edge or circular, got {mode!r}")
    if not (isinstance(paddings, Tensor) or is_graph(paddings)):
        paddings = Tensor(np.asarray(paddings, np.int64))
    if is_graph(paddings) and isinstance(paddings.shape[0], Expr) and not paddings.shape[0].is_const():
        raise UnknownDim(f"PadV3: the number of paddings ({paddings.shape[0]}) sets which dims are padded")
    ins = (x, paddings) if m != "constant" or value is None else (x, paddings, _as_tensor(value, x.dtype))
    return _apply_n("PAD_V3", ins, (len(ins), m, bool(paddings_contiguous)))


# ---------------------------------------------------------------- batch_norm, Assert, ConcatOffsetV1

def batch_norm(input_x, running_mean, running_var, weight, bias, training=False, momentum=0.1, eps=1e-5):
    """ops.batch_norm with the running statistics (training=False): (x - mean) / sqrt(var + eps) *
    weight + bias over channel axis 1. training=True would update the statistics in place, which
    msvm's read-only Parameters do not do."""
    if training:
        raise NotImplementedError("ops.batch_norm: training=True (batch statistics and their in-place update) is "
                                  "not supported: msvm runs inference")
    r = F._rank(input_x)
    shape = (1, -1) + (1,) * (r - 2)

    def ch(v):
        return F.reshape(v, shape)
    scale = F.mul(F.rsqrt(F.add(ch(running_var), float(eps))), ch(weight))
    return F.add(F.mul(F.sub(input_x, ch(running_mean)), scale), ch(bias))


def assert_(condition, input_data, summarize=3):
    """The Assert primitive: RuntimeError('assert failed ...') when condition is False (a bool, a
    flag argument of construct, or a 1-element bool tensor given eagerly)."""
    if isinstance(condition, Tensor):
        condition = bool(condition.asnumpy().reshape(-1)[0])
    if isinstance(condition, bool):
        if not condition:
            shown = [np.asarray(unwrap(t)).reshape(-1)[:summarize].tolist() for t in input_data
                     if isinstance(t, Tensor)]
            raise RuntimeError(f"assert failed: the condition is false; the data begin {shown}")
        return None
    from ..bytecode.symbolic import Pred

    if isinstance(condition, Pred):
        if not tracing():
            raise TypeError("Assert: a symbolic condition outside a compiled Cell")
        _check_at_run_time(condition, "assert failed: the condition is false", "RuntimeError")
        return None
    raise TypeError(f"Assert: condition must be a bool or a bool flag argument, got {type(condition).__name__}")


def concat_offset_v1(axis, x):
    """ConcatOffsetV1(axis, shapes): for each shape (a 1-D int tensor) the offset where its block
    starts when the tensors of those shapes are concatenated along axis."""
    shapes = tuple(x)
    n = F._shape(shapes[0])[0]
    pos = F.arange(0, n, 1, dtype=dt.int32)
    at = F.equal(pos, F.cast(axis, dt.int32) if (isinstance(axis, Tensor) or is_graph(axis)) else int(axis))
    out, run = [], None
    for s in shapes:
        out.append(F.where(at, run if run is not None else F.zeros_like(s), F.zeros_like(s)))
        run = s if run is None else F.add(run, s)
    return tuple(out)


# ---------------------------------------------------------------- 3-D (and 1-D) convolution

def conv_nd(x, weight, stride=1, pad_mode="valid", padding=0, dilation=1, group=1, n=3, what="conv3d"):
    if any(isinstance(k, Expr) and not k.is_const() for k in F._shape(weight)[2:]):
        raise UnknownDim(f"{what}: the kernel size of the weight {F._shape(weight)} must be known when the Cell compiles")
    s = _ntuple(stride, n, what)
    d = _ntuple(dilation, n, what)
    pads = _pool_pads(pad_mode, padding, n, what)
    return F.apply("CONV_ND", (x, weight), ((s, pads, d, int(group)),))


def conv3d(input, weight, bias=None, stride=1, pad_mode="valid", padding=0, dilation=1, groups=1):  # noqa: A002
    out = conv_nd(input, weight, stride, pad_mode, padding, dilation, groups, 3, "conv3d")
    return out if bias is None else F.add(out, F.reshape(bias, (1, -1, 1, 1, 1)))


def conv3d_prim(x, w, out_channel=1, kernel_size=1, mode=1, pad_mode="valid", pad=0, stride=1, dilation=1, group=1,
                data_format="NCDHW"):
    """The Conv3D primitive: ``Conv3D(out_channel, kernel_size, mode, pad_mode, pad, stride, dilation,
    group)(x, w)``; stride and dilation may be 5-tuples (N, C dims first, as MindSpore takes them)."""
    if data_format != "NCDHW":
        raise ValueError(f"Conv3D: data_format must be 'NCDHW', got {data_format!r}")

    def three(v):
        v = (v,) * 3 if isinstance(v, int) else tuple(v)
        return v[2:] if len(v) == 5 else v
    return conv_nd(x, w, three(stride), pad_mode, pad, three(dilation), group, 3, "Conv3D")


def conv3d_transpose(x, weight, stride=1, pad_mode="valid", pad=0, dilation=1, group=1, output_padding=0):
    """The transposed 3-D convolution (Conv3DTranspose, group 1): the input zero-interleaved by the
    stride, padded by dilation*(k-1) less the pads, convolved with the flipped, transposed weight."""
    if group != 1:
        raise NotImplementedError("Conv3DTranspose: group > 1 is not supported")
    if any(isinstance(k, Expr) and not k.is_const() for k in F._shape(weight)[2:]):
        raise UnknownDim(f"Conv3DTranspose: the kernel size of the weight {F._shape(weight)} must be known when "
                         "the Cell compiles")
    ks = [int(k.const_value() if isinstance(k, Expr) else k) for k in F._shape(weight)[2:]]
    s, d = _ntuple(stride, 3, "Conv3DTranspose"), _ntuple(dilation, 3, "Conv3DTranspose")
    op = _ntuple(output_padding, 3, "Conv3DTranspose")
    span = [d[i] * (ks[i] - 1) + 1 for i in range(3)]
    mode = str(pad_mode).lower()
    if mode == "same":
        pads = []
        for i in range(3):
            total = max(span[i] - s[i], 0)
            pads += [total // 2, total - total // 2]
    else:
        pads = list(_pool_pads(mode, pad, 3, "Conv3DTranspose"))
    y = x
    for i in range(3):
        axis = 2 + i
        m = F._shape(y)[axis]
        if s[i] > 1:
            y = _spread(y, axis, s[i], 0, s[i] * (m - 1) + 1)
    pairs = [(0, 0), (0, 0)] + [(span[i] - 1 - pads[2 * i], span[i] - 1 - pads[2 * i + 1] + op[i]) for i in range(3)]
    y = pad_pairs(y, pairs)
    w = F.apply("SLICE", (weight,), ((("s", None, None, None),) * 2 + (("s", None, None, -1),) * 3,))
    w = F.transpose(w, (1, 0, 2, 3, 4))
    return conv_nd(y, w, 1, "valid", 0, d, 1, 3, "Conv3DTranspose")


def conv3d_transpose_prim(x, w, in_channel=1, out_channel=1, kernel_size=1, mode=1, pad_mode="valid", pad=0,
                          stride=1, dilation=1, group=1, output_padding=0, data_format="NCDHW"):
    if data_format != "NCDHW":
        raise ValueError(f"Conv3DTranspose: data_format must be 'NCDHW', got {data_format!r}")

    def three(v):
        v = (v,) * 3 if isinstance(v, int) else tuple(v)
        return v[2:] if len(v) == 5 else v
    return conv3d_transpose(x, w, three(stride), pad_mode, pad, three(dilation), group, three(output_padding))


def ctc_greedy_decoder(inputs, sequence_length, merge_repeated=True):
    return _tup(F.apply("CTC_GREEDY_DECODER", (inputs, sequence_length), (bool(merge_repeated),)))


def no_repeat_ngram(state_seq, log_probs, ngram_size=1):
    return F.apply("NO_REPEAT_NGRAM", (state_seq, log_probs), (int(ngram_size),))


# ---------------------------------------------------------------- sampling

def grid_sample(input, grid, mode="bilinear", padding_mode="zeros", align_corners=False):
    """MindSpore's ops.grid_sample on [N, C, H, W] by grid [N, Ho, Wo, 2] of (x, y) in [-1, 1] (PyTorch's
    semantics): each output pixel the input at that point, 'bilinear' (its four neighbours weighted) or
    'nearest' (rounded half to even), points outside read zeros ('zeros') or the nearest edge ('border'), a NaN
    point zeros;
    ``align_corners``: -1 and 1 are the corner pixels' centres, else their outer edges. Composed of ops: the
    corners' flat indices and a GATHER_D per corner (mindocr's TPS spatial transformer)."""
    if F._rank(input) != 4 or F._rank(grid) != 4:
        raise NotImplementedError("ops.grid_sample: 4-D input and grid only (N, C, H, W) / (N, Ho, Wo, 2)")
    if mode not in ("bilinear", "nearest"):
        raise ValueError(f"ops.grid_sample: mode must be 'bilinear' or 'nearest', got {mode!r}")
    if padding_mode not in ("zeros", "border"):
        raise NotImplementedError(f"ops.grid_sample: padding_mode {padding_mode!r} (only 'zeros' and 'border')")
    n, c, h, w = F._shape(input)
    _, ho, wo, two = F._shape(grid)
    if isinstance(two, int) and two != 2:
        raise ValueError(f"ops.grid_sample: the grid's last dim must be 2 (x, y), got {two}")
    d = input.dtype
    gx, gy = F.unstack(F.cast(grid, d), -1)

    def pixel(g, size):
        s = F.scalar_to_tensor(size, d)
        p = (g + 1.0) * 0.5 * (s - 1.0) if align_corners else ((g + 1.0) * s - 1.0) * 0.5
        return F.clip(p, 0.0, s - 1.0) if padding_mode == "border" else p

    ix, iy = pixel(gx, w), pixel(gy, h)
    flat = F.reshape(input, (n, c, h * w))
    wf, hf = F.scalar_to_tensor(w, d), F.scalar_to_tensor(h, d)

    def corner(x, y, weight):
        inside = F.logical_and(F.logical_and(F.greater_equal(x, 0.0), F.less_equal(x, wf - 1.0)),
                               F.logical_and(F.greater_equal(y, 0.0), F.less_equal(y, hf - 1.0)))
        # (a NaN point reads nothing, as one outside: its index is taken at 0, its weight is 0)
        xc = F.clip(F.where(F.equal(x, x), x, F.zeros_like(x)), 0.0, wf - 1.0)
        yc = F.clip(F.where(F.equal(y, y), y, F.zeros_like(y)), 0.0, hf - 1.0)
        idx = F.cast(F.reshape(yc * wf + xc, (n, 1, ho * wo)), dt.int64)
        vals = F.reshape(F.gather_elements(flat, 2, F.broadcast_to(idx, (n, c, ho * wo))), (n, c, ho, wo))
        part = vals * F.expand_dims(weight, 1)
        # (a corner outside adds nothing, not 0 * its stand-in pixel, which may be NaN: as PyTorch skips it)
        return F.where(F.expand_dims(inside, 1), part, F.zeros_like(part))

    if mode == "nearest":
        x, y = F.round_(ix), F.round_(iy)
        return corner(x, y, F.ones_like(x))
    x0, y0 = F.floor(ix), F.floor(iy)
    fx, fy = ix - x0, iy - y0
    x1, y1 = x0 + 1.0, y0 + 1.0
    return (corner(x0, y0, (1.0 - fx) * (1.0 - fy)) + corner(x1, y0, fx * (1.0 - fy)) +
            corner(x0, y1, (1.0 - fx) * fy) + corner(x1, y1, fx * fy))
