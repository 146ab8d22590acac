"""An activation sub-Cell joins the sub-Cell whose result it reads (compiler/epilogue.py), and a
matmul's epilogue runs past the product's reshape and local (fuse.py ``_PastReshape``): the
names, the lines, what must not match, and L1 with fusion on and off against numpy."""


import msvm as ms
import numpy as np
import pytest
from epilogue_cells import MLP, NewGELU, Scaled, mlp_numpy
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


class KeepsProduct(nn.Cell):      # the product's local is read again after the activation: no epilogue past it
    def __init__(self, n):
        super().__init__()
        self.w = ms.Parameter(ms.Tensor(np.eye(n, dtype=np.float32)), "w")

    def construct(self, x):
        h = ops.matmul(x, self.w)
        y = h * h + 1.0
        return y, h


class CostlyFragment(nn.Cell):    # tanh(product) stored and read three times: recomputing it is not worth it
    def __init__(self, n):
        super().__init__()
        self.w = ms.Parameter(ms.Tensor(np.eye(n, dtype=np.float32)), "w")

    def construct(self, x):
        h = ops.tanh(ops.matmul(x, self.w))
        return h * h * h


def _instrs(net):
    return [(c.name, i) for v in net._runner.variants.values() for c in v.code.all_codes() for i in c.instrs]


def test_the_gelu_becomes_the_products_epilogue_at_its_lines():
    net = MLP(8, 32)
    net(ms.Tensor(np.ones((1, 3, 8), np.float32)))
    fused = [(c, i) for c, i in _instrs(net) if i.op.name == "FUSED_MATMUL" and len(i.parts) > 2]
    ((code_name, ins),) = fused
    assert code_name == "Conv1D.construct"
    assert display_name(ins) == "FUSED_MATMUL_BIAS_MUL_POW_MUL_ADD_MUL_TANH_ADD_MUL"
    gelu = NewGELU.construct.__code__.co_firstlineno + 1
    assert {loc.line for _, loc in ins.parts[2:]} == {gelu}
    mlp = [i.op.name for c, i in _instrs(net) if c == "MLP.construct"]
    assert mlp.count("CALL_CELL") == 2, mlp          # (c_fc with the GELU, then c_proj)


def test_what_is_not_merged_or_fused_past():
    net = MLP(8, 16, act=Scaled())
    x = np.random.default_rng(0).standard_normal((2, 4, 8)).astype(np.float32)
    got = net(ms.Tensor(x)).asnumpy()
    assert [i.op.name for c, i in _instrs(net) if c == "MLP.construct"].count("CALL_CELL") == 3
    h = x @ net.c_fc.weight.asnumpy() + net.c_fc.bias.asnumpy()
    np.testing.assert_allclose(got, (h * np.float32(0.3)) @ net.c_proj.weight.asnumpy() + net.c_proj.bias.asnumpy(),
                               rtol=1e-5, atol=1e-5)
    for cls in (KeepsProduct, CostlyFragment):
        n = cls(6)
        v = np.random.default_rng(1).standard_normal((3, 6)).astype(np.float32)
        got = n(ms.Tensor(v))
        mm = [i for _, i in _instrs(n) if i.op.name == "FUSED_MATMUL"]
        assert all(len(i.parts) <= 2 for i in mm), [display_name(i) for i in mm]
        if cls is KeepsProduct:
            np.testing.assert_allclose(got[0].asnumpy(), v * v + 1, rtol=1e-5, atol=1e-6)
            np.testing.assert_array_equal(got[1].asnumpy(), v)
        else:
            np.testing.assert_allclose(got.asnumpy(), np.tanh(v) ** 3, rtol=1e-5, atol=1e-6)


@given(shape=st.sampled_from([(1, 1, 8), (1, 5, 8), (2, 7, 8), (1, 0, 8)]), seed=st.integers(0, 2**16))
@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
def test_fusion_on_and_off_agree_at_l1_and_with_numpy(shape, seed):
    rng = np.random.default_rng(seed)
    x = sprinkle(rng, rng.standard_normal(shape).astype(np.float32), 0.05)
    outs = []
    for fusion in (True, False):
        ms.set_context(jit_config={"enable_fusion": fusion})
        net = MLP(8, 24)
        with np.errstate(all="ignore"):
            outs.append(net(ms.Tensor(x)).asnumpy())
    np.testing.assert_array_equal(outs[0], outs[1])
    clean = rng.standard_normal(shape).astype(np.float32)
    ms.set_context(jit_config={"enable_fusion": True})
    net = MLP(8, 24)
    np.testing.assert_allclose(net(ms.Tensor(clean)).asnumpy(), mlp_numpy(net, clean), rtol=1e-4, atol=1e-5)
