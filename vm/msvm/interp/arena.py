"""The run-time side of the memory plan (``compiler/memplan.py``): one frame's arena.

A Code's arena lays its planned slots out one after another (each 64-byte aligned: a streaming
kernel's output must be) in a *region*: the memory of one position on the calling thread's stack
of open arenas. A call opens its arena at ALLOC_DEVICE_MEM on the next free position and closes it
at FREE_DEVICE_MEM; frames on one thread open and close in nested order, so the frames at one
position never overlap in time, and sibling sub-Cells (``layer1`` then ``layer2``, one Bottleneck
after another) share one region: a model's arenas take the largest per position of its call
chain, not the sum over its Codes. Nothing in a region outlives its frame (a planned value never
escapes it), and a thread's regions are its own, so two threads never share memory.

A slot grows to the largest size asked of it and then stays: later calls at that shape or smaller
ones allocate nothing. A layout that changes while the frame holds views (the interpreter meeting
a larger shape) moves to a fresh region buffer, so values already made keep theirs.

Arenas (their layouts and cached views) are pooled per linked Code (``BoundCode.arenas``): a call
takes one at ALLOC and gives it back at FREE (``list.pop`` and ``append`` are atomic), so calls in
flight on two threads, or nested, never share one. A frame that raises closes and drops its arena.
"""

from __future__ import annotations

import math
import threading
import weakref

import numpy as np

from .. import pages

ALIGN = 64
CACHE = 32           # bound view lists kept per arena (one per replayed signature)

_local = threading.local()
_RAWS: weakref.WeakValueDictionary = weakref.WeakValueDictionary()      # id -> every region buffer's owner
REGIONS: weakref.WeakSet = weakref.WeakSet()                             # every thread's regions


class Region:
    """The memory of one position of a thread's arena stack."""

    __slots__ = ("raw", "buf", "size", "used", "gen", "__weakref__")

    def __init__(self):
        self.raw = self.buf = None
        self.size = 0                 # the buffer's bytes (pages.room: more than asked)
        self.used = 0                 # the most bytes a layout in it asked for
        self.gen = 0

    def fresh(self, n: int) -> None:
        """A new buffer of at least n bytes, with room to grow (the old one stays alive while views of
        it do)."""
        n = max(n, self.used, ALIGN)
        cap = pages.room(n)
        raw, self.buf = pages.empty(cap)
        self.raw, self.size, self.used = raw, cap, n
        _RAWS[id(raw)] = raw
        self.gen += 1

    def ask(self, n: int) -> None:
        """A layout of n bytes in this buffer: the buffer is replaced where it is too small."""
        if self.buf is None or self.size < n:
            self.fresh(n)
        elif self.used < n:
            self.used = n


class _Stack:
    def __init__(self):
        self.regions: list = []
        self.depth = 0


def _stack() -> _Stack:
    st = getattr(_local, "stack", None)
    if st is None:
        st = _local.stack = _Stack()
    return st


def region_bytes() -> int:
    """Bytes of every thread's arena regions that their layouts asked for (the most each touches; the
    buffers' room beyond it is address space only: pages.room)."""
    return sum(r.used for r in list(REGIONS))


def _up(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


class Arena:
    __slots__ = ("caps", "offs", "total", "region", "gen", "pos", "handed", "views", "cache", "grown", "asked")

    def __init__(self, nslots: int):
        self.caps = [0] * nslots
        self.offs = [0] * nslots
        self.total = 0
        self.region = None
        self.gen = -1
        self.pos = None
        self.handed = False               # views handed out since open (then a new layout needs fresh memory)
        self.views: dict = {}             # instruction index -> its last view (the interpreter's)
        self.cache: dict = {}             # replay key -> its views
        self.grown = 0                    # layouts grown: stays put once the largest shape was seen
        self.asked: dict = {}             # instruction index -> the most bytes its value took (one buffer each)

    @property
    def nbytes(self) -> int:
        return self.total

    # --- open and close (ALLOC_DEVICE_MEM / FREE_DEVICE_MEM)
    def open(self) -> None:
        st = _stack()
        d = st.depth
        if d == len(st.regions):
            r = Region()
            st.regions.append(r)
            REGIONS.add(r)
        r = st.regions[d]
        st.depth = d + 1
        self.pos, self.handed = d, False
        if self.region is not r:
            self.region = r
            self.gen = -1
        if r.buf is None or r.used < self.total:
            r.ask(self.total)
        if self.gen != r.gen:             # (another Code at this position moved the region)
            self.views.clear()
            self.cache.clear()
            self.gen = r.gen

    def reserve(self, sizes) -> None:
        """Slots of at least these sizes (slot -> bytes, or None where unknown), laid out at once:
        ALLOC_DEVICE_MEM gives the plan's slot sizes at this call's symbols, so a call at a larger shape
        moves the arena to one fresh buffer, not one per instruction that finds its slot too small
        (each into memory of its own: MobileNet v2 from 224 to 256 made 53 and touched ~2000 new pages)."""
        caps = self.caps
        need = {k: n for k, n in enumerate(sizes) if n is not None and n > caps[k]}
        if need:
            self._need(need)

    def close(self) -> None:
        if self.pos is not None:
            _stack().depth = self.pos
            self.pos = None

    def _need(self, sizes: dict) -> None:
        """Slots k of at least sizes[k] bytes: a new layout, in the region or, when views of this call
        are out, in a fresh buffer."""
        grow = False
        for k, n in sizes.items():
            if n > self.caps[k]:
                self.caps[k] = _up(n)
                grow = True
        if not grow:
            return
        self.grown += 1
        off = 0
        for k, c in enumerate(self.caps):
            self.offs[k] = off
            off += c
        self.total = off
        r = self.region
        if self.handed:
            r.fresh(off)
        else:
            r.ask(off)
        self.views.clear()
        self.cache.clear()
        self.gen = r.gen

    def _make(self, k: int, shape, dtype, n: int):
        o = self.offs[k]
        return self.region.buf[o:o + n].view(dtype).reshape(shape)

    # --- the views planned instructions write into
    def view(self, i: int, k: int, shape: tuple, dtype):
        """Instruction i's output buffer in slot k, for this shape (the interpreter's)."""
        v = self.views.get(i)
        if v is not None and v.shape == shape:
            return v
        n = int(math.prod(shape)) * dtype.itemsize
        if n > self.asked.get(i, 0):
            self.asked[i] = n
        if n > self.caps[k]:
            self._need({k: n})
        self.handed = True
        v = self.views[i] = self._make(k, shape, dtype, n)
        return v

    def bind(self, key, layout: tuple) -> list:
        """Open, and the views of one replayed path: layout = ((instruction, slot, shape, dtype, nbytes), ...)."""
        self.open()
        vs = self.cache.get(key)
        if vs is not None:
            return vs
        asked, need = self.asked, {}
        for i, k, _shape, _d, n in layout:
            if n > asked.get(i, 0):
                asked[i] = n
            need[k] = max(need.get(k, 0), n)
        self._need(need)
        self.handed = True
        vs = [self._make(k, shape, d, n) for _i, k, shape, d, n in layout]
        if len(self.cache) >= CACHE:
            self.cache.clear()
        self.cache[key] = vs
        return vs

    @staticmethod
    def owns(a) -> bool:
        base = getattr(a, "base", None)
        return base is not None and _RAWS.get(id(base)) is base

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
