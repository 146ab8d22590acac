"""A Cell called from a Python function called from the module: Python frames below a Cell."""

import json

import msvm as ms
import numpy as np
from msvm import nn, ops


class Double(nn.Cell):
    def construct(self, x):
        y = x * 2.0
        return ops.relu(y)


def apply(net, x):
    scale = 3
    y = net(x)
    doubled = scale                  # the line after the Cell call in apply
    return y, doubled


net = Double()
x = ms.Tensor(np.arange(4, dtype=np.float32))
out = apply(net, x)
after = "back in the module"         # the line after apply() returns
text = json.dumps({"after": after})  # a library call: justMyCode decides whether stepIn enters it
print(after, float(out[0].asnumpy().sum()))
