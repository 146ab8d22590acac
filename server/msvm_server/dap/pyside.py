"""debugpy inside the debuggee: the Python half of a mixed msvm + Python session.

``PythonSide.attach(port)`` connects this process to the debugpy adapter the msvm adapter
started (``debugpy.connect``) and tells pydevd that msvm's and msvm_server's own files are
the debugger's, never the user's: pydevd neither traces nor shows them, so a Python step
never lands inside the interpreter, and the frame debugpy stops in is always the user's.

The program's thread is stopped by one debugger at a time:
- inside a Cell, msvm's trace hook blocks it (pydevd sees a thread that runs);
- on a Python line, pydevd blocks it (msvm's hook is not running).
Hand-overs: ``hand_to_python()`` (a step that leaves the outermost Cell) asks pydevd to
stop on the next line of the Python frame that called the Cell, the way
``debugpy.breakpoint()`` does; ``step_from(kind, frame)`` (a step with a Python frame below
the Cell selected) is pydevd's own step from that frame; ``forget_python_step()`` (msvm
stopped first) cancels a step pydevd was still waiting to finish, so a later continue does
not stop in Python. What they touch of pydevd is in ``debugpy_glue``.
"""

from __future__ import annotations

import os
import sys

from . import debugpy_glue as glue


def _package_dir(name: str) -> str:
    mod = sys.modules.get(name) or __import__(name)
    return os.path.dirname(os.path.abspath(mod.__file__)) + os.sep


class PythonSide:
    def __init__(self):
        self.attached = False

    def attach(self, port: int, token: str):
        """Connect to the session's debugpy adapter (presenting the session's token)."""
        glue.connect(port, token, tuple(_package_dir(n) for n in ("msvm", "msvm_server")))
        self.attached = True

    def uncaught(self, excinfo):
        """The program's exception left it (the debuggee catches it to report the exit status):
        pydevd stops on it as on any uncaught exception, when the client's filters say so."""
        if self.attached:
            glue.raise_uncaught(excinfo)

    def detach(self):
        """The program ended: pydevd stops tracing (the debuggee's own exit is no user's SystemExit)."""
        if self.attached:
            self.attached = False
            glue.stop_tracing()

    # --- on the program's thread
    def hand_to_python(self):
        """Stop on the next line of the innermost user frame (pydevd skips msvm's own frames)."""
        if self.attached:
            # only this thread is marked; the others stop with it when it stops, as in any debugpy step
            glue.stop_at_next_line(sys._getframe(1))

    def step_from(self, kind: str, frame):
        """The user stepped (``over``/``out``) with a Python frame below the Cell selected: pydevd
        steps that frame (see ``debugpy_glue.step_frame``)."""
        if self.attached:
            glue.step_frame(kind, frame)

    def forget_python_step(self):
        if self.attached:
            glue.cancel_step()


def in_cell(thread_ident: int) -> bool:
    """Whether that thread is executing a Cell now (an interpreter frame is on its stack)."""
    from msvm.interp import interpreter

    f = sys._current_frames().get(thread_ident)
    target = interpreter.__file__
    while f is not None:
        if f.f_code.co_filename == target:
            return True
        f = f.f_back
    return False
