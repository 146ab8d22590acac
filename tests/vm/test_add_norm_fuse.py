"""FUSED_ADD_LAYER_NORM (issue 18): the fusion pattern of compiler/norm.py, the instruction's name and
source lines, and its L1 kernel against the unfused bytecode (bit for bit) and float64 numpy."""

import msvm as ms
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from msvm import nn, ops
from msvm.bytecode.disasm import display_name
from special_values import sprinkle


@pytest.fixture(autouse=True)
def interpreter():
    ms.set_context(mode=ms.GRAPH_MODE, jit_config={"jit_level": "L1", "enable_fusion": True})
    yield
    ms.set_context(mode=ms.GRAPH_MODE, jit_config={"jit_level": "auto", "enable_fusion": True})


class Output(nn.Cell):            # tests/models/bert.py's BertOutput, without its Dense
    def __init__(self, n, eps=1e-12):
        super().__init__()
        self.layernorm = nn.LayerNorm((n,), epsilon=eps)

    def construct(self, hidden, input_tensor):
        output = ops.tanh(hidden)
        output = self.layernorm(output + input_tensor)
        return output


def _fused(net):
    return [i for v in net._runner.variants.values() for c in v.code.all_codes() for i in c.instrs
            if i.op.name == "FUSED_ADD_LAYER_NORM"]


def test_the_residual_add_and_the_norm_become_one_instruction_at_their_lines():
    net = Output(16)
    x = np.random.default_rng(0).standard_normal((3, 16)).astype(np.float32)
    net(ms.Tensor(x), ms.Tensor(x))
    (ins,) = _fused(net)
    assert display_name(ins) == "FUSED_ADD_LAYER_NORM"
    src = Output.construct.__code__.co_firstlineno
    assert [(p, loc.line - src) for p, loc in ins.parts] == [("BROADCAST_ADD", 2), ("LAYER_NORM", 2)]


@given(shape=st.sampled_from([(1, 1), (4, 16), (2, 3, 37), (0, 16), (5, 1, 8), (2, 768)]),
       bshape=st.sampled_from(["same", "row", "col"]), seed=st.integers(0, 2**16))
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
def test_fusion_on_and_off_agree_bit_for_bit_and_with_numpy(shape, bshape, seed):
    rng = np.random.default_rng(seed)
    n = shape[-1]
    x = sprinkle(rng, rng.standard_normal(shape).astype(np.float32), 0.05)
    r_shape = {"same": shape, "row": (n,), "col": shape[:-1] + (1,)}[bshape]
    r = rng.standard_normal(r_shape).astype(np.float32)
    outs = []
    for fusion in (True, False):
        ms.set_context(jit_config={"enable_fusion": fusion})
        net = Output(n, 1e-5)
        net.layernorm.gamma.set_data(ms.Tensor(np.linspace(0.5, 1.5, n, dtype=np.float32)))
        net.layernorm.beta.set_data(ms.Tensor(np.linspace(-1, 1, n, dtype=np.float32)))
        with np.errstate(all="ignore"):
            outs.append(net(ms.Tensor(x), ms.Tensor(r)).asnumpy())
        assert bool(_fused(net)) == fusion
    np.testing.assert_array_equal(outs[0], outs[1])
    with np.errstate(all="ignore"):
        s = np.tanh(x.astype(np.float64)) + r
        ref = (s - s.mean(-1, keepdims=True)) / np.sqrt(s.var(-1, keepdims=True) + 1e-5)
        ref = ref * np.linspace(0.5, 1.5, n) + np.linspace(-1, 1, n)
    np.testing.assert_allclose(outs[0], ref, rtol=1e-4, atol=1e-4, equal_nan=True)
