"""The event bus. Events are plain dicts with a ``type`` key:

- ``bytecode``: a Code was compiled (``code``, ``file``, ``instructions``, ``signature``)
- ``exec``: a Cell call ran (``code``, ``ms``), or per-instruction times (``instr_ns``)
  when a subscriber asked for profiling
- ``compile``, ``cache``, ``tier``: the JIT's steps (later tiers)
- ``error``: something failed that the user should see

``subscribe(fn)`` returns an unsubscribe function. This module imports nothing
from msvm, so every layer may import it.
"""

from __future__ import annotations

import threading
import time

_subs: list = []
_lock = threading.Lock()
profiling = False   # when True the interpreter times every instruction
_profilers = 0
# why calls must go through the interpreter, one name per reason ("subscribers", "trace", "L1"):
# the executor's fast paths (replays, guards) check this one set instead of each module's state
SLOW: set = set()
# bumped where a site's kernel is replaced under its callers (a polymorphic site's shape-generic kernel compiled
# again optimized: compiler/tiers.py ``Site._promote``): replays drop the callers they remember, captured
# programs are stale (interp/replay.py, interp/capture.py)
KERNELS_MOVED: list = [0]


def subscribe(fn, types=None, profile: bool = False):
    """Call fn(event) for every event (or only those whose type is in ``types``)."""
    global profiling, _profilers
    entry = (fn, frozenset(types) if types else None, profile)
    with _lock:
        _subs.append(entry)
        SLOW.add("subscribers")
        if profile:
            _profilers += 1
            profiling = True

    def unsubscribe():
        global profiling, _profilers
        with _lock:
            if entry in _subs:
                _subs.remove(entry)
                if not _subs:
                    SLOW.discard("subscribers")
                if profile:
                    _profilers -= 1
                    profiling = _profilers > 0
    return unsubscribe


def active() -> bool:
    return bool(_subs)


def emit(event: dict) -> None:
    if not _subs:
        return
    event.setdefault("time", time.time())
    for fn, types, _ in list(_subs):
        if types is None or event["type"] in types:
            try:
                fn(event)
            except Exception:  # noqa: BLE001 - a broken subscriber must not break the program
                pass
