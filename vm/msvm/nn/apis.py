"""Layers issue 21 added for MindSpore's tests and model zoos (nn.Pad, ...); they call msvm.ops,
so construct compiles them like any other Cell."""

from __future__ import annotations

from .. import ops
from ..ops import extra_ops as X
from .cell import Cell


class Pad(Cell):
    """nn.Pad(paddings, mode): a (before, after) pair per dim of the input (at most 4), in mode
    CONSTANT (zeros), REFLECT or SYMMETRIC."""

    def __init__(self, paddings, mode="CONSTANT"):
        super().__init__()
        if mode not in ("CONSTANT", "REFLECT", "SYMMETRIC"):
            raise ValueError(f"nn.Pad: mode must be 'CONSTANT', 'REFLECT' or 'SYMMETRIC', got {mode!r}")
        pairs = X._pairs_of(paddings, "nn.Pad")
        if len(pairs) > 4:
            raise ValueError(f"nn.Pad: at most 4 padding pairs are supported, got {len(pairs)}")
        self.negative = any(v < 0 for p in pairs for v in p)      # (MindSpore raises when it is called)
        self.paddings = tuple(pairs)
        self.mode = mode
        self.np_mode = mode.lower()

    def __call__(self, *args, **kwargs):
        if self.negative:
            raise ValueError(f"nn.Pad: paddings must be >= 0, got {self.paddings}")
        return super().__call__(*args, **kwargs)

    def construct(self, x):
        return X.pad_pairs(x, self.paddings, self.np_mode, exact=True)


class Range(Cell):
    """nn.Range(start, limit=None, delta=1): the 1-D tensor [start, limit) by delta."""

    def __init__(self, start, limit=None, delta=1):
        super().__init__()
        if limit is None:
            start, limit = 0, start
        self.start, self.limit, self.delta = start, limit, delta

    def construct(self):
        return X.range_(self.start, self.limit, self.delta)


__all__ = ["Pad", "Range", "ops"]
