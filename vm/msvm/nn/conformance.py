"""nn layers MindSpore's own op tests use (conformance, issue 21): each is a Cell whose
construct calls the ms.ops function of the same op, so nn's face runs the same code as the
function, primitive and Tensor method (ops/registry.py)."""

from __future__ import annotations

from .. import ops
from .cell import Cell


class KLDivLoss(Cell):
    def __init__(self, reduction="mean"):
        super().__init__()
        self.reduction = reduction

    def construct(self, logits, labels):
        return ops.kl_div(logits, labels, self.reduction)


class SmoothL1Loss(Cell):
    def __init__(self, beta=1.0, reduction="none"):
        super().__init__()
        self.beta, self.reduction = beta, reduction

    def construct(self, logits, labels):
        return ops.smooth_l1_loss(logits, labels, self.beta, self.reduction)


class FastGelu(Cell):
    def construct(self, x):
        return ops.fast_gelu(x)


class Softmax2d(Cell):
    def construct(self, x):
        return ops.softmax(x, -3)


class LogSoftmax(Cell):
    def __init__(self, axis=-1):
        super().__init__()
        self.axis = axis

    def construct(self, x):
        return ops.log_softmax(x, self.axis)


class Tanhshrink(Cell):
    def construct(self, x):
        return ops.tanhshrink(x)


class SeLU(Cell):
    def construct(self, x):
        return ops.selu(x)


class Softsign(Cell):
    def construct(self, x):
        return ops.softsign(x)


class Mish(Cell):
    def construct(self, x):
        return ops.mish(x)


class CELU(Cell):
    def __init__(self, alpha=1.0):
        super().__init__()
        self.alpha = alpha

    def construct(self, x):
        return ops.celu(x, self.alpha)


class Hardtanh(Cell):
    def __init__(self, min_val=-1.0, max_val=1.0):
        super().__init__()
        self.min_val, self.max_val = min_val, max_val

    def construct(self, x):
        return ops.hardtanh(x, self.min_val, self.max_val)


class HShrink(Cell):
    def __init__(self, lambd=0.5):
        super().__init__()
        self.lambd = lambd

    def construct(self, x):
        return ops.hardshrink(x, self.lambd)


class SoftShrink(HShrink):
    def construct(self, x):
        return ops.softshrink(x, self.lambd)


class TimeDistributed(Cell):
    """Applies ``layer`` to each step along ``time_axis`` and stacks the results back along it
    (``reshape_with_axis`` is accepted; the result is the same either way)."""

    def __init__(self, layer, time_axis, reshape_with_axis=None):
        super().__init__()
        self.layer = layer
        self.time_axis = time_axis
        self.reshape_with_axis = reshape_with_axis

    def construct(self, x):
        outs = ()
        for t in ops.unstack(x, self.time_axis):
            outs = outs + (self.layer(t),)
        return ops.stack(outs, self.time_axis)
