"""``import mindspore`` as msvm: run MindSpore code and model zoos unchanged.

``as_mindspore()`` puts a finder first on ``sys.meta_path`` that answers every import of
``mindspore`` and ``mindspore.*``:

- names msvm provides map to msvm's modules (``mindspore.nn`` -> ``msvm.nn``,
  ``mindspore.ops.operations`` -> ``msvm.ops.primitives``, ``mindspore.common.initializer``
  -> ``msvm.common.initializer``, ... see ``MODULES``); each is a thin alias module whose
  attributes are msvm's own objects (``mindspore.Tensor is msvm.Tensor``);
- everything else MindSpore has — its dataset, training, mixed-precision and optimizer modules,
  and any name of MindSpore's that a mapped module lacks — is a *gap*: it imports, so that a
  package which imports them at its top (mindcv does) loads, and fails when used with
  ``MindSporeGap``, which names the missing API and says it is msvm's gap, not the user's error;
- a name or module MindSpore does not have (``compat_api``: MindSpore 2.10's module names and
  the attributes of the modules people import from) raises AttributeError / ImportError /
  ModuleNotFoundError as under MindSpore, so ``try: from mindspore import X except ImportError:``
  takes its fallback; in a module MindSpore has whose names are not recorded, every name is a gap.

A gap can be
  subclassed (``class Opt(nn.Optimizer)``); called by a library module's top level while it
  is imported (a decorator, ``ops.MultitypeFuncGraph("ema")``) it gives a lazy value that
  raises when it is used; called anywhere else — a function, a method, the script itself —
  it raises at once.

``msvm run --mindspore SCRIPT`` (or ``MSVM_AS_MINDSPORE=1``) calls ``as_mindspore()`` before the
script runs; a library calls it before importing the model zoo. A real MindSpore already
imported in the process is left alone (``as_mindspore`` raises rather than mixing the two).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import inspect
import sys
import types

from . import compat_api
from .errors import MsvmError

# mindspore module -> msvm module
MODULES = {
    "mindspore": "msvm",
    "mindspore.nn": "msvm.nn",
    "mindspore.ops": "msvm.ops",
    "mindspore.ops.operations": "msvm.ops.primitives",
    "mindspore.ops.functional": "msvm.ops",
    "mindspore.ops.composite": "msvm.ops",
    "mindspore.common": "msvm.common",
    "mindspore.common.dtype": "msvm.dtype",
    "mindspore.common.initializer": "msvm.common.initializer",
    "mindspore.common.tensor": "msvm.tensor",
    "mindspore.common.parameter": "msvm.tensor",
    "mindspore.context": "msvm.context",
    # checkpoints are msvm's; the rest of mindspore.train (Model, callbacks) stays a gap
    "mindspore.train": "msvm.checkpoint",
    "mindspore.train.serialization": "msvm.checkpoint",
    # where MindSpore's own tests reach for ops (one msvm module serves each face)
    "mindspore.ops.operations.array_ops": "msvm.ops.primitives",
    "mindspore.ops.operations.math_ops": "msvm.ops.primitives",
    "mindspore.ops.operations.nn_ops": "msvm.ops.primitives",
    "mindspore.ops.function": "msvm.ops",
    "mindspore.ops.function.math_func": "msvm.ops",
    "mindspore.ops.function.array_func": "msvm.ops",
    "mindspore.ops.function.nn_func": "msvm.ops",
    "mindspore.common.api": "msvm",
    "mindspore._checkparam": "msvm.checkparam",
    # issue 21: random ops and the other modules MindSpore's tests import ops from
    "mindspore.ops.operations.random_ops": "msvm.ops.primitives",
    "mindspore.ops.operations.image_ops": "msvm.ops.primitives",
    "mindspore.ops.operations.other_ops": "msvm.ops.primitives",
    "mindspore.ops.function.random_func": "msvm.ops",
    "mindspore.ops.primitive": "msvm.ops",          # (constexpr, Primitive: mindocr imports them from there)
    "mindspore.ops._primitive_cache": "msvm.ops._primitive_cache",
    "mindspore.numpy": "msvm.numpy_api",
}

# attributes MindSpore has under another name in msvm, per mindspore module
RENAMES = {
    # (mindspore.tensor(data, dtype) makes a Tensor; msvm.tensor is msvm's module of it)
    "mindspore": {"ms_function": "jit", "tensor": "Tensor"},
}

_MISSING = object()
# MindSpore's modules outside what msvm is for: their names are gaps by design
OUT_OF_SCOPE = ("mindspore.dataset", "mindspore.train", "mindspore.amp", "mindspore.nn.optim", "mindspore.boost",
                "mindspore.communication", "mindspore.parallel", "mindspore.nn.learning_rate_schedule",
                "mindspore.nn.dynamic_lr", "mindspore.nn.wrap", "mindspore.export", "mindspore.profiler")
# names (any dotted part) of MindSpore's gradient, training and export machinery
TRAINING = frozenset({"GradOperation", "grad", "value_and_grad", "vjp", "jvp", "jacfwd", "jacrev", "_grad_ops",
                      "export", "load_checkpoint", "save_checkpoint", "TrainOneStepCell"})


class MindSporeGap(MsvmError, NotImplementedError):
    """A MindSpore API msvm does not provide was used."""

    def __init__(self, name: str):
        self.api = name
        if TRAINING & set(name.replace("(", ".").split(".")):
            why = "msvm does not do training/export: it runs the forward pass of Cells; gradients, " \
                  "optimizers and export are MindSpore's"
        elif name.startswith(OUT_OF_SCOPE):
            why = "msvm runs the forward pass of Cells; datasets, training, optimizers and export are MindSpore's"
        else:
            why = "msvm does not implement it yet"
        super().__init__(f"{name} is not provided by msvm (msvm's gap, not an error in your code: {why})")


def _at_import(depth: int = 2) -> bool:
    """True when the caller is a library module's top level, or a class body in it, being
    imported (not ``__main__``): code that is not a function's (no CO_NEWLOCALS)."""
    f = sys._getframe(depth)
    return not f.f_code.co_flags & inspect.CO_NEWLOCALS and f.f_globals.get("__name__") != "__main__"


def _use(name: str, args, kwargs, depth: int = 3):
    """What calling the gap ``name`` gives: at a library's import, a decorator's result or a
    lazy value (``_ema_op = ops.MultitypeFuncGraph("ema")`` then ``@_ema_op.register(...)``);
    anywhere else, MindSporeGap."""
    if not _at_import(depth):
        raise MindSporeGap(name)
    if len(args) == 1 and not kwargs and callable(args[0]) and not isinstance(args[0], _GapValue):
        fn = args[0]

        def unavailable(*a, **k):
            raise MindSporeGap(name)

        unavailable.__name__ = getattr(fn, "__name__", "unavailable")
        unavailable.__qualname__ = getattr(fn, "__qualname__", unavailable.__name__)
        unavailable.__doc__ = getattr(fn, "__doc__", None)
        return unavailable
    return _GapValue(f"{name}(...)")


class _GapValue:
    """What a gap returned at import time: any later use but attribute reads and calls raises."""

    __slots__ = ("_name",)

    def __init__(self, name):
        self._name = name

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _GapValue(f"{self._name}.{attr}")

    def __call__(self, *args, **kwargs):
        return _use(self._name, args, kwargs)

    def _raise(self, *a, **k):
        raise MindSporeGap(self._name)

    __bool__ = __iter__ = __len__ = __getitem__ = __add__ = __mul__ = _raise

    def __repr__(self):
        return f"<msvm gap {self._name}>"


class _GapMeta(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return gap(f"{cls.__gap__}.{name}")

    def __call__(cls, *args, **kwargs):
        if "__gap__" not in cls.__dict__:         # a user's subclass of a gap, instantiated
            raise MindSporeGap(f"{cls.__gap__} (base of {cls.__qualname__})")
        return _use(cls.__gap__, args, kwargs)

    def __repr__(cls):
        return f"<msvm gap {cls.__gap__}>"


def gap(name: str) -> type:
    """A stand-in for the MindSpore API ``name`` (a dotted path) that raises when it is used."""
    return _GapMeta(name.rsplit(".", 1)[-1], (), {"__gap__": name, "__module__": name.rsplit(".", 1)[0]})


class _Alias(types.ModuleType):
    """``mindspore.X`` backed by an msvm module: its attributes, then submodules, then gaps."""

    def __init__(self, name: str, target: types.ModuleType | None):
        super().__init__(name, getattr(target, "__doc__", None))
        self.__target = target
        self.__path__ = []                 # a package: submodules go through the finder
        if target is not None and hasattr(target, "__all__"):
            self.__all__ = list(target.__all__)
        if name in ("mindspore", "mindspore.version"):      # (the MindSpore whose API msvm mirrors: version
            self.__version__ = compat_api.version()        # checks pick its branch)

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        full = f"{self.__name__}.{attr}"
        if full in sys.modules:
            return sys.modules[full]
        renamed = RENAMES.get(self.__name__, {}).get(attr)
        value = getattr(self.__target, renamed or attr, _MISSING)
        if full in MODULES or isinstance(value, types.ModuleType):
            return importlib.import_module(full)          # an alias module too, never msvm's own
        if value is not _MISSING:
            return value
        if compat_api.is_module(full):
            return importlib.import_module(full)          # a module of MindSpore's msvm lacks: its names are gaps
        if compat_api.has_name(self.__name__, attr) is False:
            raise AttributeError(f"module '{self.__name__}' has no attribute '{attr}' (nor has MindSpore "
                                 f"{compat_api.version()}'s)")
        return gap(full)

    def __dir__(self):
        return sorted(set(dir(self.__target)) | set(self.__dict__))


def _msvm_module(fullname: str):
    """The msvm module behind ``mindspore.a.b`` when it is a module attribute of a mapped module
    (``mindspore.dtype`` is msvm.dtype), else None."""
    parent, _, last = fullname.rpartition(".")
    target = getattr(sys.modules.get(parent), "_Alias__target", None) if parent else None
    target = getattr(target, last, None)
    return target if isinstance(target, types.ModuleType) else None


class _Loader(importlib.abc.Loader):
    def create_module(self, spec):
        if spec.name in MODULES:
            target = importlib.import_module(MODULES[spec.name])
        else:                               # a module attribute of a mapped module, or a gap
            target = _msvm_module(spec.name)
        return _Alias(spec.name, target)

    def exec_module(self, module):
        pass


class _Finder(importlib.abc.MetaPathFinder):
    loader = _Loader()

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "mindspore" and not fullname.startswith("mindspore."):
            return None
        if fullname not in MODULES and not compat_api.is_module(fullname) and _msvm_module(fullname) is None:
            return None             # MindSpore has no such module either: ModuleNotFoundError
        return importlib.machinery.ModuleSpec(fullname, self.loader, is_package=True)


_FINDER = _Finder()


def as_mindspore() -> None:
    """Make ``import mindspore`` (and every ``mindspore.*``) resolve to msvm in this process."""
    if any(f is _FINDER for f in sys.meta_path):
        return
    real = sys.modules.get("mindspore")
    if real is not None and not isinstance(real, _Alias):
        raise MsvmError("as_mindspore(): the real MindSpore is already imported in this process; "
                        "call as_mindspore() before anything imports mindspore")
    sys.meta_path.insert(0, _FINDER)


def remove_alias() -> None:
    """Undo ``as_mindspore()``: ``import mindspore`` no longer resolves to msvm, and the alias
    modules imported so far are forgotten (a test that imports a model zoo in-process cleans up)."""
    while _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)
    for name in [n for n, m in sys.modules.items() if isinstance(m, _Alias)]:
        del sys.modules[name]


def is_active() -> bool:
    return any(f is _FINDER for f in sys.meta_path)
