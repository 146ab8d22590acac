"""A Code the memory plan cannot plan soundly is refused, and says so (compiler/memplan.py, issue 18).

Before, memplan._eval turned any failure to evaluate a size into "unknown", so the colouring chose
slots blind and ``MemPlan.figures`` answered {}; an unverified Code or a stack mismatch gave no
plan without a word. Now each refusal names the Code and why: in the ``[MS]`` log, an ``error``
event, ``memplan_refused`` on the Code (the dump and ``msvm.memory.report``), and the Code still
runs, unplanned, with the same results."""

import logging

import msvm as ms
import numpy as np
import pytest
from msvm import events, log, ops
from msvm.bytecode import CodeBuilder, verify
from msvm.bytecode import symbolic as S
from msvm.bytecode.disasm import dump
from msvm.bytecode.types import TensorType
from msvm.compiler import memplan
from msvm.interp.interpreter import BoundCode

N = S.sym("N")


def _odd(div, verified=True):
    """f(x, z) = (x*2 + 1) * 3 with x [B // div, N], z [B]: the planned values' sizes divide by ``div``."""
    b = CodeBuilder("odd", "odd.py", 1)
    b.local("x")
    b.local("z")
    b.code.params.append(("x", TensorType((S.sym("B") // div, N), ms.float32)))
    b.code.params.append(("z", TensorType((S.sym("B"),), ms.float32)))
    b.emit("LOAD_TENSOR", 0)
    for op, k in (("BROADCAST_MUL", 2.0), ("BROADCAST_ADD", 1.0), ("BROADCAST_MUL", 3.0)):
        b.emit("LOAD_CONST", b.const(k))
        b.emit(op)
    b.emit("RETURN")
    code = b.finish()
    if verified:
        verify(code)
    return code


class _Said:
    """The [MS] log's records and the error events while it is entered."""

    def __enter__(self):
        self.records, self.errors = [], []
        self.handler = logging.Handler()
        self.handler.emit = lambda r: self.records.append((r.levelno, r.getMessage()))
        log.logger.addHandler(self.handler)
        self.unsub = events.subscribe(self.errors.append, ("error",))
        return self

    def __exit__(self, *exc):
        log.logger.removeHandler(self.handler)
        self.unsub()


def test_a_size_that_does_not_evaluate_refuses_the_plan_and_says_why():
    code = _odd((N - 64) * (N - 129))      # zero at both sample points the colouring compares sizes at
    with _Said() as said:
        new = memplan.apply(code)
    assert new.memplan is None
    why = new.memplan_refused
    assert "BROADCAST_MUL's result at 0x" in why and "division by zero" in why and "64 or 129" in why
    (level, msg), = [r for r in said.records if "memory plan refused" in r[1]]
    assert level == logging.WARNING and "odd (odd.py:1)" in msg and why in msg
    (ev,) = [e for e in said.errors if e.get("what") == "memory plan"]
    assert ev["code"] == "odd" and ev["code_id"] == new.uid and ev["why"] == why and ev["reason_kind"] == "refused"
    assert "; memory plan refused: " + why in dump(new) and "ALLOC_DEVICE_MEM" not in dump(new)
    # it still runs (one buffer per value), with the planless results
    x = np.random.default_rng(0).standard_normal((4, 130)).astype(np.float32)
    got = BoundCode(new, None, {}, None).call([x, np.ones(264, np.float32)])
    np.testing.assert_array_equal(got, (x * np.float32(2) + np.float32(1)) * np.float32(3))


def test_a_size_that_divides_by_zero_at_the_first_sample_only_is_planned():
    new = memplan.apply(_odd(N - 64))
    assert new.memplan is not None and not getattr(new, "memplan_refused", None)
    assert len(new.memplan.values) == 2 and memplan.check(new, new.memplan) == []
    x = np.random.default_rng(1).standard_normal((4, 66)).astype(np.float32)
    got = BoundCode(new, None, {}, None).call([x, np.ones(8, np.float32)])
    np.testing.assert_array_equal(got, (x * np.float32(2) + np.float32(1)) * np.float32(3))


def test_an_unverified_code_is_refused():
    code = _odd(S.Expr.const(1), verified=False)
    with pytest.raises(memplan.PlanRefused, match="not verified"):
        memplan.plan(code)
    with _Said() as said:
        new = memplan.apply(code)
    assert new is code and new.memplan is None and "no static types" in new.memplan_refused
    assert [e["what"] for e in said.errors] == ["memory plan"]


def test_figures_name_the_symbols_not_bound():
    new = memplan.apply(_odd(S.Expr.const(1)))
    assert new.memplan.figures({"B": 4, "N": 8})["planned_bytes"] == 4 * 8 * 4
    with pytest.raises(ValueError, match=r"symbol N not bound \(given: B\)"):
        new.memplan.figures({"B": 4})


class Refusing(ms.nn.Cell):
    """Its FUSED_ELEMENTWISE's size divides by (n - 64) * (n - 129): zero at both sample points."""

    def construct(self, x):
        n = x.shape[1]
        y = ops.reshape(x, (x.shape[0] // ((n - 64) * (n - 129)), -1))
        return ops.ReduceSum()((y * 2.0 + 1.0) * 3.0, 1)


def test_a_cell_whose_plan_is_refused_runs_and_is_listed():
    """Listed under ``refused`` by msvm.memory.report with why (before: planned blind), logged once, and
    its result is numpy's."""
    from msvm import memory

    x = np.random.default_rng(2).standard_normal((130, 130)).astype(np.float32)
    net = Refusing()
    with _Said() as said:
        got = net(ms.Tensor(x)).asnumpy()
        net(ms.Tensor(x))
    np.testing.assert_allclose(got, ((x.reshape(1, -1) * 2 + 1) * 3).sum(1), rtol=1e-5)
    rep = memory.report(net)
    assert rep["codes"] == [] and [r["code"] for r in rep["refused"]] == ["Refusing.construct"]
    assert "FUSED_ELEMENTWISE's result" in rep["refused"][0]["reason"]
    assert len([m for _, m in said.records if "memory plan refused for Refusing.construct" in m]) == 1
