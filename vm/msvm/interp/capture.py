"""A top-level replay's work captured once and run again as one straight list (as a CUDA graph is).

A replay (replay.py) still runs Python around every kernel: each sub-Cell's replay with its symbol
binding and arena, each site's prepared-caller check, each convolution caller's memo check. On
MobileNet v2 at 160 that is ~0.8 ms of a 2-3 ms forward (AMD Zen 5), while the same native calls
run back to back take the rest. For one exact signature every call does the same work on the
same buffers, so after ``CAPTURE_AFTER`` replays the next call is *recorded*: a variant of the
replay (``replay.build(..., record=True)``, the same path with every kernel, site and native-entry
call made through ``step``, sub-Cells through their own recording variants) runs on private
copies of the tensor arguments (``staging``), and each call it makes is kept with its arguments
and result. A convolution caller whose memo hit (conv.Memo: its native calls were the whole
convolution) is kept as private copies of those calls (``pool.Calls``), with the pointers they ran
with. The ``Program`` made from them is one generated function of those steps over the recorded
buffers; the sub-Cells' results, which a replay allocates per call, stay the recorded ones.

A later call of that replay runs the program instead: it copies the tensor arguments into the
staging arrays, runs the steps and returns copies of the recorded result (the caller may keep it;
the program writes it again next call). A step is kept as one of:

- native: the memo's calls (their pointers are the recorded buffers'),
- rerun: the call again, where it returned one of its arguments (it wrote into ``out``),
- copy: the call again and its result copied into the recorded one (a kernel that allocates),
- nothing: a result that is a view of an argument (a reshape) or of no array at all (a constant).

A value the data decides that is not an array (a Python number from a tensor) is refused. So is a
path that leaves the straight line: a site without a prepared caller (its tier may still change),
a sub-Cell the interpreter ran, a replay that fell back. A program runs only on the thread that
recorded it (the arenas' regions and the convolution workspaces are the thread's; known by its
arena stack, not by its identifier, which the next thread reuses once it exits), at the arena
depth it was recorded at, at the same jit_level, while each Parameter holds the array it held
(``set_data``), those arrays stay read-only (as conv.Memo asks) and no workspace has moved since;
anything else is a ``MISS`` (the replay runs) and, where the program is stale, drops it (a later
call records again). A step that raises drops it too, and the replay runs the call from the start
(every step on a replayed path is pure). Each program holds its own buffers, so at most
``PROGRAMS_MOST`` of one Cell are alive (``MSVM_CAPTURE_PROGRAMS``); a signature met after that is
replayed. ``MSVM_CAPTURE=0`` turns capturing off.
"""

from __future__ import annotations

import bisect
import ctypes
import os
import threading
import weakref

import numpy as np

from .. import events
from .arena import _stack
from .source import define

MISS = object()
CAPTURE_AFTER = 4       # replays of one signature before its work is recorded (then 2x as long after each refusal)
TRIES = 6               # recordings one signature may try (not counting the first, which fills the recording's caches)
WAIT_MOST = 256         # the most replays between two recordings
SETTLE = 3              # replays after one that met a site still compiling (a new caller keeps its native
#                         calls from its second call, conv.Memos: recorded sooner, it would be a Python step)
STEP_BYTES = 64 << 10   # bytes of arguments and result a program may copy per step it saves (else none is kept)
ENABLED = os.environ.get("MSVM_CAPTURE", "1") != "0"
# programs of one Cell alive at once: each holds its own buffers (a forward's intermediates, which a
# replay frees; BERT-base over a stream of 20 lengths held 51 MB more with 13 programs), so a stream of
# many shapes captures its first PROGRAMS_MOST signatures and replays the rest
PROGRAMS_MOST = int(os.environ.get("MSVM_CAPTURE_PROGRAMS", "8"))

TAP: list = [None]      # the recording's hook, called by a convolution memo that hit (conv.Memo.hit)
_REC: list = [None]     # the recording in progress
_lock = threading.Lock()


class NotCapturable(Exception):
    """This call's work cannot be captured; ``permanent``: nor any later call's of this signature."""

    def __init__(self, why: str, permanent: bool = False):
        super().__init__(why)
        self.permanent = permanent


def refuse(why: str, permanent: bool = False):
    """Stop the recording (called from the recording replay, whose fallback ends it)."""
    rec = _REC[0]
    if rec is not None and rec.why is None:
        rec.why, rec.permanent = why, permanent
    raise NotCapturable(why, permanent)


# ---------------------------------------------------------------- what the recording replay calls

def step(f, *a, **kw):
    """``f(*a, **kw)``, kept with its arguments and result (and the memo calls it ran)."""
    rec = _REC[0]
    n0 = len(rec.natives)
    r = f(*a, **kw)
    rec.add(f, a, kw, r, n0)
    return r


def step_into(f, inputs, out):
    """``f(inputs, out)``, a site or caller (``out``: the buffer it writes, None: one it allocates), kept
    as ``step`` keeps a call; the program passes it the recorded result as ``out``."""
    rec = _REC[0]
    n0 = len(rec.natives)
    r = f(inputs, out)
    rec.add(f, (inputs, out), None, r, n0, into=out is None)
    return r


def param(p):
    """A Parameter's array (``LOAD_PARAM``), kept with the Parameter: the program holds while it does."""
    d = p._data
    _REC[0].params[id(p)] = (p, d)
    return d


def hit(stats) -> None:
    """A site's prepared caller ran (its kernel cache's hit count: the program counts it per run)."""
    h = _REC[0].hits
    h[id(stats)] = (stats, h.get(id(stats), (stats, 0))[1] + 1)


def slow(site) -> None:
    """A site call took the site's own checks (no prepared caller yet, or other strides): its tier may
    still change, so this call makes no program (the recording replay's caches are warm next time)."""
    rec = _REC[0]
    if rec.why is None:
        rec.why = f"a site without a prepared caller: {site.where()}"


class _Recorder:
    def __init__(self):
        self.owner = _stack()           # (the thread's own object: its identifier is reused once it exits)
        self.natives: list = []         # (memo's private calls, keep, workspace check, result) since the last step
        self.items: list = []
        self.params: dict = {}
        self.hits: dict = {}
        self.why, self.permanent = None, False
        self.laid = None                # (bytes of the buffers the steps made, bytes of the one they share)
        self.moved = events.KERNELS_MOVED[0]     # (kernels replaced before the recording began: its callers are new)

    def tap(self, memo, out) -> None:
        if _stack() is self.owner:
            calls, keep, check = memo.frozen()
            self.natives.append((calls, keep, check, out))

    def add(self, f, a, kw, r, n0: int, into: bool = False) -> None:
        got = self.natives[n0:]
        del self.natives[n0:]
        if len(got) == 1 and r is got[0][3]:
            self.items.append(("native", f, got[0]))
        else:
            into = into and type(r) is np.ndarray and r.flags.writeable
            if into:
                a = (a[0], r)           # (it allocated its result: it writes the recorded one instead)
            self.items.append(("call", f, a, kw or {}, r, into))


# ---------------------------------------------------------------- the program

def _arrays(x, out: list) -> list:
    if type(x) is np.ndarray:
        out.append(x)
    elif type(x) in (tuple, list):
        for y in x:
            _arrays(y, out)
    elif type(x) is dict:
        for y in x.values():
            _arrays(y, out)
    return out


def _copy(x, own=frozenset()):
    """x with each array copied but those whose id is in ``own`` (a Parameter's array the result
    returns: the program never writes it, and a replay returns it as it is)."""
    if isinstance(x, np.ndarray):
        return x if id(x) in own else x.copy(order="K")
    if type(x) in (tuple, list):
        return type(x)(_copy(y, own) for y in x)
    return x


ALIGN = 64


def _ptr(a) -> int:
    return a.__array_interface__["data"][0]


def _span(a) -> tuple:
    """[lo, hi): the bytes a's elements lie in."""
    p = _ptr(a)
    if a.size == 0:
        return p, p
    lo = p + sum((n - 1) * s for n, s in zip(a.shape, a.strides) if s < 0)
    return lo, p + sum((n - 1) * s for n, s in zip(a.shape, a.strides) if s > 0) + a.itemsize


def _relocate(rec: _Recorder, result, outside: list):
    """Lay the buffers the recorded steps made (a sub-Cell's result, a kernel's allocation: arrays that
    own their memory, first seen as a step's result) out in one buffer by their lifetimes over the steps,
    as the memory plan lays out a frame's values, and point the steps at it: a replay frees each at its
    last use, and the program would otherwise hold them all (ResNet-50 at 224: 14 MB). Arrays in
    ``outside`` (the staging copies, the Parameters' arrays) are not moved. Returns the result, moved."""
    seen = {id(a) for a in outside}     # (arrays an earlier step read: made before the recording)
    made: dict = {}                     # id -> [array, first step, last step]
    for k, item in enumerate(rec.items):
        res = item[2][3] if item[0] == "native" else item[4]
        read = [] if item[0] == "native" else _arrays((item[2], item[3]), [])
        for y in _arrays(res, []):
            # (a step that reads no array is a constant the program never runs again: its result stays put)
            if id(y) not in seen and y.base is None and y.nbytes and y.flags.c_contiguous and \
                    (read or item[0] == "native"):
                made[id(y)] = [y, k, k]
            seen.add(id(y))
        seen.update(id(x) for x in read)
    if len(made) < 2:
        return result
    spans = sorted((*_span(b[0]), i) for i, b in made.items())
    los = [s[0] for s in spans]

    def owner(lo, hi):
        """The made buffer [lo, hi) lies in, None where it touches none; raises where it straddles one."""
        j = bisect.bisect_right(los, lo) - 1
        if j >= 0 and spans[j][0] <= lo and hi <= spans[j][1]:
            return spans[j][2]
        for s in spans[max(j, 0):j + 2]:
            if s[0] < hi and lo < s[1]:
                raise NotCapturable("an array straddles a buffer the steps made")
        return None

    def touch(k, x):
        if type(x) is np.ndarray and x.size:
            i = owner(*_span(x))
            if i is not None:
                made[i][2] = max(made[i][2], k)

    end = len(rec.items)
    for k, item in enumerate(rec.items):
        if item[0] == "native":
            for c in item[2][0]:
                for fn, args in c.calls:
                    for t, v in zip(fn.argtypes, args):
                        if t is ctypes.c_void_p and type(v) is int:
                            i = owner(v, v + 1)
                            if i is not None:
                                made[i][2] = max(made[i][2], k)
            touch(k, item[2][3])
        else:
            for x in _arrays((item[2], item[3], item[4]), []):
                touch(k, x)
    for x in _arrays(result, []):
        touch(end, x)
    # first fit by offset among the buffers alive at each one's first step (inclusive lifetimes: a
    # kernel's output never shares bytes with an input it reads at that step)
    offs, placed, total = {}, [], 0
    for i, (b, first, last) in sorted(made.items(), key=lambda e: (e[1][1], -e[1][0].nbytes)):
        live = sorted((o, o + n) for o, n, f, l in placed if not (l < first or last < f))
        need, at = -(-b.nbytes // ALIGN) * ALIGN, 0
        for lo, hi in live:
            if at + need <= lo:
                break
            at = max(at, hi)
        offs[i] = at
        placed.append((at, need, first, last))
        total = max(total, at + need)
    rec.laid = (sum(b[0].nbytes for b in made.values()), total)
    raw = np.empty(total + ALIGN, np.uint8)
    base = (-_ptr(raw)) % ALIGN
    pool = raw[base:base + total]
    moved: dict = {}

    def move(x):
        if type(x) is np.ndarray:
            if not x.size:
                return x
            i = owner(*_span(x))
            if i is None:
                return x
            got = moved.get(id(x))
            if got is None:
                b = made[i][0]
                got = moved[id(x)] = np.ndarray(x.shape, x.dtype, buffer=pool,
                                                offset=offs[i] + _ptr(x) - _ptr(b), strides=x.strides)
            return got
        if type(x) in (tuple, list):
            return type(x)(move(y) for y in x)
        if type(x) is dict:
            return {k: move(y) for k, y in x.items()}
        return x

    at = _ptr(pool)
    for k, item in enumerate(rec.items):
        if item[0] == "native":
            calls, kept, check, out = item[2]
            for c in calls:
                for n, (fn, args) in enumerate(c.calls):
                    for j, (t, v) in enumerate(zip(fn.argtypes, args)):
                        if t is ctypes.c_void_p and type(v) is int:
                            i = owner(v, v + 1)
                            if i is not None:
                                c.set(n, j, at + offs[i] + v - _ptr(made[i][0]))
            rec.items[k] = (item[0], item[1], (calls, kept, check, move(out)))
        else:
            _, f, a, kw, r, into = item
            rec.items[k] = ("call", f, move(a), move(kw), move(r), into)
    return move(result)


class Program:
    """The recorded steps as one function, and what must hold for it to run (module doc)."""

    def __init__(self, rec: _Recorder, staging: list, result, depth: int, config, alive: list):
        self.owner, self.depth, self.config = weakref.ref(rec.owner), depth, config
        self.level = config["jit_level"]
        self.moved = rec.moved
        self.staging = staging
        self.params = tuple(rec.params.values())
        self.own = frozenset(id(d) for _p, d in self.params)     # (held by params: the ids stay theirs)
        try:
            result = _relocate(rec, result, [s for _k, s in staging] + [d for _p, d in self.params])
        except NotCapturable:           # (then the buffers stay where the recording made them)
            pass
        self.result = result
        self.laid = rec.laid
        self.frozen = tuple({id(d): d for _p, d in self.params if type(d) is np.ndarray and not d.flags.writeable}.values())
        self.hits = tuple(rec.hits.values())
        ns: dict = {"copyto": np.copyto}
        lines, keep, gens = [], [], {}
        for item in rec.items:
            if item[0] == "native":
                _, f, (calls, kept, (ws, gen), out) = item
                keep += [f, kept, out]
                gens[id(ws)] = (ws, gen)
                for c in calls:
                    name = f"n{len(ns)}"
                    ns[name] = c
                    lines.append(f"    {name}()")
                continue
            _, f, a, kw, r, into = item
            args = _arrays((a, kw), [])
            keep += [f, a, kw, r]
            call = self._call(ns, f, a, kw)
            if into:                                         # (given its recorded result as out: written there?)
                name = f"y{len(ns)}"
                ns[name] = r
                lines += [f"    r = {call}", f"    if r is not {name}:", f"        copyto({name}, r)"]
                continue
            if any(r is x for x in args) or r is None:
                lines.append(f"    {call}")                # (it wrote into an argument: out=, an arena view)
                continue
            outs = _arrays(r, [])
            if type(r) is not np.ndarray and type(r) not in (tuple, list) or \
                    type(r) is not np.ndarray and len(outs) != len(r):
                if args:
                    raise NotCapturable(f"{getattr(f, '__name__', f)} returned {type(r).__name__}, a value of the data",
                                        permanent=True)
                continue                                     # (a constant: no array went in)
            fresh = [j for j, y in enumerate([r] if type(r) is np.ndarray else r)
                     if args and not any(y is x or np.may_share_memory(y, x) for x in args)]
            if not fresh:
                continue                                     # (views of its arguments, or a constant)
            lines.append(f"    r = {call}")
            for j in fresh:
                y = r if type(r) is np.ndarray else r[j]
                if not y.flags.writeable:
                    raise NotCapturable("a kernel's result is read-only", permanent=True)
                name = f"y{len(ns)}"
                ns[name] = y
                got = "r" if type(r) is np.ndarray else f"r[{j}]"
                lines += [f"    if {got} is not {name}:", f"        copyto({name}, {got})"]
        self.gens = tuple(gens.values())
        self.keep = keep
        src = "def program():\n" + ("\n".join(lines) or "    pass") + "\n"
        self.fn = define(src, "<msvm captured program>", ns, "program", keep=False)
        alive[0] += 1
        weakref.finalize(self, _freed, alive)

    @staticmethod
    def _call(ns: dict, f, a, kw) -> str:
        name = f"f{len(ns)}"
        ns[name] = f
        ns["a" + name], ns["k" + name] = a, kw
        return f"{name}(*a{name}, **k{name})" if kw else f"{name}(*a{name})"

    def valid(self) -> bool:
        """Whether what the steps point at is still what they were recorded with (False: stale)."""
        for p, d in self.params:
            if p._data is not d:
                return False
        for d in self.frozen:
            if d.flags.writeable:
                return False
        if events.KERNELS_MOVED[0] != self.moved:     # (a site's kernel replaced since: its callers are old)
            return False
        for ws, gen in self.gens:          # (the recording thread's Workspace, weakly: grown since?)
            w = ws()
            if w is None or w.gen != gen:
                return False
        return True


_ALIVE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def alive(bound) -> list:
    """[programs alive] of this BoundCode's signatures (a Cell's), shared by their Slots."""
    a = _ALIVE.get(bound)
    if a is None:
        a = _ALIVE[bound] = [0]
    return a


def _freed(count: list) -> None:
    count[0] -= 1


class Slot:
    """The capture of one top-level replay (one signature): counts its replays, records one, and
    runs its Program from then on (``__call__``: the result, or MISS where the replay must run)."""

    __slots__ = ("build", "on", "program", "wait", "count", "tries", "recorder", "config", "why", "alive", "refill")

    def __init__(self, build, config, alive: list):
        self.build = build              # () -> the recording replay, or None where there is none
        self.config = config            # the live jit_config
        self.alive = alive              # [programs alive] of every signature of this Cell's code
        self.on = ENABLED
        self.program = None
        self.wait, self.count, self.tries = CAPTURE_AFTER, 0, 0
        self.recorder = None            # the recording replay (built once: its caches warm on its first run)
        self.why = None                 # why the last recording made no program, or why none is kept
        self.refill = False             # a site's kernel moved: the recording replay's remembered callers are dropped

    def __call__(self, *args):
        p = self.program
        if p is not None:
            st, owner = _stack(), p.owner()
            if owner is None:           # (its thread exited: another records its own)
                self.program, self.tries, self.wait, self.count = None, 0, CAPTURE_AFTER, 0
                return MISS
            if owner is not st or st.depth != p.depth or self.config["jit_level"] != p.level:
                return MISS
            if not p.valid():
                if p.moved != events.KERNELS_MOVED[0]:    # (a site's kernel replaced: record again soon; this
                    self.tries = max(0, self.tries - 1)     # program's recording is not counted against TRIES,
                    self.wait, self.count = CAPTURE_AFTER, 0    # nor the next, which fills the recording replay's
                    self.refill = True                          # callers again, as a first one does)
                self.program = None
                return MISS
            for k, s in p.staging:
                np.copyto(s, args[k])
            try:
                p.fn()
            except Exception:           # noqa: BLE001 - the replay runs the call again and names any error
                self.program = None
                return MISS
            for stats, n in p.hits:
                stats["hits"] += n
            return _copy(p.result, p.own)
        self.count += 1
        if self.count < self.wait:
            return MISS
        self.count = 0
        return self.record(args)

    def record(self, args):
        """Run this call through the recording replay on copies of its tensors; keep its Program."""
        if self.tries >= TRIES:
            self.on = False
            return MISS
        self.tries += 1
        fresh, self.wait = self.recorder is None or self.refill, min(self.wait * 2, WAIT_MOST)
        self.refill = False
        staging, rargs = [], list(args)
        for k, a in enumerate(args):
            if type(a) is np.ndarray:
                if not a.flags.c_contiguous:
                    self.why = f"argument {k} is not C-contiguous"
                    self.on = False             # (the copy's strides would be another signature's)
                    return MISS
                s = np.empty_like(a, order="C")
                np.copyto(s, a)
                staging.append((k, s))
                rargs[k] = s
        if not _lock.acquire(blocking=False):
            return MISS
        try:
            fn = self.recorder
            if fn is None:
                fn = self.recorder = self.build() or False
            if fn is False:
                self.why = "no recording replay"
                self.on = False
                return MISS
            from .replay import FALLBACK

            rec = _REC[0] = _Recorder()
            TAP[0] = rec.tap
            depth = _stack().depth
            try:
                out = fn(*rargs)
            finally:
                _REC[0] = TAP[0] = None
            if out is FALLBACK or rec.why is not None:
                self.why = rec.why or "the recording replay fell back"
                if rec.permanent:
                    self.on = False
                elif out is not FALLBACK and fresh:     # (its first run filled the recording replay's caches:
                    self.tries -= 1                     # not counted as a try)
                    self.wait = SETTLE
                return MISS if out is FALLBACK else out      # (no program holds it: the caller's)
            own = {id(d) for _p, d in rec.params.values()}
            copied = sum(s.nbytes for _k, s in staging) + sum(a.nbytes for a in _arrays(out, []) if id(a) not in own)
            steps = sum(len(i[2][0]) if i[0] == "native" else 1 for i in rec.items)
            if copied > STEP_BYTES * steps:     # (a few kernels over large tensors: the copies would cost more)
                self.why = f"{copied} bytes copied for {steps} steps"
                self.on = False
                return out
            if self.alive[0] >= PROGRAMS_MOST:
                self.why = f"{self.alive[0]} programs of this Cell are alive (MSVM_CAPTURE_PROGRAMS={PROGRAMS_MOST})"
                self.on = False
                return out
            try:
                self.program, self.why = Program(rec, staging, out, depth, self.config, self.alive), None
            except NotCapturable as e:
                self.why = str(e)
                if e.permanent:
                    self.on = False
                return out
            return _copy(out, self.program.own)
        finally:
            _lock.release()
