"""Output buffers of streaming kernels: 64-byte aligned, and reused once nothing refers to them.

A streaming L3 kernel (its output bigger than the caches) writes whole aligned vectors with
non-temporal stores, so its output starts on a 64-byte boundary (numpy only promises 16).
Such an output is also big enough that fresh memory costs as much as the kernel's own
writes: the OS hands out zeroed pages, one extra pass over the whole buffer (a 64 MB
``np.empty`` filled once costs twice what refilling it does, ``bench/jit_bench.py``). So,
like the memory pools of MindSpore and of PyTorch's allocators, the blocks behind these
outputs are kept and handed out again.

A block is reused only when nothing but the pool refers to it. Every array made from it (the
output, and every view, slice or reshape of that output) refers to the block directly as its
``base`` (numpy points views at the array that owns the memory), so its reference count says
whether any of them is alive; a memoryview or another library's wrapper holds the array and so
the block. The pool keeps at most ``PER_SIZE`` blocks of one size and ``LIMIT`` bytes in all.
"""

from __future__ import annotations

import sys
import threading

import numpy as np

from .entry import data_pointer

ALIGN = 64                 # bytes: a whole vector per aligned store
POOL_MIN = 4 << 20         # bytes from which blocks are kept
PER_SIZE = 4
LIMIT = 1 << 30

_lock = threading.Lock()
_blocks: dict = {}         # block bytes -> [blocks]
_held = [0]


def _first_free(blocks: list, free: int):
    for b in blocks:
        if sys.getrefcount(b) <= free:
            return b
    return None


# the count of a block only the pool's list refers to, as _first_free sees it
_FREE = next(f for f in range(1, 16) if _first_free([np.empty(1)], f) is not None)


def _take(n: int):
    """A free block of n bytes, or a new one (kept by the pool while there is room)."""
    with _lock:
        blocks = _blocks.get(n)
        b = _first_free(blocks, _FREE) if blocks else None
        if b is not None:
            return b
        b = np.empty(n, np.uint8)
        if n >= POOL_MIN and _held[0] + n <= LIMIT and len(blocks or ()) < PER_SIZE:
            _blocks.setdefault(n, []).append(b)
            _held[0] += n
        return b


def aligned_empty(shape, d, align: int = ALIGN):
    """An uninitialized C-contiguous array of ``shape`` and ``d`` whose data starts on an
    ``align``-byte boundary, in a block of the pool where it is big enough to be kept."""
    d = np.dtype(d)
    n = int(np.prod(shape, dtype=np.int64)) * d.itemsize
    b = _take(n + align)
    off = -data_pointer(b) % align
    return b[off:off + n].view(d).reshape(shape)


def held() -> int:
    """Bytes the pool keeps (free or in use)."""
    return _held[0]
