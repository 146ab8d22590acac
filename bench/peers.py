"""msvm against onnxruntime (CPU) and numpy on the same weights, side by side in one run (not a test).

Models: mindcv's resnet50, mobilenet_v2_100 and resnet18 (``mindcv.create_model`` under
``msvm.as_mindspore()``, eval mode, tests/refs/cv.py ``test_weights``) at 224, 160, 192 and 256;
BERT-base (12 layers, embeddings and attention mask), GPT-2 small and examples/bert_layer.py's
single BERT-base layer at S = 16, 37, 64, 128 (bench/peers_nlp.py). Every configuration of threads
(1, 2) x batch (1, 8) runs in a child process pinned to that many cores (``sched_setaffinity``,
``OPENBLAS_NUM_THREADS``; onnxruntime's ``intra_op_num_threads``), so each peer gets the same cores.

- **msvm**: the Cell's steady time at jit_level 'auto' (compiles done, replays built), and with
  fusion off (``unfused``), so the fused convolution's share shows;
- **ort**: onnxruntime running an ONNX graph translated from msvm's own unfused bytecode
  (bench/onnx_graph.py: the same network and weights), all graph optimizations on (it folds the
  batch norms into the convolutions itself); one dynamic-size session serves every image size;
- **numpy**: tests/refs/cv.py's reference in float32 (tap-by-tap convolutions: a reference, not a tuned
  peer; batch 1 on one thread only);
- **floor**: the network's FLOPs (from the ONNX graph's inferred shapes) at the sgemm peak of the
  same process on the same cores, or its bytes at the copy bandwidth, whichever is larger. The sgemm
  peak is the best of the float32 1024^3 products the process can run (bench/timing.py
  ``sgemm_peak``): numpy's BLAS, msvm's own packed GEMM and onnxruntime's MatMul, all printed at
  the configuration's start with the one that set it; that product also runs in the peers'
  interleaved rounds, and the floor's rate is the fastest it ran in the process (``floor_rate``), so
  a peak first timed while another process had the core is not kept. numpy's BLAS alone set the
  floor before: on an AMD EPYC (Zen 5, AVX-512) its OpenBLAS sgemm runs at about half the other two's
  rate, and onnxruntime showed at 197% of the floor on ResNet-50. Timed once at the start, the floor
  also swung with the load: the same ResNet-18 batch-8 run read msvm at 132% and 14% of it on two
  runs minutes apart.

Then, per CNN, **a new size**: a fresh Cell and an empty kernel cache, warmed at the first size only,
meets each other size once: the first call's time over that size's steady time (on one core both on
CPU time: the first call's counts every thread's, its compiles' too, timing.timed_work), for msvm and for a
fresh onnxruntime session warmed the same way (each child touches 1 GiB first, timing.prefault: on a VM
the first touch of guest memory costs either peer ~14 us a page), and the most compiles any one kernel needed over the
whole stream. And **peak memory** of one forward (batch 1, first size, one thread), measured the same
way for every peer (bench/timing.py ``peak_rss``: the resident set's rise while the call runs, the
allocators set to return freed memory so that it is what the call held). The timing children keep the
default allocator (issue 18): with glibc's mmap threshold fixed at 128 KB, as the memory children set
it, every array of 128 KB or more that a call allocates is a fresh mapping and pays its page faults on
each call, where the default threshold adapts and reuses the memory; onnxruntime keeps its own arena
and does not see the difference. Measured (AMD Zen 5, one thread, BERT-base batch 1, msvm / onnxruntime
by the wall clock, interleaved, one process each): S=64 / S=128 1.38 / 1.81 with the fixed threshold,
0.76 / 0.95 without (msvm's sub-Cell results, each Dense's output, are new arrays per call).

Medians of interleaved runs (a shared machine's load hits all peers alike); at one thread each
steady call is timed on the calling thread's CPU time (timing.steady_clock: every peer computes on
that thread then, and another process taking the core does not count), at two on the wall clock. A peer that is not installed
(``pip install .[bench]``) is skipped with a line saying so.

    python bench/peers.py [resnet50 mobilenet_v2_100 resnet18 bert gpt2 bert-layer]
        [--sizes 224,160,192,256] [--lengths 16,37,64,128] [--threads 1,2] [--batches 1,8] [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CV = ["resnet50", "mobilenet_v2_100", "resnet18"]
NLP = ["bert", "gpt2", "bert-layer"]
COLUMNS = (f"{'model':16} {'T':>1} {'N':>2} {'size':>4} {'msvm':>8} {'unfused':>8} {'ort':>8} {'numpy':>8} "
           f"{'floor':>7} {'msvm/ort':>8} {'msvm%pk':>7} {'ort%pk':>7}")


def row(name, threads, batch, size, m, u, o, n, floor):
    """One printed line: ms per forward, the ratio to onnxruntime and each peer's share of the floor."""
    def ms(v, w=8):
        return f"{v:>{w}.2f}" if v is not None else f"{'-':>{w}}"
    return " ".join([f"{name:16} {threads:>1} {batch:>2} {size:>4}", ms(m), ms(u), ms(o), ms(n), ms(floor, 7),
                     f"{m / o:>8.2f}" if o else f"{'-':>8}", f"{floor / m * 100:>6.0f}%" if floor else f"{'-':>7}",
                     f"{floor / o * 100:>6.0f}%" if floor and o else f"{'-':>7}"])


# ---------------------------------------------------------------- one configuration, in a child

def _setup(threads):
    sys.path.insert(0, os.path.join(HERE, "..", "vm"))
    sys.path.insert(0, os.path.join(HERE, "..", "tests"))
    sys.path.insert(0, HERE)
    try:
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, cpus[:threads])
    except (AttributeError, OSError):
        pass


def ort_session(model, threads):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    data = model if isinstance(model, bytes) else model.SerializeToString()
    return ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])


def compiles_per_kernel(net) -> int:
    """The most kernels any one jit site of the Cell's compiled variants compiled: its L2 and L3 entries,
    and each light L2 kernel compiled again optimized once the site went polymorphic (tiers.Site._promote:
    it replaced its entry)."""
    most = 0
    for var in net._runner.variants.values():
        for code in var.code.all_codes():
            for site in code.jit_sites.values():
                n = sum(1 for table in (getattr(site, "l2", {}), getattr(site, "l3", {}))
                        for v in table.values() if not isinstance(v, str))
                n += sum(1 for h in getattr(site, "tier_history", ()) if h.get("optimized"))
                most = max(most, n)
    return most


def run_cnn(name, sizes, threads, batch, runs, peak):
    import mindcv
    import msvm as ms
    import numpy as np
    from msvm.compiler import tiers
    from onnx_graph import Untranslated, flops, onnx_model
    from refs import cv
    from zoo_cv import build

    rng = np.random.default_rng(0)
    xs = {s: rng.standard_normal((batch, 3, s, s)).astype(np.float32) for s in sizes}
    fused, weights = build(mindcv, name)
    unfused, _ = build(mindcv, name, weights)
    nets = {"msvm": (fused, True), "unfused": (unfused, False)}

    def call(which, s):
        net, fusion = nets[which]
        ms.set_context(jit_config={"jit_level": "auto", "enable_fusion": fusion})
        return net(ms.Tensor(xs[s])).asnumpy()

    for _ in range(8):                         # 'auto' moves sites to L3 after a few calls
        for s in sizes:
            for which in nets:
                call(which, s)
        tiers.wait_for_compiles(120)
    peers = {"msvm": lambda s: call("msvm", s), "unfused": lambda s: call("unfused", s)}
    if batch == 1 and threads == 1:
        p32 = {k: v.astype(np.float32) for k, v in weights.items()}
        peers["numpy"] = lambda s: cv.MODELS[name](p32, xs[s])
    model, why = None, ""
    try:
        var = next(iter(fused._runner.variants.values()))
        model = onnx_model(fused, var.source, [("image", ["N", 3, "H", "W"], np.float32)])
        sess = ort_session(model, threads)
        peers["ort"] = lambda s: sess.run(None, {"image": xs[s]})[0]
    except ImportError:
        why = "onnxruntime/onnx not installed (pip install .[bench])"
    except Untranslated as e:
        why = f"the bytecode has an op the ONNX translation lacks: {e}"
    _agree(name, sizes, peers)
    peers["sgemm"] = lambda s: peak.call()     # the floor's product, timed in the same rounds
    med = _medians(peers, sizes, runs, slow={"numpy"})
    if why:
        print(f"  onnxruntime skipped: {why}")
    for s in sizes:
        floor = flops(model, [(batch, 3, s, s)]) / floor_rate(peak, med, s) * 1e3 if model is not None else None
        print(row(name, threads, batch, s, med["msvm"][s], med["unfused"][s], med.get("ort", {}).get(s),
                  med.get("numpy", {}).get(s), floor), flush=True)
    if len(sizes) > 1:
        _new_sizes(name, sizes, xs, weights, med, model, threads)


def floor_rate(peak, med, key):
    """FLOP/s of the sgemm peak: the fastest its product ran in this process, at the start
    (``peak.rate``) or in the peers' rounds (``med["sgemm"]``, their best: see ``_medians``)."""
    return max(peak.rate, peak.flops / (med["sgemm"][key] * 1e-3))


def _agree(name, sizes, peers):
    """The same answers first (the ONNX graph is built from the bytecode: it must agree)."""
    import numpy as np

    for s in sizes:
        ref = np.asarray(peers["msvm"](s))
        for k, fn in peers.items():
            err = np.abs(np.asarray(fn(s)) - ref).max() / np.abs(ref).max()
            if err > 1e-3:
                print(f"  ! {name} {s}: {k} differs from msvm by {err:.1e} (relative to the max output)")


def _medians(peers, keys, runs, slow=(), best=("sgemm",)):
    """Medians of interleaved runs: the peers take turns (a shared machine's load hits each alike); each
    turn waits for the process's other threads to go idle (timing.quiesce), then the timed call follows
    an untimed one of the same peer, so that no peer pays for the one before: onnxruntime's workers spin
    ~50 ms after a run, and on two cores that made msvm's next two calls up to 2.3x slower (MobileNet v2:
    13.6 ms alone, 31.0 ms right after an onnxruntime run; the untimed call alone did not absorb it).
    A peer in ``best`` gives its fastest run instead (the floor's product: a peak, not a typical time)."""
    from timing import quiesce, timed_steady

    times = {k: {s: [] for s in keys} for k in peers}
    for _ in range(runs):
        for s in keys:
            for k, fn in peers.items():
                if k in slow and len(times[k][s]) >= 3:
                    continue                   # a slow reference: three runs do
                quiesce()
                if k not in slow:
                    fn(s)
                times[k][s].append(timed_steady(lambda fn=fn, s=s: fn(s)) * 1e3)
    return {k: {s: (min if k in best else statistics.median)(v) for s, v in d.items()} for k, d in times.items()}


def _new_sizes(name, sizes, xs, weights, med, model, threads):
    """A fresh Cell and an empty kernel cache warmed at sizes[0] meet every other size once."""
    import mindcv
    import msvm as ms
    from msvm.compiler import tiers
    from timing import timed_work
    from zoo_cv import build

    with tempfile.TemporaryDirectory() as d:
        tiers.reset_cache(d)
        net, _ = build(mindcv, name, weights)
        ms.set_context(jit_config={"jit_level": "auto", "enable_fusion": True})
        for _ in range(8):
            net(ms.Tensor(xs[sizes[0]]))
            tiers.wait_for_compiles(120)
        first = {s: timed_work(lambda s=s: net(ms.Tensor(xs[s])).asnumpy()) * 1e3 for s in sizes[1:]}
        tiers.wait_for_compiles(120)
        most = compiles_per_kernel(net)
        tiers.reset_cache()
    ort_first = {}
    if model is not None:
        sess = ort_session(model, threads)
        for _ in range(3):
            sess.run(None, {"image": xs[sizes[0]]})
        ort_first = {s: timed_work(lambda s=s: sess.run(None, {"image": xs[s]})) * 1e3 for s in sizes[1:]}
    for s in sizes[1:]:
        o = f", ort {ort_first[s]:.1f} ms = {ort_first[s] / med['ort'][s]:.2f}x" if s in ort_first else ""
        print(f"  new size {s}: msvm first call {first[s]:.1f} ms = {first[s] / med['msvm'][s]:.2f}x its steady"
              f"{o}", flush=True)
    print(f"  {name}: at most {most} compiles per kernel over {len(sizes)} sizes", flush=True)


def peak_memory(name, size, which):
    """Peak bytes of one steady forward for one peer (run in its own child: ``--memory``): see
    ``measure_peaks``."""
    import mindcv
    import msvm as ms
    import numpy as np
    from onnx_graph import onnx_model
    from zoo_cv import build

    x = np.random.default_rng(0).standard_normal((1, 3, size, size)).astype(np.float32)
    ms.set_context(jit_config={"jit_level": "auto", "enable_fusion": True})
    if which == "msvm":
        def load():
            net, _ = build(mindcv, name)
            return lambda: net(ms.Tensor(x)).asnumpy()
        return measure_peaks(load)
    net, _ = build(mindcv, name)
    net(ms.Tensor(x))
    var = next(iter(net._runner.variants.values()))
    graph = onnx_model(net, var.source, [("image", ["N", 3, "H", "W"], np.float32)]).SerializeToString()
    del net, var
    return measure_peaks(lambda: _run_bytes(ort_session(graph, 1), {"image": x}))


def _run_bytes(sess, feed):
    return lambda: sess.run(None, feed)[0]


def measure_peaks(load):
    """(resident, transient) bytes of a serving process: ``load()`` builds the model (msvm: the Cell
    with its weights; onnxruntime: its session from the serialized graph, made before) and returns its
    forward, warmed here
    (16 calls, compiles done: msvm's forward is captured by then, interp/capture.py);
    resident = the high-water mark of one steady forward above the
    process's resident set before ``load`` (weights, prepared weights, arenas, code, the call's
    buffers); transient = the same above the resident set just before that forward."""
    import gc

    from msvm.compiler import build, tiers
    from timing import _status_kb, peak_rss

    build.warm_up()                     # (msvm's compiler started and idle, its start-up's pages given
    tiers.wait_for_compiles(120)        # back, build.release_compiler_memory: a process's fixed cost,
    gc.collect()                        # as importing either runtime is, before the base is read)
    base = _status_kb("VmRSS") * 1024
    fn = load()
    gc.collect()
    for _ in range(16):
        fn()
        tiers.wait_for_compiles(120)
    gc.collect()
    before = _status_kb("VmRSS") * 1024
    transient = peak_rss(fn)
    return before + transient - base, transient


def child(args):
    _setup(args.threads)
    import msvm as ms
    from timing import copy_bandwidth, prefault, sgemm_peak

    ms.as_mindspore()
    if args.memory:
        import mindcv  # noqa: F401 - both peers' children import the same modules before measuring
        try:
            import onnxruntime  # noqa: F401
        except ImportError:
            if not args.memory.startswith("msvm:"):
                return
        kind, name, size = args.memory.split(":")
        if name in CV:
            peak = peak_memory(name, int(size), kind)
        else:
            import peers_nlp
            peak = peers_nlp.peak_memory(name, int(size), kind)
        print(json.dumps({"peak": list(peak)}))
        return
    prefault()                      # (before any peer: timing.prefault)
    peak, bw = sgemm_peak(), copy_bandwidth()
    print(f"[{args.threads} thread{'s' if args.threads > 1 else ''}, batch {args.batch}] {peak}, "
          f"copy {bw / 1e9:.1f} GB/s (this process)", flush=True)
    sizes = [int(s) for s in args.sizes.split(",")]
    lengths = [int(s) for s in args.lengths.split(",")]
    for name in args.models:
        if name in CV:
            run_cnn(name, sizes, args.threads, args.batch, args.runs, peak)
        else:
            import peers_nlp
            peers_nlp.run(name, lengths, args.threads, args.batch, args.runs, peak, bw)


# ---------------------------------------------------------------- the parent: every configuration

def spawn(args, threads, batch, extra=()):
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads), PYTHONUNBUFFERED="1")
    if extra:       # (the peak-memory children only: see the module docstring, "allocators")
        env.update(MALLOC_MMAP_THRESHOLD_="131072", MALLOC_TRIM_THRESHOLD_="131072")
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "--threads", str(threads), "--batch", str(batch),
           "--sizes", args.sizes, "--lengths", args.lengths, "--runs", str(args.runs), *extra, *args.models]
    return subprocess.run(cmd, env=env, stdout=subprocess.PIPE if extra else None, text=True, check=False)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("models", nargs="*", default=CV[:2] + NLP[:2], metavar="model",
                    help=f"some of {', '.join(CV + NLP)}")
    ap.add_argument("--sizes", default="224,160,192,256")
    ap.add_argument("--lengths", default="16,37,64,128")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--no-memory", action="store_true", help="skip the peak-memory lines")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--batch", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--memory", help=argparse.SUPPRESS)
    args = ap.parse_args()
    unknown = [m for m in args.models if m not in CV + NLP]
    if unknown:           # (argparse's choices refuse a list default: checked here)
        ap.error(f"unknown model {', '.join(unknown)} (choose from {', '.join(CV + NLP)})")
    if args.child:
        args.threads = int(args.threads)
        return child(args)
    try:
        import onnxruntime
        print(f"[peers] onnxruntime {onnxruntime.__version__}; ms per forward, medians of {args.runs} (one thread: "
              "the thread's CPU time, timing.steady_clock; two: the wall clock)")
    except ImportError:
        print("[peers] onnxruntime not installed (pip install .[bench]): its column stays empty")
    print(COLUMNS)
    for threads in (int(t) for t in args.threads.split(",")):
        for batch in (int(b) for b in args.batches.split(",")):
            spawn(args, threads, batch)
    if not args.no_memory:
        size = {True: args.sizes.split(",")[0], False: args.lengths.split(",")[-1]}
        print("[peak memory] batch 1, one thread, MB at the peak of a steady forward: resident (a serving process's "
              "rise from before the model was loaded) / transient (the rise during that call)")
        for name in args.models:
            peaks = {}
            for kind in ("msvm", "ort"):
                out = spawn(argparse.Namespace(**{**vars(args), "models": []}), 1, 1,
                            ("--memory", f"{kind}:{name}:{size[name in CV]}"))
                lines = [ln for ln in (out.stdout or "").splitlines() if ln.startswith("{")]
                peaks[kind] = json.loads(lines[-1])["peak"] if lines else (None, None)
            (m1, m2), (o1, o2) = peaks["msvm"], peaks["ort"]
            ratio = f"; msvm/ort {m1 / o1:.2f}" if m1 and o1 else ""
            print(f"  {name:16} at {size[name in CV]}: msvm {_mb(m1)} / {_mb(m2)}, ort {_mb(o1)} / {_mb(o2)}"
                  f"{ratio}", flush=True)


def _mb(b):
    return f"{b / 2**20:.1f} MB" if b is not None else "-"


if __name__ == "__main__":
    main()
