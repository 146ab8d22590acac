"""Profiles: what ran, what compiled, and where the time went, as one JSON document.

A ``Profiler`` subscribes to ``msvm.events`` and folds them into a report:

    {"version": 1, "script", "argv", "wall_ms",
     "codes": [{"name", "file", "line",
                "variants": [{"variant", "compile_ms", "reason_kind", "reason"}],
                "instructions": [{"offset", "op", "argrepr", "loc": [line, col, end_line, end_col],
                                  "parts": [{"op", "loc"}], "exec_ns", "exec_share",
                                  "compile_ms", "compile_share", "steps": {"Step1 Parse": ms, ...},
                                  "tiers": [{"level", "shape", "t_ms", "source", "reason_kind", "reason"}],
                                  "misses": [{"level", "reason_kind", "reason", "count"}],
                                  "l1": [{"reason_kind", "reason"}]}]}],
     "compiles": [compile events], "tiers": [tier events], "errors": [error events],
     "steps_total": {"Step1 Parse": ms, ...}, "cache": ms.cache_stats()}

Every compile, bytecode variant, miss and L1 decision carries ``reason_kind`` and ``reason``
(msvm.reasons): why it happened.

``msvm profile`` writes it as JSON and as a self-contained HTML page (``render_html``);
the language server forwards it to the editor's heatmap. Loc lines are 1-based,
columns 0-based, as in the bytecode.
"""

from __future__ import annotations

import collections
import json
import threading
import time

from . import events

VERSION = 1
STEPS = ("Step1 Parse", "Step2 Shape Resolution", "Step3 IR Generation", "Step4 Fusion",
         "Step5 Hardware Mapping", "Step6 Code Generation", "Step7 Kernel Cache")
_TYPES = ("bytecode", "exec", "compile", "tier", "error", "cache", "miss")


class Profiler:
    """Collects events while it is started; ``report()`` any time."""

    def __init__(self, script: str = "", argv=None):
        self.script, self.argv = script, list(argv or [])
        self.programs: dict = {}                    # code name -> function record (to_json form)
        self.exec_ns = collections.defaultdict(collections.Counter)   # code -> offset -> ns
        self.calls = collections.Counter()          # code -> Cell calls
        self.call_ms = collections.Counter()
        self.compiles: list = []
        self.tiers: list = []
        self.errors: list = []
        self.variants = collections.defaultdict(list)   # code -> [{variant, compile_ms, reason_kind, reason}]
        self.misses = collections.Counter()             # (code, offset, level, kind, reason) -> calls
        self.l1 = collections.defaultdict(dict)         # (code, offset) -> reason -> kind
        self.memory: dict = {}                       # code -> the most bytes its arena held, and unplanned
        self.t0 = time.time()
        self.lock = threading.Lock()
        self._unsub = None

    def start(self, exec_times: bool = True) -> "Profiler":
        """exec_times: time every instruction (slower; the heatmap's execution colours need it)."""
        self.t0 = time.time()
        self._unsub = events.subscribe(self, _TYPES, profile=exec_times)
        return self

    def stop(self) -> None:
        if self._unsub is not None:
            self._unsub()
            self._unsub = None

    def __call__(self, ev: dict) -> None:
        kind = ev["type"]
        with self.lock:
            if kind == "bytecode":
                for fn in (ev.get("program") or {}).get("functions", []):
                    self.programs[fn["name"]] = fn
                if "reason" in ev:
                    self.variants[ev.get("code")].append({"variant": ev.get("variant"),
                                                          "compile_ms": round(ev.get("compile_ms", 0.0), 4),
                                                          "reason_kind": ev.get("reason_kind"),
                                                          "reason": ev.get("reason")})
            elif kind == "exec":
                if "arena_bytes" in ev:             # (the memory plan's arena after a call)
                    m = self.memory.setdefault(ev["code"], {"arena_bytes": 0, "unplanned_bytes": 0})
                    m["arena_bytes"] = max(m["arena_bytes"], ev["arena_bytes"])
                    m["unplanned_bytes"] = max(m["unplanned_bytes"], ev.get("unplanned_bytes", 0))
                if "instr_ns" in ev:
                    c = self.exec_ns[ev["code"]]
                    for off, ns in ev["instr_ns"].items():
                        c[int(off)] += ns
                    self.calls[ev["code"]] += 1
                else:
                    if not events.profiling:      # without instruction times, count the calls here
                        self.calls[ev["code"]] += 1
                    self.call_ms[ev["code"]] += ev.get("ms", 0.0)
            elif kind == "compile":
                self.compiles.append(_plain(ev))
            elif kind == "tier":
                self.tiers.append(_plain(ev))
            elif kind == "error":
                self.errors.append(_plain(ev))
            elif kind == "miss":
                self.misses[(ev.get("code"), ev.get("offset"), ev.get("level"), ev.get("reason_kind"),
                             ev.get("reason"))] += 1
            elif kind == "cache" and ev.get("event") == "l1":
                self.l1[(ev.get("code"), ev.get("offset"))][ev.get("reason")] = ev.get("reason_kind")

    def report(self, cache: dict | None = None) -> dict:
        with self.lock:
            compile_at = collections.defaultdict(list)
            for c in self.compiles:
                compile_at[(c.get("code"), c.get("offset"))].append(c)
            tier_at = collections.defaultdict(list)
            for t in self.tiers:
                tier_at[(t.get("code"), t.get("offset"))].append(t)
            missed = collections.defaultdict(list)
            for (code, off, level, kind_, why), n in self.misses.items():
                missed[(code, off)].append({"level": level, "reason_kind": kind_, "reason": why, "count": n})
            total_exec = sum(sum(c.values()) for c in self.exec_ns.values()) or 1
            total_compile = sum(c.get("ms", 0.0) for c in self.compiles) or 1.0
            codes = []
            for name, fn in self.programs.items():
                instrs = []
                ns_of = self.exec_ns.get(name, {})
                for ins in fn["instructions"]:
                    off = ins["offset"]
                    comp = compile_at.get((name, off), [])
                    cms = sum(c.get("ms", 0.0) for c in comp)
                    steps = {s: round(sum(c.get("steps", {}).get(s, 0.0) for c in comp), 4) for s in STEPS} \
                        if comp else {}
                    instrs.append({
                        "offset": off, "op": ins["op"], "argrepr": ins["argrepr"], "loc": ins["loc"],
                        "parts": [{"op": p[0], "loc": p[1]} if isinstance(p, (list, tuple)) else p
                                  for p in ins.get("parts", [])],
                        "type": ins.get("type", ""),
                        "exec_ns": ns_of.get(off, 0), "exec_share": ns_of.get(off, 0) / total_exec,
                        "compile_ms": round(cms, 4), "compile_share": cms / total_compile if comp else 0.0,
                        "steps": steps,
                        "tiers": [{"level": c.get("level"), "shape": c.get("shape"), "source": c.get("source"),
                                   "t_ms": round((c.get("time", self.t0) - self.t0) * 1e3, 3),
                                   "reason_kind": c.get("reason_kind"), "reason": c.get("reason")} for c in comp],
                        "misses": missed.get((name, off), []),
                        "l1": [{"reason_kind": k, "reason": r} for r, k in self.l1.get((name, off), {}).items()],
                    })
                codes.append({"name": name, "file": fn.get("filename"), "line": fn.get("firstlineno"),
                              "calls": self.calls.get(name, 0), "call_ms": round(self.call_ms.get(name, 0.0), 4),
                              "variants": list(self.variants.get(name, [])), "instructions": instrs,
                              "memory_plan": _memory(fn.get("memoryPlan"), self.memory.get(name))})
            steps_total = {s: round(sum(c.get("steps", {}).get(s, 0.0) for c in self.compiles), 4) for s in STEPS}
            return {
                "version": VERSION, "script": self.script, "argv": self.argv,
                "wall_ms": round((time.time() - self.t0) * 1e3, 3),
                "codes": codes, "compiles": list(self.compiles), "tiers": list(self.tiers),
                "errors": list(self.errors), "steps_total": steps_total,
                "cache": cache if cache is not None else _cache_stats(),
            }


def _memory(plan, seen) -> dict | None:
    """A Code's memory plan for the report: buffers, the peak as an expression over its symbols, and the
    bytes its arena held (planned) against one buffer per value (unplanned), as measured in calls."""
    if not plan:
        return None
    out = {"buffers": plan.get("buffers"), "values": plan.get("values"), "peak": plan.get("peak"),
           "unplanned": plan.get("unplanned"), "slots": plan.get("slots", [])}
    if seen:
        out.update(seen)
    return out


def _cache_stats() -> dict:
    try:
        from .compiler.tiers import stats
    except ImportError:             # no llvmlite: the interpreter still runs
        return {"hits": 0, "misses": 0, "hit_rate": 0.0, "compiles": 0, "disk_loads": 0, "recent": []}
    return _plain(stats())


def _plain(v):
    """A JSON-safe copy (numpy scalars, dtypes and tuples become plain values)."""
    return json.loads(json.dumps(v, default=str))


# ---------------------------------------------------------------- the HTML report

def render_html(report: dict) -> str:
    """One self-contained page: every value escaped, no script, no network (see msvm.report.page)."""
    from .report.page import render

    return render(report)
