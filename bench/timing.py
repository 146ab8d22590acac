"""Timing helpers shared by the benchmarks: medians of calls timed in turn, so drift on a
shared machine hits every side alike."""

import os
import statistics
import threading
import time
from dataclasses import dataclass, field


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


def _thread_cpu_ns() -> int:
    """CPU time of this process's threads other than the caller, in ns (each thread's own CPU clock:
    ``clock_gettime`` on the id ``MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED)``, nanoseconds where
    /proc's counters tick at 10 ms)."""
    me, total = threading.get_native_id(), 0
    for tid in os.listdir("/proc/self/task"):
        if int(tid) != me:
            try:
                total += time.clock_gettime_ns((~int(tid) << 3) | 6)
            except OSError:            # the thread ended
                pass
    return total


def quiesce(window=0.005, busy=0.05, limit=1.0) -> float:
    """Wait until this process's other threads are idle: less than ``busy`` of a core over ``window``
    seconds (at most ``limit``); returns the seconds waited. Between two peers' turns: a thread pool
    spins after its run, waiting for the next (onnxruntime's intra-op workers ~50 ms after each
    ``run``, measured on two cores: they took one of the two cores through msvm's next call, 2x its
    time; msvm's pool spins 2 ms). Each peer's turn starts on quiet cores, and its timed call follows
    its own untimed one, as calls in a serving loop follow each other."""
    if not hasattr(time, "clock_gettime_ns") or not os.path.isdir("/proc/self/task"):
        return 0.0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < limit:
        a = _thread_cpu_ns()
        time.sleep(window)
        if _thread_cpu_ns() - a < busy * window * 1e9:
            break
    return time.perf_counter() - t0


def prefault(nbytes=1 << 30) -> float:
    """Touch ``nbytes`` of fresh memory once and free it; returns the seconds it took. On a VM whose
    memory the host backs on first touch (a Firecracker guest here), the first write to a guest page
    costs ~14 us (1 GiB: 3.7 s the first time in the guest's life, 0.15 s again), so the first call
    that needs more memory than any call before it paid for pages no other process had touched yet:
    MobileNet v2's first call at 256 after 224 took 91 ms with 2191 page faults, 35 ms with the same
    faults after this (steady 24-32 ms). A benchmark child calls it before any peer runs, so that no
    peer pays, or is spared, the guest's first touches by the order it runs in."""
    t0 = time.perf_counter()
    block = bytearray(nbytes)          # (zeroed: every page written)
    del block
    return time.perf_counter() - t0


def timed(fn) -> float:
    """Seconds one call of fn takes (the wall clock)."""
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def timed_work(fn) -> float:
    """Seconds one call of fn takes on the clock a first call is compared with its steady time by:
    where one core is allowed, the process's CPU time, every thread counted (a compile the call waits
    for runs on that core and counts; another process taking the core, or the host taking the vCPU,
    does not, as for ``steady_clock``); else the wall clock. On the wall clock against a steady time
    on the thread's CPU time, a first call counted what the host took from this KVM guest: ResNet-50
    at 160 on one core, fresh Cell, 68.0 ms = 1.86x in the bench where the same calls measured 49.2
    ms = 0.96x on the wall clock alone."""
    clock = time.process_time if len(os.sched_getaffinity(0)) == 1 else time.perf_counter
    t0 = clock()
    fn()
    return clock() - t0


def steady_clock():
    """The clock of a steady call: where one core is allowed, the calling thread's CPU time (every
    peer computes on that thread then: msvm's pool has no core to split onto, onnxruntime's intra-op
    pool is empty at one thread, OpenBLAS runs one thread), so another process taking the core on a
    shared machine does not count; else the wall clock. (First calls, which may wait on a compile
    on another thread, count every thread's CPU time: ``timed_work``.)"""
    return time.thread_time if len(os.sched_getaffinity(0)) == 1 else time.perf_counter


def timed_steady(fn) -> float:
    """Seconds one steady call of fn takes, on ``steady_clock``."""
    clock = steady_clock()
    t0 = clock()
    fn()
    return clock() - t0


SGEMM_PRODUCTS = ("numpy", "msvm", "onnxruntime")
SGEMM_LABELS = {"numpy": "numpy's BLAS", "msvm": "msvm's packed GEMM", "onnxruntime": "onnxruntime's MatMul"}


@dataclass
class SgemmPeak:
    """The floor's compute rate: the best FLOP/s of the float32 products this process can run on
    its cores, which product set it, and each product's own rate (or why it was not measured);
    ``call`` runs the product that set it again (``flops`` each), so that a benchmark can time it in
    the same rounds as its peers (bench/peers.py: the floor under the same load)."""
    rate: float
    by: str
    rates: dict = field(default_factory=dict)
    skipped: dict = field(default_factory=dict)
    flops: float = 0.0
    call: object = field(default=None, repr=False, compare=False)

    def __str__(self):
        others = [f"{SGEMM_LABELS[k]} {v / 1e9:.1f}" for k, v in self.rates.items() if k != self.by]
        others += [f"{SGEMM_LABELS[k]} {why}" for k, why in self.skipped.items()]
        return f"sgemm peak {self.rate / 1e9:.1f} GFLOP/s by {SGEMM_LABELS[self.by]} ({', '.join(others)})"


def sgemm_peak(n=1024, reps=5, products=SGEMM_PRODUCTS) -> SgemmPeak:
    """The floor's compute rate: FLOP/s of the best float32 n^3 product this process can run on its
    cores (its affinity), best of reps each, with the same operands: numpy's BLAS (``a @ b``; on the
    threads OPENBLAS_NUM_THREADS gives it), msvm's own packed GEMM (compiler/gemm.py: ``pack`` once,
    as a Dense weight is, then ``function``; split over two threads by ``run_split`` where
    ``gemm.threads`` says so) and onnxruntime's MatMul by a constant B (which it packs once too;
    ``intra_op_num_threads`` = the cores) where onnx and onnxruntime are installed. A product whose
    answer is not numpy's float64 one to float32 rounding does not count (``skipped`` says so).

    The products take turns, each timed call right after an untimed one of the same product
    (onnxruntime's pool spins after a run: bench/peers.py ``_medians``). On more than one core numpy's
    BLAS runs first, alone: msvm's first split sets that BLAS to one thread for the rest of the
    process (callconv.submit, build.blas_single), as the model's first split would anyway.

    Why not numpy's alone (as before): on an AMD EPYC (Zen 5, AVX-512, one core) numpy's OpenBLAS
    sgemm runs 1024^3 at about half the others' rate (here, one core: numpy 97.8, msvm 163.0,
    onnxruntime 179.2 GFLOP/s; with another process on the core 34.6 / 61.2 / 59.8), so a floor
    from numpy's put onnxruntime at 197% of it on ResNet-50."""
    import numpy as np

    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    scale = np.abs(ref).max()
    calls, skipped = {}, {}
    makers = {"numpy": lambda: (lambda: a @ b), "msvm": lambda: _msvm_product(a, b),
              "onnxruntime": lambda: _ort_product(a, b)}
    for k in products:
        try:
            fn = makers[k]()
            err = float(np.abs(fn() - ref).max() / scale)
        except ImportError as e:
            skipped[k] = f"not installed ({e.name})"
            continue
        except Exception as e:          # noqa: BLE001 - a product that cannot run sets no floor
            skipped[k] = f"failed ({type(e).__name__}: {e})"
            continue
        if not err < 1e-4:
            skipped[k] = f"disagrees with numpy's float64 product by {err:.1e}"
            continue
        calls[k] = fn
    best = {}
    first = [k for k in calls if k == "numpy" and _cores() > 1]
    for group in (first, [k for k in calls if k not in first]):
        times = {k: [] for k in group}
        for _ in range(reps):
            for k in group:
                calls[k]()
                quiesce()        # (onnxruntime's pool spins ~50 ms after a run, on the core the next product splits onto)
                times[k].append(timed_steady(calls[k]))
        best.update({k: 2.0 * n ** 3 / min(t) for k, t in times.items()})
    rates = {k: best[k] for k in products if k in best}
    by = max(rates, key=rates.get)
    return SgemmPeak(rates[by], by, rates, skipped, 2.0 * n ** 3, calls[by])


def _msvm_product(a, b):
    """msvm's packed GEMM of a by b (packed once, outside the timing), into one output array."""
    import numpy as np
    from msvm.compiler import gemm

    m, k = a.shape
    n = b.shape[1]
    dtype = str(a.dtype)
    fn, nr = gemm.function(dtype), gemm.panel_width(dtype)
    bp = gemm.pack(b, nr, transposed=False)
    c = np.empty((m, n), a.dtype)
    args = (m, k, n, a.ctypes.data, k, bp.ctypes.data, c.ctypes.data, n)
    split = gemm.threads(m, k, n, dtype) > 1

    def call(bp=bp, c=c):                # (bp held here: the kernel reads it through a pointer)
        if split:
            gemm.run_split(fn, *args, nr, a.itemsize)
        else:
            fn(*args)
        return c
    return call


def _ort_product(a, b):
    """onnxruntime's MatMul of a (an input) by b (a constant: packed when the session is made)."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["c"])], "sgemm",
                              [helper.make_tensor_value_info("a", TensorProto.FLOAT, list(a.shape))],
                              [helper.make_tensor_value_info("c", TensorProto.FLOAT, [a.shape[0], b.shape[1]])],
                              [numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = _cores(), 1
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return lambda: sess.run(None, {"a": a})[0]


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


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
