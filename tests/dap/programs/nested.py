"""A Cell that calls a sub-Cell, then a Cell whose instruction fails at run time."""

import sys

import msvm as ms
import numpy as np
from msvm import nn, ops


class Scale(nn.Cell):
    def construct(self, x):
        y = x * 2.0
        return ops.relu(y)


class Outer(nn.Cell):
    def __init__(self):
        super().__init__()
        self.scale = Scale()

    def construct(self, x, b):
        h = x + b
        s = self.scale(h)
        return s - 1.0


class Grow(nn.Cell):
    def construct(self, x, n):
        y = ops.relu(x)
        big = ops.ones((n, n, n), ms.float32)
        return y, big


x = ms.Tensor(np.arange(12, dtype=np.float32).reshape(4, 3))
b = ms.Tensor(np.ones((3,), np.float32))
out = Outer()(x, b)
print("outer done", out.shape)
if "--fail" in sys.argv:
    Grow()(x, 10**6)
print("end")
