"""Convolutions on small maps off the taps product (issue 18): the inner-product route (compiler/gemm_dot.py,
conv.TapsConv ``dot``: the image's columns copied as rows by ``xt1``, a transpose, or ``xt``, the k x k
copy from the image itself with borders as zeros, then ``dot`` with vectors over K and the epilogue
applied to the summed tile) and the output-channel route (compiler/gemm_cout.py, ``cout``: the weight
packed in panels of output channels, the image read in place, each tile transposed into the NCHW
result with its epilogue). The kernels on random shapes (not multiples of the tile or panel, K over
several blocks, K not a multiple of the vector) against float64 numpy with NaN and inf; the copies bit
for bit against numpy's; the conv blocks of test_conv_gemm forced onto each route at L2, L3 and auto
against L1 unfused and the numpy reference (and on the im2col route: test_conv_im2col.py); one and two
threads bit for bit; a stored weight packed for ``cout`` leaves the process (held once); the routes' rules."""

import msvm as ms
import numpy as np
import pytest
from msvm.compiler import conv, gemm, gemm_cout, gemm_dot
from msvm.compiler.entry import data_pointer
from test_conv_gemm import BLOCKS, SIZES
from test_conv_tiers2 import close, forward, images, make, reference, with_epilogue


def _ptr(a):
    return data_pointer(a) if a is not None else None


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("seed", range(8))
def test_dot_kernel_against_float64_numpy(dtype, seed):
    rng = np.random.default_rng(seed)
    d = np.dtype(dtype)
    fn = gemm_dot.function(dtype, "dot")
    m, n = int(rng.integers(1, 30)), int(rng.integers(1, 30))
    k = int(rng.choice([0, 1, 7, 16, 33, gemm_dot.KC + 5, 2 * gemm_dot.KC + 17]))
    lda, ldb, ldc = k + int(rng.integers(0, 5)), k + int(rng.integers(0, 5)), n + int(rng.integers(0, 3))
    a = rng.standard_normal((m, lda)).astype(d)
    b = rng.standard_normal((n, ldb)).astype(d)
    if seed % 2 and k:
        a[0, k // 2] = np.nan
        b[-1, 0] = np.inf
    want = a[:, :k].astype(np.float64) @ b[:, :k].astype(np.float64).T
    scale = rng.standard_normal(m).astype(d) if seed % 3 else None
    bias = rng.standard_normal(m).astype(d) if scale is not None else None
    res = rng.standard_normal((m, n + 2)).astype(d) if seed % 4 < 2 else None
    lo, hi = [(-np.inf, np.inf), (0.0, np.inf), (0.0, 6.0)][seed % 3]
    want = with_epilogue(want, scale, bias, res if res is None else res[:, :n], lo, hi)
    c = np.full((m, ldc), -7.0, d)
    fn(m, n, k, data_pointer(a), lda, data_pointer(b), ldb, data_pointer(c), ldc, scale is not None, _ptr(scale),
       _ptr(bias), _ptr(res), n + 2, lo, hi)
    assert (c[:, n:] == -7.0).all()                   # (nothing past the n columns written)
    got = c[:, :n]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    tol = 1e-4 if d == np.float32 else 1e-11
    fin = np.where(np.isfinite(want), want, 0)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * max(1.0, float(np.abs(fin).max(initial=0.0))) * (1 + k / 100))


def _im2col_t(x, kh, kw, stride, pad, dil, ho, wo):
    """numpy's [P][(c, i, j)] of one image (zeros past the borders)."""
    c, h, w = x.shape
    xp = np.zeros((c, h + 2 * pad[0] + 64, w + 2 * pad[1] + 64), x.dtype)
    xp[:, pad[0]:pad[0] + h, pad[1]:pad[1] + w] = x
    out = np.empty((ho, wo, c, kh, kw), x.dtype)
    for i in range(kh):
        for j in range(kw):
            r0, c0 = i * dil[0], j * dil[1]
            win = xp[:, r0:r0 + (ho - 1) * stride[0] + 1:stride[0], c0:c0 + (wo - 1) * stride[1] + 1:stride[1]]
            out[:, :, :, i, j] = win.transpose(1, 2, 0)
    return out.reshape(ho * wo, -1)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("seed", range(8))
def test_the_copies_bit_for_bit(dtype, seed):
    rng = np.random.default_rng(50 + seed)
    d = np.dtype(dtype)
    c, h, w = int(rng.integers(1, 40)), int(rng.integers(1, 17)), int(rng.integers(1, 17))
    kh, kw = int(rng.integers(1, 6)), int(rng.integers(1, 6))
    stride = tuple(int(v) for v in rng.integers(1, 4, 2))
    dil = tuple(int(v) for v in rng.integers(1, 3, 2))
    pad = (int(rng.integers(0, kh)), int(rng.integers(0, kw)))
    ho = (h + 2 * pad[0] - dil[0] * (kh - 1) - 1) // stride[0] + 1
    wo = (w + 2 * pad[1] - dil[1] * (kw - 1) - 1) // stride[1] + 1
    if ho <= 0 or wo <= 0:
        ho, wo, pad = max(ho, 1), max(wo, 1), (kh * dil[0], kw * dil[1])
    x = rng.standard_normal((c, h, w)).astype(d)
    x[0, 0, 0] = np.nan
    want = _im2col_t(x, kh, kw, stride, pad, dil, ho, wo)
    extra = [0, 3, 16][seed % 3]                      # (rows further apart than K: the im2col route's)
    got = np.full((want.shape[0], want.shape[1] + extra), 7.0, d)
    xt = gemm_dot.function(dtype, "xt")
    cut = int(rng.integers(0, ho + 1))               # (two row ranges, as two threads would)
    for r0, r1 in ((0, cut), (cut, ho)):
        xt(c, h, w, kh, kw, *stride, *pad, *dil, ho, wo, data_pointer(x), data_pointer(got), r0, r1, got.shape[1])
    np.testing.assert_array_equal(got[:, :want.shape[1]], want)
    assert (got[:, want.shape[1]:] == 7.0).all()
    # the 1x1 transpose of [c][row] planes, columns in two ranges
    p = int(rng.integers(1, 70))
    src = rng.standard_normal((c, p + int(rng.integers(0, 9)))).astype(d)
    dst = np.full((p, c + extra), 7.0, d)
    xt1 = gemm_dot.function(dtype, "xt1")
    cut = int(rng.integers(0, p + 1))
    for p0, p1 in ((0, cut), (cut, p)):
        xt1(c, src.shape[1], data_pointer(src), data_pointer(dst), p0, p1, c + extra)
    np.testing.assert_array_equal(dst[:, :c], src[:, :p].T)
    assert (dst[:, c:] == 7.0).all()


@pytest.fixture(params=["dot", "cout", "im2col"])
def dots(monkeypatch, request):
    """Every convolution on the route of the param where it can run it (group 1; Winograd off), each call's
    (mode, on that route, threads, residual fused). "im2col": conv.TapsConv ``im2col`` (the windows as rows
    by ``xt``/``xt1``, the packed Dense product by gemm_cout's panels, gemm_cout's ``rows`` store)."""
    seen = []
    orig = conv.TapsConv.__call__
    route = request.param

    def spy(self, x, a, out=None, split=1, bias=None, add=None, lo=-np.inf, hi=np.inf, steps=None):
        seen.append((self.mode, getattr(self, route), split, add is not None))
        return orig(self, x, a, out, split, bias, add, lo, hi, steps)
    monkeypatch.setattr(conv.TapsConv, "__call__", spy)
    monkeypatch.setattr(conv, "use_dot", lambda *a: route == "dot")
    monkeypatch.setattr(conv, "use_cout", lambda *a: route == "cout")
    monkeypatch.setattr(conv, "use_im2col", lambda *a: route == "im2col")
    monkeypatch.setattr(conv, "use_winograd", lambda *a: False)
    monkeypatch.setenv(conv.ROUTE_ENV, "taps")
    return seen


@pytest.mark.parametrize("name", list(BLOCKS))
@pytest.mark.parametrize("level", ["L2", "L3", "auto"])
def test_blocks_on_the_dot_route_match_l1_and_numpy(dots, name, level):
    s, mode, _ = BLOCKS[name]
    seed = sorted(BLOCKS).index(name)
    rng = np.random.default_rng(300 + seed)
    xs = images(rng, s["cin"], SIZES, special=seed % 2 == 0)
    wants = [reference(make(s, seed), s, x) for x in xs]
    l1 = forward(make(s, seed), "L1", False, xs)
    dots.clear()
    got = forward(make(s, seed), level, True, xs)
    assert dots and {c[0] for c in dots} == {mode}, dots
    assert {c[1] for c in dots} == {s["group"] == 1}, dots       # (grouped convolutions stay on taps)
    if s["residual"] and s["group"] == 1:
        assert all(c[3] for c in dots)        # (no wider grid on this route: the residual is fused too)
    for g, w, r in zip(got, wants, l1):
        close(g, w)
        close(g, r, tol=1e-5)


def test_float64_and_an_empty_batch(dots):
    s = BLOCKS["3x3_pad_residual"][0]
    rng = np.random.default_rng(9)
    xs = images(rng, s["cin"], [(1, 9, 11), (0, 9, 11), (2, 5, 4)], special=True, dtype=np.float64)
    net = make(s, 3, np.float64)
    got = forward(net, "L3", True, xs)
    l1 = forward(make(s, 3, np.float64), "L1", False, xs)
    assert {c[1] for c in dots} == {True}
    for g, r, x in zip(got, l1, xs):
        assert g.dtype == np.float64
        close(g, reference(net, s, x), tol=1e-10)
        close(g, r, tol=1e-6)
    assert got[1].shape == (0, 16, 9, 11)


@pytest.mark.parametrize("name", ["1x1", "1x1_s2", "3x3_s2", "7x7_s2_stem"])
def test_one_and_two_threads_agree_bit_for_bit(dots, monkeypatch, name):
    import os

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    s, _, _ = BLOCKS[name]
    rng = np.random.default_rng(31)
    xs = images(rng, s["cin"], [(2, 12, 9), (1, 7, 7)], special=True)
    outs = {}
    for threads in ("1", "2"):
        monkeypatch.setenv("MSVM_THREADS", threads)
        monkeypatch.setattr(conv, "SPLIT_MIN_FLOPS", 0.0)
        dots.clear()
        outs[threads] = forward(make(s, 4), "L3", True, xs)
        assert {c[2] for c in dots} == {int(threads)} and {c[1] for c in dots} == {True}, dots
    for a, b in zip(outs["1"], outs["2"]):
        np.testing.assert_array_equal(a, b)


def test_the_route_rule(monkeypatch):
    """use_dot: where the taps product's lanes idle (7x7, 5x5 maps), not on wide maps; AVX-512 only."""
    from msvm.compiler.codegen import codegen

    wide = "+avx512f" in codegen().features
    f32 = np.dtype(np.float32)
    assert conv.use_dot(49, 49, 512, 1, 32, f32) == wide            # 1x1 on 7x7: 49 of 64 lanes
    assert conv.use_dot(196, 196, 1024, 1, 32, f32) == wide         # 1x1 on 14x14, K 1024: 196 of 224
    assert not conv.use_dot(196, 196, 256, 1, 32, f32)              # ... K 256: taps
    assert not conv.use_dot(25, 35, 4608, 9, 32, f32)               # 3x3 on 5x5: use_cout's
    assert not conv.use_dot(3136, 3136, 64, 1, 32, f32)             # 56x56
    assert not conv.use_dot(100, 100, 96, 1, 32, f32)               # 10x10, K 96: a short product, taps
    assert conv.use_dot(100, 100, conv.DOT_MIN_K, 1, 32, f32) == wide
    assert not conv.use_dot(49, 49, 512, 1, 32, np.dtype(np.float16))


def test_set_data_is_seen(dots):
    s = BLOCKS["1x1_residual_relu"][0]
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, s["cin"], 7, 7)).astype(np.float32)
    net = make(s, 1)
    forward(net, "L3", True, [x])
    net.conv.weight.set_data(ms.Tensor(net.conv.weight.asnumpy() * -2.0))
    close(net(ms.Tensor(x)).asnumpy(), reference(net, s, x))
    assert {c[1] for c in dots} == {True}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("seed", range(10))
def test_cout_kernel_against_float64_numpy(dtype, seed):
    """gemm_cout on random channels (not multiples of the panel), taps, rows of every width up to and
    past the tile, a grid wider than the row, panel ranges, epilogues, NaN and inf."""
    rng = np.random.default_rng(70 + seed)
    d = np.dtype(dtype)
    fn = gemm_cout.function(dtype)
    nr = gemm.panel_width(d)
    o, ci, ntaps = int(rng.integers(1, 80)), int(rng.integers(1, 20)), int(rng.integers(1, 10))
    ho, wo = int(rng.integers(1, 6)), int(rng.integers(1, 30))
    wq = wo + int(rng.integers(0, 3))
    taps = np.sort(rng.integers(0, 6, ntaps)).astype(np.int64)
    row = ho * wq + 8
    src = rng.standard_normal((ci, row)).astype(d)
    if seed % 2:
        src[0, taps[0]] = np.nan
        src[-1, -9] = np.inf
    w = rng.standard_normal((o, ci * ntaps)).astype(d)
    wp = gemm.pack(w, nr, transposed=True)
    cols = np.stack([np.concatenate([src[c, taps[t] + oh * wq: taps[t] + oh * wq + wo] for oh in range(ho)])
                     for c in range(ci) for t in range(ntaps)])
    want = w.astype(np.float64) @ cols.astype(np.float64)
    scale = rng.standard_normal(o).astype(d) if seed % 3 else None
    bias = rng.standard_normal(o).astype(d) if scale is not None else None
    res = rng.standard_normal((o, ho * wo)).astype(d) if seed % 2 == 0 else None
    lo, hi = [(-np.inf, np.inf), (0.0, np.inf), (0.0, 6.0)][seed % 3]
    want = with_epilogue(want, scale, bias, res, lo, hi)
    panels = -(-o // nr)
    j0 = int(rng.integers(0, panels))
    c = np.full((o, ho * wo), -7.0, d)
    fn(o, ci, ntaps, data_pointer(taps), data_pointer(wp), data_pointer(src), row, ho, wo, wq, data_pointer(c),
       ho * wo, j0, panels, scale is not None, _ptr(scale), _ptr(bias), _ptr(res), lo, hi)
    assert (c[:j0 * nr] == -7.0).all()               # (panels before j0 untouched)
    got, exp = c[j0 * nr:], want[j0 * nr:]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(exp))
    tol = 1e-4 if d == np.float32 else 1e-11
    fin = np.where(np.isfinite(exp), exp, 0)
    np.testing.assert_allclose(got, exp, rtol=tol, atol=tol * max(1.0, float(np.abs(fin).max(initial=0.0))))


def test_cout_holds_a_stored_weight_once(monkeypatch):
    """A Parameter stored in the weight file (weights.py, 1 MiB and more) and packed for gemm_cout is
    spilled: its pages leave the process, the packed panels are what the kernel reads."""
    from msvm import weights

    monkeypatch.setattr(conv, "use_cout", lambda *a: True)
    monkeypatch.setenv(conv.ROUTE_ENV, "taps")
    s = dict(BLOCKS["3x3"][0], cin=128, cout=256)              # (256 x 128 x 3 x 3 float32: 1.2 MB)
    net = make(s, 5)
    w = net.conv.weight.asnumpy()
    rng = np.random.default_rng(8)
    x = rng.standard_normal((1, 128, 6, 5)).astype(np.float32)
    got = forward(net, "L3", True, [x])[0]
    arr = net.conv.weight._data
    if not weights.stored(arr):
        pytest.skip("the weight store is off here (no private directory on a disk filesystem)")
    assert weights.resident(arr) == 0               # (before anything here reads it again)
    assert any(v[0]() is arr for v in conv._COUTW.values())
    close(got, reference(net, s, x))
    np.testing.assert_array_equal(net.conv.weight.asnumpy(), w)   # (the values map back where read)


def test_the_cout_rule():
    from msvm.compiler.codegen import codegen

    wide = "+avx512f" in codegen().features
    f32 = np.dtype(np.float32)
    assert conv.use_cout(512, 4608, 9, 32, f32) == wide           # 3x3 512 (7x7 maps and any other)
    assert conv.use_cout(64, 576, 9, 32, f32) == wide             # 3x3 64 (56x56)
    assert conv.use_cout(64, 147, 49, 32, f32) == wide            # the 7x7 RGB stem
    assert not conv.use_cout(48, 432, 9, 32, f32)                 # channels not whole panels
    assert conv.use_cout(256, 1024, 1, 32, f32, p=196) == wide    # 1x1 from K = 256, no residual, 14x14
    assert not conv.use_cout(1024, 256, 1, 32, f32, residual=True, p=196)  # ... a residual: taps
    assert not conv.use_cout(256, 64, 1, 32, f32, p=196)          # ... K = 64: taps
    assert not conv.use_cout(512, 2048, 1, 32, f32, p=49)         # ... 7x7: use_dot's
    assert not conv.use_cout(128, 256, 1, 32, f32, p=3136)        # ... 56x56: taps
    assert conv.use_cout(64, 576, 9, 32, f32, residual=True) == wide
    assert not conv.use_cout(32, 27, 9, 32, f32)                  # K below COUT_MIN_K


def test_cout_packs_a_converted_weight_once(monkeypatch):
    """A float64 Parameter under a float32 convolution: prepared_a's converted copy (read-only, cached
    with the Parameter) is packed once, not at every call."""
    monkeypatch.setattr(conv, "_COUTW", {})
    rng = np.random.default_rng(12)
    w = rng.standard_normal((40, 24, 3, 3))
    w.flags.writeable = False
    x = rng.standard_normal((1, 24, 5, 6)).astype(np.float32)
    tc = conv.TapsConv(x.shape, w.shape, (1, 1), (1, 1, 1, 1), (1, 1), 1, np.float32, cout=True)
    outs = [tc(x, conv.prepared_a(w, 1, np.float32, True)) for _ in range(3)]
    assert len(conv._COUTW) == 1
    from msvm.interp import kernels as K
    ref = K.conv_gemm(x, K.weight_view(w.astype(np.float32)), w.shape, (1, 1), (1, 1, 1, 1), (1, 1), 1, np.float32, None)
    for o in outs:
        close(o, ref)
