"""``python -m msvm_server dap``: the debug adapter (DAP over stdio, type ``msvm``).

The adapter answers ``initialize``, starts the program on ``launch`` in its own
process (``debuggee``) connected through a private socket, relays every other request
to it and its responses and events back, turns the program's stdout/stderr into
``output`` events, and reports ``exited`` + ``terminated`` when it ends.
``disconnect``/``terminate`` end the program; the adapter keeps serving until its
input closes.

Launch arguments: ``program`` (required), ``args``, ``cwd``, ``env``, ``stopOnEntry``,
``jitLevel`` (``auto``/``L1``/``L2``/``L3``, default ``auto``), ``enableFusion``,
``pythonDebugging`` (default: on when debugpy is importable), ``justMyCode`` (default true).

With ``pythonDebugging`` the adapter is also a DAP client of debugpy's own adapter
(``pylink``) and merges the two into one session (``mixed.Mixer``): debugpy owns the
Python side (Python breakpoints, steps, frames, variables), msvm the Cells.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading

from . import debugpy_glue
from .mixed import Mixer
from .wire import BadMessage, Channel, InFlight, response

CAPABILITIES = {
    "supportsConfigurationDoneRequest": True,
    "supportsDisassembleRequest": True,
    "supportsSteppingGranularity": True,
    "supportsInstructionBreakpoints": True,
    "supportsEvaluateForHovers": True,
    "supportsExceptionInfoRequest": True,
    "supportsTerminateRequest": True,
    "supportsValueFormattingOptions": False,
    "exceptionBreakpointFilters": [
        {"filter": "msvm-cell-errors", "label": "Errors inside Cells",
         "description": "Stop where an instruction of a Cell fails", "default": True},
        # debugpy's own filters, used when it debugs the Python side (launch "pythonDebugging")
        {"filter": "raised", "label": "Python: Raised Exceptions", "default": False},
        {"filter": "uncaught", "label": "Python: Uncaught Exceptions", "default": True},
        {"filter": "userUnhandled", "label": "Python: User Uncaught Exceptions", "default": False},
    ],
}
CONNECT_TIMEOUT_S = 60
_AFTER_EXIT = {"threads": {"threads": []}, "stackTrace": {"stackFrames": [], "totalFrames": 0},
               "scopes": {"scopes": []}, "variables": {"variables": []}}


class Adapter:
    def __init__(self, reader, writer):
        self.client = Channel(reader, writer)
        self.child: Channel | None = None
        self.in_flight = InFlight()          # requests relayed to the program, not answered yet
        self.proc: subprocess.Popen | None = None
        self.group_killed = False
        self.sock_dir = None
        self.threads: list = []
        self.ended = threading.Event()
        self.terminated_sent = False
        self.lock = threading.Lock()
        self.mixer: Mixer | None = None      # set when debugpy debugs the Python side

    # --- to the client
    def respond(self, req, body=None, error=None, show=True):
        self.client.write(response(req, body, error, show))

    def event(self, name, body=None):
        self.client.write({"type": "event", "event": name, "body": body or {}})

    # --- main loop
    def serve(self) -> int:
        while True:
            try:
                req = self.client.read()
            except BadMessage as e:
                self.bad_message(e)
                continue
            if req is None:
                break
            if req.get("type") != "request":
                continue
            cmd = req.get("command")
            try:
                if cmd == "initialize":
                    self.respond(req, CAPABILITIES)
                elif cmd == "launch":
                    self.launch(req)
                elif cmd == "msvmSelectFrame" and self.mixer is None:
                    self.respond(req)             # (only a mixed session steps by the selected frame)
                elif cmd in ("disconnect", "terminate"):
                    self.stop_program(kill=cmd == "disconnect" or bool((req.get("arguments") or {}).get("restart")))
                    self.respond(req)
                elif self.child is not None and not self.ended.is_set():
                    src = (req.get("arguments") or {}).get("source") or {}
                    if src.get("path") and not os.path.isabs(src["path"]):   # the debuggee runs in another cwd
                        src["path"] = os.path.abspath(src["path"])
                    if self.mixer is None or not self.mixer.route(req):
                        self.to_child(req)
                elif cmd in _AFTER_EXIT:      # the client may still ask after the program ended
                    self.respond(req, _AFTER_EXIT[cmd])
                else:
                    self.respond(req, error=f"{cmd}: no program is running", show=False)
            except Exception as e:  # noqa: BLE001 - the adapter survives any one request
                self.respond(req, error=f"{type(e).__name__}: {e}")
        self.stop_program(kill=True)
        return 0

    def bad_message(self, e: BadMessage):
        """A frame the client sent that cannot be a request: said on stderr and in the Debug Console."""
        print(f"msvm debug adapter: {e}", file=sys.stderr, flush=True)
        self.event("output", {"category": "important", "output": f"msvm debug adapter: {e}\n"})

    def launch(self, req):
        a = req.get("arguments") or {}
        program = a.get("program")
        if not program:
            return self.respond(req, error="launch needs a 'program' (the Python file to run)")
        path = program if os.path.isabs(program) else os.path.abspath(os.path.join(a.get("cwd") or ".", program))
        cwd = a.get("cwd") or os.path.dirname(path)
        if not os.path.isfile(path):
            return self.respond(req, error=f"program not found: {path}")
        if self.proc is not None:
            return self.respond(req, error="a program is already running in this session")
        debugpy_port = self._start_python_debugging(a)
        token = secrets.token_hex(16)
        self.sock_dir = tempfile.mkdtemp(prefix="msvm-dap-")          # 0700
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock_path = os.path.join(self.sock_dir, "d.sock")
        listener.bind(sock_path)
        listener.listen(1)
        listener.settimeout(0.25)
        env = dict(os.environ)
        env.update({str(k): str(v) for k, v in (a.get("env") or {}).items()})
        env["PYTHONUNBUFFERED"] = "1"
        env["MSVM_DAP_TOKEN"] = token
        if a.get("jitLevel"):
            env["MSVM_JIT_LEVEL"] = str(a["jitLevel"])
        if a.get("enableFusion") is False:
            env["MSVM_ENABLE_FUSION"] = "0"
        if debugpy_port:
            env["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"      # (its frozen-modules warning is about stdlib files)
        # its own process group and session: stop_program ends whatever the program started too
        self.proc = subprocess.Popen(debuggee_command(f"unix:{sock_path}", path, [str(x) for x in a.get("args") or []]),
                                     cwd=cwd, env=env, start_new_session=True,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for stream, category in ((self.proc.stdout, "stdout"), (self.proc.stderr, "stderr")):
            self._spawn(self._pump_output, stream, category)
        conn = None
        waited = 0.0
        while conn is None and self.proc.poll() is None and waited < CONNECT_TIMEOUT_S:
            try:
                conn, _ = listener.accept()
            except socket.timeout:
                waited += 0.25
        listener.close()
        if conn is None:
            self.stop_program(kill=True)
            return self.respond(req, error=f"the program did not start (exit status {self.proc.returncode})")
        conn.settimeout(None)
        self.child = Channel(conn.makefile("rb"), conn.makefile("wb"))
        self.child.write({"type": "config", "token": token, "stopOnEntry": bool(a.get("stopOnEntry")),
                          "noDebug": bool(a.get("noDebug")), "debugpyPort": debugpy_port,
                          "debugpyToken": self.mixer.py.token if debugpy_port else None})
        self._spawn(self._pump_child)
        self._spawn(self._wait_exit)
        if self.mixer is not None and not self.mixer.connected():
            self.say("msvm: debugpy did not connect to the program; its Python code is not debugged this time\n")
            self.mixer.close()
            self.mixer = None
        self.respond(req)
        self.event("process", {"name": os.path.basename(path), "systemProcessId": self.proc.pid,
                               "isLocalProcess": True, "startMethod": "launch"})
        self.event("initialized")

    def say(self, text: str, category: str = "console"):
        self.event("output", {"category": category, "output": text})

    def _start_python_debugging(self, a: dict):
        """debugpy's adapter for the Python side, or None (said in the Debug Console)."""
        if a.get("noDebug"):
            return None
        version = debugpy_glue.version()
        wanted = a.get("pythonDebugging")
        if wanted is False:
            self.say("msvm: Python debugging is off (\"pythonDebugging\": false): Cells are debugged, "
                     "Python frames are shown but not stepped\n")
            return None
        if version is None:
            self.say(f"msvm: debugpy is not installed in {sys.executable} (pip install debugpy, or msvm[ide]): "
                     "Cells are debugged, Python frames are shown but not stepped\n",
                     "important" if wanted else "console")
            return None
        why = debugpy_glue.problem(version)
        if why is not None:
            self.say(f"msvm: Python debugging is off: {why}. Cells are debugged, Python frames are shown "
                     "but not stepped\n", "important")
            return None
        try:
            self.mixer = Mixer(self, justMyCode=a.get("justMyCode", True))
            port = self.mixer.start()
        except Exception as e:  # noqa: BLE001 - the Cells are debugged without it
            self.say(f"msvm: debugpy {version} could not start ({type(e).__name__}: {e}); "
                     "Python code is not debugged\n", "important")
            if self.mixer is not None:
                self.mixer.close()
            self.mixer = None
            return None
        self.say(f"msvm: Python debugging through debugpy {version} "
                 f"(justMyCode: {str(a.get('justMyCode', True)).lower()}); Cells through msvm\n")
        return port

    def _spawn(self, fn, *args):
        t = threading.Thread(target=fn, args=args, daemon=True)
        t.start()
        self.threads.append(t)

    def _pump_output(self, stream, category):
        for line in iter(stream.readline, b""):
            self.event("output", {"category": category, "output": line.decode("utf-8", errors="replace")})

    def to_child(self, req: dict):
        """Relay a request to the program. One it cannot answer any more (it died, or dies
        before it answers) is answered here as if by the program: see ``_unanswered``."""
        if not self.in_flight.send(self.child, req, req.get("command")):
            self._from_child(_unanswered(req.get("seq"), req.get("command")))

    def _from_child(self, msg: dict):
        if msg.get("type") == "response":
            self.in_flight.take(msg.get("request_seq"))
        if self.mixer is None or not self.mixer.from_msvm(msg):
            self.client.write(msg)

    def _pump_child(self):
        while True:
            try:
                msg = self.child.read()
            except BadMessage as e:
                print(f"msvm debug adapter: from the program: {e}", file=sys.stderr, flush=True)
                continue
            except OSError:                   # the program died mid-message (connection reset)
                msg = None
            if msg is None:
                break
            self._from_child(msg)
        for seq, command in self.in_flight.close():
            try:
                self._from_child(_unanswered(seq, command))
            except Exception as e:  # noqa: BLE001 - one failing answer must not leave the others unanswered
                print(f"msvm debug adapter: answering {command!r}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)

    def _wait_exit(self):
        code = self.proc.wait()
        for t in self.threads:
            if t is not threading.current_thread():
                t.join(5)
        self.ended.set()
        with self.lock:
            if self.terminated_sent:
                return
            self.terminated_sent = True
        self.event("exited", {"exitCode": code})
        self.event("terminated")
        if self.sock_dir:
            shutil.rmtree(self.sock_dir, ignore_errors=True)

    def stop_program(self, kill: bool):
        """End the program and everything it started (its process group), whether or not
        the program itself has already exited."""
        if self.mixer is not None:
            self.mixer.close()
        p = self.proc
        if p is not None:
            if p.poll() is None:
                _signal_group(p, signal.SIGTERM)
                try:
                    p.wait(2 if not kill else 1)
                except subprocess.TimeoutExpired:
                    pass
            if not self.group_killed:        # once: after that the group id may name someone else's
                _signal_group(p, signal.SIGKILL)
                self.group_killed = True
            p.wait()
        if self.proc is None:
            with self.lock:
                if not self.terminated_sent:
                    self.terminated_sent = True
                    self.event("terminated")
        if self.sock_dir:
            shutil.rmtree(self.sock_dir, ignore_errors=True)


def _unanswered(seq, command) -> dict:
    """The answer to a request the program will never answer: what a client may still ask
    after the end (threads, stack, ...) is answered empty, anything else fails."""
    if command in _AFTER_EXIT:
        return {"type": "response", "request_seq": seq, "command": command, "success": True,
                "body": _AFTER_EXIT[command]}
    return response({"seq": seq, "command": command},
                    error=f"{command}: the program ended before it answered", show=False)


def _signal_group(p: subprocess.Popen, sig: int):
    """Signal the debuggee's process group (its pid: it was started in a new session)."""
    try:
        os.killpg(p.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass                          # nothing left in the group


# The debuggee's command line. ``-c`` (not ``-m``) and the first statement dropping the ''
# that ``-c`` puts first on sys.path: nothing is imported from the program's cwd, and the
# program later sees the sys.path ``python PROGRAM`` would give it (its directory first,
# PYTHONPATH, site-packages). argv[1] holds the directories msvm and msvm_server are
# imported from here, which the debuggee takes off sys.path again before the program runs.
DEBUGGEE_BOOT = (
    "import sys\n"
    "if sys.path and sys.path[0] == '' and not getattr(sys.flags, 'safe_path', False):\n"
    "    del sys.path[0]\n"
    "added = [d for d in sys.argv[1].split(__import__('os').pathsep) if d and d not in sys.path]\n"
    "sys.path[:0] = added\n"
    "from msvm_server.dap.debuggee import main\n"
    "sys.exit(main(sys.argv[2:], added))\n"
)


def import_roots() -> list:
    """The directories this process imports msvm_server and msvm from (msvm is found, not imported)."""
    import importlib.util

    roots = [os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))]
    spec = importlib.util.find_spec("msvm")
    if spec is not None and spec.submodule_search_locations:
        roots.append(os.path.dirname(os.path.abspath(list(spec.submodule_search_locations)[0])))
    return roots


def debuggee_command(address: str, program: str, args: list) -> list:
    return [sys.executable, "-c", DEBUGGEE_BOOT, os.pathsep.join(import_roots()), address, program, *args]


def _exit_on_signal(signum, frame):
    raise SystemExit(128 + signum)


def main(argv=None) -> int:
    out = sys.stdout.buffer
    sys.stdout = sys.stderr          # nothing but DAP messages may reach the client's stdout
    adapter = Adapter(sys.stdin.buffer, out)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _exit_on_signal)     # killed by the client: still end the program's group
    try:
        return adapter.serve()
    finally:     # after a signal: no message (the write lock may be held), only the group's end
        if adapter.proc is not None and not adapter.group_killed:
            _signal_group(adapter.proc, signal.SIGKILL)
