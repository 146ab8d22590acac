"""Dense convolutions: msvm's own GEMM (compiler/conv.py TapsConv) against the BLAS route, on
real models, side by side in one process (issue 18; not a test).

Every dense or grouped convolution is planned on the taps route (``MSVM_CONV_GEMM=taps``); each
caller also keeps the BLAS one, and ``conv.AB`` flips between them per forward, so the two
alternate call by call on the same net, weights and inputs. Printed: the steady time per forward
of each (medians), whether the logits agree to rounding, and the time per layer kind (kernel
size, stride, the taps mode) under each route, summed over the model's layers.

    taskset -c 1 env OPENBLAS_NUM_THREADS=1 python bench/conv_routes.py resnet50 [--size 224] [--runs 9]
        [--by-size]
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "vm"))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
sys.path.insert(0, HERE)
os.environ.setdefault("MSVM_CONV_GEMM", "taps")

import msvm as ms  # noqa: E402
import numpy as np  # noqa: E402
from msvm.compiler import conv, tiers  # noqa: E402
from zoo_cv import build  # noqa: E402

TIMES: dict = collections.defaultdict(float)
BEST: dict = {}          # (layer index, variant) -> its fastest call over the runs
LAYERS: list = []        # layer index -> its kind
# one pinned core: the main thread's CPU time (another process sharing the core does not count);
# else the wall clock (the kernel pool's thread works too)
clock = time.thread_time if len(os.sched_getaffinity(0)) == 1 else time.perf_counter
NOW = ["taps"]            # what the forward running now is timed as
BY_SIZE = [False]         # --by-size: layer kinds split by output width and K


def _timed_callers():
    """Wrap every dense convolution's caller so its time is summed per (layer kind, route)."""
    make = conv._gemm_caller

    def caller(site, compiled, plan):
        go = make(site, compiled, plan)
        o, cg, kh, kw = plan.details["w_shape"]
        mode = go.taps.conv.mode if go.taps is not None else "blas"
        kind = f"{kh}x{kw} s{site.args[0][0]} {mode}"
        if BY_SIZE[0] and go.taps is not None:
            kind += f" {go.taps.conv.ho}w K={cg * kh * kw}"

        layer = len(LAYERS)
        LAYERS.append(kind)

        def timed(inputs, out):
            t0 = clock()
            res = go(inputs, out)
            dt = clock() - t0
            TIMES[(kind, NOW[0])] += dt
            BEST[(layer, NOW[0])] = min(BEST.get((layer, NOW[0]), dt), dt)
            return res
        timed.taps = go.taps
        return timed
    conv._gemm_caller = caller


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--by-size", action="store_true", help="per layer kind, output width and K")
    args = ap.parse_args()
    BY_SIZE[0] = args.by_size
    _timed_callers()
    ms.as_mindspore()
    import mindcv

    ms.set_context(jit_config={"jit_level": "auto"})
    net, _ = build(mindcv, args.model)
    x = ms.Tensor(np.random.default_rng(0).random((1, 3, args.size, args.size)).astype(np.float32))
    variants = ["blas", "taps"]       # (the BLAS route and msvm's own product, the taps one)

    def use(v):
        NOW[0] = v
        conv.AB[0] = "blas" if v == "blas" else "taps"      # (never None: the callers keep both routes)
    outs = {}
    for v in variants * 4:
        use(v)
        outs[v] = net(x).asnumpy()
        tiers.wait_for_compiles(120)
    TIMES.clear()
    BEST.clear()
    ts: dict = {v: [] for v in variants}
    for _ in range(args.runs):
        for v in variants:
            use(v)
            t0 = clock()
            net(x)
            ts[v].append(clock() - t0)
    use(variants[1])
    b = outs["blas"]
    line = [f"{args.model} {args.size}: blas {np.median(ts['blas']) * 1e3:.1f} ms"]
    for v in variants[1:]:
        err = float(np.abs(outs[v] - b).max() / max(np.abs(b).max(), 1e-30))
        m = np.median(ts[v]) * 1e3
        line.append(f"{v} {m:.1f} ms (x{np.median(ts['blas']) * 1e3 / m:.2f}, logits rel. diff {err:.1e})")
    print("; ".join(line))
    kinds = sorted({k for k, _ in TIMES})
    for k in kinds:
        bl = TIMES[(k, "blas")] / args.runs * 1e3
        per = {v: TIMES[(k, v)] / args.runs * 1e3 for v in variants[1:]}
        cells = " ".join(f"{v} {t:7.2f} (x{bl / max(t, 1e-9):.2f})" for v, t in per.items())
        best = {v: sum(t for (i, w), t in BEST.items() if w == v and LAYERS[i] == k) * 1e3 for v in variants}
        fastest = " ".join(f"{v} {t:6.2f}" for v, t in best.items())
        print(f"  {k:18} blas {bl:7.2f} ms  {cells}   each layer's fastest call, summed: {fastest}")


if __name__ == "__main__":
    main()
