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
from . import symbolic as S
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
        self.may_be_one: set[str] = set()    # symbols that may be 1 at run time (Code.may_be_one)
        self.data: set[str] = set()          # data-dependent output dims (shapes_more.data_dim)

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
            if self.data and name not in self.data and val.symbols() & self.data:
                continue          # (an input's dim is never rewritten as a data-dependent one)
            if name in self.unifiable and name not in val.symbols():
                self._bind(name, val, why)
                return val
        if self.data and (a.symbols() | b.symbols()) & self.data:
            return a if a.is_const() else b if b.is_const() else a     # (data-dependent: the kernels check it)
        if not any(x == a and y == b for x, y, _ in self.assumptions):
            self.assumptions.append((a, b, why))
        return a if a.is_const() else b if b.is_const() else a

    def assume(self, a: Expr, b: Expr, why: str) -> None:
        """Leave a == b for the VM to check when the symbols are bound."""
        a, b = self.norm(a), self.norm(b)
        if self.data and (a.symbols() | b.symbols()) & self.data:
            return                     # (a data-dependent dim is not known on entry: the kernels check it)
        if a != b and not any(x == a and y == b for x, y, _ in self.assumptions):
            self.assumptions.append((a, b, why))

    def broadcast(self, shapes, what: str) -> tuple:
        """numpy broadcasting over symbolic shapes (see ``broadcast_dim``)."""
        rank = max(len(s) for s in shapes)
        why = f"{what}: cannot broadcast " + " with ".join(fmt_shape(s) for s in shapes)
        out = []
        for i in range(rank):
            dims = [self.norm(s[len(s) - rank + i]) for s in shapes if len(s) - rank + i >= 0]
            cur = None
            for d in dims:
                if d == 1:
                    continue
                cur = d if cur is None else self.broadcast_dim(cur, d, why)
            out.append(cur if cur is not None else Expr.const(1))
        return tuple(out)

    def not_one(self, d: Expr) -> bool:
        """Whether dim d is known not to be 1 when the code runs: a constant other than 1, or a
        parameter's symbol whose signature says so (msvm compiles a variant per pattern of 1 dims;
        set_inputs None dims may be 1). Other exprs (``x0 - 1``, ``select(...)``) may be 1."""
        c = d.const_value()
        if c is not None:
            return c != 1
        name = d.as_symbol()
        if name is not None:
            return name not in self.may_be_one
        if len(d.terms) != 1:
            return False
        # one product of dims (each >= 0): it is 1 only when every factor is 1, so a coefficient
        # other than 1 or a factor known not to be 1 makes it not 1 (the rows of a reshape to (-1, k))
        mono, coeff = d.terms[0]
        return coeff != 1 or any(a.op == "sym" and a.args[0] not in self.may_be_one for a, _p in mono)

    def broadcast_dim(self, a: Expr, b: Expr, why: str) -> Expr:
        """The broadcast of two dims, neither the constant 1. Two dims known not to be 1 must be
        equal (``require_eq``: unified, assumed, or a ShapeError when provably different). A dim
        that may be 1 broadcasts: against a known dim k it gives k, two of them give
        ``select(a == 1, b, a)``; the check that they are compatible (equal, or one of them 1)
        is left for run time. Only what is certain is an error here."""
        a, b = self.norm(a), self.norm(b)
        if a == b:
            return a
        la, lb = S.broadcast_leaves(a), S.broadcast_leaves(b)
        if lb <= la:          # b is one of the dims a broadcasts (their compatibility is already assumed)
            return a
        if la <= lb:
            return b
        ka, kb = self.not_one(a), self.not_one(b)
        if ka and kb:
            return self.require_eq(a, b, why)
        why = f"{why} (dims {a} and {b} must be equal or 1)"
        if ka or kb:          # a known dim k and one u that may be 1: u is 1 or k
            k, u = (a, b) if ka else (b, a)
            self.assume(S.select(S.compare("==", u, 1), k, u), k, why)
            return k
        self.assume(S.select(S.compare("==", a, 1), b, a), S.select(S.compare("==", b, 1), a, b), why)
        return S.select(S.compare("==", a, 1), _where_one(b, a), a)


def simplify_dim(e: Expr) -> Expr:
    """A dim with its broadcasts ``b if a == 1 else a`` (``a`` a product of symbols) rewritten
    with ``a``'s symbols 1 in ``b`` (``_where_one``), bottom up; others unchanged. Applied to a
    sub-Cell's output dims as the caller gets them: a layer called in a loop (a residual add
    of its input and its own output) would otherwise hold its input's dim twice per layer."""
    if not any(x.op != "sym" for mono, _ in e.terms for x, _p in mono):
        return e
    out = Expr.const(0)
    for mono, c in e.terms:
        term = Expr.const(c)
        for x, p in mono:
            f = _simplify_atom(x)
            for _ in range(p):
                term = term * f
        out = out + term
    return out


def _simplify_atom(x) -> Expr:
    if x.op == "sym":
        return Expr.atom(x)
    if x.op == "select":
        pred, a, b = x.args
        a, b = simplify_dim(a), simplify_dim(b)
        if pred.op == "cmp" and pred.args[0] == "==" and pred.args[2] == 1 and pred.args[1] == b:
            a = _where_one(a, b)
        return S.select(pred, a, b)
    a, b = (simplify_dim(v) for v in x.args)
    return {"floordiv": Expr.__floordiv__, "mod": Expr.__mod__, "max": S.smax, "min": S.smin}[x.op](a, b)


def _where_one(b: Expr, a: Expr) -> Expr:
    """``b`` where the dim ``a`` is 1: a product of symbols (each a dim, >= 0) is 1 only when each
    of them is, so they are 1 in ``b`` (``x0*x1 == 1`` gives ``x0 = x1 = 1``). It keeps a broadcast
    rebuilt per layer (``b if a == 1 else a``, ``b`` made from ``a``) from holding ``a`` twice."""
    if len(a.terms) != 1 or a.terms[0][1] != 1 or not all(x.op == "sym" for x, _p in a.terms[0][0]):
        return b
    return b.subs({x.args[0]: Expr.const(1) for x, _p in a.terms[0][0]})


def shape_of(values) -> tuple:
    return tuple(Expr.of(int(v)) if not isinstance(v, Expr) else v for v in values)
