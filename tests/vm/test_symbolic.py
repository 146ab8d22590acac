"""Symbolic dims and predicates: canonical form, exact division, evaluation, serialization."""

import pytest
from msvm.bytecode import symbolic as S

B, N = S.sym("B"), S.sym("N")


def test_canonical_form_and_exact_division():
    assert B * N * 12 == 12 * N * B
    assert (B * N * 768) // (B * 12) == N * 64
    assert (B * 768 + 768) // 768 == B + 1
    assert str((B * N * 768) // (B * 12)) == "N*64"
    assert (B + 1) - 1 == B
    assert ((B * 6) % 3) == 0


def test_inexact_division_stays_symbolic_and_evaluates():
    e = (B + 1) // 2
    assert not e.is_const()
    assert e.evaluate({"B": 7}) == 4
    assert (B % 3).evaluate({"B": 7}) == 1


def test_predicates_fold_and_evaluate():
    p = B > 32
    assert isinstance(p, S.Pred)
    assert p.evaluate({"B": 64}) and not p.evaluate({"B": 8})
    assert (B + 1 > B).const_value() is True
    q = S.pand(p, S.flag("training"))
    assert q.evaluate({"B": 64, "training": True}) and not q.evaluate({"B": 64, "training": False})
    assert S.pnot(p).evaluate({"B": 8})


def test_select_and_round_trip():
    e = S.select(B > 32, B * 2, N)
    assert e.evaluate({"B": 40, "N": 3}) == 80 and e.evaluate({"B": 4, "N": 3}) == 3
    for x in (e, B * N + 3, (B + 1) // 2, S.smax(B, N), S.pand(B > 1, S.flag("t")), S.pnot(S.flag("t"))):
        assert S.from_data(x.to_data()) == x


def test_unbound_symbol_and_bad_data():
    with pytest.raises(S.SymbolicError):
        B.evaluate({})
    with pytest.raises(S.SymbolicError):
        S.from_data(["nope", 1])
    with pytest.raises(S.SymbolicError):
        bool(B > 3)


def test_dims_rebuilt_per_layer_stay_the_size_of_one():
    """A sub-Cell called per layer (a residual add of its input and a reshape to (-1, k) of it)
    gives its caller dims that do not grow with the layers: a select on its own predicate takes
    its side, the broadcast of a dim with one it broadcasts is itself, a common factor cancels
    in a floor division, and a product of symbols known not to be 1 is not 1."""
    from msvm.bytecode import symbolic as S
    from msvm.bytecode.types import ShapeEnv, simplify_dim

    n, m, u, v = (S.sym(x) for x in ("n", "m", "u", "v"))
    assert (n * 768) // (m * 768) == n // m
    assert str((n * m * 6) // (m * 4)) == "((n*3) // 2)"
    p = S.compare("==", u, 1)
    q = S.select(p, v, u)                               # the broadcast of u and v
    assert S.select(p, q, u) == q and S.select(p, v, q) == q
    assert S.select(S.compare("==", q, 1), v, q) == q and S.select(S.compare("==", q, 1), u, q) == q
    assert S.select(S.compare("==", q, 1), n, q) != q   # n is not one of the dims q broadcasts
    env = ShapeEnv()
    env.may_be_one = {"u", "v"}
    assert env.not_one(n * m) and env.not_one(u * 2) and not env.not_one(u * v)
    assert env.broadcast_dim(q, u, "add") == q and env.broadcast_dim(v, q, "add") == q
    # b if a == 1 else a, where b is made from a: a's symbols are 1 in b
    x0, x1 = S.sym("x0"), S.sym("x1")
    rows = x0 * x1
    d = S.select(S.compare("==", rows, 1), S.select(S.compare("==", u, 1), rows // m, u) * m, rows)
    assert str(simplify_dim(d)) == "(((1 // m) if u == 1 else u)*m if x0*x1 == 1 else x0*x1)"
    for env_vals in ({"x0": 1, "x1": 1, "u": 1, "m": 1}, {"x0": 3, "x1": 4, "u": 1, "m": 2},
                     {"x0": 3, "x1": 4, "u": 6, "m": 2}):
        assert simplify_dim(d).evaluate(env_vals) == d.evaluate(env_vals)



def test_compiled_shape_matches_evaluate_on_random_dims():
    """symeval.compile_sym_tuple (a planned instruction's shape, one generated function) gives each
    dim's ``evaluate`` on random expressions and environments; a missing symbol is a KeyError, as
    in compile_sym; the empty shape is ()."""
    import random

    from msvm.interp.symeval import compile_sym, compile_sym_tuple

    rng = random.Random(5)
    names = ("B", "N", "H")

    def expr(depth):
        if depth == 0 or rng.random() < 0.3:
            return S.sym(rng.choice(names)) if rng.random() < 0.7 else S.Expr.const(rng.randint(0, 9))
        a, b = expr(depth - 1), expr(depth - 1)
        op = rng.choice(("+", "*", "//", "%", "max", "min", "select"))
        if op in ("//", "%"):
            b = S.Expr.const(rng.randint(1, 5))
        return {"+": lambda: a + b, "*": lambda: a * b, "//": lambda: a // b, "%": lambda: a % b,
                "max": lambda: S.smax(a, b), "min": lambda: S.smin(a, b),
                "select": lambda: S.select(a > b, a, b)}[op]()

    for _ in range(200):
        dims = tuple(expr(3) for _ in range(rng.randint(0, 4)))
        env = {k: rng.randint(1, 64) for k in names}
        assert compile_sym_tuple(dims)(env) == tuple(d.evaluate(env) for d in dims)
        assert compile_sym_tuple(dims)(env) == tuple(compile_sym(d)(env) for d in dims)
    assert compile_sym_tuple(())({}) == ()
    with pytest.raises(KeyError):
        compile_sym_tuple((B * 2, N))({"B": 3})
