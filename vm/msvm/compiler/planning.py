"""Planning: which kernel a jit-able instruction's inputs call for.

A planner (``PLANNERS``, one function per jit-able opcode-table row, keyed by op) looks at a
call's inputs (shapes, dtypes, layouts) and returns a ``Plan``: the shape class that keys the
shape-generic L2 kernel, the concrete key of the specialized L3 one, the output's shape and
dtype, and the details the kernel IR and its callers need. A planner raises ``Unsupported``,
with the reason the site logs once, where only the interpreter's kernel applies (float16,
mixed dtypes, more than 3 dims after collapsing, ...). ``kernel_ir`` turns a plan into the
kernel IR of one tier. Planning reads the site (its op, operands, weight layout) and never
changes it; the tier policy that calls it is ``tiers.Site``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ..bytecode.opcodes import KERNEL_KINDS
from ..weights import stored
from .build import blas
from .callconv import PARALLEL_MIN
from .gemm import B_IN_CACHE, use_packed
from .kir import Elementwise, MatmulEpilogue, RowKernel, bare, collapse, dtype_name, strides_for
from .lower import TYPES, Unsupported, vec_width

ROW = 4096                      # row length when a long vector is viewed as rows
STREAM_MIN = 16 << 20           # output bytes from which L3 elementwise kernels use streaming stores


class Plan(NamedTuple):
    """What one input layout calls for; made once per layout and kept (``Site.plans``)."""

    cls: tuple           # the shape class: keys the L2 (shape-generic) kernel
    key: tuple           # the concrete shapes: keys the L3 (specialized) kernel
    out_shape: tuple
    dtype: np.dtype
    details: dict        # per kind: dims, strides, kinds, program (elementwise); m, k, n, epi (matmul); ...


def float_dtype(arrays):
    dts = {a.dtype for a in arrays}
    if len(dts) != 1:
        raise Unsupported("mixed dtypes")
    d = dts.pop()
    if d not in (np.float32, np.float64):
        raise Unsupported(f"dtype {d}")
    return d


def plan_elementwise(site, inputs, program=None, out_shape=None):
    program = program or site.args[0]
    tensors = [x for x in inputs if _is_tensor(x)]
    if not tensors:
        raise Unsupported("no tensor inputs")
    d = float_dtype(tensors)
    for x in inputs:
        if isinstance(x, np.ndarray) and x.ndim == 0 and x.dtype != d:
            raise Unsupported("0-d input of another dtype")
    if any(n[0] == "CAST" and getattr(n[1], "name", n[1]) != dtype_name(d) for n in program):
        raise Unsupported("cast to another dtype")
    shapes = [x.shape if _is_tensor(x) else None for x in inputs]
    out_shape = out_shape or np.broadcast_shapes(*[s for s in shapes if s is not None])
    col = collapse(tuple(out_shape), shapes)
    if col is None:
        raise Unsupported("more than 3 dims after collapsing")
    dims, bcast = col
    kinds = tuple(["t" if s is not None else "s" for s in shapes])
    total = dims[0] * dims[1] * dims[2]
    if (dims[0] == 1 and dims[1] == 1 and total >= PARALLEL_MIN and total % ROW == 0
            and all(not b or b == (True, True, False) for b in bcast)):
        # one long contiguous vector: view it as rows so the work can be split over threads
        dims = (total // ROW, 1, ROW)
        bcast = [(False, True, False) if b else b for b in bcast]
    cls = ("ew", kinds, tuple(bcast), dtype_name(d))
    return Plan(cls, (cls, dims), tuple(out_shape), d, {"dims": dims, "bcast": bcast, "kinds": kinds,
                                                       "program": program,
                                                       "strides": [strides_for(dims, b) if b else None for b in bcast]})


def plan_matmul(site, inputs):
    ta, tb, batched, program, n = site.args
    a, b = inputs[0], inputs[1]
    if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
        raise Unsupported("matmul of scalars")
    d = float_dtype([a, b])
    m, k = (a.shape[-1], a.shape[-2]) if ta else (a.shape[-2], a.shape[-1])
    # run on the weight's contiguous transpose (B = W.T, no flag), except for one row by a weight the
    # store does not hold (weights.py): BLAS reads W.T's view there, and the copy would double the
    # weight's memory (ResNet-50's 8 MB fc at batch 1). One row by a stored weight, or by one some site
    # has packed already, runs packed: the weight's own pages are spilled (held once), and BLAS's sgemm
    # of one row ran 4.6x slower than the packed kernel (a classifier, 1x1280 @ 1280x1000, one core,
    # AMD Zen 5: 275 against 48 us; onnxruntime's Gemm 61 us); so a decoder's steps after its prompt
    # keep the weight's pages out too
    wt = site.weight_t and site.frozen(b) and (product_rows(site, a) > 1 or stored(b) or site.has_packed(b))
    n_ = b.shape[-2] if tb else b.shape[-1]
    batch_shape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) if batched else ()
    out_shape = tuple(batch_shape) + (m, n_)
    extras = list(inputs[2:])
    epi = plan_elementwise(site, [_Shape(out_shape, d)] + extras, program, out_shape)
    block = []      # per epilogue input: broadcast along rows / along a row, and the row stride
    for x in extras:
        if _is_tensor(x):
            xs = (1,) * (len(out_shape) - x.ndim) + tuple(x.shape)
            rowb, colb = xs[-2] == 1 and m != 1, xs[-1] == 1 and n_ != 1
            block.append(((rowb, True, colb), 0 if rowb else xs[-1]))
        else:
            block.append(((), 0))
    epi.details["block"] = block
    same_batch = (not batched) or (a.shape[:-2] == b.shape[:-2] == tuple(batch_shape))
    # (issue 18) by a fixed weight packed once (compiler/gemm.py): a Dense's W (x @ W.T) or a B read as is
    packed = (bool(wt) or (not tb and not batched and b.ndim == 2 and site.frozen(b))) and not ta and use_packed(m, d)
    batch = math.prod(batch_shape) if batched else 1
    tb_run = bool(tb) and not wt
    b_shape = b.shape[::-1] if wt else b.shape
    # (a packed product's L2 kernel reads each epilogue input as its block flags say: one value a row or a
    # vector along it, compiled in; an output of one column and one of many collapse alike)
    cls = ("mm", bool(ta), tb_run, dtype_name(d), epi.cls, bool(wt), packed,
           tuple(b for b, _ in block) if packed else ())
    return Plan(cls, (cls, a.shape, b_shape, tuple(x.shape if isinstance(x, np.ndarray) else None for x in extras)),
            out_shape, d, {"m": m, "k": k, "n": n_, "batch": batch, "same_batch": same_batch, "epi": epi,
                           "tb": tb_run, "wt": bool(wt), "packed": packed})


def product_rows(site, a) -> int:
    """The rows of a FUSED_MATMUL's product by its first input ``a`` (of 2 dims or more), every batch dim
    counted: one row by a weight is planned from the weight's own state (``plan_matmul``)."""
    return (a.shape[-1] if site.args[0] else a.shape[-2]) * math.prod(a.shape[:-2])


def plan_row(site, inputs):
    x = inputs[0]
    if not isinstance(x, np.ndarray) or x.ndim == 0:
        raise Unsupported("row kernel of a scalar")
    if x.shape[-1] == 0:      # softmax of an empty row is numpy's error (no max): the interpreter's answer
        raise Unsupported("rows of length 0")
    d = float_dtype([x])
    if site.op == "SOFTMAX":
        if site.args[0] not in (-1, x.ndim - 1):
            raise Unsupported("softmax not over the last axis")
        extra = {"op": "softmax", "gamma": False, "beta": False, "eps": 0.0}
    else:
        bna, bpa, eps = site.args
        if bna % x.ndim != x.ndim - 1 or bpa % x.ndim != x.ndim - 1:
            raise Unsupported("layer norm over more than the last axis")
        g, b = inputs[1], inputs[2]
        for t in (g, b):
            if t is not None and (not isinstance(t, np.ndarray) or t.dtype != d or t.shape != x.shape[-1:]):
                raise Unsupported("gamma/beta shape or dtype")
        extra = {"op": "layer_norm", "gamma": g is not None, "beta": b is not None, "eps": float(eps)}
    cls = ("row", extra["op"], dtype_name(d), extra["gamma"], extra["beta"], extra["eps"])
    return Plan(cls, (cls, x.shape), x.shape, d, dict(extra, n=x.shape[-1], rows=x.size // max(x.shape[-1], 1)))


def kernel_ir(site, level: int, plan: Plan):
    """The kernel IR of this plan at tier ``level`` (2: shape-generic, 3: specialized)."""
    kind = KINDS[site.op]
    if kind == "conv":                   # (issue 18: compiler/conv.py)
        return conv.kernel_ir(site, level, plan)
    d, p = plan.dtype, plan.details
    dtype = dtype_name(d)
    if kind == "elementwise":
        dims = p["dims"]
        stream = False
        if level == 3:
            from .codegen import codegen

            w = vec_width(codegen().features, TYPES[dtype])
            stream = dims[0] * dims[1] * dims[2] * np.dtype(d).itemsize >= STREAM_MIN and dims[2] % w == 0
        return Elementwise(p["program"], p["kinds"], tuple(p["bcast"]), dtype, dims if level == 3 else None,
                           stream)
    if kind == "matmul":
        if level == 2 and p["packed"] and p["batch"] == 1 and not p["tb"]:
            # by a packed weight: the product and its epilogue per chunk in one kernel (gemm.lower_matmul_packed)
            # with m, k, n arguments, as at L3 (the product, then an epilogue pass over the whole output, left the
            # output's lines to the streamed weight; a polymorphic site keeps this kernel for good)
            epi = _block_epilogue(p, dtype, None)
            return MatmulEpilogue(False, False, epi, dtype, None, None, None, int_bits=blas()[0], packed=True)
        if level == 2:   # numpy/BLAS product, then the L2 epilogue kernel over it
            ep = p["epi"].details
            return Elementwise(ep["program"], ep["kinds"], tuple(ep["bcast"]), dtype, None)
        if not p["same_batch"]:
            raise Unsupported("broadcast batch dims")
        ep = p["epi"].details
        if p["batch"] > 1 and any(kind == "t" for kind in ep["kinds"][1:]):
            raise Unsupported("a batched matmul epilogue with tensor inputs")
        epi = _block_epilogue(p, dtype, (p["m"], 1, p["n"]))
        # row blocks keep the epilogue in cache, but each block re-reads B: worth it only while B fits
        # in cache; a big weight matrix (BERT's 768x3072) is read once, by one gemm over all rows
        b_bytes = p["k"] * p["n"] * np.dtype(d).itemsize
        block = 64 if b_bytes <= B_IN_CACHE else max(1, p["m"])
        return MatmulEpilogue(bool(site.args[0]), p["tb"], epi, dtype, p["m"], p["k"], p["n"],
                              p["batch"], block=block, int_bits=blas()[0], packed=p["packed"])
    return RowKernel(p["op"], dtype, p["gamma"], p["beta"], p["eps"], p["n"] if level == 3 else None,
                     residual=p.get("residual", False),       # (issue 18: FUSED_ADD_LAYER_NORM, compiler/norm.py)
                     programs=p.get("programs", ()))          # (issue 18: FUSED_RMS_NORM, compiler/norm.py)


def _block_epilogue(p: dict, dtype: str, dims):
    """A matmul kernel's epilogue over its blocks of the product (input 0, rows x 1 x n) with its inputs'
    block flags, ``dims`` those of the whole product at L3 (None at L2); None where the program is the
    product itself (``kir.bare``)."""
    ep = p["epi"].details
    if bare(ep["program"]):
        return None
    bc = ((False, True, False),) + tuple(b for b, _ in ep["block"])
    return Elementwise(ep["program"], ep["kinds"], bc, dtype, dims)


class _Shape:
    """Stands for the matmul product while planning its epilogue (only shape and dtype are read)."""

    ndim = 2

    def __init__(self, shape, dtype):
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.ndim = len(self.shape)


def _is_tensor(x) -> bool:
    return isinstance(x, (np.ndarray, _Shape)) and x.ndim > 0



# the kind of kernel each jit-able row (opcodes.JITABLE: the rows whose ``compiled`` is "kernel") runs, from
# its row (OpInfo.kernel); the GPU sites plan per kind too
KINDS = KERNEL_KINDS


# (issue 18) FUSED_ATTENTION: q @ k^T, the score program (scale, masks, WHERE), the softmax, @ v; its
# planner is compiler/attention_plan.py's, its Site (a Kernels per tier) compiler/attention_site.py's;
# convolutions and max pools: compiler/conv.py's. Both read Plan, _Shape and plan_elementwise from here.
from . import attention_plan, conv  # noqa: E402


# (issue 18) FUSED_ADD_LAYER_NORM: the layer norm's row kernel, reading the residual beside x (compiler/norm.py)
def _plan_add_norm(site, inputs):
    from .norm import plan_add_norm

    return plan_add_norm(site, inputs)


def _plan_rms_norm(site, inputs):       # (issue 18) FUSED_RMS_NORM: a row kernel of its three programs
    from .norm import plan_rms_norm

    return plan_rms_norm(site, inputs)


def _plan_attention(site, inputs):      # (attention_plan imports this module: importing it first must work)
    return attention_plan.plan(site, inputs)


# each jit-able row's planner, ``planner(site, inputs) -> Plan``: its kind's, except the two row kernels whose
# inputs norm.py reads (a handler table, as interp/kernels.py's KERNELS: tests/vm/test_table.py checks it)
_BY_KIND = {"elementwise": plan_elementwise, "matmul": plan_matmul, "row": plan_row, "attention": _plan_attention,
            "conv": conv.plan}
PLANNERS = {op: _BY_KIND[kind] for op, kind in KINDS.items()}
PLANNERS.update(FUSED_ADD_LAYER_NORM=_plan_add_norm, FUSED_RMS_NORM=_plan_rms_norm)

PLANS_KEPT = 4096               # plans in ``_SHARED`` (then it starts over)
_SHARED: dict = {}              # (site class, op, args, input signature, weight fixed, knobs) -> Plan


def shared_plan(site, inputs) -> Plan:
    """The Plan of ``site`` for these inputs (``PLANNERS``), made once per key in the process and shared
    by every site of that key. A plan is a function of the site's class, op and arguments, of its inputs'
    shapes, dtypes and kinds (what the site's own table keys on: ``Site.plan``) and of the knobs the
    planners read (``_knobs``), so the sites of a model's repeated blocks plan each shape
    once: at a new length GPT-2's 74 sites make 16 plans (its first call on two cores 2.0 -> 0.9 ms of
    planning, the attention's 2.6 -> 0.5), MobileNet v2's 52 make 29. Not shared: a product of one row by
    a weight, whose plan reads the weight's own state (stored, or packed by another site: ``plan_matmul``),
    and a site whose arguments are not hashable. A shared plan's ``details`` are read, not written, by
    its sites (but for what every site of the plan shares: a convolution's geometry, ``conv._taps_caller``)."""
    planner = PLANNERS[site.op]
    fixed = getattr(site, "weight_prep", False)
    if fixed and (type(inputs[0]) is not np.ndarray or inputs[0].ndim < 2 or product_rows(site, inputs[0]) <= 1):
        return planner(site, inputs)
    sig = tuple([(x.shape, x.dtype) if type(x) is np.ndarray else type(x) for x in inputs])
    key = (type(site), site.op, site.args, sig, site.frozen(inputs[1]) if fixed else None, _knobs(site.op))
    try:
        hit = _SHARED.get(key)
    except TypeError:           # (an argument that is not hashable: planned per site)
        return planner(site, inputs)
    if hit is None:
        if len(_SHARED) >= PLANS_KEPT:
            _SHARED.clear()
        hit = _SHARED[key] = planner(site, inputs)
    return hit


def forget_plans() -> None:
    """Drop the shared plans (and the TapsConv a convolution's holds): the next call plans afresh, as after
    a change of a planner's rules (tests patch them)."""
    _SHARED.clear()


def _knobs(op: str) -> tuple:
    """What a plan reads besides its site and inputs: the threads a product may split over (``use_packed``),
    whether the softmax runs the score program (attention_plan.FUSE_SOFTMAX), a convolution's route knobs."""
    from .callconv import cores

    return (cores(), attention_plan.FUSE_SOFTMAX, conv.plan_knobs() if op in conv.OPS else None)

