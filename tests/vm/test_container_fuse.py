"""msvm's own containers inlined before fusion (issue 18: compiler/inline.py ``inlinable``) and
the convolution runs that may not grow (compiler/fuse.py ``_grows``, conv.plan_gemm).

A ResNet bottleneck's ``out += self.down_sample(x)`` (an ``nn.SequentialCell([conv, bn])``) puts
the add and the ReLU into the downsampling convolution's epilogue, its residual the main branch:
FUSED_CONV_BN_ADD_RELU, parts mapped to the user's lines. A squeeze-excite gate ``x * gate(conv(s))``
(the convolution's result [N, C, 1, 1], x larger) stays out of the convolution's epilogue; a
subtraction's operands are not swapped. MobileNet v2's ``x + self.conv(x)`` (x loaded before the
convolutions) has its add in the last convolution's epilogue too (fuse.py ``_sink_into_conv_run``),
also where the name was written in between (``y = x; x = relu(x); y + self.conv(x)``). Each at L1,
L2 and L3, fused and not, against a float64 numpy reference, NaN and inf included, at several sizes through one bytecode."""

import msvm as ms
import numpy as np
import pytest
from msvm import nn, ops
from msvm.bytecode import disasm
from refs import cv

SIZES = ((2, 12, 13), (2, 9, 9), (2, 16, 10))
CONFIGS = [("L1", True), ("L2", True), ("L3", True), ("L3", False)]


class Bottleneck(nn.Cell):
    def __init__(self, cin, cout, stride, op):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, stride=stride, pad_mode="pad", padding=1)
        self.bn = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU()
        self.down_sample = nn.SequentialCell([nn.Conv2d(cin, cout, 1, stride=stride), nn.BatchNorm2d(cout)])
        self.op = op

    def construct(self, x):
        out = self.bn(self.conv(x))
        identity = self.down_sample(x)
        if self.op == "add":
            out += identity
        else:
            out = out - identity
        return self.relu(out)


class Excite(nn.Cell):
    """mindcv's SqueezeExcite: a gate of the channel means, times the input."""

    def __init__(self, c):
        super().__init__()
        self.reduce = nn.Conv2d(c, c // 2, 1, has_bias=True)
        self.expand = nn.Conv2d(c // 2, c, 1, has_bias=True)
        self.act = nn.ReLU()
        self.gate = nn.HSigmoid()

    def construct(self, x):
        s = ops.mean(x, (2, 3), True)
        s = self.act(self.reduce(s))
        s = self.gate(self.expand(s))
        return x * s


class Inverted(nn.Cell):
    """mindcv's InvertedResidual: ``x + self.conv(x)`` (the input loaded before the layers run); ``kind``
    "sub" subtracts instead, "store" keeps the input as y and rebinds x before the layers."""

    def __init__(self, c, kind):
        super().__init__()
        self.conv = nn.SequentialCell([nn.Conv2d(c, 2 * c, 1), nn.BatchNorm2d(2 * c), nn.ReLU6(),
                                       nn.Conv2d(2 * c, c, 1), nn.BatchNorm2d(c)])
        self.kind = kind

    def construct(self, x):
        if self.kind == "add":
            return x + self.conv(x)
        if self.kind == "sub":
            return x - self.conv(x)
        y = x
        x = ops.relu(x)
        return y + self.conv(x)


def want_inverted(p, x, kind):
    h = np.clip(cv.batch_norm(cv.conv2d(np.maximum(x, 0) if kind == "store" else x, p["conv.0.weight"], None, 1, 0,
                                        1, 1), p, "conv.1"), 0, 6)
    y = cv.batch_norm(cv.conv2d(h, p["conv.3.weight"], None, 1, 0, 1, 1), p, "conv.4")
    return x - y if kind == "sub" else x + y


def weights(net, rng):
    net.set_train(False)
    for name, p in net.parameters_dict().items():
        v = rng.standard_normal(p.shape).astype(np.float32)
        p.set_data(ms.Tensor(np.abs(v) + 0.5 if "variance" in name else v))
    return {k: v.asnumpy().astype(np.float64) for k, v in net.parameters_dict().items()}


def want_bottleneck(p, x, stride, op):
    out = cv.batch_norm(cv.conv2d(x, p["conv.weight"], None, stride, 1, 1, 1), p, "bn")
    ds = cv.batch_norm(cv.conv2d(x, p["down_sample.0.weight"], None, stride, 0, 1, 1), p, "down_sample.1")
    return np.maximum(out + ds if op == "add" else out - ds, 0)


def want_excite(p, x):
    s = x.mean(axis=(2, 3), keepdims=True)
    s = np.maximum(cv.conv2d(s, p["reduce.weight"], p["reduce.bias"], 1, 0, 1, 1), 0)
    s = cv.conv2d(s, p["expand.weight"], p["expand.bias"], 1, 0, 1, 1)
    return x * np.clip(s / 6 + 0.5, 0, 1)


@pytest.fixture(autouse=True)
def _restore():
    yield
    ms.set_context(mode=ms.GRAPH_MODE, jit_config={"jit_level": "L1", "enable_fusion": True})


def images(rng, c):
    xs = [rng.standard_normal((n, c, h, w)).astype(np.float32) for n, h, w in SIZES]
    xs[0][0, 0, 1, 1], xs[0][-1, -1, 2, 3], xs[2][0, 1, -1, -1] = np.nan, np.inf, -np.inf
    return xs


def run(net, level, fusion, xs):
    from msvm.compiler import tiers

    ms.set_context(mode=ms.GRAPH_MODE, jit_config={"jit_level": level, "enable_fusion": fusion})
    outs = [net(ms.Tensor(x)).asnumpy() for x in xs]
    for _ in range(3 if level != "L1" else 0):        # compiled kernels, replay, guard: each agrees
        tiers.wait_for_compiles(30)
        for a, x in zip(outs, xs):
            np.testing.assert_array_equal(a, net(ms.Tensor(x)).asnumpy())
    assert len(net._runner.variants) == 1
    return outs


def close(got, want, tol=1e-4):
    assert got.shape == want.shape
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    scale = max(1.0, float(np.nanmax(np.abs(np.where(np.isfinite(want), want, 0)))))
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * scale)


def fused_names(net):
    var = next(iter(net._runner.variants.values()))
    return [line for line in disasm.dump(var.code, with_callees=False).splitlines()
            if "FUSED" in line or "CALL_CELL" in line]


@pytest.mark.parametrize("level,fusion", CONFIGS)
@pytest.mark.parametrize("stride,op", [(1, "add"), (2, "add"), (2, "sub")])
def test_downsample_container(level, fusion, stride, op):
    rng = np.random.default_rng(stride)
    net = Bottleneck(6, 8, stride, op)
    p = weights(net, rng)
    xs = images(rng, 6)
    for got, x in zip(run(net, level, fusion, xs), xs):
        with np.errstate(invalid="ignore"):
            close(got, want_bottleneck(p, x.astype(np.float64), stride, op))
    if level != "L1" and fusion:
        names = fused_names(net)
        assert not any("CALL_CELL" in n for n in names), names          # (the SequentialCell inlined)
        if op == "add":                 # (the add and ReLU: the downsampling convolution's epilogue)
            src = open(__file__).read().splitlines()
            line = next(i for i, t in enumerate(src, 1) if "identity = self.down_sample(x)" in t)
            assert any("FUSED_CONV_BN_ADD_RELU" in n and f"test_container_fuse.py:{line}:" in n for n in names), names
        else:                           # (a - b is not b - a: the subtraction keeps its order)
            assert not any("FUSED_CONV_BN_SUB" in n for n in names), names


@pytest.mark.parametrize("level,fusion", CONFIGS)
def test_excite_gate_stays_out_of_the_convolution(level, fusion):
    rng = np.random.default_rng(7)
    net = Excite(8)
    p = weights(net, rng)
    xs = images(rng, 8)
    for got, x in zip(run(net, level, fusion, xs), xs):
        with np.errstate(invalid="ignore"):
            close(got, want_excite(p, x.astype(np.float64)))
    if level != "L1" and fusion:
        names = fused_names(net)
        assert not any("FUSED_CONV" in n and "MUL" in n.split("(")[0] for n in names), names


@pytest.mark.parametrize("level,fusion", CONFIGS)
@pytest.mark.parametrize("kind", ["add", "sub", "store"])
def test_inverted_residual_add_joins_the_last_convolution(level, fusion, kind):
    rng = np.random.default_rng(11)
    net = Inverted(6, kind)
    p = weights(net, rng)
    xs = images(rng, 6)
    for got, x in zip(run(net, level, fusion, xs), xs):
        with np.errstate(invalid="ignore"):
            close(got, want_inverted(p, x.astype(np.float64), kind))
    if level != "L1" and fusion:
        names = fused_names(net)
        fused_add = [n for n in names if "FUSED_CONV_BN_ADD" in n]
        if kind == "sub":               # (a - b is not b - a)
            assert not fused_add and not any("FUSED_CONV_BN_SUB" in n for n in names), names
        else:                           # (the add: the last convolution's epilogue, at the user's line)
            src = open(__file__).read().splitlines()
            line = next(i for i, t in enumerate(src, 1) if ("return x + self.conv(x)" if kind == "add"
                                                            else "return y + self.conv(x)") in t)
            assert any(f"test_container_fuse.py:{line}:" in n for n in fused_add), names
