"""The article's section 4.2 program, unchanged but for its imports.

Run: msvm run examples/dynamic_matmul.py --log-level DEBUG   (or: make demo)
"""

import msvm as ms
import numpy as np
from msvm import nn, ops


class DynamicMatmulCell(nn.Cell):
    def __init__(self):
        super().__init__()
        self.matmul = ops.MatMul()
        self.relu = ops.ReLU()

    def construct(self, x, y, training=True):
        # dynamic shape: x.shape[0] may differ on every call
        out = self.matmul(x, y)
        if training:
            out = self.relu(out)  # a run-time flag: BRANCH_IF_SYMBOLIC
        return out


# test data: first [32, 768] x [768, 1024], then [64, 768] x [768, 1024]
x1 = ms.Tensor(np.random.randn(32, 768).astype(np.float32))
y = ms.Tensor(np.random.randn(768, 1024).astype(np.float32))
x2 = ms.Tensor(np.random.randn(64, 768).astype(np.float32))
net = DynamicMatmulCell()
ms.set_context(mode=ms.GRAPH_MODE, device_target="GPU")  # GRAPH_MODE compiles construct to bytecode
# first call: compiles the bytecode and runs it
out1 = net(x1, y, training=True)
# same shape again: the same bytecode, no recompilation
out2 = net(x1, y, training=True)
# another batch size: still the same shape-generic bytecode
out3 = net(x2, y, training=True)

if __name__ == "__main__":
    ref = np.maximum(x2.asnumpy() @ y.asnumpy(), 0)
    err = np.abs(out3.asnumpy() - ref).max() / np.abs(ref).max()
    print(f"out1 {out1.shape}, out3 {out3.shape}; max relative error vs numpy {err:.2e}")
    print(f"training=False (same bytecode, relu skipped): min {net(x1, y, training=False).asnumpy().min():.3f}")
