"""The frontend: compiles the Python AST of ``construct`` / a jit function to Code.

It evaluates the function body over a value domain: Python constants (folded
at compile time), symbolic ints and predicates (``x.shape[0]``, bool
arguments), and graph values (run-time tensors; see graph.py). Calls into
``msvm.ops``, primitives and tensor methods run our own library code on graph
values, which adds instructions. Control flow:

- ``if`` on a constant compiles one branch; on a symbolic predicate (a shape
  test or a bool argument) it emits BRANCH_IF_SYMBOLIC and merges both paths
  (dims that differ become ``select(pred, a, b)``);
- ``for`` over a constant range, tuple or CellList is unrolled; over a symbolic
  ``range(n)`` it becomes a loop on a symbol bound with SET_SYM;
- sub-Cells become CALL_CELL with their own Code; other Python helpers are inlined.

Anything else raises ``FrontendError`` naming file:line:col and the construct.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import inspect
import math
import operator
import textwrap
import types as pytypes
import weakref

import numpy as np

from .. import dtype as dt
from ..bytecode import symbolic as S
from ..bytecode.code import CodeBuilder, Loc
from ..bytecode.symbolic import Expr, Pred, SymbolicError
from ..bytecode.types import NONE, ScalarType, ShapeEnv, ShapeError, TensorType, TupleType
from ..bytecode.verify import bind_callee, subs_type, verify
from ..errors import ArgumentError, FrontendError, FrontendValueError, UnknownDim
from ..tensor import Parameter, ParameterTuple
from .argspec import ArgSpec
from .graph import GraphValue, builtin_print, lift, note_consumer, trace_op, using
from .ratio import Ratio, ratio_binop

# ---------------------------------------------------------------- sources


def _slice_bound(b, n, default):
    """A slice bound on an axis of size n (an int or a symbol) as numpy takes it: None the default, a
    negative int from the end, clamped to [0, n]; a symbolic bound as it is (the SLICE's entry checks
    that it fits)."""
    if b is None:
        return default
    if isinstance(b, Expr):
        return b
    if isinstance(n, int):
        return max(0, min(b + n if b < 0 else b, n))
    return S.smax(n + b, 0) if b < 0 else S.smin(Expr.of(b), n)


def _known_int(v):
    """v's value where it is an int known here (a Python int, a constant dim or a graph scalar of one), else None."""
    if isinstance(v, GraphValue) and isinstance(v.type, ScalarType) and v.type.kind == "i":
        v = v.type.value if isinstance(v.type.value, Expr) else None
    if isinstance(v, Expr):
        return v.const_value()
    return int(v) if isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) else None


def _index_int(v):
    """An index or slice bound as an int or a symbolic Expr (numpy ints and constant exprs become ints)."""
    if isinstance(v, Expr):
        c = v.const_value()
        return v if c is None else c
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, bool):
        return int(v)
    return v


class FunctionSource:
    """The parsed function and where it is in its file."""

    def __init__(self, node: ast.FunctionDef, filename: str, line_offset: int, col_offset: int, globals_: dict,
                 closure: dict | None = None, qualname: str = ""):
        self.node = node
        self.filename = filename
        self.line_offset = line_offset
        self.col_offset = col_offset
        self.globals = globals_
        self.closure = closure or {}
        self.qualname = qualname or node.name


_parsed: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()   # code object -> (node, line, col)


def source_of(fn) -> FunctionSource:
    """Parse a live Python function (its file is read, nothing is executed).

    The parse is cached per code object; what a function *closes over* is not: the closure
    values and globals in the FunctionSource are those of this function object, so functions
    made by one factory (``make(ops.add)``, ``make(ops.sub)``) each compile with their own.
    They are read now, when a signature compiles, and baked into that signature's bytecode
    as compile-time constants (MindSpore's graph mode treats them the same way); a signature
    compiled earlier keeps what it read (see the README's "The API")."""
    fn = inspect.unwrap(getattr(fn, "__func__", fn))
    code = getattr(fn, "__code__", None)
    if code is None:
        raise FrontendError(f"{fn!r} is not a Python function and cannot be compiled")
    try:
        parsed = _parsed[code]
    except (KeyError, TypeError):
        parsed = _lambda_node(code) if code.co_name == "<lambda>" else _def_node(fn, code)
        try:
            _parsed[code] = parsed
        except TypeError:
            pass
    node, line_offset, col_offset = parsed
    return FunctionSource(node, code.co_filename, line_offset, col_offset, fn.__globals__, _closure_of(fn, code),
                          "<lambda>" if code.co_name == "<lambda>" else fn.__qualname__)


def _closure_of(fn, code) -> dict:
    """The values of this function object's closure cells (an empty cell is left out)."""
    closure = {}
    if fn.__closure__:
        for name, cell in zip(code.co_freevars, fn.__closure__):
            try:
                closure[name] = cell.cell_contents
            except ValueError:
                pass
    return closure


def _def_node(fn, code) -> tuple:
    """(the def's node, line offset, column offset) read from its file."""
    try:
        lines, first = inspect.getsourcelines(fn)
    except (OSError, TypeError) as e:
        raise FrontendError(f"cannot read the source of {fn.__qualname__}: {e}", code.co_filename,
                            code.co_firstlineno, 0) from None
    text = "".join(lines)
    indent = len(lines[0]) - len(lines[0].lstrip())
    tree = ast.parse(textwrap.dedent(text))
    node = tree.body[0]
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        raise FrontendError(f"{fn.__qualname__} is not a def", code.co_filename, first, 0)
    return node, first - 1, indent


def _lambda_node(code) -> tuple:
    """A lambda: find its node in the file by line (and column when a line holds several)."""
    import linecache

    lines = linecache.getlines(code.co_filename)
    if not lines:
        raise FrontendError("cannot read the source of a lambda", code.co_filename, code.co_firstlineno, 0)
    tree = ast.parse("".join(lines), code.co_filename)
    cands = [n for n in ast.walk(tree) if isinstance(n, ast.Lambda) and n.lineno == code.co_firstlineno
             and [a.arg for a in n.args.args] == list(code.co_varnames[:code.co_argcount])]
    if len(cands) > 1:
        cols = [p[2] for p in code.co_positions() if p[0] is not None and p[2] is not None]
        if cols:
            cands = [n for n in cands if n.body.col_offset <= max(cols) and
                     (n.body.end_col_offset or 10 ** 9) >= min(cols)] or cands
    if len(cands) != 1:
        raise FrontendError("cannot tell which lambda on this line to compile; use a def",
                            code.co_filename, code.co_firstlineno, 0)
    lam = cands[0]
    node = ast.FunctionDef(name="<lambda>", args=lam.args, body=[ast.Return(lam.body)], decorator_list=[],
                           returns=None, type_comment=None)
    ast.copy_location(node, lam)
    ast.copy_location(node.body[0], lam.body)
    node.end_lineno, node.end_col_offset = lam.end_lineno, lam.end_col_offset
    return node, 0, 0


# ---------------------------------------------------------------- helpers

class _Returned(Exception):
    """Internal: control left the block through a return."""


class _Break(Exception):
    """Internal: a ``break`` of the loop being unrolled."""


class _Continue(Exception):
    """Internal: a ``continue`` of the loop being unrolled."""


_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
           ast.MatMult: operator.matmul,
           ast.BitAnd: operator.and_, ast.BitOr: operator.or_, ast.BitXor: operator.xor}   # (issue 21)
_CMPOPS = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}
_PYCMP = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq,
          "!=": operator.ne}
_DICT_READS = frozenset({"get", "keys", "values", "items"})     # dict methods construct may call
_SAFE_BUILTINS = {"len", "range", "int", "float", "bool", "tuple", "list", "min", "max", "abs", "enumerate",
                  "zip", "isinstance", "hasattr", "reversed", "sum", "round", "str", "print"}
_FOLD_MODULES = ("math", "numpy")


class ListValue(tuple):
    """A list literal's value in construct: a tuple that ``append``/``extend`` rebind (list_method)."""

    __slots__ = ()


def _type_symbols(t) -> set:
    if isinstance(t, TensorType):
        return set().union(*(d.symbols() for d in t.shape)) if t.shape else set()
    if isinstance(t, TupleType):
        return set().union(*(_type_symbols(x) for x in t.items)) if t.items else set()
    return set()


def _data_dims(t, data) -> tuple:
    """((symbol, item, dim), ...) of the data-dependent dims of a value's type (BIND_DIMS' operand)."""
    out = []
    for item, tt in ([(-1, t)] if isinstance(t, TensorType) else list(enumerate(t.items))
                     if isinstance(t, TupleType) else []):
        if isinstance(tt, TensorType):
            for k, d in enumerate(tt.shape):
                name = d.as_symbol()
                if name in data and name not in {o[0] for o in out}:
                    out.append((name, item, k))
    return tuple(out)


def _is_int(v) -> bool:
    return (isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))) or isinstance(v, Expr)


def _is_pred(v) -> bool:
    return isinstance(v, (bool, np.bool_, Pred))


def _as_pred(v) -> Pred:
    return v if isinstance(v, Pred) else S.const_pred(bool(v))


def _is_msvm(obj) -> bool:
    mod = getattr(obj, "__module__", None) or getattr(type(obj), "__module__", "")
    return isinstance(mod, str) and (mod == "msvm" or mod.startswith("msvm."))


def is_cell(obj) -> bool:
    return getattr(obj, "__msvm_cell__", False) and not isinstance(obj, type)


# ---------------------------------------------------------------- the compiler

class FunctionCompiler:
    """Compiles one function body for one argument signature."""

    MAX_UNROLL = 4096
    MAX_PASSES = 1 << 16       # unrolled loop bodies in one compile, nested loops' passes together

    def __init__(self, src: FunctionSource, self_obj, specs: list, name: str, cell_compiler=None,
                 generation: int = 0):
        self.src = src
        self.self_obj = self_obj
        # (the Cell whose Code this is: Parameter and sub-Cell paths are from it, also inside an inlined method
        # of a sub-Cell, where ``self`` is that sub-Cell)
        self.root = self_obj
        self.cb = CodeBuilder(name, src.filename, src.node.lineno + src.line_offset)
        self.env = ShapeEnv()
        self.loc = Loc(self.cb.code.firstlineno, src.col_offset, self.cb.code.firstlineno, src.col_offset)
        self.vars: dict = {}
        self.cell_compiler = cell_compiler or compile_cell_for
        self.generation = generation     # the caller's Parameter-shape generation, for sub-Cells' cache keys
        self.specs = specs
        self.inline_depth = 0
        self.branch_preds: list = []      # the predicates of the symbolic ifs being compiled
        self.scope = ""            # prefix of local slot names inside inlined helpers
        self.inlines = 0
        self.loop_syms = 0
        self.loops: list = []      # the loops being compiled: (unrolled, len(branch_preds) at their start)
        self.made_cells: dict = {}     # id -> the Cells made in construct and run inline (call_cell; held, so
        #                                that no other object takes a made Cell's id during the compile)
        self.passes = 0                # unrolled loop bodies compiled (count_pass)
        self.else_depth = 0            # else sides of symbolic ifs being compiled (their then sides: branch_preds)
        self._callee_index: dict = {}
        self.hover: list = []      # (Loc, name, type) for the language server
        # Cell.to_float's dtype: float tensor arguments and Parameters are cast to it on entry
        self.mixed = getattr(self_obj, "__dict__", {}).get("_mixed_precision") if self_obj is not None else None
        self.param_reads: dict = {}  # attr -> [(graph value reading it, branch depth)] (emit_effect)
        self.consumers: dict = {}    # id(graph value) -> values built from it (graph.rebind)

    # --- interface the shape rules use
    def attr_type(self, name):
        return self.cb.code.attr_types[name]

    # --- errors
    def error(self, msg: str, node=None) -> FrontendError:
        loc = self.node_loc(node) if node is not None else self.loc
        return FrontendError(msg, self.src.filename, loc.line, loc.col, loc.end_line, loc.end_col)

    def shape_error(self, e) -> FrontendValueError:
        """A shape rule's error at the current place: a ValueError, as MindSpore's shape errors are."""
        err = self.error(str(e))
        out = FrontendValueError(err.message, err.filename, err.line, err.col, err.end_line, err.end_col)
        out.needs_known_dims = isinstance(e, S.UnknownValue)     # the executor retries with exact values
        return out

    def node_loc(self, node) -> Loc:
        lo, co = self.src.line_offset, self.src.col_offset
        return Loc(node.lineno + lo, node.col_offset + co, (node.end_lineno or node.lineno) + lo,
                   (node.end_col_offset or node.col_offset) + co)

    # --- entry
    def compile(self):
        fn = self.src.node
        params = [a.arg for a in fn.args.args]
        if self.self_obj is not None:
            if not params:
                raise self.error(f"{fn.name} must take self", fn)
            self.vars[params[0]] = self.self_obj
            params = params[1:]
        if fn.args.kwonlyargs or fn.args.posonlyargs:
            raise self.error("keyword-only and positional-only parameters are not supported in construct", fn)
        if fn.args.kwarg:      # (mindcv's mobilevit: construct(self, x, *args, **kwargs)) no keyword reaches it
            self.vars[fn.args.kwarg.arg] = {}
        vararg, n_fixed = (fn.args.vararg.arg if fn.args.vararg else None), len(params)
        if vararg is not None:     # *inputs: one parameter per extra argument; construct sees their tuple
            params = [p for p, _ in expand_params([(p, None) for p in params] + [(vararg, VARARGS)],
                                                   len(self.specs))]
        if len(params) != len(self.specs):
            raise self.error(f"{fn.name} takes {len(params)} arguments, got {len(self.specs)}", fn)
        code = self.cb.code
        unifiable = set()
        for pname, spec in zip(params, self.specs):
            self.bind_param(pname, spec, unifiable)
        if vararg is not None:
            self.vars[vararg] = tuple(self.vars[p] for p in params[n_fixed:])
        self.env.unifiable = unifiable
        self.env.may_be_one = set().union(*(s.may_be_one for s in _flat_specs(self.specs)))
        self.record_hover_args(fn, params)
        with using(self):
            try:
                if self.mixed is not None:
                    for pname in params if vararg is None else [*params[:n_fixed], vararg]:
                        self.vars[pname] = self.mixed_cast_arg(pname, self.vars[pname])
                self.block(fn.body)
                self.loc = self.node_loc(fn.body[-1]) if fn.body else self.loc
                self.emit_return(None)
            except (_Returned, _AllReturned):
                pass
        code = self.cb.finish()
        code.may_be_one = frozenset(self.env.may_be_one)
        code.params = [(p, self.env.norm_type(t)) for p, t in code.params]
        if self.env.subst:   # dims unified after they were emitted: store the final forms
            code.consts = [_subst_const(c, self.env.subst) for c in code.consts]
        self.hover = [(loc, name, self.hover_type(v)) for loc, name, v in self.hover]
        return code

    def hover_type(self, v):
        """What the editor shows for a name: its type with the final (unified) dims."""
        if isinstance(v, GraphValue):
            return self.env.norm_type(v.type)
        if isinstance(v, (Expr, Pred)):
            return ScalarType("b" if isinstance(v, Pred) else "i", self.env.norm(v) if isinstance(v, Expr) else v)
        if isinstance(v, tuple):
            return TupleType(tuple(self.hover_type(x) for x in v))
        return v

    def bind_param(self, pname, spec, unifiable):
        """One parameter of construct: a baked constant, a run-time tensor or scalar (a local slot),
        or (model zoo) a tuple of them, one slot per item (``freqs_cis = (cos, sin)``)."""
        code = self.cb.code
        if spec.kind == "const":
            self.vars[pname] = spec.value
            return
        if spec.kind == "tuple":
            for j, item in enumerate(spec.value):
                self.bind_param(f"{pname}[{j}]", item, unifiable)
            self.vars[pname] = tuple(self.vars.pop(f"{pname}[{j}]") for j in range(len(spec.value)))
            return
        slot = self.cb.local(pname)
        t = spec.type
        code.params.append((pname, t))
        if isinstance(t, TensorType):
            for d in t.shape:
                if d.as_symbol():
                    unifiable.add(d.as_symbol())
            self.vars[pname] = GraphValue(t, ("local", slot))
        elif isinstance(t, ScalarType) and t.value is not None:
            self.vars[pname] = t.value
        else:
            self.vars[pname] = GraphValue(t, ("local", slot))

    # --- Cell.to_float (MindSpore's mixed precision): casts where the Cell starts
    def mixed_cast_arg(self, pname, v):
        """An argument of a to_float Cell: a float tensor is cast to its dtype once, into its own slot."""
        if isinstance(v, tuple):
            return tuple(self.mixed_cast_arg(f"{pname}[{j}]", x) for j, x in enumerate(v))
        if not self.needs_mixed_cast(v):
            return v
        slot = v.node[1]
        cast = trace_op("CAST", (v,), (self.mixed,))
        self.materialize(cast, self.loc)
        self.emit("STORE_TENSOR", slot)
        return GraphValue(self.env.norm_type(cast.type), ("local", slot))

    def needs_mixed_cast(self, v) -> bool:
        return (self.mixed is not None and isinstance(v, GraphValue) and isinstance(v.type, TensorType)
                and v.type.dtype.kind == "f" and v.type.dtype != self.mixed)

    def record_hover_args(self, fn, params):
        args = fn.args.args[1:] if self.self_obj is not None else fn.args.args
        for a in args:
            v = self.vars.get(a.arg)
            self.hover.append((self.node_loc(a), a.arg, v))

    # --- emission
    def emit(self, opname, *args, loc=None):
        return self.cb.emit(opname, *args, loc=loc or self.loc)

    def materialize(self, v: GraphValue, loc: Loc):
        if v.tmp is not None:
            self.emit("LOAD_TENSOR", v.tmp, loc=loc)
            return
        node = v.node
        kind = node[0]
        if kind == "local":
            self.emit("LOAD_TENSOR", node[1], loc=loc)
        elif kind == "param":
            self.emit("LOAD_PARAM", self.cb.name(node[1]), loc=loc)
        elif kind == "const":
            self.emit("LOAD_CONST", self.cb.const(node[1]), loc=loc)
        elif kind == "sym":
            self.emit("LOAD_SYM", self.cb.const(node[1]), loc=loc)
        elif kind == "op":
            _, opname, ins, operands = node
            for g in ins:
                self.materialize(g, v.loc or loc)
            from ..bytecode.opcodes import BY_NAME

            op = BY_NAME[opname]
            raw = []
            for (_oname, okind), val in zip(op.operands, operands):
                raw.append(val if okind == "count" else self.cb.name(val) if okind == "name" else self.cb.const(val))
            self.emit(opname, *raw, loc=v.loc or loc)
            if self.env.data:                       # (issue 21) data-dependent dims become symbols here
                known = set().union(*(_type_symbols(g.type) for g in ins)) if ins else set()
                dims = _data_dims(v.type, self.env.data - known)
                if dims:
                    self.emit("BIND_DIMS", self.cb.const(dims), loc=v.loc or loc)
        elif kind == "call":
            _, idx, ins = node
            for g in ins:
                self.materialize(g, v.loc or loc)
            self.emit("CALL_CELL", idx, len(ins), loc=v.loc or loc)
        else:  # pragma: no cover
            raise AssertionError(kind)
        if v.uses > 1 and kind in ("op", "call"):
            slot = self.cb.local(f"%t{len(self.cb.code.varnames)}")
            self.emit("STORE_TENSOR", slot, loc=v.loc or loc)
            self.emit("LOAD_TENSOR", slot, loc=v.loc or loc)
            v.tmp = slot

    def emit_effect(self, v: GraphValue) -> GraphValue:
        """Emit an instruction with an effect now (graph.trace_effect); later uses read its slot.
        Reads of the Parameter it writes that were made before it but are not emitted yet
        (``return self.p * 2, ops.assign(self.p, v)``) are pinned to the old value first."""
        if v.node[0] == "op" and v.node[1] == "ASSIGN_PARAM":
            depth = len(self.branch_preds)
            pending = [(g, d) for g, d in self.param_reads.pop(v.node[3][0], []) if g.tmp is None]
            if any(d < depth for _, d in pending):
                # (a read made outside the branch, pinned inside it, would be unset on the other path)
                raise self.error(f"self.{v.node[3][0]} is read before a helper updates it under a shape "
                                 "condition, in one expression; store the read in a name first")
            for g, _ in pending:
                if g.tmp is None:
                    g.tmp = self.cb.local(f"%p{len(self.cb.code.varnames)}")
                    self.emit("LOAD_PARAM", self.cb.name(g.node[1]))
                    self.emit("STORE_TENSOR", g.tmp)
        slot = self.cb.local(f"%e{len(self.cb.code.varnames)}")
        self.materialize(v, self.loc)
        self.emit("STORE_TENSOR", slot)
        return GraphValue(self.env.norm_type(v.type), ("local", slot))

    def param_object(self, attr):
        """The Parameter behind ``self.<attr>`` (None for a plain tensor attribute)."""
        v = self.self_obj
        for part in attr.split(".") if v is not None else ():     # (a ParameterTuple's item: attr.<index>)
            v = v[int(part)] if part.isdigit() and isinstance(v, tuple) else cell_getattr(v, part)
        return v if isinstance(v, Parameter) else None

    def push(self, value, loc=None):
        """Push any run-time-representable value (graph value, scalar, symbolic, tuple)."""
        loc = loc or self.loc
        if isinstance(value, tuple):
            for x in value:
                self.push(x, loc)
            self.emit("BUILD_TUPLE", len(value), loc=loc)
            return
        try:
            g = lift(value, self)
        except ShapeError as e:
            raise self.error(str(e)) from None
        self.materialize(g, loc)

    def store(self, name: str, value, node=None):
        """Bind a name; run-time values go to the name's local slot."""
        if isinstance(value, GraphValue):
            if isinstance(value.type, TupleType):
                value = self.unpack_graph_tuple(value, name)
                self.vars[name] = value
                return
            slot = self.cb.local(self.scope + name)
            if not (value.node[0] == "local" and value.node[1] == slot and value.tmp is None):
                self.materialize(value, self.loc)
                self.emit("STORE_TENSOR", slot)
            self.vars[name] = GraphValue(self.env.norm_type(value.type), ("local", slot))
        elif isinstance(value, tuple) and _has_graph(value):
            self.vars[name] = self.pin_tuple(value, name)
        elif isinstance(value, pytypes.MappingProxyType) and _has_graph(tuple(value.values())):
            self.vars[name] = self.pin_mapping(value, name)
        else:
            self.vars[name] = value
        if node is not None:
            self.hover.append((self.node_loc(node), name, self.vars[name]))

    def pin_tuple(self, value: tuple, hint: str) -> tuple:
        """Store the graph values inside a Python tuple in hidden slots, so later
        reassignments of the names they were computed from cannot change them."""
        out, stores = [], []
        for k, v in enumerate(value):
            if isinstance(v, tuple):
                out.append(self.pin_tuple(v, f"{hint}.{k}"))
            elif isinstance(v, pytypes.MappingProxyType):
                out.append(self.pin_mapping(v, f"{hint}.{k}"))
            elif isinstance(v, GraphValue):
                slot = self.cb.local(f"{self.scope}{hint}.{k}")
                if not (v.node[0] == "local" and v.node[1] == slot and v.tmp is None):
                    self.materialize(v, self.loc)       # every item is loaded before any is stored:
                    stores.append(slot)                 # (outs.insert(0, y): item 1 is outs.0's old value)
                out.append(GraphValue(self.env.norm_type(v.type), ("local", slot)))
            else:
                out.append(v)
        for slot in reversed(stores):
            self.emit("STORE_TENSOR", slot)
        return ListValue(out) if isinstance(value, ListValue) else tuple(out)

    def pin_mapping(self, value, hint: str):
        """A dict literal's graph values pinned as a tuple's are (``pin_tuple``): a dict holding x keeps
        the x it was made with after x is reassigned."""
        return pytypes.MappingProxyType(dict(zip(value.keys(), self.pin_tuple(tuple(value.values()), hint))))

    def unpack_graph_tuple(self, value: GraphValue, hint: str) -> tuple:
        n = len(value.type.items)
        self.materialize(value, self.loc)
        self.emit("UNPACK_TUPLE", n)
        out = []
        for k in range(n):
            slot = self.cb.local(f"{self.scope}{hint}.{k}")
            self.emit("STORE_TENSOR", slot)
            t = self.env.norm_type(value.type.items[k])
            # an int or bool whose value the types know (a sub-Cell's returned H, W: pvt's patch embeddings)
            # is that expression, as x.shape[i] is: it takes part in shapes and shape predicates
            known = isinstance(t, ScalarType) and isinstance(t.value, (Expr, Pred))
            out.append(t.value if known else GraphValue(t, ("local", slot)))
        return tuple(out)

    def emit_return(self, value):
        if not self.inline_depth:
            self.push(value)
            self.emit("RETURN")
        raise _Returned(value)

    # --- statements
    def block(self, stmts):
        stmts = list(stmts)
        for k, st in enumerate(stmts):
            if isinstance(st, ast.If) and k + 1 < len(stmts) and _returns(st.body) and not _returns(st.orelse):
                # ``if c: return a`` then more statements: those are the if's else (as Python runs them), so an
                # inlined helper that returns early under a shape condition (mindocr's ``_resize_nn``) returns
                # on both sides of it
                self.stmt(ast.copy_location(ast.If(test=st.test, body=st.body, orelse=list(st.orelse) + stmts[k + 1:]),
                                            st))
                return
            self.stmt(st)

    def stmt(self, node):
        prev = self.loc
        self.loc = self.node_loc(node)
        try:
            method = getattr(self, "stmt_" + type(node).__name__, None)
            if method is None:
                raise self.error(f"{_describe(node)} is not supported in construct", node)
            try:
                method(node)
            except FrontendError:          # (a nested statement's, already located)
                raise
            except (ShapeError, SymbolicError) as e:
                raise self.shape_error(e) from None
            except (TypeError, ValueError, NotImplementedError, IndexError, KeyError) as e:
                err = self.error(f"{type(e).__name__}: {e}")
                kind = ArgumentError if isinstance(e, TypeError) else FrontendValueError \
                    if isinstance(e, ValueError) else None         # (keeps the op's TypeError / ValueError)
                if kind is not None:
                    err = kind(err.message, err.filename, err.line, err.col, err.end_line, err.end_col)
                err.needs_known_dims = isinstance(e, UnknownDim) or getattr(e, "needs_known_dims", False)
                #                                 (the executor retries with exact shapes; kept through inlined helpers)
                raise err from None
        finally:
            self.loc = prev

    def stmt_Expr(self, node):
        if isinstance(node.value, ast.Constant):   # docstring
            return
        self.expr(node.value)      # nothing to keep: a call with an effect (PRINT, ASSIGN_PARAM) emitted itself

    def stmt_Pass(self, node):
        pass

    def stmt_Raise(self, node):
        """``raise ValueError(f"... {H} ...")``: a RAISE instruction; under a shape predicate or a
        flag it is a run-time check, the message's symbolic values filled in when it fires."""
        exc = node.exc
        if exc is None:
            raise self.error("a bare `raise` is not supported in construct", node)
        func, args = (exc.func, exc.args) if isinstance(exc, ast.Call) else (exc, [])
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
        if name not in RAISABLE:
            raise self.error(f"construct may raise the built-in exceptions {', '.join(sorted(RAISABLE))}; "
                             f"not {ast.unparse(func)}", node)
        parts = self.message_parts(args[0]) if args else ()
        self.keep_symbolic(*self.branch_preds)
        self.emit("RAISE", self.cb.const(name), self.cb.const(tuple(parts)))
        raise _AllReturned()

    def keep_symbolic(self, *preds):
        """The dims a raise is guarded by stay symbols: a later use that needs them equal to a
        constant becomes an entry check (which the raise precedes, interp.BoundCode.raise_first)
        instead of a substitution that would fold the guard away."""
        for p in preds:
            self.env.unifiable -= p.symbols()

    def stmt_Assert(self, node):
        test = self.expr(node.test)
        if not isinstance(test, Pred):
            if isinstance(test, GraphValue):
                raise self.error("assert on a tensor's values is not supported; assert on shapes or flags", node.test)
            if _truth(test):
                return
            raise self.error("assertion is false at compile time", node)
        if test.const_value() is True:
            return
        parts = self.message_parts(node.msg) if node.msg is not None else ("assertion failed: " + ast.unparse(node.test),)
        self.loc = self.node_loc(node.test)
        self.keep_symbolic(test, *self.branch_preds)
        l_ok = self.cb.new_label()
        self.emit("BRANCH_IF_SYMBOLIC", self.cb.const(S.pnot(test)), l_ok)
        self.emit("RAISE", self.cb.const("AssertionError"), self.cb.const(tuple(parts)))
        self.cb.place(l_ok)

    def check(self, pred, exc: str, parts: tuple):
        """A run-time check an op makes where it is traced (issue 21): raise ``exc`` with the message
        ``parts`` (strings and symbolic dims) unless ``pred`` holds when it runs."""
        if pred.const_value() is True:
            return
        self.keep_symbolic(pred)
        l_ok = self.cb.new_label()
        self.emit("BRANCH_IF_SYMBOLIC", self.cb.const(S.pnot(pred)), l_ok)
        self.emit("RAISE", self.cb.const(exc), self.cb.const(tuple(parts)))
        self.cb.place(l_ok)

    def message_parts(self, node) -> list:
        """A message as strings and symbolic dims (joined when RAISE fires)."""
        out = []

        def put(v):
            if isinstance(v, GraphValue) and isinstance(v.type, ScalarType) and isinstance(v.type.value, Expr):
                v = v.type.value
            if isinstance(v, Expr):
                out.append(v if v.const_value() is None else str(v.const_value()))
            elif isinstance(v, tuple):
                out.append("(")
                for k, x in enumerate(v):
                    if k:
                        out.append(", ")
                    put(x)
                out.append(",)" if len(v) == 1 else ")")
            elif isinstance(v, GraphValue):
                out.append(f"<{v.type}>")
            else:
                out.append(str(v))

        if isinstance(node, ast.JoinedStr):
            for piece in node.values:
                if isinstance(piece, ast.Constant):
                    out.append(str(piece.value))
                else:
                    put(self.expr(piece.value))
        else:
            put(self.expr(node))
        return [p for p in out if p != ""]

    def stmt_Return(self, node):
        value = self.expr(node.value) if node.value is not None else None
        self.loc = self.node_loc(node)
        self.emit_return(value)

    def stmt_Assign(self, node):
        value = self.expr(node.value)
        for target in node.targets:
            self.assign(target, value)

    def stmt_AnnAssign(self, node):
        if node.value is None:
            return
        self.assign(node.target, self.expr(node.value))

    def stmt_AugAssign(self, node):
        target = node.target
        if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
            # x[index] op= v: x[index] = x[index] op v (rexnet's x[:, 0:c] += shortcut)
            base = self.expr(target.value)
            if isinstance(base, GraphValue) and isinstance(base.type, TensorType):
                self.loc = self.node_loc(target)
                cur = self.tensor_index(base, target.slice, target)
                value = self.binop(type(node.op), cur, self.expr(node.value), node)
                self.loc = self.node_loc(target)
                self.store(target.value.id, self.slice_assign(base, target.slice, value, target), target.value)
                return
            if isinstance(base, (tuple, list)) or _is_graph_tuple(base):    # feats[i] += v on a list's item
                value = self.binop(type(node.op), self.expr(target), self.expr(node.value), node)
                self.assign(target, value)
                return
        if not isinstance(target, ast.Name):
            raise self.error("augmented assignment works on plain names, tensor items (x[index] += v) and list "
                             "items only", node)
        cur = self.name_value(target)
        value = self.binop(type(node.op), cur, self.expr(node.value), node)
        self.assign(target, value)

    def assign(self, target, value):
        if isinstance(target, ast.Name):
            self.store(target.id, value, target)
        elif isinstance(target, (ast.Tuple, ast.List)):
            if isinstance(value, GraphValue) and isinstance(value.type, TupleType):
                value = self.unpack_graph_tuple(value, "%u")
            if isinstance(value, GraphValue):
                raise self.error("cannot unpack a tensor; index it or use ops.split", target)
            items = list(value)
            if len(items) != len(target.elts):
                raise self.error(f"cannot unpack {len(items)} values into {len(target.elts)} names", target)
            for t, v in zip(target.elts, items):
                self.assign(t, v)
        elif isinstance(target, ast.Attribute):
            raise self.error("assigning to attributes inside construct is not supported (Cells are stateless "
                             "while they run)", target)
        elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) and \
                (isinstance(self.expr(target.value), (tuple, list)) or _is_graph_tuple(self.expr(target.value))):
            # (a list: a construct's own, or one passed in, which arrives as a tuple: mindocr's DBFPN assigns
            # ``features[i]`` of the backbone's list; a list argument of construct itself, a run-time tuple)
            base = self.expr(target.value)
            if _is_graph_tuple(base):
                base = self.unpack_graph_tuple(base, target.value.id)
            self.store(target.value.id, self.list_item_assign(base, target.slice, value, target), target.value)
        elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
            base = self.expr(target.value)
            if not (isinstance(base, GraphValue) and isinstance(base.type, TensorType)):
                raise self.error("assigning to an item in construct: x must be a tensor (x[mask] = value, x[index] = "
                                 "value)", target)
            index = self.expr(target.slice) if not isinstance(target.slice, (ast.Slice, ast.Tuple)) else None
            self.loc = self.node_loc(target)
            if isinstance(index, GraphValue) and isinstance(index.type, TensorType) and index.type.dtype == dt.bool_:
                self.store(target.value.id, self.mask_assign(base, index, value, target), target.value)
            else:
                self.store(target.value.id, self.slice_assign(base, target.slice, value, target), target.value)
        else:
            raise self.error(f"cannot assign to {_describe(target)}", target)

    def list_item_assign(self, items: tuple, sl, value, node) -> ListValue:
        """``feats[i] = v`` (or ``feats[a:b] = vs``) on a list in construct (an FPN's levels, mindocr's DBFPN):
        the name bound to a new list with that item replaced, by an index known while compiling (a loop over
        a symbolic range compiles exact shapes first), as Python replaces it."""
        if isinstance(sl, ast.Slice):
            parts = [None if p is None else _index_int(self.expr(p)) for p in (sl.lower, sl.upper, sl.step)]
            index = slice(*parts)
        else:
            index = _index_int(self.expr(sl))
        if isinstance(index, Expr) or (isinstance(index, slice) and any(isinstance(p, Expr) for p in
                                                                          (index.start, index.stop, index.step))):
            raise UnknownDim("a list's item assigned at a symbolic index: the caller compiles for exact shapes")
        if not isinstance(index, (int, slice)):
            raise self.error(f"a list's item is assigned by an int or a slice, got {type(index).__name__}", node)
        out = list(items)
        try:
            out[index] = list(value) if isinstance(index, slice) else value
        except (IndexError, TypeError, ValueError) as e:
            raise self.error(f"list item assignment: {e}", node) from None
        return ListValue(out)

    def stmt_If(self, node):
        test = self.condition(node.test, "branching")
        if isinstance(test, bool):
            self.block(node.body if test else node.orelse)
            return
        self.symbolic_if(test, node)

    def condition(self, node, what: str):
        """An if's or a while's test: a bool where it is known while compiling, else the shape predicate
        (a Pred) it depends on; a test on a tensor's values is an error."""
        test = self.expr(node)
        if isinstance(test, GraphValue):
            if isinstance(test.type, ScalarType) and test.type.kind == "b" and test.type.value is not None:
                test = test.type.value
            else:
                raise self.error(f"{what} on a tensor's values is not supported; test shapes "
                                 "(x.shape[0] > 32) or bool arguments", node)
        if not isinstance(test, Pred):
            test = _truth(test)
        if isinstance(test, bool):
            return test
        c = test.const_value()
        return test if c is None else bool(c)

    def symbolic_if(self, pred: Pred, node):
        self.loc = self.node_loc(node.test)
        l_else, l_end, l_fix = self.cb.new_label(), self.cb.new_label(), self.cb.new_label()
        self.emit("BRANCH_IF_SYMBOLIC", self.cb.const(pred), l_else)
        before = dict(self.vars)
        self.branch_preds.append(pred)
        try:
            then_vars, then_ret = self.sub_block(node.body)
        finally:
            self.branch_preds.pop()
        if then_ret is not True:       # (an inlined helper's return too: its value is merged at the end)
            self.emit("JUMP", l_fix, loc=self.node_loc(node.test))
        self.cb.place(l_else)
        self.vars = dict(before)
        self.else_depth += 1          # (a break or continue in the else side is under the condition too: jump)
        try:
            else_vars, else_ret = self.sub_block(node.orelse)
        finally:
            self.else_depth -= 1
        returned = (then_ret == _INLINE_RETURN) + (else_ret == _INLINE_RETURN)
        if returned == 1:          # (a return in a loop's body whose other side runs on after the loop: with the
            #                        call's exact shapes and flags the condition is known, and the helper unrolls)
            raise UnknownDim(f"an inlined helper returns on one side of the condition at line "
                             f"{self.node_loc(node).line} only: the caller compiles for exact shapes and flags")
        if returned:            # (an inlined helper returns on both sides: its value is the merge's)
            then_ret = else_ret = False
            shape = _return_shape(then_vars[_RETURN_VALUE], else_vars[_RETURN_VALUE])
            if shape is None:
                raise self.error("an inlined helper returns values of different kinds or lengths on the two sides of "
                                 "a shape condition", node)
            then_vars, else_vars = _spread_return(then_vars), _spread_return(else_vars)
        if then_ret and else_ret:
            self.cb.place(l_fix)
            raise _AllReturned()
        if then_ret:
            self.vars = else_vars
            self.cb.place(l_fix)
            return
        if else_ret:
            self.cb.place(l_fix)
            self.vars = then_vars
            return
        merged, fix_then, fix_else = self.merge(pred, then_vars, else_vars, node)
        for name, value in fix_else:
            self.vars = else_vars
            self.store(name, value)
        if fix_then:
            self.emit("JUMP", l_end)
            self.cb.place(l_fix)
            for name, value in fix_then:
                self.vars = then_vars
                self.store(name, value)
        else:
            self.cb.place(l_fix)
        self.cb.place(l_end)
        self.vars = merged
        if returned:
            value = _gather_return(merged, shape)
            if any(isinstance(v, _Conflict) for v in _leaves(value)):
                raise self.error("an inlined helper returns values of different kinds on the two sides of a shape "
                                 "condition", node)
            raise _Returned(value)

    def sub_block(self, stmts):
        """(the branch's names, whether it returned: True, or _INLINE_RETURN where an inlined helper
        returned, its value under the name _RETURN_VALUE for the merge)."""
        try:
            self.block(stmts)
        except _AllReturned:
            return self.vars, True
        except _Returned as r:
            if self.inline_depth:
                self.vars = dict(self.vars)
                self.vars[_RETURN_VALUE] = r.args[0] if r.args else None
                return self.vars, _INLINE_RETURN
            return self.vars, True
        return self.vars, False

    def merge(self, pred, a: dict, b: dict, node):
        merged, fix_a, fix_b = {}, [], []
        for name in set(a) | set(b):
            if name not in a or name not in b:
                continue
            va, vb = a[name], b[name]
            if va is vb:
                merged[name] = va
                continue
            ga, gb = isinstance(va, GraphValue), isinstance(vb, GraphValue)
            if ga and gb:
                slot = self.cb.local(self.scope + name)
                for v, fix in ((va, fix_a), (vb, fix_b)):    # (a value not in the name's slot yet: an inlined
                    if not (v.node == ("local", slot) and v.tmp is None):   # helper's argument) goes there
                        fix.append((name, v))
                merged[name] = GraphValue(self.merge_types(pred, va.type, vb.type, name, node), ("local", slot))
            elif _is_int(va) and _is_int(vb):
                merged[name] = S.select(pred, Expr.of(int(va) if not isinstance(va, Expr) else va),
                                        Expr.of(int(vb) if not isinstance(vb, Expr) else vb))
            elif _is_pred(va) and _is_pred(vb):
                pa, pb = _as_pred(va), _as_pred(vb)
                merged[name] = S.por(S.pand(pred, pa), S.pand(S.pnot(pred), pb))
            elif not ga and not gb and type(va) is type(vb) and _same_const(va, vb):
                merged[name] = va
            elif ga or gb or (isinstance(va, (int, float)) and isinstance(vb, (int, float))):
                if not ga:
                    fix_a.append((name, va))
                if not gb:
                    fix_b.append((name, vb))
                ta = va.type if ga else lift(va, self).type
                tb = vb.type if gb else lift(vb, self).type
                merged[name] = GraphValue(self.merge_types(pred, ta, tb, name, node),
                                          ("local", self.cb.local(self.scope + name)))
            else:
                merged[name] = _Conflict(name, node.lineno + self.src.line_offset)
        return merged, fix_a, fix_b

    def merge_types(self, pred, ta, tb, name, node):
        ta, tb = self.env.norm_type(ta), self.env.norm_type(tb)
        if ta == tb:
            return ta
        if isinstance(ta, TensorType) and isinstance(tb, TensorType) and ta.rank == tb.rank and ta.dtype is tb.dtype:
            return TensorType(tuple(S.select(pred, x, y) for x, y in zip(ta.shape, tb.shape)), ta.dtype)
        if isinstance(ta, ScalarType) and isinstance(tb, ScalarType) and ta.kind == tb.kind:
            return ScalarType(ta.kind)
        raise self.error(f"'{name}' is {ta} in one branch and {tb} in the other; both branches must "
                         "give it the same rank and dtype", node)

    def stmt_For(self, node):
        it = node.iter
        if (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range"
                and self.lookup_global("range") is builtins.range):
            args = [self.expr(a) for a in it.args]
            if it.keywords:
                raise self.error("range() takes no keywords", it)
            if all(_is_int(a) and not isinstance(a, Expr) for a in args):
                return self.unrolled(node, list(range(*[int(a) for a in args])))
            if all(_is_int(a) for a in args):
                return self.symbolic_loop(node, args)
            raise self.error("range() bounds must be ints or shape expressions", it)
        self.unrolled(node, self.items_of(it))

    def items_of(self, it) -> list:
        """The values a comprehension's ``for`` (or a for loop not over ``range``) runs over, all known while
        compiling: a range of ints, a tuple or list, a tensor's rows."""
        seq = self.expr(it)
        if isinstance(seq, GraphValue):
            return list(self.rows(seq, it))
        try:
            return list(seq)
        except TypeError:
            raise self.error(f"cannot iterate over {type(seq).__name__}", it) from None

    def comprehension(self, generators, make) -> list:
        """The values ``make()`` gives for each pass of a comprehension's ``for`` clauses (unrolled, in order,
        each ``if`` clause known while compiling), as Python computes them; its loop names are its own (a
        scope of their own: slots apart from the enclosing names, which are as they were afterwards)."""
        self.inlines += 1
        saved_scope, saved = self.scope, {}
        self.scope = f"{self.scope}<comp{self.inlines}>."
        out: list = []

        def run(k):
            if k == len(generators):       # (each value pinned: the loop names' slots are written again next pass)
                out.append(self.pin_tuple((make(),), f"%made{len(out)}")[0])
                return
            gen = generators[k]
            if getattr(gen, "is_async", 0):
                raise self.error("an async comprehension is not supported in construct", gen)
            items = self.items_of(gen.iter)
            if len(items) > self.MAX_UNROLL:
                raise self.error(f"a comprehension over {len(items)} items is too long to unroll (limit "
                                 f"{self.MAX_UNROLL})", gen.iter)
            for name in _target_names(gen.target):
                if name not in saved:
                    saved[name] = self.vars.get(name, _UNBOUND)
            for v in items:
                self.count_pass(gen)
                self.assign(gen.target, v)
                keep = True
                for cond in gen.ifs:
                    c = self.condition(cond, "a comprehension's if")
                    if not isinstance(c, bool):
                        raise UnknownDim(f"a comprehension's condition ({ast.unparse(cond)}) tests symbolic dims: the "
                                         "caller compiles for exact shapes")
                    if not c:
                        keep = False
                        break
                if keep:
                    run(k + 1)
        try:
            run(0)
        finally:
            self.scope = saved_scope
            for name, v in saved.items():
                if v is _UNBOUND:
                    self.vars.pop(name, None)
                else:
                    self.vars[name] = v
        return out

    def expr_ListComp(self, node):
        return ListValue(self.comprehension(node.generators, lambda: self.expr(node.elt)))

    def expr_GeneratorExp(self, node):
        # (a generator is consumed where it is made: ``tuple(f(x) for x in xs)``, ``sum(...)``, ``max(...)``)
        return tuple(self.comprehension(node.generators, lambda: self.expr(node.elt)))

    def expr_DictComp(self, node):
        out = {}
        for k, v in self.comprehension(node.generators, lambda: (self.expr(node.key), self.expr(node.value))):
            if isinstance(k, (GraphValue, Expr, Pred)) or not isinstance(k, (str, int, bool, tuple)):
                raise self.error("a dict comprehension in construct needs keys known while compiling (strings, ints)",
                                 node.key)
            out[k] = v
        return out

    def exact(self) -> bool:
        """Whether this compile is for exact shapes (executor.exact_specs): no tensor argument has a symbolic
        dim and no int argument is a symbol."""
        def fixed(spec):
            if spec.kind == "tuple":
                return all(fixed(s) for s in spec.value)
            if spec.kind == "tensor":
                return all(self.env.norm(d).is_const() for d in spec.type.shape)
            return not (spec.kind == "scalar" and spec.type.kind == "i")
        return all(fixed(s) for s in self.specs)

    def rows(self, v: GraphValue, node) -> tuple:
        """A tensor iterated over (``for s in strides``, ``enumerate(t)``, ``zip(a, t)``): its rows along dim 0
        (x[0], x[1], ...), as MindSpore's graph mode unrolls them; a dim 0 known only when the Cell runs makes
        the caller compile for exact shapes (where it is an int)."""
        if not isinstance(v.type, TensorType):
            raise self.error(f"cannot iterate over {v.type}", node)
        if v.type.rank == 0:
            raise self.error("iterating over a 0-d tensor", node)
        n = self.env.norm(v.type.shape[0])
        if not n.is_const():
            raise UnknownDim(f"iterating over a tensor of {n} rows: the loop needs its count known (the caller "
                             "compiles for exact shapes)")
        return tuple(trace_op("SLICE", (v,), ((("i", k),),)) for k in range(n.const_value()))

    def unrolled(self, node, items):
        """A for loop over values known while compiling: its body once per item, in order (``break`` and
        ``continue`` under conditions known while compiling end the unrolling or the item; the else
        clause runs where no break did)."""
        if len(items) > self.MAX_UNROLL:
            raise self.error(f"loop of {len(items)} iterations is too long to unroll (limit {self.MAX_UNROLL})", node)
        with self.loop(True):
            for v in items:
                self.count_pass(node)
                self.assign(node.target, v)
                if not self.iteration(node.body):
                    return
        self.block(node.orelse)

    def count_pass(self, node) -> None:
        """One more pass of an unrolled loop's body: nested loops multiply, so all of a compile's passes
        together are held to MAX_PASSES (4096 x 4096 would compile for minutes)."""
        self.passes += 1
        if self.passes > self.MAX_PASSES:
            raise self.error(f"the loops unroll more than {self.MAX_PASSES} passes of their bodies in all while "
                             "compiling; use a loop over a symbolic range, or fewer nested passes", node)

    @contextlib.contextmanager
    def loop(self, unrolled: bool):
        self.loops.append((unrolled, len(self.branch_preds) + self.else_depth))
        try:
            yield
        finally:
            self.loops.pop()

    def iteration(self, body) -> bool:
        """One pass of an unrolled loop's body; False where it ended in a ``break``."""
        try:
            self.block(body)
        except _Continue:
            pass
        except _Break:
            return False
        return True

    def stmt_While(self, node):
        """A while loop whose test is known while compiling at each pass (the counters and the lists of
        edgenext's ``while begin + width < C``): unrolled, as a for loop over constants is. A test on
        symbolic dims needs the loop's count: the caller compiles for the call's exact shapes."""
        passes = 0
        with self.loop(True):
            while True:
                go = self.condition(node.test, "a while loop")
                if not isinstance(go, bool):
                    raise UnknownDim(f"the while loop at line {self.node_loc(node).line} tests symbolic dims or flags "
                                     f"({ast.unparse(node.test)}): the loop needs its count known (the caller "
                                     "compiles for exact shapes and flags)")
                if not go:
                    break
                passes += 1
                if passes > self.MAX_UNROLL:
                    raise self.error(f"while loop still running after {self.MAX_UNROLL} passes while compiling "
                                     "(it is unrolled: its test must become false)", node)
                self.count_pass(node)
                if not self.iteration(node.body):
                    return
        self.block(node.orelse)

    def stmt_Break(self, node):
        self.jump(node, _Break)

    def stmt_Continue(self, node):
        self.jump(node, _Continue)

    def jump(self, node, kind) -> None:
        """break / continue: of an unrolled loop, under conditions known while compiling, it ends the loop or
        the pass; under a shape condition, or in a loop over a symbolic range, the loop needs its count and
        the conditions known (the caller compiles for exact shapes)."""
        word = "break" if kind is _Break else "continue"
        if not self.loops:
            raise self.error(f"'{word}' outside a loop", node)
        unrolled, depth = self.loops[-1]
        if not unrolled or len(self.branch_preds) + self.else_depth > depth:
            where = "in a loop over a symbolic range" if not unrolled else "under a condition on shapes or flags"
            raise UnknownDim(f"'{word}' at line {self.node_loc(node).line} {where}: the loop needs its count known "
                             "(the caller compiles for exact shapes and flags)")
        raise kind()

    def symbolic_loop(self, node, args):
        if not isinstance(node.target, ast.Name):
            raise self.error("a symbolic range loop needs a plain loop variable", node.target)
        start, stop, step = (Expr.of(0), args[0], Expr.of(1)) if len(args) == 1 else \
            (args[0], args[1], Expr.of(1)) if len(args) == 2 else tuple(args)
        if not Expr.of(step).is_const() or Expr.of(step).const_value() <= 0:
            raise self.error("a symbolic range loop needs a positive constant step", node)
        self.loop_syms += 1
        sname = f"{node.target.id}#{self.loop_syms}"
        i = S.sym(sname)
        self.emit("SET_SYM", self.cb.name(sname), self.cb.const(Expr.of(start)))
        # every run-time name assigned in the body lives in its slot across iterations
        entry = dict(self.vars)
        top, end = self.cb.new_label(), self.cb.new_label()
        self.cb.place(top)
        self.emit("BRANCH_IF_SYMBOLIC", self.cb.const(S.compare("<", i, Expr.of(stop))), end)
        self.vars[node.target.id] = i
        with self.loop(False):
            self.block(node.body)
        for name, v in list(self.vars.items()):
            if name == node.target.id or name not in entry or entry[name] is v:
                continue
            old = entry[name]
            if isinstance(old, GraphValue) and isinstance(v, GraphValue):
                if self.env.norm_type(old.type) != self.env.norm_type(v.type):
                    self.narrow_loop_type(name, old.type, v.type)
                if self.env.norm_type(old.type) != self.env.norm_type(v.type):
                    raise self.error(f"'{name}' changes from {old.type} to {v.type} inside a loop over a symbolic "
                                     "range; its shape must stay the same each iteration", node)
            elif isinstance(old, ListValue) and isinstance(v, ListValue):     # a list grows in the loop
                raise UnknownDim(f"'{name}' grows inside a loop over a symbolic range: the loop needs its "
                                 "count known (the caller compiles for exact shapes)")
            elif not (_same_const(old, v) if type(old) is type(v) else False):
                raise self.error(f"'{name}' is reassigned inside a loop over a symbolic range with a value "
                                 "known only at compile time; use a tensor or a constant range", node)
        self.loc = self.node_loc(node)
        self.emit("SET_SYM", self.cb.name(sname), self.cb.const(i + step))
        self.emit("JUMP", top)
        self.cb.place(end)
        self.vars = {k: v for k, v in self.vars.items() if k != node.target.id}
        self.block(node.orelse)         # (no break reaches here: one makes the caller compile exact shapes)

    def narrow_loop_type(self, name, old, new):
        """A loop-carried tensor whose dim that may be 1 (a set_inputs None dim) broadcasts in the body
        (``x = x + b``): its shape is the same each iteration only if that dim already is the
        broadcast's, so the dim is unified with it (the entry then checks it)."""
        if not (isinstance(old, TensorType) and isinstance(new, TensorType) and old.rank == new.rank):
            return
        for a, b in zip(self.env.norm_type(old).shape, self.env.norm_type(new).shape):
            if a != b and a.as_symbol() in self.env.unifiable and self.env.not_one(b):
                try:
                    self.env.require_eq(a, b, f"'{name}' keeps its shape across iterations of a loop")
                except ShapeError:
                    pass

    # --- expressions
    def expr(self, node):
        prev = self.loc
        self.loc = self.node_loc(node)
        try:
            method = getattr(self, "expr_" + type(node).__name__, None)
            if method is None:
                raise self.error(f"{_describe(node)} is not supported in construct", node)
            return method(node)
        except (ShapeError, SymbolicError) as e:
            raise self.shape_error(e) from None
        finally:
            self.loc = prev

    def expr_Constant(self, node):
        return node.value

    def expr_Name(self, node):
        return self.name_value(node)

    def name_value(self, node):
        name = node.id
        if name in self.vars:
            v = self.vars[name]
            if isinstance(v, _Conflict):
                raise self.error(f"'{name}' holds different Python objects after the if at line {v.line}", node)
            return v
        try:
            return self.lookup_global(name)
        except KeyError:
            raise self.error(f"name '{name}' is not defined", node) from None

    def lookup_global(self, name):
        if name in self.src.closure:
            return self.src.closure[name]
        if name in self.src.globals:
            return self.src.globals[name]
        if name in _SAFE_BUILTINS and hasattr(builtins, name):
            return getattr(builtins, name)
        raise KeyError(name)

    def expr_Tuple(self, node):
        return tuple(self.expr(e) for e in node.elts)

    def expr_List(self, node):
        return ListValue(self.expr(e) for e in node.elts)

    def expr_Dict(self, node):
        """A dict literal with constant keys: a read-only mapping of compile-time values, as a tuple is
        (mindcv's mobilevit passes shapes and flags between its helpers in one)."""
        out = {}
        for k, v in zip(node.keys, node.values):
            key = self.expr(k) if k is not None else None
            if k is None or isinstance(key, (GraphValue, Expr, Pred)) or not isinstance(key, (str, int, bool, tuple)):
                raise self.error("a dict literal in construct needs constant keys (strings, ints), no ** unpacking",
                                 k if k is not None else v)
            out[key] = self.expr(v)
        return pytypes.MappingProxyType(out)

    def list_method(self, node) -> bool:
        """``name.append(v)`` / ``name.extend(vs)`` / ``name.insert(i, v)`` on a list literal's value:
        the name is bound to the longer list (a compile-time sequence; a list is a tuple here, so
        aliases of the old list keep its items). True when handled."""
        f = node.func
        if not (isinstance(f, ast.Attribute) and f.attr in _LIST_GROW and isinstance(f.value, ast.Name)
                and isinstance(self.vars.get(self.scope + f.value.id, self.vars.get(f.value.id)), ListValue)):
            return False
        if node.keywords or any(isinstance(a, ast.Starred) for a in node.args) or \
                len(node.args) != (2 if f.attr == "insert" else 1):
            raise self.error(f"list.{f.attr}: pass {'an index and a value' if f.attr == 'insert' else 'one value'}",
                             node)
        name = f.value.id if f.value.id in self.vars else self.scope + f.value.id
        old = self.vars[name]
        if f.attr == "insert":
            at = self.expr(node.args[0])
            if isinstance(at, (GraphValue, Expr)) or not _is_int(at):
                raise self.error("list.insert takes an index known when compiling", node)
        v = self.expr(node.args[-1])
        if f.attr == "extend":
            if not isinstance(v, (tuple, list)):
                raise self.error("list.extend takes a list or tuple known when compiling (not a tensor)", node)
            v = tuple(v)
        else:
            v = (v,)
        # the items keep the values they have now: a name's slot is written again by a later
        # statement (``out = f(x[i]); outs.append(out)`` in a loop), so run-time items get slots of their own
        v = self.pin_tuple(v, f"{name}.{len(old)}") if _has_graph(v) else v
        if f.attr == "insert":
            lst = list(old)
            lst.insert(int(at), v[0])
            self.vars[name] = ListValue(lst)
        else:
            self.vars[name] = ListValue(old + v)
        return True

    def expr_Attribute(self, node):
        base = self.expr(node.value)
        attr = node.attr
        if base is self.self_obj and self.self_obj is not None:
            return self.self_attr(attr, node)
        if isinstance(base, GraphValue):
            if attr in ("shape", "dtype", "ndim"):
                return getattr(base, attr)
            if attr == "value" and _reads_parameter(base):      # (model zoo) Parameter.value()
                return lambda: base
            meth = getattr(base, attr, None)
            if meth is None:
                raise self.error(f"tensors have no attribute '{attr}' in construct", node)
            return meth
        if is_cell(base) and not isinstance(base, type):
            return self.cell_attr(base, attr, node)
        if isinstance(base, pytypes.ModuleType) or _is_msvm(base) or isinstance(base, (dt.DType, type)):
            try:
                return getattr(base, attr)
            except AttributeError:
                raise self.error(f"{getattr(base, '__name__', base)!s} has no attribute '{attr}'", node) from None
        try:
            return getattr(base, attr)
        except AttributeError:
            raise self.error(f"{type(base).__name__} has no attribute '{attr}'", node) from None

    def self_attr(self, attr, node):
        return self.cell_attr(self.self_obj, attr, node, path=attr)

    def cell_attr(self, cell, attr, node, path=None):
        try:
            v = cell_getattr(cell, attr)
        except AttributeError:
            raise self.error(f"{type(cell).__name__} has no attribute '{attr}'", node) from None
        if _is_tensor(v) and id(cell) in self.made_cells and getattr(v, "_data", None) is not None:
            return lift(v, self)              # (a Tensor of a Cell made in construct: a constant, made with it)
        if _is_tensor(v):
            return self.attr_read(cell, attr, v, node)
        if isinstance(v, ParameterTuple):           # (crossvit's per-branch Parameters: each read by its path)
            return tuple(self.attr_read(cell, f"{attr}.{i}", p, node) for i, p in enumerate(v))
        if isinstance(v, pytypes.MethodType) and v.__self__ is cell and not _is_msvm(v.__func__):
            return v
        return v

    def attr_read(self, cell, attr, v, node):
        """The graph value reading tensor attribute ``attr`` (a dotted path) of ``cell``, by its path from
        self (LOAD_PARAM binds it when the Code runs)."""
        root = self.root if self.root is not None else self.self_obj
        if cell is not root:              # self.embedding.embedding_table: linked by its path
            sub = find_cell_path(root, cell)
            if sub is None:
                raise self.error(f"tensor attribute '{attr}' of a Cell that is not a sub-Cell of "
                                 f"{type(root).__name__}", node)
            attr = f"{sub}.{attr}"
        t = tensor_type(v)
        self.cb.code.attr_types[attr] = t
        g = GraphValue(t, ("param", attr))
        self.param_reads.setdefault(attr, []).append((g, len(self.branch_preds)))
        return trace_op("CAST", (g,), (self.mixed,)) if self.needs_mixed_cast(g) else g

    def expr_Subscript(self, node):
        base = self.expr(node.value)
        if isinstance(base, GraphValue):
            return self.tensor_index(base, node.slice, node)
        index = self.expr(node.slice)
        if isinstance(index, Expr):
            c = index.const_value()
            if c is None:
                raise self.error("indexing a Python sequence with a symbolic index is not supported", node)
            index = c
        try:
            return base[index]
        except (TypeError, IndexError, KeyError) as e:
            raise self.error(f"cannot index {type(base).__name__} with {index!r}: {e}", node) from None

    def index_items(self, sl) -> list:
        """(ast item, what it is) per item of a tensor subscript: ("s", start, stop, step), ("i", k),
        ("n",), ("e",) for basic indexing, else the item's value (a tensor or a symbolic Expr)."""
        out = []
        for it in (sl.elts if isinstance(sl, ast.Tuple) else [sl]):
            if isinstance(it, ast.Slice):
                parts = [None if p is None else _index_int(self.expr(p)) for p in (it.lower, it.upper, it.step)]
                for p in parts:
                    if p is not None and not isinstance(p, (int, Expr)):
                        raise self.error("slice bounds must be ints or expressions over shapes and int "
                                         f"arguments, got {type(p).__name__}", it)
                out.append((it, ("s", *parts)))
                continue
            v = _index_int(self.expr(it))
            out.append((it, ("n",) if v is None else ("e",) if v is Ellipsis else ("i", v) if isinstance(v, int) else v))
        return out

    def tensor_index(self, base, sl, node):
        from .graph import trace_op

        items = self.index_items(sl)
        tensors = [k for k, (_, v) in enumerate(items) if isinstance(v, GraphValue) and isinstance(v.type, TensorType)
                   and v.type.dtype.kind in "iu"]
        if len(tensors) > 1:
            return self.advanced_index(base, items, tensors, node)
        spec = []
        for k, (it, v) in enumerate(items):
            if isinstance(v, tuple):
                spec.append(v)
            elif isinstance(v, GraphValue) and isinstance(v.type, TensorType) and v.type.dtype == dt.bool_:
                # x[mask] (MindSpore's getitem by a bool tensor): the rows where mask is True, a first dim
                # the data decides (a fresh symbol, bound when BOOL_INDEX runs)
                if len(items) != 1:
                    raise self.error("a bool tensor index goes alone: x[mask] (mask over x's leading dims)", it)
                return trace_op("BOOL_INDEX", (base, v), (self.fresh_symbol("masked"),))
            elif isinstance(v, GraphValue) and isinstance(v.type, TensorType) and v.type.dtype.kind in "iu":
                # x[idx], x[:, idx], x[idx, :] with an int tensor: a GATHER along that axis (the other
                # items are full slices, or ... after it)
                rest = [r for _, r in items[k + 1:]]
                if all(s == ("s", None, None, None) for s in spec) and \
                        all(isinstance(r, tuple) and r in (("s", None, None, None), ("e",)) for r in rest):
                    return trace_op("GATHER", (base, v), (len(spec),))
                if any(s == ("e",) for s in spec) or not all(isinstance(r, tuple) for r in rest):
                    raise self.error("an int tensor index goes with basic indices (ints, slices, None) before it and "
                                     "basic indices or ... after it; use ops.gather for the rest", it)
                self.adjacent_advanced(items, k, k + 1, node)
                # (numpy's x[:, idx, 1:2], x[0, idx]: the basic indices first, the tensor's dim kept whole, then a
                # GATHER along where that dim is now)
                kept = base if all(s == ("s", None, None, None) for s in spec + rest) else trace_op(
                    "SLICE", (base,), (tuple(spec + [("s", None, None, None)] + rest),))
                return trace_op("GATHER", (kept, v), (sum(1 for s in spec if s[0] in ("s", "n")),))
            elif isinstance(v, Expr):      # (issue 21) x[i] in a loop over a shape: compile for exact shapes
                raise UnknownDim(f"the index {v} is symbolic; x[i] needs it known (the caller compiles for exact "
                                 "shapes, where loops over shapes unroll)")
            else:
                raise self.error("tensor indices must be ints, slices, None, ..., or an int tensor", it)
        return trace_op("SLICE", (base,), (tuple(spec),))

    def advanced_index(self, base, items, tensors, node):
        """``x[i, j]`` (and ``x[:, i, j, ...]``) with int tensors side by side, as numpy indexes: the indices
        broadcast together, each element the one at (i, j); each index first taken through its own dim (a
        GATHER from arange(dim): negative ones count from the end, one out of its dim's range raises IndexError
        there), then the indexed dims flattened into one and a GATHER of i * dim_j + j along it (mindyolo's
        yolov10 ``boxes[batch_ids, index // nc]``); ints among them are 0-d indices."""
        from ..ops import functional as F

        lo, hi = tensors[0], tensors[-1] + 1
        run = items[lo:hi]
        if any(not (isinstance(v, GraphValue) or (isinstance(v, tuple) and v[0] == "i")) for _, v in run) or \
                any(v != ("s", None, None, None) for _, v in items[:lo]) or \
                any(not isinstance(v, tuple) for _, v in items[hi:]):
            raise self.error("int tensor indices go side by side, with full slices before them and basic indices "
                             "after them (x[i, j], x[:, i, j, :2]); use ops.gather / gather_elements for the rest", node)
        self.adjacent_advanced(items, lo, hi, node)
        shape = self.env.norm_type(base.type).shape
        rank = len(shape)
        if hi > rank:
            raise self.error(f"{hi} indices for a tensor of rank {rank}", node)
        dims = list(shape[lo:hi])
        flat = 1
        for d in dims:
            flat = flat * d
        x = F.reshape(base, tuple(shape[:lo]) + (flat,) + tuple(shape[hi:]))
        key, stride = None, 1
        for (_, v), d in zip(reversed(run), reversed(dims)):
            idx = v if isinstance(v, GraphValue) else F.scalar_to_tensor(v[1], dt.int64)
            idx = F.gather(F.arange(F._plain(d)), idx, 0)           # (in range, and counted from the end)
            term = idx if (isinstance(stride, int) and stride == 1) else idx * stride
            key = term if key is None else F.add(term, key)
            stride = stride * d
        out = trace_op("GATHER", (x, key), (lo,))
        post = [v for _, v in items[hi:]]
        if all(v in (("s", None, None, None), ("e",)) for v in post):
            return out
        full = [("s", None, None, None)] * (lo + key.type.rank)          # (then the basic indices after them)
        return trace_op("SLICE", (out,), (tuple(full + post),))

    def adjacent_advanced(self, items, lo, hi, node) -> None:
        """numpy counts an int among int tensor indices as one of them; where those are not all side by side
        (``x[0, :, idx]``) it moves their broadcast dims to the front, which these paths do not: refused."""
        adv = [k for k, (_, v) in enumerate(items)
               if (isinstance(v, tuple) and v[0] == "i") or isinstance(v, GraphValue)]
        if adv and adv[-1] - adv[0] + 1 != len(adv):
            raise self.error("ints and int tensor indices separated by slices (x[0, :, idx]): numpy moves their dims "
                             "to the front; index in two steps (x[0][:, idx]) or use ops.gather", node)

    def slice_assign(self, x: GraphValue, sl, value, node) -> GraphValue:
        """``x[index] = value`` by basic indexing (ints, slices of step 1, ...), as MindSpore's setitem:
        value, cast to x's dtype and broadcast to x[index]'s shape, in that region and x elsewhere.
        Each sliced axis in turn is cut into the parts before, in and after the region (SLICE), the
        middle one holds the rest, and CONCAT joins them (rexnet's ``x[:, 0:c] += shortcut``)."""
        from ..ops import functional as F
        from .graph import trace_op

        spec = [v for _, v in self.index_items(sl)]
        if not all(isinstance(v, tuple) and v[0] != "n" and (v[0] != "s" or v[3] in (None, 1)) for v in spec) or \
                sum(1 for v in spec if v[0] == "e") > 1:
            raise self.error("assigning to an item in construct: x[mask] = value (a bool tensor mask), or x[index] = "
                             "value by ints and slices of step 1 (and one ...)", node)
        xt = x.type
        real = [v for v in spec if v[0] != "e"]
        if len(real) > xt.rank:
            raise self.error(f"x[index] = value: {len(real)} indices for a tensor of rank {xt.rank}", node)
        full, cut = [], []
        for v in spec:
            full += [("s", None, None, None)] * (xt.rank - len(real)) if v[0] == "e" else [v]
        full += [("s", None, None, None)] * (xt.rank - len(full))
        for axis, v in enumerate(full):    # each axis's region as [start, stop), 0 <= start <= stop <= its size
            n = xt.shape[axis]
            n = n.const_value() if n.is_const() else n
            if v[0] == "i":                # an int index k: the region's axis of length 1 (k checked in range)
                k = v[1]
                if isinstance(n, int) and not -n <= k < n:
                    raise self.error(f"x[index] = value: index {k} is out of range for axis {axis} of size {n}", node)
                if not isinstance(n, int):
                    self.check((n + k >= 0) if k < 0 else (Expr.of(k) < n), "IndexError",
                               (f"x[index] = value: index {k} is out of range for axis {axis} of size ", n))
                lo = n + k if k < 0 else k
                cut.append(("s", lo, lo + 1, None))
            else:
                lo, hi = _slice_bound(v[1], n, 0), _slice_bound(v[2], n, n)     # (an empty region: at lo)
                cut.append(("s", lo, max(hi, lo) if isinstance(hi, int) and isinstance(lo, int) else S.smax(hi, lo),
                            None))
        try:
            region = trace_op("SLICE", (x,), (tuple(cut),))
            if isinstance(value, Expr) or (isinstance(value, GraphValue) and isinstance(value.type, ScalarType)):
                value = F.scalar_to_tensor(value, xt.dtype)         # (an int argument, a dim)
            if isinstance(value, GraphValue) and isinstance(value.type, TensorType):
                if value.type.dtype != xt.dtype:
                    value = trace_op("CAST", (value,), (xt.dtype,))
                kept = [d for d, v in zip(region.type.shape, full) if v[0] != "i"]
                if value.type.rank > len(kept):
                    raise self.error(f"x[index] = value: value {value.type} does not broadcast to the region's shape "
                                     f"{tuple(kept)}", node)
                value = F.reshape(F.broadcast_to(value, tuple(kept)), tuple(region.type.shape))
            elif isinstance(value, (bool, int, float, np.number)) and not isinstance(value, GraphValue):
                value = F.full_like(region, {"b": bool, "i": int, "u": int}.get(xt.dtype.kind, float)(value))
            else:
                raise self.error(f"x[index] = value: value must be a number or a tensor, got {type(value).__name__}",
                                 node)
            return self._put(x, cut, value)
        except ShapeError as e:
            raise self.error(str(e), node) from None

    def _put(self, x, cut, value):
        """x with ``value`` in the region ``cut`` (per axis ("s", start, stop, None); value of its shape)."""
        from .graph import trace_op

        def whole_axis(k, v):          # (the region covers the axis: [0, its size))
            return v[1] in (None, 0) and (v[2] is None or (isinstance(v[2], Expr) and v[2] == x.type.shape[k]) or
                                          (isinstance(v[2], int) and x.type.shape[k] == Expr.of(v[2])))
        axis = next((k for k, v in enumerate(cut) if not whole_axis(k, v)), None)
        if axis is None:
            return value
        _, lo, hi, _ = cut[axis]
        whole = [("s", None, None, None)] * len(cut)

        def part(a, b):
            return trace_op("SLICE", (x,), (tuple(whole[:axis] + [("s", a, b, None)] + whole[axis + 1:]),))
        mid = self._put(part(lo, hi), whole[:axis] + [whole[axis]] + cut[axis + 1:], value)
        parts = ([] if lo in (None, 0) else [part(None, lo)]) + [mid] + [part(hi, None)]
        return parts[0] if len(parts) == 1 else trace_op("CONCAT", tuple(parts), (len(parts), axis))

    def mask_assign(self, x: GraphValue, mask: GraphValue, value, node) -> GraphValue:
        """``x[mask] = value`` (MindSpore's setitem by a bool tensor): value, cast to x's dtype, where
        mask is True (mask over x's leading dims, value broadcast over the rest), else x."""
        xt, mt = x.type, mask.type
        if not 1 <= mt.rank <= xt.rank:
            raise self.error(f"x[mask] = value: the mask (rank {mt.rank}) must cover leading dims of x (rank "
                             f"{xt.rank})", node)
        if isinstance(value, GraphValue) and isinstance(value.type, TensorType):
            if value.type.rank > xt.rank - mt.rank:
                raise self.error(f"x[mask] = value: value {value.type} must broadcast to one selected item "
                                 f"{TensorType(xt.shape[mt.rank:], xt.dtype)} (one value per selected item is "
                                 "not supported)", node)
            if value.type.dtype != xt.dtype:
                value = trace_op("CAST", (value,), (xt.dtype,))
        elif isinstance(value, (bool, int, float, np.number)) and not isinstance(value, GraphValue):
            value = {"b": bool, "i": int, "u": int}.get(xt.dtype.kind, float)(value)
        elif not isinstance(value, GraphValue):
            raise self.error(f"x[mask] = value: value must be a number or a tensor, got {type(value).__name__}", node)
        try:
            for a, b in zip(xt.shape, mt.shape):
                self.env.require_eq(a, b, f"x[mask] = value: mask {mt} does not match the leading dims of x {xt}")
            if mt.rank < xt.rank:
                mask = trace_op("RESHAPE", (mask,), (tuple(mt.shape) + (S.Expr.const(1),) * (xt.rank - mt.rank),))
            return trace_op("WHERE", (mask, value, x), ())
        except ShapeError as e:
            raise self.error(str(e), node) from None

    def fresh_symbol(self, stem: str) -> str:
        """A symbol no argument binds (a data-dependent dim): ``masked0``, ``masked1``, ..."""
        taken = {n for _, t in self.cb.code.params for n in _type_symbols(t)} | set(self.cb.code.names)
        k = 0
        while f"{stem}{k}" in taken:
            k += 1
        self.cb.name(f"{stem}{k}")
        return f"{stem}{k}"

    def expr_Slice(self, node):
        parts = [None if p is None else self.expr(p) for p in (node.lower, node.upper, node.step)]
        return slice(*parts)

    def expr_BinOp(self, node):
        left, right = self.expr(node.left), self.expr(node.right)
        self.loc = self.node_loc(node)
        return self.binop(type(node.op), left, right, node)

    def binop(self, op, left, right, node):
        fn = _BINOPS.get(op)
        if fn is None:
            raise self.error(f"operator {op.__name__} is not supported", node)
        if isinstance(left, Ratio) or isinstance(right, Ratio) or (op is ast.Div and isinstance(left, Expr)):
            r = ratio_binop(_RATIO_OPS.get(op, ""), left, right)
            if r is not None:
                return r
            left, right = (self.ratio_value(v) for v in (left, right))
        if isinstance(left, Expr) or isinstance(right, Expr):
            other = right if isinstance(left, Expr) else left
            if (op in (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod)
                    and (_is_int(other))):
                return fn(Expr.of(int(left)) if not isinstance(left, Expr) else left,
                          Expr.of(int(right)) if not isinstance(right, Expr) else right)
            if isinstance(left, Expr):
                left = lift(left, self)
            if isinstance(right, Expr):
                right = lift(right, self)
        try:
            return fn(left, right)
        except (ShapeError, SymbolicError):
            raise
        except TypeError as e:
            raise self.error(f"{type(left).__name__} {_OPSYM.get(op, op.__name__)} {type(right).__name__}: {e}",
                             node) from None

    def ratio_value(self, v):
        """A Ratio used where no dim can be: the run-time float it is."""
        if not isinstance(v, Ratio):
            return v
        return lift(v.num, self) / float(v.den)

    def expr_UnaryOp(self, node):
        v = self.expr(node.operand)
        if isinstance(node.op, ast.Not):
            if isinstance(v, Pred):
                return S.pnot(v)
            if isinstance(v, GraphValue):
                if isinstance(v.type, ScalarType) and isinstance(v.type.value, Pred):
                    return S.pnot(v.type.value)
                raise self.error("'not' on a tensor: use ops.logical_not", node)
            t = _truth(v)
            return S.pnot(t) if isinstance(t, Pred) else not t
        if isinstance(node.op, ast.USub):
            return -v
        if isinstance(node.op, ast.UAdd):
            return v
        if isinstance(node.op, ast.Invert) and (isinstance(v, (GraphValue, int, np.integer)) or
                                                 getattr(v, "_data", None) is not None):
            return ~v           # (and a Tensor made in construct from numpy: edgenext's ``~mask``)
        raise self.error("operator ~ is not supported on this value", node)

    def expr_BoolOp(self, node):
        vals = []
        for e in node.values:
            v = self.expr(e)
            if isinstance(v, GraphValue):
                raise self.error("'and'/'or' on tensors: use ops.logical_and / ops.logical_or", e)
            if not isinstance(v, Pred):
                t = _truth(v)
                if isinstance(t, Pred):         # a symbolic int: its truth is known at run time
                    vals.append(t)
                    continue
                # Python short-circuit on known values
                if isinstance(node.op, ast.And) and not t:
                    return v if not vals else S.FALSE
                if isinstance(node.op, ast.Or) and t:
                    return v if not vals else S.TRUE
                continue
            vals.append(v)
        if not vals:
            return isinstance(node.op, ast.And)
        return S.pand(*vals) if isinstance(node.op, ast.And) else S.por(*vals)

    def expr_Compare(self, node):
        left = self.expr(node.left)
        result = None
        for op, comp in zip(node.ops, node.comparators):
            right = self.expr(comp)
            r = self.compare(op, left, right, node)
            result = r if result is None else self.and_(result, r, node)
            left = right
        return result

    def and_(self, a, b, node):
        if isinstance(a, GraphValue) or isinstance(b, GraphValue):
            raise self.error("chained comparisons of tensors are not supported", node)
        if isinstance(a, Pred) or isinstance(b, Pred):
            return S.pand(_as_pred(a), _as_pred(b))
        return a and b

    def compare(self, op, a, b, node):
        if isinstance(op, (ast.Is, ast.IsNot)):
            if isinstance(a, GraphValue) or isinstance(b, GraphValue):
                r = False if (a is None or b is None) else a is b
            else:
                r = a is b
            return r if isinstance(op, ast.Is) else not r
        if isinstance(op, (ast.In, ast.NotIn)):
            if isinstance(a, GraphValue) or isinstance(b, GraphValue):
                raise self.error("'in' with tensors is not supported", node)
            r = a in b
            return r if isinstance(op, ast.In) else not r
        sym = _CMPOPS[type(op)]
        if isinstance(a, GraphValue) or isinstance(b, GraphValue):
            return _PYCMP[sym](a, b)
        if isinstance(a, tuple) and isinstance(b, tuple) and sym in ("==", "!="):
            # (H, W) != (224, 224): the dims' predicates, folded where they are known
            same = len(a) == len(b)
            if same and any(isinstance(x, Expr) or isinstance(y, Expr) for x, y in zip(a, b)):
                preds = [_as_pred(self.compare(ast.Eq(), x, y, node)) for x, y in zip(a, b)]
                eq = S.pand(*preds)
                return eq if sym == "==" else S.pnot(eq)
            return (a == b) if sym == "==" else (a != b)
        if isinstance(a, Expr) or isinstance(b, Expr):
            if not (_is_int(a) and _is_int(b)):
                raise self.error(f"cannot compare {a!r} with {b!r}", node)
            return S.compare(sym, a, b)
        return _PYCMP[sym](a, b)

    def expr_IfExp(self, node):
        test = self.expr(node.test)
        if isinstance(test, Expr):
            test = _truth(test)
        if isinstance(test, Pred):
            c = test.const_value()
            if c is None:
                return self.symbolic_ifexp(test, node)
            test = c
        if isinstance(test, GraphValue):
            raise self.error("a conditional expression on a tensor's value is not supported; use ops.where", node)
        return self.expr(node.body) if _truth(test) else self.expr(node.orelse)

    def symbolic_ifexp(self, pred, node):
        """``a if pred else b`` on a shape predicate, as the if statement ``t = a`` / ``t = b`` is compiled:
        each side only on its own path, ints merged into select(pred, a, b), tensors of one rank and dtype
        into a slot whose dims are selects (crossvit's ``interpolate(x, size) if H != size else x``)."""
        self.inlines += 1
        name = f"%ifexp{self.inlines}"

        def assign(value):
            return ast.copy_location(ast.Assign(targets=[ast.copy_location(ast.Name(id=name, ctx=ast.Store()), value)],
                                                value=value), value)
        self.symbolic_if(pred, ast.copy_location(ast.If(test=node.test, body=[assign(node.body)],
                                                        orelse=[assign(node.orelse)]), node))
        return self.vars.pop(name)

    def expr_Lambda(self, node):
        """A lambda in construct (mindocr's table head, ``lambda x: ...`` passed on or called): inlined where it is
        called, as a helper is; its default values taken when it is made, the names it reads from construct when
        it is called (where it is called from its own scope; passed into a helper, as they were when made)."""
        a = node.args
        P = inspect.Parameter
        defaults = [self.expr(d) for d in a.defaults]
        fdef = ast.FunctionDef(name="<lambda>", args=a, body=[ast.copy_location(ast.Return(node.body), node.body)],
                               decorator_list=[], returns=None, type_comment=None)
        ast.copy_location(fdef, node)
        fdef.end_lineno, fdef.end_col_offset = node.end_lineno, node.end_col_offset
        # its signature as Python makes it (the inliner binds the call's arguments to it: *args a tuple, **kwargs
        # a dict, as a helper function's): positional-only, positional, *args, keyword-only, **kwargs
        pos = [*a.posonlyargs, *a.args]
        first = len(pos) - len(defaults)
        params = [P(p.arg, P.POSITIONAL_ONLY if k < len(a.posonlyargs) else P.POSITIONAL_OR_KEYWORD,
                    default=defaults[k - first] if k >= first else P.empty) for k, p in enumerate(pos)]
        if a.vararg is not None:
            params.append(P(a.vararg.arg, P.VAR_POSITIONAL))
        params += [P(p.arg, P.KEYWORD_ONLY, default=P.empty if d is None else self.expr(d))
                   for p, d in zip(a.kwonlyargs, a.kw_defaults)]
        if a.kwarg is not None:
            params.append(P(a.kwarg.arg, P.VAR_KEYWORD))
        src = FunctionSource(fdef, self.src.filename, self.src.line_offset, self.src.col_offset, self.src.globals,
                             {**self.src.closure, **{k: v for k, v in self.vars.items() if not k.startswith("%")}},
                             "<lambda>")
        return _Lambda(src, self.self_obj, inspect.Signature(params), self.scope)

    def expr_JoinedStr(self, node):
        parts = []
        for v in node.values:
            if isinstance(v, ast.Constant):
                parts.append(str(v.value))
                continue
            val = self.expr(v.value)
            if isinstance(val, (GraphValue, Expr, Pred)):
                raise self.error("an f-string of a run-time or symbolic value is not supported in construct", v)
            spec = self.expr(v.format_spec) if v.format_spec is not None else ""
            conv = {-1: val, 115: str(val), 114: repr(val), 97: ascii(val)}[v.conversion]
            parts.append(format(conv, spec))
        return "".join(parts)

    def expr_Call(self, node):
        if self.list_method(node):
            return None
        fn = self.expr(node.func)
        args = []
        for a in node.args:
            if isinstance(a, ast.Starred):
                v = self.expr(a.value)
                if isinstance(v, GraphValue):
                    raise self.error("*tensor is not supported", a)
                args.extend(v)
            else:
                args.append(self.expr(a))
        kwargs = {}
        for k in node.keywords:
            if k.arg is None:           # f(**self.kwargs): a dict known when compiling, with str keys
                d = self.expr(k.value)
                if not isinstance(d, dict) or not all(isinstance(key, str) for key in d):
                    raise self.error(f"**{type(d).__name__} in a call: only a dict with str keys known when "
                                     "compiling can be unpacked", k)
                kwargs.update(d)
                continue
            kwargs[k.arg] = self.expr(k.value)
        self.loc = self.node_loc(node)
        return self.call(fn, args, kwargs, node)

    def call(self, fn, args, kwargs, node):
        if is_cell(fn):
            return self.call_cell(fn, args, kwargs, node)
        if getattr(fn, "__msvm_constexpr__", False):          # (ops.constexpr: run now, its result a constant)
            vals = _leaves(tuple(args) + tuple(kwargs.values()))
            if any(isinstance(a, GraphValue) for a in vals):
                raise self.error(f"@constexpr {getattr(fn, '__name__', fn)}: its arguments must be known when "
                                 "compiling (constants or dims, not tensors)", node)
            if any(isinstance(a, (Expr, Pred)) for a in vals):     # (a dim: the caller compiles for exact shapes)
                raise UnknownDim(f"@constexpr {getattr(fn, '__name__', fn)} is given a symbolic dim")
            with using(None):
                return fn(*args, **kwargs)
        if isinstance(fn, _Lambda) and fn.scope == self.scope:      # (late binding: the names as they are now)
            fn.src.closure.update({k: v for k, v in self.vars.items() if k in fn.src.closure})
        if hasattr(type(fn), "__msvm_inline__") or isinstance(getattr(fn, "__msvm_jit__", None), pytypes.FunctionType):
            return self.inline(fn, args, kwargs, node)      # (an ms.jit function is inlined as its function)
        if fn is builtins.len:
            (v,) = args
            if isinstance(v, GraphValue):
                shape = v.shape
                if not shape:
                    raise self.error("len() of a 0-d tensor", node)
                return shape[0]
            return len(v)
        if fn in (builtins.int,) and args and isinstance(args[0], Expr):
            return args[0]
        if fn in (builtins.int, math.floor, math.ceil, math.trunc) and len(args) == 1 and \
                isinstance(args[0], (Ratio, Expr)):        # int((H - 1) / stride + 1), math.ceil(h / p)
            r = args[0]
            return r if isinstance(r, Expr) else r.ceil() if fn is math.ceil else r.floor()
        if fn in (builtins.int, builtins.round, math.floor, math.ceil, math.trunc) and args and \
                isinstance(args[0], GraphValue) and isinstance(args[0].type, ScalarType) and args[0].type.kind in "if":
            # (a dim's arithmetic with floats, ``int(x.shape[-2] * self.scales + 0.5)``: a run-time float here; with
            # the call's exact shapes it is a Python number, as MindSpore's graph mode folds it)
            if self.exact():             # (exact shapes already: a float argument, a run-time value)
                raise self.error(f"{fn.__name__}() of a number known only when the Cell runs (a float argument's "
                                 "arithmetic) is not supported; pass it as a constant attribute", node)
            raise UnknownDim(f"{fn.__name__}() of a number computed when the Cell runs (a dim's arithmetic with "
                             "floats): the caller compiles for exact shapes")
        if fn in (builtins.min, builtins.max) and args and all(_is_int(a) for a in args) \
                and any(isinstance(a, Expr) for a in args):
            out = Expr.of(args[0]) if not isinstance(args[0], Expr) else args[0]
            for a in args[1:]:
                out = (S.smin if fn is builtins.min else S.smax)(out, a)
            return out
        if fn is builtins.print:              # (issue 21: a PRINT instruction, run when the Cell runs)
            return builtin_print(*args, **kwargs)
        if fn is builtins.isinstance and len(args) == 2 and isinstance(args[0], (GraphValue, Expr, Pred)):
            return _isinstance_of_runtime(args[0], args[1])
        if fn in (builtins.enumerate, builtins.zip, builtins.list, builtins.tuple, builtins.reversed) and \
                any(isinstance(a, GraphValue) and isinstance(a.type, TensorType) for a in args):
            args = [self.rows(a, node) if isinstance(a, GraphValue) and isinstance(a.type, TensorType) else a
                    for a in args]                  # (a tensor's rows: mindyolo's ``enumerate(self.stride)``)
            return fn(*args, **kwargs)
        if fn is builtins.range and args and all(_is_int(a) for a in args) and any(isinstance(a, Expr) for a in args):
            # (a range over a dim outside a for statement, a comprehension's: its items need the count)
            if any(a.const_value() is None for a in args if isinstance(a, Expr)):
                raise UnknownDim("range() of a symbolic dim outside a for loop: the caller compiles for exact shapes")
            return range(*(int(a.const_value()) if isinstance(a, Expr) else int(a) for a in args))
        if any(fn is getattr(builtins, n, None) for n in _SAFE_BUILTINS):
            if any(isinstance(a, (GraphValue, Expr, Pred)) for a in args):
                raise self.error(f"{getattr(fn, '__name__', fn)}() of a symbolic or run-time value is not "
                                 "supported", node)
            return fn(*args, **kwargs)
        if type(getattr(fn, "__self__", None)) in (dict, pytypes.MappingProxyType) and \
                getattr(fn, "__name__", None) in _DICT_READS:
            # (a dict's reads, ``kw.get("which", 0)`` in a helper taking **kw: its keys are known here)
            if any(isinstance(a, (GraphValue, Expr, Pred)) for a in (*args, *kwargs.values())):
                raise self.error(f"dict.{fn.__name__}() of a symbolic or run-time key is not supported", node)
            return fn(*args, **kwargs)
        if _is_msvm(fn) or getattr(type(fn), "__msvm_primitive__", False) \
                or isinstance(fn, pytypes.MethodType) and isinstance(fn.__self__, GraphValue):
            return fn(*args, **kwargs)
        if isinstance(fn, type) and getattr(fn, "__msvm_cell__", False):
            # a Cell class made in construct (cmt's ``GlobalAvgPooling()(x)``), with arguments known when
            # compiling: made here, once per compile; calling it runs its construct inline (call_cell)
            self.known_while_compiling(args, kwargs, f"making {fn.__name__} in construct", node)
            return fn(*args, **kwargs)
        if callable(fn) and ((getattr(fn, "__module__", None) or "").split(".")[0] in _FOLD_MODULES
                             or isinstance(getattr(fn, "__self__", None), (np.ndarray, np.generic))):
            # (math and numpy functions, and methods of numpy arrays made while compiling: xcit's
            # ``np.zeros((B, H, W)).astype(bool)``, run on values known here)
            where = getattr(fn, "__module__", None) or type(getattr(fn, "__self__", None)).__name__
            self.known_while_compiling(args, kwargs, f"{where}.{getattr(fn, '__name__', '?')}", node,
                                       " inside construct; use msvm.ops")
            return fn(*args, **kwargs)
        if isinstance(fn, (pytypes.FunctionType, pytypes.MethodType)) or hasattr(fn, "__msvm_inline__"):
            return self.inline(fn, args, kwargs, node)
        gap = fn.__dict__.get("__gap__") if isinstance(fn, type) else getattr(fn, "_name", None) \
            if type(fn).__name__ == "_GapValue" else None
        if gap is not None:                  # (a MindSpore API msvm lacks: say so, as outside construct)
            from ..compat import MindSporeGap

            raise self.error(str(MindSporeGap(gap)), node)
        raise self.error(f"calling {getattr(fn, '__qualname__', type(fn).__name__)} is not supported in construct",
                         node)

    def known_while_compiling(self, args, kwargs, what: str, node, hint: str = "") -> None:
        """Arguments of a call that runs while compiling (a Cell class made in construct, a numpy or math
        function), items of tuples, lists and dicts included: a tensor's values are an error; a symbolic
        dim (volo's ``Fold(C, (H, W), ...)``) makes the caller compile for the call's exact shapes."""
        todo, dims = list(args) + list(kwargs.values()), False
        while todo:
            a = todo.pop()
            if isinstance(a, GraphValue):
                raise self.error(f"{what} cannot take msvm tensors (run-time values){hint}", node)
            if isinstance(a, (Expr, Pred, Ratio)):
                dims = True
            elif isinstance(a, (tuple, list)):
                todo.extend(a)
            elif isinstance(a, dict):
                todo.extend(a.values())
        if dims:
            raise UnknownDim(f"{what} runs while compiling and is given symbolic dims: the caller compiles for "
                             "exact shapes")

    # --- helpers and sub-Cells
    def inline(self, fn, args, kwargs, node):
        if self.inline_depth > 16:
            raise self.error("helper functions nest too deeply (recursion?)", node)
        bound_self = None
        static = getattr(fn, "__msvm_inline__", None)
        if static is not None:                      # a function known only from source (msvm dump, LSP)
            src, bound_self, sig = static()
        else:
            if isinstance(fn, pytypes.MethodType):
                bound_self, fn = fn.__self__, fn.__func__
            if getattr(fn, "__msvm_jit__", None) is not None:
                fn = fn.__msvm_jit__
            src = source_of(fn)
            sig = inspect.signature(fn)
        try:
            ba = sig.bind(*(([bound_self] if bound_self is not None else []) + list(args)), **kwargs)
        except TypeError as e:
            raise self.error(f"{src.qualname}: {e}", node) from None
        ba.apply_defaults()
        own = getattr(bound_self, "__dict__", {}).get("_mixed_precision") if is_cell(bound_self) else None
        if own is not None and own != self.mixed:
            # (an inlined method of a Cell runs in this Code's precision: one given a to_float precision of its
            # own would compute in the wrong type)
            raise self.error(f"{type(bound_self).__name__}.{src.node.name}() runs inline here, but that Cell has a "
                             "to_float precision of its own; call it without passing a function, or give it the "
                             "caller's precision", node)
        saved = (self.src, self.vars, self.self_obj, self.scope, self.loops)
        self.src = src
        self.vars = dict(ba.arguments)
        self.loops = []                 # (a helper's break and continue are its own loops')
        self.inlines += 1
        self.scope = f"{src.node.name}#{self.inlines}."
        if bound_self is not None:
            self.self_obj = bound_self
        self.inline_depth += 1
        try:
            self.block(src.node.body)
            result = None
        except _Returned as r:
            result = r.args[0] if r.args else None
        finally:
            self.inline_depth -= 1
            self.src, self.vars, self.self_obj, self.scope, self.loops = saved
        return result

    def call_cell(self, cell, args, kwargs, node):
        root = self.root if self.root is not None else self.self_obj
        path = find_cell_path(root, cell) if root is not None else None
        if path is None and not cell.__dict__.get("_params") and not cell.__dict__.get("_cells"):
            # a Cell made in construct with nothing to keep (mobilevit's ``nn.Softmax(axis=-1)(attn)``): its
            # construct runs inline, as a helper method's (a Cell built from source, in the editor's views,
            # gives its construct as the frontend reads its attributes); its Tensors (not Parameters: volo's
            # Fold and its fixed weight) are constants of the code, made with it while compiling (cell_attr)
            self.made_cells[id(cell)] = cell
            getter = getattr(cell, "__msvm_getattr__", None)
            return self.inline(getter("construct") if getter is not None else cell.construct, args, kwargs, node)
        if path is None:
            raise self.error(f"{type(cell).__name__} is not a sub-Cell of {type(root).__name__}: create it in "
                             "__init__ and assign it to an attribute", node)
        if any(_is_callable_arg(v) for v in (*args, *kwargs.values())):
            # a function, lambda, method or Cell passed to a sub-Cell (mindocr's table_master: ``self.sublayer[0](x,
            # lambda x: self.self_attn(x, x, x, tgt_mask))``): its construct runs inline, as a method of the
            # sub-Cell, so the function runs in this Code, reading this Code's values (a Code of its own would
            # read them from slots it does not have)
            getter = getattr(cell, "__msvm_getattr__", None)
            return self.inline(getter("construct") if getter is not None else cell.construct, args, kwargs, node)
        cell_getattr(cell, "construct")
        params = construct_params(cell)
        try:
            values = bind_arguments(params, args, kwargs, f"{type(cell).__name__}.construct()")
        except TypeError as e:
            raise self.error(str(e), node) from None
        params = expand_params(params, len(values))
        specs, runtime = [], []
        sym_names: dict = {}
        for (pname, default), v in zip(params, values):
            if type(default) is bool and not _flag_like(v):
                raise self.error(f"{type(cell).__name__}.construct(): argument '{pname}' is a bool flag (its default "
                                 f"is {default}), got {type(v).__name__}; pass True or False", node)
            spec = self.callee_spec(pname, v, sym_names)
            specs.append(spec)
            runtime.extend(_runtime_values(spec, v))
        try:
            sub = self.cell_compiler(cell, specs, generation=self.generation)
        except FrontendError as e:
            # (model zoo) a bool flag that decides the structure of a value (``if output_attentions:
            # outputs += (w,)``) cannot stay a run-time flag: the Python bools given at this call site
            # are baked in instead, as MindSpore's graph mode does with every bool. An int the sub-Cell
            # needs the value of (edgenext's ``np.zeros((B, H, W))`` of ints its caller passes) is baked
            # in where this call site knows it; where it does not, the error asks this Code for exact
            # shapes (the executor's retry), where it does
            if getattr(e, "needs_known_dims", False):
                baked = {k: c for k, c in ((k, _known_int(v)) for k, v in enumerate(values))
                         if c is not None and specs[k].kind == "scalar"}
            else:
                # (and any other error with a Python bool given: the branch it rules out may not compile for
                # these arguments at all, visionlan's ``if is_train: return self.emb(pos)`` with pos None)
                baked = {k: bool(v) for k, v in enumerate(values)
                         if isinstance(v, (bool, np.bool_)) and specs[k].kind == "scalar"}
            if not baked:
                raise
            for k, c in baked.items():
                specs[k] = ArgSpec("const", value=c)
            runtime = [r for spec, v in zip(specs, values) for r in _runtime_values(spec, v)]
            sub = self.cell_compiler(cell, specs, generation=self.generation)
        key = (path, id(sub))
        if key not in self._callee_index:
            self._callee_index[key] = len(self.cb.code.callees)
            self.cb.code.callees.append((path, sub))
        idx = self._callee_index[key]
        gins = [lift(v, self) for v in runtime]
        in_types = [self.env.norm_type(g.type) for g in gins]
        mapping = bind_callee(self.env, sub, in_types, f"call of self.{path}")
        out_type = self.env.norm_type(subs_type(sub.result_type, mapping))
        for g in gins:
            g.uses += 1
        if isinstance(out_type, type(NONE)):
            raise self.error(f"self.{path} returns None", node)
        out = GraphValue(out_type, ("call", idx, tuple(gins)), self.loc)
        note_consumer(self, gins, out)
        if sub.has_effects():        # (issue 21) a sub-Cell that updates a Parameter runs where it is called
            out = self.emit_effect(out)
        return self.bind_data_dims(sub, out, path, node)

    def bind_data_dims(self, sub, out: GraphValue, path, node):
        """A sub-Cell's result with dims its data decided (x[mask] inside it): each becomes a fresh
        symbol of this code, bound by BIND_DIM when the call returns (never the callee's name, which
        could be one of this code's own)."""
        data = {sub.names[ins.args[0]] for ins in sub.instrs if ins.op.binds}
        if not data or not _type_symbols(out.type) & data:
            return out
        if not isinstance(out.type, TensorType):
            raise self.error(f"self.{path} returns {out.type}: a tuple holding dims its data decides (x[mask]) "
                             "is not supported; return the tensor alone", node)
        for axis, d in enumerate(out.type.shape):
            if d.as_symbol() in data:
                out = trace_op("BIND_DIM", (out,), (self.fresh_symbol("masked"), axis))
            elif d.symbols() & data:
                raise self.error(f"self.{path} returns {out.type}: dim {axis} ({d}) is an expression over a dim "
                                 "its data decides; return a tensor whose dims are symbols", node)
        return out

    def callee_spec(self, pname, v, sym_names: dict) -> ArgSpec:
        if isinstance(v, (tuple, list)) and _has_runtime(v):
            # (model zoo) a tuple holding run-time values or dims (mobilevit's ``self.interpolate(x, size=(new_h,
            # new_w))``): each item its own argument. Passed whole as a constant, a dim's expression would name
            # this Code's symbols inside the callee, where its own symbols of those names took their place.
            return ArgSpec("tuple", value=[self.callee_spec(f"{pname}_{j}", x, sym_names) for j, x in enumerate(v)])
        if isinstance(v, GraphValue) and isinstance(v.type, TensorType):
            dims, ones = [], set()
            for i, d in enumerate(self.env.norm_type(v.type).shape):
                if d.is_const():
                    dims.append(d)
                else:
                    if d not in sym_names:
                        sym_names[d] = S.sym(f"{pname}{i}")
                    dims.append(sym_names[d])
                    if not self.env.not_one(d):     # (x0 - 1, a set_inputs None dim: may be 1)
                        ones.add(sym_names[d].as_symbol())
            return ArgSpec("tensor", TensorType(tuple(dims), v.type.dtype), may_be_one=ones)
        if isinstance(v, GraphValue) and isinstance(v.type, TupleType):
            raise ShapeError(f"argument {pname}: passing a tuple of tensors to a sub-Cell is not supported")
        if isinstance(v, (dict, pytypes.MappingProxyType)) and _has_graph(tuple(v.values())):
            raise ShapeError(f"argument {pname}: passing a dict holding run-time values to a sub-Cell is not "
                             "supported (pass them as arguments)")
        if isinstance(v, (Pred, bool, np.bool_)) or (isinstance(v, GraphValue) and v.type == ScalarType("b")):
            return ArgSpec("scalar", ScalarType("b", S.flag(pname)))
        if isinstance(v, GraphValue) and isinstance(v.type, ScalarType) and v.type.kind == "b":
            return ArgSpec("scalar", ScalarType("b", S.flag(pname)))
        if _is_int(v) or (isinstance(v, GraphValue) and isinstance(v.type, ScalarType) and v.type.kind == "i"):
            return ArgSpec("scalar", ScalarType("i", S.sym(pname)))
        if isinstance(v, float) or isinstance(v, GraphValue):
            return ArgSpec("scalar", ScalarType("f"))
        if _holds_dims(v):          # (a dict or an object holding dims: the callee needs them as values)
            raise UnknownDim(f"argument {pname} of a sub-Cell holds symbolic dims inside a {type(v).__name__}: the "
                             "caller compiles for exact shapes")
        return ArgSpec("const", value=v)


# the exceptions construct may raise (RAISE carries the name; the interpreter raises the builtin)
RAISABLE = frozenset({"ValueError", "TypeError", "RuntimeError", "IndexError", "KeyError", "AssertionError",
                      "NotImplementedError", "ArithmeticError", "ZeroDivisionError", "Exception"})


class _AllReturned(Exception):
    """Internal: every path of an if returned."""


_INLINE_RETURN = "inline"          # (sub_block: an inlined helper's branch returned)
_RETURN_VALUE = "%return"          # (the name its value is merged under; a tuple's items under %return.0 ...)


def _return_shape(a, b):
    """The nesting both sides' returned values share ("leaf", or a tuple of the items'), or None where
    they differ (then the merge cannot pair them)."""
    if isinstance(a, tuple) and isinstance(b, tuple):
        if len(a) != len(b):
            return None
        items = [_return_shape(x, y) for x, y in zip(a, b)]
        return None if any(i is None for i in items) else tuple(items)
    return "leaf" if not isinstance(a, tuple) and not isinstance(b, tuple) else None


def _spread_return(vars_: dict) -> dict:
    """vars with the returned value's leaves under names of their own (merged one by one)."""
    out = dict(vars_)
    todo = [(_RETURN_VALUE, out.pop(_RETURN_VALUE))]
    while todo:
        name, v = todo.pop()
        if isinstance(v, tuple):
            todo += [(f"{name}.{k}", x) for k, x in enumerate(v)]
        else:
            out[name] = v
    return out


def _gather_return(merged: dict, shape, name: str = _RETURN_VALUE):
    if shape == "leaf":
        return merged.pop(name)
    return tuple(_gather_return(merged, s, f"{name}.{k}") for k, s in enumerate(shape))


def _leaves(v):
    return [x for item in v for x in _leaves(item)] if isinstance(v, (tuple, list)) else [v]


class _Conflict:
    def __init__(self, name, line):
        self.name, self.line = name, line


_OPSYM = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
          ast.Pow: "**", ast.MatMult: "@"}


def _subst_const(c, subst):
    if isinstance(c, (Expr, Pred)):
        r = c.subs(subst)
        if isinstance(r, Expr) and r.is_const():
            return r
        return r
    if isinstance(c, tuple):
        return tuple(_subst_const(x, subst) for x in c)
    return c


_LIST_GROW = ("append", "extend", "insert")
_RATIO_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}


_UNBOUND = object()         # (comprehension: a loop name that had no value before it)


class _Lambda:
    """A lambda made in construct: inlined where it is called (FunctionCompiler.inline); called in the scope that
    made it, the names it reads are their values then, as Python binds them (``FunctionCompiler.call``)."""

    def __init__(self, src, self_obj, sig, scope):
        self.src, self.self_obj, self.sig, self.scope = src, self_obj, sig, scope

    def __msvm_inline__(self):
        return self.src, None, self.sig


def _is_callable_arg(v) -> bool:
    """Whether a sub-Cell's argument is something construct calls: a lambda, function, method or Cell."""
    return isinstance(v, (_Lambda, pytypes.FunctionType, pytypes.MethodType)) or (is_cell(v) and not isinstance(v, type))


def _returns(body) -> bool:
    """Whether a block always ends in a return (its last statement is one)."""
    return bool(body) and isinstance(body[-1], ast.Return)


def _is_graph_tuple(v) -> bool:
    return isinstance(v, GraphValue) and isinstance(v.type, TupleType)


def _target_names(target) -> list:
    """The names an assignment target binds (``i``, ``(i, (a, b))``)."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for t in target.elts for n in _target_names(t)]
    return []


def _has_graph(v) -> bool:
    return any(isinstance(x, GraphValue) or (isinstance(x, tuple) and _has_graph(x)) for x in v)


def _has_runtime(v) -> bool:
    """Whether a tuple or list holds (at any depth) a run-time value or a symbolic dim or predicate."""
    return any(isinstance(x, GraphValue) or (isinstance(x, (Expr, Pred)) and x.const_value() is None)
               or (isinstance(x, (tuple, list)) and _has_runtime(x)) for x in v)


def _holds_dims(v) -> bool:
    """Whether a dict (at any depth of its values, tuples and lists) holds a symbolic dim or predicate."""
    if isinstance(v, (Expr, Pred)):
        return v.const_value() is None
    if isinstance(v, dict):
        return any(_holds_dims(x) for x in v.values())
    if isinstance(v, (tuple, list)):
        return any(_holds_dims(x) for x in v)
    return False


def _flag_like(v) -> bool:
    """What a sub-Cell's bool flag may be given: a bool, 0/1, a predicate or an int symbol, a run-time bool or int."""
    if isinstance(v, (bool, np.bool_, Pred, Expr)):
        return True
    if isinstance(v, (int, np.integer)):
        return v in (0, 1)
    return isinstance(v, GraphValue) and isinstance(v.type, ScalarType) and v.type.kind in "bi"


def _truth(v):
    """Python's truth of a compile-time value; of a symbolic int (an int argument, a dim) the
    predicate ``v != 0``, tested at run time as Python would (``if n:``, ``not n``, ``n and f``)."""
    if isinstance(v, Expr) and v.const_value() is None:
        return S.compare("!=", v, 0)
    return bool(v)


def _same_const(a, b) -> bool:
    try:
        return bool(a == b) if not isinstance(a, np.ndarray) else a is b
    except Exception:  # noqa: BLE001
        return a is b


def _describe(node) -> str:
    names = {"While": "a while loop", "Try": "try/except", "With": "a with statement", "Lambda": "a lambda",
             "ListComp": "a list comprehension", "DictComp": "a dict comprehension", "GeneratorExp": "a generator",
             "Yield": "yield", "Global": "global", "Nonlocal": "nonlocal", "Delete": "del", "Raise": "raise",
             "FunctionDef": "a nested def", "ClassDef": "a nested class", "Import": "import",
             "ImportFrom": "import", "Dict": "a dict literal", "Set": "a set literal", "Await": "await",
             "Break": "break", "Continue": "continue", "NamedExpr": "the := operator", "Starred": "*unpacking",
             "Lambda_": "lambda", "SetComp": "a set comprehension"}
    return names.get(type(node).__name__, type(node).__name__)


def _type_symbols(t) -> set:
    if isinstance(t, TensorType):
        return set().union(*(d.symbols() for d in t.shape))
    if isinstance(t, ScalarType) and isinstance(t.value, (Expr, Pred)):
        return set(t.value.symbols())
    return set()


def _reads_parameter(v: GraphValue) -> bool:
    """A Parameter read by construct (under to_float, its cast)."""
    n = v.node
    return n[0] == "param" or (n[0] == "op" and n[1] == "CAST" and n[2][0].node[0] == "param")


def _is_tensor(v) -> bool:
    return hasattr(v, "_pshape") and hasattr(v, "_dtype")


def tensor_type(v) -> TensorType:
    """Static type of a concrete Tensor or a placeholder (its None dims are an error here)."""
    if v._data is not None:
        return TensorType(tuple(Expr.const(d) for d in v._data.shape), v._dtype)
    dims = []
    for i, d in enumerate(v._pshape):
        if d is None:
            raise ShapeError(f"a tensor attribute has an unknown dim {i}")
        dims.append(S.sym(d) if isinstance(d, str) else d if isinstance(d, Expr) else Expr.const(d))
    return TensorType(tuple(dims), v._dtype)


def cell_getattr(cell, name):
    getter = getattr(cell, "__msvm_getattr__", None)
    if getter is not None:
        return getter(name)
    return getattr(cell, name)


def find_cell_path(root, target) -> str | None:
    """The dotted attribute path from root to a sub-Cell (``layers.0.attn``)."""
    if root is None:
        return None
    seen = set()

    def walk(obj, prefix):
        if id(obj) in seen:
            return None
        seen.add(id(obj))
        for name, child in named_children(obj):
            p = f"{prefix}{name}"
            if child is target:
                return p
            r = walk(child, p + ".")
            if r:
                return r
        return None
    return walk(root, "")


def named_children(obj):
    fn = getattr(obj, "__msvm_children__", None)
    if fn is not None:
        return fn()
    return []


class _VarArgs:
    def __repr__(self):
        return "VARARGS"


VARARGS = _VarArgs()
"""The 'default' that marks the ``*args`` parameter in a [(name, default)] parameter list."""


def signature_params(sig: inspect.Signature) -> list:
    """[(name, default or inspect._empty or VARARGS)] of a signature (bound methods: without self); a
    ``**kwargs`` is left out: a call's keywords bind the named parameters only (construct sees {})."""
    return [(p.name, VARARGS if p.kind is inspect.Parameter.VAR_POSITIONAL else p.default)
            for p in sig.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]


def construct_params(cell) -> list:
    """[(name, default or inspect._empty or VARARGS)] of cell.construct, without self."""
    fn = getattr(cell, "__msvm_construct_params__", None)
    if fn is not None:
        return fn()
    return signature_params(inspect.signature(cell.construct))


def vararg_index(params) -> int | None:
    return next((i for i, (_, d) in enumerate(params) if d is VARARGS), None)


def expand_params(params, n_values: int) -> list:
    """The parameter list for a call with n_values arguments: ``*inputs`` becomes one entry per
    extra value, ``inputs_0``, ``inputs_1``, ... (the frontend gives construct the tuple of them)."""
    vi = vararg_index(params)
    if vi is None:
        return list(params)
    name = params[vi][0]
    return list(params[:vi]) + [(f"{name}_{k}", inspect.Parameter.empty) for k in range(max(n_values - vi, 0))]


def bind_arguments(params, args, kwargs: dict, label: str) -> list:
    """The values of ``params`` ([(name, default)]) for a call, Python's rules; the TypeError for a
    bad call names ``label`` (``Net.construct()``, ``fn()``) and the parameters, as Python does.
    A ``*args`` parameter takes the positionals past the ones before it."""
    vi = vararg_index(params)
    if vi is not None:       # construct(self, x, *inputs): the positionals past x are the tuple
        return bind_arguments(params[:vi], args[:vi], kwargs, label) + list(args[vi:])
    if len(args) > len(params):
        raise _call_error(params, args, kwargs, label)
    values, rest = list(args), dict(kwargs)
    for name, default in params[len(args):]:
        if name in rest:
            values.append(rest.pop(name))
        elif default is not inspect.Parameter.empty:
            values.append(default)
        else:
            raise _call_error(params, args, kwargs, label)
    if rest:
        raise _call_error(params, args, kwargs, label)
    return values


def _call_error(params, args, kwargs: dict, label: str) -> TypeError:
    """What is wrong with a call, in Python's order and words."""
    names = [n for n, _ in params]
    if len(args) > len(params):
        listed = f" ({', '.join(names)})" if names else ""
        return TypeError(f"{label} takes {len(params)} argument{'s' if len(params) != 1 else ''}{listed} but "
                         f"{len(args)} were given")
    unknown = sorted(k for k in kwargs if k not in names)
    if unknown:
        return TypeError(f"{label} got an unexpected keyword argument '{unknown[0]}'")
    twice = [n for n in names[:len(args)] if n in kwargs]
    if twice:
        return TypeError(f"{label} got multiple values for argument '{twice[0]}'")
    missing = [n for n, d in params[len(args):] if n not in kwargs and d is inspect.Parameter.empty]
    return TypeError(f"{label} missing {len(missing)} required argument{'s' if len(missing) > 1 else ''}: "
                     + ", ".join(f"'{n}'" for n in missing))


# ---------------------------------------------------------------- compiling Cells

_cell_codes: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _isinstance_of_runtime(v, classes) -> bool:
    """(model zoo) isinstance on a run-time value, by what it is when the code runs: a symbolic dim
    is an int, a predicate a bool, a tensor value a Tensor, a scalar value its kind's Python type."""
    from ..tensor import Tensor

    if isinstance(v, Expr):
        probe = int
    elif isinstance(v, Pred):
        probe = bool
    elif isinstance(v.type, TensorType):
        probe = Tensor
    elif isinstance(v.type, ScalarType):
        probe = {"b": bool, "i": int, "u": int, "f": float}.get(v.type.kind, object)
    elif isinstance(v.type, TupleType):
        probe = tuple
    else:
        probe = object
    classes = classes if isinstance(classes, tuple) else (classes,)
    return any(issubclass(probe, c) for c in classes if isinstance(c, type))


def _flat_specs(specs) -> list:
    return [x for s in specs for x in (_flat_specs(s.value) if s.kind == "tuple" else [s])]


def _runtime_values(spec, v) -> list:
    """The run-time values an argument passes for its spec (none for a constant, one per item of a tuple)."""
    if spec.kind == "const":
        return []
    if spec.kind == "tuple":
        return [r for s, x in zip(spec.value, v) for r in _runtime_values(s, x)]
    return [v]


def spec_key(specs) -> tuple:
    out = []
    for s in specs:
        if s.kind == "tuple":
            out.append(("t", spec_key(s.value)))
        elif s.kind == "const":
            v = s.value
            try:
                hash(v)
                out.append(("c", type(v).__name__, v))
            except TypeError:
                out.append(("c", "id", id(v)))
        else:
            out.append((s.kind, s.type, tuple(sorted(s.may_be_one))))
    return tuple(out)


def compile_cell_for(cell, specs, name: str | None = None, generation: int = 0):
    """Compile (and verify) cell.construct for these argument specs; cached per cell and
    ``generation`` (the run time passes its counter ``tensor.PARAMETER_SHAPES``, bumped by a
    Parameter's new shape and by an attribute set on a compiled Cell, so either compiles afresh;
    static analysis builds new Cells and passes nothing)."""
    try:
        cache = _cell_codes.setdefault(cell, {})
    except TypeError:
        cache = {}
    # the mixed-precision dtype (Cell.to_float) and self.training (set_train), which construct reads as
    # constants, each select a Code of their own
    key = (spec_key(specs), generation, getattr(cell, "__dict__", {}).get("_mixed_precision"),
           bool(getattr(cell, "training", False)))
    code = cache.get(key)
    if code is not None:
        return code
    for k in [k for k in cache if k[1] < generation]:    # (Codes of an older generation are never asked again)
        del cache[k]
    src_fn = getattr(cell, "__msvm_construct_source__", None)
    src = src_fn() if src_fn is not None else source_of(type(cell).construct)
    qual = name or f"{type(cell).__name__}.construct"
    fc = FunctionCompiler(src, cell, specs, qual, generation=generation)
    code = fc.compile()
    code.hover = fc.hover
    verify(code)
    cache[key] = code
    return code


def compile_function(fn, specs, name: str | None = None):
    """Compile a plain (jit) function for these argument specs."""
    src = source_of(fn) if not isinstance(fn, FunctionSource) else fn
    fc = FunctionCompiler(src, None, specs, name or src.qualname)
    code = fc.compile()
    code.hover = fc.hover
    verify(code)
    return code


__all__ = ["ArgSpec", "FunctionCompiler", "FunctionSource", "compile_cell_for", "compile_function", "source_of"]
