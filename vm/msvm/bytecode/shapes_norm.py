"""The shape rule of FUSED_ADD_LAYER_NORM (issue 18): LAYER_NORM(a + b, gamma, beta).

The fusion pass (compiler/norm.py) makes it from a BROADCAST_ADD whose only reader is the
LAYER_NORM right after it (BERT's ``layernorm(output + input_tensor)``); its type is what the
two rules give in turn.
"""

from __future__ import annotations

from .shapes import binary, layer_norm


def fused_add_layer_norm(ctx, ins, args):
    a, b, gamma, beta = ins
    return layer_norm(ctx, [binary(ctx, [a, b], (), name="BROADCAST_ADD"), gamma, beta], args)
