"""``msvm.common``: MindSpore's ``mindspore.common`` names (dtype, initializer, Tensor, Parameter)."""

from .. import dtype
from ..tensor import Parameter, Tensor
from . import initializer

__all__ = ["Parameter", "Tensor", "dtype", "initializer"]
