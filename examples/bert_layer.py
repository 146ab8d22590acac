"""A BERT-base-like encoder layer, written the MindSpore way.

12-head self-attention, residual + LayerNorm, GELU feed-forward 3072, hidden 768.
It runs for any batch and sequence length with one shape-generic bytecode.

Run: msvm run examples/bert_layer.py     (prints the error against numpy)
"""

import math

import msvm as ms
import numpy as np
from msvm import nn, ops


class SelfAttention(nn.Cell):
    def __init__(self, hidden_size=768, num_heads=12):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = hidden_size // num_heads
        self.query = nn.Dense(hidden_size, hidden_size)
        self.key = nn.Dense(hidden_size, hidden_size)
        self.value = nn.Dense(hidden_size, hidden_size)
        self.scores = ops.BatchMatMul(transpose_b=True)
        self.context = ops.BatchMatMul()
        self.softmax = nn.Softmax(axis=-1)
        self.scale = 1.0 / math.sqrt(self.head_dim)

    def split_heads(self, x):
        b, s, _ = x.shape
        x = ops.reshape(x, (b, s, self.num_heads, self.head_dim))
        return ops.transpose(x, (0, 2, 1, 3))

    def construct(self, hidden_states):
        q = self.split_heads(self.query(hidden_states))
        k = self.split_heads(self.key(hidden_states))
        v = self.split_heads(self.value(hidden_states))
        probs = self.softmax(self.scores(q, k) * self.scale)
        ctx = ops.transpose(self.context(probs, v), (0, 2, 1, 3))
        b, s, h, d = ctx.shape
        return ops.reshape(ctx, (b, s, h * d))


class BertLayer(nn.Cell):
    def __init__(self, hidden_size=768, num_heads=12, intermediate_size=3072):
        super().__init__()
        self.attention = SelfAttention(hidden_size, num_heads)
        self.attention_output = nn.Dense(hidden_size, hidden_size)
        self.attention_norm = nn.LayerNorm((hidden_size,), epsilon=1e-12)
        self.intermediate = nn.Dense(hidden_size, intermediate_size)
        self.gelu = nn.GELU(approximate=False)
        self.output = nn.Dense(intermediate_size, hidden_size)
        self.output_norm = nn.LayerNorm((hidden_size,), epsilon=1e-12)

    def construct(self, hidden_states):
        attn = self.attention_output(self.attention(hidden_states))
        hidden_states = self.attention_norm(attn + hidden_states)
        ff = self.output(self.gelu(self.intermediate(hidden_states)))
        return self.output_norm(ff + hidden_states)


def numpy_reference(layer: BertLayer, x: np.ndarray) -> np.ndarray:
    """The same layer in plain numpy (float32), reading the layer's parameters."""
    def dense(d, t):
        return t @ d.weight.asnumpy().T + d.bias.asnumpy()

    def layer_norm(n, t):
        mean = t.mean(-1, keepdims=True)
        var = ((t - mean) ** 2).mean(-1, keepdims=True)
        return (t - mean) / np.sqrt(var + np.float32(n.epsilon)) * n.gamma.asnumpy() + n.beta.asnumpy()

    from scipy.special import erf

    a = layer.attention
    b, s, hdim = x.shape

    def heads(t):
        return t.reshape(b, s, a.num_heads, a.head_dim).transpose(0, 2, 1, 3)

    q, k, v = heads(dense(a.query, x)), heads(dense(a.key, x)), heads(dense(a.value, x))
    scores = q @ k.transpose(0, 1, 3, 2) * np.float32(a.scale)
    scores = np.exp(scores - scores.max(-1, keepdims=True))
    probs = scores / scores.sum(-1, keepdims=True)
    ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(b, s, hdim)
    h = layer_norm(layer.attention_norm, dense(layer.attention_output, ctx) + x)
    inter = dense(layer.intermediate, h)
    inter = inter * np.float32(0.5) * (np.float32(1) + erf(inter / np.float32(math.sqrt(2))))
    return layer_norm(layer.output_norm, dense(layer.output, inter) + h)


ms.set_context(mode=ms.GRAPH_MODE)
layer = BertLayer()
# batch and sequence length are dynamic: one bytecode serves every (B, S)
layer.set_inputs(ms.Tensor(shape=[None, None, 768], dtype=ms.float32))

if __name__ == "__main__":
    rng = np.random.default_rng(0)
    for batch, seq in [(1, 16), (2, 64), (1, 128), (3, 7)]:
        x = rng.standard_normal((batch, seq, 768)).astype(np.float32)
        out = layer(ms.Tensor(x)).asnumpy()
        ref = numpy_reference(layer, x)
        rel = np.abs(out - ref).max() / np.abs(ref).max()
        print(f"batch={batch} seq={seq}: out {list(out.shape)}, max relative error vs numpy {rel:.1e}")
