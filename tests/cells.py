"""Cells the test suites and the benchmarks share (tests/conftest.py and the bench scripts put
tests/ on sys.path)."""

from msvm import nn, ops


class DynamicMatmulCell(nn.Cell):
    """The article's section 4.2 Cell."""

    def __init__(self):
        super().__init__()
        self.matmul = ops.MatMul()
        self.relu = ops.ReLU()

    def construct(self, x, y, training=True):
        out = self.matmul(x, y)
        if training:
            out = self.relu(out)
        return out
