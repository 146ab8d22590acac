"""The GPU device's compiled tiers on a CPU, for tests only: target "EMULATED".

The foreign device (tests/foreign_device.py) plus the real ``GpuRuntime`` of compiler/gpu.py
over a stand-in for the few CuPy calls it makes. Everything msvm does for a GPU kernel runs for
real — the GpuSite's decision, lowering to NVVM IR and PTX through llvmlite (on the background
compiler), the kernel cache keyed by architecture, planning, argument marshalling, output
buffers, the in-place matmul epilogue — except the launch itself: a "launched" kernel is
evaluated here with numpy, by reading its arguments exactly as the PTX kernel's signature
declares them (compiler/callconv.py: ``k(i64 total, i64 n1, i64 n2, T* out, {T* in, i64 s0,
i64 s1} per tensor, then {double} per scalar)``; ``k(i64 rows, i64 n, T* out, T* x, T* gamma,
T* beta)``), and checking their count, each one's type against the parameter the loaded PTX
declares at that position, the block size and, at L3, that the arguments match the constants
the kernel was specialized for. So tests/gpu can run with its compiled-tier assertions on
(``MSVM_GPU_TEST_TARGET=EMULATED``); what only a GPU can show is that the PTX itself computes
that (bench/gpu_check.py section 1, tests/gpu on a GPU).
"""

from __future__ import annotations

import re
import tempfile
import threading
from types import SimpleNamespace

import foreign_device as fd
import numpy as np
from msvm import device as msdev
from msvm.compiler import gpu
from msvm.compiler.cache import KernelCache
from msvm.compiler.callconv import elementwise_order
from msvm.compiler.kir import Elementwise, MatmulEpilogue, RowKernel

LAUNCHES: list = []          # (kernel kind, level) of every emulated launch


class _Kernel:
    """A loaded kernel: its IR, evaluated on the launch's arguments."""

    def __init__(self, ir, params=None):
        self.ir = ir.epilogue if isinstance(ir, MatmulEpilogue) else ir
        self.params = params          # the PTX entry's parameter types, in order (.u64, .f64, ...)

    def __call__(self, grid, block, args):
        assert block == (gpu.BLOCK,) and len(grid) == 1 and 1 <= grid[0] <= gpu.MAX_GRID, (grid, block)
        if self.params is not None:         # each argument is what the PTX declares at its position
            got = ["f64" if isinstance(a, (np.float64, float)) else "u64" for a in args]
            want = ["f64" if t == "f64" else "u64" for t in self.params]
            assert got == want, f"launch arguments {got} for a PTX kernel that declares {want}"
        old = msdev.use(msdev.CPU)          # the evaluation is host numpy
        try:
            if isinstance(self.ir, RowKernel):
                self._rows(args)
            else:
                self._elementwise(args)
        finally:
            msdev.use(old)
        level = 3 if (getattr(self.ir, "dims", None) is not None or getattr(self.ir, "n", None) is not None) else 2
        LAUNCHES.append((type(self.ir).__name__, level))

    def _elementwise(self, args):
        from msvm.interp.kernels import run_program

        k: Elementwise = self.ir
        want = 4 + sum(3 if kind == "t" else 1 for kind in k.kinds)
        assert len(args) == want, f"{len(args)} launch arguments for a kernel that takes {want}"
        total, n1, n2, out = int(args[0]), int(args[1]), int(args[2]), args[3]
        assert out._a.size == total
        if total == 0:                       # an empty tensor: the grid-stride loop runs no iteration
            return
        d0 = total // (n1 * n2)
        if k.dims is not None:
            assert (d0, n1, n2) == tuple(k.dims), f"launched at {(d0, n1, n2)}, specialized for {k.dims}"
        vals, j = [None] * len(k.kinds), 4
        for i in elementwise_order(k.kinds):       # the PTX signature's order: tensors, then scalars
            kind, b = k.kinds[i], k.bcast[i]
            if kind == "t":
                a, s0, s1 = args[j], int(args[j + 1]), int(args[j + 2])
                j += 3
                base = a._a.reshape(-1)
                assert base.flags.c_contiguous and base.dtype == np.dtype(k.dtype)
                item = base.itemsize
                vals[i] = np.lib.stride_tricks.as_strided(base, (d0, n1, n2), (s0 * item, s1 * item,
                                                                              0 if b[2] else item))
            else:
                assert isinstance(args[j], np.float64)
                vals[i] = float(args[j])
                j += 1
        with np.errstate(all="ignore"):
            r = run_program(k.program, vals)
        o = out._a.reshape(-1)
        assert o.size == total and o.dtype == np.dtype(k.dtype)
        o[:] = np.broadcast_to(np.asarray(r, dtype=o.dtype), (d0, n1, n2)).reshape(-1)

    def _rows(self, args):
        from msvm.interp.kernels import KERNELS

        k: RowKernel = self.ir
        assert len(args) == 6
        rows, n, out, x, g, b = int(args[0]), int(args[1]), args[2], args[3], args[4], args[5]
        if k.n is not None:
            assert n == k.n, f"launched with n={n}, specialized for {k.n}"
        x2 = x._a.reshape(rows, n)
        gamma = g._a if k.has_gamma else None
        beta = b._a if k.has_beta else None
        assert (g._a.size == 0) != k.has_gamma and (b._a.size == 0) != k.has_beta
        with np.errstate(all="ignore"):
            if k.op == "softmax":
                r = KERNELS["SOFTMAX"](x2, -1)
            else:
                r = KERNELS["LAYER_NORM"](x2, gamma, beta, -1, -1, k.eps)
        out._a.reshape(rows, n)[:] = r


class _Module:
    def load(self, ptx: bytes):
        text = ptx.rstrip(b"\0").decode()
        assert ".visible .entry" in text and ".target sm_" in text, "not PTX"
        # each entry's parameter types, as the PTX declares them
        self.entries = {m.group(1): re.findall(r"\.param\s+\.(\w+)", m.group(2))
                        for m in re.finditer(r"\.visible \.entry (\w+)\(([^)]*)\)", text)}

    def get_function(self, name):
        return _Ptx(name, self.entries.get(name))   # replaced by the runtime below with the kernel's evaluator


class _Ptx:
    """A loaded PTX function: its name and parameter types."""

    def __init__(self, name, params):
        self.name, self.params = name, params


def _wrap(a):
    return fd.ForeignArray(a)


class _Event:
    """cupy.cuda.Event over the host clock (bench/gpu_check.py --dry-run times nothing real)."""

    def record(self):
        import time

        self.t = time.perf_counter()

    def synchronize(self):
        return None


def _asarray(a, dtype=None):
    if type(a) is fd.ForeignArray:
        return a if dtype is None or a.dtype == np.dtype(dtype) else _wrap(a._a.astype(dtype))
    return _wrap(np.asarray(a, dtype=dtype))


_stream = SimpleNamespace(synchronize=lambda: None, ptr=0)
_cp = SimpleNamespace(
    __version__="(emulated)",
    ndarray=fd.ForeignArray,
    float32=np.float32,
    asarray=_asarray,
    ones=lambda shape, dtype: _wrap(np.ones(shape, dtype)),
    zeros=lambda shape, dtype: _wrap(np.zeros(shape, dtype)),
    copyto=lambda dst, src: np.copyto(dst._a, src._a),
    random=SimpleNamespace(random=lambda n, dtype: _wrap(np.random.default_rng(0).random(n).astype(dtype))),
    ascontiguousarray=lambda x: x if x._a.flags.c_contiguous else _wrap(np.ascontiguousarray(x._a)),
    empty=lambda shape, dtype: _wrap(np.empty(shape, dtype)),
    empty_like=lambda x: _wrap(np.empty_like(x._a)),
    matmul=lambda a, b: _wrap(np.matmul(a._a, b._a)),
    swapaxes=lambda x, i, j: _wrap(np.swapaxes(x._a, i, j)),
    cuda=SimpleNamespace(function=SimpleNamespace(Module=_Module), Event=_Event, get_current_stream=lambda: _stream,
                         get_elapsed_time=lambda a, b: (b.t - a.t) * 1e3),
)


class EmulatedRuntime(gpu.GpuRuntime):
    """compiler/gpu.py's runtime for an sm_90 device that is not there (see the module docstring)."""

    def __init__(self, cache_dir=None):
        import llvmlite

        self.cp = _cp
        self.device_id, self.arch, self.device = 0, "sm_90", "cuda:sm_90"
        self.cache = KernelCache(cache_dir or tempfile.mkdtemp(prefix="msvm-emulated-gpu-"))
        self.mem, self.plans, self.modules, self.lock = {}, {}, [], threading.Lock()
        self.version = f"llvmlite-{llvmlite.__version__}"

    def context(self):
        import contextlib

        return contextlib.nullcontext()

    def kernel(self, kernel, level: int = 2):
        gk, steps = super().kernel(kernel, level)
        if not isinstance(gk.fn, _Kernel):
            gk.fn = _Kernel(kernel, getattr(gk.fn, "params", None))
        return gk, steps


class EmulatedGpuDevice(fd.ForeignDevice):
    """The foreign device with the GPU's compiled tiers (an EmulatedRuntime)."""

    target = "EMULATED"
    accelerated = True

    def gpu_runtime(self):
        return EmulatedRuntime()


def install() -> None:
    fd.install()
    msdev.register("EMULATED", EmulatedGpuDevice)
