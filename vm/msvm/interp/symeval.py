"""Turn symbolic exprs/predicates into fast Python callables ``f(env) -> value``.

The source is generated from the expression tree (names are quoted with
``repr``, so nothing from a loaded file is ever executed as code) and compiled
once per expression.
"""

from __future__ import annotations

from functools import lru_cache

from ..bytecode.symbolic import Atom, Expr, Pred

_CMP = {"<", "<=", ">", ">=", "==", "!="}


def _src(e) -> str:
    if isinstance(e, Expr):
        c = e.const_value()
        if c is not None:
            return str(int(c))
        terms = []
        for mono, coeff in e.terms:
            factors = [str(int(coeff))] if coeff != 1 or not mono else []
            for a, p in mono:
                factors.extend([_atom_src(a)] * p)
            terms.append("*".join(factors))
        return "(" + " + ".join(terms) + ")"
    if isinstance(e, Pred):
        op = e.op
        if op == "const":
            return "True" if e.args[0] else "False"
        if op == "flag":
            return f"bool(env[{e.args[0]!r}])"
        if op == "cmp":
            assert e.args[0] in _CMP
            return f"({_src(e.args[1])} {e.args[0]} {_src(e.args[2])})"
        if op == "not":
            return f"(not {_src(e.args[0])})"
        joiner = " and " if op == "and" else " or "
        return "(" + joiner.join(_src(a) for a in e.args) + ")"
    raise TypeError(f"not symbolic: {e!r}")


def _atom_src(a: Atom) -> str:
    if a.op == "sym":
        return f"env[{a.args[0]!r}]"
    if a.op == "select":
        return f"({_src(a.args[1])} if {_src(a.args[0])} else {_src(a.args[2])})"
    x, y = (_src(v) for v in a.args)
    return {"floordiv": f"({x} // {y})", "mod": f"({x} % {y})", "max": f"max({x}, {y})",
            "min": f"min({x}, {y})"}[a.op]


@lru_cache(maxsize=4096)
def compile_sym_tuple(es: tuple):
    """``f(env)`` giving the tuple of the exprs es (a shape) in one call, not one call per dim."""
    src = "lambda env: (" + "".join(f"{_src(e)}, " for e in es) + ")"
    return eval(src, {"__builtins__": {"max": max, "min": min, "bool": bool}})  # noqa: S307 - generated, see docstring


@lru_cache(maxsize=4096)
def compile_sym(e):
    """``f(env)`` evaluating e; constants become plain lambdas."""
    src = f"lambda env: {_src(e)}"
    return eval(src, {"__builtins__": {"max": max, "min": min, "bool": bool}})  # noqa: S307 - generated, see docstring
