"""Two threads on msvm's packed product (compiler/gemm.py ``run_split``, issue 18): the kernel's
two column halves against one call bit for bit; nn.Dense (BERT's feed-forward) and GPT-2's
Conv1D at L2, L3 and auto, also through the replay, give the same bits with MSVM_THREADS=1 and 2;
the split happens where the product is large enough (a spy on gemm.splits) and not below, each
thread running the site's kernel, the product and its epilogue, over its own columns
(gemm.lower_matmul_packed, at L2 and L3)."""

import msvm as ms
import numpy as np
import pytest
from msvm import nn
from msvm.compiler import callconv, gemm, tiers


def _call(fn, a, bp, n, split):
    m, k = a.shape
    out = np.full((m, n), 7.0, a.dtype)
    if split:
        gemm.run_split(fn, m, k, n, a.ctypes.data, k, bp.ctypes.data, out.ctypes.data, n,
                       gemm.panel_width(a.dtype), a.dtype.itemsize)
    else:
        fn(m, k, n, a.ctypes.data, k, bp.ctypes.data, out.ctypes.data, n)
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_two_halves_are_the_one_call_bit_for_bit(dtype):
    rng = np.random.default_rng(11)
    fn = gemm.function(str(np.dtype(dtype)))
    nr = gemm.panel_width(dtype)
    for m, k, n in [(1, 5, nr + 1), (13, 300, 2 * nr), (37, 64, 3 * nr + 5), (2, 0, 70), (130, 257, 5 * nr - 1)]:
        a = rng.standard_normal((m, k)).astype(dtype)
        w = rng.standard_normal((n, k)).astype(dtype)
        if m > 3 and k > 3:
            a[3, 2], w[n - 1, 1] = np.nan, np.inf
        bp = gemm.pack(w, nr, transposed=True)
        before = gemm.splits[0]
        one, two = _call(fn, a, bp, n, False), _call(fn, a, bp, n, True)
        assert gemm.splits[0] == before + 1
        np.testing.assert_array_equal(two, one, err_msg=f"m={m} k={k} n={n}")
        assert (one != 7.0).any() or k == 0


def test_threads_by_size_and_cores(monkeypatch):
    monkeypatch.setenv("MSVM_THREADS", "2")
    two = min(callconv.cores(), 2)
    assert gemm.threads(128, 768, 3072, np.float32) == two
    assert gemm.threads(9, 48, 80, np.float32) == 1                 # small: one thread
    assert gemm.threads(4096, 768, gemm.panel_width(np.float32), np.float32) == 1      # one panel
    monkeypatch.setenv("MSVM_THREADS", "1")
    assert gemm.threads(128, 768, 3072, np.float32) == 1


class Ffn(nn.Cell):
    """BERT's feed-forward at a size whose products split (d=384, h=1536, 48 rows)."""

    def __init__(self, d, h):
        super().__init__()
        self.up = nn.Dense(d, h)
        self.act = nn.GELU(approximate=False)
        self.down = nn.Dense(h, d)

    def construct(self, x):
        return self.down(self.act(self.up(x))) + x


class Ffn2(Ffn):
    """(its own Code and sites, so its callers are made under the other thread count)"""

    def construct(self, x):
        return self.down(self.act(self.up(x))) + x


class AddMM(nn.Cell):
    """GPT-2's Conv1D: x @ W + b with W stored [K, N]."""

    def __init__(self, k, n):
        super().__init__()
        rng = np.random.default_rng(k + n)
        self.weight = ms.Parameter(ms.Tensor(rng.standard_normal((k, n)).astype(np.float32)), "weight")
        self.bias = ms.Parameter(ms.Tensor(rng.standard_normal(n).astype(np.float32)), "bias")

    def construct(self, x):
        return ms.ops.addmm(self.bias, x, self.weight)


class AddMM2(AddMM):
    def construct(self, x):
        return ms.ops.addmm(self.bias, x, self.weight)


def _copy(src, dst):
    for p, q in zip(src.get_parameters(), dst.get_parameters()):
        q.set_data(ms.Tensor(p.asnumpy().copy()))
    return dst


def _run(net, x, calls, monkeypatch, threads):
    monkeypatch.setenv("MSVM_THREADS", str(threads))
    before = gemm.splits[0]
    for _ in range(calls):
        out = net(ms.Tensor(x)).asnumpy()
        tiers.wait_for_compiles(60)
    return out, gemm.splits[0] - before


def _sites(net):
    return [s for v in net._runner.variants.values() for c in v.code.all_codes()
            for s in c.jit_sites.values() if s.op == "FUSED_MATMUL" and s.pcache]


@pytest.mark.parametrize("tier", ["L2", "L3", "auto"])
@pytest.mark.parametrize("model", ["dense", "conv1d"])
def test_one_and_two_threads_give_the_same_bits(tier, model, monkeypatch):
    import os

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})   # (two cores even where CI has one)
    rng = np.random.default_rng(12)
    ms.set_context(jit_config={"jit_level": tier})
    if model == "dense":
        one, two = Ffn(384, 1536), Ffn2(384, 1536)
        x = rng.standard_normal((1, 48, 384)).astype(np.float32)
    else:
        one, two = AddMM(384, 1536), AddMM2(384, 1536)
        x = rng.standard_normal((48, 384)).astype(np.float32)
    _copy(one, two)
    calls = 12 if tier == "auto" else 4
    a, split_one = _run(one, x, calls, monkeypatch, 1)
    b, split_two = _run(two, x, calls, monkeypatch, 2)
    assert split_one == 0
    assert _sites(two), "the products did not run packed"
    assert split_two >= calls // 2, "two threads did not share the product"
    # (each thread runs the site's kernel, the product and its epilogue, over its own columns: at L2 the
    # kernel of the epilogue's class, m, k and n its arguments; at L3 one per shape)
    kernels = [pr.compiled.kernel for s in _sites(two) for pr in s.callers.values()]
    assert kernels and all(k.kind == "matmul" and k.packed for k in kernels)
    if tier != "auto":
        assert all((k.m is None) == (tier == "L2") for k in kernels)
    np.testing.assert_array_equal(b, a)
    w = [q.asnumpy().astype(np.float64) for q in one.get_parameters()]
    if model == "conv1d":
        ref = x @ w[0] + w[1]
        np.testing.assert_allclose(b, ref, rtol=1e-4, atol=1e-3)


def test_the_replay_splits_through_the_caller_and_small_products_stay_native(monkeypatch):
    """A replayed signature: a split product's site has no native entry (its caller shares the kernel's
    columns between the two threads, each thread's columns with their epilogue: no pass of its own over the
    product), a small one keeps its native entry and never splits."""
    import os

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})   # (two cores even where CI has one)
    rng = np.random.default_rng(13)
    ms.set_context(jit_config={"jit_level": "L3"})
    monkeypatch.setenv("MSVM_THREADS", "2")
    big, small = AddMM(384, 1536), AddMM(48, 80)
    xb = rng.standard_normal((48, 384)).astype(np.float32)
    xs = rng.standard_normal((9, 48)).astype(np.float32)
    for net, x in ((big, xb), (small, xs)):
        for _ in range(6):
            net(ms.Tensor(x))
            tiers.wait_for_compiles(60)
        assert all(callable(e.replay) for e in net.__dict__["_runner"].memo.values())
    prep = {n: [pr for s in _sites(net) for pr in s.fast.values()] for n, net in (("big", big), ("small", small))}
    assert prep["big"] and all(pr.native is None for pr in prep["big"])
    assert prep["small"] and all(pr.native is not None for pr in prep["small"])
    before = gemm.splits[0]
    for _ in range(3):
        got = small(ms.Tensor(xs)).asnumpy()
    assert gemm.splits[0] == before
    np.testing.assert_allclose(got, xs @ small.weight.asnumpy() + small.bias.asnumpy(), rtol=1e-5, atol=1e-5)
    rows = []          # (the bias epilogue runs in each thread's column chunks: no epilogue pass, split or not)
    spread = callconv._parallel
    monkeypatch.setattr(callconv, "_parallel", lambda fn, n, *rest: (rows.append(n), spread(fn, n, *rest)))
    for _ in range(3):
        got = big(ms.Tensor(xb)).asnumpy()
    assert gemm.splits[0] == before + 3
    assert rows == [] and all(pr.compiled.kernel.packed and pr.compiled.kernel.epilogue for pr in prep["big"])
    np.testing.assert_allclose(got, xb @ big.weight.asnumpy() + big.bias.asnumpy(), rtol=1e-4, atol=1e-3)


def _blas_lib():
    import ctypes
    import glob
    import os

    paths = glob.glob(os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs", "libscipy_openblas64_*"))
    return ctypes.CDLL(paths[0]) if paths else None


@pytest.mark.skipif(_blas_lib() is None, reason="numpy ships no scipy_openblas64")
def test_the_blas_runs_on_one_thread_once_the_pool_splits(monkeypatch):
    """build.blas_single: set once msvm's pool splits work (its idle workers would spin on the
    pool's cores), a number from MSVM_BLAS_THREADS, left alone with "keep"."""
    from msvm.compiler import build

    lib = _blas_lib()
    get, put = lib.scipy_openblas_get_num_threads64_, lib.scipy_openblas_set_num_threads64_
    was = get()
    try:
        put(2)
        monkeypatch.setenv("MSVM_BLAS_THREADS", "keep")
        assert build.blas_single() is False and get() == 2
        monkeypatch.setenv("MSVM_BLAS_THREADS", "")
        assert build.blas_single() is True and get() == 1
        monkeypatch.setattr(callconv, "_blas_set", [False])
        put(2)
        callconv.submit(int, 3).result()          # (the first work on the pool sets it)
        assert get() == 1 and callconv._blas_set[0]
    finally:
        put(was)
