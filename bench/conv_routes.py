"""Dense convolutions: msvm's own GEMM (compiler/conv.py TapsConv) against the BLAS route, on
real models, side by side in one process (issue 18; not a test).

Every dense or grouped convolution is planned on the taps route (``MSVM_CONV_GEMM=taps``); each
caller also keeps the BLAS one, and ``conv.AB`` flips between them per forward, so the two
alternate call by call on the same net, weights and inputs. Printed: the steady time per forward
of each (medians), whether the logits agree to rounding, and the time per layer kind (kernel
size, stride, the taps mode) under each route, summed over the model's layers.

    taskset -c 1 env OPENBLAS_NUM_THREADS=1 python bench/conv_routes.py resnet50 [--size 224] [--runs 9]
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
os.environ["MSVM_CONV_GEMM"] = "taps"

import msvm as ms  # noqa: E402
import numpy as np  # noqa: E402
from msvm.compiler import conv, tiers  # noqa: E402
from zoo_cv import build  # noqa: E402

TIMES: dict = collections.defaultdict(float)


def _timed_callers():
    """Wrap every dense convolution's caller so its time is summed per (layer kind, route)."""
    make = conv._gemm_caller

    def caller(site, compiled, plan):
        go = make(site, compiled, plan)
        o, cg, kh, kw = plan.details["w_shape"]
        mode = go.taps.conv.mode if go.taps is not None else "blas"
        kind = f"{kh}x{kw} s{site.args[0][0]} {mode}"

        def timed(inputs, out):
            t0 = time.perf_counter()
            res = go(inputs, out)
            TIMES[(kind, conv.AB[0] or "taps")] += time.perf_counter() - t0
            return res
        timed.taps = go.taps
        return timed
    conv._gemm_caller = caller


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--runs", type=int, default=9)
    args = ap.parse_args()
    _timed_callers()
    ms.as_mindspore()
    import mindcv

    ms.set_context(jit_config={"jit_level": "auto"})
    net, _ = build(mindcv, args.model)
    x = ms.Tensor(np.random.default_rng(0).random((1, 3, args.size, args.size)).astype(np.float32))
    outs = {}
    for route in (None, "blas") * 4:
        conv.AB[0] = route
        outs[route] = net(x).asnumpy()
        tiers.wait_for_compiles(120)
    TIMES.clear()
    ts = {None: [], "blas": []}
    for _ in range(args.runs):
        for route in (None, "blas"):
            conv.AB[0] = route
            t0 = time.perf_counter()
            net(x)
            ts[route].append(time.perf_counter() - t0)
    conv.AB[0] = None
    a, b = outs[None], outs["blas"]
    err = float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))
    mt, mb = np.median(ts[None]) * 1e3, np.median(ts["blas"]) * 1e3
    print(f"{args.model} {args.size}: taps {mt:.1f} ms, blas {mb:.1f} ms per forward (x{mb / mt:.2f}); "
          f"logits rel. diff {err:.1e}")
    kinds = sorted({k for k, _ in TIMES})
    for k in kinds:
        t, bl = TIMES[(k, "taps")] / args.runs * 1e3, TIMES[(k, "blas")] / args.runs * 1e3
        print(f"  {k:18} taps {t:7.2f} ms  blas {bl:7.2f} ms  x{bl / max(t, 1e-9):.2f}")


if __name__ == "__main__":
    main()
