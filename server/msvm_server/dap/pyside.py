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
``debugpy.breakpoint()`` does; ``forget_python_step()`` (msvm stopped first) cancels a
step pydevd was still waiting to finish, so a later continue does not stop in Python.
"""

from __future__ import annotations

import os
import sys
import threading


def _package_dir(name: str) -> str:
    mod = sys.modules.get(name) or __import__(name)
    return os.path.dirname(os.path.abspath(mod.__file__)) + os.sep


class PythonSide:
    def __init__(self):
        self.attached = False

    def attach(self, port: int):
        import debugpy

        debugpy.configure(subProcess=False)     # the program's own child processes run undebugged, as under msvm
        debugpy.connect(("127.0.0.1", port))
        import pydevd
        from _pydevd_bundle.pydevd_api import PyDevdAPI

        ours = tuple(_package_dir(n) for n in ("msvm", "msvm_server"))
        PyDevdAPI().set_dont_trace_start_end_patterns(pydevd.get_global_debugger(), ours, ())
        self.attached = True

    def uncaught(self, excinfo):
        """The program's exception left it (the debuggee catches it to report the exit status):
        pydevd stops on it as on any uncaught exception, when the client's filters say so."""
        if self.attached:
            import pydevd

            pydevd.get_global_debugger().trigger_exception_handler(excinfo, as_uncaught=True)

    def detach(self):
        """The program ended: pydevd stops tracing (the debuggee's own exit is no user's SystemExit)."""
        if self.attached:
            import pydevd

            self.attached = False
            pydevd.stoptrace()

    # --- on the program's thread
    def hand_to_python(self):
        """Stop on the next line of the innermost user frame (pydevd skips msvm's own frames)."""
        if not self.attached:
            return
        import pydevd
        from _pydevd_bundle.pydevd_comm_constants import CMD_STEP_OVER
        from _pydevd_bundle.pydevd_thread_lifecycle import mark_thread_suspended

        # "suspend at the next line pydevd traces" (reported as a step): it traces none of msvm's
        # frames, so that is the line the Python code runs after the Cell returns. Only this
        # thread is marked; the others stop with it when it stops, as in any debugpy step.
        db = pydevd.get_global_debugger()
        t = threading.current_thread()
        self.forget_python_step()
        db._threads_suspended_single_notification.increment_suspend_time()    # (as set_suspend does)
        mark_thread_suspended(t, CMD_STEP_OVER).update_stepping_info()
        db.set_trace_for_frame_and_parents(t.ident, sys._getframe())
        db.enable_tracing()

    def forget_python_step(self):
        if not self.attached:
            return
        try:
            from _pydevd_bundle.pydevd_additional_thread_info import set_additional_thread_info
            from _pydevd_bundle.pydevd_constants import STATE_RUN
        except ImportError:
            return
        info = set_additional_thread_info(threading.current_thread())
        info.pydev_step_cmd = -1
        info.pydev_original_step_cmd = -1
        info.pydev_step_stop = None
        info.pydev_state = STATE_RUN
        info.update_stepping_info()


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
