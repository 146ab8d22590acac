"""The spinning hand-off of two threads on one kernel's work (compiler/pool.py) and the BLAS route's
split convolutions on it (conv.BlasConv): every argument kind through the trampolines, the pool's
thread awake or asleep, callers racing, tasks of several calls, and the same bits as one thread."""

import threading
import time

import numpy as np
import pytest
from msvm.compiler import conv, gemm, pool

pytestmark = pytest.mark.skipif(not pool.spins(), reason="the spinning pool is x86-64's")


def _until(cond, seconds=30.0):
    """Wait on a state (not a time): True once cond() is, False after ``seconds``."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(1e-3)
    return cond()


def _packed(rng, m, k, n):
    f, nr = gemm.function("float32"), gemm.panel_width(np.float32)
    a = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((n, k)).astype(np.float32)
    return f, nr, a, gemm.pack(w, nr, True), w


def test_share_runs_both_halves_wherever_the_pool_thread_is():
    """The packed product's parts through share, against one call bit for bit: with the pool's
    thread spinning, and after it has gone to sleep (the caller then runs the tasks or wakes it)."""
    rng = np.random.default_rng(0)
    m, k, n = 37, 300, 200                  # (n: not a multiple of the panel)
    f, nr, a, bp, w = _packed(rng, m, k, n)
    one = np.empty((m, n), np.float32)
    f(m, k, n, a.ctypes.data, k, bp.ctypes.data, one.ctypes.data, n)
    np.testing.assert_allclose(one, a @ w.T, rtol=1e-4, atol=1e-3)
    p = pool.pool()
    for asleep in (False, True, False):
        if asleep:
            assert _until(lambda: p.sleeping), "the pool's thread did not go to sleep"
        before = p.ran_here + p.ran_there
        two = np.full((m, n), np.nan, np.float32)
        gemm.run_split(f, m, k, n, a.ctypes.data, k, bp.ctypes.data, two.ctypes.data, n, nr, 4)
        np.testing.assert_array_equal(two, one)
        assert p.ran_here + p.ran_there == before + len(pool.parts(n, nr))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_every_argument_kind_reaches_the_kernel(dtype):
    """The taps kernel takes pointers (some None), integers and floats (float32: C floats, float64:
    doubles): a convolution with a batch norm, a residual and ReLU6 (lo = 0, hi = 6) split over the
    pool equals the one-thread call bit for bit, and numpy to rounding."""
    rng = np.random.default_rng(1)
    d = np.dtype(dtype)
    xs, ws = (2, 24, 19, 23), (40, 24, 1, 1)
    x = rng.standard_normal(xs).astype(d)
    x[1, 3, 4, 5] = np.nan
    w = rng.standard_normal(ws).astype(d)
    tc = conv.TapsConv(xs, ws, (1, 1), (0, 0, 0, 0), (1, 1), 1, d)
    a = conv.prepared_a(w, 1, d, tc.inplace)
    scale, shift = rng.uniform(0.5, 2, 40).astype(d), rng.standard_normal(40).astype(d)
    add = rng.standard_normal(tc.shape).astype(d)
    outs = []
    for split in (1, 2):
        outs.append(tc(x, a, None, split, (scale, shift), add, 0.0, 6.0))
        outs.append(tc(x, a, None, split))
    np.testing.assert_array_equal(outs[2], outs[0])
    np.testing.assert_array_equal(outs[3], outs[1])
    from msvm.interp import kernels as K

    ref = K.conv2d(x.astype(np.float64), w.astype(np.float64), (1, 1), (0, 0, 0, 0), (1, 1), 1)
    np.testing.assert_allclose(outs[1], ref, rtol=1e-4 if dtype == "float32" else 1e-10, atol=1e-3)
    fused = np.minimum(np.maximum(ref * scale[:, None, None] + shift[:, None, None] + add, 0), 6)
    np.testing.assert_allclose(outs[0], fused, rtol=1e-4 if dtype == "float32" else 1e-10, atol=1e-3)
    assert np.isnan(outs[0][1]).any() and not np.isnan(outs[0][0]).any()


@pytest.mark.parametrize("xs, ws, pad, inplace", [
    # (an odd number of column panels on AVX-512 and AVX2 alike: 72 columns are 3 of 32, 5 of 16; 48 rows
    # 4 tiles of 12, 8 of 6)
    ((2, 24, 8, 9), (48, 24, 1, 1), (0, 0, 0, 0), True),         # 3 or 5 panels
    ((1, 8, 8, 7), (48, 8, 3, 3), (1, 1, 1, 1), True),           # the phase grid: 8 x 9
    ((1, 8, 8, 7), (48, 8, 3, 3), (1, 1, 1, 1), False),          # A packed in MR-row blocks
    ((1, 1024, 7, 11), (44, 1024, 1, 1), (0, 0, 0, 0), True),    # rows 4 KB apart: tiles of 8 rows
])
def test_a_row_split_agrees_bit_for_bit(xs, ws, pad, inplace):
    """Where two threads share a taps product more evenly by output rows than by column panels
    (conv._row_cut: a 14 x 14 map is 7 panels), each takes whole row tiles with their A rows, C rows,
    batch norm, residual rows: the same bits as one thread, whatever the A layout."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal(xs).astype(np.float32)
    x[0, 2, 3, 4] = np.nan
    w = rng.standard_normal(ws).astype(np.float32)
    tc = conv.TapsConv(xs, ws, (1, 1), pad, (1, 1), 1, np.float32, inplace=inplace)
    assert tc.row_cut is not None and tc.row_cut % (tc.rows or gemm.tile_rows(np.float32)) == 0
    a = conv.prepared_a(w, 1, np.float32, tc.inplace)
    scale, shift = rng.uniform(0.5, 2, ws[0]).astype(np.float32), rng.standard_normal(ws[0]).astype(np.float32)
    add = rng.standard_normal(tc.shape).astype(np.float32) if tc.grid is None else None
    one, two = (tc(x, a, None, split, (scale, shift), add, 0.0, 6.0) for split in (1, 2))
    np.testing.assert_array_equal(two, one)
    from msvm.interp import kernels as K

    ref = K.conv2d(x.astype(np.float64), w.astype(np.float64), (1, 1), pad, (1, 1), 1)
    fused = np.minimum(np.maximum(ref * scale[:, None, None] + shift[:, None, None] + (add if add is not None else 0),
                                  0), 6)
    np.testing.assert_allclose(one, fused, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("xs, ws, stride", [
    ((2, 3, 23, 29), (40, 3, 3, 3), (2, 2)),       # an RGB stem: a grid one column wider than the map
    ((1, 16, 9, 13), (16, 16, 3, 3), (1, 1)),      # two columns wider
    ((1, 5, 8, 8), (3, 5, 5, 5), (3, 2)),          # odd channel halves, wider strides
])
def test_a_cropped_grid_is_native_and_whole(xs, ws, stride):
    """The taps product's grid (wider than the map's rows) cropped into the result by phases.py's copy:
    the same bits on one thread and two (channel halves), numpy's convolution to rounding, NaN where it
    is, and no copy in Python (``Steps.whole``: the call can be kept)."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal(xs).astype(np.float32)
    x[0, 1, 2, 3] = np.nan
    w = rng.standard_normal(ws).astype(np.float32)
    pad = (1, 1, 1, 1)
    tc = conv.TapsConv(xs, ws, stride, pad, (1, 1), 1, np.float32, dot=False, cout=False)
    assert tc.grid is not None and tc.wq > tc.wo
    a = conv.prepared_a(w, 1, np.float32, tc.inplace)
    outs = []
    for split in (1, 2):
        steps = conv.Steps()
        outs.append(tc(x, a, np.full(tc.shape, np.nan, np.float32), split, None, None, 0.0, np.inf, steps))
        assert steps.whole
    np.testing.assert_array_equal(outs[1], outs[0])
    from msvm.interp import kernels as K

    ref = np.maximum(K.conv2d(x.astype(np.float64), w.astype(np.float64), stride, pad, (1, 1), 1), 0)
    np.testing.assert_allclose(outs[0], ref, rtol=1e-4, atol=1e-3)
    assert np.isnan(outs[0]).sum() == np.isnan(ref).sum() > 0


def test_racing_callers_and_large_batches():
    """Callers on several Python threads at once (one holds the pool, the others run both halves
    themselves), and a batch of more calls than the pool's slots (run on the caller): every result
    right."""
    rng = np.random.default_rng(2)
    m, k, n = 64, 128, 96
    f, nr, a, bp, w = _packed(rng, m, k, n)
    want = np.empty((m, n), np.float32)
    f(m, k, n, a.ctypes.data, k, bp.ctypes.data, want.ctypes.data, n)
    bad = []

    def caller():
        out = np.empty((m, n), np.float32)
        for _ in range(40):
            out.fill(np.nan)
            gemm.run_split(f, m, k, n, a.ctypes.data, k, bp.ctypes.data, out.ctypes.data, n, nr, 4)
            if not np.array_equal(out, want):
                bad.append(1)
    threads = [threading.Thread(target=caller) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad
    outs = [np.full((m, n), np.nan, np.float32) for _ in range(pool.SLOTS + 3)]
    pool.share([[(f, (m, k, n, a.ctypes.data, k, bp.ctypes.data, o.ctypes.data, n))] for o in outs])
    for o in outs:
        np.testing.assert_array_equal(o, want)


def test_tasks_run_their_calls_in_order():
    """A task's calls run in order on one thread (the BLAS route's taps accumulate onto the same
    columns): each task multiplies then adds onto its own output, 40 tasks, against numpy."""
    rng = np.random.default_rng(4)
    m, k, n = 8, 64, 48
    f, nr, a, bp, w = _packed(rng, m, k, n)
    tasks, outs = [], []
    for _ in range(40):
        o = np.full((m, n), np.nan, np.float32)
        outs.append(o)
        tasks.append([(f, (m, k, n, a.ctypes.data, k, bp.ctypes.data, o.ctypes.data, n))] * 2)
    pool.share(tasks)
    one = np.empty((m, n), np.float32)
    f(m, k, n, a.ctypes.data, k, bp.ctypes.data, one.ctypes.data, n)
    for o in outs:
        np.testing.assert_array_equal(o, one)


def test_parts():
    assert pool.parts(100, 16, 8) == [(0, 16), (16, 32), (32, 48), (48, 64), (64, 80), (80, 96), (96, 100)]
    assert pool.parts(100, 16, 4) == [(0, 16), (16, 48), (48, 80), (80, 100)]
    assert pool.parts(1000, 16, 8)[0] == (0, 112) and pool.parts(1000, 16, 8)[-1][1] == 1000
    assert len(pool.parts(1000, 16, 8)) == 8
    assert pool.parts(5, 1, 8) == [(i, i + 1) for i in range(5)]
    assert pool.parts(0, 16) == [] and pool.parts(7, 16) == [(0, 7)]
    for total, unit in ((3136, 16), (49, 16), (2304, 16), (97, 1)):
        cuts = pool.parts(total, unit)
        assert cuts[0][0] == 0 and cuts[-1][1] == total
        assert all(b == c for (_, b), (c, _) in zip(cuts, cuts[1:]))
        assert all(a % unit == 0 for a, _ in cuts)


def test_an_argument_type_without_a_word_runs_on_the_caller():
    """A function with an argument type the trampolines do not carry (a C int) is called here."""
    import ctypes

    got = []
    cb = ctypes.CFUNCTYPE(None, ctypes.c_int)(lambda v: got.append(v))
    pool.share([[(cb, (3,))], [(cb, (4,))]])
    assert sorted(got) == [3, 4]
    # no argtypes, or fewer arguments than it takes: called here too, so ctypes converts or raises
    loose = ctypes.CFUNCTYPE(None, ctypes.c_int64)(lambda v: got.append(v))
    loose.argtypes = None
    pool.share([[(loose, (5,))], [(loose, (6,))]])
    assert sorted(got) == [3, 4, 5, 6]
    two = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64)(lambda a, b: got.append(a + b))
    with pytest.raises(TypeError):
        pool.share([[(two, (1, 2))], [(two, (7,))]])


def test_float_words_round_as_ctypes_does():
    """A C float argument out of float range is inf (as ctypes passes it), NaN and -0.0 keep their bits."""
    import ctypes
    import struct

    for v in (1e39, -1e39, float("nan"), -0.0, 6.0, float("-inf")):
        want = struct.unpack("<i", bytes(ctypes.c_float(v)))[0]
        assert pool._bits("float", v) == want
    assert pool._bits("double", -0.0) == struct.unpack("<q", struct.pack("<d", -0.0))[0]


def test_one_trampoline_per_signature():
    p = pool.pool()
    sig = ("i64", "ptr", "double", "float")
    first = p.tramp(sig)
    assert p.tramp(sig) == first and p.tramp(("ptr",) * 13) != first


CASES = {   # (x shape, w shape, stride, pad, dilation; how two threads split it[; im2col block bytes]): each BlasConv mode
    "direct": ((2, 20, 13, 17), (24, 20, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), "columns"),
    "direct_narrow": ((2, 20, 5, 5), (40, 20, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), "channels"),
    "im2col_wide": ((2, 12, 15, 21), (16, 12, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), "columns"),
    "im2col_blocks": ((2, 12, 15, 21), (16, 12, 3, 3), (1, 1), (1, 2, 0, 1), (1, 1), "columns", 3000),
    "im2col_dilated_same": ((1, 8, 17, 19), (12, 8, 3, 3), (1, 1), ("same",), (2, 2), "columns"),
    "im2col_dilated_strided_blocks": ((1, 5, 23, 60), (7, 5, 3, 2), (2, 3), (2, 1, 0, 3), (2, 3), "columns", 900),
    "im2col_narrow": ((1, 12, 6, 17), (20, 12, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), "channels"),
    "im2col_strided": ((2, 12, 15, 21), (16, 12, 3, 3), (2, 2), (1, 0, 1, 0), (1, 1), "channels"),
    "im2col_strided_wide": ((1, 4, 40, 41), (6, 4, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1), "columns"),
    "im2col_few_channels": ((1, 16, 7, 7), (8, 16, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), None),
    "im2col_1x1_stride2": ((1, 16, 14, 14), (33, 16, 1, 1), (2, 2), (0, 0, 0, 0), (1, 1), "channels"),
    "direct_wide_many_channels": ((2, 8, 12, 13), (136, 8, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), "channels"),
    "im2col_wide_many_channels": ((1, 4, 12, 12), (130, 4, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), "channels"),
    "im2col_wide_many_channels_big": ((1, 4, 30, 30), (130, 4, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), "columns", 2000),
}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_blas_conv_split_matches_one_thread_and_numpy(case, dtype, monkeypatch):
    """BlasConv in each mode, on one thread and split over the pool (its output columns, or its output
    channels where the map is narrow: conv.ROW_SPLIT_COLS; a layer of few channels on a narrow map
    stays whole), the im2col mode's windows in one block or several (conv.IM2COL_BLOCK_BYTES), into a
    new array and into a given buffer, from a non-contiguous input with NaN and inf: the two agree to
    rounding (not bit for bit: OpenBLAS picks its kernels by the product's size, so half the columns
    can round differently in the last place) and match the interpreter's convolution in float64."""
    from msvm.interp import kernels as K

    xs, wsh, stride, pad, dil, how, *block = CASES[case]
    if block:
        monkeypatch.setattr(conv, "IM2COL_BLOCK_BYTES", block[0])
    rows, shares = [], []
    orig = conv.BlasConv._rows
    monkeypatch.setattr(conv.BlasConv, "_rows", lambda self, *a: rows.append(1) or orig(self, *a))
    shared = conv.share
    monkeypatch.setattr(conv, "share", lambda tasks: shares.append([len(t) for t in tasks]) or shared(tasks))
    d = np.dtype(dtype)
    rng = np.random.default_rng(3)
    big = rng.standard_normal((xs[0], xs[1], xs[2], xs[3] * 2)).astype(d)
    x = big[..., ::2]                        # (column-strided)
    x[0, 1, 2, 3] = np.nan
    x[-1, 0, 1, 1] = np.inf
    w = rng.standard_normal(wsh).astype(d)
    bc = conv.BlasConv(xs, wsh, stride, pad, dil, d)
    assert bc.mode == case.split("_")[0]
    blocks = -(-bc.ho // bc.block_rows) if bc.mode == "im2col" else 0
    assert (blocks > 2) == bool(block)
    one = bc(x, w, None, 1)
    # one thread: im2col runs its blocks (a copy and a product each) as one task on this thread
    assert rows == [] and shares == ([[2 * blocks]] * xs[0] if blocks else [])
    shares.clear()
    out = np.full(bc.shape, np.nan, d)
    two = bc(x, w, out, 2)
    assert two is out
    if how == "channels":     # (im2col: both threads copy half the channels' windows first)
        assert rows == [1, 1] * xs[0] and len(shares) == xs[0] * (2 if blocks else 1)
        assert all(s == [1, 1] for s in shares)
    elif how == "columns":    # (im2col: each half of the rows its own blocks, copy and product)
        assert rows == [] and len(shares) == xs[0] and all(len(s) == 2 for s in shares)
        if blocks:
            assert sum(shares[0]) == 2 * sum(-(-(z - a) // min(bc.block_rows, -(-bc.ho // 2)))
                                             for a, z in conv.parts(bc.ho, 1, 2))
    else:
        assert rows == [] and all(len(s) < 2 for s in shares)
    np.testing.assert_array_equal(np.isnan(two), np.isnan(one))
    np.testing.assert_allclose(two, one, rtol=1e-5 if dtype == "float32" else 1e-13, atol=1e-5)
    ref = K.conv2d(x.astype(np.float64), w.astype(np.float64), stride, pad, dil, 1)
    np.testing.assert_allclose(one, ref, rtol=1e-4 if dtype == "float32" else 1e-10, atol=1e-3)


GROUPED = {   # (x shape, w shape, stride, pad, dilation, group[, im2col block bytes])
    "direct_wide": ((2, 12, 13, 17), (18, 4, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 3),
    "direct_narrow": ((1, 16, 5, 5), (32, 4, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 4),
    "im2col_wide_blocks": ((2, 8, 15, 21), (12, 4, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 2, 2000),
    "im2col_strided_dilated": ((1, 6, 23, 40), (9, 2, 3, 3), (2, 2), ("same",), (2, 1), 3),
    "im2col_narrow": ((1, 32, 7, 7), (64, 8, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 4),
    "direct_wide_many_channels": ((1, 8, 12, 12), (256, 4, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 2),
}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", sorted(GROUPED))
def test_grouped_blas_conv_matches_numpy_split_or_not(case, dtype, monkeypatch):
    """(issue 18) A grouped convolution by BlasConv (one product per group over its channels' rows of the
    windows; two threads: halves of the columns, or on narrow maps halves of the groups), from a strided
    input with NaN and inf, against the interpreter's grouped convolution in float64."""
    from msvm.interp import kernels as K

    xs, wsh, stride, pad, dil, group, *block = GROUPED[case]
    if block:
        monkeypatch.setattr(conv, "IM2COL_BLOCK_BYTES", block[0])
    d = np.dtype(dtype)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((xs[0], xs[1], xs[2], xs[3] * 2)).astype(d)[..., ::2]
    x[0, -1, 1, 2] = np.nan
    x[-1, 0, 0, 0] = -np.inf
    w = rng.standard_normal(wsh).astype(d)
    bc = conv.BlasConv(xs, wsh, stride, pad, dil, d, group)
    assert bc.mode == case.split("_")[0] and (not block or -(-bc.ho // bc.block_rows) > 2)
    ref = K.conv2d(x.astype(np.float64), w.astype(np.float64), stride, pad, dil, group)
    one = bc(x, w, None, 1)
    two = bc(x, w, np.full(bc.shape, np.nan, d), 2)
    for got in (one, two):
        np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
        np.testing.assert_allclose(got, ref, rtol=1e-4 if dtype == "float32" else 1e-10, atol=1e-3)


def test_im2col_kernel_matches_the_windows():
    """(issue 18) The compiled windows copy (conv.im2col_function) against numpy's windows of the
    padded image on random geometries: every stride (the kernel's constant), dilation and padding,
    channel and output-row ranges, float32 and float64; only [c0, c1) x [oh0, oh1) is written, padding
    as zeros, NaN and inf copied."""
    from msvm.interp import kernels as K

    rng = np.random.default_rng(7)
    done = 0
    while done < 120:
        d = np.dtype([np.float32, np.float64][done % 2])
        c, h, w = (int(v) for v in rng.integers(1, [6, 30, 40]))
        kh, kw, sh, sw, dh, dw = (int(v) for v in rng.integers(1, [5, 5, 4, 4, 3, 3]))
        pt, pb, pl, pr = (int(v) for v in rng.integers(0, 4, 4))
        if dh * (kh - 1) + 1 > h + pt + pb or dw * (kw - 1) + 1 > w + pl + pr:
            continue
        x = rng.standard_normal((1, c, h, w)).astype(d)
        x.flat[rng.integers(0, x.size, 2)] = [np.nan, np.inf]
        xp, _, _ = K._padded(x, (kh, kw), (sh, sw), (dh, dw), (pt, pb, pl, pr), 0)
        ref = K._windows(xp, (kh, kw), (sh, sw), (dh, dw))[0].transpose(0, 3, 4, 1, 2)
        ho, wo = ref.shape[3:]
        oh0 = int(rng.integers(0, ho))
        oh1 = int(rng.integers(oh0 + 1, ho + 1))
        c0 = int(rng.integers(0, c))
        c1 = int(rng.integers(c0 + 1, c + 1))
        dst = np.full((c, kh, kw, oh1 - oh0, wo), -7.0, d)
        zrow = np.zeros(w + 64, d)
        conv.im2col_function(d.name, sw)(c0, c1, oh0, oh1, h, w, wo, kh, kw, sh, dh, dw, pt, pl,
                                           dst.ctypes.data, x.ctypes.data, zrow.ctypes.data)
        want = np.full_like(dst, -7.0)
        want[c0:c1] = ref[c0:c1, :, :, oh0:oh1]
        np.testing.assert_array_equal(dst, want)
        done += 1


def test_large_elementwise_and_row_passes_split_on_the_pool(monkeypatch):
    """(issue 18) At L3 an elementwise kernel and a layer norm / softmax over 1M elements or more run
    in halves on this thread and the spinning pool's (callconv._parallel, pool.share): the same bits as
    one call over all rows, NaN and inf kept, and numpy's values."""
    import msvm as ms
    from msvm import nn, ops
    from msvm.compiler import callconv, tiers

    class Block(nn.Cell):
        def __init__(self):
            super().__init__()
            self.norm = nn.LayerNorm((512,), epsilon=1e-5)
            self.softmax = nn.Softmax(axis=-1)

        def construct(self, x, y):
            z = ops.tanh(x * 0.5 + y) - y * y
            return self.softmax(self.norm(z)), z

    rng = np.random.default_rng(31)
    x = rng.standard_normal((2304, 512)).astype(np.float32)        # 1.18M elements
    y = rng.standard_normal((2304, 512)).astype(np.float32)
    x[7, 3], y[100, 9], x[2000, 0] = np.nan, np.inf, -np.inf
    calls = []
    real = callconv._parallel

    def spy(fn, n, *rest):
        calls.append(n)
        return real(fn, n, *rest)
    monkeypatch.setattr(callconv, "_parallel", spy)
    outs = {}
    for split, limit in (("split", callconv.PARALLEL_MIN), ("one", 1 << 40)):
        monkeypatch.setattr(callconv, "PARALLEL_MIN", limit)
        ms.set_context(jit_config={"jit_level": "L3"})
        try:
            net = Block()
            before = len(calls)
            outs[split] = [o.asnumpy() for o in net(ms.Tensor(x), ms.Tensor(y))]
            tiers.wait_for_compiles(60)
            assert (len(calls) > before) == (split == "split"), calls
        finally:
            ms.set_context(jit_config={"jit_level": "auto"})
    for a, b in zip(outs["split"], outs["one"]):
        np.testing.assert_array_equal(a, b)
    with np.errstate(invalid="ignore", over="ignore"):
        z = np.tanh(x * 0.5 + y) - y * y
        mu = z.mean(-1, keepdims=True)
        n = (z - mu) / np.sqrt(z.var(-1, keepdims=True) + 1e-5)
        e = np.exp(n - n.max(-1, keepdims=True))
        p = e / e.sum(-1, keepdims=True)
    np.testing.assert_allclose(outs["split"][1], z, rtol=1e-5, atol=1e-5, equal_nan=True)
    np.testing.assert_allclose(outs["split"][0], p, rtol=1e-4, atol=1e-5, equal_nan=True)


def test_a_task_list_is_packed_once_and_its_float_signs_count():
    """share() keeps the packed task list of a split product (a replay posts the same pointers every
    call): posted again, it is the same batch and the same bits; a float argument of another sign
    (lo = -0.0 after 0.0: equal as keys) is packed anew, so max(+0.0, lo) keeps lo's sign."""
    xs, ws = (1, 8, 14, 14), (40, 8, 1, 1)
    x, w = np.zeros(xs, np.float32), np.zeros(ws, np.float32)
    tc = conv.TapsConv(xs, ws, (1, 1), (0, 0, 0, 0), (1, 1), 1, np.float32)
    a = conv.prepared_a(w, 1, np.float32, tc.inplace)
    out = np.empty(tc.shape, np.float32)
    pool._batches.clear()
    for lo in (0.0, -0.0, 0.0):
        want = tc(x, a, None, 1, None, None, lo, 6.0)
        kept = []
        for _ in range(3):
            got = tc(x, a, out, 2, None, None, lo, 6.0)
            np.testing.assert_array_equal(got, want)
            assert (np.signbit(got) == (str(lo)[0] == "-")).all(), lo
            assert len(pool._batches) == 1      # (the sign is checked on a hit, not keyed: one entry)
            kept.append(next(iter(pool._batches.values())))
        assert kept[0] is kept[1] is kept[2]    # posted again as it was packed
