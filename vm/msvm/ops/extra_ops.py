"""MindSpore APIs issue 21 added beside functional.py's: printing, unique values, and composites
(padding modes, strided slices, linspace/range, ...). ``ops/registry.py`` gives each its primitive,
function and Tensor-method names.

``print_`` inside construct is one PRINT instruction at the call's place in the program (an effect
row: it runs when the Cell runs, in program order, at every tier); outside it prints at once.
"""

from __future__ import annotations

import numpy as np

from ..bytecode.symbolic import Expr
from ..frontend.graph import GraphValue, current, is_graph, tracing
from ..interp.kernels_more import print_parts
from ..tensor import Tensor, unwrap
from . import functional as F


def _print_items(args, parts: list, vals: list):
    for v in args:
        if isinstance(v, str):
            parts.append(v)
        elif is_graph(v) or isinstance(v, (Tensor, Expr)):
            parts.append(None)
            vals.append(v)
        elif isinstance(v, (tuple, list)) and any(is_graph(x) or isinstance(x, (Tensor, Expr)) for x in v):
            _print_items(v, parts, vals)
        else:
            parts.append(str(v))


def print_(*input_x):
    """MindSpore's ops.print_ / ops.Print: strings, numbers, tuples and tensors, one item a line."""
    parts: list = []
    vals: list = []
    _print_items(input_x, parts, vals)
    if tracing():
        b = current()
        for v in vals:
            b.push(v)
        b.emit("PRINT", len(vals), b.cb.const(tuple(parts)))
        return None
    print_parts(tuple(parts), [np.asarray(unwrap(v)) if isinstance(v, Tensor) else v for v in vals])
    return None


def unique(input):  # noqa: A002
    """(the distinct values of input, flattened, in order of first appearance; each element's index
    among them, int32)."""
    return F.apply("UNIQUE", (input,), (None,))


def unique_with_pad(x, pad_num):
    """UniqueWithPad: unique of a 1-D x, the values padded with pad_num to x's length."""
    if isinstance(pad_num, Tensor):
        pad_num = pad_num.asnumpy().reshape(-1)[0].item()
    if is_graph(pad_num) or isinstance(pad_num, GraphValue):
        raise TypeError("UniqueWithPad: pad_num must be a constant inside construct")
    if isinstance(pad_num, np.generic):
        pad_num = pad_num.item()
    return F.apply("UNIQUE", (x,), (pad_num,))
