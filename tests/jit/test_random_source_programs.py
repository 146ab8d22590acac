"""The random MindSpore-source programs (tests/random_programs.py: SourceProgram — conv2d, pooling,
gather and int-tensor indexing, resize, arange, cumsum, split/chunk, shape-derived slices,
masked_fill, tile, triu/tril, helper functions plain, @ms.jit and made by factories, defaults
omitted) at L1, L2 and L3, each with fusion on and off, twice per setting (the compiling call,
then the compiled kernels and the replay): every answer is numpy's (NaN for NaN, inf for inf,
empty batches, a 0-d operand) and the interpreter's, within the compiled polynomials' error."""

import msvm as ms
import numpy as np
import pytest
from msvm import ops
from msvm.compiler import tiers
from random_programs import SOURCE_ARGS, SourceProgram, source_case, source_inputs
from special_values import assert_numpy_equal

SETTINGS = [(level, fusion) for level in ("L1", "L2", "L3") for fusion in (True, False)]


@pytest.mark.filterwarnings("ignore:Mean of empty slice")   # (numpy's mean of an empty batch: NaN)
@pytest.mark.parametrize("seed", range(80))       # (tests/vm checks these seeds draw every kind of op)
def test_random_source_program_at_every_tier(seed):
    prog = SourceProgram(seed)
    mod = prog.load()
    # the seed's case, and one past the compiled kernels' vector widths and row thresholds
    cases = [source_case(seed), (5, 37, 12, 16, 0.2)]
    envs = [source_inputs(*case[:4], seed, case[4]) for case in cases]
    args = [[ms.Tensor(env[k]) for k in SOURCE_ARGS] for env in envs]
    want = [prog.ref(env) for env in envs]
    first: dict = {}
    try:
        for level, fusion in SETTINGS:
            ms.set_context(jit_config={"jit_level": level, "enable_fusion": fusion})
            f = ms.jit(mod.prog)              # (a new jit function: its bytecode fused or not)
            for call in range(2):
                for k, case in enumerate(cases):
                    with np.errstate(all="ignore"):
                        got = [g.asnumpy() for g in f(*args[k])]
                    what = f"{level} fusion={fusion} call {call} (B, N, H, W, share)={case}\n{prog.source()}"
                    for g, r in zip(got, want[k]):
                        assert_numpy_equal(g, r, rtol=2e-4, atol=1e-4, msg=what)
                    first.setdefault(k, got)    # L1 fused: the interpreter's answer
                    for g, r in zip(got, first[k]):
                        assert_numpy_equal(g, r, rtol=2e-5, atol=2e-5, msg=f"against L1: {what}")
                tiers.wait_for_compiles(30)
            if level != "L1":        # each jit site compiled at this level, or its planner said why not
                codes = [c for v in f._runner.variants.values() for c in v.code.all_codes()]
                for site in [s for c in codes for s in c.__dict__.get("jit_sites", {}).values()]:
                    done = {k.level for k in list(site.l2.values()) + list(site.l3.values())
                            if isinstance(k, tiers.Compiled)}
                    assert int(level[1]) in done or site.l1_why, f"{level}: {site.name} never compiled\n{prog.source()}"
    finally:
        ms.set_context(jit_config={"jit_level": "auto", "enable_fusion": True})


def test_a_strided_input_keeps_a_site_in_l1_and_says_why(level):
    """(found by the source programs) ops.tile is a broadcast view: the site it feeds runs its L1
    kernel, and records why (Site.l1_why) instead of staying there silently."""
    @ms.jit
    def f(a, v):
        return ops.sigmoid(a + ops.tile(v.reshape(1, -1), (a.shape[0], 1)))

    level("L2")
    a, v = np.ones((3, 5), np.float32), np.arange(5, dtype=np.float32)
    for _ in range(2):
        np.testing.assert_allclose(f(ms.Tensor(a), ms.Tensor(v)).asnumpy(), 1 / (1 + np.exp(-(a + v))), rtol=1e-6)
    sites = [s for var in f._runner.variants.values() for c in var.code.all_codes()
             for s in c.__dict__.get("jit_sites", {}).values()]
    assert sites and any("strided" in w for s in sites for w in s.l1_why.values())
