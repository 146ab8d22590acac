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
