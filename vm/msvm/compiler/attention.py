"""Attention as one instruction (issue 18): the fusion pattern that makes FUSED_ATTENTION.

After fuse.py's runs, an attention head reads

    ... q, k, extras  FUSED_MATMUL(batched, k transposed, program)   scores, scaled and masked
    SOFTMAX(-1)                                                      probabilities
    <loads and layout ops that push v>                               (v's reshape and transpose)
    BATCH_MATMUL                                                     context
    [TRANSPOSE (0, 2, 1, 3)]                                         heads back to [B, S, H, D]

and becomes ``... q, k, extras, <v's instructions>, FUSED_ATTENTION(program, layout, n)``: one
instruction named after its parts (FUSED_BMM_MUL_ADD_SOFTMAX_BMM_TRANSPOSE), each part mapped to
its source line. v's instructions only load and reshape (pure, and they never reach below their
own value), so they may run before the scores are computed. ``p = softmax(...)`` stored, then
statements that only load, reshape and store other locals (tests/models/bert.py reshapes v
there), then ``p @ v`` with p dead after it, fuses too: the statements move before the instruction. Its compiled tiers
(compiler/attention_site.py) keep the scores in a buffer of their own, scale and mask them in
place, take the softmax in one row kernel and write the context straight into the layout the
TRANSPOSE asked for (no copy of the heads).
"""

from __future__ import annotations

from ..bytecode.code import Instr
from ..bytecode.opcodes import BY_NAME

_LOADS = ("LOAD_TENSOR", "LOAD_PARAM", "LOAD_CONST")


def fuse_attention(code, targets, const, is_target) -> None:
    """Rewrite code.instrs in place (``targets``: fuse.py's jump bookkeeping; a pattern with a
    jump target inside is left alone)."""
    i = 0
    while i < len(code.instrs):
        found = _match(code, i, targets, is_target)
        if found is None:
            i += 1
            continue
        end, v_seq, program, n, layout, parts = found
        first = code.instrs[i]
        fused = Instr(BY_NAME["FUSED_ATTENTION"], (const(code, program), const(code, layout), n + 1),
                      first.loc, tuple(parts))
        repl = list(v_seq) + [fused]
        if is_target(code, targets, first):
            from .fuse import _replace_target

            _replace_target(targets, first, repl[0])
        code.instrs[i:end] = repl
        i += len(repl)


def _match(code, i, targets, is_target):
    instrs = code.instrs
    mm = instrs[i]
    if mm.op.name != "FUSED_MATMUL":
        return None
    ta, tb, batched, program, n = code.decode_args(mm)
    if ta or not tb or not batched:
        return None
    j = i + 1
    if j >= len(instrs) or instrs[j].op.name != "SOFTMAX" or code.decode_args(instrs[j])[0] != -1:
        return None
    sm = instrs[j]
    j += 1
    drop = set()                    # instructions of the pattern that go (the probabilities' store and load)
    if j < len(instrs) and instrs[j].op.name == "STORE_TENSOR":
        # ``p = softmax(...)``, then other statements (v's reshape, a stored transpose), then ``p @ v``:
        # those statements only load, reshape and store other locals; p is read once, by the product
        slot, k_ = instrs[j].args[0], j + 1
        while k_ < len(instrs) and not (instrs[k_].op.name == "LOAD_TENSOR" and instrs[k_].args[0] == slot):
            x = instrs[k_]
            if x.op.name == "STORE_TENSOR" and x.args[0] == slot:
                return None
            if not (x.op.name in _LOADS + ("STORE_TENSOR",) or (x.op.kind == "layout" and not x.op.effect)):
                return None
            k_ += 1
        if k_ >= len(instrs) or not _depth_zero(code, instrs[j + 1:k_]):
            return None
        from .fuse import _live_after

        if slot in _live_after(code, targets)[k_]:
            return None
        drop = {j, k_}
        j = k_ + 1
    v_start, depth = j, 0
    while j < len(instrs):          # v: loads and layout ops that push exactly one value of their own
        ins = instrs[j]
        if depth == 1 and ins.op.name == "BATCH_MATMUL":
            break
        if not (ins.op.name in _LOADS or (ins.op.kind == "layout" and not ins.op.effect)):
            return None
        pops = ins.op.n_pops(code.decode_args(ins))
        if pops > depth:
            return None
        depth += ins.op.pushes - pops
        j += 1
    else:
        return None
    if j == v_start:
        return None
    bmm = instrs[j]
    if tuple(code.decode_args(bmm)) != (False, False):
        return None
    end = j + 1
    layout = ()
    parts = list(mm.parts) + [("SOFTMAX", sm.loc), ("BATCH_MATMUL", bmm.loc)]
    if end < len(instrs) and instrs[end].op.name == "TRANSPOSE" and \
            tuple(code.decode_args(instrs[end])[0]) == (0, 2, 1, 3) and not is_target(code, targets, instrs[end]):
        layout = (0, 2, 1, 3)
        parts.append(("TRANSPOSE", instrs[end].loc))
        end += 1
    if any(is_target(code, targets, x) for x in instrs[i + 1:j + 1]):
        return None
    keep = [x for at, x in enumerate(instrs[i + 2:j], i + 2) if at not in drop]
    return end, keep, program, n, layout, parts


def _depth_zero(code, seq) -> bool:
    """Whether seq (loads, layout ops, stores) leaves the stack as it found it, never reaching below."""
    depth = 0
    for ins in seq:
        pops = ins.op.n_pops(code.decode_args(ins))
        if pops > depth:
            return False
        depth += ins.op.pushes - pops
    return depth == 0
