"""The run-time side of the memory plan (``compiler/memplan.py``): one frame's arena.

An arena has one buffer per planned slot, 64-byte aligned (a streaming kernel's output must be),
that grows to the largest size asked of it and then stays: later calls at that shape or smaller
ones allocate nothing. A planned instruction gets a view of its slot (``view``; a replay binds
all of its views at once, ``bind``) and writes its result there through ``out=``.

Arenas are pooled per linked Code (``BoundCode.arenas``): a call takes one at ALLOC_DEVICE_MEM and
gives it back at FREE_DEVICE_MEM, so two threads calling one Cell, or a Cell whose call nests
another call of itself, never share one (``list.pop`` and ``append`` are atomic). A frame that
raises drops its arena.
"""

from __future__ import annotations

import numpy as np

ALIGN = 64
CACHE = 32           # bound view lists kept per arena (one per replayed signature)


class Arena:
    __slots__ = ("raws", "bufs", "caps", "views", "cache", "grown", "asked")

    def __init__(self, nslots: int):
        self.raws = [None] * nslots      # the owning arrays (every view's ``base``)
        self.bufs = [None] * nslots      # their aligned uint8 windows
        self.caps = [0] * nslots
        self.views: dict = {}            # instruction index -> its last view (the interpreter's)
        self.cache: dict = {}            # replay key -> its views
        self.grown = 0                   # buffers (re)allocated: stays put once the largest shape was seen
        self.asked: dict = {}            # instruction index -> the most bytes its value took (one buffer each)

    @property
    def nbytes(self) -> int:
        return sum(self.caps)

    def _grow(self, k: int, n: int) -> None:
        n = max(n, ALIGN)
        raw = np.empty(n + ALIGN, np.uint8)
        off = (-raw.ctypes.data) % ALIGN
        self.raws[k], self.bufs[k], self.caps[k] = raw, raw[off:off + n], n
        self.grown += 1
        self.views.clear()               # views of the old buffer stay valid for whoever holds them
        self.cache.clear()

    def _make(self, k: int, shape, dtype, n: int):
        return self.bufs[k][:n].view(dtype).reshape(shape)

    def view(self, i: int, k: int, shape: tuple, dtype):
        """Instruction i's output buffer in slot k, for this shape."""
        v = self.views.get(i)
        if v is not None and v.shape == shape:
            return v
        n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if n > self.caps[k] or self.bufs[k] is None:
            self._grow(k, n)
        if n > self.asked.get(i, 0):
            self.asked[i] = n
        v = self.views[i] = self._make(k, shape, dtype, n)
        return v

    def bind(self, key, layout: tuple) -> list:
        """The views of one replayed path: layout = ((instruction, slot, shape, dtype, nbytes), ...)."""
        vs = self.cache.get(key)
        if vs is not None:
            return vs
        asked = self.asked
        for i, _k, _shape, _d, n in layout:
            if n > asked.get(i, 0):
                asked[i] = n
        need: dict = {}
        for _i, k, _shape, _d, n in layout:
            need[k] = max(need.get(k, 0), n)
        for k, n in need.items():
            if n > self.caps[k] or self.bufs[k] is None:
                self._grow(k, n)
        vs = [self._make(k, shape, d, n) for _i, k, shape, d, n in layout]
        if len(self.cache) >= CACHE:
            self.cache.clear()
        self.cache[key] = vs
        return vs

    def owns(self, a) -> bool:
        base = getattr(a, "base", None)
        return base is not None and any(base is r for r in self.raws)

    def settle(self, r, out):
        """A planned instruction's result that is not its buffer: kept as it is, unless it is arena
        memory (a kernel that returned a view of its input), which a later value may overwrite: then
        copied into the instruction's own buffer (or out of the arena)."""
        if type(r) is not np.ndarray or not self.owns(r):
            return r
        if r.shape == out.shape and r.dtype == out.dtype and not np.shares_memory(r, out):
            np.copyto(out, r)
            return out
        return r.copy()
