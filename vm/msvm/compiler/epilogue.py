"""An activation sub-Cell applied to another sub-Cell's result joins that sub-Cell's Code (issue 18).

GPT-2's MLP calls ``self.c_fc(h)`` (Conv1D: addmm, then ``x.view(size_out)``) and then
``self.act(h)`` (NewGELUActivation: an elementwise expression): the product and its GELU sit in
two Codes, so the matmul cannot take the GELU as its epilogue. Inlining either into the MLP is
not possible in general: Conv1D reshapes by its own frame's shape symbols. Instead, where a
CALL_CELL's result goes straight into (or through a dead local into) a CALL_CELL of an
*activation* -- a sub-Cell of one tensor parameter whose body is straight-line elementwise work
on it and numeric constants, with no Parameters, no sub-Cells and no symbolic constants -- the
two calls become one call of the producer's Code with the activation's body appended after it
(a producer that inline.py inlines into the caller -- msvm's convolution, batch norm and
activation layers -- is left to it: there fusion sees both already, and a batch norm must stay
next to its convolution)
(its result stored to the activation's parameter, its RETURN the new Code's). That Code keeps
the producer's frame, symbols and attributes (it runs linked to the producer's Cell), and fusion
then sees the product and the activation together (fuse.py's run past the product's reshape and
local: FUSED_MATMUL_BIAS_MUL_POW_..._TANH_ADD_MUL). Both Codes must come from one file, so
every appended instruction keeps its own line; a producer with jumps or several RETURNs is left
alone.

What this costs: the activation's frame. A breakpoint on its lines still binds (they are in the
merged Code, in the same file) and stops in the producer's frame.
"""

from __future__ import annotations

from ..bytecode.code import Code, Instr
from ..bytecode.opcodes import BY_NAME
from ..bytecode.types import TensorType
from ..bytecode.verify import verify
from .inline import _symbolic, is_leaf

# what is_activation looks past (a choice of this pass): moving values; anything else must be a fusable
# elementwise row (read from the table), so that the body joins the producer's epilogue
_MOVES = ("LOAD_TENSOR", "STORE_TENSOR", "LOAD_CONST")


def _straight(sub) -> bool:
    if not sub.instrs or sub.instrs[-1].op.name != "RETURN":
        return False
    return all(not (i.op.terminator or i.op.label_operand is not None) for i in sub.instrs[:-1])


def is_activation(sub) -> bool:
    """Whether a callee Code is an activation (see the module doc)."""
    if sub.callees or len(sub.params) != 1 or not isinstance(sub.params[0][1], TensorType) or not _straight(sub):
        return False
    ops = [i.op for i in sub.instrs[:-1] if i.op.name not in _MOVES]
    if not ops or not all(o.kind == "elementwise" and o.compiled == "fused" and not o.effect for o in ops):
        return False
    return not sub.names and not any(_symbolic(c) for c in sub.consts) and \
        all(isinstance(c, (int, float)) or hasattr(c, "np") for c in sub.consts if c is not None)


def merged(producer: Code, path2: str, act: Code, const) -> Code:
    """The producer's Code with act's body applied to its result."""
    m = Code(producer.name, producer.filename, producer.firstlineno,
             [Instr(i.op, i.args, i.loc, i.parts) for i in producer.instrs[:-1]], list(producer.consts),
             list(producer.names), list(producer.varnames), list(producer.params), dict(producer.attr_types),
             list(producer.callees), may_be_one=producer.may_be_one)
    slots = {}
    for k, name in enumerate(act.varnames):
        slots[k] = len(m.varnames)
        m.varnames.append(f"{path2}.{name}")
    m.instrs.append(Instr(BY_NAME["STORE_TENSOR"], (slots[0],), producer.instrs[-1].loc))
    for si in act.instrs:
        args = []
        for raw, (_, kind) in zip(si.args, si.op.operands):
            args.append(slots[raw] if kind == "local" else const(m, act.consts[raw]) if kind == "const" else raw)
        m.instrs.append(Instr(si.op, tuple(args), si.loc, si.parts))
    m.relayout()
    return m


def append_activations(code, source, targets, const, is_target, replace_target, live_after, fuse_sub) -> None:
    """Rewrite code.instrs in place: ``CALL_CELL p; [STORE h; LOAD h]; CALL_CELL act`` -> one call of
    p's Code with act appended (``fuse_sub``: fuse.py's fuse of the merged Code)."""
    instrs = code.instrs
    i = 0
    live = None
    while i < len(instrs):
        ins = instrs[i]
        if ins.op.name != "CALL_CELL":
            i += 1
            continue
        j = i + 1
        if j + 2 < len(instrs) and instrs[j].op.name == "STORE_TENSOR" and instrs[j + 1].op.name == "LOAD_TENSOR" \
                and instrs[j].args[0] == instrs[j + 1].args[0]:
            if live is None:
                live = live_after(code, targets)
            if instrs[j].args[0] in live[j + 1]:
                i += 1
                continue
            j += 2
        call2 = instrs[j] if j < len(instrs) else None
        if call2 is None or call2.op.name != "CALL_CELL" or call2.args[1] != 1 or \
                any(is_target(code, targets, x) for x in instrs[i + 1:j + 1]):
            i += 1
            continue
        path1, sub1 = source.callees[ins.args[0]]
        path2, sub2 = source.callees[call2.args[0]]
        if not (_straight(sub1) and not is_leaf(sub1) and is_activation(sub2) and sub1.filename == sub2.filename):
            i += 1
            continue
        try:
            m = fuse_sub(verify(merged(sub1, path2, sub2, const)))
        except Exception:  # noqa: BLE001 - a merge that does not type is left as two calls
            i += 1
            continue
        code.callees.append((path1, m))
        call = Instr(ins.op, (len(code.callees) - 1,) + tuple(ins.args[1:]), ins.loc, ins.parts)
        if is_target(code, targets, ins):
            replace_target(targets, ins, call)
        instrs[i:j + 1] = [call]
        live = None
        i += 1
