"""Kernel IR: what a compiled kernel computes, independent of LLVM.

``Elementwise`` is a fused elementwise program over tensor and scalar inputs,
iterated over the output collapsed to three dims ``(n0, n1, n2)``. Its *shape
class* says, per tensor input, which of the three dims it is broadcast along
(stride 0); the dims themselves are kernel arguments (L2) or constants (L3).

``MatmulEpilogue`` is a (batched) matmul whose product feeds an elementwise
program, computed in row blocks through BLAS (L3).

``RowKernel`` is softmax or layer norm over the last axis of a contiguous tensor.

``text()`` is the canonical description hashed into the kernel cache key.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

DTYPES = ("float32", "float64")


@dataclass(frozen=True)
class Elementwise:
    program: tuple
    kinds: tuple           # per input: "t" (tensor) or "s" (scalar)
    bcast: tuple           # per input: (b0, b1, b2) broadcast flags for tensors, () for scalars
    dtype: str
    dims: tuple | None = None    # concrete (n0, n1, n2) in L3, None in L2
    stream: bool = False         # L3, output far bigger than the caches: non-temporal (streaming) stores;
    #                              the caller passes an output aligned to a whole vector (buffers.ALIGN)
    opt_level: int = 0           # 3: IR passes and O3 codegen at L2 too (a polymorphic site's: tiers.Site._promote)

    kind = "elementwise"

    def text(self) -> str:
        return f"elementwise dtype={self.dtype} kinds={self.kinds} bcast={self.bcast} dims={self.dims} " \
               f"stream={self.stream} program={self.program!r}" + (f" opt={self.opt_level}" if self.opt_level else "")

    @property
    def name(self) -> str:
        return "ew_" + "_".join(n[0].replace("BROADCAST_", "").lower() for n in self.program
                                if n[0] not in ("in", "c"))[:60]


def bare(program: tuple) -> bool:
    """Whether a FUSED_MATMUL's epilogue program is the product itself (a product by a weight with nothing
    fused: compiler/fuse.py ``_by_weight``): no epilogue runs over it (``MatmulEpilogue.epilogue`` None)."""
    return tuple(program) == (("in", 0),)


@dataclass(frozen=True)
class MatmulEpilogue:
    ta: bool
    tb: bool
    epilogue: Elementwise | None   # program with input 0 = the product block
    dtype: str
    m: int | None                  # None (with k, n): arguments, one kernel for every shape (L2, ``packed`` only)
    k: int | None
    n: int | None
    batch: int = 1
    block: int = 64
    int_bits: int = 32             # the BLAS's Fortran integer: 32 (LP64) or 64 (ILP64)
    packed: bool = False           # B is a weight packed once (compiler/gemm.py), multiplied by msvm's own kernel
    opt_level: int = 0             # 3: IR passes and O3 codegen at L2 too (a polymorphic site's: tiers.Site._promote)

    kind = "matmul"

    def text(self) -> str:
        epi = self.epilogue.text() if self.epilogue else "none"
        return (f"matmul dtype={self.dtype} ta={self.ta} tb={self.tb} m={self.m} k={self.k} n={self.n} "
                f"batch={self.batch} block={self.block} blas_int=i{self.int_bits} epilogue=({epi})"
                + (" packed chunks" if self.packed else "")       # (columns j0, j1; the epilogue per chunk)
                + (f" opt={self.opt_level}" if self.opt_level else ""))

    @property
    def name(self) -> str:
        return "mm_" + (self.epilogue.name if self.epilogue else "plain")


@dataclass(frozen=True)
class RowKernel:
    op: str                 # "softmax" | "layer_norm"
    dtype: str
    has_gamma: bool = False
    has_beta: bool = False
    eps: float = 0.0
    n: int | None = None    # row length: constant in L3, argument in L2
    residual: bool = False  # (issue 18) layer norm of x + y: FUSED_ADD_LAYER_NORM, y the last parameter
    programs: tuple = ()    # (issue 18) "rms_norm": (prologue, scale, program) of FUSED_RMS_NORM; "softmax":
    #                         FUSED_ATTENTION's stages applied to x before the softmax, (program or None, its
    #                         inputs 1..m, ((cond, other, scores_is_a) per WHERE, indices of inputs 1..))
    kinds: tuple = ()       # (issue 18) "softmax" with a program: its inputs 1.. ("t" tensor / "s" scalar)
    rowb: tuple = ()        # per input 1..: True where a tensor is one value per row (broadcast along it)
    opt_level: int = 0      # (issue 18) 3: IR passes and O3 codegen at L2 too (build.compile_kernel)

    kind = "row"

    def text(self) -> str:
        return f"row op={self.op} dtype={self.dtype} gamma={self.has_gamma} beta={self.has_beta} " \
               f"eps={self.eps!r} n={self.n}" + (" residual" if self.residual else "") \
               + (f" programs={self.programs!r}" if self.programs else "") \
               + (f" kinds={self.kinds!r} rowb={self.rowb!r}" if self.kinds else "") \
               + (f" opt={self.opt_level}" if self.opt_level else "")

    @property
    def name(self) -> str:
        return self.op


# ---------------------------------------------------------------- shape classes

@functools.lru_cache(maxsize=64)
def dtype_name(d) -> str:
    """``str(d)`` of a numpy dtype, cached: numpy spells its names in Python (~3 us), and every plan
    and caller at a new shape asks several times."""
    return str(d)


def collapse(out_shape: tuple, in_shapes: list):
    """Collapse the output to at most 3 dims; returns (dims, per-input broadcast flags) or None.

    Inputs are broadcast to the output (numpy rules) and must be C-contiguous; adjacent
    dims merge when every input is broadcast along both or along neither. Cached: every plan at a
    new shape asks, and the sites of one model share their shapes (``_collapse``)."""
    col = _collapse(tuple(out_shape), tuple([None if s is None else tuple(s) for s in in_shapes]))
    return None if col is None else (col[0], list(col[1]))


@functools.lru_cache(maxsize=1024)
def _collapse(out_shape: tuple, in_shapes: tuple):
    rank = len(out_shape)
    flags = []
    for s in in_shapes:
        if s is None:
            flags.append(None)
            continue
        pad = (1,) * (rank - len(s)) + s
        flags.append(tuple([p == 1 and o != 1 for p, o in zip(pad, out_shape)]))
    dims, groups = [], []
    for d in range(rank):
        if out_shape[d] == 1:
            continue
        key = tuple([f[d] if f is not None else None for f in flags])
        if groups and groups[-1] == key:
            dims[-1] *= out_shape[d]
        else:
            dims.append(out_shape[d])
            groups.append(key)
    if len(dims) > 3:
        return None
    while len(dims) < 3:
        dims.insert(0, 1)
        groups.insert(0, tuple([True if f is not None else None for f in flags]))
    per_input = tuple([() if f is None else tuple([bool(g[k]) for g in groups]) for k, f in enumerate(flags)])
    return tuple([int(x) for x in dims]), per_input


def strides_for(dims: tuple, bcast: tuple) -> tuple:
    """Element strides of a contiguous input along the collapsed dims (0 where broadcast)."""
    out, acc = [0, 0, 0], 1
    for d in (2, 1, 0):
        if bcast[d]:
            out[d] = 0
        else:
            out[d] = acc
            acc *= dims[d]
    return tuple(out)

