"""Straight-line replay of a linked Code for one exact call signature.

For one exact signature (each tensor argument's shape and dtype, each int and bool argument's
value) the path through a Code is fixed: branches test symbols and flags only, loops count over
symbols, and every symbol is a function of the signature. ``build(bound, env)`` walks that path
once and writes it as one Python function: the instructions' work in order, stack slots as local
variables, symbol expressions as constants. Branches, jumps, the operand stack, the frame and the
dispatch loop are gone; what is left is the calls into kernels and sites, which is what a compiled
Cell's call should cost.

The executor's call memo runs the replay for a signature it has seen before, above jit_level L1
(L1 is the interpreter itself), while no trace hook is installed and nobody listens to events.
A replay computes exactly what the interpreter computes: the same reference kernels, the same
compiled sites and the same kept output buffers, all taken from ``ComputeSpec``. If anything in
it raises, it returns ``FALLBACK`` and the caller runs the interpreter, which raises the error at
its instruction with its source location (every instruction is pure, so running again is safe).
"""

from __future__ import annotations

from .interpreter import BoundCode, ComputeSpec
from .symeval import compile_sym

MAX_STEPS = 2048          # instructions on the path (unrolled loops); longer paths stay interpreted

FALLBACK = object()


class NotReplayable(Exception):
    """The path cannot be written straight (too long, or an instruction the replay does not take)."""


def build(bound: BoundCode, env: dict):
    """``replay(*args) -> result | FALLBACK`` for calls whose symbol bindings are ``env``; None when
    this Code's path cannot be replayed."""
    try:
        return _Writer(bound, dict(env)).function()
    except NotReplayable:
        return None


class _Writer:
    def __init__(self, bound: BoundCode, env: dict):
        self.bound, self.code, self.env = bound, bound.code, env
        self.ns: dict = {"FALLBACK": FALLBACK}
        self.lines: list = []
        self.n = 0
        self.bufs = False             # whether any instruction keeps an output buffer

    def const(self, prefix: str, value) -> str:
        name = f"{prefix}{len(self.ns)}"
        self.ns[name] = value
        return name

    def fresh(self) -> str:
        self.n += 1
        return f"v{self.n}"

    def emit(self, line: str):
        self.lines.append("        " + line)

    def function(self):
        bound, code = self.bound, self.code
        nparams = len(code.params)
        params = [f"a{k}" for k in range(nparams)]
        loc = {slot: params[k] for k, slot in enumerate(bound.param_slots)}
        stack: list = []
        specs: dict = {}
        i, steps, result = 0, 0, None
        while result is None:
            steps += 1
            if steps > MAX_STEPS or not 0 <= i < len(code.instrs):
                raise NotReplayable(f"path longer than {MAX_STEPS} instructions")
            ins = code.instrs[i]
            name, args = ins.op.name, code.decode_args(ins)
            nxt = i + 1
            if name in ("NOP", "ALLOC_DEVICE_MEM", "FREE_DEVICE_MEM"):
                pass
            elif name == "LOAD_TENSOR":
                if args[0] not in loc:
                    raise NotReplayable("a local read before it is written")
                stack.append(loc[args[0]])
            elif name == "STORE_TENSOR":
                loc[args[0]] = stack.pop()
            elif name == "LOAD_CONST":
                stack.append(self.const("c", args[0]))
            elif name == "LOAD_PARAM":
                obj = bound.attr_values[args[0]]
                if hasattr(obj, "_data"):       # read at each call: set_data is honoured
                    v = self.fresh()
                    self.emit(f"{v} = {self.const('p', obj)}._data")
                    stack.append(v)
                else:
                    stack.append(self.const("c", obj))
            elif name == "LOAD_SYM":
                stack.append(self.const("c", self.sym(args[0])))
            elif name == "SET_SYM":
                self.env[args[0]] = self.sym(args[1])
            elif name == "BUILD_TUPLE":
                items = stack[len(stack) - args[0]:]
                del stack[len(stack) - args[0]:]
                v = self.fresh()
                self.emit(f"{v} = ({''.join(x + ', ' for x in items)})")
                stack.append(v)
            elif name == "UNPACK_TUPLE":
                t = stack.pop()
                items = [self.fresh() for _ in range(args[0])]
                self.emit(f"{''.join(x + ', ' for x in items)}= {t}")
                stack.extend(reversed(items))
            elif name == "POP_TOP":
                stack.pop()
            elif name == "JUMP":
                nxt = code.index_at(args[0])
            elif name == "BRANCH_IF_SYMBOLIC":
                if not self.sym(args[0]):
                    nxt = code.index_at(args[1])
            elif name == "CALL_CELL":
                a = self.pop(stack, args[1])
                v = self.fresh()
                self.emit(f"{v} = {self.const('callee', bound.callees[i])}.call([{', '.join(a)}])")
                stack.append(v)
            elif name == "RETURN":
                result = stack.pop()
            else:
                spec = specs.get(i) or specs.setdefault(i, ComputeSpec(bound, i, args))
                stack.append(self.compute(i, spec, self.pop(stack, spec.n)))
            i = nxt
        head = [f"def replay({', '.join(params)}):"]
        if self.bufs:
            self.ns["pool"], self.ns["N"] = [], len(code.instrs)
            head.append("    bufs = pool.pop() if pool else [None] * N")
        head.append("    try:")
        tail = ["    except Exception:      # the interpreter runs it again and names the instruction",
                "        return FALLBACK"]
        if self.bufs:
            tail.append("    pool.append(bufs)")
        tail.append(f"    return {result}")
        src = "\n".join(head + (self.lines or ["        pass"]) + tail) + "\n"
        exec(compile(src, f"<msvm replay of {code.name}>", "exec"), self.ns)
        fn = self.ns["replay"]
        fn.source = src
        return fn

    def pop(self, stack: list, n: int) -> list:
        if n > len(stack):
            raise NotReplayable("stack underflow")
        a = stack[len(stack) - n:]
        del stack[len(stack) - n:]
        return a

    def sym(self, e):
        return compile_sym(e)(self.env)

    def compute(self, i: int, spec: ComputeSpec, a: list) -> str:
        v = self.fresh()
        kern = self.const("k", spec.kern)
        ops = spec.operands_at(self.env) if spec.dyn else spec.operands
        tail = f", *{self.const('o', ops)}" if ops else ""
        args = ", ".join(a)
        if spec.name == "FILL":
            self.emit(f"{v} = {kern}(*{self.const('o', ops)})")
        elif spec.site is not None:
            call = f"{self.const('site', spec.site)}([{args}], {self.const('ref', spec.reference)}"
            if spec.keep:
                self.bufs = True
                self.emit(f"{v} = bufs[{i}] = {call}, bufs[{i}])")
            else:
                self.emit(f"{v} = {call})")
        elif spec.reuse and spec.n in (1, 2):   # the interpreter's kept buffer, reused while shapes repeat
            self.bufs = True
            shapes = ", ".join(f"{x}.shape" for x in a)
            self.emit(f"e = bufs[{i}]")
            self.emit(f"if e is not None and e[:-1] == ({shapes},):")
            self.emit(f"    {v} = {kern}({args}{tail}, out=e[-1])")
            self.emit("else:")
            self.emit(f"    {v} = {kern}({args}{tail})")
            self.emit(f"    bufs[{i}] = ({shapes}, {v})")
        else:
            self.emit(f"{v} = {kern}({args}{tail})")
        return v
