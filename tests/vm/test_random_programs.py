"""Random programs, interpreted and checked against numpy (the interpreter is the
reference the compiled tiers are tested against, so it is tested against numpy).

The programs and their inputs come from tests/random_programs.py: expression trees over
x [B,N], v [N], c [B,1], a 0-d s and a parameter W [N,N], emitted as bytecode with
symbolic B and N (B is never 1 or N: broadcasting would unify it with another dim);
inputs with NaN, ±inf, ±0.0 and subnormals in them, empty (B = 0) and strided ones. If
the verifier accepts a program, the interpreter's result must match numpy for concrete
B, N in value (NaN and inf at the same places, the signs of zeros), shape and dtype; if
it rejects it, numpy must fail on it too; if it accepts it only by unifying symbols with
constants, the entry check must stop the call before any instruction runs.
"""

import msvm as ms
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from msvm.bytecode import verify
from msvm.bytecode.types import TensorType
from msvm.interp import replay
from msvm.interp.interpreter import BoundCode
from random_programs import SOURCE_ARGS, SOURCE_KINDS, SourceProgram, build, inputs, ref, source_case, source_inputs, trees
from special_values import assert_numpy_equal

ARGS = ("x", "v", "c", "s")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree=trees(), B=st.sampled_from([0, 2, 3, 4, 5]), N=st.integers(6, 9), seed=st.integers(0, 2 ** 16),
       share=st.sampled_from([0.0, 0.0, 0.15, 0.4]), strided=st.booleans())
def test_random_program_matches_numpy(tree, B, N, seed, share, strided):
    env = inputs(B, N, seed, share, strided)
    code = build(tree, N).finish()
    try:
        with np.errstate(all="ignore"):
            expected = ref(tree, env)
        numpy_ok = True
    except ValueError:
        numpy_ok = False
    try:
        verify(code)
    except ms.VerifyError:
        assert not numpy_ok, f"verifier rejected a program numpy runs: {tree}"
        return
    W = ms.Tensor(env["W"])
    bound = BoundCode(code, None, {"W": W}, None)
    args = [env[k] for k in ARGS]
    if not numpy_ok:    # accepted by unifying symbols: the entry check must stop it before it runs
        with pytest.raises(ms.ShapeMismatch):
            bound.call(args)
        return
    with np.errstate(all="ignore"):
        out = bound.call(args)
        # the straight-line replay of this call's path computes the interpreter's answer, bit for bit,
        # also on its second run (kept output buffers)
        rp = replay.build(bound, bound.fast_bind(args))
        assert rp is not None, tree
        for _ in range(2):
            again = rp(*args)
            assert again is not replay.FALLBACK
            np.testing.assert_array_equal(np.asarray(again), np.asarray(out))
    expected = np.asarray(expected)
    out = np.asarray(out)
    t = code.result_type
    if isinstance(t, TensorType):
        assert out.shape == expected.shape and out.dtype == np.float32
        assert list(out.shape) == [d.evaluate({"B": B, "N": N}) for d in t.shape]
    assert_numpy_equal(out, expected.astype(out.dtype) if out.shape else expected, rtol=2e-4, atol=1e-5, msg=str(tree))


# --- programs as MindSpore source (tests/random_programs.py: SourceProgram): the model zoo's ops,
# helper functions (plain, @ms.jit, closures made by a factory, defaults omitted), shape-derived slices
SEEDS = range(80)


def test_the_source_programs_draw_every_kind():
    drawn = set().union(*(SourceProgram(seed).kinds for seed in SEEDS))
    assert SOURCE_KINDS <= drawn, sorted(SOURCE_KINDS - drawn)


@pytest.mark.filterwarnings("ignore:Mean of empty slice")   # (numpy's mean of an empty batch: NaN)
@pytest.mark.parametrize("seed", SEEDS)
def test_random_source_program_matches_numpy(seed):
    """Each program jitted and called at two signatures, fused and unfused, at L1, against numpy's
    float64 answer: NaN and inf where numpy has them, empty batches, 0-d s."""
    prog = SourceProgram(seed)
    mod = prog.load()
    B, N, H, W, share = source_case(seed)
    for fusion in (True, False):
        ms.set_context(jit_config={"enable_fusion": fusion})
        try:
            f = ms.jit(mod.prog)
            for b, n, h, w in ((B, N, H, W), (3, 7, 6, 5)):
                env = source_inputs(b, n, h, w, seed, share)
                want = prog.ref(env)
                with np.errstate(all="ignore"):
                    got = f(*[ms.Tensor(env[k]) for k in SOURCE_ARGS])
                for g, r in zip(got, want):
                    assert_numpy_equal(g.asnumpy(), r, rtol=2e-4, atol=1e-4,
                                       msg=f"fusion={fusion} B={b} N={n} H={h} W={w}\n{prog.source()}")
        finally:
            ms.set_context(jit_config={"enable_fusion": True})
