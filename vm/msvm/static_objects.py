"""The user's definitions as the abstract evaluator (``static_eval``) holds them: a
function of the file (``StaticFunction``), a method bound to a Cell being built, a class
(``StaticClass``), an instance of a Cell class built from source (``StaticCell``, what the
frontend compiles), ``super()`` inside ``__init__`` and another module of the document's
package (``StaticNamespace``).

None of them runs user code: their bodies are evaluated by the module that made them.
"""

from __future__ import annotations

import ast
import inspect
from dataclasses import dataclass, field

from .errors import FrontendError
from .frontend.compiler import FunctionSource, signature_params, source_of
from .nn.cell import Cell
from .static_values import SymInt, Unknown, UnknownData, abstract_init, build_with_symbols, buildable, to_msvm


@dataclass
class StaticFunction:
    node: ast.FunctionDef
    module: object                  # the static_eval.StaticModule that defined it
    jit: bool = False
    calls: list = field(default_factory=list)
    env: dict | None = None         # where it was defined (None: the module)

    @property
    def name(self):
        return self.node.name

    def is_static(self) -> bool:
        """Decorated ``@staticmethod``: called without the instance."""
        return any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in self.node.decorator_list)

    def source(self) -> FunctionSource:
        return FunctionSource(self.node, self.module.filename, 0, 0, self.module.env, {}, self.node.name)

    def signature(self, skip_self=False, kwonly=False):
        return signature_of(self.node, self.module, skip_self, kwonly)

    def __msvm_inline__(self):
        return self.source(), None, self.signature()


class StaticBoundMethod:
    def __init__(self, fn: StaticFunction, obj):
        self.fn, self.obj = fn, obj

    def __msvm_inline__(self):
        src = self.fn.source()
        src.qualname = f"{type(self.obj).__name__}.{self.fn.name}"
        return src, self.obj, self.fn.signature()


def signature_of(node: ast.FunctionDef, module, skip_self=False, kwonly=False) -> inspect.Signature:
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
    def __init__(self, node: ast.ClassDef, module, bases):
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
            if isinstance(v, SymInt):        # a size nobody passed: its symbol (bound by a weight's shape)
                return v.expr
            if isinstance(v, (tuple, list)) and any(isinstance(x, SymInt) for x in v):     # (-1, hidden)
                return type(v)(x.expr if isinstance(x, SymInt) else x for x in v)
            if isinstance(v, (Unknown, UnknownData)):
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


class Super:
    """super() inside __init__: ``super().__init__(...)`` runs the msvm base's __init__ (when the
    Cell extends one, such as nn.Dropout) on placeholders; otherwise it does nothing."""

    def __init__(self, obj):
        self.obj = obj

    def init(self, *args, **kwargs):
        base = self.obj._static_class.real_base() if isinstance(self.obj, StaticCell) else None
        if base is None or base is Cell:
            return None
        init_real_base(base, self.obj, args, kwargs)
        return None


def init_real_base(base, obj, args, kwargs):
    if not buildable(base):
        raise ValueError(f"{base.__name__} is not a class the analysis builds")
    args = [to_msvm(a) for a in args]
    kwargs = {k: to_msvm(v) for k, v in kwargs.items()}
    if any(isinstance(a, (Unknown, UnknownData)) for a in list(args) + list(kwargs.values())):
        raise ValueError("the msvm base of a Cell built from unknown arguments")
    with abstract_init():        # (sizes nobody passed stay symbols: LayerNorm((dim,)).gamma is [dim])
        build_with_symbols(base, args, kwargs, into=obj)


class StaticObject:
    """An instance of a plain (non-Cell) class of the file, such as a model's config: its
    ``__init__`` evaluated abstractly, its attributes kept here; methods are its class's."""

    def __init__(self, cls: StaticClass):
        self._static_class = cls

    def __repr__(self):
        return f"<static {self._static_class.name}>"


class StaticPartial:
    """``functools.partial(fn, *args, **kwargs)`` of a value the analysis holds: calling it calls
    ``fn`` with those arguments first (a model zoo's ``norm_layer=partial(nn.LayerNorm, ...)``)."""

    def __init__(self, fn, args: tuple, kwargs: dict):
        self.fn, self.args, self.kwargs = fn, args, kwargs


class StaticNamespace:
    """A module of the document's package (a relative import), evaluated abstractly."""

    def __init__(self, module):
        self.module = module
