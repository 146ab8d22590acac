"""The main thread runs a Cell while a worker thread stops on a Python breakpoint.

``python spin.py N`` runs N iterations (default 1000) and prints the sum; ``--until-ended`` runs
10**12 (days in the interpreter): the Cell is still running whenever the test pauses it, however
slow the machine, and ends only when the debugger ends the program, so no step of the test
depends on how long a Cell takes."""

import sys
import threading
import time

import msvm as ms
import numpy as np
from msvm import nn


class Spin(nn.Cell):
    def construct(self, x, y, acc):
        for _i in range(x.shape[0]):
            for _j in range(y.shape[0]):
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
m = 1
if "--until-ended" in sys.argv:
    n = m = 10**6
spin = Spin()
if "--python" in sys.argv:              # the main thread waits in Python code while the worker stops
    t = threading.Thread(target=idle_worker, name="worker")
    t.start()
    while t.is_alive():
        time.sleep(0.01)
else:
    threading.Thread(target=worker, args=(threading.get_ident(),), name="worker", daemon=True).start()
x, y = ms.Tensor(np.zeros((n,), np.float32)), ms.Tensor(np.zeros((m,), np.float32))
acc = spin(x, y, ms.Tensor(np.zeros((1,), np.float32)))
print("acc", float(acc.asnumpy()[0]))
