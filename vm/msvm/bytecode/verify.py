"""The verifier: abstract interpretation of a Code over static types.

It walks every reachable path with a worklist, applying each instruction's
shape rule from the opcode table to the metadata stack, and checks operand
indexes, label targets, stack depth, locals used before assignment and that no
path falls off the end. At a join, dims that differ become a fresh ``join``
symbol. It fills ``code.stack_types`` (the metadata stack before each
instruction), ``code.result_type`` and ``code.assumptions`` (equalities that
could not be decided statically; the VM checks them on entry). Errors are
``VerifyError`` at the instruction's source line and bytecode offset.
"""

from __future__ import annotations

from ..errors import VerifyError
from .code import Code
from .symbolic import Expr, Pred, fmt_shape, sym
from .types import NONE, ScalarType, ShapeEnv, ShapeError, TensorType, TupleType

MAX_STACK = 1024


class _Undef:
    def __str__(self):
        return "<unassigned>"


UNDEF = _Undef()


def entry_symbols(params) -> set:
    out = set()
    for _, t in params:
        if isinstance(t, TensorType):
            for d in t.shape:
                n = d.as_symbol()
                if n:
                    out.add(n)
    return out


def bind_callee(env: ShapeEnv, callee: Code, ins: list, where: str) -> dict:
    """Map the callee's parameter symbols to the caller's exprs; raise ShapeError on mismatch."""
    if len(ins) != len(callee.params):
        raise ShapeError(f"{where}: {callee.name} takes {len(callee.params)} arguments, got {len(ins)}")
    mapping: dict = {}
    for (pname, pt), at in zip(callee.params, ins):
        at = env.norm_type(at)
        if isinstance(pt, TensorType):
            if not isinstance(at, TensorType) or at.rank != pt.rank or at.dtype is not pt.dtype:
                raise ShapeError(f"{where}: argument {pname} of {callee.name} must be {pt}, got {at}")
            for d_callee, d_caller in zip(pt.shape, at.shape):
                name = d_callee.as_symbol()
                if name and name not in mapping:
                    mapping[name] = d_caller
                else:
                    env.require_eq(d_caller, d_callee.subs(mapping),
                                   f"{where}: argument {pname} of {callee.name} must be {fmt_shape(pt.shape)}, "
                                   f"got {fmt_shape(at.shape)}")
        elif isinstance(pt, ScalarType):
            if not isinstance(at, ScalarType):
                raise ShapeError(f"{where}: argument {pname} of {callee.name} must be a scalar, got {at}")
            if isinstance(pt.value, Expr) and pt.value.as_symbol():
                mapping[pt.value.as_symbol()] = at.value if isinstance(at.value, Expr) else sym(f"{pname}?")
            elif isinstance(pt.value, Pred) and pt.value.op == "flag":
                mapping[pt.value.args[0]] = at.value if isinstance(at.value, Pred) else Pred("flag", (f"{pname}?",))
        elif pt != at:
            raise ShapeError(f"{where}: argument {pname} of {callee.name} must be {pt}, got {at}")
    for a, b, why in callee.assumptions:
        env.require_eq(a.subs(mapping), b.subs(mapping), f"{where}: {why}")
    return mapping


def subs_type(t, mapping):
    if isinstance(t, TensorType):
        return TensorType(tuple(d.subs(mapping) for d in t.shape), t.dtype)
    if isinstance(t, ScalarType) and isinstance(t.value, (Expr, Pred)):
        return ScalarType(t.kind, t.value.subs(mapping))
    if isinstance(t, TupleType):
        return TupleType(tuple(subs_type(x, mapping) for x in t.items))
    return t


class _Ctx:
    """What shape rules may ask of the verifier (same interface the frontend offers)."""

    def __init__(self, code: Code, env: ShapeEnv):
        self.code = code
        self.env = env
        self.locals: dict = {}
        self.offset = 0

    def local_type(self, slot):
        t = self.locals.get(slot, UNDEF)
        if t is UNDEF:
            raise ShapeError(f"local {self.code.varnames[slot]!r} may be used before it is assigned")
        return self.env.norm_type(t)

    def set_local(self, slot, t):
        self.locals[slot] = t

    def attr_type(self, name):
        try:
            return self.code.attr_types[name]
        except KeyError:
            raise ShapeError(f"attribute {name!r} has no recorded type") from None

    def set_symbol(self, name, expr):
        pass

    def call(self, callee, ins):
        path, sub = callee
        if sub.result_type is None:
            verify(sub)
        mapping = bind_callee(self.env, sub, ins, f"CALL_CELL {path}")
        return subs_type(sub.result_type, mapping)

    def branch(self, target):
        pass


def _merge(a, b, where: str, what: str):
    if a == b:
        return a
    if a is UNDEF or b is UNDEF:
        return UNDEF
    if isinstance(a, TensorType) and isinstance(b, TensorType):
        if a.rank != b.rank or a.dtype is not b.dtype:
            raise ShapeError(f"{what} is {a} on one path and {b} on another ({where})")
        return TensorType(tuple(x if x == y else sym(f"join{where}_{i}") for i, (x, y) in
                                enumerate(zip(a.shape, b.shape))), a.dtype)
    if isinstance(a, ScalarType) and isinstance(b, ScalarType) and a.kind == b.kind:
        return ScalarType(a.kind)
    if isinstance(a, TupleType) and isinstance(b, TupleType) and len(a.items) == len(b.items):
        return TupleType(tuple(_merge(x, y, where, what) for x, y in zip(a.items, b.items)))
    raise ShapeError(f"{what} is {a} on one path and {b} on another ({where})")


def _check_operands(code: Code, ins, i):
    for (oname, kind), raw in zip(ins.op.operands, ins.args):
        table = {"const": code.consts, "name": code.names, "local": code.varnames, "callee": code.callees}.get(kind)
        if table is not None and not 0 <= raw < len(table):
            raise ShapeError(f"{ins.op.name}: operand {oname}={raw} is out of range ({len(table)} {kind} entries)")
        if kind == "label" and raw not in code.offset_index and raw != code.size:
            raise ShapeError(f"{ins.op.name}: jump target 0x{raw:04x} is not the start of an instruction")
        if kind == "label" and raw == code.size:
            raise ShapeError(f"{ins.op.name}: jump target 0x{raw:04x} is past the last instruction")


def verify(code: Code, env: ShapeEnv | None = None) -> Code:
    """Check ``code`` (and its callees); fill stack_types, result_type, assumptions."""
    for _, sub in code.callees:
        if sub.result_type is None:
            verify(sub)
    if env is None:
        env = ShapeEnv(entry_symbols(code.params))
        env.may_be_one = set(code.may_be_one)
    n = len(code.instrs)
    if n == 0:
        raise VerifyError("empty code: no instructions", code.filename, code.firstlineno, 0)
    ctx = _Ctx(code, env)
    slots = {name: i for i, name in enumerate(code.varnames)}
    entry_locals = {}
    for pname, t in code.params:
        if pname not in slots:
            raise VerifyError(f"parameter {pname!r} has no local slot", code.filename, code.firstlineno, 0)
        entry_locals[slots[pname]] = t
    states: list = [None] * n          # (stack tuple, locals dict) before each instruction
    states[0] = ((), entry_locals)
    work = [0]
    results = []
    while work:
        i = work.pop()
        ins = code.instrs[i]
        stack, local_types = states[i]
        ctx.locals = dict(local_types)
        ctx.offset = ins.offset
        try:
            _check_operands(code, ins, i)
            args = code.decode_args(ins)
            npop = ins.op.n_pops(args)
            if npop > len(stack):
                raise ShapeError(f"{ins.op.name} pops {npop} values but the stack holds {len(stack)}")
            popped = [env.norm_type(t) for t in stack[len(stack) - npop:]]
            rest = stack[:len(stack) - npop]
            n_assumed = len(env.assumptions)
            out = ins.op.rule(ctx, popped, args)
            for k in range(n_assumed, len(env.assumptions)):   # say where each assumption comes from
                a, b, why = env.assumptions[k]
                env.assumptions[k] = (a, b, f"{code.filename}:{ins.loc} (0x{ins.offset:04x}): {why}")
            pushed = [] if out is None else (out if isinstance(out, list) else [out])
            if len(pushed) != ins.op.n_pushes(args):
                raise ShapeError(f"{ins.op.name}: rule pushed {len(pushed)} values, table says {ins.op.n_pushes(args)}")
            new_stack = rest + tuple(pushed)
            if len(new_stack) > MAX_STACK:
                raise ShapeError(f"operand stack deeper than {MAX_STACK}")
            if ins.op.name == "RETURN":
                results.append(popped[0])
            succ = []
            if not ins.op.terminator:
                if i + 1 >= n:
                    raise ShapeError(f"{ins.op.name} at the end of the code falls off the end (no RETURN)")
                succ.append(i + 1)
            li = ins.op.label_operand
            if li is not None:
                succ.append(code.offset_index[ins.args[li]])
            for j in succ:
                new = (new_stack, ctx.locals)
                old = states[j]
                if old is None:
                    states[j] = (new_stack, dict(ctx.locals))
                    work.append(j)
                    continue
                merged = _merge_state(old, new, code, j)
                if merged != old:
                    states[j] = merged
                    work.append(j)
        except ShapeError as e:
            raise VerifyError(str(e), code.filename, ins.loc.line, ins.loc.col, ins.loc.end_line,
                              ins.loc.end_col, ins.offset) from None
    if not results:
        raise VerifyError("no RETURN is reachable", code.filename, code.firstlineno, 0)
    result = results[0]
    try:
        for r in results[1:]:
            result = _merge(env.norm_type(result), env.norm_type(r), "return", "the result")
    except ShapeError as e:
        raise VerifyError(str(e), code.filename, code.firstlineno, 0) from None
    code.stack_types = [tuple(env.norm_type(t) for t in s[0]) if s else None for s in states]
    code.result_type = env.norm_type(result)
    code.assumptions = list(env.assumptions)
    code.params = [(p, env.norm_type(t)) for p, t in code.params]
    return code


def _merge_state(old, new, code, j):
    (s1, l1), (s2, l2) = old, new
    where = f"@{code.instrs[j].offset:04x}"
    if len(s1) != len(s2):
        raise ShapeError(f"stack depth {len(s1)} and {len(s2)} meet at offset 0x{code.instrs[j].offset:04x}")
    stack = tuple(_merge(a, b, where, "a stack value") for a, b in zip(s1, s2))
    local_types = {}
    for k in set(l1) | set(l2):
        local_types[k] = _merge(l1.get(k, UNDEF), l2.get(k, UNDEF), where, f"local {code.varnames[k]!r}")
    return stack, local_types


def describe_stack(types) -> list:
    return [str(t) if t is not NONE else "None" for t in (types or ())]
