"""FUSED_CONV (issue 18): a convolution, the batch norm after it (folded into its weights) and its
elementwise epilogue (bias, residual add, ReLU/ReLU6/HSwish/SiLU) as one instruction.

Random conv nets (kernel 1/3/7, stride, pad modes, dilation, groups and depthwise, with and without
a bias and a residual add) run in a Cell at L1, L2 and L3 with fusion on and off; the fused run must
agree with the unfused one (the L1 interpreter running each op's reference kernel) and with a
float64 numpy reference (tests/refs/cv.py), NaN and inf included, at several sizes and an empty
batch through one bytecode. The disassembly names the instruction after its parts and maps each
part to its source line; folded weights follow ``set_data``."""

import msvm as ms
import numpy as np
import pytest
from msvm import nn
from msvm.bytecode import disasm
from msvm.interp import kernels
from refs import cv

CONFIGS = [("L1", True), ("L1", False), ("L2", True), ("L3", True), ("L3", False)]
ACTS = {"relu": (nn.ReLU, cv.relu), "relu6": (nn.ReLU6, cv.relu6), "hswish": (nn.HSwish, cv.hswish),
        "silu": (nn.SiLU, lambda x: x / (1 + np.exp(-x))), "none": (None, lambda x: x)}


class ConvBlock(nn.Cell):
    def __init__(self, cin, cout, k, stride, pad_mode, padding, dilation, group, bias, act, residual):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, stride=stride, pad_mode=pad_mode, padding=padding, dilation=dilation,
                              group=group, has_bias=bias)
        self.bn = nn.BatchNorm2d(cout)
        self.act = ACTS[act][0]() if ACTS[act][0] is not None else None
        self.residual = residual

    def construct(self, x):
        out = self.conv(x)
        out = self.bn(out)
        if self.residual:
            out = out + x
        if self.act is not None:
            out = self.act(out)
        return out


def spec(rng):
    k = int(rng.choice([1, 3, 7]))
    kind = rng.choice(["dense", "group", "depthwise"])
    cin = int(rng.choice([4, 6, 8]))
    group = 1 if kind == "dense" else cin if kind == "depthwise" else 2
    cout = cin if kind == "depthwise" or rng.random() < 0.5 else int(rng.choice([4, 8]))
    stride = int(rng.choice([1, 2]))
    pad_mode = str(rng.choice(["same", "pad", "valid"]))
    padding = int(rng.integers(0, 3)) if pad_mode == "pad" else 0
    dilation = int(rng.choice([1, 2])) if k > 1 else 1
    residual = bool(cout == cin and stride == 1 and pad_mode == "same" and rng.random() < 0.6)
    return dict(cin=cin, cout=cout, k=k, stride=stride, pad_mode=pad_mode, padding=padding, dilation=dilation,
                group=group, bias=bool(rng.random() < 0.4), act=str(rng.choice(list(ACTS))), residual=residual)


def build(s, rng):
    net = ConvBlock(**s)
    net.set_train(False)
    for name, p in net.parameters_dict().items():
        v = rng.standard_normal(p.shape).astype(np.float32)
        if "variance" in name:
            v = np.abs(v) + 0.5
        p.set_data(ms.Tensor(v))
    return net


def reference(net, s, x):
    p = {k: v.asnumpy().astype(np.float64) for k, v in net.parameters_dict().items()}
    pad = "same" if s["pad_mode"] == "same" else s["padding"]
    out = cv.conv2d(x.astype(np.float64), p["conv.weight"], p.get("conv.bias"), s["stride"], pad, s["dilation"],
                    s["group"])
    out = cv.batch_norm(out, p, "bn")
    if s["residual"]:
        out = out + x
    return ACTS[s["act"]][1](out)


def _find(p, suffix):
    return next(v for k, v in p.items() if k.endswith(suffix))


def images(rng, s, special=False):
    out = []
    for n, h in ((2, 12), (2, 9), (2, 16)):
        x = rng.standard_normal((n, s["cin"], h, h + 1)).astype(np.float32)
        if special:
            x[0, 0, 1, 1], x[0, -1, 2, 3], x[-1, 0, -1, -1] = np.nan, np.inf, -np.inf
        out.append(x)
    return out


@pytest.fixture(autouse=True)
def _restore():
    yield
    ms.set_context(mode=ms.GRAPH_MODE, jit_config={"jit_level": "L1", "enable_fusion": True})


def run(net, level, fusion, xs):
    from msvm.compiler import tiers

    ms.set_context(mode=ms.GRAPH_MODE, jit_config={"jit_level": level, "enable_fusion": fusion})
    outs = [net(ms.Tensor(x)).asnumpy() for x in xs]
    if level != "L1":
        for _ in range(4):          # compiled kernels, replay, native guard: each must agree
            tiers.wait_for_compiles(30)
            again = [net(ms.Tensor(x)).asnumpy() for x in xs]
            for a, b in zip(outs, again):
                np.testing.assert_array_equal(a, b)
    assert len(net._runner.variants) == 1, "a new size recompiled the Cell"
    return outs


def close(got, want, tol=2e-5):
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    scale = max(1.0, float(np.nanmax(np.abs(np.where(np.isfinite(want), want, 0)))))
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * scale)


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("cfg", CONFIGS, ids=[f"{a}-{'fused' if b else 'unfused'}" for a, b in CONFIGS])
def test_random_conv_blocks_match_reference_and_l1(seed, cfg):
    rng = np.random.default_rng(seed)
    s = spec(rng)
    net = build(s, rng)
    xs = images(rng, s, special=seed % 3 == 0)
    try:
        wants = [reference(net, s, x) for x in xs]
    except ValueError:                  # the window is larger than the input: msvm says so as well
        with pytest.raises((ValueError, ms.MsvmError)):
            run(net, *cfg, xs)
        return
    got = run(net, *cfg, xs)
    ref_net = build(s, np.random.default_rng(seed))
    for k, p in net.parameters_dict().items():
        ref_net.parameters_dict()[k].set_data(p)
    l1 = run(ref_net, "L1", False, xs)
    for g, w, r in zip(got, wants, l1):
        close(g, w)
        close(g, r)
    if cfg[1]:
        names = [disasm.display_name(i) for c in next(iter(net._runner.variants.values())).code.all_codes()
                 for i in c.instrs]
        assert any(n.startswith("FUSED_CONV_BIAS_BN" if s["bias"] else "FUSED_CONV_BN") for n in names), names


def test_name_parts_and_lines():
    ms.set_context(mode=ms.GRAPH_MODE, jit_config={"jit_level": "L1", "enable_fusion": True})
    rng = np.random.default_rng(0)
    s = dict(cin=4, cout=4, k=3, stride=1, pad_mode="same", padding=0, dilation=1, group=1, bias=False,
             act="relu", residual=True)
    net = build(s, rng)
    net(ms.Tensor(rng.standard_normal((1, 4, 8, 8)).astype(np.float32)))
    code = next(iter(net._runner.variants.values())).code
    fused = [i for i in code.instrs if i.op.name == "FUSED_CONV"]
    assert [disasm.display_name(i) for i in fused] == ["FUSED_CONV_BN_ADD_RELU"]
    src = ConvBlock.construct.__code__.co_firstlineno
    lines = [loc.line - src for _, loc in fused[0].parts]
    assert lines == [1, 2, 4, 6], lines          # self.conv(x), self.bn(out), out + x, self.act(out)
    assert "FUSED_CONV_BN_ADD_RELU" in disasm.dump(code, with_callees=False)


def test_empty_batch_and_set_data_refold():
    ms.set_context(mode=ms.GRAPH_MODE, jit_config={"jit_level": "L1", "enable_fusion": True})
    rng = np.random.default_rng(1)
    s = dict(cin=4, cout=8, k=3, stride=2, pad_mode="pad", padding=1, dilation=1, group=1, bias=True,
             act="relu6", residual=False)
    net = build(s, rng)
    x = rng.standard_normal((1, 4, 10, 10)).astype(np.float32)
    close(net(ms.Tensor(x)).asnumpy(), reference(net, s, x))
    assert net(ms.Tensor(np.zeros((0, 4, 10, 10), np.float32))).shape == (0, 8, 5, 5)
    gamma = net.bn.gamma
    gamma.set_data(ms.Tensor(gamma.asnumpy() * -2.0))       # a new array: the fold must be redone
    net.conv.weight.set_data(ms.Tensor(net.conv.weight.asnumpy() + 0.25))
    close(net(ms.Tensor(x)).asnumpy(), reference(net, s, x))


@pytest.mark.parametrize("seed", range(12))
def test_kernel_against_reference_sequence(seed):
    """kernels.fused_conv against CONV2D's own kernel, then BATCH_NORM, then the program."""
    rng = np.random.default_rng(100 + seed)
    n, c = int(rng.integers(0, 3)), int(rng.choice([3, 4, 8]))
    group = int(rng.choice([g for g in (1, 2, c) if c % g == 0]))
    o = c if group == c and rng.random() < 0.5 else group * int(rng.integers(1, 4))
    k = int(rng.choice([1, 3, 7]))
    stride, dil = (int(rng.integers(1, 3)),) * 2, (int(rng.integers(1, 3)),) * 2
    pad = ("same",) if rng.random() < 0.5 else tuple(int(v) for v in rng.integers(0, 3, 4))
    x = rng.standard_normal((n, c, 15, 13)).astype(np.float32)
    w = rng.standard_normal((o, c // group, k, k)).astype(np.float32)
    bn = [rng.standard_normal(o).astype(np.float32) for _ in range(3)] + [np.abs(rng.standard_normal(o)).astype(
        np.float32) + 0.1]
    for a in [w] + bn:
        a.setflags(write=False)                 # as a Parameter's data: prepared once, cached
    extra = rng.standard_normal((1, o, 1, 1)).astype(np.float32)
    program = (("in", 0), ("in", 1), ("BROADCAST_ADD",), ("in", 0), ("BROADCAST_MUL",), ("RELU",))
    try:
        want = kernels.conv2d(x, w, stride, pad, dil, group)
    except ValueError:                  # the window is larger than the input: the fused kernel refuses it too
        with pytest.raises(ValueError):
            kernels.fused_conv(x, w, *bn, extra, stride, pad, dil, group, 1e-3, program, 7)
        return
    want = kernels.batch_norm(want, *bn, 1e-3)
    want = np.maximum((want + extra) * want, 0)
    for _ in range(2):                          # the second call hits the prepared weights
        got = kernels.fused_conv(x, w, *bn, extra, stride, pad, dil, group, 1e-3, program, 7)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * max(1.0, np.abs(want).max(initial=0)))


class Double(nn.Cell):
    def construct(self, x):
        return x * 2.0


class UserTail(nn.Cell):
    def __init__(self):
        super().__init__()
        self.conv, self.bn, self.double = nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), Double()

    def construct(self, x):
        return self.double(self.bn(self.conv(x)))


def test_only_library_layers_are_inlined():
    """A user's own Cell keeps its frame (breakpoints, trace events): only msvm's layers are inlined."""
    ms.set_context(mode=ms.GRAPH_MODE, jit_config={"jit_level": "L1", "enable_fusion": True})
    net = UserTail()
    net.set_train(False)
    x = np.random.default_rng(3).standard_normal((1, 3, 6, 6)).astype(np.float32)
    got = net(ms.Tensor(x)).asnumpy()
    code = next(iter(net._runner.variants.values())).code
    names = [disasm.display_name(i) for i in code.instrs]
    assert "FUSED_CONV_BN" in names and names.count("CALL_CELL") == 1, names
    p = {k: v.asnumpy().astype(np.float64) for k, v in net.parameters_dict().items()}
    want = 2 * cv.batch_norm(cv.conv2d(x.astype(np.float64), p["conv.weight"], None, 1, "same"), p, "bn")
    close(got, want)
