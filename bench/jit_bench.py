"""The tiered compiler against numpy, measured side by side in one run (not a test).

1. fused elementwise max(a*b + c, 0) over 16M float32: msvm L3 against the memory-bandwidth
   limit measured here (the best copy of the same bytes: np.copyto on one thread and on all,
   and msvm's own streaming copy), interleaved; then against numpy eager, interleaved;
2. compile latency: L2 and L3 per kernel (fresh kernels), and loading from the disk cache;
3. the article's Cell over a stream of 20 first dimensions: compiles, hit rate, first
   call at a new shape vs the steady call; with a cold cache, then in a new process that
   finds the kernels on disk;
2b. the L3 IR passes against LLVM's O3 pipeline: compile and kernel time, same kernels;
2c. BLAS by a weight with the transpose flag vs by a contiguous transposed copy;
4. the BERT-like layer, batch 1, S = 16..128 with new lengths arriving: msvm vs numpy,
   with one thread and (in a child process) two.

Medians; BLAS pinned to one thread unless said. Run: make bench
"""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))   # cells.py
# a fresh kernel cache per run (a child process started by this run shares it: the warm-cache figures)
os.environ["MSVM_CACHE_DIR"] = os.environ.get("MSVM_BENCH_CACHE") or tempfile.mkdtemp(prefix="msvm-bench-")
os.environ["MSVM_BENCH_CACHE"] = os.environ["MSVM_CACHE_DIR"]

import msvm as ms  # noqa: E402
from msvm import ops  # noqa: E402
from msvm.compiler import callconv, tiers  # noqa: E402
from msvm.compiler.kir import Elementwise  # noqa: E402
from timing import interleaved  # noqa: E402


def med(fn, reps):
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


@ms.jit
def chain(a, b, c):
    return ops.maximum(a * b + c, 0.0)


@ms.jit
def stream_copy(a):         # one read and one streaming write per element: msvm's own copy (fused, L3)
    return ops.relu(a * 1.0)


def bandwidth():
    n = 16 * 1024 * 1024
    rng = np.random.default_rng(0)
    a, b, c = (rng.standard_normal(n).astype(np.float32) for _ in range(3))
    ta, tb, tc = ms.Tensor(a), ms.Tensor(b), ms.Tensor(c)
    dst = np.empty_like(a)
    pool = callconv._threads()
    workers = pool._max_workers
    step = n // workers

    def par_copy():                                 # the copy split over the same threads as the kernel
        futs = [pool.submit(np.copyto, dst[i:i + step], a[i:i + step]) for i in range(0, n, step)]
        for f in futs:
            f.result()
    ms.set_context(jit_config={"jit_level": "L3"})
    chain(ta, tb, tc)
    stream_copy(ta)
    # the copies against the chain, and the chain against numpy, each interleaved side by side: numpy's
    # eager chain maps, faults in and unmaps three 64 MB temporaries per call, which disturbs the
    # measurements next to it (the chain's more than the copies'), so it is kept out of the first
    t_copy1, t_copy2, t_copy3, t_vm = interleaved(
        [lambda: np.copyto(dst, a), par_copy, lambda: stream_copy(ta), lambda: chain(ta, tb, tc)], 9)
    t_vm2, t_np = interleaved([lambda: chain(ta, tb, tc), lambda: np.maximum(a * b + c, 0)], 9)
    ms.set_context(jit_config={"jit_level": "auto"})
    t_copy = min(t_copy1, t_copy2, t_copy3)
    limit = 2 * a.nbytes / t_copy                   # bytes moved per second by the best copy
    moved = 4 * a.nbytes
    print("1. fused elementwise max(a*b+c, 0), 16M float32")
    print(f"   copy limit {limit / 1e9:.1f} GB/s (best of numpy's copy on 1 and {workers} threads, "
          f"{2 * a.nbytes / t_copy1 / 1e9:.1f} and {2 * a.nbytes / t_copy2 / 1e9:.1f} GB/s, and msvm's streaming "
          f"copy, {2 * a.nbytes / t_copy3 / 1e9:.1f} GB/s)")
    print(f"   msvm L3 {t_vm * 1e3:.1f} ms = "
          f"{moved / t_vm / 1e9:.1f} GB/s "
          f"({moved / t_vm / limit:.0%} of the limit);  against numpy eager, side by side: msvm {t_vm2 * 1e3:.1f} ms, "
          f"numpy {t_np * 1e3:.1f} ms, speed-up {t_np / t_vm2:.2f}x")


def compile_latency():
    from msvm.compiler.codegen import codegen

    codegen()
    l2, l3, loads = [], [], []
    for i in range(12):
        prog = (("in", 0), ("c", 1.0 + i), ("BROADCAST_MUL",), ("in", 1), ("BROADCAST_ADD",), ("RELU",))
        k = Elementwise(prog, ("t", "t"), ((True, False, False), (True, True, False)), "float32")
        t0 = time.perf_counter()
        tiers.compile_kernel(k, 2, {"op": "bench"})
        l2.append(time.perf_counter() - t0)
        k3 = Elementwise(prog, k.kinds, k.bcast, "float32", (1, 64, 768))
        t0 = time.perf_counter()
        tiers.compile_kernel(k3, 3, {"op": "bench"})
        l3.append(time.perf_counter() - t0)
    cache = tiers.reset_cache()                     # memory empty, disk full: loads
    for i in range(12):
        prog = (("in", 0), ("c", 1.0 + i), ("BROADCAST_MUL",), ("in", 1), ("BROADCAST_ADD",), ("RELU",))
        k = Elementwise(prog, ("t", "t"), ((True, False, False), (True, True, False)), "float32")
        t0 = time.perf_counter()
        tiers.compile_kernel(k, 2, {"op": "bench"})
        loads.append(time.perf_counter() - t0)
    assert cache.stats["disk_loads"] == 12
    # the floor under any L2 kernel here: a function that only returns, parsed, generated at O0 and
    # linked through the same Codegen (what LLVM costs before the kernel adds anything)
    cg, floor = codegen(), []
    for i in range(12):
        t0 = time.perf_counter()
        obj, _ = cg.compile(f"define void @floor{i}() {{\nentry:\n  ret void\n}}\n", 2)
        cg.load(obj, [f"floor{i}"])
        floor.append(time.perf_counter() - t0)
    print("2. compile latency per kernel (median of 12)")
    print(f"   L2 {statistics.median(l2) * 1e3:.2f} ms   L3 {statistics.median(l3) * 1e3:.2f} ms   "
          f"disk-cache load {statistics.median(loads) * 1e3:.2f} ms   "
          f"(LLVM floor, an empty function at O0: {statistics.median(floor) * 1e3:.2f} ms)")


def l3_pipeline():
    """The L3 IR passes (codegen.L3_PASSES) against LLVM's O3 pipeline with its vectorizers:
    compile time and kernel time for the same kernels, side by side."""
    import ctypes

    import llvmlite.binding as llvm
    from msvm.compiler.codegen import codegen
    from msvm.compiler.kir import RowKernel
    from msvm.compiler.lower import lower

    cg = codegen()
    dims = (64, 16, 4096)
    x = np.random.default_rng(0).standard_normal(int(np.prod(dims))).astype(np.float32)
    g = np.random.default_rng(1).standard_normal(dims[2]).astype(np.float32)
    out = np.empty_like(x)
    kernels = {
        "bias+gelu": Elementwise((("in", 0), ("in", 1), ("BROADCAST_ADD",), ("GELU",)), ("t", "t"),
                                 ((False, False, False), (True, True, False)), "float32", dims),
        "layer norm": RowKernel("layer_norm", "float32", True, True, 1e-5, dims[2]),
        "softmax": RowKernel("softmax", "float32", False, False, 0.0, dims[2]),
    }

    def build(ir, o3):
        mod = llvm.parse_assembly(ir)
        mod.triple = cg.triple
        cg.optimize(mod, "o3" if o3 else "l3")
        return cg.tm[3].emit_object(mod)

    print("2b. L3 IR passes (L3_PASSES) vs LLVM's O3 pipeline, same kernels (median of 5 compiles, 9 runs)")
    for label, k in kernels.items():
        row = []
        for o3 in (True, False):
            ts = []
            for i in range(5):
                name = f"bench_{'o3' if o3 else 'l3'}_{label.replace(' ', '_').replace('+', '_')}_{i}"
                t0 = time.perf_counter()
                obj = build(lower(k, name, cg.features), o3)
                ts.append(time.perf_counter() - t0)
            addr = cg.load(obj, [name])[name]
            if isinstance(k, Elementwise):
                fn = ctypes.CFUNCTYPE(None, *[ctypes.c_int64] * 4, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                      ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)(addr)
                args = (0, dims[0], dims[1], dims[2], out.ctypes.data, x.ctypes.data, 0, 0, g.ctypes.data, 0, 0)
            else:
                fn = ctypes.CFUNCTYPE(None, *[ctypes.c_int64] * 3, *[ctypes.c_void_p] * 4)(addr)
                args = (0, dims[0] * dims[1], dims[2], out.ctypes.data, x.ctypes.data, g.ctypes.data, g.ctypes.data)
            row.append((statistics.median(ts), med(lambda fn=fn, args=args: fn(*args), 9)))
        (c3, r3), (cl, rl) = row
        print(f"   {label:<11} O3 pipeline: compile {c3 * 1e3:5.1f} ms, kernel {r3 * 1e3:5.2f} ms;  "
              f"L3_PASSES: compile {cl * 1e3:5.1f} ms, kernel {rl * 1e3:5.2f} ms  "
              f"(compile {cl / c3:.2f}x, kernel {rl / r3:.2f}x)")


def weight_layout():
    """Why Dense runs on a contiguous W.T: the same BLAS, x @ W.T by the transpose flag vs by
    the transposed copy, for BERT's weight shapes and a few rows."""
    rng = np.random.default_rng(3)
    print("2c. BLAS by a weight, x[M, in] @ W[out, in].T: transpose flag vs contiguous W.T (median of 11)")
    for m in (16, 128):
        row = []
        for out_, in_ in ((768, 768), (3072, 768), (768, 3072)):
            x = rng.standard_normal((m, in_)).astype(np.float32)
            w = rng.standard_normal((out_, in_)).astype(np.float32)
            wt = np.ascontiguousarray(w.T)
            t_flag, t_copy = interleaved([lambda x=x, w=w: x @ w.T, lambda x=x, wt=wt: x @ wt], 11)
            row.append(f"{out_}x{in_} {t_copy / t_flag:.2f}x")
        print(f"   M={m:<4} time with W.T contiguous / with the flag: " + ",  ".join(row))


def article_stream(warm=False):
    """The stream in this process (a cold cache) and in a child process that finds the kernels
    this one left on disk (a warm cache: what every run after the first sees)."""
    from cells import DynamicMatmulCell

    if not warm:
        tiers.reset_cache()
    net = DynamicMatmulCell()
    rng = np.random.default_rng(1)
    y = ms.Tensor(rng.standard_normal((768, 1024)).astype(np.float32))
    firsts, steadies = [], []
    dims = [16 + 8 * i for i in range(20)]
    for n in dims:
        x = ms.Tensor(rng.standard_normal((n, 768)).astype(np.float32))
        t0 = time.perf_counter()
        net(x, y, training=True)
        firsts.append(time.perf_counter() - t0)
        steadies.append(med(lambda x=x: net(x, y, training=True), 5))
        tiers.wait_for_compiles()
    s = ms.cache_stats()
    ratio = statistics.median([f / s_ for f, s_ in zip(firsts[1:], steadies[1:])])
    if not warm:
        print("3. the article's Cell over 20 first dimensions (16..168)")
    print(f"   {'warm cache (a new process)' if warm else 'cold cache'}: kernels compiled {s['compiles']}, "
          f"loaded from disk {s['disk_loads']} (sites: {_sites(net)}), hit rate {s['hit_rate']:.1%}, "
          f"first call at a new shape / steady call: {ratio:.2f}x (median)")
    if not warm:
        import subprocess

        subprocess.run([sys.executable, os.path.abspath(__file__), "--article-only"], check=False)


def _sites(net):
    var = next(iter(net._runner.variants.values()))
    codes = [var.code] + [b.code for b in var.runs.values()]      # flag-specialized runs too
    return sum(len(c.__dict__.get("jit_sites", {})) for code in codes for c in code.all_codes())


def bert():
    """One thread here; two threads in a child process (BLAS threads are fixed at its start)."""
    import subprocess

    _bert_rows("one thread")
    env = dict(os.environ, OPENBLAS_NUM_THREADS="2", OMP_NUM_THREADS="2")
    subprocess.run([sys.executable, os.path.abspath(__file__), "--bert-only"], env=env, check=False)


def _bert_rows(label):
    import bert_layer

    layer = bert_layer.layer
    rng = np.random.default_rng(2)
    rows = []
    for s in (16, 32, 48, 64, 96, 128):
        x = rng.standard_normal((1, s, 768)).astype(np.float32)
        tx = ms.Tensor(x)
        for _ in range(8):
            layer(tx)
            tiers.wait_for_compiles()
        t_vm, t_np = interleaved([lambda tx=tx: layer(tx), lambda x=x: bert_layer.numpy_reference(layer, x)], 11)
        rows.append((s, t_vm, t_np))
    print(f"4. BERT-like layer, batch 1, {label} (steady state)")
    for s, t_vm, t_np in rows:
        print(f"   S={s:<4} msvm {t_vm * 1e3:7.2f} ms   numpy {t_np * 1e3:7.2f} ms   ratio {t_vm / t_np:.2f}x")


def main():
    if sys.argv[1:] == ["--article-only"]:
        article_stream(warm=True)
        return 0
    if sys.argv[1:] == ["--bert-only"]:
        _bert_rows(f"{os.environ['OPENBLAS_NUM_THREADS']} threads")
        return 0
    print(f"[msvm {ms.__version__}] BLAS threads: {os.environ['OPENBLAS_NUM_THREADS']}, cores: {os.cpu_count()}")
    bandwidth()
    compile_latency()
    l3_pipeline()
    weight_layout()
    article_stream()
    bert()
    return 0


if __name__ == "__main__":
    sys.exit(main())
