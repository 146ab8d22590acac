"""Two threads on one kernel's work, handed over by spinning (issue 18: two-thread scaling).

Where a product is shared by two threads (a convolution's columns, a packed Dense product's panels,
a depthwise layer's planes), the calling thread runs its half and another thread the other. Handed
over through an OS primitive (a ``ThreadPoolExecutor``'s queue, then ``Future.result``), each split
waits twice for the scheduler: to wake the pool's thread and to wake the caller when it is done.
Measured on a KVM guest with two vCPUs (AMD Zen 3), a futex wake-up of an idle thread took a median
90-300 us, 1.2 ms at the 99th percentile, up to 40 ms; ResNet-50 at 224, with 52 split convolutions
per forward, ran 146.7 ms on two threads against 160.4 on one. onnxruntime's pool, OpenMP and
OpenBLAS spin instead, and so does this one:

- the pool's thread runs ``loop``, native code that spins (PAUSE) on a control block until a batch
  of calls is posted, claims it (compare-and-swap), runs it and marks it done, for up to
  SPIN_SECONDS after its last batch; then it blocks on a condition variable until the next post;
- the caller posts the other half (the calls' addresses, a trampoline per signature and their
  arguments, packed as 64-bit words), runs its own half, then ``wait``\\s: if the pool's thread has
  not claimed the batch by then, the caller claims and runs it itself (so a sleeping pool thread
  never costs a wake-up), else it spins until the batch is done.

Both halves are native calls made without the GIL: the pool's thread never returns to Python on
the hot path, so a caller holding the GIL does not hold it up. Each call computes the same elements
with the same code whichever thread runs it, so one and two threads give the same bits. One
caller at a time: a second thread that finds the pool busy runs both halves itself.

The control function and each trampoline are kernels like any other (``PoolCode``, compiled once,
kept in the kernel cache). x86-64 only (PAUSE, the time-stamp counter); elsewhere ``share`` falls
back to callconv.submit's pool.
"""

from __future__ import annotations

import ctypes
import os
import struct
import threading
import time
from dataclasses import dataclass

SPIN_SECONDS = 2e-3       # how long the pool's thread spins for the next batch before it sleeps
SLOTS = 64                # calls per batch (more run on the caller's thread)
SEQ, CLAIM, DONE, COUNT, CALLS = 0, 8, 16, 24, 32      # the control block's words (one cache line each)
POST, WAIT, LOOP, TICKS = 0, 1, 2, 3                    # the control function's operations

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
        return f"pool slots={SLOTS} sig={','.join(self.sig)}" if self.sig else f"pool control slots={SLOTS}"


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
    """``i64 name(i64 op, i64* ctl, i64 x)``:
    POST: store x into SEQ (release: the calls written before it are seen with it);
    WAIT: claim batch x if nobody has (then run it here, return 1), else spin until DONE == x (0);
    LOOP: claim and run batches as they are posted until x ticks pass without one (the pool's thread);
    TICKS: the time-stamp counter."""
    return f"""declare i64 @llvm.readcyclecounter()
declare void @llvm.x86.sse2.pause()

define internal void @{name}_run(i64* %ctl) nounwind {{
entry:
  %np = getelementptr i64, i64* %ctl, i64 {COUNT}
  %n = load i64, i64* %np, align 8
  br label %head
head:
  %j = phi i64 [ 0, %entry ], [ %jn, %body ]
  %more = icmp slt i64 %j, %n
  br i1 %more, label %body, label %out
body:
  %j3 = mul i64 %j, 3
  %o0 = add i64 %j3, {CALLS}
  %o1 = add i64 %o0, 1
  %o2 = add i64 %o0, 2
  %q0 = getelementptr i64, i64* %ctl, i64 %o0
  %q1 = getelementptr i64, i64* %ctl, i64 %o1
  %q2 = getelementptr i64, i64* %ctl, i64 %o2
  %t = load i64, i64* %q0, align 8
  %f = load i64, i64* %q1, align 8
  %w = load i64, i64* %q2, align 8
  %tp = inttoptr i64 %t to void (i8*, i64*)*
  %fp = inttoptr i64 %f to i8*
  %wp = inttoptr i64 %w to i64*
  call void %tp(i8* %fp, i64* %wp)
  %jn = add i64 %j, 1
  br label %head
out:
  ret void
}}

define i64 @{name}(i64 %op, i64* %ctl, i64 %x) nounwind {{
entry:
  %seqp = getelementptr i64, i64* %ctl, i64 {SEQ}
  %claimp = getelementptr i64, i64* %ctl, i64 {CLAIM}
  %donep = getelementptr i64, i64* %ctl, i64 {DONE}
  switch i64 %op, label %ticks [ i64 {POST}, label %post  i64 {WAIT}, label %wait  i64 {LOOP}, label %loop0 ]
ticks:
  %now = call i64 @llvm.readcyclecounter()
  ret i64 %now
post:
  store atomic i64 %x, i64* %seqp release, align 8
  ret i64 0
wait:
  %prev = sub i64 %x, 1
  %mine = cmpxchg i64* %claimp, i64 %prev, i64 %x acq_rel monotonic
  %got = extractvalue {{ i64, i1 }} %mine, 1
  br i1 %got, label %wrun, label %wspin
wrun:
  call void @{name}_run(i64* %ctl)
  store atomic i64 %x, i64* %donep release, align 8
  ret i64 1
wspin:
  %d = load atomic i64, i64* %donep acquire, align 8
  %fin = icmp eq i64 %d, %x
  br i1 %fin, label %wout, label %wpause
wpause:
  call void @llvm.x86.sse2.pause()
  br label %wspin
wout:
  ret i64 0
loop0:
  %t0 = call i64 @llvm.readcyclecounter()
  br label %spin
spin:
  %since = phi i64 [ %t0, %loop0 ], [ %since, %idle ], [ %t1, %ran ], [ %since, %lost ]
  %s = load atomic i64, i64* %seqp acquire, align 8
  %c = load atomic i64, i64* %claimp monotonic, align 8
  %new = icmp ne i64 %s, %c
  br i1 %new, label %try, label %idle
try:
  %r = cmpxchg i64* %claimp, i64 %c, i64 %s acq_rel monotonic
  %ok = extractvalue {{ i64, i1 }} %r, 1
  br i1 %ok, label %run, label %lost
run:
  call void @{name}_run(i64* %ctl)
  store atomic i64 %s, i64* %donep release, align 8
  br label %ran
ran:
  %t1 = call i64 @llvm.readcyclecounter()
  br label %spin
lost:
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


def _addr(fn) -> int:
    return ctypes.cast(fn, ctypes.c_void_p).value


def _words(sig: tuple, args) -> ctypes.Array:
    """The arguments as 64-bit words: integers and pointers (None: 0) as they are, floats by their bits."""
    vals = []
    for kind, a in zip(sig, args):
        if kind == "double":
            vals.append(struct.unpack("<q", struct.pack("<d", float(a)))[0])
        elif kind == "float":
            vals.append(struct.unpack("<i", struct.pack("<f", float(a)))[0])
        elif a is None:
            vals.append(0)
        else:
            vals.append(int(a.value if isinstance(a, ctypes.c_void_p) else a))
    return (ctypes.c_int64 * max(1, len(vals)))(*vals)


class _Pool:
    def __init__(self):
        from .build import compile_kernel

        self.ctl = (ctypes.c_int64 * (CALLS + 3 * SLOTS))()
        self.at = ctypes.addressof(self.ctl)
        c = compile_kernel(PoolCode(), 3, {"op": "POOL", "shape": [], "dtype": "none"})
        self.fn = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64)(c.addr)
        self.tramps: dict = {}
        self.seq = 0
        self.busy = threading.Lock()          # one caller at a time
        self.cond = threading.Condition()
        self.sleeping = False
        self.ran_here = 0                     # batches the caller claimed back (tests, bench)
        self.ran_there = 0
        t0, c0 = time.perf_counter(), self.fn(TICKS, self.at, 0)
        while time.perf_counter() - t0 < 2e-3:
            pass
        rate = (self.fn(TICKS, self.at, 0) - c0) / (time.perf_counter() - t0)
        self.spin_ticks = max(1, int(rate * SPIN_SECONDS))
        self.thread = threading.Thread(target=self._serve, name="msvm-kernel-spin", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        ctl = self.ctl
        while True:
            self.fn(LOOP, self.at, self.spin_ticks)          # (the GIL released: ctypes)
            with self.cond:
                self.sleeping = True
                while ctl[SEQ] == ctl[CLAIM]:
                    self.cond.wait()
                self.sleeping = False

    def tramp(self, sig: tuple) -> int:
        hit = self.tramps.get(sig)
        if hit is None:
            from .build import compile_kernel

            c = compile_kernel(PoolCode(sig), 3, {"op": "POOL", "shape": [], "dtype": "none"})
            hit = self.tramps[sig] = c.addr
        return hit

    def share(self, mine: list, theirs: list) -> None:
        if len(theirs) > SLOTS or not self.busy.acquire(blocking=False):
            _inline(mine + theirs)
            return
        try:
            keep = []
            for j, (fn, args) in enumerate(theirs):
                sig = tuple(_WORD[t] for t in fn.argtypes)
                w = _words(sig, args)
                keep.append(w)
                o = CALLS + 3 * j
                self.ctl[o], self.ctl[o + 1], self.ctl[o + 2] = self.tramp(sig), _addr(fn), ctypes.addressof(w)
            self.ctl[COUNT] = len(theirs)
            self.seq += 1
            self.fn(POST, self.at, self.seq)
            with self.cond:
                if self.sleeping:
                    self.cond.notify()
            try:
                _inline(mine)
            finally:
                if self.fn(WAIT, self.at, self.seq):
                    self.ran_here += 1
                else:
                    self.ran_there += 1
                del keep
        finally:
            self.busy.release()


def _inline(calls) -> None:
    for fn, args in calls:
        fn(*args)


_pool: list = [None]
_pool_lock = threading.Lock()


def spins() -> bool:
    """Whether this target has the spinning pool (x86-64: PAUSE and the time-stamp counter)."""
    from .codegen import codegen

    return codegen().triple.startswith("x86_64")


def pool() -> _Pool:
    if _pool[0] is None:
        with _pool_lock:
            if _pool[0] is None:
                _pool[0] = _Pool()
    return _pool[0]


def share(mine: list, theirs: list) -> None:
    """Run the native calls ``mine`` (each ``(ctypes function, args)``) on this thread and ``theirs`` on
    the pool's (or on this one, where the pool's thread has not taken them when ``mine`` are done);
    return when all have run. The first time, the BLAS is set to one thread (callconv.submit)."""
    from .callconv import submit

    if not spins():
        fut = submit(_inline, theirs)
        try:
            _inline(mine)
        finally:
            fut.result()
        return
    from .callconv import blas_once

    blas_once()
    pool().share(mine, theirs)


def _after_fork() -> None:        # (the pool's thread is not in a forked child: a new pool there)
    _pool[0] = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
