"""Specialization on flags: Code -> Code for known values of its bool arguments.

The bytecode stays flag-generic (``training=False`` reuses it); what *runs* may be
specialized: for a call with ``training=True`` every ``BRANCH_IF_SYMBOLIC`` whose
predicate only reads flags with known values is resolved (fall through, or a JUMP),
unreachable instructions go, and jumps to the next instruction vanish. Fusion then sees
straight-line code, so the article's ``MATMUL; if training: RELU`` becomes one
FUSED_MATMUL_RELU. The result is verified again; the executor picks the specialized
Code by the flag values of each call.
"""

from __future__ import annotations

from ..bytecode.code import Code, Instr
from ..bytecode.opcodes import BY_NAME
from ..bytecode.types import ScalarType
from ..bytecode.verify import verify


def flag_params(code: Code) -> list:
    """[(argument index, flag name)] of the bool flags whose values decide a branch."""
    flags = [(k, t.value.args[0]) for k, (_, t) in enumerate(code.params)
             if isinstance(t, ScalarType) and t.kind == "b" and getattr(t.value, "op", None) == "flag"]
    names = {n for _, n in flags}
    used = set()
    for ins in code.instrs:
        if ins.op.name == "BRANCH_IF_SYMBOLIC":
            syms = code.decode_args(ins)[0].symbols()
            if syms and syms <= names:
                used |= syms
    return [(k, n) for k, n in flags if n in used]


def specialize(code: Code, flags: dict) -> Code:
    """A new verified Code with the branches on these flag values resolved."""
    instrs = [Instr(i.op, i.args, i.loc, i.parts) for i in code.instrs]
    target_of = {}
    for i, ins in enumerate(code.instrs):
        li = ins.op.label_operand
        if li is not None:
            target_of[i] = code.index_at(ins.args[li])
    drop = set()
    for i, ins in enumerate(code.instrs):
        if ins.op.name != "BRANCH_IF_SYMBOLIC":
            continue
        pred = code.decode_args(ins)[0]
        if not pred.symbols() or not pred.symbols() <= set(flags):
            continue
        if pred.evaluate(flags):
            drop.add(i)                                   # falls through
        else:
            instrs[i] = Instr(BY_NAME["JUMP"], (0,), ins.loc)   # always taken

    def successors(i):
        if i in drop:
            return [i + 1]
        ins = instrs[i]
        out = [] if ins.op.terminator or ins.op.name == "JUMP" else [i + 1]
        if i in target_of:
            out.append(target_of[i])
        return [j for j in out if j < len(instrs)]

    reachable, work = set(), [0]
    while work:
        i = work.pop()
        if i in reachable:
            continue
        reachable.add(i)
        work.extend(successors(i))
    keep = [i for i in range(len(instrs)) if i in reachable and i not in drop]

    def next_kept(j):
        while j < len(instrs) and j not in keep_set:
            j += 1
        return j

    keep_set = set(keep)
    # a JUMP to the next kept instruction does nothing
    changed = True
    while changed:
        changed = False
        for pos, i in enumerate(keep):
            if instrs[i].op.name == "JUMP" and i in target_of:
                nxt = keep[pos + 1] if pos + 1 < len(keep) else len(instrs)
                if next_kept(target_of[i]) == nxt:
                    keep.remove(i)
                    keep_set.discard(i)
                    changed = True
                    break
    new_instrs = [instrs[i] for i in keep]
    new = Code(code.name, code.filename, code.firstlineno, new_instrs, list(code.consts), list(code.names),
               list(code.varnames), list(code.params), dict(code.attr_types), list(code.callees), may_be_one=code.may_be_one)
    new.hover = code.hover
    new.relayout()
    pos = {id(instrs[i]): instrs[i].offset for i in keep}
    end = new.size
    for i in keep:
        if i in target_of:
            t = next_kept(target_of[i])
            ins = instrs[i]
            args = list(ins.args)
            args[ins.op.label_operand] = pos[id(instrs[t])] if t < len(instrs) else end
            ins.args = tuple(args)
    verify(new)
    new.specialized_on = dict(flags)
    return new
