"""FUSED_ATTENTION on two threads (compiler/attention_site.py ``heads_product``, ``row_call``, issue 18):
the heads' products as one BLAS call per matrix, the matrices and the softmax rows in halves over
this thread and the pool's. The product against numpy's matmul on random batched shapes, transposed
and strided views, float32 and float64, and the cases it leaves to numpy (a non-unit inner stride,
batch shapes that differ, an empty dim); the attention site split (HEADS_SPLIT_FLOPS lowered so
small shapes split) against one thread and L1, NaN and -inf masks included."""

import msvm as ms
import numpy as np
import pytest
from attention_cells import Attention, _inputs
from msvm.compiler import attention_site, pool, tiers


def _views(rng, batch, m, k, n, dtype, ta, tb):
    a = rng.standard_normal(batch + ((k, m) if ta else (m, k))).astype(dtype)
    b = rng.standard_normal(batch + ((n, k) if tb else (k, n))).astype(dtype)
    return (np.swapaxes(a, -1, -2) if ta else a), (np.swapaxes(b, -1, -2) if tb else b)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("seed", range(6))
def test_heads_product_matches_numpy(seed, dtype):
    rng = np.random.default_rng(seed)
    batch = tuple(int(x) for x in rng.integers(1, 4, int(rng.integers(1, 3))))
    m, k, n = (int(x) for x in rng.integers(1, 40, 3))
    ta, tb = bool(rng.integers(0, 2)), bool(rng.integers(0, 2))
    a, b = _views(rng, batch, m, k, n, dtype, ta, tb)
    a.flat[0] = np.nan if seed % 3 == 0 else a.flat[0]
    want = np.matmul(a, b)
    out = np.full(batch + (m, n), 7.0, dtype)
    if seed % 2:                       # (the output a transposed view of a buffer in another layout)
        base = np.full(batch[:-1] + (m, batch[-1], n), 7.0, dtype)
        out = np.swapaxes(base, -2, -3)
    assert attention_site.heads_product(a, b, out)
    np.testing.assert_allclose(out, want, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-5)
    np.testing.assert_array_equal(np.isnan(out), np.isnan(want))


def test_heads_product_holds_its_blas_arguments_while_another_thread_clears_them():
    """The BLAS's by-reference arguments (m, n, k, the leading dims) live in a table that another
    thread may clear: the calls heads_product keeps for a geometry and its addresses hold them. (The
    other thread is played here by clearing the table between two products on the same buffers,
    then allocating over the freed memory.)"""
    import ctypes

    rng = np.random.default_rng(30)
    a, b = _views(rng, (2, 3), 17, 33, 29, np.float32, False, True)
    out = np.full((2, 3, 17, 29), 7.0, np.float32)
    assert attention_site.heads_product(a, b, out)
    attention_site._SCALARS.clear()
    junk = [ctypes.c_int64(-1) for _ in range(4096)]       # (over the freed values, where they were kept nowhere)
    out[...] = 7.0
    assert attention_site.heads_product(a, b, out)
    del junk
    np.testing.assert_allclose(out, np.matmul(a, b), rtol=1e-5, atol=1e-5)


def test_heads_product_keeps_the_calls_of_the_same_buffers_only():
    """A second product on the same buffers runs the kept calls (the values they read may change);
    other buffers of the same geometry get calls of their own."""
    rng = np.random.default_rng(31)
    a, b = _views(rng, (1, 4), 9, 16, 12, np.float32, False, True)
    out = np.empty((1, 4, 9, 12), np.float32)
    attention_site._HEADS.clear()
    assert attention_site.heads_product(a, b, out)
    kept = dict(attention_site._HEADS)
    a[...] = rng.standard_normal(a.shape)
    assert attention_site.heads_product(a, b, out)
    assert attention_site._HEADS == kept
    np.testing.assert_allclose(out, np.matmul(a, b), rtol=1e-5, atol=1e-5)
    a2, out2 = a.copy(), np.empty_like(out)
    assert attention_site.heads_product(a2, b, out2)
    assert len(attention_site._HEADS) == len(kept) + 1
    np.testing.assert_allclose(out2, np.matmul(a2, b), rtol=1e-5, atol=1e-5)


def test_heads_product_leaves_what_it_cannot_take_to_numpy():
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((2, 5, 6)).astype(np.float32), rng.standard_normal((2, 6, 4)).astype(np.float32)
    out = np.zeros((2, 5, 4), np.float32)
    assert not attention_site.heads_product(a[:, :, ::2], b[:, :3], out)          # a's columns 2 apart
    assert not attention_site.heads_product(a, b[:1], out[:1])                      # batch shapes differ
    assert not attention_site.heads_product(a[:, :0], b, out[:, :0])                # an empty dim
    assert not attention_site.heads_product(a, b, np.zeros((2, 4, 5), np.float32).transpose(0, 2, 1))  # C's columns
    assert (out == 0).all()


@pytest.mark.parametrize("tier", ["L2", "L3"])
def test_attention_split_over_two_threads_matches_one(tier, monkeypatch):
    """The same attention with the heads split (MSVM_THREADS=2, any size splits) and not (1): the same
    answers to rounding, and both as L1's; the pool ran tasks for the split one."""
    rng = np.random.default_rng(5)
    q, k, v, mask = _inputs(rng, 2, 9, 9, 3, 8)
    mask[0, :, :, :2] = -np.inf
    q[1, 3, 2, 1] = np.nan
    monkeypatch.setattr(attention_site, "HEADS_SPLIT_FLOPS", 0.0)
    outs = {}
    for threads in ("1", "2"):
        monkeypatch.setenv("MSVM_THREADS", threads)
        net = Attention(8)
        ms.set_context(jit_config={"jit_level": "L1"})
        ref = net(*map(ms.Tensor, (q, k, v, mask))).asnumpy()
        ms.set_context(jit_config={"jit_level": tier})
        p = pool.pool()
        for _ in range(3):
            before = p.ran_here + p.ran_there
            got = net(*map(ms.Tensor, (q, k, v, mask))).asnumpy()
            tiers.wait_for_compiles(60)
        ran = p.ran_here + p.ran_there - before
        assert (ran > 0) == (threads == "2"), (threads, ran)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
        outs[threads] = got
    np.testing.assert_allclose(outs["2"], outs["1"], rtol=1e-6, atol=1e-7)
