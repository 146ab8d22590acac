"""The residual add and the layer norm after it as one row kernel (issue 18): FUSED_ADD_LAYER_NORM.

BERT's ``self.layernorm(output + input_tensor)`` is, once fusion has inlined nn.LayerNorm,

    <a> <b> BROADCAST_ADD  LOAD gamma  LOAD beta  LAYER_NORM(begin_norm_axis, begin_params_axis, eps)

where the sum's only reader is the norm (a value on the stack is read once). It becomes
``<a> <b> LOAD gamma LOAD beta FUSED_ADD_LAYER_NORM(...)``, named after its parts
(FUSED_ADD_LAYER_NORM), each part at its own source line. L1 runs the add's kernel, then the
norm's (so fusion on and off agree there bit for bit); L2/L3 run the layer-norm row kernel
(``lower.lower_row`` with ``RowKernel.residual``) whose first pass writes a + b into the output
row while it sums it, and whose other passes read it back from there: the sum is never a
separate array, and the floats are those of the add followed by the compiled norm. The
compiled kernel wants a and b of one shape, dtype and C layout; anything else (a broadcast
residual, mixed dtypes) runs the L1 kernel.

A sum that is read again later (GPT-2's pre-norm blocks keep ``residual = hidden_states``) is
stored to a local first, so it does not match: that form would need a kernel with two outputs.
"""

from __future__ import annotations

import numpy as np

from ..bytecode.code import Instr
from ..bytecode.opcodes import BY_NAME

_LOADS = ("LOAD_TENSOR", "LOAD_PARAM", "LOAD_CONST")


def fuse_add_norm(code, targets, is_target, replace_target) -> None:
    """Rewrite code.instrs in place (``targets``: fuse.py's jump bookkeeping; a pattern with a jump
    target after its first instruction is left alone)."""
    instrs = code.instrs
    i = 0
    while i + 3 < len(instrs):
        add, g, b, ln = instrs[i:i + 4]
        if (add.op.name != "BROADCAST_ADD" or g.op.name not in _LOADS or b.op.name not in _LOADS
                or ln.op.name != "LAYER_NORM" or any(is_target(code, targets, x) for x in (g, b, ln))):
            i += 1
            continue
        fused = Instr(BY_NAME["FUSED_ADD_LAYER_NORM"], ln.args, ln.loc,
                      (("BROADCAST_ADD", add.loc), ("LAYER_NORM", ln.loc)))
        if is_target(code, targets, add):
            replace_target(targets, add, g)
        instrs[i:i + 4] = [g, b, fused]
        i += 3


def plan_add_norm(site, inputs):
    """The Site plan: planning.plan_row's layer norm of a, with b read beside it."""
    from .lower import Unsupported
    from .planning import Plan, plan_row

    a, b, gamma, beta = inputs
    if not all(isinstance(x, np.ndarray) for x in (a, b)) or a.shape != b.shape or a.dtype != b.dtype:
        raise Unsupported("a residual of another shape or dtype")
    if not (a.flags.c_contiguous and b.flags.c_contiguous):
        raise Unsupported("a strided addend")
    p = plan_row(site, [a, gamma, beta])
    cls = p.cls + ("residual",)
    return Plan(cls, (cls, a.shape), p.out_shape, p.dtype, dict(p.details, residual=True))
