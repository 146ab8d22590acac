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

FUSED_RMS_NORM: LLaMA's RMSNorm (tests/models/llama.py), after the elementwise runs are fused,

    LOAD x  FUSED(prologue: square(cast(x)))  REDUCE_MEAN(-1, keep)  FUSED(scale: rsqrt(m + eps))
    STORE r  LOAD x  LOAD r  LOAD w  FUSED(program: (x * cast(r)) * cast(w))

with r read only there, becomes ``LOAD x  LOAD w  FUSED_RMS_NORM(prologue, scale, program)``, its
parts every part of the four (FUSED_CAST_SQUARE_REDUCE_MEAN_ADD_RSQRT_CAST_MUL_CAST_MUL), each at
its line. The three programs are kept as they are: L1 runs them and the mean in order; L2/L3 run
one row kernel (``lower_row``'s "rms_norm") that sums prologue(x) over the row, applies scale to
the mean and writes program(x, r, w), each program lowered like any fused program (so other
spellings of the same three stages, x * x or pow(x, 2.0), compile too). The compiled kernel wants
x C-contiguous with w a row of x's dtype; a CAST to another dtype stays in the interpreter.
"""

from __future__ import annotations

import numpy as np

from ..bytecode.code import Instr
from ..bytecode.opcodes import BY_NAME, LEAVES
from .kir import dtype_name

# what may push a norm's weight (gamma, beta, w) in these patterns: a leaf (it pops nothing, so it moves
# before the fused instruction as is), but not LOAD_SYM: a symbol's value is a number, never a weight row
_LOADS = LEAVES - {"LOAD_SYM"}


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


def _one_input_program(code, k: int):
    """(program, length, parts) of the single-input elementwise stage at instruction k: a
    FUSED_ELEMENTWISE of one input, an elementwise row of one operand, or ``LOAD_CONST c`` and a
    binary row (x op c); None otherwise."""
    instrs = code.instrs
    if k >= len(instrs):
        return None
    ins = instrs[k]
    if ins.op.name == "FUSED_ELEMENTWISE":
        program, n = code.decode_args(ins)
        return (program, 1, tuple(ins.parts)) if n == 1 else None
    if ins.op.kind == "elementwise" and ins.op.pops == 1 and ins.op.compiled == "fused":
        return (("in", 0), (ins.op.name,) + tuple(code.decode_args(ins))), 1, ((ins.op.name, ins.loc),)
    if ins.op.name == "LOAD_CONST" and k + 1 < len(instrs):
        c, op = code.consts[ins.args[0]], instrs[k + 1]
        if (isinstance(c, (int, float)) and not isinstance(c, bool) and op.op.kind == "elementwise"
                and op.op.pops == 2 and op.op.compiled == "fused"):
            return (("in", 0), ("c", c), (op.op.name,) + tuple(code.decode_args(op))), 2, ((op.op.name, op.loc),)
    return None


def fuse_rms_norm(code, targets, is_target, live_after) -> None:
    """Rewrite code.instrs in place (after fuse.py's runs; ``live_after``: its liveness)."""
    instrs = code.instrs
    i = 0
    while i < len(instrs):
        found = _match_rms(code, i, targets, is_target, live_after)
        if found is None:
            i += 1
            continue
        end, programs, parts, ld_x, ld_w, loc = found
        fused = Instr(BY_NAME["FUSED_RMS_NORM"], tuple(_const(code, p) for p in programs), loc, parts)
        instrs[i:end] = [ld_x, ld_w, fused]
        i += 3


def _match_rms(code, i, targets, is_target, live_after):
    instrs = code.instrs
    if instrs[i].op.name != "LOAD_TENSOR":
        return None
    pro = _one_input_program(code, i + 1)
    if pro is None:
        return None
    k = i + 1 + pro[1]
    if k >= len(instrs) or instrs[k].op.name != "REDUCE_MEAN":
        return None
    mean = instrs[k]
    axes, keep = code.decode_args(mean)
    sc = _one_input_program(code, k + 1)
    if axes not in (-1, (-1,)) or keep is not True or sc is None:
        return None
    k += 1 + sc[1]
    seq = instrs[k:k + 5]
    if [x.op.name for x in seq[:3]] != ["STORE_TENSOR", "LOAD_TENSOR", "LOAD_TENSOR"] or len(seq) < 5 \
            or seq[3].op.name not in _LOADS or seq[4].op.name != "FUSED_ELEMENTWISE":
        return None
    st_r, ld_x2, ld_r, ld_w, out = seq
    program, n = code.decode_args(out)
    x_slot, r_slot = instrs[i].args[0], st_r.args[0]
    if (n != 3 or ld_x2.args[0] != x_slot or ld_r.args[0] != r_slot or r_slot == x_slot
            or (ld_w.op.name == "LOAD_TENSOR" and ld_w.args[0] == r_slot)      # (x * r * r: r is never stored)
            or r_slot in live_after(code, targets)[k + 4]
            or any(is_target(code, targets, x) for x in instrs[i + 1:k + 5])):
        return None
    parts = pro[2] + (("REDUCE_MEAN", mean.loc),) + sc[2] + tuple(out.parts)
    return k + 5, (pro[0], sc[0], program), parts, instrs[i], ld_w, out.loc


def _const(code, v):
    from .fuse import _const as const

    return const(code, v)


def plan_rms_norm(site, inputs):
    """The Site plan: a row kernel over x's last axis, w a row of it."""
    from .lower import Unsupported
    from .planning import Plan, float_dtype

    x, w = inputs
    if not isinstance(x, np.ndarray) or x.ndim == 0 or x.shape[-1] == 0:
        raise Unsupported("a row kernel of a scalar or of empty rows")
    if not isinstance(w, np.ndarray) or w.shape != x.shape[-1:] or w.dtype != x.dtype or not x.flags.c_contiguous:
        raise Unsupported("w not a row of x's dtype, or a strided x")
    d = float_dtype([x])
    programs = tuple(site.args)
    cls = ("row", "rms_norm", dtype_name(d), programs)
    return Plan(cls, (cls, x.shape), x.shape, d, {"op": "rms_norm", "gamma": True, "beta": False, "eps": 0.0,
                                                  "n": x.shape[-1], "rows": x.size // x.shape[-1],
                                                  "programs": programs})


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
