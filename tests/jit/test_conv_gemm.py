"""Dense and grouped convolutions on msvm's own GEMM (issue 18: compiler/conv.py ``TapsConv``,
compiler/gemm.py ``ir_taps``): B read where it lies (the image's planes, its subsampled planes,
or its padded stride phases), A the Parameter's weight in place or packed once, the epilogue
(bias, residual add, ReLU, ReLU6) in the kernel's registers, two threads splitting the output
columns. Random blocks (1x1 stride 1/2, 3x3 stride 1/2, the 7x7 stride-2 stem, dilation 2,
groups 2, every padding mode, residual + ReLU / ReLU6 / HSwish epilogues) at L2, L3 and auto against
the L1 interpreter unfused and a float64 numpy reference; NaN and inf; an empty batch; float64;
refolding after ``set_data``; one and two threads agreeing bit for bit. Each test spies on the
kernel that ran (``TapsConv.__call__``: its mode, whether the epilogue was fused, the threads),
so a route that quietly fell back to BLAS or to L1 fails it."""

import msvm as ms
import numpy as np
import pytest
from msvm.compiler import conv, gemm, planning
from msvm.compiler.codegen import codegen
from msvm.compiler.entry import data_pointer
from test_conv_tiers2 import close, compiled_kinds, conv_sites, forward, images, make, reference, with_epilogue


@pytest.fixture
def calls(monkeypatch):
    """Every TapsConv call as (mode, fused: bias/residual/clamp passed to the kernel, threads)."""
    seen = []
    orig = conv.TapsConv.__call__

    def spy(self, x, a, out=None, split=1, bias=None, add=None, lo=-np.inf, hi=np.inf, steps=None):
        fused = bias is not None or add is not None or lo != -np.inf or hi != np.inf
        seen.append((self.mode, fused, split, add is not None))
        return orig(self, x, a, out, split, bias, add, lo, hi, steps)
    monkeypatch.setattr(conv.TapsConv, "__call__", spy)
    monkeypatch.setenv(conv.ROUTE_ENV, "taps")
    return seen


def spec(cin, cout, k, stride=1, pad_mode="same", padding=0, dilation=1, group=1, bias=False, act="relu",
         residual=False):
    return dict(cin=cin, cout=cout, k=k, stride=stride, pad_mode=pad_mode, padding=padding, dilation=dilation,
                group=group, bias=bias, act=act, residual=residual)


# (spec, the mode it takes, whether its epilogue is fused into the kernel: HSwish stays an op of its own)
BLOCKS = {
    "1x1": (spec(24, 40, 1, pad_mode="valid"), "direct", True),
    "1x1_residual_relu": (spec(32, 32, 1, pad_mode="valid", bias=True, residual=True), "direct", True),
    "1x1_s2": (spec(24, 48, 1, stride=2, pad_mode="valid", act="none"), "sub", True),
    "3x3": (spec(16, 24, 3, act="relu6"), "phase", True),
    "3x3_pad_residual": (spec(16, 16, 3, pad_mode="pad", padding=1, residual=True), "phase", False),
    "3x3_s2": (spec(32, 20, 3, stride=2, pad_mode="pad", padding=1), "phase", True),
    "3x3_dilation2_groups2": (spec(32, 24, 3, pad_mode="same", dilation=2, group=2, act="relu6"), "phase", True),
    "5x5_s3_valid": (spec(16, 12, 5, stride=3, pad_mode="valid", act="hswish"), "phase", True),
    "7x7_s2_stem": (spec(3, 16, 7, stride=2, pad_mode="pad", padding=3), "phase", True),
    "1x1_groups2_hswish": (spec(16, 8, 1, pad_mode="valid", group=2, act="hswish"), "direct", True),
}
SIZES = [(2, 16, 17), (1, 13, 14), (1, 30, 21)]


@pytest.mark.parametrize("name", list(BLOCKS))
@pytest.mark.parametrize("level", ["L2", "L3", "auto"])
def test_blocks_match_l1_and_numpy(calls, name, level):
    s, mode, fused = BLOCKS[name]
    seed = sorted(BLOCKS).index(name)
    rng = np.random.default_rng(100 + seed)
    xs = images(rng, s["cin"], SIZES, special=seed % 2 == 0)
    wants = [reference(make(s, seed), s, x) for x in xs]
    l1 = forward(make(s, seed), "L1", False, xs)
    calls.clear()
    net = make(s, seed)
    got = forward(net, level, True, xs)
    assert calls and {c[0] for c in calls} == {mode}, calls
    # (a residual block whose result is cropped from a wider grid runs the epilogue as a pass)
    assert {c[1] for c in calls} == {fused}, calls
    if s["residual"] and fused:
        assert all(c[3] for c in calls)
    if level != "auto":      # (the site's kernel: the product where the epilogue is in its registers, else the pass)
        assert compiled_kinds(net, level) == ({"gemm"} if fused else {"elementwise"})
    for g, w, r in zip(got, wants, l1):
        close(g, w)
        close(g, r, tol=1e-5)


@pytest.mark.parametrize("name", list(BLOCKS))
def test_blocks_with_the_weight_read_in_place(calls, monkeypatch, name):
    """conv.A_ENV=inplace: the product reads A from the Parameter (no copy); same answers."""
    monkeypatch.setenv(conv.A_ENV, "inplace")
    monkeypatch.setattr(conv, "_TAPW", {})
    s, mode, fused = BLOCKS[name]
    seed = sorted(BLOCKS).index(name)
    rng = np.random.default_rng(100 + seed)
    xs = images(rng, s["cin"], SIZES, special=seed % 2 == 0)
    wants = [reference(make(s, seed), s, x) for x in xs]
    l1 = forward(make(s, seed), "L1", False, xs)
    calls.clear()
    got = forward(make(s, seed), "L3", True, xs)
    assert calls and {c[0] for c in calls} == {mode}, calls
    assert conv._TAPW == {}                 # (no packed copy made)
    for g, w, r in zip(got, wants, l1):
        close(g, w)
        close(g, r, tol=1e-5)


ALIASING = {         # (a 1x1 stride-1 block, the output channels a group, conv.ALIASED_MIN_O and over or not)
    "wide": spec(24, 128, 1, pad_mode="valid"),
    "wide_residual_relu": spec(128, 128, 1, pad_mode="valid", bias=True, residual=True),
    "wide_groups2_hswish": spec(16, 256, 1, pad_mode="valid", group=2, act="hswish"),
    "narrow": spec(48, 32, 1, pad_mode="valid"),
}


@pytest.mark.parametrize("name", list(ALIASING))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_planes_of_a_multiple_of_4k_are_read_copied(calls, name, dtype):
    """A 1x1 stride-1 product with many output channels reads a plane of a multiple of conv.ALIASED
    bytes (a 32x32 float32 map, a 32x16 float64 one) copied into rows of an odd number of cache lines
    ("sub": conv.taps_mode), other planes (and every plane of a product with few output channels) in
    place; the answers are the reference's and L1's either way."""
    s = ALIASING[name]
    d = np.dtype(dtype)
    wide, f64 = name != "narrow", d.itemsize == 8
    seed = sorted(ALIASING).index(name)
    rng = np.random.default_rng(200 + seed)
    for (n, h, w), aliased in (((1, 32, 32), True), ((2, 32, 16), f64), ((1, 16, 16), False), ((1, 31, 33), False)):
        x = images(rng, s["cin"], [(n, h, w)], special=True, dtype=d)
        want = reference(make(s, seed, d), s, x[0])
        l1 = forward(make(s, seed, d), "L1", False, x)[0]
        calls.clear()
        got = forward(make(s, seed, d), "L3", True, x)[0]
        assert calls and {c[0] for c in calls} == {"sub" if aliased and wide else "direct"}, ((h, w), calls)
        close(got, want, tol=1e-10 if f64 else 2e-5)
        close(got, l1, tol=1e-6 if f64 else 1e-5)      # (L1 unfused: its batch norm's own rounding)


def test_float64_an_empty_batch_and_the_interpreter_agree(calls):
    s = spec(16, 16, 3, bias=True, act="relu6", residual=True)
    rng = np.random.default_rng(7)
    xs = images(rng, 16, [(1, 20, 33), (0, 20, 33), (2, 6, 7)], special=True, dtype=np.float64)
    net = make(s, 3, np.float64)
    got = forward(net, "L3", True, xs)
    l1 = forward(make(s, 3, np.float64), "L1", False, xs)
    assert {c[0] for c in calls} == {"phase"}
    for g, r, x in zip(got, l1, xs):
        assert g.dtype == np.float64
        close(g, reference(net, s, x), tol=1e-10)     # (the weights are folded in float64)
        close(g, r, tol=1e-6)                          # (L1 unfused: its batch norm's own rounding)
    assert got[1].shape == (0, 16, 20, 33)


@pytest.mark.parametrize("level", ["L2", "L3"])
def test_refolds_after_set_data(calls, level):
    s = spec(24, 32, 1, pad_mode="valid", bias=True)
    rng = np.random.default_rng(11)
    x = rng.standard_normal((1, 24, 20, 20)).astype(np.float32)
    net = make(s, 1)
    forward(net, level, True, [x])
    assert calls
    net.bn.gamma.set_data(ms.Tensor(net.bn.gamma.asnumpy() * -3.0))
    net.conv.weight.set_data(ms.Tensor(net.conv.weight.asnumpy() - 0.5))
    close(net(ms.Tensor(x)).asnumpy(), reference(net, s, x))


def test_strided_input_views(calls):
    """A transposed / sliced NCHW input (odd strides) gives what its contiguous copy gives."""
    s = spec(16, 24, 1, pad_mode="valid")
    rng = np.random.default_rng(3)
    base = rng.standard_normal((1, 16, 15, 22)).astype(np.float32)
    view = base.transpose(0, 1, 3, 2)[:, :, ::2, :]         # (1, 16, 11, 15), not contiguous
    net = make(s, 2)
    ms.set_context(jit_config={"jit_level": "L3", "enable_fusion": True})
    for _ in range(3):
        got = net(ms.Tensor(view)).asnumpy()
    close(got, reference(net, s, np.ascontiguousarray(view)))
    assert calls


@pytest.mark.parametrize("name", ["1x1", "3x3_s2", "3x3_dilation2_groups2"])
def test_one_and_two_threads_agree_bit_for_bit(calls, monkeypatch, name):
    import os

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})   # (two cores even where CI has one)
    s, _, _ = BLOCKS[name]
    rng = np.random.default_rng(21)
    xs = images(rng, s["cin"], [(2, 40, 37), (1, 33, 70)], special=True)
    outs = {}
    for threads in ("1", "2"):
        monkeypatch.setenv("MSVM_THREADS", threads)
        monkeypatch.setattr(conv, "SPLIT_MIN_FLOPS", 0.0)     # (these small layers split too)
        calls.clear()
        outs[threads] = forward(make(s, 4), "L3", True, xs)
        assert {c[2] for c in calls} == {int(threads)}, calls
    for a, b in zip(outs["1"], outs["2"]):
        np.testing.assert_array_equal(a, b)


def test_depthwise_and_pool_planes_split_over_two_threads_agree(monkeypatch):
    import os

    from msvm import nn

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})   # (two cores even where CI has one)

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.dw = nn.Conv2d(8, 8, 3, stride=1, pad_mode="same", group=8)
            self.bn = nn.BatchNorm2d(8)
            self.pool = nn.MaxPool2d(3, 2, pad_mode="same")
            self.act = nn.ReLU6()

        def construct(self, x):
            return self.pool(self.act(self.bn(self.dw(x))))
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 8, 31, 29)).astype(np.float32)
    x[0, 1, 2, 3] = np.nan
    outs = {}
    ran = []
    share = conv.share

    def counted(*args):
        ran.append(1)
        return share(*args)
    monkeypatch.setattr(conv, "share", counted)
    for threads in ("1", "2"):
        monkeypatch.setenv("MSVM_THREADS", threads)
        monkeypatch.setattr(conv, "SPLIT_MIN_FLOPS", 0.0)
        ran.clear()
        net = Net()
        net.set_train(False)
        for p in net.get_parameters():
            p.set_data(ms.Tensor(np.random.default_rng(1).standard_normal(p.shape).astype(np.float32)))
        outs[threads] = forward(net, "L3", True, [x])[0]
        assert bool(ran) == (threads == "2")
    np.testing.assert_array_equal(outs["1"], outs["2"])


def test_route(monkeypatch):
    """Without MSVM_CONV_GEMM: the taps route for float32 and float64 whatever the shape on a target
    with msvm's wide tiles (AVX-512, whatever OpenBLAS's kernels), else only for few channels per
    tap (the RGB stem), whatever the
    threads (the BLAS route splits its products too); BLAS for other dtypes (conv.route's docstring
    has the figures); MSVM_CONV_GEMM=blas keeps BLAS, =taps takes taps."""
    monkeypatch.delenv(conv.ROUTE_ENV, raising=False)
    r = conv.route
    shapes = [((1, 128, 56, 56), (128, 128, 3, 3), (2, 2), (1, 1, 1, 1)),
              ((1, 64, 56, 56), (64, 64, 3, 3), (1, 1), (1, 1, 1, 1)),
              ((1, 3, 224, 224), (64, 3, 7, 7), (2, 2), (3, 3, 3, 3)),
              ((1, 16, 112, 112), (96, 16, 1, 1), (1, 1), (0, 0, 0, 0))]
    for cores in (1, 2):
        monkeypatch.setattr(conv, "cores", lambda cores=cores: cores)
        for x, w, st, pad in shapes:
            stem = w[1] <= conv.FEW_CHANNELS
            for wide in (True, False):
                want = "taps" if wide or stem else "blas"
                for d in (np.float32, np.float64):
                    assert r(x, w, st, pad, (1, 1), 1, d, wide) == want, (x, w, wide, cores)
                assert r(x, w, st, pad, (1, 1), 1, np.float16, wide) == "blas"
    avx512 = "+avx512f" in codegen().features          # (OpenBLAS's own kernels are not asked)
    assert r(*shapes[1], (1, 1), 1, np.float32) == ("taps" if avx512 else "blas")
    monkeypatch.setenv(conv.ROUTE_ENV, "blas")
    assert r(*shapes[0], (1, 1), 1, np.float32, True) == "blas"
    monkeypatch.setenv(conv.ROUTE_ENV, "taps")
    assert r(*shapes[0], (1, 1), 1, np.float32, False) == "taps"


@pytest.mark.parametrize("name", ["1x1_residual_relu", "3x3", "3x3_s2", "3x3_dilation2_groups2"])
def test_the_blas_route_still_matches(monkeypatch, name):
    """MSVM_CONV_GEMM=blas: the BLAS products (BlasConv, the L1 kernel's conv_gemm for groups) and the
    compiled epilogue pass, no taps call."""
    from msvm.interp import kernels as K

    monkeypatch.setenv(conv.ROUTE_ENV, "blas")
    ran = []
    gemm_, bc, taps = K.conv_gemm, conv.BlasConv.__call__, conv.TapsConv.__call__
    monkeypatch.setattr(K, "conv_gemm", lambda *a, **k: ran.append("gemm") or gemm_(*a, **k))
    monkeypatch.setattr(conv.BlasConv, "__call__", lambda self, *a: ran.append(self.mode) or bc(self, *a))
    monkeypatch.setattr(conv.TapsConv, "__call__", lambda self, *a, **k: ran.append("taps") or taps(self, *a, **k))
    s, _, _ = BLOCKS[name]
    rng = np.random.default_rng(31)
    xs = images(rng, s["cin"], SIZES, special=True)
    l1 = forward(make(s, 6), "L1", False, xs)
    ran.clear()
    net = make(s, 6)
    got = forward(net, "L3", True, xs)
    assert ran and "taps" not in ran, ran
    for g, r, x in zip(got, l1, xs):
        close(g, reference(net, s, x))
        close(g, r, tol=1e-5)


# ---------------------------------------------------------------- the kernel itself

@pytest.mark.parametrize("pack_b", [False, True], ids=["b_in_place", "b_packed"])
@pytest.mark.parametrize("a_layout", ["packed", "inplace", "inplace8"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("seed", range(8))
def test_taps_kernel_against_float64_numpy(dtype, seed, a_layout, pack_b):
    """gemm.ir_taps on random m, channels, taps, columns (not multiples of the tile or panel; a last
    panel of at most one vector runs one vector's tiles),
    column ranges, row strides and epilogues, with NaN / inf, against numpy in float64; B read
    where it lies and copied per k block (``pack_b``), whichever this target takes by default."""
    rng = np.random.default_rng(seed)
    d = np.dtype(dtype)
    fn = gemm.taps_function(dtype, a_inplace=a_layout != "packed", rows=8 if a_layout == "inplace8" else 0,
                            pack_b=pack_b)
    mr, nr = gemm.tile_rows(d), gemm.panel_width(d)
    m = int(rng.integers(1, 40))
    ci = int(rng.choice([1, 3, 17, 300]))           # (300: two k blocks or more)
    ntaps = int(rng.integers(1, 5))
    q = nr * int(rng.integers(0, 5)) + int(rng.integers(1, nr + 1))   # (the last panel: one vector's tiles or two)
    row = q + int(rng.integers(0, 40)) + ntaps * 7
    taps = np.sort(rng.integers(0, row - q + 1, ntaps)).astype(np.int64)
    a = rng.standard_normal((m, ci * ntaps)).astype(d)       # (the weight's own (ci, tap) order)
    src = rng.standard_normal((ci, row)).astype(d)
    if seed % 2:
        src[0, taps[0] + q // 2] = np.nan
        src[-1, taps[-1]] = np.inf
    bias = rng.standard_normal(m).astype(d) if seed % 3 else None
    res = rng.standard_normal((m, q)).astype(d) if seed % 2 == 0 else None
    lo, hi = [(-np.inf, np.inf), (0.0, np.inf), (0.0, 6.0)][seed % 3]
    want = sum(a.reshape(m, ci, ntaps)[:, :, t].astype(np.float64) @ src[:, off:off + q].astype(np.float64)
               for t, off in enumerate(taps))
    scale = rng.standard_normal(m).astype(d) if bias is not None else None
    want = with_epilogue(want, scale, bias, res, lo, hi)
    # (in place: the rows as they are; else packed in row blocks)
    ap = gemm.pack_rows(a, mr) if a_layout == "packed" else a
    j0 = nr * int(rng.integers(0, -(-q // nr)))       # a column range that starts on a panel
    c = np.full((m, q), -7.0, d)
    fn(m, ci, ntaps, data_pointer(taps), q, data_pointer(ap), ntaps * ci, data_pointer(src), row, data_pointer(c), q,
       j0, q, bias is not None, data_pointer(scale) if scale is not None else None,
       data_pointer(bias) if bias is not None else None,
       data_pointer(res) if res is not None else None, q, lo, hi)
    assert (c[:, :j0] == -7.0).all()                 # (columns outside [j0, j1) untouched)
    got = c[:, j0:]
    exp = want[:, j0:]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(exp))
    tol = 1e-4 if d == np.float32 else 1e-11
    np.testing.assert_allclose(got, exp, rtol=tol, atol=tol * max(1.0, float(np.nanmax(np.abs(
        np.where(np.isfinite(exp), exp, 0)), initial=0.0))))


def test_fused_epilogue_programs():
    f = conv.fused_epilogue
    bn = (("in", 0), ("in", 1), ("BROADCAST_MUL",), ("in", 2), ("BROADCAST_ADD",))
    relu = bn + (("RELU",),)
    assert conv.with_affine((("in", 0), ("in", 1), ("BROADCAST_ADD",), ("RELU",))) == \
        bn + (("in", 3), ("BROADCAST_ADD",), ("RELU",))
    assert f(relu, True) == (True, None, 0.0, np.inf)
    assert f(bn + (("in", 3), ("BROADCAST_ADD",), ("RELU",)), True) == (True, 3, 0.0, np.inf)
    assert f(bn + (("in", 2), ("BROADCAST_ADD",)), True) is None       # (the shift is no residual)
    assert f(relu + (("c", 6), ("BROADCAST_MIN",)), True) == (True, None, 0.0, 6.0)
    assert f((("in", 0), ("in", 1), ("BROADCAST_ADD",)), False) == (False, 1, -np.inf, np.inf)
    assert f((("in", 0), ("in", 1), ("BROADCAST_ADD",)), True) is None   # (a bias alone: not the bn form)
    assert f((("in", 0), ("in", 1), ("BROADCAST_MUL",)), True) is None
    assert f((("in", 0), ("HSWISH",)), False) is None


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("seed", range(6))
def test_phases_kernel_against_numpy(dtype, seed):
    """compiler/phases.py: an image's padded stride phases (strides 1, 2 (even lanes) and 3 (gathers)),
    every border and the tail past the grid written, in two channel ranges (two threads' halves), the
    buffer first filled with NaN so that a value not written shows; against np.pad and slicing."""
    from msvm.compiler import phases

    rng = np.random.default_rng(300 + seed)
    d = np.dtype(dtype)
    fn = phases.function(dtype)
    for _ in range(20):
        c, h, w = int(rng.integers(1, 5)), int(rng.integers(1, 45)), int(rng.integers(1, 45))
        sh, sw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        pt, pb, pl, pr = (int(v) for v in rng.integers(0, 4, 4))
        hq, wq = -(-(h + pt + pb) // sh), -(-(w + pl + pr) // sw)
        row = hq * wq + int(rng.integers(0, 40))
        x = rng.standard_normal((c, h, w)).astype(d)
        x[0, 0, 0], x[-1, -1, -1] = np.inf, np.nan
        padded = np.pad(x, ((0, 0), (pt, hq * sh - h - pt), (pl, wq * sw - w - pl)))
        want = np.zeros((sh * sw, c, row), d)
        for a in range(sh):
            for b in range(sw):
                want[a * sw + b, :, :hq * wq] = padded[:, a::sh, b::sw][:, :hq, :wq].reshape(c, -1)
        got = np.full((sh * sw, c, row), np.nan, d)
        cut = int(rng.integers(0, c + 1))
        for c0, c1 in ((0, cut), (cut, c)):
            fn(c, h, w, sh, sw, pt, pl, hq, wq, row, sh * sw, data_pointer(x), data_pointer(got), c0, c1)
        np.testing.assert_array_equal(got, want)
        # the first phase alone (a strided 1x1 convolution's subsampled image): nothing past it written
        got = np.full((sh * sw, c, row), np.nan, d)
        fn(c, h, w, sh, sw, pt, pl, hq, wq, row, 1, data_pointer(x), data_pointer(got), 0, c)
        np.testing.assert_array_equal(got[0], want[0])
        assert np.isnan(got[1:]).all()


def test_a_residual_in_the_results_own_buffer(calls):
    """A convolution whose epilogue runs in the product's registers has no compiled pass to fall back
    on (conv._in_registers): asked to write its result over its own residual (the memory plan may
    give an output the buffer of an input that dies there), it reads a copy of the residual, and
    gives what a new result does."""
    s, _, fused = BLOCKS["1x1_residual_relu"]
    assert fused
    rng = np.random.default_rng(31)
    x = rng.standard_normal((1, s["cin"], 9, 11)).astype(np.float32)
    net = make(s, 6)
    forward(net, "L3", True, [x])
    (site,) = [s_ for c in next(iter(net._runner.variants.values())).code.all_codes()
               for s_ in c.jit_sites.values() if s_.op == "FUSED_CONV"]
    (plan,) = [p for p in site.plans.values() if p is not None]
    assert plan.details["epi"] is None                  # (no epilogue compiled: the registers take it)
    (go,) = [p.go for p in site.fast.values()]
    (inputs,) = [list(p) for p in _site_inputs(net, site, x)]
    want = go(inputs, None)
    r = inputs[-1].copy()                               # (the residual, its own buffer the result's)
    inputs[-1] = r
    got = go(inputs, r)
    assert got is r
    np.testing.assert_array_equal(got, want)


def _site_inputs(net, site, x):
    """The inputs the site was called with on one forward of x (in L1, where the interpreter calls it)."""
    seen = []
    orig = site.__class__.__call__

    def spy(self, inputs, reference, out=None):
        if self is site:
            seen.append(tuple(a.copy() if isinstance(a, np.ndarray) else a for a in inputs))
        return orig(self, inputs, reference, out)
    site.__class__.__call__ = spy
    try:
        ms.set_context(jit_config={"jit_level": "L1"})
        net(ms.Tensor(x))
    finally:
        site.__class__.__call__ = orig
        ms.set_context(jit_config={"jit_level": "L3"})
    return seen


def test_sites_of_one_shape_share_a_plan_and_its_geometry_not_their_weights(calls, monkeypatch):
    """Two Cells of the same block (different weights) plan each input shape once between them
    (planning.shared_plan: MobileNet v2 repeats its blocks) and run one TapsConv; each still gets its own
    weights' answer; a change of the route's knob plans again."""
    s = BLOCKS["1x1_residual_relu"][0]
    xs = images(np.random.default_rng(7), s["cin"], SIZES, special=True)
    nets = [make(s, 11), make(s, 12)]
    got = [forward(net, "L2", True, xs) for net in nets]        # (L2: compiled before the first call returns)
    for net, outs in zip(nets, got):
        for x, g in zip(xs, outs):
            close(g, reference(net, s, x))
    (a,), (b,) = (conv_sites(net) for net in nets)
    assert a is not b and a.plans and a.plans.keys() == b.plans.keys()
    for key, plan in a.plans.items():
        assert b.plans[key] is plan
        assert plan.details["taps"][0].mode == "direct"
    assert {c[0] for c in calls} == {"direct"}
    kept = dict(planning._SHARED)
    calls.clear()
    again = forward(make(s, 13), "L2", True, xs[:1])          # (the knob unchanged: the plans made above)
    assert len(planning._SHARED) == len(kept) and calls
    calls.clear()
    monkeypatch.setenv(conv.ROUTE_ENV, "blas")
    blas = forward(make(s, 13), "L2", True, xs[:1])
    assert len(planning._SHARED) > len(kept) and not calls
    close(again[0], blas[0], tol=1e-5)


def test_a_site_whose_arguments_are_not_hashable_still_plans():
    """The shared plans key on the site's arguments (planning.shared_plan); one holding a list is planned
    on its own."""
    class Site:
        op, args = "MAX_POOL2D", ([3, 3], (2, 2), (1, 1, 1, 1))
    x = np.zeros((1, 4, 9, 9), np.float32)
    p = planning.shared_plan(Site(), [x])
    assert p.out_shape == (1, 4, 5, 5) and not planning._SHARED
    Site.args = ((3, 3), (2, 2), (1, 1, 1, 1))
    assert planning.shared_plan(Site(), [x]) is planning.shared_plan(Site(), [x]) and len(planning._SHARED) == 1
