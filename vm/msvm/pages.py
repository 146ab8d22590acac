"""Large scratch buffers backed by transparent huge pages (issue 18: the first call at a larger size).

An arena region or a convolution's workspace that grows is fresh memory, and on a KVM guest each
4 KB page of it costs a fault on first touch (about 10 us, up to 14; MobileNet v2 going from 224 to
256 touched ~2000 new pages in its first call: 15-75 ms against its 7 ms steady forward). Linux
backs a 2 MB-aligned extent of an anonymous mapping with one huge page where the mapping is
advised so (``madvise(MADV_HUGEPAGE)``; the system default here is "madvise"): one fault per 2 MB.

``empty(n)`` gives n bytes, ALIGN-aligned, from numpy (so the allocation tracer that
``msvm.memory.peak_bytes`` reads sees it) with the 2 MB extents inside it advised before anything
touches them. Buffers under HUGE bytes stay plain: a huge page would round them up in the resident
set. Where the advice is refused (another OS, THP off) the buffer is plain memory.
"""

from __future__ import annotations

import ctypes
import sys

import numpy as np

HUGE = 2 << 20            # the huge page size on x86-64 and arm64 Linux
ALIGN = 64
ROOM = 1.5                # a buffer that grows takes this much more than it is asked (``room``)
_MADV_HUGEPAGE = 14

_libc: list = []


def _advise(addr: int, length: int) -> bool:
    if not _libc:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
            _libc.append(libc if sys.platform.startswith("linux") else None)
        except (OSError, AttributeError, TypeError):
            _libc.append(None)
    return _libc[0] is not None and _libc[0].madvise(addr, length, _MADV_HUGEPAGE) == 0


def empty(n: int) -> tuple:
    """(owner, buf): ``buf`` n bytes (uint8), ALIGN-aligned, a view of ``owner``; from HUGE bytes on,
    its whole 2 MB extents advised to be huge pages before first touch."""
    n = max(int(n), 1)
    if n < HUGE:
        raw = np.empty(n + ALIGN, np.uint8)
        off = (-raw.ctypes.data) % ALIGN
        return raw, raw[off:off + n]
    raw = np.empty(n + HUGE, np.uint8)          # (room to start on a 2 MB boundary: untouched, not resident)
    base = raw.ctypes.data
    off = (-base) % HUGE
    _advise(base + off, n // HUGE * HUGE)      # (whole extents: the tail stays in small pages, none rounded up)
    return raw, raw[off:off + n]


def room(n: int) -> int:
    """The bytes to allocate for a scratch buffer (an arena region, a convolution's workspace) asked
    for n: ROOM times n, so that a call at a somewhat larger size (224 -> 256 is 1.31x the pixels) finds
    the buffer large enough and touches only the pages beyond what it used before, where a buffer of
    exactly n is replaced and every page of the new one faults again. The room is address space: a
    page nothing touches is not resident. Measured (AMD EPYC Zen 5, a KVM guest, MobileNet v2 warmed at
    224 then 160 and 192, its first call at 256, alternating processes): one core 35.5-37.2 -> 11.6-16.0
    ms, two cores 21.7-30.1 -> 14.0-15.4 (a steady forward 7.2 / 5.2)."""
    return -(-int(n * ROOM) // ALIGN) * ALIGN
