"""Inlining leaf sub-Cells before fusion (issue 18): CALL_CELL of a straight-line layer becomes its body.

A ResNet block calls ``self.conv1(x)``, ``self.bn1(out)``, ``self.relu(out)``: three sub-Cells, so
the convolution, its batch norm and its activation sit in three Codes and no fusion can see them
together. Only msvm's own convolution, batch norm and activation layers are inlined (a user's Cells
keep their frames for the debugger and the trace hook). A *leaf* callee -- no sub-Cells of its
own, no jumps, one RETURN at its end, tensor parameters only, and no symbolic dims in its
constants (its symbols are its own frame's) -- is inlined at the call: its arguments are stored
to fresh local slots (``path.name``), its instructions follow with locals, constants and names
remapped, and its ``LOAD_PARAM w`` reads the parent's attribute ``path.w``
(``executor.link_cell`` resolves dotted attributes). Every inlined instruction takes the location
of the call in the parent's file, so a fused instruction's parts point at the user's lines
(``self.bn1(out)``), never at another file's line numbers.

msvm's own containers are inlined the same way when everything they call is (``inlinable``): a
ResNet bottleneck's ``self.down_sample(x)`` is an ``nn.SequentialCell([conv, bn])``, and with it in
the block's Code the residual add and ReLU become the downsampling convolution's epilogue
(FUSED_CONV_BN_ADD_RELU, the main branch's result its residual) instead of a pass of their own;
its layers' attributes are the parent's ``path.0.weight``.
"""

from __future__ import annotations

import os

from ..bytecode.code import Instr
from ..bytecode.opcodes import BY_NAME
from ..bytecode.symbolic import Expr, Pred
from ..bytecode.types import TensorType


def _symbolic(v) -> bool:
    if isinstance(v, Expr):
        return v.const_value() is None
    if isinstance(v, Pred):
        return True
    if isinstance(v, (tuple, list)):
        return any(_symbolic(x) for x in v)
    return False


_LIBRARY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))      # vm/msvm
# what worth_inlining looks past when it asks what a layer computes: moving values and reshaping them (a
# choice of this pass, as the layer lists below are: which of msvm's layers a fusion wants to see whole)
_MOVES = ("LOAD_TENSOR", "STORE_TENSOR", "LOAD_PARAM", "LOAD_CONST", "RESHAPE")


def worth_inlining(sub) -> bool:
    """Only msvm's own layers (nn.Conv2d, nn.BatchNorm2d, nn.ReLU ...: a user's Cells keep their frames,
    breakpoints and trace events), and only those a convolution's fusion needs: a convolution or batch
    norm layer, or an activation layer (elementwise ops only)."""
    if not os.path.abspath(sub.filename or "").startswith(_LIBRARY + os.sep):
        return False
    ops = [i.op for i in sub.instrs[:-1] if i.op.name not in _MOVES]
    return bool(ops) and (any(o.name in ("CONV2D", "BATCH_NORM") for o in ops)
                          or all(o.compiled == "fused" for o in ops)
                          or [o.name for o in ops] in (["SOFTMAX"], ["LAYER_NORM"]))  # (issue 18: attention, norm.py)


def is_leaf(sub) -> bool:
    """Whether a callee Code can be inlined (see the module doc)."""
    return not sub.callees and worth_inlining(sub) and _straight_tensor_code(sub)


def inlinable(sub, depth: int = 0) -> bool:
    """A leaf, or one of msvm's own containers (nn.SequentialCell) whose every call is inlinable,
    with no other work of its own (see the module doc)."""
    if is_leaf(sub):
        return True
    if depth >= 4 or not sub.callees or not os.path.abspath(sub.filename or "").startswith(_LIBRARY + os.sep):
        return False
    ops = [i.op.name for i in sub.instrs[:-1] if i.op.name not in _MOVES]
    return (bool(ops) and all(o == "CALL_CELL" for o in ops) and _straight_tensor_code(sub, calls=True)
            and all(inlinable(c, depth + 1) for _, c in sub.callees))


def _straight_tensor_code(sub, calls: bool = False) -> bool:
    """One RETURN at the end, tensor parameters, no jumps or effects, attributes read only by
    LOAD_PARAM (``calls``: CALL_CELL allowed), no symbolic constants or attribute dims."""
    if not sub.instrs or sub.instrs[-1].op.name != "RETURN":
        return False
    if not all(isinstance(t, TensorType) for _, t in sub.params):
        return False
    for ins in sub.instrs[:-1]:
        op = ins.op
        call = calls and op.name == "CALL_CELL"     # (a container's: its callee checked by ``inlinable``)
        if op.terminator or op.label_operand is not None or op.binds or op.effect or (op.kind == "control" and not call):
            return False
        for (_, kind) in op.operands:
            if (kind == "callee" and not call) or (kind == "name" and op.name != "LOAD_PARAM"):
                return False
    if any(_symbolic(c) for c in sub.consts):
        return False
    return all(not isinstance(d, Expr) or d.const_value() is not None
               for t in sub.attr_types.values() for d in getattr(t, "shape", ()))


def inline_leaf_calls(code, targets, const, replace_target, source_callees=None) -> bool:
    """Rewrite code.instrs in place; ``targets``/``replace_target`` keep jumps pointing at the first
    instruction of an inlined body; ``source_callees``: the callee table before fusion (what is
    inlined is the layer's own bytecode, which fusion then sees whole). Returns whether anything
    was inlined."""
    out, changed = [], False
    store = BY_NAME["STORE_TENSOR"]
    for ins in code.instrs:
        if ins.op.name != "CALL_CELL":
            out.append(ins)
            continue
        (path, sub), n = code.decode_args(ins)
        if source_callees is not None and ins.args[0] < len(source_callees):   # (epilogue.py's merged
            path, sub = source_callees[ins.args[0]]                             # callees come after)
        if not inlinable(sub) or n != len(sub.params):
            out.append(ins)
            continue
        body = _body(code, path, sub, n, ins.loc, const, store)
        replace_target(targets, ins, body[0])
        out.extend(body)
        changed = True
    if changed:
        code.instrs[:] = out
    return changed


def _body(code, path, sub, n, loc, const, store) -> list:
    """``sub``'s instructions (its RETURN dropped) in ``code``: its n arguments stored from the stack
    to fresh locals ``path.name``, its locals, constants and attributes remapped, each at ``loc``;
    a container's calls inlined in turn (their paths ``path.child``)."""
    slots = {}
    for k, name in enumerate(sub.varnames):
        slots[k] = len(code.varnames)
        code.varnames.append(f"{path}.{name}")
    body = [Instr(store, (slots[k],), loc) for k in range(n - 1, -1, -1)]
    for si in sub.instrs[:-1]:
        if si.op.name == "CALL_CELL":
            (child, csub), cn = sub.decode_args(si)
            body += _body(code, f"{path}.{child}", csub, cn, loc, const, store)
            continue
        args = []
        for raw, (_, kind) in zip(si.args, si.op.operands):
            if kind == "local":
                args.append(slots[raw])
            elif kind == "const":
                args.append(const(code, sub.consts[raw]))
            elif kind == "name":                     # LOAD_PARAM: the parent's dotted attribute
                attr = f"{path}.{sub.names[raw]}"
                if attr not in code.names:
                    code.names.append(attr)
                code.attr_types.setdefault(attr, sub.attr_types[sub.names[raw]])
                args.append(code.names.index(attr))
            else:
                args.append(raw)
        body.append(Instr(si.op, tuple(args), loc, si.parts))
    return body
