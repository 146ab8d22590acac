"""The verifier and the checks on entry: shape errors before anything runs."""

import sys

import msvm as ms
import numpy as np
import pytest
from msvm import bytecode, nn, ops
from msvm.bytecode import CodeBuilder, Loc
from msvm.bytecode import symbolic as S
from msvm.bytecode.types import ScalarType, TensorType


class Projection(nn.Cell):
    def __init__(self):
        super().__init__()
        self.w = ms.Parameter(ms.Tensor(np.zeros((512, 1024), np.float32)))
        self.matmul = ops.MatMul()

    def construct(self, x):
        h = x * 2.0
        return self.matmul(h, self.w)


def test_matmul_mismatch_is_reported_at_its_line_with_both_shapes():
    net = Projection()
    net.set_inputs(ms.Tensor(shape=["B", 768], dtype=ms.float32))
    calls = []
    ms.set_trace(lambda f, pc: calls.append(pc))
    try:
        with pytest.raises(ms.FrontendError) as e:
            net(ms.Tensor(np.ones((4, 768), np.float32)))
    finally:
        ms.set_trace(None)
    msg = str(e.value)
    line = Projection.construct.__code__.co_firstlineno + 2
    assert f"test_verify.py:{line}:" in msg
    assert "[B,768] @ [512,1024]" in msg
    assert calls == []                       # nothing ran


def test_set_inputs_fixed_dims_are_checked_on_entry():
    net = Projection()
    net.set_inputs(ms.Tensor(shape=[None, 512], dtype=ms.float32))
    assert net(ms.Tensor(np.ones((3, 512), np.float32))).shape == (3, 1024)
    with pytest.raises(ms.ShapeMismatch, match="argument x has dim 1 = 300"):
        net(ms.Tensor(np.ones((3, 300), np.float32)))


def test_unified_dims_are_checked_on_entry():
    dense = nn.Dense(768, 10)
    dense(ms.Tensor(np.ones((4, 768), np.float32)))
    with pytest.raises(ms.ShapeMismatch) as e:
        dense(ms.Tensor(np.ones((4, 512), np.float32)))
    assert "512" in str(e.value) and "768" in str(e.value)


def _code(build, params):
    b = CodeBuilder("t.construct", "t.py", 1)
    for name, t in params:
        b.local(name)
        b.code.params.append((name, t))
    build(b)
    return b.finish()


X = TensorType((S.sym("B"), S.Expr.const(768)), ms.float32)
W = TensorType((S.Expr.const(512), S.Expr.const(1024)), ms.float32)


def test_verifier_reports_mismatch_in_bytecode_with_offset():
    def build(b):
        b.emit("LOAD_TENSOR", 0, loc=Loc(3, 4, 3, 9))
        b.emit("LOAD_TENSOR", 1, loc=Loc(3, 4, 3, 9))
        b.emit("MATMUL", b.const(False), b.const(False), loc=Loc(7, 10, 7, 30))
        b.emit("RETURN", loc=Loc(8, 4, 8, 10))
    code = _code(build, [("x", X), ("w", W)])
    with pytest.raises(ms.VerifyError) as e:
        bytecode.verify(code)
    assert str(e.value).startswith("t.py:7:11: MATMUL: shapes [B,768] @ [512,1024] do not match")
    assert "offset 0x0006" in str(e.value)


@pytest.mark.parametrize("case,expect", [
    ("underflow", "pops 2 values but the stack holds 1"),
    ("fall_off", "falls off the end"),
    ("bad_jump", "not the start of an instruction"),
    ("undefined_local", "may be used before it is assigned"),
    ("bad_const", "out of range"),
    ("depth_mismatch", "stack depth"),
])
def test_verifier_rejects_malformed_code(case, expect):
    def build(b):
        if case == "underflow":
            b.emit("LOAD_TENSOR", 0)
            b.emit("BROADCAST_ADD")
            b.emit("RETURN")
        elif case == "fall_off":
            b.emit("LOAD_TENSOR", 0)
            b.emit("RELU")
        elif case == "bad_jump":
            b.emit("LOAD_TENSOR", 0)
            b.emit("RETURN")
        elif case == "undefined_local":
            b.local("y")
            b.emit("LOAD_TENSOR", 1)
            b.emit("RETURN")
        elif case == "bad_const":
            b.emit("LOAD_CONST", 42)
            b.emit("RETURN")
        elif case == "depth_mismatch":
            end = b.new_label()
            b.emit("LOAD_TENSOR", 0)
            b.emit("BRANCH_IF_SYMBOLIC", b.const(S.sym("B") > 3), end)
            b.emit("LOAD_TENSOR", 0)
            b.place(end)
            b.emit("RETURN")
    code = _code(build, [("x", X)])
    if case == "bad_jump":
        from msvm.bytecode.code import Instr
        from msvm.bytecode.opcodes import BY_NAME
        code.instrs.insert(1, Instr(BY_NAME["JUMP"], (1,)))
        code.relayout()
    with pytest.raises(ms.VerifyError, match=expect):
        bytecode.verify(code)


def test_join_of_branches_with_different_dims_verifies():
    class Pad(nn.Cell):
        def construct(self, x):
            if x.shape[0] > 2:
                y = ops.concat((x, x), 0)
            else:
                y = x
            return y + 1.0

    net = Pad()
    assert net(ms.Tensor(np.ones((3, 2), np.float32))).shape == (6, 2)
    assert net(ms.Tensor(np.ones((2, 2), np.float32))).shape == (2, 2)
    code = next(iter(net._runner.variants.values())).code
    assert "x0 > 2" in str(code.result_type) or "join" in str(code.result_type)


# ---------------------------------------------------------------- checks on every instruction, symbols bound

def _raw(code, index, opname, *args):
    """Put a hand-made instruction at ``index`` (for code the frontend would never emit)."""
    from msvm.bytecode.code import Instr
    from msvm.bytecode.opcodes import BY_NAME
    code.instrs.insert(index, Instr(BY_NAME[opname], tuple(args)))
    code.relayout()
    return code


def test_unbound_symbol_is_rejected_at_its_instruction():
    def build(b):
        b.emit("LOAD_SYM", b.const(S.sym("Q") * 2), loc=Loc(5, 4, 5, 9))
        b.emit("RETURN")
    with pytest.raises(ms.VerifyError, match=r"t.py:5:5: LOAD_SYM uses Q: no argument binds it") as e:
        bytecode.verify(_code(build, [("x", X)]))
    assert e.value.offset == 0


def test_unbound_flag_is_rejected():
    def build(b):
        end = b.new_label()
        b.emit("BRANCH_IF_SYMBOLIC", b.const(S.pand(S.sym("B") > 2, S.flag("training"))), end)
        b.place(end)
        b.emit("LOAD_TENSOR", 0)
        b.emit("RETURN")
    with pytest.raises(ms.VerifyError, match="BRANCH_IF_SYMBOLIC uses training"):
        bytecode.verify(_code(build, [("x", X)]))
    flag_param = ("training", ScalarType("b", S.flag("training")))
    bytecode.verify(_code(build, [("x", X), flag_param]))       # bound by the bool argument


def test_symbol_set_on_one_path_only_is_rejected():
    def build(b, both):
        other, join = b.new_label(), b.new_label()
        b.emit("BRANCH_IF_SYMBOLIC", b.const(S.sym("B") > 2), other)
        b.emit("SET_SYM", b.name("i"), b.const(S.Expr.const(0)))
        b.emit("JUMP", join)
        b.place(other)
        if both:
            b.emit("SET_SYM", b.name("i"), b.const(S.Expr.const(1)))
        b.place(join)
        b.emit("LOAD_SYM", b.const(S.sym("i") + 1))
        b.emit("RETURN")
    with pytest.raises(ms.VerifyError, match="LOAD_SYM uses i: no argument binds it and no SET_SYM before it"):
        bytecode.verify(_code(lambda b: build(b, False), [("x", X)]))
    code = bytecode.verify(_code(lambda b: build(b, True), [("x", X)]))
    assert str(code.result_type) == "int(i + 1)"


def test_parameter_dims_must_be_bound_by_the_arguments():
    derived = TensorType((S.sym("B") * 2, S.Expr.const(4)), ms.float32)

    def build(b):
        b.emit("LOAD_TENSOR", 0)
        b.emit("RETURN")
    with pytest.raises(ms.VerifyError, match=r"parameter 'x' .* uses B, which no argument binds"):
        bytecode.verify(_code(build, [("x", derived)]))
    bytecode.verify(_code(build, [("x", derived), ("y", X)]))   # y binds B


def _returns_x(b):
    b.emit("LOAD_TENSOR", 0)
    b.emit("RETURN")


@pytest.mark.parametrize("args,expect", [
    (("LOAD_CONST", 99), "operand value=99 is out of range"),
    (("JUMP", 1), "jump target 0x0001 is not the start of an instruction"),
    (("LOAD_SYM", 0), "LOAD_SYM: operand expr must be a symbolic expression"),
])
def test_unreachable_instructions_are_checked_too(args, expect):
    code = _code(_returns_x, [("x", X)])
    code.consts.append(np.zeros(2, np.float32))
    code = _raw(code, 2, *args)                      # after the RETURN: never reached
    with pytest.raises(ms.VerifyError, match=expect) as e:
        bytecode.verify(code)
    assert e.value.offset == code.instrs[2].offset


def test_unreachable_code_with_unbound_symbol_and_valid_dead_code():
    code = _code(_returns_x, [("x", X)])
    code.consts.append(S.sym("Q"))
    with pytest.raises(ms.VerifyError, match=r"LOAD_SYM uses Q: .*\(unreachable code\)"):
        bytecode.verify(_raw(code, 2, "LOAD_SYM", 0))
    code = _code(_returns_x, [("x", X)])
    code.consts.append(S.sym("B") + 1)
    code = bytecode.verify(_raw(_raw(code, 2, "LOAD_SYM", 0), 3, "RETURN"))    # dead but sound: kept
    assert code.stack_types[2] is None and len(code.instrs) == 4
    from msvm.interp.interpreter import BoundCode
    out = BoundCode(code, None, {}, None).call([np.ones((3, 768), np.float32)])
    assert out.shape == (3, 768)


def test_constant_operands_of_the_wrong_type_are_rejected():
    def build(b):
        b.emit("LOAD_TENSOR", 0)
        b.emit("LOAD_TENSOR", 0)
        b.emit("MATMUL", b.const(np.zeros(3)), b.const(False), loc=Loc(4, 0, 4, 5))
        b.emit("RETURN")
    with pytest.raises(ms.VerifyError, match=r"MATMUL: operand transpose_a must be a bool, found array"):
        bytecode.verify(_code(build, [("x", X)]))


def test_every_constant_operand_of_the_table_has_a_type_check():
    from msvm.bytecode.opcodes import TABLE
    from msvm.bytecode.operands import CONST_OPERANDS
    for op in TABLE:
        for oname, kind in op.operands:
            if kind == "const":
                assert f"{op.name}.{oname}" in CONST_OPERANDS or oname in CONST_OPERANDS, (op.name, oname)


# ---------------------------------------------------------------- bounded work

def test_straight_line_code_does_not_copy_the_locals_at_every_instruction(monkeypatch):
    V = sys.modules["msvm.bytecode.verify"]
    monkeypatch.setattr(V, "WORK_LIMIT", 50_000)     # copying 2000 locals at each of 4000 instructions: 4M

    def build(b):
        for k in range(2000):
            b.emit("LOAD_TENSOR", 0)
            b.emit("STORE_TENSOR", b.local(f"v{k}"))
        b.emit("LOAD_TENSOR", b.local("v1999"))
        b.emit("RETURN")
    assert bytecode.verify(_code(build, [("x", X)])).result_type == X


def test_work_is_capped_for_many_blocks_times_many_locals(monkeypatch):
    V = sys.modules["msvm.bytecode.verify"]
    monkeypatch.setattr(V, "WORK_LIMIT", 50_000)

    def build(b):
        for k in range(200):
            b.emit("LOAD_TENSOR", 0)
            b.emit("STORE_TENSOR", b.local(f"v{k}"))
        for k in range(400):                          # each block stores, so each has its own 200 locals
            nxt = b.new_label()
            b.emit("LOAD_TENSOR", 0)
            b.emit("STORE_TENSOR", b.local(f"v{k % 200}"))
            b.emit("BRANCH_IF_SYMBOLIC", b.const(S.sym("B") > 3), nxt)
            b.place(nxt)
        b.emit("LOAD_TENSOR", 0)
        b.emit("RETURN")
    with pytest.raises(ms.VerifyError, match="too complex to verify: more than 50000 stack and local-variable"):
        bytecode.verify(_code(build, [("x", X)]))


def test_symbolic_arithmetic_is_capped():
    p = S.from_data(["poly", [[1, [[["sym", "B"], 1], [["sym", f"s{i}"], 1]]] for i in range(300)]
                     + [[1, [[["sym", "B"], 1]]]]])

    def build(b):
        b.emit("LOAD_TENSOR", 0)
        b.emit("RESHAPE", b.const((p, p, p)), loc=Loc(2, 0, 2, 1))   # the product has 300**3 / 6 terms
        b.emit("RETURN")
    with pytest.raises(ms.VerifyError, match=r"t.py:2:1: RESHAPE: symbolic arithmetic needs more than \d+ term"):
        bytecode.verify(_code(build, [("x", X)]))
