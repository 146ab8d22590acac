"""Straight-line replay of a linked Code for one exact call signature.

For one exact signature (each tensor argument's shape, strides and dtype, each int and bool
argument's value) the path through a Code is fixed: branches test symbols and flags only, loops count over
symbols, and every symbol is a function of the signature. ``build(bound, env)`` walks that path
once and writes it as one Python function: the instructions' work in order, stack slots as local
variables, symbol expressions as constants. Branches, jumps, the operand stack, the frame and the
dispatch loop are gone; what is left is the calls into kernels and sites, which is what a compiled
Cell's call should cost. Each site call remembers the site's prepared caller with the input
strides it was prepared for and calls it directly while they match: the kernel's native entry
(compiler/entry.py, a builtin that takes the arrays themselves) where it has one.

The call path (callpath.py: a runner's memo, and the guard in front of it) runs the replay for a
signature it has seen before, above jit_level L1 (L1 is the interpreter itself), while no trace
hook is installed and nobody listens to events.
A replay computes exactly what the interpreter computes: the same reference kernels, the same
compiled sites and the same kept output buffers, all taken from ``ComputeSpec``. If anything in
it raises, it returns ``FALLBACK`` and the caller runs the interpreter, which raises the error at
its instruction with its source location (every instruction on a replayed path is pure, so
running again is safe: a Code with an effect row, such as ASSIGN_PARAM, RANDOM or PRINT, is never
replayed).
"""

from __future__ import annotations

from .. import events
from ..bytecode.types import TensorType
from . import capture
from .arena import Arena
from .interpreter import BoundCode, ComputeSpec
from .source import define
from .symeval import compile_sym

MAX_STEPS = 2048          # instructions on the path (unrolled loops); longer paths stay interpreted

FALLBACK = object()


class NotReplayable(Exception):
    """The path cannot be written straight (too long, or an instruction the replay does not take)."""


def build(bound: BoundCode, env: dict, top: bool = False, record: bool = False):
    """``replay(*args) -> result | FALLBACK`` for calls whose symbol bindings are ``env``; None when
    this Code's path cannot be replayed (among them a Code, or a sub-Cell's, with an instruction
    that has an effect: a replay that raises is run again by the interpreter, and an effect must
    happen once). ``top``: a call's own replay (callpath), which runs its capture (capture.py) once
    it has one; ``record``: the variant that records what it calls (capture.step)."""
    if bound.code.has_effects():
        return None
    try:
        return _Writer(bound, dict(env), top, record).function()
    except NotReplayable:
        return None


def nested(callee: BoundCode, record: bool = False):
    """How a replayed path calls a sub-Cell from one place: through the sub-Cell's own replays,
    one per symbol binding it is called with (the bindings fix the arguments' shapes; each
    remembered caller inside checks the strides it was prepared for). ``record``: through their
    recording variants, and a sub-Cell that cannot be replayed ends the recording."""
    replays: dict = {}

    def recorded(args):
        env = callee.fast_bind(args)
        if env is None:
            capture.refuse(f"{callee.code.name}: arguments its checks refuse")
        key = tuple(env.items())
        rp = replays.get(key)
        if rp is None:
            rp = replays[key] = build(callee, env, record=True) or False
        if not rp:
            capture.refuse(f"{callee.code.name}: its path is not replayable", permanent=True)
        out = rp(*args)
        if out is FALLBACK:
            capture.refuse(f"{callee.code.name}: its replay fell back")
        return out

    if record:
        return recorded

    def call(args):
        env = callee.fast_bind(args)
        if env is None:                  # the interpreter's checks raise the error that names it
            return callee.call(args)
        key = tuple(env.items())
        rp = replays.get(key)
        if rp is None:
            if len(replays) >= 8:
                replays.clear()
            rp = replays[key] = build(callee, env) or False
        if rp:
            out = rp(*args)
            if out is not FALLBACK:
                return out
        return callee.call(args, env=env)
    return call


class _Writer:
    def __init__(self, bound: BoundCode, env: dict, top: bool = False, record: bool = False):
        self.bound, self.code, self.env = bound, bound.code, env
        self.top, self.record = top and capture.ENABLED and not record, record
        self.ns: dict = {"FALLBACK": FALLBACK}
        if record:
            self.ns.update(R=capture.step, RO=capture.step_into, RP=capture.param, HIT=capture.hit, SLOW=capture.slow)
        self.lines: list = []
        self.n = 0
        self.bufs = False             # whether any instruction keeps an output buffer
        self.sites = 0                # site calls on the path, each with a slot in G
        self.layout: list = []        # the memory plan's views on the path: (instruction, slot, shape, dtype, bytes)

    def const(self, prefix: str, value) -> str:
        name = f"{prefix}{len(self.ns)}"
        self.ns[name] = value
        return name

    def fresh(self) -> str:
        self.n += 1
        return f"v{self.n}"

    def emit(self, line: str):
        self.lines.append("        " + line)

    def call(self, f: str, args: str, into: bool = False) -> str:
        """The expression that calls f with args (in the recording variant: through capture.step, or
        capture.step_into where f is a site or caller, ``f(inputs, out)``)."""
        return f"{'RO' if into else 'R'}({f}, {args})" if self.record else f"{f}({args})"

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
            if name in ("ALLOC_DEVICE_MEM", "FREE_DEVICE_MEM"):
                if bound.memplan is None or args[1] != 0:
                    raise NotReplayable("device workspaces are the interpreter's (streams, FREE's buffers)")
                # (the memory plan's arena: taken at the head, given back at the tail)
            elif name == "NOP":
                pass
            elif name == "LOAD_TENSOR":
                if args[0] not in loc:
                    raise NotReplayable("a local read before it is written")
                stack.append(loc[args[0]])
            elif name == "STORE_TENSOR":
                loc[args[0]] = stack.pop()
            elif name == "LOAD_CONST":
                v = args[0]
                if bound.device.target != "CPU" and bound.device.owns_host(v):
                    v = bound.device.from_host(v)        # (as the interpreter's LOAD_CONST: on the device)
                stack.append(self.const("c", v))
            elif name == "LOAD_PARAM":
                obj = bound.attr_values[args[0]]
                if hasattr(obj, "_data"):       # read at each call: set_data is honoured
                    v = self.fresh()
                    p = self.const('p', obj)
                    self.emit(f"{v} = RP({p})" if self.record else f"{v} = {p}._data")
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
                self.emit(f"{v} = {self.const('cell', nested(bound.callees[i], self.record))}([{', '.join(a)}])")
                stack.append(v)
            elif name == "RETURN":
                result = stack.pop()
            elif name == "RAISE":        # the interpreter raises it, with its message
                raise NotReplayable("the path raises")
            elif code.instrs[i].op.binds:    # (x[mask]) a symbol the data decides: not a constant of the path
                raise NotReplayable(f"{name} binds a data-dependent dim")
            elif name == "BIND_DIMS":    # (its symbols change with the data: no fixed path)
                raise NotReplayable("BIND_DIMS binds data-dependent dims")
            elif ins.op.effect:          # (a fallback would run its draw or print a second time)
                raise NotReplayable(f"{name} has an effect ({ins.op.effect})")
            else:
                spec = specs.get(i) or specs.setdefault(i, ComputeSpec(bound, i, args))
                stack.append(self.compute(i, spec, self.pop(stack, spec.n)))
            i = nxt
        head = [f"def replay({', '.join(params)}):"]
        if self.top and self.bound.accelerator is not None:
            bound, env = self.bound, dict(self.env)
            self.ns.update(C=capture.Slot(lambda: build(bound, env, record=True), bound.accelerator.config,
                                          capture.alive(bound)),
                           MISS=capture.MISS)
            head += ["    if C.on:", f"        r = C({', '.join(params)})",      # (its captured program: capture.py)
                     "        if r is not MISS:", "            return r"]
        if self.sites:
            head += self.guard()
        if self.bufs:
            self.ns["pool"], self.ns["N"] = [], len(code.instrs)
            head.append("    bufs = pool.pop() if pool else [None] * N")
        if self.layout:
            self.ns.update(AP=bound.arenas, AN=len(bound.memplan.slots), Arena=Arena, LAY=tuple(self.layout),
                           KEY=object())
            head.append("    ar = AP.pop() if AP else Arena(AN)")
            head.append("    V = ar.bind(KEY, LAY)")
        head.append("    try:")
        tail = ["    except Exception:      # the interpreter runs it again and names the instruction"]
        if self.layout:
            tail.append("        ar.close()")
        tail.append("        return FALLBACK")
        if self.bufs:
            tail.append("    pool.append(bufs)")
        if self.layout:
            tail += ["    ar.close()", "    AP.append(ar)"]
        tail.append(f"    return {result}")
        src = "\n".join(head + (self.lines or ["        pass"]) + tail) + "\n"
        return define(src, f"<msvm replay of {code.name}>", self.ns, "replay")

    def guard(self) -> list:
        """The check each call starts with: at jit_level L2 no remembered (L3) caller is used or
        remembered; when the level moves, or a site's kernel is replaced (events.KERNELS_MOVED), they
        are dropped."""
        n = self.sites
        self.ns.update(G=[None] * n, S=[None] * n, E=[None, None, False, None], J=self.bound.accelerator.config,
                       MV=events.KERNELS_MOVED)
        return ["    if J['jit_level'] is not E[1] or MV[0] != E[3]:     # (a site's kernel replaced: events)",
                "        E[1], E[3] = J['jit_level'], MV[0]",
                "        E[2] = E[1] != 'L2'         # jit_level L2 keeps to L2 kernels",
                f"        G[:] = [None] * {n}"]

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
        if spec.n == 0:          # FILL, ARANGE: no inputs
            self.emit(f"{v} = {self.call(kern, '*' + self.const('o', ops))}")
        elif spec.planned is not None and self.plannable(spec):
            self.planned(i, spec, a, v, kern, tail)
        elif spec.site is not None:
            # the site's prepared caller (callconv.Prepared), remembered in G[j] with the input strides
            # it was prepared for in S[j] (shapes and dtypes are the signature's); other strides go
            # through the site's checks
            j, site = self.sites, self.const("site", spec.site)
            self.sites += 1
            out, put = (f"bufs[{i}]", f"bufs[{i}] = ") if spec.keep else ("None", "")
            self.bufs = self.bufs or spec.keep
            strides, wt, nat = self.site_args(i, spec, a, site)
            self.emit(f"g = G[{j}]")
            self.emit(f"if g is not None and {strides} == S[{j}]:")
            self.emit("    ST['hits'] += 1")
            if self.record:
                self.emit("    HIT(ST)")
            # the kernel's native entry when it has one (callconv.Native): entry(*inputs, output), where
            # a kept output is the buffer the entry's allocator made last, if this slot still holds it
            self.emit("    n = g.native")
            # (a record's callables are read into locals before the call: a call written as
            # ``n.entry(...)`` looks the name up as a method, which costs more on a slot)
            self.emit("    if n is not None:")
            if wt:
                self.emit("        w = n.weight")
            if spec.keep:
                self.emit(f"        o = {out}")
                self.emit("        if o is None or o is not n.last:")
                self.emit("            al = n.alloc")
                self.emit("            o = n.last = al(n.shape, n.dtype)")
                self.emit("        e = n.entry")
                self.emit(f"        {v} = {put}{self.call('e', nat + ', o')}")
            else:
                self.emit("        e, al = n.entry, n.alloc")
                self.emit(f"        {v} = {self.call('e', nat + ', al(n.shape, n.dtype)')}")
            self.emit("    else:")
            self.emit("        go = g.go")
            self.emit(f"        {v} = {put}{self.call('go', f'[{args}], {out}', True)}")
            self.emit("else:")
            if self.record:
                self.emit(f"    SLOW({site})")
            ref = self.const("ref", spec.reference)
            self.emit(f"    {v} = {put}{self.call(site, f'[{args}], {ref}, {out}')}")
            self.emit("    if E[2]:")
            self.emit(f"        G[{j}] = {site}.fast_for([{args}])")
            self.emit(f"        S[{j}] = {strides}")
            self.ns["ST"] = spec.site.stats
        elif spec.reuse and spec.n in (1, 2) and not spec.dyn:   # as the interpreter keeps it
            self.bufs = True
            shapes = ", ".join(f"{x}.shape" for x in a)
            self.emit(f"e = bufs[{i}]")
            self.emit(f"if e is not None and e[:-1] == ({shapes},):")
            self.emit(f"    {v} = {self.call(kern, f'{args}{tail}, out=e[-1]')}")
            self.emit("else:")
            self.emit(f"    {v} = {self.call(kern, f'{args}{tail}')}")
            self.emit(f"    bufs[{i}] = ({shapes}, {v})")
        else:
            self.emit(f"{v} = {self.call(kern, f'{args}{tail}')}")
        return v

    def plannable(self, spec: ComputeSpec) -> bool:
        """Whether the path's symbols give this planned value's shape (a data-dependent dim may not be one)."""
        try:
            spec.planned[1](self.env)
        except KeyError:
            return False
        return True

    def site_args(self, i: int, spec: ComputeSpec, a: list, site: str) -> tuple:
        """(the strides key, whether the weight goes through the prepared weight, the native entry's
        arguments) of a site call: the key also says whether a weight the site may prepare (transpose
        or pack: Site.weight_prep) is fixed, and the entry gets that weight prepared (``w``)."""
        st = self.code.stack_types[i]
        tensors = [x for x, t in zip(a, st[len(st) - spec.n:]) if isinstance(t, TensorType)]
        wt = getattr(spec.site, "weight_prep", False)
        strides = "(" + "".join(f"{x}.strides, " for x in tensors) + (f"{site}.frozen({a[1]}), " if wt else "") + ")"
        nat = ", ".join(a[:1] + [f"w({a[1]})"] + a[2:]) if wt else ", ".join(a)
        return strides, wt, nat

    def planned(self, i: int, spec: ComputeSpec, a: list, v: str, kern: str, tail: str) -> None:
        """An instruction with a buffer in the memory plan: its view V[j] of the arena is ``out=``."""
        k, shape_of, d, _ = spec.planned
        shape = shape_of(self.env)
        j = len(self.layout)
        nbytes = d.itemsize
        for x in shape:
            nbytes *= x
        self.layout.append((i, k, shape, d, nbytes))
        args = ", ".join(a)
        self.emit(f"o = V[{j}]")
        if spec.site is None:
            self.emit(f"{v} = {self.call(kern, f'{args}{tail}, out=o')}")
        else:
            g, site = self.sites, self.const("site", spec.site)
            self.sites += 1
            strides, wt, nat = self.site_args(i, spec, a, site)
            want = self.const("shape", (shape, d))
            # as a site call above (callconv.Prepared in G[g], its strides in S[g]), with the view as the output
            self.emit(f"g = G[{g}]")
            self.emit(f"if g is not None and {strides} == S[{g}]:")
            self.emit("    ST['hits'] += 1")
            if self.record:
                self.emit("    HIT(ST)")
            self.emit("    n = g.native")
            self.emit("    if n is not None:")        # a native entry writes where it is told: the shape must be its own
            if wt:
                self.emit("        w = n.weight")
            self.emit("        e, al = n.entry, n.alloc")
            into = f"o if (n.shape, n.dtype) == {want} else al(n.shape, n.dtype)"
            self.emit(f"        {v} = {self.call('e', f'{nat}, {into}')}")
            self.emit("    else:")
            self.emit("        go = g.go")
            self.emit(f"        {v} = {self.call('go', f'[{args}], o', True)}")
            self.emit("else:")
            if self.record:
                self.emit(f"    SLOW({site})")
            ref = self.const("ref", spec.reference)
            self.emit(f"    {v} = {self.call(site, f'[{args}], {ref}, o')}")
            self.emit("    if E[2]:")
            self.emit(f"        G[{g}] = {site}.fast_for([{args}])")
            self.emit(f"        S[{g}] = {strides}")
            self.ns["ST"] = spec.site.stats
        self.emit(f"if o is not {v}:")            # (a kernel that did not write into o: arena memory it returned is moved)
        self.emit(f"    {v} = {self.call('ar.settle', f'{v}, o')}")
