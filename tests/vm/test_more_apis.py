"""MindSpore APIs issue 21 added (padding modes, strided_slice, cumulative ops, linear algebra,
masked_select, linspace/range, ...), against numpy, eagerly and inside construct, over random
shapes and edge values (NaN, +-inf, empty and 0-d tensors)."""

import msvm as ms
import numpy as np
import pytest
from cells import Fn
from msvm import nn, ops


def both(fn, tensors, *consts, **kw):
    """fn's result eagerly and compiled (they must agree), as numpy."""
    if kw:
        fn = (lambda f: lambda *a: f(*a, **kw))(fn)
    eager = fn(*[ms.Tensor(t) for t in tensors], *consts)
    graph = Fn(fn, *consts)(*[ms.Tensor(t) for t in tensors])
    as_np = (lambda r: tuple(v.asnumpy() for v in r)) if isinstance(eager, tuple) else (lambda r: r.asnumpy())
    e, g = as_np(eager), as_np(graph)
    for a, b in zip(e if isinstance(e, tuple) else (e,), g if isinstance(g, tuple) else (g,)):
        np.testing.assert_array_equal(a, b)
    return e


# ---------------------------------------------------------------- padding

@pytest.mark.parametrize("mode", ["REFLECT", "SYMMETRIC", "CONSTANT"])
def test_nn_pad_modes_against_numpy(mode, rng):
    for _ in range(6):
        r = int(rng.integers(1, 5))
        shape = tuple(int(v) for v in rng.integers(2, 6, r))
        pads = tuple((int(rng.integers(0, d)), int(rng.integers(0, d))) for d in shape)
        x = rng.standard_normal(shape).astype(np.float32)
        x.flat[0] = np.nan
        got = nn.Pad(pads, mode)(ms.Tensor(x)).asnumpy()
        np.testing.assert_array_equal(got, np.pad(x, pads, mode.lower()))


def test_pad_faces_and_errors(rng):
    x = rng.integers(-5, 5, (3, 4)).astype(np.int16)
    np.testing.assert_array_equal(both(lambda t: ops.Pad(((1, 0), (1, 1)))(t), [x]), np.pad(x, ((1, 0), (1, 1))))
    for mode, np_mode in (("reflect", "reflect"), ("replicate", "edge"), ("circular", "wrap")):
        got = both(lambda t, m=mode: ops.pad(t, (1, 2, 2, 1), mode=m), [x.astype(np.float32)])
        np.testing.assert_array_equal(got, np.pad(x.astype(np.float32), ((2, 1), (1, 2)), np_mode))
    crop = ops.pad(ms.Tensor(x.astype(np.float32)), (1, -1), mode="circular").asnumpy()
    np.testing.assert_array_equal(crop, np.pad(x[:, :-1].astype(np.float32), ((0, 0), (1, 0)), "wrap"))
    np.testing.assert_array_equal(ops.MirrorPad("SYMMETRIC")(ms.Tensor(x), ((1, 1), (0, 2))).asnumpy(),
                                  np.pad(x, ((1, 1), (0, 2)), "symmetric"))
    with pytest.raises(ValueError):
        nn.Pad(((0, 0), (-1, -1)))(ms.Tensor(x))
    with pytest.raises(ValueError):
        nn.Pad(((0, 0), (1, 0)))(ms.Tensor(x[0]))
    with pytest.raises(TypeError):
        nn.Pad((0, 2))
    with pytest.raises(ValueError):
        nn.Pad(((0, 0),) * 5)
    with pytest.raises(ValueError):
        nn.Pad(((3, 0), (0, 0)), "REFLECT")(ms.Tensor(x))


def test_pad_under_symbolic_dims_recompiles_per_shape(rng):
    net = nn.Pad(((0, 0), (2, 1)), "REFLECT")
    net.set_inputs(ms.Tensor(shape=[None, None], dtype=ms.float32))
    for shape in ((2, 5), (3, 4), (2, 5)):
        x = rng.standard_normal(shape).astype(np.float32)
        np.testing.assert_array_equal(net(ms.Tensor(x)).asnumpy(), np.pad(x, ((0, 0), (2, 1)), "reflect"))


def test_densenet121_builds_its_pool0_with_nn_pad_and_runs():
    import msvm.compat  # noqa: F401

    ms.as_mindspore()
    from mindcv.models import create_model

    net = create_model("densenet121", pretrained=False)
    net.set_train(False)
    names = [p.name for p in net.get_parameters()]
    assert names[:3] == ["features.conv0.weight", "features.norm0.gamma", "features.norm0.beta"]
    pool0 = net.features.pool0
    x = np.random.default_rng(0).standard_normal((1, 64, 9, 9)).astype(np.float32)
    ref = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    ref = np.lib.stride_tricks.sliding_window_view(ref, (3, 3), axis=(2, 3))[:, :, ::2, ::2].max(axis=(-1, -2))
    np.testing.assert_allclose(pool0(ms.Tensor(x)).asnumpy(), ref)
    y = net(ms.Tensor(np.random.default_rng(1).standard_normal((1, 3, 64, 64)).astype(np.float32))).asnumpy()
    assert y.shape == (1, 1000) and np.isfinite(y).all()


# ---------------------------------------------------------------- strided_slice

def test_strided_slice_function_takes_tensors(rng):
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    b, e, s = (ms.Tensor(np.array(v, np.int64)) for v in ([2, 0, 0], [3, 2, 5], [1, 1, 2]))
    np.testing.assert_array_equal(ops.strided_slice(ms.Tensor(x), b, e, s).asnumpy(), x[2:3, 0:2, 0:5:2])
    got = both(lambda t: ops.strided_slice(t, (0, 1, 4), (3, 4, 0), (2, 1, -1), shrink_axis_mask=2), [x])
    np.testing.assert_array_equal(got, x[0:3:2, 1, 4:0:-1])


# ---------------------------------------------------------------- cumulative

def _cum_ref(x, axis, mode):
    a = np.moveaxis(x, axis, 0)
    vals, idx = np.empty_like(a), np.zeros(a.shape, np.int64)
    for pos in np.ndindex(a.shape[1:]):
        cur, at = None, 0
        for i in range(a.shape[0]):
            v = a[(i,) + pos]
            if cur is None or (not np.isnan(cur) and (np.isnan(v) or (v <= cur if mode == "min" else v >= cur))):
                cur, at = v, i
            vals[(i,) + pos], idx[(i,) + pos] = cur, at
    return np.moveaxis(vals, 0, axis), np.moveaxis(idx, 0, axis)


@pytest.mark.parametrize("mode", ["min", "max"])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.uint8, np.float64])
def test_cummin_cummax_against_a_loop(mode, dtype, rng):
    fn = ops.cummin if mode == "min" else ops.cummax
    for shape in ((7,), (3, 4), (2, 3, 5), (0, 3)):
        x = rng.integers(0, 5, shape).astype(dtype)          # (ties: the last index wins)
        if dtype in (np.float32, np.float64) and x.size:
            x.flat[rng.integers(x.size)] = np.nan
            x.flat[rng.integers(x.size)] = -np.inf
        for axis in range(-len(shape), len(shape)):
            v, i = both(fn, [x], axis)
            rv, ri = _cum_ref(x, axis, mode)
            np.testing.assert_array_equal(v, rv)
            np.testing.assert_array_equal(i, ri)
    with pytest.raises(ValueError):
        fn(ms.Tensor(np.zeros((2, 2), np.float32)), 2)


def test_cumprod_faces(rng):
    x = rng.uniform(0.5, 1.5, (3, 4)).astype(np.float32)
    np.testing.assert_allclose(both(ops.cumprod, [x], 1), np.cumprod(x, 1), rtol=1e-6)
    ex = ops.CumProd(exclusive=True, reverse=True)(ms.Tensor(x), 0).asnumpy()
    ref = np.flip(np.cumprod(np.flip(x, 0), 0), 0)
    np.testing.assert_allclose(ex, np.concatenate([ref[1:], np.ones((1, 4), np.float32)]), rtol=1e-6)
    np.testing.assert_array_equal(ops.cumprod(ms.Tensor(np.array([2, 3, 4], np.int32)), 0).asnumpy(), [2, 6, 24])


# ---------------------------------------------------------------- linear algebra

@pytest.mark.parametrize("dtype,tol", [(np.float32, 1e-4), (np.float64, 1e-10)])
def test_linalg_against_numpy(dtype, tol, rng):
    for batch in ((), (3,), (2, 1)):
        a = rng.standard_normal(batch + (4, 4)).astype(dtype) + 4 * np.eye(4, dtype=dtype)
        b = rng.standard_normal(batch + (4, 2)).astype(dtype)
        for adjoint in (False, True):
            want = np.linalg.solve(np.swapaxes(a, -1, -2) if adjoint else a, b)
            np.testing.assert_allclose(both(ops.matrix_solve, [a, b], adjoint), want, rtol=tol, atol=tol)
        spd = a @ np.swapaxes(a, -1, -2)
        low = both(ops.cholesky, [spd])
        np.testing.assert_allclose(low, np.linalg.cholesky(spd), rtol=tol, atol=tol)
        up = ops.cholesky(ms.Tensor(spd), upper=True).asnumpy()
        np.testing.assert_allclose(up, np.swapaxes(low, -1, -2), rtol=tol, atol=tol)
        np.testing.assert_allclose(both(ops.cholesky_inverse, [low]), np.linalg.inv(spd), rtol=tol * 10, atol=tol)
        np.testing.assert_allclose(ops.cholesky_inverse(ms.Tensor(up), upper=True).asnumpy(), np.linalg.inv(spd),
                                   rtol=tol * 10, atol=tol)
        w = rng.standard_normal(batch + (3, 5)).astype(dtype)
        np.testing.assert_allclose(both(ops.pinv, [w]), np.linalg.pinv(w), rtol=tol * 10, atol=tol)
    x = rng.standard_normal((6, 3)).astype(dtype)
    y = rng.standard_normal((6, 2)).astype(dtype)
    np.testing.assert_allclose(both(ops.lstsq, [x, y]), np.linalg.lstsq(x, y, rcond=None)[0], rtol=tol * 10,
                               atol=tol)
    np.testing.assert_allclose(ms.Tensor(x).lstsq(ms.Tensor(y)).asnumpy(), np.linalg.lstsq(x, y, rcond=None)[0],
                               rtol=tol * 10, atol=tol)
    with pytest.raises(ValueError, match="positive definite"):
        ops.cholesky(ms.Tensor(-np.eye(3, dtype=dtype)))
    with pytest.raises(ValueError, match="square"):
        ops.matrix_solve(ms.Tensor(x), ms.Tensor(y))


# ---------------------------------------------------------------- masks, linspace, range

def test_masked_select_and_fill(rng):
    for shape, mshape in (((3, 4), (3, 4)), ((3, 4), (4,)), ((0, 2), (0, 2)), ((2, 1), (2, 3))):
        x = rng.standard_normal(shape).astype(np.float32)
        m = rng.random(mshape) < 0.5
        xb, mb = np.broadcast_arrays(x, m)
        np.testing.assert_array_equal(both(ops.masked_select, [x, m]), xb[mb])
    x = rng.standard_normal((3, 4)).astype(np.float32)
    m = rng.random((3, 4)) < 0.5
    got = ops.MaskedFill()(ms.Tensor(x), ms.Tensor(m), ms.Tensor(np.float32(7.0))).asnumpy()
    np.testing.assert_array_equal(got, np.where(m, np.float32(7), x))

    class Sum(nn.Cell):
        def construct(self, x, m):
            return ops.masked_select(x, m).sum() * 2

    np.testing.assert_allclose(Sum()(ms.Tensor(x), ms.Tensor(m)).asnumpy(), x[m].sum() * 2, rtol=1e-6)


@pytest.mark.parametrize("start,stop", [(5, 150), (-25, 147), (-25.3, -147), (0.0, 0.0)])
@pytest.mark.parametrize("num", [1, 2, 12, 37])
def test_linspace(start, stop, num):
    got = both(ops.linspace, [np.float32(start), np.float32(stop)], num)
    np.testing.assert_allclose(got, np.linspace(np.float32(start), np.float32(stop), num), rtol=1e-6, atol=1e-5)
    assert got[-1] == np.float32(stop if num > 1 else start)
    np.testing.assert_allclose(ops.LinSpace()(ms.Tensor(np.float32(start)), ms.Tensor(np.float32(stop)), num)
                               .asnumpy(), got)
    with pytest.raises(ValueError):
        ops.linspace(ms.Tensor(np.float32(0)), ms.Tensor(np.float32(1)), 0)


def test_range_faces():
    np.testing.assert_array_equal(nn.Range(0, 100, 10)().asnumpy(), np.arange(0, 100, 10))
    np.testing.assert_allclose(nn.Range(10.0, 100.0, 20.0)().asnumpy(), [10, 30, 50, 70, 90])
    r = ops.Range()(*(ms.Tensor(np.array(v, np.int32)) for v in (8, 1, -1)))
    assert r.dtype == ms.int32
    np.testing.assert_array_equal(r.asnumpy(), np.arange(8, 1, -1))
    np.testing.assert_array_equal(ops.range(2.0, 5.0, 1.0).asnumpy(), [2.0, 3.0, 4.0])
    assert nn.Range(5, 5)().shape == (0,)
    with pytest.raises(ValueError):
        ops.range(0, 5, 0)


# ---------------------------------------------------------------- boxes, ranking, sequences

def _boxes(rng, n):
    xy = rng.uniform(0, 50, (n, 2))
    wh = rng.uniform(1, 40, (n, 2))
    return np.concatenate([xy, xy + wh], 1).astype(np.float32)


def test_iou_and_iof_against_numpy(rng):
    a, g = _boxes(rng, 5), _boxes(rng, 3)
    ref_inter = np.zeros((3, 5))
    for m in range(3):
        for n in range(5):
            w = max(min(a[n, 2], g[m, 2]) - max(a[n, 0], g[m, 0]) + 1, 0)
            h = max(min(a[n, 3], g[m, 3]) - max(a[n, 1], g[m, 1]) + 1, 0)
            ref_inter[m, n] = w * h
    area = lambda b: (b[:, 2] - b[:, 0] + 1) * (b[:, 3] - b[:, 1] + 1)  # noqa: E731
    union = area(a)[None, :] + area(g)[:, None] - ref_inter
    np.testing.assert_allclose(both(ops.iou, [a, g]), ref_inter / union, rtol=1e-5)
    np.testing.assert_allclose(ops.IOU("iof")(ms.Tensor(a), ms.Tensor(g)).asnumpy(), ref_inter / area(g)[:, None],
                               rtol=1e-5)
    with pytest.raises(KeyError):
        ops.iou(ms.Tensor(a), ms.Tensor(g), "bad")


def test_check_valid_and_box_encode_decode_round_trip(rng):
    anchor = np.array([[50, 0, 100, 700], [-2, 2, 8, 100], [10, 20, 300, 2000]], np.float32)
    metas = np.array([768, 1280, 1], np.float32)
    np.testing.assert_array_equal(both(ops.check_valid, [anchor, metas]), [True, False, False])
    a, g = _boxes(rng, 6), _boxes(rng, 6)
    means, stds = (0.1, -0.1, 0.0, 0.2), (0.5, 0.5, 1.0, 1.0)
    d = ops.BoundingBoxEncode(means, stds)(ms.Tensor(a), ms.Tensor(g)).asnumpy()
    pw, gw = a[:, 2] - a[:, 0] + 1, g[:, 2] - g[:, 0] + 1
    np.testing.assert_allclose(d[:, 2], (np.log(gw / pw) - 0.0) / 1.0, rtol=1e-5)
    back = ops.BoundingBoxDecode((200, 200), means, stds, wh_ratio_clip=1e-6)(ms.Tensor(a), ms.Tensor(d)).asnumpy()
    np.testing.assert_allclose(back, g, rtol=1e-4, atol=1e-3)
    clipped = ops.bounding_box_decode(ms.Tensor(a), ms.Tensor(np.full((6, 4), 5.0, np.float32)), (30, 20)).asnumpy()
    assert clipped[:, [0, 2]].max() <= 19 and clipped[:, [1, 3]].max() <= 29 and clipped.min() >= 0


def test_in_top_k_and_searchsorted(rng):
    p = rng.integers(0, 4, (6, 5)).astype(np.float32)
    p[0, 2] = np.nan
    t = np.array([0, 1, 2, 3, 4, 7], np.int32)
    for k in (1, 2, 5, 0):
        got = both(lambda x, y, k=k: ops.InTopK(k)(x, y), [p, t])
        ref = [bool(0 <= ti < 5 and np.isfinite(p[i, ti]) and (p[i] > p[i, ti]).sum() < k) for i, ti in enumerate(t)]
        np.testing.assert_array_equal(got, ref)
    seq = np.sort(rng.integers(0, 10, (3, 8)), 1).astype(np.float32)
    vals = rng.integers(-1, 11, (3, 4)).astype(np.float32)
    for right in (False, True):
        got = both(lambda s, v, r=right: ops.searchsorted(s, v, right=r), [seq, vals])
        ref = np.stack([np.searchsorted(seq[i], vals[i], "right" if right else "left") for i in range(3)])
        np.testing.assert_array_equal(got, ref)
    one = ops.SearchSorted(ms.int32, True)(ms.Tensor(seq[0]), ms.Tensor(vals)).asnumpy()
    assert one.dtype == np.int32
    np.testing.assert_array_equal(one, np.searchsorted(seq[0], vals, "right"))


def test_reverse_sequence_expand_embedding_fill_diagonal(rng):
    x = rng.standard_normal((4, 5, 3)).astype(np.float32)
    lens = np.array([1, 3, 5, 0], np.int64)
    got = both(lambda a, b: ops.ReverseSequence(seq_dim=1, batch_dim=0)(a, b), [x, lens])
    ref = x.copy()
    for b, n in enumerate(lens):
        ref[b, :n] = x[b, :n][::-1]
    np.testing.assert_array_equal(got, ref)
    np.testing.assert_array_equal(both(ops.expand, [x[:1]], (4, -1, -1)), np.broadcast_to(x[:1], (4, 5, 3)))
    params = rng.standard_normal((6, 2)).astype(np.float32)
    idx = np.array([[3, 4], [9, 2]], np.int32)
    got = ops.EmbeddingLookup()(ms.Tensor(params), ms.Tensor(idx), 2).asnumpy()
    ref = np.where(((idx - 2 >= 0) & (idx - 2 < 6))[..., None], params[np.clip(idx - 2, 0, 5)], 0)
    np.testing.assert_array_equal(got, ref)
    for shape, wrap in (((5, 3), False), ((7, 3), True), ((3, 5), False), ((3, 3, 3), False)):
        a = rng.standard_normal(shape).astype(np.float32)
        ref = a.copy()
        np.fill_diagonal(ref, 9.5, wrap=wrap)
        np.testing.assert_array_equal(both(lambda t, w=wrap: ops.FillDiagonal(9.5, w)(t), [a]), ref)


def test_cross_addmv_addr_batch_dot_pdist(rng):
    from scipy.spatial.distance import pdist as sp_pdist

    a, b = rng.standard_normal((2, 3, 4)).astype(np.float32), rng.standard_normal((2, 3, 4)).astype(np.float32)
    np.testing.assert_allclose(both(ops.cross, [a, b], 1), np.cross(a, b, axis=1), rtol=1e-5, atol=1e-6)
    m, v, inp = (rng.standard_normal(s).astype(np.float32) for s in ((3, 4), (4,), (3,)))
    np.testing.assert_allclose(ms.Tensor(inp).addmv(ms.Tensor(m), ms.Tensor(v)).asnumpy(), inp + m @ v, rtol=1e-5)
    v1, v2, x2 = (rng.standard_normal(s).astype(np.float32) for s in ((3,), (2,), (3, 2)))
    np.testing.assert_allclose(ms.Tensor(x2).addr(ms.Tensor(v1), ms.Tensor(v2)).asnumpy(), x2 + np.outer(v1, v2),
                               rtol=1e-5)
    p, q = rng.standard_normal((5, 3, 4)).astype(np.float32), rng.standard_normal((5, 4, 2)).astype(np.float32)
    np.testing.assert_allclose(both(ops.batch_dot, [p, q], (2, 1)), np.einsum("bij,bjk->bik", p, q), rtol=1e-5)
    u, w = rng.standard_normal((7, 3)).astype(np.float32), rng.standard_normal((7, 3)).astype(np.float32)
    np.testing.assert_allclose(both(ops.batch_dot, [u, w], (1, 1)), (u * w).sum(1, keepdims=True), rtol=1e-5)
    pts = rng.standard_normal((6, 3)).astype(np.float32)
    for pv, metric in ((2.0, "euclidean"), (1.0, "cityblock"), (float("inf"), "chebyshev")):
        np.testing.assert_allclose(both(lambda t, pv=pv: ops.pdist(t, p=pv), [pts]), sp_pdist(pts, metric),
                                   rtol=1e-5)


def test_losses_and_small_layers(rng):
    logits = rng.standard_normal((4, 5)).astype(np.float32)
    labels = np.array([0, 3, 4, 1], np.int32)
    w = rng.uniform(0.5, 2, 5).astype(np.float32)
    logp = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    picked = -logp[np.arange(4), labels] * w[labels]
    np.testing.assert_allclose(both(lambda a, b, c: ops.cross_entropy(a, b, c), [logits, labels, w]),
                               picked.sum() / w[labels].sum(), rtol=1e-5)
    loss, total = ops.NLLLoss("none")(ms.Tensor(logp), ms.Tensor(labels), ms.Tensor(w))
    np.testing.assert_allclose(loss.asnumpy(), picked, rtol=1e-5)
    np.testing.assert_allclose(total.asnumpy(), w[labels].sum(), rtol=1e-6)
    probs = np.eye(5, dtype=np.float32)[labels]
    sx = nn.SoftmaxCrossEntropyWithLogits()(ms.Tensor(logits), ms.Tensor(probs)).asnumpy()
    np.testing.assert_allclose(sx, -logp[np.arange(4), labels], rtol=1e-5)
    sp = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")(ms.Tensor(logits), ms.Tensor(labels))
    np.testing.assert_allclose(sp.asnumpy(), -logp[np.arange(4), labels].mean(), rtol=1e-5)
    oh = nn.OneHot(0, 6, 2.0, -1.0)(ms.Tensor(labels)).asnumpy()
    np.testing.assert_array_equal(oh, np.where(np.eye(6)[labels].T > 0, 2.0, -1.0))
    x = rng.standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_allclose(nn.Norm(axis=1, keep_dims=True)(ms.Tensor(x)).asnumpy(),
                               np.linalg.norm(x, axis=1, keepdims=True), rtol=1e-6)
    fmt = ops.DataFormatDimMap("NHWC", "NCHW")(ms.Tensor(np.array([0, 1, 2, 3, -1], np.int32))).asnumpy()
    np.testing.assert_array_equal(fmt, [0, 3, 1, 2, 2])


# ---------------------------------------------------------------- pools and resizing

def _pool_ref(x, mode, k, s, pads, count_pad):
    n = len(k)
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0)] + [(pads[2 * i], pads[2 * i + 1]) for i in range(n)],
                constant_values=np.nan)
    outs = [(xp.shape[2 + i] - k[i]) // s[i] + 1 for i in range(n)]
    res = np.empty(x.shape[:2] + tuple(outs))
    for pos in np.ndindex(*outs):
        win = xp[(slice(None), slice(None)) + tuple(slice(p * st, p * st + kk) for p, st, kk in zip(pos, s, k))]
        win = win.reshape(x.shape[:2] + (-1,))
        real = ~np.isnan(win)
        if mode == "max":
            res[(slice(None), slice(None)) + pos] = np.where(real, win, -np.inf).max(-1)
        else:
            total = np.where(real, win, 0).sum(-1)
            res[(slice(None), slice(None)) + pos] = total / (win.shape[-1] if count_pad else real.sum(-1))
    return res


@pytest.mark.parametrize("n", [1, 3])
def test_pool_nd_against_loops(n, rng):
    for _ in range(4):
        shape = (2, 3) + tuple(int(v) for v in rng.integers(3, 7, n))
        x = rng.standard_normal(shape).astype(np.float32)
        k = tuple(int(v) for v in rng.integers(1, 4, n))
        s = tuple(int(v) for v in rng.integers(1, 3, n))
        p = tuple(int(rng.integers(0, kk // 2 + 1)) for kk in k)
        pads = tuple(v for a in p for v in (a, a))
        for mode in ("max", "avg"):
            for count_pad in (True, False):
                if n == 1:
                    if mode == "max":
                        continue
                    got = both(lambda t, k=k, s=s, p=p, c=count_pad: ops.avg_pool1d(t, k[0], s[0], p[0],
                                                                                    count_include_pad=c), [x])
                else:
                    got = both(lambda t, k=k, s=s, p=p, c=count_pad, m=mode: ops.avg_pool3d(t, k, s, p,
                                                                                            count_include_pad=c)
                               if m == "avg" else ops.max_pool3d(t, k, s, p), [x])
                np.testing.assert_allclose(got, _pool_ref(x, mode, k, s, pads, count_pad), rtol=1e-5, atol=1e-6)
    x = rng.standard_normal((1, 2, 4, 5, 6)).astype(np.float32)
    same = ops.MaxPool3D(kernel_size=3, strides=2, pad_mode="SAME")(ms.Tensor(x)).asnumpy()
    assert same.shape == (1, 2, 2, 3, 3)
    np.testing.assert_allclose(same, _pool_ref(x, "max", (3, 3, 3), (2, 2, 2), (0, 1, 1, 1, 0, 1), True), rtol=1e-6)
    valid = ops.AvgPool3D(kernel_size=(2, 2, 3), strides=1, pad_mode="valid")(ms.Tensor(x)).asnumpy()
    np.testing.assert_allclose(valid, _pool_ref(x, "avg", (2, 2, 3), (1, 1, 1), (0,) * 6, True), rtol=1e-5)
    ceil = ops.max_pool3d(ms.Tensor(x), 2, 2, ceil_mode=True).asnumpy()
    assert ceil.shape == (1, 2, 2, 3, 3)
    np.testing.assert_allclose(ceil, _pool_ref(x, "max", (2, 2, 2), (2, 2, 2), (0, 0, 0, 1, 0, 0), True)[..., :3],
                               rtol=1e-6)


def test_adaptive_max_pools_with_indices(rng):
    x = rng.standard_normal((2, 3, 9, 7)).astype(np.float32)
    x[0, 0, 1, 1] = np.nan
    vals, idx = both(lambda t: ops.adaptive_max_pool2d(t, (4, None), True), [x])
    assert vals.shape == idx.shape == (2, 3, 4, 7) and idx.dtype == np.int64
    for i in range(4):
        r0, r1 = i * 9 // 4, -(-(i + 1) * 9 // 4)
        for j in range(7):
            win = x[:, :, r0:r1, j:j + 1].reshape(2, 3, -1)
            ref = np.where(np.isnan(win).any(-1), np.nan, np.nanmax(win, -1))
            np.testing.assert_array_equal(vals[:, :, i, j], ref)
            flat = x.reshape(2, 3, -1)
            np.testing.assert_array_equal(np.take_along_axis(flat, idx[:, :, i, j][..., None], -1)[..., 0], ref)
    one = nn.AdaptiveMaxPool1d(3)(ms.Tensor(x[:, :, 0])).asnumpy()
    np.testing.assert_array_equal(one, np.stack([x[:, :, 0, a:b].max(-1) for a, b in ((0, 3), (2, 5), (4, 7))], -1))
    assert nn.AdaptiveMaxPool2d(5)(ms.Tensor(x)).shape == (2, 3, 5, 5)


def _crop_ref(img, boxes, idx, size, method, extra):
    b, h, w, c = img.shape
    out = np.full((len(boxes), size[0], size[1], c), extra, np.float64)
    for n, (y1, x1, y2, x2) in enumerate(boxes):
        for i in range(size[0]):
            y = y1 * (h - 1) + i * (y2 - y1) * (h - 1) / (size[0] - 1) if size[0] > 1 else 0.5 * (y1 + y2) * (h - 1)
            for j in range(size[1]):
                x = x1 * (w - 1) + j * (x2 - x1) * (w - 1) / (size[1] - 1) if size[1] > 1 else \
                    0.5 * (x1 + x2) * (w - 1)
                if not (0 <= y <= h - 1 and 0 <= x <= w - 1):
                    continue
                src = img[idx[n]].astype(np.float64)
                if method == "nearest":
                    out[n, i, j] = src[int(np.floor(y + 0.5)), int(np.floor(x + 0.5))]
                    continue
                t, l_ = int(np.floor(y)), int(np.floor(x))
                bt, r = min(int(np.ceil(y)), h - 1), min(int(np.ceil(x)), w - 1)
                top = src[t, l_] + (src[t, r] - src[t, l_]) * (x - l_)
                bot = src[bt, l_] + (src[bt, r] - src[bt, l_]) * (x - l_)
                out[n, i, j] = top + (bot - top) * (y - t)
    return out


@pytest.mark.parametrize("method", ["bilinear", "nearest"])
def test_crop_and_resize_against_loops(method, rng):
    img = rng.standard_normal((2, 7, 6, 3)).astype(np.float32)
    boxes = np.array([[0, 0.5, 0.5, 0.0], [0, 0, 0.75, 1.75], [0.2, 0.1, 0.9, 0.8], [0.5, 0.5, 0.5, 0.5]],
                     np.float32)
    idx = np.array([1, 0, 1, 0], np.int32)
    for size in ((5, 3), (1, 1), (4, 6)):
        got = both(lambda a, b, c, s=size: ops.CropAndResize(method, 0.5)(a, b, c, s), [img, boxes, idx])
        np.testing.assert_allclose(got, _crop_ref(img, boxes, idx, size, method, 0.5), rtol=1e-5, atol=1e-5)
    with pytest.raises(NotImplementedError):
        ops.CropAndResize("bilinear_v2")(ms.Tensor(img), ms.Tensor(boxes), ms.Tensor(idx), (2, 2))


def test_resize_linear_1d(rng):
    x = rng.standard_normal((2, 3, 5)).astype(np.float32)
    for n in (1, 5, 9, 3):
        for mode in ("align_corners", "half_pixel"):
            got = both(lambda t, n=n, m=mode: ops.ResizeLinear1D(m)(t, ms.Tensor(np.array([n], np.int64))), [x])
            i = np.arange(n)
            src = (i * 4 / (n - 1) if n > 1 else np.zeros(n)) if mode == "align_corners" else \
                np.clip((i + 0.5) * 5 / n - 0.5, 0, 4)
            ref = np.stack([np.interp(src, np.arange(5), row) for row in x.reshape(-1, 5)]).reshape(2, 3, n)
            np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- small math, layers and API surface

def test_nextafter_population_count_lrn_bidense(rng):
    a = np.array([0.0, 1.0, -1.0, np.inf, np.nan, 1e-45], np.float32)
    b = np.array([1.0, 0.0, -np.inf, 0.0, 1.0, 0.0], np.float32)
    np.testing.assert_array_equal(both(ops.nextafter, [a, b]), np.nextafter(a, b))
    np.testing.assert_array_equal(ops.NextAfter()(ms.Tensor(a.astype(np.float64)), ms.Tensor(b.astype(np.float64)))
                                  .asnumpy(), np.nextafter(a.astype(np.float64), b.astype(np.float64)))
    ints = np.array([0, 1, -1, 255, 2 ** 30, -2 ** 31], np.int32)
    got = both(ops.population_count, [ints])
    assert got.dtype == np.uint8
    np.testing.assert_array_equal(got, [bin(int(v) & 0xFFFFFFFF).count("1") for v in ints])
    with pytest.raises(Exception, match="int tensor"):
        ops.population_count(ms.Tensor(np.zeros(2, np.float32)))
    x = rng.standard_normal((2, 7, 3, 2)).astype(np.float32)
    for r, bias, alpha, beta in ((2, 1.0, 0.5, 0.75), (5, 2.0, 1.0, 0.5), (0, 1.0, 1.0, 1.0)):
        got = both(lambda t, r=r, bi=bias, al=alpha, be=beta: ops.LRN(r, bi, al, be)(t), [x])
        sq = np.stack([(x[:, max(c - r, 0):c + r + 1] ** 2).sum(1) for c in range(7)], 1)
        np.testing.assert_allclose(got, x / (bias + alpha * sq) ** beta, rtol=1e-5, atol=1e-6)
    w = rng.standard_normal((4, 3, 5)).astype(np.float32)
    bvec = rng.standard_normal(4).astype(np.float32)
    for lead in ((), (6,), (2, 3)):
        x1 = rng.standard_normal(lead + (3,)).astype(np.float32)
        x2 = rng.standard_normal(lead + (5,)).astype(np.float32)
        ref = np.einsum("...i,oij,...j->...o", x1, w, x2) + bvec
        np.testing.assert_allclose(both(ops.bidense, [x1, x2, w, bvec]), ref, rtol=1e-4, atol=1e-5)
    layer = nn.BiDense(3, 5, 4)
    x1, x2 = rng.standard_normal((8, 3)).astype(np.float32), rng.standard_normal((8, 5)).astype(np.float32)
    ref = np.einsum("ni,oij,nj->no", x1, layer.weight.asnumpy(), x2) + layer.bias.asnumpy()
    np.testing.assert_allclose(layer(ms.Tensor(x1), ms.Tensor(x2)).asnumpy(), ref, rtol=1e-4, atol=1e-5)
    assert np.abs(layer.weight.asnumpy()).max() <= 1 / np.sqrt(3)


def test_api_surface_mutable_syntax_level_compile_tensor_shape():
    assert ms.mutable(3) == 3
    ms.set_context(jit_syntax_level=ms.STRICT)
    ms.set_context(jit_syntax_level=ms.LAX)
    with pytest.raises(ValueError):
        ms.set_context(jit_syntax_level=7)

    class Twice(nn.Cell):
        def construct(self, x):
            return x * 2

    net = Twice()
    x = ms.Tensor(np.ones((2, 3), np.float32))
    net.compile(x)
    assert len(net._runner.variants) == 1
    np.testing.assert_array_equal(net(x).asnumpy(), np.full((2, 3), 2, np.float32))
    assert len(net._runner.variants) == 1
    np.testing.assert_array_equal(ops.TensorShape()(x).asnumpy(), [2, 3])
    assert ops.EmbeddingLookup().set_device("CPU").attrs["primitive_target"] == "CPU"


def test_max_pool_with_argmax_against_a_loop(rng):
    for pad_mode in ("valid", "same"):
        x = rng.integers(-20, 20, (2, 3, 6, 7)).astype(np.float32)        # (ties: the first index wins)
        out, arg = both(lambda t, m=pad_mode: ops.MaxPoolWithArgmax(3, 2, m)(t), [x])
        n, c, h, w = x.shape
        if pad_mode == "same":
            oh, ow = -(-h // 2), -(-w // 2)
            ph, pw = max((oh - 1) * 2 + 3 - h, 0) // 2, max((ow - 1) * 2 + 3 - w, 0) // 2
        else:
            oh, ow, ph, pw = (h - 3) // 2 + 1, (w - 3) // 2 + 1, 0, 0
        assert out.shape == arg.shape == (n, c, oh, ow) and arg.dtype == np.int32
        for b, ch, i, j in np.ndindex(n, c, oh, ow):
            best, at = -np.inf, -1
            for y in range(i * 2 - ph, i * 2 - ph + 3):
                for xx in range(j * 2 - pw, j * 2 - pw + 3):
                    if 0 <= y < h and 0 <= xx < w and x[b, ch, y, xx] > best:
                        best, at = x[b, ch, y, xx], ch * h * w + y * w + xx
            assert out[b, ch, i, j] == best and arg[b, ch, i, j] == at


# ---------------------------------------------------------------- diagonals

def _diag_ref(diags, k0, k1, rows, cols, pad, align):
    """MatrixDiagV3 element by element: out[i, j] on diagonal d = j - i comes from diagonal row
    k1 - d at its position along the diagonal, shifted right by the padding when d is right-aligned."""
    max_len = diags.shape[-1]
    out = np.full(diags.shape[:-2] + (rows, cols), pad, diags.dtype)
    sup, sub = align.split("_")
    for i in range(rows):
        for j in range(cols):
            d = j - i
            if not k0 <= d <= k1:
                continue
            length = min(rows + min(0, d), cols - max(0, d))
            pos = i if d >= 0 else j
            off = max_len - length if (sup if d >= 0 else sub) == "RIGHT" else 0
            out[..., i, j] = diags[..., k1 - d, pos + off]
    return out


@pytest.mark.parametrize("align", ["RIGHT_LEFT", "LEFT_RIGHT", "LEFT_LEFT", "RIGHT_RIGHT"])
def test_matrix_diag_and_part_against_the_definition(align, rng):
    for k0, k1, rows, cols in ((-1, 2, 4, 5), (0, 0, 3, 3), (-2, -1, 5, 4), (1, 3, 3, 6)):
        max_len = min(rows + min(k1, 0), cols - max(k0, 0))
        diags = rng.integers(1, 9, (2, k1 - k0 + 1, max_len)).astype(np.float32)
        band = k0 != k1
        x = diags if band else diags[:, 0]
        k = ms.Tensor(np.array([k0, k1] if band else k0, np.int32))
        got = both(lambda t, kk, r, c: ops.matrix_diag(t, kk, r, c, -1.0, align),
                   [x, k.asnumpy(), np.int32(rows), np.int32(cols)])
        want = _diag_ref(diags, k0, k1, rows, cols, np.float32(-1), align)
        np.testing.assert_array_equal(got, want)
        part = both(lambda t, kk: ops.matrix_diag_part(t, kk, 0.0, align), [want, k.asnumpy()])
        ref = diags.copy()
        for d in range(k0, k1 + 1):           # the padding cells of the diagonals come back as 0
            length = min(rows + min(0, d), cols - max(0, d))
            right = (align.split("_")[0] if d >= 0 else align.split("_")[1]) == "RIGHT"
            keep = np.zeros(max_len, bool)
            keep[(max_len - length if right else 0):(max_len if right else length)] = True
            ref[:, k1 - d, ~keep] = 0
        np.testing.assert_array_equal(part, ref if band else ref[:, 0])
    np.testing.assert_array_equal(ops.MatrixDiagV3()(ms.Tensor(np.arange(1, 5, dtype=np.int32)), ms.Tensor(np.int32(0)),
                                                      ms.Tensor(np.int32(-1)), ms.Tensor(np.int32(-1)),
                                                      ms.Tensor(np.int32(0))).asnumpy(), np.diag(np.arange(1, 5)))
    with pytest.raises(ValueError, match="k\\[0\\] == k\\[1\\]"):
        ops.matrix_diag_part(ms.Tensor(np.eye(3, dtype=np.float32)), ms.Tensor(np.array([1, 1], np.int32)))


def test_unfold_against_im2col_and_fold_is_its_adjoint(rng):
    for k, d, p, s in ((3, 1, 0, 1), (2, 2, 1, 2), ((2, 3), (1, 2), (1, 0), (2, 1))):
        x = rng.standard_normal((2, 3, 7, 8)).astype(np.float32)
        kh, kw = (k, k) if isinstance(k, int) else k
        dh, dw = (d, d) if isinstance(d, int) else d
        ph, pw = (p, p) if isinstance(p, int) else p
        sh, sw = (s, s) if isinstance(s, int) else s
        got = both(lambda t, k=k, d=d, p=p, s=s: ops.unfold(t, k, d, p, s), [x])
        xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
        oh = (xp.shape[2] - dh * (kh - 1) - 1) // sh + 1
        ow = (xp.shape[3] - dw * (kw - 1) - 1) // sw + 1
        ref = np.empty((2, 3 * kh * kw, oh * ow), np.float32)
        for ci in range(3):
            for i in range(kh):
                for j in range(kw):
                    win = xp[:, ci, i * dh:i * dh + sh * (oh - 1) + 1:sh, j * dw:j * dw + sw * (ow - 1) + 1:sw]
                    ref[:, (ci * kh + i) * kw + j] = win.reshape(2, -1)
        np.testing.assert_array_equal(got, ref)
        y = rng.standard_normal(ref.shape).astype(np.float32)
        back = ops.fold(ms.Tensor(y), ms.Tensor(np.array([7, 8], np.int32)), k, d, p, s).asnumpy()
        assert back.shape == x.shape
        np.testing.assert_allclose((got * y).sum(), (x * back).sum(), rtol=1e-4)     # <unfold x, y> = <x, fold y>
    with pytest.raises(ValueError, match="must not be negative"):
        ops.fold(ms.Tensor(np.ones((1, 4, 4), np.float32)), ms.Tensor(np.array([6, -1], np.int32)), 2)


def test_get_cache_prim_reuses_one_primitive_eagerly_and_in_construct():
    from msvm.ops._primitive_cache import _get_cache_prim

    assert _get_cache_prim(ops.Pow)() is _get_cache_prim(ops.Pow)()
    assert _get_cache_prim(ops.Elu)(alpha=0.5) is not _get_cache_prim(ops.Elu)(alpha=1.0)

    class Net(nn.Cell):
        def construct(self, x, y):
            return _get_cache_prim(ops.Sub)()(_get_cache_prim(ops.Add)()(x, y), x)

    x, y = np.array([2, 2, 1], np.int32), np.array([1, 2, 3], np.int32)
    np.testing.assert_array_equal(Net()(ms.Tensor(x), ms.Tensor(y)).asnumpy(), y)


def test_ps_roi_pooling(rng):
    g, od, scale = 2, 3, 1 / 8
    rois = np.array([[[0.0, 1.0], [8.0, 40.0], [16.0, 0.0], [70.0, 60.0], [50.0, 30.0]]], np.float32)  # [1, 5, 2]
    x = rng.standard_normal((2, od * g * g, 12, 10)).astype(np.float32)
    got = both(lambda a, b: ops.PSROIPooling(scale, g, od)(a, b), [x, rois])
    assert got.shape == (2, od, g, g)
    for k in range(2):
        bidx, x1, y1, x2, y2 = rois[0, :, k]
        y0s, y1s = np.round(y1) * scale, (np.round(y2) + 1) * scale
        x0s, x1s = np.round(x1) * scale, (np.round(x2) + 1) * scale
        bh, bw = max(y1s - y0s, 0.1) / g, max(x1s - x0s, 0.1) / g
        for c in range(od):
            for i in range(g):
                for j in range(g):
                    hs, he = np.clip([np.floor(y0s + i * bh), np.ceil(y0s + (i + 1) * bh)], 0, 12).astype(int)
                    ws, we = np.clip([np.floor(x0s + j * bw), np.ceil(x0s + (j + 1) * bw)], 0, 10).astype(int)
                    want = x[int(bidx), (c * g + i) * g + j, hs:he, ws:we]
                    np.testing.assert_allclose(got[k, c, i, j], want.mean() if want.size else 0.0, rtol=1e-5)
    for bad in ({"spatial_scale": object()}, {"group_size": 7.1}, {"output_dim": -1}):
        with pytest.raises((TypeError, ValueError)):
            ops.PSROIPooling(**{"spatial_scale": 0.5, "group_size": 2, "output_dim": 3, **bad})
    with pytest.raises(RuntimeError, match="channels"):
        ops.PSROIPooling(scale, g, od + 1)(ms.Tensor(x), ms.Tensor(rois))
    with pytest.raises(TypeError):
        ops.PSROIPooling(scale, g, od)(1.0, ms.Tensor(rois))


def test_nms_lgamma_mvlgamma_blackman(rng):
    from scipy import special

    xy = rng.integers(0, 50, (30, 2))
    boxes = np.concatenate([xy, xy + rng.integers(1, 30, (30, 2)), rng.random((30, 1))], 1).astype(np.float32)
    for thr in (0.1, 0.5, 0.9):
        s, idx, keep = both(lambda b, t=thr: ops.NMSWithMask(t)(b), [boxes])
        order = np.argsort(-boxes[:, 4], kind="stable")
        np.testing.assert_array_equal(idx, order)
        np.testing.assert_array_equal(s, boxes[order])
        ref, kept = [], []
        for i in order:                               # greedy, box by box
            b = boxes[i]
            ok = True
            for j in kept:
                c = boxes[j]
                w = max(min(b[2], c[2]) - max(b[0], c[0]), 0)
                h = max(min(b[3], c[3]) - max(b[1], c[1]), 0)
                inter = w * h
                if inter / ((b[2] - b[0]) * (b[3] - b[1]) + (c[2] - c[0]) * (c[3] - c[1]) - inter) > thr:
                    ok = False
                    break
            ref.append(ok)
            if ok:
                kept.append(i)
        np.testing.assert_array_equal(keep, ref)
    x = np.array([0.5, 1.0, 2.5, 10.0, 0.0, -1.0, -2.5, np.inf, np.nan], np.float32)
    np.testing.assert_allclose(both(ops.lgamma, [x]), special.gammaln(x), rtol=1e-6)
    y = rng.uniform(1.5, 6, (3, 4)).astype(np.float32)
    np.testing.assert_allclose(both(lambda t: ops.mvlgamma(t, 3), [y]), special.multigammaln(y.astype(np.float64), 3),
                               rtol=1e-5)
    with pytest.raises(ValueError):
        ops.mvlgamma(ms.Tensor(np.array([0.5], np.float32)), 3)
    for n in (0, 1, 5, 12):
        np.testing.assert_allclose(ops.blackman_window(n, periodic=False).asnumpy(), np.blackman(n), atol=1e-6)
        if n > 1:
            np.testing.assert_allclose(ops.blackman_window(ms.Tensor(np.array(n, np.int32))).asnumpy(),
                                       np.blackman(n + 1)[:-1], atol=1e-6)


class PadV3Net(nn.Cell):
    def __init__(self, mode, contiguous=True):
        super().__init__()
        self.pad = ops.PadV3(mode, contiguous)
        self.mode = mode

    def construct(self, x, paddings, value):
        if self.mode == "constant":
            return self.pad(x, paddings, value) * 2.0
        return self.pad(x, paddings) * 2.0


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "circular"])
def test_pad_v3_with_run_time_paddings(mode, rng):
    x = rng.standard_normal((2, 3, 5, 6)).astype(np.float32)
    np_mode = {"circular": "wrap"}.get(mode, mode)
    for contiguous in (True, False):
        net = PadV3Net(mode, contiguous)
        for pads in ((1, 2, 0, 3), (2, -1, -2, 1), (0, 0, 1, 1), (3, 1, 2, 0)):     # (last dim first)
            flat = pads if contiguous else (pads[0], pads[2], pads[1], pads[3])
            got = net(ms.Tensor(x), ms.Tensor(np.array(flat, np.int64)), ms.Tensor(np.float32(1.5))).asnumpy()
            (l3, r3), (l2, r2) = (pads[0], pads[1]), (pads[2], pads[3])
            y = x[:, :, max(-l2, 0):5 - max(-r2, 0), max(-l3, 0):6 - max(-r3, 0)]
            grow = ((0, 0), (0, 0), (max(l2, 0), max(r2, 0)), (max(l3, 0), max(r3, 0)))
            ref = np.pad(y, grow, np_mode, **({"constant_values": 1.5} if mode == "constant" else {}))
            np.testing.assert_array_equal(got, ref * 2)
        assert len(net._runner.variants) == 1            # (the paddings are data: one bytecode for all)


def test_batch_norm_assert_concat_offset(rng):
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    m, v, w, b = (rng.uniform(0.5, 2, 3).astype(np.float32) for _ in range(4))
    ref = (x - m[None, :, None]) / np.sqrt(v[None, :, None] + 1e-5) * w[None, :, None] + b[None, :, None]
    np.testing.assert_allclose(both(ops.batch_norm, [x, m, v, w, b]), ref, rtol=1e-5, atol=1e-6)
    with pytest.raises(NotImplementedError):
        ops.batch_norm(*(ms.Tensor(t) for t in (x, m, v, w, b)), training=True)

    class Check(nn.Cell):
        def __init__(self):
            super().__init__()
            self.check = ops.Assert(2)

        def construct(self, ok: bool, x):
            self.check(ok, [x])
            return x + 1

    net = Check()
    np.testing.assert_array_equal(net(True, ms.Tensor(x)).asnumpy(), x + 1)
    with pytest.raises(RuntimeError, match="assert failed"):
        net(False, ms.Tensor(x))
    with pytest.raises(RuntimeError, match="assert failed"):
        ops.Assert()(False, [ms.Tensor(x)])
    shapes = [np.array(s, np.int32) for s in ([1, 2, 3], [1, 5, 3], [1, 4, 3])]
    got = ops.ConcatOffsetV1()(ms.Tensor(np.int32(1)), tuple(ms.Tensor(s) for s in shapes))
    np.testing.assert_array_equal(np.stack([g.asnumpy() for g in got]), [[0, 0, 0], [0, 2, 0], [0, 7, 0]])


def _conv_ref(x, w, stride, pads, dil, group):
    n = x.ndim - 2
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0)] + [(pads[2 * i], pads[2 * i + 1]) for i in range(n)])
    ks = w.shape[2:]
    outs = [(xp.shape[2 + i] - dil[i] * (ks[i] - 1) - 1) // stride[i] + 1 for i in range(n)]
    res = np.zeros((x.shape[0], w.shape[0]) + tuple(outs))
    cg, og = x.shape[1] // group, w.shape[0] // group
    for o in range(w.shape[0]):
        g = o // og
        for pos in np.ndindex(*outs):
            sl = tuple(slice(p * s, p * s + d * (k - 1) + 1, d) for p, s, d, k in zip(pos, stride, dil, ks))
            patch = xp[(slice(None), slice(g * cg, (g + 1) * cg)) + sl]
            res[(slice(None), o) + pos] = (patch * w[o]).reshape(x.shape[0], -1).sum(1)
    return res


def test_conv3d_against_a_loop(rng):
    for stride, pad_mode, padding, dil, group in ((1, "valid", 0, 1, 1), (2, "pad", 1, 1, 2), (1, "same", 0, 2, 1),
                                                  ((1, 2, 1), "pad", (1, 0, 0, 1, 2, 1), (1, 1, 2), 1)):
        x = rng.standard_normal((2, 4, 5, 6, 5)).astype(np.float32)
        w = rng.standard_normal((6, 4 // group, 2, 3, 2)).astype(np.float32)
        got = both(lambda a, b, s=stride, m=pad_mode, p=padding, d=dil, g=group: ops.conv3d(
            a, b, None, s, m, p, d, g), [x, w])
        s3 = (stride,) * 3 if isinstance(stride, int) else stride
        d3 = (dil,) * 3 if isinstance(dil, int) else dil
        if pad_mode == "same":
            pads = []
            for i in range(3):
                o = -(-x.shape[2 + i] // s3[i])
                t = max((o - 1) * s3[i] + d3[i] * (w.shape[2 + i] - 1) + 1 - x.shape[2 + i], 0)
                pads += [t // 2, t - t // 2]
        elif pad_mode == "pad":
            pads = [padding] * 6 if isinstance(padding, int) else list(padding)
        else:
            pads = [0] * 6
        np.testing.assert_allclose(got, _conv_ref(x, w, s3, pads, d3, group), rtol=1e-4, atol=1e-4)
    layer = nn.Conv3d(4, 3, 2, pad_mode="valid", has_bias=True, bias_init="ones")
    x = rng.standard_normal((1, 4, 3, 3, 3)).astype(np.float32)
    ref = _conv_ref(x, layer.weight.asnumpy(), (1, 1, 1), [0] * 6, (1, 1, 1), 1) + 1
    np.testing.assert_allclose(layer(ms.Tensor(x)).asnumpy(), ref, rtol=1e-4, atol=1e-4)
    prim = ops.Conv3D(6, 2, pad_mode="pad", pad=(1, 1, 1, 1, 1, 1), stride=(1, 1, 1, 1, 1))
    w = rng.standard_normal((6, 4, 2, 2, 2)).astype(np.float32)
    np.testing.assert_allclose(prim(ms.Tensor(x), ms.Tensor(w)).asnumpy(),
                               _conv_ref(x, w, (1, 1, 1), [1] * 6, (1, 1, 1), 1), rtol=1e-4, atol=1e-4)


def _conv_t_ref(x, w, s, pads, d, op):
    """The transposed convolution by its definition: each input element adds w * x at i*s + k*d."""
    n, cin = x.shape[:2]
    ks = w.shape[2:]
    full = [(x.shape[2 + i] - 1) * s[i] + d[i] * (ks[i] - 1) + 1 + op[i] for i in range(3)]
    out = np.zeros((n, w.shape[1]) + tuple(full))
    for pos in np.ndindex(*x.shape[2:]):
        for k in np.ndindex(*ks):
            at = tuple(p * st + kk * dd for p, st, kk, dd in zip(pos, s, k, d))
            out[(slice(None), slice(None)) + at] += np.einsum("nc,co->no", x[(slice(None), slice(None)) + pos],
                                                              w[(slice(None), slice(None)) + k])
    return out[(slice(None), slice(None)) + tuple(slice(pads[2 * i], full[i] - pads[2 * i + 1]) for i in range(3))]


def test_conv3d_transpose_against_its_definition(rng):
    x = rng.standard_normal((1, 3, 3, 2, 3)).astype(np.float32)
    w = rng.standard_normal((3, 2, 2, 3, 2)).astype(np.float32)
    for stride, pad, dil, op in ((1, 0, 1, 0), (2, 1, 1, 1), ((1, 2, 2), (0, 1, 1, 0, 0, 1), (2, 1, 1), (0, 1, 0))):
        s = (stride,) * 3 if isinstance(stride, int) else stride
        d = (dil,) * 3 if isinstance(dil, int) else dil
        o = (op,) * 3 if isinstance(op, int) else op
        pads = (pad,) * 6 if isinstance(pad, int) else pad
        got = both(lambda a, b, st=stride, p=pad, dl=dil, op_=op: ops.Conv3DTranspose(
            3, 2, (2, 3, 2), pad_mode="pad", pad=p, stride=st, dilation=dl, output_padding=op_)(a, b), [x, w])
        np.testing.assert_allclose(got, _conv_t_ref(x, w, s, pads, d, o), rtol=1e-4, atol=1e-4)


def test_ctc_greedy_decoder(rng):
    x = rng.standard_normal((6, 3, 4)).astype(np.float32)
    x[:, 0, 3] = -9                      # (row 0 never picks the blank)
    x[2, 1] = [0, 0, 0, 9]               # (a blank in row 1)
    x[3, 2], x[4, 2] = [9, 0, 0, 0], [9, 0, 0, 0]     # (a repeat in row 2)
    lens = np.array([6, 4, 5], np.int32)
    for merge in (True, False):
        idx, vals, shape, logp = both(lambda a, b, m=merge: ops.CTCGreedyDecoder(m)(a, b), [x, lens])
        ref_idx, ref_vals, longest = [], [], 0
        for b in range(3):
            best = x[:lens[b], b].argmax(1)
            out, prev = [], -1
            for c in best:
                if c != 3 and not (merge and c == prev):
                    out.append(int(c))
                prev = c
            ref_idx += [(b, i) for i in range(len(out))]
            ref_vals += out
            longest = max(longest, len(out))
            np.testing.assert_allclose(logp[b, 0], -x[:lens[b], b].max(1).sum(), rtol=1e-6)
        np.testing.assert_array_equal(idx, np.array(ref_idx).reshape(-1, 2))
        np.testing.assert_array_equal(vals, ref_vals)
        np.testing.assert_array_equal(shape, [3, longest])
    with pytest.raises(RuntimeError, match="should be less than"):
        ops.CTCGreedyDecoder()(ms.Tensor(x), ms.Tensor(np.array([7, 1, 1], np.int32)))


def test_no_repeat_ngram(rng):
    seq = np.array([[[1, 2, 1, 2, 5, 1, 2], [9, 3, 9, 5, 4, 1, 5]],
                    [[4, 8, 6, 4, 5, 6, 4], [4, 8, 8, 4, 3, 4, 8]]], np.int32)
    lp = rng.random((2, 2, 10)).astype(np.float32)
    want = lp.copy()
    big = -np.finfo(np.float32).max
    want[0, 0, [1, 5]] = big
    want[1, 0, 5] = big
    want[1, 1, 8] = big
    np.testing.assert_array_equal(both(lambda a, b: ops.NoRepeatNGram(3)(a, b), [seq, lp]), want)
    want1 = lp.copy()
    for b in range(2):
        for h in range(2):
            want1[b, h, np.unique(seq[b, h])] = big          # n = 1: every token seen
    np.testing.assert_array_equal(ops.NoRepeatNGram(1)(ms.Tensor(seq), ms.Tensor(lp)).asnumpy(), want1)
