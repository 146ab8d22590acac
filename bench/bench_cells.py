"""Cells shared by the benchmarks."""

from msvm import nn, ops


class DynamicMatmulCell(nn.Cell):
    """The article's Cell (section 4.2)."""

    def __init__(self):
        super().__init__()
        self.matmul = ops.MatMul()
        self.relu = ops.ReLU()

    def construct(self, x, y, training=True):
        out = self.matmul(x, y)
        if training:
            out = self.relu(out)
        return out
