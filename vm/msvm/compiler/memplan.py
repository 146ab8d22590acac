"""Memory planning: each Code's intermediate buffers, assigned by liveness (as MindSpore's SOMAS and
TVM's static memory planner do), reused across instructions, calls and shapes.

``apply(code)`` runs after fusion (``executor.optimize``) and returns a new Code whose frame opens
an arena at entry (``ALLOC_DEVICE_MEM``) and releases it before each ``RETURN``
(``FREE_DEVICE_MEM``), with ``code.memplan`` the plan (a ``MemPlan``; callees planned too). The
interpreter and the replay (``interp/arena.py``) hand each planned instruction a view of its
slot as ``out=``.

The analysis, over the Code's control-flow graph to a fixpoint (branches merge conservatively):

- *values*: the result of an instruction that can write into a given buffer (a row with
  ``out=True`` whose inputs are tensors, a compiled site's instruction, FUSED_CONV), outside any
  loop, a tensor of known rank. Every other instruction's result is taken to possibly alias its
  inputs (a view, a tuple, a kernel that may return its input), so it keeps them alive, except the
  ``fresh`` rows (opcodes.FRESH: their kernels always make a new array) and a
  sub-Cell call, whose result aliases only the arguments its own Code may return;
- *escape*: a value that may reach ``RETURN`` (directly, in a tuple, as a view) or a Parameter
  (``ASSIGN_PARAM``) is not planned: what the caller gets is never arena memory;
- *liveness*: a value is live before instruction p when an operand-stack entry or a local that
  is read later may hold it (or a view of it); during p its inputs and its result are live together;
- *colouring*: values that are live at one point never share a slot; greedily, in program order,
  each value takes a free slot of the same size (else the closest one), or a new one. An
  elementwise instruction whose input dies there, with the same shape and dtype, writes into that
  input's slot (in place).

Sizes are expressions over the Code's symbols (``itemsize * N*C*H*W``); a slot's capacity is the
largest of its values' (``max(...)``), so at run time the slot grows to the largest size seen and
later calls, at that shape or smaller ones, allocate nothing.

A Code the pass cannot plan soundly is refused, never planned by guesswork: no static types (not
verified), stack depths that disagree where paths meet, a size that cannot be evaluated at the
sample points the colouring compares sizes at. ``apply`` then returns it without a plan (it runs
with one buffer per value, as with the plan off), says why in the ``[MS]`` log (WARNING) and in an
``error`` event (``what: "memory plan"``, the profile's errors), and keeps the reason on the Code
(``memplan_refused``: ``msvm dump`` and ``msvm.memory.report`` show it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import events, log
from ..bytecode.code import Code, Instr
from ..bytecode.opcodes import BY_NAME, FRESH, IN_PLACE, OUT_CAPABLE, TABLE
from ..bytecode.symbolic import Expr, SymbolicError, product, smax
from ..bytecode.types import ScalarType, TensorType
from ..bytecode.verify import verify

SAMPLE = 64          # the value given to every symbol when slot sizes are compared while colouring
SAMPLES = (SAMPLE, 2 * SAMPLE + 1)   # (the next, where a size divides by 0 at the first: ``x // (n - 64)``)


class PlanRefused(Exception):
    """This Code cannot be planned soundly; the message says why (``apply`` runs it unplanned)."""


# the rows that can write into a given buffer: the OUT_CAPABLE ones, and the jit-able ones whose L1 kernels
# and compiled callers take ``out=`` (every one but those whose site keeps its own buffers, OpInfo.keeps_buffers)
WRITES_INTO = frozenset(r.name for r in TABLE if r.compiled == "kernel" and not r.keeps_buffers)


@dataclass
class Value:
    """One planned result: the instruction that makes it, its slot, its static shape and dtype."""
    index: int
    slot: int
    shape: tuple            # Exprs
    dtype: np.dtype
    nbytes: Expr
    in_place_of: int | None = None      # the input value whose slot it writes over (elementwise)


@dataclass
class MemPlan:
    """The plan of one Code (indexes are its instructions')."""
    values: dict = field(default_factory=dict)        # instruction index -> Value
    slots: list = field(default_factory=list)         # slot -> [value indexes]
    live: list = field(default_factory=list)          # per instruction: planned values live before it
    outputs: list = field(default_factory=list)       # per instruction: the planned value it defines, or None
    excluded: dict = field(default_factory=dict)      # index -> why a would-be value is not planned

    def slot_bytes(self, k: int) -> Expr:
        """The slot's capacity: the largest of its values' sizes (``c*m`` and ``d*m`` for one product m of
        symbols give ``max(c, d)*m``; other sizes stay a ``max``)."""
        top: dict = {}            # product of symbols -> (largest coefficient, its expression)
        rest: list = []
        for i in self.slots[k]:
            e = self.values[i].nbytes
            if len(e.terms) == 1 and e.terms[0][1] > 0:
                mono, c = e.terms[0]
                if mono not in top or c > top[mono][0]:
                    top[mono] = (c, e)
            elif all(e != r for r in rest):
                rest.append(e)
        size = None
        for e in [e for _, e in top.values()] + rest:
            size = e if size is None else smax(size, e)
        return Expr.const(0) if size is None else size

    @property
    def peak(self) -> Expr:
        """The arena's bytes: the sum of the slots' capacities."""
        total = Expr.const(0)
        for k in range(len(self.slots)):
            total = total + self.slot_bytes(k)
        return total

    @property
    def unplanned(self) -> Expr:
        """Bytes when every planned value has a buffer of its own (what per-instruction kept buffers hold)."""
        total = Expr.const(0)
        for v in self.values.values():
            total = total + v.nbytes
        return total

    def figures(self, env: dict) -> dict:
        """Bytes at these symbol bindings: the arena (planned), one buffer per value (unplanned) and
        the liveness bound (the most bytes live at one point: no plan can use less)."""
        missing = sorted(set().union(*(v.nbytes.symbols() for v in self.values.values())) - set(env))
        if missing:
            raise ValueError(f"memory plan figures: symbol{'s' * (len(missing) > 1)} {', '.join(missing)} not bound "
                             f"(given: {', '.join(sorted(env)) or 'none'})")
        sizes = {i: int(v.nbytes.evaluate(env)) for i, v in self.values.items()}
        planned = sum(max((sizes[i] for i in members), default=0) for members in self.slots)
        bound = 0
        for live, out in zip(self.live, self.outputs):
            group = set(live)
            if out is not None and self.values[out].in_place_of not in group:    # (in place: one buffer for both)
                group.add(out)
            bound = max(bound, sum(sizes[i] for i in group))
        return {"planned_bytes": planned, "unplanned_bytes": sum(sizes.values()), "live_bound_bytes": bound,
                "buffers": len(self.slots), "values": len(self.values)}

    def summary(self) -> dict:
        """JSON-able: slots with their size expressions and values, the peak as an expression."""
        return {"buffers": len(self.slots), "values": len(self.values), "peak": str(self.peak),
                "unplanned": str(self.unplanned),
                "slots": [{"slot": k, "bytes": str(self.slot_bytes(k)), "values": list(m)}
                          for k, m in enumerate(self.slots)],
                "excluded": {str(i): why for i, why in sorted(self.excluded.items())}}

    def lines(self, code: Code) -> list:
        """The dump's lines: one per slot, then the peak."""
        nb, nv = len(self.slots), len(self.values)
        out = [f"  ; memory plan: {nb} buffer{'s' * (nb != 1)} for {nv} value{'s' * (nv != 1)}, peak {self.peak} bytes "
               f"(one buffer per value: {self.unplanned})"]
        for k, members in enumerate(self.slots):
            at = ", ".join(f"0x{code.instrs[i].offset:04x}" + ("*" if self.values[i].in_place_of is not None else "")
                           for i in members)
            out.append(f"  ;   buf{k}: {self.slot_bytes(k)} bytes <- {at}")
        return out


def _sample_size(code: Code, i: int, nbytes: Expr) -> int:
    """Instruction i's value's bytes at the first sample point where they evaluate (every symbol the
    same value: only for comparing sizes), else PlanRefused naming the value and the expression."""
    err = None
    for v in SAMPLES:
        try:
            return int(nbytes.evaluate({s: v for s in nbytes.symbols()}))
        except SymbolicError as e:
            err = e
    ins = code.instrs[i]
    raise PlanRefused(f"the size of {ins.op.name}'s result at 0x{ins.offset:04x} ({nbytes} bytes) cannot be "
                      f"evaluated with every symbol {' or '.join(map(str, SAMPLES))}: {err}")


# ---------------------------------------------------------------- the pass

def apply(code: Code, device_id: int = 0, memo: dict | None = None) -> Code:
    """A new verified Code with ALLOC_DEVICE_MEM at entry, FREE_DEVICE_MEM before each RETURN and its
    plan in ``memplan`` (callees too); a Code with nothing to plan comes back as it is."""
    memo = {} if memo is None else memo
    callees = []
    for path, sub in code.callees:
        key = ("applied", id(sub))
        if key not in memo:
            memo[key] = (sub, apply(sub, device_id, memo))
        callees.append((path, memo[key][1]))
    changed = any(a is not b for (_, a), (_, b) in zip(callees, code.callees))
    try:
        probe = plan(code, memo)
    except PlanRefused as e:
        return _refused(code, callees, changed, str(e))
    if probe is None or not probe.values:
        if not changed:
            return code
        new = _copy(code, list(code.instrs), callees)
        verify(new)
        return new
    consts = list(code.consts)
    dev, consts = _intern(consts, device_id)
    stream, consts = _intern(consts, 0)
    alloc = BY_NAME["ALLOC_DEVICE_MEM"]
    free = BY_NAME["FREE_DEVICE_MEM"]
    targets = {}
    for ins in code.instrs:
        li = ins.op.label_operand
        if li is not None:
            targets[id(ins)] = code.instrs[code.index_at(ins.args[li])]
    copies = {id(i): Instr(i.op, i.args, i.loc, i.parts) for i in code.instrs}
    first = code.instrs[0].loc if code.instrs else None
    instrs = [Instr(alloc, (dev, stream), first)] if first is not None else []
    land = {}                  # id of an original instruction -> the instruction a jump to it lands on
    for ins in code.instrs:
        c = copies[id(ins)]
        if ins.op.name == "RETURN":
            f = Instr(free, (dev, stream), ins.loc)
            instrs.append(f)
            land[id(ins)] = f
        instrs.append(c)
    new = _copy(code, instrs, callees, consts)
    new.relayout()
    for ins in code.instrs:
        li = ins.op.label_operand
        if li is not None:
            t = targets[id(ins)]
            c = copies[id(ins)]
            args = list(c.args)
            args[li] = (land.get(id(t)) or copies[id(t)]).offset
            c.args = tuple(args)
    verify(new)
    try:
        new.memplan = plan(new, memo)
    except PlanRefused as e:               # (the rewritten Code's analysis must agree with the probe's)
        return _refused(code, callees, changed, f"after ALLOC/FREE were added: {e}")
    return new


def _refused(code: Code, callees: list, changed: bool, why: str) -> Code:
    """``code`` without a plan of its own (its callees keep theirs), and why, said once: the ``[MS]``
    log, an ``error`` event and ``memplan_refused`` on the Code returned."""
    new = code
    if changed:
        new = _copy(code, list(code.instrs), callees)
        verify(new)
    new.memplan_refused = why
    where = f"{code.name} ({code.filename}:{code.firstlineno})"
    log.logger.warning("memory plan refused for %s: %s; it runs with one buffer per value", where, why)
    events.emit({"type": "error", "what": "memory plan", "op": "ALLOC_DEVICE_MEM", "code": code.name,
                 "code_id": new.uid, "file": code.filename, "line": code.firstlineno, "why": why,
                 "reason_kind": "refused", "reason": f"memory plan refused for {where}: {why}"})
    return new


def _copy(code: Code, instrs, callees, consts=None) -> Code:
    new = Code(code.name, code.filename, code.firstlineno, instrs, list(consts if consts is not None else code.consts),
               list(code.names), list(code.varnames), list(code.params), dict(code.attr_types), callees,
               may_be_one=code.may_be_one)
    new.hover = code.hover
    new.fusion_s = code.fusion_s
    for attr in ("fused_from", "specialized_on"):
        if hasattr(code, attr):
            setattr(new, attr, getattr(code, attr))
    return new


def _intern(consts: list, v: int):
    for k, c in enumerate(consts):
        if type(c) is int and c == v:
            return k, consts
    consts.append(v)
    return len(consts) - 1, consts


# ---------------------------------------------------------------- the analysis

def _successors(code: Code, i: int) -> list:
    ins = code.instrs[i]
    out = [] if ins.op.terminator else [i + 1]
    li = ins.op.label_operand
    if li is not None:
        out.append(code.index_at(ins.args[li]))
    return [j for j in out if j < len(code.instrs)]


def _live_locals(code: Code) -> list:
    """Per instruction: the local slots that may be read at or after it (live before it)."""
    n = len(code.instrs)
    live = [frozenset()] * n
    succ = [_successors(code, i) for i in range(n)]
    changed = True
    while changed:
        changed = False
        for i in range(n - 1, -1, -1):
            ins = code.instrs[i]
            s = set().union(*(live[j] for j in succ[i])) if succ[i] else set()
            if ins.op.name == "STORE_TENSOR":
                s.discard(ins.args[0])
            elif ins.op.name == "LOAD_TENSOR":
                s.add(ins.args[0])
            s = frozenset(s)
            if s != live[i]:
                live[i] = s
                changed = True
    return live


def _candidate(code: Code, i: int, loops: set):
    """(shape, dtype) when instruction i's result could take a planned buffer, else why not (a str)."""
    ins = code.instrs[i]
    name = ins.op.name
    if not (name in OUT_CAPABLE or name in WRITES_INTO):
        return None
    st, nxt = code.stack_types[i] if i < len(code.stack_types) else None, \
        code.stack_types[i + 1] if i + 1 < len(code.stack_types) else None
    if not st or not nxt:
        return "no static types"
    out = nxt[-1]
    if not isinstance(out, TensorType) or out.rank == 0:
        return "not a tensor of rank >= 1"
    if i in loops:
        return "in a loop"
    n = ins.op.n_pops(code.decode_args(ins))
    if name in OUT_CAPABLE and not all(isinstance(t, (TensorType, ScalarType)) for t in st[len(st) - n:]):
        return "an input is neither a tensor nor a number"
    if not all(isinstance(d, Expr) for d in out.shape):
        return "unknown dims"
    try:
        dtype = np.dtype(out.dtype.np)
    except Exception:  # noqa: BLE001
        return "no numpy dtype"
    if dtype.hasobject:
        return "object dtype"
    return (tuple(out.shape), dtype)


EMPTY = (frozenset(), None)


def _merge(a, b):
    return (a[0] | b[0], a[1] if a[1] == b[1] else None)


def returned_params(code: Code, memo: dict) -> frozenset:
    """The indexes of the parameters whose value (or a view of it) a call of this Code may return."""
    key = ("returns", id(code))
    if key not in memo:
        memo[key] = (code, None)         # (a recursive call: taken as returning every parameter)
        flow = _flow(code, {}, memo)
        memo[key] = (code, frozenset(range(len(code.params))) if flow is None
                     else frozenset(-k - 1 for k in flow[1] if k < 0))
    got = memo[key][1]
    return frozenset(range(len(code.params))) if got is None else got


def plan(code: Code, memo: dict | None = None) -> MemPlan | None:
    """The plan of a verified Code (None when it has no instructions); PlanRefused when it cannot be
    planned soundly (not verified, stacks that disagree where paths meet, a size that does not evaluate)."""
    memo = {} if memo is None else memo
    n = len(code.instrs)
    if not n:
        return None
    if len(code.stack_types) < n:
        raise PlanRefused("no static types (the Code was not verified)")
    loops = code.loop_body()
    cand, excluded = {}, {}
    for i in range(n):
        c = _candidate(code, i, loops)
        if isinstance(c, tuple):
            cand[i] = c
        elif isinstance(c, str):
            excluded[i] = c
    states, escaping = _flow(code, cand, memo)
    return _colour(code, cand, excluded, states, escaping)


def _flow(code: Code, cand: dict, memo: dict):
    """Forward to a fixpoint: which values each stack entry and local may hold before each
    instruction, an entry being (ids, the id it is exactly, or None); parameter k is id -k-1.
    Returns (states, the ids that may be returned or stored); PlanRefused on a stack mismatch."""
    n = len(code.instrs)
    states: list = [None] * n
    slots = {name: k for k, name in enumerate(code.varnames)}
    states[0] = ((), {slots[p]: (frozenset({-k - 1}), None) for k, (p, _) in enumerate(code.params) if p in slots})
    work, escaping = [0], set()
    while work:
        i = work.pop()
        stack, loc = states[i]
        stack, loc = list(stack), dict(loc)
        ins = code.instrs[i]
        args = code.decode_args(ins)
        name = ins.op.name
        npop = ins.op.n_pops(args)
        popped = stack[len(stack) - npop:] if npop else []
        del stack[len(stack) - npop:]
        union = frozenset().union(*(e[0] for e in popped)) if popped else frozenset()
        if name == "LOAD_TENSOR":
            stack.append(loc.get(args[0], EMPTY))
        elif name == "STORE_TENSOR":
            loc[args[0]] = popped[0]
        elif name == "RETURN":
            escaping |= popped[0][0]
        else:
            if name == "ASSIGN_PARAM":
                escaping |= union
            if i in cand:
                pushed = (frozenset({i}), i)
            elif name in FRESH:
                pushed = EMPTY
            elif name == "CALL_CELL":
                back = returned_params(args[0][1], memo)
                pushed = (frozenset().union(*(popped[k][0] for k in back if k < len(popped))), None)
            else:
                pushed = (union, None)
            stack.extend([pushed] * ins.op.n_pushes(args))
        for j in _successors(code, i):
            new = (tuple(stack), loc)
            old = states[j]
            if old is None:
                states[j] = new
                work.append(j)
                continue
            if len(old[0]) != len(new[0]):   # (the verifier rejects this; never plan what it did not check)
                raise PlanRefused(f"stack depths {len(old[0])} and {len(new[0])} meet at "
                                  f"0x{code.instrs[j].offset:04x} (from 0x{ins.offset:04x})")
            merged = (tuple(_merge(a, b) for a, b in zip(old[0], new[0])),
                      {k: _merge(old[1].get(k, EMPTY), new[1].get(k, EMPTY)) for k in set(old[1]) | set(new[1])})
            if merged != old:
                states[j] = merged
                work.append(j)
    return states, escaping


def _colour(code: Code, cand: dict, excluded: dict, states: list, escaping: set) -> MemPlan:
    n = len(code.instrs)
    for i in list(cand):
        if i in escaping:
            excluded[i] = "escapes (returned or stored)"
            del cand[i]
        elif states[i] is None:
            del cand[i]
    live_loc = _live_locals(code)
    mp = MemPlan(excluded=excluded)
    live = []
    for i in range(n):
        st = states[i]
        if st is None:
            live.append(frozenset())
            continue
        ids = set()
        for e in st[0]:
            ids |= e[0]
        for slot in live_loc[i]:
            ids |= st[1].get(slot, EMPTY)[0]
        live.append(frozenset(ids & cand.keys()))
    mp.live = live
    mp.outputs = [i if i in cand else None for i in range(n)]
    # interference: live together before an instruction, or an input with the result it makes
    adj = {i: set() for i in cand}
    partner = {}
    for i in range(n):
        group = set(live[i])
        if i in cand:
            group.add(i)
            p = _in_place(code, i, states[i], live, cand)
            if p is not None:
                partner[i] = p
        for a in group:
            adj[a] |= group
    for i, p in partner.items():
        adj[i].discard(p)
        adj[p].discard(i)
    for i in adj:
        adj[i].discard(i)
    for i in partner:                    # an input live together with i elsewhere (a loop, another path) stays apart
        if any(partner[i] in live[j] and i in live[j] for j in range(n)):
            adj[i].add(partner[i])
            adj[partner[i]].add(i)
            partner[i] = None
    slot_of: dict = {}
    samples: list = []                   # per slot: its size at SAMPLE, for choosing
    for i in sorted(cand):
        shape, dtype = cand[i]
        nbytes = Expr.const(dtype.itemsize) * product(shape)
        size = _sample_size(code, i, nbytes)
        taken = {slot_of[j] for j in adj[i] if j in slot_of}
        k = None
        p = partner.get(i)
        if p is not None and p in slot_of and slot_of[p] not in taken:
            k = slot_of[p]
        if k is None:
            free = [s for s in range(len(mp.slots)) if s not in taken]
            if free:
                k = min(free, key=lambda s: _fit(samples[s], size))
        if k is None:
            k = len(mp.slots)
            mp.slots.append([])
            samples.append(size)
        else:
            samples[k] = max(samples[k], size)
        mp.slots[k].append(i)
        slot_of[i] = k
        mp.values[i] = Value(i, k, shape, dtype, nbytes, p if p is not None and slot_of.get(p) == k else None)
    return mp


def _fit(have: int, want: int):
    """How well a slot of ``have`` bytes takes a value of ``want`` (smaller is better): the same size
    first, then the smallest slot that already holds it, then the largest that must grow."""
    if have == want:
        return (0, 0)
    if have > want:
        return (1, have - want)
    return (2, want - have)


def _in_place(code: Code, i: int, state, live: list, cand: dict):
    """The input value instruction i may overwrite with its result: an elementwise instruction, an
    input that is exactly that value (not a view), dies here, has the result's shape and dtype, and
    no other input holds it otherwise."""
    ins = code.instrs[i]
    if ins.op.name not in IN_PLACE or state is None:
        return None
    args = code.decode_args(ins)
    npop = ins.op.n_pops(args)
    popped = state[0][len(state[0]) - npop:] if npop else ()
    after = set()
    for j in _successors(code, i):
        after |= live[j]
    for _ids, exact in popped:
        if exact is None or exact not in cand or exact in after:
            continue
        if cand[exact] != cand[i]:
            continue
        if all(e[1] == exact for e in popped if exact in e[0]):
            return exact
    return None


# ---------------------------------------------------------------- checking a plan

def check(code: Code, mp: MemPlan) -> list:
    """Problems with a plan (empty when sound): two values live at one point in one slot (other than
    an in-place pair at the instruction that makes it), a value in a slot whose capacity is smaller."""
    problems = []
    for i, group in enumerate(mp.live):
        vals = set(group)
        out = mp.outputs[i] if i < len(mp.outputs) else None
        if out is not None:
            vals.add(out)
        by_slot: dict = {}
        for v in vals:
            by_slot.setdefault(mp.values[v].slot, []).append(v)
        for k, vs in by_slot.items():
            if len(vs) < 2:
                continue
            pair = out is not None and len(vs) == 2 and mp.values[out].in_place_of in vs
            if not pair:
                problems.append(f"0x{code.instrs[i].offset:04x}: values {sorted(vs)} share buf{k} while live")
    for v in mp.values.values():
        if v.index not in mp.slots[v.slot]:
            problems.append(f"value {v.index} is not listed in buf{v.slot}")
    return problems
