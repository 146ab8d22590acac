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
