"""Reference kernels of the instructions issue 21 added (RANDOM, UNIQUE, ...); ``kernels.KERNELS``
takes them in (same contract: ``KERNEL(*inputs, *operands, out=None)``).

RANDOM draws from the stream its seed operand names (``rng.py``); its distributions:

===========================  ================================  =====================================
dist                         inputs                            attrs
===========================  ================================  =====================================
normal, laplace,             [shape tensor]                    (shape | None, dtype)
truncated_normal (+-2 std)
uniform                      [shape tensor]                    (shape | None, dtype, low, high)
uniform_int [low, high)      [shape tensor], low, high (0-d)   (shape | None, dtype)
param_truncated_normal       [shape], mean, std, min, max      (shape | None, dtype): per batch row
poisson, gamma (scale 1)     [shape tensor], rate / alpha      (shape | None, dtype): shape + rate's
shuffle                      x                                 (): x permuted along axis 0
multinomial                  probs [..., C]                    (num_samples, dtype, replacement)
categorical                  logits [B, C]                     (num_samples, dtype)
candidates,                  true_classes [B, num_true]        (num_true, num_sampled, unique,
log_uniform_candidates                                          range_max, remove_accidental_hits)
dropout                      x                                 (keep_prob, nd): nd 0 elementwise,
                                                                2 / 3 whole channels (N, C, ...)
choice_with_mask             x (bool)                          (count,)
===========================  ================================  =====================================

A shape of None reads the output dims from the first input (a 1-D int tensor).
"""

from __future__ import annotations

import numpy as np

from .rng import generator


def _np(d):
    return d.np


def _shape(attrs, ins):
    """(output dims, the inputs after the shape tensor)."""
    if attrs[0] is None:
        s = np.asarray(ins[0])
        if s.ndim != 1 or s.dtype.kind not in "iu":
            raise TypeError(f"RANDOM: shape must be a 1-D int tensor, got {s.dtype} of rank {s.ndim}")
        if (s < 0).any():
            raise ValueError(f"RANDOM: shape must not hold negative dims, got {tuple(int(v) for v in s)}")
        return tuple(int(v) for v in s), ins[1:]
    return tuple(int(d) for d in attrs[0]), ins


def _truncated(g, shape, lo=-2.0, hi=2.0, loc=0.0, scale=1.0):
    """Normal(loc, scale) draws inside [lo, hi] (in the units of the draw), by resampling."""
    loc, scale, lo, hi = (np.broadcast_to(np.asarray(v, np.float64), shape) for v in (loc, scale, lo, hi))
    out = np.empty(shape, np.float64)
    todo = np.ones(shape, bool)
    for _ in range(1000):
        n = int(todo.sum())
        if not n:
            break
        v = g.standard_normal(n) * scale[todo] + loc[todo]
        ok = (v >= lo[todo]) & (v <= hi[todo])
        idx = np.flatnonzero(todo)[ok]
        out.flat[idx] = v[ok]
        todo.flat[idx] = False
    if todo.any():          # a window far in a tail: its nearest end
        out[todo] = np.clip(loc[todo], lo[todo], hi[todo])
    return out


def _expected(p, tries):
    """TF/MindSpore's expected count of a class drawn with probability p in ``tries`` tries."""
    return -np.expm1(tries * np.log1p(-np.minimum(p, 1 - 1e-12)))


def _candidates(g, x, attrs, log_uniform):
    num_true, num_sampled, unique, range_max, remove_hits = attrs
    x = np.asarray(x)
    if log_uniform:
        log_range = np.log(range_max + 1.0)

        def prob(k):
            k = np.asarray(k, np.float64)
            return np.log((k + 2.0) / (k + 1.0)) / log_range

        def draw(n):
            return np.minimum((np.exp(g.random(n) * log_range)).astype(np.int64) - 1, range_max - 1)
    else:
        def prob(k):
            return np.full(np.shape(k), 1.0 / range_max)

        def draw(n):
            return g.integers(0, range_max, n)
    banned = set(int(v) for v in x.ravel()) if remove_hits else set()
    if unique and num_sampled > range_max - len(banned & set(range(range_max))):
        raise ValueError(f"RANDOM candidates: num_sampled {num_sampled} is more than the {range_max} classes "
                         f"can give uniquely")
    picked: list = []
    seen: set = set()
    tries = 0
    while len(picked) < num_sampled:
        for v in draw(max(num_sampled, 16)):
            v = int(v)
            tries += 1
            if v in banned or (unique and v in seen):
                continue
            picked.append(v)
            seen.add(v)
            if len(picked) == num_sampled:
                break
        if tries > 1000 * (num_sampled + range_max):
            raise RuntimeError("RANDOM candidates: could not draw the candidates (every class is a true one?)")
    sampled = np.asarray(picked, dtype=x.dtype)
    if unique:
        true_exp, samp_exp = _expected(prob(x), tries), _expected(prob(sampled), tries)
    else:
        true_exp, samp_exp = prob(x) * num_sampled, prob(sampled) * num_sampled
    return sampled, true_exp.astype(np.float32), samp_exp.astype(np.float32)


def _multinomial(g, p, n, replacement, logits=False):
    p = np.asarray(p, np.float64)
    rows = p.reshape(-1, p.shape[-1])
    out = np.empty((rows.shape[0], n), np.int64)
    for r, row in enumerate(rows):
        if logits:
            row = np.exp(row - row.max())
        if (row < 0).any() or not np.isfinite(row).all():
            raise ValueError("RANDOM multinomial: probabilities must be finite and >= 0")
        total = row.sum()
        if total <= 0:
            raise ValueError("RANDOM multinomial: a row of probabilities sums to 0")
        if not replacement and n > int((row > 0).sum()):
            raise ValueError(f"RANDOM multinomial: cannot draw {n} samples without replacement from "
                             f"{int((row > 0).sum())} non-zero classes")
        out[r] = g.choice(row.shape[0], size=n, replace=bool(replacement), p=row / total)
    return out.reshape(p.shape[:-1] + (n,))


def random(*args, out=None):
    """RANDOM's kernel: ``random(*inputs, dist, attrs, seed)`` (see the module doc)."""
    ins, dist, attrs, seed = args[:-3], args[-3], args[-2], args[-1]
    g = generator(*seed)
    if dist in ("normal", "laplace", "truncated_normal", "uniform"):
        shape, _ = _shape(attrs, ins)
        if dist == "normal":
            r = g.standard_normal(shape)
        elif dist == "laplace":
            r = g.laplace(0.0, 1.0, shape)
        elif dist == "truncated_normal":
            r = _truncated(g, shape)
        else:
            r = g.uniform(attrs[2], attrs[3], shape)
        return np.asarray(r, dtype=_np(attrs[1]))
    if dist == "uniform_int":
        shape, (lo, hi) = _shape(attrs, ins)
        lo, hi = int(np.asarray(lo)), int(np.asarray(hi))
        if lo >= hi:
            raise ValueError(f"RANDOM uniform_int: minval {lo} must be less than maxval {hi}")
        return g.integers(lo, hi, shape).astype(_np(attrs[1]))
    if dist == "param_truncated_normal":
        shape, (mean, std, lo, hi) = _shape(attrs, ins)
        col = (shape[0],) + (1,) * (len(shape) - 1) if shape else ()

        def per_row(v):
            v = np.asarray(v, np.float64).reshape(-1)
            return np.broadcast_to(v, (shape[0],) if shape else (1,)).reshape(col) if shape else v.reshape(())
        r = _truncated(g, shape, per_row(lo), per_row(hi), per_row(mean), per_row(std))
        return r.astype(_np(attrs[1]))
    if dist in ("poisson", "gamma"):
        shape, (rate,) = _shape(attrs, ins)
        rate = np.asarray(rate, np.float64)
        size = shape + rate.shape
        if dist == "poisson":
            r = g.poisson(np.broadcast_to(np.maximum(rate, 0), size))
            r = np.where(np.broadcast_to(rate < 0, size), 0, r)
        else:
            r = g.gamma(np.broadcast_to(np.where(rate > 0, rate, np.nan), size), 1.0, size)
        return np.asarray(r).astype(_np(attrs[1]))
    if dist == "shuffle":
        x = np.asarray(ins[0])
        if x.ndim == 0:
            return x.copy()
        return x[g.permutation(x.shape[0])]
    if dist == "multinomial":
        return _multinomial(g, ins[0], attrs[0], attrs[2]).astype(_np(attrs[1]))
    if dist == "categorical":
        return _multinomial(g, ins[0], attrs[0], True, logits=True).astype(_np(attrs[1]))
    if dist in ("candidates", "log_uniform_candidates"):
        return _candidates(g, ins[0], attrs, dist == "log_uniform_candidates")
    if dist == "dropout":
        x = np.asarray(ins[0])
        keep, nd = float(attrs[0]), attrs[1]
        mshape = x.shape if not nd else x.shape[:2] + (1,) * nd
        keep_mask = g.random(mshape) < keep if keep < 1.0 else np.ones(mshape, bool)
        keep_mask = np.broadcast_to(keep_mask, x.shape)
        with np.errstate(divide="ignore", invalid="ignore"):
            scaled = (x / keep).astype(x.dtype) if keep > 0 else np.zeros_like(x)
        y = np.where(keep_mask, scaled, np.zeros((), x.dtype))
        return y, (keep_mask.copy() if nd else keep_mask.astype(x.dtype))
    if dist == "choice_with_mask":
        x = np.asarray(ins[0])
        (count,) = attrs
        if count * max(x.ndim, 1) * 4 > 1 << 31:
            raise RuntimeError(f"RANDOM choice_with_mask: count {count} needs an index output of "
                               f"{count * x.ndim * 4} bytes, over 2 GiB")
        where = np.argwhere(x).astype(np.int32)
        where = where[g.permutation(len(where))][:count]
        idx = np.zeros((count, x.ndim), np.int32)
        idx[:len(where)] = where
        mask = np.zeros((count,), bool)
        mask[:len(where)] = True
        return idx, mask
    raise ValueError(f"RANDOM: unknown distribution {dist!r}")


def unique(x, pad_value, out=None):
    """The distinct values of x (flattened) in the order they first appear, and for each element of
    x the index of its value among them (int32); with a pad_value, the values padded to x's length."""
    x = np.asarray(x)
    flat = x.reshape(-1)
    vals, first, inv = np.unique(flat, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    y = flat[np.sort(first)]
    if pad_value is not None:
        y = np.concatenate([y, np.full(flat.size - y.size, pad_value, x.dtype)])
    return y, rank[inv.reshape(-1)].reshape(x.shape).astype(np.int32)


def cumulate(x, axis, mode, exclusive, reverse, out=None):
    """CUMULATE: cumprod, or cummin / cummax with indices (see the table's doc)."""
    x = np.asarray(x)
    if x.ndim == 0:
        return x.copy() if mode == "prod" else (x.copy(), np.zeros((), np.int64))
    y = np.flip(x, axis) if reverse else x
    if mode == "prod":
        r = np.cumprod(y, axis=axis, dtype=x.dtype)
        if exclusive:
            r = np.concatenate([np.ones_like(np.take(r, [0], axis)), np.delete(r, -1, axis)], axis)
        return np.flip(r, axis) if reverse else r
    a = np.moveaxis(y, axis, 0)
    if a.shape[0] == 0 or a.size == 0:
        return x.copy(), np.zeros(x.shape, np.int64)
    vals = np.empty_like(a)
    idx = np.empty(a.shape, np.int64)
    cur, at = a[0].copy(), np.zeros(a.shape[1:], np.int64)
    better = np.less_equal if mode == "min" else np.greater_equal
    for i in range(a.shape[0]):
        v = a[i]
        with np.errstate(invalid="ignore"):
            take = better(v, cur) | (np.isnan(v) if a.dtype.kind == "f" else False)
        if a.dtype.kind == "f":
            take &= ~np.isnan(cur)
        take |= i == 0
        cur = np.where(take, v, cur)
        at = np.where(take, i, at)
        vals[i], idx[i] = cur, at
    vals, idx = np.moveaxis(vals, 0, axis), np.moveaxis(idx, 0, axis)
    if reverse:
        vals, idx = np.flip(vals, axis), x.shape[axis] - 1 - np.flip(idx, axis)
    return vals, idx


def linalg(*args, out=None):
    """LINALG's kernel: ``linalg(*matrices, fn, attrs)`` (no count) in float64, back to the input's dtype."""
    *ms, fn, attrs = args
    a = np.asarray(ms[0])
    dtype = a.dtype
    a64 = a.astype(np.float64)
    if fn == "solve":
        b = np.asarray(ms[1]).astype(np.float64)
        if attrs[0]:
            a64 = np.swapaxes(a64, -1, -2)
        try:
            return np.linalg.solve(a64, b).astype(np.asarray(ms[1]).dtype)
        except np.linalg.LinAlgError as e:
            raise ValueError(f"LINALG solve: {e} (the matrix is singular)") from None
    if fn == "cholesky":
        try:
            low = np.linalg.cholesky(a64)
        except np.linalg.LinAlgError as e:
            raise ValueError(f"LINALG cholesky: {e} (the matrix is not positive definite)") from None
        return (np.swapaxes(low, -1, -2) if attrs[0] else low).astype(dtype)
    if fn == "cholesky_inverse":
        f = np.swapaxes(a64, -1, -2) if attrs[0] else a64        # the lower factor L: (L L^T)^-1
        return np.linalg.inv(f @ np.swapaxes(f, -1, -2)).astype(dtype)
    if fn == "inv":
        return np.linalg.inv(a64).astype(dtype)
    if fn == "pinv":
        hermitian = bool(attrs[0]) if attrs else False
        return np.linalg.pinv(a64, hermitian=hermitian).astype(dtype)
    if fn == "lstsq":
        b = np.asarray(ms[1]).astype(np.float64)
        return np.linalg.lstsq(a64, b, rcond=None)[0].astype(dtype)
    raise ValueError(f"LINALG: unknown function {fn!r}")


def masked_select(x, mask, out=None):
    x, mask = np.broadcast_arrays(np.asarray(x), np.asarray(mask, bool))
    return x[mask]


def crop_and_resize(image, boxes, box_index, crop_size, method, extrapolation_value, out=None):
    """TF's CropAndResize: box (y1, x1, y2, x2) of image[box_index] sampled on a crop_size grid
    spanning it (corners included); points outside the image get extrapolation_value."""
    img = np.asarray(image).astype(np.float64)
    boxes = np.asarray(boxes, np.float64)
    bi = np.asarray(box_index).astype(np.int64)
    b, h_in, w_in, c = img.shape
    ch, cw = crop_size
    if bi.size and (bi.min() < 0 or bi.max() >= b):
        raise ValueError(f"CROP_AND_RESIZE: a box_index is outside the batch of {b}")
    res = np.full((len(boxes), ch, cw, c), float(extrapolation_value))
    for n, (y1, x1, y2, x2) in enumerate(boxes):
        def grid(lo, hi, size, full):
            if size > 1:
                return lo * (full - 1) + np.arange(size) * (hi - lo) * (full - 1) / (size - 1)
            return np.array([0.5 * (lo + hi) * (full - 1)])
        ys, xs = grid(y1, y2, ch, h_in), grid(x1, x2, cw, w_in)
        src = img[bi[n]]
        yok = (ys >= 0) & (ys <= h_in - 1)
        xok = (xs >= 0) & (xs <= w_in - 1)
        if method == "nearest":
            yi = np.clip(np.floor(ys + 0.5).astype(np.int64), 0, h_in - 1)     # (C's round: half away from 0)
            xi = np.clip(np.floor(xs + 0.5).astype(np.int64), 0, w_in - 1)
            vals = src[yi][:, xi]
        else:
            y0 = np.clip(np.floor(ys).astype(np.int64), 0, h_in - 1)
            x0 = np.clip(np.floor(xs).astype(np.int64), 0, w_in - 1)
            y1i, x1i = np.clip(np.ceil(ys).astype(np.int64), 0, h_in - 1), np.clip(np.ceil(xs).astype(np.int64), 0,
                                                                                 w_in - 1)
            dy, dx = (ys - np.floor(ys))[:, None, None], (xs - np.floor(xs))[None, :, None]
            top = src[y0][:, x0] + (src[y0][:, x1i] - src[y0][:, x0]) * dx
            bot = src[y1i][:, x0] + (src[y1i][:, x1i] - src[y1i][:, x0]) * dx
            vals = top + (bot - top) * dy
        ok = yok[:, None] & xok[None, :]
        res[n] = np.where(ok[..., None], vals, float(extrapolation_value))
    return res.astype(np.float32)


def pool_nd(x, window, out=None):
    """POOL_ND: max / mean over sliding windows of the padded spatial dims (padding never wins a max;
    a mean counts it when count_pad; ceil_mode adds the partial last window)."""
    mode, kernel, stride, pads, count_pad, ceil_mode = window
    x = np.asarray(x)
    n = x.ndim - 2
    if pads == ("same",):
        pads = []
        for i in range(n):
            d = x.shape[2 + i]
            o = -(-d // stride[i])
            total = max((o - 1) * stride[i] + kernel[i] - d, 0)
            pads += [total // 2, total - total // 2]
    pw = [(0, 0), (0, 0)]
    for i in range(n):
        lo, hi = pads[2 * i], pads[2 * i + 1]
        if ceil_mode:
            span = x.shape[2 + i] + lo + hi - kernel[i]
            o = -(-span // stride[i]) + 1
            hi += max((o - 1) * stride[i] + kernel[i] - (x.shape[2 + i] + lo + hi), 0)
        pw.append((lo, hi))
    xf = x.astype(np.float64)
    fill = 0.0 if mode == "avg" else -np.inf
    padded = np.pad(xf, pw, constant_values=fill)
    ones = np.pad(np.ones(x.shape[2:]), pw[2:], constant_values=0.0)
    if count_pad:                       # (the explicit pads count, the ceil_mode overhang does not)
        ones = np.pad(np.ones([x.shape[2 + i] + pads[2 * i] + pads[2 * i + 1] for i in range(n)]),
                      [(0, pw[2 + i][1] - pads[2 * i + 1]) for i in range(n)], constant_values=0.0)
    win = np.lib.stride_tricks.sliding_window_view(padded, kernel, axis=tuple(range(2, 2 + n)))
    win = win[(slice(None), slice(None)) + tuple(slice(None, None, s) for s in stride)]
    axes = tuple(range(-n, 0))
    if mode == "max":
        return win.max(axis=axes).astype(x.dtype)
    if mode == "argmax":
        ids = np.pad(np.arange(int(np.prod(x.shape[2:]))).reshape(x.shape[2:]), pw[2:], constant_values=-1)
        iw = np.lib.stride_tricks.sliding_window_view(ids, kernel)[tuple(slice(None, None, s) for s in stride)]
        flat = win.reshape(win.shape[:2 + n] + (-1,))
        k = flat.argmax(-1)                                  # (the first max; padding is -inf)
        iflat = np.broadcast_to(iw.reshape(iw.shape[:n] + (-1,)), flat.shape)
        plane = int(np.prod(x.shape[2:]))
        chan = (np.arange(x.shape[1]) * plane).reshape((1, -1) + (1,) * n)      # (TF's index runs over C too)
        at = np.take_along_axis(iflat, k[..., None], -1)[..., 0] + chan
        return flat.max(-1).astype(x.dtype), at.astype(np.int32)
    cnt = np.lib.stride_tricks.sliding_window_view(ones, kernel)[tuple(slice(None, None, s) for s in stride)]
    with np.errstate(invalid="ignore", divide="ignore"):
        r = win.sum(axis=axes) / cnt.sum(axis=axes)
    return r.astype(x.dtype if x.dtype.kind == "f" else np.float32)


def adaptive_max_pool(x, bins, with_indices, out=None):
    x = np.asarray(x)
    n = len(bins)
    sp = x.shape[-n:]
    bins = tuple(sp[i] if b is None else b for i, b in enumerate(bins))
    vals = np.empty(x.shape[:-n] + bins, x.dtype)
    idx = np.empty(x.shape[:-n] + bins, np.int64)
    flat_ids = np.arange(int(np.prod(sp))).reshape(sp)
    for pos in np.ndindex(*bins):
        sl = tuple(slice(p * d // b, -(-(p + 1) * d // b)) for p, d, b in zip(pos, sp, bins))
        win = x[(Ellipsis,) + sl].reshape(x.shape[:-n] + (-1,))
        ids = flat_ids[sl].reshape(-1)
        if win.dtype.kind == "f":
            nan = np.isnan(win)
            k = np.where(nan.any(-1), nan.argmax(-1), np.nanargmax(np.where(nan, -np.inf, win), -1))
        else:
            k = win.argmax(-1)
        vals[(Ellipsis,) + pos] = np.take_along_axis(win, k[..., None], -1)[..., 0]
        idx[(Ellipsis,) + pos] = ids[k]
    return (vals, idx) if with_indices else vals


def nextafter(a, b, out=None):
    a, b = np.asarray(a), np.asarray(b)
    d = np.result_type(a, b)
    if d.kind != "f":
        d = np.float32
    return np.asarray(np.nextafter(a.astype(d), b.astype(d)))


def population_count(x, out=None):
    x = np.ascontiguousarray(x)
    if x.dtype.kind not in "iu":
        raise TypeError(f"POPULATION_COUNT: x must be an int tensor, got {x.dtype}")
    if x.dtype.kind == "i":            # (the two's-complement bits: -1 has them all)
        x = x.view(np.dtype(f"u{x.dtype.itemsize}"))
    return np.asarray(np.bitwise_count(x)).astype(np.uint8)


def _k_pair(k, band):
    k = np.asarray(k).reshape(-1).astype(np.int64)
    k0, k1 = (int(k[0]), int(k[-1]))
    if k0 > k1:
        raise ValueError(f"MATRIX_DIAG: k[0] ({k0}) must not exceed k[1] ({k1})")
    if band and k0 == k1:
        raise ValueError("MATRIX_DIAG: a k pair with k[0] == k[1] would drop the diagonals' dim; msvm fixes the "
                         "output's rank when it compiles: give k as one value")
    return k0, k1


def _right_aligned(d, align):
    sup, sub = align.split("_")
    return (sup if d >= 0 else sub) == "RIGHT"


def matrix_diag(*args, out=None):
    """MATRIX_DIAG's kernel: ``(*inputs, mode, align)``, TensorFlow's MatrixDiagV3 / MatrixDiagPartV3."""
    *ins, mode, align = args
    x = np.asarray(ins[0])
    band = np.asarray(ins[1]).size == 2
    k0, k1 = _k_pair(ins[1], band)
    pad = np.asarray(ins[-1]).reshape(()).astype(x.dtype)
    if mode == "diag":
        diags = x if band else x[..., None, :]
        if diags.shape[-2] != k1 - k0 + 1:
            raise ValueError(f"MATRIX_DIAG diag: {diags.shape[-2]} diagonals for k = ({k0}, {k1})")
        max_len = diags.shape[-1]
        rows, cols = int(np.asarray(ins[2])), int(np.asarray(ins[3]))
        min_rows, min_cols = max_len - min(k1, 0), max_len + max(k0, 0)
        if rows == -1 and cols == -1:
            rows = cols = max(min_rows, min_cols)
        elif rows == -1:
            rows = min_rows
        elif cols == -1:
            cols = min_cols
        if rows < min_rows or cols < min_cols:
            raise ValueError(f"MATRIX_DIAG diag: num_rows {rows} / num_cols {cols} are smaller than the diagonals "
                             f"need ({min_rows}, {min_cols})")
        res = np.full(diags.shape[:-2] + (rows, cols), pad, x.dtype)
        for d in range(k0, k1 + 1):
            n = min(rows + min(0, d), cols - max(0, d))
            if n <= 0:
                continue
            off = max_len - n if _right_aligned(d, align) else 0
            i = np.arange(n) - min(0, d)
            res[..., i, i + d] = diags[..., k1 - d, off:off + n]
        return res
    m, n_cols = x.shape[-2:]
    max_len = min(m + min(k1, 0), n_cols - max(k0, 0))
    res = np.full(x.shape[:-2] + (k1 - k0 + 1, max(max_len, 0)), pad, x.dtype)
    for d in range(k0, k1 + 1):
        n = min(m + min(0, d), n_cols - max(0, d))
        if n <= 0:
            continue
        off = max_len - n if _right_aligned(d, align) else 0
        i = np.arange(n) - min(0, d)
        res[..., k1 - d, off:off + n] = x[..., i, i + d]
    return res if band else res[..., 0, :]


def ps_roi_pooling(x, rois, spatial_scale, group_size, output_dim, out=None):
    """R-FCN's position-sensitive ROI pooling: each bin the mean of its window of its own channel."""
    x, rois = np.asarray(x), np.asarray(rois)
    n, c, h, w = x.shape
    b, _, r = rois.shape
    g = group_size
    if c != output_dim * g * g:
        raise RuntimeError(f"PS_ROI_POOLING: x has {c} channels, output_dim * group_size**2 is {output_dim * g * g}")
    if n != b * r:
        raise RuntimeError(f"PS_ROI_POOLING: x has {n} feature maps for {b} x {r} rois")
    res = np.zeros((b * r, output_dim, g, g), x.dtype)
    for k in range(b * r):
        bi, ri = divmod(k, r)
        idx, x1, y1, x2, y2 = (float(v) for v in rois[bi, :, ri])
        batch = int(idx)
        if not 0 <= batch < n:
            raise RuntimeError(f"PS_ROI_POOLING: roi {k} names feature map {batch} of {n}")
        sw, sh = np.round(x1) * spatial_scale, np.round(y1) * spatial_scale
        ew, eh = (np.round(x2) + 1.0) * spatial_scale, (np.round(y2) + 1.0) * spatial_scale
        bw, bh = max(ew - sw, 0.1) / g, max(eh - sh, 0.1) / g
        for ct in range(output_dim):
            for i in range(g):
                hs = min(max(int(np.floor(i * bh + sh)), 0), h)
                he = min(max(int(np.ceil((i + 1) * bh + sh)), 0), h)
                for j in range(g):
                    ws = min(max(int(np.floor(j * bw + sw)), 0), w)
                    we = min(max(int(np.ceil((j + 1) * bw + sw)), 0), w)
                    if he > hs and we > ws:
                        res[k, ct, i, j] = x[batch, (ct * g + i) * g + j, hs:he, ws:we].mean()
    return res


def nms_with_mask(boxes, iou_threshold, out=None):
    """Greedy NMS over boxes sorted by score (stable for equal scores): a box is dropped when its
    IOU (widths x2 - x1, no +1) with a kept, higher-scored box exceeds the threshold."""
    b = np.asarray(boxes)
    order = np.argsort(-b[:, 4].astype(np.float64), kind="stable")
    s = b[order]
    x1, y1, x2, y2 = (s[:, k].astype(np.float64) for k in range(4))
    area = np.maximum(x2 - x1, 0) * np.maximum(y2 - y1, 0)
    keep = np.ones(len(s), bool)
    for i in range(len(s)):
        if not keep[i]:
            continue
        w = np.maximum(np.minimum(x2[i], x2[i + 1:]) - np.maximum(x1[i], x1[i + 1:]), 0)
        h = np.maximum(np.minimum(y2[i], y2[i + 1:]) - np.maximum(y1[i], y1[i + 1:]), 0)
        inter = w * h
        with np.errstate(invalid="ignore", divide="ignore"):
            iou = inter / (area[i] + area[i + 1:] - inter)
        keep[i + 1:] &= ~(iou > iou_threshold)
    return s, order.astype(np.int32), keep


def lgamma(x, out=None):
    from scipy import special

    x = np.asarray(x)
    if x.dtype.kind != "f":
        x = x.astype(np.float32)
    return np.asarray(special.gammaln(x) if out is None else special.gammaln(x, out=out))


def pad_v3(*args, out=None):
    """PAD_V3's kernel: ``(x, paddings[, value], mode, contiguous)``."""
    *ins, mode, contiguous = args
    x = np.asarray(ins[0])
    p = [int(v) for v in np.asarray(ins[1]).reshape(-1)]
    value = np.asarray(ins[2]).reshape(()).item() if len(ins) > 2 else 0
    k = len(p) // 2
    pairs = [(p[2 * i], p[2 * i + 1]) for i in range(k)] if contiguous else [(p[i], p[k + i]) for i in range(k)]
    width = [(0, 0)] * (x.ndim - k) + pairs[::-1]            # (the pairs run from the last dim backwards)
    crop = tuple(slice(max(-lo, 0), x.shape[i] - max(-hi, 0)) for i, (lo, hi) in enumerate(width))
    y = x[crop]
    grow = [(max(lo, 0), max(hi, 0)) for lo, hi in width]
    for i, (lo, hi) in enumerate(grow):
        limit = y.shape[i] - (1 if mode == "reflect" else 0)
        if mode != "constant" and (lo > limit or hi > limit):
            raise ValueError(f"PAD_V3 ({mode}): pads ({lo}, {hi}) are too large for the dim {y.shape[i]} of axis {i}")
    if mode == "constant":
        return np.pad(y, grow, mode="constant", constant_values=value)
    return np.pad(y, grow, mode={"reflect": "reflect", "edge": "edge", "circular": "wrap"}[mode])


def conv_nd(x, w, conv, out=None):
    """CONV_ND: N-D cross-correlation by windows of the padded input and a tensordot per group
    (float64 accumulation)."""
    stride, pads, dil, group = conv
    x, w = np.asarray(x), np.asarray(w)
    n = x.ndim - 2
    ks = w.shape[2:]
    if pads == ("same",):
        pads = []
        for i in range(n):
            d = x.shape[2 + i]
            o = -(-d // stride[i])
            total = max((o - 1) * stride[i] + dil[i] * (ks[i] - 1) + 1 - d, 0)
            pads += [total // 2, total - total // 2]
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0)] + [(pads[2 * i], pads[2 * i + 1]) for i in range(n)])
    span = tuple(dil[i] * (ks[i] - 1) + 1 for i in range(n))
    win = np.lib.stride_tricks.sliding_window_view(xp, span, axis=tuple(range(2, 2 + n)))
    win = win[(slice(None), slice(None)) + tuple(slice(None, None, s) for s in stride)
              + (Ellipsis,) + tuple(slice(None, None, d) for d in dil)]       # [N, C, *out, *k]
    cg, og = x.shape[1] // group, w.shape[0] // group
    outs = []
    for g in range(group):
        part = win[:, g * cg:(g + 1) * cg]
        wg = w[g * og:(g + 1) * og].astype(np.float64)                       # [og, cg, *k]
        r = np.tensordot(part, wg, axes=([1] + list(range(2 + n, 2 + 2 * n)), list(range(1, 2 + n))))
        outs.append(np.moveaxis(r, -1, 1))                                   # [N, og, *out]
    res = np.concatenate(outs, 1)
    return res.astype(x.dtype if x.dtype.kind == "f" else np.float32)


def ctc_greedy_decoder(x, seq_len, merge_repeated, out=None):
    """TF's CTCGreedyDecoder: per batch row the argmax class of each step before its length, repeats
    merged (merge_repeated) and the blank (the last class) dropped; log_probability is minus the sum
    of the chosen logits."""
    x, seq_len = np.asarray(x), np.asarray(seq_len).astype(np.int64)
    t_max, batch, k = x.shape
    if (seq_len > t_max).any() or (seq_len < 0).any():
        raise RuntimeError(f"CTC_GREEDY_DECODER: sequence_length {seq_len.tolist()} should be less than or equal to "
                           f"max_time {t_max} (and >= 0)")
    idx, vals = [], []
    logp = np.zeros((batch, 1), x.dtype)
    longest = 0
    for b in range(batch):
        prev, n = -1, 0
        for t in range(seq_len[b]):
            c = int(np.argmax(x[t, b]))
            logp[b, 0] -= x[t, b, c]
            if c != k - 1 and not (merge_repeated and c == prev):
                idx.append((b, n))
                vals.append(c)
                n += 1
            prev = c
        longest = max(longest, n)
    return (np.asarray(idx, np.int64).reshape(-1, 2), np.asarray(vals, np.int64), np.asarray([batch, longest],
                                                                                            np.int64), logp)


def no_repeat_ngram(seq, log_probs, ngram_size, out=None):
    seq, lp = np.asarray(seq), np.array(log_probs, copy=True)
    n = ngram_size
    length = seq.shape[-1]
    flat_s, flat_p = seq.reshape(-1, length), lp.reshape(-1, lp.shape[-1])
    for r in range(flat_s.shape[0]):
        s = flat_s[r]
        tail = s[length - (n - 1):] if n > 1 else s[:0]
        for i in range(length - n + 1):
            if n == 1 or np.array_equal(s[i:i + n - 1], tail):
                tok = int(s[i + n - 1])
                if 0 <= tok < flat_p.shape[1]:
                    flat_p[r, tok] = -np.finfo(np.float32).max
    return flat_p.reshape(lp.shape)


KERNELS_MORE = {
    "NO_REPEAT_NGRAM": no_repeat_ngram,
    "CTC_GREEDY_DECODER": ctc_greedy_decoder,
    "CONV_ND": conv_nd,
    "PAD_V3": pad_v3,
    "NMS_WITH_MASK": nms_with_mask,
    "LGAMMA": lgamma,
    "PS_ROI_POOLING": ps_roi_pooling,
    "MATRIX_DIAG": matrix_diag,
    "BROADCAST_NEXTAFTER": nextafter,
    "POPULATION_COUNT": population_count,
    "POOL_ND": pool_nd,
    "ADAPTIVE_MAX_POOL": adaptive_max_pool,
    "CROP_AND_RESIZE": crop_and_resize,
    "RANDOM": random,
    "UNIQUE": unique,
    "CUMULATE": cumulate,
    "LINALG": linalg,
    "MASKED_SELECT": masked_select,
}


def format_value(v) -> str:
    """A printed value as MindSpore's Print writes it: tensors with their shape and dtype."""
    from .. import dtype as dt

    if isinstance(v, np.ndarray):
        name = dt.from_numpy(v.dtype).name
        return f"Tensor(shape={list(v.shape)}, dtype={name}, value={np.array2string(v) if v.ndim else v.item()})"
    if isinstance(v, tuple):
        return "(" + ", ".join(format_value(x) for x in v) + ("," if len(v) == 1 else "") + ")"
    return str(v)


def print_parts(parts, vals) -> None:
    """PRINT's work: the parts written one after another, each None replaced by the next of
    ``vals`` (the template holds the separators and the end), flushed."""
    import sys

    it = iter(vals)
    sys.stdout.write("".join(format_value(next(it)) if p is None else p for p in parts))
    sys.stdout.flush()
