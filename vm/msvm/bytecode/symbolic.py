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

import contextvars
import functools
import math
from contextlib import contextmanager
from typing import Iterable, Mapping, Union

IntLike = Union[int, "Expr"]


class SymbolicError(ValueError):
    """An expression could not be built or evaluated (unbound symbol, bad data, too much work)."""


class UnknownValue(SymbolicError):
    """An int was needed while compiling (``int(n)``, a primitive's attribute) and the symbol has no
    value then: the executor compiles again with exact shapes and int arguments (issue 21)."""


# A budget of term operations for symbolic arithmetic, set by the verifier for the code it
# checks: products of big dims grow multiplicatively (a reshape multiplies all dims), so a
# crafted file could otherwise make verification run for hours. None: no limit.
_WORK: contextvars.ContextVar = contextvars.ContextVar("msvm_symbolic_work", default=None)


class _Work:
    __slots__ = ("left", "limit")

    def __init__(self, limit: int):
        self.left = self.limit = limit


@contextmanager
def work_limit(limit: int):
    """Within this block, symbolic arithmetic may do at most ``limit`` term operations."""
    token = _WORK.set(_Work(limit))
    try:
        yield
    finally:
        _WORK.reset(token)


def _charge(n: int):
    w = _WORK.get()
    if w is not None:
        w.left -= n
        if w.left < 0:
            raise SymbolicError(f"symbolic arithmetic needs more than {w.limit} term operations (the limit): "
                                "the dims are too large")


# A bound on the size of one expression (its atoms and predicates, counted with repetition), set
# by static analysis: symbolic dims broadcast against each other layer after layer grow ``select``
# towers whose size doubles with every layer, and their keys and text with them. None: no bound.
_SIZE: contextvars.ContextVar = contextvars.ContextVar("msvm_symbolic_size", default=None)


@contextmanager
def size_limit(limit: int):
    """Within this block, an expression larger than ``limit`` atoms raises SymbolicError."""
    token = _SIZE.set(limit)
    try:
        yield
    finally:
        _SIZE.reset(token)


def _size_of(args) -> int:
    n = 1
    for a in args:
        if isinstance(a, Expr):
            n += sum(x._size for mono, _ in a.terms for x, _p in mono)
        elif isinstance(a, (Atom, Pred)):
            n += a._size
    limit = _SIZE.get()
    if limit is not None and n > limit:
        raise SymbolicError(f"a symbolic dim grew past {limit} terms (dims that broadcast against each other in a "
                            "loop); declare the shapes (set_inputs) to keep them small")
    return n


# ---------------------------------------------------------------- atoms

def _operand_str(e) -> str:
    """An operand of // or %: parenthesized unless it is one symbol, one atom or a constant."""
    text = str(e)
    if isinstance(e, Expr) and len(e.terms) == 1 and (e.const_value() is not None or e.as_symbol() is not None
                                                     or (len(e.terms[0][0]) == 1 and e.terms[0][1] == 1
                                                         and e.terms[0][0][0][1] == 1)):
        return text
    return text if isinstance(e, int) else f"({text})"


class Atom:
    """A leaf of a polynomial: a named symbol or an opaque operation."""

    __slots__ = ("op", "args", "_key", "_size", "_hash", "_rkey")

    def __init__(self, op: str, args: tuple):
        self.op = op
        self.args = args
        self._size = _size_of(args)
        self._key = (op, tuple(a.key() if isinstance(a, (Expr, Pred)) else a for a in args))
        # (the hash from the operands' own, each computed once: hashing the nested key, as every dict of
        # powers and terms did, cost time in its size; ResNet-sized towers of // took minutes to verify)
        self._hash = hash((op, tuple(a._hash if isinstance(a, (Expr, Pred)) else a for a in args)))
        self._rkey = None

    def key(self):
        return self._key

    def rkey(self) -> str:
        """repr(key()), made once: the canonical order of atoms sorts by it."""
        if self._rkey is None:
            self._rkey = repr(self._key)
        return self._rkey

    def __eq__(self, other):
        return self is other or (isinstance(other, Atom) and self._hash == other._hash and self._key == other._key)

    def __hash__(self):
        return self._hash

    def __lt__(self, other):
        return self.rkey() < other.rkey()

    def __str__(self):
        if self.op == "sym":
            return self.args[0]
        if self.op in ("floordiv", "mod"):      # (H + 1) // 2, not H + 1 // 2
            a, b = (_operand_str(x) for x in self.args)
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


def _sorted_mono(pairs) -> tuple:
    """A monomial's (atom, power) pairs in the canonical order (by the atoms' reprs; one atom, as most
    monomials are, needs no repr: a deep atom's is long)."""
    pairs = tuple(pairs)
    return pairs if len(pairs) < 2 else tuple(sorted(pairs, key=lambda ap: ap[0].rkey()))


@functools.lru_cache(maxsize=1 << 16)
def _mono_repr(mono) -> str:
    """repr(_mono_key(mono)), built from the atoms' own reprs (made once each): the terms' canonical order
    sorts by it, and repr of the nested keys on every Expr made was most of a deep model's compile."""
    parts = [f"({a.rkey()}, {p!r})" for a, p in mono]
    return f"({parts[0]},)" if len(parts) == 1 else "(" + ", ".join(parts) + ")"


class Expr:
    """An integer polynomial over atoms, in canonical form. Immutable, hashable."""

    __slots__ = ("terms", "_hash", "_key")

    def __init__(self, terms: dict):
        # terms: {monomial: coeff}, monomial = tuple of (Atom, power) sorted by atom
        _charge(len(terms))
        items = [(m, c) for m, c in terms.items() if c != 0]
        if len(items) > 1:     # (by degree, then by repr: only terms of one degree need their reprs)
            degrees = [len(m) for m, _ in items]
            items.sort(key=(lambda mc: len(mc[0])) if len(set(degrees)) == len(degrees) else
                       (lambda mc: (len(mc[0]), _mono_repr(mc[0]))))
        self.terms = tuple(items)
        self._hash = hash(tuple((tuple((a._hash, p) for a, p in m), c) for m, c in self.terms))
        self._key = None

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
        if self._key is None:
            self._key = ("expr", tuple((_mono_key(m), c) for m, c in self.terms))
        return self._key

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
        return self is other or (isinstance(other, Expr) and self._hash == other._hash and self.key() == other.key())

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
        _charge(len(self.terms) * len(other.terms))
        terms: dict = {}
        for m1, c1 in self.terms:
            for m2, c2 in other.terms:
                powers: dict = {}
                for a, p in m1 + m2:
                    powers[a] = powers.get(a, 0) + p
                mono = _sorted_mono(powers.items())
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
            new = _sorted_mono((a, p) for a, p in powers.items() if p)
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
        common = _common_factor(self, other)
        if common is not None:      # (n*768) // (m*768) is n // m: the real quotient is the same
            return self._exact_div(common) // other._exact_div(common)
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
            raise UnknownValue(f"symbolic dim {self} has no value at compile time")
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
        total: dict = {}          # summed in one dict: adding term by term would re-sort every time
        for mono, c in self.terms:
            v = Expr.const(c)
            for a, p in mono:
                av = a.subs(mapping)
                for _ in range(p):
                    v = v * av
            for m, k in v.terms:
                total[m] = total.get(m, 0) + k
        return Expr(total)

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


def _common_factor(a: Expr, b: Expr):
    """The monomial (positive coefficient) dividing every term of both, when it is not 1."""
    g, powers = 0, None
    for mono, c in a.terms + b.terms:
        if not isinstance(c, int):
            return None
        g = math.gcd(g, c)
        mp = dict(mono)
        powers = mp if powers is None else {x: min(p, mp[x]) for x, p in powers.items() if x in mp}
    if not g or powers is None or (g == 1 and not powers):
        return None
    mono = _sorted_mono((x, p) for x, p in powers.items() if p)
    return Expr({mono: g})


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


def as_select(e: Expr):
    """(pred, a, b) when ``e`` is exactly one ``a if pred else b``, else None."""
    if len(e.terms) == 1:
        mono, c = e.terms[0]
        if c == 1 and len(mono) == 1 and mono[0][1] == 1 and mono[0][0].op == "select":
            return mono[0][0].args
    return None


def broadcast_leaves(e: Expr) -> set:
    """The dims a broadcast dim ``v if u == 1 else u`` (nested) was made of: it is 1 only when
    every one of them is 1."""
    s = as_select(e)
    if s is not None:
        p, a, b = s
        if p.op == "cmp" and p.args[0] == "==" and p.args[2] == 1 and p.args[1] == b:
            return broadcast_leaves(a) | broadcast_leaves(b)
    return {e}


def select(pred: "Pred", a: IntLike, b: IntLike) -> Expr:
    """``a if pred else b``: how a dim that differs between branches is named.

    Simplified where the result is certain, so that dims rebuilt per layer (a sub-Cell's
    output dims substituted into its caller's, once per layer) stay the size of one layer's:
    a branch that selects on the same predicate again takes its own side
    (``(x if p else y) if p else z`` is ``x if p else z``), and the broadcast of a dim with
    one it was already broadcast from is that dim (``r if q == 1 else q`` is ``q`` when
    ``q`` is 1 only if ``r`` is: ``r`` is one of the dims ``q`` broadcasts)."""
    a, b = Expr.of(a), Expr.of(b)
    if a == b:
        return a
    c = pred.const_value()
    if c is not None:
        return a if c else b
    sa, sb = as_select(a), as_select(b)
    if sa is not None and sa[0] == pred:
        return select(pred, sa[1], b)
    if sb is not None and sb[0] == pred:
        return select(pred, a, sb[2])
    if pred.op == "cmp" and pred.args[0] == "==" and pred.args[2] == 1 and pred.args[1] == b and \
            broadcast_leaves(a) <= broadcast_leaves(b):
        return b
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

    __slots__ = ("op", "args", "_key", "_size", "_hash")

    def __init__(self, op: str, args: tuple):
        self.op = op
        self.args = args
        self._size = _size_of(args)
        self._key = ("pred", op, tuple(a.key() if isinstance(a, (Expr, Pred)) else a for a in args))
        self._hash = hash(("pred", op, tuple(a._hash if isinstance(a, (Expr, Pred)) else a for a in args)))

    def key(self):
        return self._key

    def __eq__(self, other):
        return self is other or (isinstance(other, Pred) and self._hash == other._hash and self._key == other._key)

    def __hash__(self):
        return self._hash

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
#
# Reading is linear in the size of the data: a polynomial is built from its terms
# in one step (never by adding term after term, which re-sorts every time), and
# an opaque atom is built by its own constructor and must come out as that same
# atom (what ``to_data`` writes always does), so nothing is re-simplified. These
# caps bound the work, the nesting (the readers recurse) and what the interpreter
# later compiles from an expression; what ``to_data`` writes for a real program
# stays far below them.

MAX_DEPTH = 64          # symbolic values nested inside one another
MAX_TERMS = 1024        # terms of one polynomial, parts of one and/or
MAX_FACTORS = 16        # atoms in one monomial
MAX_POWER = 16          # the power of an atom in a monomial
MAX_NODES = 2048        # terms, factors (counted with their powers) and predicate nodes, all levels together
MAX_COEFF = 2 ** 63 - 1  # coefficients are int64


def _short(v) -> str:
    r = repr(v)
    return r if len(r) <= 60 else r[:57] + "..."


class _Budget:
    __slots__ = ("left",)

    def __init__(self):
        self.left = MAX_NODES

    def take(self, n: int):
        self.left -= n
        if self.left < 0:
            raise SymbolicError(f"symbolic value has more than {MAX_NODES} nodes (the limit)")


def from_data(data):
    """Rebuild an Expr or Pred from ``to_data`` output; raises SymbolicError on bad data.

    Bounded: at most MAX_DEPTH levels, MAX_TERMS terms per polynomial, MAX_NODES
    nodes in all; the work is linear in the size of ``data``."""
    return _value(data, 0, _Budget())


def _tagged(data, what: str) -> str:
    if not isinstance(data, list) or not data or not isinstance(data[0], str):
        raise SymbolicError(f"expected {what} as a list [tag, ...], found {_short(data)}")
    return data[0]


def _arity(data, n: int):
    if len(data) != n + 1:
        raise SymbolicError(f"{data[0]!r} takes {n} item{'s' if n != 1 else ''}, found {len(data) - 1}")


def _name(v, what: str) -> str:
    if not isinstance(v, str) or not v:
        raise SymbolicError(f"expected a {what} name (a non-empty string), found {_short(v)}")
    return v


def _value(data, depth: int, budget: _Budget):
    if depth > MAX_DEPTH:
        raise SymbolicError(f"symbolic expression nested more than {MAX_DEPTH} levels deep (the limit)")
    tag = _tagged(data, "a symbolic value")
    if tag == "poly":
        return _poly(data, depth, budget)
    budget.take(1)
    if tag in ("const", "flag", "not"):
        _arity(data, 1)
    if tag == "const":
        if not isinstance(data[1], bool):
            raise SymbolicError(f"expected a bool in ['const', ...], found {_short(data[1])}")
        return const_pred(data[1])
    if tag == "flag":
        return flag(_name(data[1], "flag"))
    if tag == "cmp":
        if len(data) != 4 or not isinstance(data[1], str) or data[1] not in _CMP:
            raise SymbolicError(f"expected ['cmp', one of {sorted(_CMP)}, expr, expr], found {_short(data)}")
        a, b = (_expr(d, depth + 1, budget) for d in data[2:])
        return compare(data[1], a, b)
    if tag == "not":
        return pnot(_pred(data[1], depth + 1, budget))
    if tag in ("and", "or"):
        if not 2 <= len(data) <= MAX_TERMS + 1:
            raise SymbolicError(f"{tag!r} takes 1 to {MAX_TERMS} predicates, found {len(data) - 1}")
        parts = [_pred(d, depth + 1, budget) for d in data[1:]]
        return pand(*parts) if tag == "and" else por(*parts)
    raise SymbolicError(f"unknown symbolic tag {tag!r}")


def _expr(data, depth, budget) -> Expr:
    v = _value(data, depth, budget)
    if not isinstance(v, Expr):
        raise SymbolicError(f"expected an integer expression, found the predicate {_short(data)}")
    return v


def _pred(data, depth, budget) -> Pred:
    v = _value(data, depth, budget)
    if not isinstance(v, Pred):
        raise SymbolicError(f"expected a predicate, found the expression {_short(data)}")
    return v


def _poly(data, depth, budget) -> Expr:
    if len(data) != 2 or not isinstance(data[1], list):
        raise SymbolicError(f"expected ['poly', [terms]], found {_short(data)}")
    if len(data[1]) > MAX_TERMS:
        raise SymbolicError(f"a symbolic dim of {len(data[1])} terms; the limit is {MAX_TERMS}")
    terms: dict = {}
    for term in data[1]:
        if not (isinstance(term, list) and len(term) == 2 and isinstance(term[1], list)):
            raise SymbolicError(f"expected a term [coefficient, [[atom, power], ...]], found {_short(term)}")
        coeff, factors = term
        if not isinstance(coeff, int) or isinstance(coeff, bool) or not -MAX_COEFF <= coeff <= MAX_COEFF:
            raise SymbolicError(f"expected an int64 coefficient, found {_short(coeff)}")
        if len(factors) > MAX_FACTORS:
            raise SymbolicError(f"a monomial of {len(factors)} factors; the limit is {MAX_FACTORS}")
        budget.take(1)
        powers: dict = {}
        for f in factors:
            if not (isinstance(f, list) and len(f) == 2):
                raise SymbolicError(f"expected a factor [atom, power], found {_short(f)}")
            power = f[1]
            if not isinstance(power, int) or isinstance(power, bool) or not 0 < power <= MAX_POWER:
                raise SymbolicError(f"expected a power from 1 to {MAX_POWER}, found {_short(power)}")
            budget.take(power)
            a = _atom(f[0], depth + 1, budget)
            powers[a] = powers.get(a, 0) + power
            if powers[a] > MAX_POWER:
                raise SymbolicError(f"{a} has power {powers[a]} in one monomial; the limit is {MAX_POWER}")
        mono = _sorted_mono(powers.items())
        terms[mono] = terms.get(mono, 0) + coeff
    return Expr(terms)


_ATOM_ARITY = {"sym": 1, "floordiv": 2, "mod": 2, "max": 2, "min": 2, "select": 3}


def _atom(data, depth, budget) -> Atom:
    if depth > MAX_DEPTH:
        raise SymbolicError(f"symbolic expression nested more than {MAX_DEPTH} levels deep (the limit)")
    tag = _tagged(data, "an atom")
    if tag not in _ATOM_ARITY:
        raise SymbolicError(f"unknown atom {tag!r}")
    _arity(data, _ATOM_ARITY[tag])
    if tag == "sym":
        return Atom("sym", (_name(data[1], "symbol"),))
    if tag == "select":
        args = (_pred(data[1], depth, budget), _expr(data[2], depth, budget), _expr(data[3], depth, budget))
        got = select(*args)
    else:
        args = (_expr(data[1], depth, budget), _expr(data[2], depth, budget))
        if tag in ("floordiv", "mod") and args[1].const_value() == 0:
            raise SymbolicError(f"{tag} by zero in {_short(data)}")
        got = {"floordiv": Expr.__floordiv__, "mod": Expr.__mod__, "max": smax, "min": smin}[tag](*args)
    atom = Atom(tag, args)
    if got != Expr.atom(atom):
        raise SymbolicError(f"{tag}({', '.join(str(a) for a in args)}) is not in canonical form "
                            f"(it simplifies to {got})")
    return atom


def fmt_dim(d) -> str:
    return str(d.const_value()) if isinstance(d, Expr) and d.is_const() else str(d)


def fmt_shape(shape) -> str:
    return "[" + ",".join(fmt_dim(d) for d in shape) + "]"
