"""The attention Cell and numpy reference shared by tests/vm/test_attention_fuse.py and
tests/jit/test_attention_tiers.py (FUSED_ATTENTION, issue 18)."""

import math

import msvm as ms  # noqa: F401
import numpy as np
from msvm import nn, ops
from msvm.ops import functional as F


class Attention(nn.Cell):
    """Scaled, masked attention over heads [B, S, H, D]; ``late_v``: v's transpose comes after the
    softmax (as tests/models/bert.py writes it); ``merge``: the context goes back to [B, S, H, D]."""

    def __init__(self, d, late_v=False, merge=True, masked=True):
        super().__init__()
        self.scale = 1.0 / math.sqrt(d)
        self.late_v, self.merge, self.masked = late_v, merge, masked
        self.scores = ops.BatchMatMul(transpose_b=True)
        self.context = ops.BatchMatMul()
        self.softmax = nn.Softmax(axis=-1)

    def construct(self, q, k, v, mask):
        q = ops.transpose(q, (0, 2, 1, 3))
        k = ops.transpose(k, (0, 2, 1, 3))
        if not self.late_v:
            v = ops.transpose(v, (0, 2, 1, 3))
        s = self.scores(q, k) * self.scale
        if self.masked:
            s = s + mask
        p = self.softmax(s)
        if self.late_v:
            v = ops.transpose(v, (0, 2, 1, 3))
        c = self.context(p, v)
        if self.merge:
            c = ops.transpose(c, (0, 2, 1, 3))
        return c


def numpy_attention(q, k, v, mask, d, merge=True, masked=True):
    q, k, v = (x.astype(np.float64).transpose(0, 2, 1, 3) for x in (q, k, v))
    s = q @ k.transpose(0, 1, 3, 2) * (1.0 / math.sqrt(d))
    if masked:
        s = s + mask
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp(s - s.max(-1, keepdims=True))
        p = e / e.sum(-1, keepdims=True)
    c = p @ v
    return c.transpose(0, 2, 1, 3) if merge else c


def _inputs(rng, b, sq, sk, h, d, mask_shape=None, dtype=np.float32):
    q = rng.standard_normal((b, sq, h, d)).astype(dtype)
    k = rng.standard_normal((b, sk, h, d)).astype(dtype)
    v = rng.standard_normal((b, sk, h, d)).astype(dtype)
    mask = (rng.standard_normal(mask_shape or (b, 1, 1, sk)) * 2).astype(dtype)
    return q, k, v, mask


def _fused(net):
    return [i for v in net._runner.variants.values() for c in v.code.all_codes() for i in c.instrs
            if i.op.name == "FUSED_ATTENTION"]


# ---------------------------------------------------------------- the spellings of tests/models (issue 18)
# Each writes attention as one of tests/models' sources does; the heads come in as [B, S, H, D].

class BertStyle(nn.Cell):
    """tests/models/bert.py's BertAttention: BatchMatMul(transpose_b), ``Mul(scale, scores)``, the
    adder ``(1 - cast(mask)) * -10000`` from an int mask [B, S, S] expanded to [B, 1, S, S], ``Add``,
    nn.Softmax, eval Dropout, v reshaped and transposed between the softmax and the product."""

    def __init__(self, d):
        super().__init__()
        self.scores_mul = 1.0 / math.sqrt(d)
        self.matmul_trans_b = ops.BatchMatMul(transpose_b=True)
        self.multiply = ops.Mul()
        self.transpose = ops.Transpose()
        self.multiply_data = -10000.0
        self.matmul = ops.BatchMatMul()
        self.softmax = nn.Softmax()
        self.dropout = nn.Dropout(p=0.1)
        self.expand_dims = ops.ExpandDims()
        self.sub = ops.Sub()
        self.add = ops.Add()
        self.cast = ops.Cast()
        self.get_dtype = ops.DType()

    def construct(self, q, k, v, attention_mask):
        q = self.transpose(q, (0, 2, 1, 3))
        k = self.transpose(k, (0, 2, 1, 3))
        attention_scores = self.matmul_trans_b(q, k)
        attention_scores = self.multiply(self.scores_mul, attention_scores)
        attention_mask = self.expand_dims(attention_mask, 1)
        multiply_out = self.sub(self.cast(F.tuple_to_array((1.0,)), self.get_dtype(attention_scores)),
                                self.cast(attention_mask, self.get_dtype(attention_scores)))
        adder = self.multiply(multiply_out, self.multiply_data)
        attention_scores = self.add(adder, attention_scores)
        attention_probs = self.softmax(attention_scores)
        attention_probs = self.dropout(attention_probs)
        value_layer = self.transpose(v, (0, 2, 1, 3))
        context_layer = self.matmul(attention_probs, value_layer)
        return self.transpose(context_layer, (0, 2, 1, 3))


class GPT2Style(nn.Cell):
    """tests/models/gpt2.py's ``_attn``: ``matmul(q, k.swapaxes(-1, -2))``, divided by a 0-d
    ``ops.full``, WHERE(a slice of the causal table, scores, the dtype's min), ``+ mask``, softmax,
    astype, eval Dropout, ``@ v``, permute back."""

    def __init__(self, d, n_pos=40, causal=True):
        super().__init__()
        self.d, self.causal = d, causal
        self.bias = ops.tril(ops.ones((n_pos, n_pos), dtype=ms.bool_)).view(1, 1, n_pos, n_pos)
        self.attn_dropout = nn.Dropout(p=0.1)

    def construct(self, query, key, value, attention_mask):
        query = query.permute(0, 2, 1, 3)
        key = key.permute(0, 2, 1, 3)
        value = value.permute(0, 2, 1, 3)
        attn_weights = ops.matmul(query, key.swapaxes(-1, -2))
        attn_weights = attn_weights / ops.full([], self.d ** 0.5, dtype=attn_weights.dtype)
        if self.causal:
            query_length, key_length = query.shape[-2], key.shape[-2]
            causal_mask = self.bias[:, :, key_length - query_length: key_length, :key_length]
            mask_value = float(np.finfo(np.float32).min)
            mask_value = ops.full([], mask_value, dtype=attn_weights.dtype)
            attn_weights = ops.where(causal_mask, attn_weights.astype(attn_weights.dtype), mask_value)
        attn_weights = attn_weights + attention_mask
        attn_weights = ops.softmax(attn_weights, axis=-1)
        attn_weights = attn_weights.astype(value.dtype)
        attn_weights = self.attn_dropout(attn_weights)
        attn_output = ops.matmul(attn_weights, value)
        return attn_output.permute(0, 2, 1, 3)


class LlamaStyle(nn.Cell):
    """tests/models/llama.py's ``_attn``: BatchMatMul(transpose_b), ``Mul`` by a 0-d Parameter,
    ``Add(mask, score)``, softmax of a cast, a cast back, the product, the heads merged."""

    def __init__(self, d):
        super().__init__()
        self.inv_norm_factor = ms.Parameter(ms.Tensor(np.array(1.0 / math.sqrt(d), np.float32)), name="inv",
                                            requires_grad=False)
        self.batch_matmul_q_k = ops.BatchMatMul(transpose_b=True)
        self.batch_matmul = ops.BatchMatMul()
        self.mul = ops.Mul()
        self.add = ops.Add()
        self.cast = ops.Cast()
        self.softmax = nn.Softmax()
        self.transpose = ops.Transpose()

    def construct(self, q, k, v, mask):
        q = self.transpose(q, (0, 2, 1, 3))
        k = self.transpose(k, (0, 2, 1, 3))
        v = self.transpose(v, (0, 2, 1, 3))
        score = self.batch_matmul_q_k(q, k)
        score = self.mul(score, self.inv_norm_factor)
        score = self.add(mask, score)
        attention_probs = self.softmax(self.cast(score, ms.float32))
        weighted_values = self.batch_matmul(self.cast(attention_probs, ms.float32), v)
        return self.transpose(weighted_values, (0, 2, 1, 3))


def numpy_style(style, q, k, v, mask, d):
    """float64 numpy of the three spellings (mask: an int [B, S, S] for bert, additive [B, 1, 1, S]
    for gpt2, additive for llama)."""
    q, k, v = (x.astype(np.float64).transpose(0, 2, 1, 3) for x in (q, k, v))
    s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d)
    if style == "bert":
        s = s + (1.0 - mask[:, None].astype(np.float64)) * -10000.0
    elif style == "gpt2":
        sq, sk = s.shape[-2:]
        causal = np.tril(np.ones((sk, sk), bool))[sk - sq:sk, :sk]
        s = np.where(causal, s, float(np.finfo(np.float32).min)) + mask
    else:
        s = s + mask
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp(s - s.max(-1, keepdims=True))
        p = e / e.sum(-1, keepdims=True)
    return (p @ v).transpose(0, 2, 1, 3)


STYLES = {"bert": BertStyle, "gpt2": GPT2Style, "llama": LlamaStyle}


def style_inputs(rng, style, b, s, h, d, dtype=np.float32):
    q, k, v, _ = _inputs(rng, b, s, s, h, d, dtype=dtype)
    if style == "bert":
        mask = np.ones((b, s, s), np.int32)
        mask[:, :, s // 2 + 1:] = 0 if b else mask[:, :, s // 2 + 1:]
    elif style == "gpt2":
        mask = np.zeros((b, 1, 1, s), dtype)
        if b:
            mask[-1, ..., s // 2 + 1:] = float(np.finfo(np.float32).min)
    else:
        mask = np.triu(np.full((s, s), -1e9, dtype), 1)[None, None]
    return q, k, v, mask


# ---------------------------------------------------------------- tests/models at small configs (issue 18)

MODELS = ("bert", "bert-relative", "gpt2", "llama")


def import_models():
    """tests/models' modules and tests/refs/nlp.py, imported with ``import mindspore`` resolving to
    msvm; ``drop_models()`` undoes it."""
    ms.as_mindspore()
    from models import bert, gpt2, llama
    from refs import nlp
    return bert, gpt2, llama, nlp


def drop_models():
    import sys

    from msvm import compat

    for name in [m for m in sys.modules if m.startswith("models.")]:
        sys.modules.pop(name)
    compat.remove_alias()


def build_model(mods, name, rng, s=16):
    """(net, inputs, float64 reference of its first output, first output of a result) for one of
    MODELS: 2 layers, 4 heads of 16, a batch of 2 whose second sequence is padded on the right."""
    bert, gpt2, llama, nlp = mods
    ids = rng.integers(0, 100, (2, s)).astype(np.int32)
    mask = np.ones((2, s), np.int32)
    mask[1, s // 2:] = 0
    if name.startswith("bert"):
        cfg = bert.BertConfig(seq_length=128, vocab_size=100, hidden_size=64, num_hidden_layers=2,
                              num_attention_heads=4, intermediate_size=128, max_position_embeddings=128,
                              type_vocab_size=2, use_relative_positions=name == "bert-relative")
        net = bert.BertModel(cfg, is_training=False)
        tt = rng.integers(0, 2, ids.shape).astype(np.int32)
        return net, (ids, tt, mask), nlp.bert(nlp.params(net), cfg, ids, tt, mask)[0], lambda out: out[0]
    if name == "gpt2":
        cfg = gpt2.GPT2Config(vocab_size=100, n_positions=128, n_embd=64, n_layer=2, n_head=4)
        net = gpt2.GPT2Model(cfg)
        return net, (ids, mask), nlp.gpt2(nlp.params(net), cfg, ids, mask), lambda out: out
    cfg = llama.LlamaConfig(vocab_size=100, hidden_size=64, num_layers=2, num_heads=4, n_kv_heads=2,
                            intermediate_size=128, seq_length=128)
    net = llama.LlamaModel(cfg)
    return net, (ids, mask), nlp.llama(nlp.params(net), cfg, ids, mask), lambda out: out


def relative_error(got, want) -> float:
    return float(np.abs(got.astype(np.float64) - want).max() / np.abs(want).max())


# ---------------------------------------------------------------- random score programs (a seeded generator)

SCORE_STEPS = (
    "s = s * {c}",
    "s = {c} * s",
    "s = s / {c}",
    "s = s / ops.full([], {c}, dtype=s.dtype)",
    "s = s + m_add",
    "s = m_add + s",
    "s = s - m_add",
    "s = s + (1.0 - m_int.astype(s.dtype)) * -10000.0",
    "s = ops.where(m_bool, s, ops.full([], {neg}, dtype=s.dtype))",
    "s = ops.where(m_bool, ops.full([], {neg}, dtype=s.dtype), s)",
    "s = s.astype(s.dtype)",
    "s = ops.tanh(s) * {c}",
    "s = ops.maximum(s, m_add)",
)
MASK_SHAPES = ("b11s", "11ss", "s", "bhss")


def score_program(rng, n_steps: int) -> tuple:
    """(construct source lines, additive mask shape) of a random score program."""
    lines = []
    for _ in range(n_steps):
        step = SCORE_STEPS[int(rng.integers(len(SCORE_STEPS)))]
        c = round(float(rng.uniform(0.1, 2.0)), 3) * (1 if rng.random() < 0.8 else -1)
        lines.append(step.format(c=c, neg=rng.choice(["-1e9", "-3.0", "float('-inf')", "-3.4028234663852886e+38"])))
    return lines, MASK_SHAPES[int(rng.integers(len(MASK_SHAPES)))]


def score_program_module(path, lines) -> type:
    """A Cell whose attention has this score program, written to ``path`` and imported (the
    frontend reads a Cell's source from its file)."""
    import importlib.util

    body = "\n".join("        " + ln for ln in lines)
    path.write_text(f'''import msvm as ms
from msvm import nn, ops


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.softmax = nn.Softmax()
        self.scores = ops.BatchMatMul(transpose_b=True)

    def construct(self, q, k, v, m_add, m_int, m_bool):
        q = ops.transpose(q, (0, 2, 1, 3))
        k = ops.transpose(k, (0, 2, 1, 3))
        v = ops.transpose(v, (0, 2, 1, 3))
        s = self.scores(q, k)
{body}
        p = self.softmax(s)
        return ops.transpose(ops.matmul(p, v), (0, 2, 1, 3))
''')
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.Net


def score_program_inputs(rng, b, s, h, d, mask_shape):
    q, k, v, _ = _inputs(rng, b, s, s, h, d)
    shape = {"b11s": (b, 1, 1, s), "11ss": (1, 1, s, s), "s": (s,), "bhss": (b, h, s, s)}[mask_shape]
    m_add = (rng.standard_normal(shape) * 2).astype(np.float32)
    m_int = (rng.random((b, 1, 1, s)) < 0.7).astype(np.int32)
    m_bool = rng.random((1, 1, s, s)) < 0.7
    return q, k, v, m_add, m_int, m_bool
