"""GPU check, for a machine with an NVIDIA GPU: one short run.

    python bench/gpu_check.py            (exit 2 with the reason when there is no usable GPU)

1. every op and fused kernel msvm generates for the GPU (PTX through llvmlite, loaded with
   CuPy; matmuls through cuBLAS with the epilogue as a generated kernel), at L2 and L3,
   against numpy on the host: max relative error per kernel;
2. the fused elementwise chain over 16M float32 as a fraction of the device copy
   bandwidth measured in the same run (target >= 85%);
3. compile latency per tier (lower + PTX + module load), median over the kernels;
4. the BERT-like layer's latency at S=128, batch 1, composed from msvm's GPU kernels and
   cuBLAS in the layer's order (the kernels' own time: target < 1 ms);
5. Cells on the GPU device (``device_target="GPU"``, device-resident tensors): the BERT-base
   layer (examples/bert_layer.py, hidden 768, 12 heads, ffn 3072) at S=128, batch 1, as a Cell
   call at L1 (CuPy interpreter), L2, L3 and auto, against the CPU's answer (target < 1 ms per
   call; the article promises < 5 ms per inference), with the first call's time (compiles);
6. ResNet-50 (mindcv, under ``msvm.as_mindspore()``) at batch 1 and 32 as a Cell on the GPU,
   when mindcv is importable (skipped with the reason otherwise).

Each section has a wall-time budget (``--budget``, seconds) and says when it ran out.
``--dry-run`` runs every section on the emulated GPU of the tests (tests/emulated_gpu.py: the real
runtime and sites, PTX through llvmlite, launches evaluated with numpy on the CPU), smaller: a
check of this script on a machine without a GPU; its times and bandwidths mean nothing.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "vm"))

from msvm.compiler.gpu import GpuRuntime  # noqa: E402
from msvm.compiler.lower import BINARY, UNARY, Unsupported  # noqa: E402
from msvm.interp.kernels import KERNELS, run_program  # noqa: E402


def med_gpu(cp, fn, reps=20):
    start, end = cp.cuda.Event(), cp.cuda.Event()
    fn()
    ts = []
    for _ in range(reps):
        start.record()
        fn()
        end.record()
        end.synchronize()
        ts.append(cp.cuda.get_elapsed_time(start, end))
    return statistics.median(ts)


def rel_err(got, want):
    want = np.asarray(want, np.float64)
    return float(np.max(np.abs(np.asarray(got, np.float64) - want)) / max(1e-30, float(np.max(np.abs(want)))))


def check_ops(rt, cp):
    rng = np.random.default_rng(0)
    rows, failed = [], 0
    for d in ("float32", "float64"):
        tol = 2e-5 if d == "float32" else 1e-10
        x = rng.uniform(0.1, 2.0, (64, 300)).astype(d)
        y = rng.uniform(0.1, 2.0, (300,)).astype(d)
        gx, gy = cp.asarray(x), cp.asarray(y)
        for level in (2, 3):
            for op in UNARY:
                prog = (("in", 0), (op,))
                try:
                    got = rt.elementwise(prog, [gx], d, level).get()
                except Unsupported as e:
                    rows.append((f"{op} {d} L{level}", "stays in the interpreter", str(e)))
                    continue
                err = rel_err(got, run_program(prog, [x]))
                failed += err > tol
                rows.append((f"{op} {d} L{level}", f"{err:.1e}", "ok" if err <= tol else "FAIL"))
            for op in BINARY:
                prog = (("in", 0), ("in", 1), (op,))
                try:
                    got = rt.elementwise(prog, [gx, gy], d, level).get()
                except Unsupported as e:
                    rows.append((f"{op} {d} L{level}", "stays in the interpreter", str(e)))
                    continue
                err = rel_err(got, run_program(prog, [x, y]))
                failed += err > tol
                rows.append((f"{op} {d} L{level}", f"{err:.1e}", "ok" if err <= tol else "FAIL"))
            for op in ("softmax", "layer_norm"):
                try:
                    if op == "softmax":
                        got, want = rt.rows("softmax", gx, level=level).get(), KERNELS["SOFTMAX"](x, -1)
                    else:
                        g, b = np.full(300, 1.5, d), np.full(300, 0.25, d)
                        got = rt.rows("layer_norm", gx, cp.asarray(g), cp.asarray(b), 1e-5, level).get()
                        want = KERNELS["LAYER_NORM"](x, g, b, -1, -1, 1e-5)
                except Unsupported as e:
                    rows.append((f"{op} {d} L{level}", "stays in the interpreter", str(e)))
                    continue
                err = rel_err(got, want)
                failed += err > tol
                rows.append((f"{op} {d} L{level}", f"{err:.1e}", "ok" if err <= tol else "FAIL"))
            w = rng.standard_normal((300, 128)).astype(d)
            bias = rng.standard_normal(128).astype(d)
            epi = (("in", 0), ("in", 1), ("BROADCAST_ADD",), ("GELU",))
            try:
                got = rt.matmul(gx, cp.asarray(w), epi, [cp.asarray(bias)], level=level).get()
                err = rel_err(got, run_program(epi, [x @ w, bias]))
                failed += err > tol * 10
                rows.append((f"MATMUL_BIAS_GELU {d} L{level}", f"{err:.1e}", "ok" if err <= tol * 10 else "FAIL"))
            except Unsupported as e:
                rows.append((f"MATMUL_BIAS_GELU {d} L{level}", "stays in the interpreter", str(e)))
    print("1. every op and fused kernel on the GPU vs numpy (max relative error)")
    for name, err, verdict in rows:
        print(f"   {name:<32} {err:>26}  {verdict}")
    return failed


def bandwidth(rt, cp):
    n = 16 * 1024 * 1024
    a = cp.random.random(n, dtype=cp.float32)
    b = cp.random.random(n, dtype=cp.float32)
    c = cp.random.random(n, dtype=cp.float32)
    out = cp.empty_like(a)
    prog = (("in", 0), ("in", 1), ("BROADCAST_MUL",), ("in", 2), ("BROADCAST_ADD",), ("RELU",))
    for level in (2, 3):
        t_chain = med_gpu(cp, lambda lv=level: rt.elementwise(prog, [a, b, c], "float32", lv, out=out))
        t_copy = med_gpu(cp, lambda: cp.copyto(out, a))
        chain_bw = 4 * n * 4 / (t_chain / 1e3)       # 3 reads + 1 write
        copy_bw = 2 * n * 4 / (t_copy / 1e3)         # 1 read + 1 write
        print(f"2. fused a*b+c, relu over 16M float32 at L{level}: {t_chain:.3f} ms = {chain_bw / 1e9:.0f} GB/s; "
              f"device copy {copy_bw / 1e9:.0f} GB/s -> {chain_bw / copy_bw:.0%} of copy bandwidth (target >= 85%)")


def compile_latency(rt):
    from msvm.compiler.kir import Elementwise

    for level in (2, 3):
        times = []
        for k, op in enumerate(list(UNARY)[:8]):
            kern = Elementwise((("in", 0), ("c", 1.0 + k + level), ("BROADCAST_MUL",), (op,)), ("t",),
                               ((False, False, False),), "float32", None if level == 2 else (1, 1, 4096))
            t0 = time.perf_counter()
            try:
                rt.kernel(kern, level)
            except Unsupported:
                continue
            times.append((time.perf_counter() - t0) * 1e3)
        print(f"3. compile latency at L{level} (lower + PTX + load), median of {len(times)}: "
              f"{statistics.median(times):.2f} ms")


def bert(rt, cp, s=128, h=768, heads=12, ffn=3072):
    rng = np.random.default_rng(3)
    f32 = cp.float32
    x = cp.asarray(rng.standard_normal((s, h)), f32)
    w = {k: cp.asarray(rng.standard_normal(shape) / math.sqrt(shape[0]), f32) for k, shape in
         {"q": (h, h), "k": (h, h), "v": (h, h), "o": (h, h), "f1": (h, ffn), "f2": (ffn, h)}.items()}
    bias = {k: cp.asarray(rng.standard_normal(v.shape[1]) * 0.1, f32) for k, v in w.items()}
    g, be = cp.ones(h, f32), cp.zeros(h, f32)
    add = (("in", 0), ("in", 1), ("BROADCAST_ADD",))
    add_gelu = add + (("GELU",),)
    scale = (("in", 0), ("c", 1 / math.sqrt(h // heads)), ("BROADCAST_MUL",))

    def layer():
        q = rt.matmul(x, w["q"], add, [bias["q"]], level=3).reshape(s, heads, h // heads).transpose(1, 0, 2)
        k = rt.matmul(x, w["k"], add, [bias["k"]], level=3).reshape(s, heads, h // heads).transpose(1, 0, 2)
        v = rt.matmul(x, w["v"], add, [bias["v"]], level=3).reshape(s, heads, h // heads).transpose(1, 0, 2)
        att = rt.rows("softmax", rt.matmul(q, k, scale, tb=True, level=3), level=3)
        ctx = cp.matmul(att, v).transpose(1, 0, 2).reshape(s, h)
        o = rt.matmul(ctx, w["o"], add, [bias["o"]], level=3)
        h1 = rt.rows("layer_norm", rt.elementwise(add, [o, x], "float32", 3), g, be, 1e-12, level=3)
        f = rt.matmul(rt.matmul(h1, w["f1"], add_gelu, [bias["f1"]], level=3), w["f2"], add, [bias["f2"]], level=3)
        return rt.rows("layer_norm", rt.elementwise(add, [f, h1], "float32", 3), g, be, 1e-12, level=3)

    t = med_gpu(cp, layer, 30)
    print(f"4. BERT-like layer, S={s}, batch 1, from msvm's GPU kernels + cuBLAS: {t:.3f} ms (target < 1 ms; "
          f"the article's SLA is 5 ms)")


TARGET = ["GPU"]


def cell_ms(cp, fn, runs):
    """Median wall time of a Cell call, each call synchronized (what a caller waits for)."""
    fn()
    cp.cuda.get_current_stream().synchronize()
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        cp.cuda.get_current_stream().synchronize()
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


def bert_cell(cp, s=128, runs=30):
    """The BERT-base layer as a Cell on the GPU device at each jit_level."""
    import msvm as ms
    from msvm.compiler import tiers

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
    from bert_layer import BertLayer

    x = np.random.default_rng(4).standard_normal((1, s, 768)).astype(np.float32)
    ms.set_context(device_target="CPU")
    ref_net = BertLayer()
    params = {n: p.asnumpy().copy() for n, p in ref_net.parameters_dict().items()}
    want = ref_net(ms.Tensor(x)).asnumpy()
    ms.set_context(device_target=TARGET[0])
    print(f"5. BERT-base layer as a Cell on the GPU, S={s}, batch 1 (device-resident; target < 1 ms, the article's "
          "SLA 5 ms):")
    for level in ("L1", "L2", "L3", "auto"):
        net = BertLayer()
        for n, p in net.parameters_dict().items():
            p.set_data(params[n])
        xt = ms.Tensor(x)
        assert type(xt._data) is cp.ndarray, f"the input is a {type(xt._data).__name__}, not on the GPU"
        ms.set_context(jit_config={"jit_level": level})
        t0 = time.perf_counter()
        out = net(xt)
        cp.cuda.get_current_stream().synchronize()
        first = (time.perf_counter() - t0) * 1e3
        for _ in range(8):                           # auto: L2, then L3 after l3_after calls
            net(xt)
            tiers.wait_for_compiles(120)
        t = cell_ms(cp, lambda n=net, a=xt: n(a), runs)
        out = net(xt).asnumpy()
        err = float(np.abs(out - want).max() / np.abs(want).max())
        print(f"   {level:<4} {t:8.3f} ms per call (first call {first:.1f} ms), max error vs the CPU {err:.1e}")
    ms.set_context(device_target="CPU", jit_config={"jit_level": "auto"})


def resnet50(cp, runs=5, batches=(1, 32)):
    import msvm as ms
    from msvm.compiler import tiers

    ms.as_mindspore()
    try:
        import mindcv
    except Exception as e:  # noqa: BLE001
        print(f"6. ResNet-50: skipped, mindcv is not importable ({type(e).__name__}: {e}); carry its wheel (README)")
        return
    ms.set_context(device_target=TARGET[0], jit_config={"jit_level": "auto"})
    net = mindcv.create_model("resnet50")
    net.set_train(False)
    for batch in batches:
        x = ms.Tensor(np.random.default_rng(batch).standard_normal((batch, 3, 224, 224)).astype(np.float32))
        t0 = time.perf_counter()
        net(x)
        cp.cuda.get_current_stream().synchronize()
        first = (time.perf_counter() - t0) * 1e3
        for _ in range(6):
            net(x)
            tiers.wait_for_compiles(120)
        t = cell_ms(cp, lambda b=x: net(b), runs)
        print(f"6. ResNet-50 as a Cell on the GPU, batch {batch}: {t:.2f} ms per call (first call {first:.0f} ms)")
    ms.set_context(device_target="CPU")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--budget", type=float, default=90.0, help="wall seconds per section")
    ap.add_argument("--only", default="", help="comma-separated section numbers (default: all)")
    ap.add_argument("--dry-run", action="store_true", help="on the tests' emulated GPU, smaller (no GPU needed)")
    ap.add_argument("--resnet-runs", type=int, default=5)
    args = ap.parse_args()
    dry = args.dry_run
    if dry:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
        import emulated_gpu

        emulated_gpu.install()
        TARGET[0] = "EMULATED"
        rt = emulated_gpu.EmulatedRuntime(tempfile.mkdtemp(prefix="msvm-gpu-kernels-"))
        cp = rt.cp
        print("[msvm gpu_check] --dry-run on the emulated GPU: times and bandwidths mean nothing", flush=True)
    else:
        try:
            rt = GpuRuntime(tempfile.mkdtemp(prefix="msvm-gpu-kernels-"))
        except (RuntimeError, Unsupported) as e:
            print(f"gpu_check: {e}")
            return 2
        cp = rt.cp
        props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
        print(f"[msvm gpu_check] {props['name'].decode()} ({rt.arch}), CuPy {cp.__version__}", flush=True)
    only = {int(k) for k in args.only.split(",") if k}
    failed = 0
    sections = [(1, lambda: check_ops(rt, cp)), (2, lambda: bandwidth(rt, cp)), (3, lambda: compile_latency(rt)),
                (4, lambda: bert(rt, cp, s=16 if dry else 128)),
                (5, lambda: bert_cell(cp, s=16 if dry else 128, runs=2 if dry else 30)),
                (6, lambda: resnet50(cp, 1 if dry else args.resnet_runs, (1, 2) if dry else (1, 32)))]
    for k, run in sections:
        if only and k not in only:
            continue
        t0 = time.perf_counter()
        try:
            failed += run() or 0
        except Exception as e:  # noqa: BLE001 - one section's failure is reported; the others still run
            import traceback

            print(f"{k}. FAILED: {type(e).__name__}: {e}")
            traceback.print_exc()
            failed += 1
        took = time.perf_counter() - t0
        print(f"   (section {k}: {took:.1f} s{'; over its budget' if took > args.budget else ''})", flush=True)
    print(f"{'FAILED' if failed else 'all kernels and Cells match numpy'} ({failed} failures)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
