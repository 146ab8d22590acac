"""What a Cell's or jit function's forward takes in memory (issue 18): the memory plan of each of
its Codes (``compiler/memplan.py``) and what their arenas hold after the calls so far, and the peak
of one call as Python's allocation tracer sees it (numpy reports its arrays' memory there).

    msvm.memory.report(net)            # after a few calls: per Code and in total
    msvm.memory.peak_bytes(net, x)     # one more call, traced: its peak bytes above the start
"""

from __future__ import annotations

import tracemalloc

from .interp.arena import region_bytes


def _bounds(fn) -> list:
    runner = getattr(fn, "__dict__", {}).get("_runner") or getattr(fn, "_runner", None)
    if runner is None:
        return []
    out = []
    for var in runner.variants.values():
        out.append(var.bound)
        out.extend(b for b in var.runs.values() if b is not var.bound)
    return out


def report(fn) -> dict:
    """{"codes": [...], "arena_bytes", "unplanned_bytes", "region_bytes", "refused"} over every linked Code of ``fn``
    (a Cell or an ``ms.jit`` function) and its sub-Cells: per Code its plan (buffers, values, the peak
    as an expression), the bytes its arena lays out (planned, what the calls so far needed) and the
    bytes one buffer per planned value would take (unplanned, the same calls). Codes at one position
    of a call chain share memory (interp/arena.py): ``region_bytes`` is what the process's arenas
    actually hold, every thread's and every model's."""
    seen, codes, refused = set(), [], []
    todo = _bounds(fn)
    while todo:
        b = todo.pop()
        if id(b) in seen:
            continue
        seen.add(id(b))
        todo.extend(b.callees.values())
        mp = b.memplan
        if mp is None:
            why = getattr(b.code, "memplan_refused", None)
            if why:                       # (compiler/memplan.py refused it: it runs with a buffer per value)
                refused.append({"code": b.code.name, "reason": why})
            continue
        arenas = list(b.arenas)
        codes.append({"code": b.code.name, "buffers": len(mp.slots), "values": len(mp.values), "peak": str(mp.peak),
                      "arena_bytes": max((a.nbytes for a in arenas), default=0),
                      "unplanned_bytes": max((sum(a.asked.values()) for a in arenas), default=0),
                      "arenas": len(arenas)})
    return {"codes": codes, "arena_bytes": sum(c["arena_bytes"] for c in codes),
            "unplanned_bytes": sum(c["unplanned_bytes"] for c in codes), "region_bytes": region_bytes(),
            "refused": refused}


def peak_bytes(fn, *args, **kwargs) -> int:
    """The peak of the bytes allocated during one call ``fn(*args)`` above what was allocated at its
    start (tracemalloc: Python objects and numpy's array memory; memory a library allocates outside
    Python's tracer, such as BLAS's own buffers, is not seen)."""
    started = tracemalloc.is_tracing()
    if not started:
        tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        fn(*args, **kwargs)
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        if not started:
            tracemalloc.stop()
