"""Transposed convolutions (decoders' upsampling, volo's Fold): nn.Conv2dTranspose in its three pad modes
with output_padding, ops.conv_transpose2d (torch's sizes) and P.Conv2DTranspose (Conv2DBackpropInput: the
forward convolution's padding, the result's size given), grouped, strided, dilated, over set_inputs' None
dims, against the adjoint written out in float64, at L1, compiled and in pynative."""

import msvm as ms
import numpy as np
import pytest
from levels import at
from msvm import nn, ops


def full_adjoint(x, w, s, d, g):
    """out[o] += x[i] * w[k] for o = i * s + k * d, per group: every row the adjoint reaches."""
    n, ci, h, wd = x.shape
    _, cog, kh, kw = w.shape
    cig = ci // g
    out = np.zeros((n, cog * g, (h - 1) * s[0] + d[0] * (kh - 1) + 1, (wd - 1) * s[1] + d[1] * (kw - 1) + 1))
    for gi in range(g):
        xs = x[:, gi * cig:(gi + 1) * cig].astype(np.float64)
        for a in range(kh):
            for b in range(kw):
                part = np.einsum("nchw,co->nohw", xs, w[gi * cig:(gi + 1) * cig, :, a, b].astype(np.float64))
                out[:, gi * cog:(gi + 1) * cog, a * d[0]:a * d[0] + (h - 1) * s[0] + 1:s[0],
                    b * d[1]:b * d[1] + (wd - 1) * s[1] + 1:s[1]] += part
    return out


def window(full, top, left, h, w):
    """Rows top .. top + h and columns left .. left + w of the adjoint, zeros past its end."""
    n, c, fh, fw = full.shape
    big = np.zeros((n, c, max(fh, top + h), max(fw, left + w)))
    big[:, :, :fh, :fw] = full
    return big[:, :, top:top + h, left:left + w]


CASES = [  # in, out, kernel, stride, dilation, group, padding, output_padding
    (4, 6, 3, 2, 1, 1, 1, 1), (4, 4, (2, 3), (2, 1), 1, 2, 0, 0), (3, 6, 3, 1, 2, 3, 2, 0), (2, 3, 4, 2, 1, 1, 1, 0),
    (2, 2, 1, 3, 1, 1, 0, 2)]


@pytest.mark.parametrize("level", ["L1", "auto", "pynative"])
def test_conv2d_transpose_layer_in_each_pad_mode(level, rng):
    with at(level):
        for ci, co, k, s, d, g, p, op in CASES:
            kk, ss, dd = (k, k) if isinstance(k, int) else k, (s, s) if isinstance(s, int) else s, (d, d)
            w = rng.standard_normal((ci, co // g, *kk)).astype(np.float32)
            e = [dd[i] * (kk[i] - 1) + 1 for i in (0, 1)]
            for mode in ("same", "valid", "pad"):
                net = nn.Conv2dTranspose(ci, co, k, s, mode, p if mode == "pad" else 0, op if mode == "pad" else 0, d,
                                         g, has_bias=True, weight_init=ms.Tensor(w), bias_init="normal")
                net.set_inputs(ms.Tensor(shape=[None, ci, None, None], dtype=ms.float32))
                bias = net.bias.asnumpy().reshape(1, -1, 1, 1)
                for hw in ((5, 4), (3, 6), (5, 4)):
                    x = rng.standard_normal((2, ci, *hw)).astype(np.float32)
                    full = full_adjoint(x, w, ss, dd, g)
                    if mode == "same":
                        want = window(full, max(e[0] - ss[0], 0) // 2, max(e[1] - ss[1], 0) // 2,
                                      hw[0] * ss[0], hw[1] * ss[1])
                    elif mode == "valid":
                        want = window(full, 0, 0, *(hw[i] * ss[i] + max(e[i] - ss[i], 0) for i in (0, 1)))
                    else:
                        want = window(full, p, p, *((hw[i] - 1) * ss[i] + e[i] - 2 * p for i in (0, 1))) + bias
                        want = np.pad(want, ((0, 0), (0, 0), (0, op), (0, op)))       # (zeros: after the bias)
                    if mode != "pad":
                        want = want + bias
                    np.testing.assert_allclose(net(ms.Tensor(x)).asnumpy(), want, rtol=1e-4, atol=1e-4,
                                               err_msg=f"{mode}: {ci, co, k, s, d, g, p, op} at {hw}")


@pytest.mark.parametrize("level", ["L1", "auto"])
def test_the_functional_and_the_primitive(level, rng):
    class Prim(nn.Cell):
        def __init__(self, op, size):
            super().__init__()
            self.op, self.size = op, size

        def construct(self, x, w):
            n, c, h, wd = x.shape
            return self.op(x, w, (n, self.size[0], h * 2 + self.size[1], wd * 2 + self.size[1]))

    with at(level):
        for ci, co, k, s, d, g, p, op in CASES:
            kk, ss, dd = (k, k) if isinstance(k, int) else k, (s, s) if isinstance(s, int) else s, (d, d)
            w = rng.standard_normal((ci, co // g, *kk)).astype(np.float32)
            x = rng.standard_normal((2, ci, 5, 4)).astype(np.float32)
            full = full_adjoint(x, w, ss, dd, g)
            sizes = [(n - 1) * ss[i] - 2 * p + dd[i] * (kk[i] - 1) + op + 1 for i, n in enumerate((5, 4))]
            got = ops.conv_transpose2d(ms.Tensor(x), ms.Tensor(w), None, s, p, op, g, d).asnumpy()
            np.testing.assert_allclose(got, window(full, p, p, *sizes), rtol=1e-4, atol=1e-4)
        # P.Conv2DTranspose: a stride-2 3x3 'same' layer's adjoint into even and odd sizes, and 'pad' (volo's Fold)
        w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
        for mode, extra in (("same", 0), ("same", -1), ("pad", -1)):
            net = Prim(ops.Conv2DTranspose(3, 3, pad_mode=mode, pad=1 if mode == "pad" else 0, stride=2), (3, extra))
            net.set_inputs(ms.Tensor(shape=[None, 4, None, None], dtype=ms.float32), ms.Tensor(w))
            for hw in ((5, 4), (3, 3)):
                x = rng.standard_normal((1, 4, *hw)).astype(np.float32)
                out = [hw[i] * 2 + extra for i in (0, 1)]
                need = [max((hw[i] - 1) * 2 + 3 - out[i], 0) for i in (0, 1)]
                top = [n // 2 for n in need] if mode == "same" else [1, 1]
                want = window(full_adjoint(x, w, (2, 2), (1, 1), 1), top[0], top[1], *out)
                np.testing.assert_allclose(net(ms.Tensor(x), ms.Tensor(w)).asnumpy(), want, rtol=1e-4, atol=1e-4)


def test_bad_arguments_say_what():
    with pytest.raises(ValueError, match="output_padding needs pad_mode 'pad'"):
        nn.Conv2dTranspose(2, 2, 3, 2, "same", output_padding=1)
    with pytest.raises(ValueError, match=r"output_padding 2 must be in \[0, max\(stride, dilation\)\)"):
        nn.Conv2dTranspose(2, 2, 3, 2, "pad", 1, output_padding=2)
    with pytest.raises(ValueError, match="input_size must be"):
        ops.Conv2DTranspose(2, 3)(ms.Tensor(np.ones((1, 2, 3, 3), np.float32)), ms.Tensor(np.ones((2, 2, 3, 3),
                                  np.float32)), (3, 3))
