"""``Code``: one compiled function (a Cell's construct or a jit function).

Like clox's chunk, the instruction list runs parallel to a source map: every
instruction has a ``Loc`` (file line, 0-based column, end line/column; fused
instructions list the locations of all their parts). Tables: constants, names
(attributes, callees, symbols), varnames (local slots), the parameters with
their symbolic types, and the static types of the Cell attributes it reads.

``CodeBuilder`` is what the frontend emits into: labels are resolved to byte
offsets when the code is finished.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

from .opcodes import ABI_VERSION, BY_NAME, OpInfo
from .symbolic import Expr, Pred


@dataclass(frozen=True)
class Loc:
    line: int
    col: int
    end_line: int
    end_col: int

    def __str__(self):
        return f"{self.line}:{self.col + 1}"


NO_LOC = Loc(0, 0, 0, 0)


@dataclass(eq=True)
class Instr:
    op: OpInfo
    args: tuple            # raw operand values (u16 each)
    loc: Loc = NO_LOC
    parts: tuple = ()      # for fused instructions: ((op name, Loc), ...) of what it replaced
    offset: int = 0


@dataclass
class Code:
    name: str                                  # "DynamicMatmulCell.construct"
    filename: str
    firstlineno: int
    instrs: list = field(default_factory=list)
    consts: list = field(default_factory=list)
    names: list = field(default_factory=list)
    varnames: list = field(default_factory=list)
    params: list = field(default_factory=list)       # [(name, Type)]
    attr_types: dict = field(default_factory=dict)   # attribute name -> TensorType
    callees: list = field(default_factory=list)      # [(attribute path, Code)]
    abi: int = ABI_VERSION
    # parameter dim symbols that may be 1 when the code runs (set_inputs None dims): broadcasting
    # leaves them free to be 1 instead of unifying them with the other dim (ShapeEnv.broadcast_dim)
    may_be_one: frozenset = field(default_factory=frozenset)
    # filled by the verifier (not serialized; recomputed on load)
    result_type: object = None
    stack_types: list = field(default_factory=list, compare=False, repr=False)
    assumptions: list = field(default_factory=list, compare=False, repr=False)
    # filled by the parts that make and run it (not serialized)
    hover: list = field(default_factory=list, compare=False, repr=False)      # frontend: [(loc, name, type)]
    fusion_s: float = field(default=0.0, compare=False, repr=False)          # executor: seconds the fusion took
    jit_sites: dict = field(default_factory=dict, compare=False, repr=False)  # tier manager: index -> Site
    compile_reason: object = field(default=None, compare=False, repr=False)  # executor: msvm.reasons.Reason
    memplan: object = field(default=None, compare=False, repr=False)        # memory planner: a MemPlan or None
    # this Code object's identity for the profile (issue 18): variants, flag specializations and fused
    # or planned copies of one function share its name and differ in offsets, so events say which ran
    uid: int = field(default_factory=itertools.count(1).__next__, compare=False, repr=False)

    def __post_init__(self):
        self.relayout()

    def relayout(self):
        off = 0
        self.offset_index = {}
        for i, ins in enumerate(self.instrs):
            ins.offset = off
            self.offset_index[off] = i
            off += ins.op.size
        self.size = off

    def loop_body(self) -> set:
        """Indexes of the instructions inside a loop (between a backward jump's target and the jump)."""
        out = set()
        for i, ins in enumerate(self.instrs):
            li = ins.op.label_operand
            if li is not None:
                t = self.index_at(ins.args[li])
                if t <= i:
                    out.update(range(t, i + 1))
        return out

    def index_at(self, offset: int) -> int:
        return self.offset_index[offset]

    def decode_args(self, ins: Instr) -> tuple:
        """Operand values: consts and names looked up, locals/labels/counts as ints."""
        out = []
        for (_, kind), raw in zip(ins.op.operands, ins.args):
            if kind == "const":
                out.append(self.consts[raw])
            elif kind == "name":
                out.append(self.names[raw])
            elif kind == "callee":
                out.append(self.callees[raw])
            else:
                out.append(raw)
        return tuple(out)

    def __eq__(self, other):
        if not isinstance(other, Code):
            return NotImplemented
        return (self.name == other.name and self.filename == other.filename
                and self.firstlineno == other.firstlineno
                and [(i.op.name, i.args, i.loc, i.parts) for i in self.instrs]
                == [(i.op.name, i.args, i.loc, i.parts) for i in other.instrs]
                and _consts_key(self.consts) == _consts_key(other.consts)
                and self.names == other.names and self.varnames == other.varnames
                and self.params == other.params and self.attr_types == other.attr_types
                and self.may_be_one == other.may_be_one
                and [(p, c) for p, c in self.callees] == [(p, c) for p, c in other.callees])

    def has_effects(self) -> bool:
        """Whether this code or a callee has an instruction with an effect (``OpInfo.effect``,
        e.g. ASSIGN_PARAM): such a Code runs its instructions in order, each once."""
        return any(ins.op.effect for c in self.all_codes() for ins in c.instrs)

    def all_codes(self) -> list:
        """This code and every callee, callees first, each once."""
        seen: list = []
        done: set = set()
        stack = [(self, iter(self.callees))]     # iterative post-order: callee chains can be long
        entered = {id(self)}
        while stack:
            c, it = stack[-1]
            for _, sub in it:
                if id(sub) not in entered:
                    entered.add(id(sub))
                    stack.append((sub, iter(sub.callees)))
                    break
            else:
                stack.pop()
                if id(c) not in done:
                    done.add(id(c))
                    seen.append(c)
        return seen


def _consts_key(consts):
    out = []
    for c in consts:
        if isinstance(c, np.ndarray):
            out.append(("nd", c.dtype.str, c.shape, c.tobytes()))
        else:
            out.append((type(c).__name__, c))
    return out


class Label:
    __slots__ = ("index",)

    def __init__(self):
        self.index = None  # instruction index once placed


class CodeBuilder:
    """Emit instructions with interned tables and forward labels."""

    def __init__(self, name: str, filename: str, firstlineno: int):
        self.code = Code(name, filename, firstlineno)
        self._pending: list = []   # (instr, operand index, Label)
        self._labels: list = []
        self._const_index: dict = {}

    # tables
    def const(self, v) -> int:
        key = _const_key(v)
        if key not in self._const_index:
            self._const_index[key] = len(self.code.consts)
            self.code.consts.append(v)
        return self._const_index[key]

    def name(self, s: str) -> int:
        if s not in self.code.names:
            self.code.names.append(s)
        return self.code.names.index(s)

    def local(self, s: str) -> int:
        if s not in self.code.varnames:
            self.code.varnames.append(s)
        return self.code.varnames.index(s)

    # emission
    def emit(self, opname: str, *args, loc: Loc = NO_LOC) -> Instr:
        op = BY_NAME[opname]
        raw = []
        for (_, kind), a in zip(op.operands, args):
            if kind == "label":
                raw.append(0)
            else:
                raw.append(a)
        if len(args) != len(op.operands):
            raise TypeError(f"{opname} takes {len(op.operands)} operands, got {len(args)}")
        ins = Instr(op, tuple(raw), loc)
        for i, ((_, kind), a) in enumerate(zip(op.operands, args)):
            if kind == "label":
                self._pending.append((ins, i, a))
        self.code.instrs.append(ins)
        return ins

    def new_label(self) -> Label:
        lab = Label()
        self._labels.append(lab)
        return lab

    def place(self, label: Label):
        label.index = len(self.code.instrs)

    def _drop_jumps_to_next(self):
        """Peephole: a JUMP to the instruction right after it does nothing."""
        code = self.code
        while True:
            for ins, _i, label in self._pending:
                idx = next(k for k, x in enumerate(code.instrs) if x is ins)
                if ins.op.name == "JUMP" and label.index == idx + 1:
                    break
            else:
                return
            del code.instrs[idx]
            self._pending = [p for p in self._pending if p[0] is not ins]
            for lab in self._labels:
                if lab.index is not None and lab.index > idx:
                    lab.index -= 1

    def finish(self) -> Code:
        code = self.code
        self._drop_jumps_to_next()
        code.relayout()
        for ins, i, label in self._pending:
            if label.index is None:
                raise RuntimeError("label used but never placed")
            target = code.instrs[label.index].offset if label.index < len(code.instrs) else code.size
            args = list(ins.args)
            args[i] = target
            ins.args = tuple(args)
        if code.size > 0xFFFF:
            raise OverflowError(f"{code.name} compiles to {code.size} bytes; the limit is 65535")
        for t in (code.consts, code.names, code.varnames):
            if len(t) > 0xFFFF:
                raise OverflowError(f"{code.name} has more than 65535 table entries")
        return code


def _const_key(v):
    if isinstance(v, np.ndarray):
        return ("nd", v.dtype.str, v.shape, v.tobytes())
    if isinstance(v, (Expr, Pred)):
        return ("sym", v.key())
    if isinstance(v, tuple):
        return ("tuple", tuple(_const_key(x) for x in v))
    return (type(v).__name__, v)
