"""mindcv models on msvm against the float64 numpy references, in one process (not a test).

For resnet18, resnet50, mobilenet_v2_100 and mobilenet_v3_large_100 (``mindcv.create_model``
under ``msvm.as_mindspore()``, eval mode, batch 1, the weights of tests/refs/cv.py
``test_weights``) at 224, 160 and 192: msvm's steady time per forward at L1 (the interpreter)
and at jit_level 'auto' (the default tiers, once compiles are done and replays are built;
two nets with the same weights, timed in interleaved calls),
the reference's time (tests/refs/cv.py, float64 numpy), and the max |msvm - reference|
relative to the max |logit|. Medians of a few runs; one Cell per model serves every size.

    python bench/zoo_cv.py [model ...] [--sizes 224,160] [--runs 5]
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

import msvm as ms  # noqa: E402
import numpy as np  # noqa: E402
from msvm.compiler import tiers  # noqa: E402
from refs import cv  # noqa: E402

MODELS = ["resnet18", "resnet50", "mobilenet_v2_100", "mobilenet_v3_large_100"]


def median_ms(fn, runs):
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


def build(mindcv, name, weights=None):
    net = mindcv.create_model(name)
    net.set_train(False)
    params = net.parameters_dict()
    weights = weights or cv.test_weights([(k, p.shape) for k, p in params.items()])
    for k, v in weights.items():
        params[k].set_data(ms.Tensor(v))
    return net, weights


def at(level, net, t):
    ms.set_context(jit_config={"jit_level": level})
    return net(t)


def steady(nets, images, runs):
    """{level: {size: median ms}}: one net per level, warmed up at every size until compiles are
    done and replays built, then timed in interleaved pairs (a shared machine's load hits both)."""
    for _ in range(8):                         # 'auto' moves a site to L3 after l3_after (5) calls
        for t in images.values():
            for level, net in nets.items():
                at(level, net, t)
        tiers.wait_for_compiles(120)
    times = {level: {s: [] for s in images} for level in nets}
    for _ in range(runs):
        for s, t in images.items():
            for level, net in nets.items():
                ms.set_context(jit_config={"jit_level": level})
                t0 = time.perf_counter()
                net(t)
                times[level][s].append((time.perf_counter() - t0) * 1e3)
    outs = {level: {s: at(level, net, t).asnumpy() for s, t in images.items()} for level, net in nets.items()}
    return ({level: {s: statistics.median(v) for s, v in d.items()} for level, d in times.items()}, outs,
            {level: len(net._runner.variants) for level, net in nets.items()})


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("models", nargs="*", default=MODELS)
    ap.add_argument("--sizes", default="224,160,192")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--ref-runs", type=int, default=3)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    ms.as_mindspore()
    import mindcv

    print(f"{'model':24} {'size':>4} {'L1 ms':>8} {'auto ms':>8} {'numpy f64 ms':>12} {'rel err':>9}  bytecodes")
    for name in args.models:
        net1, weights = build(mindcv, name)
        neta, _ = build(mindcv, name, weights)
        p = {k: v.astype(np.float64) for k, v in weights.items()}
        rng = np.random.default_rng(0)
        xs = {s: rng.standard_normal((1, 3, s, s)).astype(np.float32) for s in sizes}
        images = {s: ms.Tensor(x) for s, x in xs.items()}
        times, outs, counts = steady({"L1": net1, "auto": neta}, images, args.runs)
        t1, ta, o1, oa, n1, na = times["L1"], times["auto"], outs["L1"], outs["auto"], counts["L1"], counts["auto"]
        for s in sizes:
            x64 = xs[s].astype(np.float64)
            forward = cv.MODELS[name]
            ref = forward(p, x64)
            tr = median_ms(lambda f=forward, p=p, x64=x64: f(p, x64), args.ref_runs)
            err = max(np.abs(o - ref).max() for o in (o1[s], oa[s])) / np.abs(ref).max()
            print(f"{name:24} {s:>4} {t1[s]:>8.1f} {ta[s]:>8.1f} {tr:>12.1f} {err:>9.1e}  {n1}/{na}", flush=True)


if __name__ == "__main__":
    main()
