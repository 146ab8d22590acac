"""What a convolution keeps in memory (issue 18: peak memory at most onnxruntime's). A dense or
grouped convolution holds at most one prepared copy of its weight, the taps product's packed A,
made from the Parameter's own values (the batch norm is the kernel's epilogue, x scale + shift,
not a folded copy of W), and by default none (the product reads the Parameter); the interpreter
keeps none. Its staging buffers (phase images, cropped accumulators) are one workspace per
thread, grown to the largest layer, and a layer zeroes the borders it reads, whatever another
layer left there."""

import msvm as ms
import numpy as np
import pytest
from msvm import nn
from msvm.compiler import conv, gemm
from msvm.interp import kernels as K
from test_conv_tiers2 import Block, close, forward, reference

SPECS = [dict(cin=16, cout=24, k=3, stride=1, pad_mode="same", padding=0, dilation=1, group=1, bias=False,
              act="relu", residual=False),
         dict(cin=24, cout=32, k=1, stride=2, pad_mode="valid", padding=0, dilation=1, group=1, bias=True,
              act="none", residual=False),
         dict(cin=32, cout=32, k=1, stride=1, pad_mode="valid", padding=0, dilation=1, group=1, bias=False,
              act="relu", residual=True),
         dict(cin=32, cout=20, k=3, stride=2, pad_mode="pad", padding=1, dilation=1, group=2, bias=False,
              act="relu6", residual=False)]


class Chain(nn.Cell):
    def __init__(self):
        super().__init__()
        self.blocks = nn.SequentialCell([Block(**s) for s in SPECS])

    def construct(self, x):
        return self.blocks(x)


def chain(seed=0):
    rng = np.random.default_rng(seed)
    net = Chain()
    net.set_train(False)
    for name, p in net.parameters_dict().items():
        v = rng.standard_normal(p.shape)
        if "variance" in name:
            v = np.abs(v) + 0.5
        p.set_data(ms.Tensor(v.astype(np.float32)))
    return net


def want(net, x):
    p = net.parameters_dict()
    for i, s in enumerate(SPECS):
        sub = {k.split(".", 2)[2]: v for k, v in p.items() if k.startswith(f"blocks.{i}.")}
        x = reference(_Params(sub), s, x).astype(np.float32)
    return x


class _Params:
    def __init__(self, d):
        self.d = d

    def parameters_dict(self):
        return self.d


@pytest.fixture
def fresh(monkeypatch):
    """Empty prepared-weight caches (other tests' entries aside) and the taps route."""
    monkeypatch.setattr(conv, "_TAPW", {})
    monkeypatch.setattr(K, "_PREPARED", {})
    monkeypatch.setattr(K, "_AFFINE", {})
    monkeypatch.setenv(conv.ROUTE_ENV, "taps")


def _packed_bytes(shape, group):
    o, cg, kh, kw = shape
    mr = gemm.tile_rows(np.float32)
    return group * -(-(o // group) // mr) * mr * cg * kh * kw * 4


@pytest.mark.parametrize("layout", ["packed", "inplace"])
@pytest.mark.parametrize("level", ["L1", "L2", "L3"])
def test_one_prepared_copy_per_weight(fresh, monkeypatch, level, layout):
    monkeypatch.setenv(conv.A_ENV, layout)
    net = chain()
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal((1, 16, 13, 15)).astype(np.float32), rng.standard_normal((2, 16, 9, 8)).astype(np.float32)]
    for got, x in zip(forward(net, level, True, xs), xs):
        close(got, want(net, x), tol=1e-4)
    held = conv.prepared_bytes()
    assert held["folded"] == 0                    # (no W * scale copy anywhere: L1 nor the tiers)
    assert held["affine"] <= sum(2 * 4 * s["cout"] for s in SPECS)
    weights = [net.parameters_dict()[f"blocks.{i}.conv.weight"] for i in range(len(SPECS))]
    if level == "L1" or layout == "inplace":
        assert held["taps"] == 0                  # (the interpreter, and the in-place product, read W itself)
        return
    live = [v for v in conv._TAPW.values() if v[0]() is not None]
    assert len(live) == len(SPECS)                # one packed A per weight, whatever the sizes seen
    assert held["taps"] == sum(_packed_bytes(w.shape, s["group"]) for w, s in zip(weights, SPECS))


def test_depthwise_keeps_its_small_folded_copy_only(fresh):
    s = dict(cin=8, cout=8, k=3, stride=1, pad_mode="same", padding=0, dilation=1, group=8, bias=False,
             act="relu6", residual=False)
    rng = np.random.default_rng(2)
    net = Block(**s)
    net.set_train(False)
    for name, p in net.parameters_dict().items():
        v = rng.standard_normal(p.shape)
        p.set_data(ms.Tensor((np.abs(v) + 0.5 if "variance" in name else v).astype(np.float32)))
    x = rng.standard_normal((1, 8, 12, 12)).astype(np.float32)
    close(forward(net, "L3", True, [x])[0], reference(net, s, x), tol=1e-4)
    held = conv.prepared_bytes()
    assert held["taps"] == 0 and held["folded"] == (8 * 9 + 8) * 4       # (the folded weight and its bias)


@pytest.mark.parametrize("mode_spec", [((1, 16, 13, 15), (24, 16, 3, 3), (1, 1), (1, 1, 1, 1), "phase"),
                                       ((1, 16, 13, 15), (24, 16, 3, 3), (2, 2), (1, 1, 1, 1), "phase"),
                                       ((1, 3, 20, 20), (8, 3, 7, 7), (2, 2), (3, 3, 3, 3), "phase"),
                                       ((1, 24, 12, 12), (16, 24, 1, 1), (2, 2), (0, 0, 0, 0), "sub")])
def test_shared_workspace_borders_are_zeroed(mode_spec):
    """A layer's result does not depend on what another layer left in the thread's workspace (here:
    NaN everywhere), and the workspace is the largest need, not a sum."""
    x_shape, w_shape, stride, pad, mode = mode_spec
    rng = np.random.default_rng(3)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    tc = conv.TapsConv(x_shape, w_shape, stride, pad, (1, 1), 1, np.float32)
    assert tc.mode == mode
    a = conv.prepared_a(w, 1, np.float32, tc.inplace)
    first = tc(x, a).copy()
    big = conv.workspace(0, 1 << 16, np.float32)
    big[:] = np.nan
    conv.workspace(1, 1 << 16, np.float32)[:] = np.nan
    again = tc(x, a)
    np.testing.assert_array_equal(first, again)
    assert not np.isnan(again).any()
    close(again, K.conv2d(x, w, stride, pad, (1, 1), 1), tol=1e-4)
    before = conv.workspace_bytes()
    tc(x, a)
    assert conv.workspace_bytes() == before       # (grown once to the largest request, then reused)


def test_weights_are_read_in_place_with_short_tiles_where_rows_alias(fresh, monkeypatch):
    """By default (conv.a_in_place) the taps product reads A from the Parameter: no copy is held;
    a weight whose rows lie a multiple of 4 KB apart (a tile's 12 rows would share an L1 set) is
    read with 8-row tiles. Both agree with the reference, at one and two threads."""
    monkeypatch.delenv(conv.A_ENV, raising=False)
    assert conv.a_in_place()
    wide = gemm.tile_rows(np.float32) > conv.ALIAS_ROWS          # (AVX-512: 12-row tiles; AVX2's are 6)
    assert conv.tile_rows_in_place(576, np.float32) == 0 and conv.tile_rows_in_place(2304, np.float32) == 0
    assert conv.tile_rows_in_place(1024, np.float32) == conv.tile_rows_in_place(512, np.float64) == \
        (conv.ALIAS_ROWS if wide else 0)
    rng = np.random.default_rng(5)
    for cin, cout, k, aliased in ((1024, 20, 1, True), (1024, 300, 1, True), (64, 20, 3, False), (48, 20, 1, False)):
        x = rng.standard_normal((2, cin, 6, 7)).astype(np.float32)
        w = rng.standard_normal((cout, cin, k, k)).astype(np.float32)
        pad = (k // 2,) * 4
        tc = conv.TapsConv(x.shape, w.shape, (1, 1), pad, (1, 1), 1, np.float32)
        assert tc.inplace and tc.rows == (conv.ALIAS_ROWS if aliased and wide else 0)
        a = conv.prepared_a(w, 1, np.float32, tc.inplace)
        assert a is w                                       # (the array itself, no copy)
        for split in (1, 2):
            close(tc(x, a, split=split), K.conv2d(x, w, (1, 1), pad, (1, 1), 1), tol=1e-4)
    assert conv.prepared_bytes()["taps"] == 0
