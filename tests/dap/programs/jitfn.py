"""A @ms.jit function called twice: breakpoints work in jit functions too."""

import msvm as ms
import numpy as np
from msvm import ops


@ms.jit
def scaled_softmax(x, scale: float):
    y = x * scale
    return ops.softmax(y, -1)


a = ms.Tensor(np.ones((2, 5), np.float32))
print(scaled_softmax(a, 0.5).shape)
print(scaled_softmax(a, 2.0).shape)
