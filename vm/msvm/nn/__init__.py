"""``msvm.nn``: Cell and the built-in layers."""

from .cell import Cell, CellList, SequentialCell
from .layers import GELU, Dense, Dropout, LayerNorm, ReLU, Sigmoid, Softmax, Tanh

__all__ = ["GELU", "Cell", "CellList", "Dense", "Dropout", "LayerNorm", "ReLU", "SequentialCell", "Sigmoid",
           "Softmax", "Tanh"]
