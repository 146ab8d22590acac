"""The verifier and the checks on entry: shape errors before anything runs."""

import msvm as ms
import numpy as np
import pytest
from msvm import bytecode, nn, ops
from msvm.bytecode import CodeBuilder, Loc
from msvm.bytecode import symbolic as S
from msvm.bytecode.types import TensorType


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
