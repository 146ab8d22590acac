"""The profiler puts each instruction's time on the instruction that ran (msvm/profile.py, issue 18).

Bytecode variants of one Cell, its flag specializations and the fused, planned Codes of two
sub-Cells of one class share a name and differ in their instructions. Each case here runs a
deliberately slow matmul in one of them only, and checks that the profile lists one entry per
Code that ran (its program after specialization, fusion and the memory plan), that the matmul's
time is on the matmul of the entry that ran it (a fused instruction with its parts' lines) and
that no time is left on instructions that did not run it. Keyed by (name, offset), as before,
the times of one Code landed on another's instructions (RETURN, LOAD_TENSOR) or were lost."""

import inspect

import msvm as ms
import numpy as np
import pytest
from msvm import nn, ops
from msvm.profile import Profiler, render_html

N = 512          # a 512^3 matmul: milliseconds, against microseconds for everything else here


@pytest.fixture(autouse=True)
def interpreted():
    old = dict(ms.get_context("jit_config") or {})
    ms.set_context(jit_config={"jit_level": "L1", "enable_fusion": True, "memory_plan": True})
    yield
    ms.set_context(jit_config=old)


def _weight(seed=0):
    return ms.Parameter(ms.Tensor(np.random.default_rng(seed).standard_normal((N, N)).astype(np.float32) / N))


class Block(nn.Cell):
    def __init__(self, heavy):
        super().__init__()
        self.heavy = heavy
        self.w = _weight()

    def construct(self, x):
        if self.heavy:
            x = ops.relu(ops.matmul(x, self.w) + 1.0)
        return x


class Two(nn.Cell):
    """Two Codes named Block.construct: the light one first, so its program was the one a report by
    name showed."""

    def __init__(self):
        super().__init__()
        self.light = Block(False)
        self.heavy = Block(True)

    def construct(self, x):
        return self.heavy(self.light(x)) * 2.0


class Ranked(nn.Cell):
    """Two variants (rank 2 and rank 3 inputs), one name: only rank 3 runs the matmul."""

    def __init__(self):
        super().__init__()
        self.w = _weight(1)

    def construct(self, x):
        if x.ndim == 3:
            return ops.ReduceSum()(ops.matmul(x, self.w), 2)
        return x + 1.0


class Flagged(nn.Cell):
    """Specialized per flag value (fusion on): only training=True runs the matmul."""

    def __init__(self):
        super().__init__()
        self.w = _weight(2)

    def construct(self, x, training=False):
        y = x * 0.5
        if training:
            y = ops.relu(ops.matmul(y, self.w))
        return y + 1.0


def _profile(run):
    prof = Profiler("t.py").start()
    try:
        run()
    finally:
        prof.stop()
    return prof.report()


def _line_of(cls, text):
    src, first = inspect.getsourcelines(cls)
    return first + next(k for k, s in enumerate(src) if text in s)


def _matmuls(code):
    return [i for i in code["instructions"] if any("MATMUL" in op for op in [i["op"]] + [p["op"] for p in i["parts"]])]


def _check(rep, name, runs_matmul, matmul_line):
    """The entries named ``name``: the one(s) that ran the matmul have it as their hottest instruction by
    far; the others that ran have no matmul and nearly no time; every nanosecond is on a listed instruction."""
    assert rep["unlisted_exec_ns"] == 0
    assert abs(sum(i["exec_share"] for c in rep["codes"] for i in c["instructions"]) - 1) < 1e-9
    codes = [c for c in rep["codes"] if c["name"] == name]
    ids = [c["id"] for c in rep["codes"]]
    assert len(ids) == len(set(ids))
    ran = [c for c in codes if c["calls"]]
    heavy = [c for c in ran if runs_matmul(c)]
    light = [c for c in ran if not runs_matmul(c)]
    assert heavy and light, [(c["label"], c["calls"], [i["op"] for i in c["instructions"]]) for c in codes]
    mm_ns = 0
    for c in heavy:
        (mm,) = _matmuls(c)
        top = max(c["instructions"], key=lambda i: i["exec_ns"])
        assert top is mm, (c["label"], top["op"], mm["op"])
        rest = sum(i["exec_ns"] for i in c["instructions"]) - mm["exec_ns"]
        assert mm["exec_ns"] > rest, (c["label"], mm["exec_ns"], rest)
        assert matmul_line in [mm["loc"][0]] + [p["loc"][0] for p in mm["parts"]]
        if c["memory_plan"]:                   # (the program after the memory plan)
            assert c["instructions"][0]["op"] == "ALLOC_DEVICE_MEM"
        mm_ns = max(mm_ns, mm["exec_ns"])
    for c in light:
        assert not _matmuls(c), c["label"]
        assert sum(i["exec_ns"] for i in c["instructions"]) < mm_ns / 2, c["label"]
    return heavy, light


def test_two_sub_cells_of_one_class():
    net = Two()
    x = ms.Tensor(np.ones((N, N), np.float32))
    rep = _profile(lambda: [net(x) for _ in range(4)])
    line = _line_of(Block, "ops.matmul(x, self.w)")
    heavy, light = _check(rep, "Block.construct", lambda c: bool(_matmuls(c)), line)
    (mm,) = _matmuls(heavy[0])
    assert mm["op"].startswith("FUSED_MATMUL") and {p["op"] for p in mm["parts"]} >= {"MATMUL", "RELU"}
    assert heavy[0]["calls"] == light[0]["calls"] == 4
    outer = next(c for c in rep["codes"] if c["name"] == "Two.construct")
    assert heavy[0]["program"] == light[0]["program"] == outer["id"] and "in Two.construct" in heavy[0]["label"]
    assert outer["variants"] and not heavy[0]["variants"]


def test_two_variants_of_one_cell():
    net = Ranked()
    x3 = ms.Tensor(np.ones((1, N, N), np.float32))
    x2 = ms.Tensor(np.ones((N, N), np.float32))

    def run():
        for _ in range(3):          # (the rank-3 variant compiles first; the rank-2 one, announced last,
            net(x3)                 # used to be the only program listed for Ranked.construct)
        for _ in range(3):
            net(x2)
    rep = _profile(run)
    heavy, light = _check(rep, "Ranked.construct", lambda c: bool(_matmuls(c)),
                          _line_of(Ranked, "ops.matmul(x, self.w)"))
    assert [v["variant"] for v in heavy[0]["variants"]] == [1] and [v["variant"] for v in light[0]["variants"]] == [2]
    assert heavy[0]["label"] == "variant 1" and heavy[0]["calls"] == light[0]["calls"] == 3
    assert heavy[0]["memory_plan"]["buffers"] >= 1       # (the matmul's result, planned: it dies at the sum)


def test_flag_specializations():
    net = Flagged()
    x = ms.Tensor(np.ones((N, N), np.float32))

    def run():
        for _ in range(3):
            net(x, True)
        for _ in range(3):
            net(x, False)
    rep = _profile(run)
    heavy, light = _check(rep, "Flagged.construct", lambda c: bool(_matmuls(c)),
                          _line_of(Flagged, "ops.matmul(y, self.w)"))
    assert "training=True" in heavy[0]["label"] and "training=False" in light[0]["label"]
    assert [v["flags"] for v in heavy[0]["variants"]] == [{"training": True}]
    codes = [c for c in rep["codes"] if c["name"] == "Flagged.construct"]
    generic = [c for c in codes if not c["calls"]]      # (the flag-generic bytecode was compiled, never run)
    assert len(codes) == 3 and len(generic) == 1 and not any(i["exec_ns"] for i in generic[0]["instructions"])
    page = render_html(rep)
    assert "training=True" in page and "training=False" in page


def test_events_without_a_code_id_fall_back_to_the_name():
    """An emitter that says only the Code's name (an older or foreign one) lands on the Code last announced
    with that name, and a name never announced adds up in ``unlisted_exec_ns``."""
    prof = Profiler("t.py")
    fn = {"name": "F.construct", "filename": "f.py", "firstlineno": 1,
          "instructions": [{"offset": 0, "op": "LOAD_TENSOR", "argrepr": "x", "loc": [2, 0, 2, 1], "parts": []},
                           {"offset": 3, "op": "RETURN", "argrepr": "", "loc": [2, 0, 2, 1], "parts": []}]}
    prof({"type": "bytecode", "code": "F.construct", "program": {"functions": [fn]}, "variant": 1})
    prof({"type": "exec", "code": "F.construct", "instr_ns": {0: 5, 3: 7}})
    prof({"type": "exec", "code": "G.construct", "instr_ns": {0: 11}})
    rep = prof.report()
    (c,) = rep["codes"]
    assert [i["exec_ns"] for i in c["instructions"]] == [5, 7] and c["calls"] == 1
    assert rep["unlisted_exec_ns"] == 11
