"""The garbage collector around msvm's long-lived objects (issue 18: the first call at a new size).

A compiled model is a large, long-lived graph of Python objects: its bytecode (Instr, Expr, Loc),
the Sites with their plans and prepared callers (closures), the kernels' ctypes functions.
ResNet-50 at one image size is ~100 000 tracked objects, and CPython's full collection walks every
one: 80-170 ms on this machine (an AMD EPYC VM; ~1 us an object, the walk misses the caches).
The first call at a new size makes plans and callers for the new shapes (tens of thousands of
objects), which is what triggers a full collection (generation 2 runs once the objects promoted
since the last one exceed a quarter of those it kept), so that call paid it: ResNet-50 at 160 after
224, 248 ms of which 101 ms in the collector, against ~35 ms steady (bench: "new size").

``settle()``, called by the call path after a call that resolved a new signature or wrote a
replay, moves every object alive then into the permanent generation (``gc.freeze``: O(1)),
so later collections walk only what is newer: the same first call measured 109 ms with 0.7 ms
in the collector. Frozen objects are never collected by the cycle collector, so a model dropped
while frozen would stay (its Parameters too) if it lies in a reference cycle, as Cells do; so the
next Cell made (``Cell.__init__`` calls ``thaw()``) puts them back (``gc.unfreeze``), and the next
full collection reclaims what was dropped: a process that builds models keeps today's collector,
one that serves a model no longer pays for walking it. MSVM_GC_FREEZE=0 turns it off; nothing
happens where the collector is disabled (``gc.disable``: the user's choice).

A Site that prepares the fast caller of an L3 kernel that landed in the background (a shape already
seen, so no new signature follows) settles too: its callers are long-lived and are made after the
signature's own ``settle``. Left in the young generations they made the first call at the next new
size pay a generation-1 collection of them (MobileNet v2 at 160 after 224: ~6 500 objects,
0.8 ms of a 10 ms call).
"""

from __future__ import annotations

import gc
import os

_frozen = [False]       # whether settle() froze objects that thaw() has not put back


def enabled() -> bool:
    return os.environ.get("MSVM_GC_FREEZE", "1") != "0" and gc.isenabled()


def settle() -> None:
    """After a call that built plans, callers or a replay: freeze what is alive (see the module)."""
    if enabled():
        gc.freeze()
        _frozen[0] = True


def hold() -> bool:
    """Before a call that resolves a new signature: the collector waits until it is over (``release``).
    Such a call makes plans, callers and kernels' objects, all long-lived, so its young collections
    walk them to no gain (MobileNet v2's first call at 160 after 224: three, 0.22 ms of a 7 ms call);
    the garbage it makes is one call's. Returns whether it turned the collector off."""
    if enabled():
        gc.disable()
        return True
    return False


def release(held: bool, built: bool) -> None:
    """After the call that ``hold`` preceded: where it returned (``built``), what it built is settled
    (``settle``) before the collector comes back, so that its first collection does not walk it
    (a generation-0 walk of all of it: 0.26 ms); the collector as it was, whether it returned or raised."""
    if held:
        if built:
            gc.freeze()
            _frozen[0] = True
        gc.enable()


def thaw() -> None:
    """A Cell is being made: give the frozen objects back to the collector (see the module)."""
    if _frozen[0]:
        _frozen[0] = False
        gc.unfreeze()
