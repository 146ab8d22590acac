"""The shape rules of FUSED_ADD_LAYER_NORM (issue 18): LAYER_NORM(a + b, gamma, beta), and of
FUSED_RMS_NORM: program(x, scale(REDUCE_MEAN(prologue(x), -1, keep)), w).

The fusion pass (compiler/norm.py) makes it from a BROADCAST_ADD whose only reader is the
LAYER_NORM right after it (BERT's ``layernorm(output + input_tensor)``); its type is what the
two rules give in turn.
"""

from __future__ import annotations

from .shapes import binary, layer_norm, reduce, run_program


def fused_add_layer_norm(ctx, ins, args):
    a, b, gamma, beta = ins
    return layer_norm(ctx, [binary(ctx, [a, b], (), name="BROADCAST_ADD"), gamma, beta], args)


def fused_rms_norm(ctx, ins, args):
    prologue, scale, program = args
    x, w = ins
    m = reduce(ctx, [run_program(ctx, prologue, [x], "FUSED_RMS_NORM")], ((-1,), True), name="REDUCE_MEAN",
               out_dtype="float")
    return run_program(ctx, program, [x, run_program(ctx, scale, [m], "FUSED_RMS_NORM"), w], "FUSED_RMS_NORM")
