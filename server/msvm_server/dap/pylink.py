"""The msvm adapter's client side of debugpy's own adapter (``python -m debugpy.adapter``).

The msvm adapter is a DAP server to VS Code and, when ``pythonDebugging`` is on, a DAP
client of debugpy: ``PyLink`` starts debugpy's adapter over private pipes, attaches with
``listen`` (the debuggee then calls ``debugpy.connect`` to the port debugpy names in its
``debugpyWaitingForServer`` event), sends requests with its own sequence numbers and
hands each response to a callback. That port is a loopback TCP port anyone on the machine
can reach, so the adapter runs with ``debugpy_glue.ADAPTER_BOOT``: a debug server that does
not present ``token`` (a secret the debuggee gets over its private socket) is refused.

``Ids`` keeps the two debuggers' numbers apart in what VS Code sees: debugpy's frame ids
and variable references (``id()`` of Python objects, 64-bit) are renumbered from
``PY_BASE`` up; msvm's stay below it. debugpy's breakpoint ids are shifted by
``PY_BASE`` the same way.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import threading

from . import debugpy_glue
from .wire import BadMessage, Channel, InFlight, response

PY_BASE = 1 << 30          # ids at or above this are debugpy's; msvm's are below
ANSWER_TIMEOUT_S = 30


class Ids:
    """Frame ids and variable references of debugpy, renumbered into [PY_BASE, 2**31)."""

    def __init__(self):
        self.to_ours: dict = {}
        self.to_theirs: dict = {}
        self.live: set = set()          # ours handed out since debugpy last resumed its threads
        self.lock = threading.Lock()

    def ours(self, theirs: int) -> int:
        with self.lock:
            k = self.to_ours.get(theirs)
            if k is None:
                k = PY_BASE + len(self.to_ours) + 1
                self.to_ours[theirs] = k
                self.to_theirs[k] = theirs
            self.live.add(k)
            return k

    def forget(self):
        """debugpy resumed its threads: what their frames and variables were numbered is stale (and
        pydevd would wait for a running thread to answer about it, holding every later request)."""
        with self.lock:
            self.live.clear()

    def stale(self, args: dict) -> bool:
        with self.lock:
            return any(self.is_python(args.get(k)) and args[k] not in self.live for k in ("frameId", "variablesReference"))

    def theirs(self, ours: int) -> int:
        with self.lock:
            return self.to_theirs.get(ours, 0)

    @staticmethod
    def is_python(ours) -> bool:
        return isinstance(ours, int) and ours >= PY_BASE

    def out(self, body):
        """A debugpy response or event body with its ids in our numbering (in place)."""
        if isinstance(body, dict):
            for k, v in body.items():
                if k == "variablesReference" and isinstance(v, int) and v > 0:
                    body[k] = self.ours(v)
                elif k == "stackFrames" and isinstance(v, list):
                    for fr in v:
                        if isinstance(fr, dict) and isinstance(fr.get("id"), int):
                            fr["id"] = self.ours(fr["id"])
                        self.out(fr)
                elif k == "hitBreakpointIds" and isinstance(v, list):
                    body[k] = [PY_BASE + b for b in v if isinstance(b, int)]
                else:
                    self.out(v)
        elif isinstance(body, list):
            for v in body:
                self.out(v)
        return body

    def back(self, args: dict) -> dict:
        """A client request's arguments with our ids turned back into debugpy's."""
        a = dict(args)
        for k in ("frameId", "variablesReference"):
            if self.is_python(a.get(k)):
                a[k] = self.theirs(a[k])
        return a


class PyLink:
    """A running ``debugpy.adapter`` and the DAP session with it."""

    def __init__(self, on_event, on_end=None):
        self.on_event, self.on_end = on_event, on_end
        self.token = secrets.token_hex(32)          # what the debuggee's pydevd must present
        env = dict(os.environ, **{debugpy_glue.TOKEN_ENV: self.token})
        self.proc = subprocess.Popen(debugpy_glue.adapter_command(), stdin=subprocess.PIPE, env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
        self.ch = Channel(self.proc.stdout, self.proc.stdin)
        self.lock = threading.Lock()
        self.seq = 0
        self.waiting = InFlight()            # seq -> the callback of its response
        self.seen: dict = {}                 # event name -> body, for wait_event
        self.cond = threading.Condition()
        self.ids = Ids()
        self.reader = threading.Thread(target=self._read, name="msvm-dap-debugpy", daemon=True)
        self.reader.start()

    def send(self, command: str, arguments: dict | None = None, callback=None):
        """Each callback is called once: with debugpy's response, or with a failure when
        debugpy's adapter is gone before it answered."""
        with self.lock:
            self.seq += 1
            seq = self.seq
        req = {"seq": seq, "type": "request", "command": command, "arguments": arguments or {}}
        if not self.waiting.send(self.ch, req, callback) and callback is not None:
            callback(_gone(seq, command))

    def request(self, command: str, arguments: dict | None = None, timeout: float = ANSWER_TIMEOUT_S) -> dict:
        done, box = threading.Event(), {}

        def answer(msg):
            box["msg"] = msg
            done.set()

        self.send(command, arguments, answer)
        if not done.wait(timeout):
            raise TimeoutError(f"debugpy did not answer {command!r} within {timeout:.0f} s")
        return box["msg"]

    def wait_event(self, name: str, timeout: float = ANSWER_TIMEOUT_S):
        """The body of the first ``name`` event debugpy sent (waiting for it), or None on timeout."""
        with self.cond:
            self.cond.wait_for(lambda: name in self.seen or self.proc.poll() is not None, timeout)
            return self.seen.get(name)

    def _read(self):
        while True:
            try:
                msg = self.ch.read()
            except BadMessage:
                continue
            except OSError:
                msg = None
            if msg is None:
                break
            kind = msg.get("type")
            if kind == "response":
                cb = self.waiting.take(msg.get("request_seq"))
                if cb is not None:
                    cb(msg)
            elif kind == "event":
                with self.cond:
                    self.seen.setdefault(msg.get("event"), msg.get("body") or {})
                    self.cond.notify_all()
                self.on_event(msg)
            elif kind == "request":          # reverse requests (runInTerminal, startDebugging): not offered
                self.ch.write({"type": "response", "request_seq": msg.get("seq"), "command": msg.get("command"),
                               "success": False, "message": "not supported by the msvm adapter"})
        for seq, cb in self.waiting.close():
            if cb is not None:
                try:
                    cb(_gone(seq, None))
                except Exception as e:  # noqa: BLE001 - one failing callback must not leave the others waiting
                    print(f"msvm debug adapter: debugpy's answer {seq}: {type(e).__name__}: {e}", file=sys.stderr,
                          flush=True)
        with self.cond:
            self.cond.notify_all()
        if self.on_end:
            self.on_end()

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def _gone(seq: int, command) -> dict:
    return response({"seq": seq, "command": command}, error="debugpy's adapter ended before it answered")
