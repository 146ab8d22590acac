"""Every use of debugpy's internals, in one place, behind a version check.

The mixed session (``pylink``, ``pyside``) needs a few things debugpy's public API does not
offer: telling pydevd that msvm's own files are the debugger's, asking it to stop on the
next Python line (or at the next line of one chosen frame, or when that frame returns),
cancelling such a step, and making its adapter refuse a debug server that does not present
the session's token. They are written against debugpy ``TESTED`` (its pydevd and its
adapter); another version may keep the names and change what they mean, so:

- ``problem()`` names the version when it is not ``TESTED``, before a session starts: the
  adapter then debugs the Cells alone and says why in the Debug Console.
  ``MSVM_DEBUGPY_UNTESTED=1`` lets another version try; the internals are still probed where
  they are used (``missing_internals()`` in the debuggee, ``ADAPTER_BOOT`` in the adapter), and
  a missing one stops Python debugging with its name, never a half-working session.
- the functions below import what they use when called.

``ADAPTER_BOOT`` runs ``debugpy.adapter`` with its server side authenticated: a debug server
(the debuggee's pydevd) must answer ``pydevdAuthorize`` with the token in
``MSVM_DEBUGPY_SERVER_TOKEN`` (the debuggee passes it to ``debugpy.connect`` as
``access_token``). debugpy's own ``listen`` attach checks nothing, so without it anyone who
can reach the loopback port could pose as the debuggee (take the session's place, send it
events, read its requests). debugpy accepts servers one at a time, so a peer that does not
answer is cut off after ``AUTH_TIMEOUT_S``.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import threading

TESTED = "1.8.22"
UNTESTED_ENV = "MSVM_DEBUGPY_UNTESTED"
TOKEN_ENV = "MSVM_DEBUGPY_SERVER_TOKEN"
AUTH_TIMEOUT_S = 10          # a debug server that has not answered pydevdAuthorize by then is cut off

# (module, attribute) pairs this module relies on; "pydevd" is debugpy's vendored pydevd
_INTERNALS = (
    ("pydevd", "get_global_debugger"), ("pydevd", "stoptrace"), ("pydevd", "PyDB"),
    ("_pydevd_bundle.pydevd_api", "PyDevdAPI"),
    ("_pydevd_bundle.pydevd_additional_thread_info", "set_additional_thread_info"),
    ("_pydevd_bundle.pydevd_constants", "STATE_RUN"),
    ("_pydevd_bundle.pydevd_constants", "PYTHON_SUSPEND"),
    ("_pydevd_bundle.pydevd_constants", "PYDEVD_USE_SYS_MONITORING"),
    ("_pydevd_bundle.pydevd_comm_constants", "CMD_STEP_OVER"),
    ("_pydevd_bundle.pydevd_comm_constants", "CMD_STEP_RETURN"),
    ("_pydevd_bundle.pydevd_thread_lifecycle", "mark_thread_suspended"),
)
_METHODS = (("PyDB", ("set_trace_for_frame_and_parents", "enable_tracing", "trigger_exception_handler")),
            ("PyDevdAPI", ("set_dont_trace_start_end_patterns",)))


def version() -> str | None:
    """debugpy's version when this Python can import it, else None."""
    if importlib.util.find_spec("debugpy") is None:
        return None
    try:
        import debugpy
    except Exception:  # noqa: BLE001 - a broken install is an absent one
        return None
    return str(getattr(debugpy, "__version__", "unknown"))


def problem(found: str | None = None) -> str | None:
    """Why mixed-mode debugging cannot use the installed debugpy (a sentence naming its
    version), or None when it can. ``found``: the version to judge (default: the installed one)."""
    found = version() if found is None else found
    if found is None:
        return "debugpy is not installed"
    if found != TESTED and os.environ.get(UNTESTED_ENV) != "1":
        return (f"debugpy {found} is installed, and msvm's mixed-mode debugging is written against "
                f"debugpy {TESTED}'s internals (pip install debugpy=={TESTED}, or set {UNTESTED_ENV}=1 "
                "to try this version)")
    return None


def missing_internals() -> list:
    """The internals this module uses that the installed debugpy lacks ("module.name"); imports
    debugpy's server side (pydevd), so it runs in the debuggee."""
    import debugpy.server.api  # noqa: F401 - what debugpy.connect imports: puts pydevd on sys.path

    missing, found = [], {}
    for mod, attr in _INTERNALS:
        try:
            found[attr] = getattr(importlib.import_module(mod), attr)
        except (ImportError, AttributeError):
            missing.append(f"{mod}.{attr}")
    for owner, names in _METHODS:
        missing += [f"{owner}.{n}" for n in names if owner in found and not hasattr(found[owner], n)]
    return missing


# --- the adapter side: debugpy.adapter with an authenticated server port
ADAPTER_BOOT = (
    "import hmac, os, runpy, sys, threading\n"
    "from debugpy.adapter import clients, servers, sessions  # (in the order its __main__ imports them)\n"
    "if not callable(getattr(servers.Connection, 'authenticate', None)):\n"
    "    sys.exit('msvm: this debugpy has no debugpy.adapter.servers.Connection.authenticate')\n"
    f"expected = os.environ.pop({TOKEN_ENV!r})\n"
    "def authenticate(self):\n"
    # debugpy accepts its servers one at a time: a peer that never answers is cut off
    f"    timer = threading.Timer({AUTH_TIMEOUT_S}, self.channel.close)\n"
    "    timer.daemon = True\n"
    "    timer.start()\n"
    "    try:\n"
    "        auth = self.channel.request('pydevdAuthorize', {'debugServerAccessToken': servers.access_token})\n"
    "    finally:\n"
    "        timer.cancel()\n"
    "    token = None if isinstance(auth, Exception) else auth.get('clientAccessToken')\n"
    "    if not isinstance(token, str) or not hmac.compare_digest(token, expected):\n"
    "        self.channel.close()\n"
    "        raise RuntimeError('a debug server connected without the msvm session token: refused')\n"
    "servers.Connection.authenticate = authenticate\n"
    "sys.argv = ['debugpy.adapter']\n"
    "runpy.run_module('debugpy.adapter', run_name='__main__', alter_sys=True)\n"
)


def adapter_command() -> list:
    """``python -I -c ADAPTER_BOOT``: debugpy's adapter over stdio; the token comes in its environment."""
    return [sys.executable, "-I", "-c", ADAPTER_BOOT]


# --- the debuggee side (pydevd, in the program's process)
def connect(port: int, token: str, own_dirs: tuple):
    """Connect this process to the session's debugpy adapter, presenting the token; pydevd then
    neither traces nor shows files under ``own_dirs`` (msvm's and msvm_server's)."""
    import debugpy

    missing = missing_internals()
    if missing:
        raise RuntimeError(f"debugpy {version()} lacks {', '.join(missing)}, which msvm's mixed-mode debugging uses")
    debugpy.configure(subProcess=False)     # the program's own child processes run undebugged, as under msvm
    debugpy.connect(("127.0.0.1", port), access_token=token)
    import pydevd
    from _pydevd_bundle.pydevd_api import PyDevdAPI

    PyDevdAPI().set_dont_trace_start_end_patterns(pydevd.get_global_debugger(), tuple(own_dirs), ())


def raise_uncaught(excinfo):
    import pydevd

    pydevd.get_global_debugger().trigger_exception_handler(excinfo, as_uncaught=True)


def stop_tracing():
    import pydevd

    pydevd.stoptrace()


def stop_at_next_line(frame):
    """On the program's thread: pydevd stops at the next line it traces (it traces none of
    msvm's frames, so that is a user's line), reported as a step."""
    import pydevd
    from _pydevd_bundle.pydevd_comm_constants import CMD_STEP_OVER
    from _pydevd_bundle.pydevd_thread_lifecycle import mark_thread_suspended

    db = pydevd.get_global_debugger()
    t = threading.current_thread()
    cancel_step(t)
    db._threads_suspended_single_notification.increment_suspend_time()    # (as PyDB.set_suspend does)
    mark_thread_suspended(t, CMD_STEP_OVER).update_stepping_info()
    db.set_trace_for_frame_and_parents(t.ident, frame)
    db.enable_tracing()


def step_frame(kind: str, frame):
    """On the program's thread: pydevd's own step from ``frame`` (a caller of the running code):
    ``over`` stops at the next line of that frame (or where it returns to), ``out`` where it
    returns to, as a debugpy ``next``/``stepOut`` issued in that frame would; its breakpoints
    still stop first. It is pydevd's ``settrace(stop_at_frame=...)``, with that step's kind."""
    import pydevd
    from _pydevd_bundle.pydevd_additional_thread_info import set_additional_thread_info
    from _pydevd_bundle.pydevd_comm_constants import CMD_STEP_OVER, CMD_STEP_RETURN
    from _pydevd_bundle.pydevd_constants import PYDEVD_USE_SYS_MONITORING, PYTHON_SUSPEND, STATE_RUN

    cmd = {"over": CMD_STEP_OVER, "out": CMD_STEP_RETURN}[kind]
    db = pydevd.get_global_debugger()
    t = threading.current_thread()
    info = set_additional_thread_info(t)
    info.pydev_original_step_cmd = cmd
    info.pydev_step_cmd = cmd
    info.pydev_step_stop = frame
    info.suspend_type = PYTHON_SUSPEND
    info.pydev_state = STATE_RUN
    info.update_stepping_info()
    db.set_trace_for_frame_and_parents(t.ident, frame)
    if PYDEVD_USE_SYS_MONITORING:
        from _pydevd_sys_monitoring import pydevd_sys_monitoring

        pydevd_sys_monitoring.update_monitor_events(suspend_requested=False)
    db.enable_tracing()


def cancel_step(thread=None):
    """pydevd forgets a step (or a suspend it asked for) that it was still waiting to finish on
    ``thread`` (default: this one), so a later continue does not stop in Python."""
    from _pydevd_bundle.pydevd_additional_thread_info import set_additional_thread_info
    from _pydevd_bundle.pydevd_constants import STATE_RUN

    info = set_additional_thread_info(thread or threading.current_thread())
    info.pydev_step_cmd = -1
    info.pydev_original_step_cmd = -1
    info.pydev_step_stop = None
    info.pydev_state = STATE_RUN
    info.update_stepping_info()
