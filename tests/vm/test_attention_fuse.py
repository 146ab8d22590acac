"""FUSED_ATTENTION (issue 18): the fusion pattern of compiler/attention.py, the instruction's name
and source lines, and its L1 kernel against the unfused bytecode and numpy."""


import msvm as ms
import numpy as np
import pytest
from attention_cells import Attention, _fused, _inputs, numpy_attention  # noqa: E402
from msvm import nn, ops
from msvm.bytecode.disasm import display_name
from msvm.bytecode.opcodes import BY_NAME
from msvm.interp import kernels


@pytest.fixture(autouse=True)
def interpreter():
    ms.set_context(mode=ms.GRAPH_MODE, jit_config={"jit_level": "L1", "enable_fusion": True})
    yield
    ms.set_context(mode=ms.GRAPH_MODE, jit_config={"jit_level": "auto", "enable_fusion": True})


@pytest.mark.parametrize("late_v", [False, True])
@pytest.mark.parametrize("merge", [True, False])
def test_attention_becomes_one_instruction_named_after_its_parts(late_v, merge):
    rng = np.random.default_rng(1)
    net = Attention(8, late_v=late_v, merge=merge)
    q, k, v, mask = _inputs(rng, 2, 5, 5, 3, 8)
    got = net(*map(ms.Tensor, (q, k, v, mask))).asnumpy()
    np.testing.assert_allclose(got, numpy_attention(q, k, v, mask, 8, merge), rtol=1e-5, atol=1e-6)
    (ins,) = _fused(net)
    want = "FUSED_BMM_MUL_ADD_SOFTMAX_BMM" + ("_TRANSPOSE" if merge else "")
    assert display_name(ins) == want
    src = Attention.construct.__code__.co_firstlineno
    lines = [loc.line - src for _, loc in ins.parts]
    # scores (line 5 of construct) * scale, + mask (7), the softmax (8), the context (11), the transpose (13)
    assert lines == [5, 5, 7, 8, 11] + ([13] if merge else []), lines


def test_unmasked_attention_and_its_layout():
    rng = np.random.default_rng(2)
    net = Attention(4, masked=False)
    q, k, v, mask = _inputs(rng, 1, 3, 6, 2, 4)            # cross attention: 3 queries, 6 keys
    got = net(*map(ms.Tensor, (q, k, v, mask))).asnumpy()
    np.testing.assert_allclose(got, numpy_attention(q, k, v, mask, 4, masked=False), rtol=1e-5, atol=1e-6)
    (ins,) = _fused(net)
    assert display_name(ins) == "FUSED_BMM_MUL_SOFTMAX_BMM_TRANSPOSE"
    assert got.shape == (1, 3, 2, 4)


@pytest.mark.parametrize("case", ["s1", "neg_inf", "large_negative", "nan", "causal", "empty_batch"])
def test_fusion_on_and_off_agree_in_the_interpreter(case):
    rng = np.random.default_rng(3)
    b, s, h, d = (0 if case == "empty_batch" else 2), (1 if case == "s1" else 6), 2, 4
    mshape = (1, 1, s, s) if case == "causal" else (b, 1, 1, s)
    q, k, v, mask = _inputs(rng, b, s, s, h, d, mshape)
    if case == "neg_inf" and b:
        mask[:, :, :, :2] = -np.inf
        mask[1, :, :, :] = -np.inf          # a row masked everywhere: NaN in both, as numpy gives
    elif case == "large_negative" and b:
        mask[:, :, :, 1::2] = -1e30
    elif case == "nan" and b:
        q[0, 2, 1, 0] = np.nan
    elif case == "causal":
        mask = np.triu(np.full((s, s), -1e9, np.float32), 1)[None, None]
    outs = {}
    for fusion in (True, False):
        ms.set_context(jit_config={"enable_fusion": fusion})
        net = Attention(d)
        outs[fusion] = net(*map(ms.Tensor, (q, k, v, mask))).asnumpy()
        assert bool(_fused(net)) == fusion
    np.testing.assert_array_equal(np.isnan(outs[True]), np.isnan(outs[False]))
    np.testing.assert_allclose(outs[True], outs[False], rtol=1e-6, atol=1e-7, equal_nan=True)
    ref = numpy_attention(q, k, v, mask, d)
    np.testing.assert_allclose(outs[True], ref, rtol=1e-5, atol=1e-6, equal_nan=True)
    np.testing.assert_array_equal(np.isnan(outs[True]), np.isnan(ref))


def test_the_reference_kernel_is_the_parts_in_order():
    rng = np.random.default_rng(4)
    q, k, v = (rng.standard_normal((2, 3, 5, 4)).astype(np.float32) for _ in range(3))
    m = rng.standard_normal((2, 1, 1, 5)).astype(np.float32)
    program = (("in", 0), ("c", 0.5), ("BROADCAST_MUL",), ("in", 1), ("BROADCAST_ADD",))
    got = kernels.fused_attention(q, k, m, v, program, ())
    s = kernels.softmax(np.matmul(q, k.swapaxes(-1, -2)) * np.float32(0.5) + m, -1)
    np.testing.assert_array_equal(got, np.matmul(s, v))
    t = kernels.fused_attention(q, k, m, v, program, (0, 2, 1, 3))
    np.testing.assert_array_equal(t, np.matmul(s, v).transpose(0, 2, 1, 3))


def test_the_opcode_row():
    r = BY_NAME["FUSED_ATTENTION"]
    assert r.kind == "fused" and r.compiled == "kernel"
    assert [k for _, k in r.operands] == ["const", "const", "count"]


def test_a_pattern_broken_in_the_middle_is_not_fused():
    class Probs(nn.Cell):          # the probabilities are returned too: no fusion may swallow them
        def __init__(self):
            super().__init__()
            self.scores = ops.BatchMatMul(transpose_b=True)

        def construct(self, q, k, v):
            p = ops.softmax(self.scores(q, k) * 0.5, axis=-1)
            return ops.matmul(p, v), p

    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((1, 2, 3, 4)).astype(np.float32) for _ in range(3))
    net = Probs()
    c, p = (t.asnumpy() for t in net(ms.Tensor(q), ms.Tensor(k), ms.Tensor(v)))
    assert not _fused(net)
    np.testing.assert_allclose(c, p @ v, rtol=1e-6)
