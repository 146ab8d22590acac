"""The shape rule of FUSED_ATTENTION (issue 18): softmax(program(q @ k^T, extras)) @ v.

The fusion pass (compiler/attention.py) makes it from a batched FUSED_MATMUL by the keys'
transpose (scale and mask in its program), a SOFTMAX over the last axis, the BATCH_MATMUL by the
values and, when one follows, a TRANSPOSE of the context; its type is what those rules give.
"""

from __future__ import annotations

from .shapes import ShapeError, batch_matmul, fused_matmul, softmax, transpose


def fused_attention(ctx, ins, args):
    program, layout, n = args
    if n < 3:
        raise ShapeError("FUSED_ATTENTION needs at least q, k and v")
    scores = fused_matmul(ctx, list(ins[:-1]), (False, True, True, program, n - 1))
    probs = softmax(ctx, [scores], (-1,))
    out = batch_matmul(ctx, [probs, ins[-1]], (False, False))
    return transpose(ctx, [out], (tuple(layout),)) if layout else out
