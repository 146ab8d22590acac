"""FUSED_ATTENTION's compiled tiers (issue 18; the fusion is compiler/attention.py).

Per call: ``scores = q @ k^T`` (BLAS, on q and k as they are: the heads' transposed views need no
copy) into a buffer the site keeps per shape; the program (scale, mask) over the scores in place
by an elementwise kernel; the softmax of each row by a row kernel into a second kept buffer; then
``probs @ v`` (BLAS) written straight into the output, in the layout the fused TRANSPOSE asked for
(so the heads are never copied back). Neither buffer escapes the call: nothing else reads them.

Tiers as every Site: L1 is the reference kernel (each part's own kernel in order); L2 compiles the
two kernels shape-generic (dims are arguments); L3 compiles them for the concrete shapes after
``l3_after`` calls there (for at most ``tiers.L3_SHAPES`` shapes); a compile that fails leaves the
site on L1 for that shape class. The plan is ``planning.plan_attention``. Not compiled (L1, said
once per reason): float16 and ints, batch dims that broadcast, empty inputs, extras that are not
contiguous.
"""

from __future__ import annotations

import time

import numpy as np

from .. import context, events, log
from .build import BUDGET_S, compile_kernel, kernel_cache, worker
from .callconv import elementwise_caller
from .entry import data_pointer
from .kir import Elementwise, RowKernel
from .planning import Plan
from .tiers import _JIT, L3_SHAPES, Site

_ND = np.ndarray
KEEP_BUFFERS = 4         # score shapes whose two buffers a site keeps between calls


class AttentionSite(Site):
    """The Site of one FUSED_ATTENTION instruction: two kernels per tier and shape class."""

    def __init__(self, code, index: int):
        super().__init__(code, index)
        self.buffers: dict = {}        # (scores shape, dtype) -> [scores, probs] (taken while a call runs)

    def fast_for(self, inputs):        # (a replay calls the site itself: no prepared caller, no native entry)
        return None

    def plan(self, inputs) -> Plan | None:
        """The Plan (planning.plan_attention) for these inputs, or None when only L1 applies."""
        ck = tuple([(x.shape, x.dtype) if type(x) is _ND else None for x in inputs])
        p = self.plans.get(ck)
        if p is None:
            if ck in self.plans:
                return None
            p = self.plans[ck] = self._make_plan(inputs)
            if p is None:
                return None
        for x in inputs[2:-1]:       # (q, k and v go to BLAS as they are; the program's extras must be dense)
            if type(x) is _ND and x.ndim > 0 and not x.flags.c_contiguous:
                self._l1(inputs, "a strided mask or extra input of the scores' program")
                return None
        return p

    def __call__(self, inputs, reference, out=None):
        level = _JIT["jit_level"]
        if level == "L1":
            return reference(*inputs)
        p = self.plan(inputs)
        if p is None:
            return reference(*inputs)
        cls, key = p.cls, p.key
        k3 = self.l3.get(key)
        if isinstance(k3, tuple) and level != "L2":
            self.stats["hits"] += 1
            return self.go(k3, p, inputs)
        if level == "L3":
            if k3 is None:
                self.compile(3, p, sync=True)
                k3 = self.l3.get(key)
            self.stats["misses"] += 1
            return self.go(k3, p, inputs) if isinstance(k3, tuple) else reference(*inputs)
        k2 = self.l2.get(cls)
        if k2 is None:
            self.compile(2, p, sync=(level == "L2"))
            k2 = self.l2.get(cls)
        if level == "auto" and k3 is None and not self.polymorphic:
            n = self.seen.get(key, 0) + 1
            self.seen[key] = n
            if len(self.seen) > L3_SHAPES:
                self.polymorphic = True
                self.seen.clear()
            elif n >= context.jit_option("l3_after"):
                self.compile(3, p, sync=False)
        if isinstance(k2, tuple):
            self.stats["hits"] += 1
            return self.go(k2, p, inputs)
        self.stats["misses"] += 1
        return reference(*inputs)

    def kernels_ir(self, level: int, p: Plan):
        ep = p.details["epi"].details
        dtype = str(p.dtype)
        epi = Elementwise(ep["program"], ep["kinds"], tuple(ep["bcast"]), dtype, ep["dims"] if level == 3 else None)
        row = RowKernel("softmax", dtype, False, False, 0.0, p.details["n"] if level == 3 else None)
        return epi, row

    def compile(self, level: int, p, sync: bool):
        table, key = (self.l2, p.cls) if level == 2 else (self.l3, p.key)
        if key in table:
            return
        table[key] = "pending"

        def task():
            t0 = time.perf_counter()
            try:
                info = self.info(p.details["scores"], p.dtype)
                made = tuple(compile_kernel(k, level, info) for k in self.kernels_ir(level, p))
                if time.perf_counter() - t0 > BUDGET_S[level]:
                    raise TimeoutError(f"compile took {time.perf_counter() - t0:.2f}s, budget {BUDGET_S[level]}s")
                table[key] = made
                self.tier_history.append({"time": time.time(), "level": level, "shape": list(p.details["scores"])})
                events.emit({"type": "tier", "code": self.code.name, "offset": self.ins.offset, "op": self.name,
                             "level": level, "shape": list(p.details["scores"])})
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

    def go(self, kernels, p, inputs):
        epi_c, row_c = kernels
        d, det = p.dtype, p.details
        ck = (p.key, epi_c.key)          # the epilogue's caller: its dims and strides are this shape's
        epi = self.callers.get(ck)
        if epi is None:
            if len(self.callers) > 64:
                self.callers.clear()
            epi = self.callers[ck] = elementwise_caller(epi_c, det["epi"].details, None, lambda j, a: data_pointer(a))
        q, k, v = inputs[0], inputs[1], inputs[-1]
        bkey = (det["scores"], d)
        bufs = self.buffers.pop(bkey, None)
        if bufs is None:
            if len(self.buffers) >= KEEP_BUFFERS:
                self.buffers.clear()
            bufs = [np.empty(det["scores"], d), np.empty(det["scores"], d)]
        scores, probs = bufs
        np.matmul(q, np.swapaxes(k, -1, -2), out=scores)
        epi([scores] + list(inputs[2:-1]), scores)
        row_c.fn(0, det["rows"], det["n"], data_pointer(probs), data_pointer(scores), None, None)
        layout = det["layout"]
        if layout:
            res = np.empty(p.out_shape, d)
            np.matmul(probs, v, out=res.transpose(np.argsort(layout)))
        else:
            res = np.matmul(probs, v)
        self.buffers[bkey] = bufs
        return res
