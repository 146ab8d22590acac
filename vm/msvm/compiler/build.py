"""Building kernels: the background compile thread, ``compile_kernel`` (lower, compile with
LLVM or load from the kernel cache, load) and the BLAS the matmul kernels call.

Each compile reports the article's seven steps (Parse, Shape Resolution, IR Generation,
Fusion, Hardware Mapping, Code Generation, Kernel Cache: README says what each times) as a
``compile`` event and, at DEBUG, as ``[MS]`` lines, each with why (``msvm.reasons``). The
tier policy that decides what to compile is ``tiers.Site``.
"""

from __future__ import annotations

import atexit
import copy
import ctypes
import itertools
import os
import queue
import sys
import threading
import time

import numpy as np

from .. import context, events, log, reasons
from .cache import KernelCache, make_key
from .callconv import PARALLEL_MIN, prototype
from .lower import TYPES, lower, vec_width

STEPS = ("Step1 Parse", "Step2 Shape Resolution", "Step3 IR Generation", "Step4 Fusion", "Step5 Hardware Mapping",
         "Step6 Code Generation", "Step7 Kernel Cache")
# seconds a compile may take before its site stays on L1; MSVM_COMPILE_BUDGET_SCALE stretches them
# on a slow or loaded machine (the test suite, which is not about latency, runs with 20). (issue 18) They
# count the compiling thread's CPU time (``time.thread_time``), not the wall clock: on a shared machine
# the wall clock counts the other processes' turns too. Measured (2 cores, four other jobs running, a
# fresh kernel cache): BERT-base's FUSED_MATMUL_BIAS_GELU_TANH L2 compile took 0.312 s by the wall
# clock, over 0.25 s, and that site then ran its L1 kernels (BLAS, then the GELU's numpy passes) at
# every new length until an L3 kernel came, and for good once the site went polymorphic (a stream of
# lengths).
BUDGET_S = {level: s * float(os.environ.get("MSVM_COMPILE_BUDGET_SCALE", "1") or 1)
            for level, s in {2: 0.25, 3: 2.0}.items()}
_JIT = context._ctx["jit_config"]        # the live jit_config dict (set_context updates it in place)

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
    """One background thread; queued compiles run in order, those submitted ``later`` only when no
    other is queued (a hot site's optimized shape-generic kernel, ``Site._promote``, must not hold up
    another site's first kernel); exit drops what is queued."""

    def __init__(self):
        self.q: queue.PriorityQueue = queue.PriorityQueue()     # (priority, order, task)
        self.order = itertools.count()
        self.stopping = False
        self.busy = threading.Event()
        self.ready = threading.Event()        # (LLVM loaded and its start-up's pages given back: ``loop``)
        self.nudged = False                   # (a release is queued for LLVM's use on another thread: llvm_used)
        self.thread = threading.Thread(target=self.loop, name="msvm-jit", daemon=True)
        self.thread.start()

    def loop(self):
        try:
            self.warm()
            _release()
        finally:
            self.ready.set()
        while True:
            task = self.q.get()[2]
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
                if self.q.empty():          # (before task_done: wait_for_compiles returns after it)
                    self.nudged = False     # (a use after this point queues another release)
                    _release()
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

    def submit(self, task, later: bool = False):
        if not self.stopping:
            self.q.put((1 if later else 0, next(self.order), task))

    def drain(self, timeout=None):
        """Wait for LLVM's start-up and the queued compiles (tests, benchmarks)."""
        end = None if timeout is None else time.time() + timeout
        if not self.ready.wait(timeout):
            return False
        while self.q.unfinished_tasks:
            if end is not None and time.time() > end:
                return False
            time.sleep(0.001)
        return True

    def stop(self):
        self.stopping = True          # queued compiles are dropped; the running one finishes
        self.q.put((-1, next(self.order), None))
        self.thread.join(timeout=5)


def llvm_used() -> None:
    """LLVM compiled or linked on a thread other than the worker's (codegen.ON_USE: a kernel or a native
    entry loaded from the disk cache, a compile the caller waited for): the worker releases its memory
    once it is idle (``release_compiler_memory``), queued once until the worker starts that release (a
    first call loads its kernels one after another)."""
    w = _worker
    if w is None or threading.current_thread() is w.thread or w.nudged:
        return
    w.nudged = True
    w.submit(_nothing)


def _nothing() -> None:
    pass


def _release() -> None:
    """``release_compiler_memory`` on the worker: a failure there is logged, never the worker's end."""
    try:
        release_compiler_memory()
    except Exception as e:  # noqa: BLE001 - memory given back or not, compiles go on
        log.logger.debug("JIT worker: releasing the compiler's memory failed: %s", e)


RELEASE_ENV = "MSVM_RELEASE_COMPILER"     # "0": LLVM's pages and freed heap stay resident when idle
_LLVM_TEXT: list = []                     # [(start, end)] of libllvmlite's read-only file mappings, once read


def release_compiler_memory() -> int:
    """Give back what compiling left resident once the compiler is idle (issue 18: a serving process's
    memory): LLVM's freed heap (glibc's ``malloc_trim``) and the pages of LLVM's own code and constants
    that the compiles touched (``madvise(MADV_DONTNEED)`` on libllvmlite's read-only file mappings:
    clean pages of a file, which the next compile faults back in from the page cache; a mapping holding
    any page of its own, ``Anonymous`` in smaps, is left alone). Returns the bytes of mappings advised.
    Measured (bench/peers.py's peak of a steady forward at 224, one core, MiB, a process that compiled
    its kernels / found them in the kernel cache): MobileNet v2 73.5 / 36.5 before, 41.6 / 36.0 after;
    ResNet-50 165.7 / 128.5 before, 138.0 / 128.5 after. Linux with glibc only; elsewhere nothing."""
    if os.environ.get(RELEASE_ENV) == "0" or not sys.platform.startswith("linux"):
        return 0
    libc = _libc()
    if libc is None:
        return 0
    try:
        libc.malloc_trim(0)
    except AttributeError:            # (not glibc)
        return 0
    released = 0
    for start, end in _llvm_text():
        if libc.madvise(start, end - start, _MADV_DONTNEED) == 0:
            released += end - start
    return released


_MADV_DONTNEED = 4


def _libc():
    if not _LIBC:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
            libc.malloc_trim.argtypes = [ctypes.c_size_t]
            _LIBC.append(libc)
        except (OSError, AttributeError, TypeError):
            _LIBC.append(None)
    return _LIBC[0]


_LIBC: list = []


def _llvm_text() -> list:
    """[(start, end)]: libllvmlite's read-only file mappings (its code and constants) with no page of
    their own, in memory or swapped out (smaps' Anonymous and Swap both 0: a relocated read-only part
    has pages of its own, written before it was made read-only, and is left alone), read from
    /proc/self/smaps once (a library's mappings do not move; read as bytes: a path need not be UTF-8)."""
    if _LLVM_TEXT:
        return _LLVM_TEXT[0]
    out, cur = [], None
    try:
        with open("/proc/self/smaps", "rb") as f:
            for line in f:
                head = line.split(None, 5)
                if len(head) >= 5 and b"-" in head[0] and not head[0].endswith(b":"):
                    path = head[5].strip() if len(head) > 5 else b""
                    cur = None
                    if head[1] in (b"r-xp", b"r--p") and os.path.basename(path).startswith(b"libllvmlite"):
                        a, b = (int(v, 16) for v in head[0].split(b"-"))
                        cur = [a, b, 0, 0]
                        out.append(cur)
                elif cur is not None and head and head[0] in (b"Anonymous:", b"Swap:"):
                    cur[2 if head[0] == b"Anonymous:" else 3] = int(head[1])
    except OSError:
        pass
    _LLVM_TEXT.append([(a, b) for a, b, anon, swap in out if anon == 0 and swap == 0])
    return _LLVM_TEXT[0]


def _after_fork() -> None:        # (the worker's thread is not in a forked child: a new one there)
    global _worker, _lock
    _worker = None
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def worker() -> _Worker:
    global _worker
    if _worker is None:
        with _lock:
            if _worker is None:
                _worker = _Worker()
                atexit.register(_worker.stop)
                from .codegen import ON_USE

                if llvm_used not in ON_USE:        # (a forked child's new worker: once)
                    ON_USE.append(llvm_used)
    return _worker


def warm_up() -> None:
    """Start the background compiler, which loads LLVM first (``_Worker.warm``): called when a
    Cell or a jit function is made in GRAPH_MODE, so that this happens while the program
    builds its model and inputs, not in its first call."""
    if _worker is None and _JIT["jit_level"] != "L1":
        worker()


def wait_for_compiles(timeout=None) -> bool:
    return worker().drain(timeout)


# ---------------------------------------------------------------- compiled kernels

class Compiled:
    """A loaded kernel and how to call it."""

    def __init__(self, kernel, level: int, addrs: dict, name: str, key: str):
        self.kernel, self.level, self.key = kernel, level, key
        self.addr, self.addrs, self.name = addrs[name], addrs, name
        self.fn = prototype(kernel, self.addr)      # (callconv: the arguments it takes)
        self.gemm = _gemm_pointer(kernel.dtype, kernel.packed) if kernel.kind == "matmul" else None

    def at(self, level: int) -> Compiled:
        """This kernel as a site asked for it at ``level`` (one compiled at L3 serves an L2 site too:
        ``compiled_level``); the same code, its own record of the tier."""
        if level == self.level:
            return self
        c = copy.copy(self)
        c.level = level
        return c


_blas: dict = {}


def blas() -> tuple:
    """(int bits, {dtype: gemm pointer}): numpy's own OpenBLAS (ILP64) when it ships one, so
    L3 matmuls run the same BLAS as numpy; else scipy's (LP64) through its Cython capsules."""
    if not _blas:
        _blas.update(_numpy_blas() or _scipy_blas())
    return _blas["bits"], _blas["gemm"]


BLAS_THREADS_ENV = "MSVM_BLAS_THREADS"     # "keep": leave the BLAS's thread count as it is


def blas_single() -> bool:
    """(issue 18) Set the OpenBLAS numpy and the matmul kernels call to one thread, once msvm's
    kernel pool splits work (callconv.submit): after a call with two threads OpenBLAS's workers
    spin for a while on the cores the pool's threads need, and both lose (the conv docstring's
    3.3x; BERT/GPT-2 figures in compiler/gemm.py's split section). The products that stay in BLAS
    (attention's batched ones, more than gemm.ROWS rows) then run on one thread. Unless
    MSVM_BLAS_THREADS is "keep"; a number sets that many. False where no such control is found."""
    want = os.environ.get(BLAS_THREADS_ENV, "")
    if want == "keep":
        return False
    n = int(want) if want.isdigit() and int(want) > 0 else 1
    import glob

    for path in glob.glob(os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs",
                                       "libscipy_openblas64_*")):
        try:
            ctypes.CDLL(path).scipy_openblas_set_num_threads64_(ctypes.c_int(n))
        except (OSError, AttributeError):
            continue
        return True
    return False


_core: list = []


def blas_core() -> str | None:
    """(issue 18) The kernel family numpy's OpenBLAS picked for this CPU at load time
    (``openblas_get_corename``: "haswell", "skylakex", "zen", ...), lower case; None where it cannot
    be asked. compiler/gemm.py's ``use_packed`` reads it: OpenBLAS runs Zen 5 on its AVX2 kernels."""
    if not _core:
        import glob

        name = None
        for path in glob.glob(os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs",
                                           "libscipy_openblas64_*")):
            try:
                fn = ctypes.CDLL(path).scipy_openblas_get_corename64_
            except (OSError, AttributeError):
                continue
            fn.restype = ctypes.c_char_p
            name = (fn() or b"").decode(errors="replace").strip().lower() or None
            break
        _core.append(name)
    return _core[0]


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


def _gemm_pointer(dtype: str, packed: bool = False) -> int:
    if packed:                       # (issue 18: msvm's own product by a packed weight, compiler/gemm.py)
        from .gemm import pointer

        return pointer(dtype)
    return blas()[1][dtype]


def compiled_level(kernel, level: int) -> int:
    """The tier a kernel is compiled as when a site asks for it at ``level``: L3 for one whose
    ``opt_level`` says so (shape-generic kernels compiled with the IR passes and O3 at L2 too: a
    convolution's), held to that tier's budget (``BUDGET_S``)."""
    return max(level, getattr(kernel, "opt_level", 0))


def compile_kernel(kernel, level: int, info: dict, cached_only: bool = False) -> Compiled | None:
    """Lower, compile (or load from the cache) and load one kernel; emits the compile event.
    ``cached_only``: only what the cache (memory or disk) holds, else None. ``info`` may carry
    ``parse_s``/``plan_s`` (the caller's Step1/Step2) and ``need`` (a reasons.Reason: why the
    site asked for this kernel). What each step times: README, "The seven compile steps"."""
    from .codegen import codegen

    cache = kernel_cache()
    steps = dict.fromkeys(STEPS, 0.0)
    steps["Step1 Parse"] = info.get("parse_s", 0.0)            # the kernel IR built from the instruction
    steps["Step2 Shape Resolution"] = info.get("plan_s", 0.0)  # its shape class, collapsed dims, strides
    t_all = time.perf_counter()
    t0 = time.perf_counter()
    cg = codegen()
    mapping = _mapping(kernel, level, cg)
    steps["Step5 Hardware Mapping"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    text = kernel.text()
    # (a kernel compiled as L3 at either tier, ``opt_level``, is one object: the taps product a
    # convolution site asks for at L2 is the one its caller runs, gemm.taps_function, compiled at L3)
    key = make_key(text, compiled_level(kernel, level), "cpu", cg.version, cg.target_id)
    name = f"msvm_{kernel.name}_{key[:12]}"
    with cache.lock:
        hit = cache.mem.get(key)
    if hit is not None:            # (another site, or an earlier Code, compiled it in this process)
        steps["Step7 Kernel Cache"] = time.perf_counter() - t0
        _announce_kernel(info, level, key, "memory", steps, time.perf_counter() - t_all, mapping, cache)
        return hit.at(level)
    if log.debug_enabled() and not cached_only:
        need = info.get("need")
        log.logger.debug("JIT compiling %s (shape=%s, dtype=%s) at L%d%s...", info.get("op"), info.get("shape"),
                         info.get("dtype"), level, f" because {need.text}" if need is not None else "")
    names = [name] + ([f"{name}_epi"] if kernel.kind == "matmul" and kernel.epilogue and not kernel.packed else [])
    disk = cache.load(key, lambda obj: cg.load(obj, names))     # an entry that does not link is discarded
    if disk is None and cached_only:        # (a discarded entry stays in cache.discarded: the compile says so)
        return None
    lookup = time.perf_counter() - t0
    if disk is not None:
        addrs, obj = disk
        source = "disk"
    else:
        source = "compiled"
        t0 = time.perf_counter()
        ir = lower(kernel, name, cg.features)
        steps["Step3 IR Generation"] = time.perf_counter() - t0
        steps["Step4 Fusion"] = info.get("fusion_s", 0.0)
        # (issue 18: a convolution's L2 kernel is shape-generic but compiled as L3 is, ``opt_level``:
        # it is a polymorphic site's steady state, and there are few of them; its text says so: the key)
        obj, times = cg.compile(ir, compiled_level(kernel, level))
        steps["Step6 Code Generation"] = times["parse"] + times["optimize"] + times["codegen"]
        t0 = time.perf_counter()
        addrs = cg.load(obj, names)
        lookup += time.perf_counter() - t0
    t0 = time.perf_counter()
    compiled = Compiled(kernel, level, addrs, name, key)
    if source == "compiled":
        cache.write(key, obj, {"name": name, "level": level, "kernel": text, "created": time.time()})
    with cache.lock:
        cache.mem[key] = compiled
        cache.stats["compiles" if source == "compiled" else "disk_loads"] += 1
    steps["Step7 Kernel Cache"] = lookup + time.perf_counter() - t0
    _announce_kernel(info, level, key, source, steps, time.perf_counter() - t_all, mapping, cache, obj)
    return compiled


_functions_lock = threading.Lock()
_functions: dict = {}       # kernel entry -> its ctypes function (``kernel_function``)


def kernel_function(kernel, op: str, signature: tuple):
    """The ctypes function of a kernel entry that is called directly rather than through a Site (the
    GEMMs' own: gemm.TapsGemm, gemm_dot.DotGemm, gemm_cout.CoutGemm), compiled (or loaded from the
    kernel cache) once per process; ``signature`` spells its arguments "i64", "ptr" and "T" (the
    kernel's float type). One object per entry: pool.share knows a function by identity."""
    import ctypes

    hit = _functions.get(kernel)
    if hit is None:
        with _functions_lock:
            hit = _functions.get(kernel)
            if hit is None:
                c = compile_kernel(kernel, 3, {"op": op, "shape": [], "dtype": kernel.dtype})
                types = {"i64": ctypes.c_int64, "ptr": ctypes.c_void_p,
                         "T": ctypes.c_float if kernel.dtype == "float32" else ctypes.c_double}
                hit = ctypes.CFUNCTYPE(None, *[types[a] for a in signature])(c.addr)
                hit.compiled = c
                _functions[kernel] = hit
    return hit


def _announce_kernel(info, level, key, source, steps, elapsed, mapping, cache, obj=b"") -> None:
    """The recent key, the ``compile`` event and the ``[MS]`` lines of one kernel look-up (memory,
    disk or compiled), each with why (reasons.kernel_source)."""
    rec = _record(info, level, source, cache, key)
    cache.note_key(key, rec, source)
    # (Steps 1, 2 and 4 ran before compile_kernel: the site's kernel IR and plan, the Code's fusion share)
    total = elapsed + steps["Step1 Parse"] + steps["Step2 Shape Resolution"] + steps["Step4 Fusion"]
    ms_steps = {k: round(v * 1e3, 4) for k, v in steps.items()}
    events.emit({"type": "compile", "op": info.get("op"), "code": info.get("code"), "code_id": info.get("code_id"),
                 "offset": info.get("offset"),
                 "file": info.get("file"), "line": info.get("line"), "level": level, "key": key,
                 "shape": info.get("shape"), "dtype": info.get("dtype"), "source": source,
                 "steps": ms_steps, "ms": round(total * 1e3, 4), "fused": info.get("fused", 1), "mapping": mapping,
                 "reason": rec["reason"], "reason_kind": rec["reason_kind"]})
    if log.debug_enabled():
        if source != "memory":
            for step, v in ms_steps.items():
                extra = f", fused {info.get('fused')} ops" if step == "Step4 Fusion" else \
                    f", object size={len(obj) / 1024:.1f}KB" if step == "Step6 Code Generation" else \
                    f", {mapping}" if step == "Step5 Hardware Mapping" else ""
                log.logger.debug("%s: %.2fms%s", step, v, extra)
        how = {"disk": "loaded from disk", "memory": "found in memory"}.get(source, "compiled")
        log.logger.debug("JIT %s %s in %.2fms (L%d), cache key=%s...: %s", info.get("op"), how, total * 1e3, level,
                         key[:12], rec["reason"])


def _mapping(kernel, level: int, cg) -> dict:
    """Step5 Hardware Mapping: the target the kernel is compiled for and how it uses it (vector
    lanes, threads, streaming stores, codegen level); recorded in the compile event."""
    lanes = vec_width(cg.features, TYPES[kernel.dtype]) if kernel.dtype in TYPES else 1
    dims = getattr(kernel, "dims", None) if kernel.kind == "elementwise" else None
    threads = "per call"                  # a shape-generic kernel's split is decided per call (``callconv.caller``)
    if kernel.kind == "matmul":
        threads = "BLAS"
    elif dims is not None:
        threads = max(1, min(os.cpu_count() or 1, 8)) if dims[0] * dims[1] * dims[2] >= PARALLEL_MIN \
            and dims[0] >= 2 else 1
    return {"cpu": cg.cpu, "lanes": lanes, "threads": threads, "stream": bool(getattr(kernel, "stream", False)),
            "opt": "O3" if max(level, getattr(kernel, "opt_level", 0)) >= 3 else "O0"}


def _record(info: dict, level: int, source: str, cache, key: str) -> dict:
    """The compile's record for the recent keys and events: the site's info with why it came from there."""
    why = reasons.kernel_source(info.get("need"), source, cache.discarded.pop(key, None), cache.refused)
    return {k: v for k, v in info.items() if k not in ("need", "parse_s", "plan_s", "fusion_s")} | \
        {"level": level, **why.fields()}


def stats() -> dict:
    return kernel_cache().snapshot()

