"""Reading a function's tables back from their JSON form, strictly.

The ``.msbc`` reader and the JSON assembler (``disasm.from_json``) rebuild
constants, types, source locations and a ``Code`` from plain data through these
functions. They accept exactly what ``disasm.code_to_data`` writes: every value
is checked for its type, range and size, and anything else is a
``BytecodeError`` that says where in the tables it is (``consts[3]``), what was
expected and what was found. Nothing here raises another exception for bad
data, and the work is linear in its size (``check_json`` bounds the nesting the
recursive readers walk).
"""

from __future__ import annotations

import numpy as np

from .. import dtype as dt
from ..errors import BytecodeError
from .code import Code, Instr, Loc
from .opcodes import BY_NAME
from .symbolic import Expr, Pred, SymbolicError, from_data
from .types import NONE, ScalarType, TensorType, TupleType

MAX_JSON_DEPTH = 160        # keeps the recursive readers far from the recursion limit; a symbolic level takes up to 6
MAX_TABLE = 0xFFFF + 1      # operands are u16: no table can use more entries
MAX_RANK = 32               # dims of a tensor type or a constant array
MAX_LINE = 2 ** 31 - 1
INT64 = (-2 ** 63, 2 ** 63 - 1)


def short(v) -> str:
    """``repr`` of a found value, cut to a length that fits in one line of a message."""
    r = repr(v)
    return r if len(r) <= 60 else r[:57] + "..."


def check_json(v, what: str = "metadata"):
    """Iteratively check that decoded JSON nests at most MAX_JSON_DEPTH levels and
    that every string is valid Unicode (no lone surrogates, which cannot be printed)."""
    stack = [(v, 0)]
    while stack:
        x, depth = stack.pop()
        if isinstance(x, str):
            try:
                x.encode("utf-8")
            except UnicodeEncodeError:
                raise BytecodeError(f"{what}: string {short(x)} is not valid Unicode") from None
        elif isinstance(x, (list, dict)):
            if depth >= MAX_JSON_DEPTH:
                raise BytecodeError(f"{what}: JSON nested more than {MAX_JSON_DEPTH} levels deep (the limit)")
            items = x.items() if isinstance(x, dict) else enumerate(x)
            for k, item in items:
                if isinstance(k, str):
                    stack.append((k, depth + 1))
                stack.append((item, depth + 1))


def _int(v, what: str, lo: int = INT64[0], hi: int = INT64[1]) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
        raise BytecodeError(f"{what}: expected an integer from {lo} to {hi}, found {short(v)}")
    return v


def ident(v, what: str) -> str:
    """A name (function, file, symbol, local, attribute): a string without control characters."""
    if not isinstance(v, str) or not v.isprintable():
        raise BytecodeError(f"{what}: expected a name (a printable string), found {short(v)}")
    return v


def _list(v, what: str, limit: int = MAX_TABLE) -> list:
    if not isinstance(v, list):
        raise BytecodeError(f"{what}: expected a list, found {short(v)}")
    if len(v) > limit:
        raise BytecodeError(f"{what}: {len(v)} entries; the limit is {limit}")
    return v


def _sym(v, what: str):
    try:
        return from_data(v)
    except SymbolicError as e:
        raise BytecodeError(f"{what}: {e}") from None


def _dtype(v, what: str) -> dt.DType:
    if not isinstance(v, str):
        raise BytecodeError(f"{what}: expected a dtype name, found {short(v)}")
    try:
        return dt.by_name(v)
    except ValueError as e:
        raise BytecodeError(f"{what}: {e}") from None


def value_from_data(d, what: str = "constant"):
    """A constant-pool value from its tagged form (``disasm.value_to_data``)."""
    if d is None or isinstance(d, (bool, str)):
        return d
    if not isinstance(d, dict) or not d:
        raise BytecodeError(f"{what}: expected null, a bool, a string or a tagged object, found {short(d)}")
    keys = set(d)
    if keys == {"int"}:
        return _int(d["int"], what)
    if keys == {"float"}:
        if not isinstance(d["float"], str):
            raise BytecodeError(f"{what}: expected a float written as a string, found {short(d['float'])}")
        try:
            return float(d["float"])
        except ValueError:
            raise BytecodeError(f"{what}: {short(d['float'])} is not a float") from None
    if keys == {"sym"}:
        return _sym(d["sym"], what)
    if keys == {"dtype"}:
        return _dtype(d["dtype"], what)
    if keys == {"tuple"}:
        items = _list(d["tuple"], what)
        return tuple(value_from_data(x, f"{what}[{i}]") for i, x in enumerate(items))
    if keys == {"array", "dtype", "shape"}:
        return _array(d, what)
    raise BytecodeError(f"{what}: unknown constant tags {sorted(keys)}")


def _array(d, what: str) -> np.ndarray:
    kind = _dtype(d["dtype"], f"{what} dtype")
    shape = tuple(_int(n, f"{what} shape", 0) for n in _list(d["shape"], f"{what} shape", MAX_RANK))
    try:
        if kind.kind == "c":        # [re, im] pairs (disasm.value_to_data)
            parts = np.array(d["array"], dtype=dt.real_of(kind).np)
            if parts.shape != shape + (2,):
                raise ValueError(f"complex data must be [re, im] pairs of shape {list(shape) + [2]}")
            a = (parts[..., 0] + 1j * parts[..., 1]).astype(kind.np)
        else:
            a = np.array(d["array"], dtype=kind.np)
    except (ValueError, TypeError, OverflowError) as e:
        raise BytecodeError(f"{what}: array data is not {kind.name} data of shape {list(shape)}: {e}") from None
    if a.shape != shape:
        raise BytecodeError(f"{what}: array data has shape {list(a.shape)}, its shape field says {list(shape)}")
    return a


def type_from_data(d, what: str = "type"):
    """A static type from its JSON form (``disasm.type_to_data``)."""
    if not isinstance(d, dict):
        raise BytecodeError(f"{what}: expected a type object, found {short(d)}")
    keys = set(d)
    if keys == {"tensor", "dtype"}:
        dims = []
        for i, x in enumerate(_list(d["tensor"], f"{what} shape", MAX_RANK)):
            dim = _sym(x, f"{what} dim {i}")
            if not isinstance(dim, Expr):
                raise BytecodeError(f"{what} dim {i}: expected an integer expression, found a predicate")
            dims.append(dim)
        return TensorType(tuple(dims), _dtype(d["dtype"], f"{what} dtype"))
    if keys == {"scalar", "value"}:
        kind, v = d["scalar"], d["value"]
        want = {"b": Pred, "i": Expr, "f": type(None)}.get(kind) if isinstance(kind, str) else None
        if want is None:
            raise BytecodeError(f"{what}: scalar kind must be 'b', 'i' or 'f', found {short(kind)}")
        value = None if v is None else _sym(v, f"{what} value")
        if value is not None and not isinstance(value, want):
            raise BytecodeError(f"{what}: a {kind!r} scalar cannot have the value {value}")
        return ScalarType(kind, value)
    if keys == {"tuple"}:
        items = _list(d["tuple"], what)
        return TupleType(tuple(type_from_data(x, f"{what}[{i}]") for i, x in enumerate(items)))
    if keys == {"none"} and d["none"] is True:
        return NONE
    raise BytecodeError(f"{what}: unknown type {short(d)}")


def loc_from_data(d, what: str = "source location") -> Loc:
    if not (isinstance(d, list) and len(d) == 4):
        raise BytecodeError(f"{what}: expected [line, col, end line, end col], found {short(d)}")
    return Loc(*(_int(x, what, 0, MAX_LINE) for x in d))


def parts_from_data(d, what: str = "fused parts") -> tuple:
    out = []
    for i, p in enumerate(_list(d, what)):
        if not (isinstance(p, list) and len(p) == 2):
            raise BytecodeError(f"{what}[{i}]: expected [op name, location], found {short(p)}")
        out.append((ident(p[0], f"{what}[{i}]"), loc_from_data(p[1], f"{what}[{i}]")))
    return tuple(out)


_KEYS = ("name", "filename", "firstlineno", "consts", "names", "varnames", "params", "attr_types", "callees")


def code_from_data(d, instrs: list, done: list) -> Code:
    """A Code from one function's JSON record; ``done``: the functions defined before it."""
    if not isinstance(d, dict):
        raise BytecodeError(f"function record: expected an object, found {short(d)}")
    for key in _KEYS:
        if key not in d:
            raise BytecodeError(f"function record lacks {key!r}")
    callees = []
    for i, c in enumerate(_list(d["callees"], "callees")):
        if not (isinstance(c, list) and len(c) == 2):
            raise BytecodeError(f"callees[{i}]: expected [attribute path, function index], found {short(c)}")
        path = ident(c[0], f"callees[{i}] path")
        idx = c[1]
        if not isinstance(idx, int) or isinstance(idx, bool) or not 0 <= idx < len(done):
            raise BytecodeError(f"callees[{i}]: {path!r} refers to function {short(idx)}, which is not defined "
                                f"before it (0 to {len(done) - 1})")
        callees.append((path, done[idx]))
    params = []
    for i, p in enumerate(_list(d["params"], "params")):
        if not (isinstance(p, list) and len(p) == 2):
            raise BytecodeError(f"params[{i}]: expected [name, type], found {short(p)}")
        params.append((ident(p[0], f"params[{i}] name"), type_from_data(p[1], f"params[{i}] type")))
    attrs = d["attr_types"]
    if not isinstance(attrs, dict):
        raise BytecodeError(f"attr_types: expected an object, found {short(attrs)}")
    may_be_one = frozenset(ident(s, f"may_be_one[{i}]")
                           for i, s in enumerate(_list(d.get("may_be_one", []), "may_be_one")))
    return Code(
        name=ident(d["name"], "name"), filename=ident(d["filename"], "filename"),
        firstlineno=_int(d["firstlineno"], "firstlineno", 0, MAX_LINE), instrs=instrs,
        consts=[value_from_data(c, f"consts[{i}]") for i, c in enumerate(_list(d["consts"], "consts"))],
        names=[ident(n, f"names[{i}]") for i, n in enumerate(_list(d["names"], "names"))],
        varnames=[ident(n, f"varnames[{i}]") for i, n in enumerate(_list(d["varnames"], "varnames"))],
        params=params,
        attr_types={ident(k, "attr_types key"): type_from_data(t, f"attr_types[{k!r}]") for k, t in attrs.items()},
        callees=callees, may_be_one=may_be_one)


def instr_from_record(r, what: str) -> Instr:
    """One instruction of the JSON assembler's input (``disasm.to_json`` records)."""
    if not isinstance(r, dict):
        raise BytecodeError(f"{what}: expected an instruction object, found {short(r)}")
    name = r.get("opcode", r.get("op"))
    op = BY_NAME.get(name) if isinstance(name, str) else None
    if op is None:
        raise BytecodeError(f"{what}: unknown instruction {short(name)}")
    args = _list(r.get("args"), f"{what} args")
    if len(args) != len(op.operands):
        raise BytecodeError(f"{what}: {op.name} takes {len(op.operands)} operands, got {len(args)}")
    return Instr(op, tuple(_int(a, f"{what} operand", 0, 0xFFFF) for a in args),
                 loc_from_data(r.get("loc"), f"{what} loc"), parts_from_data(r.get("parts", []), f"{what} parts"))
