"""FUSED_ATTENTION in the compiled tiers (compiler/attention_site.py, issue 18): at L2, L3 and auto
against the interpreter (L1) and float64 numpy, with fusion on and off, on random shapes: one
query, cross attention, an empty batch, masks with -inf and large negatives, a causal mask,
NaN, float64, the context kept in heads or merged back; tests/models' BERT, GPT-2 and LLaMA
spellings (as Cells and in the models), random score programs; and the site as a Site: the
profile's compile records with their reasons, L1 decisions said, a compile over its budget."""

import math

import msvm as ms
import numpy as np
import pytest
from attention_cells import (
    MODELS,
    STYLES,
    Attention,
    _fused,
    _inputs,
    build_model,
    drop_models,
    import_models,
    numpy_attention,
    numpy_style,
    relative_error,
    score_program,
    score_program_inputs,
    score_program_module,
    style_inputs,
)
from msvm.compiler import build, tiers
from msvm.compiler.attention_site import Kernels
from msvm.profile import Profiler

CASES = {      # (b, sq, sk, h, d, mask shape or None: [b, 1, 1, sk])
    "bert16": (1, 16, 16, 4, 16, None),
    "s1": (2, 1, 1, 3, 8, None),
    "cross": (1, 3, 7, 2, 8, None),
    "causal": (1, 9, 9, 2, 8, "causal"),
    "per_query_mask": (2, 5, 5, 2, 4, (2, 1, 5, 5)),
    "odd": (3, 13, 13, 5, 6, None),
}


def _run(net, level, args, calls=3):
    ms.set_context(jit_config={"jit_level": level})
    out = None
    for _ in range(calls):
        out = net(*map(ms.Tensor, args)).asnumpy()
        tiers.wait_for_compiles(60)
    return out


def _compiled(net) -> bool:
    sites = [s for v in net._runner.variants.values() for c in v.code.all_codes() for s in c.jit_sites.values()
             if s.op == "FUSED_ATTENTION"]
    return bool(sites) and any(isinstance(k, Kernels) for s in sites for k in list(s.l2.values()) + list(s.l3.values()))


@pytest.mark.parametrize("merge", [True, False])
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("tier", ["L2", "L3", "auto"])
def test_attention_tiers_match_l1_and_numpy(tier, case, merge):
    b, sq, sk, h, d, mshape = CASES[case]
    rng = np.random.default_rng(abs(hash((case, merge))) % 2**32)
    q, k, v, mask = _inputs(rng, b, sq, sk, h, d, None if mshape in (None, "causal") else mshape)
    if mshape == "causal":
        mask = np.triu(np.full((sq, sk), -1e9, np.float32), 1)[None, None]
    net = Attention(d, merge=merge)
    ref1 = _run(net, "L1", (q, k, v, mask), 1)
    got = _run(net, tier, (q, k, v, mask))
    assert _fused(net) and _compiled(net), "the attention did not run compiled"
    np.testing.assert_allclose(got, ref1, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got, numpy_attention(q, k, v, mask, d, merge), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("tier", ["L2", "L3"])
def test_minus_infinity_large_negatives_and_nan(tier):
    rng = np.random.default_rng(7)
    q, k, v, mask = _inputs(rng, 3, 6, 6, 2, 8)
    mask[0, :, :, :3] = -np.inf
    mask[1] = -np.inf                  # every key masked: 0/0, NaN rows (as numpy gives)
    mask[2, :, :, 1::2] = -3e38
    q[2, 4, 1, 5] = np.nan
    net = Attention(8)
    ref1 = _run(net, "L1", (q, k, v, mask), 1)
    with np.errstate(invalid="ignore"):
        got = _run(net, tier, (q, k, v, mask))
    assert _compiled(net)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref1))
    assert np.isnan(got[1]).all() and np.isnan(got[2, 4, 1]).all() and not np.isnan(got[0]).any()
    np.testing.assert_allclose(got, ref1, rtol=1e-5, atol=1e-6, equal_nan=True)


def test_float64_and_fusion_off(level):
    rng = np.random.default_rng(8)
    q, k, v, mask = _inputs(rng, 2, 11, 11, 3, 5, dtype=np.float64)
    ref = numpy_attention(q, k, v, mask, 5)
    for fusion in (True, False):
        ms.set_context(jit_config={"enable_fusion": fusion})
        net = Attention(5)
        got = _run(net, "L3", (q, k, v, mask))
        assert got.dtype == np.float64 and _compiled(net) == fusion
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)


def test_empty_batch_runs_the_reference_and_a_sliced_mask(level):
    rng = np.random.default_rng(9)
    net = Attention(4)
    q, k, v, mask = _inputs(rng, 0, 5, 5, 2, 4)
    got = _run(net, "L3", (q, k, v, mask))
    assert got.shape == (0, 5, 2, 4)
    q, k, v, _ = _inputs(rng, 2, 5, 5, 2, 4)
    wide = rng.standard_normal((2, 1, 1, 10)).astype(np.float32)
    mask = wide[..., ::2]               # (a Tensor of a strided view)
    got = _run(net, "L3", (q, k, v, mask))
    np.testing.assert_allclose(got, numpy_attention(q, k, v, mask, 4), rtol=1e-5, atol=1e-6)


def test_a_stream_of_lengths_stays_on_l2(level):
    """auto: more lengths than L3_SHAPES make the site polymorphic; every answer stays right."""
    rng = np.random.default_rng(10)
    net = Attention(8)
    ms.set_context(jit_config={"jit_level": "auto"})
    for s in (3, 5, 8, 13, 21, 5, 3, 34):
        q, k, v, mask = _inputs(rng, 1, s, s, 2, 8)
        got = net(*map(ms.Tensor, (q, k, v, mask))).asnumpy()
        tiers.wait_for_compiles(60)
        np.testing.assert_allclose(got, numpy_attention(q, k, v, mask, 8), rtol=1e-5, atol=1e-5, err_msg=str(s))
    assert _compiled(net)
    assert math.isfinite(float(got.sum()))


@pytest.mark.parametrize("level", ["L2", "auto"])
def test_sites_score_in_the_threads_workspace(level):
    """The scores and probabilities are the calling thread's workspace (compiler/workspace.py), not buffers
    each site keeps per shape: two sites and a stream of lengths grow it once, to the longest, and then
    allocate nothing; each answer stays right (NaN rows too); a second thread scores in its own."""
    import threading

    from msvm.compiler import workspace

    rng = np.random.default_rng(11)
    nets = [Attention(8), Attention(8)]
    ms.set_context(jit_config={"jit_level": level})

    def check(s, h=2):
        q, k, v, mask = _inputs(rng, 1, s, s, h, 8)
        q[0, 0, 1, :] = np.nan
        for net in nets:
            got = net(*map(ms.Tensor, (q, k, v, mask))).asnumpy()
            ref = numpy_attention(q, k, v, mask, 8)
            np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
            np.testing.assert_allclose(got[~np.isnan(ref)], ref[~np.isnan(ref)], rtol=1e-5, atol=1e-5, err_msg=str(s))
    for s in (40, 3, 40):
        check(s)
        tiers.wait_for_compiles(60)
    assert all(_compiled(net) for net in nets)
    ws = workspace.thread_workspace()
    held, gen = workspace.workspace_bytes(), ws.gen
    assert held >= 2 * 2 * 40 * 40 * 4           # (the scores and probabilities of the longest, float32)
    for s in (5, 17, 39, 8, 40, 2):
        check(s)
    assert (workspace.workspace_bytes(), ws.gen) == (held, gen)      # (no buffer made, none replaced)
    errors, other = [], []

    def elsewhere():
        try:
            for s in (7, 33, 12):
                check(s)
            other.append(workspace.workspace_bytes())
        except Exception as e:  # noqa: BLE001 - (reported by the test's thread)
            errors.append(e)
    t = threading.Thread(target=elsewhere)
    t.start()
    for s in (9, 31):
        check(s)
    t.join()
    assert not errors, errors
    assert other and other[0] > 0 and (workspace.workspace_bytes(), ws.gen) == (held, gen)


# ---------------------------------------------------------------- tests/models' spellings

def _sites(net):
    return [s for v in net._runner.variants.values() for c in v.code.all_codes() for s in c.jit_sites.values()
            if s.op == "FUSED_ATTENTION"]


@pytest.mark.filterwarnings("ignore:overflow encountered")
@pytest.mark.parametrize("s", [1, 9, 33])
@pytest.mark.parametrize("style", sorted(STYLES))
@pytest.mark.parametrize("tier", ["L2", "L3", "auto"])
def test_each_spelling_runs_compiled_and_agrees(tier, style, s):
    rng = np.random.default_rng(s)
    args = style_inputs(rng, style, 2, s, 3, 8)
    ref1 = None
    for fusion in (False, True):
        ms.set_context(jit_config={"enable_fusion": fusion})
        net = STYLES[style](8)
        if ref1 is None:
            ref1 = _run(net, "L1", args, 1)
        with np.errstate(over="ignore"):
            got = _run(net, tier, args)
        assert _compiled(net) == fusion, [s.l1_why for s in _sites(net)]
        np.testing.assert_allclose(got, ref1, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got, numpy_style(style, *args, 8), rtol=1e-5, atol=1e-5)


@pytest.mark.filterwarnings("ignore:overflow encountered", "ignore:invalid value")
@pytest.mark.parametrize("case", ["masked_rows", "nan", "float64", "empty_batch"])
@pytest.mark.parametrize("style", sorted(STYLES))
@pytest.mark.parametrize("tier", ["L2", "L3"])
def test_spellings_at_the_edges(tier, style, case):
    """Rows masked everywhere (GPT-2's min: uniform rows; -inf: NaN rows, as numpy gives), NaN in q
    and k, float64 (compiled in float64), an empty batch (the L1 kernel, said once)."""
    rng = np.random.default_rng(21)
    dtype = np.float64 if case == "float64" else np.float32
    b = 0 if case == "empty_batch" else 3
    q, k, v, mask = style_inputs(rng, style, b, 7, 2, 8, dtype=dtype)
    if case == "masked_rows":
        if style == "bert":
            mask[1] = 0
        elif style == "gpt2":
            mask[1] = float(np.finfo(np.float32).min)
        else:
            mask = np.broadcast_to(mask, (3, 1, 7, 7)).copy()
            mask[1, :, 3] = -np.inf
    elif case == "nan":
        q[0, 2, 1, 0] = np.nan
        k[2, 5, 0, 3] = np.nan
    net = STYLES[style](8)
    ref1 = _run(net, "L1", (q, k, v, mask), 1)
    with np.errstate(all="ignore"):
        got = _run(net, tier, (q, k, v, mask))
        ref = numpy_style(style, q, k, v, mask, 8)
    if (style, case) == ("llama", "float64"):      # (it casts the scores to float32: the L1 kernel, said)
        assert not _compiled(net) and "result is float32" in str([x.l1_why for x in _sites(net)])
        np.testing.assert_array_equal(got, ref1)
        return
    assert got.dtype == dtype
    if case == "empty_batch":
        assert got.shape == (0, 7, 2, 8) and not _compiled(net)
        assert any("empty" in w for s in _sites(net) for w in s.l1_why.values())
        return
    assert _compiled(net), [s.l1_why for s in _sites(net)]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref1))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    tol = 1e-12 if case == "float64" else 1e-5
    np.testing.assert_allclose(got, ref1, rtol=tol, atol=tol, equal_nan=True)
    tol = 1e-2 if (case, style) == ("masked_rows", "bert") else tol     # (s - 10000 in float32)
    np.testing.assert_allclose(got, ref, rtol=tol, atol=max(tol, 1e-5) / 10, equal_nan=True)


@pytest.fixture(scope="module")
def models():
    mods = import_models()
    yield mods
    drop_models()


@pytest.mark.filterwarnings("ignore:overflow encountered")
@pytest.mark.parametrize("name", [m for m in MODELS if m != "bert-relative"])
@pytest.mark.parametrize("tier", ["L2", "L3", "auto"])
def test_the_models_attention_runs_compiled(models, tier, name):
    """tests/models' BERT, GPT-2 and LLaMA (2 layers, 4 heads): their FUSED_ATTENTION sites run
    compiled kernels at each tier, and the answers agree with L1 with fusion off and with the float64
    references, at two lengths through one bytecode."""
    for s in (16, 37):
        np.random.seed(5)
        ms.set_context(jit_config={"enable_fusion": False})
        net, args, want, first = build_model(models, name, np.random.default_rng(s), s)
        ref1 = first(net(*map(ms.Tensor, args))).asnumpy()
        ms.set_context(jit_config={"enable_fusion": True})
        np.random.seed(5)
        net, args, _, first = build_model(models, name, np.random.default_rng(s), s)
        ms.set_context(jit_config={"jit_level": tier})
        for _ in range(3):
            got = first(net(*map(ms.Tensor, args))).asnumpy()
            tiers.wait_for_compiles(60)
        assert _fused(net) and _compiled(net), [x.l1_why for x in _sites(net)]
        np.testing.assert_allclose(got, ref1, rtol=1e-4, atol=1e-5)
        assert relative_error(got, want) < 1e-4


# ---------------------------------------------------------------- random score programs

@pytest.mark.filterwarnings("ignore:overflow encountered", "ignore:invalid value")
@pytest.mark.parametrize("seed", range(12))
def test_random_score_programs_at_l2_and_l3(seed, tmp_path):
    """The compiled stages (float runs in place, WHERE by copyto, score-free parts once) agree
    with L1; a program whose masks the elementwise kernels cannot collapse runs L1, said once."""
    rng = np.random.default_rng(300 + seed)
    lines, mshape = score_program(rng, int(rng.integers(1, 6)))
    net_class = score_program_module(tmp_path / f"tier_program_{seed}.py", lines)
    args = score_program_inputs(rng, 2, 6, 3, 4, mshape)
    net = net_class()
    with np.errstate(all="ignore"):
        ref1 = _run(net, "L1", args, 1)
        for tier in ("L2", "L3"):
            got = _run(net, tier, args)
            np.testing.assert_array_equal(np.isnan(got), np.isnan(ref1), err_msg=str(lines))
            np.testing.assert_allclose(got, ref1, rtol=1e-5, atol=1e-6, equal_nan=True, err_msg=str(lines))
    (site,) = _sites(net)
    assert _compiled(net) or site.l1_why, lines


# ---------------------------------------------------------------- a Site like the others

def test_compiles_have_reasons_keys_and_events_in_the_profile(level, tmp_path):
    level("L2")
    cache = tiers.reset_cache(str(tmp_path / "k"))
    try:
        prof = Profiler("attention").start(exec_times=False)
        rng = np.random.default_rng(31)
        net = STYLES["gpt2"](8)
        with np.errstate(over="ignore"):
            for s in (5, 5, 9):
                args = style_inputs(rng, "gpt2", 1, s, 2, 8)
                net(*map(ms.Tensor, args))
                tiers.wait_for_compiles(60)
        prof.stop()
        report = prof.report()
        (site,) = _sites(net)
        mine = [c for c in report["compiles"] if c.get("op") == site.name]
        # one stage (the division and the mask's add: the WHERE moves past the add, a masked copy
        # after it), both run by the softmax's row kernel: one compile per shape class
        assert site.split[1][0][0] == "ew" and [st[0] for st in site.split[1]] == ["ew", "where"]
        assert len(mine) >= 1, [(c.get("op"), c.get("reason_kind")) for c in report["compiles"]]
        assert all(k.row.kernel.programs and k.stages == (None, None) for k in site.l2.values())
        assert all(k.row.kernel.opt_level == 3 and "opt=3" in k.row.kernel.text() for k in site.l2.values())
        assert all(c["reason"] and c["key"] and c["source"] in ("compiled", "disk", "memory") for c in mine)
        assert mine[0]["reason_kind"] == "cold" and site.name in mine[0]["reason"]
        recent = [r for r in cache.snapshot()["recent"] if r.get("op") == site.name]
        assert recent and all(r.get("reason") for r in recent)
        k2 = list(site.l2.values())
        assert k2 and all(isinstance(k, Kernels) and len(k.key) == 64 for k in k2)
        assert all(c.level == 2 for k in k2 for c in k.compiled)
        assert site.tier_history and site.why
    finally:
        tiers.wait_for_compiles(60)
        tiers.reset_cache()


def test_inputs_the_plan_does_not_take_are_said_once(level):
    level("L2")
    rng = np.random.default_rng(32)
    net = STYLES["bert"](8)
    q, k, v, mask = style_inputs(rng, "bert", 1, 5, 2, 8)
    q16, k16, v16 = (x.astype(np.float16) for x in (q, k, v))
    got = _run(net, "L2", (q16, k16, v16, mask), 2)
    (site,) = _sites(net)
    assert not _compiled(net) and list(site.l1_why.values()) == ["dtype float16"], site.l1_why
    np.testing.assert_allclose(got.astype(np.float64), numpy_style("bert", q16, k16, v16, mask, 8),
                               rtol=2e-2, atol=2e-3)


def test_a_compile_over_its_budget_stays_on_l1(level, monkeypatch):
    level("L2")
    monkeypatch.setitem(build.BUDGET_S, 2, 0.0)
    import msvm.compiler.attention_site as attention_site

    monkeypatch.setitem(attention_site.BUDGET_S, 2, 0.0)
    rng = np.random.default_rng(33)
    net = STYLES["llama"](8)
    args = style_inputs(rng, "llama", 1, 6, 2, 8)
    got = _run(net, "L2", args, 2)
    (site,) = _sites(net)
    assert list(site.l2.values()) == ["failed"]
    assert [r.kind for (lv, _k), r in site.why.items() if lv == 2] == ["over_budget"]
    np.testing.assert_allclose(got, numpy_style("llama", *args, 8), rtol=1e-5, atol=1e-6)


def test_a_where_moves_past_the_arithmetic_after_it_exactly():
    """split(): where(c, s, y) * 2 + m runs as one stage s * 2 + m, then a masked copy of
    (as_scores(y) * 2 + m): the same floats as the reference kernels in order."""
    from msvm.compiler import attention_plan
    from msvm.interp import kernels

    program = (("in", 1), ("in", 0), ("in", 2), ("WHERE",), ("c", 2), ("BROADCAST_MUL",), ("in", 3),
               ("BROADCAST_ADD",))
    pre, stages = attention_plan.split(program)
    assert [st[0] for st in stages] == ["ew", "where"]
    assert stages[0][1] == (("in", 0), ("c", 2), ("BROADCAST_MUL",), ("in", 1), ("BROADCAST_ADD",))
    rng = np.random.default_rng(34)
    s = rng.standard_normal((2, 3, 4, 4)).astype(np.float32)
    c = rng.random((1, 1, 4, 4)) < 0.5
    m = rng.standard_normal((2, 1, 1, 4)).astype(np.float32)
    for y in (np.float32(-3.1), 0.1, float("-inf")):
        extras = [c, np.asarray(y, np.float32) if isinstance(y, np.float32) else y, m]
        want = kernels.run_program(program, [s] + extras)
        got = kernels.run_program(stages[0][1], [s, m])
        vals = attention_plan.values(pre, extras, np.float32)
        _, cond, other, is_a = stages[1]
        np.copyto(got, attention_plan.operand(other, extras, vals), where=~attention_plan.operand(cond, extras, vals)
                  if is_a else attention_plan.operand(cond, extras, vals))
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("tier", ["L2", "L3"])
def test_masks_that_broadcast_every_way_go_in_at_the_scores_shape(tier, tmp_path):
    """A padding mask [B, 1, 1, S] and a causal one [1, 1, S, S] in one stage: more than 3 dims after
    collapsing, so the stage takes them broadcast to the scores' shape, and still runs compiled."""
    lines = ["s = s * 0.5 + m_add", "s = s + (1.0 - m_int.astype(s.dtype)) * -10000.0"]
    net = score_program_module(tmp_path / f"two_masks_{tier}.py", lines)()
    args = score_program_inputs(np.random.default_rng(35), 2, 6, 3, 4, "11ss")
    ref1 = _run(net, "L1", args, 1)
    got = _run(net, tier, args)
    (site,) = _sites(net)
    assert _compiled(net), site.l1_why
    assert any(p is not None and p.details["expand"] == [True] for p in site.plans.values())
    np.testing.assert_allclose(got, ref1, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- the score program inside the softmax (issue 18)

FUSED_MASKS = {     # (b, s, h, mask shape, whether the row kernel can take it)
    "bert_b1": (1, 37, 3, (1, 1, 1, 37), True),
    "bert_b3": (3, 13, 2, (3, 1, 1, 13), True),
    "per_query": (2, 9, 3, (2, 1, 9, 9), True),
    "full": (2, 5, 2, (2, 2, 5, 5), True),
    "per_head_key": (2, 7, 3, (1, 3, 1, 7), True),
    "per_row": (2, 6, 2, (2, 1, 6, 1), True),             # (one value per row)
    "one_key": (2, 1, 2, (2, 1, 1, 1), True),
}


def _fused_plans(net):
    return [p.details["fused"] for s in _sites(net) for p in s.plans.values() if p is not None]


@pytest.mark.parametrize("case", sorted(FUSED_MASKS))
@pytest.mark.parametrize("tier", ["L2", "L3"])
def test_score_program_in_the_softmax_row_kernel(tier, case, monkeypatch):
    """The score stage run by the softmax's first pass (attention_plan.row_operands) gives the bits of
    the stage kernel followed by the plain softmax, and agrees with L1 and float64 numpy; masks with
    -inf, -3e38 and NaN, broadcast along any of the leading dims or along the row."""
    from msvm.compiler import attention_plan

    b, s, h, mshape, takes = FUSED_MASKS[case]
    rng = np.random.default_rng(len(case) * 7 + s)
    q, k, v, mask = _inputs(rng, b, s, s, h, 8, mshape)
    mask.flat[:: 5] = -np.inf
    mask.flat[1:: 7] = -3e38
    if mask.size > 3:
        mask.flat[3] = np.nan
    ref1 = _run(Attention(8), "L1", (q, k, v, mask), 1)
    got = {}
    for fuse in (True, False):
        monkeypatch.setattr(attention_plan, "FUSE_SOFTMAX", fuse)
        net = Attention(8)
        with np.errstate(all="ignore"):
            got[fuse] = _run(net, tier, (q, k, v, mask))
        assert _compiled(net)
        plans = _fused_plans(net)
        assert plans and all((f is not None) == (fuse and takes) for f in plans), plans
    np.testing.assert_array_equal(got[True], got[False])
    np.testing.assert_array_equal(np.isnan(got[True]), np.isnan(ref1))
    np.testing.assert_allclose(got[True], ref1, rtol=1e-5, atol=1e-6, equal_nan=True)
    with np.errstate(all="ignore"):
        ref = numpy_attention(q, k, v, mask, 8)
    np.testing.assert_allclose(got[True], ref, rtol=1e-5, atol=1e-5, equal_nan=True)


def test_row_operands_collapse_the_leading_dims():
    from msvm.compiler.attention_plan import row_operands

    m = np.zeros((2, 1, 1, 5), np.float32)
    assert row_operands([m, 0.5], (2, 3, 4, 5)) == {"kinds": ("t", "s"), "rowb": (False, True), "n1": 2,
                                                     "n2": 12, "strides": [(0, 5, 0)]}
    full = np.zeros((2, 3, 4, 5), np.float32)
    assert row_operands([full], (2, 3, 4, 5)) == {"kinds": ("t",), "rowb": (False,), "n1": 1, "n2": 24,
                                                  "strides": [(0, 0, 5)]}
    r = row_operands([np.zeros((2, 1, 4, 1), np.float32)], (2, 3, 4, 5))      # (one value per row)
    assert r["rowb"] == (True,) and (r["n1"], r["n2"]) == (3, 4) and r["strides"] == [(4, 0, 1)]
    r = row_operands([np.zeros((1, 3, 1, 5), np.float32), np.zeros((2, 1, 4, 5), np.float32)], (2, 3, 4, 5))
    assert (r["n1"], r["n2"]) == (3, 4) and r["strides"] == [(0, 5, 0), (20, 0, 5)]
    assert row_operands([np.zeros((2, 1, 2, 1, 5), np.float32), np.zeros((1, 3, 1, 1, 5), np.float32)],
                        (2, 3, 2, 4, 5)) is None              # (four leading dims that do not collapse)
    assert row_operands([np.zeros((1, 1, 1, 5), np.float32)], (1, 1, 1, 5)) == {
        "kinds": ("t",), "rowb": (False,), "n1": 1, "n2": 1, "strides": [(0, 0, 0)]}


@pytest.mark.filterwarnings("ignore:overflow encountered", "ignore:invalid value")
@pytest.mark.parametrize("s", [1, 11, 40])
@pytest.mark.parametrize("style", sorted(STYLES))
def test_model_spellings_with_and_without_the_row_program(style, s, monkeypatch):
    """Every spelling's stages run in the softmax row kernel: BERT's (scale, then the int mask's
    adder), GPT-2's (scale, the causal WHERE with its minimum, the mask's adder), LLaMA's; each gives
    the stage route's bits and agrees with L1."""
    from msvm.compiler import attention_plan

    rng = np.random.default_rng(3)
    args = style_inputs(rng, style, 2, s, 3, 8)
    ref1 = _run(STYLES[style](8), "L1", args, 1)
    got = {}
    for fuse in (True, False):
        monkeypatch.setattr(attention_plan, "FUSE_SOFTMAX", fuse)
        for tier in ("L2", "L3"):
            net = STYLES[style](8)
            with np.errstate(over="ignore"):
                got[fuse, tier] = _run(net, tier, args)
            plans = _fused_plans(net)
            assert plans and all((f is not None) == fuse for f in plans)
    for key, out in got.items():
        np.testing.assert_array_equal(out, got[False, key[1]], err_msg=str(key))
        np.testing.assert_allclose(out, ref1, rtol=1e-5, atol=1e-6, err_msg=str(key))
        np.testing.assert_allclose(out, numpy_style(style, *args, 8), rtol=1e-5, atol=1e-5, err_msg=str(key))


@pytest.mark.parametrize("tier", ["L2", "L3"])
def test_a_scale_alone_in_the_row_kernel(tier):
    """A score program with no tensor operand (the scale only): the row kernel takes no operands."""
    rng = np.random.default_rng(12)
    q, k, v, mask = _inputs(rng, 2, 19, 19, 3, 8)
    net = Attention(8, masked=False)
    ref1 = _run(net, "L1", (q, k, v, mask), 1)
    got = _run(net, tier, (q, k, v, mask))
    assert _compiled(net) and all(f is not None and f["kinds"] == () for f in _fused_plans(net))
    np.testing.assert_allclose(got, ref1, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got, numpy_attention(q, k, v, mask, 8, masked=False), rtol=1e-5, atol=1e-5)
