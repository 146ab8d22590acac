"""The tier manager: which code runs each jit-able instruction, and when it compiles.

Every FUSED_ELEMENTWISE, FUSED_MATMUL, SOFTMAX and LAYER_NORM instruction of a
Code gets a ``Site``. A call at a shape class it has no kernel for runs the L1
reference kernel and queues an L2 compile (shape-generic: dims are arguments) on
the background thread; the next calls use L2. After ``l3_after`` calls at the same
concrete shapes the site queues an L3 compile (dims and strides are constants, the
L3 passes, codegen O3, BLAS row blocks for matmul) and switches to it — for
at most ``L3_SHAPES`` shapes: a site whose shapes keep changing is polymorphic and
stays on its shape-generic L2 kernel (so a stream of new batch sizes costs one
compile, not one per size), whose prepared caller then serves each layout as an L3 one
does (the fast path, a replay's remembered caller, a captured program). ``jit_level`` "L1" never
compiles; "L2"/"L3" compile that tier synchronously and never change. A compile
that fails or exceeds its budget is counted, logged, and the site stays on L1 for
that shape class; results are the same in every tier.

This module is the policy. What a call's inputs call for is ``planning.py`` (a ``Plan`` per
input layout), building a kernel (the background thread, ``compile_kernel``, the kernel cache,
BLAS) is ``build.py``, and calling it (the kernel calling convention, the prepared callers, the
native entries a replay calls) is ``callconv.py``. ``kernel_cache``, ``reset_cache``,
``wait_for_compiles``, ``stats``, ``compile_kernel`` and ``Compiled`` are re-exported here.

Each compile reports the article's seven steps (``build.compile_kernel``; README says what each
times); it, every miss and every L1 decision says why (``msvm.reasons``).
"""

from __future__ import annotations

import dataclasses
import time
import weakref

import numpy as np

from .. import context, events, gcpolicy, log, reasons
from ..bytecode.disasm import display_name
from ..bytecode.opcodes import JITABLE, KERNEL_KINDS
from ..interp.arena import Arena
from ..weights import spill, stored
from . import callconv, planning
from .buffers import ALIGN  # noqa: F401 - (re-exported: tests)
from .build import (  # noqa: F401 - (re-exported: tests, servers, bench)
    BUDGET_S,
    STEPS,
    Compiled,
    compile_kernel,
    compiled_level,
    kernel_cache,
    reset_cache,
    stats,
    wait_for_compiles,
    warm_up,
    worker,
)
from .callconv import Prepared
from .entry import data_pointer
from .lower import Unsupported
from .planning import PLANNERS, STREAM_MIN, Plan  # noqa: F401 - (re-exported: tests)

_ND = np.ndarray
_JIT = context._ctx["jit_config"]        # the live jit_config dict (set_context updates it in place)
L3_SHAPES = 2                   # a site specializes (L3) for at most this many concrete shapes


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
        self.promoting: set = set()   # shape classes whose light L2 kernel is compiling again optimized
        self.ptrs = [None] * 7   # per input position: (last weight or arena view, its data pointer) (``ptr``)
        self.tier_history: list = []
        self.plans: dict = {}
        self.l1_why: dict = {}   # why inputs of some layouts stay in the interpreter (the planner's reason)
        self.why: dict = {}      # (level, l2/l3 key) -> reasons.Reason its kernel was asked for, or failed
        self.callers: dict = {}  # (concrete key, output shape) -> Prepared (its kernel and go(inputs, out))
        self.fast: dict = {}     # (shape, strides, dtype) per input -> Prepared, for shapes whose L3 kernel is
        #                          loaded, or, once the site is polymorphic, whose L2 kernel is final
        # a matmul by a transposed weight (Dense: x @ W.T) runs on a contiguous copy of W.T, which BLAS
        # multiplies faster for few rows; a Parameter's array is read-only, so the copy stays valid
        # while the same array is in place (``transposed``)
        self.weight_t = self.op == "FUSED_MATMUL" and bool(self.args[1]) and not self.args[2]
        # a product whose B may be a fixed weight run prepared (transposed or packed once: compiler/gemm.py):
        # the fast paths' keys say whether it is fixed, and they pass it through the prepared weight
        self.weight_prep = self.op == "FUSED_MATMUL" and not self.args[2] and (bool(self.args[1]) or not self.args[0])
        # id(weight array) -> (the array, its contiguous transpose | its packed panels, compiler/gemm.py):
        # one Code serves every Dense of its shapes (BERT-base: 48 of 768x768), so one entry per weight
        self.wcache: dict = {}
        self.pcache: dict = {}
        st = code.stack_types[index]
        n = ins.op.n_pops(self.args)
        self.in_types = st[len(st) - n:] if st else ()
        self.fused = max(1, len(ins.parts))
        self.stats = kernel_cache().stats
        n_fused = sum(1 for c in code.all_codes() for i in c.instrs if i.op.kind == "fused") or 1
        self.fusion_s = code.fusion_s / n_fused if ins.op.kind == "fused" else 0.0

    def info(self, shape, dtype, **more) -> dict:
        return {"op": self.name, "code": self.code.name,
                "code_id": self.code.uid, "offset": self.ins.offset, "file": self.code.filename,
                "line": self.ins.loc.line, "shape": list(shape), "dtype": str(dtype), "fused": self.fused,
                "fusion_s": self.fusion_s, **more}

    def where(self) -> str:
        return reasons.where(self.name, self.code.name, self.ins.offset, self.code.filename, self.ins.loc.line)

    # --- the hot path
    def __call__(self, inputs, reference, out=None):
        level = _JIT["jit_level"]
        if level == "L1":
            return reference(*inputs)
        exact = self.exact(inputs)
        pr = self.fast.get(exact)
        if pr is not None and level != "L2":     # the steady state: this exact layout has its L3 kernel
            self.stats["hits"] += 1
            return pr.go(inputs, out)
        plan = self.plan(inputs)
        if plan is None:
            return reference(*inputs)
        cls_key, shape_key = plan.cls, plan.key
        k3 = self.l3.get(shape_key)
        if isinstance(k3, Compiled) and level != "L2":      # (jit_level "L2" keeps to L2 kernels)
            self.stats["hits"] += 1
            if len(self.fast) < 16:
                self.fast[exact] = Prepared(k3, self.caller(k3, plan), self.native(k3, plan))
                gcpolicy.settle()        # (long-lived, made after the signature settled: gcpolicy)
            return self.run(k3, plan, inputs, out)
        k2 = self.l2.get(cls_key)
        if level == "L3":
            if k3 is None:
                self.compile(3, plan, sync=True)
                k3 = self.l3.get(shape_key)
                if isinstance(k3, Compiled):
                    self.stats["misses"] += 1
                    return self.run(k3, plan, inputs, out)
            self._miss(3, shape_key)
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
                self._promote()
            elif n >= context.jit_option("l3_after"):
                self.compile(3, plan, sync=False)
        if isinstance(k2, Compiled):
            self.stats["hits"] += 1
            if self.polymorphic and k3 is None and len(self.fast) < 16:
                # a polymorphic site never specializes this shape: its L2 caller is final for this layout,
                # the fast path's and a replay's (and so a captured program's: interp/capture.py)
                pr = self.fast[exact] = self.caller_for(k2, plan)
                if self.l2.get(cls_key) is not k2:      # (promoted meanwhile, fast cleared before this went in)
                    self.fast.pop(exact, None)
                gcpolicy.settle()
                return pr.go(inputs, out)
            return self.run(k2, plan, inputs, out)
        self._miss(2, cls_key)
        return reference(*inputs)

    def _miss(self, level: int, key) -> None:
        """A call that runs the L1 kernel while its kernel compiles or after it failed: counted, and
        said (a ``miss`` event, the first one per kernel at DEBUG) with why."""
        self.stats["misses"] += 1
        if events._subs or log.debug_enabled():
            why = self.why.get((level, key))
            if (self.l2 if level == 2 else self.l3).get(key) == "pending":
                why = reasons.pending(level) if why is None else why.then(reasons.pending(level).text, "pending")
            if why is None:
                return
            events.emit({"type": "miss", "code": self.code.name,
                         "code_id": self.code.uid, "offset": self.ins.offset, "op": self.name,
                         "level": level, **why.fields()})
            if log.debug_enabled() and self.why.setdefault(("logged", level, key, why.kind), why) is why:
                log.logger.debug("JIT miss: %s", why.text)

    def exact(self, inputs) -> tuple:
        """The key of ``fast``: each input's shape, strides and dtype (and, for a matmul that may
        prepare its weight, ``weight_prep``: transposed or packed, whether the weight is fixed; the
        replay's key, ``replay.site_args``, is built the same way)."""
        exact = tuple([(x.shape, x.strides, x.dtype) if type(x) is _ND else None for x in inputs])
        if self.weight_prep:
            exact += (self.frozen(inputs[1]),)
        return exact

    def fast_for(self, inputs) -> Prepared | None:
        """The prepared L3 caller for exactly these inputs' layouts (the fast path of ``__call__``),
        or None: what a replay may call directly for inputs of these layouts."""
        return self.fast.get(self.exact(inputs))

    def compile(self, level: int, plan, sync: bool):
        table, key = (self.l2, plan.cls) if level == 2 else (self.l3, plan.key)
        if key in table:
            return
        need = self.why[(level, key)] = self._need(level, plan)
        table[key] = "pending"
        shape, dtype = plan.out_shape, plan.dtype
        if not sync and self._from_cache(level, plan, table, key, need):
            return

        def task():
            try:
                compiled = self._build(level, plan, need)
                if level == 3:
                    self.prepare_native(compiled, plan)
                table[key] = compiled
                if level == 2 and self.polymorphic and light(compiled.kernel):
                    self._compile_promoted(plan, compiled)    # (light, asked before the site went polymorphic)
                self.respill()
                self._landed(level, shape)
                if level == 3:
                    self._promote(ahead=True)
            except Exception as e:  # noqa: BLE001 - any failure falls back to L1, counted and logged
                self._failed(level, table, key, e, need, shape, dtype)
        if sync:
            task()
        else:
            worker().submit(task)

    def _build(self, level: int, plan, need, optimize: bool = False) -> Compiled:
        """The kernel of this plan at ``level``, compiled (or loaded), held to its tier's budget
        (``optimize``: an L2 kernel with the IR passes and O3, ``_promote``)."""
        t0, c0 = time.perf_counter(), time.thread_time()
        kernel = self.kernel_ir(level, plan, optimize)
        info = self.info(plan.out_shape, plan.dtype, need=need, parse_s=time.perf_counter() - t0,
                         plan_s=plan.details.get("plan_s", 0.0))
        compiled = compile_kernel(kernel, level, info)
        reasons.check_budget(level, time.thread_time() - c0, BUDGET_S[compiled_level(kernel, level)])
        return compiled

    def _landed(self, level: int, shape, **more) -> None:
        """A kernel of this site is in its table: recorded in its tier history and sent as a ``tier`` event."""
        self.tier_history.append({"time": time.time(), "level": level, "shape": list(shape), **more})
        events.emit({"type": "tier", "code": self.code.name, "code_id": self.code.uid, "offset": self.ins.offset,
                     "op": self.name, "level": level, "shape": list(shape), **more})

    def _failed(self, level: int, table: dict, key, e: Exception, need, shape, dtype) -> None:
        """A compile of the kernel for ``key`` failed: the site stays in L1 there (``table[key]``), and the
        failure is counted, noted in the cache's key table, logged and sent as an ``error`` event."""
        table[key] = "failed"
        why = self.why[(level, key)] = reasons.failure(e, level).then(need.text)
        kernel_cache().stats["failures"] += 1
        kernel_cache().note_key("", self.info(shape, dtype, level=level, **why.fields()), "failed")
        events.emit({"type": "error", "what": "compile", "op": self.name, "level": level, "why": str(e),
                     "code": self.code.name, "code_id": self.code.uid, "offset": self.ins.offset, **why.fields()})
        log.logger.info("JIT L%d compile of %s failed, staying in L1: %s", level, self.name, why.text)

    def _need(self, level: int, plan: Plan):
        """Why this site asks for an L``level`` kernel for this plan (reasons.kernel_needed): the
        inputs of the kernels it has at that tier, from the plans they were made from."""
        ck = next((c for c, p in self.plans.items() if p is plan), ())
        pos = "cls" if level == 2 else "key"      # (plans by shape class for L2, by concrete shapes for L3)
        mine = getattr(plan, pos)
        table, one = self.l2 if level == 2 else self.l3, {}
        for c, p in self.plans.items():           # the inputs of one plan per kernel the site has
            if p is not None and getattr(p, pos) != mine and getattr(p, pos) in table:
                one.setdefault(getattr(p, pos), c)
        others = list(one.values())
        if level == 2:
            return reasons.kernel_needed(self.where(), 2, ck, others, variant=self.code.compile_reason)
        hot = _JIT["jit_level"] == "auto"
        return reasons.kernel_needed(self.where(), 3, ck, others, self.seen.get(plan.key) if hot else None,
                                     context.jit_option("l3_after") if hot else None)

    def _from_cache(self, level: int, plan, table, key, need=None) -> bool:
        """A kernel the cache already holds (this process compiled it for another site, or an
        earlier process left it on disk) is used by the call that asks: loading costs about what
        a small call does, and only compiles go to the background."""
        try:
            t0 = time.perf_counter()
            kernel = self.kernel_ir(level, plan)
            info = self.info(plan.out_shape, plan.dtype, need=need, parse_s=time.perf_counter() - t0,
                             plan_s=plan.details.get("plan_s", 0.0))
            found = compile_kernel(kernel, level, info, cached_only=True)
        except Exception:  # noqa: BLE001 - a kernel that cannot even be described is the compile's problem
            return False
        if found is None:
            return False
        if level == 3:
            self.prepare_native(found, plan)
        table[key] = found
        self._landed(level, plan.out_shape)
        return True

    # --- planning (planning.py)
    def plan(self, inputs) -> Plan | None:
        """The Plan for these inputs, or None when only L1 applies."""
        ck = tuple([(x.shape, x.dtype) if type(x) is _ND else None for x in inputs])
        if self.weight_prep:
            ck += (self.frozen(inputs[1]),)
        p = self.plans.get(ck)
        if p is None:
            if ck in self.plans:
                return None
            t0 = time.perf_counter()
            p = self.plans[ck] = self._make_plan(inputs)
            if p is None:
                return None
            p.details["plan_s"] = time.perf_counter() - t0      # (Step2 Shape Resolution of its kernels)
        for x in inputs:
            if type(x) is _ND and not x.flags.c_contiguous:
                self._l1(inputs, "a strided input (a view: the L1 kernel reads it in place)", strided=True)
                return None
        return p

    def _l1(self, inputs, why: str, strided: bool = False) -> None:
        """Say once per reason (and record per input layout, ``l1_why``) why these inputs run the L1
        kernel: in the log, a ``cache`` event and the recent keys (reasons.l1_only)."""
        key = tuple([(x.shape, str(x.dtype)) if type(x) is _ND else None for x in inputs])
        if key in self.l1_why:
            return
        view = next(((j, x.strides, callconv._contiguous_strides(x.shape, x.itemsize)) for j, x in enumerate(inputs)
                     if type(x) is _ND and not x.flags.c_contiguous), None) if strided else None
        r = reasons.l1_only(self.where(), key, why, view)
        if why not in self.l1_why.values():
            log.logger.info("JIT: %s at %s+0x%04x runs in L1 for these inputs: %s", self.name, self.code.name,
                            self.ins.offset, r.text)
        self.l1_why[key] = why
        x = next((x for x in inputs if type(x) is _ND), None)
        kernel_cache().note_key("", self.info(x.shape if x is not None else (), x.dtype if x is not None else "",
                                              level=1, **r.fields()), "l1")

    def _make_plan(self, inputs):
        try:
            return planning.shared_plan(self, inputs)
        except Unsupported as e:      # said once per reason and site (float16, mixed dtypes, ...)
            self._l1(inputs, str(e))
            return None

    def kernel_ir(self, level: int, plan: Plan, optimize: bool = False):
        k = planning.kernel_ir(self, level, plan)
        return optimized(k) if level == 2 and (self.polymorphic or optimize) else k

    def _promote(self, ahead: bool = False) -> None:
        """The site went polymorphic: its shape-generic (L2) kernels are its kernels from now on, so each
        one compiled light (no IR passes, O0 codegen: ~1 ms to make, for a site that may specialize soon)
        is compiled again optimized (the IR passes and O3, as L3 is) in the background and put in its
        place when it is ready; a new shape class here compiles optimized at once (``kernel_ir``).
        Measured (GPT-2 small at S=64, one core, thread CPU time, a captured forward after four lengths,
        every site polymorphic): 104.6 -> 102.8 ms (one length, every site specialized: 99.5).

        ``ahead``: the site's first specialized (L3) kernel just landed, so it is hot; its light L2
        kernels are compiled optimized then, after every other queued compile (``worker().submit``'s
        ``later``), so that a new shape met later runs an optimized kernel at once and compiles
        nothing. Before, MobileNet v2's first call at its third input size waited on 34 such compiles
        (AMD Zen 3, AVX2, one core, a fresh kernel cache: 93.9 ms = 7.35x its steady time at 192), and
        its second size ran the light kernels."""
        for cls, k in list(self.l2.items()):
            plan = next((p for p in self.plans.values() if p is not None and p.cls == cls), None)
            if isinstance(k, Compiled) and plan is not None and light(k.kernel):
                self._compile_promoted(plan, k, ahead)

    def _compile_promoted(self, plan: Plan, old: Compiled, ahead: bool = False) -> None:
        if plan.cls in self.promoting:       # (asked already: ahead, then the site went polymorphic)
            return
        self.promoting.add(plan.cls)
        ck = next((c for c, p in self.plans.items() if p is plan), ())
        was = self.why.get((2, plan.cls))
        need = self.why[(2, plan.cls)] = (reasons.promoted_ahead(self.where(), ck) if ahead else
                                          reasons.promoted(self.where(), ck, L3_SHAPES))

        def task():
            try:
                compiled = self._build(2, plan, need, optimize=True)
            except Exception as e:  # noqa: BLE001 - the light kernel still serves: said, counted, kept
                self.why[(2, plan.cls)] = was
                self.promoting.discard(plan.cls)
                kernel_cache().stats["failures"] += 1
                log.logger.info("JIT optimized L2 compile of %s failed, keeping its light kernel: %s", self.name, e)
                return
            if self.l2.get(plan.cls) is not old:
                return
            self.l2[plan.cls] = compiled
            self.fast.clear()                # (its callers are the light kernel's: made again at the next call)
            events.KERNELS_MOVED[0] += 1     # (replays and captured programs drop theirs too)
            self._landed(2, plan.out_shape, optimized=True)
        worker().submit(task, later=ahead)

    # --- calling (callconv.py)
    def run(self, compiled: Compiled, plan: Plan, inputs, out):
        return self.caller_for(compiled, plan).go(inputs, out)

    def caller_for(self, compiled: Compiled, plan: Plan) -> Prepared:
        """This kernel's caller at this plan (made once). A caller is made for a kernel and an output
        shape: shapes with the same element count can share a kernel (their shape key), never an output."""
        key = (plan.key, plan.out_shape)
        c = self.callers.get(key)
        if c is None or c.compiled is not compiled:
            if len(self.callers) > 64:        # a polymorphic L2 site: keep the table small
                self.callers.clear()
            c = self.callers[key] = Prepared(compiled, self.caller(compiled, plan))
        return c

    def caller(self, compiled: Compiled, plan: Plan):
        """``go(inputs, out) -> out`` for this kernel at this plan (``callconv.caller``)."""
        return callconv.caller(self, compiled, plan)

    def prepare_native(self, compiled: Compiled, plan: Plan) -> None:
        """Compile (or load) the trampoline this kernel's entry needs, on the compiling thread."""
        callconv.prepare_native(self, compiled, plan, kernel_cache())

    def native(self, compiled: Compiled, plan: Plan):
        """The ``callconv.Native`` a replay calls for this L3 kernel at this plan, or None."""
        return callconv.native(self, compiled, plan)

    def frozen(self, w) -> bool:
        """Whether w is a fixed weight (see ``_frozen``); a weight transposed or packed is known to be,
        unless it was made writable since (its prepared copy may be stale). A writable array is
        answered first, before the look-ups: every call of a product by a plain argument asks (the
        article Cell's x @ y: its cached call cost 0.3 us more once such products asked)."""
        if type(w) is not _ND or w.flags.writeable:
            return False
        e = self.wcache.get(id(w)) or self.pcache.get(id(w))
        return (e is not None and e[0] is w) or (w.ndim == 2 and (w.flags.owndata or stored(w)))

    def transposed(self, w):
        """The contiguous transpose of a read-only weight, made once per array (``prepared``)."""
        return self._prepared(self.wcache, "transposed", w, _transpose)

    def respill(self) -> None:
        """Spill again the weights this site holds prepared (weights.py): a kernel just compiled, and
        the calls that waited for it ran the interpreter, which read the weights themselves."""
        for cache in (self.pcache, self.wcache):
            for w, _ in list(cache.values()):
                spill(w)

    def has_packed(self, w) -> bool:
        """Whether some site holds w packed as this one would (``packed``)."""
        return shared(("packed", bool(self.args[1])), w) is not None

    def packed(self, w):
        """A read-only weight packed (compiler/gemm.py), made once per array: W [N, K] for x @ W.T (a
        Dense), B [K, N] for x @ B (GPT-2's Conv1D); ``set_data`` and ASSIGN_PARAM put a new array in
        place, which is packed again."""
        from .gemm import pack, panel_width

        tb = bool(self.args[1])
        return self._prepared(self.pcache, ("packed", tb), w, lambda a: pack(a, panel_width(a.dtype), transposed=tb))

    def _prepared(self, cache: dict, kind, w, make):
        """w's prepared form of ``kind``: this site's entry (its own cache, the hot path), else the
        one another site made (one copy per weight array, however many Codes multiply it: a variant
        per input rank, a helper inlined twice), else made here. The site that first takes it
        spills the weight (weights.py: the kernels read the prepared form)."""
        e = cache.get(id(w))
        if e is not None and e[0] is w:
            return e[1]
        p = shared(kind, w)
        if p is None:
            p = make(w)
            share(kind, w, p)
        _keep(cache, w, p)
        spill(w)                         # (the kernels read p: the weight's own pages can go)
        return p

    def ptr(self, i: int, a) -> int:
        """a's data pointer; remembered for the last array seen at position i when it is one that
        repeats and whose memory is held anyway: a read-only array (a Parameter's) or a view of the
        memory plan's arena. The entry holds a reference, so the array cannot be freed and its id
        reused while it is remembered; an activation (a new array every call) is not remembered, or
        every site would keep its last input alive between calls (issue 18: 28 MB of ResNet-50's
        resident memory at 224)."""
        if i >= len(self.ptrs):          # (a fused program with many inputs)
            return data_pointer(a)
        e = self.ptrs[i]
        if e is not None and e[0] is a:
            return e[1]
        p = data_pointer(a)
        if not a.flags.writeable or Arena.owns(a):
            self.ptrs[i] = (a, p)
        return p


WEIGHTS_KEPT = 256       # prepared weights a site keeps (oldest dropped first: arrays replaced by set_data)
_SHARED: dict = {}       # (kind, id(weight)) -> (weak reference to it, its prepared form): one per array, for every site


def light(kernel) -> bool:
    """Whether the kernel compiles light at L2 (no IR passes, O0: ``opt_level`` below 3), so a polymorphic
    site compiles it again optimized (``Site._promote``); a convolution's, and a kind without the setting, never."""
    return getattr(kernel, "opt_level", 3) < 3 and dataclasses.is_dataclass(kernel)


def optimized(kernel):
    """The kernel as compiled with the IR passes and O3 at L2 (``opt_level`` 3: a polymorphic site's)."""
    return dataclasses.replace(kernel, opt_level=3) if light(kernel) else kernel


def shared(kind, w):
    """The prepared form of ``kind`` some site made of the array w, or None."""
    e = _SHARED.get((kind, id(w)))
    return e[1] if e is not None and e[0]() is w else None


def share(kind, w, prepared) -> None:
    """Offer w's prepared form to every site; the entry goes with w (a weak reference: the table
    keeps no weight alive)."""
    key = (kind, id(w))

    def gone(r, key=key):
        e = _SHARED.get(key)
        if e is not None and e[0] is r:
            del _SHARED[key]
    try:
        _SHARED[key] = (weakref.ref(w, gone), prepared)
    except TypeError:              # (an array type without weak references: not shared)
        pass


def _transpose(w):
    t = np.ascontiguousarray(w.T)
    t.flags.writeable = False        # (fixed like its weight; ``ptr`` remembers read-only arrays)
    return t


def _keep(cache: dict, w, prepared) -> None:
    """cache[id(w)] = (w, prepared); the entry holds w, so its id is not reused while it is there."""
    if len(cache) >= WEIGHTS_KEPT:
        del cache[next(iter(cache))]
    cache[id(w)] = (w, prepared)


def _frozen(x) -> bool:
    """A 2-D array that owns its data and cannot be written (a Parameter's): its value is fixed
    for as long as the array lives."""
    return type(x) is _ND and x.ndim == 2 and not x.flags.writeable and (x.flags.owndata or stored(x))


def _site_class(op: str):
    """The Site class of a jit-able op (issue 18: an attention kernel's, FUSED_ATTENTION's, is
    compiler/attention_site.py's)."""
    if KERNEL_KINDS[op] == "attention":
        from .attention_site import AttentionSite

        return AttentionSite
    return Site


class Accelerator:
    """What the interpreter asks when it links a Code: a Site for each jit-able instruction."""

    ops = JITABLE
    config = _JIT          # the live jit_config (its "jit_level")

    def site(self, code, index: int):
        sites = code.jit_sites
        s = sites.get(index)
        if s is None:
            s = sites[index] = _site_class(code.instrs[index].op.name)(code, index)
        return s


ACCELERATOR = Accelerator()
