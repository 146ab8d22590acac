"""Python code around a Cell: the mixed session (debugpy for the Python, msvm for the Cell)."""

import sys
import threading
import time

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


def held_in_cell(ident):
    """Whether that thread is stopped by msvm inside a Cell (the debugger's _stop is on its stack)."""
    f = sys._current_frames().get(ident)
    while f is not None:
        if f.f_code.co_name == "_stop" and f.f_code.co_filename.endswith("runtime.py"):
            return True
        f = f.f_back
    return False


def worker(results, main_ident):
    while not held_in_cell(main_ident):     # only once the Cell holds the main thread
        time.sleep(0.01)
    note = "from the worker"
    results.append(note)


net = Double()
x = prepare(4)
if "--thread" in sys.argv:
    results = []
    threading.Thread(target=worker, args=(results, threading.get_ident()), name="worker").start()
if "--twice" in sys.argv:
    first = net(x)
y = net(x)
total = float(y.asnumpy().sum())
print("total", total)
if "--crash" in sys.argv:
    raise ValueError(f"host code failed after total={total}")
print("end")
