"""Scratch memory per thread (issue 18): buffers a kernel's caller uses within one call and no value
outlives, grown to the largest request and then reused.

A convolution stages its image phases, windows and accumulators here (compiler/conv.py), and an
attention its scores and probabilities (compiler/attention_site.py). Per thread: two threads' calls
never share a buffer, and nothing a call leaves here is read by the next one. A buffer is replaced
only where a request is larger than it (with room to grow: pages.room, 64-byte aligned), which bumps
the thread's ``gen``: pointers taken into the old one (a conv ``Memo``'s kept calls, a captured
program's steps) are then stale (``stale``). Before the attention's buffers came here each attention
site kept its own pair per score shape (up to four shapes): at every new sequence length all of a
model's sites allocated and first-touched new ones (GPT-2 small, one core, the first call at a new
length: 950-1650 page faults), and a stream of lengths held 4 x 2 x sites of them (batch 8 at S=128:
12 sites x 8 x 6.3 MB).
"""

from __future__ import annotations

import threading

import numpy as np

from .. import pages


class Workspace:
    """One thread's workspaces: its buffers by slot, and how many times one was replaced (``gen``: a
    ``Memo``'s pointers into an older one are stale). A ``Memo`` or a captured program holds a weak
    reference to the one it was made on and runs only where the calling thread's is that same object:
    a thread's identifier (``threading.get_ident``) is reused by the next thread once it exits, and
    the exited thread's buffers are freed with it (a memo keyed by the identifier wrote into them)."""

    __slots__ = ("bufs", "gen", "__weakref__")

    def __init__(self):
        self.bufs: dict = {}
        self.gen = 0


_WS = threading.local()


def thread_workspace() -> Workspace:
    """The calling thread's ``Workspace``."""
    s = getattr(_WS, "s", None)
    if s is None:
        s = _WS.s = Workspace()
    return s


def stale(ws, gen: int) -> bool:
    """Whether pointers taken into the workspace ``ws`` (a weak reference) at generation ``gen`` no
    longer point at the calling thread's live workspace."""
    s = ws()
    return s is None or s is not getattr(_WS, "s", None) or s.gen != gen


def workspace(slot, n: int, d) -> np.ndarray:
    """A flat buffer of at least n elements of dtype d: the calling thread's for ``slot``, grown
    (never shrunk, with room: pages.room) to the largest request; its contents are whatever the last user left."""
    s = thread_workspace()
    d = np.dtype(d)
    nbytes = max(n, 1) * d.itemsize
    buf = s.bufs.get(slot)
    if buf is None or buf.nbytes < nbytes:
        # (64-byte aligned, huge pages from 2 MB, room to grow: pages.room; the old buffer is freed once
        # no view holds it)
        buf = s.bufs[slot] = pages.empty(pages.room(nbytes))[1]
        s.gen += 1
    return buf[:nbytes].view(d)


def workspace_bytes() -> int:
    """The calling thread's workspaces, in bytes (tests, the memory report)."""
    return sum(b.base.nbytes for b in thread_workspace().bufs.values())
