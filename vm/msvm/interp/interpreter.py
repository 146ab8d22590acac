"""The L1 interpreter: runs verified Code on the arrays of a device (numpy on the CPU, CuPy on
the GPU: ``msvm/device.py``). A Code is linked for the device current at link time (``BoundCode.device``):
its arguments and Parameters must live there, and ALLOC_DEVICE_MEM / FREE_DEVICE_MEM open and
give back the frame's workspace on one of its streams.

``link(code, cell)`` turns each instruction into a small closure chosen by its
opcode from ``HANDLERS`` (a table indexed by opcode byte, built from the opcode
table); the dispatch loop is ``i = prog[i](frame, stack)``. Operands are decoded
once at link time. Output buffers of instructions whose results never escape
(not returned, not inside a loop) are kept per Code and reused across calls
when the input shapes repeat.

``set_trace(fn)`` installs a hook called before every instruction as
``fn(frame, pc)`` (and, if it has one, ``fn.on_exception(frame, index, error)`` when
an instruction fails, before the frame unwinds); the frame exposes ``code``, ``pc``, ``stack``, ``locals``,
``symbols`` and ``metadata_stack()``. ``MSVM_TRACE=1`` prints each instruction
with the disassembler's own formatting.
"""

from __future__ import annotations

import os
import sys
import threading
import time

import numpy as np

from .. import device as _device
from .. import events
from ..bytecode.code import Code
from ..bytecode.disasm import argrepr
from ..bytecode.opcodes import OUT_CAPABLE, TABLE
from ..bytecode.symbolic import fmt_shape
from ..bytecode.types import ScalarType, TensorType
from ..errors import ExecutionError, ShapeMismatch, execution_error_like
from . import kernels as K
from .arena import Arena
from .symeval import compile_sym, compile_sym_tuple

_trace = None
_local = threading.local()


def set_trace(fn):
    """Install (or with None remove) the per-instruction hook; returns the old one."""
    global _trace
    old, _trace = _trace, fn
    if fn is None:
        events.SLOW.discard("trace")
    else:
        events.SLOW.add("trace")
    return old


def get_trace():
    return _trace


class Frame:
    """One activation of a Code: operand stack, locals, symbol bindings."""

    __slots__ = ("bound", "code", "stack", "locals", "symbols", "index", "bufs", "parent", "depth", "result", "arena")

    def __init__(self, bound, parent=None, symbols=None):
        self.bound = bound
        self.code = bound.code
        self.stack = []
        self.locals = [None] * bound.nlocals
        self.symbols = symbols
        self.index = 0
        self.arena = None          # the memory plan's buffers, between ALLOC_DEVICE_MEM and FREE_DEVICE_MEM
        self.parent = parent
        self.depth = 0 if parent is None else parent.depth + 1

    @property
    def pc(self) -> int:
        """Byte offset of the instruction about to run."""
        return self.code.instrs[self.index].offset if self.index < len(self.code.instrs) else self.code.size

    @property
    def cell(self):
        return self.bound.cell

    def local_values(self) -> dict:
        return {n: v for n, v in zip(self.code.varnames, self.locals) if v is not None}

    def metadata_stack(self) -> list:
        """(shape, dtype, strides, device) per operand, bottom first."""
        return [describe_value(v) for v in self.stack]


def describe_value(v) -> dict:
    if isinstance(v, _device.ARRAYS) and not isinstance(v, np.generic):
        return {"shape": list(v.shape), "dtype": str(v.dtype), "strides": list(v.strides),
                "device": _device.name_of(v)}
    if isinstance(v, tuple):
        return {"tuple": [describe_value(x) for x in v]}
    return {"scalar": type(v).__name__, "value": v}


# ---------------------------------------------------------------- handler factories

def h_nop(ctx, i, args):
    return lambda f, s: i + 1


def h_load_tensor(ctx, i, args):
    slot = args[0]

    def h(f, s):
        s.append(f.locals[slot])
        return i + 1
    return h


def h_store_tensor(ctx, i, args):
    slot = args[0]

    def h(f, s):
        f.locals[slot] = s.pop()
        return i + 1
    return h


def h_load_const(ctx, i, args):
    v = args[0]
    if type(v) is np.ndarray and ctx.device is not _device.CPU:
        v = ctx.device.from_host(v)      # an array constant: copied to the device once, when linked

    def h(f, s):
        s.append(v)
        return i + 1
    return h


def h_load_param(ctx, i, args):
    obj = ctx.attr_values[args[0]]
    if not hasattr(obj, "_data"):        # a plain array
        def h(f, s):
            s.append(obj)
            return i + 1
        return h

    def h(f, s):                         # a Tensor/Parameter: read its data now (set_data is honoured)
        s.append(obj._data)
        return i + 1
    return h


def h_load_sym(ctx, i, args):
    fn = compile_sym(args[0])

    def h(f, s):
        s.append(fn(f.symbols))
        return i + 1
    return h


def h_set_sym(ctx, i, args):
    name, fn = args[0], compile_sym(args[1])

    def h(f, s):
        f.symbols[name] = fn(f.symbols)
        return i + 1
    return h


def h_build_tuple(ctx, i, args):
    n = args[0]

    def h(f, s):
        t = tuple(s[len(s) - n:])
        del s[len(s) - n:]
        s.append(t)
        return i + 1
    return h


def h_unpack_tuple(ctx, i, args):
    def h(f, s):
        s.extend(reversed(s.pop()))
        return i + 1
    return h


def h_pop_top(ctx, i, args):
    def h(f, s):
        s.pop()
        return i + 1
    return h


def h_jump(ctx, i, args):
    target = ctx.code.index_at(args[0])
    return lambda f, s: target


def h_branch(ctx, i, args):
    fn, target = compile_sym(args[0]), ctx.code.index_at(args[1])

    def h(f, s):
        return i + 1 if fn(f.symbols) else target
    return h


def h_call_cell(ctx, i, args):
    (path, _sub), n = args
    bound = ctx

    def h(f, s):
        callee = bound.callees[i]
        a = s[len(s) - n:]
        del s[len(s) - n:]
        s.append(callee.call(a, parent=f))
        return i + 1
    return h


def h_return(ctx, i, args):
    def h(f, s):
        f.result = s.pop()
        return -1
    return h


def user_exception(args):
    """RAISE's operands -> a function of the symbol env making the user's exception."""
    import builtins

    exc = getattr(builtins, args[0], None)
    if not (isinstance(exc, type) and issubclass(exc, Exception)):
        raise TypeError(f"RAISE: {args[0]!r} is not a built-in exception")
    parts = [compile_sym(p) if not isinstance(p, str) else p for p in args[1]]

    def make(env):
        e = exc("".join(p if isinstance(p, str) else str(p(env)) for p in parts))
        e.msvm_raised = True
        return e
    return make


def h_raise(ctx, i, args):
    make = user_exception(args)

    def h(f, s):
        raise make(f.symbols)
    return h


def _device_operand(ctx, i, dev_arg):
    """ALLOC/FREE's device operand (an id, or a name such as "GPU:0") must be the linked device's."""
    dev = ctx.device
    ok = dev_arg == dev.id if not isinstance(dev_arg, str) else dev_arg in (dev.target, dev.name)
    if not ok:
        ins = ctx.code.instrs[i]
        raise _device.DeviceMismatch(
            f"{ins.op.name} at {ctx.code.filename}:{ins.loc.line} (bytecode offset 0x{ins.offset:04x}) in "
            f"{ctx.code.name}: device {dev_arg!r}, but this code runs on {dev.name}")


def h_alloc(ctx, i, args):
    """ALLOC_DEVICE_MEM device, stream: the frame's workspace on that stream of the frame's device;
    the stream becomes current, so the kernels that follow launch on it. In a planned Code on the
    CPU's stream 0 (``compiler/memplan.py``) it takes the frame's arena from the Code's pool, unless a
    trace hook (the debugger) is installed: then every value gets memory of its own, so nothing it
    shows is overwritten."""
    _device_operand(ctx, i, args[0])
    dev, stream = ctx.device, int(args[1])
    if ctx.memplan is not None and stream == 0:
        arenas, nslots = ctx.arenas, len(ctx.memplan.slots)
        sizes = _slot_sizes(ctx.memplan)

        def h(f, s):
            if _trace is None or getattr(_trace, "keeps_plan", False):
                ar = arenas.pop() if arenas else Arena(nslots)
                ar.open()
                ar.reserve(sizes(f.symbols))
                f.arena = ar
            return i + 1
        return h
    ctx.allocates = True

    def h(f, s):
        dev.alloc(f, stream)
        return i + 1
    return h


def _slot_sizes(plan):
    """``sizes(symbols)``: each slot's capacity in bytes at these symbols, None for a slot whose size
    needs a symbol not bound at entry (a data-dependent dim: that slot grows where its value is made)."""
    exprs = tuple(plan.slot_bytes(k) for k in range(len(plan.slots)))
    every = compile_sym_tuple(exprs)          # (one call where all are bound: the usual case)
    fns = [compile_sym(e) for e in exprs]

    def one(fn, env):
        try:
            return fn(env)
        except (KeyError, ZeroDivisionError, TypeError):
            return None

    def sizes(env):
        try:
            return every(env)
        except (KeyError, ZeroDivisionError, TypeError):
            return [one(fn, env) for fn in fns]
    return sizes


def h_free(ctx, i, args):
    """FREE_DEVICE_MEM device, stream: the workspace goes back (the output buffers the frame kept
    return to the device's memory pool on that stream) and the previous stream is current again."""
    _device_operand(ctx, i, args[0])
    dev, stream = ctx.device, int(args[1])
    if ctx.memplan is not None and stream == 0:
        arenas = ctx.arenas

        def h(f, s):
            ar = f.arena
            if ar is not None:
                f.arena = None
                ar.close()
                arenas.append(ar)
            return i + 1
        return h

    def h(f, s):
        dev.free(f, stream)
        bufs = f.bufs
        for k in range(len(bufs)):
            bufs[k] = None
        return i + 1
    return h


def h_bind_dims(ctx, i, args):
    """BIND_DIMS (issue 21): the data-dependent dims of the value on top become symbols (the value
    stays: pop 1, push it back)."""
    (dims,) = args

    def h(f, s):
        top = s[-1]
        for name, item, dim in dims:
            f.symbols[name] = (top if item < 0 else top[item]).shape[dim]
        return i + 1
    return h


def h_print(ctx, i, args):
    """PRINT (issue 21): pop n values, write the template with them, one item a line."""
    from .kernels_more import print_parts

    n, parts = args

    def h(f, s):
        vals = s[len(s) - n:] if n else []
        del s[len(s) - n:]
        print_parts(parts, vals)
        return i + 1
    return h


class ComputeSpec:
    """What running one computing instruction takes, decided at link time; the handler
    (``h_compute``) and the straight-line replay (``replay.py``) are both built from it."""

    __slots__ = ("name", "kern", "n", "operands", "dyn", "reuse", "site", "reference", "keep", "planned")

    def __init__(self, ctx, i, args):
        ins = ctx.code.instrs[i]
        name = self.name = ins.op.name
        kern = self.kern = K.KERNELS[name]
        self.n = ins.op.n_pops(args)
        operands = tuple(_runtime_operand(ctx, a) for a, (_, kind) in zip(args, ins.op.operands) if kind != "count")
        if ins.op.raw_operands:         # (its kernel takes the count and the programs as decoded)
            operands = args
        self.operands = operands
        # shape operands that depend on symbols (FILL, RESHAPE, BROADCAST_TO): callables over the env
        self.dyn = [k for k, o in enumerate(operands) if callable(o)]
        n, code = self.n, ctx.code
        st = code.stack_types[i] if i < len(code.stack_types) else None
        nxt = code.stack_types[i + 1] if i + 1 < len(code.stack_types) else None
        if name == "MATMUL" and operands == (False, False) and st is not None and len(st) >= 2 and all(
                isinstance(t, TensorType) and t.rank > 0 and t.dtype == st[-1].dtype for t in st[-2:]):
            kern = self.kern = np.matmul        # (kernels.matmul's own first case, without its frame)
            self.operands = operands = ()
        out_tensor = bool(nxt) and isinstance(nxt[-1], TensorType) and nxt[-1].rank > 0
        if nxt and isinstance(nxt[-1], TensorType) and nxt[-1].rank == 0:
            kern = self.kern = K.as_array(kern)     # a 0-d tensor is a 0-d array, never a numpy scalar
        # an output buffer kept across calls: the result never leaves the frame (escape analysis)
        self.reuse = bool(i in ctx.reusable and name in OUT_CAPABLE and st is not None and out_tensor
                          and all(isinstance(t, TensorType) and t.rank > 0 for t in st[len(st) - n:]))
        acc = ctx.accelerator
        self.site = self.reference = None
        self.keep = False
        if acc is not None and name in acc.ops and name != "FILL" and not self.dyn:
            self.site = acc.site(code, i)
            self.reference = lambda *a: kern(*a, *operands)
            self.keep = i in ctx.reusable and out_tensor
        # the memory plan's buffer for the result: (slot, shape function of the symbols, dtype, shape exprs)
        v = ctx.memplan.values.get(i) if ctx.memplan is not None and not self.dyn else None
        self.planned = None if v is None else (v.slot, compile_sym_shape(v.shape), v.dtype, v.shape)

    def operands_at(self, symbols) -> tuple:
        return tuple(o(symbols) if callable(o) else o for o in self.operands)


def h_compute(ctx, i, args):
    """Pop the inputs, call the reference kernel with the operands, push its result."""
    spec = ComputeSpec(ctx, i, args)
    name, kern, n, operands, reuse = spec.name, spec.kern, spec.n, spec.operands, spec.reuse
    if name == "FILL":
        def h(f, s):
            s.append(kern(*spec.operands_at(f.symbols)))
            return i + 1
        return h
    if spec.dyn:  # shape operands that depend on symbols (RESHAPE, BROADCAST_TO)
        def h(f, s):
            ops = spec.operands_at(f.symbols)
            a = s[len(s) - n:]
            del s[len(s) - n:]
            s.append(kern(*a, *ops))
            return i + 1
        return h
    if spec.planned is not None:
        return _h_planned(spec, i)
    if spec.site is not None:
        site, reference, keep = spec.site, spec.reference, spec.keep

        def h(f, s):
            a = s[len(s) - n:]
            del s[len(s) - n:]
            r = site(a, reference, f.bufs[i] if keep else None)
            if keep:
                f.bufs[i] = r
            s.append(r)
            return i + 1
        return h
    if n == 1 and not reuse:
        def h(f, s):
            s[-1] = kern(s[-1], *operands)
            return i + 1
        return h
    if n == 1:
        def h(f, s):
            a = s[-1]
            ent = f.bufs[i]
            if ent is not None and ent[0] == a.shape:
                s[-1] = kern(a, *operands, out=ent[1])
            else:
                r = s[-1] = kern(a, *operands)
                f.bufs[i] = (a.shape, r)
            return i + 1
        return h
    if n == 2 and not reuse:
        def h(f, s):
            b = s.pop()
            s[-1] = kern(s[-1], b, *operands)
            return i + 1
        return h
    if n == 2:
        def h(f, s):
            b = s.pop()
            a = s[-1]
            ent = f.bufs[i]
            if ent is not None and ent[0] == a.shape and ent[1] == b.shape:
                s[-1] = kern(a, b, *operands, out=ent[2])
            else:
                r = s[-1] = kern(a, b, *operands)
                f.bufs[i] = (a.shape, b.shape, r)
            return i + 1
        return h

    def h(f, s):
        a = s[len(s) - n:]
        del s[len(s) - n:]
        s.append(kern(*a, *operands))
        return i + 1
    return h


def compile_sym_shape(shape):
    """``f(env) -> tuple`` of a shape's dims (one generated function: a planned instruction asks
    for its shape on every call)."""
    return compile_sym_tuple(tuple(shape))


def _h_planned(spec, i):
    """A planned instruction: its result goes into its view of the frame's arena (``out=``); without
    an arena (a trace hook is installed, or none was opened) it allocates as unplanned code does.
    A binary op (the most common) has its own handler: bench/interp_overhead.py's 256 adds on
    float32[4], in one process, cost 1.29-1.44x the unplanned run with the generic handler and a
    shape function calling one function per dim, 1.13-1.15x with this one (the rest is ``out=``)."""
    n, kern, operands, site, reference = spec.n, spec.kern, spec.operands, spec.site, spec.reference
    k, shape_of, dtype, _ = spec.planned
    if n == 2 and site is None:          # (the common case, without the generic one's slicing)
        def h(f, s):
            b = s.pop()
            ar = f.arena
            if ar is not None:
                try:
                    shape = shape_of(f.symbols)
                except KeyError:
                    ar = None
            if ar is None:
                s[-1] = kern(s[-1], b, *operands)
                return i + 1
            out = ar.views.get(i)        # (Arena.view's first case, without its call)
            if out is None or out.shape != shape:
                out = ar.view(i, k, shape, dtype)
            r = kern(s[-1], b, *operands, out=out)
            s[-1] = r if r is out else ar.settle(r, out)
            return i + 1
        return h

    def h(f, s):
        a = s[len(s) - n:]
        del s[len(s) - n:]
        ar = f.arena
        if ar is not None:
            try:
                shape = shape_of(f.symbols)
            except KeyError:             # (a data-dependent dim the run did not bind as a symbol)
                ar = None
        if ar is None:
            s.append(site(a, reference, None) if site is not None else kern(*a, *operands))
            return i + 1
        out = ar.view(i, k, shape, dtype)
        r = site(a, reference, out) if site is not None else kern(*a, *operands, out=out)
        s.append(r if r is out else ar.settle(r, out))
        return i + 1
    return h


def _runtime_operand(ctx, v):
    """Operands holding symbolic dims (shape tuples of FILL/RESHAPE/BROADCAST_TO, SLICE bounds,
    ARANGE's ends, nested at any depth in tuples) become callables over the symbol env."""
    from ..bytecode.symbolic import Expr

    def has_sym(x):
        if isinstance(x, Expr):
            return not x.is_const()
        return isinstance(x, tuple) and any(has_sym(y) for y in x)

    def build(x):
        if isinstance(x, Expr):
            if x.is_const():
                c = x.const_value()
                return lambda env: c
            return compile_sym(x)
        if isinstance(x, tuple) and has_sym(x):
            fns = [build(y) for y in x]
            return lambda env: tuple(fn(env) for fn in fns)
        x = plain(x)
        return lambda env: x

    def plain(x):
        if isinstance(x, Expr):
            return x.const_value()
        if isinstance(x, tuple):
            return tuple(plain(y) for y in x)
        return x

    if not has_sym(v):
        return plain(v)
    return build(v)


def _data_dim(ctx, i, name):
    """Bind the data-dependent symbol ``name`` (BOOL_INDEX, BIND_DIM): when the program equated
    it with an argument's dim (``x[mask] + v``), the argument bound it on entry and the count the
    data gave must equal it."""
    from ..bytecode.verify import bound_symbols

    code = ctx.code
    if name not in bound_symbols(code.params):
        def bind(f, n):
            f.symbols[name] = n
        return bind
    ins = code.instrs[i]

    def check(f, n):
        if f.symbols[name] != n:
            raise ShapeMismatch(f"{code.filename}:{ins.loc.line}:{ins.loc.col}: {ins.op.name} gives {n} items, but "
                                f"the bytecode was verified for {name} = {f.symbols[name]}, the argument's dim it is "
                                f"used with (bytecode offset 0x{ins.offset:04x})")
    return check


def h_bool_index(ctx, i, args):
    """x[mask]: its row count is the data-dependent symbol the instruction names, bound here."""
    bind = _data_dim(ctx, i, args[0])
    kern = K.KERNELS["BOOL_INDEX"]

    def h(f, s):
        mask = s.pop()
        r = s[-1] = kern(s[-1], mask)
        bind(f, r.shape[0])
        return i + 1
    return h


def h_bind_dim(ctx, i, args):
    bind, axis = _data_dim(ctx, i, args[0]), args[1]

    def h(f, s):
        bind(f, s[-1].shape[axis])
        return i + 1
    return h


def h_assign_param(ctx, i, args):
    """ASSIGN_PARAM (an effect): the Parameter gets a new read-only array holding a copy of the
    value (``Parameter._set_value``: its version bumps, and caches keyed on the array it had,
    such as a transposed weight, miss); the new array is pushed."""
    obj = ctx.attr_values[args[0]]
    if not hasattr(obj, "_set_value"):
        what = type(obj).__name__

        def h(f, s):
            raise TypeError(f"ASSIGN_PARAM: attribute '{args[0]}' is a {what}, not a Parameter; "
                            "only a Parameter can be updated in place")
        return h

    def h(f, s):
        s[-1] = obj._set_value(s[-1])
        return i + 1
    return h


_SPECIAL = {
    "ASSIGN_PARAM": h_assign_param,
    "NOP": h_nop, "LOAD_TENSOR": h_load_tensor, "STORE_TENSOR": h_store_tensor, "LOAD_CONST": h_load_const,
    "LOAD_PARAM": h_load_param, "LOAD_SYM": h_load_sym, "SET_SYM": h_set_sym, "BUILD_TUPLE": h_build_tuple,
    "UNPACK_TUPLE": h_unpack_tuple, "POP_TOP": h_pop_top, "JUMP": h_jump, "BRANCH_IF_SYMBOLIC": h_branch,
    "CALL_CELL": h_call_cell, "RETURN": h_return, "RAISE": h_raise, "ALLOC_DEVICE_MEM": h_alloc, "FREE_DEVICE_MEM": h_free,
    "BOOL_INDEX": h_bool_index, "BIND_DIM": h_bind_dim,
    "PRINT": h_print, "BIND_DIMS": h_bind_dims,
}

# the handler table, indexed by opcode byte
HANDLERS: list = [None] * 256
for _row in TABLE:
    HANDLERS[_row.code] = _SPECIAL.get(_row.name, h_compute)
assert all(HANDLERS[r.code] is not None for r in TABLE)


# ---------------------------------------------------------------- escape analysis

def reusable_outputs(code: Code) -> set:
    """Instruction indexes whose result never leaves the frame and that are not in a loop."""
    n = len(code.instrs)
    in_loop = code.loop_body()
    states = [None] * n
    states[0] = ((), {})
    work = [0]
    escaping: set = set()
    while work:
        i = work.pop()
        stack, loc = states[i]
        stack, loc = list(stack), dict(loc)
        ins = code.instrs[i]
        args = code.decode_args(ins)
        npop = ins.op.n_pops(args)
        popped = stack[len(stack) - npop:] if npop else []
        del stack[len(stack) - npop:]
        union = frozenset().union(*popped) if popped else frozenset()
        name = ins.op.name
        if name == "LOAD_TENSOR":
            stack.append(loc.get(args[0], frozenset()))
        elif name == "STORE_TENSOR":
            loc[args[0]] = popped[0]
        elif name == "RETURN":
            escaping |= popped[0]
        elif name == "UNPACK_TUPLE":
            stack.extend([union] * args[0])
        elif name in ("BUILD_TUPLE",) or ins.op.view:
            stack.append(union)
        elif name == "CALL_CELL":
            stack.append(union | {i})
        else:
            for _ in range(ins.op.n_pushes(args)):
                stack.append(frozenset({i}))
        succ = [] if ins.op.terminator else [i + 1]
        li = ins.op.label_operand
        if li is not None:
            succ.append(code.index_at(ins.args[li]))
        for j in succ:
            if j >= n:
                continue
            new = (tuple(stack), loc)
            old = states[j]
            if old is None:
                states[j] = new
                work.append(j)
            else:
                merged = (tuple(a | b for a, b in zip(old[0], new[0])),
                          {k: old[1].get(k, frozenset()) | new[1].get(k, frozenset()) for k in set(old[1]) | set(new[1])})
                if merged != old:
                    states[j] = merged
                    work.append(j)
    return {i for i in range(n) if i not in escaping and i not in in_loop}


# ---------------------------------------------------------------- linking and running

class BoundCode:
    """A Code linked to the Cell instance whose attributes it reads."""

    allocates = False        # whether the Code has ALLOC_DEVICE_MEM (set while linking)

    def __init__(self, code: Code, cell=None, attr_values=None, callee_resolver=None, accelerator=None, device=None):
        self.code = code
        self.cell = cell
        self.accelerator = accelerator
        self.device = device = device or _device.current()
        self.attr_values = attr_values or {}
        for name, obj in self.attr_values.items():     # Parameters and tensors must live on the device
            a = getattr(obj, "_data", obj)
            if type(a) is not device.array_type and isinstance(a, _device.ARRAYS) and not isinstance(a, np.generic):
                raise _device.DeviceMismatch(f"{code.name}: attribute {name} is a tensor on {_device.name_of(a)}, "
                                             f"but the code runs on {device.name} (the current device_target); "
                                             "make the Cell after set_context(device_target=...)")
        # the memory plan (compiler/memplan.py) on the CPU; without one, per-instruction kept buffers
        self.memplan = getattr(code, "memplan", None) if device is _device.CPU else None
        self.arenas: list = []
        self.reusable = reusable_outputs(code) if self.memplan is None else set()
        self.prog = [HANDLERS[ins.op.code](self, i, code.decode_args(ins)) for i, ins in enumerate(code.instrs)]
        self.callees = {}
        for i, ins in enumerate(code.instrs):
            if ins.op.name == "CALL_CELL":
                path, sub = code.decode_args(ins)[0]
                self.callees[i] = callee_resolver(path, sub)
        self.entry = _entry_plan(code)
        self.fast_bind = _compile_binder(code, device.array_type)
        self.pools: list = []
        self.calls = 0
        self.nlocals = len(code.varnames)
        self.param_slots = [code.varnames.index(n) for n, _ in code.params]
        self.nparams = len(self.param_slots)
        self.params_first = self.param_slots == list(range(self.nparams))

    def bind(self, args) -> dict:
        """Bind symbols from the arguments and check them; raises ShapeMismatch."""
        code = self.code
        if len(args) != len(code.params):
            raise ShapeMismatch(f"{code.name} takes {len(code.params)} arguments, got {len(args)}")
        env = {}
        for k, kind, a, b in self.entry:
            v = args[k]
            if kind == 0:    # bind a dim symbol
                d = v.shape[a]
                old = env.setdefault(b, d)
                if old != d:
                    raise ShapeMismatch(_dim_msg(code, k, a, d, f"{b} = {old}"))
            elif kind == 1:  # a constant dim
                if v.shape[a] != b:
                    raise ShapeMismatch(_dim_msg(code, k, a, v.shape[a], str(b)))
            elif kind == 2:  # rank and dtype
                if type(v) is not self.device.array_type and _device.device_of(v) not in (None, self.device):
                    raise _device.DeviceMismatch(f"{code.name}: argument {code.params[k][0]} is a tensor on "
                                                 f"{_device.name_of(v)}, but the code runs on {self.device.name}")
                if not isinstance(v, self.device.array_type) or v.ndim != a or v.dtype != b:
                    got = f"{v.dtype}{list(v.shape)}" if _device.is_array(v) else type(v).__name__
                    raise ShapeMismatch(f"{code.name}: argument {code.params[k][0]} must be a {b} tensor of "
                                        f"rank {a}, got {got}")
            elif kind == 3:  # scalar symbol / flag
                env[b] = v
            else:            # a derived dim: check after binding
                pass
        for k, kind, a, b in self.entry:
            if kind == 4 and args[k].shape[a] != b(env):
                raise ShapeMismatch(_dim_msg(code, k, a, args[k].shape[a], f"{code.params[k][1].shape[a]} = {b(env)}"))
        for lhs, rhs, why, fl, fr in self.checks:
            lv, rv = fl(env), fr(env)
            if lv != rv:
                self.raise_first(env)
                raise ShapeMismatch(f"{code.name}: {why}; with {_env_str(env)}: {lhs} = {lv} but {rhs} = {rv}")
        return env

    def raise_first(self, env) -> None:
        """An entry check failed; when the path these arguments take reaches one of the user's
        ``raise`` first (``if (H, W) != (224, 224): raise ValueError(...)``, in this code or in a
        sub-Cell it calls), raise that, as Python would."""
        _raise_first(self.code, env, 0)

    @property
    def checks(self):
        c = self.__dict__.get("_checks")
        if c is None:
            c = self.__dict__["_checks"] = [(a, b, why, compile_sym(a), compile_sym(b))
                                            for a, b, why in self.code.assumptions]
        return c

    def call(self, args, parent=None, env=None):
        """Run with these arguments; ``env``: their symbol bindings when the caller already has them."""
        if env is None:
            env = self.fast_bind(args)
            if env is None:
                env = self.bind(args)
        f = Frame(self, parent, env)
        if self.params_first:           # the usual layout: parameters are locals 0..n-1
            f.locals[:self.nparams] = args
        else:
            loc = f.locals
            for k, slot in enumerate(self.param_slots):
                loc[slot] = args[k]
        return run(f)


def _env_str(env):
    return ", ".join(f"{k}={v}" for k, v in env.items())


def _raise_first(code, env, depth: int) -> bool:
    """Follow the path the bound symbols select to the first RAISE and raise it; False at a
    RETURN, a loop or a symbol the arguments do not bind (then the caller's error stands)."""
    from ..bytecode.types import TensorType

    i = 0
    for _ in range(len(code.instrs) + 1):
        if not 0 <= i < len(code.instrs):
            return False
        ins = code.instrs[i]
        name = ins.op.name
        args = code.decode_args(ins)
        if name == "RAISE":
            e = user_exception(args)(env)
            if hasattr(e, "add_note"):
                e.add_note(f"raised by {code.name} at {code.filename}:{ins.loc.line}:{ins.loc.col + 1} "
                           f"(bytecode offset 0x{ins.offset:04x})")
            raise e
        if name in ("RETURN", "SET_SYM", "BIND_DIMS"):
            return False
        if name == "JUMP":
            i = code.index_at(args[0])
            continue
        if name == "BRANCH_IF_SYMBOLIC":
            try:
                ok = compile_sym(args[0])(env)
            except Exception:  # noqa: BLE001 - a symbol these arguments do not bind
                return False
            i = i + 1 if ok else code.index_at(args[1])
            continue
        if name == "CALL_CELL" and depth < 16 and code.stack_types and code.stack_types[i]:
            (_, sub), n = args
            sub_env = {}
            for (_, want), got in zip(sub.params, code.stack_types[i][len(code.stack_types[i]) - n:]):
                if isinstance(want, TensorType) and isinstance(got, TensorType) and want.rank == got.rank:
                    for dw, dg in zip(want.shape, got.shape):
                        sym = dw.as_symbol()
                        if sym is not None:
                            try:
                                sub_env[sym] = compile_sym(dg)(env)
                            except Exception:  # noqa: BLE001 - not bound here
                                pass
            _raise_first(sub, sub_env, depth + 1)
        i += 1
    return False


def _dim_msg(code, k, axis, got, want):
    pname, t = code.params[k]
    return (f"{code.name}: argument {pname} has dim {axis} = {got}, but the bytecode was verified for "
            f"{fmt_shape(t.shape)} where dim {axis} is {want}")


def _compile_binder(code: Code, array_type=np.ndarray):
    """Generate ``bind(args) -> env`` for this Code's parameters: the common case in a few
    straight-line checks. It returns None when anything is off; ``BoundCode.bind`` then
    finds the problem and raises the error that names it."""
    from .symeval import _src

    lines = ["def fast_bind(args):", "    try:"]
    n = len(code.params)
    names = [f"a{k}" for k in range(n)]
    lines.append(f"        ({', '.join(names)}{',' if n == 1 else ''}) = args" if n else "        pass")
    lines.append("    except (TypeError, ValueError):")
    lines.append("        return None")
    lines.append("    env = {}")
    consts = {"nd": array_type}
    derived = []
    for k, (_pname, t) in enumerate(code.params):
        a = names[k]
        if isinstance(t, TensorType):
            consts[f"D{k}"] = t.dtype.np
            lines.append(f"    if type({a}) is not nd or {a}.ndim != {t.rank} or {a}.dtype != D{k}: return None")
            lines.append(f"    s{k} = {a}.shape")
            for axis, d in enumerate(t.shape):
                sname = d.as_symbol()
                if sname is not None:
                    lines.append(f"    v = env.get({sname!r})")
                    lines.append(f"    if v is None: env[{sname!r}] = s{k}[{axis}]")
                    lines.append(f"    elif v != s{k}[{axis}]: return None")
                elif d.is_const():
                    lines.append(f"    if s{k}[{axis}] != {int(d.const_value())}: return None")
                else:
                    derived.append(f"    if s{k}[{axis}] != {_src(d)}: return None")
        elif isinstance(t, ScalarType) and t.value is not None:
            sname = t.value.as_symbol() if hasattr(t.value, "as_symbol") else (
                t.value.args[0] if t.value.op == "flag" else None)
            if sname:
                lines.append(f"    env[{sname!r}] = {a}")
    lines.extend(derived)
    for lhs, rhs, _why in code.assumptions:
        lines.append(f"    if {_src(lhs)} != {_src(rhs)}: return None")
    lines.append("    return env")
    ns = dict(consts, __builtins__={"max": max, "min": min, "bool": bool, "type": type, "TypeError": TypeError,
                                    "ValueError": ValueError})
    try:
        exec("\n".join(lines), ns)  # noqa: S102 - generated from the verified signature, names quoted
    except Exception:  # noqa: BLE001 - never let an odd signature break calling; the slow path works
        return lambda args: None
    fn = ns["fast_bind"]

    def guarded(args):
        try:
            return fn(args)
        except Exception:  # noqa: BLE001 - e.g. a symbol missing from env: the slow path explains it
            return None
    return fn if not derived and not code.assumptions else guarded


def _entry_plan(code: Code) -> list:
    plan = []
    for k, (_pname, t) in enumerate(code.params):
        if isinstance(t, TensorType):
            plan.append((k, 2, t.rank, t.dtype.np))
            for axis, d in enumerate(t.shape):
                s = d.as_symbol()
                if s is not None:
                    plan.append((k, 0, axis, s))
                elif d.is_const():
                    plan.append((k, 1, axis, d.const_value()))
                else:
                    plan.append((k, 4, axis, compile_sym(d)))
        elif isinstance(t, ScalarType) and t.value is not None and not (t.value.__class__.__name__ == "Expr"
                                                                         and t.value.is_const()):
            name = t.value.as_symbol() if hasattr(t.value, "as_symbol") else (
                t.value.args[0] if t.value.op == "flag" else None)
            if name:
                plan.append((k, 3, 0, name))
    plan.sort(key=lambda p: p[1] == 4)
    return plan


def run(f: Frame):
    """Execute frame f to its RETURN; returns the result."""
    bound = f.bound
    pools = bound.pools
    f.bufs = pools.pop() if pools else [None] * len(bound.prog)
    bound.calls += 1
    prog = bound.prog
    s = f.stack
    i = 0
    trace = _trace
    try:
        if trace is None and not events.profiling:
            while i >= 0:
                i = prog[i](f, s)
        else:
            i = _run_slow(f, prog, s, trace)
    except Exception as e:  # noqa: BLE001 - re-raised with the instruction's location
        f.bufs = None
        if f.arena is not None:       # closed and dropped: what it holds may still be seen through the error
            f.arena.close()
            f.arena = None
        if bound.allocates:           # workspaces this frame left open go back
            bound.device.release(f)
        if isinstance(e, (ExecutionError, ShapeMismatch)):
            raise
        idx = f.index if trace is not None or events.profiling else i
        if getattr(e, "msvm_raised", False):   # the user's own `raise` in construct: theirs, unwrapped
            ins = bound.code.instrs[idx]
            if hasattr(e, "add_note"):
                e.add_note(f"raised by {bound.code.name} at {bound.code.filename}:{ins.loc.line}:{ins.loc.col + 1} "
                           f"(bytecode offset 0x{ins.offset:04x})")
            raise
        err = _exec_error(bound.code, idx, e)
        on_exception = getattr(trace, "on_exception", None)
        if on_exception is not None:      # a debugger sees the failing frame before it unwinds
            on_exception(f, idx, err)
        raise err from e
    else:
        pools.append(f.bufs)
    return f.result


def _run_slow(f, prog, s, trace):
    times = {} if events.profiling else None
    i = 0
    instrs = f.code.instrs
    while i >= 0:
        f.index = i
        if trace is not None:
            trace(f, instrs[i].offset)
        if times is None:
            i = prog[i](f, s)
        else:
            t0 = time.perf_counter_ns()
            j = prog[i](f, s)
            times[instrs[i].offset] = times.get(instrs[i].offset, 0) + time.perf_counter_ns() - t0
            i = j
    if times is not None:
        ev = {"type": "exec", "code": f.code.name, "code_id": f.code.uid, "file": f.code.filename, "instr_ns": times}
        if f.bound.arenas:               # the memory plan's arena this call gave back (FREE_DEVICE_MEM)
            ar = f.bound.arenas[-1]
            ev["arena_bytes"], ev["unplanned_bytes"] = ar.nbytes, sum(ar.asked.values())
        events.emit(ev)
    return i


def _exec_error(code: Code, i: int, e: Exception) -> ExecutionError:
    ins = code.instrs[i] if 0 <= i < len(code.instrs) else None
    kind = execution_error_like(e)
    if ins is None:
        return kind(f"{type(e).__name__}: {e}", code.filename, code.firstlineno, 0)
    return kind(f"{ins.op.name} {argrepr(code, ins)} failed in {code.name}: {type(e).__name__}: {e}",
                          code.filename, ins.loc.line, ins.loc.col, ins.loc.end_line, ins.loc.end_col, ins.offset)


def trace_printer(frame: Frame, pc: int):
    """The MSVM_TRACE=1 hook: the stack, then the instruction as the disassembler prints it."""
    code = frame.code
    ins = code.instrs[frame.index]
    stack = " ".join(f"[{v.dtype}{list(v.shape)}]" if _device.is_array(v) else f"[{v!r}]"
                     for v in frame.stack)
    print(f"[MS] {'  ' * frame.depth}{stack}", file=sys.stderr)
    print(f"[MS] {'  ' * frame.depth}0x{pc:04x}: {ins.op.name} {argrepr(code, ins)}", file=sys.stderr)


if os.environ.get("MSVM_TRACE") == "1":
    set_trace(trace_printer)
