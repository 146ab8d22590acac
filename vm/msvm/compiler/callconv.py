"""The kernel calling convention, described once, and the callers made from it.

A compiled kernel is a C function returning void. Its arguments, by kind (T: float or double):

    elementwise  head, i64 n1, i64 n2, T* out, operands
                   head on the CPU: i64 start, i64 end (the rows [start, end) of dim 0, so a
                   caller may split them over threads); on the GPU: i64 total (elements)
    row          i64 start, i64 end, i64 n, T* out, T* x, T* gamma, T* beta    (softmax, layer norm)
                 [, T* y]    (issue 18: FUSED_ADD_LAYER_NORM, the norm of x + y)
                 [, i64 n1, i64 n2, operands]    (issue 18: FUSED_ATTENTION's softmax of program(x,
                   operands): per tensor T* data, i64 s0, s1, s2, row r = (i0 * n1 + i1) * n2 + i2 read at
                   i0 * s0 + i1 * s1 + i2 * s2; per scalar a double)
    matmul       gemm*, T* A, T* B, T* C, operands                              (gemm: the BLAS function)
                 [, i64 j0, j1 [, i64 m, k, n]]   (issue 18: by a packed weight, gemm.lower_matmul_packed:
                   its output columns [j0, j1); at L2 its dims too, one kernel for every shape)
    gemm         i64 m, i64 k, i64 n, T* A, i64 lda, T* Bp, T* C, i64 ldc       (compiler/gemm.py: B packed)
    depthwise    i64 start, i64 end, i64 C, H, W, Ho, Wo, pt, pl, lo, hi, T* out, T* x, T* w, T* bias,
                 T* zero row, per epilogue input T* (of the output's layout) or double
                   (a convolution or max pool over the planes [start, end): ``conv.py``, ``CONV_DIMS``)
    im2col       i64 c0, c1, oh0, oh1, H, W, Wo, kh, kw, sh, dh, dw, pt, pl, T* dst, T* x, T* zero row
                   (the windows of channels [c0, c1) for output rows [oh0, oh1): ``conv.BlasConv``)

``operands``: per tensor input ``T* data, i64 stride0, i64 stride1`` (in elements, along the
collapsed dims 0 and 1; dim 2 is contiguous or broadcast, as the kernel IR's ``bcast`` says),
per scalar input one ``double``. An elementwise kernel takes its tensor inputs first, then its
scalars, each group in input order (``elementwise_order``); a matmul takes its epilogue's
inputs 1.. in input order (``operand_order``).

What follows from that description: the LLVM parameters (``llvm_operands``, used by
``lower.elementwise_entry`` for the CPU and GPU kernels), the ctypes prototype (``prototype``),
the Python callers (``caller``: ``go(inputs, out) -> out``, everything that does not change
between calls decided once), the argument pattern of a kernel's native entry (``native_spec``,
``compiler/entry.py``) and the GPU launch (``gpu.GpuRuntime``). ``Prepared`` and ``Native`` are
what a site keeps per exact input layout and hands to a replay.
"""

from __future__ import annotations

import ctypes
import functools
from typing import NamedTuple

import numpy as np

from . import entry
from .buffers import ALIGN, aligned_empty
from .entry import data_pointer
from .kir import bare

PARALLEL_MIN = 1 << 20          # elements: below this one thread is faster (MEASURED.md)
RELEASE_MIN = 1 << 14           # elements from which a native entry lets other threads run (compiles)

# ---------------------------------------------------------------- the convention

HEAD = {"elementwise": ("i64", "i64", "i64", "i64", "ptr"), "row": ("i64", "i64", "i64", "ptr", "ptr", "ptr", "ptr"),
        "matmul": ("ptr", "ptr", "ptr", "ptr"),
        "gemm": ("i64", "i64", "i64", "ptr", "i64", "ptr", "ptr", "i64"),      # (issue 18: compiler/gemm.py)
        "pool": ("i64", "ptr", "i64"), "tramp": ("ptr", "ptr")}    # (compiler/pool.py; the pool's returns an i64)
GPU_HEAD = {"elementwise": ("i64", "i64", "i64", "ptr")}       # (total, n1, n2, out)
OPERAND = {"t": ("ptr", "i64", "i64"), "s": ("double",)}
ROW_OPERAND = {"t": ("ptr", "i64", "i64", "i64"), "s": ("double",)}    # (a row kernel's: three row strides)
_CTYPES = {"i64": ctypes.c_int64, "ptr": ctypes.c_void_p, "double": ctypes.c_double}


def elementwise_order(kinds) -> list:
    """The inputs of an elementwise kernel in argument order: tensors ("t"), then scalars ("s")."""
    return [i for i, kind in enumerate(kinds) if kind == "t"] + [i for i, kind in enumerate(kinds) if kind != "t"]


def operand_order(kernel) -> list:
    """The inputs whose operands follow the kernel's head, in argument order."""
    if kernel.kind == "elementwise":
        return elementwise_order(kernel.kinds)
    if kernel.kind == "matmul" and kernel.epilogue is not None:
        return list(range(1, len(kernel.epilogue.kinds)))
    if kernel.kind == "depthwise":
        return list(range(len(kernel.kinds)))
    return []


def signature(kernel, gpu: bool = False) -> tuple:
    """The kernel's argument types ("i64" | "ptr" | "double"), in order (``gpu``: the GPU kernel's)."""
    kinds = kernel.epilogue.kinds if kernel.kind == "matmul" and kernel.epilogue is not None else \
        getattr(kernel, "kinds", ())
    operand = CONV_OPERAND if kernel.kind == "depthwise" else OPERAND
    residual = ("ptr",) if getattr(kernel, "residual", False) else ()     # (issue 18: FUSED_ADD_LAYER_NORM's y)
    if kernel.kind == "row" and kernel.op == "softmax" and kernel.programs:   # (issue 18: the score stages:
        # i64 n1, n2 and their operands)
        residual += ("i64", "i64") + tuple(t for i in elementwise_order(kinds) for t in ROW_OPERAND[kinds[i]])
    if kernel.kind == "matmul" and getattr(kernel, "packed", False) and not gpu:    # (its columns [j0, j1); L2:
        residual += ("i64", "i64") + (("i64",) * 3 if kernel.m is None else ())     # m, k, n)
    return (GPU_HEAD if gpu else HEAD)[kernel.kind] + tuple(t for i in operand_order(kernel) for t in operand[kinds[i]]) \
        + residual


def llvm_operands(kinds, t: str, noalias: str = "") -> list:
    """The LLVM parameters of an elementwise kernel's operands: ``%in{i}, %s0_{i}, %s1_{i}`` per
    tensor input i, ``%sc{i}`` per scalar (``t``: the element's LLVM type)."""
    params = []
    for i in elementwise_order(kinds):
        if kinds[i] == "t":
            params += [f"{t}* {noalias}%in{i}", f"i64 %s0_{i}", f"i64 %s1_{i}"]
        else:
            params.append(f"double %sc{i}")
    return params


def prototype(kernel, addr: int):
    """The kernel at ``addr`` as a ctypes function."""
    return ctypes.CFUNCTYPE(None, *[_CTYPES[t] for t in signature(kernel)])(addr)


def launch_operands(kinds, strides, inputs, tensor, scalar) -> list:
    """The operands of an elementwise launch in argument order: ``tensor(x, s0, s1)`` (a list of
    arguments) per tensor input, ``scalar(x)`` per scalar (the GPU runtime's)."""
    args = []
    for j in elementwise_order(kinds):
        if kinds[j] == "t":
            args += tensor(inputs[j], strides[j][0], strides[j][1])
        else:
            args.append(scalar(inputs[j]))
    return args


# ---------------------------------------------------------------- issue 18: convolution kernels (conv.py, lower_conv.py)
CONV_DIMS = ("C", "H", "W", "Ho", "Wo", "pt", "pl", "lo", "hi")   # a depthwise kernel's shape arguments, in order
HEAD["depthwise"] = ("i64", "i64") + ("i64",) * len(CONV_DIMS) + ("ptr",) * 5
CONV_OPERAND = {"t": ("ptr",), "s": ("double",)}                # an epilogue tensor is of the output's layout
HEAD["im2col"] = ("i64",) * 14 + ("ptr",) * 3                  # (BlasConv's windows copy: lower_conv.lower_im2col)


# ---------------------------------------------------------------- what a site keeps

class Prepared:
    """A kernel's caller for one plan (``go(inputs, out) -> out``) and, for an L3 kernel at one
    exact input layout, its native entry (None where it has none)."""

    __slots__ = ("compiled", "go", "native")

    def __init__(self, compiled, go, native=None):
        self.compiled, self.go, self.native = compiled, go, native


class NativeSpec(NamedTuple):
    """A native entry's argument pattern (``entry.trampoline_ir``), its constants, how many
    arguments it takes (the inputs and the output), whether it releases the GIL, and the
    allocator of its output."""

    pattern: tuple
    consts: list
    nargs: int
    release: bool
    alloc: object


class Native:
    """What a replay calls instead of ``go``: ``entry(*inputs, alloc(shape, dtype))`` runs the
    kernel, where a transposed-weight site passes ``weight(inputs[1])`` as the weight; ``last`` is
    the replay's, the output buffer it allocated last (which it may keep)."""

    __slots__ = ("entry", "alloc", "shape", "dtype", "weight", "last")

    def __init__(self, entry_, alloc, shape, dtype, weight):
        self.entry, self.alloc, self.shape, self.dtype, self.weight = entry_, alloc, shape, dtype, weight
        self.last = None


# ---------------------------------------------------------------- callers

def _threads():
    global _pool
    if _pool is None:
        import os
        from concurrent.futures import ThreadPoolExecutor

        _pool = ThreadPoolExecutor(max(1, min(os.cpu_count() or 1, 8)), thread_name_prefix="msvm-kernel")
    return _pool


_pool = None


_AFFINITY: list = []


def cores() -> int:
    """The threads msvm may split one kernel's work over: the cores this process may run on
    (its affinity when first asked: every caller a plan makes asks), at most MSVM_THREADS where set."""
    import os

    if not _AFFINITY:
        try:
            _AFFINITY.append(len(os.sched_getaffinity(0)))
        except (AttributeError, OSError):
            _AFFINITY.append(os.cpu_count() or 1)
    n = _AFFINITY[0]
    want = os.environ.get("MSVM_THREADS", "")
    return max(1, min(n, int(want)) if want.isdigit() and int(want) > 0 else n)


def submit(fn, *args):
    """``fn(*args)`` on the kernel pool (a future). The first time, the BLAS that numpy and the
    matmul kernels call is set to one thread (``build.blas_single``: its idle workers would
    spin on the cores the pool runs on)."""
    blas_once()
    return _threads().submit(fn, *args)


def blas_once() -> None:
    """Before the first work on a second thread (``submit``, pool.share): the BLAS to one thread."""
    if not _blas_set[0]:
        _blas_set[0] = True
        from .build import blas_single

        blas_single()


_blas_set = [False]


def _parallel(fn, n, *rest):
    """``fn(start, stop, *rest)`` over rows [0, n) in halves, on this thread and msvm's spinning pool
    (pool.share), as the products are split. (Before: every part went to the kernel pool's Python
    threads while this one waited: each woke by the OS, 90-300 us on a KVM guest, and competing with
    the spinning pool's thread that the products had just used. ResNet-50 at 224, batch 8, two cores:
    24 such passes, 31.9 ms of a 763 ms forward.)"""
    from .pool import parts, share

    share([[(fn, (a, b, *rest))] for a, b in parts(n, 1)])


def _same(x):
    return x


@functools.lru_cache(maxsize=1024)
def _contiguous_strides(shape, itemsize: int) -> tuple:
    out, step = [], itemsize
    for n in reversed(tuple(shape)):
        out.append(step)
        step *= max(int(n), 1)
    return tuple(reversed(out))


def caller(site, compiled, plan):
    """``go(inputs, out) -> out``: this kernel at this plan's shapes, with everything that does
    not change between calls (argument layout, strides, the BLAS pointer) decided here once."""
    out_shape, d, p = plan.out_shape, plan.dtype, plan.details
    k = compiled.kernel
    fn, ptr, level = compiled.fn, site.ptr, compiled.level
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
    if k.kind == "elementwise" and site.op == "FUSED_ELEMENTWISE":
        return elementwise_caller(compiled, p, output, ptr)
    from . import conv  # (issue 18: convolutions and max pools; conv imports this module)

    if site.op in conv.OPS:
        return conv.caller(site, compiled, plan, output)
    if k.kind == "elementwise":          # L2 matmul: BLAS product, then the epilogue in place (a product by a
        # packed weight has a matmul kernel at L2 too: gemm.lower_matmul_packed)
        ta, tb, wt, transposed = site.args[0], p["tb"], p["wt"], site.transposed
        # the epilogue's input 0 is the product, i.e. the output: its pointer is not kept
        if bare(p["epi"].details["program"]):         # (the product alone: no pass over it)
            def epi(inputs, out):
                return out
        else:
            epi = elementwise_caller(compiled, p["epi"].details, None,
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
        weight = _weight(site, p)
        rows = p["epi"].details["block"]
        extras = [(j, k.epilogue.kinds[j], rows[j - 1][1]) for j in operand_order(k)]
        dims = (p["m"], p["k"], p["n"]) if k.m is None else ()       # (L2's kernel takes them)
        if k.packed and _packed_threads(k, p) > 1:       # (issue 18: the product over two threads)
            return _split_caller(compiled, output, weight, ptr, extras, p["n"], dims)
        cols = (0, p["n"]) + dims if k.packed else ()    # (a packed product's columns: all of them)
        if not extras:
            def go(inputs, out):
                out = output(out)
                w = weight(inputs[1])           # (held while the kernel reads it)
                fn(gemm, ptr(0, inputs[0]), ptr(1, w), data_pointer(out), *cols)
                return out
            return go

        def go(inputs, out):
            out = output(out)
            w = weight(inputs[1])
            fn(gemm, ptr(0, inputs[0]), ptr(1, w), data_pointer(out), *_epilogue_operands(extras, inputs, ptr), *cols)
            return out
        return go
    rows, n, layer_norm = p["rows"], p["n"], p["op"] != "softmax"   # (a layer norm's x, gamma, beta; RMS: x, w)
    split = level >= 3 and rows * n >= PARALLEL_MIN and rows >= 2
    if getattr(k, "residual", False):       # (issue 18: FUSED_ADD_LAYER_NORM(a, b, gamma, beta); y = b last)
        def go(inputs, out):
            out = output(out)
            g, b = inputs[2], inputs[3]
            gp = ptr(2, g) if g is not None else None
            bp = ptr(3, b) if b is not None else None
            op_, xp_, yp_ = data_pointer(out), ptr(0, inputs[0]), ptr(1, inputs[1])
            if split:
                _parallel(fn, rows, n, op_, xp_, gp, bp, yp_)
            else:
                fn(0, rows, n, op_, xp_, gp, bp, yp_)
            return out
        return go

    def go(inputs, out):
        out = output(out)
        gp = bp = None
        if layer_norm:
            g, b = inputs[1], inputs[2] if len(inputs) > 2 else None
            gp = ptr(1, g) if g is not None else None
            bp = ptr(2, b) if b is not None else None
        op_, xp_ = data_pointer(out), ptr(0, inputs[0])
        if split:
            _parallel(fn, rows, n, op_, xp_, gp, bp)
        else:
            fn(0, rows, n, op_, xp_, gp, bp)
        return out
    return go


def _epilogue_operands(extras, inputs, ptr) -> list:
    """A matmul epilogue's operands after the product's, per (j, kind, row stride) of ``extras`` in the
    kernel's order: a tensor's pointer, its row stride and 0, or a scalar (epilogue input j is the
    site's input j + 1)."""
    args = []
    for j, kind, row_stride in extras:
        if kind == "t":
            args += [ptr(j + 1, inputs[j + 1]), row_stride, 0]
        else:
            args.append(float(inputs[j + 1]))
    return args


def elementwise_caller(compiled, p: dict, output, ptr):
    """``go(inputs, out)`` for an elementwise kernel; ``output`` (when given) picks or makes the
    output buffer, else the caller's ``out`` is written in place."""
    dims, kinds, strides = p["dims"], p["kinds"], p["strides"]
    spec = [(j, kinds[j], strides[j]) for j in elementwise_order(kinds)]
    fn = compiled.fn
    d0, d1, d2 = dims
    split = compiled.level >= 3 and d0 * d1 * d2 >= PARALLEL_MIN and d0 >= 2

    def go(inputs, out):
        if output is not None:
            out = output(out)
        args = []
        for j, kind, s in spec:
            if kind == "t":
                args += [ptr(j, inputs[j]), s[0], s[1]]
            else:
                args.append(float(inputs[j]))
        po = data_pointer(out)
        if split:
            _parallel(fn, d0, d1, d2, po, *args)
        else:
            fn(0, d0, d1, d2, po, *args)
        return out
    return go


# ---------------------------------------------------------------- native entries

def native_spec(site, compiled, plan) -> NativeSpec | None:
    """The native entry of this L3 kernel at this plan: the arguments ``caller``'s ``go`` passes,
    where all of them are array pointers or constants; None where they are not (a scalar
    operand, work split over threads)."""
    p = plan.details
    k = compiled.kernel
    nargs = len(site.in_types) + 1
    o = nargs - 1
    alloc = aligned_empty if getattr(k, "stream", False) else np.empty
    if k.kind == "matmul":       # (a transposed weight is passed already transposed: ``native``)
        if k.m is None or (k.packed and _packed_threads(k, p) > 1):     # (L2's; split: ``caller``'s go)
            return None
        pattern, consts = ["c", 0, 1, o], [compiled.gemm]
        if k.epilogue is not None:
            rows = p["epi"].details["block"]
            for j in operand_order(k):
                if k.epilogue.kinds[j] != "t":
                    return None
                pattern += [j + 1, "c", "c"]
                consts += [rows[j - 1][1], 0]
        if k.packed:                 # (all its columns)
            pattern += ["c", "c"]
            consts += [0, k.n]
        return NativeSpec(tuple(pattern), consts, nargs, True, alloc)
    if k.kind == "elementwise" and site.op == "FUSED_ELEMENTWISE":
        d0, d1, d2 = p["dims"]
        if (d0 * d1 * d2 >= PARALLEL_MIN and d0 >= 2) or any(kind != "t" for kind in p["kinds"]):
            return None
        pattern, consts = ["c", "c", "c", "c", o], [0, d0, d1, d2]
        for j in elementwise_order(p["kinds"]):
            pattern += [j, "c", "c"]
            consts += [p["strides"][j][0], p["strides"][j][1]]
        return NativeSpec(tuple(pattern), consts, nargs, d0 * d1 * d2 >= RELEASE_MIN, alloc)
    if k.kind == "row":
        rows, n = p["rows"], p["n"]
        if rows * n >= PARALLEL_MIN and rows >= 2:
            return None
        pattern, consts = ["c", "c", "c", o, 0], [0, rows, n]
        res = getattr(k, "residual", False)          # (issue 18: FUSED_ADD_LAYER_NORM(a, b, gamma, beta))
        for j, present in ((1 + res, p["gamma"]), (2 + res, p["beta"])):
            pattern.append(j if present else "c")
            consts += [] if present else [0]
        if res:
            pattern.append(1)
        return NativeSpec(tuple(pattern), consts, nargs, rows * n >= RELEASE_MIN, alloc)
    return None


def prepare_native(site, compiled, plan, cache) -> None:
    """Compile (or load from ``cache``) the trampoline this kernel's entry needs, on the compiling
    thread."""
    spec = native_spec(site, compiled, plan)
    if spec is not None:
        entry.prepare(spec.pattern, spec.nargs, spec.release, cache)


def native(site, compiled, plan) -> Native | None:
    """The ``Native`` a replay calls for this L3 kernel at this plan; None where there is no entry
    (or its trampoline is not ready)."""
    spec = native_spec(site, compiled, plan)
    if spec is None:
        return None
    e = entry.make(compiled.addr, spec.pattern, spec.consts, spec.nargs, spec.release)
    weight = _weight(site, plan.details)
    return None if e is None else Native(e, spec.alloc, plan.out_shape, plan.dtype, weight)


# ---------------------------------------------------------------- (issue 18) a weight packed once

def _weight(site, p: dict):
    """What a matmul kernel gets as B for the site's input 1: the weight packed (compiler/gemm.py),
    its contiguous transpose, or the input itself (``Site.packed``, ``Site.transposed``)."""
    return site.packed if p.get("packed") else site.transposed if p.get("wt") else _same


def _packed_threads(k, p: dict) -> int:
    """How many threads share the product of a matmul kernel k at plan details p (gemm.threads)."""
    from .gemm import threads

    return threads(p["m"], p["k"], p["n"], k.dtype) if k.batch == 1 and not k.ta and not k.tb else 1


def _split_caller(compiled, output, weight, ptr, extras, n: int, dims: tuple):
    """``go(inputs, out)`` of an L2 or L3 matmul by a packed weight whose columns two threads share: the kernel
    itself (its product and its epilogue per chunk of columns, gemm.lower_matmul_packed) over
    pool.parts of whole panels, one part a task (pool.share). Each element is computed by one thread with
    the same code as in one call, so one and two threads give the same bits. ``dims``: L2's (m, k, n)."""
    from . import gemm as g
    from .pool import parts, share

    k, fn = compiled.kernel, compiled.fn
    nr = g.panel_width(k.dtype)
    ranges = [(j0, j1) + dims for j0, j1 in parts(n, nr)]
    held = [(None, None)]        # (the last weight array and its packed panels, one tuple: threads swap it whole)

    def go(inputs, out):
        out = output(out)
        h = held[0]
        if h[0] is not inputs[1]:
            h = held[0] = (inputs[1], weight(inputs[1]))
        head = (compiled.gemm, ptr(0, inputs[0]), ptr(1, h[1]), data_pointer(out),
                *_epilogue_operands(extras, inputs, ptr))
        g.splits[0] += 1
        share([[(fn, head + cols)] for cols in ranges])
        return out
    return go
