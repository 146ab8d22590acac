"""The main thread runs a long Cell while a worker thread stops on a Python breakpoint."""

import sys
import threading
import time

import msvm as ms
import numpy as np
from msvm import nn


class Spin(nn.Cell):
    def construct(self, x, acc):
        for _i in range(x.shape[0]):
            acc = acc + 1.0
        return acc


def running_cell(ident):
    """Whether that thread is executing a Cell now (msvm's interpreter is on its stack)."""
    f = sys._current_frames().get(ident)
    while f is not None:
        if f.f_code.co_filename.endswith("interpreter.py") and "msvm" in f.f_code.co_filename:
            return True
        f = f.f_back
    return False


def worker(main_ident):
    while not running_cell(main_ident):
        time.sleep(0.005)
    note = "the main thread runs a Cell"
    return note


def idle_worker():
    note = "the main thread runs Python"
    return note


n = int(next((a for a in sys.argv[1:] if a.isdigit()), "1000"))
spin = Spin()
if "--python" in sys.argv:              # the main thread waits in Python code while the worker stops
    t = threading.Thread(target=idle_worker, name="worker")
    t.start()
    while t.is_alive():
        time.sleep(0.01)
else:
    threading.Thread(target=worker, args=(threading.get_ident(),), name="worker", daemon=True).start()
acc = spin(ms.Tensor(np.zeros((n,), np.float32)), ms.Tensor(np.zeros((1,), np.float32)))
print("acc", float(acc.asnumpy()[0]))
