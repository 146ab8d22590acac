"""The verifier: abstract interpretation of a Code over static types.

Every instruction, reachable or not, is checked on its own first: operand
indexes in range, label targets on instruction boundaries, each constant
operand of the type its instruction needs, and every symbol and flag its
operands use bound (by a parameter or by a SET_SYM). Unreachable code is
accepted, not stripped (stripping would move the offsets that labels, the source
map and breakpoints refer to; the flag specializer strips its own), but it must
pass these checks, because the interpreter links every instruction, reachable or
not. It cannot be typed: no path gives it a stack.

Then it walks every reachable path with a worklist, applying each instruction's
shape rule from the opcode table to the metadata stack, and checks stack depth,
locals used before assignment, symbols used before the SET_SYM that binds them
and that no path falls off the end. At a join, dims that differ become a fresh
``join`` symbol. It fills ``code.stack_types`` (the metadata stack before each
instruction), ``code.result_type`` and ``code.assumptions`` (equalities that
could not be decided statically; the VM checks them on entry). Errors are
``VerifyError`` at the instruction's source line and bytecode offset.
"""

from __future__ import annotations

import heapq

from ..errors import VerifyError
from .code import Code
from .operands import const_problem
from .symbolic import Expr, Pred, SymbolicError, fmt_shape, select, sym, work_limit
from .types import NONE, ScalarType, ShapeEnv, ShapeError, TensorType, TupleType, simplify_dim

MAX_STACK = 1024
WORK_LIMIT = 1 << 22       # stack entries kept and local-variable entries copied or merged, per function
SYMBOLIC_WORK = 1 << 18    # term operations of symbolic arithmetic per function (BERT's layer takes ~700)


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


def bound_symbols(params) -> set:
    """The symbols and flags the VM binds from the arguments on entry (as the binder does):
    a dim that is exactly a symbol, a scalar argument whose value is a symbol or a flag."""
    out = entry_symbols(params)
    for _, t in params:
        if isinstance(t, ScalarType) and isinstance(t.value, Expr) and t.value.as_symbol():
            out.add(t.value.as_symbol())
        elif isinstance(t, ScalarType) and isinstance(t.value, Pred) and t.value.op == "flag":
            out.add(t.value.args[0])
    return out


def bind_callee(env: ShapeEnv, callee: Code, ins: list, where: str) -> dict:
    """Map the callee's parameter symbols to the caller's exprs; raise ShapeError on mismatch."""
    if len(ins) != len(callee.params):
        raise ShapeError(f"{where}: {callee.name} takes {len(callee.params)} arguments, got {len(ins)}")
    mapping: dict = {}
    checks = []            # (a dim given, the callee's expression for it): checked once every symbol is mapped
    for (pname, pt), at in zip(callee.params, ins):
        at = env.norm_type(at)
        if isinstance(pt, TensorType):
            if not isinstance(at, TensorType) or at.rank != pt.rank or at.dtype is not pt.dtype:
                raise ShapeError(f"{where}: argument {pname} of {callee.name} must be {pt}, got {at}")
            for d_callee, d_caller in zip(pt.shape, at.shape):
                name = d_callee.as_symbol()
                if name and name not in mapping:
                    mapping[name] = d_caller
                else:          # (a dim over a later argument's symbol: mindcv's nasnet, x's dims (x_prev2 - 1) // 2 + 1)
                    checks.append((d_caller, d_callee, f"{where}: argument {pname} of {callee.name} must be "
                                                       f"{fmt_shape(pt.shape)}, got {fmt_shape(at.shape)}"))
        elif isinstance(pt, ScalarType):
            if not isinstance(at, ScalarType):
                raise ShapeError(f"{where}: argument {pname} of {callee.name} must be a scalar, got {at}")
            if isinstance(pt.value, Expr) and pt.value.as_symbol():
                mapping[pt.value.as_symbol()] = at.value if isinstance(at.value, Expr) else sym(f"{pname}?")
            elif isinstance(pt.value, Pred) and pt.value.op == "flag":
                mapping[pt.value.args[0]] = at.value if isinstance(at.value, Pred) else Pred("flag", (f"{pname}?",))
        elif pt != at:
            raise ShapeError(f"{where}: argument {pname} of {callee.name} must be {pt}, got {at}")
    for d_caller, d_callee, why in checks:
        env.require_eq(d_caller, d_callee.subs(mapping), why)
    for a, b, why in callee.assumptions:
        env.require_eq(a.subs(mapping), b.subs(mapping), f"{where}: {why}")
    return mapping


def subs_type(t, mapping):
    if isinstance(t, TensorType):
        return TensorType(tuple(simplify_dim(d.subs(mapping)) for d in t.shape), t.dtype)
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
        self.own_locals = True
        self.budget = WORK_LIMIT
        self.offset = 0

    def local_type(self, slot):
        t = self.locals.get(slot, UNDEF)
        if t is UNDEF:
            raise ShapeError(f"local {self.code.varnames[slot]!r} may be used before it is assigned")
        return self.env.norm_type(t)

    def set_local(self, slot, t):
        if not self.own_locals:        # the block's entry state is shared: copy it before the first store
            self.spend(len(self.locals))
            self.locals = dict(self.locals)
            self.own_locals = True
        self.locals[slot] = t

    def spend(self, n: int):
        """The stack kept before each instruction and the copies and merges of local-variable states
        grow with length x depth and blocks x locals, the verifier's only super-linear work: capped."""
        self.budget -= n
        if self.budget < 0:
            raise ShapeError(f"too complex to verify: more than {WORK_LIMIT} stack and local-variable entries "
                             f"kept, copied or merged ({len(self.code.instrs)} instructions, "
                             f"{len(self.code.varnames)} locals); split the function")

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


def _merge(a, b, where: str, what: str, pred=None):
    """a and b of two paths that meet. ``pred``: the paths are the two sides of one BRANCH_IF_SYMBOLIC
    (a where pred holds, b where it does not): a dim that differs is ``select(pred, a's, b's)``, the
    frontend's own type for the name after its if (``FunctionCompiler.merge_types``), which the VM
    evaluates from the call's symbols. Otherwise (a loop's back edge) it is a fresh ``join`` symbol."""
    if a == b:
        return a
    if a is UNDEF or b is UNDEF:
        return UNDEF
    if isinstance(a, TensorType) and isinstance(b, TensorType):
        if a.rank != b.rank or a.dtype is not b.dtype:
            raise ShapeError(f"{what} is {a} on one path and {b} on another ({where})")
        return TensorType(tuple(x if x == y else select(pred, x, y) if pred is not None else sym(f"join{where}_{i}")
                                for i, (x, y) in enumerate(zip(a.shape, b.shape))), a.dtype)
    if isinstance(a, ScalarType) and isinstance(b, ScalarType) and a.kind == b.kind:
        return ScalarType(a.kind)
    if isinstance(a, TupleType) and isinstance(b, TupleType) and len(a.items) == len(b.items):
        return TupleType(tuple(_merge(x, y, where, what, pred) for x, y in zip(a.items, b.items)))
    raise ShapeError(f"{what} is {a} on one path and {b} on another ({where})")


def operand_symbols(code: Code, ins, cache: dict | None = None) -> set:
    """The symbols and flags the constant operands of ``ins`` use (evaluated at run time);
    ``cache`` keeps them per constant index (many instructions share one constant)."""
    out: set = set()
    for (_, kind), raw in zip(ins.op.operands, ins.args):
        if kind != "const":
            continue
        syms = cache.get(raw) if cache is not None else None
        if syms is None:
            syms, todo = set(), [code.consts[raw]]
            while todo:
                v = todo.pop()
                if isinstance(v, (Expr, Pred)):
                    syms |= v.symbols()
                elif isinstance(v, tuple):
                    todo.extend(v)
            if cache is not None:
                cache[raw] = syms
        out |= syms
    return out


def _check_operands(code: Code, ins):
    for (oname, kind), raw in zip(ins.op.operands, ins.args):
        table = {"const": code.consts, "name": code.names, "local": code.varnames, "callee": code.callees}.get(kind)
        if table is not None and not 0 <= raw < len(table):
            raise ShapeError(f"{ins.op.name}: operand {oname}={raw} is out of range ({len(table)} {kind} entries)")
        if kind == "label" and raw not in code.offset_index and raw != code.size:
            raise ShapeError(f"{ins.op.name}: jump target 0x{raw:04x} is not the start of an instruction")
        if kind == "label" and raw == code.size:
            raise ShapeError(f"{ins.op.name}: jump target 0x{raw:04x} is past the last instruction")
        if kind == "const":
            problem = const_problem(ins.op.name, oname, code.consts[raw])
            if problem:
                raise ShapeError(f"{ins.op.name}: {problem}")
        if kind == "name" and (ins.op.name == "SET_SYM" or ins.op.binds) and not code.names[raw]:
            raise ShapeError(f"{ins.op.name}: the symbol name is empty")


def _fail(code: Code, ins, message: str):
    return VerifyError(message, code.filename, ins.loc.line, ins.loc.col, ins.loc.end_line, ins.loc.end_col,
                       ins.offset)


def check_instructions(code: Code):
    """The checks every instruction passes, reachable or not (see the module docstring)."""
    for ins in code.instrs:
        try:
            _check_operands(code, ins)
        except ShapeError as e:
            raise _fail(code, ins, str(e)) from None


def _check_symbols(code: Code, params, states):
    """Every symbol and flag an operand uses is bound: by the arguments on entry, or by a
    SET_SYM on every path to it (for unreachable code: by some SET_SYM in the code)."""
    entry = bound_symbols(params)
    for pname, t in params:
        values = list(t.shape) if isinstance(t, TensorType) else [t.value] if isinstance(t, ScalarType) else []
        for v in values:
            if isinstance(v, (Expr, Pred)) and not v.symbols() <= entry:
                missing = ", ".join(sorted(v.symbols() - entry))
                raise VerifyError(f"parameter {pname!r} ({t}) uses {missing}, which no argument binds",
                                  code.filename, code.firstlineno, 0)
    anywhere = {code.names[ins.args[0]] for ins in code.instrs if ins.op.name == "SET_SYM" or ins.op.binds}
    anywhere |= {d[0] for ins in code.instrs if ins.op.name == "BIND_DIMS" for d in code.decode_args(ins)[0]}
    cache: dict = {}
    for i, ins in enumerate(code.instrs):
        used = operand_symbols(code, ins, cache)
        if not used:
            continue
        defined = states[i][1] if states[i] is not None else anywhere
        missing = used - entry - defined
        if missing:
            why = ("no argument binds it and no SET_SYM before it does" if states[i] is not None
                   else "no argument binds it and no SET_SYM does (unreachable code)")
            raise _fail(code, ins, f"{ins.op.name} uses {', '.join(sorted(missing))}: {why}")


def verify(code: Code, env: ShapeEnv | None = None) -> Code:
    """Check ``code`` (and its callees); fill stack_types, result_type, assumptions."""
    for _, sub in code.callees:
        if sub.result_type is None:
            verify(sub)
    try:
        with work_limit(SYMBOLIC_WORK):
            return _verify(code, env)
    except SymbolicError as e:          # the symbolic work ran out outside an instruction
        raise VerifyError(str(e), code.filename, code.firstlineno, 0) from None


def raise_guards(code: Code) -> set:
    """In a code that may RAISE, the symbols its branches test stay symbols (the frontend's
    keep_symbolic): an equality met later is an entry check, not a substitution that would fold
    the guard of the user's raise away."""
    if not any(ins.op.name == "RAISE" for ins in code.instrs):
        return set()
    out: set = set()
    for ins in code.instrs:
        if ins.op.name == "BRANCH_IF_SYMBOLIC":
            pred = code.decode_args(ins)[0]
            if hasattr(pred, "symbols"):
                out |= pred.symbols()
    return out


def _verify(code: Code, env: ShapeEnv | None) -> Code:
    if env is None:
        env = ShapeEnv(entry_symbols(code.params) - raise_guards(code))
        env.may_be_one = set(code.may_be_one)
    n = len(code.instrs)
    if n == 0:
        raise VerifyError("empty code: no instructions", code.filename, code.firstlineno, 0)
    check_instructions(code)
    ctx = _Ctx(code, env)
    slots = {name: i for i, name in enumerate(code.varnames)}
    entry_locals = {}
    for pname, t in code.params:
        if pname not in slots:
            raise VerifyError(f"parameter {pname!r} has no local slot", code.filename, code.firstlineno, 0)
        entry_locals[slots[pname]] = t
    leaders = _leaders(code)
    # (stack, locals, symbols SET_SYM bound, the branches taken: ((pred, held), ...)) at each leader
    block_in = {0: ((), entry_locals, frozenset(), ())}
    pre: list = [None] * n             # (stack, symbols) before each reachable instruction
    # blocks in bytecode order (a heap): an if's end is typed once, after both of its sides reached it,
    # so its instructions are never first checked on one side's types alone (an entry check made so would
    # stay: a reshape after ``if w % 2: x = pad(x)`` failed on the other side's element count)
    work, queued = [0], {0}
    results = []
    while work:
        i = heapq.heappop(work)
        queued.discard(i)
        stack, ctx.locals, syms, path = block_in[i]
        ctx.own_locals = False         # copied on the first store (most blocks store nothing)
        while True:                    # one basic block: straight-line until the next leader
            ins = code.instrs[i]
            pre[i] = (stack, syms)
            ctx.offset = ins.offset
            try:
                new_stack, succ = _step(code, ctx, env, ins, i, stack, results)
                ctx.spend(len(new_stack))
                if ins.op.name == "SET_SYM" or ins.op.binds:
                    syms = syms | {code.names[ins.args[0]]}
                elif ins.op.name == "BIND_DIMS":         # (issue 21: data-dependent dims)
                    syms = syms | {d[0] for d in code.decode_args(ins)[0]}
                if succ == [i + 1] and i + 1 not in leaders:
                    stack, i = new_stack, i + 1
                    continue
                for j in succ:
                    taken = path
                    if ins.op.name == "BRANCH_IF_SYMBOLIC":      # (i + 1 where the predicate holds)
                        taken = path + ((code.decode_args(ins)[0], j == i + 1),)
                    new = (new_stack, ctx.locals, syms, taken)
                    old = block_in.get(j)
                    if old is None:
                        block_in[j] = new
                    else:
                        merged = _merge_state(old, new, code, j, ctx)
                        if merged == old:
                            continue
                        block_in[j] = merged
                    if j not in queued:
                        queued.add(j)
                        heapq.heappush(work, j)
            except (ShapeError, SymbolicError) as e:
                raise _fail(code, ins, f"{ins.op.name}: {e}" if isinstance(e, SymbolicError) else str(e)) from None
            break
    if not results:
        raise VerifyError("no RETURN is reachable", code.filename, code.firstlineno, 0)
    result = results[0]
    try:
        for r in results[1:]:
            result = _merge(env.norm_type(result), env.norm_type(r), "return", "the result")
    except ShapeError as e:
        raise VerifyError(str(e), code.filename, code.firstlineno, 0) from None
    params = [(p, env.norm_type(t)) for p, t in code.params]
    _check_symbols(code, params, pre)          # against the parameters as the binder will see them
    norm = env.norm_type if env.subst else None
    code.stack_types = [None if s is None else tuple(norm(t) for t in s[0]) if norm else s[0] for s in pre]
    code.result_type = env.norm_type(result)
    code.assumptions = list(env.assumptions)
    code.params = params
    return code


def _leaders(code: Code) -> set:
    """The first instruction of each basic block: the entry, every jump target, what follows a branch."""
    out = {0}
    for i, ins in enumerate(code.instrs):
        li = ins.op.label_operand
        if li is not None:
            out.add(code.offset_index[ins.args[li]])
        if li is not None or ins.op.terminator:
            out.add(i + 1)
    return out


def _step(code: Code, ctx, env: ShapeEnv, ins, i: int, stack: tuple, results: list):
    """Apply one instruction's rule to the stack; returns (new stack, successor indexes)."""
    args = code.decode_args(ins)
    npop = ins.op.n_pops(args)
    if npop > len(stack):
        raise ShapeError(f"{ins.op.name} pops {npop} values but the stack holds {len(stack)}")
    popped = [env.norm_type(t) for t in stack[len(stack) - npop:]]
    rest = stack[:len(stack) - npop]
    n_assumed = len(env.assumptions)
    try:
        out = ins.op.rule(ctx, popped, args)
    except (ShapeError, SymbolicError):
        raise
    except Exception as e:  # noqa: BLE001 - operands a rule cannot use are a verify error, not a crash
        raise ShapeError(f"{ins.op.name}: the shape rule cannot use these operands "
                         f"({type(e).__name__}: {e})") from None
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
        if i + 1 >= len(code.instrs):
            raise ShapeError(f"{ins.op.name} at the end of the code falls off the end (no RETURN)")
        succ.append(i + 1)
    li = ins.op.label_operand
    if li is not None:
        succ.append(code.offset_index[ins.args[li]])
    return new_stack, succ


def _merge_state(old, new, code, j, ctx):
    (s1, l1, y1, p1), (s2, l2, y2, p2) = old, new
    where = f"@{code.instrs[j].offset:04x}"
    if len(s1) != len(s2):
        raise ShapeError(f"stack depth {len(s1)} and {len(s2)} meet at offset 0x{code.instrs[j].offset:04x}")
    common = 0
    while common < min(len(p1), len(p2)) and p1[common] == p2[common]:
        common += 1
    # the two sides of one branch meet (an if's end; a side may have passed checks of its own since, an
    # assert's or an op's): differing dims are selects on the branch's predicate
    pred = None
    if common < min(len(p1), len(p2)) and p1[common][0] == p2[common][0]:
        pred = p1[common][0]
        if not p1[common][1]:
            (s1, l1, p1), (s2, l2, p2) = (s2, l2, p2), (s1, l1, p1)
    stack = s1 if s1 == s2 else tuple(_merge(a, b, where, "a stack value", pred) for a, b in zip(s1, s2))
    if l1 is l2 or l1 == l2:
        local_types = l1
    else:
        ctx.spend(len(l1) + len(l2))
        local_types = {}
        for k in set(l1) | set(l2):
            local_types[k] = _merge(l1.get(k, UNDEF), l2.get(k, UNDEF), where, f"local {code.varnames[k]!r}", pred)
    return stack, local_types, y1 & y2, p1[:common]


def describe_stack(types) -> list:
    return [str(t) if t is not NONE else "None" for t in (types or ())]
