"""Winograd's F(2x2, 3x3) for dense 3x3 convolutions of stride 1 (issue 18: compiler/winograd.py, conv.TapsConv
``wino``). Its three kernels on random shapes (channels and maps not multiples of the vector, the panel
or the tile; every padding; the epilogue's forms; the channel, panel and output-channel ranges two
threads take) against a float64 numpy direct convolution; an image with NaN or inf (and a weight that
is not finite) flags the direct sum, which gives NaN and inf where the direct convolution has them;
blocks forced onto the route at L2, L3 and auto against L1 unfused and the numpy reference, with
the route checked; one and two threads bit for bit; a stored weight held once (its Parameter
spilled); the rule."""

import msvm as ms
import numpy as np
import pytest
from msvm.compiler import conv, gemm, winograd
from msvm.compiler.entry import data_pointer
from test_conv_gemm import spec
from test_conv_tiers2 import close, forward, images, make, reference


def _ptr(a):
    return data_pointer(a) if a is not None else None


def direct(x, w, pt, pl, ho, wo):
    """The 3x3 convolution of x [C, H, W] by w [O, C, 3, 3] in float64, zero past the borders."""
    c, h, wd = x.shape
    xq = np.zeros((c, ho + 2, wo + 2))
    r0, r1, c0, c1 = pt, min(ho + 2, h + pt), pl, min(wo + 2, wd + pl)
    xq[:, r0:r1, c0:c1] = x[:, r0 - pt:r1 - pt, c0 - pl:c1 - pl]
    win = np.lib.stride_tricks.sliding_window_view(xq, (3, 3), axis=(1, 2))
    with np.errstate(invalid="ignore"):
        return np.einsum("chwij,ocij->ohw", win, w.astype(np.float64))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("seed", range(12))
def test_kernels_against_float64_numpy(dtype, seed):
    rng = np.random.default_rng(seed)
    d = np.dtype(dtype)
    nr = gemm.panel_width(d)
    c, o = int(rng.integers(1, 70)), int(rng.choice([nr, 2 * nr, 3 * nr, nr + 5]))
    h, w = int(rng.integers(1, 20)), int(rng.integers(1, 40))
    pt, pb, pl, pr = (int(v) for v in rng.integers(0, 3, 4))
    ho, wo = h + pt + pb - 2, w + pl + pr - 2
    if ho < 1 or wo < 1:
        ho, wo, pt, pl = h, w, 1, 1
    x = rng.standard_normal((c, h, w)).astype(d)
    wt = (rng.standard_normal((o, c, 3, 3)) / 3).astype(d)
    special = seed % 3 == 1
    if special:
        x[c // 2, h // 2, w // 2], x[0, -1, 0] = np.inf, np.nan
    if seed == 5:
        wt[1, 0, 1, 1] = np.inf                             # (a weight not finite: U is not either)
    th, tw = winograd.tiles(ho, wo)
    t = th * tw
    up = winograd.pack_weight(wt, nr)
    force = int(not winograd.finite(wt))
    v = np.empty((16, c, t), d)
    m = np.empty((16, o, t), d)
    y = np.full((o, ho, wo + 3), -7.0, d)[:, :, :wo]        # (rows 3 apart past wo: nothing written there)
    y = np.ascontiguousarray(y)
    has_bn = seed % 2 == 0
    scale, bias = (rng.standard_normal(o).astype(d), rng.standard_normal(o).astype(d)) if has_bn else (None, None)
    res = rng.standard_normal((o, ho, wo)).astype(d) if seed % 4 < 2 else None
    lo, hi = [(-np.inf, np.inf), (0.0, np.inf), (0.0, 6.0)][seed % 3]
    fin, fmm, fout = (winograd.function(dtype, p) for p in ("in", "mm", "out"))
    flags = np.full(2, -1, np.int64)
    cut = int(rng.integers(0, c + 1))
    for k, (c0, c1) in enumerate(((0, cut), (cut, c))):       # (two threads' halves, one after the other)
        fin(data_pointer(x), c0, c1, h, w, pt, pl, th, tw, data_pointer(v), c * t, data_pointer(flags) + 8 * k, force)
    assert set(flags) <= {0, 1} and flags.any() == (special or bool(force))
    panels = -(-o // nr)
    scratch = np.empty((2, 16, c, nr), d)                  # (each task's own)
    for k, (j0, j1) in enumerate(((0, panels // 2), (panels // 2, panels))):
        fmm(o, c, data_pointer(up), data_pointer(v), t, data_pointer(m), j0, j1, data_pointer(flags), 2,
            data_pointer(scratch[k]))
    split = int(rng.integers(0, o + 1))
    for o0, o1 in ((0, split), (split, o)):
        fout(data_pointer(m), o * t, o0, o1, th, tw, data_pointer(y), ho, wo, ho * wo, has_bn, _ptr(scale), _ptr(bias),
             _ptr(res), lo, hi, data_pointer(flags), 2, data_pointer(x), c, h, w, pt, pl, data_pointer(wt))
    want = direct(x, wt, pt, pl, ho, wo)
    with np.errstate(invalid="ignore"):
        if has_bn:
            want = want * scale[:, None, None] + bias[:, None, None]
        if res is not None:
            want = want + res
        want = np.where(want < lo, lo, want)
        want = np.where(want > hi, hi, want)
    np.testing.assert_array_equal(np.isnan(y), np.isnan(want))
    fixed = np.isfinite(want)
    np.testing.assert_array_equal(y[~fixed & ~np.isnan(want)], want[~fixed & ~np.isnan(want)])
    tol = 1e-5 if d == np.float32 else 1e-12
    scale_ = max(1.0, float(np.abs(want[fixed]).max(initial=0.0)))
    np.testing.assert_allclose(y[fixed], want[fixed], rtol=tol, atol=tol * scale_ * (1 + c / 8))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_products_transform_the_weight_as_numpy_does(dtype):
    """The products' kernel transforms each panel of the packed weight (pack_weight) into its scratch as
    transform_weight does in numpy: the same bits, zeros past O; inf and NaN weights included. Given U
    itself (no scratch: conv.prepared_wino's form for a small weight) its products are the same bits."""
    rng = np.random.default_rng(3)
    d = np.dtype(dtype)
    nr = gemm.panel_width(d)
    c, o, t = 37, 2 * nr + 3, 5
    wt = (rng.standard_normal((o, c, 3, 3)) * 10.0 ** rng.integers(-30, 30, (o, c, 3, 3))).astype(d)
    wt[0, 1, 2, 2], wt[4, 0, 0, 1] = np.nan, -np.inf
    want = winograd.transform_weight(wt, nr)                      # [16][panels][C][nr]
    g = winograd.pack_weight(wt, nr)
    assert g.shape == (3, c, 9, nr) and g.nbytes == 3 * nr * c * 9 * d.itemsize
    v, m = np.zeros((16, c, t), d), np.empty((16, o, t), d)
    flags = np.zeros(1, np.int64)
    fmm = winograd.function(dtype, "mm")
    for j in range(3):
        scratch = np.full((16, c, nr), 7.0, d)
        fmm(o, c, data_pointer(g), data_pointer(v), t, data_pointer(m), j, j + 1, data_pointer(flags), 1,
            data_pointer(scratch))
        np.testing.assert_array_equal(scratch, want[:, j])
    wt = (rng.standard_normal((o, c, 3, 3)) / 3).astype(d)
    v = rng.standard_normal((16, c, t)).astype(d)
    got = {}
    for form, weight, scratch in (("packed", winograd.pack_weight(wt, nr), np.empty((16, c, nr), d)),
                                  ("U", winograd.transform_weight(wt, nr), None)):
        m = np.full((16, o, t), np.nan, d)
        fmm(o, c, data_pointer(weight), data_pointer(v), t, data_pointer(m), 0, 3, data_pointer(flags), 1,
            _ptr(scratch))
        got[form] = m
    np.testing.assert_array_equal(got["packed"], got["U"])
    np.testing.assert_allclose(got["U"], np.einsum("xoc,xct->xot", winograd.transform_weight(wt, nr).transpose(
        0, 1, 3, 2).reshape(16, -1, c)[:, :o], v), rtol=1e-5 if d == np.float32 else 1e-12, atol=1e-4)


@pytest.fixture
def winos(monkeypatch):
    """Every TapsConv call as (on Winograd's route, threads, residual fused); the route taken wherever it
    can run (WINO_MIN_C and WINO_MIN_PIXELS down to 1)."""
    seen = []
    orig = conv.TapsConv.__call__

    def spy(self, x, a, out=None, split=1, bias=None, add=None, lo=-np.inf, hi=np.inf, steps=None):
        seen.append((self.wino, split, add is not None))
        return orig(self, x, a, out, split, bias, add, lo, hi, steps)
    monkeypatch.setattr(conv.TapsConv, "__call__", spy)
    monkeypatch.setattr(conv, "WINO_MIN_C", 1)
    monkeypatch.setattr(conv, "WINO_MIN_PIXELS", 1)
    monkeypatch.setenv(conv.ROUTE_ENV, "taps")
    return seen


WIDE = pytest.mark.skipif(not conv.use_winograd((1, 64, 16, 16), (64, 64, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1,
                                                np.float32), reason="Winograd's route runs on AVX-512 targets")
BLOCKS = {
    "same_relu": spec(40, 32, 3),
    "pad_residual": spec(32, 32, 3, pad_mode="pad", padding=1, residual=True, bias=True),
    "pad2_relu6": spec(24, 64, 3, pad_mode="pad", padding=2, act="relu6"),
    "valid_none": spec(33, 32, 3, pad_mode="valid", act="none"),
}


@WIDE
@pytest.mark.parametrize("name", list(BLOCKS))
@pytest.mark.parametrize("level", ["L2", "L3", "auto"])
@pytest.mark.parametrize("rows", ["map", "one"])
def test_blocks_match_l1_and_numpy(winos, monkeypatch, name, level, rows):
    """(rows: the whole map's tiles at once, or one tile row a block: V and M per block, the result's rows
    and the direct sum's at the block's offset)"""
    if rows == "one":
        monkeypatch.setattr(conv, "WINO_BLOCK_BYTES", 1)
    s = BLOCKS[name]
    seed = sorted(BLOCKS).index(name)
    rng = np.random.default_rng(500 + seed)
    xs = images(rng, s["cin"], [(2, 16, 17), (1, 9, 30), (1, 5, 3)], special=seed % 2 == 0)
    wants = [reference(make(s, seed), s, x) for x in xs]
    l1 = forward(make(s, seed), "L1", False, xs)
    winos.clear()
    got = forward(make(s, seed), level, True, xs)
    assert winos and {c[0] for c in winos} == {True}, winos
    if s["residual"]:
        assert all(c[2] for c in winos)
    for g, w, r in zip(got, wants, l1):
        close(g, w)
        close(g, r, tol=1e-5)


@WIDE
def test_float64_a_strided_image_and_an_empty_batch(winos):
    s = BLOCKS["pad_residual"]
    rng = np.random.default_rng(9)
    xs = images(rng, s["cin"], [(1, 9, 11), (0, 9, 11), (2, 6, 4)], special=True, dtype=np.float64)
    xs.append(np.asfortranarray(rng.standard_normal((2, s["cin"], 7, 10))))
    net = make(s, 3, np.float64)
    got = forward(net, "L3", True, xs)
    l1 = forward(make(s, 3, np.float64), "L1", False, xs)
    assert {c[0] for c in winos} == {True}
    for g, r, x in zip(got, l1, xs):
        assert g.dtype == np.float64
        close(g, reference(net, s, x), tol=1e-10)
        close(g, r, tol=1e-6)
    assert got[1].shape == (0, 32, 9, 11)


@WIDE
@pytest.mark.parametrize("blocks", [30_000, 80_000, 1 << 30])
@pytest.mark.parametrize("special", [True, False])
def test_one_and_two_threads_agree_bit_for_bit(winos, monkeypatch, blocks, special):
    """One thread (blocks of WINO_BLOCK_BYTES: a few tile rows, or the whole map), two threads by tile rows
    (each its own V and M) and two by channels and panels: the same bits, with an inf and a NaN in one
    block only (the image's direct sum then, whichever blocks there are) and without."""
    import os

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(conv, "WINO_BLOCK_BYTES", blocks)
    s = BLOCKS["pad_residual"]
    rng = np.random.default_rng(31)
    xs = images(rng, s["cin"], [(2, 12, 9), (1, 7, 7), (1, 16, 5)], special=special)
    shared = []
    orig = conv.Steps.share

    def spy(self, tasks):
        shared.append(max(len(t) for t in tasks))
        return orig(self, tasks)
    monkeypatch.setattr(conv.Steps, "share", spy)
    outs = {}
    for threads, rows_bytes in (("1", 1 << 30), ("2", 1 << 30), ("2", 0)):
        monkeypatch.setenv("MSVM_THREADS", threads)
        monkeypatch.setattr(conv, "SPLIT_MIN_FLOPS", 0.0)
        monkeypatch.setattr(conv, "WINO_ROWS_SPLIT_BYTES", rows_bytes)
        winos.clear()
        shared.clear()
        outs[threads, rows_bytes] = forward(make(s, 4), "L3", True, xs)
        assert {c[1] for c in winos} == {int(threads)} and {c[0] for c in winos} == {True}, winos
        if threads == "2":       # (by rows: each task all three kernels of its blocks; else one call a task)
            assert (max(shared) >= 3) == bool(rows_bytes), shared
    want = outs["1", 1 << 30]
    for key, got in outs.items():
        for a, b in zip(want, got):
            np.testing.assert_array_equal(a, b, err_msg=str(key))
    net = make(s, 4)
    for a, x in zip(want, xs):
        close(a, reference(net, s, x))


@WIDE
def test_a_stored_weight_is_held_once(winos):
    """A Parameter stored in the weight file (weights.py, 1 MiB and more) and transformed for Winograd's
    products is spilled: its pages leave the process; the transform is what the products read (the
    direct sum of a flagged image maps the Parameter back)."""
    from msvm import weights

    s = spec(128, 256, 3)                         # (256 x 128 x 3 x 3 float32: 1.2 MB)
    net = make(s, 5)
    w = net.conv.weight.asnumpy()
    rng = np.random.default_rng(8)
    x = rng.standard_normal((1, 128, 10, 9)).astype(np.float32)
    got = forward(net, "L3", True, [x])[0]
    arr = net.conv.weight._data
    if not weights.stored(arr):
        pytest.skip("the weight store is off here (no private directory on a disk filesystem)")
    assert weights.resident(arr) == 0
    held = [v[1][0] for v in conv._WINOW.values() if v[0]() is arr]
    assert len(held) == 1 and held[0].nbytes == w.nbytes      # (packed at the weight's own size, not U's 16/9)
    close(got, reference(net, s, x))
    x[0, 3, 4, 5] = np.inf
    close(forward(net, "L3", True, [x])[0], reference(net, s, x))
    np.testing.assert_array_equal(net.conv.weight.asnumpy(), w)


@WIDE
def test_one_packed_weight_serves_winograd_and_gemm_cout():
    """A layer that runs Winograd at one size (a 10x9 map) and gemm_cout at another (5x5: under
    WINO_MIN_PIXELS) holds one packed array: Winograd's is gemm_cout's seen per channel and tap
    (conv.prepared_wino); the answers at both sizes are the reference's, in either order."""
    s = spec(128, 256, 3)                         # (U of 256 x 128 is 2 MB: held packed, not transformed)
    rng = np.random.default_rng(9)
    for sizes in ([(10, 9), (5, 5)], [(5, 5), (10, 9)]):
        net = make(s, 5)
        arr, seen = net.conv.weight._data, []
        orig = conv.TapsConv.__call__

        def spy(self, *a, seen=seen, orig=orig, **k):
            seen.append("wino" if self.wino else "cout" if self.cout else "other")
            return orig(self, *a, **k)
        conv.TapsConv.__call__ = spy
        try:
            for h, w in sizes:
                x = rng.standard_normal((1, 128, h, w)).astype(np.float32)
                close(forward(net, "L3", True, [x])[0], reference(net, s, x))
        finally:
            conv.TapsConv.__call__ = orig
        assert {"wino", "cout"} <= set(seen), seen
        packed = [v[1] for v in conv._COUTW.values() if v[0]() is arr]
        held = [v[1][0] for v in conv._WINOW.values() if v[0]() is arr]
        assert len(packed) == 1 and len(held) == 1
        assert np.shares_memory(held[0], packed[0]), "Winograd reads gemm_cout's array"
        np.testing.assert_array_equal(held[0], winograd.pack_weight(net.conv.weight.asnumpy(), gemm.panel_width(
            np.float32)))
    w = net.conv.weight.asnumpy().copy()
    w[3, 5, 1, 1] = np.inf                  # (a weight whose transform is not finite: the direct sum, from the panels' flag)
    net.conv.weight.set_data(ms.Tensor(w))
    x = rng.standard_normal((1, 128, 10, 9)).astype(np.float32)
    close(forward(net, "L3", True, [x])[0], reference(net, s, x))
    bad = [v[1][1] for v in conv._WINOW.values() if v[0]() is net.conv.weight._data]
    assert bad == [True]


def test_the_rule():
    from msvm.compiler.codegen import codegen

    wide = "+avx512f" in codegen().features
    f32, one, pad = np.float32, (1, 1), (1, 1, 1, 1)
    assert conv.use_winograd((1, 64, 56, 56), (64, 64, 3, 3), one, pad, one, 1, f32) == wide
    assert conv.use_winograd((1, 256, 14, 14), (256, 256, 3, 3), one, pad, one, 1, f32) == wide
    assert conv.use_winograd((1, 128, 9, 9), (128, 128, 3, 3), one, pad, one, 1, f32) == wide
    assert conv.use_winograd((1, 512, 6, 6), (512, 512, 3, 3), one, pad, one, 1, f32) == wide   # 36 pixels
    assert not conv.use_winograd((1, 512, 5, 5), (512, 512, 3, 3), one, pad, one, 1, f32)   # 25 pixels
    assert not conv.use_winograd((1, 64, 56, 56), (64, 64, 3, 3), (2, 2), pad, one, 1, f32)  # stride 2
    assert not conv.use_winograd((1, 64, 56, 56), (64, 64, 3, 3), one, pad, (2, 2), 1, f32)  # dilation
    assert not conv.use_winograd((1, 64, 56, 56), (64, 32, 3, 3), one, pad, one, 2, f32)     # groups
    assert not conv.use_winograd((1, 64, 56, 56), (48, 64, 3, 3), one, pad, one, 1, f32)     # part of a panel
    assert not conv.use_winograd((1, 32, 56, 56), (64, 32, 3, 3), one, pad, one, 1, f32)     # few channels
    assert not conv.use_winograd((1, 64, 56, 56), (64, 64, 5, 5), one, pad, one, 1, f32)
    assert not conv.use_winograd((1, 64, 56, 56), (64, 64, 3, 3), one, pad, one, 1, np.float16)
