"""Profiles: what ran, what compiled, and where the time went, as one JSON document.

A ``Profiler`` subscribes to ``msvm.events`` and folds them into a report:

    {"version": 1, "script", "argv", "wall_ms",
     "codes": [{"id", "name", "file", "line", "program", "label", "calls", "call_ms",
                "variants": [{"variant", "compile_ms", "reason_kind", "reason", "flags"}],
                "instructions": [{"offset", "op", "argrepr", "loc": [line, col, end_line, end_col],
                                  "parts": [{"op", "loc"}], "exec_ns", "exec_share",
                                  "compile_ms", "compile_share", "steps": {"Step1 Parse": ms, ...},
                                  "tiers": [{"level", "shape", "t_ms", "source", "reason_kind", "reason"}],
                                  "misses": [{"level", "reason_kind", "reason", "count"}],
                                  "l1": [{"reason_kind", "reason"}]}]}],
     "compiles": [compile events], "tiers": [tier events], "errors": [error events],
     "steps_total": {"Step1 Parse": ms, ...}, "cache": ms.cache_stats()}

One entry of ``codes`` per Code object that was announced (``id``: ``Code.uid``), in the order
they were: a Cell's bytecode variants, its flag specializations and the fused, planned copies of
its sub-Cells share a name and differ in their instructions, so every event that says where it
happened carries the Code's id and lands on the program that ran (its instructions after
specialization, fusion and the memory plan, fused parts with their locations). ``program``: the
id of the variant that entry was announced in (a sub-Cell's Code: its caller's variant);
``label``: which one, in words ("variant 2 (training=False)", "in Net.construct variant 1");
``variants``: the bytecode compile that made it (empty for a sub-Cell's Code). Times of a Code
the profiler never saw announced add up in ``unlisted_exec_ns``.

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
        # every key "code" below is a Code's id (Code.uid, the events' ``code_id``), or its name for an
        # event without one (then the last Code announced with that name)
        self.programs: dict = {}                    # code -> function record (to_json form), program, label
        self.by_name: dict = {}                     # code name -> the id last announced with it
        self.exec_ns = collections.defaultdict(collections.Counter)   # code -> offset -> ns
        self.calls = collections.Counter()          # code -> Cell calls
        self.call_ms = collections.Counter()
        self.compiles: list = []
        self.tiers: list = []
        self.errors: list = []
        self.variants = collections.defaultdict(list)   # code -> [{variant, compile_ms, reason_kind, reason, flags}]
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
                self._announced(ev)
            elif kind == "exec":
                code = self._code(ev)
                if "arena_bytes" in ev:             # (the memory plan's arena after a call)
                    m = self.memory.setdefault(code, {"arena_bytes": 0, "unplanned_bytes": 0})
                    m["arena_bytes"] = max(m["arena_bytes"], ev["arena_bytes"])
                    m["unplanned_bytes"] = max(m["unplanned_bytes"], ev.get("unplanned_bytes", 0))
                if "instr_ns" in ev:
                    c = self.exec_ns[code]
                    for off, ns in ev["instr_ns"].items():
                        c[int(off)] += ns
                    self.calls[code] += 1
                else:
                    if not events.profiling:      # without instruction times, count the calls here
                        self.calls[code] += 1
                    self.call_ms[code] += ev.get("ms", 0.0)
            elif kind == "compile":
                self.compiles.append(_plain(ev))
            elif kind == "tier":
                self.tiers.append(_plain(ev))
            elif kind == "error":
                self.errors.append(_plain(ev))
            elif kind == "miss":
                self.misses[(self._code(ev), ev.get("offset"), ev.get("level"), ev.get("reason_kind"),
                             ev.get("reason"))] += 1
            elif kind == "cache" and ev.get("event") == "l1":
                self.l1[(self._code(ev), ev.get("offset"))][ev.get("reason")] = ev.get("reason_kind")

    def _code(self, ev: dict):
        """The key of the Code an event happened in: its id, or (an event without one) the id last
        announced with its name, or the name itself."""
        uid = ev.get("code_id")
        if uid is not None:
            return uid
        name = ev.get("code")
        return self.by_name.get(name, name)

    def _announced(self, ev: dict) -> None:
        """A ``bytecode`` event: the program that will run, one record per Code object in it (callees
        first, each with its id from ``code_ids``; an event without them keys its functions by name)."""
        funcs = (ev.get("program") or {}).get("functions", [])
        ids = ev.get("code_ids") or [fn["name"] for fn in funcs]
        if not funcs or len(ids) != len(funcs):
            return
        root = ids[-1]                            # (to_json lists the callees first, the variant last)
        flags = ev.get("flags") or {}
        what = f"variant {ev.get('variant')}" + (
            " (" + ", ".join(f"{k}={v}" for k, v in flags.items()) + ")" if flags else "")
        for uid, fn in zip(ids, funcs):
            if uid in self.programs and uid != fn["name"]:   # (a Code already announced in another program)
                continue
            self.programs[uid] = {"fn": fn, "program": root,
                                  "label": what if uid == root else f"in {ev.get('code')} {what}"}
            self.by_name[fn["name"]] = uid
        if "reason" in ev:
            self.variants[root].append({"variant": ev.get("variant"),
                                        "compile_ms": round(ev.get("compile_ms", 0.0), 4),
                                        "reason_kind": ev.get("reason_kind"), "reason": ev.get("reason"),
                                        "flags": _plain(flags)})

    def report(self, cache: dict | None = None) -> dict:
        with self.lock:
            compile_at = collections.defaultdict(list)
            for c in self.compiles:
                compile_at[(self._code(c), c.get("offset"))].append(c)
            missed = collections.defaultdict(list)
            for (code, off, level, kind_, why), n in self.misses.items():
                missed[(code, off)].append({"level": level, "reason_kind": kind_, "reason": why, "count": n})
            total_exec = sum(sum(c.values()) for c in self.exec_ns.values()) or 1
            total_compile = sum(c.get("ms", 0.0) for c in self.compiles) or 1.0
            codes = []
            for uid, rec in self.programs.items():
                fn = rec["fn"]
                instrs = []
                ns_of = self.exec_ns.get(uid, {})
                for ins in fn["instructions"]:
                    off = ins["offset"]
                    comp = compile_at.get((uid, off), [])
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
                        "misses": missed.get((uid, off), []),
                        "l1": [{"reason_kind": k, "reason": r} for r, k in self.l1.get((uid, off), {}).items()],
                    })
                codes.append({"id": uid, "name": fn["name"], "file": fn.get("filename"), "line": fn.get("firstlineno"),
                              "program": rec["program"], "label": rec["label"],
                              "calls": self.calls.get(uid, 0), "call_ms": round(self.call_ms.get(uid, 0.0), 4),
                              "variants": list(self.variants.get(uid, [])), "instructions": instrs,
                              "memory_plan": _memory(fn.get("memoryPlan"), self.memory.get(uid))})
            listed = {(uid, ins["offset"]) for uid, rec in self.programs.items() for ins in rec["fn"]["instructions"]}
            unlisted = sum(ns for uid, c in self.exec_ns.items() for off, ns in c.items() if (uid, off) not in listed)
            steps_total = {s: round(sum(c.get("steps", {}).get(s, 0.0) for c in self.compiles), 4) for s in STEPS}
            return {
                "version": VERSION, "script": self.script, "argv": self.argv,
                "wall_ms": round((time.time() - self.t0) * 1e3, 3),
                "codes": codes, "unlisted_exec_ns": unlisted, "compiles": list(self.compiles), "tiers": list(self.tiers),
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
