"""Interpreter overhead, measured side by side with numpy in one run (not a test).

1. Dispatch: a jit function that applies 256 tiny adds (unrolled loop); the same
   256 np.add calls in a Python loop are the numpy work. Overhead per instruction
   = (VM time - numpy time) / instructions executed.
2. The article's Cell at [32,768] x [768,1024] with training=True against
   np.maximum(x @ y, 0): overhead per call = median of (VM - numpy) over back-to-back
   pairs, in the steady state; a control adds the same amount of plain Python work
   before numpy's call (on this machine that alone costs more than its own time:
   whatever touches memory before a 3 MB BLAS call slows the call); and the fixed
   cost at a tiny shape, where the kernels cost nothing, alone and right after the
   big BLAS call (what the same Python work costs once the BLAS call has evicted it
   from the caches).

Medians over interleaved repetitions; BLAS pinned to one thread (OPENBLAS_NUM_THREADS=1).
Run: make bench
"""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import sys  # noqa: E402
import time  # noqa: E402

import msvm as ms  # noqa: E402
import numpy as np  # noqa: E402

STEPS = 256


@ms.jit
def chain(x, c):
    for _ in range(STEPS):
        x = x + c
    return x


def numpy_chain(x, c):
    for _ in range(STEPS):
        x = np.add(x, c)
    return x


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from cells import DynamicMatmulCell  # noqa: E402  (the article's Cell, as the tests use it)
from timing import interleaved, paired_overhead  # noqa: E402


def compiled_kernel_call(net, x, y):
    """The Cell's one compiled kernel (FUSED_MATMUL_RELU, L3) called through ctypes with its
    arguments prepared: the kernels' own share of a call."""
    from msvm.compiler import tiers

    xa, ya = x.asnumpy(), y.asnumpy()
    var = next(iter(net._runner.variants.values()))
    bound = var.bound_for([xa, ya, True])
    (site,) = bound.code.__dict__["jit_sites"].values()
    (k3,) = [k for k in site.l3.values() if isinstance(k, tiers.Compiled)
             and k.kernel.m == xa.shape[0] and k.kernel.k == xa.shape[1]]
    out = np.empty((xa.shape[0], ya.shape[1]), xa.dtype)
    args = (k3.gemm, xa.ctypes.data, ya.ctypes.data, out.ctypes.data)
    return lambda: k3.fn(*args)


def python_work(n):
    return [[i] for i in range(n)]


def calibrate_python_work(us: float) -> int:
    """How many iterations of python_work take about `us` microseconds here."""
    n = 1000
    t0 = time.perf_counter_ns()
    for _ in range(200):
        python_work(n)
    per = (time.perf_counter_ns() - t0) / 200 / 1e3
    return max(1, int(n * us / per))


def warm(call):
    """The steady state: past the L1 and L2 calls and the L3 compile at this shape."""
    from msvm.compiler.tiers import wait_for_compiles

    for _ in range(3):
        for _ in range(10):
            call()
        wait_for_compiles()


def main():
    # the dispatch loop itself: no fusion, interpreter only
    ms.set_context(mode=ms.GRAPH_MODE, jit_config={"enable_fusion": False, "jit_level": "L1"})
    x, c = ms.Tensor(np.ones(4, np.float32)), ms.Tensor(np.ones(4, np.float32))
    xa, ca = x.asnumpy(), c.asnumpy()
    chain(x, c)
    code = next(iter(chain._runner.variants.values())).code
    n_instr = len(code.instrs)
    vm, npy = (t * 1e6 for t in interleaved([lambda: chain(x, c), lambda: numpy_chain(xa, ca)], 200))
    per = (vm - npy) / n_instr
    print(f"dispatch: {n_instr} instructions ({STEPS} adds on float32[4])")
    print(f"  VM {vm:.1f} us   numpy calls {npy:.1f} us   overhead {per:.3f} us/instruction "
          f"({(vm - npy) / STEPS:.3f} us per add)   target <= 2 us/instruction")

    ms.set_context(jit_config={"enable_fusion": True, "jit_level": "auto"})   # defaults
    rng = np.random.default_rng(0)
    net = DynamicMatmulCell()
    xm = rng.standard_normal((32, 768)).astype(np.float32)
    ym = rng.standard_normal((768, 1024)).astype(np.float32)
    tx, ty = ms.Tensor(xm), ms.Tensor(ym)
    warm(lambda: net(tx, ty, training=True))
    warm(lambda: net(tx, ty, training=False))
    over, vm, npy = paired_overhead(lambda: net(tx, ty, training=True), lambda: np.maximum(xm @ ym, 0), 600)
    print("article Cell [32,768] x [768,1024], training=True (median of 600 back-to-back pairs):")
    print(f"  VM {vm:.1f} us   numpy {npy:.1f} us   overhead {over:.1f} us per call   ratio {vm / npy:.3f}   "
          "target <= 15 us")
    over, vm, npy = paired_overhead(lambda: net(tx, ty, training=False), lambda: xm @ ym, 600)
    print(f"  training=False: VM {vm:.1f} us, numpy x@y {npy:.1f} us, overhead {over:.1f} us")
    # control: the same numpy work preceded by as much plain Python work as the VM's fixed cost;
    # what this adds beyond its own time is the memory hierarchy's share, not the VM's
    loops = calibrate_python_work(8.0)
    over, vm, npy = paired_overhead(lambda: (python_work(loops), np.maximum(xm @ ym, 0)),
                                    lambda: np.maximum(xm @ ym, 0), 600)
    print(f"  control: numpy preceded by 8 us of Python work: +{over:.1f} us per call")
    xs, ys = ms.Tensor(xm[:2, :3].copy()), ms.Tensor(ym[:3, :4].copy())
    xsa, ysa = xs.asnumpy(), ys.asnumpy()
    warm(lambda: net(xs, ys, training=True))
    # the same fixed cost paid right after numpy's 3 MB BLAS call (as it is inside the big call)
    tiny = lambda: net(xs, ys, training=True)   # noqa: E731
    alone = paired_overhead(tiny, lambda: None, 3000)[0]
    after = paired_overhead(lambda: (np.maximum(xm @ ym, 0), tiny()), lambda: np.maximum(xm @ ym, 0), 600)[0]
    tiny_np = lambda: np.maximum(xsa @ ysa, 0)   # noqa: E731
    np_alone = paired_overhead(tiny_np, lambda: None, 3000)[0]
    np_after = paired_overhead(lambda: (np.maximum(xm @ ym, 0), tiny_np()), lambda: np.maximum(xm @ ym, 0), 600)[0]
    print(f"  control: the tiny call costs {alone:.1f} us alone, {after:.1f} us right after the big numpy call "
          f"(numpy's own tiny call: {np_alone:.1f} and {np_after:.1f} us)")
    over, vm, npy = paired_overhead(lambda: net(xs, ys, training=True), lambda: np.maximum(xsa @ ysa, 0), 3000)
    print(f"  fixed cost, same Cell at [2,3] x [3,4]: VM {vm:.1f} us, numpy {npy:.1f} us, overhead {over:.1f} us")
    kernel = compiled_kernel_call(net, xs, ys)
    over, vm, k = paired_overhead(lambda: net(xs, ys, training=True), kernel, 3000)
    print(f"  cached compiled Cell: VM {vm:.1f} us, its L3 kernel called alone {k:.1f} us: {over:.1f} us beyond "
          "its kernels   target <= 10 us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
