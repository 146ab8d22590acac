"""A LLaMA decoder written the way mindformers writes it (mindformers/models/llama/llama.py,
llama_layer.py, llama_transformer.py; modules/layers.py), trimmed to an inference forward pass.

The Cells keep mindformers' names and idioms: LlamaRMSNorm with P.Square/ReduceMean/Rsqrt and
the compute type casts; a FreqsMgr that builds the rotary cos/sin tables in numpy at init and
slices them in construct (``self.freqs_cos[:seq_len]``); rotate_half through
``x[..., :x.shape[-1] // 2]`` and a concat; grouped-query attention with ``_repeat_kv`` as a
reshape + P.Tile + reshape; the causal mask from ``ops.triu`` over a ``ops.full`` of -inf and
the padding mask through ``masked_fill``; a SiLU-gated feed-forward (w2(silu(w1 x) * w3 x)).
Left out: KV cache, parallel configs, flash attention, the LM head.
"""

import math

import mindspore.common.dtype as mstype
import numpy as np
from mindspore import Parameter, Tensor, nn, ops
from mindspore.common.initializer import initializer
from mindspore.ops import operations as P


class LlamaConfig:
    def __init__(self, vocab_size=32000, hidden_size=4096, num_layers=32, num_heads=32, n_kv_heads=None,
                 intermediate_size=11008, seq_length=2048, rms_norm_eps=1e-5, theta=10000.0,
                 compute_dtype=mstype.float32, param_init_type=mstype.float32):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.n_kv_heads = n_kv_heads
        self.intermediate_size = intermediate_size
        self.seq_length = seq_length
        self.rms_norm_eps = rms_norm_eps
        self.theta = theta
        self.compute_dtype = compute_dtype
        self.param_init_type = param_init_type


class LlamaRMSNorm(nn.Cell):
    def __init__(self, dim, eps=1e-6, compute_type=mstype.float32, param_init_type=mstype.float32):
        super().__init__()
        self.eps = eps
        self.compute_type = compute_type
        self.weight = Parameter(initializer("ones", (dim,), dtype=param_init_type), "weight")
        self.square = P.Square()
        self.mean = P.ReduceMean(keep_dims=True)
        self.add = P.Add()
        self.rsqrt = P.Rsqrt()
        self.mul = P.Mul()
        self.mul2 = P.Mul()
        self.cast = P.Cast()

    def construct(self, x):
        original_type = x.dtype
        norm_factor = self.square(self.cast(x, self.compute_type))
        norm_factor = self.mean(norm_factor, -1)
        norm_factor = self.add(norm_factor, self.eps)
        norm_factor = self.rsqrt(norm_factor)
        output = self.mul(x, self.cast(norm_factor, original_type))
        output = self.mul2(output, self.cast(self.weight, original_type))
        return output


class FreqsMgr(nn.Cell):
    """The rotary tables for every position up to seq_length; construct slices the first seq_len."""

    def __init__(self, head_dim, seq_length=None, max_position_embedding=4096, rotary_dtype=mstype.float32,
                 theta=10000.0):
        super().__init__()
        if seq_length is not None and seq_length > max_position_embedding:
            max_position_embedding = seq_length
        freqs_base = np.arange(0, head_dim, 2)[: (head_dim // 2)].astype(np.float32)
        freqs = 1.0 / (theta ** (freqs_base / head_dim))
        t = np.arange(0, max_position_embedding, 1).astype(np.float32)
        freqs = np.outer(t, freqs)
        emb = np.concatenate((freqs, freqs), axis=-1)
        self.head_dim = head_dim
        self.freqs_cos = Tensor(np.cos(emb), dtype=rotary_dtype)
        self.freqs_sin = Tensor(np.sin(emb), dtype=rotary_dtype)

    def construct(self, seq_length):
        freqs_cos = self.freqs_cos[:seq_length]
        freqs_sin = self.freqs_sin[:seq_length]
        return freqs_cos, freqs_sin


class LlamaRotaryEmbedding(nn.Cell):
    def __init__(self, head_dim=128, compute_dtype=mstype.float32):
        super().__init__()
        self.head_dim = head_dim
        self.dtype = compute_dtype
        self.add = P.Add()
        self.mul = P.Mul()
        self.neg = P.Neg()
        self.cast = P.Cast()
        self.concat = P.Concat(axis=-1)

    def rotate_half(self, x):
        x1 = x[..., : x.shape[-1] // 2]
        x2 = x[..., x.shape[-1] // 2:]
        return self.concat((self.neg(x2), x1))

    def construct(self, xq, xk, freqs_cis):
        original_type = xq.dtype
        xq = self.cast(xq, self.dtype)
        xk = self.cast(xk, self.dtype)
        freqs_cos, freqs_sin = freqs_cis
        xq_out = self.add(self.mul(xq, freqs_cos), self.mul(self.rotate_half(xq), freqs_sin))
        xk_out = self.add(self.mul(xk, freqs_cos), self.mul(self.rotate_half(xk), freqs_sin))
        return self.cast(xq_out, original_type), self.cast(xk_out, original_type)


class LlamaAttention(nn.Cell):
    def __init__(self, dim=512, n_heads=8, n_kv_heads=None, compute_dtype=mstype.float32,
                 param_init_type=mstype.float32):
        super().__init__()
        self.hidden_size = dim
        self.n_head = n_heads
        self.head_dim = dim // n_heads
        self.n_kv_head = n_heads if n_kv_heads is None else n_kv_heads
        self.n_rep = self.n_head // self.n_kv_head
        self.kv_dim = self.n_kv_head * self.head_dim
        self.dtype = compute_dtype
        self.inv_norm_factor = Tensor(1.0 / math.sqrt(self.head_dim), dtype=compute_dtype)
        self.reshape = P.Reshape()
        self.transpose = P.Transpose()
        self.merger_head_transpose = P.Transpose()
        self.batch_matmul = P.BatchMatMul()
        self.batch_matmul_q_k = P.BatchMatMul(transpose_b=True)
        self.mul = P.Mul()
        self.add = P.Add()
        self.softmax = P.Softmax()
        self.cast = P.Cast()
        self.tile_kv = P.Tile()
        self.apply_rotary_emb = LlamaRotaryEmbedding(self.head_dim, compute_dtype)
        self.wq = nn.Dense(dim, n_heads * self.head_dim, has_bias=False)
        self.wk = nn.Dense(dim, self.kv_dim, has_bias=False)
        self.wv = nn.Dense(dim, self.kv_dim, has_bias=False)
        self.wo = nn.Dense(n_heads * self.head_dim, dim, has_bias=False)

    def construct(self, x, freqs_cis, mask=None):
        ori_dtype = x.dtype
        bs, seq_len, _ = x.shape
        query = self.cast(self.wq(x), self.dtype)
        key = self.cast(self.wk(x), self.dtype)
        value = self.cast(self.wv(x), self.dtype)
        query = self.transpose(self.reshape(query, (bs, seq_len, self.n_head, self.head_dim)), (0, 2, 1, 3))
        key = self.transpose(self.reshape(key, (bs, seq_len, self.n_kv_head, self.head_dim)), (0, 2, 1, 3))
        value = self.transpose(self.reshape(value, (bs, seq_len, self.n_kv_head, self.head_dim)), (0, 2, 1, 3))
        query, key = self.apply_rotary_emb(query, key, freqs_cis)
        key = self._repeat_kv(key, self.n_rep)
        value = self._repeat_kv(value, self.n_rep)
        attention = self._attn(query, key, value, mask)
        output = self.wo(attention)
        return self.cast(output, ori_dtype)

    def _repeat_kv(self, x, rep):
        if rep == 1:
            return x
        bs, n_kv_head, seqlen, head_dim = x.shape
        x = self.reshape(x, (bs, n_kv_head, 1, seqlen * head_dim))
        x = self.tile_kv(x, (1, 1, rep, 1))
        x = self.reshape(x, (bs, n_kv_head * rep, seqlen, head_dim))
        return x

    def _merge_heads(self, x):
        x = self.merger_head_transpose(x, (0, 2, 1, 3))
        bs, seq_len, n_head, head_dim = x.shape
        new_shape = (bs, seq_len, n_head * head_dim)
        return self.reshape(x, new_shape)

    def _attn(self, query, key, value, mask):
        score = self.batch_matmul_q_k(query, key)
        score = self.mul(score, self.inv_norm_factor)
        score = self.add(mask, score)
        attention_probs = self.softmax(self.cast(score, mstype.float32))
        weighted_values = self.batch_matmul(self.cast(attention_probs, self.dtype), value)
        return self._merge_heads(weighted_values)


class LlamaFeedForward(nn.Cell):
    def __init__(self, dim, hidden_dim, compute_dtype=mstype.float32):
        super().__init__()
        self.dtype = compute_dtype
        self.w1 = nn.Dense(dim, hidden_dim, has_bias=False)
        self.w2 = nn.Dense(hidden_dim, dim, has_bias=False)
        self.w3 = nn.Dense(dim, hidden_dim, has_bias=False)
        self.act = nn.SiLU()
        self.mul = P.Mul()
        self.cast = P.Cast()

    def construct(self, x):
        x = self.cast(x, self.dtype)
        gate = self.act(self.w1(x))
        hidden = self.w3(x)
        hidden = self.mul(hidden, gate)
        return self.w2(hidden)


class LlamaDecodeLayer(nn.Cell):
    def __init__(self, layer_id, dim=512, n_heads=8, n_kv_heads=None, intermediate_size=None,
                 norm_eps=1e-5, compute_dtype=mstype.float32):
        super().__init__()
        self.layer_id = layer_id
        self.attention_norm = LlamaRMSNorm(dim, norm_eps)
        self.ffn_norm = LlamaRMSNorm(dim, norm_eps)
        self.attention = LlamaAttention(dim, n_heads, n_kv_heads, compute_dtype)
        self.feed_forward = LlamaFeedForward(dim, intermediate_size, compute_dtype)
        self.add = P.Add()

    def construct(self, x, freqs_cis, mask=None):
        input_x = self.attention_norm(x)
        h = self.attention(input_x, freqs_cis, mask)
        h = self.add(x, h)
        ffn_norm = self.ffn_norm(h)
        ffn_out = self.feed_forward(ffn_norm)
        return self.add(h, ffn_out)


class LlamaModel(nn.Cell):
    def __init__(self, config):
        super().__init__()
        self.dtype = config.compute_dtype
        self.num_layers = config.num_layers
        self.head_dim = config.hidden_size // config.num_heads
        self.tok_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, embedding_table="normal")
        self.freqs_mgr = FreqsMgr(self.head_dim, config.seq_length, theta=config.theta)
        self.layers = nn.CellList([
            LlamaDecodeLayer(i, config.hidden_size, config.num_heads, config.n_kv_heads, config.intermediate_size,
                             config.rms_norm_eps, config.compute_dtype) for i in range(config.num_layers)])
        self.norm_out = LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.cast = P.Cast()

    def construct(self, tokens, input_mask=None):
        bs, seq_len = tokens.shape
        freqs_cis = self.freqs_mgr(seq_len)
        causal = ops.triu(ops.full((seq_len, seq_len), float("-inf"), dtype=mstype.float32), diagonal=1)
        mask = causal.reshape(1, 1, seq_len, seq_len)
        if input_mask is not None:
            pad = ops.logical_not(self.cast(input_mask, mstype.bool_)).reshape(bs, 1, 1, seq_len)
            mask = mask.masked_fill(pad, float(np.finfo(np.float32).min))
        h = self.cast(self.tok_embeddings(tokens), self.dtype)
        for i in range(self.num_layers):
            h = self.layers[i](h, freqs_cis, mask)
        return self.norm_out(h)
