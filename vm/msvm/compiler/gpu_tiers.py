"""The tier manager on the GPU device: which code runs each jit-able instruction of a Code
linked for the GPU, and when its kernel compiles.

The same instructions as on the CPU (``opcodes.JITABLE``: FUSED_ELEMENTWISE, FUSED_MATMUL,
SOFTMAX, LAYER_NORM) get a ``GpuSite``; the policy is ``tiers.Site``'s: at jit_level "auto" a
call at a shape class without a kernel runs the L1 reference kernel (on CuPy arrays, through the
device layer) and queues the L2 compile (shape-generic: dims are kernel arguments) on the
background compiler; after ``l3_after`` calls at one concrete shape the L3 kernel (dims are
constants, codegen O3) is queued, for at most ``tiers.L3_SHAPES`` shapes (more: the site is
polymorphic and stays on L2). "L2"/"L3" compile that tier synchronously; "L1" never compiles.
A compile that fails (an op NVPTX cannot emit without libdevice, a budget) leaves that class on L1.

Kernels are ``compiler/gpu.py``'s: PTX from ``lower_gpu`` loaded through CuPy, matmuls through
cuBLAS (``cupy.matmul``) with the fused epilogue as a generated kernel over the product; they
launch on CuPy's current stream, which is the frame's (``ALLOC_DEVICE_MEM``). The kernel cache
key includes the GPU architecture (``gpu.kernel_key``).

``GpuSite.decide`` is the whole dispatch decision (tier, kernel IR, cache key) from the inputs'
shapes, dtypes and layouts; it needs no GPU, so the CPU tests check it (and run ``ptxas`` on
what it decides).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time

from .. import context, events, log, reasons
from ..bytecode.disasm import display_name
from ..bytecode.opcodes import JITABLE
from . import build, tiers
from .gpu import GpuRuntime, elementwise_ir, kernel_key, row_ir
from .lower import Unsupported
from .planning import KINDS

_JIT = context._ctx["jit_config"]
_FLOATS = ("float32", "float64")


class Decision:
    """What a call runs: ``level`` (2 or 3), the kernel IR to compile (None: cuBLAS alone),
    its cache key, and how to launch (``kind``: "elementwise" | "rows" | "matmul", ``args``)."""

    __slots__ = ("level", "kernel", "key", "kind", "args", "shape_key", "class_key")

    def __init__(self, level, kernel, key, kind, args, class_key, shape_key):
        self.level, self.kernel, self.key, self.kind, self.args = level, kernel, key, kind, args
        self.class_key, self.shape_key = class_key, shape_key

    def __repr__(self):
        return f"<L{self.level} {self.kind} {self.kernel.text() if self.kernel is not None else 'cuBLAS'}>"


def _is_tensor(x) -> bool:
    return hasattr(x, "shape") and hasattr(x, "dtype") and len(x.shape) > 0


def _contiguous(x) -> bool:
    return bool(x.flags.c_contiguous)


class GpuSite:
    """One jit-able instruction of one Code on the GPU: its kernels per shape class / shape."""

    def __init__(self, code, index: int, arch: str, version: str, runtime=None, stats=None):
        ins = code.instrs[index]
        self.code, self.index, self.ins = code, index, ins
        self.op = ins.op.name
        self.args = code.decode_args(ins)
        self.name = display_name(ins)
        self.arch, self.version, self.rt = arch, version, runtime
        self.ready: dict = {}        # cache key -> True (compiled and loaded) | "pending" | "failed"
        self.seen: dict = {}         # concrete shapes -> calls (auto)
        self.l3_shapes: set = set()
        self.polymorphic = False
        self.plans: dict = {}        # (shapes, dtypes, layout) -> (class key, shape key, kind, build) | None
        self.tier_history: list = []
        self.stats = stats if stats is not None else {"hits": 0, "misses": 0, "failures": 0}
        self.lock = threading.Lock()

    # --- what runs
    def __call__(self, inputs, reference, out=None):
        level = _JIT["jit_level"]
        if level == "L1":
            return reference(*inputs)
        d = self.decide(inputs, level)
        if d is None:
            return reference(*inputs)
        state = self.ready.get(d.key, None) if d.kernel is not None else True
        if state is None:
            self.compile(d, sync=level != "auto")
            state = self.ready.get(d.key)
        if state is not True:
            self.stats["misses"] += 1
            return reference(*inputs)
        self.stats["hits"] += 1
        return self.launch(d, inputs, out)

    def fast_for(self, inputs):
        """(The replay's prepared-caller hook: the GPU sites have none; every call decides.)"""
        return None

    def decide(self, inputs, level: str = "auto"):
        """The Decision for these inputs at this jit_level, None where only L1 applies. At "auto"
        it counts the call toward L3 (``l3_after`` calls at one shape) and asks for the L3 kernel
        once that many were seen; until that kernel is ready it decides L2."""
        plan = self.plan(inputs)
        if plan is None:
            return None
        class_key, shape_key, kind, build = plan
        if level == "L2":
            return self._decision(2, plan)
        if level == "L3":
            return self._decision(3, plan)
        if shape_key in self.l3_shapes:       # its L3 kernel was asked for: used once it is loaded
            d3 = self._decision(3, plan)
            if d3.kernel is None or self.ready.get(d3.key) is True:
                return d3
            return self._decision(2, plan)
        if not self.polymorphic:
            n = self.seen.get(shape_key, 0) + 1
            self.seen[shape_key] = n
            if len(self.seen) > tiers.L3_SHAPES:
                self.polymorphic = True
                self.seen.clear()
            elif n >= context.jit_option("l3_after"):
                self.l3_shapes.add(shape_key)
                d3 = self._decision(3, plan)
                if d3.kernel is not None and d3.key not in self.ready:
                    self.compile(d3, sync=False)
        return self._decision(2, plan)

    def _decision(self, level: int, plan) -> Decision:
        class_key, shape_key, kind, build = plan
        kernel, args = build(level)
        key = kernel_key(kernel, level, self.arch, self.version) if kernel is not None else None
        return Decision(level, kernel, key, kind, args, class_key, shape_key)

    # --- planning (no GPU needed: shapes, dtypes and layouts only)
    def plan(self, inputs):
        ck = tuple((tuple(x.shape), str(x.dtype), _contiguous(x)) if _is_tensor(x) else
                   ("0d", str(x.dtype)) if hasattr(x, "dtype") else type(x) for x in inputs)
        if ck in self.plans:
            return self.plans[ck]
        try:
            p = getattr(self, "_plan_" + KINDS[self.op])(inputs)       # (a planner per kind, as the CPU's)
        except Unsupported as e:
            log.logger.debug("GPU site %s: L1 only for %s (%s)", self.name, ck, e)
            p = None
        self.plans[ck] = p
        return p

    @staticmethod
    def _one_float_dtype(tensors, strided_ok: bool = False) -> str:
        dts = {str(x.dtype) for x in tensors}
        if len(dts) != 1:
            raise Unsupported("mixed dtypes")
        d = dts.pop()
        if d not in _FLOATS:
            raise Unsupported(f"dtype {d}")
        if not strided_ok and not all(_contiguous(x) for x in tensors):
            raise Unsupported("a strided input (the kernels take C-contiguous inputs)")
        return d

    def _elementwise_parts(self, program, shapes, scalars_0d, d):
        for x in scalars_0d:
            if str(x.dtype) != d:
                raise Unsupported("0-d input of another dtype")
        if any(n[0] == "CAST" and getattr(n[1], "name", n[1]) != d for n in program):
            raise Unsupported("cast to another dtype")
        elementwise_ir(program, shapes, d, 2)          # (raises Unsupported when it cannot collapse)

    def _plan_elementwise(self, inputs):
        program = self.args[0]
        tensors = [x for x in inputs if _is_tensor(x)]
        if not tensors:
            raise Unsupported("no tensor inputs")
        d = self._one_float_dtype(tensors)
        shapes = tuple(tuple(x.shape) if _is_tensor(x) else None for x in inputs)
        self._elementwise_parts(program, shapes, [x for x in inputs if hasattr(x, "dtype") and not _is_tensor(x)], d)
        ir2 = elementwise_ir(program, shapes, d, 2)
        cls = ("ew", ir2[0].kinds, ir2[0].bcast, d)

        def build(level):
            return elementwise_ir(program, shapes, d, level)[0], (program, d)
        return cls, (cls, ir2[2]), "elementwise", build

    def _plan_matmul(self, inputs):
        ta, tb, batched, program, _n = self.args
        a, b = inputs[0], inputs[1]
        if not (_is_tensor(a) and _is_tensor(b)) or len(a.shape) < 2 or len(b.shape) < 2:
            raise Unsupported("matmul of vectors or scalars")
        d = self._one_float_dtype([a, b], strided_ok=True)      # (cuBLAS takes strided operands: cupy.matmul)
        m = a.shape[-1] if ta else a.shape[-2]
        n_ = b.shape[-2] if tb else b.shape[-1]
        import numpy as np

        batch = tuple(np.broadcast_shapes(tuple(a.shape[:-2]), tuple(b.shape[:-2])))
        out_shape = batch + (m, n_)
        extras = list(inputs[2:])
        tensors = [x for x in extras if _is_tensor(x)]
        if tensors:
            self._one_float_dtype(tensors)
            if str(tensors[0].dtype) != d:
                raise Unsupported("mixed dtypes")
        trivial = tuple(program) in ((("in", 0),), ())
        shapes = (out_shape,) + tuple(tuple(x.shape) if _is_tensor(x) else None for x in extras)
        if not trivial:
            self._elementwise_parts(program, shapes, [x for x in extras if hasattr(x, "dtype") and not _is_tensor(x)],
                                    d)
        cls = ("mm", bool(ta), bool(tb), d, None if trivial else elementwise_ir(program, shapes, d, 2)[0].bcast)

        def build(level):
            epi = None if trivial else elementwise_ir(program, shapes, d, level)[0]
            return epi, (() if trivial else program, bool(ta), bool(tb))
        return cls, (cls, tuple(a.shape), tuple(b.shape), shapes[1:]), "matmul", build

    def _plan_attention(self, inputs):       # (issue 18: FUSED_ATTENTION runs its L1 kernel on the GPU)
        raise Unsupported("attention on the GPU runs the L1 kernel (two products, the softmax)")

    def _plan_conv(self, inputs):       # (issue 18: FUSED_CONV has CPU kernels only; the L1 kernel runs it)
        raise Unsupported("no GPU convolution kernel")

    def _plan_row(self, inputs):
        x = inputs[0]
        if not _is_tensor(x):
            raise Unsupported("row kernel of a scalar")
        n = x.shape[-1]
        if n == 0:
            raise Unsupported("rows of length 0")
        if self.op == "SOFTMAX":
            if self.args[0] not in (-1, len(x.shape) - 1):
                raise Unsupported("softmax not over the last axis")
            d = self._one_float_dtype([x])
            op, g, b, eps = "softmax", None, None, 0.0
        elif self.op in ("FUSED_ADD_LAYER_NORM", "FUSED_RMS_NORM"):   # (issue 18: CPU kernels only, the GPU's row
            # kernel has no residual nor programs: a choice of this backend, L1 runs them)
            raise Unsupported(f"{self.op} on the GPU")
        else:
            bna, bpa, eps = self.args
            if bna % len(x.shape) != len(x.shape) - 1 or bpa % len(x.shape) != len(x.shape) - 1:
                raise Unsupported("layer norm over more than the last axis")
            g, b = inputs[1], inputs[2]
            d = self._one_float_dtype([x] + [t for t in (g, b) if t is not None])
            for t in (g, b):
                if t is not None and tuple(t.shape) != (n,):
                    raise Unsupported("gamma/beta shape")
            op = "layer_norm"
        cls = ("row", op, d, g is not None, b is not None, float(eps))

        def build(level):
            return row_ir(op, n, d, g is not None, b is not None, eps, level), (op, float(eps))
        return cls, (cls, tuple(x.shape)), "rows", build

    # --- compiling and launching (the runtime: a GPU)
    def compile(self, d: Decision, sync: bool) -> None:
        with self.lock:
            if d.key in self.ready:
                return
            self.ready[d.key] = "pending"
        need = _need(self, d)

        def task():
            c0 = time.thread_time()
            try:
                with getattr(self.rt, "context", contextlib.nullcontext)():
                    _gk, steps = self.rt.kernel(d.kernel, d.level)
                reasons.check_budget(d.level, time.thread_time() - c0, build.BUDGET_S[d.level])
                self.ready[d.key] = True
                self.tier_history.append({"time": time.time(), "level": d.level, "key": d.key[:12]})
                events.emit({"type": "tier", "code": self.code.name,
                             "code_id": self.code.uid, "offset": self.ins.offset, "op": self.name,
                             "level": d.level, "device": f"cuda:{self.arch}", "steps": steps,
                             **_got(self, d, need, steps).fields()})
                if log.debug_enabled():
                    log.logger.debug("GPU L%d kernel for %s: %s", d.level, self.name, _got(self, d, need, steps).text)
            except Exception as e:  # noqa: BLE001 - any failure leaves this class on L1, counted and logged
                self.ready[d.key] = "failed"
                self.stats["failures"] = self.stats.get("failures", 0) + 1
                why = reasons.failure(e, d.level).then(need.text)
                events.emit({"type": "error", "what": "compile", "op": self.name, "level": d.level, "why": str(e),
                             "code": self.code.name, "code_id": self.code.uid, "offset": self.ins.offset,
                             "device": f"cuda:{self.arch}",
                             **why.fields()})
                log.logger.info("GPU L%d compile of %s failed, staying in L1: %s", d.level, self.name, why.text)
        if sync:
            task()
        else:
            build.worker().submit(task)

    def launch(self, d: Decision, inputs, out):
        rt = self.rt
        if d.kind == "elementwise":
            program, dtype = d.args
            if out is not None and (tuple(out.shape) != _out_shape(inputs) or str(out.dtype) != dtype
                                    or not _contiguous(out)):
                out = None
            return rt.elementwise(program, list(inputs), dtype, d.level, out=out)
        if d.kind == "rows":
            op, eps = d.args
            if op == "softmax":        # (eps 0.0: the IR, and so the key, the decision compiled)
                return rt.rows("softmax", inputs[0], eps=eps, level=d.level)
            return rt.rows("layer_norm", inputs[0], inputs[1], inputs[2], eps, d.level)
        program, ta, tb = d.args
        return rt.matmul(inputs[0], inputs[1], program, list(inputs[2:]), ta, tb, d.level)


def _need(site: GpuSite, d: Decision):
    """Why a GPU site asks for this kernel (reasons.kernel_needed), from the inputs it planned: at
    L2 those of its other shape classes, at L3 those of its other specialized shapes."""
    def plain(ck):            # (this module's plan keys, as reasons describes inputs: (shape, dtype) | None)
        return tuple(None if isinstance(x, type) else ((), x[1]) if x[0] == "0d" else (x[0], x[1]) for x in ck)
    plans = [(ck, p) for ck, p in list(site.plans.items()) if p is not None]
    mine = next((ck for ck, p in plans if p[0] == d.class_key and p[1] == d.shape_key), ())
    if d.level == 2:
        others = [plain(ck) for ck, p in plans if p[0] != d.class_key]
    else:
        shapes = site.l3_shapes if _JIT["jit_level"] == "auto" else {p[1] for _, p in plans}
        others = [plain(ck) for ck, p in plans if p[1] != d.shape_key and p[1] in shapes]
    hot = d.level == 3 and _JIT["jit_level"] == "auto"
    where = reasons.where(site.name, site.code.name, site.ins.offset, site.code.filename, site.ins.loc.line)
    return reasons.kernel_needed(where, d.level, plain(mine), others, site.seen.get(d.shape_key) if hot else None,
                                 context.jit_option("l3_after") if hot else None, variant=site.code.compile_reason)


def _got(site: GpuSite, d: Decision, need, steps: dict):
    """``need`` with where the kernel came from (its steps: memory, disk, or a compile)."""
    source = "memory" if "memory" in steps else "disk" if "disk" in steps else "compiled"
    cache = getattr(site.rt, "cache", None)
    discarded = cache.discarded.get(d.key) if cache is not None and hasattr(cache, "discarded") else None
    return reasons.kernel_source(need, source, discarded, getattr(cache, "refused", None))


def _out_shape(inputs) -> tuple:
    import numpy as np

    return tuple(np.broadcast_shapes(*[tuple(x.shape) for x in inputs if _is_tensor(x)]))


class GpuAccelerator:
    """What the interpreter asks when it links a Code for the GPU: a GpuSite per jit-able
    instruction (kept on the Code beside the CPU's ``jit_sites``)."""

    ops = JITABLE
    config = _JIT

    def __init__(self, runtime):
        self.rt = runtime
        self.arch, self.version = runtime.arch, runtime.version
        self.stats = runtime.cache.stats

    def site(self, code, index: int):
        sites = code.__dict__.setdefault("gpu_sites", {})
        key = (self.arch, index)
        s = sites.get(key)
        if s is None:
            s = sites[key] = GpuSite(code, index, self.arch, self.version, self.rt, self.stats)
        return s


_accels: dict = {}
_lock = threading.Lock()


def _cuda_runtime(dev):
    """The kernel runtime of a CUDA device (compiler/gpu.py), made with that device current."""
    with dev.cuda_device:
        return GpuRuntime()


def accelerator_for(dev):
    """The GPU accelerator for a CUDA device (or a test device's ``gpu_runtime()``), or
    None (with a warning; an error under MSVM_STRICT_DEVICE=1 naming the problem) when msvm's
    kernels cannot run there (CuPy cannot load modules, a compute capability below 8.0): the
    interpreter then runs every instruction on CuPy."""
    key = (dev.target, dev.id)
    with _lock:
        if key in _accels:
            return _accels[key]
        try:
            acc = GpuAccelerator(dev.gpu_runtime() if hasattr(dev, "gpu_runtime") else _cuda_runtime(dev))
        except Exception as e:  # noqa: BLE001 - reported, and the kernels' tier stays off
            if os.environ.get("MSVM_STRICT_DEVICE") == "1":
                raise RuntimeError(f"device_target='GPU': msvm's GPU kernels cannot run: {e}") from e
            log.logger.warning("msvm's GPU kernels cannot run on %s (%s); the interpreter runs every "
                               "instruction on CuPy (MSVM_STRICT_DEVICE=1 makes this an error)", dev.name, e)
            acc = None
        _accels[key] = acc
        return acc
