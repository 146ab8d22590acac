"""Symbolic dimensions and predicates: the values BRANCH_IF_SYMBOLIC tests.

A dimension is an ``Expr``: a polynomial with integer coefficients over *atoms*.
An atom is a named symbol (``B``, ``S``) or an opaque node that the polynomial
form cannot absorb (``floordiv``, ``mod``, ``max``, ``min``, ``select``).
Polynomials are kept in a canonical form, so ``B*S*12 == 12*S*B`` structurally
and exact division (``B*S*768 // (B*12)`` -> ``S*64``) simplifies.

A predicate is a ``Pred``: a comparison of two exprs, a named boolean flag
(a bool argument such as ``training``), a constant, or and/or/not of those.

Both evaluate against an environment ``{symbol name: int | bool}`` and both
serialize to plain nested lists (``to_data`` / ``from_data``) for the binary
format and JSON.
"""

from __future__ import annotations

import math
from typing import Iterable, Mapping, Union

IntLike = Union[int, "Expr"]


class SymbolicError(ValueError):
    """An expression could not be built or evaluated (unbound symbol, bad data)."""


# ---------------------------------------------------------------- atoms

class Atom:
    """A leaf of a polynomial: a named symbol or an opaque operation."""

    __slots__ = ("op", "args", "_key")

    def __init__(self, op: str, args: tuple):
        self.op = op
        self.args = args
        self._key = (op, tuple(a.key() if isinstance(a, (Expr, Pred)) else a for a in args))

    def key(self):
        return self._key

    def __eq__(self, other):
        return isinstance(other, Atom) and self._key == other._key

    def __hash__(self):
        return hash(self._key)

    def __lt__(self, other):
        return repr(self._key) < repr(other._key)

    def __str__(self):
        if self.op == "sym":
            return self.args[0]
        if self.op in ("floordiv", "mod"):      # (H + 1) // 2, not H + 1 // 2
            a, b = str(self.args[0]), str(self.args[1])
            a = f"({a})" if " " in a else a
            b = b if b.isidentifier() or b.lstrip("-").isdigit() else f"({b})"
            return f"({a} {'//' if self.op == 'floordiv' else '%'} {b})"
        if self.op == "select":
            return f"({self.args[1]} if {self.args[0]} else {self.args[2]})"
        return f"{self.op}({', '.join(str(a) for a in self.args)})"

    def evaluate(self, env: Mapping[str, int]) -> int:
        op = self.op
        if op == "sym":
            try:
                return env[self.args[0]]
            except KeyError:
                raise SymbolicError(f"symbol {self.args[0]!r} is not bound") from None
        if op == "select":
            return self.args[1].evaluate(env) if self.args[0].evaluate(env) else self.args[2].evaluate(env)
        a, b = (x.evaluate(env) for x in self.args)
        if op in ("floordiv", "mod") and b == 0:
            raise SymbolicError(f"division by zero in {self}")
        return {"floordiv": a // b if b else 0, "mod": a % b if b else 0, "max": max(a, b), "min": min(a, b)}[op]

    def symbols(self) -> set:
        if self.op == "sym":
            return {self.args[0]}
        out = set()
        for a in self.args:
            out |= a.symbols()
        return out

    def subs(self, mapping) -> "Expr":
        if self.op == "sym":
            return mapping.get(self.args[0], Expr.atom(self))
        args = tuple(a.subs(mapping) for a in self.args)
        if self.op == "select":
            return select(*args)
        return {"floordiv": Expr.__floordiv__, "mod": Expr.__mod__, "max": smax, "min": smin}[self.op](*args)

    def to_data(self):
        if self.op == "sym":
            return ["sym", self.args[0]]
        return [self.op] + [a.to_data() for a in self.args]


# ---------------------------------------------------------------- expressions

def _mono_key(mono):
    return tuple((a.key(), p) for a, p in mono)


class Expr:
    """An integer polynomial over atoms, in canonical form. Immutable, hashable."""

    __slots__ = ("terms", "_hash")

    def __init__(self, terms: dict):
        # terms: {monomial: coeff}, monomial = tuple of (Atom, power) sorted by atom
        items = [(m, c) for m, c in terms.items() if c != 0]
        items.sort(key=lambda mc: (len(mc[0]), repr(_mono_key(mc[0]))))
        self.terms = tuple(items)
        self._hash = hash(tuple((_mono_key(m), c) for m, c in self.terms))

    # construction
    @staticmethod
    def const(n: int) -> "Expr":
        return Expr({(): int(n)})

    @staticmethod
    def atom(a: Atom) -> "Expr":
        return Expr({((a, 1),): 1})

    @staticmethod
    def of(v: IntLike) -> "Expr":
        if isinstance(v, Expr):
            return v
        if isinstance(v, bool) or not isinstance(v, int):
            raise SymbolicError(f"not an integer dimension: {v!r}")
        return Expr.const(v)

    # queries
    def key(self):
        return ("expr", tuple((_mono_key(m), c) for m, c in self.terms))

    def is_const(self) -> bool:
        return all(m == () for m, _ in self.terms)

    def const_value(self) -> int | None:
        if not self.terms:
            return 0
        if len(self.terms) == 1 and self.terms[0][0] == ():
            return self.terms[0][1]
        return None

    def never_zero(self) -> bool:
        """True when no integer values of the atoms make this zero: the gcd of the
        non-constant coefficients does not divide the constant (x0*1024 - 35)."""
        c0, g = 0, 0
        for m, c in self.terms:
            if not isinstance(c, int):
                return False
            if m == ():
                c0 = c
            else:
                g = math.gcd(g, c)
        return g != 0 and c0 % g != 0

    def as_symbol(self) -> str | None:
        """The name when this expr is exactly one named symbol, else None."""
        if len(self.terms) == 1:
            mono, c = self.terms[0]
            if c == 1 and len(mono) == 1 and mono[0][1] == 1 and mono[0][0].op == "sym":
                return mono[0][0].args[0]
        return None

    def symbols(self) -> set:
        out = set()
        for mono, _ in self.terms:
            for a, _p in mono:
                out |= a.symbols()
        return out

    def __eq__(self, other):
        if isinstance(other, int) and not isinstance(other, bool):
            other = Expr.const(other)
        return isinstance(other, Expr) and self.key() == other.key()

    def __hash__(self):
        return self._hash

    # arithmetic
    def __add__(self, other):
        other = Expr.of(other)
        terms = dict(self.terms)
        for m, c in other.terms:
            terms[m] = terms.get(m, 0) + c
        return Expr(terms)

    __radd__ = __add__

    def __neg__(self):
        return Expr({m: -c for m, c in self.terms})

    def __sub__(self, other):
        return self + (-Expr.of(other))

    def __rsub__(self, other):
        return Expr.of(other) - self

    def __mul__(self, other):
        other = Expr.of(other)
        terms: dict = {}
        for m1, c1 in self.terms:
            for m2, c2 in other.terms:
                powers: dict = {}
                for a, p in m1 + m2:
                    powers[a] = powers.get(a, 0) + p
                mono = tuple(sorted(powers.items(), key=lambda ap: repr(ap[0].key())))
                terms[mono] = terms.get(mono, 0) + c1 * c2
        return Expr(terms)

    __rmul__ = __mul__

    def _exact_div(self, other: "Expr"):
        """self / other when other is one monomial dividing every term, else None."""
        if len(other.terms) != 1:
            return None
        dmono, dc = other.terms[0]
        dpow = dict(dmono)
        out = {}
        for mono, c in self.terms:
            if c % dc:
                return None
            powers = dict(mono)
            for a, p in dpow.items():
                if powers.get(a, 0) < p:
                    return None
                powers[a] -= p
            new = tuple(sorted(((a, p) for a, p in powers.items() if p), key=lambda ap: repr(ap[0].key())))
            out[new] = out.get(new, 0) + c // dc
        return Expr(out)

    def __floordiv__(self, other):
        other = Expr.of(other)
        a, b = self.const_value(), other.const_value()
        if a is not None and b is not None:
            if b == 0:
                raise SymbolicError("division by zero")
            return Expr.const(a // b)
        if b == 1:
            return self
        exact = self._exact_div(other)
        if exact is not None:
            return exact
        return Expr.atom(Atom("floordiv", (self, other)))

    def __rfloordiv__(self, other):
        return Expr.of(other) // self

    def __mod__(self, other):
        other = Expr.of(other)
        a, b = self.const_value(), other.const_value()
        if a is not None and b is not None:
            if b == 0:
                raise SymbolicError("modulo by zero")
            return Expr.const(a % b)
        if self._exact_div(other) is not None:
            return Expr.const(0)
        return Expr.atom(Atom("mod", (self, other)))

    def __rmod__(self, other):
        return Expr.of(other) % self

    # comparisons build predicates (== stays structural equality; use .eq for a predicate)
    def __lt__(self, o): return compare("<", self, o)
    def __le__(self, o): return compare("<=", self, o)
    def __gt__(self, o): return compare(">", self, o)
    def __ge__(self, o): return compare(">=", self, o)

    def __bool__(self):
        c = self.const_value()
        if c is None:
            raise SymbolicError(f"the truth of symbolic dim {self} is not known at compile time")
        return c != 0

    def __int__(self):
        c = self.const_value()
        if c is None:
            raise SymbolicError(f"symbolic dim {self} has no value at compile time")
        return c

    __index__ = __int__

    def lt(self, o): return compare("<", self, o)
    def le(self, o): return compare("<=", self, o)
    def gt(self, o): return compare(">", self, o)
    def ge(self, o): return compare(">=", self, o)
    def eq(self, o): return compare("==", self, o)
    def ne(self, o): return compare("!=", self, o)

    # use
    def evaluate(self, env: Mapping[str, int]) -> int:
        total = 0
        for mono, c in self.terms:
            v = c
            for a, p in mono:
                v *= a.evaluate(env) ** p
            total += v
        return total

    def subs(self, mapping: Mapping[str, "Expr"]) -> "Expr":
        if not mapping or not (self.symbols() & set(mapping)):
            return self
        total = Expr.const(0)
        for mono, c in self.terms:
            v = Expr.const(c)
            for a, p in mono:
                av = a.subs(mapping)
                for _ in range(p):
                    v = v * av
            total = total + v
        return total

    def __str__(self):
        if not self.terms:
            return "0"
        parts = []
        for mono, c in reversed(self.terms):
            factors = []
            for a, p in mono:
                factors.extend([str(a)] * p)
            body = "*".join(factors)
            if not body:
                s = str(abs(c))
            elif abs(c) == 1:
                s = body
            else:
                s = f"{body}*{abs(c)}"
            parts.append(("-" if c < 0 else "+", s))
        out = ("-" if parts[0][0] == "-" else "") + parts[0][1]
        for sign, s in parts[1:]:
            out += f" {sign} {s}"
        return out

    def __repr__(self):
        return f"Expr({self})"

    def to_data(self):
        return ["poly", [[c, [[a.to_data(), p] for a, p in mono]] for mono, c in self.terms]]


def sym(name: str) -> Expr:
    """The expression that is exactly the symbol ``name``."""
    if not isinstance(name, str) or not name:
        raise SymbolicError(f"bad symbol name {name!r}")
    return Expr.atom(Atom("sym", (name,)))


def smax(a: IntLike, b: IntLike) -> Expr:
    a, b = Expr.of(a), Expr.of(b)
    if a == b:
        return a
    if a.is_const() and b.is_const():
        return Expr.const(max(a.const_value(), b.const_value()))
    return Expr.atom(Atom("max", (a, b)))


def smin(a: IntLike, b: IntLike) -> Expr:
    a, b = Expr.of(a), Expr.of(b)
    if a == b:
        return a
    if a.is_const() and b.is_const():
        return Expr.const(min(a.const_value(), b.const_value()))
    return Expr.atom(Atom("min", (a, b)))


def select(pred: "Pred", a: IntLike, b: IntLike) -> Expr:
    """``a if pred else b``: how a dim that differs between branches is named."""
    a, b = Expr.of(a), Expr.of(b)
    if a == b:
        return a
    c = pred.const_value()
    if c is not None:
        return a if c else b
    return Expr.atom(Atom("select", (pred, a, b)))


def product(dims: Iterable[IntLike]) -> Expr:
    out = Expr.const(1)
    for d in dims:
        out = out * Expr.of(d)
    return out


# ---------------------------------------------------------------- predicates

_CMP = {"<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
        ">=": lambda a, b: a >= b, "==": lambda a, b: a == b, "!=": lambda a, b: a != b}
_NEGATE = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "==": "!=", "!=": "=="}


class Pred:
    """A boolean over symbols: cmp / flag / const / and / or / not."""

    __slots__ = ("op", "args", "_key")

    def __init__(self, op: str, args: tuple):
        self.op = op
        self.args = args
        self._key = ("pred", op, tuple(a.key() if isinstance(a, (Expr, Pred)) else a for a in args))

    def key(self):
        return self._key

    def __eq__(self, other):
        return isinstance(other, Pred) and self._key == other._key

    def __hash__(self):
        return hash(self._key)

    def const_value(self) -> bool | None:
        if self.op == "const":
            return self.args[0]
        return None

    def __bool__(self):
        if self.op == "const":
            return self.args[0]
        raise SymbolicError(f"the predicate {self} is not known at compile time")

    def evaluate(self, env: Mapping[str, int]) -> bool:
        op = self.op
        if op == "const":
            return self.args[0]
        if op == "flag":
            try:
                return bool(env[self.args[0]])
            except KeyError:
                raise SymbolicError(f"flag {self.args[0]!r} is not bound") from None
        if op == "cmp":
            return _CMP[self.args[0]](self.args[1].evaluate(env), self.args[2].evaluate(env))
        if op == "not":
            return not self.args[0].evaluate(env)
        if op == "and":
            return all(a.evaluate(env) for a in self.args)
        return any(a.evaluate(env) for a in self.args)

    def symbols(self) -> set:
        if self.op == "const":
            return set()
        if self.op == "flag":
            return {self.args[0]}
        out = set()
        for a in self.args:
            if isinstance(a, (Expr, Pred)):
                out |= a.symbols()
        return out

    def subs(self, mapping) -> "Pred":
        if self.op in ("const",):
            return self
        if self.op == "flag":
            v = mapping.get(self.args[0])
            return v if isinstance(v, Pred) else self
        if self.op == "cmp":
            return compare(self.args[0], self.args[1].subs(mapping), self.args[2].subs(mapping))
        if self.op == "not":
            return pnot(self.args[0].subs(mapping))
        parts = [a.subs(mapping) for a in self.args]
        return pand(*parts) if self.op == "and" else por(*parts)

    def __str__(self):
        op = self.op
        if op == "const":
            return str(self.args[0])
        if op == "flag":
            return self.args[0]
        if op == "cmp":
            return f"{self.args[1]} {self.args[0]} {self.args[2]}"
        if op == "not":
            return f"not ({self.args[0]})"
        return f" {op} ".join(f"({a})" for a in self.args)

    def __repr__(self):
        return f"Pred({self})"

    def to_data(self):
        if self.op == "const":
            return ["const", bool(self.args[0])]
        if self.op == "flag":
            return ["flag", self.args[0]]
        if self.op == "cmp":
            return ["cmp", self.args[0], self.args[1].to_data(), self.args[2].to_data()]
        return [self.op] + [a.to_data() for a in self.args]


TRUE = Pred("const", (True,))
FALSE = Pred("const", (False,))


def flag(name: str) -> Pred:
    return Pred("flag", (name,))


def const_pred(v: bool) -> Pred:
    return TRUE if v else FALSE


def compare(op: str, a: IntLike, b: IntLike) -> Pred:
    if op not in _CMP:
        raise SymbolicError(f"unknown comparison {op!r}")
    a, b = Expr.of(a), Expr.of(b)
    diff = (a - b).const_value()
    if diff is not None:
        return const_pred(_CMP[op](diff, 0))
    return Pred("cmp", (op, a, b))


def pnot(p: Pred) -> Pred:
    if p.op == "const":
        return const_pred(not p.args[0])
    if p.op == "cmp":
        return Pred("cmp", (_NEGATE[p.args[0]], p.args[1], p.args[2]))
    if p.op == "not":
        return p.args[0]
    return Pred("not", (p,))


def pand(*ps: Pred) -> Pred:
    parts = [p for p in ps if p != TRUE]
    if any(p == FALSE for p in parts):
        return FALSE
    if not parts:
        return TRUE
    return parts[0] if len(parts) == 1 else Pred("and", tuple(parts))


def por(*ps: Pred) -> Pred:
    parts = [p for p in ps if p != FALSE]
    if any(p == TRUE for p in parts):
        return TRUE
    if not parts:
        return FALSE
    return parts[0] if len(parts) == 1 else Pred("or", tuple(parts))


# ---------------------------------------------------------------- serialization

_MAX_DEPTH = 64


def from_data(data, depth: int = 0):
    """Rebuild an Expr or Pred from ``to_data`` output; raises SymbolicError on bad data."""
    if depth > _MAX_DEPTH:
        raise SymbolicError("symbolic expression nested too deeply")
    try:
        tag = data[0]
        if tag == "poly":
            total = Expr.const(0)
            for coeff, mono in data[1]:
                if not isinstance(coeff, int) or isinstance(coeff, bool):
                    raise SymbolicError(f"bad coefficient {coeff!r}")
                term = Expr.const(coeff)
                for atom_data, power in mono:
                    if not isinstance(power, int) or not 0 < power <= 16:
                        raise SymbolicError(f"bad power {power!r}")
                    a = _atom_from_data(atom_data, depth + 1)
                    for _ in range(power):
                        term = term * a
                total = total + term
            return total
        if tag == "const":
            return const_pred(bool(data[1]))
        if tag == "flag":
            if not isinstance(data[1], str):
                raise SymbolicError("bad flag name")
            return flag(data[1])
        if tag == "cmp":
            return compare(data[1], from_data(data[2], depth + 1), from_data(data[3], depth + 1))
        if tag == "not":
            return pnot(from_data(data[1], depth + 1))
        if tag in ("and", "or"):
            parts = [from_data(d, depth + 1) for d in data[1:]]
            return pand(*parts) if tag == "and" else por(*parts)
    except (TypeError, IndexError, KeyError) as e:
        raise SymbolicError(f"malformed symbolic data: {e}") from None
    raise SymbolicError(f"unknown symbolic tag {data[0]!r}")


def _atom_from_data(data, depth):
    tag = data[0]
    if tag == "sym":
        return sym(data[1])
    if tag == "select":
        return select(from_data(data[1], depth), from_data(data[2], depth), from_data(data[3], depth))
    a, b = from_data(data[1], depth), from_data(data[2], depth)
    if tag == "floordiv":
        return a // b
    if tag == "mod":
        return a % b
    if tag == "max":
        return smax(a, b)
    if tag == "min":
        return smin(a, b)
    raise SymbolicError(f"unknown atom {tag!r}")


def fmt_dim(d) -> str:
    return str(d.const_value()) if isinstance(d, Expr) and d.is_const() else str(d)


def fmt_shape(shape) -> str:
    return "[" + ",".join(fmt_dim(d) for d in shape) + "]"
