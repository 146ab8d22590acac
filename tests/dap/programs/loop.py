"""Calls a Cell until told to stop: something to pause."""

import os
import time

import msvm as ms
import numpy as np
from msvm import nn, ops


class Step(nn.Cell):
    def construct(self, x):
        return ops.tanh(x * 0.5 + 1.0)


net = Step()
x = ms.Tensor(np.ones((8,), np.float32))
deadline = time.time() + float(os.environ.get("LOOP_SECONDS", "30"))
while time.time() < deadline:
    x = net(x)
print("loop done")
