"""The NVIDIA kernel runtime: PTX from ``lower_gpu`` loaded through CuPy, matmuls through
cuBLAS (``cupy.matmul``) with the fused epilogue as a generated kernel.

``GpuRuntime()`` raises a RuntimeError that names the GPU/CUDA problem when there is no
usable device. Kernels are cached in memory and on disk (the same ``KernelCache``, so
the same private directory, atomic writes and checksums) under keys that include the
GPU architecture (``cuda:sm_90``). PTX is loaded with ``cuModuleLoadData`` — no files
are handed to the driver.

Launches: one thread per element (elementwise, epilogues) or per row (softmax, layer
norm), ``BLOCK`` threads per block, grid-stride loops so the grid stays bounded.

The tier manager's sites on the GPU device (``gpu_tiers.py``) decide which kernel runs and call
``elementwise`` / ``rows`` / ``matmul`` here; the kernel IR those build comes from the pure
functions ``elementwise_ir`` / ``row_ir`` and its cache key from ``kernel_key``, which the sites'
decisions and the CPU tests use too. ``bench/gpu_check.py`` and ``tests/gpu`` exercise it on a
real GPU.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from .cache import KernelCache, make_key
from .callconv import launch_operands
from .kir import Elementwise, MatmulEpilogue, RowKernel, bare, collapse, strides_for
from .lower import Unsupported
from .lower_gpu import TRIPLE, emit_ptx, lower_gpu

BLOCK = 256
MAX_GRID = 65535 * 8


def cuda():
    """The cupy module, or a RuntimeError that says why the GPU cannot be used."""
    from ..context import gpu_problem

    problem = gpu_problem()
    if problem is not None:
        raise RuntimeError(f"msvm GPU runtime: {problem}")
    import cupy

    return cupy


def target_arch(compute_capability: str) -> str:
    """The PTX target for a device: sm_90 for Hopper and newer, sm_80 for Ampere/Ada."""
    cc = int(compute_capability)
    if cc >= 90:
        return "sm_90"
    if cc >= 80:
        return "sm_80"
    raise Unsupported(f"compute capability {cc / 10:.1f}: msvm's GPU kernels need sm_80 or newer")


def kernel_key(kernel, level: int, arch: str, version: str) -> str:
    """The kernel cache key of a GPU kernel: its IR text, tier, architecture and compiler."""
    return make_key(kernel.text(), level, f"cuda:{arch}", version, f"{TRIPLE}|{arch}")


def elementwise_ir(program, shapes, dtype: str, level: int):
    """(Elementwise IR, out shape, dims, kinds, bcast) for a fused program over inputs of these
    shapes (None: a scalar), numpy broadcasting: L2 shape-generic, L3 with the collapsed dims."""
    out_shape = np.broadcast_shapes(*[s for s in shapes if s is not None])
    col = collapse(tuple(out_shape), list(shapes))
    if col is None:
        raise Unsupported("more than 3 dims after collapsing")
    dims, bcast = col
    kinds = tuple("t" if s is not None else "s" for s in shapes)
    k = Elementwise(tuple(program), kinds, tuple(bcast), dtype, dims if level >= 3 else None)
    return k, tuple(out_shape), dims, kinds, bcast


def row_ir(op: str, n: int, dtype: str, gamma: bool, beta: bool, eps: float, level: int) -> RowKernel:
    """softmax / layer norm over rows of length n (L3: n is a constant)."""
    return RowKernel(op, dtype, gamma, beta, float(eps), n if level >= 3 else None)


def _shape_of(cp, x):
    """A tensor input's shape, None for a scalar (a Python number or a 0-d array)."""
    return tuple(x.shape) if isinstance(x, cp.ndarray) and x.ndim > 0 else None


class GpuKernel:
    __slots__ = ("fn", "kernel", "level", "key", "name")

    def __init__(self, fn, kernel, level, key, name):
        self.fn, self.kernel, self.level, self.key, self.name = fn, kernel, level, key, name


class GpuRuntime:
    def __init__(self, cache_dir: str | None = None):
        self.cp = cuda()
        dev = self.cp.cuda.Device()
        self.device_id = dev.id
        self.arch = target_arch(dev.compute_capability)
        self.device = f"cuda:{self.arch}"
        self.cache = KernelCache(cache_dir)
        self.mem: dict = {}
        self.plans: dict = {}
        self.modules: list = []
        self.lock = threading.Lock()
        import llvmlite

        self.version = f"llvmlite-{llvmlite.__version__}"

    def context(self):
        """This runtime's CUDA device as the calling thread's current one (the background compiler
        loads modules from its own thread, and a module loads into the current context)."""
        return self.cp.cuda.Device(self.device_id)

    # --- compile and load
    def kernel(self, kernel, level: int = 2) -> tuple:
        """(GpuKernel, {step: ms}) for kernel IR at a tier, from memory, disk or a fresh compile."""
        steps = {}
        t0 = time.perf_counter()
        key = kernel_key(kernel, level, self.arch, self.version)
        name = f"msvm_{kernel.name}_{key[:12]}"
        fname = f"{name}_epi" if isinstance(kernel, MatmulEpilogue) else name
        with self.lock:
            hit = self.mem.get(key)
        if hit is not None:
            return hit, {"memory": (time.perf_counter() - t0) * 1e3}

        def link(ptx: bytes):
            module = self.cp.cuda.function.Module()
            module.load(ptx + b"\0")
            return module, module.get_function(fname)

        disk = self.cache.load(key, link)          # PTX that does not load is discarded and built again
        if disk is not None:
            (module, fn), _ptx = disk
            steps["disk"] = (time.perf_counter() - t0) * 1e3
        else:
            t1 = time.perf_counter()
            ir = lower_gpu(kernel, name)
            steps["ir"] = (time.perf_counter() - t1) * 1e3
            t1 = time.perf_counter()
            ptx = emit_ptx(ir, self.arch, level).encode()
            steps["ptx"] = (time.perf_counter() - t1) * 1e3
            self.cache.write(key, ptx, {"name": name, "level": level, "device": self.device, "kernel": kernel.text()})
            t1 = time.perf_counter()
            module, fn = link(ptx)
            steps["load"] = (time.perf_counter() - t1) * 1e3
        gk = GpuKernel(fn, kernel, level, key, fname)
        with self.lock:
            self.mem[key] = gk
            self.modules.append(module)           # a module stays loaded as long as its function is used
        return gk, steps

    # --- launches
    def _launch(self, gk: GpuKernel, n: int, args: tuple):
        grid = max(1, min((n + BLOCK - 1) // BLOCK, MAX_GRID))
        gk.fn((grid,), (BLOCK,), args)

    def elementwise(self, program, inputs, dtype: str = "float32", level: int = 2, out=None):
        """Run a fused elementwise program over CuPy arrays / Python scalars (numpy broadcasting)."""
        cp = self.cp
        shapes = tuple(_shape_of(cp, x) for x in inputs)
        pk = (program, shapes, dtype, level)
        plan = self.plans.get(pk)
        if plan is None:                      # planned once per program and shapes: launches stay cheap
            k, out_shape, dims, kinds, bcast = elementwise_ir(program, shapes, dtype, level)
            plan = self.plans[pk] = (self.kernel(k, level)[0], out_shape, dims, kinds, bcast)
        gk, out_shape, dims, kinds, bcast = plan
        out = cp.empty(out_shape, dtype) if out is None else out
        self._run_elementwise(gk, dims, kinds, bcast, inputs, out)
        return out

    def _run_elementwise(self, gk, dims, kinds, bcast, inputs, out):
        total = dims[0] * dims[1] * dims[2]
        strides = [strides_for(dims, b) if kind == "t" else None for kind, b in zip(kinds, bcast)]
        # the operands in the order callconv describes (tensors, then scalars); axis 2 is contiguous
        # or broadcast per bcast; a 0-d device array is read as a number
        ops = launch_operands(kinds, strides, inputs,
                              lambda x, s0, s1: [self.cp.ascontiguousarray(x), np.int64(s0), np.int64(s1)],
                              lambda x: np.float64(float(x)))
        self._launch(gk, total, (np.int64(total), np.int64(dims[1]), np.int64(dims[2]), out, *ops))

    def rows(self, op: str, x, gamma=None, beta=None, eps: float = 1e-5, level: int = 2):
        """softmax over the last axis, or layer norm over it (with optional gamma/beta)."""
        cp = self.cp
        x = cp.ascontiguousarray(x)
        n = x.shape[-1]
        rows = x.size // max(n, 1)
        pk = (op, n, str(x.dtype), gamma is not None, beta is not None, float(eps), level)
        gk = self.plans.get(pk)
        if gk is None:
            k = row_ir(op, n, str(x.dtype), gamma is not None, beta is not None, eps, level)
            gk = self.plans[pk] = self.kernel(k, level)[0]
        out = cp.empty_like(x)
        null = cp.empty(0, x.dtype)
        self._launch(gk, rows, (np.int64(rows), np.int64(n), out, x,
                                gamma if gamma is not None else null, beta if beta is not None else null))
        return out

    def matmul(self, a, b, epilogue=(), extras=(), ta=False, tb=False, level: int = 2):
        """cuBLAS product, then the fused epilogue program (input 0 = the product) in place."""
        cp = self.cp
        a = cp.swapaxes(a, -1, -2) if ta else a
        b = cp.swapaxes(b, -1, -2) if tb else b
        out = cp.matmul(a, b)
        if epilogue and not bare(epilogue):          # (a product by a weight with nothing fused: fuse._by_weight)
            self.elementwise(epilogue, [out, *extras], str(out.dtype), level, out=out)
        return out
