"""Static analysis of a Python file: its Cells and jit functions as bytecode,
without executing the file.

The module's top level and each Cell's ``__init__`` are *evaluated abstractly*:
imports of msvm (or ``mindspore``, read as msvm), numpy and math resolve to the
real modules; literals and arithmetic fold; ``ms.Tensor(np.zeros((512, 1024)))``,
``Parameter(...)``, ``nn.Dense(768, 1024)`` and ``ops.MatMul()`` build msvm objects
whose tensors are placeholders of the right shape (no data, no user code);
user Cell classes are instantiated by walking their ``__init__``. Anything else
is ``Unknown`` and only matters if ``construct`` uses it (then it is a
diagnostic at that line). Argument shapes come from ``set_inputs`` calls,
annotations (``x: "B, 768"`` or ``x: ms.Tensor(shape=[None, 768], ...)``) and
calls of the Cell in the module; other dims are symbols.

Used by ``msvm dump``, the language server and the tests.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import math
from dataclasses import dataclass, field

import numpy as np

from . import dtype as dt
from .bytecode.code import Code
from .errors import FrontendError, MsvmError, VerifyError
from .executor import ArgSpec, arg_spec, tensor_spec
from .frontend.compiler import FunctionSource, compile_cell_for, compile_function, signature_params
from .nn import layers as _layers
from .nn.cell import Cell
from .tensor import Parameter, Tensor

_MAX_STEPS = 100_000
_MAX_DEPTH = 24


class Unknown:
    """A value static analysis cannot know (it would need running user code)."""

    def __init__(self, why: str):
        self.why = why

    def __repr__(self):
        return f"<unknown: {self.why}>"

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return Unknown(self.why)

    def __call__(self, *a, **k):
        return Unknown(self.why)


@dataclass
class AbstractArray:
    """A numpy array known only by shape and dtype."""

    shape: tuple
    dtype: np.dtype

    def astype(self, d, *a, **k):
        return AbstractArray(self.shape, np.dtype(dt.as_dtype(d).np if isinstance(d, dt.DType) else d))

    @property
    def T(self):
        return AbstractArray(self.shape[::-1], self.dtype)

    @property
    def ndim(self):
        return len(self.shape)

    def reshape(self, *shape):
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        total = int(np.prod(self.shape))
        known = int(np.prod([d for d in shape if d != -1]))
        return AbstractArray(tuple(total // known if d == -1 else d for d in shape), self.dtype)


def _placeholder(arr: AbstractArray, dtype=None) -> Tensor:
    d = dt.as_dtype(dtype) if dtype is not None else dt.from_numpy(arr.dtype)
    return Tensor(shape=list(arr.shape), dtype=d)


_NP_CREATE = {"zeros", "ones", "empty", "full", "zeros_like", "ones_like", "empty_like", "full_like", "eye",
              "identity", "arange", "linspace"}
_NP_RANDOM = {"randn", "rand", "random", "normal", "uniform", "standard_normal", "random_sample", "randint"}


def _np_call(fn_name: str, random: bool, args, kwargs):
    def shp(v):
        if isinstance(v, (list, tuple)):
            return tuple(int(x) for x in v)
        return (int(v),)
    dtype = kwargs.get("dtype")
    if random:
        if fn_name in ("randn", "rand"):
            return AbstractArray(tuple(int(a) for a in args), np.dtype(np.float64))
        size = kwargs.get("size", args[-1] if fn_name in ("normal", "uniform", "randint") and len(args) >= 3 else
                          (args[0] if args and fn_name not in ("normal", "uniform", "randint") else None))
        if size is None:
            return Unknown("a random scalar")
        return AbstractArray(shp(size), np.dtype(np.int64 if fn_name == "randint" else np.float64))
    if fn_name in ("zeros", "ones", "empty"):
        dtype = dtype or (args[1] if len(args) > 1 else None)
        return AbstractArray(shp(args[0]), np.dtype(dtype or np.float64))
    if fn_name == "full":
        dtype = dtype or (args[2] if len(args) > 2 else None)
        return AbstractArray(shp(args[0]), np.dtype(dtype or np.asarray(args[1]).dtype))
    if fn_name.endswith("_like") and isinstance(args[0], AbstractArray):
        return AbstractArray(args[0].shape, np.dtype(dtype or args[0].dtype))
    if fn_name in ("eye", "identity"):
        n = int(args[0])
        return AbstractArray((n, int(args[1]) if len(args) > 1 and fn_name == "eye" else n), np.dtype(dtype or np.float64))
    if fn_name == "arange":
        return AbstractArray((len(range(*[int(a) for a in args])),), np.dtype(dtype or np.int64))
    if fn_name == "linspace":
        return AbstractArray((int(kwargs.get("num", args[2] if len(args) > 2 else 50)),), np.dtype(np.float64))
    return Unknown(f"numpy.{fn_name}")


@dataclass
class StaticFunction:
    node: ast.FunctionDef
    module: "StaticModule"
    jit: bool = False
    calls: list = field(default_factory=list)

    @property
    def name(self):
        return self.node.name

    def source(self) -> FunctionSource:
        return FunctionSource(self.node, self.module.filename, 0, 0, self.module.env, {}, self.node.name)

    def signature(self, skip_self=False):
        return _signature(self.node, self.module, skip_self)

    def __msvm_inline__(self):
        return self.source(), None, self.signature()


class StaticBoundMethod:
    def __init__(self, fn: StaticFunction, obj):
        self.fn, self.obj = fn, obj

    def __msvm_inline__(self):
        src = self.fn.source()
        src.qualname = f"{type(self.obj).__name__}.{self.fn.name}"
        return src, self.obj, self.fn.signature()


def _signature(node: ast.FunctionDef, module, skip_self=False) -> inspect.Signature:
    a = node.args
    params = []
    pos = a.posonlyargs + a.args
    defaults = [None] * (len(pos) - len(a.defaults)) + list(a.defaults)
    for i, (arg, d) in enumerate(zip(pos, defaults)):
        if skip_self and i == 0:
            continue
        default = inspect.Parameter.empty if d is None else module.eval(d, module.env)
        params.append(inspect.Parameter(arg.arg, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default))
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
            if isinstance(v, Unknown):
                from .bytecode.types import ShapeError
                raise ShapeError(f"self.{name} cannot be known without running the program ({v.why})")
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

    def __msvm_construct_source__(self):
        m = self._static_class.find_method("construct")
        if m is None:
            raise FrontendError(f"{type(self).__name__} has no construct()", self._static_class.module.filename,
                                self._static_class.node.lineno, self._static_class.node.col_offset)
        src = m.source()
        return src

    def __msvm_construct_params__(self):
        m = self._static_class.find_method("construct")
        return signature_params(m.signature(skip_self=True))


class _Self:
    """Marker for super() inside __init__."""


class StaticModule:
    """The abstract evaluation of one Python source file."""

    def __init__(self, source: str, filename: str):
        self.filename = filename
        self.source = source
        self.tree = ast.parse(source, filename)
        self.env: dict = {"__name__": "__main__"}
        self.classes: list = []
        self.functions: list = []
        self.instances: list = []    # (StaticCell, assigned name or None)
        self.steps = 0
        self.depth = 0
        self.exec_block(self.tree.body, self.env, module_level=True)

    # --- statements
    def exec_block(self, stmts, env, module_level=False, self_obj=None):
        for st in stmts:
            try:
                self.exec_stmt(st, env, module_level, self_obj)
            except _StopInit:
                raise
            except Exception:  # noqa: BLE001 - static analysis never fails on odd code
                continue

    def exec_stmt(self, st, env, module_level, self_obj):
        self.steps += 1
        if self.steps > _MAX_STEPS:
            raise _StopInit()
        if isinstance(st, ast.Import):
            for a in st.names:
                mod = _resolve_module(a.name)
                env[(a.asname or a.name).split(".")[0]] = mod if a.asname or "." not in a.name else \
                    _resolve_module(a.name.split(".")[0])
        elif isinstance(st, ast.ImportFrom):
            base = st.module or ""
            for a in st.names:
                mod = _resolve_module(f"{base}.{a.name}")
                if isinstance(mod, Unknown):
                    parent = _resolve_module(base)
                    mod = getattr(parent, a.name, Unknown(f"{base}.{a.name}")) if not isinstance(parent, Unknown) \
                        else Unknown(f"import {base}")
                env[a.asname or a.name] = mod
        elif isinstance(st, ast.ClassDef):
            bases = [self.eval(b, env) for b in st.bases]
            c = StaticClass(st, self, bases)
            env[st.name] = c
            if module_level:
                self.classes.append(c)
        elif isinstance(st, ast.FunctionDef):
            f = StaticFunction(st, self)
            for dec in st.decorator_list:
                target = dec.func if isinstance(dec, ast.Call) else dec
                v = self.eval(target, env)
                if v is _jit_fn():
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
            cur = env.get(st.target.id)
            rhs = self.eval(st.value, env, self_obj)
            env[st.target.id] = self.binop(type(st.op), cur, rhs)
        elif isinstance(st, ast.Expr):
            self.eval(st.value, env, self_obj)
        elif isinstance(st, ast.If):
            test = self.eval(st.test, env, self_obj)
            if isinstance(test, Unknown) or isinstance(test, (Tensor, AbstractArray)):
                return
            self.exec_block(st.body if test else st.orelse, env, module_level, self_obj)
        elif isinstance(st, ast.For):
            seq = self.eval(st.iter, env, self_obj)
            if isinstance(seq, (range, list, tuple)) and len(seq) <= 10_000:
                for v in seq:
                    self.assign(st.target, v, env, self_obj)
                    self.exec_block(st.body, env, module_level, self_obj)

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
                setattr(obj, target.attr, value)

    # --- expressions
    def eval(self, node, env, self_obj=None):
        try:
            return self._eval(node, env, self_obj)
        except _StopInit:
            raise
        except Exception as e:  # noqa: BLE001
            return Unknown(f"{type(e).__name__}: {e}")

    def _eval(self, node, env, self_obj):
        ev = lambda n: self.eval(n, env, self_obj)  # noqa: E731
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if node.id in env:
                return env[node.id]
            if node.id in self.env:
                return self.env[node.id]
            if node.id in ("range", "len", "int", "float", "bool", "tuple", "list", "min", "max", "abs", "sum",
                           "round", "str", "isinstance", "enumerate", "zip", "reversed", "super", "print"):
                return getattr(builtins, node.id)
            return Unknown(f"name {node.id}")
        if isinstance(node, (ast.Tuple, ast.List)):
            vals = [ev(e) for e in node.elts]
            return tuple(vals) if isinstance(node, ast.Tuple) else vals
        if isinstance(node, ast.Attribute):
            base = ev(node.value)
            return self.getattr(base, node.attr)
        if isinstance(node, ast.BinOp):
            return self.binop(type(node.op), ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp):
            v = ev(node.operand)
            if isinstance(v, (int, float, bool)):
                return {ast.USub: lambda: -v, ast.UAdd: lambda: v, ast.Not: lambda: not v,
                        ast.Invert: lambda: ~v}[type(node.op)]()
            return Unknown("unary operator")
        if isinstance(node, ast.Compare):
            vals = [ev(node.left)] + [ev(c) for c in node.comparators]
            if all(isinstance(v, (int, float, str, bool, type(None))) for v in vals):
                import operator as op
                table = {ast.Eq: op.eq, ast.NotEq: op.ne, ast.Lt: op.lt, ast.LtE: op.le, ast.Gt: op.gt,
                         ast.GtE: op.ge, ast.Is: op.is_, ast.IsNot: op.is_not}
                return all(table[type(o)](a, b) for o, a, b in zip(node.ops, vals, vals[1:]))
            return Unknown("comparison")
        if isinstance(node, ast.BoolOp):
            vals = [ev(v) for v in node.values]
            if any(isinstance(v, Unknown) for v in vals):
                return Unknown("boolean expression")
            return all(vals) if isinstance(node.op, ast.And) else any(vals)
        if isinstance(node, ast.IfExp):
            t = ev(node.test)
            if isinstance(t, Unknown):
                return t
            return ev(node.body) if t else ev(node.orelse)
        if isinstance(node, ast.Subscript):
            base, idx = ev(node.value), ev(node.slice)
            if isinstance(base, (tuple, list, dict, str)) and not isinstance(idx, Unknown):
                return base[idx]
            if isinstance(base, Cell) and isinstance(idx, int):
                return base[idx]
            return Unknown("subscript")
        if isinstance(node, ast.Slice):
            return slice(*(None if p is None else ev(p) for p in (node.lower, node.upper, node.step)))
        if isinstance(node, ast.ListComp) and len(node.generators) == 1 and not node.generators[0].ifs:
            g = node.generators[0]
            seq = ev(g.iter)
            if not isinstance(seq, (range, list, tuple)) or len(seq) > 10_000:
                return Unknown("comprehension")
            out = []
            for v in seq:
                inner = dict(env)
                self.assign(g.target, v, inner, self_obj)
                out.append(self.eval(node.elt, inner, self_obj))
            return out
        if isinstance(node, ast.JoinedStr):
            return Unknown("f-string")
        if isinstance(node, ast.Call):
            return self.call(node, env, self_obj)
        return Unknown(type(node).__name__)

    def getattr(self, base, attr):
        if isinstance(base, Unknown):
            return base
        if isinstance(base, _Self):
            return lambda *a, **k: None      # super().__init__(...)
        if isinstance(base, StaticCell):
            try:
                return base.__msvm_getattr__(attr)
            except Exception:  # noqa: BLE001
                return Unknown(f"self.{attr}")
        if isinstance(base, StaticClass):
            m = base.find_method(attr)
            return m if m is not None else Unknown(f"{base.name}.{attr}")
        if isinstance(base, AbstractArray):
            if attr in ("shape", "dtype", "ndim", "T", "astype", "reshape"):
                return getattr(base, attr)
            return Unknown(f"array.{attr}")
        mod = getattr(base, "__name__", "") if inspect.ismodule(base) else ""
        if inspect.ismodule(base) and not _allowed_module(mod):
            return Unknown(f"{mod}.{attr}")
        if inspect.ismodule(base) or _is_msvm_obj(base) or isinstance(base, (dt.DType, Tensor, int, float, tuple)):
            return getattr(base, attr)
        return Unknown(f"attribute {attr}")

    def binop(self, op, a, b):
        import operator as o
        table = {ast.Add: o.add, ast.Sub: o.sub, ast.Mult: o.mul, ast.Div: o.truediv, ast.FloorDiv: o.floordiv,
                 ast.Mod: o.mod, ast.Pow: o.pow}
        ok = (int, float, bool, tuple, list, str)
        if isinstance(a, ok) and isinstance(b, ok) and op in table:
            if op is ast.Pow and isinstance(b, int) and abs(b) > 64:
                return Unknown("large power")
            if op is ast.Mult and (isinstance(a, (tuple, list, str)) or isinstance(b, (tuple, list, str))):
                n = b if isinstance(b, int) else a
                if isinstance(n, int) and n > 10_000:
                    return Unknown("large repetition")
            return table[op](a, b)
        return Unknown("arithmetic on unknown values")

    def call(self, node, env, self_obj):
        fn = self.eval(node.func, env, self_obj)
        if fn is builtins.super:
            return _Self()
        args = []
        for a in node.args:
            if isinstance(a, ast.Starred):
                v = self.eval(a.value, env, self_obj)
                if not isinstance(v, (list, tuple)):
                    return Unknown("*args")
                args.extend(v)
            else:
                args.append(self.eval(a, env, self_obj))
        kwargs = {k.arg: self.eval(k.value, env, self_obj) for k in node.keywords if k.arg}
        if isinstance(fn, Unknown):
            return fn
        if isinstance(fn, StaticClass):
            return self.instantiate(fn, args, kwargs) if fn.is_cell else Unknown(f"instance of {fn.name}")
        if isinstance(fn, StaticCell):
            fn_calls = getattr(fn, "_static_calls", None)
            if fn_calls is None:
                object.__setattr__(fn, "_static_calls", [])
            fn._static_calls.append((args, kwargs))
            return Unknown(f"result of calling {type(fn).__name__}")
        if isinstance(fn, StaticFunction):
            fn.calls.append((args, kwargs))
            return Unknown(f"result of {fn.name}()")
        if fn is _jit_fn():
            if args and isinstance(args[0], StaticFunction):
                args[0].jit = True
                return args[0]
            return Unknown("jit")
        if fn in (builtins.range, builtins.len, builtins.int, builtins.float, builtins.bool, builtins.tuple,
                  builtins.list, builtins.min, builtins.max, builtins.abs, builtins.sum, builtins.round,
                  builtins.enumerate, builtins.zip, builtins.reversed, builtins.str, builtins.isinstance):
            if any(isinstance(a, Unknown) for a in args):
                return Unknown("builtin on unknown values")
            r = fn(*args, **kwargs)
            return list(r) if isinstance(r, (enumerate, zip, reversed)) else r
        if fn is builtins.print:
            return None
        if isinstance(getattr(fn, "__self__", None), AbstractArray):
            return fn(*args, **kwargs)
        mod = getattr(fn, "__module__", "") or ""
        if mod.startswith("numpy") or (getattr(fn, "__self__", None) is not None and
                                       type(getattr(fn, "__self__", None)).__module__.startswith("numpy")):
            name = getattr(fn, "__name__", "")
            random = "random" in mod or name in _NP_RANDOM and "random" in repr(fn)
            if name in _NP_CREATE or name in _NP_RANDOM:
                return _np_call(name, random and name in _NP_RANDOM, args, kwargs)
            if name in ("float32", "float64", "float16", "int32", "int64") and not args:
                return Unknown("numpy scalar")
            if all(isinstance(a, (int, float, tuple, list)) for a in args) and name in ("sqrt", "prod", "log", "exp"):
                return fn(*args, **kwargs)
            return Unknown(f"numpy.{name}")
        if fn in (math.sqrt, math.log, math.exp, math.pow, math.ceil, math.floor, math.prod, math.log2, math.pi):
            return fn(*args, **kwargs)
        if callable(fn) and getattr(fn, "__self__", None) is not None and isinstance(fn.__self__, Cell) \
                and getattr(fn, "__name__", "") in ("append", "set_inputs", "set_train", "extend", "insert"):
            return fn(*[_to_msvm(a) for a in args], **kwargs)
        if isinstance(fn, type) and (fn.__module__ or "").startswith("msvm"):
            return self.construct_msvm(fn, args, kwargs)
        if callable(fn) and (mod.startswith("msvm.ops.primitives") or mod == "msvm.dtype"):
            return fn(*args, **kwargs)
        return Unknown(f"call of {getattr(fn, '__qualname__', type(fn).__name__)}")

    def construct_msvm(self, cls, args, kwargs):
        """Build an msvm object; tensors become placeholders (no data is made)."""
        args = [_to_msvm(a) for a in args]
        kwargs = {k: _to_msvm(v) for k, v in kwargs.items()}
        if cls is Tensor:
            src = args[0] if args else kwargs.get("input_data")
            d = args[1] if len(args) > 1 else kwargs.get("dtype")
            if isinstance(src, Tensor) and src.is_placeholder:
                return Tensor(shape=list(src.placeholder_shape), dtype=d or src.dtype)
            if src is None:
                return Tensor(shape=kwargs.get("shape", args[2] if len(args) > 2 else None), dtype=d)
            if isinstance(src, (int, float, bool, list, tuple)):
                return Tensor(src, dtype=d)
            return Unknown("Tensor of unknown data")
        if cls is Parameter:
            src = args[0] if args else kwargs.get("default_input")
            if isinstance(src, Tensor):
                return Parameter(src, name=kwargs.get("name"))
            if isinstance(src, (int, float)):
                return Parameter(src)
            return Unknown("Parameter of unknown data")
        with _abstract_init():
            return cls(*args, **kwargs)

    def instantiate(self, cls: StaticClass, args, kwargs):
        if self.depth > _MAX_DEPTH:
            return Unknown("Cells nested too deeply")
        sub = type(cls.name, (StaticCell,), {"_static_class": cls})
        obj = sub.__new__(sub)
        Cell.__init__(obj)
        init = cls.find_method("__init__")
        if init is None:
            base = cls.real_base()
            if base is not None and base is not Cell:
                return Unknown(f"{cls.name} extends {base.__name__}")
            cls.instances.append(obj)
            return obj
        try:
            sig = init.signature()
            ba = sig.bind(obj, *args, **kwargs)
            ba.apply_defaults()
        except TypeError:
            params = {}
            for i, p in enumerate(init.signature().parameters.values()):
                params[p.name] = obj if i == 0 else (p.default if p.default is not inspect.Parameter.empty
                                                      else Unknown(f"argument {p.name} of {cls.name}()"))
        else:
            params = dict(ba.arguments)
        env = dict(params)
        self.depth += 1
        try:
            self.exec_block(init.node.body, env, self_obj=obj)
        except _StopInit:
            pass
        finally:
            self.depth -= 1
        cls.instances.append(obj)
        return obj


class _StopInit(Exception):
    pass


class _NotKnown(FrontendError):
    """An argument's shape is not known statically."""


class _abstract_init:
    """While active, nn layers create placeholder parameters instead of random data."""

    def __enter__(self):
        self.prev = _layers.STATIC_INIT
        _layers.STATIC_INIT = True

    def __exit__(self, *exc):
        _layers.STATIC_INIT = self.prev


def _to_msvm(v):
    if isinstance(v, AbstractArray):
        return _placeholder(v)
    if isinstance(v, list):
        return [_to_msvm(x) for x in v]
    return v


def _jit_fn():
    from .jitfn import jit
    return jit


def _allowed_module(name: str) -> bool:
    """Modules the analysis may import to know what a name is: msvm's, numpy's and math, but
    never a ``__main__`` (``from msvm import __main__`` runs the msvm command), a private
    module or a test configuration, whose import does more than define names."""
    parts = name.split(".")
    if any(p.startswith("_") or p == "conftest" for p in parts):
        return False
    return name in ("msvm", "numpy", "math") or name.startswith(("msvm.", "numpy."))


def _is_msvm_obj(v) -> bool:
    mod = getattr(type(v), "__module__", "") or ""
    return mod.startswith("msvm") or (inspect.isclass(v) and (v.__module__ or "").startswith("msvm"))


def _resolve_module(name: str):
    import importlib

    if name == "mindspore" or name.startswith("mindspore."):
        name = "msvm" + name[len("mindspore"):]
    if not _allowed_module(name):
        return Unknown(f"module {name}")
    try:
        return importlib.import_module(name)
    except ImportError:
        return Unknown(f"module {name}")


# ---------------------------------------------------------------- compiling what was found

@dataclass
class Entry:
    """One compiled unit of a file: a Cell's construct or a jit function."""

    name: str
    line: int                 # 1-based line of the class / def
    col: int
    kind: str                 # 'cell' | 'jit'
    code: Code | None = None
    error: MsvmError | None = None
    construct_line: int = 0
    end_line: int = 0         # last line of the class / def


def _annotation_spec(name, ann, module) -> ArgSpec | None:
    if ann is None:
        return None
    if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
        text = ann.value.strip()
        d = dt.float32
        if "[" in text and not text.startswith("["):
            head, text = text.split("[", 1)
            head = head.strip().split(".")[-1]
            if head and head not in ("Tensor",):
                try:
                    d = dt.by_name(head)
                except ValueError:
                    pass
            text = text.rsplit("]", 1)[0]
        text = text.strip("[]() ")
        if "," in text and text.split(",", 1)[0].strip() in [x.name for x in dt.ALL]:
            head, text = text.split(",", 1)
            d = dt.by_name(head.strip())
            text = text.strip().strip("[]() ")
        dims = []
        for part in [p.strip() for p in text.split(",") if p.strip()]:
            dims.append(int(part) if part.lstrip("-").isdigit() else (None if part in ("?", "None") else part))
        return tensor_spec(name, tuple(1 if isinstance(x, int) and x == 1 else 2 for x in dims), d,
                           Tensor(shape=dims, dtype=d))
    v = module.eval(ann, module.env)
    if isinstance(v, Tensor) and v.is_placeholder:
        return arg_spec(name, v)
    return None


def _specs_for(params, node: ast.FunctionDef, declared, calls, module, skip_self: bool):
    """Argument specs from set_inputs, annotations, then the first call seen in the module."""
    args = node.args.args[1:] if skip_self else node.args.args
    call_args, call_kwargs = calls[0] if calls else ((), {})
    specs = []
    for k, ((pname, default), a) in enumerate(zip(params, args)):
        if declared is not None and k < len(declared) and isinstance(declared[k], Tensor):
            specs.append(arg_spec(pname, declared[k]))
            continue
        spec = _annotation_spec(pname, a.annotation, module)
        if spec is not None:
            specs.append(spec)
            continue
        v = call_args[k] if k < len(call_args) else call_kwargs.get(pname, default)
        v = _to_msvm(v)
        if v is inspect.Parameter.empty or isinstance(v, Unknown):
            raise _NotKnown(f"the shape of argument '{pname}' is not known statically: call set_inputs(...) "
                                f"or annotate it, e.g. {pname}: \"B, 768\"", module.filename, a.lineno,
                                a.col_offset, a.end_lineno, a.end_col_offset)
        if isinstance(v, Tensor) and v.is_placeholder:
            shape = v.placeholder_shape
            if all(isinstance(d, int) for d in shape):
                specs.append(tensor_spec(pname, shape, v.dtype))
            else:
                specs.append(arg_spec(pname, v))
            continue
        specs.append(arg_spec(pname, v))
    star = node.args.vararg
    if star is not None:      # *inputs: as many as set_inputs declares or the first call passes
        n = max(len(call_args), len(declared) if declared is not None else 0)
        for k in range(len(args), n):
            v = declared[k] if declared is not None and k < len(declared) else call_args[k]
            v = _to_msvm(v)
            if isinstance(v, Unknown):
                raise _NotKnown(f"the shape of argument {k - len(args)} of *{star.arg} is not known statically: "
                                "call set_inputs(...)", module.filename, star.lineno, star.col_offset,
                                star.end_lineno, star.end_col_offset)
            specs.append(arg_spec(f"{star.arg}_{k - len(args)}", v))
    return specs


def _byte_col(e: SyntaxError) -> int:
    """A SyntaxError's 0-based column in UTF-8 bytes, as every other Loc (its offset counts characters)."""
    col = max(0, (e.offset or 1) - 1)
    if not e.text:
        return col
    return len(e.text[:col].encode("utf-8", "surrogatepass"))


def analyze(source: str, filename: str) -> list:
    """Every Cell class and jit function in the source, compiled where possible."""
    try:
        module = StaticModule(source, filename)
    except SyntaxError as e:
        raise FrontendError(f"syntax error: {e.msg}", filename, e.lineno or 1, _byte_col(e)) from None
    entries = []
    seen_classes = set()
    instances = {id(c): c for c, _ in module.instances}
    for cls in _all_classes(module):
        if not cls.is_cell or cls.find_method("construct") is None or id(cls) in seen_classes:
            continue
        seen_classes.add(id(cls))
        cnode = cls.find_method("construct").node
        e = Entry(cls.name, cls.node.lineno, cls.node.col_offset, "cell", construct_line=cnode.lineno,
                  end_line=cls.node.end_lineno or cls.node.lineno)
        entries.append(e)
        try:
            objs = [i for i in cls.instances if id(i) in instances] + list(cls.instances)
            cell = objs[0] if objs else module.instantiate(cls, [], {})
            if isinstance(cell, Unknown):
                raise FrontendError(f"cannot build {cls.name} statically: {cell.why}", filename, cls.node.lineno,
                                    cls.node.col_offset)
            declared = cell.__dict__.get("_msvm_inputs")
            calls = cell.__dict__.get("_static_calls") or []
            specs = _specs_for(cell.__msvm_construct_params__(), cnode, declared, calls, module, True)
            e.code = compile_cell_for(cell, specs)
        except (FrontendError, VerifyError) as err:
            e.error = err
        except MsvmError as err:
            e.error = FrontendError(str(err), filename, cnode.lineno, cnode.col_offset)
    # a Cell whose inputs are unknown on its own is shown as its parent calls it
    called = {}
    for e in entries:
        if e.code is not None:
            for c in e.code.all_codes():
                called.setdefault(c.name, c)
    for e in entries:
        if e.code is None and isinstance(e.error, _NotKnown) and f"{e.name}.construct" in called:
            e.code, e.error = called[f"{e.name}.construct"], None
    for f in module.functions:
        if not f.jit:
            continue
        e = Entry(f.name, f.node.lineno, f.node.col_offset, "jit", construct_line=f.node.lineno,
                  end_line=f.node.end_lineno or f.node.lineno)
        entries.append(e)
        try:
            params = [(p.name, p.default) for p in f.signature().parameters.values()]
            specs = _specs_for(params, f.node, None, f.calls, module, False)
            e.code = compile_function(f.source(), specs, name=f.name)
        except (FrontendError, VerifyError) as err:
            e.error = err
        except MsvmError as err:
            e.error = FrontendError(str(err), filename, f.node.lineno, f.node.col_offset)
    return entries


def _all_classes(module):
    return list(module.classes)


def analyze_file(path: str) -> list:
    with open(path, encoding="utf-8") as f:
        return analyze(f.read(), path)
