"""Convolutions on the im2col route (issue 18: ResNet-50's 512- and 2048-channel layers on small maps):
conv.TapsConv ``im2col`` copies each image's windows as rows (gemm_dot's ``xt``, or ``xt1`` for a 1x1
convolution of stride 1), runs the packed Dense product (compiler/gemm.py) by gemm_cout's packed panels,
and stores the [rows][channels] product transposed into the NCHW result with the epilogue
(compiler/gemm_cout.py ``ir_rows``). The store kernel on random shapes against float64 numpy with NaN
and inf; the conv blocks of test_conv_gemm forced onto the route at L2, L3 and auto against L1 unfused
and the numpy reference; float64 and an empty batch; blocks of images; one and two threads bit for
bit; the route's rule."""

import numpy as np
import pytest
from msvm.compiler import conv, gemm, gemm_cout
from msvm.compiler.entry import data_pointer
from test_conv_gemm import BLOCKS, SIZES
from test_conv_tiers2 import close, forward, images, make, reference


def _ptr(a):
    return data_pointer(a) if a is not None else None


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("seed", range(10))
def test_rows_store_against_float64_numpy(dtype, seed):
    """ir_rows on random channel counts (not multiples of the panel), images, pixels below, at and past
    the vector, a row stride past the channels, panel ranges, epilogues, NaN and inf."""
    rng = np.random.default_rng(400 + seed)
    d = np.dtype(dtype)
    fn = gemm_cout.rows_function(dtype)
    nr = gemm.panel_width(d)
    o, nimg, p = int(rng.integers(1, 80)), int(rng.integers(1, 4)), int(rng.choice([1, 7, 16, 25, 33, 49]))
    panels = -(-o // nr)
    ldc = panels * nr + int(rng.integers(0, 3)) * nr
    cw = rng.standard_normal((nimg * p, ldc)).astype(d)
    if seed % 2:
        cw[0, 0] = np.nan
        cw[-1, o - 1] = np.inf
    want = cw[:, :o].reshape(nimg, p, o).transpose(0, 2, 1).astype(np.float64)
    scale = rng.standard_normal(o).astype(d) if seed % 3 else None
    bias = rng.standard_normal(o).astype(d) if scale is not None else None
    res = rng.standard_normal((nimg, o, p)).astype(d) if seed % 4 < 2 else None
    lo, hi = [(-np.inf, np.inf), (0.0, np.inf), (0.0, 6.0)][seed % 3]
    if scale is not None:
        want = want * scale[:, None] + bias[:, None]
    if res is not None:
        want = want + res
    with np.errstate(invalid="ignore"):
        want = np.where(want < lo, lo, want)
        want = np.where(want > hi, hi, want)
    j0 = int(rng.integers(0, panels))
    y = np.full((nimg, o, p), -7.0, d)
    fn(o, data_pointer(cw), ldc, nimg, p, data_pointer(y), j0, panels, scale is not None, _ptr(scale), _ptr(bias),
       _ptr(res), lo, hi)
    assert (y[:, :j0 * nr] == -7.0).all()             # (panels before j0 untouched)
    got, exp = y[:, j0 * nr:], want[:, j0 * nr:]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(exp))
    tol = 1e-6 if d == np.float32 else 1e-14
    fin = np.where(np.isfinite(exp), exp, 0)
    np.testing.assert_allclose(got, exp, rtol=tol, atol=tol * max(1.0, float(np.abs(fin).max(initial=0.0))))


@pytest.fixture
def rows(monkeypatch):
    """Every convolution of group 1 on the im2col route (Winograd off), each call's (mode, on the route,
    threads, residual fused)."""
    seen = []
    orig = conv.TapsConv.__call__

    def spy(self, x, a, out=None, split=1, bias=None, add=None, lo=-np.inf, hi=np.inf, steps=None):
        seen.append((self.mode, self.im2col, split, add is not None))
        return orig(self, x, a, out, split, bias, add, lo, hi, steps)
    monkeypatch.setattr(conv.TapsConv, "__call__", spy)
    monkeypatch.setattr(conv, "use_im2col", lambda *a: True)
    monkeypatch.setattr(conv, "use_winograd", lambda *a: False)
    monkeypatch.setenv(conv.ROUTE_ENV, "taps")
    return seen


@pytest.mark.parametrize("name", list(BLOCKS))
@pytest.mark.parametrize("level", ["L2", "L3", "auto"])
def test_blocks_on_the_im2col_route_match_l1_and_numpy(rows, name, level):
    s, mode, _ = BLOCKS[name]
    seed = sorted(BLOCKS).index(name)
    rng = np.random.default_rng(500 + seed)
    xs = images(rng, s["cin"], SIZES, special=seed % 2 == 0)
    wants = [reference(make(s, seed), s, x) for x in xs]
    l1 = forward(make(s, seed), "L1", False, xs)
    rows.clear()
    got = forward(make(s, seed), level, True, xs)
    assert rows and {c[0] for c in rows} == {mode}, rows
    assert {c[1] for c in rows} == {s["group"] == 1}, rows       # (grouped convolutions stay on taps)
    if s["residual"] and s["group"] == 1:
        assert all(c[3] for c in rows)        # (no wider grid on this route: the residual is fused too)
    for g, w, r in zip(got, wants, l1):
        close(g, w)
        close(g, r, tol=1e-5)


def test_float64_and_an_empty_batch(rows):
    s = BLOCKS["3x3_pad_residual"][0]
    rng = np.random.default_rng(19)
    xs = images(rng, s["cin"], [(1, 9, 11), (0, 9, 11), (2, 5, 4)], special=True, dtype=np.float64)
    net = make(s, 3, np.float64)
    got = forward(net, "L3", True, xs)
    l1 = forward(make(s, 3, np.float64), "L1", False, xs)
    assert {c[1] for c in rows} == {True}
    for g, r, x in zip(got, l1, xs):
        assert g.dtype == np.float64
        close(g, reference(net, s, x), tol=1e-10)
        close(g, r, tol=1e-6)
    assert got[1].shape == (0, 16, 9, 11)


@pytest.mark.parametrize("block", [1, 2, 1 << 30])
def test_images_in_blocks(rows, monkeypatch, block):
    """Five images with IM2COL_BLOCK_BYTES holding one, two and all of their windows: the same answers."""
    s = BLOCKS["3x3_s2"][0]
    rng = np.random.default_rng(23)
    x = images(rng, s["cin"], [(5, 9, 7)], special=True)[0]
    k = s["cin"] * 9 * 5 * 4 * np.dtype(np.float32).itemsize      # (one image's windows: 5 x 4 pixels)
    monkeypatch.setattr(conv, "IM2COL_BLOCK_BYTES", block * k)
    net = make(s, 6)
    close(forward(net, "L3", True, [x])[0], reference(net, s, x))
    assert {c[1] for c in rows} == {True}


@pytest.mark.parametrize("name", ["1x1", "1x1_s2", "3x3_s2", "7x7_s2_stem"])
def test_one_and_two_threads_agree_bit_for_bit(rows, monkeypatch, name):
    import os

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    s, _, _ = BLOCKS[name]
    rng = np.random.default_rng(37)
    xs = images(rng, s["cin"], [(2, 12, 9), (1, 7, 7)], special=True)
    outs = {}
    for threads in ("1", "2"):
        monkeypatch.setenv("MSVM_THREADS", threads)
        monkeypatch.setattr(conv, "SPLIT_MIN_FLOPS", 0.0)
        rows.clear()
        outs[threads] = forward(make(s, 4), "L3", True, xs)
        assert {c[2] for c in rows} == {int(threads)} and {c[1] for c in rows} == {True}, rows
    for a, b in zip(outs["1"], outs["2"]):
        np.testing.assert_array_equal(a, b)


def test_the_route_rule():
    """use_im2col: weights of 4 MB and more on maps of at most 64 pixels, whole panels, AVX-512; Winograd
    keeps the maps from 64 pixels."""
    from msvm.compiler.codegen import codegen

    wide = "+avx512f" in codegen().features
    f32, f64 = np.dtype(np.float32), np.dtype(np.float64)
    assert conv.use_im2col(512, 4608, 49, 32, f32) == wide           # 3x3 512 on 7x7 (9.4 MB)
    assert conv.use_im2col(512, 2048, 25, 32, f32) == wide           # 1x1 2048 -> 512 on 5x5 (4 MB)
    assert conv.use_im2col(2048, 512, 64, 32, f32) == wide           # 1x1 512 -> 2048 on 8x8
    assert not conv.use_im2col(512, 4608, 196, 32, f32)              # 14x14: gemm_cout / Winograd
    assert not conv.use_im2col(512, 1024, 49, 32, f32)               # 2 MB: stays in L2
    assert not conv.use_im2col(256, 2304, 25, 32, f32)               # 3x3 256: 2.4 MB
    assert not conv.use_im2col(500, 4608, 49, 32, f32)               # channels not whole panels
    assert conv.use_im2col(256, 2304, 25, 16, f64) == wide           # float64: the weight's bytes
    assert not conv.use_im2col(512, 4608, 49, 32, np.dtype(np.float16))
    if wide:
        def route(x_shape, stride):
            tc = conv.TapsConv(x_shape, (512, 512, 3, 3), stride, (1, 1, 1, 1), (1, 1), 1, np.float32)
            return "im2col" if tc.im2col else "wino" if tc.wino else "cout" if tc.cout else "other"
        assert route((1, 512, 7, 7), (1, 1)) == "im2col"
        assert route((1, 512, 8, 8), (1, 1)) == "wino"
        assert route((1, 512, 16, 16), (2, 2)) == "im2col"
        assert route((1, 512, 14, 14), (1, 1)) == "wino"
