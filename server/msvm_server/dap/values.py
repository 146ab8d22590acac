"""What a stopped program shows: frames, scopes, variables and watch expressions.

``Inspector.reset(stop)`` numbers the frames of one stop (Cell frames innermost first,
then the host program's Python frames); variable references live until the program
resumes. ``watch.safe_eval`` evaluates watch expressions (``x.shape``, ``out[0, :4]``, ``B``)
over a frame's values, allowing only what reads.
"""

from __future__ import annotations

import linecache
import os
import sys

import numpy as np
from msvm.bytecode.disasm import argrepr, display_name

from .watch import EvalError, safe_eval

__all__ = ["EvalError", "Inspector", "safe_eval"]

PREVIEW = 8


def _col1(path: str, line: int, col_bytes: int) -> int:
    """1-based column in UTF-16 units (as VS Code counts them) from a 0-based UTF-8 byte column.
    linecache splits lines as Python's tokenizer does (\n, \r\n, \r), not at U+2028."""
    text = linecache.getline(path, line)
    chars = text.encode("utf-8", "surrogatepass")[:max(0, col_bytes)].decode("utf-8", errors="ignore")
    return len(chars.encode("utf-16-le", "surrogatepass")) // 2 + 1


def describe(v) -> str:
    if isinstance(v, np.ndarray) or hasattr(v, "__cuda_array_interface__"):
        shape = ", ".join(str(d) for d in v.shape) + ("," if v.ndim == 1 else "")
        return f"Tensor[{v.dtype}, ({shape})] {preview(v)}"
    if isinstance(v, tuple):
        return "(" + ", ".join(describe(x) for x in v) + ("," if len(v) == 1 else "") + ")"
    if v is None:
        return "<unset>"
    return repr(v)


def preview(v) -> str:
    a = v.get() if hasattr(v, "get") and not isinstance(v, np.ndarray) else v
    flat = np.asarray(a).flat[:PREVIEW]      # never a copy of the whole tensor (reshape copies a strided one)
    body = ", ".join(f"{x:.4g}" if np.issubdtype(flat.dtype, np.floating) else str(x) for x in flat.tolist())
    return f"[{body}{', ...' if a.size > PREVIEW else ''}]"


def device_of(v) -> str:
    dev = getattr(v, "device", None)
    if dev is not None and not isinstance(v, np.ndarray):
        return f"GPU:{getattr(dev, 'id', dev)}"
    return "CPU:0"


class Inspector:
    def __init__(self, addresses):
        self.addresses = addresses
        self.frames: list = []
        self.refs: dict = {}
        self.stop = None

    def reset(self, stop):
        self.stop = stop
        self.refs = {}
        self.frames = []
        if stop is None:
            return
        f, index = stop.frame, stop.index
        while f is not None:
            self.frames.append(("cell", f, index))
            parent = f.parent
            index = parent.index if parent is not None else 0
            f = parent
        for pf in stop.python_frames:
            self.frames.append(("py", pf))

    def _ref(self, producer) -> int:
        k = len(self.refs) + 1
        self.refs[k] = producer
        return k

    # --- stackTrace
    def stack_trace(self, start: int = 0, levels: int = 0) -> dict:
        out = []
        outer_ipr = None      # a Python frame is "at" the instruction its outermost Cell is running
        for fr in self.frames:
            if fr[0] == "cell":
                outer_ipr = hex(self.addresses.address(fr[1].code, fr[2]))
        for k, fr in enumerate(self.frames):
            if fr[0] == "cell":
                _, f, index = fr
                code = f.code
                ins = code.instrs[min(index, len(code.instrs) - 1)]
                loc = ins.loc
                out.append({
                    "id": k + 1, "name": f"{code.name} @0x{ins.offset:04x} {display_name(ins)}",
                    "source": {"name": os.path.basename(code.filename), "path": code.filename},
                    "line": loc.line, "column": _col1(code.filename, loc.line, loc.col),
                    "endLine": loc.end_line, "endColumn": _col1(code.filename, loc.end_line, loc.end_col),
                    "instructionPointerReference": hex(self.addresses.address(code, index)),
                })
            else:
                name, path, line = fr[1].name, fr[1].path, fr[1].line
                d = {"id": k + 1, "name": f"{name} (Python)", "line": line, "column": 1,
                     "source": {"name": os.path.basename(path), "path": path}, "presentationHint": "subtle"}
                if outer_ipr:
                    d["instructionPointerReference"] = outer_ipr
                out.append(d)
        total = len(out)
        out = out[start:start + levels] if levels else out[start:]
        return {"stackFrames": out, "totalFrames": total}

    def python_frame(self, frame_id):
        """The host program's frame (runtime.PyFrame) that frame id names, or None for a Cell frame."""
        try:
            fr = self.frame(frame_id)
        except KeyError:
            return None
        return fr[1] if fr[0] == "py" else None

    def frame(self, frame_id):
        k = (frame_id or 1) - 1
        if not 0 <= k < len(self.frames):
            raise KeyError(f"no frame {frame_id}")
        return self.frames[k]

    # --- scopes and variables
    def scopes(self, frame_id: int) -> list:
        fr = self.frame(frame_id)
        if fr[0] == "py":
            f_locals = fr[1].f_locals
            return [{"name": "Locals", "presentationHint": "locals", "expensive": False,
                     "variablesReference": self._ref(lambda: [self.var(n, v) for n, v in list(f_locals.items())
                                                              if not n.startswith("__")])}]
        _, f, index = fr
        scopes = [
            ("Locals", "locals", lambda: [self.var(n, v) for n, v in zip(f.code.varnames, f.locals)]),
            ("Operand stack", "registers", lambda: [self.var(f"[{k}]", v) for k, v in enumerate(f.stack)]),
            ("Metadata stack", "registers", lambda: [self.var(f"[{k}]", d) for k, d in enumerate(f.metadata_stack())]),
            ("Symbols", "registers", lambda: [self.var(n, v) for n, v in f.symbols.items()]),
            ("JIT", "registers", lambda: [self.var(n, v) for n, v in jit_state(f, index).items()]),
        ]
        return [{"name": name, "presentationHint": hint, "expensive": False, "variablesReference": self._ref(fn)}
                for name, hint, fn in scopes]

    def variables(self, ref: int) -> list:
        producer = self.refs.get(ref)
        return producer() if producer is not None else []

    def var(self, name: str, v, evaluate_name: str | None = None) -> dict:
        d = {"name": str(name), "value": describe(v), "type": _type_name(v), "variablesReference": 0}
        if evaluate_name or isinstance(name, str) and name.isidentifier():
            d["evaluateName"] = evaluate_name or name
        if isinstance(v, np.ndarray) or hasattr(v, "__cuda_array_interface__"):
            d["variablesReference"] = self._ref(lambda: self.tensor_fields(v))
        elif isinstance(v, (tuple, list)) and v:
            d["variablesReference"] = self._ref(lambda: [self.var(f"[{k}]", x) for k, x in enumerate(v)])
        elif isinstance(v, dict) and v:
            d["value"] = "{" + ", ".join(f"{k}: {x!r}" for k, x in list(v.items())[:6]) + "}"
            d["variablesReference"] = self._ref(lambda: [self.var(k, x) for k, x in v.items()])
        return d

    def tensor_fields(self, v) -> list:
        a = v.get() if not isinstance(v, np.ndarray) and hasattr(v, "get") else v
        fields = [("shape", tuple(v.shape)), ("dtype", str(v.dtype)), ("strides", tuple(v.strides)),
                  ("device", device_of(v)), ("preview", preview(v))]
        if a.size and np.issubdtype(a.dtype, np.number):
            fields += [("min", a.min().item()), ("max", a.max().item()), ("mean", float(a.mean()))]
        return [{"name": n, "value": str(x), "variablesReference": 0} for n, x in fields]

    # --- evaluate
    def evaluate(self, expression: str, frame_id: int | None) -> dict:
        names = self.names(frame_id)
        value = safe_eval(expression, names, self.unset(frame_id))
        d = self.var(expression, value, evaluate_name=expression)
        return {"result": d["value"], "type": d.get("type"), "variablesReference": d["variablesReference"]}

    def unset(self, frame_id) -> set:
        """Locals of the frame's Code without a value at this instruction."""
        if not self.frames:
            return set()
        fr = self.frame(frame_id)
        if fr[0] != "cell":
            return set()
        return {n for n, v in zip(fr[1].code.varnames, fr[1].locals) if v is None}

    def names(self, frame_id) -> dict:
        if not self.frames:
            return {"np": np}
        fr = self.frame(frame_id)
        if fr[0] == "py":
            return dict(fr[1].f_locals, np=np)
        _, f, _ = fr
        names = {"np": np, "numpy": np}
        names.update({k: v for k, v in f.symbols.items()})
        names.update({n: v for n, v in zip(f.code.varnames, f.locals) if v is not None})
        if f.stack:
            names["stack"] = list(f.stack)
            names["top"] = f.stack[-1]
        return names


def jit_state(f, index: int) -> dict:
    """The tier and kernels of the instruction at index (and the process's cache rate)."""
    from msvm import context

    code = f.code
    ins = code.instrs[min(index, len(code.instrs) - 1)]
    state = {"jit_level": context.jit_option("jit_level"), "instruction": display_name(ins),
             "operands": argrepr(code, ins)}
    if ins.parts:
        state["fused parts"] = [f"{p} @ line {pl.line}" for p, pl in ins.parts]
    site = code.__dict__.get("jit_sites", {}).get(index)
    if site is None:
        state["tier"] = "L1 (interpreter)"
    else:
        kernels = {}
        for level, table in (("L2", site.l2), ("L3", site.l3)):
            for _k, v in table.items():
                key = getattr(v, "key", None)
                kernels[f"{level} {len(kernels)}"] = f"{key[:16]}…" if key else str(v)
        best = [lv for lv, t in (("L3", site.l3), ("L2", site.l2)) if any(hasattr(v, "key") for v in t.values())]
        state["tier"] = f"{best[0]} (compiled)" if best else "L1 (interpreter; compiling or not compiled yet)"
        state["kernels"] = kernels or {"none": "no kernel for this shape yet"}
        # why each kernel was asked for, or failed (msvm/reasons.py; the CPU tier manager's sites)
        whys = [(k[0], r) for k, r in getattr(site, "why", {}).items() if k[0] in (2, 3)]
        if whys:
            state["why"] = {f"L{lv} {n}": f"{r.kind}: {r.text}" for n, (lv, r) in enumerate(whys)}
    tiers = sys.modules.get("msvm.compiler.tiers")
    if tiers is not None:
        s = tiers.stats()
        state["cache"] = f"{100 * s['hit_rate']:.1f}% hit ({s['hits']} hits, {s['misses']} misses)"
    return state


def _type_name(v) -> str:
    if isinstance(v, np.ndarray):
        return "Tensor"
    return type(v).__name__
