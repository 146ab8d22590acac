"""Python code around a Cell: the mixed session (debugpy for the Python, msvm for the Cell)."""

import sys
import threading

import msvm as ms
import numpy as np
from msvm import nn, ops


class Double(nn.Cell):
    def construct(self, x):
        y = x * 2.0
        return ops.relu(y)


def prepare(n):
    base = np.arange(n, dtype=np.float32)
    return ms.Tensor(base)


def worker(results):
    note = "from the worker"
    results.append(note)


net = Double()
x = prepare(4)
if "--thread" in sys.argv:
    results = []
    threading.Thread(target=worker, args=(results,), name="worker").start()
y = net(x)
total = float(y.asnumpy().sum())
print("total", total)
if "--crash" in sys.argv:
    raise ValueError(f"host code failed after total={total}")
print("end")
