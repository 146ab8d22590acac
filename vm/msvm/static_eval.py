"""The bounded abstract evaluator behind ``msvm.static``: a Python file's top level,
its functions and each Cell's ``__init__``, evaluated without running anything.

Values are Python constants (folded), msvm placeholders (tensors with a shape and
no data), ``AbstractArray`` (a numpy array known by shape and dtype), ``SymInt``
(an int nobody passed: a constructor argument with no call site; a symbol where it
becomes a dim, its ``assumed`` value where a decision needs one, with a note) and
``UnknownData`` (a tensor whose data, hence shape, comes from outside: its rank and
dims are chosen when the Cell is compiled). Everything else is ``Unknown``.

What it may build is an allowlist: msvm's Tensor / Parameter, the Cells of
``msvm.nn``, the primitives of ``msvm.ops`` and dtypes, all as placeholders (no
data is allocated: ``np.zeros((10**6, 10**6))`` is a shape). Any other call, user
class or msvm object (``Telemetry``, ``open``, sockets, threads) is ``Unknown`` and
never runs.

Calls of the file's own functions and of the methods of a Cell being built are
evaluated (factories nobody calls are evaluated once, their arguments from defaults or
symbols); a relative import reads the package's other file the same way (never runs it).

It is bounded (``Budget``): steps and seconds per slice of work, loop iterations,
the size of an int (bits), of a string or container and of all of them together;
what it cannot afford becomes ``Unknown`` and leaves a ``Note`` (an Information
diagnostic in the editor, a ``; note:`` line in ``msvm dump``); a slice that runs
out stops there and the Cells still get their bytecode.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import math
import operator as o
import os
import time
from dataclasses import dataclass, field

import numpy as np

from . import dtype as dt
from .bytecode.symbolic import Expr
from .errors import FrontendError
from .frontend.compiler import FunctionSource, signature_params, source_of
from .nn.cell import Cell
from .static_values import (
    BUILTIN_FNS,
    BUILTINS,
    MATH_FOLD,
    NP_CREATE,
    NP_FOLD,
    NP_RANDOM,
    AbstractArray,
    AbstractRng,
    Budget,
    Note,
    SymInt,
    Unknown,
    UnknownData,
    abstract_init,
    allowed_module,
    array_binop,
    build_with_symbols,
    buildable,
    is_msvm_obj,
    jit_fn,
    np_call,
    parameter,
    placeholder,
    resolve_module,
    shape_tuple,
    to_msvm,
)
from .tensor import Parameter, Tensor


class OutOfBudget(Exception):
    """A slice of evaluation spent its steps or seconds."""

    def __init__(self, what: str):
        super().__init__(what)
        self.what = what


class _Return(BaseException):
    def __init__(self, value):
        self.value = value


class _Break(BaseException):
    pass


class _Continue(BaseException):
    pass


@dataclass
class StaticFunction:
    node: ast.FunctionDef
    module: "StaticModule"
    jit: bool = False
    calls: list = field(default_factory=list)
    env: dict | None = None         # where it was defined (None: the module)

    @property
    def name(self):
        return self.node.name

    def source(self) -> FunctionSource:
        return FunctionSource(self.node, self.module.filename, 0, 0, self.module.env, {}, self.node.name)

    def signature(self, skip_self=False, kwonly=False):
        return _signature(self.node, self.module, skip_self, kwonly)

    def __msvm_inline__(self):
        return self.source(), None, self.signature()


class StaticBoundMethod:
    def __init__(self, fn: StaticFunction, obj):
        self.fn, self.obj = fn, obj

    def __msvm_inline__(self):
        src = self.fn.source()
        src.qualname = f"{type(self.obj).__name__}.{self.fn.name}"
        return src, self.obj, self.fn.signature()


def _signature(node: ast.FunctionDef, module, skip_self=False, kwonly=False) -> inspect.Signature:
    """The positional parameters (as the frontend compiles them); ``kwonly``: keyword-only ones too
    (to bind a call the evaluator makes)."""
    a = node.args
    params = []
    pos = a.posonlyargs + a.args
    defaults = [None] * (len(pos) - len(a.defaults)) + list(a.defaults)
    for i, (arg, d) in enumerate(zip(pos, defaults)):
        if skip_self and i == 0:
            continue
        default = inspect.Parameter.empty if d is None else module.eval(d, module.env)
        params.append(inspect.Parameter(arg.arg, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default))
    if kwonly and a.vararg is not None:
        params.append(inspect.Parameter(a.vararg.arg, inspect.Parameter.VAR_POSITIONAL))
    for arg, d in zip(a.kwonlyargs if kwonly else [], a.kw_defaults):
        default = inspect.Parameter.empty if d is None else module.eval(d, module.env)
        params.append(inspect.Parameter(arg.arg, inspect.Parameter.KEYWORD_ONLY, default=default))
    if kwonly and a.kwarg is not None:
        params.append(inspect.Parameter(a.kwarg.arg, inspect.Parameter.VAR_KEYWORD))
    return inspect.Signature(params)


class StaticClass:
    def __init__(self, node: ast.ClassDef, module: "StaticModule", bases):
        self.node, self.module, self.bases = node, module, bases
        self.name = node.name
        self.methods = {n.name: StaticFunction(n, module) for n in node.body if isinstance(n, ast.FunctionDef)}
        self.attrs = {}
        for st in node.body:
            if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
                self.attrs[st.targets[0].id] = module.eval(st.value, module.env)
            elif isinstance(st, ast.AnnAssign) and st.value is not None and isinstance(st.target, ast.Name):
                self.attrs[st.target.id] = module.eval(st.value, module.env)      # expansion: int = 4
        self.instances: list = []

    @property
    def is_cell(self) -> bool:
        for b in self.bases:
            if isinstance(b, StaticClass) and b.is_cell:
                return True
            if isinstance(b, type) and issubclass(b, Cell):
                return True
        return False

    def real_base(self):
        for b in self.bases:
            if isinstance(b, StaticClass):
                r = b.real_base()
                if r is not None:
                    return r
            elif isinstance(b, type) and issubclass(b, Cell):
                return b
        return None

    def find_method(self, name):
        if name in self.methods:
            return self.methods[name]
        for b in self.bases:
            if isinstance(b, StaticClass):
                m = b.find_method(name)
                if m is not None:
                    return m
        return None

    def find_attr(self, name):
        if name in self.attrs:
            return self.attrs[name]
        for b in self.bases:
            if isinstance(b, StaticClass):
                try:
                    return b.find_attr(name)
                except KeyError:
                    pass
        raise KeyError(name)

    def __call__(self, *args, **kwargs):
        return self.module.instantiate(self, args, kwargs)


class StaticCell(Cell):
    """A Cell built from source: what the frontend sees when nothing may run."""

    _static_class: StaticClass = None

    def __msvm_getattr__(self, name):
        d = self.__dict__
        if name in d:
            v = d[name]
            if isinstance(v, (Unknown, UnknownData, SymInt)):
                from .bytecode.types import ShapeError
                why = v.why if not isinstance(v, SymInt) else f"{v.name}: {v.why}"
                raise ShapeError(f"self.{name} cannot be known without running the program ({why})")
            return v
        m = self._static_class.find_method(name)
        if m is not None:
            return StaticBoundMethod(m, self)
        try:
            return self._static_class.find_attr(name)
        except KeyError:
            pass
        base = self._static_class.real_base()
        if base is not None and hasattr(base, name):
            return getattr(self, name)
        raise AttributeError(name)

    def _base_construct(self):
        base = self._static_class.real_base()
        return base.construct if base is not None and base is not Cell else None

    def __msvm_construct_source__(self):
        m = self._static_class.find_method("construct")
        if m is None and self._base_construct() is not None:
            return source_of(self._base_construct())         # class Dropout(nn.Dropout): only __init__
        if m is None:
            raise FrontendError(f"{type(self).__name__} has no construct()", self._static_class.module.filename,
                                self._static_class.node.lineno, self._static_class.node.col_offset)
        return m.source()

    def __msvm_construct_params__(self):
        m = self._static_class.find_method("construct")
        if m is None and self._base_construct() is not None:
            return signature_params(inspect.signature(self._base_construct()))[1:]
        if m is None:
            self.__msvm_construct_source__()        # (raises: no construct at all)
        return signature_params(m.signature(skip_self=True))


class _Self:
    """super() inside __init__: ``super().__init__(...)`` runs the msvm base's __init__ (when the
    Cell extends one, such as nn.Dropout) on placeholders; otherwise it does nothing."""

    def __init__(self, obj):
        self.obj = obj

    def init(self, *args, **kwargs):
        base = self.obj._static_class.real_base() if isinstance(self.obj, StaticCell) else None
        if base is None or base is Cell:
            return None
        _init_real_base(base, self.obj, args, kwargs)
        return None


def _init_real_base(base, obj, args, kwargs):
    if not buildable(base):
        raise ValueError(f"{base.__name__} is not a class the analysis builds")
    args = [to_msvm(a) for a in args]
    kwargs = {k: to_msvm(v) for k, v in kwargs.items()}
    if any(isinstance(a, (Unknown, SymInt, UnknownData)) for a in list(args) + list(kwargs.values())):
        raise ValueError("the msvm base of a Cell built from unknown arguments")
    with abstract_init():
        base.__init__(obj, *args, **kwargs)


class StaticNamespace:
    """A module of the document's package (a relative import), evaluated abstractly."""

    def __init__(self, module: "StaticModule"):
        self.module = module


def _size(v) -> int:
    return len(v) if isinstance(v, (str, list, tuple, range, bytes)) else 0


class StaticModule:
    """The abstract evaluation of one Python source file."""

    MAX_IMPORTS = 16        # files of the package read for relative imports, per document
    MAX_IMPORT_DEPTH = 3

    def __init__(self, source: str, filename: str, budget: Budget | None = None, imports: dict | None = None,
                 import_depth: int = 0, started: float | None = None):
        self.filename = filename
        self.source = source
        self.budget = budget or Budget()
        self.tree = ast.parse(source, filename)
        self.imports = {} if imports is None else imports     # path -> StaticNamespace (shared)
        self.import_depth = import_depth
        self.env: dict = {"__name__": "__main__" if import_depth == 0 else os.path.basename(filename)[:-3]}
        self.classes: list = []
        self.functions: list = []
        self.instances: list = []    # (StaticCell, assigned name or None)
        self.notes: list = []
        self.allocated = 0           # items of strings / containers made so far (total_size)
        self.depth = 0
        self.cells_built = 0         # user Cells instantiated so far
        self.line = 1
        self.started = time.monotonic() if started is None else started
        self.slice("the module's top level")
        body = self.tree.body
        for k, st in enumerate(body):
            try:
                self.exec_block([st], self.env, module_level=True)
            except OutOfBudget as e:
                self.note(f"analysis of the module stopped here: {e.what}; the Cells are compiled from what was seen")
                self.define(body[k + 1:])
                break
            except (_Return, _Break, _Continue):
                pass
        if import_depth == 0:
            self.run_uncalled_functions()

    def define(self, stmts):
        """After the budget ran out: only the imports, classes and functions of the rest."""
        self.slice("the definitions after it", 0.25)
        try:
            self.exec_block([st for st in stmts if isinstance(st, (ast.Import, ast.ImportFrom, ast.ClassDef,
                                                                   ast.FunctionDef))], self.env, module_level=True)
        except (OutOfBudget, _Return, _Break, _Continue):
            pass

    # --- relative imports: other files of the package, read (never run) the same way
    def import_relative(self, st: ast.ImportFrom, env):
        pkg = os.path.dirname(os.path.abspath(self.filename))
        for _ in range(st.level - 1):
            pkg = os.path.dirname(pkg)
        target = os.path.join(pkg, *(st.module.split(".") if st.module else []))
        for a in st.names:
            value = self.load(os.path.join(target, a.name))       # a submodule
            if value is None:
                mod = self.load(target)
                value = mod.module.env.get(a.name, Unknown(f"{a.name} of {mod.module.filename}")) if mod else \
                    Unknown(f"import {'.' * st.level}{st.module or ''}")
            env[a.asname or a.name] = value

    def load(self, base: str):
        """The StaticNamespace of base.py or base/__init__.py, evaluated once per document."""
        path = next((p for p in (base + ".py", os.path.join(base, "__init__.py")) if os.path.isfile(p)), None)
        if path is None or self.import_depth >= self.MAX_IMPORT_DEPTH:
            return None
        if path in self.imports:
            return self.imports[path]
        if len(self.imports) >= self.MAX_IMPORTS or os.path.getsize(path) > 1 << 20:
            return None
        self.imports[path] = None       # (an import cycle sees nothing)
        try:
            with open(path, encoding="utf-8") as f:
                module = StaticModule(f.read(), path, self.budget, self.imports, self.import_depth + 1, self.started)
        except (OSError, SyntaxError, ValueError, RecursionError):
            return None
        self.imports[path] = StaticNamespace(module)
        return self.imports[path]

    # --- budget and notes
    def slice(self, what: str, share: float = 1.0):
        """Start a new slice of work with a fresh step and time allowance: its share of the
        slice budget, within what is left of the document's, and at least ``min_seconds`` (so
        a Cell defined or built after a slow top level still gets its bytecode)."""
        self.what = what
        self.steps_left = int(self.budget.steps * share)
        now = time.monotonic()
        left = self.started + self.budget.total_seconds
        self.deadline = max(min(now + self.budget.seconds * share, left), now + self.budget.min_seconds)

    def tick(self):
        self.steps_left -= 1
        if self.steps_left < 0:
            raise OutOfBudget(f"{self.budget.steps} steps spent on {self.what}")
        if self.steps_left & 63 == 0 and time.monotonic() > self.deadline:
            raise OutOfBudget(f"the time for {self.what} is spent")

    def note(self, message: str, node=None):
        line = getattr(node, "lineno", None) or self.line
        col = getattr(node, "col_offset", 0) if node is not None else 0
        if not any(n.line == line and n.message == message for n in self.notes) and len(self.notes) < 100:
            self.notes.append(Note(line, col, message))

    def afford(self, v):
        """v, or Unknown (with a note) when it is larger than the budget allows."""
        if isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > self.budget.int_bits:
            self.note(f"an integer of more than {self.budget.int_bits} bits is not evaluated")
            return Unknown("an integer too large to evaluate")
        n = _size(v) if not isinstance(v, range) else 0
        if n:
            if n > self.budget.size:
                self.note(f"a value of {n} items is not evaluated (the analysis keeps at most {self.budget.size})")
                return Unknown("a value too large to evaluate")
            self.allocated += n
            if self.allocated > self.budget.total_size:
                self.note("the analysis of this file made its share of strings and lists; later ones are unknown")
                return Unknown("the file's memory budget is spent")
        return v

    def afford_dict(self, d: dict):
        if len(d) > self.budget.size:
            return Unknown("a dict too large to evaluate")
        self.allocated += len(d)
        return d

    def concrete(self, v, node=None):
        """A SymInt's assumed value (noted), other values unchanged."""
        if isinstance(v, SymInt):
            self.note(f"assumed {v.name} = {v.assumed} (its value is not known statically; structure that "
                      f"depends on it follows this value)", node)
            return v.assumed
        return v

    # --- statements
    def exec_block(self, stmts, env, module_level=False, self_obj=None):
        for st in stmts:
            try:
                self.exec_stmt(st, env, module_level, self_obj)
            except (OutOfBudget, _Return, _Break, _Continue):
                raise
            except Exception:  # noqa: BLE001 - static analysis never fails on odd code
                continue

    def exec_stmt(self, st, env, module_level, self_obj):
        self.tick()
        self.line = st.lineno
        if isinstance(st, ast.Import):
            for a in st.names:
                mod = resolve_module(a.name)
                env[(a.asname or a.name).split(".")[0]] = mod if a.asname or "." not in a.name else \
                    resolve_module(a.name.split(".")[0])
        elif isinstance(st, ast.ImportFrom) and st.level:
            self.import_relative(st, env)
        elif isinstance(st, ast.ImportFrom):
            base = st.module or ""
            for a in st.names:
                mod = resolve_module(f"{base}.{a.name}")
                if isinstance(mod, Unknown):
                    parent = resolve_module(base)
                    mod = getattr(parent, a.name, Unknown(f"{base}.{a.name}")) if not isinstance(parent, Unknown) \
                        else Unknown(f"import {base}")
                env[a.asname or a.name] = mod
        elif isinstance(st, ast.ClassDef):
            bases = [self.eval(b, env) for b in st.bases]
            c = StaticClass(st, self, bases)
            env[st.name] = c
            if module_level:
                self.classes.append(c)
        elif isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)):
            f = StaticFunction(st, self, env=None if module_level else env)
            for dec in st.decorator_list:
                target = dec.func if isinstance(dec, ast.Call) else dec
                v = self.eval(target, env)
                if v is jit_fn():
                    f.jit = True
            env[st.name] = f
            if module_level:
                self.functions.append(f)
        elif isinstance(st, (ast.Assign, ast.AnnAssign)):
            if st.value is None:
                return
            value = self.eval(st.value, env, self_obj)
            targets = st.targets if isinstance(st, ast.Assign) else [st.target]
            for t in targets:
                self.assign(t, value, env, self_obj)
        elif isinstance(st, ast.AugAssign) and isinstance(st.target, ast.Name):
            cur = env.get(st.target.id, self.env.get(st.target.id))
            rhs = self.eval(st.value, env, self_obj)
            env[st.target.id] = self.binop(type(st.op), cur, rhs)
        elif isinstance(st, ast.Expr):
            self.eval(st.value, env, self_obj)
        elif isinstance(st, ast.If):
            test = self.concrete(self.eval(st.test, env, self_obj), st)
            if isinstance(test, (Unknown, Tensor, AbstractArray, UnknownData)):
                self.note("this condition is not known statically; the analysis assumed it true", st)
                test = True
            self.exec_block(st.body if test else st.orelse, env, module_level, self_obj)
        elif isinstance(st, ast.For):
            self.exec_for(st, env, module_level, self_obj)
        elif isinstance(st, ast.While):
            self.exec_while(st, env, module_level, self_obj)
        elif isinstance(st, ast.Try) or type(st).__name__ == "TryStar":
            try:
                self.exec_block(st.body, env, module_level, self_obj)
            finally:
                self.exec_block(st.orelse + st.finalbody, env, module_level, self_obj)
        elif isinstance(st, ast.With):
            for item in st.items:
                if item.optional_vars is not None:
                    self.assign(item.optional_vars, Unknown("a with statement's value"), env, self_obj)
            self.exec_block(st.body, env, module_level, self_obj)
        elif isinstance(st, ast.Return):
            raise _Return(None if st.value is None else self.eval(st.value, env, self_obj))
        elif isinstance(st, ast.Break):
            raise _Break()
        elif isinstance(st, ast.Continue):
            raise _Continue()

    def _loop_body(self, st, env, module_level, self_obj) -> bool:
        """Run one iteration; False when the loop breaks."""
        try:
            self.exec_block(st.body, env, module_level, self_obj)
        except _Break:
            return False
        except _Continue:
            pass
        return True

    def exec_for(self, st, env, module_level, self_obj):
        seq = self.eval(st.iter, env, self_obj)
        if isinstance(seq, (range, list, tuple, str)):
            cap = self.budget.loop
            for k, v in enumerate(seq):
                if k >= cap:
                    self.note(f"loop stopped after {cap} of {len(seq)} iterations (the analysis does not run "
                              f"loops to the end)", st)
                    return
                self.assign(st.target, v, env, self_obj)
                if not self._loop_body(st, env, module_level, self_obj):
                    return
            self.exec_block(st.orelse, env, module_level, self_obj)

    def exec_while(self, st, env, module_level, self_obj):
        for _ in range(self.budget.loop):
            test = self.concrete(self.eval(st.test, env, self_obj), st)
            if isinstance(test, Unknown) or not isinstance(test, (bool, int, float, str, list, tuple)):
                return
            if not test:
                self.exec_block(st.orelse, env, module_level, self_obj)
                return
            if not self._loop_body(st, env, module_level, self_obj):
                return
        self.note(f"loop stopped after {self.budget.loop} iterations (the analysis does not run loops to the end)",
                  st)

    def assign(self, target, value, env, self_obj):
        if isinstance(target, ast.Name):
            env[target.id] = value
            if isinstance(value, StaticCell):
                self.instances.append((value, target.id))
        elif isinstance(target, (ast.Tuple, ast.List)):
            if isinstance(value, (tuple, list)) and len(value) == len(target.elts):
                for t, v in zip(target.elts, value):
                    self.assign(t, v, env, self_obj)
            else:
                for t in target.elts:
                    self.assign(t, Unknown("unpacking"), env, self_obj)
        elif isinstance(target, ast.Attribute):
            obj = self.eval(target.value, env, self_obj)
            if isinstance(obj, StaticCell) and (obj is self_obj):
                if isinstance(value, UnknownData):
                    value.line, value.col = target.lineno, target.col_offset
                object.__setattr__(obj, target.attr, value) if isinstance(value, (UnknownData, SymInt)) \
                    else setattr(obj, target.attr, value)

    # --- expressions
    def eval(self, node, env, self_obj=None):
        try:
            return self._eval(node, env, self_obj)
        except (OutOfBudget, _Return, _Break, _Continue):
            raise
        except Exception as e:  # noqa: BLE001
            return Unknown(f"{type(e).__name__}: {e}")

    def _eval(self, node, env, self_obj):
        self.tick()
        ev = lambda n: self.eval(n, env, self_obj)  # noqa: E731
        if isinstance(node, ast.Constant):
            return self.afford(node.value)
        if isinstance(node, ast.Name):
            if node.id in env:
                return env[node.id]
            if node.id in self.env:
                return self.env[node.id]
            if node.id in BUILTINS:
                return getattr(builtins, node.id)
            return Unknown(f"name {node.id}")
        if isinstance(node, (ast.Tuple, ast.List)):
            vals = []
            for e in node.elts:
                if isinstance(e, ast.Starred):
                    v = ev(e.value)
                    if not isinstance(v, (list, tuple)):
                        return Unknown("*unpacking")
                    vals.extend(v)
                else:
                    vals.append(ev(e))
            return self.afford(tuple(vals) if isinstance(node, ast.Tuple) else vals)
        if isinstance(node, ast.Dict):
            out = {}
            for k, v in zip(node.keys, node.values):
                if k is None:       # {**other}
                    other = ev(v)
                    if not isinstance(other, dict):
                        return Unknown("**unpacking")
                    out.update(other)
                    continue
                key = ev(k)
                if isinstance(key, (Unknown, SymInt, UnknownData)) or not isinstance(key, (str, int, float, bool,
                                                                                            tuple, type(None))):
                    return Unknown("a dict with unknown keys")
                out[key] = ev(v)
            return self.afford_dict(out)
        if isinstance(node, ast.Attribute):
            base = ev(node.value)
            return self.getattr(base, node.attr)
        if isinstance(node, ast.BinOp):
            return self.binop(type(node.op), ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp):
            v = self.concrete(ev(node.operand), node)
            if isinstance(v, (int, float, bool)):
                return {ast.USub: lambda: -v, ast.UAdd: lambda: v, ast.Not: lambda: not v,
                        ast.Invert: lambda: ~v}[type(node.op)]()
            return Unknown("unary operator")
        if isinstance(node, ast.Compare):
            raw = [ev(node.left)] + [ev(c) for c in node.comparators]
            if all(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops) and len(raw) == 2 and \
                    not any(isinstance(v, Unknown) for v in raw):      # (a symbol is an int, never None)
                return (raw[0] is raw[1]) == isinstance(node.ops[0], ast.Is)
            vals = [self.concrete(v, node) for v in raw]
            if all(isinstance(v, (int, float, str, bool, type(None))) for v in vals):
                table = {ast.Eq: o.eq, ast.NotEq: o.ne, ast.Lt: o.lt, ast.LtE: o.le, ast.Gt: o.gt,
                         ast.GtE: o.ge, ast.Is: o.is_, ast.IsNot: o.is_not}
                return all(table[type(op)](a, b) for op, a, b in zip(node.ops, vals, vals[1:]))
            return Unknown("comparison")
        if isinstance(node, ast.BoolOp):
            vals = [self.concrete(ev(v), node) for v in node.values]
            if any(isinstance(v, Unknown) for v in vals):
                return Unknown("boolean expression")
            return all(vals) if isinstance(node.op, ast.And) else any(vals)
        if isinstance(node, ast.IfExp):
            t = self.concrete(ev(node.test), node)
            if isinstance(t, Unknown):
                return t
            return ev(node.body) if t else ev(node.orelse)
        if isinstance(node, ast.Subscript):
            base, idx = ev(node.value), self.concrete(ev(node.slice), node)
            if isinstance(base, (tuple, list, dict, str)) and not isinstance(idx, Unknown):
                return self.afford(base[idx])
            if isinstance(base, Cell) and isinstance(idx, int):
                return base[idx]
            return Unknown("subscript")
        if isinstance(node, ast.Slice):
            return slice(*(None if p is None else self.concrete(ev(p), node)
                           for p in (node.lower, node.upper, node.step)))
        if isinstance(node, ast.ListComp) and len(node.generators) == 1 and not node.generators[0].ifs:
            g = node.generators[0]
            seq = ev(g.iter)
            if not isinstance(seq, (range, list, tuple)) or len(seq) > self.budget.loop:
                return Unknown("comprehension")
            out = []
            for v in seq:
                inner = dict(env)
                self.assign(g.target, v, inner, self_obj)
                out.append(self.eval(node.elt, inner, self_obj))
            return out
        if isinstance(node, ast.Call):
            return self.call(node, env, self_obj)
        return Unknown(type(node).__name__)

    def getattr(self, base, attr):
        if isinstance(base, Unknown):
            return base
        if isinstance(base, _Self):
            return base.init if attr == "__init__" else Unknown(f"super().{attr}")
        if attr.startswith("__"):
            return Unknown(f"attribute {attr}")      # (2).__pow__(...) would skip the budget
        if isinstance(base, StaticCell):
            try:
                return base.__msvm_getattr__(attr)
            except Exception:  # noqa: BLE001
                return Unknown(f"self.{attr}")
        if isinstance(base, StaticNamespace):
            return base.module.env.get(attr, Unknown(f"{attr} of {base.module.filename}"))
        if isinstance(base, StaticClass):
            m = base.find_method(attr)
            if m is not None:
                return m
            try:
                return base.find_attr(attr)          # block.expansion
            except KeyError:
                return Unknown(f"{base.name}.{attr}")
        if isinstance(base, AbstractArray):
            if attr in ("shape", "dtype", "ndim", "T", "astype", "reshape"):
                return getattr(base, attr)
            return Unknown(f"array.{attr}")
        if isinstance(base, AbstractRng):
            return getattr(base, attr)
        if isinstance(base, list) and attr in ("append", "extend", "insert", "index", "count", "copy"):
            return _ListMethod(self, base, attr)
        if isinstance(base, dict) and attr in ("get", "items", "keys", "values", "copy"):
            return _DictMethod(base, attr)
        mod = getattr(base, "__name__", "") if inspect.ismodule(base) else ""
        if inspect.ismodule(base) and not allowed_module(mod):
            return Unknown(f"{mod}.{attr}")
        if inspect.ismodule(base) or is_msvm_obj(base) or isinstance(base, (dt.DType, Tensor, int, float, tuple)):
            return getattr(base, attr)
        return Unknown(f"attribute {attr}")

    def binop(self, op, a, b):
        if isinstance(a, SymInt) or isinstance(b, SymInt):
            return self.sym_binop(op, a, b)
        if isinstance(a, AbstractArray) or isinstance(b, AbstractArray):
            return array_binop(a, b)
        table = {ast.Add: o.add, ast.Sub: o.sub, ast.Mult: o.mul, ast.Div: o.truediv, ast.FloorDiv: o.floordiv,
                 ast.Mod: o.mod, ast.Pow: o.pow}
        ok = (int, float, bool, tuple, list, str)
        if not (isinstance(a, ok) and isinstance(b, ok) and op in table):
            return Unknown("arithmetic on unknown values")
        bits = self.budget.int_bits
        if op is ast.Pow and isinstance(a, int) and isinstance(b, int) and abs(a) > 1 and b > 0 and \
                b * a.bit_length() > bits + 64:
            self.note(f"a power larger than {bits} bits is not evaluated")
            return Unknown("a power too large to evaluate")
        if op is ast.Mult and isinstance(a, int) and isinstance(b, int) and \
                a.bit_length() + b.bit_length() > bits + 64:
            self.note(f"a product larger than {bits} bits is not evaluated")
            return Unknown("a product too large to evaluate")
        if op is ast.Mult and (isinstance(a, (tuple, list, str)) or isinstance(b, (tuple, list, str))):
            seq, n = (a, b) if isinstance(a, (tuple, list, str)) else (b, a)
            if isinstance(n, int) and n > 0 and len(seq) * n > self.budget.size:
                self.note(f"a value of {len(seq) * n} items is not evaluated (the analysis keeps at most "
                          f"{self.budget.size})")
                return Unknown("a value too large to evaluate")
        if op is ast.Mod and isinstance(a, str):
            return Unknown("%-formatting")
        if op is ast.Add and isinstance(a, (str, list, tuple)) and isinstance(b, type(a)) and \
                len(a) + len(b) > self.budget.size:
            self.note(f"a value of {len(a) + len(b)} items is not evaluated (the analysis keeps at most "
                      f"{self.budget.size})")
            return Unknown("a value too large to evaluate")
        return self.afford(table[op](a, b))

    def sym_binop(self, op, a, b):
        a, b = (int(v) if isinstance(v, float) and v.is_integer() else v for v in (a, b))   # (channels * 1.0)
        ea = a.expr if isinstance(a, SymInt) else a
        eb = b.expr if isinstance(b, SymInt) else b
        va = a.assumed if isinstance(a, SymInt) else a
        vb = b.assumed if isinstance(b, SymInt) else b
        table = {ast.Add: o.add, ast.Sub: o.sub, ast.Mult: o.mul, ast.FloorDiv: o.floordiv}
        if op not in table or not all(isinstance(v, int) and not isinstance(v, bool) for v in (va, vb)):
            return Unknown("arithmetic on a symbol")
        try:
            return SymInt(table[op](ea if isinstance(ea, Expr) else Expr.const(ea), eb), table[op](va, vb))
        except Exception:  # noqa: BLE001
            return Unknown("arithmetic on a symbol")

    def call_args(self, node, env, self_obj):
        args = []
        for a in node.args:
            if isinstance(a, ast.Starred):
                v = self.eval(a.value, env, self_obj)
                if not isinstance(v, (list, tuple)):
                    return None, None
                args.extend(v)
            else:
                args.append(self.eval(a, env, self_obj))
        kwargs = {}
        for k in node.keywords:
            if k.arg:
                kwargs[k.arg] = self.eval(k.value, env, self_obj)
            else:
                v = self.eval(k.value, env, self_obj)
                if not isinstance(v, dict):
                    return None, None
                kwargs.update(v)
        return args, kwargs

    def call(self, node, env, self_obj):
        fn = self.eval(node.func, env, self_obj)
        if fn is builtins.super:
            return _Self(self_obj)
        args, kwargs = self.call_args(node, env, self_obj)
        if args is None:
            return Unknown("*args")
        if isinstance(fn, Unknown):
            return self.unknown_builder(fn, args, kwargs, node)
        if isinstance(fn, StaticClass):
            return self.instantiate(fn, args, kwargs) if fn.is_cell else Unknown(f"instance of {fn.name}")
        if isinstance(fn, StaticCell):
            fn_calls = fn.__dict__.get("_static_calls")
            if fn_calls is None:
                object.__setattr__(fn, "_static_calls", [])
            if len(fn._static_calls) < self.budget.calls_kept:
                fn._static_calls.append((args, kwargs))
            return Unknown(f"result of calling {type(fn).__name__}")
        if isinstance(fn, StaticFunction):
            if len(fn.calls) < self.budget.calls_kept:
                fn.calls.append((args, kwargs))
            if fn.jit:
                return Unknown(f"result of {fn.name}()")
            return self.call_function(fn, args, kwargs, node)
        if isinstance(fn, StaticBoundMethod) and fn.obj is self_obj and fn.fn.name != "construct":
            return self.call_function(fn.fn, [fn.obj] + list(args), kwargs, node, self_obj=fn.obj)
        if fn is builtins.int and len(args) == 1 and isinstance(args[0], SymInt):
            return args[0]
        if fn is jit_fn():
            if args and isinstance(args[0], StaticFunction):
                args[0].jit = True
                return args[0]
            return Unknown("jit")
        big = [a for a in list(args) + list(kwargs.values()) if _size(a) > self.budget.size]
        if big and fn not in (builtins.len, builtins.range):
            self.note(f"a call over {_size(big[0])} items is not evaluated", node)
            return Unknown("a call too large to evaluate")
        if fn in BUILTIN_FNS:
            args = [self.concrete(a, node) for a in args]
            if any(isinstance(a, (Unknown, UnknownData)) for a in args):
                return Unknown("builtin on unknown values")
            if fn is builtins.sum and not all(isinstance(x, (int, float)) for a in args[:1] for x in a):
                return Unknown("sum of other than numbers")      # (sum of lists is quadratic)
            r = fn(*args, **kwargs)
            return self.afford(list(r) if isinstance(r, (enumerate, zip, reversed)) else r)
        if fn is builtins.print:
            return None
        if isinstance(fn, (_ListMethod, _DictMethod)):
            return fn(*args)
        if isinstance(getattr(fn, "__self__", None), (AbstractArray, AbstractRng)) or \
                getattr(fn, "__qualname__", "").startswith("AbstractRng"):
            return fn(*args, **kwargs)
        mod = getattr(fn, "__module__", "") or ""
        if mod.startswith("numpy") or (getattr(fn, "__self__", None) is not None and
                                       type(getattr(fn, "__self__", None)).__module__.startswith("numpy")):
            return self.numpy_call(fn, mod, args, kwargs)
        if fn in MATH_FOLD:
            args = [self.concrete(a, node) for a in args]
            if all(isinstance(a, (int, float)) for a in args):
                return self.afford(fn(*args, **kwargs))
            return Unknown(f"math.{fn.__name__}")
        if callable(fn) and getattr(fn, "__self__", None) is not None and isinstance(fn.__self__, Cell) \
                and getattr(fn, "__name__", "") in ("append", "set_inputs", "set_train", "extend", "insert"):
            return fn(*[to_msvm(a) for a in args], **kwargs)
        if isinstance(fn, type) and buildable(fn):
            if not any(isinstance(a, ast.Starred) for a in node.args):
                args = [_named_symbol(a, n) for a, n in zip(args, node.args)]
                kwargs = {k.arg: _named_symbol(kwargs[k.arg], k.value) for k in node.keywords if k.arg}
            return self.construct_msvm(fn, args, kwargs)
        if callable(fn) and not isinstance(fn, type) and (mod.startswith("msvm.ops.primitives") or
                                                          mod == "msvm.dtype"):
            return fn(*args, **kwargs)
        if mod == "msvm.common.initializer":
            return self.initializer_call(fn, args, kwargs)
        return Unknown(f"call of {getattr(fn, '__qualname__', type(fn).__name__)}")

    def initializer_call(self, fn, args, kwargs):
        """``initializer(init, shape, dtype)``: a placeholder of that shape (no data is drawn);
        an Initializer object itself is only a description."""
        if getattr(fn, "__name__", "") != "initializer":
            return Unknown("an initializer")
        shape = kwargs.get("shape", args[1] if len(args) > 1 else None)
        d = kwargs.get("dtype", args[2] if len(args) > 2 else dt.float32)
        if isinstance(shape, (int, SymInt)):
            shape = (shape,)
        if not isinstance(shape, (tuple, list)) or not all(isinstance(x, (int, SymInt)) for x in shape):
            return UnknownData("initializer of an unknown shape")
        try:
            d = dt.as_dtype(d)
        except (TypeError, ValueError, KeyError):
            d = dt.float32
        return Tensor(shape=[str(x.expr) if isinstance(x, SymInt) else int(x) for x in shape], dtype=d)

    def unknown_builder(self, fn: Unknown, args, kwargs, node):
        """An unknown function given a Cell class of the file (a model zoo's
        ``build_model_with_cfg(ResNet, pretrained, **kwargs)``) is assumed to build it from the
        keyword arguments its ``__init__`` takes."""
        cls = next((a for a in args if isinstance(a, StaticClass) and a.is_cell), None)
        init = cls.find_method("__init__") if cls is not None else None
        if init is None:
            return fn
        names = set(init.signature(kwonly=True).parameters)
        self.note(f"assumed {ast.unparse(node.func)}(...) builds {cls.name} from its keyword arguments", node)
        return self.instantiate(cls, [], {k: v for k, v in kwargs.items() if k in names})

    def numpy_call(self, fn, mod, args, kwargs):
        name = getattr(fn, "__name__", "")
        if name in ("default_rng", "RandomState", "Generator"):
            return AbstractRng()
        if name == "load" or name in ("loadtxt", "fromfile", "genfromtxt"):
            return UnknownData(f"numpy.{name} reads a file")
        owner = getattr(fn, "__self__", None)
        if name in ("item", "tolist") and isinstance(owner, np.generic):
            return fn()                              # a numpy scalar's Python value
        if name in ("linspace", "arange") and all(isinstance(a, (int, float)) and not isinstance(a, bool)
                                                  for a in (*args, *kwargs.values())):
            small = _small_range(name, args, kwargs)   # drop-path rates and the like: their values
            if small is not None:
                return small
        random = "random" in mod or name in NP_RANDOM and "random" in repr(fn)
        if name in NP_CREATE or name in NP_RANDOM:
            return np_call(name, random and name in NP_RANDOM, args, kwargs)
        if name in ("float32", "float64", "float16", "int32", "int64") and not args:
            return Unknown("numpy scalar")
        if all(isinstance(a, (int, float)) for a in args) and name in NP_FOLD:
            return self.afford(fn(*args, **kwargs))
        if name in ("array", "asarray") and args and isinstance(args[0], AbstractArray):
            return args[0] if not kwargs.get("dtype") else args[0].astype(kwargs["dtype"])
        return Unknown(f"numpy.{name}")

    def call_function(self, fn: StaticFunction, args, kwargs, node=None, self_obj=None):
        """A plain function of the file (a factory, a helper) or a method of a Cell being built
        (``self._make_layer(...)``, ``self_obj``), evaluated with these arguments."""
        if self.depth >= self.budget.depth:
            return Unknown(f"calls nested deeper than {self.budget.depth}")
        try:
            ba = fn.signature(kwonly=True).bind(*args, **kwargs)
            ba.apply_defaults()
        except TypeError:
            return Unknown(f"a call of {fn.name} that does not match its signature")
        env = dict(fn.env or {})
        env.update(ba.arguments)
        self.depth += 1
        try:
            self.exec_block(fn.node.body, env, self_obj=self_obj)
        except _Return as r:
            return r.value
        except (_Break, _Continue):
            pass
        finally:
            self.depth -= 1
        return None

    def run_uncalled_functions(self):
        """Factories nobody calls (``def resnet50(): return ResNet(...)``) are evaluated once,
        their arguments from defaults or symbols, so the Cells they build are seen."""
        for f in self.functions:
            if f.jit or f.calls or f.name.startswith("_"):
                continue
            if time.monotonic() > self.started + self.budget.total_seconds:
                self.note(f"{f.name}() and the functions after it are not evaluated: the analysis' time for "
                          f"this file is spent", f.node)
                return
            args = {}
            for p in f.signature(kwonly=True).parameters.values():
                if p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
                    args[p.name] = p.default if p.default is not inspect.Parameter.empty else SymInt.named(p.name)
            self.slice(f"{f.name}()")
            notes, built = len(self.notes), self.cells_built
            try:
                self.call_function(f, [], args)
            except OutOfBudget as e:
                self.note(f"analysis of {f.name}() stopped: {e.what}", f.node)
            if self.cells_built == built:       # not a factory: what it assumed does not matter
                del self.notes[notes:]

    def construct_msvm(self, cls, args, kwargs):
        """Build an msvm object; tensors become placeholders (no data is made)."""
        args = [to_msvm(a) for a in args]
        kwargs = {k: to_msvm(v) for k, v in kwargs.items()}
        if cls is Tensor:
            src = args[0] if args else kwargs.get("input_data")
            d = args[1] if len(args) > 1 else kwargs.get("dtype")
            if isinstance(src, Tensor) and src.is_placeholder:
                t = Tensor(shape=[None] * len(src.placeholder_shape), dtype=d or src.dtype)
                t._pshape = src.placeholder_shape
                return t
            if isinstance(src, UnknownData):
                return UnknownData(src.why, d or src.dtype)
            if src is None:
                shape = kwargs.get("shape", args[2] if len(args) > 2 else None)
                if shape is None:
                    return Unknown("Tensor() without data or shape")
                return placeholder(shape_tuple(shape), dt.as_dtype(d) if d is not None else dt.float32)
            if isinstance(src, (int, float, bool, list, tuple)):
                return Tensor(src, dtype=d)
            return UnknownData(f"Tensor of {getattr(src, 'why', 'unknown data')}", d)
        if cls is Parameter:
            src = args[0] if args else kwargs.get("default_input")
            if isinstance(src, Tensor):
                return parameter(src, kwargs.get("name"))
            if isinstance(src, (int, float)):
                return Parameter(src)
            return UnknownData(f"Parameter of {getattr(src, 'why', 'unknown data')}",
                               getattr(src, "dtype", None) if isinstance(src, UnknownData) else None, parameter=True)
        if any(isinstance(a, Unknown) for a in list(args) + list(kwargs.values())):
            return Unknown(f"{cls.__name__} of unknown arguments")
        with abstract_init():
            return build_with_symbols(cls, args, kwargs)

    def instantiate(self, cls: StaticClass, args, kwargs):
        if self.depth >= self.budget.depth:
            return Unknown("Cells nested too deeply")
        self.cells_built += 1
        base = cls.real_base()
        bases = (StaticCell,) if base is None or base is Cell else (StaticCell, base)
        sub = type(cls.name, bases, {"_static_class": cls})
        obj = sub.__new__(sub)
        Cell.__init__(obj)
        init = cls.find_method("__init__")
        if init is None:
            if len(bases) > 1:
                try:
                    _init_real_base(base, obj, args, kwargs)
                except Exception as e:  # noqa: BLE001
                    return Unknown(f"{cls.name} extends {base.__name__}: {e}")
            cls.instances.append(obj)
            return obj
        params = {}
        sig = list(init.signature(kwonly=True).parameters.values())
        args = list(args)
        kwargs = dict(kwargs)
        for i, p in enumerate(sig):
            if i == 0:
                params[p.name] = obj
            elif p.kind is inspect.Parameter.VAR_POSITIONAL:
                params[p.name], args = tuple(args), []
            elif p.kind is inspect.Parameter.VAR_KEYWORD:
                params[p.name] = {k: v for k, v in kwargs.items() if k not in params}
            elif args and p.kind != inspect.Parameter.KEYWORD_ONLY:
                params[p.name] = args.pop(0)
            elif p.name in kwargs:
                params[p.name] = kwargs.pop(p.name)
            elif p.default is not inspect.Parameter.empty:
                params[p.name] = p.default
            else:
                params[p.name] = SymInt.named(p.name)
        for name, v in params.items():     # an unknown argument (cfg.hidden) is a symbol named after it
            if isinstance(v, Unknown):
                params[name] = SymInt.named(name, f"its value is not known statically ({v.why})")
        env = dict(params)
        self.depth += 1
        try:
            self.exec_block(init.node.body, env, self_obj=obj)
        except (_Return, _Break, _Continue):
            pass
        finally:
            self.depth -= 1
        cls.instances.append(obj)
        return obj


def _small_range(name, args, kwargs, limit: int = 4096):
    """np.linspace / np.arange over plain numbers, as a list of numpy scalars, when it has at
    most ``limit`` items (its length is worked out before anything is built); else None."""
    try:
        if name == "linspace":
            num = kwargs.get("num", args[2] if len(args) > 2 else 50)
            n = int(num)
        else:
            start, stop, step = (0, args[0], 1) if len(args) == 1 else (args[0], args[1], args[2] if len(args) > 2 else 1)
            n = int(math.ceil((stop - start) / step)) if step else limit + 1
        if not 0 <= n <= limit:
            return None
        return list((np.linspace if name == "linspace" else np.arange)(*args, **kwargs))
    except (TypeError, ValueError, ZeroDivisionError, OverflowError, IndexError):
        return None


def _named_symbol(v, node):
    """An unknown argument written as a name (``width``, ``cfg.hidden``) is a symbol of that name,
    so ``nn.Conv2d(cin, width, 1)`` and ``nn.BatchNorm2d(width)`` share their dim."""
    if not isinstance(v, Unknown):
        return v
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
    return SymInt.named(name, f"its value is not known statically ({v.why})") if name else v


class _DictMethod:
    """dict.get / items / keys / values / copy (views become lists)."""

    def __init__(self, d, name):
        self.d, self.name = d, name

    def __call__(self, *args):
        r = getattr(self.d, self.name)(*args)
        return list(r) if self.name in ("items", "keys", "values") else r


class _ListMethod:
    """list.append / extend / insert / ... within the size budget."""

    def __init__(self, module, lst, name):
        self.module, self.lst, self.name = module, lst, name

    def __call__(self, *args):
        grow = len(args[-1]) if self.name == "extend" and args and isinstance(args[-1], (list, tuple)) else 1
        if len(self.lst) + grow > self.module.budget.size:
            return Unknown("a list too large to evaluate")
        self.module.allocated += grow
        return getattr(self.lst, self.name)(*args)


