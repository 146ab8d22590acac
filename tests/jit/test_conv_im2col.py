"""Convolutions on the im2col route (issue 18: ResNet-50's 512- and 2048-channel layers on small maps):
conv.TapsConv ``im2col`` copies each image's windows as rows (gemm_dot's ``xt``, or ``xt1`` for a 1x1
convolution of stride 1), runs the packed Dense product (compiler/gemm.py) by gemm_cout's packed panels,
and stores the [rows][channels] product transposed into the NCHW result with the epilogue
(compiler/gemm_cout.py ``ir_rows``). The store kernel on random shapes against float64 numpy with NaN
and inf; blocks of images; the route's rule. (The conv blocks of test_conv_gemm on the route at L2, L3
and auto against L1 and numpy, float64, an empty batch, one and two threads bit for bit: test_conv_dot's
``dots`` fixture, whose routes include this one.)"""

import numpy as np
import pytest
from msvm.compiler import conv, gemm, gemm_cout
from msvm.compiler.entry import data_pointer
from test_conv_gemm import BLOCKS
from test_conv_tiers2 import close, forward, images, make, reference, with_epilogue


def _ptr(a):
    return data_pointer(a) if a is not None else None


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("seed", range(10))
def test_rows_store_against_float64_numpy(dtype, seed):
    """ir_rows on random channel counts (not multiples of the panel), images, pixels below, at and past
    the vector, a row stride past the channels, panel ranges, epilogues, NaN and inf."""
    rng = np.random.default_rng(400 + seed)
    d = np.dtype(dtype)
    fn = gemm_cout.function(dtype, "rows")
    nr = gemm.panel_width(d)
    o, nimg, p = int(rng.integers(1, 80)), int(rng.integers(1, 4)), int(rng.choice([1, 7, 16, 25, 33, 49]))
    panels = -(-o // nr)
    ldc = panels * nr + int(rng.integers(0, 3)) * nr          # (the route's: whole panels, ldc = panels * nr)
    cw = rng.standard_normal((nimg * p, ldc)).astype(d)
    if seed % 2:
        cw[0, 0] = np.nan
        cw[-1, o - 1] = np.inf
    want = cw[:, :o].reshape(nimg, p, o).transpose(0, 2, 1).astype(np.float64)
    scale = rng.standard_normal(o).astype(d) if seed % 3 else None
    bias = rng.standard_normal(o).astype(d) if scale is not None else None
    res = rng.standard_normal((nimg, o, p)).astype(d) if seed % 4 < 2 else None
    lo, hi = [(-np.inf, np.inf), (0.0, np.inf), (0.0, 6.0)][seed % 3]
    want = with_epilogue(want, scale, bias, res, lo, hi)
    j0 = int(rng.integers(0, panels))
    j1 = int(rng.integers(j0 + 1, panels + 1))
    y = np.full((nimg, o, p), -7.0, d)
    fn(o, data_pointer(cw), ldc, nimg, p, data_pointer(y), j0, j1, scale is not None, _ptr(scale), _ptr(bias),
       _ptr(res), lo, hi)
    assert (y[:, :j0 * nr] == -7.0).all() and (y[:, j1 * nr:] == -7.0).all()    # (other panels untouched)
    got, exp = y[:, j0 * nr:j1 * nr], want[:, j0 * nr:j1 * nr]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(exp))
    tol = 1e-6 if d == np.float32 else 1e-14
    fin = np.where(np.isfinite(exp), exp, 0)
    np.testing.assert_allclose(got, exp, rtol=tol, atol=tol * max(1.0, float(np.abs(fin).max(initial=0.0))))


@pytest.mark.parametrize("name", ["3x3_s2", "1x1_residual_relu"])
@pytest.mark.parametrize("block", [1, 2, 1 << 30])
def test_images_in_blocks(monkeypatch, name, block):
    """Five images with IM2COL_BLOCK_BYTES holding one, two and all of their windows (a residual read at
    each block's images): the same answers."""
    seen = []
    orig = conv.TapsConv.__call__

    def spy(self, *a, **k):
        seen.append(self.im2col)
        return orig(self, *a, **k)
    monkeypatch.setattr(conv.TapsConv, "__call__", spy)
    monkeypatch.setattr(conv, "use_im2col", lambda *a: True)
    monkeypatch.setenv(conv.ROUTE_ENV, "taps")
    s = BLOCKS[name][0]
    rng = np.random.default_rng(23)
    x = images(rng, s["cin"], [(5, 9, 7)], special=True)[0]
    tc = conv.TapsConv(x.shape, (s["cout"], s["cin"], s["k"], s["k"]), (s["stride"],) * 2,
                       (s["padding"],) * 4 if s["pad_mode"] == "pad" else (0,) * 4, (1, 1), 1, np.float32, im2col=True)
    k = conv._odd_lines(tc.lda, 4) * tc.ho * tc.wo * 4      # (one image's windows, as _run_im2col holds them)
    monkeypatch.setattr(conv, "IM2COL_BLOCK_BYTES", block * k)
    net = make(s, 6)
    close(forward(net, "L3", True, [x])[0], reference(net, s, x))
    assert set(seen) == {True}


@pytest.mark.parametrize("k, stride", [(1, 1), (3, 2)])
@pytest.mark.parametrize("split", [1, 2])
def test_a_strided_batch(monkeypatch, k, stride, split):
    """A batch whose images are not C-contiguous (Fortran order: each copied before its windows, and
    alive until they are copied, a block of four at once): the bits of the same batch made contiguous."""
    import os

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setenv("MSVM_THREADS", str(split))
    rng = np.random.default_rng(41)
    x = rng.standard_normal((4, 32, 7, 9)).astype(np.float32)
    w = (rng.standard_normal((64, 32, k, k)) / 10).astype(np.float32)
    w.flags.writeable = False
    tc = conv.TapsConv(x.shape, w.shape, (stride, stride), (k // 2,) * 4, (1, 1), 1, np.float32, im2col=True)
    a = conv.prepared_a(w, 1, np.float32, tc.inplace)
    want = tc(np.ascontiguousarray(x), a, None, split)
    got = tc(np.asfortranarray(x), a, None, split)
    np.testing.assert_array_equal(got, want)
    close(want, conv_reference(x, w, stride, k // 2))


def conv_reference(x, w, stride, pad):
    from refs import cv

    return cv.conv2d(x.astype(np.float64), w.astype(np.float64), None, stride, pad, 1, 1)


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
