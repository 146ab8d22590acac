"""``msvm.nn``: Cell and the built-in layers."""

from .apis import Norm, OneHot, Pad, Range, SoftmaxCrossEntropyWithLogits
from .cell import Cell, CellList, SequentialCell
from .conformance import (
    CELU,
    FastGelu,
    Hardtanh,
    HShrink,
    KLDivLoss,
    LogSoftmax,
    Mish,
    SeLU,
    SmoothL1Loss,
    Softmax2d,
    SoftShrink,
    Softsign,
    Tanhshrink,
    TimeDistributed,
)
from .layers import (
    ELU,
    GELU,
    AdaptiveAvgPool2d,
    AvgPool2d,
    BatchNorm1d,
    BatchNorm2d,
    Conv1d,
    Conv2d,
    Dense,
    Dropout,
    Embedding,
    Flatten,
    HSigmoid,
    HSwish,
    Identity,
    LayerNorm,
    LeakyReLU,
    MaxPool2d,
    ReLU,
    ReLU6,
    Sigmoid,
    SiLU,
    Softmax,
    Softplus,
    Tanh,
)

__all__ = ["ELU", "GELU", "AdaptiveAvgPool2d", "AvgPool2d", "BatchNorm1d", "BatchNorm2d", "Cell", "CellList",
           "Conv1d", "Conv2d", "Dense", "Dropout", "Embedding", "Flatten", "HSigmoid", "HSwish", "Identity",
           "LayerNorm", "LeakyReLU", "MaxPool2d", "ReLU", "ReLU6", "SequentialCell", "SiLU", "Sigmoid", "Softmax",
           "Softplus", "Tanh", "CELU", "FastGelu", "Hardtanh", "HShrink", "KLDivLoss", "LogSoftmax", "Mish", "SeLU",
           "SmoothL1Loss", "Softmax2d", "Softsign", "SoftShrink", "Tanhshrink",
           "TimeDistributed", "Norm", "OneHot", "Pad", "Range", "SoftmaxCrossEntropyWithLogits"]
