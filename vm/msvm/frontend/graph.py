"""Graph values: what ``construct`` computes on while it is being compiled.

A ``GraphValue`` stands for a run-time tensor or scalar. It has a static type
(``TensorType`` / ``ScalarType`` / ``TupleType``), so ``x.shape`` gives ints and
symbolic ``Expr`` dims, and a *node* saying how to produce it: a local slot, a
Cell attribute, a constant, a symbolic expression, or an instruction over
other graph values. ``msvm.ops`` functions called on graph values come here
through ``trace_op``, which runs the opcode's shape rule (so errors appear at
the call's source line) and returns a new node. The compiler emits nodes in
post-order when a statement stores or returns them.
"""

from __future__ import annotations

import threading

from ..bytecode.code import Loc
from ..bytecode.opcodes import BY_NAME
from ..bytecode.symbolic import Expr, Pred
from ..bytecode.types import NONE, ScalarType, ShapeError, TensorType, TupleType, type_of_const

_state = threading.local()


def current():
    """The function builder compiling right now (None outside compilation)."""
    return getattr(_state, "builder", None)


def tracing() -> bool:
    return current() is not None


class using:
    """Context manager that makes ``builder`` current for trace_op."""

    def __init__(self, builder):
        self.builder = builder

    def __enter__(self):
        self.prev = current()
        _state.builder = self.builder

    def __exit__(self, *exc):
        _state.builder = self.prev


class GraphValue:
    """A run-time value inside a function being compiled."""

    __slots__ = ("type", "node", "uses", "tmp", "loc", "emitted")

    def __init__(self, type_, node: tuple, loc: Loc | None = None):
        self.type = type_
        self.node = node     # ("local", slot) | ("param", name) | ("const", v) | ("sym", e) | ("op", ...) | ("call", ...)
        self.uses = 0
        self.tmp = None
        self.loc = loc
        self.emitted = False

    # tensor metadata as construct code sees it
    @property
    def shape(self):
        t = self.type
        if isinstance(t, TensorType):
            return tuple(d.const_value() if d.is_const() else d for d in t.shape)
        if isinstance(t, ScalarType):
            return ()
        raise AttributeError(f"{t} has no shape")

    @property
    def dtype(self):
        t = self.type
        if isinstance(t, TensorType):
            return t.dtype
        raise AttributeError(f"{t} has no dtype")

    def __bool__(self):
        raise ShapeError("the truth value of a run-time tensor is not known at compile time "
                         "(branch on shapes or bool arguments instead)")

    def __iter__(self):
        t = self.type
        if isinstance(t, TupleType):
            raise ShapeError("unpack the sub-Cell's tuple result in an assignment: a, b = self.cell(x)")
        raise ShapeError(f"cannot iterate over {t} in construct")

    def __repr__(self):
        return f"<graph {self.type} {self.node[0]}>"


def is_graph(v) -> bool:
    return isinstance(v, GraphValue)


def lift(v, builder=None) -> GraphValue:
    """A Python scalar, symbolic value, None or concrete tensor as a graph value."""
    if isinstance(v, GraphValue):
        return v
    b = builder or current()
    if isinstance(v, Expr):
        return GraphValue(ScalarType("i", b.env.norm(v)), ("sym", v))
    if isinstance(v, Pred):
        c = v.const_value()
        if c is not None:
            return GraphValue(type_of_const(c), ("const", c))
        return GraphValue(ScalarType("b", v), ("sym", v))
    if v is None:
        return GraphValue(NONE, ("const", None))
    if type(v).__module__ == "numpy" and hasattr(v, "item") and getattr(v, "ndim", None) == 0:
        v = v.item()        # a numpy scalar (x * np.float32(0.5)) is a Python number operand
    if isinstance(v, (bool, int, float)):
        return GraphValue(type_of_const(v), ("const", v))
    arr = getattr(v, "_data", None)
    if arr is not None:
        import numpy as np

        from .. import device

        if not isinstance(arr, np.ndarray) and device.is_array(arr):
            arr = device.to_host(arr)     # a constant is part of the program (host); linking puts it on the device
        if isinstance(arr, np.ndarray):
            return GraphValue(type_of_const(arr), ("const", arr))
    raise ShapeError(f"{type(v).__name__} value {v!r} cannot be used as a tensor operand")


def trace_op(opname: str, inputs: tuple, operands: tuple) -> GraphValue:
    b = current()
    if b is None:
        raise RuntimeError(f"{opname} on a graph value outside compilation")
    op = BY_NAME[opname]
    gins = [lift(x, b) for x in inputs]
    types = [b.env.norm_type(g.type) for g in gins]
    out = op.rule(b, types, operands)
    for g in gins:
        g.uses += 1
    v = GraphValue(out, ("op", opname, tuple(gins), tuple(operands)), b.loc)
    note_consumer(b, gins, v)
    return v


def note_consumer(b, gins, v) -> None:
    """Remember that v was built from gins (rebind gives them their old values)."""
    reg = getattr(b, "consumers", None)
    if reg is not None:
        for g in gins:
            reg.setdefault(id(g), []).append(v)


def trace_effect(opname: str, inputs: tuple, operands: tuple) -> GraphValue:
    """An instruction with an effect (opcodes.EFFECTS, e.g. ASSIGN_PARAM): emitted at once, in
    statement order, with its inputs, and its result kept in a slot. Graph values are emitted
    lazily where a statement stores or returns them; an effect must not wait for a use (a call
    as a statement of its own has none) nor move past a later read of what it changed."""
    b = current()
    if b is None:
        raise RuntimeError(f"{opname} on a graph value outside compilation")
    return b.emit_effect(trace_op(opname, inputs, operands))


def rebind(target: GraphValue, value) -> GraphValue:
    """An in-place update of a run-time value that is not a Parameter (``ops.scatter_nd_add(x, ...)``
    on an argument or a slice): ``value`` is computed now and ``target`` becomes it, so every name
    and Python reference to that graph value reads the update afterwards (the reference semantics
    of MindSpore's in-place ops); values built from it before read the old value (``consumers``)."""
    b = current()
    if b is None:
        raise RuntimeError("rebind outside compilation")
    new = b.emit_effect(lift(value, b))
    old = GraphValue(target.type, target.node, target.loc)      # what values built before read
    old.tmp, old.uses = target.tmp, target.uses
    for g in b.consumers.pop(id(target), []):
        kind = g.node[0]
        if kind in ("op", "call") and any(x is target for x in g.node[2]):
            g.node = g.node[:2] + (tuple(old if x is target else x for x in g.node[2]),) + g.node[3:]
            b.consumers.setdefault(id(old), []).append(g)
    target.node, target.tmp, target.type, target.uses = new.node, None, new.type, 0
    return target


def param_of(v):
    """The Parameter a graph value reads directly (``self.w`` in construct), else None."""
    b = current()
    if b is None or not is_graph(v) or v.node[0] != "param" or v.tmp is not None:
        return None
    return b.param_object(v.node[1])


def trace_fill(shape, value, dtype) -> GraphValue:
    return trace_op("FILL", (), (tuple(shape), value, dtype))


# ---------------------------------------------------------------- printing (issue 21)

def _runtime_item(v) -> bool:
    return isinstance(v, (GraphValue, Expr)) or hasattr(v, "_data")


def print_template(args, sep: str, end: str) -> tuple:
    """(parts, values) of a print: strings and constants fold into the parts, run-time values
    (graph values, tensors, symbolic ints) leave a None; the separators and the end are parts."""
    parts: list = []
    vals: list = []

    def items(seq, sep):
        for k, v in enumerate(seq):
            if k:
                parts.append(sep)
            if isinstance(v, str):
                parts.append(v)
            elif _runtime_item(v):
                parts.append(None)
                vals.append(v)
            elif isinstance(v, (tuple, list)) and any(_runtime_item(x) for x in v):
                parts.append("(")
                items(v, ", ")
                parts.append(")")
            else:
                parts.append(str(v))

    items(args, sep)
    parts.append(end)
    merged: list = []
    for p in parts:
        if p is not None and merged and merged[-1] is not None:
            merged[-1] += p
        else:
            merged.append(p)
    return tuple(merged), vals


def trace_print(parts: tuple, vals: list) -> None:
    """Emit PRINT at the current place of the function being compiled (an effect: it is not a
    node waiting for a use, it runs where the statement is)."""
    b = current()
    for v in vals:
        b.push(v)
    b.emit("PRINT", len(vals), b.cb.const(tuple(parts)))


def builtin_print(*args, sep=" ", end="\n", file=None, flush=False):
    """``print(...)`` inside construct: a PRINT at its place in the program (MindSpore prints at run
    time in graph mode too)."""
    if file is not None:
        raise TypeError("print(file=...) is not supported inside construct (PRINT writes to stdout)")
    trace_print(*print_template(args, " " if sep is None else sep, "\n" if end is None else end))
