"""Two threads on one kernel's work, handed over by spinning (issue 18: two-thread scaling).

Where a product is shared by two threads (a convolution's columns, a packed Dense product's panels,
a depthwise layer's planes), it is cut into tasks (``parts``: PARTS ranges of whole panels,
cache lines or planes), and the calling thread and the pool's claim them in turn. Handed over
through an OS primitive (a ``ThreadPoolExecutor``'s queue, then ``Future.result``), each split
waited twice for the scheduler: to wake the pool's thread and to wake the caller when it was done.
Measured on a KVM guest with two vCPUs (AMD Zen 3), a futex wake-up of an idle thread took a median
90-300 us, 1.2 ms at the 99th percentile, up to 40 ms; ResNet-50 at 224, with 52 split convolutions
per forward, ran 146.7 ms on two threads against 160.4 on one. onnxruntime's pool, OpenMP and
OpenBLAS spin instead, and so does this one:

- the pool's thread runs ``LOOP``, native code that watches the control block's batch word
  (seq << 32 | next << 16 | count) and claims tasks by a compare-and-swap of next, runs them and
  counts them done, for up to SPIN_SECONDS (MSVM_POOL_SPIN_US) after its last task; then it blocks
  on a condition variable until the next post;
- the caller writes the tasks (per call: a trampoline for its signature, its address and its
  arguments packed as 64-bit words: a ``Batch`` of buffers of its own, kept by the tasks as a key,
  since a replay splits the same products with the same pointers every call and then only the task
  heads are written), then in one native call (``POST``) posts the batch, claims
  tasks the same way until none is left, and spins until every task is done. A pool thread that is
  asleep, late or descheduled (another thread spinning on its core: onnxruntime's, in the bench's
  process) costs at most the task it holds: the caller takes the rest.

Into how many tasks: two. More tasks balance a late pool thread better but cut each product into
smaller ones; measured (AMD Zen 3, two cores, forwards alternating between the settings in one
process, median of the per-round ratios to PARTS = 2): PARTS = 4 1.12x (MobileNet v2 at 224), 1.06x
(ResNet-50 at 224), 1.03x (BERT-base at S=16); PARTS = 8 1.23x / 1.15x / 1.09x; with an onnxruntime
session running between the forwards (its threads spinning on the same two cores) the same order,
PARTS = 8 1.5x / 1.2x.

Both threads run the tasks in native code without the GIL, so a caller holding the GIL does not
hold the pool's thread up. Each task computes the same elements with the same code whichever thread
runs it (the packed and taps products, the depthwise kernels: the same bits as one thread; the BLAS
route's, conv.BlasConv, to rounding, as OpenBLAS picks its kernels by the product's size). One
caller at a time: a thread that finds the pool busy runs its tasks itself.

The control function and each trampoline are kernels like any other (``PoolCode``, compiled once,
kept in the kernel cache). x86-64 only (PAUSE, the time-stamp counter); elsewhere ``share`` falls
back to callconv.submit's pool.
"""

from __future__ import annotations

import ctypes
import math
import os
import struct
import threading
import time
from dataclasses import dataclass

SPIN_ENV = "MSVM_POOL_SPIN_US"   # how long the pool's thread spins for the next batch before it sleeps (us)
SPIN_SECONDS = 2e-3              # (by default)
SLOTS = 64                # tasks per batch (more: all on the caller's thread)
CALLS = 512               # calls per batch (more: all on the caller's thread)
PARTS = 2                 # tasks a split product is cut into (``parts``; more measured slower, module doc)
WORD, DONE, TASKS = 0, 8, 16          # the control block's words: (seq, next, count), tasks done, the tasks
POST, LOOP, TICKS, RUN = 0, 2, 3, 4    # the control function's operations (POST: post, then work; RUN: calls here)

_WORD = {ctypes.c_int64: "i64", ctypes.c_void_p: "ptr", ctypes.c_double: "double", ctypes.c_float: "float"}
_LLVM = {"i64": "i64", "ptr": "i8*", "double": "double", "float": "float"}


@dataclass(frozen=True)
class PoolCode:
    """A kernel of the pool: ``sig == ()`` the control function, else the trampoline that calls a
    kernel of that signature (callconv's argument kinds) with its arguments read from 64-bit words."""
    sig: tuple = ()

    dtype = "none"

    @property
    def kind(self) -> str:
        return "pool" if not self.sig else "tramp"

    @property
    def name(self) -> str:
        return "pool" if not self.sig else "tramp_" + "".join(s[0] for s in self.sig)

    def text(self) -> str:
        layout = f"word={WORD} done={DONE} tasks={TASKS} batch=seq32:next16:count16"
        return f"pool sig={','.join(self.sig)}" if self.sig else f"pool control {layout}"


def lower_pool(k: PoolCode, name: str, features: str) -> str:
    return _tramp_ir(k.sig, name) if k.sig else _control_ir(name)


def _tramp_ir(sig: tuple, name: str) -> str:
    """``void name(i8* fn, i64* words)``: fn(words[0], words[1], ...) as sig's types."""
    L = [f"define void @{name}(i8* %fn, i64* %w) nounwind {{", "entry:"]
    args = []
    for j, kind in enumerate(sig):
        L.append(f"  %p{j} = getelementptr i64, i64* %w, i64 {j}")
        L.append(f"  %v{j} = load i64, i64* %p{j}, align 8")
        if kind == "ptr":
            L.append(f"  %a{j} = inttoptr i64 %v{j} to i8*")
        elif kind == "double":
            L.append(f"  %a{j} = bitcast i64 %v{j} to double")
        elif kind == "float":
            L.append(f"  %h{j} = trunc i64 %v{j} to i32")
            L.append(f"  %a{j} = bitcast i32 %h{j} to float")
        else:
            L.append(f"  %a{j} = add i64 %v{j}, 0")
        args.append(f"{_LLVM[kind]} %a{j}")
    fty = f"void ({', '.join(_LLVM[k] for k in sig)})*"
    L += [f"  %f = bitcast i8* %fn to {fty}", f"  call void %f({', '.join(args)})", "  ret void", "}"]
    return "\n".join(L) + "\n"


def _control_ir(name: str) -> str:
    """``i64 name(i64 op, i64* ctl, i64 x)``. The batch word WORD holds (seq << 32 | next << 16 | count):
    a task is claimed by a compare-and-swap of next -> next + 1 on the whole word (so a stale view
    of an earlier batch never claims: seq differs), run (its calls in order), and counted in DONE.
    POST: store x into WORD (release: the tasks written before it are seen with it), then WORK:
          claim and run tasks until none is left, spin until DONE = count (the caller's part), and
          return how many it ran (one native call: an interrupt cannot fall between posting a batch
          and waiting for it, leaving tasks to run on freed arguments);
    LOOP: claim and run tasks as batches are posted, until x ticks pass without one (the pool's thread);
    RUN: run the x calls at ctl (a task's calls: ``inline``), on the calling thread;
    TICKS: the time-stamp counter."""
    return f"""declare i64 @llvm.readcyclecounter()
declare void @llvm.x86.sse2.pause()

define internal void @{name}_task(i64* %ctl, i64 %j) nounwind {{
entry:
  %j2 = mul i64 %j, 2
  %o0 = add i64 %j2, {TASKS}
  %o1 = add i64 %o0, 1
  %q0 = getelementptr i64, i64* %ctl, i64 %o0
  %q1 = getelementptr i64, i64* %ctl, i64 %o1
  %n = load i64, i64* %q0, align 8
  %cv = load i64, i64* %q1, align 8
  %calls = inttoptr i64 %cv to i64*
  call void @{name}_calls(i64* %calls, i64 %n)
  ret void
}}

define internal void @{name}_calls(i64* %calls, i64 %n) nounwind {{
entry:
  br label %head
head:
  %i = phi i64 [ 0, %entry ], [ %in, %body ]
  %more = icmp slt i64 %i, %n
  br i1 %more, label %body, label %out
body:
  %i3 = mul i64 %i, 3
  %p0 = getelementptr i64, i64* %calls, i64 %i3
  %p1 = getelementptr i64, i64* %p0, i64 1
  %p2 = getelementptr i64, i64* %p0, i64 2
  %t = load i64, i64* %p0, align 8
  %f = load i64, i64* %p1, align 8
  %w = load i64, i64* %p2, align 8
  %tp = inttoptr i64 %t to void (i8*, i64*)*
  %fp = inttoptr i64 %f to i8*
  %wp = inttoptr i64 %w to i64*
  call void %tp(i8* %fp, i64* %wp)
  %in = add i64 %i, 1
  br label %head
out:
  ret void
}}

define internal i64 @{name}_claim(i64* %ctl) nounwind {{
entry:
  %wordp = getelementptr i64, i64* %ctl, i64 {WORD}
  %donep = getelementptr i64, i64* %ctl, i64 {DONE}
  br label %try
try:
  %ran = phi i64 [ 0, %entry ], [ %ran, %lost ], [ %rann, %did ]
  %w = load atomic i64, i64* %wordp acquire, align 8
  %nx = lshr i64 %w, 16
  %next = and i64 %nx, 65535
  %count = and i64 %w, 65535
  %left = icmp ult i64 %next, %count
  br i1 %left, label %cas, label %out
cas:
  %w2 = add i64 %w, 65536
  %r = cmpxchg i64* %wordp, i64 %w, i64 %w2 acq_rel acquire
  %ok = extractvalue {{ i64, i1 }} %r, 1
  br i1 %ok, label %run, label %lost
lost:
  br label %try
run:
  call void @{name}_task(i64* %ctl, i64 %next)
  %old = atomicrmw add i64* %donep, i64 1 release
  br label %did
did:
  %rann = add i64 %ran, 1
  br label %try
out:
  ret i64 %ran
}}

define i64 @{name}(i64 %op, i64* %ctl, i64 %x) nounwind {{
entry:
  %wordp = getelementptr i64, i64* %ctl, i64 {WORD}
  %donep = getelementptr i64, i64* %ctl, i64 {DONE}
  switch i64 %op, label %ticks [ i64 {POST}, label %post  i64 {LOOP}, label %loop0  i64 {RUN}, label %inline ]
inline:
  call void @{name}_calls(i64* %ctl, i64 %x)
  ret i64 0
ticks:
  %now = call i64 @llvm.readcyclecounter()
  ret i64 %now
post:
  store atomic i64 %x, i64* %wordp release, align 8
  br label %work
work:
  %mine = call i64 @{name}_claim(i64* %ctl)
  %w = load atomic i64, i64* %wordp acquire, align 8
  %count = and i64 %w, 65535
  br label %wspin
wspin:
  %d = load atomic i64, i64* %donep acquire, align 8
  %fin = icmp uge i64 %d, %count
  br i1 %fin, label %wout, label %wpause
wpause:
  call void @llvm.x86.sse2.pause()
  br label %wspin
wout:
  ret i64 %mine
loop0:
  %t0 = call i64 @llvm.readcyclecounter()
  br label %spin
spin:
  %since = phi i64 [ %t0, %loop0 ], [ %since, %idle ], [ %t1, %ran ]
  %got = call i64 @{name}_claim(i64* %ctl)
  %any = icmp ne i64 %got, 0
  br i1 %any, label %ran, label %idle
ran:
  %t1 = call i64 @llvm.readcyclecounter()
  br label %spin
idle:
  call void @llvm.x86.sse2.pause()
  %now2 = call i64 @llvm.readcyclecounter()
  %el = sub i64 %now2, %since
  %go = icmp ult i64 %el, %x
  br i1 %go, label %spin, label %done
done:
  ret i64 0
}}
"""


_BITS: dict = {}


def _bits(kind: str, a) -> int:
    """A float argument's bits as a 64-bit word (a C float in the low 32; as ctypes rounds it)."""
    key = (kind, a)
    # (the same few values every call: lo, hi, +-inf; not 0.0 and -0.0, equal keys of other bits, nor NaN)
    w = _BITS.get(key) if a == a and a != 0 else None
    if w is None:
        if kind == "double":
            w = struct.unpack("<q", struct.pack("<d", float(a)))[0]
        else:
            w = struct.unpack("<i", bytes(ctypes.c_float(float(a))))[0]
        if len(_BITS) < 4096 and a == a and a != 0:
            _BITS[key] = w
    return w


def _word(a) -> int:
    """An integer or pointer argument as a word (None: 0)."""
    return 0 if a is None else int(a.value or 0) if isinstance(a, ctypes.c_void_p) else int(a)


class _Pool:
    def __init__(self):
        from .build import compile_kernel

        self.ctl = (ctypes.c_int64 * (TASKS + 2 * SLOTS))()
        self.at = ctypes.addressof(self.ctl)
        c = compile_kernel(PoolCode(), 3, {"op": "POOL", "shape": [], "dtype": "none"})
        # (the control function returns an i64: its own prototype, not Compiled.fn's)
        self.fn = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64)(c.addr)
        self.known: dict = {}                 # id(function) -> (function, trampoline, address, float args)
        self.tramps: dict = {}
        self.seq = 0
        self.busy = threading.Lock()          # one caller at a time
        self.cond = threading.Condition()
        self.sleeping = False
        self.posting = False                  # (a batch is about to be posted: the pool's thread stays up)
        self.ran_here = 0                     # tasks run by the caller / by the pool's thread (tests, bench)
        self.ran_there = 0
        t0, c0 = time.perf_counter(), self.fn(TICKS, self.at, 0)
        while time.perf_counter() - t0 < 2e-3:
            pass
        rate = (self.fn(TICKS, self.at, 0) - c0) / (time.perf_counter() - t0)
        spin = os.environ.get(SPIN_ENV, "")
        self.spin_ticks = max(1, int(rate * (float(spin) * 1e-6 if spin.replace(".", "", 1).isdigit() else SPIN_SECONDS)))
        self.thread = threading.Thread(target=self._serve, name="msvm-kernel-spin", daemon=True)
        self.thread.start()

    def _left(self) -> bool:
        w = self.ctl[WORD]
        return (w >> 16) & 0xFFFF < w & 0xFFFF

    def _serve(self) -> None:
        while True:
            self.fn(LOOP, self.at, self.spin_ticks)          # (the GIL released: ctypes)
            with self.cond:
                self.sleeping = True
                while not (self._left() or self.posting):
                    self.cond.wait()
                self.sleeping = False

    def tramp(self, sig: tuple) -> int:
        hit = self.tramps.get(sig)
        if hit is None:
            from .build import compile_kernel

            c = compile_kernel(PoolCode(sig), 3, {"op": "POOL", "shape": [], "dtype": "none"})
            hit = self.tramps[sig] = c.addr
        return hit

    def _known(self, fn):
        """(fn, trampoline, address, {i: kind} of its float arguments), or None where an argument
        type has no word (kept: kernels live as long as the process)."""
        sig = tuple(_WORD.get(t) for t in fn.argtypes or ())
        if None in sig or not sig:          # (no argtypes: ctypes would convert as it guesses)
            hit = None
        else:
            hit = (fn, self.tramp(sig), ctypes.cast(fn, ctypes.c_void_p).value,
                   {i: k for i, k in enumerate(sig) if k in ("double", "float")})
        self.known[id(fn)] = (fn, hit)
        return hit

    def pack(self, tasks: list):
        """``Batch`` of the tasks: their calls and argument words in buffers of its own; None where a
        function's argument type has no word or the tasks do not fit the control block."""
        ncalls = sum(len(t) for t in tasks)
        if len(tasks) > SLOTS or ncalls > CALLS:
            return None
        infos, nwords = [], 0
        for task in tasks:
            for fn, args in task:
                known = self.known.get(id(fn))
                info = known[1] if known is not None and known[0] is fn else self._known(fn)
                if info is None or len(args) != len(fn.argtypes):
                    return None
                infos.append(info)
                nwords += len(args)
        calls, words = (ctypes.c_int64 * (3 * ncalls))(), (ctypes.c_int64 * max(nwords, 1))()
        calls_at, words_at = ctypes.addressof(calls), ctypes.addressof(words)
        heads, ci, wi, signs = [], 0, 0, []
        for task in tasks:
            heads.append((len(task), calls_at + 24 * ci))
            for _fn, args in task:
                info = infos[ci]
                fl = info[3]
                # (ints and pointers as ints are most of the words: no conversion)
                vals = [a if type(a) is int and i not in fl else _bits(fl[i], a) if i in fl else _word(a)
                        for i, a in enumerate(args)] if fl else [a if type(a) is int else _word(a) for a in args]
                words[wi:wi + len(vals)] = vals
                calls[3 * ci], calls[3 * ci + 1], calls[3 * ci + 2] = info[1], info[2], words_at + 8 * wi
                signs += [math.copysign(1.0, args[i]) for i in fl]
                ci += 1
                wi += len(vals)
        return Batch(heads, calls, words, tuple(signs), tuple(fn for task in tasks for fn, _ in task))

    def run(self, tasks: list, batch=None) -> bool:
        """The tasks (or their ``Batch``, packed before) over this thread and the pool's; False
        (nothing run) where they cannot be packed or another caller holds the pool."""
        if batch is None:
            batch = self.pack(tasks)
            if batch is None:
                return False
        if not self.busy.acquire(blocking=False):
            return False
        try:
            ctl = self.ctl
            for j, (n, at) in enumerate(batch.heads):
                ctl[TASKS + 2 * j], ctl[TASKS + 2 * j + 1] = n, at
            ctl[DONE] = 0
            self.seq = (self.seq + 1) & 0xFFFFFFFF
            with self.cond:
                self.posting = True
                if self.sleeping:
                    self.cond.notify()
            try:                                      # (posts, runs, returns when every task has run)
                here = self.fn(POST, self.at, self.seq << 32 | len(batch.heads))
            finally:
                self.posting = False
            self.ran_here += here
            self.ran_there += len(batch.heads) - here
            return True
        finally:
            self.busy.release()


@dataclass
class Batch:
    """A task list packed (``_Pool.pack``): per task its call count and first call's address, and the
    calls (trampoline, function, words) and words in buffers of its own, so posting it again writes
    the task heads only. ``signs``: the float arguments' signs (0.0 and -0.0 are equal keys); ``fns``:
    the functions (a key holds their ids)."""
    heads: list
    calls: object
    words: object
    signs: tuple
    fns: tuple


BATCHES = 512            # packed task lists kept (``share``: a replay posts the same ones every call)
_batches: dict = {}


def _inline(calls) -> None:
    for fn, args in calls:
        fn(*args)


class Calls:
    """Tasks of calls (``share``'s: lists of ``(ctypes function, args)``) packed once into words
    (``_Pool.pack``) and run again as they are: ``here`` (one task) on the calling thread in one native
    call (RUN), instead of a ctypes call per kernel converting its arguments (1.1 us for 16 of them,
    AMD Zen 5); else over this thread and the pool's as ``share`` runs them, without packing them or
    looking their batch up again. A replayed convolution repeats the same calls (conv.Memo).
    ``set(c, j, value)``: call c's (in order over the tasks) pointer argument j is now value (an input
    that moved). Where they cannot be packed (no spinning pool on this target, an argument type
    without a word), they run through ctypes, or ``share``."""

    def __init__(self, tasks: list, here: bool):
        self.tasks = [[(fn, list(args)) for fn, args in task] for task in tasks]
        self.calls = [call for task in self.tasks for call in task]
        self.here = here and len(tasks) == 1
        self.batch = pool().pack(tasks) if tasks and spins() else None
        self.starts, at = [], 0
        for _fn, args in self.calls:
            self.starts.append(at)
            at += len(args)
        if self.batch is not None:
            self.n, self.at = self.batch.heads[0]
            self.fn = pool().fn

    def __call__(self) -> None:
        if self.batch is None:
            if self.here:
                _inline(self.calls)
            else:
                share([[(fn, tuple(args)) for fn, args in task] for task in self.tasks])
        elif self.here:
            self.fn(RUN, self.at, self.n)
        elif not pool().run(None, self.batch):
            _inline(self.calls)

    def set(self, c: int, j: int, value: int) -> None:
        self.calls[c][1][j] = value
        if self.batch is not None:
            self.batch.words[self.starts[c] + j] = value


_pool: list = [None]
_pool_lock = threading.Lock()


def spins() -> bool:
    """Whether this target has the spinning pool (x86-64: PAUSE and the time-stamp counter)."""
    if _spins[0] is None:
        from .codegen import codegen

        _spins[0] = codegen().triple.startswith("x86_64")
    return _spins[0]


_spins: list = [None]


def pool() -> _Pool:
    if _pool[0] is None:
        with _pool_lock:
            if _pool[0] is None:
                _pool[0] = _Pool()
    return _pool[0]


def share(tasks: list) -> None:
    """Run ``tasks`` on this thread and the pool's, each task (a list of ``(ctypes function, args)``
    calls, run in order) on one of them, whichever claims it first; return when all have run. The
    first time, the BLAS is set to one thread (callconv.blas_once)."""
    from .callconv import blas_once

    if len(tasks) < 2:
        _inline([call for task in tasks for call in task])
        return
    blas_once()
    if not spins():
        from .callconv import submit

        half = (len(tasks) + 1) // 2
        fut = submit(_inline, [call for task in tasks[half:] for call in task])
        try:
            _inline([call for task in tasks[:half] for call in task])
        finally:
            fut.result()
        return
    p = pool()
    # a replay splits the same products with the same pointers every call: their packed batch again
    key = tuple([tuple([(id(fn), args) for fn, args in task]) for task in tasks])
    try:
        batch = _batches.get(key)
    except TypeError:                   # (an unhashable argument: packed each time)
        key, batch = None, None
    if batch is not None and (any(a is not b for a, b in zip(batch.fns, [fn for task in tasks for fn, _ in task]))
                              or batch.signs and batch.signs != _signs(tasks, p)):
        batch = None
    if batch is None:
        batch = p.pack(tasks)
        if batch is not None and key is not None:
            if len(_batches) >= BATCHES:
                _batches.clear()
            _batches[key] = batch
    if batch is None or not p.run(tasks, batch):
        _inline([call for task in tasks for call in task])


def _signs(tasks, p) -> tuple:
    """The signs of the tasks' float arguments, in ``Batch.signs``'s order."""
    out = []
    for task in tasks:
        for fn, args in task:
            out += [math.copysign(1.0, args[i]) for i in p.known[id(fn)][1][3]]
    return tuple(out)


def parts(total: int, unit: int, most: int | None = None) -> list:
    """[start, stop) ranges over 0..total in whole units (the last one may be short), at most ``most``
    of them and as even as whole units allow."""
    units = -(-total // unit) if unit > 0 else 0
    k = max(1, min(PARTS if most is None else most, units))
    cuts = [(units * i // k) * unit for i in range(k)] + [total]
    return [(a, min(b, total)) for a, b in zip(cuts, cuts[1:]) if a < min(b, total)]


def _after_fork() -> None:        # (the pool's thread is not in a forked child: a new pool there)
    global _pool_lock
    _pool[0] = None
    _pool_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
