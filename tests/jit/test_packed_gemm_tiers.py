"""msvm's own product by a weight packed once (compiler/gemm.py, issue 18): the kernel itself on
random shapes against float64 numpy (empty, one row, tile and panel edges, NaN and inf), and
nn.Dense layers whose L2 and L3 sites take it, against L1 and numpy with fusion on and off, with
``set_data`` repacking the weight."""

import math

import msvm as ms
import numpy as np
import pytest
from msvm import nn
from msvm.compiler import callconv, gemm, tiers
from msvm.compiler.codegen import codegen


def _run(a, w):
    """C = a @ w.T through the packed kernel (w: [N, K], the Dense weight)."""
    fn = gemm.function(str(a.dtype))
    bp = gemm.pack(w, gemm.panel_width(a.dtype), transposed=True)
    m, k = a.shape
    out = np.full((m, w.shape[0]), 7.0, a.dtype)      # (every element must be written)
    fn(m, k, w.shape[0], a.ctypes.data, k, bp.ctypes.data, out.ctypes.data, w.shape[0])
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_packed_kernel_matches_numpy_on_random_shapes(dtype):
    rng = np.random.default_rng(3)
    _w, nv, mr = gemm.shape(codegen().features, str(np.dtype(dtype)))
    nr = _w * nv
    ms_ = sorted({0, 1, 2, mr - 1, mr, mr + 1, 2 * mr + 3, 37, 130})
    # n: panel edges, and past one column block of gemm.NB panels (a short last block)
    ns = sorted({1, 5, nr - 1, nr, nr + 1, 2 * nr + 3, 70, gemm.NB * nr, gemm.NB * nr + nr + 3})
    # k: every remainder of the tiles' unrolled loop (gemm.UNROLL), none, one, and past a k block (gemm.KC)
    ks = [0, 1, 2, 3, 4, 5, 6, 7, 9, 90, gemm.KC - 1, gemm.KC + 3, 2 * gemm.KC + 1]
    for j, m in enumerate(ms_):
        for i, n in enumerate(ns):
            k = ks[(j * len(ns) + i) % len(ks)]
            a = rng.standard_normal((m, k)).astype(dtype)
            w = rng.standard_normal((n, k)).astype(dtype)
            got = _run(a, w)
            ref = a.astype(np.float64) @ w.T.astype(np.float64)
            tol = 1e-5 if dtype == np.float32 else 1e-12
            np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * max(1.0, math.sqrt(k)),
                                       err_msg=f"m={m} k={k} n={n}")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_row_has_the_same_bits_in_products_of_any_row_count(dtype):
    """Each row's sums run in the same k order whichever tile holds it: the last MR + 1 to MR + 3 rows in
    two tiles of about half (gemm.SPLIT_REST), a remainder alone, or whole tiles. A row of A gives the same
    bits in products of every row count, past one k block and across panels."""
    rng = np.random.default_rng(21)
    _w, nv, mr = gemm.shape(codegen().features, str(np.dtype(dtype)))
    k, n = gemm.KC + 37, 3 * _w * nv + 5
    a = rng.standard_normal((4 * mr, k)).astype(dtype)
    w = rng.standard_normal((n, k)).astype(dtype)
    whole = _run(a, w)
    for m in sorted({1, 2, 3, mr - 1, mr + 1, mr + 2, mr + 3, mr + 4, 2 * mr + 1, 2 * mr + 3, 3 * mr + 2}):
        np.testing.assert_array_equal(_run(a[:m], w), whole[:m], err_msg=f"m={m}")


def test_rows_in_one_block_and_in_many_give_the_same_bits():
    """Few rows (all of A in one row block: the tiles that also prefetch into L2, gemm.L2_PREFETCH_ROWS)
    and many (column blocks of gemm.NB panels) run the same sums in the same order; A read at a row
    stride past its row (a view, odd lda), its rows through the tiles' group pointers (gemm.ROW_GROUP)."""
    rng = np.random.default_rng(5)
    k, n = gemm.KC + 93, gemm.NB * 32 + 45
    mc = gemm.DENSE_A_BLOCK_BYTES // 4 // gemm.KC
    m = 2 * mc + 11                      # (past one row block: A is past DENSE_A_BLOCK_BYTES)
    assert m * k * 4 > gemm.DENSE_A_BLOCK_BYTES
    base = rng.standard_normal((m, k + 6)).astype(np.float32)
    a = base[:, 3:3 + k]                 # (rows k + 6 apart, an odd stride, not 64-byte aligned)
    assert a.strides[0] // 4 % 2 == 1
    w = rng.standard_normal((n, k)).astype(np.float32)
    fn = gemm.function("float32")
    bp = gemm.pack(w, gemm.panel_width(np.float32), transposed=True)

    def run(rows):
        out = np.full((rows, n), 7.0, np.float32)
        fn(rows, k, n, a.ctypes.data, a.strides[0] // 4, bp.ctypes.data, out.ctypes.data, n)
        return out
    many = run(m)
    np.testing.assert_allclose(many, a.astype(np.float64) @ w.T.astype(np.float64), rtol=1e-5,
                               atol=1e-5 * math.sqrt(k))
    for rows in (1, 2, 3, 4, 5, 8, 9, 10, 11, 13, 24, 40):     # (each all of A in one row block)
        assert rows * k * 4 <= gemm.DENSE_A_BLOCK_BYTES
        np.testing.assert_array_equal(run(rows), many[:rows], err_msg=f"rows={rows}")


def test_packed_kernel_over_several_row_blocks():
    """Rows past one block of A (gemm.DENSE_A_BLOCK_BYTES of a k block) take the next block: every row,
    with k past a k block and columns past a column block, against numpy."""
    rng = np.random.default_rng(8)
    k = 2 * gemm.KC + 1
    mc = gemm.DENSE_A_BLOCK_BYTES // 4 // gemm.KC
    a = rng.standard_normal((2 * mc + 7, k)).astype(np.float32)
    w = rng.standard_normal((gemm.NB * 32 + 37, k)).astype(np.float32)
    np.testing.assert_allclose(_run(a, w), a.astype(np.float64) @ w.T.astype(np.float64), rtol=1e-5,
                               atol=1e-5 * math.sqrt(k))


def test_packed_kernel_propagates_nan_and_inf():
    rng = np.random.default_rng(4)
    a = rng.standard_normal((13, 40)).astype(np.float32)
    w = rng.standard_normal((35, 40)).astype(np.float32)
    a[2, 5] = np.nan
    a[7, 1] = np.inf
    w[30, 3] = -np.inf
    got = _run(a, w)
    with np.errstate(invalid="ignore"):
        ref = a.astype(np.float64) @ w.T.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(ref))
    fin = np.isfinite(ref)
    np.testing.assert_allclose(got[fin], ref[fin], rtol=1e-5, atol=1e-4)


def test_packing_is_zero_padded_panels():
    w = np.arange(3 * 5, dtype=np.float32).reshape(3, 5)       # N=3, K=5
    bp = gemm.pack(w, 4, transposed=True)
    assert bp.shape == (1, 5, 4) and bp.flags.c_contiguous
    np.testing.assert_array_equal(bp[0, :, :3], w.T)
    assert not bp[0, :, 3].any()


def test_use_packed_by_rows(monkeypatch):
    monkeypatch.setenv("MSVM_THREADS", "1")
    monkeypatch.setattr(gemm, "wider_than_blas", lambda: False)
    assert not gemm.use_packed(0, np.float32) and gemm.use_packed(1, np.float32)      # (one row: gemm.py)
    assert gemm.use_packed(16, np.float32) and gemm.use_packed(128, np.float64)
    assert not gemm.use_packed(4096, np.float32) and not gemm.use_packed(16, np.float16)
    monkeypatch.setenv("MSVM_THREADS", "2")           # (two cores: every row count, split: test_gemm_threads)
    assert gemm.use_packed(4096, np.float32) == (callconv.cores() >= 2) and not gemm.use_packed(16, np.float16)


def test_use_packed_past_rows_where_blas_runs_narrower_tiles(monkeypatch):
    """(issue 18) Zen 5 with AVX-512, OpenBLAS on its Haswell (AVX2) kernels: the packed product at
    every row count, one thread or two; OpenBLAS on SkylakeX kernels, or an AVX2 target: ROWS holds."""
    monkeypatch.setenv("MSVM_THREADS", "1")
    avx512, avx2 = "+avx2,+fma,+avx512f,+avx512bw", "+avx2,+fma,-avx512f"
    assert gemm.wider_than_blas(avx512, "haswell") and gemm.wider_than_blas(avx512, "zen")
    assert not gemm.wider_than_blas(avx512, "skylakex") and not gemm.wider_than_blas(avx512, "sapphirerapids")
    assert not gemm.wider_than_blas(avx2, "haswell") and not gemm.wider_than_blas(avx512, None)
    monkeypatch.setattr(gemm, "wider_than_blas", lambda: True)
    assert gemm.use_packed(4096, np.float32) and gemm.use_packed(300, np.float64)
    assert not gemm.use_packed(0, np.float32) and not gemm.use_packed(4096, np.float16)
    from msvm.compiler import build

    core = build.blas_core()
    assert core is None or (isinstance(core, str) and core == core.lower() and core)


class Ffn(nn.Cell):
    """Two Dense layers (GELU in between) and a residual add: BERT's feed-forward."""

    def __init__(self, d=48, h=80, dtype=ms.float32):
        super().__init__()
        self.up = nn.Dense(d, h, dtype=dtype)
        self.act = nn.GELU(approximate=False)
        self.down = nn.Dense(h, d, dtype=dtype)
        self.relu = nn.Dense(d, d, activation="relu", dtype=dtype)

    def construct(self, x):
        return self.relu(self.down(self.act(self.up(x))) + x)


def _numpy_ffn(net, x):
    from scipy.special import erf

    def dense(layer, t):
        return t @ layer.weight.asnumpy().astype(np.float64).T + layer.bias.asnumpy().astype(np.float64)
    t = x.astype(np.float64)
    u = dense(net.up, t)
    u = u * 0.5 * (1 + erf(u / math.sqrt(2)))
    return np.maximum(dense(net.relu, dense(net.down, u) + t), 0)


def _packed_sites(net):
    return [s for v in net._runner.variants.values() for c in v.code.all_codes()
            for s in c.jit_sites.values() if s.op == "FUSED_MATMUL" and s.pcache]


def _at_tiers(net, xs, level, tier) -> dict:
    """{level: [net(x) for x in xs]} at L1, then at ``tier`` (one net, so both multiply the same weights)."""
    outs = {}
    for lv in ("L1", tier):
        level(lv)
        res = []
        for x in xs:
            res.append(net(ms.Tensor(x)).asnumpy())
            tiers.wait_for_compiles(60)
        outs[lv] = res
    return outs


@pytest.mark.parametrize("fusion", [True, False])
@pytest.mark.parametrize("tier", ["L2", "L3", "auto"])
@pytest.mark.parametrize("dtype", [ms.float32, ms.float64])
def test_dense_layers_on_the_packed_product_match_l1_and_numpy(level, tier, fusion, dtype):
    rng = np.random.default_rng(5)
    npd = np.float32 if dtype == ms.float32 else np.float64
    shapes = [(1, 16), (2, 7), (1, 1), (0, 5), (3, 37), (1, 16), (1, 16), (1, 16), (1, 300)]
    xs = [rng.standard_normal((b, s, 48)).astype(npd) for b, s in shapes]
    ms.set_context(jit_config={"enable_fusion": fusion})
    net = Ffn(dtype=dtype)
    net.set_inputs(ms.Tensor(shape=[None, None, 48], dtype=dtype))
    outs = _at_tiers(net, xs, level, tier)
    tol = 1e-4 if npd is np.float32 else 1e-10
    for x, a, b in zip(xs, outs["L1"], outs[tier]):
        ref = _numpy_ffn(net, x)
        assert b.shape == ref.shape and b.dtype == npd
        np.testing.assert_allclose(b, ref, rtol=tol, atol=tol, err_msg=f"{tier} {x.shape}")
        np.testing.assert_allclose(b, a, rtol=tol, atol=tol, err_msg=f"{tier} vs L1 {x.shape}")
    # (with fusion off a MATMUL is no compiled site: the interpreter's numpy product at every tier)
    assert bool(_packed_sites(net)) == fusion, "the Dense sites did not run the packed product"


def test_set_data_repacks_the_weight(level):
    rng = np.random.default_rng(6)
    for tier in ("L2", "L3"):
        level(tier)
        net = Ffn()
        net.set_inputs(ms.Tensor(shape=[None, None, 48], dtype=ms.float32))
        x = rng.standard_normal((1, 9, 48)).astype(np.float32)
        for _ in range(4):
            net(ms.Tensor(x))
            tiers.wait_for_compiles(60)
        before = {k: e[1] for s in _packed_sites(net) for k, e in s.pcache.items()}
        assert len(before) == 3      # one packed copy per weight (one Dense Code may serve several layers)
        net.up.weight.set_data(ms.Tensor(rng.standard_normal((80, 48)).astype(np.float32)))
        net.relu.weight.set_data(ms.Tensor(np.zeros((48, 48), np.float32)))
        got = net(ms.Tensor(x)).asnumpy()
        np.testing.assert_allclose(got, _numpy_ffn(net, x), rtol=1e-4, atol=1e-4, err_msg=tier)
        assert not got.any()          # relu(0 @ ... + 0): the new, zero weight is the one multiplied
        after = {k: e[1] for s in _packed_sites(net) for k, e in s.pcache.items()}
        assert len(after) == 5, tier           # up and relu packed again (the old arrays' entries age out)
        assert all(after[k] is v for k, v in before.items())


class Twin(nn.Cell):
    """Two Dense layers of one shape, each with its own weight."""

    def __init__(self):
        super().__init__()
        self.a = nn.Dense(32, 32)
        self.b = nn.Dense(32, 32)

    def construct(self, x):
        return self.b(self.a(x))


def test_each_dense_multiplies_its_own_packed_weight(level):
    rng = np.random.default_rng(8)
    level("L3")
    net = Twin()
    x = rng.standard_normal((20, 32)).astype(np.float32)
    for _ in range(3):
        got = net(ms.Tensor(x)).asnumpy()
    w = [net.a.weight.asnumpy(), net.b.weight.asnumpy()]
    ref = (x @ w[0].T + net.a.bias.asnumpy()) @ w[1].T + net.b.bias.asnumpy()
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    packs = [e[1] for s in _packed_sites(net) for e in s.pcache.values()]
    assert len(packs) == 2 and packs[0] is not packs[1]


def test_the_replay_calls_the_packed_kernel_through_its_native_entry(level):
    """(the call path of base18) A repeated signature replays; its Dense sites' L3 callers are packed
    kernels whose native entry (callconv.Native) is given the site's packed weight, and a weight
    replaced by ``set_data`` is packed again on the replayed path (the fast key says it is fixed)."""
    rng = np.random.default_rng(9)
    level("L3")
    net = Twin()
    x = rng.standard_normal((20, 32)).astype(np.float32)

    def ref():
        a, b = net.a, net.b
        return (x @ a.weight.asnumpy().T + a.bias.asnumpy()) @ b.weight.asnumpy().T + b.bias.asnumpy()
    for _ in range(8):
        np.testing.assert_allclose(net(ms.Tensor(x)).asnumpy(), ref(), rtol=1e-5, atol=1e-5)
    assert all(callable(e.replay) for e in net.__dict__["_runner"].memo.values())
    sites = _packed_sites(net)
    prepared = [(s, k, pr) for s in sites for k, pr in s.fast.items()]
    assert prepared and all(pr.compiled.kernel.packed and k[-1] is True for _s, k, pr in prepared)
    assert all(pr.native is not None and pr.native.weight == s.packed for s, _k, pr in prepared)
    packs = sum(len(s.pcache) for s in sites)
    net.a.weight.set_data(ms.Tensor(rng.standard_normal((32, 32)).astype(np.float32)))
    for _ in range(3):
        np.testing.assert_allclose(net(ms.Tensor(x)).asnumpy(), ref(), rtol=1e-5, atol=1e-5)
    assert sum(len(s.pcache) for s in sites) == packs + 1


class _AddMM(nn.Cell):
    """GPT-2's Conv1D: x @ W + b with W stored [K, N] (read as is, not transposed)."""

    def __init__(self, k, n):
        super().__init__()
        rng = np.random.default_rng(k * 7 + n)
        self.weight = ms.Parameter(ms.Tensor(rng.standard_normal((k, n)).astype(np.float32)), "weight")
        self.bias = ms.Parameter(ms.Tensor(rng.standard_normal(n).astype(np.float32)), "bias")

    def construct(self, x):
        return ms.ops.addmm(self.bias, x, self.weight)


@pytest.mark.parametrize("level", ["L2", "L3", "auto"])
def test_a_weight_read_as_is_runs_packed_and_follows_set_data(level):
    """x @ B by a fixed B [K, N] (GPT-2's Conv1D) takes the packed product at every compiled tier, also
    through the replay (auto, repeated calls); a new array from set_data is packed again; a writable B
    given as an argument to the same product never runs packed."""
    net = _AddMM(48, 70)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((9, 48)).astype(np.float32)
    ms.set_context(jit_config={"jit_level": level})
    for _ in range(12):
        out = net(ms.Tensor(x)).asnumpy()
        tiers.wait_for_compiles(60)
    w, b = net.weight.asnumpy(), net.bias.asnumpy()
    np.testing.assert_allclose(out, x @ w + b, rtol=1e-5, atol=1e-5)
    var = next(iter(net._runner.variants.values()))
    sites = [s for c in var.code.all_codes() for s in c.jit_sites.values() if s.op == "FUSED_MATMUL"]
    assert sites and all(s.pcache for s in sites)
    w2 = rng.standard_normal((48, 70)).astype(np.float32)
    net.weight.set_data(ms.Tensor(w2))
    for _ in range(3):
        out = net(ms.Tensor(x)).asnumpy()
    np.testing.assert_allclose(out, x @ w2 + b, rtol=1e-5, atol=1e-5)

    @ms.jit
    def f(x, w, b):
        return ms.ops.addmm(b, x, w)

    for i in range(8):
        wi = rng.standard_normal((48, 70)).astype(np.float32)
        if i % 2:
            wi.flags.writeable = False
        got = f(ms.Tensor(x), ms.Tensor(wi), ms.Tensor(b)).asnumpy()
        np.testing.assert_allclose(got, x @ wi + b, rtol=1e-5, atol=1e-5)
    ms.set_context(jit_config={"jit_level": "auto"})


@pytest.mark.parametrize("tier", ["L2", "L3", "auto"])
def test_a_prepared_weight_made_writable_again_is_read_as_it_is_now(level, tier):
    """A weight the site packed (Dense, x @ W.T) or read as is (Conv1D, x @ B), then made writable and
    written in place, is no longer fixed (Site.frozen answers a writable array first): the next calls,
    replayed ones too, multiply the new values, not the stale packed copy."""
    rng = np.random.default_rng(12)
    level(tier)
    for net, ref in ((Twin(), lambda n, x: (x @ n.a.weight.asnumpy().T + n.a.bias.asnumpy())
                      @ n.b.weight.asnumpy().T + n.b.bias.asnumpy()),
                     (_AddMM(32, 40), lambda n, x: x @ n.weight.asnumpy() + n.bias.asnumpy())):
        x = rng.standard_normal((20, 32)).astype(np.float32)
        for _ in range(8):
            out = net(ms.Tensor(x)).asnumpy()
            tiers.wait_for_compiles(60)
        np.testing.assert_allclose(out, ref(net, x), rtol=1e-5, atol=1e-5)
        sites = [s for v in net._runner.variants.values() for c in v.code.all_codes()
                 for s in c.jit_sites.values() if s.op == "FUSED_MATMUL" and (s.pcache or s.wcache)]
        arrays = [e[0] for s in sites for e in list(s.pcache.values()) + list(s.wcache.values())]
        assert arrays, "no weight was prepared"
        for a in arrays:
            a.flags.writeable = True
            a[...] = rng.standard_normal(a.shape).astype(a.dtype)
        for _ in range(3):
            out = net(ms.Tensor(x)).asnumpy()
            np.testing.assert_allclose(out, ref(net, x), rtol=1e-5, atol=1e-5, err_msg=type(net).__name__)
        assert not any(tiers._frozen(a) or s.frozen(a) for s in sites for a in arrays)


class _Bare(nn.Cell):
    """LLaMA's feed-forward (no biases: gate, up, down) and a product by a Parameter as is (x @ W): each
    a product with nothing to fuse after it."""

    def __init__(self, d=48, h=80):
        super().__init__()
        self.gate = nn.Dense(d, h, has_bias=False)
        self.up = nn.Dense(d, h, has_bias=False)
        self.down = nn.Dense(h, d, has_bias=False)
        rng = np.random.default_rng(d + h)
        self.w = ms.Parameter(ms.Tensor(rng.standard_normal((d, 24)).astype(np.float32)), "w")

    def construct(self, x):
        g = self.gate(x)
        y = self.down(ms.ops.silu(g) * self.up(x))
        return ms.ops.matmul(y.reshape((-1, 48)), self.w)      # (2-D: a batched x @ W is a BATCH_MATMUL)


def _numpy_bare(net, x):
    t = x.astype(np.float64)

    def dense(layer, v):
        return v @ layer.weight.asnumpy().astype(np.float64).T
    g = dense(net.gate, t)
    with np.errstate(over="ignore", invalid="ignore"):
        y = dense(net.down, g / (1 + np.exp(-g)) * dense(net.up, t))
    return y.reshape(-1, 48) @ net.w.asnumpy().astype(np.float64)


@pytest.mark.parametrize("tier", ["L2", "L3", "auto"])
def test_a_product_with_nothing_fused_runs_packed(level, tier):
    """(issue 18) A product by a weight with no epilogue (``nn.Dense(has_bias=False)``, ``x @ W``) is a
    FUSED_MATMUL all the same (compiler/fuse.py ``_by_weight``): its site multiplies by the packed weight,
    with no epilogue pass (kir.bare), at every tier and over shapes that keep changing (a polymorphic
    site's shape-generic caller), against L1 and numpy, NaN and inf included. The interpreter ran these as
    BLAS calls on the weight's transposed view, on one thread: 1.6x slower on one core, 2.9x on two (GPT-2's
    768 x 3072 at 64 rows)."""
    from msvm.bytecode.disasm import records

    rng = np.random.default_rng(11)
    net = _Bare()
    net.set_inputs(ms.Tensor(shape=[None, None, 48], dtype=ms.float32))
    shapes = [(1, 16), (2, 7), (1, 1), (0, 5), (3, 37), (1, 16), (1, 16), (1, 9), (1, 300), (2, 7)]
    xs = [rng.standard_normal((b, s, 48)).astype(np.float32) for b, s in shapes]
    xs[4][1, 3, 5] = np.nan
    xs[4][2, 0, 7] = np.inf
    outs = _at_tiers(net, xs, level, tier)
    for x, a, b in zip(xs, outs["L1"], outs[tier]):
        ref = _numpy_bare(net, x)
        assert b.shape == ref.shape
        np.testing.assert_array_equal(np.isnan(b), np.isnan(ref), err_msg=f"{tier} {x.shape}")
        fin = np.isfinite(ref)
        np.testing.assert_allclose(b[fin], ref[fin], rtol=1e-4, atol=1e-4, err_msg=f"{tier} {x.shape}")
        np.testing.assert_allclose(b[fin], a[fin], rtol=1e-4, atol=1e-4, err_msg=f"{tier} vs L1 {x.shape}")
    (var,) = net._runner.variants.values()
    ops = [r.op for c in var.code.all_codes() for r in records(c)]
    assert "MATMUL" not in ops and ops.count("FUSED_MATMUL") == 4, ops      # (the products by weights)
    bare = [s for s in _packed_sites(net) if s.args[3] == (("in", 0),)]
    assert len(bare) == 4, "the products with nothing fused did not run packed"
    kernels = [pr.compiled.kernel for s in bare for pr in s.callers.values()]
    assert kernels and all(k.kind != "matmul" or k.epilogue is None for k in kernels)     # (no epilogue pass)
    if tier == "L3":      # (a site past L3_SHAPES shapes keeps its shape-generic caller: tiers.py)
        assert any(k.kind == "matmul" and k.packed for k in kernels)


def test_a_product_of_two_activations_stays_the_interpreters():
    """Only a product by a Parameter is made a FUSED_MATMUL with nothing fused: x @ y of two inputs stays a
    MATMUL (the interpreter's BLAS call; no weight to pack)."""
    from msvm.bytecode.disasm import records

    class Mm(nn.Cell):
        def construct(self, x, y):
            return ms.ops.matmul(x, y)
    net = Mm()
    x, y = np.ones((3, 4), np.float32), np.ones((4, 5), np.float32)
    np.testing.assert_array_equal(net(ms.Tensor(x), ms.Tensor(y)).asnumpy(), x @ y)
    (var,) = net._runner.variants.values()
    assert [r.op for r in records(var.code)] == ["LOAD_TENSOR", "LOAD_TENSOR", "MATMUL", "RETURN"]


class _Mixed(nn.Cell):
    """A product by a weight whose epilogue reads every kind of input: the bias (broadcast along the
    rows), a residual (a tensor of the product's shape), a value per row ([m, 1]: broadcast along a row),
    a 0-d tensor (a scalar argument) and a constant."""

    def __init__(self, k, n, dtype):
        super().__init__()
        rng = np.random.default_rng(k + n)
        npd = np.float32 if dtype == ms.float32 else np.float64
        self.w = ms.Parameter(ms.Tensor(rng.standard_normal((k, n)).astype(npd)), "w")
        self.b = ms.Parameter(ms.Tensor(rng.standard_normal(n).astype(npd)), "b")

    def construct(self, x, r, c, s):
        return ms.ops.relu((ms.ops.matmul(x, self.w) + self.b + r) * c * s - 1.0)


@pytest.mark.parametrize("tier", ["L2", "L3"])
@pytest.mark.parametrize("dtype", [ms.float32, ms.float64])
def test_the_epilogue_runs_in_each_chunk_of_columns(level, monkeypatch, dtype, tier):
    """(issue 18) An L3 product by a packed weight applies its epilogue per chunk of gemm.EPI_PANELS panels
    as the chunk leaves the product (gemm.lower_matmul_packed), over the columns [j0, j1) it is given: rows
    past one row block (a weight in cache: blocks of 64 rows), a last chunk and a last vector that are
    short, every kind of epilogue input, NaN and inf; against numpy and L1, and two threads' column ranges
    (a range that starts inside a chunk) against one thread bit for bit. At L2 one kernel serves every
    row count (m, k, n its arguments; its row blocks picked inside it as planning picks L3's)."""
    rng = np.random.default_rng(17)
    npd = np.float32 if dtype == ms.float32 else np.float64
    k, n = 160, 200                  # (2 m k n past gemm.SPLIT_MIN_FLOPS at 150 rows: two threads share it)
    one = _Mixed(k, n, dtype)
    w, b = one.w.asnumpy().astype(np.float64), one.b.asnumpy().astype(np.float64)
    cases = []
    for m in ((150,) if tier == "L3" else (150, 37, 1, 0, 150)):
        x = rng.standard_normal((m, k)).astype(npd)
        r = rng.standard_normal((m, n)).astype(npd)
        c = rng.standard_normal((m, 1)).astype(npd)
        if m > 100:
            x[7, 3], r[100, 199], c[66, 0] = np.nan, np.inf, -np.inf
        with np.errstate(invalid="ignore", over="ignore"):
            ref = np.maximum((x.astype(np.float64) @ w + b + r) * c * 0.5 - 1.0, 0)
        cases.append(([ms.Tensor(v) for v in (x, r, c, np.array(0.5, npd))], ref))
    got = {}
    for threads in (1, 2):
        monkeypatch.setenv("MSVM_THREADS", str(threads))
        monkeypatch.setattr(callconv, "_AFFINITY", [threads])        # (two cores even where CI has one)
        net = _Mixed(k, n, dtype)
        level(tier)
        before = gemm.splits[0]
        outs = []
        for args, _ref in cases * 2:
            outs.append(net(*args).asnumpy())
            tiers.wait_for_compiles(60)
        got[threads] = outs
        compiled = [pr.compiled for s in _packed_sites(net) for pr in s.callers.values()
                    if pr.compiled.kernel.kind == "matmul"]       # (0 rows: BLAS's, gemm.use_packed)
        kernels = [cp.kernel for cp in compiled]
        assert kernels and all(kn.packed and kn.epilogue.kinds == ("t", "t", "t", "t", "s") for kn in kernels)
        assert all((kn.m is None) == (tier == "L2") for kn in kernels)
        assert not any(name.endswith("_epi") for cp in compiled for name in cp.addrs)   # (no epilogue pass)
        assert tier == "L2" or kernels[0].block == 64            # (several row blocks of 150 rows)
        assert (gemm.splits[0] > before) == (threads == 2)
        level("L1")
        tol = 1e-4 if npd is np.float32 else 1e-10
        for (args, ref), out in zip(cases * 2, outs):
            l1 = net(*args).asnumpy()
            np.testing.assert_array_equal(np.isnan(out), np.isnan(ref))
            fin = np.isfinite(ref)
            np.testing.assert_allclose(out[fin], ref[fin], rtol=tol, atol=tol)
            np.testing.assert_allclose(out[fin], l1[fin], rtol=tol, atol=tol)
    for a, b2 in zip(got[2], got[1]):
        np.testing.assert_array_equal(a, b2)


def test_an_output_of_one_column_and_one_of_many_take_their_own_l2_kernels(level):
    """(review) A packed product's L2 kernel reads each epilogue input as its block flags say, compiled in: a
    [1] scale is one value a row of a one-column output but a vector along a row of a wider one, where both
    outputs collapse alike. One site at both widths (a weight passed as an argument) gets two kernels
    (the flags are in the plan's class); with one, the wider output read the [1] scale as a vector."""
    class Head(nn.Cell):
        def __init__(self):
            super().__init__()
            self.s = ms.Parameter(ms.Tensor(np.array([2.0], np.float32)), "s")

        def construct(self, x, w):
            return ms.ops.matmul(x, w) * self.s

    rng = np.random.default_rng(0)
    ws = [ms.Parameter(ms.Tensor(rng.standard_normal((8, n)).astype(np.float32)), f"w{n}") for n in (1, 5, 1)]
    level("L2")
    net = Head()
    net.set_inputs(ms.Tensor(shape=[None, 8], dtype=ms.float32), ms.Tensor(shape=[8, None], dtype=ms.float32))
    x = rng.standard_normal((6, 8)).astype(np.float32)
    for w in ws:
        for _ in range(2):
            got = net(ms.Tensor(x), w).asnumpy()
            tiers.wait_for_compiles(60)
            np.testing.assert_allclose(got, x @ w.asnumpy() * 2, rtol=1e-5, atol=1e-5, err_msg=str(w.shape))
    (site,) = [s for s in _packed_sites(net)]
    assert len([k for k in site.l2.values() if getattr(k, "kernel", None) is not None]) == 2
