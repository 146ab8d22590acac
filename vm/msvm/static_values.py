"""The values of the bounded abstract evaluator (``static_eval``): what a name can hold
when nothing of the file runs, the budget that bounds the evaluation, and the msvm
objects the analysis may build (placeholders only).

- ``Unknown``: a value the analysis cannot know;
- ``UnknownData``: a tensor whose data (so its shape) comes from outside the file;
- ``SymInt``: an int nobody passed, a symbol where it becomes a dim;
- ``AbstractArray`` / ``AbstractRng``: numpy arrays and generators known by shape;
- ``Budget`` and ``Note``: the bounds, and what was assumed or not afforded;
  ``OutOfBudget`` and the control-flow signals of the evaluator (``Return``, ``Break``,
  ``Continue``); ``ListMethod`` / ``DictMethod``: a list's or dict's methods within the budget.
"""

from __future__ import annotations

import builtins
import inspect
import itertools
import math
from dataclasses import dataclass

import numpy as np

from . import dtype as dt
from .bytecode import symbolic as S
from .bytecode.symbolic import Expr
from .nn import layers as _layers
from .nn.cell import Cell
from .tensor import Parameter, Tensor


@dataclass
class Budget:
    """What one slice of abstract evaluation may spend."""

    steps: int = 200_000           # statements + expressions, per slice
    seconds: float = 0.5           # per slice (the top level; each factory and Cell built on its own)
    total_seconds: float = 0.8     # all slices of one document together
    min_seconds: float = 0.4       # a slice started after that still gets this much
    int_bits: int = 4096           # a larger int is Unknown
    size: int = 1 << 20            # items of one string / list / tuple
    total_size: int = 1 << 22      # items of all of them, per document
    loop: int = 256                # iterations of one loop statement
    depth: int = 24                # nested calls / Cells
    calls_kept: int = 8            # calls of one Cell remembered (its argument shapes)


class OutOfBudget(Exception):
    """A slice of evaluation spent its steps or seconds."""

    def __init__(self, what: str):
        super().__init__(what)
        self.what = what


class Return(BaseException):
    """``return`` in an evaluated function body."""

    def __init__(self, value):
        self.value = value


class Break(BaseException):
    """``break`` in an evaluated loop."""


class Continue(BaseException):
    """``continue`` in an evaluated loop."""


def size_of(v) -> int:
    """The items of a string or container (what the memory budget counts)."""
    return len(v) if isinstance(v, (str, list, tuple, range, bytes)) else 0


class DictMethod:
    """dict.get / items / keys / values / copy (views become lists)."""

    def __init__(self, d, name):
        self.d, self.name = d, name

    def __call__(self, *args):
        r = getattr(self.d, self.name)(*args)
        return list(r) if self.name in ("items", "keys", "values") else r


class ListMethod:
    """list.append / extend / insert / ... within the size budget of the module evaluating it."""

    def __init__(self, module, lst, name):
        self.module, self.lst, self.name = module, lst, name

    def __call__(self, *args):
        grow = len(args[-1]) if self.name == "extend" and args and isinstance(args[-1], (list, tuple)) else 1
        if len(self.lst) + grow > self.module.budget.size:
            return Unknown("a list too large to evaluate")
        self.module.allocated += grow
        return getattr(self.lst, self.name)(*args)


@dataclass
class Note:
    """Something the analysis assumed or could not afford, at a source line."""

    line: int
    col: int
    message: str

    def __str__(self):
        return f"line {self.line}: {self.message}"


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


class UnknownData:
    """A tensor whose data comes from outside the file (``np.load``, a ctor argument):
    its dtype is known (or float32), its rank and dims are chosen at compile time."""

    def __init__(self, why: str, dtype=None, parameter=False):
        self.why, self.dtype, self.parameter = why, dtype or dt.float32, parameter
        self.line, self.col = 0, 0      # where it was assigned to an attribute

    def __repr__(self):
        return f"<{'Parameter' if self.parameter else 'Tensor'} of unknown shape: {self.why}>"


class SymInt:
    """An int nobody passed (a constructor argument without a call site or default, or
    one whose value is unknown): a symbol where it becomes a dim, ``assumed`` where a
    decision needs a value."""

    __slots__ = ("expr", "assumed", "name", "why")
    ASSUMED = 2

    def __init__(self, expr: Expr, assumed: int, name: str = "", why: str = "nobody passes it"):
        self.expr, self.assumed, self.name, self.why = expr, assumed, name or str(expr), why

    @classmethod
    def named(cls, name: str, why: str = "nobody passes it"):
        return cls(S.sym(name), cls.ASSUMED, name, why)

    def __repr__(self):
        return f"<symbol {self.expr}>"


@dataclass
class AbstractArray:
    """A numpy array known only by shape and dtype (dims: ints or SymInt); ``values``: the array
    itself when it is small and made from plain numbers (``np.arange(seq)``, drop-path rates)."""

    shape: tuple
    dtype: np.dtype
    values: object = None

    @classmethod
    def of(cls, arr: np.ndarray) -> "AbstractArray":
        return cls(tuple(arr.shape), arr.dtype, arr)

    def astype(self, d, *a, **k):
        d = np.dtype(dt.as_dtype(d).np if isinstance(d, dt.DType) else d)
        return AbstractArray(self.shape, d, None if self.values is None else self.values.astype(d))

    @property
    def T(self):
        return AbstractArray(self.shape[::-1], self.dtype, None if self.values is None else self.values.T)

    @property
    def ndim(self):
        return len(self.shape)

    def reshape(self, *shape):
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        if self.values is not None and all(isinstance(d, int) for d in shape):
            return AbstractArray.of(self.values.reshape(shape))
        total = int(np.prod(self.shape))
        known = int(np.prod([d for d in shape if d != -1]))
        return AbstractArray(tuple(total // known if d == -1 else d for d in shape), self.dtype)

    def items(self) -> list | None:
        """Its items (numpy scalars or AbstractArrays) when its values are known, else None."""
        if self.values is None:
            return None
        return [AbstractArray.of(v) if isinstance(v, np.ndarray) else v for v in self.values]

    def tolist(self):
        return self.values.tolist() if self.values is not None else Unknown("values of an array")


class AbstractRng:
    """``np.random.default_rng(...)`` / ``RandomState(...)``: draws are AbstractArrays."""

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)

        def draw(*args, size=None, dtype=None, **kwargs):
            if size is None:
                nsize = {"standard_normal": 0, "random": 0, "normal": 2, "uniform": 2, "integers": 2,
                         "choice": 1, "standard_cauchy": 0}
                k = nsize.get(name)
                size = args[k] if k is not None and len(args) > k else None
            if size is None:
                return Unknown("a random scalar")
            kind = np.int64 if name == "integers" else np.float64
            return AbstractArray(shape_tuple(size), np.dtype(dtype or kind))
        return draw


def _dim(v):
    if isinstance(v, (SymInt, str)) or v is None:
        return v
    return int(v)


def shape_tuple(v) -> tuple:
    if isinstance(v, (list, tuple)):
        return tuple(_dim(x) for x in v)
    return (_dim(v),)


def placeholder(shape, dtype) -> Tensor:
    """A placeholder Tensor; SymInt dims become symbolic dims."""
    shape = list(shape)
    t = Tensor(shape=[None] * len(shape), dtype=dtype)
    t._pshape = tuple(d.expr if isinstance(d, SymInt) else None if (d is None or d == -1) else d for d in shape)
    return t


def parameter(src: Tensor, name=None) -> Parameter:
    """Parameter(src); a placeholder's symbolic dims are kept."""
    if not src.is_placeholder:
        return Parameter(src, name=name)
    p = Parameter(Tensor(shape=[None] * len(src.placeholder_shape), dtype=src.dtype), name=name)
    p._pshape = src.placeholder_shape
    return p


def _placeholder(arr: AbstractArray, dtype=None) -> Tensor:
    d = dt.as_dtype(dtype) if dtype is not None else dt.from_numpy(arr.dtype)
    return placeholder(arr.shape, d)


NP_CREATE = {"zeros", "ones", "empty", "full", "zeros_like", "ones_like", "empty_like", "full_like", "eye",
              "identity", "arange", "linspace"}
NP_RANDOM = {"randn", "rand", "random", "normal", "uniform", "standard_normal", "random_sample", "randint"}
NP_FOLD = {"sqrt", "prod", "log", "exp", "log2", "ceil", "floor"}
MATH_FOLD = {math.sqrt, math.log, math.exp, math.ceil, math.floor, math.log2, math.gcd, math.isqrt}
BUILTINS = {"range", "len", "int", "float", "bool", "tuple", "list", "min", "max", "abs", "sum", "round", "str",
             "isinstance", "enumerate", "zip", "reversed", "super", "print", "sorted", "dict"}
BUILTIN_FNS = {getattr(builtins, n) for n in BUILTINS - {"super", "print"}} | {itertools.repeat}
_MSVM_BUILDABLE = ("msvm.nn", "msvm.ops", "msvm.tensor", "msvm.dtype")


def np_call(fn_name: str, random: bool, args, kwargs):
    dtype = kwargs.get("dtype")
    if random:
        if fn_name in ("randn", "rand"):
            return AbstractArray(tuple(_dim(a) for a in args), np.dtype(np.float64))
        size = kwargs.get("size", args[-1] if fn_name in ("normal", "uniform", "randint") and len(args) >= 3 else
                          (args[0] if args and fn_name not in ("normal", "uniform", "randint") else None))
        if size is None:
            return Unknown("a random scalar")
        return AbstractArray(shape_tuple(size), np.dtype(np.int64 if fn_name == "randint" else np.float64))
    if fn_name in ("zeros", "ones", "empty"):
        dtype = dtype or (args[1] if len(args) > 1 else None)
        return AbstractArray(shape_tuple(args[0] if args else kwargs["shape"]), np.dtype(dtype or np.float64))
    if fn_name == "full":
        dtype = dtype or (args[2] if len(args) > 2 else None)
        return AbstractArray(shape_tuple(args[0]), np.dtype(dtype or np.asarray(args[1]).dtype))
    if fn_name.endswith("_like") and isinstance(args[0], AbstractArray):
        return AbstractArray(args[0].shape, np.dtype(dtype or args[0].dtype))
    if fn_name in ("eye", "identity"):
        n = _dim(args[0])
        return AbstractArray((n, _dim(args[1]) if len(args) > 1 and fn_name == "eye" else n),
                             np.dtype(dtype or np.float64))
    if fn_name == "arange":
        return AbstractArray((len(range(*[int(a) for a in args])),), np.dtype(dtype or np.int64))
    if fn_name == "linspace":
        return AbstractArray((int(kwargs.get("num", args[2] if len(args) > 2 else 50)),), np.dtype(np.float64))
    return Unknown(f"numpy.{fn_name}")


VALUES_KEPT = 1 << 16       # items of an array whose values the analysis computes


def array_binop(a, b, op=None):
    shapes = [x.shape if isinstance(x, AbstractArray) else () for x in (a, b)]
    if not all(isinstance(x, (AbstractArray, int, float)) for x in (a, b)):
        return Unknown("arithmetic on unknown values")
    vals = [x.values if isinstance(x, AbstractArray) else x for x in (a, b)]
    if op is not None and all(v is not None for v in vals) and not any(isinstance(d, SymInt) for sh in shapes
                                                                        for d in sh):
        try:
            if math.prod(np.broadcast_shapes(*shapes)) > VALUES_KEPT:
                raise ValueError("too large to keep its values")
            with np.errstate(all="ignore"):
                return AbstractArray.of(np.asarray(op(*vals)))
        except (TypeError, ValueError, ArithmeticError):
            pass
    try:
        shape = np.broadcast_shapes(*shapes)
    except (TypeError, ValueError):
        return Unknown("arrays that do not broadcast")
    d = np.result_type(*[x.dtype if isinstance(x, AbstractArray) else np.asarray(x).dtype for x in (a, b)])
    return AbstractArray(tuple(shape), d)


# ---------------------------------------------------------------- msvm objects with symbolic arguments

def _probes():
    out, n = [], 10007
    while len(out) < 64:
        if all(n % p for p in range(2, int(n ** 0.5) + 1)):
            out.append(n)
        n += 2
    return out


_PROBES = _probes()


def build_with_symbols(cls, args, kwargs, into=None):
    """cls(*args, **kwargs) where SymInt arguments are first replaced by distinct primes, and
    every dim / int attribute of the result that is a small multiple of a prime is replaced by
    the symbol (``nn.Dense(cin, cout).weight`` is ``[cout, cin]``)."""
    syms = {}

    def sub(v):
        if isinstance(v, SymInt):
            if len(syms) >= len(_PROBES):
                raise ValueError("too many symbolic arguments")
            p = next((p for p, s in syms.items() if s.expr == v.expr), None) or _PROBES[len(syms)]
            syms[p] = v
            return p
        if isinstance(v, (list, tuple)):
            return type(v)(sub(x) for x in v)
        return v

    args, kwargs = _ints_only(cls, args, kwargs)
    args = [sub(a) for a in args]
    kwargs = {k: sub(v) for k, v in kwargs.items()}
    if into is None:
        obj = cls(*args, **kwargs)
    else:                       # the msvm base of a Cell of the file: its __init__ on that Cell
        obj = into
        cls.__init__(obj, *args, **kwargs)
    if syms:
        _unprobe(obj, syms, set())
    return obj


def _ints_only(cls, args, kwargs):
    """A symbol is an int: an argument whose default is something else (``activation=None``)
    keeps its default."""
    try:
        sig = inspect.signature(cls)
        ba = sig.bind_partial(*args, **kwargs)
    except (TypeError, ValueError):
        return args, kwargs
    for name, v in list(ba.arguments.items()):
        d = sig.parameters[name].default
        if isinstance(v, SymInt) and d is not inspect.Parameter.empty and (isinstance(d, bool) or
                                                                            not isinstance(d, int)):
            ba.arguments[name] = d
    return list(ba.args), dict(ba.kwargs)


def _back(v, syms):
    if isinstance(v, bool) or not isinstance(v, int):
        return v
    for p, s in syms.items():
        if v % p == 0 and 0 < v // p <= 64:
            return s.expr * (v // p) if v // p != 1 else s.expr
    return v


def _unprobe(obj, syms, seen):
    if id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, Tensor):
        if obj.is_placeholder:
            obj._pshape = tuple(_back(d, syms) for d in obj._pshape)
        return
    d = getattr(obj, "__dict__", None)
    if d is None:
        return
    for k, v in list(d.items()):
        if isinstance(v, (Tensor, Cell)) or hasattr(v, "__dict__") and is_msvm_obj(v):
            _unprobe(v, syms, seen)
        elif isinstance(v, int) and not isinstance(v, bool):
            nv = _back(v, syms)
            if nv is not v:
                object.__setattr__(obj, k, nv)
        elif isinstance(v, tuple) and all(isinstance(x, int) for x in v):
            object.__setattr__(obj, k, tuple(_back(x, syms) for x in v))
        elif isinstance(v, dict):
            for x in v.values():
                _unprobe(x, syms, seen)


class abstract_init:
    """While active, nn layers create placeholder parameters instead of random data."""

    def __enter__(self):
        self.prev = _layers.STATIC_INIT
        _layers.STATIC_INIT = True

    def __exit__(self, *exc):
        _layers.STATIC_INIT = self.prev


def to_msvm(v):
    if isinstance(v, AbstractArray):
        return _placeholder(v)
    if isinstance(v, list):
        return [to_msvm(x) for x in v]
    return v


def jit_fn():
    from .jitfn import jit
    return jit


def buildable(cls) -> bool:
    """msvm classes the analysis may build: tensors, nn Cells, ops primitives, dtypes."""
    mod = cls.__module__ or ""
    return any(mod == m or mod.startswith(m + ".") for m in _MSVM_BUILDABLE)


def is_msvm_obj(v) -> bool:
    mod = getattr(type(v), "__module__", "") or ""
    return mod.startswith("msvm") or (inspect.isclass(v) and (v.__module__ or "").startswith("msvm"))
