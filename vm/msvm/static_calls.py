"""Calls in the abstract evaluator (``static_eval``): what each call of a file means when
nothing may run.

- call-site collection: a call of a Cell instance records its arguments (the shapes the
  Cell is compiled for), a call of a function of the file records them too;
- the file's functions (factories, helpers) and the methods of a Cell being built are
  evaluated with the arguments given; factories nobody calls once, from their defaults or
  symbols (``run_uncalled_functions``);
- a Cell class of the file is instantiated (``instantiate``: its ``__init__`` evaluated with
  constructor arguments from the call site, defaults, or symbols named after them);
- msvm objects (Tensor, Parameter, nn Cells, ops primitives, initializers) are built as
  placeholders (``construct_msvm``), numpy calls are shapes (``numpy_call``), a few
  builtins and math functions are folded; anything else is ``Unknown`` and never runs.

``Calls`` is a mixin of ``static_eval.StaticModule``: it uses the module's ``eval``,
``exec_block``, budget and notes.
"""

from __future__ import annotations

import ast
import builtins
import collections
import copy
import functools
import inspect
import math
import time

import numpy as np

from . import dtype as dt
from .nn.cell import Cell
from .static_objects import (
    StaticBoundMethod,
    StaticCell,
    StaticClass,
    StaticFunction,
    StaticObject,
    StaticPartial,
    Super,
    init_real_base,
)
from .static_values import (
    BUILTIN_FNS,
    MATH_FOLD,
    NP_CREATE,
    NP_FOLD,
    NP_RANDOM,
    AbstractArray,
    AbstractRng,
    Break,
    Continue,
    DictMethod,
    ListMethod,
    OutOfBudget,
    Return,
    SymInt,
    Unknown,
    UnknownData,
    abstract_init,
    build_with_symbols,
    buildable,
    jit_fn,
    np_call,
    parameter,
    placeholder,
    shape_tuple,
    size_of,
    to_msvm,
)
from .tensor import Parameter, Tensor

NP_SAME_SHAPE = {"tril", "triu", "abs", "exp", "log", "sqrt", "sin", "cos", "tanh", "negative", "square", "clip",
                 "round", "floor", "ceil", "ascontiguousarray", "copy"}


class Calls:
    """The call half of the abstract evaluator (mixed into ``StaticModule``)."""

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
            return Super(self_obj)
        args, kwargs = self.call_args(node, env, self_obj)
        if args is None:
            return Unknown("*args")
        return self.apply(fn, args, kwargs, node, self_obj)

    def apply(self, fn, args, kwargs, node, self_obj, direct: bool = True):
        """``fn(*args, **kwargs)`` at ``node`` (``direct``: the arguments are those written at node)."""
        if fn is functools.partial and args:           # norm_layer=partial(nn.LayerNorm, epsilon=1e-6)
            return StaticPartial(args[0], tuple(args[1:]), dict(kwargs))
        if isinstance(fn, StaticPartial):
            return self.apply(fn.fn, list(fn.args) + list(args), {**fn.kwargs, **kwargs}, node, self_obj, False)
        if isinstance(fn, Unknown) and direct and isinstance(node.func, ast.Attribute) and \
                node.func.attr == "astype" and len(args) == 1:          # <unknown>.astype(np.int32): its dtype
            try:
                d = args[0] if isinstance(args[0], dt.DType) else dt.from_numpy(np.dtype(args[0]))
            except (TypeError, ValueError, KeyError):
                return fn
            return UnknownData(fn.why, d)
        if isinstance(fn, Unknown):
            return self.unknown_builder(fn, args, kwargs, node)
        if isinstance(fn, StaticClass):
            return self.instantiate(fn, args, kwargs) if fn.is_cell else self.instantiate_object(fn, args, kwargs)
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
        if isinstance(fn, StaticBoundMethod) and (fn.obj is self_obj or isinstance(fn.obj, StaticObject)) and \
                fn.fn.name != "construct":        # self._make_layer(...), cnf.adjust_channels(...)
            if fn.fn.is_static():
                return self.call_function(fn.fn, list(args), kwargs, node)
            return self.call_function(fn.fn, [fn.obj] + list(args), kwargs, node, self_obj=fn.obj)
        if isinstance(getattr(fn, "__self__", None), Super):     # super().__init__(...): the msvm base's
            return fn(*args, **kwargs)
        if fn is collections.OrderedDict:                # an ordered dict is a dict
            fn = builtins.dict
        if fn in (copy.copy, copy.deepcopy) and len(args) == 1:     # config = copy.deepcopy(config)
            return self.copied(args[0])
        if fn is builtins.int and len(args) == 1 and isinstance(args[0], SymInt):
            return args[0]
        if fn in (builtins.tuple, builtins.list) and len(args) == 1 and not kwargs and isinstance(args[0], SymInt):
            return fn(self.assumed_sequence(args[0], node))     # tuple(embedding_shape), nobody passes it
        if fn is jit_fn():
            if args and isinstance(args[0], StaticFunction):
                args[0].jit = True
                return args[0]
            return Unknown("jit")
        big = [a for a in list(args) + list(kwargs.values()) if size_of(a) > self.budget.size]
        if big and fn not in (builtins.len, builtins.range):
            self.note(f"a call over {size_of(big[0])} items is not evaluated", node)
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
        if isinstance(fn, (ListMethod, DictMethod)):
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
                and getattr(fn, "__name__", "") in ("append", "set_inputs", "set_train", "extend", "insert", "to_float"):
            return fn(*[to_msvm(a) for a in args], **kwargs)
        if isinstance(fn, type) and buildable(fn):
            if direct and not any(isinstance(a, ast.Starred) for a in node.args):
                args = [named_symbol(a, n) for a, n in zip(args, node.args)]
                kwargs = {k.arg: named_symbol(kwargs[k.arg], k.value) for k in node.keywords if k.arg}
            return self.construct_msvm(fn, args, kwargs)
        if callable(fn) and not isinstance(fn, type) and (mod.startswith("msvm.ops.primitives") or
                                                          mod == "msvm.dtype"):
            return fn(*args, **kwargs)
        if mod == "msvm.common.initializer":
            return self.initializer_call(fn, args, kwargs)
        if mod == "msvm.ops.functional" or (isinstance(getattr(fn, "__self__", None), Tensor) and
                                            getattr(fn, "__name__", "") in TENSOR_METHODS):
            return eager_op(fn, args, kwargs)
        return Unknown(f"call of {getattr(fn, '__qualname__', type(fn).__name__)}")

    def copied(self, v):
        """copy.copy / deepcopy of a value the analysis holds: a config object's attributes, a
        container's items (within the size budget); anything else stays what it is."""
        if isinstance(v, StaticObject):
            out = StaticObject(v._static_class)
            out.__dict__.update({k: self.copied(x) for k, x in v.__dict__.items() if k != "_static_class"})
            return out
        if isinstance(v, (list, tuple, dict)):
            return self.afford(copy.copy(v)) if not isinstance(v, dict) else self.afford_dict(dict(v))
        return v

    def initializer_call(self, fn, args, kwargs):
        """``initializer(init, shape, dtype)``: a placeholder of that shape (no data is drawn);
        an Initializer object itself is only a description."""
        if isinstance(fn, type):      # TruncatedNormal(0.02): a description of how to draw, built as it is
            vals = list(args) + list(kwargs.values())
            if any(isinstance(a, (Unknown, SymInt, UnknownData, Tensor)) for a in vals):
                return Unknown("an initializer of unknown arguments")
            try:
                return fn(*args, **kwargs)
            except Exception as e:  # noqa: BLE001
                return Unknown(f"{fn.__name__}: {e}")
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
        self.assume(f"assumed {ast.unparse(node.func)}(...) builds {cls.name} from its keyword arguments", node)
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
        if name in ("finfo", "iinfo") and len(args) == 1 and isinstance(args[0], (type, np.dtype)):
            return fn(args[0])                        # np.finfo(np.float32).min: a constant
        if name in NP_SAME_SHAPE and args and isinstance(args[0], AbstractArray):    # np.tril(np.ones((n, n)))
            a = args[0]
            if a.values is not None and all(not isinstance(x, (Unknown, SymInt)) for x in args[1:]):
                return AbstractArray.of(np.asarray(fn(a.values, *args[1:], **kwargs)))
            return AbstractArray(a.shape, a.dtype)
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
        globals_, self.scope = self.scope, fn.module.env      # its names are those of the file defining it
        try:
            self.exec_block(fn.node.body, env, self_obj=self_obj)
        except Return as r:
            return r.value
        except (Break, Continue):
            pass
        finally:
            self.depth -= 1
            self.scope = globals_
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
                    init_real_base(base, obj, args, kwargs)
                except Exception as e:  # noqa: BLE001
                    return Unknown(f"{cls.name} extends {base.__name__}: {e}")
            cls.instances.append(obj)
            return obj
        before = self.assumptions
        self.run_init(cls, init, self.bind_init(cls, init, obj, args, kwargs), obj)
        object.__setattr__(obj, "_static_assumed", self.assumptions - before)   # (values assumed while built)
        cls.instances.append(obj)
        return obj

    def instantiate_object(self, cls: StaticClass, args, kwargs):
        """An instance of a plain class of the file (a config): its ``__init__`` evaluated."""
        if self.depth >= self.budget.depth:
            return Unknown("objects nested too deeply")
        obj = StaticObject(cls)
        init = cls.find_method("__init__")
        if init is not None:
            self.run_init(cls, init, self.bind_init(cls, init, obj, args, kwargs), obj)
        return obj

    def bind_init(self, cls, init, obj, args, kwargs) -> dict:
        """The names of ``__init__``'s body: its parameters bound to the arguments, defaults, or
        symbols named after them; a config nobody passes is the config class's defaults."""
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
                params[p.name] = self.assumed_config(init, i) or SymInt.named(p.name)
        defaults = {p.name: p.default for p in sig}
        for name, v in params.items():     # an unknown argument (cfg.hidden) is a symbol named after it
            d = defaults.get(name, inspect.Parameter.empty)
            size = isinstance(d, int) and not isinstance(d, bool)
            if isinstance(v, (Unknown, SymInt)) and d is not inspect.Parameter.empty and not size:
                # a rate, a flag, a name, a layer: not a size, so not a symbol; its default is assumed
                self.assume(f"assumed {name} = {d!r} (its default: its value is not known statically)", init.node)
                params[name] = d
            elif isinstance(v, Unknown):
                params[name] = SymInt.named(name, f"its value is not known statically ({v.why})")
        return params

    def assumed_config(self, init: StaticFunction, k: int):
        """Parameter k of ``init`` nobody passes, annotated with a plain class of the file or named
        like a config (``config``, ``cfg``) where the file has one config class: that class built
        from its defaults (noted); else None."""
        a = (init.node.args.posonlyargs + init.node.args.args)[k] if k < len(init.node.args.args) + len(
            init.node.args.posonlyargs) else None
        if a is None:
            return None
        cls = None
        if isinstance(a.annotation, (ast.Name, ast.Constant)):
            name = a.annotation.id if isinstance(a.annotation, ast.Name) else str(a.annotation.value)
            cls = next((c for c in init.module.classes if c.name == name and not c.is_cell), None)
        elif "config" in a.arg.lower() or a.arg.lower() in ("cfg", "conf"):
            configs = [c for c in init.module.classes if not c.is_cell and "config" in c.name.lower()]
            cls = configs[0] if len(configs) == 1 else None
        if cls is None or cls.find_method("__init__") is None:
            return None
        ctor = cls.find_method("__init__")
        if any(p.default is inspect.Parameter.empty and p.kind not in (inspect.Parameter.VAR_POSITIONAL,
                                                                        inspect.Parameter.VAR_KEYWORD)
               for p in list(ctor.signature(kwonly=True).parameters.values())[1:]):
            return None
        self.assume(f"assumed {a.arg} = {cls.name}() (its defaults: nobody passes {a.arg})", a)
        return self.instantiate_object(cls, [], {})

    def run_init(self, cls, init, env, obj):
        """``__init__``'s body on ``obj``, with the names of the file that defines the class."""
        self.depth += 1
        globals_, self.scope = self.scope, cls.module.env
        try:
            self.exec_block(init.node.body, env, self_obj=obj)
        except (Return, Break, Continue):
            pass
        finally:
            self.depth -= 1
            self.scope = globals_


def _small_range(name, args, kwargs, limit: int = 4096):
    """np.linspace / np.arange over plain numbers, with its values, when it has at
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
        return AbstractArray.of((np.linspace if name == "linspace" else np.arange)(*args, **kwargs))
    except (TypeError, ValueError, ZeroDivisionError, OverflowError, IndexError):
        return None


def named_symbol(v, node):
    """An unknown argument written as a name (``width``, ``cfg.hidden``) is a symbol of that name,
    so ``nn.Conv2d(cin, width, 1)`` and ``nn.BatchNorm2d(width)`` share their dim."""
    if not isinstance(v, Unknown):
        return v
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
    return SymInt.named(name, f"its value is not known statically ({v.why})") if name else v


# ---------------------------------------------------------------- msvm's eager ops at build time

EAGER_ITEMS = 1 << 16        # items an op evaluated at build time may read or make (else: shape only)
OPS_CREATE = {"ones", "zeros", "full", "empty"}
OPS_SAME_SHAPE = {"tril", "triu", "abs", "neg", "exp", "log", "sqrt", "sin", "cos", "tanh", "sigmoid",
                  "logical_not", "ones_like", "zeros_like", "full_like", "astype", "float", "int", "bool",
                  "cast", "clone", "copy"}
OPS_RESHAPE = {"view", "reshape"}
TENSOR_METHODS = OPS_SAME_SHAPE | OPS_RESHAPE | {"transpose", "permute", "swapaxes", "squeeze", "expand_dims",
                                                  "unsqueeze", "flatten", "sum", "mean", "max", "min", "T"}


def _shape_arg(v):
    if isinstance(v, (int, SymInt)) and not isinstance(v, bool):
        return (v,)
    if isinstance(v, (tuple, list)) and all(isinstance(x, (int, SymInt)) and not isinstance(x, bool) for x in v):
        return tuple(v)
    return None


def _dims_of(t: Tensor) -> tuple:
    return tuple(t.shape) if not t.is_placeholder else tuple(t.placeholder_shape)


def _known_items(shape) -> int | None:
    if any(not isinstance(d, int) or d < 0 for d in shape):
        return None
    return math.prod(shape)


def _sym_dims(shape) -> tuple:
    return tuple(SymInt(d, SymInt.ASSUMED) if not isinstance(d, int) and d is not None else d for d in shape)


def eager_op(fn, args, kwargs):
    """An msvm op (``ops.tril(ops.ones((n, n), dtype=bool))``, ``t.view(1, 1, n, n)``) in a Cell's
    ``__init__``: msvm's own eager kernels are pure numpy, so on known values of at most
    ``EAGER_ITEMS`` items it runs; on symbolic or larger sizes (or a placeholder) the result is
    a placeholder of the shape it would have, whose data only the run knows."""
    name = getattr(fn, "__name__", "")
    self_t = getattr(fn, "__self__", None)
    tensors = ([self_t] if isinstance(self_t, Tensor) else []) + \
        [a for a in list(args) + list(kwargs.values()) if isinstance(a, Tensor)]
    if any(isinstance(a, (Unknown, UnknownData, AbstractArray)) for a in list(args) + list(kwargs.values())):
        return Unknown(f"ops.{name} of unknown values")
    if name in OPS_CREATE:
        shape = _shape_arg(args[0] if args else kwargs.get("shape", kwargs.get("size")))
        if shape is None:
            return Unknown(f"ops.{name} of an unknown shape")
        d = kwargs.get("dtype", args[2] if name == "full" and len(args) > 2 else
                       args[1] if name != "full" and len(args) > 1 else None)
        n = _known_items(shape)
        if n is None or n > EAGER_ITEMS:
            return placeholder(shape, dt.as_dtype(d) if d is not None else dt.float32)
    elif not tensors:
        return Unknown(f"ops.{name} without tensors")
    elif any(t.is_placeholder for t in tensors) or any(_known_items(_dims_of(t)) is None or
                                                       _known_items(_dims_of(t)) > EAGER_ITEMS for t in tensors):
        return _shape_only(name, self_t, tensors[0], args, kwargs)
    if any(isinstance(a, SymInt) or (isinstance(a, (tuple, list)) and any(isinstance(x, SymInt) for x in a))
           for a in list(args) + list(kwargs.values())):
        return _shape_only(name, self_t, tensors[0] if tensors else None, args, kwargs)
    try:
        r = fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - the file's own mistake is the run's to report
        return Unknown(f"ops.{name}: {e}")
    if isinstance(r, Tensor) and not r.is_placeholder and r.size > EAGER_ITEMS:
        return placeholder(r.shape, r.dtype)
    return r


def _shape_only(name, self_t, t, args, kwargs):
    """The placeholder an op on a placeholder (or too large a tensor) gives, for ops whose
    result shape follows from the arguments; others are Unknown."""
    if t is None:
        return Unknown(f"ops.{name} of unknown values")
    dims = _dims_of(t)
    if name in OPS_SAME_SHAPE:
        d = kwargs.get("dtype")
        if name in ("astype", "cast") and args:
            d = args[-1]
        try:
            d = dt.as_dtype(d) if d is not None else t.dtype
        except (TypeError, ValueError, KeyError):
            d = t.dtype
        return placeholder(_sym_dims(dims), d)
    if name in OPS_RESHAPE:
        rest = args if self_t is not None else args[1:]
        shape = _shape_arg(rest[0] if len(rest) == 1 else tuple(rest))
        if shape is None:
            return Unknown(f"{name} to an unknown shape")
        if sum(1 for d in shape if isinstance(d, int) and d == -1) == 1:
            total, known = _known_items(dims), _known_items([d for d in shape if not (isinstance(d, int) and d == -1)])
            if total is None or not known:
                return Unknown(f"{name} with -1 of a symbolic shape")
            shape = tuple(total // known if isinstance(d, int) and d == -1 else d for d in shape)
        return placeholder(shape, t.dtype)
    return Unknown(f"ops.{name} of a tensor whose data only the run knows")
