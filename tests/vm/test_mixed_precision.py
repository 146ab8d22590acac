"""``Cell.to_float`` (MindSpore's mixed precision): a float16 Cell casts its float tensor inputs
and the Parameters its construct reads to float16 where it starts, so its ops compute in float16
and it returns float16; sub-Cells inherit the type, and a later ``to_float`` on a sub-Cell
overrides it there. Checked against numpy run in float16 (the same roundings: tight) and in
float64 (float16's tolerance), in GRAPH_MODE (the bytecode) and PYNATIVE_MODE (eager ops)."""

import msvm as ms
import numpy as np
import pytest
from msvm import nn, ops
from msvm.compat import MindSporeGap


class Head(nn.Cell):
    def __init__(self):
        super().__init__()
        self.dense = nn.Dense(64, 5)

    def construct(self, h):
        return ops.softmax(self.dense(h) * 0.5, -1)


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, pad_mode="valid", has_bias=True)
        self.scale = ms.Parameter(ms.Tensor(np.linspace(0.5, 1.5, 4, dtype=np.float32).reshape(1, 4, 1, 1)),
                                  name="scale")
        self.pool = nn.MaxPool2d(2, 2)
        self.head = Head()

    def construct(self, x):
        h = self.pool(ops.relu(self.conv(x) * self.scale))
        return self.head(h.reshape(h.shape[0], -1))


def weights(net, rng):
    for p in net.get_parameters():
        p.set_data(ms.Tensor((rng.standard_normal(p.shape) * 0.5).astype(np.float32)))
    return {k: p.asnumpy() for k, p in net.parameters_dict().items()}


def numpy_net(w, x, dtype):
    """The Net in numpy, every value in ``dtype`` (float16: rounded where msvm rounds)."""
    c = lambda a: np.asarray(a, dtype)     # noqa: E731
    acc = np.float64 if dtype == np.float64 else np.float32      # what a product sums in
    x, k = c(x), c(w["conv.weight"])
    n, _, hh, ww = x.shape
    win = np.lib.stride_tricks.sliding_window_view(x, (3, 3), axis=(2, 3))        # n c h w 3 3
    conv = c(np.einsum("nchwij,ocij->nohw", win.astype(acc), k.astype(acc)))
    conv = c(conv + c(w["conv.bias"]).reshape(1, -1, 1, 1))
    h = np.maximum(c(conv * c(w["scale"])), c(0))
    h = h.reshape(n, 4, (hh - 2) // 2, 2, (ww - 2) // 2, 2).max(axis=(3, 5)).reshape(n, -1)
    z = c(c(h.astype(acc) @ c(w["head.dense.weight"]).T.astype(acc)) + c(w["head.dense.bias"]))
    z = c(z * c(0.5))
    e = np.exp(z - z.max(-1, keepdims=True))
    return c(e / e.sum(-1, keepdims=True))


@pytest.mark.parametrize("mode", ["graph", "pynative"])
def test_a_float16_cell_computes_in_float16(mode, rng):
    net = Net()
    w = weights(net, rng)
    x = rng.standard_normal((2, 3, 10, 10)).astype(np.float32)
    want32 = numpy_net(w, x, np.float64)
    ms.set_context(mode=ms.GRAPH_MODE if mode == "graph" else ms.PYNATIVE_MODE)
    try:
        assert net(ms.Tensor(x)).dtype == ms.float32
        assert net.to_float(ms.float16) is net
        out = net(ms.Tensor(x))
        again = net(ms.Tensor(x))
    finally:
        ms.set_context(mode=ms.GRAPH_MODE)
    assert out.dtype == ms.float16 and out.shape == (2, 5)
    got = out.asnumpy()
    np.testing.assert_array_equal(again.asnumpy(), got)
    np.testing.assert_allclose(got.astype(np.float64), numpy_net(w, x, np.float16).astype(np.float64),
                               rtol=4e-3, atol=2e-3)
    err = np.abs(got - want32).max()
    assert 0 < err < 2e-2, f"float16 against float64: {err:.2e}"
    assert net.parameters_dict()["scale"].dtype == ms.float32, "the Parameters themselves stay float32"


def test_to_float_on_a_sub_cell_overrides_and_float32_undoes(rng):
    net = Net()
    weights(net, rng)
    x = ms.Tensor(rng.standard_normal((3, 3, 10, 10)).astype(np.float32))
    want = net(x).asnumpy()
    net.to_float(ms.float16)
    assert net.head._mixed_precision is ms.float16
    net.head.to_float(ms.float32)          # as amp keeps a head in float32: its inputs cast back
    out = net(x)
    assert out.dtype == ms.float32
    assert 0 < np.abs(out.asnumpy() - want).max() < 1e-2      # the convolution ran in float16
    net.to_float(ms.float32)
    np.testing.assert_allclose(net(x).asnumpy(), want, rtol=1e-6, atol=1e-7)


def test_to_float_dtype_errors():
    net = Net()
    with pytest.raises(ValueError, match="dst_type"):
        net.to_float(ms.int32)
    with pytest.raises(MindSporeGap, match="bfloat16"):
        net.to_float("bfloat16")


def test_float16_tensor_inputs_of_a_float32_cell_promote():
    """Without to_float nothing is cast: float16 input and float32 weights give float32 (promotion)."""
    d = nn.Dense(4, 3)
    out = d(ms.Tensor(np.ones((2, 4), np.float16)))
    assert out.dtype == ms.float32


@pytest.mark.parametrize("name", ["gelu", "sigmoid", "erf", "tanh", "exp", "relu", "silu", "softplus", "elu",
                                  "hardswish", "hardsigmoid", "relu6", "leaky_relu"])
def test_unary_ops_keep_float16(name):
    """(found by to_float) scipy's erf and expit answer float16 in float64: the kernels keep float16,
    eagerly and in a compiled Cell, with the values of float64's answer rounded to float16."""
    x = np.array([[-3.0, -0.5, 0.0, 0.25, 2.0, np.nan, np.inf, -np.inf]], np.float16)
    fn = getattr(ops, name)
    with np.errstate(all="ignore"):
        out = fn(ms.Tensor(x))
        want = fn(ms.Tensor(x.astype(np.float64))).asnumpy()
        jf = ms.jit(lambda t: fn(t) * 1.0)
        compiled = jf(ms.Tensor(x))
    assert out.dtype == ms.float16 and compiled.dtype == ms.float16, name
    np.testing.assert_allclose(out.asnumpy().astype(np.float64), want, rtol=2e-3, atol=2e-3)
    np.testing.assert_array_equal(compiled.asnumpy(), out.asnumpy())
