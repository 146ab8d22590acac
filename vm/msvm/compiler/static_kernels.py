"""The kernels of a Code without running it: for ``msvm dump --emit llvm|ptx`` and tests.

Each jit-able instruction is planned the way the tier manager plans it at run time, but
from the verifier's static types: symbolic dims become distinct placeholder sizes (a
dim that is 1 stays 1, so broadcast patterns are exact), inputs are zero-strided
placeholder arrays, and the L2 kernel — shape-generic, dims are arguments — is what is
shown, so the text is the same for every batch size and sequence length.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..bytecode.disasm import display_name
from ..bytecode.opcodes import JITABLE
from ..bytecode.types import ScalarType, TensorType
from .lower import Unsupported
from .tiers import _site_class


@dataclass
class StaticKernel:
    code: str
    offset: int
    op: str                 # display name: FUSED_MATMUL_RELU
    kernel: object | None   # kernel IR, or None when the instruction stays in the interpreter
    why: str = ""


def _placeholder(t, sizes: dict):
    if isinstance(t, TensorType):
        shape = []
        for d in t.shape:
            c = d.const_value()
            if c is None:
                c = sizes.setdefault(d, 2 + len(sizes))
            shape.append(int(c))
        dtype = t.dtype.np
        return np.lib.stride_tricks.as_strided(np.zeros(1, dtype), tuple(shape), (0,) * len(shape))
    if isinstance(t, ScalarType):
        return 1.0 if t.kind == "f" else 1
    return None


def kernels_of(code) -> list:
    """One StaticKernel per jit-able instruction of code and its callees (L2 kernel IR)."""
    out = []
    for c in code.all_codes():
        for i, ins in enumerate(c.instrs):
            if ins.op.name not in JITABLE or not c.stack_types or c.stack_types[i] is None:
                continue
            site = _site_class(ins.op.name)(c, i)
            sizes: dict = {}
            inputs = [_placeholder(t, sizes) for t in site.in_types]
            name = display_name(ins)
            try:
                plan = site._make_plan(inputs)
                if plan is None:
                    raise Unsupported("no compiled form for these types (dtype or layout)")
                if hasattr(site, "kernels_ir"):      # (issue 18: FUSED_ATTENTION's two kernels)
                    out += [StaticKernel(c.name, ins.offset, name, k) for k in site.kernels_ir(2, plan)]
                else:
                    out.append(StaticKernel(c.name, ins.offset, name, site.kernel_ir(2, plan)))
            except Unsupported as e:
                out.append(StaticKernel(c.name, ins.offset, name, None, str(e)))
    return out
