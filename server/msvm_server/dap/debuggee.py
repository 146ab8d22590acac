"""The debugged process: runs the user's program under msvm with the runtime's hook and
answers the adapter's DAP requests over a private socket.

    python -c DEBUGGEE_BOOT ROOTS ADDRESS PROGRAM [ARGS...]     (see adapter.debuggee_command)

The program's own stdout/stderr are this process's (the adapter turns them into
``output`` events). The program starts after ``configurationDone``, with the sys.path
``python PROGRAM`` would give it: nothing of its directory or cwd is imported before.
The process leads its own process group; when the adapter goes away it ends the group.
"""

from __future__ import annotations

import os
import runpy
import socket
import sys
import threading
import traceback

from .pyside import PythonSide, in_cell
from .runtime import Runtime, code_lines
from .values import EvalError, Inspector
from .wire import BadMessage, Channel, response

STATS_PERIOD_S = 0.5
EXCEPTION_FILTER = "msvm-cell-errors"


class Debuggee:
    def __init__(self, channel: Channel, program: str, args: list, config: dict, added_paths=()):
        self.added_paths = list(added_paths)   # sys.path entries the boot added for msvm/msvm_server
        self.ch = channel
        self.program, self.args = program, args
        self.rt = Runtime(self.on_stop, self.on_bind)
        self.rt.stop_on_entry = bool(config.get("stopOnEntry"))
        self.no_debug = bool(config.get("noDebug"))
        self.debugpy_port = config.get("debugpyPort")        # set when debugpy debugs the Python side
        self.debugpy_token = config.get("debugpyToken")
        self.python = PythonSide()
        if self.debugpy_port:
            self.rt.before_stop = self.python.forget_python_step
            self.rt.on_leaving_step = self.python.hand_to_python
            self.rt.on_python_step = self.python.step_from
        self.inspector = Inspector(self.rt.addresses)
        self.configured = threading.Event()
        self.lock = threading.Lock()
        self.last_stats = None
        self.done = threading.Event()
        self.finished = threading.Event()     # set before the channel closes at the end

    # --- messages
    def event(self, name: str, body: dict | None = None):
        self.ch.write({"type": "event", "event": name, "body": body or {}})

    def respond(self, req: dict, body=None, error: str | None = None):
        self.ch.write(response(req, body, error))

    def serve(self):
        """The request loop (its own thread)."""
        while True:
            try:
                req = self.ch.read()
            except BadMessage as e:
                print(f"msvm debugger: {e}", file=sys.stderr, flush=True)
                continue
            if req is None:
                if self.finished.is_set():
                    return           # the program ended and closed the channel: main() reports its status
                self.rt.shutdown()
                _end_group()         # the adapter went away while the program runs: nothing to report to
                os._exit(0)
            if req.get("type") != "request":
                continue
            handler = getattr(self, f"req_{req.get('command')}", None)
            if handler is None:
                self.respond(req, error=f"msvm debugger: unsupported request {req.get('command')!r}")
                continue
            try:
                body = handler(req.get("arguments") or {})
                self.respond(req, body)
            except (KeyError, EvalError, ValueError, TypeError, IndexError, AttributeError) as e:
                self.respond(req, error=str(e) if isinstance(e, EvalError) else f"{type(e).__name__}: {e}")
            except Exception as e:  # noqa: BLE001 - a failing request never ends the session
                self.respond(req, error=f"{type(e).__name__}: {e}")

    # --- stops (program thread)
    def on_stop(self, stop):
        with self.lock:
            self.inspector.reset(stop)
        body = {"reason": stop.reason, "threadId": 1, "allThreadsStopped": not self.debugpy_port}
        if stop.description:
            body["description"] = stop.description
        if stop.text:
            body["text"] = stop.text
        if stop.hit:
            body["hitBreakpointIds"] = stop.hit
        self.send_stats()
        self.event("stopped", body)

    def on_bind(self, bp):
        self.event("breakpoint", {"reason": "changed", "breakpoint": {"id": bp.id, "verified": True, "line": bp.line}})

    def _resume(self, step=None):
        with self.lock:
            self.inspector.reset(None)
        self.rt.resume(step)

    # --- requests
    def req_configurationDone(self, a):
        self.configured.set()

    def req_threads(self, a):
        return {"threads": [{"id": 1, "name": "main"}]}

    def req_setBreakpoints(self, a):
        path = (a.get("source") or {}).get("path", "")
        lines = [b["line"] for b in a.get("breakpoints", [])] or list(a.get("lines", []))
        known = _static_lines(path)
        bps = self.rt.set_line_breakpoints(path, lines, known)
        out = [dict({"id": b.id, "verified": b.verified, "line": b.line, "source": {"path": path}},
                    **({"message": b.message} if b.message else {})) for b in bps]
        if self.debugpy_port:        # which lines are the Cells' (the others are debugpy's)
            spans = _cell_spans(path)
            for d in out:
                d["inCell"] = d["verified"] or bool(known and d["line"] in known) or \
                    any(a <= d["line"] <= b for a, b in spans)
        return {"breakpoints": out}

    def req_setInstructionBreakpoints(self, a):
        refs = [(b.get("instructionReference"), b.get("offset", 0)) for b in a.get("breakpoints", [])]
        out = []
        for (ref, off), (ok, bid, msg) in zip(refs, self.rt.set_instruction_breakpoints(refs)):
            d = {"verified": ok, "instructionReference": ref, "offset": off}
            if bid is not None:
                d["id"] = bid
            if msg:
                d["message"] = msg
            out.append(d)
        return {"breakpoints": out}

    def req_setExceptionBreakpoints(self, a):
        self.rt.break_on_exception = EXCEPTION_FILTER in (a.get("filters") or [])
        return {"breakpoints": [{"verified": True}] * len(a.get("filters") or [])}

    def req_continue(self, a):
        self._resume(None)
        return {"allThreadsContinued": not self.debugpy_port}

    def _step(self, kind, a):
        step = self.rt.step_from_stop(kind, a.get("granularity", "line"))
        if step is None:
            raise ValueError("the program is not stopped")
        # (mixed sessions) a Python frame the user selected is stepped by pydevd, by lines; an
        # instruction step (the Disassembly view's) is always the Cell's
        focus = a.get("msvmFocusFrame")
        if focus and kind in ("over", "out") and a.get("granularity") != "instruction" and self.python.attached:
            with self.lock:
                pf = self.inspector.python_frame(focus) if self.inspector.frames else None
            if pf is not None:
                with self.lock:
                    self.inspector.reset(None)
                return self.rt.resume(None, python_step=(kind, pf.frame))
        self._resume(step)

    def req_next(self, a):
        self._step("over", a)

    def req_stepIn(self, a):
        self._step("in", a)

    def req_stepOut(self, a):
        self._step("out", a)

    def req_pause(self, a):
        self.rt.pause()

    # --- from the adapter, in a mixed session (debugpy owns the Python side)
    def req_msvmStepIntoCell(self, a):
        self.rt.step_into_next_cell()

    def req_msvmCancelStep(self, a):
        self.rt.cancel_step()

    def req_msvmCancelPause(self, a):
        self.rt.pause_requested = False

    def req_msvmPauseIfInCell(self, a):
        """Pause at the next instruction if the program is inside a Cell now; else debugpy pauses it."""
        inside = in_cell(self.rt.main_thread)
        if inside:
            self.rt.pause()
        return {"inCell": inside}

    def req_stackTrace(self, a):
        with self.lock:
            return self.inspector.stack_trace(a.get("startFrame", 0), a.get("levels", 0))

    def req_scopes(self, a):
        with self.lock:
            return {"scopes": self.inspector.scopes(a["frameId"])}

    def req_variables(self, a):
        with self.lock:
            vs = self.inspector.variables(a["variablesReference"])
        start, count = a.get("start", 0), a.get("count", 0)
        return {"variables": vs[start:start + count] if count else vs[start:]}

    def req_evaluate(self, a):
        with self.lock:
            return self.inspector.evaluate(a["expression"], a.get("frameId"))

    def req_exceptionInfo(self, a):
        st = self.rt.stopped
        if st is None or st.reason != "exception":
            raise ValueError("not stopped on an exception")
        return {"exceptionId": st.text, "description": st.description, "breakMode": "always",
                "details": {"message": st.description, "typeName": st.text}}

    def req_source(self, a):
        path = (a.get("source") or {}).get("path")
        with open(path, encoding="utf-8") as f:
            return {"content": f.read(), "mimeType": "text/x-python"}

    def req_disassemble(self, a):
        return {"instructions": disassemble(self.rt.addresses, a["memoryReference"], a.get("offset", 0),
                                            a.get("instructionOffset", 0), a["instructionCount"])}

    # --- statistics
    def send_stats(self):
        tiers = sys.modules.get("msvm.compiler.tiers")
        if tiers is None:
            return
        s = tiers.stats()
        body = {"hits": s["hits"], "misses": s["misses"], "rate": s["hit_rate"], "compiles": s["compiles"],
                "disk_loads": s["disk_loads"], "recent": s["recent"], "pid": os.getpid(), "script": self.program}
        key = (body["hits"], body["misses"], body["compiles"], body["disk_loads"])
        if key != self.last_stats and any(key):       # nothing to say before the JIT did anything
            self.last_stats = key
            self.event("msvm/cacheStats", body)

    def _stats_loop(self):
        while not self.done.wait(STATS_PERIOD_S):
            self.send_stats()

    # --- the program (main thread)
    def run(self) -> int:
        import msvm
        from msvm.profile import Profiler

        if self.debugpy_port:
            try:
                self.python.attach(int(self.debugpy_port), str(self.debugpy_token or ""))
            except Exception as e:  # noqa: BLE001 - the Cells are still debugged
                print(f"msvm debugger: debugpy could not attach ({type(e).__name__}: {e}); "
                      "Python code runs without Python debugging", file=sys.stderr, flush=True)
        self.configured.wait()
        prof = Profiler(self.program, self.args).start(exec_times=True)
        _debugger_thread(self._stats_loop, "msvm-dap-stats").start()
        sys.argv = [self.program] + list(self.args)
        _preload()
        ours = list(sys.path)
        sys.path[:] = [os.path.dirname(os.path.abspath(self.program))] + [p for p in ours
                                                                          if p not in self.added_paths]
        status = 0
        if not self.no_debug:
            msvm.set_trace(self.rt.hook)
        try:
            runpy.run_path(self.program, run_name="__main__")
        except SystemExit as e:
            status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:  # noqa: BLE001 - the program's own failure: shown as Python shows it
            self.python.uncaught(sys.exc_info())
            traceback.print_exc()
            status = 1
        finally:
            sys.path[:] = ours           # what runs after the program imports nothing of its directory
            msvm.set_trace(None)
            self.python.detach()
            prof.stop()
            self.done.set()
            sys.stdout.flush()
            sys.stderr.flush()
        try:
            self.send_stats()
            self.event("msvm/profile", {"profile": prof.report(), "script": self.program, "pid": os.getpid()})
        except Exception:  # noqa: BLE001 - the exit is reported whatever the profile did
            pass
        return status


def _debugger_thread(target, name: str) -> threading.Thread:
    """A thread of the debugger's own: pydevd neither lists nor traces nor suspends it."""
    t = threading.Thread(target=target, name=name, daemon=True)
    t.is_pydev_daemon_thread = True
    return t


def _cell_spans(path: str) -> list:
    """(first, last) lines of each ``construct`` method and ``@jit`` function in the file:
    breakpoints there are msvm's, whether or not they bind yet."""
    import ast

    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return []
    spans = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            spans += [(n.lineno, n.end_lineno) for n in node.body
                      if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == "construct"]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for d in node.decorator_list:
                d = d.func if isinstance(d, ast.Call) else d
                name = d.attr if isinstance(d, ast.Attribute) else getattr(d, "id", "")
                if name == "jit":
                    spans.append((node.lineno, node.end_lineno))
    return spans


def _static_lines(path: str):
    """Lines of the file that have bytecode, without running it (None if unknown)."""
    try:
        from msvm import context
        from msvm.static import analyze_file

        entries = analyze_file(path)
    except Exception:  # noqa: BLE001 - an odd file only means unverified breakpoints
        return None
    lines, complete = set(), True
    fuse = context.jit_option("enable_fusion")
    for e in entries:
        if e.code is None:
            complete = False
            continue
        code = e.code
        if fuse:
            try:
                from msvm.compiler.fuse import fuse as do_fuse

                code = do_fuse(code)
            except Exception:  # noqa: BLE001
                pass
        lines |= code_lines(code.all_codes(), path)
    return lines if complete or lines else None


def disassemble(addresses, memory_reference: str, offset: int, instruction_offset: int, count: int) -> list:
    """Exactly ``count`` instructions around the reference; outside the Code, invalid fillers."""
    from msvm.bytecode.disasm import records

    from .values import _col1

    addr = int(memory_reference, 0) + int(offset or 0)
    code, idx = addresses.resolve(addr)
    out = []
    if code is None:
        return [{"address": hex(max(0, addr + k)), "instruction": "", "presentationHint": "invalid"}
                for k in range(instruction_offset, instruction_offset + count)]
    base = addresses.register(code)
    recs = list(records(code))
    n = len(recs)
    for j in range(idx + instruction_offset, idx + instruction_offset + count):
        if j < 0:
            out.append({"address": hex(base + j), "instruction": "", "presentationHint": "invalid"})
        elif j >= n:
            out.append({"address": hex(base + code.size + (j - n)), "instruction": "", "presentationHint": "invalid"})
        else:
            r = recs[j]
            loc = r.loc
            d = {"address": hex(base + r.offset), "instruction": f"{r.op} {r.argrepr}".strip(),
                 "instructionBytes": " ".join(f"{b:02x}" for b in _encode(code.instrs[j])),
                 "location": {"name": os.path.basename(code.filename), "path": code.filename},
                 "line": loc.line, "column": _col1(code.filename, loc.line, loc.col),
                 "endLine": loc.end_line, "endColumn": _col1(code.filename, loc.end_line, loc.end_col)}
            if j == 0:
                d["symbol"] = code.name
            out.append(d)
    return out


def _encode(ins) -> bytes:
    """The instruction's bytes exactly as the .msbc format stores them."""
    from msvm.bytecode.binary import encode_instrs

    return encode_instrs([ins])


def _preload():
    """What the debugger imports lazily, imported before the program's directory joins sys.path."""
    import msvm.bytecode.binary  # noqa: F401
    import msvm.bytecode.disasm  # noqa: F401
    import msvm.compiler.fuse  # noqa: F401
    import msvm.static  # noqa: F401


def _end_group():
    """SIGKILL this process's group (everything the program started) if this process leads it."""
    import signal

    if os.getpgid(0) == os.getpid():
        os.killpg(0, signal.SIGKILL)


def main(argv=None, added_paths=()) -> int:
    argv = sys.argv[1:] if argv is None else argv
    address, program, args = argv[0], argv[1], argv[2:]
    if address.startswith("unix:"):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(address[5:])
    else:
        host, _, port = address[4:].rpartition(":")
        sock = socket.create_connection((host, int(port)))
    ch = Channel(sock.makefile("rb"), sock.makefile("wb"))
    config = ch.read() or {}
    if config.get("token") != os.environ.pop("MSVM_DAP_TOKEN", None):
        return 3
    dbg = Debuggee(ch, program, args, config, added_paths)
    _debugger_thread(dbg.serve, "msvm-dap-requests").start()
    status = dbg.run()
    dbg.finished.set()
    dbg.rt.shutdown()
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    return status


if __name__ == "__main__":
    sys.exit(main())
