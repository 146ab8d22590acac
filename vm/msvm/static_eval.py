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
import operator as o
import os
import time

import numpy as np

from . import dtype as dt
from .bytecode.symbolic import Expr
from .nn.cell import Cell
from .static_calls import Calls
from .static_imports import Imports, allowed_module
from .static_objects import StaticBoundMethod, StaticCell, StaticClass, StaticFunction, StaticNamespace, StaticObject, Super
from .static_values import (
    BUILTINS,
    AbstractArray,
    AbstractRng,
    Break,
    Budget,
    Continue,
    DictMethod,
    ListMethod,
    Note,
    OutOfBudget,
    Return,
    SymInt,
    Unknown,
    UnknownData,
    array_binop,
    is_msvm_obj,
    jit_fn,
    size_of,
)
from .tensor import Tensor

__all__ = ["OutOfBudget", "StaticCell", "StaticModule"]


class StaticModule(Calls, Imports):
    """The abstract evaluation of one Python source file."""

    def __init__(self, source: str, filename: str, budget: Budget | None = None, imports: dict | None = None,
                 import_depth: int = 0, started: float | None = None):
        self.filename = filename
        self.source = source
        self.budget = budget or Budget()
        self.tree = ast.parse(source, filename)
        self.imports = {} if imports is None else imports     # path -> StaticNamespace (shared)
        self.import_depth = import_depth
        self.env: dict = {"__name__": "__main__" if import_depth == 0 else os.path.basename(filename)[:-3]}
        self.scope = self.env        # the globals of the code being evaluated (another file's, in its functions)
        self.classes: list = []
        self.functions: list = []
        self.instances: list = []    # (StaticCell, assigned name or None)
        self.notes: list = []
        self.allocated = 0           # items of strings / containers made so far (total_size)
        self.depth = 0
        self.cells_built = 0         # user Cells instantiated so far
        self.assumptions = 0         # values assumed so far (``assume``)
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
            except (Return, Break, Continue):
                pass
        if import_depth == 0:
            self.run_uncalled_functions()

    def define(self, stmts):
        """After the budget ran out: only the imports, classes and functions of the rest."""
        self.slice("the definitions after it", 0.25)
        try:
            self.exec_block([st for st in stmts if isinstance(st, (ast.Import, ast.ImportFrom, ast.ClassDef,
                                                                   ast.FunctionDef))], self.env, module_level=True)
        except (OutOfBudget, Return, Break, Continue):
            pass

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
        n = size_of(v) if not isinstance(v, range) else 0
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

    def assume(self, message: str, node=None):
        """A note of a value the analysis assumed: what is built after it may differ at run time
        (a Cell built under assumptions gets no certain errors)."""
        self.assumptions += 1
        self.note(message, node)

    def concrete(self, v, node=None):
        """A SymInt's assumed value (noted), other values unchanged."""
        if isinstance(v, SymInt):
            self.assume(f"assumed {v.name} = {v.assumed} (its value is not known statically; structure that "
                      f"depends on it follows this value)", node)
            return v.assumed
        return v

    ASSUMED_ITEMS = 3      # a sequence nobody passes: (batch, length, width) is the commonest shape-like one

    def assumed_sequence(self, v: SymInt, node) -> tuple:
        """A constructor argument nobody passes, used as a sequence: ASSUMED_ITEMS sizes of its own
        (symbols where they become dims, SymInt.ASSUMED where a value is needed), noted."""
        items = tuple(SymInt.named(f"{v.name}{k}", f"an item of {v.name}, which nobody passes")
                      for k in range(self.ASSUMED_ITEMS))
        self.assume(f"assumed {v.name} = ({', '.join(x.name for x in items)}): a sequence nobody passes "
                    f"({self.ASSUMED_ITEMS} items assumed; pass it where the Cell is built to know it)", node)
        return items

    # --- statements
    def exec_block(self, stmts, env, module_level=False, self_obj=None):
        for st in stmts:
            try:
                self.exec_stmt(st, env, module_level, self_obj)
            except (OutOfBudget, Return, Break, Continue):
                raise
            except Exception:  # noqa: BLE001 - static analysis never fails on odd code
                continue

    def exec_stmt(self, st, env, module_level, self_obj):
        self.tick()
        self.line = st.lineno
        if isinstance(st, (ast.Import, ast.ImportFrom)):
            self.exec_import(st, env)
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
            cur = env.get(st.target.id, self.scope.get(st.target.id))
            rhs = self.eval(st.value, env, self_obj)
            env[st.target.id] = self.binop(type(st.op), cur, rhs)
        elif isinstance(st, ast.Expr):
            self.eval(st.value, env, self_obj)
        elif isinstance(st, ast.If):
            test = self.concrete(self.eval(st.test, env, self_obj), st)
            if isinstance(test, (Unknown, Tensor, AbstractArray, UnknownData)):
                self.assume("this condition is not known statically; the analysis assumed it true", st)
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
            raise Return(None if st.value is None else self.eval(st.value, env, self_obj))
        elif isinstance(st, ast.Break):
            raise Break()
        elif isinstance(st, ast.Continue):
            raise Continue()

    def _loop_body(self, st, env, module_level, self_obj) -> bool:
        """Run one iteration; False when the loop breaks."""
        try:
            self.exec_block(st.body, env, module_level, self_obj)
        except Break:
            return False
        except Continue:
            pass
        return True

    def exec_for(self, st, env, module_level, self_obj):
        seq = self.eval(st.iter, env, self_obj)
        if isinstance(seq, AbstractArray) and seq.values is not None:
            seq = seq.items()
        if isinstance(seq, (range, list, tuple, str)):
            cap = self.budget.loop
            for k, v in enumerate(seq):
                if k >= cap:
                    self.assume(f"loop stopped after {cap} of {len(seq)} iterations (the analysis does not run "
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
        self.assume(f"loop stopped after {self.budget.loop} iterations (the analysis does not run loops to the end)",
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
        elif isinstance(target, ast.Subscript):        # layers["conv"] = nn.Conv2d(...), out[k] = v
            obj = self.eval(target.value, env, self_obj)
            key = self.concrete(self.eval(target.slice, env, self_obj), target)
            if isinstance(obj, dict) and isinstance(key, (str, int, float, bool, tuple)) and \
                    not isinstance(key, SymInt):
                if key not in obj and len(obj) >= self.budget.size:
                    return
                obj[key] = value
                self.allocated += 1
            elif isinstance(obj, list) and isinstance(key, int) and -len(obj) <= key < len(obj):
                obj[key] = value
        elif isinstance(target, ast.Attribute):
            obj = self.eval(target.value, env, self_obj)
            if isinstance(obj, StaticObject):       # (a config's attributes: ``block_cnf.stride = 1``)
                obj.__dict__[target.attr] = value
            elif isinstance(obj, StaticCell) and (obj is self_obj):
                if isinstance(value, UnknownData):
                    value.line, value.col = target.lineno, target.col_offset
                object.__setattr__(obj, target.attr, value) if isinstance(value, (UnknownData, SymInt)) \
                    else setattr(obj, target.attr, value)

    # --- expressions
    def eval(self, node, env, self_obj=None):
        try:
            return self._eval(node, env, self_obj)
        except (OutOfBudget, Return, Break, Continue):
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
            if node.id in self.scope:
                return self.scope[node.id]
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
            if isinstance(base, AbstractArray) and base.values is not None and \
                    isinstance(idx, (int, slice, tuple, np.integer)):
                r = base.values[idx]
                return AbstractArray.of(r) if isinstance(r, np.ndarray) else r
            return Unknown("subscript")
        if isinstance(node, ast.Slice):
            return slice(*(None if p is None else self.concrete(ev(p), node)
                           for p in (node.lower, node.upper, node.step)))
        if isinstance(node, ast.ListComp) and len(node.generators) == 1 and not node.generators[0].ifs:
            g = node.generators[0]
            seq = ev(g.iter)
            if isinstance(seq, AbstractArray) and seq.values is not None:
                seq = seq.items()
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
        if isinstance(base, Super):
            return base.init if attr == "__init__" else Unknown(f"super().{attr}")
        if attr.startswith("__"):
            return Unknown(f"attribute {attr}")      # (2).__pow__(...) would skip the budget
        if isinstance(base, StaticCell):
            try:
                return base.__msvm_getattr__(attr)
            except Exception:  # noqa: BLE001
                return Unknown(f"self.{attr}")
        if isinstance(base, StaticObject):
            if attr in base.__dict__:
                return base.__dict__[attr]
            m = base._static_class.find_method(attr)
            if m is not None:
                return StaticBoundMethod(m, base)
            try:
                return base._static_class.find_attr(attr)
            except KeyError:
                return Unknown(f"{base._static_class.name}.{attr}")
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
            if attr in ("shape", "dtype", "ndim", "T", "astype", "reshape", "tolist"):
                return getattr(base, attr)
            return Unknown(f"array.{attr}")
        if isinstance(base, AbstractRng) or isinstance(base, (np.finfo, np.iinfo)):
            return getattr(base, attr)
        if isinstance(base, list) and attr in ("append", "extend", "insert", "index", "count", "copy"):
            return ListMethod(self, base, attr)
        if isinstance(base, dict) and attr in ("get", "items", "keys", "values", "copy"):
            return DictMethod(base, attr)
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
            return array_binop(a, b, {ast.Add: o.add, ast.Sub: o.sub, ast.Mult: o.mul, ast.Div: o.truediv,
                                      ast.FloorDiv: o.floordiv, ast.Pow: o.pow}.get(op))
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
