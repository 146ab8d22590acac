"""Issue 16 (NLP): BERT (MindSpore's official model), GPT-2 (MindNLP style) and a LLaMA decoder
(mindformers style), written as their sources write them and imported under the mindspore alias,
run at sequence lengths 16, 37 and 128 through one bytecode, against float64 numpy references
(tests/refs/nlp.py), in L1, L2 and L3, each with fusion on and off."""

import sys

import msvm as ms
import numpy as np
import pytest
from msvm import compat
from msvm.compiler import tiers

LENGTHS = (16, 37, 128)
TIERS = [(level, fusion) for level in ("L1", "L2", "L3") for fusion in (True, False)]
BATCH, VOCAB = 2, 100


@pytest.fixture(scope="module")
def zoo():
    """The models' modules, imported with ``import mindspore`` resolving to msvm."""
    ms.as_mindspore()
    from models import bert, gpt2, llama
    from refs import nlp
    yield bert, gpt2, llama, nlp
    for name in [m for m in sys.modules if m.startswith("models.")]:
        sys.modules.pop(name)
    compat.remove_alias()        # the alias never outlives this module's tests


def _inputs(rng, s):
    ids = rng.integers(0, VOCAB, (BATCH, s)).astype(np.int32)
    mask = np.ones((BATCH, s), np.int32)
    mask[1, s // 2:] = 0          # the second sequence is padded on the right
    return ids, mask


def _close(got, want, what):
    """Within 1e-4 of the reference, relative to its largest magnitude."""
    err = np.abs(got.astype(np.float64) - want).max() / np.abs(want).max()
    assert err < 1e-4, f"{what}: relative error {err:.2e}"


def _run(net, level, fusion, calls):
    ms.set_context(jit_config={"jit_level": level, "enable_fusion": fusion})
    try:
        for s, args, check in calls:
            for k in range(2):         # the second call runs the compiled kernels / the replay
                out = net(*[ms.Tensor(a) for a in args])
                check(out, f"{level} fusion={fusion} S={s} call {k}")
                tiers.wait_for_compiles(60)
    finally:
        ms.set_context(jit_config={"jit_level": "L1", "enable_fusion": True})
    assert len(net._runner.variants) == 1, "one bytecode for every length"
    if level == "L3":
        assert 3 in _compiled_levels(net), "L3 compiled the model's kernels"


def _compiled_levels(net) -> set:
    sites = [s for v in net._runner.variants.values() for c in v.code.all_codes()
             for s in c.__dict__.get("jit_sites", {}).values()]
    return {k.level for s in sites for k in list(s.l2.values()) + list(s.l3.values()) if isinstance(k, tiers.Compiled)}


def _bert_run(zoo, level, fusion, relative, rng, lengths, what, **model):
    """A small BertModel (``model``: its keyword arguments) called at each of ``lengths`` at one
    tier, each call checked against the float64 reference; the model."""
    bert, _, _, nlp = zoo
    cfg = bert.BertConfig(seq_length=128, vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2,
                          num_attention_heads=4, intermediate_size=128, max_position_embeddings=128, type_vocab_size=2,
                          use_relative_positions=relative)
    net = bert.BertModel(cfg, is_training=False, **model)
    p = nlp.params(net)
    calls = []
    for s in lengths:
        ids, mask = _inputs(rng, s)
        tt = rng.integers(0, 2, ids.shape).astype(np.int32)
        seq, pooled = nlp.bert(p, cfg, ids, tt, mask)

        def check(out, at, seq=seq, pooled=pooled):
            _close(out[0].asnumpy(), seq, f"{what} sequence_output {at}")
            _close(out[1].asnumpy(), pooled, f"{what} pooled_output {at}")
            assert out[2].shape == (VOCAB, 64)
        calls.append((s, (ids, tt, mask), check))
    _run(net, level, fusion, calls)
    return net


@pytest.mark.parametrize("level,fusion", TIERS, ids=[f"{lv}-{'fused' if f else 'unfused'}" for lv, f in TIERS])
@pytest.mark.parametrize("relative", [False, True], ids=["absolute", "relative"])
def test_bert(zoo, level, fusion, relative, rng):
    _bert_run(zoo, level, fusion, relative, rng, LENGTHS, "BERT")


ONE_HOT_TIERS = [("L1", True), ("L3", True)]


@pytest.mark.parametrize("level,fusion", ONE_HOT_TIERS, ids=[lv for lv, _ in ONE_HOT_TIERS])
@pytest.mark.parametrize("relative", [False, True], ids=["absolute", "relative"])
def test_bert_one_hot_embeddings(zoo, level, fusion, relative, rng):
    """``BertModel(..., use_one_hot_embeddings=True)``: the word and token-type lookups are
    nn.Embedding's OneHot + MatMul and the relative-position table ops.one_hot + BatchMatMul, as
    MindSpore's sources write them: the same answer as the float64 reference (a table lookup)."""
    net = _bert_run(zoo, level, fusion, relative, rng, LENGTHS[:2], "one-hot BERT", use_one_hot_embeddings=True)
    ops_at = {}        # the sub-Cells' instructions, by attribute path
    for v in net._runner.variants.values():
        for c in v.code.all_codes():
            for path, sub in c.callees:
                ops_at.setdefault(path.rsplit(".", 1)[-1], set()).update(i.op.name for i in sub.instrs)
    for path in ("bert_embedding_lookup", "token_type_embedding") + (("_generate_relative_positions_embeddings",)
                                                                     if relative else ()):
        assert "GATHER" not in ops_at[path] and ops_at[path] & {"MATMUL", "BATCH_MATMUL", "FUSED_MATMUL"}, path
    if not relative:               # (the position table has use_one_hot=False in the source)
        assert "GATHER" in ops_at["full_position_embedding"]


def test_embedding_lookup_one_hot_and_gather(zoo, rng):
    """bert_model.py's EmbeddingLookup: OneHot + MatMul and Gather give the table's rows, reshaped
    to [-1, seq, E], and return the table itself; eager (PYNATIVE) and compiled agree."""
    bert = zoo[0]
    ids = rng.integers(0, VOCAB, (3, 16)).astype(np.int32)
    table = rng.standard_normal((VOCAB, 24)).astype(np.float32)
    for one_hot in (True, False):
        cell = bert.EmbeddingLookup(VOCAB, 24, [-1, 16, 24], use_one_hot_embeddings=one_hot)
        cell.embedding_table.set_data(ms.Tensor(table))
        out, tab = cell(ms.Tensor(ids))
        assert out.shape == (3, 16, 24)
        np.testing.assert_allclose(out.asnumpy(), table[ids], rtol=1e-6, atol=1e-7)
        np.testing.assert_array_equal(tab.asnumpy(), table)
        ms.set_context(mode=ms.PYNATIVE_MODE)
        try:
            eager, _ = cell(ms.Tensor(ids))
        finally:
            ms.set_context(mode=ms.GRAPH_MODE)
        np.testing.assert_allclose(eager.asnumpy(), out.asnumpy(), rtol=1e-6, atol=1e-7)


@pytest.mark.filterwarnings("ignore:overflow encountered")   # float32.min + float32.min, as in the source
@pytest.mark.parametrize("level,fusion", TIERS, ids=[f"{lv}-{'fused' if f else 'unfused'}" for lv, f in TIERS])
def test_gpt2(zoo, level, fusion, rng):
    _, gpt2, _, nlp = zoo
    cfg = gpt2.GPT2Config(vocab_size=VOCAB, n_positions=128, n_embd=64, n_layer=2, n_head=4)
    net = gpt2.GPT2Model(cfg)
    p = nlp.params(net)
    calls = []
    for s in LENGTHS:
        ids, mask = _inputs(rng, s)
        want = nlp.gpt2(p, cfg, ids, mask)
        calls.append((s, (ids, mask), lambda out, what, want=want: _close(out.asnumpy(), want, f"GPT-2 {what}")))
    _run(net, level, fusion, calls)


@pytest.mark.parametrize("level,fusion", TIERS, ids=[f"{lv}-{'fused' if f else 'unfused'}" for lv, f in TIERS])
def test_llama(zoo, level, fusion, rng):
    _, _, llama, nlp = zoo
    cfg = llama.LlamaConfig(vocab_size=VOCAB, hidden_size=64, num_layers=2, num_heads=4, n_kv_heads=2,
                            intermediate_size=128, seq_length=128)
    net = llama.LlamaModel(cfg)
    p = nlp.params(net)
    calls = []
    for s in LENGTHS:
        ids, mask = _inputs(rng, s)
        want = nlp.llama(p, cfg, ids, mask)
        calls.append((s, (ids, mask), lambda out, what, want=want: _close(out.asnumpy(), want, f"LLaMA {what}")))
    _run(net, level, fusion, calls)


def test_length_past_the_position_table_is_a_clear_error(zoo, rng):
    """BERT slices its position table by the input's length: a longer input fails the entry check."""
    bert = zoo[0]
    cfg = bert.BertConfig(seq_length=16, vocab_size=VOCAB, hidden_size=32, num_hidden_layers=1,
                          num_attention_heads=2, intermediate_size=64, max_position_embeddings=32, type_vocab_size=2)
    net = bert.BertModel(cfg, is_training=False)
    ids, mask = _inputs(rng, 8)
    net(ms.Tensor(ids), ms.Tensor(ids * 0), ms.Tensor(mask))
    ids, mask = _inputs(rng, 20)
    with pytest.raises(Exception, match="SLICE"):
        net(ms.Tensor(ids), ms.Tensor(ids * 0), ms.Tensor(mask))

