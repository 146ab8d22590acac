"""float64 numpy references for the NLP models of tests/models (BERT, GPT-2, LLaMA).

Each takes the model's parameters by name (``params(net)``: name -> float64 array) and the
inputs, and computes the forward pass from the papers' / sources' equations, independently of
msvm's ops."""

import math

import numpy as np
from scipy import special


def params(net) -> dict:
    return {name: p.asnumpy().astype(np.float64) for name, p in net.parameters_and_names()}


def layer_norm(x, g, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def gelu_erf(x):
    return 0.5 * x * (1.0 + special.erf(x / math.sqrt(2.0)))


def heads(x, n):
    b, s, h = x.shape
    return x.reshape(b, s, n, h // n).transpose(0, 2, 1, 3)


def merge(x):
    b, n, s, d = x.shape
    return x.transpose(0, 2, 1, 3).reshape(b, s, n * d)


# ---------------------------------------------------------------- BERT (official MindSpore model)

def bert(p, cfg, input_ids, token_type_ids, input_mask):
    """(sequence_output, pooled_output): embeddings + LayerNorm, post-LN encoder layers with the
    (1 - mask) * -10000 adder and tanh GELU (nn.Dense(activation='gelu')), tanh pooler; with
    use_relative_positions, Shaw et al.'s relative key and value embeddings (distances clipped
    to +-16)."""
    eps, n = 1e-7, cfg.num_attention_heads
    s = input_ids.shape[1]
    x = p["bert_embedding_lookup.embedding_table"][input_ids]
    x = x + p["bert_embedding_postprocessor.token_type_embedding.embedding_table"][token_type_ids]
    if not cfg.use_relative_positions:        # (relative positions replace the absolute ones)
        x = x + p["bert_embedding_postprocessor.full_position_embedding.embedding_table"][np.arange(s)][None]
    x = layer_norm(x, p["bert_embedding_postprocessor.layernorm.gamma"],
                   p["bert_embedding_postprocessor.layernorm.beta"], eps)
    adder = (1.0 - input_mask.astype(np.float64))[:, None, None, :] * -10000.0
    rel = np.clip(np.arange(s)[None, :] - np.arange(s)[:, None], -16, 16) + 16     # [F, T]: j - i

    def dense(v, name):
        return v @ p[f"{name}.weight"].T + p[f"{name}.bias"]

    for i in range(cfg.num_hidden_layers):
        pre = f"bert_encoder.layers.{i}"
        att = f"{pre}.attention.attention"
        q, k, v = (heads(dense(x, f"{att}.{w}_layer"), n) for w in ("query", "key", "value"))
        scores = q @ k.transpose(0, 1, 3, 2)
        if cfg.use_relative_positions:
            e = p[f"{att}._generate_relative_positions_embeddings.embeddings_table"][rel]      # [F, T, H]
            scores = scores + np.einsum("bnfh,fth->bnft", q, e)
        probs = softmax(scores / math.sqrt(q.shape[-1]) + adder)
        ctx = probs @ v
        if cfg.use_relative_positions:
            ctx = ctx + np.einsum("bnft,fth->bnfh", probs, e)
        ctx = merge(ctx)
        out = f"{pre}.attention.output"
        a = layer_norm(x + dense(ctx, f"{out}.dense"), p[f"{out}.layernorm.gamma"], p[f"{out}.layernorm.beta"], eps)
        h = gelu_tanh(dense(a, f"{pre}.intermediate"))
        x = layer_norm(a + dense(h, f"{pre}.output.dense"), p[f"{pre}.output.layernorm.gamma"],
                       p[f"{pre}.output.layernorm.beta"], eps)
    pooled = np.tanh(dense(x[:, 0], "dense"))
    return x, pooled


# ---------------------------------------------------------------- GPT-2 (MindNLP)

def gpt2(p, cfg, input_ids, attention_mask):
    """Last hidden state: token + position embeddings, pre-LN blocks with the causal table and
    the (1 - mask) * float32.min padding adder, gelu_new MLP, final LayerNorm."""
    eps, n = cfg.layer_norm_epsilon, cfg.num_attention_heads
    s = input_ids.shape[1]
    fmin = float(np.finfo(np.float32).min)
    x = p["wte.embedding_table"][input_ids] + p["wpe.embedding_table"][np.arange(s)][None]
    adder = (1.0 - attention_mask.astype(np.float64))[:, None, None, :] * fmin
    causal = np.tril(np.ones((s, s), bool))

    def conv1d(v, name):
        return v @ p[f"{name}.weight"] + p[f"{name}.bias"]

    for i in range(cfg.n_layer):
        pre = f"h.{i}"
        h = layer_norm(x, p[f"{pre}.ln_1.gamma"], p[f"{pre}.ln_1.beta"], eps)
        q, k, v = np.split(conv1d(h, f"{pre}.attn.c_attn"), 3, axis=-1)
        q, k, v = heads(q, n), heads(k, n), heads(v, n)
        w = q @ k.transpose(0, 1, 3, 2) / math.sqrt(v.shape[-1])
        w = np.where(causal, w, fmin) + adder
        x = x + conv1d(merge(softmax(w) @ v), f"{pre}.attn.c_proj")
        h = layer_norm(x, p[f"{pre}.ln_2.gamma"], p[f"{pre}.ln_2.beta"], eps)
        x = x + conv1d(gelu_tanh(conv1d(h, f"{pre}.mlp.c_fc")), f"{pre}.mlp.c_proj")
    return layer_norm(x, p["ln_f.gamma"], p["ln_f.beta"], eps)


# ---------------------------------------------------------------- LLaMA (mindformers)

def rms_norm(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def llama(p, cfg, tokens, input_mask):
    """Final normed hidden state: RMSNorm pre-norm blocks, rotary q/k (rotate_half form), grouped
    kv heads repeated, causal -inf mask with padded keys at float32.min, SiLU-gated MLP."""
    eps, n, nkv = cfg.rms_norm_eps, cfg.num_heads, cfg.n_kv_heads or cfg.num_heads
    b, s = tokens.shape
    hd = cfg.hidden_size // n
    inv = 1.0 / (cfg.theta ** (np.arange(0, hd, 2)[: hd // 2].astype(np.float64) / hd))
    ang = np.outer(np.arange(s, dtype=np.float64), inv)
    emb = np.concatenate([ang, ang], -1)
    cos, sin = np.cos(emb), np.sin(emb)

    def rope(x):
        x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
        return x * cos + np.concatenate([-x2, x1], -1) * sin

    mask = np.where(np.triu(np.ones((s, s), bool), 1), -np.inf, 0.0)[None, None]
    mask = np.where(~input_mask.astype(bool)[:, None, None, :], float(np.finfo(np.float32).min), mask)
    x = p["tok_embeddings.embedding_table"][tokens]

    def lin(v, name):
        return v @ p[f"{name}.weight"].T

    for i in range(cfg.num_layers):
        pre = f"layers.{i}"
        h = rms_norm(x, p[f"{pre}.attention_norm.weight"], eps)
        q = rope(heads(lin(h, f"{pre}.attention.wq"), n))
        k = np.repeat(rope(heads(lin(h, f"{pre}.attention.wk"), nkv)), n // nkv, axis=1)
        v = np.repeat(heads(lin(h, f"{pre}.attention.wv"), nkv), n // nkv, axis=1)
        w = q @ k.transpose(0, 1, 3, 2) / math.sqrt(hd) + mask
        x = x + lin(merge(softmax(w) @ v), f"{pre}.attention.wo")
        h = rms_norm(x, p[f"{pre}.ffn_norm.weight"], eps)
        g = lin(h, f"{pre}.feed_forward.w1")
        x = x + lin(lin(h, f"{pre}.feed_forward.w3") * (g / (1.0 + np.exp(-g))), f"{pre}.feed_forward.w2")
    return rms_norm(x, p["norm_out.weight"], eps)
