"""The memory plan on real models (issue 18; not a test): planned against unplanned, in one process.

For each mindcv model (bench/zoo_cv.py's build, eval mode, batch 1) at each size, two nets with the
same weights, one compiled with jit_config memory_plan on and one with it off, warmed up at every
size (compiles done, replays built), then:

- the bytes the intermediates take after the calls (``msvm.memory.report``): held, the arena regions
  (Codes at one position of the call chain share one); the arenas' layouts summed over the model's
  Codes; one buffer per planned value (what they would take each on its own, in the same calls);
- the peak of one forward above its start as tracemalloc sees it (``msvm.memory.peak_bytes``);
- the steady time per forward (medians, interleaved calls) and whether both give the same logits,
  bit for bit.

    python bench/memory_plan.py [model ...] [--sizes 224,160] [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "vm"))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
sys.path.insert(0, HERE)

import msvm as ms  # noqa: E402
import numpy as np  # noqa: E402
from msvm import memory  # noqa: E402
from msvm.compiler import tiers  # noqa: E402
from zoo_cv import build  # noqa: E402


def mb(n: int) -> str:
    return f"{n / 2 ** 20:8.1f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("models", nargs="*", default=["resnet50"])
    ap.add_argument("--sizes", default="224")
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    ms.as_mindspore()
    import mindcv

    print(f"{'model':12} {'size':>4} {'held MB':>8} {'arenas MB':>9} {'unplanned MB':>12} {'peak MB on':>10} "
          f"{'peak MB off':>11} {'ms on':>7} {'ms off':>7}  same")
    for name in args.models:
        nets = {}
        weights = None
        for plan in (True, False):
            ms.set_context(jit_config={"memory_plan": plan})
            nets[plan], weights = build(mindcv, name, weights)
        rng = np.random.default_rng(0)
        images = {s: ms.Tensor(rng.standard_normal((1, 3, s, s)).astype(np.float32)) for s in sizes}
        for _ in range(8):
            for t in images.values():
                for plan, net in nets.items():
                    ms.set_context(jit_config={"memory_plan": plan})
                    net(t)
            tiers.wait_for_compiles(120)
        times = {plan: {s: [] for s in sizes} for plan in nets}
        for _ in range(args.runs):
            for s, t in images.items():
                for plan, net in nets.items():
                    t0 = time.perf_counter()
                    net(t)
                    times[plan][s].append((time.perf_counter() - t0) * 1e3)
        rep = memory.report(nets[True])
        for s, t in images.items():
            same = np.array_equal(nets[True](t).asnumpy(), nets[False](t).asnumpy())
            peak = {plan: memory.peak_bytes(net, t) for plan, net in nets.items()}
            on, off = (statistics.median(times[p][s]) for p in (True, False))
            print(f"{name:12} {s:>4} {mb(rep['region_bytes'])} {mb(rep['arena_bytes']):>9} "
                  f"{mb(rep['unplanned_bytes']):>12} {mb(peak[True]):>10} {mb(peak[False]):>11} {on:>7.1f} {off:>7.1f}"
                  f"  {same}", flush=True)
    ms.set_context(jit_config={"memory_plan": True})


if __name__ == "__main__":
    main()
