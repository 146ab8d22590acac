"""Execution control for a program running under msvm: no protocol here.

``Runtime.hook`` is installed with ``msvm.set_trace``; the interpreter calls it before
every instruction of every Cell (and ``hook.on_exception`` when one fails). The hook
decides whether to stop — entry, pause, instruction or line breakpoint, or the end of
a step — and when it stops it calls ``on_stop(reason, ...)`` and blocks the program's
thread until ``resume(...)`` is called from another thread (the debuggee's request loop).

Instruction addresses: every Code the program runs gets a base (``k << 20``); an
instruction's address is ``base + byte offset``. These are the strings VS Code's
Disassembly view asks about (``instructionPointerReference``, ``disassemble``).
"""

from __future__ import annotations

import os
import sys
import threading
from dataclasses import dataclass, field

CODE_SPAN = 1 << 20


class AddressMap:
    def __init__(self):
        self.codes: list = []          # index k -> Code (kept alive so ids stay unique)
        self.index: dict = {}          # id(code) -> k

    def register(self, code) -> int:
        k = self.index.get(id(code))
        if k is None:
            for c in code.all_codes():
                if id(c) not in self.index:
                    self.codes.append(c)
                    self.index[id(c)] = len(self.codes)
            k = self.index[id(code)]
        return k * CODE_SPAN

    def address(self, code, index: int) -> int:
        base = self.register(code)
        ins = code.instrs
        return base + (ins[index].offset if index < len(ins) else code.size)

    def resolve(self, address: int):
        """(code, instruction index) for an address inside a known Code, else (None, None)."""
        k, off = divmod(address, CODE_SPAN)
        if not 1 <= k <= len(self.codes):
            return None, None
        code = self.codes[k - 1]
        idx = code.offset_index.get(off) if hasattr(code, "offset_index") else None
        if idx is None:
            idx = max([i for i, ins in enumerate(code.instrs) if ins.offset <= off] or [None], key=lambda x: x or 0)
        return code, idx


def lines_of(ins) -> set:
    """The source lines an instruction stands for: its own and those of its fused parts."""
    return {ins.loc.line} | {pl.line for _, pl in ins.parts}


def code_lines(codes, path: str) -> set:
    """Lines of ``path`` that have an instruction in any of ``codes``."""
    p = norm_path(path)
    return {line for c in codes if norm_path(c.filename) == p for ins in c.instrs for line in lines_of(ins)}


def norm_path(path: str) -> str:
    return os.path.normcase(os.path.realpath(path)) if path else ""


@dataclass
class LineBreakpoint:
    id: int
    path: str
    line: int
    verified: bool = False
    message: str | None = None


@dataclass
class Step:
    kind: str                 # 'in' | 'over' | 'out'
    granularity: str          # 'instruction' | 'line' | 'statement'
    depth: int
    frame: object             # the frame the step started in (held, so no later frame can take its id)
    line: int


@dataclass
class Stop:
    reason: str
    frame: object
    index: int
    description: str = ""
    text: str = ""
    hit: list = field(default_factory=list)
    python_frames: list = field(default_factory=list)    # PyFrame of the host program, innermost first


@dataclass
class PyFrame:
    """A frame of the host program below the Cell frames of a stop."""
    name: str
    path: str
    line: int
    f_locals: dict
    frame: object             # the live frame (a Python step from it starts there)


def _skip_dirs() -> tuple:
    import runpy

    import msvm

    import msvm_server
    return (os.path.dirname(msvm.__file__) + os.sep, os.path.dirname(msvm_server.__file__) + os.sep,
            runpy.__file__, threading.__file__)


_SKIP = _skip_dirs()


class Runtime:
    def __init__(self, on_stop, on_bind=None):
        self.on_stop = on_stop             # called (in the program's thread) with a Stop
        self.on_bind = on_bind             # called with a LineBreakpoint that became verified at run time
        self.addresses = AddressMap()
        self.cond = threading.Condition()
        self.main_thread = threading.get_ident()
        self.stop_on_entry = False
        self.pause_requested = False
        self.step: Step | None = None
        self.stopped: Stop | None = None
        self.running = True
        self.line_bps: dict = {}           # normalized path -> {line: LineBreakpoint}
        self.instr_bps: dict = {}          # address -> id
        self.generation = 0
        self._code_bps: dict = {}          # id(code) -> (generation, {index: [bp ids]})
        self._line_at_depth: dict = {}     # depth -> (frame id, line) last executed there
        self.break_on_exception = True
        self.next_bp_id = 1
        self.hook = _Hook(self)
        # mixed sessions (see pyside): called in the program's thread when msvm stops, and when a
        # step resumes the outermost Cell (the step may end in the Python code that called it)
        self.before_stop = None
        self.on_leaving_step = None
        self.on_python_step = None         # (kind, frame): a step from a Python frame below the Cell
        self.python_step = None

    # --- breakpoints (any thread)
    def set_line_breakpoints(self, path: str, lines: list, known_lines=None) -> list:
        """Replace the file's line breakpoints. known_lines: lines that statically have
        bytecode (None when the file could not be analyzed)."""
        p = norm_path(path)
        bps = {}
        for line in lines:
            bp = LineBreakpoint(self.next_bp_id, p, line)
            self.next_bp_id += 1
            if known_lines is not None and line in known_lines:
                bp.verified = True
            else:
                if line in code_lines(self.addresses.codes, p):
                    bp.verified = True
                else:
                    bp.message = ("no msvm bytecode on this line (breakpoints bind to lines inside a Cell's "
                                  "construct or a jit function)") if known_lines is not None else \
                        "msvm could not compile this file statically; the breakpoint binds when its Cell runs"
            bps[line] = bp
        with self.cond:
            self.line_bps[p] = bps
            self.generation += 1
        return list(bps.values())

    def set_instruction_breakpoints(self, refs: list) -> list:
        """refs: [(instructionReference, offset)] -> [(verified, id, message)]"""
        out, bps = [], {}
        for ref, off in refs:
            try:
                addr = int(ref, 0) + int(off or 0)
            except (TypeError, ValueError):
                out.append((False, None, f"not an instruction address: {ref!r}"))
                continue
            code, idx = self.addresses.resolve(addr)
            if code is None or idx is None:
                out.append((False, None, f"no instruction at {ref}"))
                continue
            addr = self.addresses.address(code, idx)
            bps[addr] = self.next_bp_id
            out.append((True, self.next_bp_id, None))
            self.next_bp_id += 1
        with self.cond:
            self.instr_bps = bps
        return out

    def _bps_for(self, code) -> dict:
        cached = self._code_bps.get(id(code))
        if cached is not None and cached[0] == self.generation:
            return cached[1]
        by_index: dict = {}
        file_bps = self.line_bps.get(norm_path(code.filename))
        if file_bps:
            for i, ins in enumerate(code.instrs):
                for line in lines_of(ins):
                    bp = file_bps.get(line)
                    if bp is not None:
                        by_index.setdefault(i, []).append(bp.id)
                        if not bp.verified:
                            bp.verified, bp.message = True, None
                            if self.on_bind:
                                self.on_bind(bp)
        self._code_bps[id(code)] = (self.generation, by_index)
        return by_index

    # --- control (from the request thread)
    def resume(self, step: Step | None = None, python_step: tuple | None = None):
        """python_step: (kind, frame) of a step the Python debugger makes from that frame (the
        Cells run on, their breakpoints still stop)."""
        with self.cond:
            self.step = step
            self.python_step = python_step
            self.stopped = None
            self.cond.notify_all()

    def pause(self):
        self.pause_requested = True

    def step_into_next_cell(self):
        """Stop at the first instruction of the next Cell the program calls (a Python step-in)."""
        with self.cond:
            self.step = Step("in", "instruction", -1, None, -1)

    def cancel_step(self):
        """The step ended elsewhere (in Python): it no longer stops a later Cell."""
        with self.cond:
            if self.stopped is None:
                self.step = None
            self.pause_requested = False

    def step_from_stop(self, kind: str, granularity: str) -> Step | None:
        st = self.stopped
        if st is None:
            return None
        f = st.frame
        return Step(kind, granularity or "line", f.depth, f, f.code.instrs[st.index].loc.line)

    # --- the hook (program thread)
    def on_instruction(self, f, pc):
        if threading.get_ident() != self.main_thread:
            return
        code = f.code
        i = f.index
        line = code.instrs[i].loc.line
        prev = self._line_at_depth.get(f.depth)
        self._line_at_depth[f.depth] = (f, line)       # the frame itself: a dead frame's id is reused
        for d in [d for d in self._line_at_depth if d > f.depth]:
            del self._line_at_depth[d]
        if self.stop_on_entry:
            self.stop_on_entry = False
            return self._stop(Stop("entry", f, i, "stopped before the first bytecode instruction"))
        if self.pause_requested:
            self.pause_requested = False
            return self._stop(Stop("pause", f, i))
        if self.instr_bps:
            bid = self.instr_bps.get(self.addresses.address(code, i))
            if bid is not None:
                return self._stop(Stop("instruction breakpoint", f, i, hit=[bid]))
        else:
            self.addresses.register(code)
        if self.line_bps:
            hit = self._bps_for(code).get(i)
            if hit and (prev is None or prev[0] is not f or prev[1] != line):
                return self._stop(Stop("breakpoint", f, i, hit=hit))
        s = self.step
        if s is not None and self._step_done(s, f, line, prev):
            return self._stop(Stop("step", f, i))

    @staticmethod
    def _step_done(s: Step, f, line: int, prev) -> bool:
        """Called before each instruction after a step began (the first call is the next instruction)."""
        new_frame = f is not s.frame
        returned = f.depth < s.depth or (f.depth == s.depth == 0 and new_frame)   # or the next top-level call
        if s.kind == "out":
            return returned
        if s.granularity == "instruction":
            return s.kind == "in" or f.depth <= s.depth
        if s.kind == "in":
            return new_frame or line != s.line
        return returned or (f.depth == s.depth and (new_frame or line != s.line))

    def on_exception(self, f, index, err):
        if threading.get_ident() != self.main_thread or not self.break_on_exception:
            return
        self._stop(Stop("exception", f, index, description=str(err), text=type(err).__name__))

    def _stop(self, stop: Stop):
        stop.python_frames = _python_frames(sys._getframe(2))
        with self.cond:
            self.step = None
            self.stopped = stop
        if self.before_stop:
            self.before_stop()
        self.on_stop(stop)
        with self.cond:
            while self.stopped is stop and self.running:
                self.cond.wait(0.5)
            leaving = self.step is not None and stop.frame.depth == 0
            python_step, self.python_step = self.python_step, None
        if python_step is not None and self.on_python_step:
            self.on_python_step(*python_step)
        elif leaving and self.on_leaving_step:
            self.on_leaving_step()

    def shutdown(self):
        with self.cond:
            self.running = False
            self.stopped = None
            self.cond.notify_all()


class _Hook:
    """The callable given to set_trace (with the on_exception attribute the interpreter looks for)."""

    __slots__ = ("rt",)

    def __init__(self, rt: Runtime):
        self.rt = rt

    def __call__(self, f, pc):
        self.rt.on_instruction(f, pc)

    def on_exception(self, f, index, err):
        self.rt.on_exception(f, index, err)


def _python_frames(frame) -> list:
    """The host program's frames (innermost first), without msvm's own."""
    out = []
    while frame is not None:
        fn = frame.f_code.co_filename
        boot = frame.f_back is None and fn == "<string>"      # the debuggee's ``python -c`` boot
        if not fn.startswith(_SKIP) and not fn.startswith("<frozen") and not boot:
            out.append(PyFrame(frame.f_code.co_name, fn, frame.f_lineno, frame.f_locals, frame))
        frame = frame.f_back
    return out
