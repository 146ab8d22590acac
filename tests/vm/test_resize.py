"""ops.interpolate (RESIZE): nearest and bilinear, against per-pixel references written from
the definitions (PyTorch's and MindSpore's source coordinates), eagerly and in a Cell whose
input sizes change on one bytecode, in every tier."""

import msvm as ms
import numpy as np
import pytest
from msvm import nn, ops
from refs import cv


@pytest.mark.parametrize("mode,align", [("nearest", False), ("bilinear", False), ("bilinear", True)])
@pytest.mark.parametrize("hw,size", [((4, 6), (8, 3)), ((5, 5), (2, 9)), ((3, 7), (3, 7)), ((1, 4), (5, 1))])
def test_interpolate_to_a_size(mode, align, hw, size):
    x = np.random.default_rng(sum(hw)).standard_normal((2, 3) + hw).astype(np.float32)
    got = ops.interpolate(ms.Tensor(x), size=size, mode=mode, align_corners=align or None).asnumpy()
    np.testing.assert_allclose(got, cv.resize(x.astype(np.float64), *size, mode, align), rtol=1e-5, atol=1e-5)


class Up(nn.Cell):
    def construct(self, x):
        a = ops.interpolate(x, scale_factor=2, mode="bilinear")
        b = ops.interpolate(x, size=(x.shape[2] + 3, 5), mode="nearest")
        return a, b


@pytest.mark.parametrize("level", ["L1", "L2", "L3"])
def test_interpolate_in_a_cell_on_one_bytecode(level):
    ms.set_context(jit_config={"jit_level": level})
    try:
        net = Up()
        for h, w in [(4, 6), (7, 3), (4, 6), (9, 9)]:
            x = np.random.default_rng(h * w).standard_normal((2, 3, h, w)).astype(np.float32)
            a, b = net(ms.Tensor(x))
            np.testing.assert_allclose(a.asnumpy(), cv.resize(x.astype(np.float64), 2 * h, 2 * w, "bilinear", False),
                                       rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(b.asnumpy(), cv.resize(x.astype(np.float64), h + 3, 5, "nearest", False))
        assert len(net._runner.variants) == 1
    finally:
        ms.set_context(jit_config={"jit_level": "L1"})


def test_interpolate_edge_values_and_errors():
    x = np.array([[[[np.nan, 1.0], [np.inf, -0.0]]]], np.float32)
    got = ops.interpolate(ms.Tensor(x), scale_factor=2).asnumpy()
    np.testing.assert_array_equal(got, cv.resize(x.astype(np.float64), 4, 4, "nearest", False).astype(np.float32))
    with pytest.raises(ValueError, match="exactly one of size and scale_factor"):
        ops.interpolate(ms.Tensor(x))
    with pytest.raises(NotImplementedError, match="scale_factor must be a positive integer"):
        ops.interpolate(ms.Tensor(x), scale_factor=1.5)
    with pytest.raises(NotImplementedError, match="mode 'bicubic'"):
        ops.interpolate(ms.Tensor(x), size=(3, 3), mode="bicubic")
