"""Static types of bytecode values (what the metadata stack holds) and the
shape environment that unifies symbolic dimensions.

``TensorType(shape, dtype)`` has a tuple of ``Expr`` dims. ``ScalarType`` is a
weak Python scalar whose value may be known symbolically (``x.shape[0]`` is
``ScalarType('i', B)``; a bool argument ``training`` is ``ScalarType('b', flag)``).

``ShapeEnv`` is where shape rules record what they learn. Dimension symbols of
the inputs are unification variables: ``[x0, x1] @ [y0, 1024]`` binds
``y0 := x1``; ``x1`` against the constant 768 binds ``x1 := 768`` (and the entry
check then demands 768). Two different constants, or exprs whose difference is a
non-zero constant, are a ``ShapeError``. Anything else that cannot be decided
statically becomes an *assumption* that the VM checks when the symbols are
bound, before any instruction runs.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import dtype as dt
from .symbolic import Expr, Pred, fmt_shape


class ShapeError(ValueError):
    """A shape or dtype rule failed; the verifier adds the source location."""


@dataclass(frozen=True)
class TensorType:
    shape: tuple
    dtype: dt.DType

    @property
    def rank(self) -> int:
        return len(self.shape)

    def __str__(self):
        return f"Tensor[{self.dtype.name}, {fmt_shape(self.shape)}]"

    def describe(self) -> str:
        """The hover form: ``Tensor[float32, (B, 1024)]``."""
        return f"Tensor[{self.dtype.name}, ({', '.join(str(d) for d in self.shape)}{',' if len(self.shape) == 1 else ''})]"


@dataclass(frozen=True)
class ScalarType:
    kind: str                      # 'b', 'i', 'f'
    value: Expr | Pred | None = None

    def __str__(self):
        name = {"b": "bool", "i": "int", "f": "float"}[self.kind]
        return f"{name}({self.value})" if self.value is not None else name

    describe = __str__


@dataclass(frozen=True)
class TupleType:
    items: tuple

    def __str__(self):
        return "(" + ", ".join(str(t) for t in self.items) + ")"

    describe = __str__


@dataclass(frozen=True)
class NoneType:
    def __str__(self):
        return "None"

    describe = __str__


NONE = NoneType()
Type = TensorType | ScalarType | TupleType | NoneType


def type_of_const(v) -> Type:
    """Static type of a constant-pool value pushed by LOAD_CONST."""
    import numpy as np

    if v is None:
        return NONE
    if isinstance(v, bool):
        return ScalarType("b", Pred("const", (v,)))
    if isinstance(v, int):
        return ScalarType("i", Expr.const(v))
    if isinstance(v, float):
        return ScalarType("f")
    if isinstance(v, np.ndarray):
        return TensorType(tuple(Expr.const(d) for d in v.shape), dt.from_numpy(v.dtype))
    if isinstance(v, tuple):
        return TupleType(tuple(type_of_const(x) for x in v))
    raise ShapeError(f"constant {v!r} cannot be pushed on the operand stack")


class ShapeEnv:
    """Unification of dimension symbols plus the assumptions left for run time."""

    def __init__(self, unifiable=()):
        self.subst: dict[str, Expr] = {}
        self.unifiable: set[str] = set(unifiable)
        self.assumptions: list[tuple[Expr, Expr, str]] = []
        self.origins: dict[str, str] = {}

    def norm(self, e: Expr) -> Expr:
        return e.subs(self.subst) if self.subst else e

    def norm_type(self, t):
        if not self.subst:
            return t
        if isinstance(t, TensorType):
            return TensorType(tuple(self.norm(d) for d in t.shape), t.dtype)
        if isinstance(t, ScalarType) and isinstance(t.value, (Expr, Pred)):
            return ScalarType(t.kind, t.value.subs(self.subst))
        if isinstance(t, TupleType):
            return TupleType(tuple(self.norm_type(x) for x in t.items))
        return t

    def _bind(self, name: str, value: Expr, why: str):
        self.subst = {k: v.subs({name: value}) for k, v in self.subst.items()}
        self.subst[name] = value
        self.origins[name] = why
        self.assumptions = [(a.subs({name: value}), b.subs({name: value}), w) for a, b, w in self.assumptions]

    def require_eq(self, a, b, why: str) -> Expr:
        """Demand a == b; returns the representative. Raises ShapeError if provably not."""
        a, b = self.norm(Expr.of(a)), self.norm(Expr.of(b))
        if a == b:
            return a
        diff = a - b
        if diff.const_value() is not None or diff.never_zero():
            raise ShapeError(why)
        for var, val in ((b, a), (a, b)):
            name = var.as_symbol()
            if name in self.unifiable and name not in val.symbols():
                self._bind(name, val, why)
                return val
        if not any(x == a and y == b for x, y, _ in self.assumptions):
            self.assumptions.append((a, b, why))
        return a if a.is_const() else b if b.is_const() else a

    def broadcast(self, shapes, what: str) -> tuple:
        """numpy broadcasting over symbolic shapes; non-1 symbolic dims must agree."""
        rank = max(len(s) for s in shapes)
        out = []
        for i in range(rank):
            dims = [self.norm(s[len(s) - rank + i]) for s in shapes if len(s) - rank + i >= 0]
            cur = None
            for d in dims:
                if d == 1:
                    continue
                if cur is None:
                    cur = d
                else:
                    cur = self.require_eq(cur, d, f"{what}: cannot broadcast "
                                          + " with ".join(fmt_shape(s) for s in shapes))
            out.append(cur if cur is not None else Expr.const(1))
        return tuple(out)


def shape_of(values) -> tuple:
    return tuple(Expr.of(int(v)) if not isinstance(v, Expr) else v for v in values)
