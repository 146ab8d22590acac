"""The attention Cell and numpy reference shared by tests/vm/test_attention_fuse.py and
tests/jit/test_attention_tiers.py (FUSED_ATTENTION, issue 18)."""

import math

import msvm as ms  # noqa: F401
import numpy as np
from msvm import nn, ops


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
