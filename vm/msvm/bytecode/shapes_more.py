"""Shape rules of the instructions issue 21 added for MindSpore's missing APIs and random ops.

Same contract as ``shapes.py``: ``rule(ctx, ins, args) -> Type | None``. Two things are new here:

- *data-dependent dims*: an output size that only the data decides (UNIQUE's number of distinct
  values, RANDOM's dims read from a shape tensor) is a fresh symbol, ``d@<offset>_<k>`` in the
  verifier (``ctx.offset``) and a counted one in the frontend. It is bound by nothing at entry;
  ``ShapeEnv.data`` marks it so that a later rule may pin it to a constant (``reshape(u, (3, 3))``
  makes it 9; the kernel's own check raises at run time when the data disagrees) but an input's
  symbol is never rewritten in terms of it.
- the *effect* rows (RANDOM, PRINT): their rules type them like any other; the table's
  ``effect=`` is what keeps the tiers from folding, caching or replaying them.
"""

from __future__ import annotations

import itertools

from .. import dtype as dt
from .symbolic import Expr, sym
from .types import NONE, ScalarType, ShapeError, TensorType, TupleType

_counter = itertools.count()


def data_dim(ctx, k: int = 0) -> Expr:
    """A fresh symbol for an output size the data decides (see the module doc)."""
    off = getattr(ctx, "offset", None)
    name = f"d@{off:04x}_{k}" if isinstance(off, int) and not hasattr(ctx, "cb") else f"d{next(_counter)}_{k}"
    e = sym(name)
    env = ctx.env
    env.unifiable.add(name)
    env.data.add(name)
    return e


def _tensor(t, what, i=0) -> TensorType:
    if isinstance(t, TensorType):
        return t
    raise ShapeError(f"{what}: operand {i} must be a tensor, got {t}")


def _dims_from(ctx, shape_t, what) -> tuple:
    """Dims read from a 1-D int shape tensor at run time: one fresh symbol per element."""
    t = _tensor(shape_t, what)
    if t.dtype.kind not in "iu" or t.rank != 1:
        raise ShapeError(f"{what}: shape must be a 1-D int tensor, got {t}")
    n = t.shape[0].const_value()
    if n is None:
        raise ShapeError(f"{what}: the shape tensor's length must be known when the Cell compiles, got {t}")
    return tuple(data_dim(ctx, k) for k in range(n))


def _shape_of(ctx, shape, ins, what):
    """(output dims, inputs left): ``shape`` is a tuple of dims, or None for 'read ins[0]'."""
    if shape is None:
        if not ins:
            raise ShapeError(f"{what}: no shape tensor")
        return _dims_from(ctx, ins[0], what), ins[1:]
    return tuple(Expr.of(d) for d in shape), ins


def _float(d, what) -> dt.DType:
    if not isinstance(d, dt.DType):
        raise ShapeError(f"{what}: dtype must be a dtype, got {d!r}")
    return d


# RANDOM's distributions: name -> (what the inputs are, doc); see kernels_more.RANDOM
DISTS = ("normal", "uniform", "uniform_int", "laplace", "truncated_normal", "param_truncated_normal", "poisson",
         "gamma", "shuffle", "multinomial", "categorical", "candidates", "log_uniform_candidates", "dropout",
         "choice_with_mask")


def random(ctx, ins, args):
    """RANDOM: the type of a draw from ``dist`` (attrs[0] is the shape: dims, or None to read it
    from the first input; attrs[1] the dtype)."""
    dist, attrs, _seed = args[1], args[2], args[3]
    what = f"RANDOM {dist}"
    if dist not in DISTS:
        raise ShapeError(f"RANDOM: unknown distribution {dist!r}")
    if dist in ("normal", "uniform", "laplace", "truncated_normal", "uniform_int"):
        shape, rest = _shape_of(ctx, attrs[0], list(ins), what)
        if dist == "uniform_int":
            for t in rest:
                if isinstance(t, TensorType) and (t.dtype.kind not in "iu" or t.rank != 0):
                    raise ShapeError(f"{what}: minval and maxval must be 0-d int tensors, got {t}")
        return TensorType(shape, _float(attrs[1], what))
    if dist == "param_truncated_normal":
        shape, rest = _shape_of(ctx, attrs[0], list(ins), what)
        return TensorType(shape, _float(attrs[1], what))
    if dist in ("poisson", "gamma"):
        shape, rest = _shape_of(ctx, attrs[0], list(ins), what)
        rate = rest[0]
        rshape = rate.shape if isinstance(rate, TensorType) else ()
        return TensorType(shape + tuple(rshape), _float(attrs[1], what))
    if dist == "shuffle":
        return _tensor(ins[0], what)
    if dist in ("multinomial", "categorical"):
        x = _tensor(ins[0], what)
        if x.rank not in (1, 2):
            raise ShapeError(f"{what}: the probabilities must be 1-D or 2-D, got {x}")
        if dist == "categorical" and x.rank != 2:
            raise ShapeError(f"{what}: logits must be 2-D [batch, classes], got {x}")
        return TensorType(tuple(x.shape[:-1]) + (Expr.of(attrs[0]),), _float(attrs[1], what))
    if dist in ("candidates", "log_uniform_candidates"):
        x = _tensor(ins[0], what)
        num_true, num_sampled = attrs[0], attrs[1]
        if x.dtype.kind not in "iu" or x.rank != 2:
            raise ShapeError(f"{what}: true_classes must be a 2-D int tensor [batch, num_true], got {x}")
        ctx.env.require_eq(x.shape[1], num_true, f"{what}: true_classes has {x.shape[1]} columns, num_true is "
                                                 f"{num_true}")
        n = Expr.of(num_sampled)
        return TupleType((TensorType((n,), x.dtype), TensorType(x.shape, dt.float32), TensorType((n,), dt.float32)))
    if dist == "dropout":
        x = _tensor(ins[0], what)
        nd = attrs[1]
        if nd and x.rank != nd + 2:
            raise ShapeError(f"{what}{nd}d: x must have rank {nd + 2}, got {x}")
        mask = TensorType(x.shape, dt.bool_ if nd else x.dtype)
        return TupleType((x, mask))
    if dist == "choice_with_mask":
        x = _tensor(ins[0], what)
        if x.dtype != dt.bool_ or not 1 <= x.rank <= 5:
            raise ShapeError(f"{what}: x must be a bool tensor of rank 1 to 5, got {x}")
        n = Expr.of(attrs[0])
        return TupleType((TensorType((n, Expr.of(x.rank)), dt.int32), TensorType((n,), dt.bool_)))
    raise AssertionError(dist)  # pragma: no cover


def print_(ctx, ins, args):
    """PRINT: pops n values of any type, pushes nothing."""
    for t in ins:
        if t is NONE:
            continue
        if not isinstance(t, (TensorType, ScalarType, TupleType)):
            raise ShapeError(f"PRINT: cannot print {t}")
    if sum(1 for p in args[1] if p is None) != len(ins):
        raise ShapeError(f"PRINT: the template has {sum(1 for p in args[1] if p is None)} holes for {len(ins)} values")
    return None


def unique(ctx, ins, args):
    """UNIQUE: (the distinct values of x flattened, sorted: [u]; each element's index into them:
    x's shape, int32), u a data-dependent dim."""
    x = _tensor(ins[0], "UNIQUE")
    if args[0] is not None:
        if x.rank != 1:
            raise ShapeError(f"UNIQUE (with pad): x must be 1-D, got {x}")
        return TupleType((x, TensorType(x.shape, dt.int32)))
    return TupleType((TensorType((data_dim(ctx),), x.dtype), TensorType(x.shape, dt.int32)))


def _norm_axis(axis, rank, what):
    if isinstance(axis, bool) or not isinstance(axis, int) or not -max(rank, 1) <= axis < max(rank, 1):
        raise ShapeError(f"{what}: axis {axis!r} is out of range for rank {rank}")
    return axis % max(rank, 1)


def cumulate(ctx, ins, args):
    x = _tensor(ins[0], "CUMULATE")
    axis, mode = args[0], args[1]
    _norm_axis(axis, x.rank, "CUMULATE")
    if mode == "prod":
        return x
    if mode not in ("min", "max"):
        raise ShapeError(f"CUMULATE: mode must be prod, min or max, got {mode!r}")
    if x.dtype == dt.bool_:
        raise ShapeError(f"CUMULATE {mode}: x must be a number tensor, got {x}")
    return TupleType((x, TensorType(x.shape, dt.int64)))


def _mat(t, what, i=0):
    t = _tensor(t, what, i)
    if t.rank < 2:
        raise ShapeError(f"{what}: operand {i} must be a matrix or a batch of them [..., M, N], got {t}")
    if not t.dtype.is_float:
        raise ShapeError(f"{what}: operand {i} must be float16, float32 or float64, got {t.dtype}")
    return t


LINALG_FNS = ("solve", "cholesky", "cholesky_inverse", "pinv", "lstsq", "inv")


def linalg(ctx, ins, args):
    fn = args[1]
    what = f"LINALG {fn}"
    if fn not in LINALG_FNS:
        raise ShapeError(f"LINALG: unknown function {fn!r}")
    a = _mat(ins[0], what)
    env = ctx.env
    if fn in ("solve", "cholesky", "cholesky_inverse", "inv"):
        env.require_eq(a.shape[-1], a.shape[-2], f"{what}: the matrix must be square, got {a}")
    if fn == "solve":
        b = _mat(ins[1], what, 1)
        env.require_eq(a.shape[-2], b.shape[-2], f"{what}: {a} and the right-hand side {b} differ in rows")
        batch = env.broadcast([a.shape[:-2], b.shape[:-2]], what)
        return TensorType(tuple(batch) + tuple(b.shape[-2:]), b.dtype)
    if fn == "lstsq":
        b = _tensor(ins[1], what, 1)
        if a.rank != 2 or b.rank not in (1, 2):
            raise ShapeError(f"{what}: x must be [M, N] and a [M] or [M, K], got {a} and {b}")
        env.require_eq(a.shape[0], b.shape[0], f"{what}: {a} and {b} differ in rows")
        return TensorType((a.shape[1],) + tuple(b.shape[1:]), a.dtype)
    if fn == "pinv":
        return TensorType(tuple(a.shape[:-2]) + (a.shape[-1], a.shape[-2]), a.dtype)
    return a


def masked_select(ctx, ins, args):
    x = _tensor(ins[0], "MASKED_SELECT")
    m = _tensor(ins[1], "MASKED_SELECT", 1)
    if m.dtype != dt.bool_:
        raise ShapeError(f"MASKED_SELECT: mask must be bool, got {m.dtype}")
    ctx.env.broadcast([x.shape, m.shape], "MASKED_SELECT")
    return TensorType((data_dim(ctx),), x.dtype)


def crop_and_resize(ctx, ins, args):
    img = _tensor(ins[0], "CROP_AND_RESIZE")
    boxes = _tensor(ins[1], "CROP_AND_RESIZE", 1)
    idx = _tensor(ins[2], "CROP_AND_RESIZE", 2)
    (h, w), method = args[0], args[1]
    if img.rank != 4:
        raise ShapeError(f"CROP_AND_RESIZE: image must be 4-D [B, H, W, C], got {img}")
    if boxes.rank != 2 or not boxes.dtype.is_float:
        raise ShapeError(f"CROP_AND_RESIZE: boxes must be a float [N, 4] tensor, got {boxes}")
    if idx.rank != 1 or idx.dtype.kind not in "iu":
        raise ShapeError(f"CROP_AND_RESIZE: box_index must be a 1-D int tensor, got {idx}")
    ctx.env.require_eq(boxes.shape[1], 4, f"CROP_AND_RESIZE: boxes must be [N, 4], got {boxes}")
    n = ctx.env.require_eq(boxes.shape[0], idx.shape[0], f"CROP_AND_RESIZE: {boxes} and box_index {idx} differ in N")
    if method not in ("bilinear", "nearest"):
        raise ShapeError(f"CROP_AND_RESIZE: method must be bilinear or nearest, got {method!r}")
    return TensorType((n, Expr.of(h), Expr.of(w), img.shape[3]), dt.float32)


def _pool_window(window, n, what):
    if not (isinstance(window, tuple) and len(window) == 6):
        raise ShapeError(f"{what}: window must be (mode, kernel, stride, pads, count_pad, ceil_mode), got {window!r}")
    mode, kernel, stride, pads, count_pad, ceil_mode = window
    if mode not in ("max", "avg", "argmax"):
        raise ShapeError(f"{what}: mode must be max, avg or argmax, got {mode!r}")
    ok = lambda v, k: isinstance(v, tuple) and len(v) == k and all(isinstance(x, int) and x > 0 for x in v)  # noqa: E731
    if not ok(kernel, n) or not ok(stride, n):
        raise ShapeError(f"{what}: kernel and stride must be {n} positive ints, got {kernel!r} and {stride!r}")
    if pads != ("same",) and not (isinstance(pads, tuple) and len(pads) == 2 * n and
                                  all(isinstance(x, int) and x >= 0 for x in pads)):
        raise ShapeError(f"{what}: pads must be ('same',) or {2 * n} ints >= 0, got {pads!r}")
    return mode, kernel, stride, pads, count_pad, ceil_mode


def pool_nd(ctx, ins, args):
    x = _tensor(ins[0], "POOL_ND")
    n = x.rank - 2
    if not 1 <= n <= 3:
        raise ShapeError(f"POOL_ND: x must be [N, C, *spatial] with 1 to 3 spatial dims, got {x}")
    mode, kernel, stride, pads, _, ceil_mode = _pool_window(args[0], n, "POOL_ND")
    out = list(x.shape[:2])
    for i in range(n):
        d = ctx.env.norm(x.shape[2 + i])
        if pads == ("same",):
            out.append((d + (stride[i] - 1)) // stride[i])
            continue
        span = d + (pads[2 * i] + pads[2 * i + 1]) - kernel[i]
        c = span.const_value()
        if c is not None and c < 0:
            raise ShapeError(f"POOL_ND: the window {kernel[i]} is larger than the padded input along spatial dim {i}")
        out.append((span + (stride[i] - 1)) // stride[i] + 1 if ceil_mode else span // stride[i] + 1)
    d = x.dtype if mode != "avg" or x.dtype.is_float else dt.float32
    t = TensorType(tuple(ctx.env.norm(Expr.of(v)) for v in out), d)
    return TupleType((t, TensorType(t.shape, dt.int32))) if mode == "argmax" else t


def adaptive_max_pool(ctx, ins, args):
    x = _tensor(ins[0], "ADAPTIVE_MAX_POOL")
    bins, with_indices = args
    n = len(bins)
    if not isinstance(bins, tuple) or not 1 <= n <= 3 or x.rank not in (n + 1, n + 2):
        raise ShapeError(f"ADAPTIVE_MAX_POOL: {n} bins for {x}: x must be [N, C, *spatial] or [C, *spatial]")
    lead = x.rank - n
    out = tuple(x.shape[:lead]) + tuple(x.shape[lead + i] if b is None else Expr.of(b) for i, b in enumerate(bins))
    vals = TensorType(out, x.dtype)
    return TupleType((vals, TensorType(out, dt.int64))) if with_indices else vals


def population_count(ctx, ins, args):
    x = _tensor(ins[0], "POPULATION_COUNT")
    if x.dtype.kind not in "iu":
        raise ShapeError(f"POPULATION_COUNT: x must be an int tensor, got {x.dtype}")
    return TensorType(x.shape, dt.uint8)


ALIGNS = ("RIGHT_LEFT", "LEFT_RIGHT", "LEFT_LEFT", "RIGHT_RIGHT")


def _k_band(t, what):
    """Whether k (a 0-d, [1] or [2] int tensor) names a band of diagonals (a pair) or one."""
    k = _tensor(t, what, 1)
    if k.dtype.kind not in "iu" or k.rank > 1:
        raise ShapeError(f"{what}: k must be an int scalar or a 1-D tensor of 1 or 2 values, got {k}")
    if k.rank == 0:
        return False
    n = k.shape[0].const_value()
    if n not in (1, 2):
        raise ShapeError(f"{what}: k must hold 1 or 2 values (known when the Cell compiles), got {k}")
    return n == 2


def matrix_diag(ctx, ins, args):
    mode, align = args[1], args[2]
    what = f"MATRIX_DIAG {mode}"
    if align not in ALIGNS:
        raise ShapeError(f"{what}: align must be one of {', '.join(ALIGNS)}, got {align!r}")
    x = _tensor(ins[0], what)
    band = _k_band(ins[1], what)
    if mode == "diag":
        if len(ins) != 5:
            raise ShapeError(f"{what}: needs diagonals, k, num_rows, num_cols, padding_value")
        lead = x.rank - (2 if band else 1)
        if lead < 0:
            raise ShapeError(f"{what}: the diagonals {x} need rank >= {2 if band else 1}")
        return TensorType(tuple(x.shape[:lead]) + (data_dim(ctx, 0), data_dim(ctx, 1)), x.dtype)
    if mode != "part":
        raise ShapeError(f"MATRIX_DIAG: mode must be diag or part, got {mode!r}")
    if len(ins) != 3 or x.rank < 2:
        raise ShapeError(f"{what}: needs x [..., M, N], k, padding_value; got {x}")
    lead = tuple(x.shape[:-2])
    return TensorType(lead + ((data_dim(ctx, 0), data_dim(ctx, 1)) if band else (data_dim(ctx, 1),)), x.dtype)


def ps_roi_pooling(ctx, ins, args):
    x = _tensor(ins[0], "PS_ROI_POOLING")
    rois = _tensor(ins[1], "PS_ROI_POOLING", 1)
    _, g, out_dim = args
    if x.rank != 4 or rois.rank != 3 or not x.dtype.is_float or not rois.dtype.is_float:
        raise ShapeError(f"PS_ROI_POOLING: x must be a float [N, C, H, W] and rois a float [B, 5, R], got {x} and "
                         f"{rois}")
    ctx.env.require_eq(rois.shape[1], 5, f"PS_ROI_POOLING: rois must be [B, 5, R], got {rois}")
    return TensorType((rois.shape[0] * rois.shape[2], Expr.of(out_dim), Expr.of(g), Expr.of(g)), x.dtype)


def nms_with_mask(ctx, ins, args):
    b = _tensor(ins[0], "NMS_WITH_MASK")
    if b.rank != 2 or not b.dtype.is_float:
        raise ShapeError(f"NMS_WITH_MASK: bboxes must be a float [N, 5] tensor, got {b}")
    ctx.env.require_eq(b.shape[1], 5, f"NMS_WITH_MASK: bboxes must be [N, 5], got {b}")
    n = b.shape[0]
    return TupleType((b, TensorType((n,), dt.int32), TensorType((n,), dt.bool_)))


def pad_v3(ctx, ins, args):
    x = _tensor(ins[0], "PAD_V3")
    p = _tensor(ins[1], "PAD_V3", 1)
    mode = args[1]
    if mode not in ("constant", "reflect", "edge", "circular"):
        raise ShapeError(f"PAD_V3: mode must be constant, reflect, edge or circular, got {mode!r}")
    if p.dtype.kind not in "iu" or p.rank != 1:
        raise ShapeError(f"PAD_V3: paddings must be a 1-D int tensor, got {p}")
    n = p.shape[0].const_value()
    if n is None or n % 2 or n > 2 * x.rank:
        raise ShapeError(f"PAD_V3: paddings must hold an even number of values, at most {2 * x.rank} (known when "
                         f"the Cell compiles), got {p}")
    k = n // 2
    return TensorType(tuple(x.shape[:x.rank - k]) + tuple(data_dim(ctx, i) for i in range(k)), x.dtype)


def conv_nd(ctx, ins, args):
    x = _tensor(ins[0], "CONV_ND")
    w = _tensor(ins[1], "CONV_ND", 1)
    stride, pads, dil, group = args[0]
    n = x.rank - 2
    if n not in (1, 2, 3) or w.rank != x.rank or len(stride) != n or len(dil) != n:
        raise ShapeError(f"CONV_ND: x {x} and w {w} need the same rank, 3 to 5, and {n} strides and dilations")
    ks = [d.const_value() for d in w.shape[2:]]
    if any(k is None for k in ks):
        raise ShapeError(f"CONV_ND: the kernel size must be known, got weight {w}")
    ctx.env.require_eq(x.shape[1], w.shape[1] * group, f"CONV_ND: input {x} has {x.shape[1]} channels, the weight "
                       f"{w} expects {w.shape[1]} x group {group}")
    out = [x.shape[0], w.shape[0]]
    for i in range(n):
        d = ctx.env.norm(x.shape[2 + i])
        if pads == ("same",):
            out.append((d + (stride[i] - 1)) // stride[i])
            continue
        span = d + (pads[2 * i] + pads[2 * i + 1]) - (dil[i] * (ks[i] - 1) + 1)
        c = span.const_value()
        if c is not None and c < 0:
            raise ShapeError(f"CONV_ND: the kernel is larger than the padded input along spatial dim {i}")
        out.append(span // stride[i] + 1)
    return TensorType(tuple(ctx.env.norm(Expr.of(v)) for v in out), x.dtype if x.dtype.is_float else dt.float32)


def ctc_greedy_decoder(ctx, ins, args):
    x = _tensor(ins[0], "CTC_GREEDY_DECODER")
    sl = _tensor(ins[1], "CTC_GREEDY_DECODER", 1)
    if x.rank != 3 or not x.dtype.is_float:
        raise ShapeError(f"CTC_GREEDY_DECODER: inputs must be a float [max_time, batch, classes] tensor, got {x}")
    if sl.rank != 1 or sl.dtype.kind not in "iu":
        raise ShapeError(f"CTC_GREEDY_DECODER: sequence_length must be a 1-D int tensor, got {sl}")
    ctx.env.require_eq(sl.shape[0], x.shape[1], f"CTC_GREEDY_DECODER: sequence_length {sl} must have the batch "
                                                f"size of {x}")
    u = data_dim(ctx)
    return TupleType((TensorType((u, Expr.of(2)), dt.int64), TensorType((u,), dt.int64),
                      TensorType((Expr.of(2),), dt.int64), TensorType((x.shape[1], Expr.of(1)), x.dtype)))


def no_repeat_ngram(ctx, ins, args):
    seq = _tensor(ins[0], "NO_REPEAT_NGRAM")
    lp = _tensor(ins[1], "NO_REPEAT_NGRAM", 1)
    if seq.dtype.kind not in "iu" or not lp.dtype.is_float or seq.rank != lp.rank or seq.rank < 1:
        raise ShapeError(f"NO_REPEAT_NGRAM: state_seq must be ints and log_probs floats of one rank, got {seq} and {lp}")
    for i, (a, b) in enumerate(zip(seq.shape[:-1], lp.shape[:-1])):
        ctx.env.require_eq(a, b, f"NO_REPEAT_NGRAM: state_seq {seq} and log_probs {lp} differ in dim {i}")
    return lp


def bind_dims(ctx, ins, args):
    """BIND_DIMS: v's type with the named dims replaced by the symbols (data-dependent from here on;
    the dims they replace are unified with them)."""
    (v,) = ins
    env = ctx.env
    items = list(v.items) if isinstance(v, TupleType) else None
    for name, item, dim in args[0]:
        t = v if item < 0 else (items[item] if items is not None and item < len(items) else None)
        if not isinstance(t, TensorType) or not 0 <= dim < t.rank:
            raise ShapeError(f"BIND_DIMS: {v} has no dim {dim} at item {item} for {name}")
        s = sym(name)
        env.unifiable.add(name)
        env.data.add(name)
        env.require_eq(t.shape[dim], s, f"BIND_DIMS: {name}")
        t = TensorType(tuple(s if k == dim else d for k, d in enumerate(t.shape)), t.dtype)
        if item < 0:
            v = t
        else:
            items[item] = t
    return TupleType(tuple(items)) if items is not None else v
