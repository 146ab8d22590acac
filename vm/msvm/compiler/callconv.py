"""Calling the kernels: the prepared callers of a compiled kernel at one plan, and the
native entries a replay calls instead.
"""

from __future__ import annotations

import numpy as np

from . import entry
from .buffers import ALIGN, aligned_empty
from .build import Compiled, _parallel, kernel_cache
from .entry import data_pointer
from .planning import PARALLEL_MIN

_ND = np.ndarray
RELEASE_MIN = 1 << 14           # elements from which a native entry lets other threads run (compiles)


class Callers:
    """The calling half of a ``tiers.Site``."""

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


