"""``python -m msvm_server dap``: the debug adapter (DAP over stdio, type ``msvm``).

The adapter answers ``initialize``, starts the program on ``launch`` in its own
process (``debuggee``) connected through a private socket, relays every other request
to it and its responses and events back, turns the program's stdout/stderr into
``output`` events, and reports ``exited`` + ``terminated`` when it ends.
``disconnect``/``terminate`` end the program; the adapter keeps serving until its
input closes.

Launch arguments: ``program`` (required), ``args``, ``cwd``, ``env``, ``stopOnEntry``,
``jitLevel`` (``auto``/``L1``/``L2``/``L3``, default ``auto``), ``enableFusion``.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading

from .wire import Channel, response

CAPABILITIES = {
    "supportsConfigurationDoneRequest": True,
    "supportsDisassembleRequest": True,
    "supportsSteppingGranularity": True,
    "supportsInstructionBreakpoints": True,
    "supportsEvaluateForHovers": True,
    "supportsExceptionInfoRequest": True,
    "supportsTerminateRequest": True,
    "supportsValueFormattingOptions": False,
    "exceptionBreakpointFilters": [{"filter": "msvm-cell-errors", "label": "Errors inside Cells",
                                    "description": "Stop where an instruction of a Cell fails", "default": True}],
}
CONNECT_TIMEOUT_S = 60
_AFTER_EXIT = {"threads": {"threads": []}, "stackTrace": {"stackFrames": [], "totalFrames": 0},
               "scopes": {"scopes": []}, "variables": {"variables": []}}


class Adapter:
    def __init__(self, reader, writer):
        self.client = Channel(reader, writer)
        self.child: Channel | None = None
        self.proc: subprocess.Popen | None = None
        self.sock_dir = None
        self.threads: list = []
        self.ended = threading.Event()
        self.terminated_sent = False
        self.lock = threading.Lock()

    # --- to the client
    def respond(self, req, body=None, error=None, show=True):
        self.client.write(response(req, body, error, show))

    def event(self, name, body=None):
        self.client.write({"type": "event", "event": name, "body": body or {}})

    # --- main loop
    def serve(self) -> int:
        while True:
            req = self.client.read()
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
                elif cmd in ("disconnect", "terminate"):
                    self.stop_program(kill=cmd == "disconnect" or bool((req.get("arguments") or {}).get("restart")))
                    self.respond(req)
                elif self.child is not None and not self.ended.is_set():
                    src = (req.get("arguments") or {}).get("source") or {}
                    if src.get("path") and not os.path.isabs(src["path"]):   # the debuggee runs in another cwd
                        src["path"] = os.path.abspath(src["path"])
                    self.child.write(req, renumber=False)
                elif cmd in _AFTER_EXIT:      # the client may still ask after the program ended
                    self.respond(req, _AFTER_EXIT[cmd])
                else:
                    self.respond(req, error=f"{cmd}: no program is running", show=False)
            except Exception as e:  # noqa: BLE001 - the adapter survives any one request
                self.respond(req, error=f"{type(e).__name__}: {e}")
        self.stop_program(kill=True)
        return 0

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
        here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env["PYTHONPATH"] = here + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        self.proc = subprocess.Popen([sys.executable, "-m", "msvm_server.dap.debuggee", f"unix:{sock_path}", path,
                                      *[str(x) for x in a.get("args") or []]], cwd=cwd, env=env,
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
                          "noDebug": bool(a.get("noDebug"))})
        self._spawn(self._pump_child)
        self._spawn(self._wait_exit)
        self.respond(req)
        self.event("process", {"name": os.path.basename(path), "systemProcessId": self.proc.pid,
                               "isLocalProcess": True, "startMethod": "launch"})
        self.event("initialized")

    def _spawn(self, fn, *args):
        t = threading.Thread(target=fn, args=args, daemon=True)
        t.start()
        self.threads.append(t)

    def _pump_output(self, stream, category):
        for line in iter(stream.readline, b""):
            self.event("output", {"category": category, "output": line.decode("utf-8", errors="replace")})

    def _pump_child(self):
        while True:
            msg = self.child.read()
            if msg is None:
                break
            self.client.write(msg)

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
        p = self.proc
        if p is not None and p.poll() is None:
            p.terminate()
            try:
                p.wait(2 if not kill else 1)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if self.proc is None:
            with self.lock:
                if not self.terminated_sent:
                    self.terminated_sent = True
                    self.event("terminated")
        if self.sock_dir:
            shutil.rmtree(self.sock_dir, ignore_errors=True)


def main(argv=None) -> int:
    out = sys.stdout.buffer
    sys.stdout = sys.stderr          # nothing but DAP messages may reach the client's stdout
    return Adapter(sys.stdin.buffer, out).serve()
