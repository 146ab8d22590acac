"""GPT-2's Conv1D + NewGELU as one FUSED_MATMUL with the GELU as its epilogue (compiler/epilogue.py,
fuse.py ``_PastReshape``) at L2/L3, on the packed-weight route (2..256 rows) and the BLAS one,
against L1 unfused and float64 numpy, with NaN/inf and an empty sequence."""

import msvm as ms
import numpy as np
import pytest
from epilogue_cells import MLP, mlp_numpy
from msvm.compiler import tiers
from special_values import assert_numpy_equal, sprinkle


def _epilogue_sites(net):
    return [s for v in net._runner.variants.values() for c in v.code.all_codes()
            for s in c.__dict__.get("jit_sites", {}).values()
            if s.op == "FUSED_MATMUL" and any(n[0] == "TANH" for n in s.args[3])]


def _run(net, x, tier):
    ms.set_context(jit_config={"jit_level": tier, "enable_fusion": True})
    for _ in range(3):
        with np.errstate(all="ignore"):
            out = net(ms.Tensor(x)).asnumpy()
        tiers.wait_for_compiles(60)
    return out


@pytest.mark.parametrize("tier", ["L2", "L3"])
@pytest.mark.parametrize("rows", [1, 5, 64, 300])       # (300 rows: past gemm.ROWS, the BLAS product)
def test_against_l1_unfused_and_float64_numpy(level, tier, rows):
    rng = np.random.default_rng(rows)
    x = rng.standard_normal((1, rows, 16)).astype(np.float32)
    net = MLP(16, 48)
    got = _run(net, x, tier)
    sites = _epilogue_sites(net)
    compiled = [k for s in sites for k in (*s.l2.values(), *s.l3.values()) if isinstance(k, tiers.Compiled)]
    assert compiled
    if tier == "L3" and 2 <= rows <= 256:      # (compiler/gemm.py: the weight packed once, its block epilogue)
        assert any(getattr(k.kernel, "packed", False) for k in compiled), [k.kernel.text()[:80] for k in compiled]
    np.testing.assert_allclose(got, mlp_numpy(net, x), rtol=2e-5, atol=2e-5)
    ms.set_context(jit_config={"jit_level": "L1", "enable_fusion": False})
    ref = MLP(16, 48)(ms.Tensor(x)).asnumpy()
    np.testing.assert_allclose(got, ref, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("tier", ["L2", "L3"])
def test_special_values_and_an_empty_sequence(level, tier):
    rng = np.random.default_rng(7)
    x = sprinkle(rng, rng.standard_normal((1, 9, 16)).astype(np.float32), 0.1)
    net = MLP(16, 32)
    got = _run(net, x, tier)
    ms.set_context(jit_config={"jit_level": "L1", "enable_fusion": False})
    with np.errstate(all="ignore"):
        ref = MLP(16, 32)(ms.Tensor(x)).asnumpy()
    assert_numpy_equal(got, ref, rtol=2e-5, atol=2e-5, msg=tier)
    empty = _run(net, np.zeros((1, 0, 16), np.float32), tier)
    assert empty.shape == (1, 0, 16)


@pytest.mark.parametrize("tier", ["L2", "L3"])
@pytest.mark.parametrize("wider", [True, False])
def test_rows_past_gemm_rows_on_both_routes(level, tier, wider, monkeypatch):
    """(issue 18) 300 and 517 rows: the packed route where OpenBLAS runs narrower tiles than msvm's
    (gemm.wider_than_blas, AMD Zen 5), the BLAS one where it does not; both agree with L1 and numpy."""
    from msvm.compiler import gemm

    monkeypatch.setenv("MSVM_THREADS", "1")
    monkeypatch.setattr(gemm, "wider_than_blas", lambda: wider)
    for rows in (300, 517):
        x = np.random.default_rng(rows).standard_normal((1, rows, 16)).astype(np.float32)
        net = MLP(16, 48)
        got = _run(net, x, tier)
        compiled = [k for s in _epilogue_sites(net) for k in (*s.l2.values(), *s.l3.values())
                    if isinstance(k, tiers.Compiled)]
        assert compiled
        if tier == "L3":
            assert any(getattr(k.kernel, "packed", False) for k in compiled) == wider
        np.testing.assert_allclose(got, mlp_numpy(net, x), rtol=2e-5, atol=2e-5)
        ms.set_context(jit_config={"jit_level": "L1", "enable_fusion": False})
        ref = MLP(16, 48)(ms.Tensor(x)).asnumpy()
        np.testing.assert_allclose(got, ref, rtol=2e-5, atol=2e-5)
