"""CONV2D, MAX_POOL2D, AVG_POOL2D, ADAPTIVE_AVG_POOL2D and GATHER against float64 numpy
references written from the definitions (tests/refs/cv.py): eagerly (PYNATIVE), and inside a
Cell in GRAPH_MODE at L1, L2 and L3 with fusion on and off, where one Cell is called at
several batch/height/width sizes and must compile one bytecode for all of them."""

import inspect

import msvm as ms
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from msvm import nn, ops
from msvm.errors import SourceError
from refs import cv

# (jit_level, enable_fusion); "pynative" runs ops.* eagerly
CONFIGS = ["pynative", ("L1", True), ("L1", False), ("L2", True), ("L3", True), ("L3", False)]
CONFIG_IDS = ["pynative", "L1", "L1-nofuse", "L2", "L3", "L3-nofuse"]


@pytest.fixture(params=CONFIGS, ids=CONFIG_IDS)
def cfg(request):
    c = request.param
    if c != "pynative":
        if c[0] != "L1":
            pytest.importorskip("llvmlite")
        ms.set_context(mode=ms.GRAPH_MODE, jit_config={"jit_level": c[0], "enable_fusion": c[1]})
    yield c
    ms.set_context(mode=ms.GRAPH_MODE, jit_config={"jit_level": "L1", "enable_fusion": True})


def run_graph(cell, cfg, inputs):
    """cell(*args) for each args in inputs, through one compiled bytecode. The compiled tiers
    call every input four more times once their background compiles are done: the second call
    at a signature runs the compiled kernels, the fourth its straight-line replay, the fifth
    (for the last signature) the native call guard (callpath.py)."""
    from msvm.compiler import tiers

    outs = [cell(*args).asnumpy() for args in inputs]
    if cfg[0] != "L1":
        tiers.wait_for_compiles(30)
        if cfg[1] and not fused_conv(cell):  # (only fused chains are jit-able: with fusion off every op runs in
            #                                    the interpreter; a FUSED_CONV runs its epilogue in its own kernel)
            assert compiled_levels(cell) == {int(cfg[0][1])}, "the elementwise tail was not compiled"
        for _ in range(4):
            again = [cell(*args).asnumpy() for args in inputs]
            for a, b in zip(outs, again):
                np.testing.assert_array_equal(a, b)
            tiers.wait_for_compiles(30)
        assert all(entry.replay for entry in cell._runner.memo.values()), "a signature was never replayed"
    assert len(cell._runner.variants) == 1, "a new size recompiled the Cell"
    return outs


def fused_conv(cell) -> bool:
    codes = next(iter(cell._runner.variants.values())).code.all_codes()
    return any(i.op.name == "FUSED_CONV" for c in codes for i in c.instrs)


def compiled_levels(cell) -> set:
    """The tiers (2, 3) of the kernels compiled for the Cell's bytecode (as tests/jit look at them)."""
    from msvm.compiler import tiers

    codes = next(iter(cell._runner.variants.values())).code.all_codes()
    sites = [s for c in codes for s in c.__dict__.get("jit_sites", {}).values()]
    return {k.level for s in sites for k in list(s.l2.values()) + list(s.l3.values()) if isinstance(k, tiers.Compiled)}


def close(got, want, tol=1e-5):
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def images(rng, c, sizes):
    """float32 NCHW inputs, one per (n, h, w); batch sizes >= 2 (a dim of 1 is specialized)."""
    return [rng.standard_normal((n, c, h, w)).astype(np.float32) for n, h, w in sizes]


SIZES = [(2, 9, 11), (3, 16, 13), (2, 12, 12)]


# ---------------------------------------------------------------- conv2d

CONV_CASES = {   # C, O, kernel, stride, pad_mode, padding, dilation, groups, bias
    "1x1": (4, 6, 1, 1, "valid", 0, 1, 1, False),
    "3x3-pad1-bias": (3, 5, 3, 1, "pad", 1, 1, 1, True),
    "7x7-stride2-pad3": (3, 4, 7, 2, "pad", 3, 1, 1, False),
    "depthwise-same-stride2": (6, 6, 3, 2, "same", 0, 1, 6, True),
    "depthwise-5x5-same": (4, 4, 5, 1, "same", 0, 1, 4, False),
    "depthwise-multiplier2": (3, 6, 3, 1, "pad", 1, 1, 3, True),
    "grouped-valid": (6, 4, 3, 1, "valid", 0, 1, 2, True),
    "dilated-pad2": (3, 4, 3, 1, "pad", (1, 2), 2, 1, False),
    "pad4-stride2": (4, 6, (3, 2), (2, 1), "pad", (1, 0, 2, 1), 1, 2, False),
    "same-stride2-even-odd": (2, 3, 4, 2, "same", 0, 1, 1, True),
}


def _ref_pad(pad_mode, padding):
    return {"same": "same", "valid": 0}.get(pad_mode, padding)


class ConvCell(nn.Cell):
    """nn.Conv2d then an elementwise tail the fusion pass can take (bias add, relu, scale)."""

    def __init__(self, w, b, stride, pad_mode, padding, dilation, groups):
        super().__init__()
        o, cg, kh, kw = w.shape
        self.conv = nn.Conv2d(cg * groups, o, (kh, kw), stride, pad_mode, padding, dilation, groups,
                              has_bias=b is not None)
        self.conv.weight.set_data(ms.Tensor(w))
        if b is not None:
            self.conv.bias.set_data(ms.Tensor(b))

    def construct(self, x):
        return ops.relu(self.conv(x)) * 0.5


@pytest.mark.parametrize("case", list(CONV_CASES))
def test_conv2d_matches_reference(case, cfg, rng):
    c, o, k, stride, pad_mode, padding, dil, groups, has_bias = CONV_CASES[case]
    kh, kw = (k, k) if isinstance(k, int) else k
    w = rng.standard_normal((o, c // groups, kh, kw)).astype(np.float32)
    b = rng.standard_normal(o).astype(np.float32) if has_bias else None
    xs = images(rng, c, SIZES)
    want = [cv.conv2d(x, w, b, stride, _ref_pad(pad_mode, padding), dil, groups) for x in xs]
    if cfg == "pynative":
        ms.set_context(mode=ms.PYNATIVE_MODE)
        got = [ops.conv2d(ms.Tensor(x), ms.Tensor(w), None if b is None else ms.Tensor(b), stride, pad_mode, padding,
                          dil, groups).asnumpy() for x in xs]
    else:
        cell = ConvCell(w, b, stride, pad_mode, padding, dil, groups)
        got = run_graph(cell, cfg, [(ms.Tensor(x),) for x in xs])
        want = [np.maximum(r, 0) * 0.5 for r in want]
    for g, r in zip(got, want):
        close(g, r)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), k=st.integers(1, 4), stride=st.integers(1, 3), dil=st.integers(1, 2),
       groups=st.sampled_from([1, 2, 3]), pad_mode=st.sampled_from(["same", "valid", "pad"]),
       pad=st.integers(0, 2))
def test_conv2d_random_shapes(seed, k, stride, dil, groups, pad_mode, pad):
    """Random kernels, strides, dilations, groups and paddings at L1, one Cell at two input sizes."""
    rng = np.random.default_rng(seed)
    c, o = groups * int(rng.integers(1, 3)), groups * int(rng.integers(1, 3))
    span = dil * (k - 1) + 1
    lo = max(span, 2)                                       # (a dim of 1 is specialized: another bytecode)
    sizes = [(2, int(rng.integers(lo, lo + 6)), int(rng.integers(lo, lo + 6))) for _ in range(2)]
    w = rng.standard_normal((o, c // groups, k, k)).astype(np.float32)
    xs = images(rng, c, sizes)
    cell = ConvCell(w, None, stride, pad_mode, pad, dil, groups)
    got = run_graph(cell, ("L1", True), [(ms.Tensor(x),) for x in xs])
    for g, x in zip(got, xs):
        close(g, np.maximum(cv.conv2d(x, w, None, stride, _ref_pad(pad_mode, pad), dil, groups), 0) * 0.5)


def test_conv1d_matches_reference(rng):
    """nn.Conv1d runs as a 2-D convolution of height 1: [N, C, L] in, [N, O, Lo] out."""
    for pad_mode, padding, stride, dil, groups in (("same", 0, 2, 1, 1), ("pad", 2, 1, 2, 2), ("valid", 0, 3, 1, 1)):
        conv = nn.Conv1d(4, 6, 3, stride, pad_mode, padding, dil, groups, has_bias=True)
        w, b = conv.weight.asnumpy(), rng.standard_normal(6).astype(np.float32)
        conv.bias.set_data(ms.Tensor(b))
        for n, length in ((2, 17), (3, 12)):
            x = rng.standard_normal((n, 4, length)).astype(np.float32)
            pad = _ref_pad(pad_mode, (0, padding))
            want = cv.conv2d(x[:, :, None], w[:, :, None], b, (1, stride), pad, (1, dil), groups)[:, :, 0]
            close(conv(ms.Tensor(x)).asnumpy(), want)
        assert len(conv._runner.variants) == 1


def test_primitives_match_reference(rng):
    """MindSpore's P.Conv2D (4-D strides), P.MaxPool/AvgPool, P.AdaptiveAvgPool2D and P.Gather, eagerly."""
    ms.set_context(mode=ms.PYNATIVE_MODE)
    try:
        x = rng.standard_normal((2, 3, 11, 10)).astype(np.float32)
        w = rng.standard_normal((5, 3, 3, 3)).astype(np.float32)
        t = ms.Tensor(x)
        conv = ops.Conv2D(5, 3, pad_mode="pad", pad=1, stride=(1, 1, 2, 2))
        close(conv(t, ms.Tensor(w)).asnumpy(), cv.conv2d(x, w, None, 2, 1))
        close(ops.MaxPool(3, 2, "same")(t).asnumpy(), cv.max_pool2d(x, 3, 2, "same"))
        close(ops.AvgPool(2, 2)(t).asnumpy(), cv.avg_pool2d(x, 2, 2))
        close(ops.AvgPool(3, 2, "same")(t).asnumpy(), cv.avg_pool2d(x, 3, 2, "same"))
        close(ops.AdaptiveAvgPool2D((2, 3))(t).asnumpy(), cv.adaptive_avg_pool2d(x, (2, 3)))
        idx = np.array([[2, 0], [1, 1]], np.int32)
        close(ops.Gather()(t, ms.Tensor(idx), 2).asnumpy(), cv.gather(x, idx, 2))
    finally:
        ms.set_context(mode=ms.GRAPH_MODE)


def test_a_window_larger_than_the_input_at_run_time_is_a_clear_error():
    """Symbolic H and W cannot be checked when compiling; the kernel names both sizes."""
    conv = nn.Conv2d(3, 4, 7, pad_mode="valid")
    assert conv(ms.Tensor(np.ones((2, 3, 9, 9), np.float32))).shape == (2, 4, 3, 3)
    # (a lone convolution is a FUSED_CONV with the empty program where fusion is on: compiler/fuse.py)
    with pytest.raises(ms.ExecutionError,
                       match=r"(CONV2D|FUSED_CONV) .*the window \(7x7\) is larger than the padded input \(5x9\)"):
        conv(ms.Tensor(np.ones((2, 3, 5, 9), np.float32)))
    pool = nn.MaxPool2d(3, 2, pad_mode="pad", padding=0)
    pool(ms.Tensor(np.ones((2, 3, 9, 9), np.float32)))
    with pytest.raises(ms.ExecutionError, match=r"MAX_POOL2D .*the window \(3x3\) is larger than the padded input"):
        pool(ms.Tensor(np.ones((2, 3, 2, 9), np.float32)))


# ---------------------------------------------------------------- pooling

POOL_CASES = {   # op, kernel, stride, padding ('same': nn layer with pad_mode='same'), count_include_pad
    "max-3x3-s2-pad1": ("max", 3, 2, 1, None),
    "max-2x2-valid": ("max", 2, 2, 0, None),
    "max-3x3-s2-same": ("max", 3, 2, "same", None),
    "max-3x2-s1-pad": ("max", (3, 2), 1, (1, 0), None),
    "avg-3x3-s1-pad1-count": ("avg", 3, 1, 1, True),
    "avg-3x3-s1-pad1-nocount": ("avg", 3, 1, 1, False),
    "avg-2x2-valid": ("avg", 2, 2, 0, True),
    "avg-3x3-s2-same": ("avg", 3, 2, "same", None),
}


class PoolCell(nn.Cell):
    def __init__(self, op, kernel, stride, padding, count):
        super().__init__()
        if padding == "same":
            cls = nn.MaxPool2d if op == "max" else nn.AvgPool2d
            self.pool = cls(kernel, stride, pad_mode="same")
        elif op == "max":
            self.pool = nn.MaxPool2d(kernel, stride, pad_mode="pad", padding=padding)
        else:
            self.pool = nn.AvgPool2d(kernel, stride, pad_mode="pad", padding=padding, count_include_pad=count)

    def construct(self, x):
        return (self.pool(x) - 1.0) * 2.0


def _pool_ref(op, x, kernel, stride, padding, count):
    if op == "max":
        return cv.max_pool2d(x, kernel, stride, padding)
    return cv.avg_pool2d(x, kernel, stride, padding, True if count is None else count)


def _pool_eager(op, x, kernel, stride, padding, count):
    if padding == "same":
        cls = nn.MaxPool2d if op == "max" else nn.AvgPool2d
        return cls(kernel, stride, pad_mode="same")(x)
    if op == "max":
        return ops.max_pool2d(x, kernel, stride, padding)
    return ops.avg_pool2d(x, kernel, stride, padding, count_include_pad=count)


@pytest.mark.parametrize("case", list(POOL_CASES))
def test_pool2d_matches_reference(case, cfg, rng):
    op, kernel, stride, padding, count = POOL_CASES[case]
    xs = images(rng, 3, SIZES)
    want = [_pool_ref(op, x, kernel, stride, padding, count) for x in xs]
    if cfg == "pynative":
        ms.set_context(mode=ms.PYNATIVE_MODE)
        got = [_pool_eager(op, ms.Tensor(x), kernel, stride, padding, count).asnumpy() for x in xs]
    else:
        got = run_graph(PoolCell(op, kernel, stride, padding, count), cfg, [(ms.Tensor(x),) for x in xs])
        want = [(r - 1.0) * 2.0 for r in want]
    for g, r in zip(got, want):
        close(g, r)


ADAPTIVE_CASES = {   # output size, input sizes
    "global": (1, [(2, 8, 8), (3, 7, 5)]),
    "divisible": ((2, 4), [(2, 8, 8), (2, 6, 12)]),
    "non-divisible": ((3, 5), [(2, 7, 11), (3, 10, 6)]),
    "keep-height": ((None, 3), [(2, 5, 7), (2, 9, 4)]),
    "upsample": (4, [(2, 3, 2), (2, 5, 3)]),
}


class AdaptiveCell(nn.Cell):
    def __init__(self, size):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(size)

    def construct(self, x):
        return self.pool(x) * 2.0 + 1.0


@pytest.mark.parametrize("case", list(ADAPTIVE_CASES))
def test_adaptive_avg_pool2d_matches_reference(case, cfg, rng):
    size, sizes = ADAPTIVE_CASES[case]
    xs = images(rng, 3, sizes)
    want = [cv.adaptive_avg_pool2d(x, size) for x in xs]
    if cfg == "pynative":
        ms.set_context(mode=ms.PYNATIVE_MODE)
        got = [ops.adaptive_avg_pool2d(ms.Tensor(x), size).asnumpy() for x in xs]
    else:
        got = run_graph(AdaptiveCell(size), cfg, [(ms.Tensor(x),) for x in xs])
        want = [r * 2.0 + 1.0 for r in want]
    for g, r in zip(got, want):
        close(g, r)


# ---------------------------------------------------------------- gather

class GatherCell(nn.Cell):
    def __init__(self, axis):
        super().__init__()
        self.axis = axis

    def construct(self, x, idx):
        return (ops.gather(x, idx, self.axis) + 1.0) * 0.5


GATHER_CASES = {   # x shapes (one per call), index shape (None: a Python int), axis, index dtype
    "axis0-int32": ([(5, 3), (7, 4)], (4,), 0, np.int32),
    "axis1-int64-2d": ([(3, 6, 2), (2, 5, 3)], (2, 3), 1, np.int64),
    "axis-1-int32": ([(2, 3, 5), (3, 2, 6)], (3,), -1, np.int32),
    "negative-indices": ([(6, 2), (4, 3)], (5,), 0, np.int64),
    "scalar-axis1": ([(3, 4), (2, 6)], None, 1, None),
}


@pytest.mark.parametrize("case", list(GATHER_CASES))
def test_gather_matches_reference(case, cfg, rng):
    shapes, ishape, axis, idt = GATHER_CASES[case]
    xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    idxs = []
    for x in xs:
        n = x.shape[axis]
        if ishape is None:
            idxs.append(int(rng.integers(0, n)))
        else:
            low = -n if case == "negative-indices" else 0
            idxs.append(rng.integers(low, n, ishape).astype(idt))
    want = [cv.gather(x, i, axis) for x, i in zip(xs, idxs)]
    args = [(ms.Tensor(x), i if isinstance(i, int) else ms.Tensor(i)) for x, i in zip(xs, idxs)]
    if cfg == "pynative":
        ms.set_context(mode=ms.PYNATIVE_MODE)
        got = [ops.gather(x, i, axis).asnumpy() for x, i in args]
    else:
        got = run_graph(GatherCell(axis), cfg, args)
        want = [(r + 1.0) * 0.5 for r in want]
    for g, r in zip(got, want):
        assert g.dtype == np.float32
        close(g, r)


@pytest.mark.parametrize("mode", [ms.PYNATIVE_MODE, ms.GRAPH_MODE], ids=["pynative", "graph"])
def test_gather_out_of_range_is_a_clear_error(mode):
    ms.set_context(mode=mode)
    try:
        x = ms.Tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
        for idx, bad in ((np.array([0, 4], np.int32), 4), (np.array([[-5]], np.int64), -5)):
            with pytest.raises((IndexError, ms.MsvmError), match=rf"index {bad} is out of range for axis 1 of size 4"):
                (GatherCell(1)(x, ms.Tensor(idx)) if mode == ms.GRAPH_MODE else ops.gather(x, ms.Tensor(idx), 1))
    finally:
        ms.set_context(mode=ms.GRAPH_MODE)


def test_gather_rejects_float_indices():
    with pytest.raises(ms.MsvmError, match="indices must be an int tensor"):
        GatherCell(0)(ms.Tensor(np.ones((3, 2), np.float32)), ms.Tensor(np.zeros(2, np.float32)))


# ---------------------------------------------------------------- edge inputs

class LinearTailConv(ConvCell):
    """No relu in the tail: the compiled tiers' fused RELU maps NaN to 0 where L1's keeps it
    (an elementwise-lowering difference, not the convolution's)."""

    def construct(self, x):
        return self.conv(x) * 0.5 + 1.0


def _edge_cells():
    rng = np.random.default_rng(7)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    dw = rng.standard_normal((3, 1, 3, 3)).astype(np.float32)
    return [
        ("conv", LinearTailConv(w, None, 1, "pad", 1, 1, 1), lambda x: cv.conv2d(x, w, None, 1, 1) * 0.5 + 1.0),
        ("depthwise", LinearTailConv(dw, None, 2, "same", 0, 1, 3),
         lambda x: cv.conv2d(x, dw, None, 2, "same", 1, 3) * 0.5 + 1.0),
        ("max", PoolCell("max", 3, 2, "same", None), lambda x: (cv.max_pool2d(x, 3, 2, "same") - 1.0) * 2.0),
        ("avg", PoolCell("avg", 3, 1, 1, False), lambda x: (cv.avg_pool2d(x, 3, 1, 1, False) - 1.0) * 2.0),
        ("adaptive", AdaptiveCell((2, 3)), lambda x: cv.adaptive_avg_pool2d(x, (2, 3)) * 2.0 + 1.0),
    ]


@pytest.mark.parametrize("level", ["L1", "L3"])
def test_nan_and_inf_propagate_like_numpy(level, rng):
    if level == "L3":
        pytest.importorskip("llvmlite")
    ms.set_context(jit_config={"jit_level": level})
    x = rng.standard_normal((2, 3, 7, 8)).astype(np.float32)
    x[0, 0, 1, 1], x[0, 1, 4, 6], x[1, 2, 6, 0], x[1, 0, 3, 3], x[1, 1, 0, 7] = np.nan, np.inf, -np.inf, np.inf, -np.inf
    with np.errstate(invalid="ignore"):
        for name, cell, ref in _edge_cells():
            (got,) = run_graph(cell, (level, True), [(ms.Tensor(x),)])
            want = ref(x.astype(np.float64))
            assert np.isnan(want).any() and (np.isinf(want).any() or name == "conv"), name
            np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want), err_msg=name)
            np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want), err_msg=name)
            close(got, want)


@pytest.mark.parametrize("level", ["L1", "L3"])
def test_empty_batch(level, rng):
    """N = 0 runs (the shape rules keep the batch symbolic): empty results of the right shape, in
    the same bytecode as N = 2, also once the tail is compiled and the calls replay."""
    from msvm.compiler import tiers

    if level == "L3":
        pytest.importorskip("llvmlite")
    ms.set_context(jit_config={"jit_level": level})
    x0, x2 = np.zeros((0, 3, 9, 10), np.float32), rng.standard_normal((2, 3, 9, 10)).astype(np.float32)
    for name, cell, ref in _edge_cells():
        for n in (0, 2, 0, 0, 0):
            x = x0 if n == 0 else x2
            close(cell(ms.Tensor(x)).asnumpy(), ref(x.astype(np.float64)))
            tiers.wait_for_compiles(30)
        assert len(cell._runner.variants) == 1, name
    ms.set_context(mode=ms.PYNATIVE_MODE)
    try:
        for name, cell, ref in _edge_cells():
            assert cell(ms.Tensor(x0)).asnumpy().shape == ref(x0.astype(np.float64)).shape, name
    finally:
        ms.set_context(mode=ms.GRAPH_MODE)
    got = GatherCell(0)(ms.Tensor(rng.standard_normal((4, 3)).astype(np.float32)), ms.Tensor(np.zeros(0, np.int32)))
    assert got.shape == (0, 3)


# ---------------------------------------------------------------- the verifier

@pytest.mark.parametrize("cell,dims", [
    (lambda: nn.Conv2d(3, 4, 3, 2, "same"), "[N,4,((H + 1) // 2),((W + 1) // 2)]"),
    (lambda: nn.Conv2d(3, 4, 7, 2, "pad", 3), "[N,4,((H - 1) // 2) + 1,((W - 1) // 2) + 1]"),
    (lambda: nn.Conv2d(3, 4, 3, 1, "pad", 1, dilation=2), "[N,4,H - 2,W - 2]"),
    (lambda: nn.MaxPool2d(3, 2, "same"), "[N,3,((H + 1) // 2),((W + 1) // 2)]"),
    (lambda: nn.AvgPool2d(2, 2), "[N,3,((H - 2) // 2) + 1,((W - 2) // 2) + 1]"),
    (lambda: nn.AdaptiveAvgPool2d((3, None)), "[N,3,3,W]"),
])
def test_symbolic_result_shapes(cell, dims):
    """The shape rules' output dims over symbolic H and W, as the bytecode view and hovers print them."""
    c = cell()
    c.set_inputs(ms.Tensor(shape=["N", 3, "H", "W"], dtype=ms.float32))
    c(ms.Tensor(np.ones((2, 3, 11, 12), np.float32)))
    assert str(next(iter(c._runner.variants.values())).code.result_type) == f"Tensor[float32, {dims}]"


def test_conv_channel_mismatch_is_a_shape_error_at_its_line():
    conv = nn.Conv2d(3, 8, 3)
    conv.set_inputs(ms.Tensor(shape=[None, 4, None, None], dtype=ms.float32))
    calls = []
    ms.set_trace(lambda f, pc: calls.append(pc))
    try:
        with pytest.raises(SourceError) as e:
            conv(ms.Tensor(np.ones((2, 4, 8, 8), np.float32)))
    finally:
        ms.set_trace(None)
    msg = str(e.value)
    src, first = inspect.getsourcelines(nn.Conv2d.construct)
    line = first + next(i for i, s in enumerate(src) if '"CONV2D"' in s)
    assert f"layers.py:{line}:" in msg, msg
    assert "[x0,4,x2,x3]" in msg and "[8,3,3,3]" in msg and "4 channels" in msg, msg
    assert calls == []                       # nothing ran


class UserConv(nn.Cell):
    def __init__(self):
        super().__init__()
        self.w = ms.Parameter(ms.Tensor(np.zeros((8, 3, 3, 3), np.float32)))
        self.conv2d = ops.Conv2D(8, 3, pad_mode="same")

    def construct(self, x):
        h = x * 2.0
        return self.conv2d(h, self.w)


def test_primitive_conv_mismatch_points_at_the_users_line():
    net = UserConv()
    net.set_inputs(ms.Tensor(shape=["B", 4, "H", "W"], dtype=ms.float32))
    with pytest.raises(SourceError) as e:
        net(ms.Tensor(np.ones((2, 4, 8, 8), np.float32)))
    line = UserConv.construct.__code__.co_firstlineno + 2
    assert f"test_conv_ops.py:{line}:" in str(e.value)
    assert "[B,4,H,W]" in str(e.value) and "[8,3,3,3]" in str(e.value)


CNN_SOURCE = '''
import msvm as ms
from msvm import nn, ops


class TinyCNN(nn.Cell):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, stride=2, pad_mode="pad", padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.dw = nn.Conv2d(8, 8, 3, pad_mode="same", group=8)
        self.pool = nn.MaxPool2d(3, 2, pad_mode="same")
        self.avg = nn.AvgPool2d(2, 2)
        self.gap = nn.AdaptiveAvgPool2d((1, None))
        self.emb = nn.Embedding(10, 4)

    def construct(self, x: "B, 3, H, W", ids: "int32[B, 5]"):
        h = ops.relu(self.bn(self.conv(x)))
        h = self.avg(self.pool(self.dw(h)))
        h = self.gap(h)
        return h, self.emb(ids), ops.gather(h, ids, 1)
'''


def test_static_analysis_and_binary_round_trip(tmp_path):
    """What the language server does without running the program: the CNN Cell's bytecode with
    symbolic shapes; it survives .msbc save/load and assemble(disassemble(...))."""
    from msvm import bytecode
    from msvm.static import analyze_file

    src = tmp_path / "cnn.py"
    src.write_text(CNN_SOURCE)
    (entry,) = analyze_file(str(src))
    assert entry.error is None, entry.error
    w = "((((((W - 1) // 2) + 2) // 2) - 2) // 2) + 1"
    assert str(entry.code.result_type) == (f"(Tensor[float32, [B,8,1,{w}]], Tensor[float32, [B,5,4]], "
                                           f"Tensor[float32, [B,B,5,1,{w}]])")
    bytecode.save(entry.code, tmp_path / "cnn.msbc")
    back = bytecode.load(tmp_path / "cnn.msbc")
    assert back == entry.code and bytecode.dump(back) == bytecode.dump(entry.code)
    again = bytecode.assemble(bytecode.disassemble(entry.code))
    assert again == entry.code
    bytecode.verify(again)
