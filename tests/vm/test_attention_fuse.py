"""FUSED_ATTENTION (issue 18): the fusion pattern of compiler/attention.py, the instruction's name
and source lines, and its L1 kernel against the unfused bytecode and numpy: examples/bert_layer.py's
spelling, tests/models' BERT, GPT-2 and LLaMA spellings (as Cells and in the models themselves),
random score programs from a seeded generator, and the patterns the matcher must refuse."""


import msvm as ms
import numpy as np
import pytest
from attention_cells import (  # noqa: E402
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


# ---------------------------------------------------------------- tests/models' spellings

NAMES = {"bert": "FUSED_BMM_MUL_CAST_SUB_MUL_ADD_SOFTMAX_BMM_TRANSPOSE",
         "gpt2": "FUSED_TRANSPOSE_BMM_DIV_CAST_WHERE_ADD_SOFTMAX_CAST_BMM_TRANSPOSE",
         "llama": "FUSED_BMM_MUL_ADD_CAST_SOFTMAX_CAST_BMM_TRANSPOSE"}


@pytest.mark.filterwarnings("ignore:overflow encountered")      # (float32 min + float32 min, as GPT-2 writes it)
@pytest.mark.parametrize("s", [1, 7, 16])
@pytest.mark.parametrize("style", sorted(STYLES))
def test_each_models_spelling_is_one_instruction(style, s):
    rng = np.random.default_rng(11)
    args = style_inputs(rng, style, 2, s, 3, 8)
    outs = {}
    for fusion in (True, False):
        ms.set_context(jit_config={"enable_fusion": fusion})
        net = STYLES[style](8)
        outs[fusion] = net(*map(ms.Tensor, args)).asnumpy()
        if fusion:
            (ins,) = _fused(net)
            assert display_name(ins) == NAMES[style]
            src = STYLES[style].construct.__code__
            assert all(src.co_firstlineno < loc.line <= src.co_firstlineno + 30 for _, loc in ins.parts)
        else:
            assert not _fused(net)
    np.testing.assert_array_equal(outs[True], outs[False])         # each part's own kernel, in order
    np.testing.assert_allclose(outs[True], numpy_style(style, *args, 8), rtol=1e-5, atol=1e-6)


@pytest.mark.filterwarnings("ignore:overflow encountered", "ignore:invalid value")
@pytest.mark.parametrize("case", ["masked_rows", "nan", "empty_batch", "neg_inf"])
@pytest.mark.parametrize("style", sorted(STYLES))
def test_spellings_at_the_edges_agree_with_fusion_off(style, case):
    """Rows masked everywhere (GPT-2's min: uniform; an additive -inf: NaN, as numpy gives), NaN in
    q and k, an empty batch."""
    rng = np.random.default_rng(12)
    b = 0 if case == "empty_batch" else 2
    q, k, v, mask = style_inputs(rng, style, b, 6, 2, 4)
    if case == "masked_rows":
        if style == "bert":
            mask[1] = 0
        elif style == "gpt2":
            mask[1] = float(np.finfo(np.float32).min)
        else:
            mask = np.broadcast_to(mask, (2, 1, 6, 6)).copy()
            mask[1, :, 2] = -np.inf
    elif case == "neg_inf" and style != "bert":     # (on zeros: -1e9 + s keeps s in float64 only)
        mask = np.where(rng.random(mask.shape) < 0.3, -np.inf, 0.0).astype(np.float32)
    elif case == "nan":
        q[0, 2, 1, 0] = np.nan
        k[1, 4, 0, 3] = np.nan
    outs = {}
    for fusion in (True, False):
        ms.set_context(jit_config={"enable_fusion": fusion})
        net = STYLES[style](4)
        with np.errstate(all="ignore"):
            outs[fusion] = net(*map(ms.Tensor, (q, k, v, mask))).asnumpy()
        assert bool(_fused(net)) == fusion
    np.testing.assert_array_equal(outs[True], outs[False])
    with np.errstate(all="ignore"):
        ref = numpy_style(style, q, k, v, mask, 4)
    np.testing.assert_array_equal(np.isnan(outs[True]), np.isnan(ref))
    # (BERT's rows masked everywhere are s - 10000 in float32: 1e-3 of s is lost there)
    tol = 1e-2 if (case, style) == ("masked_rows", "bert") else 1e-5
    np.testing.assert_allclose(outs[True], ref, rtol=tol, atol=tol / 10, equal_nan=True)
    if case == "masked_rows" and style == "llama":
        assert np.isnan(outs[True][1, 2]).all() and not np.isnan(outs[True][0]).any()


@pytest.fixture(scope="module")
def models():
    mods = import_models()
    yield mods
    drop_models()


@pytest.mark.filterwarnings("ignore:overflow encountered")
@pytest.mark.parametrize("name", MODELS)
def test_the_models_run_fused_attention(models, name):
    """tests/models' BERT, GPT-2 and LLaMA at small configs: every layer's attention is one
    FUSED_ATTENTION in the program that runs, and the answers agree with fusion off and with the
    float64 references (tests/refs/nlp.py). BERT with relative positions reads the probabilities
    a second time (their product by the relative values' table): not fused, and still right."""
    outs = {}
    for fusion in (True, False):
        ms.set_context(jit_config={"enable_fusion": fusion})
        np.random.seed(13)             # (the same initial weights both times: initializers draw from it)
        net, args, want, first = build_model(models, name, np.random.default_rng(13))
        outs[fusion] = first(net(*map(ms.Tensor, args))).asnumpy()
        fused = _fused(net)
        if fusion and name != "bert-relative":
            assert fused and all(display_name(i) == NAMES[name] for i in fused), [display_name(i) for i in fused]
        else:
            assert not fused
        assert relative_error(outs[fusion], want) < 1e-4
    np.testing.assert_allclose(outs[True], outs[False], rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- random score programs

@pytest.mark.filterwarnings("ignore:overflow encountered", "ignore:invalid value")
@pytest.mark.parametrize("seed", range(16))
def test_random_score_programs_fuse_and_agree_bit_for_bit(seed, tmp_path):
    rng = np.random.default_rng(100 + seed)
    lines, mshape = score_program(rng, int(rng.integers(1, 6)))
    net_class = score_program_module(tmp_path / f"score_program_{seed}.py", lines)
    args = score_program_inputs(rng, 2, 5, 2, 4, mshape)
    outs = {}
    for fusion in (True, False):
        ms.set_context(jit_config={"enable_fusion": fusion})
        net = net_class()
        with np.errstate(all="ignore"):
            outs[fusion] = net(*map(ms.Tensor, args)).asnumpy()
        assert bool(_fused(net)) == fusion, lines
    np.testing.assert_array_equal(outs[True], outs[False], err_msg=str(lines))


# ---------------------------------------------------------------- what the matcher refuses

class _Refused(nn.Cell):
    def __init__(self, how):
        super().__init__()
        self.how = how
        self.scores = ops.BatchMatMul(transpose_b=True)
        self.drop = nn.Dropout(p=0.5)

    def construct(self, q, k, v):
        s = self.scores(q, k)
        if self.how == "axis":
            p = ops.softmax(s * 0.5, axis=-2)
        elif self.how == "twice":
            p = ops.softmax(s * 0.5 + s, axis=-1)
        elif self.how == "condition":
            p = ops.softmax(ops.where(s > 0, s, 0.0), axis=-1)
        elif self.how == "cast":
            p = ops.softmax(s, axis=-1).astype(ms.float64)
        elif self.how == "reshape":
            p = ops.softmax(ops.reshape(s, s.shape), axis=-1)
        else:
            p = ops.softmax(s, axis=-1)
        if self.how == "transposed_v":
            return ops.BatchMatMul(transpose_b=True)(p, v)
        if self.how == "scores_kept":
            return ops.matmul(p, v), s
        return ops.matmul(p, v)


@pytest.mark.parametrize("how", ["axis", "condition", "cast", "transposed_v", "scores_kept"])
def test_what_the_matcher_refuses_stays_separate_and_right(how):
    rng = np.random.default_rng(14)
    q, k, v = (rng.standard_normal((1, 2, 4, 4)).astype(np.float32) for _ in range(3))
    net = _Refused(how)
    got = net(ms.Tensor(q), ms.Tensor(k), ms.Tensor(v))
    assert not _fused(net), how
    s = q.astype(np.float64) @ k.astype(np.float64).swapaxes(-1, -2)
    t = {"axis": s * 0.5, "twice": s * 1.5, "condition": np.where(s > 0, s, 0.0)}.get(how, s)
    e = np.exp(t - t.max(-2 if how == "axis" else -1, keepdims=True))
    p = e / e.sum(-2 if how == "axis" else -1, keepdims=True)
    want = p @ (v.swapaxes(-1, -2) if how == "transposed_v" else v)
    c = got[0] if how == "scores_kept" else got
    np.testing.assert_allclose(c.asnumpy(), want, rtol=1e-5, atol=1e-6)


def test_scores_read_twice_by_one_program_fuse_through_the_products_epilogue():
    """``softmax(s * 0.5 + s)`` reads the scores twice: the matmul's epilogue takes both reads as one
    program (fuse.py: an epilogue continues past the product's local), so the attention it feeds is
    the plain pattern and fuses, with the same answer as numpy."""
    rng = np.random.default_rng(14)
    q, k, v = (rng.standard_normal((1, 2, 4, 4)).astype(np.float32) for _ in range(3))
    net = _Refused("twice")
    got = net(ms.Tensor(q), ms.Tensor(k), ms.Tensor(v))
    assert _fused(net)
    t = (q.astype(np.float64) @ k.astype(np.float64).swapaxes(-1, -2)) * 1.5
    e = np.exp(t - t.max(-1, keepdims=True))
    np.testing.assert_allclose(got.asnumpy(), (e / e.sum(-1, keepdims=True)) @ v, rtol=1e-5, atol=1e-6)


class _Doubled(nn.Cell):
    def construct(self, x):
        return x * 2.0


class _NotIdentity(nn.Cell):
    """A Cell after the softmax that is not the identity (eval Dropout is): not fused."""

    def __init__(self):
        super().__init__()
        self.scores = ops.BatchMatMul(transpose_b=True)
        self.after = _Doubled()

    def construct(self, q, k, v):
        return ops.matmul(self.after(ops.softmax(self.scores(q, k), axis=-1)), v)


def test_a_cell_after_the_softmax_that_is_not_the_identity_is_not_fused():
    rng = np.random.default_rng(15)
    q, k, v = (rng.standard_normal((1, 2, 4, 4)).astype(np.float32) for _ in range(3))
    net = _NotIdentity()
    got = net(ms.Tensor(q), ms.Tensor(k), ms.Tensor(v)).asnumpy()
    assert not _fused(net)
    s = q @ k.swapaxes(-1, -2)
    e = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(got, 2 * e / e.sum(-1, keepdims=True) @ v, rtol=1e-5, atol=1e-6)


class _Inline(nn.Cell):
    """Inputs made inline, consumed where they are made: the mask's reshape by the add, v's
    transpose by the product (each kept in a fresh local until the fused instruction)."""

    def __init__(self):
        super().__init__()
        self.scores = ops.BatchMatMul(transpose_b=True)

    def construct(self, q, k, v, mask):
        q = ops.transpose(q, (0, 2, 1, 3))
        k = ops.transpose(k, (0, 2, 1, 3))
        p = ops.softmax(self.scores(q, k) * 0.5 + ops.reshape(mask, (mask.shape[0], 1, 1, mask.shape[1])), axis=-1)
        return ops.matmul(p, ops.transpose(v, (0, 2, 1, 3)))


def test_inputs_made_inline_are_kept_in_fresh_locals():
    rng = np.random.default_rng(16)
    q, k, v, _ = _inputs(rng, 2, 5, 5, 3, 4)
    mask = (rng.standard_normal((2, 5)) * 3).astype(np.float32)
    outs = {}
    for fusion in (True, False):
        ms.set_context(jit_config={"enable_fusion": fusion})
        net = _Inline()
        outs[fusion] = net(*map(ms.Tensor, (q, k, v, mask))).asnumpy()
        assert bool(_fused(net)) == fusion
        if fusion:
            code = next(c for v_ in net._runner.variants.values() for c in v_.code.all_codes()
                        if any(i.op.name == "FUSED_ATTENTION" for i in c.instrs))
            assert {"attn0.mask0", "attn0.v"} <= set(code.varnames), code.varnames
    np.testing.assert_array_equal(outs[True], outs[False])
    want = numpy_attention(q, k, v, mask[:, None, None, :], 4, merge=False)        # (scale 1 / sqrt(4))
    np.testing.assert_allclose(outs[True], want, rtol=1e-5, atol=1e-6)
