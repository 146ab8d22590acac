"""One DAP session over two debuggers: msvm's (Cells) and debugpy's (the Python code).

VS Code talks to the msvm adapter only. ``Mixer`` routes each of its requests to the
debugger that owns what the request names, and merges what both say:

- the program's main thread has one owner at a time: msvm while its trace hook holds
  the thread inside a Cell (``cell_stop``), debugpy otherwise. Its ``stopped`` event
  comes from whichever stopped it; its stack is msvm's while a Cell is stopped (Cell
  frames on top, the Python frames that called them below) and debugpy's otherwise.
  msvm's thread 1 is shown as debugpy's id for the main thread; other threads are debugpy's.
- frame ids and variable references at or above ``pylink.PY_BASE`` are debugpy's
  (renumbered), the others msvm's; requests that carry one go to its owner.
- breakpoints: lines inside a Cell's ``construct`` / ``@jit`` function are msvm's, the
  others debugpy's; one ``setBreakpoints`` answer holds both, in the order asked.
- steps: on a Cell, msvm steps (and a step that leaves the outermost Cell ends on the
  next Python line: the debuggee hands it to pydevd); on Python, debugpy steps, and a
  step-in also arms msvm to stop at the first instruction of a Cell the line calls.
  Whichever stops first wins; the debuggee cancels the other's pending step.
- the selected frame: DAP's step requests name a thread, not a frame, so the frame the user
  selected is the last one a request named since the thread stopped: ``msvmSelectFrame`` (the
  extension sends it on each selection, VS Code's ``activeStackItem``), ``scopes``,
  ``evaluate``... (what any client asks about the frame it shows). ``next``/``stepOut`` with a
  Python frame below a stopped Cell selected are pydevd's steps from that frame: over = run
  until that frame reaches its next line (the Cell and everything it was called from return
  to it), out = until that frame returns to its caller; breakpoints on the way stop first.
  ``stepIn``, and any step by ``instruction`` (the Disassembly view's), stays the thread's:
  the next instruction or line the Cell runs.
- another thread stopping on Python code (pydevd stops all its threads) while the main
  thread runs a Cell: msvm pauses the main thread at the Cell's next instruction, so its stack
  shows (Cell frames, then Python frames; ``preserveFocusHint``: the focus stays on the thread
  that stopped); until then, or if it runs msvm's own code outside a Cell, its stack is one
  ``label`` frame saying it runs. Each thread then continues and steps on its own.
"""

from __future__ import annotations

import threading

from .pylink import PY_BASE, PyLink
from .wire import response

_PY_EVENTS = {"stopped", "continued", "thread", "output", "breakpoint", "module", "loadedSource", "invalidated"}
_BY_FRAME = {"scopes", "evaluate", "completions", "setExpression", "restartFrame", "gotoTargets", "stepInTargets"}
_BY_REF = {"variables", "setVariable"}
_BY_THREAD = {"continue", "next", "stepIn", "stepOut", "stepBack", "reverseContinue"}
_PY_ONLY = {"modules", "loadedSources", "setFunctionBreakpoints", "goto", "dataBreakpointInfo", "setDataBreakpoints"}
PY_FILTERS = ("raised", "uncaught", "userUnhandled")
_SKIPPED = "Frame skipped from debugging during step-in"      # pydevd's note when a step-in passes msvm
RUNNING_FRAME = PY_BASE - 1        # the id of the label frame of a main thread that runs
_RUNNING = ("running: msvm is executing the program on this thread (it stops at its next Cell "
            "instruction or Python line)")


class Mixer:
    def __init__(self, adapter, justMyCode=True):
        self.ad = adapter
        self.just_my_code = bool(justMyCode)
        self.py: PyLink | None = None
        self.main_tid = 1                 # debugpy's id for the program's main thread
        self.cell_stop: dict | None = None    # msvm's last stopped body while a Cell holds the thread
        self.py_stop: dict | None = None      # debugpy's last stopped body while it holds the main thread
        # a Python step-in on the main thread is under way, or ended in a Cell: pydevd's note that it
        # skipped msvm's frames may come after msvm's stop, so it stays muted until the next step
        # or Python stop
        self.stepping_in = False
        self.focus = None                     # the frame id last named by a request since the main thread stopped
        self.py_all_stopped = False           # debugpy stopped all its threads (another thread stopped)
        self.pausing_main = ""                # name of the thread whose stop made msvm pause the main thread
        self.thread_names: dict = {}
        self.pending: dict = {}           # seq of a request sent to msvm -> callback for its response
        self.next_seq = 0
        self.lock = threading.Lock()
        self._connected = False

    # --- life
    def start(self) -> int:
        """Starts debugpy's adapter and attaches in ``listen`` mode; returns the port the debuggee connects to."""
        self.py = PyLink(self.from_debugpy)
        init = self.py.request("initialize", {"clientID": "msvm", "adapterID": "msvm-python", "pathFormat": "path",
                                              "linesStartAt1": True, "columnsStartAt1": True,
                                              "supportsRunInTerminalRequest": False})
        if not init.get("success"):
            raise RuntimeError(init.get("message") or "initialize failed")
        self.py.send("attach", {"listen": {"host": "127.0.0.1", "port": 0}, "justMyCode": self.just_my_code,
                                "redirectOutput": False, "subProcess": False, "showReturnValue": True})
        where = self.py.wait_event("debugpyWaitingForServer")
        if not where:
            raise RuntimeError("debugpy's adapter named no port")
        return int(where["port"])

    def connected(self) -> bool:
        """After the debuggee started: waits for debugpy's session to be up (its ``initialized``)."""
        self._connected = self.py is not None and self.py.wait_event("initialized") is not None
        if self._connected:
            r = self.py.request("threads")
            for t in (r.get("body") or {}).get("threads", []):
                if t.get("name") == "MainThread":
                    self.main_tid = t["id"]
        return self._connected

    def close(self):
        if self.py is not None:
            self.py.close()

    # --- helpers
    def _to_client(self, msg: dict):
        self.ad.client.write(msg)

    def _msvm(self, command: str, arguments: dict | None = None, callback=None, req: dict | None = None):
        """Send a request to the debuggee: the client's own (req), or one of ours (negative seq)."""
        if req is None:
            with self.lock:
                self.next_seq -= 1
                seq = self.next_seq
            req = {"seq": seq, "type": "request", "command": command, "arguments": arguments or {}}
        elif arguments is not None:
            req = dict(req, arguments=arguments)
        if callback is not None:
            with self.lock:
                self.pending[req["seq"]] = callback
        self.ad.to_child(req)

    def _py(self, req: dict, arguments: dict | None = None, after=None, then=None):
        """Send the client's request to debugpy; its answer goes back with our ids (after(body) may
        amend it; then() runs once it was sent)."""
        raw = req.get("arguments") or {} if arguments is None else arguments
        if self.py.ids.stale(raw):
            return self._to_client(response(req, error="the thread is running (that frame or variable is gone)"))
        args = self.py.ids.back(raw)

        def answer(msg):
            body = self.py.ids.out(msg.get("body") or {})
            if after is not None and msg.get("success"):
                body = after(body)
            out = {"type": "response", "request_seq": req.get("seq"), "command": req.get("command"),
                   "success": bool(msg.get("success")), "body": body}
            if msg.get("message"):
                out["message"] = msg["message"]
            self._to_client(out)
            if then is not None:
                then()
        self.py.send(req.get("command"), args, answer)

    def _is_main(self, a: dict) -> bool:
        return a.get("threadId", self.main_tid) == self.main_tid

    def _is_main_frame(self, fid) -> bool:
        """Whether a frame id names a frame of the main thread's current stop (msvm's numbering)."""
        return self.cell_stop is not None and isinstance(fid, int) and not _is_py(fid)

    # --- requests from the client: True when handled here
    def route(self, req: dict) -> bool:
        if not self._connected:
            return False
        cmd = req.get("command")
        a = req.get("arguments") or {}
        if cmd == "setBreakpoints":
            self._set_breakpoints(req)
        elif cmd == "setExceptionBreakpoints":
            filters = [f for f in a.get("filters") or [] if f in PY_FILTERS]
            self.py.send("setExceptionBreakpoints", {"filters": filters})
            return False                         # msvm answers (one entry per filter)
        elif cmd == "configurationDone":
            self.py.request("configurationDone")
            return False
        elif cmd == "threads":
            self._py(req, after=self._with_main_thread)
        elif cmd in ("stackTrace", "exceptionInfo"):
            if self.cell_stop is not None and self._is_main(a):
                self._msvm(cmd, dict(a, threadId=1), req=req)
            elif self.py_stop is None and not self.py_all_stopped and self._is_main(a) and cmd == "stackTrace":
                self._to_client(response(req, _running_stack()))
            elif self._is_main(a) and cmd == "stackTrace":
                self._py(req, after=_stack_or_running)
            else:
                self._py(req, after=_without_boot if cmd == "stackTrace" else None)
        elif cmd == "msvmSelectFrame":          # the extension: the user selected this frame
            if self._is_main_frame(a.get("frameId")):
                self.focus = a["frameId"]
            self._to_client(response(req))
        elif cmd in _BY_FRAME:
            fid = a.get("frameId")
            if fid is not None and self._is_main_frame(fid):
                self.focus = fid
            if fid == RUNNING_FRAME:
                self._to_client(response(req, {"scopes": []} if cmd == "scopes" else None,
                                         error=None if cmd == "scopes" else "the thread is running"))
            elif _is_py(fid) or (fid is None and self.cell_stop is None):
                self._py(req)
            else:
                return False
        elif cmd in _BY_REF:
            if _is_py(a.get("variablesReference")):
                self._py(req)
            else:
                return False
        elif cmd in _BY_THREAD:
            self._step_or_continue(req, cmd, a)
        elif cmd == "pause":
            self._pause(req, a)
        elif cmd == "source":
            if (a.get("source") or {}).get("sourceReference") or a.get("sourceReference"):
                self._py(req)
            else:
                return False
        elif cmd in _PY_ONLY:
            self._py(req)
        else:
            return False
        return True

    def _with_main_thread(self, body: dict) -> dict:
        threads = body.get("threads") or []
        if not any(t.get("id") == self.main_tid for t in threads):
            threads.insert(0, {"id": self.main_tid, "name": "MainThread"})
        body["threads"] = threads
        self.thread_names = {t.get("id"): t.get("name") for t in threads}
        return body

    # VS Code takes the answer to a step or continue as "the thread runs" (a simulated
    # ``continued``), and the answer may come after the other debugger already stopped the
    # thread again: each answer is followed by the stop that holds, said again.
    def _step_or_continue(self, req, cmd, a):
        main = self._is_main(a)
        if self.cell_stop is not None and main:
            self.cell_stop = None                # msvm resumes the thread (a step may end in Python)
            args = dict(a, threadId=1)
            if self.focus is not None:
                args["msvmFocusFrame"] = self.focus      # a Python frame there: pydevd steps it
            self.focus = None
            self._msvm(cmd, args, req=req, callback=self._then_restate_py_stop)
            return
        if main:
            self.py_stop = None
        self.py.ids.forget()                     # debugpy resumes all its threads
        self.py_all_stopped = False
        self.stepping_in = cmd == "stepIn" and main
        if cmd == "stepIn" and main:
            # a Python step-in: a Cell the line calls stops at its first instruction
            self._msvm("msvmStepIntoCell", callback=lambda _msg: self._py(req, then=self._restate_cell_stop))
        else:
            self._py(req, then=self._restate_cell_stop)

    def _restate_cell_stop(self):
        """After debugpy's answer: the thread a Cell holds is still stopped (msvm's)."""
        if self.cell_stop is not None:
            self._to_client({"type": "event", "event": "stopped", "body": dict(self.cell_stop, preserveFocusHint=True)})

    def _then_restate_py_stop(self, msg):
        """msvm's answer to a step, then debugpy's stop if the step already ended in Python."""
        self._to_client(msg)
        if self.py_stop is not None:
            self._to_client({"type": "event", "event": "stopped", "body": dict(self.py_stop, preserveFocusHint=True)})

    def _pause(self, req, a):
        if not self._is_main(a):
            return self._py(req)
        if self.cell_stop is not None:
            return self._to_client(response(req))

        def answer(msg):
            if (msg.get("body") or {}).get("inCell"):
                self._to_client(response(req))   # msvm stops at the Cell's next instruction
            else:
                self._py(req)
        self._msvm("msvmPauseIfInCell", callback=answer)

    def _set_breakpoints(self, req):
        a = req.get("arguments") or {}
        asked = list(a.get("breakpoints") or [{"line": n} for n in a.get("lines") or []])

        def from_msvm(msg):
            if not msg.get("success"):
                return self._to_client(dict(msg, request_seq=req["seq"]))
            ours = (msg.get("body") or {}).get("breakpoints") or []
            in_cell = [bool(b.pop("inCell", False)) for b in ours]
            py_bps = [bp for bp, cell in zip(asked, in_cell) if not cell]

            def from_py(pmsg):
                theirs = ((pmsg.get("body") or {}).get("breakpoints") or []) if pmsg.get("success") else []
                merged, k = [], 0
                for bp, cell, mine in zip(asked, in_cell, ours):
                    if cell:
                        merged.append(mine)
                        continue
                    d = dict(theirs[k]) if k < len(theirs) else {"verified": False, "line": bp.get("line"),
                                                                   "message": pmsg.get("message") or "debugpy refused it"}
                    k += 1
                    if isinstance(d.get("id"), int):
                        d["id"] += PY_BASE
                    merged.append(d)
                self._to_client(response(req, {"breakpoints": merged}))
            self.py.send("setBreakpoints", {"source": a.get("source"), "breakpoints": py_bps,
                                            "sourceModified": a.get("sourceModified", False)}, from_py)
        self._msvm("setBreakpoints", a, callback=from_msvm, req=dict(req, seq=self._own_seq()))

    def _own_seq(self) -> int:
        with self.lock:
            self.next_seq -= 1
            return self.next_seq

    # --- messages from the debuggee (msvm): True when handled here
    def from_msvm(self, msg: dict) -> bool:
        if msg.get("type") == "response":
            with self.lock:
                cb = self.pending.pop(msg.get("request_seq"), None)
            if cb is not None:
                cb(msg)
                return True
            return isinstance(msg.get("request_seq"), int) and msg["request_seq"] < 0
        if msg.get("type") == "event" and msg.get("event") == "stopped" and self._connected:
            body = dict(msg.get("body") or {}, threadId=self.main_tid)
            if self.pausing_main and body.get("reason") == "pause":
                body.update(preserveFocusHint=True,
                            description=f"paused in a Cell while thread {self.pausing_main} is stopped")
            self.pausing_main = ""
            self.cell_stop, self.py_stop, self.focus = body, None, None
            if not self.py_all_stopped:
                self.py.ids.forget()         # the main thread's debugpy frames are gone (another stopped thread's stay)
            self._to_client(dict(msg, body=body))
            return True
        return False

    # --- events from debugpy
    def from_debugpy(self, msg: dict):
        name = msg.get("event")
        if name not in _PY_EVENTS:
            return                                # its initialized/process/exited/terminated are the session's, ours
        body = self.py.ids.out(msg.get("body") or {})
        if name == "output" and self.stepping_in and str(body.get("output", "")).startswith(_SKIPPED):
            return                                # the step-in went into a Cell, which is msvm's to show
        if name == "breakpoint":
            bp = body.get("breakpoint") or {}
            if isinstance(bp.get("id"), int):
                bp["id"] += PY_BASE
        main = body.get("threadId", self.main_tid) == self.main_tid
        if name == "stopped":
            self.py_all_stopped = self.py_all_stopped or bool(body.get("allThreadsStopped"))
            if not main and body.get("allThreadsStopped") and self.cell_stop is None and self.py_stop is None \
                    and self.ad.child is not None:
                self._pause_main_in_cell(body.get("threadId"))
        elif name == "continued" and body.get("allThreadsContinued", True):
            self.py_all_stopped = False
            if self.pausing_main:                 # the Cell returned before msvm's pause: none is wanted now
                self.pausing_main = ""
                self._msvm("msvmCancelPause")
        if name == "continued" and self.cell_stop is not None:
            body["allThreadsContinued"] = False
            if main:
                return                            # late: a Cell holds the main thread stopped now
        if name == "stopped" and main and self.ad.child is not None:
            self.py_stop, self.stepping_in, self.focus = body, False, None
            self._msvm("msvmCancelStep")         # the step ended in Python: it stops no later Cell
        self._to_client({"type": "event", "event": name, "body": body})

    def _pause_main_in_cell(self, tid):
        """Another thread stopped (debugpy stops them all): the main thread, if it runs a Cell,
        stops at the Cell's next instruction (msvm), so that its stack can be shown."""
        def answer(msg):
            if not (msg.get("body") or {}).get("inCell"):
                self.pausing_main = ""            # in Python: pydevd stops it there

        def named(msg):                           # (its name, for the main thread's stop description)
            for t in (msg.get("body") or {}).get("threads") or []:
                self.thread_names[t.get("id")] = t.get("name")
            self.pausing_main = self.thread_names.get(tid) or f"{tid}"
            self._msvm("msvmPauseIfInCell", callback=answer)
        self.py.send("threads", {}, named)


def _without_boot(body: dict) -> dict:
    """debugpy's stack without the debuggee's ``python -c`` boot frame at its bottom (msvm's own)."""
    frames = body.get("stackFrames") or []
    while frames and (frames[-1].get("source") or {}).get("path") == "<string>":
        frames.pop()
        if isinstance(body.get("totalFrames"), int):
            body["totalFrames"] -= 1
    return body


def _running_stack() -> dict:
    return {"stackFrames": [{"id": RUNNING_FRAME, "name": _RUNNING, "line": 0, "column": 0,
                             "presentationHint": "label"}], "totalFrames": 1}


def _stack_or_running(body: dict) -> dict:
    """debugpy's stack of the main thread, or the running label when it has none (pydevd has not
    stopped the thread yet: it runs msvm's code, which pydevd does not trace)."""
    body = _without_boot(body)
    return body if body.get("stackFrames") else _running_stack()


def _is_py(v) -> bool:
    return isinstance(v, int) and v >= PY_BASE
