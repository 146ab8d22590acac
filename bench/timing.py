"""Timing helpers shared by the benchmarks: medians of calls timed in turn, so drift on a
shared machine hits every side alike."""

import statistics
import time


def interleaved(fns, reps):
    """Median seconds per function, the functions called in turn, round after round."""
    times = [[] for _ in fns]
    for _ in range(reps):
        for k, fn in enumerate(fns):
            t0 = time.perf_counter_ns()
            fn()
            times[k].append(time.perf_counter_ns() - t0)
    return [statistics.median(t) / 1e9 for t in times]


def paired_overhead(vm, ref, reps):
    """Median over pairs of (vm - ref) in µs, each pair run back to back in alternating order;
    also the medians of vm and ref alone."""
    diffs, a_t, b_t = [], [], []
    for k in range(reps):
        order = (vm, ref) if k % 2 == 0 else (ref, vm)
        t = {}
        for fn in order:
            t0 = time.perf_counter_ns()
            fn()
            t[fn] = time.perf_counter_ns() - t0
        diffs.append(t[vm] - t[ref])
        a_t.append(t[vm])
        b_t.append(t[ref])
    return statistics.median(diffs) / 1e3, statistics.median(a_t) / 1e3, statistics.median(b_t) / 1e3


def timed(fn) -> float:
    """Seconds one call of fn takes."""
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def sgemm_peak(n=1024, reps=5) -> float:
    """FLOP/s of numpy's float32 matmul at n^3 (best of reps): the floor's compute rate."""
    import numpy as np

    a = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
    b = a.T.copy()
    a @ b
    return 2.0 * n ** 3 / min(timed(lambda: a @ b) for _ in range(reps))


def copy_bandwidth(nbytes=256 << 20, reps=5) -> float:
    """Bytes/s moved (read + write) by numpy's copy of nbytes (best of reps): the floor's memory rate."""
    import numpy as np

    src = np.ones(nbytes // 4, np.float32)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    return 2.0 * nbytes / min(timed(lambda: np.copyto(dst, src)) for _ in range(reps))


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def peak_rss(fn) -> int | None:
    """Bytes the process's resident set rose to above where it stood while fn ran (Linux: the
    high-water mark is reset through /proc/self/clear_refs first), or None where that is not
    available. The same measure for every peer in one process: what each call held at its peak,
    its outputs and workspaces included, beyond what was resident before."""
    import gc

    gc.collect()
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        before = _status_kb("VmRSS")
    except OSError:
        return None
    fn()
    return max(0, _status_kb("VmHWM") - before) * 1024
