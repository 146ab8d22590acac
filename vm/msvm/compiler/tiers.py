"""The tier manager: which code runs each jit-able instruction, and when it compiles.

Every FUSED_ELEMENTWISE, FUSED_MATMUL, SOFTMAX and LAYER_NORM instruction of a
Code gets a ``Site``. A call at a shape class it has no kernel for runs the L1
reference kernel and queues an L2 compile (shape-generic: dims are arguments) on
the background thread; the next calls use L2. After ``l3_after`` calls at the same
concrete shapes the site queues an L3 compile (dims and strides are constants, the
L3 passes, codegen O3, BLAS row blocks for matmul) and switches to it — for
at most ``L3_SHAPES`` shapes: a site whose shapes keep changing is polymorphic and
stays on its shape-generic L2 kernel (so a stream of new batch sizes costs one
compile, not one per size). ``jit_level`` "L1" never
compiles; "L2"/"L3" compile that tier synchronously and never change. A compile
that fails or exceeds its budget is counted, logged, and the site stays on L1 for
that shape class; results are the same in every tier.

Each compile reports the article's seven steps (Parse, Shape Resolution, IR
Generation, Fusion, Hardware Mapping, Code Generation, Kernel Cache) as a
``compile`` event and, at DEBUG, as ``[MS]`` lines.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import queue
import threading
import time

import numpy as np

from .. import context, events, log
from ..bytecode.disasm import display_name
from ..bytecode.opcodes import JITABLE
from . import conv, entry
from .buffers import ALIGN, aligned_empty
from .cache import KernelCache, make_key
from .entry import data_pointer
from .kir import Elementwise, MatmulEpilogue, RowKernel, collapse, strides_for
from .lower import TYPES, Unsupported, lower, vec_width

STEPS = ("Step1 Parse", "Step2 Shape Resolution", "Step3 IR Generation", "Step4 Fusion", "Step5 Hardware Mapping",
         "Step6 Code Generation", "Step7 Kernel Cache")
# seconds a compile may take before its site stays on L1; MSVM_COMPILE_BUDGET_SCALE stretches them
# on a slow or loaded machine (the test suite, which is not about latency, runs with 20)
BUDGET_S = {level: s * float(os.environ.get("MSVM_COMPILE_BUDGET_SCALE", "1") or 1)
            for level, s in {2: 0.25, 3: 2.0}.items()}
PARALLEL_MIN = 1 << 20          # elements: below this one thread is faster (MEASURED.md)
ROW = 4096                      # row length when a long vector is viewed as rows
_ND = np.ndarray
_JIT = context._ctx["jit_config"]        # the live jit_config dict (set_context updates it in place)
B_IN_CACHE = 1 << 20            # bytes of a matmul's B below which L3 works in row blocks
STREAM_MIN = 16 << 20           # output bytes from which L3 elementwise kernels use streaming stores
RELEASE_MIN = 1 << 14           # elements from which a native entry lets other threads run (compiles)
L3_SHAPES = 2                   # a site specializes (L3) for at most this many concrete shapes

_cache = None
_worker = None
_lock = threading.Lock()
_pool = None


def kernel_cache() -> KernelCache:
    global _cache
    if _cache is None:
        with _lock:
            if _cache is None:
                _cache = KernelCache()
    return _cache


def reset_cache(directory=None) -> KernelCache:
    """A fresh cache (tests, ``msvm cache clear``)."""
    global _cache
    with _lock:
        _cache = KernelCache(directory)
    return _cache


# ---------------------------------------------------------------- background compiler

class _Worker:
    """One background thread; queued compiles run in order; exit drops what is queued."""

    def __init__(self):
        self.q: queue.Queue = queue.Queue()
        self.stopping = False
        self.busy = threading.Event()
        self.thread = threading.Thread(target=self.loop, name="msvm-jit", daemon=True)
        self.thread.start()

    def loop(self):
        self.warm()
        while True:
            task = self.q.get()
            if task is None:
                return
            if self.stopping:
                continue
            self.busy.set()
            try:
                task()
            except Exception as e:  # noqa: BLE001 - a compile must never kill the worker
                log.logger.debug("JIT worker: %s", e)
            finally:
                self.busy.clear()
                self.q.task_done()

    @staticmethod
    def warm():
        """Load LLVM before the first kernel asks for it: llvmlite's import, the target machines
        and LLVM's own first-use set-up (an empty function compiled and linked) cost 50-100 ms
        once per process, which a first compile, or the first call's look into the disk cache,
        would otherwise wait for."""
        try:
            from .codegen import codegen

            cg = codegen()
            obj, _ = cg.compile("define void @msvm_warm_up() {\nentry:\n  ret void\n}\n", 2)
            cg.load(obj, ["msvm_warm_up"])
        except Exception as e:  # noqa: BLE001 - the first compile reports what is wrong
            log.logger.debug("JIT warm-up: %s", e)

    def submit(self, task):
        if not self.stopping:
            self.q.put(task)

    def drain(self, timeout=None):
        """Wait for queued compiles (tests, benchmarks)."""
        end = None if timeout is None else time.time() + timeout
        while self.q.unfinished_tasks:
            if end is not None and time.time() > end:
                return False
            time.sleep(0.001)
        return True

    def stop(self):
        self.stopping = True          # queued compiles are dropped; the running one finishes
        self.q.put(None)
        self.thread.join(timeout=5)


def worker() -> _Worker:
    global _worker
    if _worker is None:
        with _lock:
            if _worker is None:
                _worker = _Worker()
                atexit.register(_worker.stop)
    return _worker


def warm_up() -> None:
    """Start the background compiler, which loads LLVM first (``_Worker.warm``): called when a
    Cell or a jit function is made in GRAPH_MODE, so that this happens while the program
    builds its model and inputs, not in its first call."""
    if _worker is None and _JIT["jit_level"] != "L1":
        worker()


def wait_for_compiles(timeout=None) -> bool:
    return worker().drain(timeout)


def _threads():
    global _pool
    if _pool is None:
        import os
        from concurrent.futures import ThreadPoolExecutor

        _pool = ThreadPoolExecutor(max(1, min(os.cpu_count() or 1, 8)), thread_name_prefix="msvm-kernel")
    return _pool


# ---------------------------------------------------------------- compiled kernels

class Compiled:
    """A loaded kernel and how to call it."""

    def __init__(self, kernel, level: int, addrs: dict, name: str, key: str):
        self.kernel, self.level, self.key = kernel, level, key
        self.addr = addrs[name]
        self.fn = _cfunc(kernel, self.addr)
        self.gemm = _gemm_pointer(kernel.dtype) if kernel.kind == "matmul" else None


def _cfunc(kernel, addr):
    i64, ptr, dbl = ctypes.c_int64, ctypes.c_void_p, ctypes.c_double
    if hasattr(kernel, "cargs"):         # (issue 18: convolution kernels say their own, compiler/conv.py)
        return ctypes.CFUNCTYPE(None, *kernel.cargs())(addr)
    if kernel.kind == "elementwise":
        args = [i64, i64, i64, i64, ptr]
        for kind in kernel.kinds:
            args += [ptr, i64, i64] if kind == "t" else [dbl]
    elif kernel.kind == "row":
        args = [i64, i64, i64, ptr, ptr, ptr, ptr]
    else:
        args = [ptr, ptr, ptr, ptr]
        if kernel.epilogue is not None:
            for kind in kernel.epilogue.kinds[1:]:
                args += [ptr, i64, i64] if kind == "t" else [dbl]
    return ctypes.CFUNCTYPE(None, *args)(addr)


_blas: dict = {}


def blas() -> tuple:
    """(int bits, {dtype: gemm pointer}): numpy's own OpenBLAS (ILP64) when it ships one, so
    L3 matmuls run the same BLAS as numpy; else scipy's (LP64) through its Cython capsules."""
    if not _blas:
        _blas.update(_numpy_blas() or _scipy_blas())
    return _blas["bits"], _blas["gemm"]


def _numpy_blas():
    import glob
    import os

    libs = glob.glob(os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs", "libscipy_openblas64_*"))
    for path in libs:
        try:
            lib = ctypes.CDLL(path)
            gemm = {"float32": ctypes.cast(lib.scipy_sgemm_64_, ctypes.c_void_p).value,
                    "float64": ctypes.cast(lib.scipy_dgemm_64_, ctypes.c_void_p).value}
        except (OSError, AttributeError):
            continue
        return {"bits": 64, "gemm": gemm}
    return None


def _scipy_blas():
    import scipy.linalg.cython_blas as cblas

    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    name = ctypes.pythonapi.PyCapsule_GetName
    name.restype, name.argtypes = ctypes.c_char_p, [ctypes.py_object]
    caps = {d: cblas.__pyx_capi__["sgemm" if d == "float32" else "dgemm"] for d in ("float32", "float64")}
    return {"bits": 32, "gemm": {d: get(c, name(c)) for d, c in caps.items()}}


def _gemm_pointer(dtype: str) -> int:
    return blas()[1][dtype]


def compile_kernel(kernel, level: int, info: dict, cached_only: bool = False) -> Compiled | None:
    """Lower, compile (or load from the cache) and load one kernel; emits the compile event.
    ``cached_only``: only what the cache (memory or disk) holds, else None."""
    from .codegen import codegen

    cache = kernel_cache()
    steps = dict.fromkeys(STEPS, 0.0)
    t_all = time.perf_counter()
    t0 = time.perf_counter()
    cg = codegen()
    text = kernel.text()
    steps["Step1 Parse"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    key = make_key(text, level, "cpu", cg.version, cg.target_id)
    name = f"msvm_{kernel.name}_{key[:12]}"
    steps["Step2 Shape Resolution"] = time.perf_counter() - t0
    with cache.lock:
        hit = cache.mem.get(key)
    if hit is not None:
        cache.note_key(key, info, "memory")
        return hit
    if log.debug_enabled():
        log.logger.debug("JIT compiling %s (shape=%s, dtype=%s) at L%d...", info.get("op"), info.get("shape"),
                         info.get("dtype"), level)
    names = [name] + ([f"{name}_epi"] if kernel.kind == "matmul" and kernel.epilogue else [])
    t0 = time.perf_counter()
    disk = cache.load(key, lambda obj: cg.load(obj, names))     # an entry that does not link is discarded
    if disk is None and cached_only:
        return None
    if disk is not None:
        addrs, obj = disk
        source = "disk"
    else:
        source = "compiled"
        t0 = time.perf_counter()
        ir = lower(kernel, name, cg.features)
        steps["Step3 IR Generation"] = time.perf_counter() - t0
        steps["Step4 Fusion"] = info.get("fusion_s", 0.0)
        t0 = time.perf_counter()
        # (issue 18: a convolution's L2 kernel is shape-generic but compiled as L3 is, ``opt_level``:
        # it is a polymorphic site's steady state, and there are few of them)
        obj, times = cg.compile(ir, max(level, getattr(kernel, "opt_level", 0)))
        steps["Step5 Hardware Mapping"] = times["parse"] + times["optimize"]
        steps["Step6 Code Generation"] = times["codegen"]
        t0 = time.perf_counter()
        addrs = cg.load(obj, names)
    compiled = Compiled(kernel, level, addrs, name, key)
    if source == "compiled":
        cache.write(key, obj, {"name": name, "level": level, "kernel": text, "created": time.time()})
    with cache.lock:
        cache.mem[key] = compiled
        cache.stats["compiles" if source == "compiled" else "disk_loads"] += 1
    steps["Step7 Kernel Cache"] = time.perf_counter() - t0
    total = time.perf_counter() - t_all
    cache.note_key(key, info, source)
    ms_steps = {k: round(v * 1e3, 4) for k, v in steps.items()}
    events.emit({"type": "compile", "op": info.get("op"), "code": info.get("code"), "offset": info.get("offset"),
                 "file": info.get("file"), "line": info.get("line"), "level": level, "key": key,
                 "shape": info.get("shape"), "dtype": info.get("dtype"), "source": source,
                 "steps": ms_steps, "ms": round(total * 1e3, 4), "fused": info.get("fused", 1)})
    if log.debug_enabled():
        for step, v in ms_steps.items():
            extra = f", fused {info.get('fused')} ops" if step == "Step4 Fusion" else \
                f", object size={len(obj) / 1024:.1f}KB" if step == "Step6 Code Generation" else ""
            log.logger.debug("%s: %.2fms%s", step, v, extra)
        log.logger.debug("JIT %s in %.2fms (L%d), cache key=%s...", "loaded from disk" if source == "disk"
                         else "compiled", total * 1e3, level, key[:12])
    return compiled


# ---------------------------------------------------------------- sites

class Site:
    """One jit-able instruction of one Code: its kernels per shape class / shape."""

    def __init__(self, code, index: int, program=None):
        ins = code.instrs[index]
        self.code, self.index, self.ins = code, index, ins
        self.op = ins.op.name
        self.args = code.decode_args(ins)
        self.name = display_name(ins)
        self.l2: dict = {}       # shape class -> Compiled | "pending" | "failed"
        self.l3: dict = {}       # concrete shapes -> Compiled | "pending" | "failed"
        self.seen: dict = {}     # concrete shapes -> calls
        self.polymorphic = False  # more than L3_SHAPES shapes seen: no more L3 compiles
        self.ptrs = [None] * 7   # per input position: (last array, its data pointer); outputs are not kept
        self.tier_history: list = []
        self.plans: dict = {}
        self.l1_why: dict = {}   # why inputs of some layouts stay in the interpreter (the planner's reason)
        self.callers: dict = {}  # (concrete key, output shape) -> (Compiled, go(inputs, out))
        self.fast: dict = {}     # (shape, strides, dtype) per input -> go, for shapes whose L3 kernel is loaded
        # a matmul by a transposed weight (Dense: x @ W.T) runs on a contiguous copy of W.T, which BLAS
        # multiplies faster for few rows; a Parameter's array is read-only, so the copy stays valid
        # while the same array is in place (``transposed``)
        self.weight_t = self.op == "FUSED_MATMUL" and bool(self.args[1]) and not self.args[2]
        self.wcache = None       # (weight array, its contiguous transpose)
        st = code.stack_types[index]
        n = ins.op.n_pops(self.args)
        self.in_types = st[len(st) - n:] if st else ()
        self.fused = max(1, len(ins.parts))
        self.stats = kernel_cache().stats
        n_fused = sum(1 for c in code.all_codes() for i in c.instrs if i.op.kind == "fused") or 1
        self.fusion_s = code.fusion_s / n_fused if ins.op.kind == "fused" else 0.0

    def info(self, shape, dtype) -> dict:
        return {"op": self.name, "code": self.code.name, "offset": self.ins.offset, "file": self.code.filename,
                "line": self.ins.loc.line, "shape": list(shape), "dtype": str(dtype), "fused": self.fused,
                "fusion_s": self.fusion_s}

    # --- the hot path
    def __call__(self, inputs, reference, out=None):
        level = _JIT["jit_level"]
        if level == "L1":
            return reference(*inputs)
        exact = self.exact(inputs)
        go = self.fast.get(exact)
        if go is not None and level != "L2":     # the steady state: this exact layout has its L3 kernel
            self.stats["hits"] += 1
            return go(inputs, out)
        plan = self.plan(inputs)
        if plan is None:
            return reference(*inputs)
        cls_key, shape_key = plan[0], plan[1]
        k3 = self.l3.get(shape_key)
        if isinstance(k3, Compiled) and level != "L2":      # (jit_level "L2" keeps to L2 kernels)
            self.stats["hits"] += 1
            if len(self.fast) < 16:
                go = self.fast[exact] = self.caller(k3, plan)
                go.native = self.native(k3, plan)
            return self.run(k3, plan, inputs, out)
        k2 = self.l2.get(cls_key)
        if level == "L3":
            if k3 is None:
                self.compile(3, plan, sync=True)
                k3 = self.l3.get(shape_key)
                if isinstance(k3, Compiled):
                    self.stats["misses"] += 1
                    return self.run(k3, plan, inputs, out)
            self.stats["misses"] += 1
            return reference(*inputs)
        if k2 is None:
            self.compile(2, plan, sync=(level == "L2"))
            k2 = self.l2.get(cls_key)
        if level == "auto" and k3 is None and not self.polymorphic:
            n = self.seen.get(shape_key, 0) + 1
            self.seen[shape_key] = n
            if len(self.seen) > L3_SHAPES:      # shapes keep changing here: stay shape-generic (L2)
                self.polymorphic = True
                self.seen.clear()
            elif n >= context.jit_option("l3_after"):
                self.compile(3, plan, sync=False)
        if isinstance(k2, Compiled):
            self.stats["hits"] += 1
            return self.run(k2, plan, inputs, out)
        self.stats["misses"] += 1
        return reference(*inputs)

    def exact(self, inputs) -> tuple:
        """The key of ``fast``: each input's shape, strides and dtype (and, for a matmul by a
        transposed weight, whether the weight is fixed)."""
        exact = tuple([(x.shape, x.strides, x.dtype) if type(x) is _ND else None for x in inputs])
        if self.weight_t:
            exact += (self.frozen(inputs[1]),)
        return exact

    def fast_for(self, inputs):
        """The prepared L3 caller for exactly these inputs' layouts (the fast path of ``__call__``),
        or None: what a replay may call directly for inputs of these layouts."""
        return self.fast.get(self.exact(inputs))

    def compile(self, level: int, plan, sync: bool):
        table, key = (self.l2, plan[0]) if level == 2 else (self.l3, plan[1])
        if key in table:
            return
        table[key] = "pending"
        shape, dtype = plan[2], plan[3]
        if not sync and self._from_cache(level, plan, table, key):
            return

        def task():
            t0 = time.perf_counter()
            try:
                kernel = self.kernel_ir(level, plan)
                compiled = compile_kernel(kernel, level, self.info(shape, dtype))
                if time.perf_counter() - t0 > BUDGET_S[level]:
                    raise TimeoutError(f"compile took {time.perf_counter() - t0:.2f}s, budget {BUDGET_S[level]}s")
                if level == 3:
                    self.prepare_native(compiled, plan)
                table[key] = compiled
                self.tier_history.append({"time": time.time(), "level": level, "shape": list(shape)})
                events.emit({"type": "tier", "code": self.code.name, "offset": self.ins.offset, "op": self.name,
                             "level": level, "shape": list(shape)})
            except Exception as e:  # noqa: BLE001 - any failure falls back to L1, counted and logged
                table[key] = "failed"
                kernel_cache().stats["failures"] += 1
                events.emit({"type": "error", "what": "compile", "op": self.name, "level": level, "why": str(e),
                             "code": self.code.name, "offset": self.ins.offset})
                log.logger.info("JIT L%d compile of %s failed, staying in L1: %s", level, self.name, e)
        if sync:
            task()
        else:
            worker().submit(task)

    def _from_cache(self, level: int, plan, table, key) -> bool:
        """A kernel the cache already holds (this process compiled it for another site, or an
        earlier process left it on disk) is used by the call that asks: loading costs about what
        a small call does, and only compiles go to the background."""
        try:
            found = compile_kernel(self.kernel_ir(level, plan), level, self.info(plan[2], plan[3]),
                                   cached_only=True)
        except Exception:  # noqa: BLE001 - a kernel that cannot even be described is the compile's problem
            return False
        if found is None:
            return False
        if level == 3:
            self.prepare_native(found, plan)
        table[key] = found
        self.tier_history.append({"time": time.time(), "level": level, "shape": list(plan[2])})
        events.emit({"type": "tier", "code": self.code.name, "offset": self.ins.offset, "op": self.name,
                     "level": level, "shape": list(plan[2])})
        return True

    # --- per kind: planning, kernel IR, running
    def plan(self, inputs):
        """(shape class, concrete key, out shape, dtype, details) or None when only L1 applies."""
        ck = tuple([(x.shape, x.dtype) if type(x) is _ND else None for x in inputs])
        if self.weight_t:
            ck += (self.frozen(inputs[1]),)
        p = self.plans.get(ck)
        if p is None:
            if ck in self.plans:
                return None
            p = self.plans[ck] = self._make_plan(inputs)
            if p is None:
                return None
        for x in inputs:
            if type(x) is _ND and not x.flags.c_contiguous:
                self._l1(inputs, "a strided input (a view: the L1 kernel reads it in place)")
                return None
        return p

    def _l1(self, inputs, why: str) -> None:
        """Say once per reason (and record per input layout, ``l1_why``) why these inputs run the L1 kernel."""
        key = tuple([(x.shape, str(x.dtype)) if type(x) is _ND else None for x in inputs])
        if key in self.l1_why:
            return
        if why not in self.l1_why.values():
            log.logger.info("JIT: %s at %s+0x%04x runs in L1 for these inputs: %s", self.name, self.code.name,
                            self.ins.offset, why)
        self.l1_why[key] = why

    def _make_plan(self, inputs):
        try:
            return getattr(self, PLANNERS[self.op])(inputs)
        except Unsupported as e:      # said once per reason and site (float16, mixed dtypes, ...)
            self._l1(inputs, str(e))
            return None

    def _float_dtype(self, arrays):
        dts = {a.dtype for a in arrays}
        if len(dts) != 1:
            raise Unsupported("mixed dtypes")
        d = dts.pop()
        if d not in (np.float32, np.float64):
            raise Unsupported(f"dtype {d}")
        return d

    def _plan_elementwise(self, inputs, program=None, out_shape=None):
        program = program or self.args[0]
        tensors = [x for x in inputs if _is_tensor(x)]
        if not tensors:
            raise Unsupported("no tensor inputs")
        d = self._float_dtype(tensors)
        for x in inputs:
            if isinstance(x, np.ndarray) and x.ndim == 0 and x.dtype != d:
                raise Unsupported("0-d input of another dtype")
        if any(n[0] == "CAST" and getattr(n[1], "name", n[1]) != str(d) for n in program):
            raise Unsupported("cast to another dtype")
        shapes = [x.shape if _is_tensor(x) else None for x in inputs]
        out_shape = out_shape or np.broadcast_shapes(*[s for s in shapes if s is not None])
        col = collapse(tuple(out_shape), shapes)
        if col is None:
            raise Unsupported("more than 3 dims after collapsing")
        dims, bcast = col
        kinds = tuple("t" if s is not None else "s" for s in shapes)
        total = dims[0] * dims[1] * dims[2]
        if (dims[0] == 1 and dims[1] == 1 and total >= PARALLEL_MIN and total % ROW == 0
                and all(not b or b == (True, True, False) for b in bcast)):
            # one long contiguous vector: view it as rows so the work can be split over threads
            dims = (total // ROW, 1, ROW)
            bcast = [(False, True, False) if b else b for b in bcast]
        cls = ("ew", kinds, tuple(bcast), str(d))
        return (cls, (cls, dims), tuple(out_shape), d, {"dims": dims, "bcast": bcast, "kinds": kinds,
                                                       "program": program,
                                                       "strides": [strides_for(dims, b) if b else None for b in bcast]})

    def _plan_matmul(self, inputs):
        ta, tb, batched, program, n = self.args
        a, b = inputs[0], inputs[1]
        if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
            raise Unsupported("matmul of scalars")
        d = self._float_dtype([a, b])
        wt = self.weight_t and self.frozen(b)      # run on the weight's contiguous transpose: B = W.T, no flag
        m, k = (a.shape[-1], a.shape[-2]) if ta else (a.shape[-2], a.shape[-1])
        n_ = b.shape[-2] if tb else b.shape[-1]
        batch_shape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) if batched else ()
        out_shape = tuple(batch_shape) + (m, n_)
        extras = list(inputs[2:])
        epi = self._plan_elementwise([_Shape(out_shape, d)] + extras, program, out_shape)
        block = []      # per epilogue input: broadcast along rows / along a row, and the row stride
        for x in extras:
            if _is_tensor(x):
                xs = (1,) * (len(out_shape) - x.ndim) + tuple(x.shape)
                rowb, colb = xs[-2] == 1 and m != 1, xs[-1] == 1 and n_ != 1
                block.append(((rowb, True, colb), 0 if rowb else xs[-1]))
            else:
                block.append(((), 0))
        epi[4]["block"] = block
        same_batch = (not batched) or (a.shape[:-2] == b.shape[:-2] == tuple(batch_shape))
        batch = int(np.prod(batch_shape)) if batched else 1
        tb_run = bool(tb) and not wt
        b_shape = b.shape[::-1] if wt else b.shape
        cls = ("mm", bool(ta), tb_run, str(d), epi[0] if epi else None, bool(wt))
        return (cls, (cls, a.shape, b_shape, tuple(x.shape if isinstance(x, np.ndarray) else None for x in extras)),
                out_shape, d, {"m": m, "k": k, "n": n_, "batch": batch, "same_batch": same_batch, "epi": epi,
                               "tb": tb_run, "wt": bool(wt)})

    def _plan_row(self, inputs):
        x = inputs[0]
        if not isinstance(x, np.ndarray) or x.ndim == 0:
            raise Unsupported("row kernel of a scalar")
        if x.shape[-1] == 0:      # softmax of an empty row is numpy's error (no max): the interpreter's answer
            raise Unsupported("rows of length 0")
        d = self._float_dtype([x])
        if self.op == "SOFTMAX":
            if self.args[0] not in (-1, x.ndim - 1):
                raise Unsupported("softmax not over the last axis")
            extra = {"op": "softmax", "gamma": False, "beta": False, "eps": 0.0}
        else:
            bna, bpa, eps = self.args
            if bna % x.ndim != x.ndim - 1 or bpa % x.ndim != x.ndim - 1:
                raise Unsupported("layer norm over more than the last axis")
            g, b = inputs[1], inputs[2]
            for t in (g, b):
                if t is not None and (not isinstance(t, np.ndarray) or t.dtype != d or t.shape != x.shape[-1:]):
                    raise Unsupported("gamma/beta shape or dtype")
            extra = {"op": "layer_norm", "gamma": g is not None, "beta": b is not None, "eps": float(eps)}
        cls = ("row", extra["op"], str(d), extra["gamma"], extra["beta"], extra["eps"])
        return (cls, (cls, x.shape), x.shape, d, dict(extra, n=x.shape[-1], rows=x.size // max(x.shape[-1], 1)))

    def _plan_conv(self, inputs):            # (issue 18: compiler/conv.py)
        return conv.plan(self, inputs)

    def kernel_ir(self, level: int, plan):
        if self.op in conv.OPS:              # (issue 18: compiler/conv.py)
            return conv.kernel_ir(self, level, plan)
        cls, shape_key, out_shape, d, p = plan
        dtype = str(d)
        if self.op == "FUSED_ELEMENTWISE":
            dims = p["dims"]
            stream = False
            if level == 3:
                from .codegen import codegen

                w = vec_width(codegen().features, TYPES[dtype])
                stream = dims[0] * dims[1] * dims[2] * np.dtype(d).itemsize >= STREAM_MIN and dims[2] % w == 0
            return Elementwise(p["program"], p["kinds"], tuple(p["bcast"]), dtype, dims if level == 3 else None,
                               stream)
        if self.op == "FUSED_MATMUL":
            if level == 2:   # numpy/BLAS product, then the L2 epilogue kernel over it
                ep = p["epi"][4]
                return Elementwise(ep["program"], ep["kinds"], tuple(ep["bcast"]), dtype, None)
            if not p["same_batch"]:
                raise Unsupported("broadcast batch dims")
            ep = p["epi"][4]
            if p["batch"] > 1 and any(kind == "t" for kind in ep["kinds"][1:]):
                raise Unsupported("a batched matmul epilogue with tensor inputs")
            blk = (p["m"], 1, p["n"])
            bc = ((False, True, False),) + tuple(b for b, _ in ep["block"])
            epi = Elementwise(ep["program"], ep["kinds"], bc, dtype, blk)
            # row blocks keep the epilogue in cache, but each block re-reads B: worth it only while B fits
            # in cache; a big weight matrix (BERT's 768x3072) is read once, by one gemm over all rows
            b_bytes = p["k"] * p["n"] * np.dtype(d).itemsize
            block = 64 if b_bytes <= B_IN_CACHE else max(1, p["m"])
            return MatmulEpilogue(bool(self.args[0]), p["tb"], epi, dtype, p["m"], p["k"], p["n"],
                                  p["batch"], block=block, int_bits=blas()[0])
        return RowKernel(p["op"], dtype, p["gamma"], p["beta"], p["eps"], p["n"] if level == 3 else None)

    def run(self, compiled: Compiled, plan, inputs, out):
        # a caller is made for a kernel and an output shape: shapes with the same element count
        # can share a kernel (their shape key), never an output
        key = (plan[1], plan[2])
        c = self.callers.get(key)
        if c is None or c[0] is not compiled:
            if len(self.callers) > 64:        # a polymorphic L2 site: keep the table small
                self.callers.clear()
            c = self.callers[key] = (compiled, self.caller(compiled, plan))
        return c[1](inputs, out)

    def caller(self, compiled: Compiled, plan):
        """``go(inputs, out) -> out``: this kernel at this plan's shapes, with everything that does
        not change between calls (argument layout, strides, the BLAS pointer) decided here once."""
        _cls, _key, out_shape, d, p = plan
        k = compiled.kernel
        fn, ptr, level = compiled.fn, self.ptr, compiled.level
        cstrides = _contiguous_strides(out_shape, d.itemsize)
        empty = np.empty

        if getattr(k, "stream", False):
            def output(out):
                if (out is None or out.shape != out_shape or out.strides != cstrides or out.dtype != d
                        or data_pointer(out) % ALIGN):
                    return aligned_empty(out_shape, d)
                return out
        else:
            def output(out):
                if out is None or out.shape != out_shape or out.strides != cstrides or out.dtype != d:
                    return empty(out_shape, d)
                return out
        if k.kind == "elementwise" and self.op == "FUSED_ELEMENTWISE":
            return _elementwise_caller(compiled, p, output, ptr)
        if self.op in conv.OPS:              # (issue 18: compiler/conv.py)
            return conv.caller(self, compiled, plan, output)
        if k.kind == "elementwise":          # L2 matmul: BLAS product, then the epilogue in place
            ta, tb, wt, transposed = self.args[0], p["tb"], p["wt"], self.transposed
            # the epilogue's input 0 is the product, i.e. the output: its pointer is not kept
            epi = _elementwise_caller(compiled, p["epi"][4], None,
                                      lambda j, a: data_pointer(a) if j == 0 else ptr(j, a))
            matmul, swap = np.matmul, np.swapaxes

            def go(inputs, out):
                out = output(out)
                a, b = inputs[0], transposed(inputs[1]) if wt else inputs[1]
                matmul(swap(a, -1, -2) if ta else a, swap(b, -1, -2) if tb else b, out=out)
                return epi([out] + list(inputs[2:]), out)
            return go
        if k.kind == "matmul":
            gemm = compiled.gemm
            weight = self.transposed if p["wt"] else (lambda b: b)
            extras = [(2 + j, kind, row_stride) for j, (kind, (_b, row_stride))
                      in enumerate(zip(k.epilogue.kinds[1:], p["epi"][4]["block"]))] if k.epilogue else []
            if not extras:
                def go(inputs, out):
                    out = output(out)
                    fn(gemm, ptr(0, inputs[0]), ptr(1, weight(inputs[1])), data_pointer(out))
                    return out
                return go

            def go(inputs, out):
                out = output(out)
                args = [gemm, ptr(0, inputs[0]), ptr(1, weight(inputs[1])), data_pointer(out)]
                for j, kind, row_stride in extras:
                    if kind == "t":
                        args += [ptr(j, inputs[j]), row_stride, 0]
                    else:
                        args.append(float(inputs[j]))
                fn(*args)
                return out
            return go
        rows, n, layer_norm = p["rows"], p["n"], self.op == "LAYER_NORM"
        split = level >= 3 and rows * n >= PARALLEL_MIN and rows >= 2

        def go(inputs, out):
            out = output(out)
            gp = bp = None
            if layer_norm:
                g, b = inputs[1], inputs[2]
                gp = ptr(1, g) if g is not None else None
                bp = ptr(2, b) if b is not None else None
            op_, xp_ = data_pointer(out), ptr(0, inputs[0])
            if split:
                _parallel(lambda s, e: fn(s, e, n, op_, xp_, gp, bp), rows)
            else:
                fn(0, rows, n, op_, xp_, gp, bp)
            return out
        return go

    # --- native entries (compiler/entry.py): what a replay calls instead of ``go``
    def native_spec(self, compiled: Compiled, plan):
        """(argument pattern, constants, nargs, release the GIL, allocator) of a native entry for
        this L3 kernel at this plan: the arguments ``caller``'s ``go`` passes, where all of them are
        array pointers or constants; None where they are not (a scalar operand, work split over
        threads)."""
        _cls, _key, _shape, _d, p = plan
        k = compiled.kernel
        nargs = len(self.in_types) + 1
        o = nargs - 1
        alloc = aligned_empty if getattr(k, "stream", False) else np.empty
        if k.kind == "matmul":       # (a transposed weight is passed already transposed: ``native``)
            pattern, consts = ["c", 0, 1, o], [compiled.gemm]
            if k.epilogue is not None:
                for j, (kind, (_b, row_stride)) in enumerate(zip(k.epilogue.kinds[1:], p["epi"][4]["block"])):
                    if kind != "t":
                        return None
                    pattern += [2 + j, "c", "c"]
                    consts += [row_stride, 0]
            return pattern, consts, nargs, True, alloc
        if k.kind == "elementwise" and self.op == "FUSED_ELEMENTWISE":
            d0, d1, d2 = p["dims"]
            if (d0 * d1 * d2 >= PARALLEL_MIN and d0 >= 2) or any(kind != "t" for kind in p["kinds"]):
                return None
            pattern, consts = ["c", "c", "c", "c", o], [0, d0, d1, d2]
            for j, s in enumerate(p["strides"]):
                pattern += [j, "c", "c"]
                consts += [s[0], s[1]]
            return pattern, consts, nargs, d0 * d1 * d2 >= RELEASE_MIN, alloc
        if k.kind == "row":
            rows, n = p["rows"], p["n"]
            if rows * n >= PARALLEL_MIN and rows >= 2:
                return None
            pattern, consts = ["c", "c", "c", o, 0], [0, rows, n]
            for j, present in ((1, p["gamma"]), (2, p["beta"])):
                pattern.append(j if present else "c")
                consts += [] if present else [0]
            return pattern, consts, nargs, rows * n >= RELEASE_MIN, alloc
        return None

    def prepare_native(self, compiled: Compiled, plan) -> None:
        """Compile (or load) the trampoline this kernel's entry needs, on the compiling thread."""
        spec = self.native_spec(compiled, plan)
        if spec is not None:
            entry.prepare(tuple(spec[0]), spec[2], spec[3], kernel_cache())

    def native(self, compiled: Compiled, plan):
        """[entry, allocator, out shape, dtype, weight, last buffer] for a replay: ``entry(*inputs,
        allocator(shape, dtype))`` runs the kernel, where a transposed-weight site passes
        ``weight(inputs[1])`` as the weight; the last slot is the replay's, for the output buffer it
        allocated last (which it may keep). None where there is no entry (or its trampoline is not
        ready)."""
        spec = self.native_spec(compiled, plan)
        if spec is None:
            return None
        pattern, consts, nargs, release, alloc = spec
        e = entry.make(compiled.addr, tuple(pattern), consts, nargs, release)
        weight = self.transposed if plan[4].get("wt") else _same
        return None if e is None else [e, alloc, plan[2], plan[3], weight, None]

    def frozen(self, w) -> bool:
        """Whether w is a fixed weight (see ``_frozen``); the weight last transposed is known to be."""
        e = self.wcache
        return (e is not None and e[0] is w) or _frozen(w)

    def transposed(self, w):
        """The contiguous transpose of a read-only weight, made once per array."""
        e = self.wcache
        if e is not None and e[0] is w:
            return e[1]
        t = np.ascontiguousarray(w.T)
        self.wcache = (w, t)
        return t

    def ptr(self, i: int, a) -> int:
        """a's data pointer; remembered for the last array seen at position i (weights and reused
        output buffers repeat). The entry holds a reference, so the array cannot be freed and
        its id reused while it is remembered."""
        if i >= len(self.ptrs):          # (a fused program with many inputs)
            return data_pointer(a)
        e = self.ptrs[i]
        if e is not None and e[0] is a:
            return e[1]
        p = data_pointer(a)
        self.ptrs[i] = (a, p)
        return p


def _same(x):
    return x


def _frozen(x) -> bool:
    """A 2-D array that owns its data and cannot be written (a Parameter's): its value is fixed
    for as long as the array lives."""
    return type(x) is _ND and x.ndim == 2 and not x.flags.writeable and x.flags.owndata


class _Shape:
    """Stands for the matmul product while planning its epilogue (only shape and dtype are read)."""

    ndim = 2

    def __init__(self, shape, dtype):
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.ndim = len(self.shape)


def _is_tensor(x) -> bool:
    return isinstance(x, (np.ndarray, _Shape)) and x.ndim > 0


def _contiguous_strides(shape, itemsize: int) -> tuple:
    out, step = [], itemsize
    for n in reversed(tuple(shape)):
        out.append(step)
        step *= max(int(n), 1)
    return tuple(reversed(out))


def _elementwise_caller(compiled: Compiled, p: dict, output, ptr):
    """``go(inputs, out)`` for an elementwise kernel; ``output`` (when given) picks or makes the
    output buffer, else the caller's ``out`` is written in place."""
    dims, kinds, strides = p["dims"], p["kinds"], p["strides"]
    spec = list(enumerate(zip(kinds, strides)))
    fn = compiled.fn
    d0, d1, d2 = dims
    split = compiled.level >= 3 and d0 * d1 * d2 >= PARALLEL_MIN and d0 >= 2

    def go(inputs, out):
        if output is not None:
            out = output(out)
        args = []
        for j, (kind, s) in spec:
            if kind == "t":
                args += [ptr(j, inputs[j]), s[0], s[1]]
            else:
                args.append(float(inputs[j]))
        po = data_pointer(out)
        if split:
            _parallel(lambda s, e: fn(s, e, d1, d2, po, *args), d0)
        else:
            fn(0, d0, d1, d2, po, *args)
        return out
    return go


def _parallel(call, n):
    pool = _threads()
    workers = pool._max_workers
    step = (n + workers - 1) // workers
    futs = [pool.submit(call, s, min(n, s + step)) for s in range(0, n, step)]
    for f in futs:
        f.result()


def stats() -> dict:
    return kernel_cache().snapshot()



# how a Site plans each jit-able row (opcodes.JITABLE: the rows whose ``compiled`` is "kernel")
PLANNERS = {"FUSED_ELEMENTWISE": "_plan_elementwise", "FUSED_MATMUL": "_plan_matmul", "SOFTMAX": "_plan_row",
            "LAYER_NORM": "_plan_row", "FUSED_CONV": "_plan_conv",
            "MAX_POOL2D": "_plan_conv"}


class Accelerator:
    """What the interpreter asks when it links a Code: a Site for each jit-able instruction."""

    ops = JITABLE
    config = _JIT          # the live jit_config (its "jit_level")

    def site(self, code, index: int):
        sites = code.jit_sites
        s = sites.get(index)
        if s is None:
            s = sites[index] = Site(code, index)
        return s


ACCELERATOR = Accelerator()
