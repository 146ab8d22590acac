"""The article's program with its calls under the main guard (issue 17): a breakpoint in
construct must be verified by static analysis before anything runs, and then hit."""

import msvm as ms
import numpy as np
from msvm import nn, ops


class DynamicMatmulCell(nn.Cell):
    def __init__(self):
        super().__init__()
        self.matmul = ops.MatMul()
        self.relu = ops.ReLU()

    def construct(self, x, y, training=True):
        out = self.matmul(x, y)
        if training:
            out = self.relu(out)
        return out


if __name__ == "__main__":
    rng = np.random.default_rng(0)
    y = ms.Tensor(rng.standard_normal((768, 1024)).astype(np.float32))
    net = DynamicMatmulCell()
    for n in (32, 64):
        out = net(ms.Tensor(rng.standard_normal((n, 768)).astype(np.float32)), y, training=True)
    print("article done", out.shape)
