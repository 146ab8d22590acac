"""FUSED_CONV's compiled kernels (issue 18, compiler/conv.py): the depthwise LLVM kernel and the dense
convolutions' compiled epilogue, at L2 (dims as arguments) and L3 (dims constant), against the L1
interpreter (fusion off: CONV2D, BATCH_NORM and the elementwise ops one by one) and a float64 numpy
reference (tests/refs/cv.py), on random shapes: kernel 1/3/5/7, stride 1-3, padding modes, dilation,
groups, widths below and above the vector widths, NaN and inf, an empty batch, float64. Each test
also checks that the kernel it means ran (the site holds a compiled kernel for the shape), so a
planner that quietly refused would fail it."""

import msvm as ms
import numpy as np
import pytest
from msvm import nn, ops
from msvm.compiler import conv, tiers
from msvm.compiler.lower import lower
from msvm.compiler.static_kernels import kernels_of
from refs import cv

ACTS = {"relu": (nn.ReLU, cv.relu), "relu6": (nn.ReLU6, cv.relu6), "hswish": (nn.HSwish, cv.hswish),
        "none": (None, lambda x: x)}


class Block(nn.Cell):
    def __init__(self, cin, cout, k, stride, pad_mode, padding, dilation, group, bias, act, residual):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, stride=stride, pad_mode=pad_mode, padding=padding, dilation=dilation,
                              group=group, has_bias=bias)
        self.bn = nn.BatchNorm2d(cout)
        self.act = ACTS[act][0]() if ACTS[act][0] is not None else None
        self.residual = residual

    def construct(self, x):
        out = self.bn(self.conv(x))
        if self.residual:
            out = out + x
        if self.act is not None:
            out = self.act(out)
        return out


def make(s, seed, dtype=np.float32):
    rng = np.random.default_rng(seed)
    net = Block(**s)
    net.set_train(False)
    for name, p in net.parameters_dict().items():
        v = rng.standard_normal(p.shape)
        if "variance" in name:
            v = np.abs(v) + 0.5
        p.set_data(ms.Tensor(v.astype(dtype)))
    return net


def with_epilogue(want, scale, bias, res, lo, hi):
    """The kernels' epilogue on a float64 product whose channels are axis -2: * scale + bias, + res, max
    lo, min hi (NaN kept, as numpy keeps it)."""
    if scale is not None:
        want = want * scale[:, None] + bias[:, None]
    if res is not None:
        want = want + res
    with np.errstate(invalid="ignore"):
        want = np.where(want < lo, lo, want)
        return np.where(want > hi, hi, want)


def reference(net, s, x):
    p = {k: v.asnumpy().astype(np.float64) for k, v in net.parameters_dict().items()}
    pad = "same" if s["pad_mode"] == "same" else s["padding"]
    out = cv.conv2d(x.astype(np.float64), p["conv.weight"], p.get("conv.bias"), s["stride"], pad, s["dilation"],
                    s["group"])
    out = cv.batch_norm(out, p, "bn")
    if s["residual"]:
        out = out + x
    return ACTS[s["act"]][1](out)


def forward(net, level, fusion, xs):
    ms.set_context(jit_config={"jit_level": level, "enable_fusion": fusion})
    outs = [net(ms.Tensor(x)).asnumpy() for x in xs]
    for _ in range(3):           # the compiled kernels, then the replay and the fast path: the same answers
        tiers.wait_for_compiles(60)
        again = [net(ms.Tensor(x)).asnumpy() for x in xs]
        for a, b in zip(outs, again):
            np.testing.assert_array_equal(a, b)
    return outs


def conv_sites(net):
    code = next(iter(net._runner.variants.values())).code
    return [s for c in code.all_codes() for s in c.jit_sites.values() if s.op == "FUSED_CONV"]


def compiled_kinds(net, level):
    """The kinds of the compiled kernels the FUSED_CONV sites hold at that level."""
    kinds = set()
    for s in conv_sites(net):
        for k in (s.l2 if level == "L2" else s.l3).values():
            if isinstance(k, tiers.Compiled):
                kinds.add(k.kernel.kind)
    return kinds


def close(got, want, tol=2e-5):
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    scale = max(1.0, float(np.nanmax(np.abs(np.where(np.isfinite(want), want, 0)), initial=0.0)))
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * scale)


def images(rng, cin, sizes, special, dtype=np.float32):
    out = []
    for n, h, w in sizes:
        x = rng.standard_normal((n, cin, h, w)).astype(dtype)
        if special and x.size:
            x[0, 0, min(1, h - 1), min(1, w - 1)], x[0, -1, min(2, h - 1), min(3, w - 1)] = np.nan, np.inf
            x[-1, 0, -1, -1] = -np.inf
        out.append(x)
    return out


def depthwise_spec(rng):
    k = int(rng.choice([3, 3, 5, 7]))
    c = int(rng.choice([3, 8, 16]))
    pad_mode = str(rng.choice(["same", "pad", "valid"]))
    stride = int(rng.choice([1, 2, 3]))
    return dict(cin=c, cout=c, k=k, stride=stride, pad_mode=pad_mode,
                padding=int(rng.integers(0, 4)) if pad_mode == "pad" else 0, dilation=int(rng.choice([1, 1, 2])),
                group=c, bias=bool(rng.random() < 0.4), act=str(rng.choice(list(ACTS))),
                residual=bool(stride == 1 and pad_mode == "same" and rng.random() < 0.5))


SIZES = [(1, 23, 37), (2, 13, 14), (1, 15, 70), (1, 13, 13)]      # (windows up to 13 wide fit)


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("level", ["L2", "L3"])
def test_depthwise_kernel_matches_l1_and_numpy(seed, level):
    rng = np.random.default_rng(seed)
    s = depthwise_spec(rng)
    xs = images(rng, s["cin"], SIZES, special=seed % 2 == 0)
    wants = [reference(make(s, seed), s, x) for x in xs]
    l1 = forward(make(s, seed), "L1", False, xs)
    net = make(s, seed)
    got = forward(net, level, True, xs)
    assert compiled_kinds(net, level) == {"depthwise"}
    for g, w, r in zip(got, wants, l1):
        close(g, w)
        close(g, r, tol=1e-6)
    if level == "L2":            # one shape-generic kernel for every size: by rows, and flat where rows are narrow
        forms = {p.cls[11] for s_ in conv_sites(net) for p in s_.plans.values() if p is not None}
        assert sum(len(s_.l2) for s_ in conv_sites(net)) == len(forms)


def dense_spec(rng):
    k = int(rng.choice([1, 3, 7]))
    cin = int(rng.choice([3, 4, 6, 8]))
    group = int(rng.choice([1, 1, 2]))
    cout = int(rng.choice([4, 8])) if not rng.random() < 0.5 else cin
    group = group if cin % group == 0 and cout % group == 0 else 1
    pad_mode = str(rng.choice(["same", "pad", "valid"]))
    stride = int(rng.choice([1, 2]))
    return dict(cin=cin, cout=cout, k=k, stride=stride, pad_mode=pad_mode,
                padding=int(rng.integers(0, 3)) if pad_mode == "pad" else 0,
                dilation=int(rng.choice([1, 2])) if k > 1 else 1, group=group, bias=bool(rng.random() < 0.4),
                act=str(rng.choice(["relu", "relu6", "hswish"])),
                residual=bool(cout == cin and stride == 1 and pad_mode == "same" and rng.random() < 0.6))


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("level", ["L2", "L3"])
def test_dense_conv_compiled_epilogue_matches_l1_and_numpy(seed, level):
    rng = np.random.default_rng(50 + seed)
    s = dense_spec(rng)
    xs = images(rng, s["cin"], [(2, 16, 17), (1, 13, 14), (1, 30, 21)], special=seed % 3 == 0)
    wants = [reference(make(s, seed), s, x) for x in xs]
    l1 = forward(make(s, seed), "L1", False, xs)
    net = make(s, seed)
    got = forward(net, level, True, xs)
    cg = s["cin"] // s["group"]           # grouped, few channels per group: the direct kernel (conv.DIRECT_MAX_*)
    direct = s["group"] > 1 and (cg == 1 or (cg <= conv.DIRECT_MAX_CHANNELS and cg * s["k"] ** 2 <= conv.DIRECT_MAX_TAPS))
    # (a dense one's kernel: the product itself where its epilogue runs in the product's registers,
    # conv._in_registers: ReLU / ReLU6 / bias / residual; else the compiled pass over its result)
    # (on the BLAS route -- conv.route: an AVX2 target, more than FEW_CHANNELS a group -- always the pass)
    plans = [p for s_ in conv_sites(net) for p in s_.plans.values() if p is not None]
    epilogues = {"gemm" if p.details.get("epi") is None else "elementwise" for p in plans}
    assert compiled_kinds(net, level) == ({"depthwise"} if direct else epilogues), s
    taps = all(p.details.get("route") == "taps" for p in plans)
    if not direct and s["act"] != "hswish" and not (s["residual"] and s["k"] > 1):
        assert epilogues == ({"gemm"} if taps else {"elementwise"}), s
    for g, w, r in zip(got, wants, l1):
        close(g, w)
        close(g, r, tol=1e-5)


@pytest.mark.parametrize("level", ["L2", "L3"])
@pytest.mark.parametrize("k, kind", [(3, "gemm"), (7, "gemm")])
def test_rgb_stems_on_the_taps_product(level, k, kind):
    """MobileNet's 3x3 stride-2 stem on 3 channels and ResNet's 7x7 one run the taps product (the
    batch norm and ReLU6 in its registers: its kernel is the product's, no epilogue compiled): a
    dense convolution of few channels no longer takes the direct kernel."""
    s = dict(cin=3, cout=16, k=k, stride=2, pad_mode="pad", padding=k // 2, dilation=1, group=1, bias=False,
             act="relu6", residual=False)
    rng = np.random.default_rng(k)
    xs = images(rng, 3, [(1, 37, 45), (2, 16, 16)], special=True)
    net = make(s, 5)
    got = forward(net, level, True, xs)
    assert compiled_kinds(net, level) == {kind}
    l1 = forward(make(s, 5), "L1", False, xs)
    for g, r, x in zip(got, l1, xs):
        close(g, reference(net, s, x))
        close(g, r, tol=1e-5)


@pytest.mark.parametrize("kind", ["depthwise", "dense"])
def test_fusion_on_and_off_agree_in_float64_and_on_an_empty_batch(kind):
    s = dict(cin=8, cout=8, k=3, stride=1, pad_mode="same", padding=0, dilation=1, group=8 if kind == "depthwise" else 1,
             bias=True, act="relu6", residual=True)
    rng = np.random.default_rng(7)
    xs = images(rng, 8, [(1, 20, 33), (0, 20, 33), (2, 6, 7)], special=True, dtype=np.float64)
    net = make(s, 3, np.float64)
    got = forward(net, "L3", True, xs)
    off = forward(make(s, 3, np.float64), "L3", False, xs)
    assert compiled_kinds(net, "L3") == {"depthwise" if kind == "depthwise" else "elementwise"}
    for g, o, x in zip(got, off, xs):
        assert g.dtype == np.float64
        close(g, reference(net, s, x), tol=1e-10)     # (the weights are folded in float64)
        close(g, o, tol=1e-6)                          # (unfused, the float32 Parameters' batch norm)
    assert got[1].shape == (0, 8, 20, 33)


def test_depthwise_refolds_after_set_data_at_l3():
    s = dict(cin=16, cout=16, k=3, stride=2, pad_mode="pad", padding=1, dilation=1, group=16, bias=False,
             act="relu6", residual=False)
    rng = np.random.default_rng(11)
    x = rng.standard_normal((1, 16, 40, 40)).astype(np.float32)
    net = make(s, 1)
    forward(net, "L3", True, [x])
    assert compiled_kinds(net, "L3") == {"depthwise"}
    net.bn.gamma.set_data(ms.Tensor(net.bn.gamma.asnumpy() * -3.0))
    net.conv.weight.set_data(ms.Tensor(net.conv.weight.asnumpy() - 0.5))
    close(net(ms.Tensor(x)).asnumpy(), reference(net, s, x))


def test_window_larger_than_input_is_refused_with_the_interpreters_error():
    s = dict(cin=4, cout=4, k=7, stride=1, pad_mode="valid", padding=0, dilation=1, group=4, bias=False,
             act="relu", residual=False)
    net = make(s, 2)
    ms.set_context(jit_config={"jit_level": "L3", "enable_fusion": True})
    with pytest.raises((ValueError, ms.MsvmError), match="window"):
        net(ms.Tensor(np.zeros((1, 4, 5, 5), np.float32)))


def test_static_dump_lowers_the_depthwise_kernel():
    """``msvm dump --emit llvm``'s kernels: the depthwise FUSED_CONV has an L2 kernel that lowers."""
    s = dict(cin=8, cout=8, k=3, stride=1, pad_mode="same", padding=0, dilation=1, group=8, bias=False,
             act="relu6", residual=False)
    net = make(s, 0)
    ms.set_context(jit_config={"jit_level": "L1", "enable_fusion": True})
    net(ms.Tensor(np.zeros((1, 8, 12, 12), np.float32)))
    code = next(iter(net._runner.variants.values())).code
    ks = [k for k in kernels_of(code) if k.op.startswith("FUSED_CONV")]
    assert ks and ks[0].kernel is not None and ks[0].kernel.kind == "depthwise", ks
    from msvm.compiler.codegen import codegen

    ir = lower(ks[0].kernel, "k", codegen().features)
    assert "define void @k(" in ir and "%Wo_a" in ir


class Pool(nn.Cell):
    def __init__(self, k, stride, pad_mode, padding):
        super().__init__()
        self.pool = nn.MaxPool2d(k, stride, pad_mode=pad_mode, padding=padding) if pad_mode == "pad" else \
            nn.MaxPool2d(k, stride, pad_mode=pad_mode)

    def construct(self, x):
        return self.pool(x)


def max_pool_reference(x, k, s, pad):
    """float64 numpy: the maximum over each window of x padded with -inf (NaN wins)."""
    (pt, pb), (pl, pr) = pad
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pt, pb), (pl, pr)), constant_values=-np.inf)
    ho, wo = (xp.shape[2] - k) // s + 1, (xp.shape[3] - k) // s + 1
    out = np.full(x.shape[:2] + (ho, wo), -np.inf)
    for i in range(k):
        for j in range(k):
            out = np.maximum(out, xp[:, :, i:i + s * (ho - 1) + 1:s, j:j + s * (wo - 1) + 1:s])
    return out


def _same(d, k, s):
    total = max((-(-d // s) - 1) * s + k - d, 0)
    return total // 2, total - total // 2


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("level", ["L2", "L3"])
def test_max_pool_kernel_matches_l1_and_numpy(seed, level):
    rng = np.random.default_rng(300 + seed)
    k, s = int(rng.choice([2, 3, 5])), int(rng.choice([1, 2, 3]))
    pad_mode = str(rng.choice(["same", "valid", "pad"]))
    padding = int(rng.integers(0, k // 2 + 1)) if pad_mode == "pad" else 0
    xs = images(rng, 5, [(1, 23, 37), (2, 9, 10), (1, 15, 70)], special=True)
    tiers.reset_cache()          # (a fresh in-memory cache: its recent keys are this test's)
    got = forward(Pool(k, s, pad_mode, padding), level, True, xs)
    # the kernel cache's recent keys: the pool's compiled (or loaded) kernel at this level
    assert any(r["op"] == "MAX_POOL2D" and r["key"] for r in tiers.stats()["recent"]), tiers.stats()["recent"]
    l1 = forward(Pool(k, s, pad_mode, padding), "L1", True, xs)
    for g, r, x in zip(got, l1, xs):
        np.testing.assert_array_equal(g, r)
        if pad_mode == "same":
            pad = (_same(x.shape[2], k, s), _same(x.shape[3], k, s))
        else:
            pad = ((padding, padding), (padding, padding))
        close(g, max_pool_reference(x, k, s, pad))


@pytest.mark.parametrize("kinds", [(), ("t",), ("s", "t"), ("t", "s", "s")])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_depthwise_kernel_declares_what_the_convention_says(kinds, dtype):
    """callconv's "depthwise" arguments (start, end, CONV_DIMS, five pointers, then one pointer per
    epilogue tensor and one double per scalar) are the lowered kernel's parameters and the prototype's."""
    import re

    from msvm.compiler import callconv

    prog = [("in", 0)]
    for i in range(1, len(kinds) + 1):
        prog += [("in", i), ("BROADCAST_ADD",)]
    llvm = {"i64": "i64", "double": "double", "ptr": "float*" if dtype == "float32" else "double*"}
    for dims, flat in [(d, f) for d in (None, (4, 9, 9, 9, 9, 1, 1, 1, 8)) for f in (False, True)]:
        k = conv.DepthwiseConv(dtype, 3, 3, (1, 1), (1, 1), True, kinds, tuple(prog), 8, dims, flat=flat)
        m = re.search(r"define void @k\((.*?)\) nounwind", lower(k, "k", ""))
        want = [llvm[a] for a in callconv.signature(k)]
        assert [p.split()[0] for p in m.group(1).split(", ")] == want
        fn = callconv.prototype(k, 0x1000)
        assert [a.__name__ for a in fn.argtypes].count("c_double") == kinds.count("s")
        assert len(fn.argtypes) == len(want) == 2 + len(callconv.CONV_DIMS) + 5 + len(kinds)


class PreActivation(nn.Cell):
    """DenseNet's layer (BN -> ReLU -> conv, the conv's result concatenated with the input): every
    convolution here has nothing fused after it."""

    def __init__(self, cin, cout, k, stride, padding, dilation, group):
        super().__init__()
        self.bn = nn.BatchNorm2d(cin)
        self.relu = nn.ReLU()
        self.conv = nn.Conv2d(cin, cout, k, stride=stride, pad_mode="pad", padding=padding, dilation=dilation,
                              group=group)
        self.stride = stride

    def construct(self, x):
        y = self.conv(self.relu(self.bn(x)))
        return ops.concat((y, y * 1.0), axis=1) if self.stride != 1 else ops.concat((x, y), axis=1)


LONE = [  # (cin, cout, k, stride, padding, dilation, group): 1x1 direct, 3x3 im2col, strided, dilated, grouped
    (8, 8, 1, 1, 0, 1, 1), (6, 5, 3, 1, 1, 1, 1), (4, 7, 3, 2, 1, 1, 1), (6, 6, 3, 1, 2, 2, 1), (8, 4, 3, 1, 1, 1, 2)]


@pytest.mark.parametrize("spec", LONE)
@pytest.mark.parametrize("level", ["L2", "L3", "auto"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_convolution_with_nothing_fused_after_it_is_compiled(spec, level, dtype):
    """A convolution with no batch norm or elementwise op after it (pre-activation networks: DenseNet)
    is a FUSED_CONV all the same, with the empty program, and its site runs the BLAS route with the
    compiled windows copy as its kernel: no CONV2D left in the fused bytecode, every site compiled,
    the same values as the interpreter with fusion off and as float64 numpy, NaN and inf kept."""
    cin, cout, k, stride, padding, dilation, group = spec
    rng = np.random.default_rng(cin * 7 + k)
    xs = images(rng, cin, [(1, 13, 17), (2, 9, 20), (1, 30, 31)], special=True, dtype=dtype)

    def net():
        n = PreActivation(cin, cout, k, stride, padding, dilation, group)
        n.set_train(False)
        for name, p in n.parameters_dict().items():
            v = np.random.default_rng(len(name)).standard_normal(p.shape)
            p.set_data(ms.Tensor((np.abs(v) + 0.5 if "variance" in name else v).astype(dtype)))
        return n

    l1 = forward(net(), "L1", False, xs)
    n = net()
    got = forward(n, level, True, xs)
    ops_ = {i.op.name for c in next(iter(n._runner.variants.values())).code.all_codes() for i in c.instrs}
    assert "CONV2D" not in ops_ and "FUSED_CONV" in ops_
    sites = conv_sites(n)
    held = [kk for s in sites for kk in (*s.l2.values(), *s.l3.values()) if isinstance(kk, tiers.Compiled)]
    assert held and {kk.kernel.kind for kk in held} <= {"im2col", "gemm", "depthwise"}     # (few channels: direct)
    p = {name: v.asnumpy().astype(np.float64) for name, v in n.parameters_dict().items()}
    for g, r, x in zip(got, l1, xs):
        close(g, r, tol=1e-5 if dtype == np.float32 else 1e-12)
        h = np.maximum(cv.batch_norm(x.astype(np.float64), p, "bn"), 0)
        y = cv.conv2d(h, p["conv.weight"], None, stride, padding, dilation, group)
        want = np.concatenate((y, y) if stride != 1 else (x.astype(np.float64), y), axis=1)
        close(g, want, tol=2e-5 if dtype == np.float32 else 1e-6)     # (the interpreter itself: 1e-8 off here)


def flat_kernels(net, level) -> list:
    """The flat flags of the depthwise / max-pool kernels the sites hold at that level."""
    sites = [s for c in next(iter(net._runner.variants.values())).code.all_codes() for s in c.jit_sites.values()
             if s.op in ("FUSED_CONV", "MAX_POOL2D")]
    return [k.kernel.flat for s in sites for k in (s.l2 if level == "L2" else s.l3).values()
            if isinstance(k, tiers.Compiled) and k.kernel.kind == "depthwise"]


FLAT = [dict(k=3, pad_mode="same", padding=0, dilation=1, bias=True, act="relu6", residual=True),
        dict(k=5, pad_mode="pad", padding=2, dilation=1, bias=False, act="none", residual=False),
        dict(k=3, pad_mode="pad", padding=2, dilation=2, bias=False, act="hswish", residual=True),
        dict(k=3, pad_mode="same", padding=0, dilation=2, bias=True, act="relu", residual=False)]


@pytest.mark.parametrize("spec", range(len(FLAT)))
@pytest.mark.parametrize("level", ["L2", "L3"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_flat_depthwise_kernel_on_narrow_planes(spec, level, dtype):
    """Stride 1 with Wo = W on rows narrower than conv.FLAT_ROWS vectors: the flat kernel (each tap a
    masked load at a constant offset over the whole plane), against L1 unfused (the same sums in the
    same order: to 1e-6) and float64 numpy, on planes of one pixel, 7 x 7, 14 x 14, a last vector of
    one lane, wider than tall and taller than wide, NaN and inf, batch 2. Every row is narrower than
    FLAT_ROWS vectors of float64 on AVX2 (4 lanes: 16 columns), so each plane runs flat on every target."""
    rng = np.random.default_rng(40 + spec)
    c = 8
    s = dict(cin=c, cout=c, stride=1, group=c, **FLAT[spec])
    sizes = [(1, 7, 7), (2, 14, 14), (1, 1, 1), (1, 4, 15), (1, 29, 3), (1, 13, 13)]
    xs = images(rng, c, sizes, special=True, dtype=dtype)
    net = make(s, spec, dtype)
    got = forward(net, level, True, xs)
    assert flat_kernels(net, level) and all(flat_kernels(net, level)), flat_kernels(net, level)
    l1 = forward(make(s, spec, dtype), "L1", False, xs)
    for g, r, x in zip(got, l1, xs):
        close(g, reference(make(s, spec, dtype), s, x), tol=1e-4 if dtype == np.float32 else 1e-9)
        close(g, r, tol=1e-6)        # (float32 Parameters: L1 unfused takes the batch norm in float32, 3e-7 off)


@pytest.mark.parametrize("level", ["L2", "L3"])
def test_flat_max_pool_of_stride_one(level):
    """MAX_POOL2D of stride 1 with "same" padding on narrow planes runs flat: -inf where a window leaves
    the plane, NaN wins; the same bits as L1."""
    rng = np.random.default_rng(77)
    xs = images(rng, 5, [(1, 7, 7), (2, 5, 13), (1, 1, 1)], special=True)
    net = Pool(3, 1, "same", 0)
    got = forward(net, level, True, xs)
    assert flat_kernels(net, level) and all(flat_kernels(net, level))
    for g, r, x in zip(got, forward(Pool(3, 1, "same", 0), "L1", True, xs), xs):
        np.testing.assert_array_equal(g, r)
        close(g, max_pool_reference(x, 3, 1, ((1, 1), (1, 1))))


@pytest.mark.parametrize("width", [4, 8, 16])
def test_flat_masks_say_which_taps_read_inside_the_plane(width):
    """conv.flat_masks against a loop over every output, tap and lane: bit ``lane`` of vector v's word for
    tap (i, j) is set where output q = v * width + lane exists and its tap reads inside the plane (padding,
    dilation, planes narrower and wider than a vector)."""
    for h, w, k, pt, dil in [(7, 7, 3, 1, 1), (1, 5, 3, 1, 1), (10, 3, 5, 2, 1), (9, 9, 3, 2, 2), (4, 17, 7, 3, 1)]:
        ho, wo = h + 2 * pt - dil * (k - 1), w + 2 * pt - dil * (k - 1)
        got = conv.flat_masks.__wrapped__((h, w, ho, wo, pt, pt), k, k, (dil, dil), width)
        nvec = -(-ho * wo // width)
        want = np.zeros((nvec, k * k), np.int64)
        for v in range(nvec):
            for lane in range(width):
                q = v * width + lane
                oh, ow = divmod(q, wo)
                for i in range(k):
                    for j in range(k):
                        r, c = oh + i * dil - pt, ow + j * dil - pt
                        if q < ho * wo and 0 <= r < h and 0 <= c < w:
                            want[v, i * k + j] |= 1 << lane
        assert got.dtype == np.int32 and got.flags.c_contiguous and not got.flags.writeable
        np.testing.assert_array_equal(got.view(np.uint32).astype(np.int64), want, err_msg=f"{h}x{w} k{k}")
