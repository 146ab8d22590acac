"""What mindocr's and mindyolo's models reach for beyond mindcv's (tried as a new user would: the packages
built from PyPI, their models run at L1 and compiled): the alias's ``mindspore.__version__``,
``mindspore.tensor`` and ``mindspore.ops.primitive``; ``Cell.apply``; ``Tensor.clip``; nearest resizes with
aligned corners or half-pixel centers and ResizeBilinearV2; a sub-Cell whose bool flag rules out a branch
that would not compile; ``int()`` of a dim's arithmetic with floats; a MindSpore API msvm lacks, called in
construct, named as msvm's gap; ``asnumpy()`` of a Parameter as a writable copy; ``ops.grid_sample``."""

import math

import msvm as ms
import numpy as np
import pytest
from levels import at
from mindspore_alias import installed
from msvm import nn, ops


def test_the_alias_answers_what_mindocr_imports_at_its_top():
    with installed():
        import mindspore
        from mindspore.ops.primitive import Primitive, constexpr

        assert mindspore.__version__ == "2.10.0" and constexpr is ops.constexpr and Primitive is ops.Primitive
        t = mindspore.tensor([1, 2], mindspore.float32)
        assert isinstance(t, ms.Tensor) and t.dtype == ms.float32 and t.asnumpy().tolist() == [1.0, 2.0]


def test_cell_apply_and_clip():
    seen = []
    net = nn.SequentialCell([nn.Dense(2, 3), nn.ReLU()])
    assert net.apply(lambda c: seen.append(type(c).__name__)) is net
    assert seen == ["Dense", "ReLU", "SequentialCell"]
    t = ms.Tensor(np.array([-2.0, 0.5, 3.0], np.float32))
    assert t.clip(0, 1).asnumpy().tolist() == [0.0, 0.5, 1.0] and t.clamp(-1, 1).asnumpy().tolist() == [-1, 0.5, 1]


def nearest_ref(x, oh, ow, align, half):
    def src(o, n):
        i = np.arange(o)
        if half:
            s = np.floor((i + 0.5) * n / o)
        elif align:
            s = np.floor(i * (n - 1) / (o - 1) + 0.5) if o > 1 else np.zeros(o)
        else:
            s = np.floor(i * n / o)
        return np.minimum(s.astype(int), n - 1)
    return x[:, :, src(oh, x.shape[2])][:, :, :, src(ow, x.shape[3])]


class Resized(nn.Cell):
    def __init__(self, size, align, half):
        super().__init__()
        self.near = ops.ResizeNearestNeighbor(size, align, half)
        self.bilinear = ops.ResizeBilinearV2(align_corners=True)

    def construct(self, x):
        return self.near(x), self.bilinear(x, (x.shape[2] * 2, x.shape[3] * 2))


@pytest.mark.parametrize("level", ["L1", "auto", "pynative"])
def test_nearest_resizes_map_as_tensorflow_and_mindspore_and_bilinear_v2(level):
    x = np.arange(2 * 5 * 7, dtype=np.float32).reshape(1, 2, 5, 7)
    with at(level):
        for align, half in ((False, False), (True, False), (False, True)):
            for size in ((10, 14), (3, 4), (1, 1)):
                near, bil = Resized(size, align, half)(ms.Tensor(x))
                np.testing.assert_array_equal(near.asnumpy(), nearest_ref(x, *size, align, half))
                want = ops.interpolate(ms.Tensor(x), size=(10, 14), mode="bilinear", align_corners=True)
                np.testing.assert_allclose(bil.asnumpy(), want.asnumpy(), rtol=1e-6)
    with pytest.raises(ValueError, match="cannot both be True"):
        ops.ResizeNearestNeighbor((2, 2), True, True)


class Inner(nn.Cell):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 4)

    def construct(self, x, pos, is_train=False):
        if is_train:
            return self.emb(pos)
        return x * 2.0


class Outer(nn.Cell):
    """visionlan's head: ``self.inner(x, None, is_train=False)``, whose train branch needs a tensor pos."""

    def __init__(self):
        super().__init__()
        self.inner = Inner()
        self.scales = 1.5

    def construct(self, x, targets=None):
        h = int(x.shape[-1] * self.scales + 0.5)          # (mindocr's yolov8 neck: a float scale of a dim)
        return self.inner(x, targets, is_train=False), ops.zeros((h,), ms.float32)


@pytest.mark.parametrize("level", ["L1", "auto"])
def test_a_flag_that_rules_out_a_branch_and_int_of_a_float_scaled_dim(level):
    with at(level):
        for n in (4, 5):
            x = np.ones((1, n), np.float32)
            a, b = Outer()(ms.Tensor(x))
            np.testing.assert_array_equal(a.asnumpy(), x * 2.0)
            assert b.shape == (int(n * 1.5 + 0.5),) and math.floor(n * 1.5 + 0.5) == b.shape[0]


def test_a_gap_called_in_construct_is_named_as_msvms():
    with installed():
        import mindspore
        from mindspore import nn as mnn
        from mindspore import ops as mops

        class Sampler(mnn.Cell):
            def construct(self, x):
                return mops.deformable_conv2d(x, x, x, (1, 1), (1, 1, 1, 1))

        with pytest.raises(ms.FrontendError, match=r"test_zoo_apis.py:\d+:\d+: mindspore.ops.deformable_conv2d is not "
                                                   r"provided by msvm \(msvm's gap"):
            Sampler()(mindspore.Tensor(np.ones((1, 1, 2, 2), np.float32)))


def test_asnumpy_of_a_parameter_is_a_writable_copy():
    """mindyolo's heads: ``b = conv.bias.asnumpy(); b[:nc] += ...; ops.assign(conv.bias, Tensor(b))``."""
    conv = nn.Conv2d(2, 4, 1, has_bias=True, bias_init="zeros")
    b = conv.bias.asnumpy()
    b[:2] += 3.0
    assert conv.bias.asnumpy().tolist() == [0.0] * 4            # (a copy: the Parameter as it was)
    ops.assign(conv.bias, ms.Tensor(b))
    assert conv.bias.asnumpy().tolist() == [3.0, 3.0, 0.0, 0.0]
    view = conv.bias.view(2, 2).asnumpy()
    view[0, 0] = 7.0                                              # (a view of it too)
    assert conv.bias.asnumpy()[0] == 3.0


def grid_sample_ref(x, grid, mode, pad, align):
    """PyTorch's grid_sample, point by point in float64 (its CPU kernel adds the corners inside only)."""
    n, c, h, w = x.shape
    out = np.zeros((n, c) + grid.shape[1:3])
    for b, i, j in np.ndindex(n, *grid.shape[1:3]):
        gx, gy = grid[b, i, j].astype(np.float64)
        ix = (gx + 1) / 2 * (w - 1) if align else ((gx + 1) * w - 1) / 2
        iy = (gy + 1) / 2 * (h - 1) if align else ((gy + 1) * h - 1) / 2
        if pad == "border":
            ix, iy = min(max(ix, 0), w - 1), min(max(iy, 0), h - 1)

        def add(yy, xx, weight, b=b, i=i, j=j):     # (a corner outside, or a NaN point's, adds nothing)
            if 0 <= xx <= w - 1 and 0 <= yy <= h - 1:
                out[b, :, i, j] += x[b, :, int(yy), int(xx)] * weight
        if mode == "nearest":
            add(np.round(iy), np.round(ix), 1.0)
        else:
            x0, y0 = np.floor(ix), np.floor(iy)
            fx, fy = ix - x0, iy - y0
            for dy, dx, weight in ((0, 0, (1 - fx) * (1 - fy)), (0, 1, fx * (1 - fy)), (1, 0, (1 - fx) * fy),
                                   (1, 1, fx * fy)):
                add(y0 + dy, x0 + dx, weight)
    return out


class Sampled(nn.Cell):
    def __init__(self, mode, pad, align):
        super().__init__()
        self.mode, self.pad, self.align = mode, pad, align

    def construct(self, x, grid):
        return ops.grid_sample(x, grid, self.mode, self.pad, self.align)


@pytest.mark.parametrize("level", ["L1", "auto", "pynative"])
def test_grid_sample_as_pytorch_samples(level, rng):
    """mindocr's TPS transformer (svtr): bilinear and nearest, zeros and border, corners aligned or not, points
    outside the image, over set_inputs' None dims."""
    with at(level):
        for mode in ("bilinear", "nearest"):
            for pad in ("zeros", "border"):
                for align in (False, True):
                    net = Sampled(mode, pad, align)
                    net.set_inputs(ms.Tensor(shape=[None, 3, None, None], dtype=ms.float32),
                                   ms.Tensor(shape=[None, None, None, 2], dtype=ms.float32))
                    for h, w, ho, wo in ((4, 5, 3, 6), (6, 3, 2, 2)):
                        x = rng.standard_normal((2, 3, h, w)).astype(np.float32)
                        g = rng.uniform(-1.3, 1.3, (2, ho, wo, 2)).astype(np.float32)
                        np.testing.assert_allclose(net(ms.Tensor(x), ms.Tensor(g)).asnumpy(),
                                                   grid_sample_ref(x, g, mode, pad, align), rtol=1e-5, atol=1e-5)
    x = np.ones((1, 1, 3, 3), np.float32)
    x[0, 0, 0, 0] = np.nan                      # (the last point's corners all fall outside, around it)
    g = np.array([[[[np.nan, 0.0], [0.0, np.inf], [0.9, 0.9], [-1.4, 0.0], [-5 / 3, -5 / 3]]]], np.float32)
    for level in ("L1", "auto"):
        with at(level):
            got = Sampled("bilinear", "zeros", False)(ms.Tensor(x), ms.Tensor(g)).asnumpy()
            np.testing.assert_allclose(got, grid_sample_ref(x, g, "bilinear", "zeros", False), rtol=1e-6)
            assert np.isfinite(got).all()
    with pytest.raises(NotImplementedError, match="reflection"):
        ops.grid_sample(ms.Tensor(np.ones((1, 1, 2, 2), np.float32)), ms.Tensor(np.zeros((1, 1, 1, 2), np.float32)),
                        padding_mode="reflection")
