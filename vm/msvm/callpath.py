"""The call path: how a call of a Cell or a jit function reaches the code that computes it.

A call takes the first route open to it:

1. **guard**: the owner (the Cell or JitFunction) holds the ``Guard`` of the last signature whose
   replay ran, a native builtin (compiler/entry.py) that checks the call's values (each a Tensor
   of that signature's rank, dims, strides and dtype, or that bool) and calls the replay with
   their arrays. It answers another call with its ``no`` object, and ``FALLBACK`` when the replay
   raised (then the interpreter runs the call).
2. **replay**: the runner's memo holds the call's exact ``Signature`` (each tensor's shape, strides
   and dtype, each int and bool) with its straight-line replay (interp/replay.py), written after
   ``REPLAY_AFTER`` interpreted calls. A replay that ran points the owner's guard at its
   signature (``aim``), once the background compiler has built the guard's trampoline.
3. **interpreter**: the signature's BoundCode runs in the interpreter; a signature the memo does
   not hold is resolved first (``runner.resolve``: compiled when new).

(In PYNATIVE_MODE a Cell's construct runs as Python: **eager**.) Inside a replay and the
interpreter each jit-able instruction's Site (compiler/tiers.py) calls its kernel, through its
own cache of prepared callers per exact input layout (``callconv.Prepared``) once it has one.

Guard and replay are closed while ``events.SLOW`` names a reason (an event subscriber, a trace
hook, jit_level L1), and a guard holds only for the Parameter shapes it was made under
(``Guard.generation``, ``tensor.PARAMETER_SHAPES``). Every route computes what the interpreter
computes: a replay runs the same kernels and sites, and a replay that raised is run again by the
interpreter, which names the instruction. Each Signature counts the calls that reached it by the
replay and interpreter routes (``replays``, ``fallbacks``, ``interpreted``); a guard's calls do not
reach Python and are not counted. This module is the only writer of a runner's memo and guard and
of its owner's ``_guard``.
"""

from __future__ import annotations

import numpy as np

from . import context, events, gcpolicy, log, reasons
from . import dtype as dt
from .context import OPTIONS_EPOCH, compile_options
from .interp import replay
from .interp.replay import FALLBACK
from .tensor import PARAMETER_SHAPES, Tensor, wrap

MEMO_SIZE = 64          # exact call signatures remembered per runner (layouts, dtypes, int and bool values)
REPLAY_AFTER = 2        # interpreted calls at one signature before its path is written as a replay
_CTX = context._ctx                  # the live settings dict (set_context updates it in place)
_JIT = _CTX["jit_config"]
_SLOW = events.SLOW     # reasons calls go through the interpreter (event subscribers, a trace hook, L1)
_DT = dt.from_numpy
_BY_NP = dt._BY_NP
_new_tensor = object.__new__


class Signature:
    """One exact call signature in a runner's memo: what runs it, and what it has run."""

    __slots__ = ("variant", "bound", "env", "replay", "guard", "interpreted", "replays", "fallbacks")

    def __init__(self, variant, bound, env):
        self.variant, self.bound, self.env = variant, bound, env   # (env: its symbol bindings)
        self.replay = None        # None: not written yet; False: its path cannot be; else the function
        self.guard = None         # None: not asked; a pattern (tuple) while its trampoline builds;
        #                           False: these values take no guard; else the Guard
        self.interpreted = 1      # calls the interpreter ran (the first, which made the entry, too)
        self.replays = 0          # calls its replay ran, through the runner (not through the guard)
        self.fallbacks = 0        # of those, the replay raised and the interpreter ran them again


class Guard:
    """The native front of one Signature: ``fn(*values, **by_name)`` returns the replay's result
    (an array of the expected dtype as a Tensor), ``no`` for any other call, or FALLBACK."""

    __slots__ = ("fn", "no", "keep", "signature", "generation", "options")

    def __init__(self, fn, no, keep, signature, generation):
        self.fn, self.no, self.signature, self.generation = fn, no, signature, generation
        self.keep = keep          # what the guard's constants point at, alive while it lives
        self.options = OPTIONS_EPOCH[0]      # (made under the jit options of this epoch: context.RECOMPILE)


def result(out):
    """A replay's or interpreter's result as the caller gets it: an array becomes a Tensor."""
    if type(out) is np.ndarray:
        t = _new_tensor(Tensor)
        t._data, t._pshape, t._dtype = out, None, _BY_NP.get(out.dtype) or _DT(out.dtype)
        return t
    return wrap(out)


# ---------------------------------------------------------------- the owners' fronts

def cell_call(self, *args, **kwargs):
    """``Cell.__call__``: the guard, then eager (PYNATIVE_MODE) or the runner's ``call``."""
    d = self.__dict__
    g = d["_guard"]
    guarded = False
    if g is not None and not _SLOW and PARAMETER_SHAPES[0] == g.generation and OPTIONS_EPOCH[0] == g.options \
            and _CTX["mode"] != 1:
        out = g.fn(*args, **kwargs)
        if type(out) is Tensor:
            return out
        if out is not g.no:          # the guard took the values: their replay's result, or a fall back
            if out is not FALLBACK:
                return result(out)
            guarded = True
    if _CTX["mode"] == 1:            # PYNATIVE_MODE
        mp = d.get("_mixed_precision")
        if mp is None:
            return self.construct(*args, **kwargs)
        from .ops import functional

        with functional.mixed_precision(mp):
            return self.construct(*args, **kwargs)
    runner = d["_runner"]
    if runner is None:
        runner = self._make_runner()
    return call(runner, args, kwargs, guarded)


def jit_call(self, *args, **kwargs):
    """``JitFunction.__call__``: the guard, then the runner's ``call``."""
    g = self._guard
    guarded = False
    if g is not None and not _SLOW and PARAMETER_SHAPES[0] == g.generation and OPTIONS_EPOCH[0] == g.options:
        out = g.fn(*args, **kwargs)
        if type(out) is Tensor:
            return out
        if out is not g.no:
            if out is not FALLBACK:
                return result(out)
            guarded = True
    runner = self._runner
    if runner is None:
        runner = self._make_runner()
    return call(runner, args, kwargs, guarded)


# ---------------------------------------------------------------- the runner's routes

def call(runner, args, kwargs, guarded: bool = False):
    """One call through ``runner`` (executor: a CellRunner or JitRunner). ``guarded``: the owner
    has had the guard run these values, whose replay fell back; the guard is not asked again."""
    if PARAMETER_SHAPES[0] != runner.shapes_seen:     # a Parameter changed shape: verify again
        runner.dropped = reasons.variants_dropped(len(runner.variants))   # (the next compile says so)
        runner.variants.clear()
        runner.memo.clear()
        runner.stash = None
        runner.shapes_seen = PARAMETER_SHAPES[0]
        point(runner, None)
    if runner.epoch != OPTIONS_EPOCH[0]:              # jit options changed since this runner's last call
        options(runner)
    vals = args if (not kwargs and len(args) == runner.n) else runner.values(args, kwargs)
    g = runner.guard
    if g is not None and not guarded and not _SLOW and _JIT["jit_level"] != "L1":
        # the last replayed signature again, its values bound by name? its guard checks them
        out = g.fn(*vals)
        if type(out) is Tensor:          # (the guard makes the Tensor of an array of the expected dtype)
            return out
        if out is not g.no and out is not FALLBACK:
            return result(out)
    # the steady state: the same exact call signature as before -> its variant, program and bindings
    sig, rt = [], []
    for v in vals:
        t = type(v)
        if t is Tensor:
            a = v._data
            sig.append((a.shape, a.strides, a.dtype))
            rt.append(a)
        elif t is bool or t is int:
            sig.append((t, v))
            rt.append(v)
        elif t is float:
            sig.append(t)
            rt.append(v)
        elif v is None:         # an omitted optional argument (m=None): baked in, left out of rt below
            sig.append(None)
            rt.append(None)
        else:
            sig = None
            break
    hit = runner.memo.get(tuple(sig)) if sig is not None else None
    out = FALLBACK
    if hit is not None:
        var, bound, env, rp = hit.variant, hit.bound, hit.env, hit.replay
        if var.partial:
            rt = [rt[i] for i in var.runtime_idx]
        if rp and not _SLOW and _JIT["jit_level"] != "L1":
            out = rp(*rt)           # the straight-line replay of this signature's path
            hit.replays += 1
            if out is FALLBACK:
                hit.fallbacks += 1
            elif (g is None or g.signature is not hit) and runner.vararg is None:
                aim(runner, hit, vals, out)     # (a guard takes a fixed count of values: none for *args)
        elif rp is None and hit.interpreted >= REPLAY_AFTER:
            hit.replay = replay.build(bound, env, top=True) or False
            gcpolicy.settle()       # (what this signature built is long-lived: out of the collector's walks)
        if out is FALLBACK:
            hit.interpreted += 1
            out = _observed(var, bound, rt, env.copy()) if events._subs else bound.call(rt, env=env.copy())
    else:
        var, bound, rt = runner.resolve(vals)
        env = bound.fast_bind(rt)
        if env is not None and sig is not None:
            memo = runner.memo
            if len(memo) >= MEMO_SIZE:
                memo.clear()
            memo[tuple(sig)] = Signature(var, bound, env.copy())
        held, built = gcpolicy.hold(), False
        try:
            out = _observed(var, bound, rt, env) if events._subs else bound.call(rt, env=env)
            built = True
        finally:
            gcpolicy.release(held, built)
    return result(out)


def _observed(var, bound, rt, env):
    """An interpreted call while someone listens to events: its time goes out as an ``exec`` event."""
    import time

    t0 = time.perf_counter()
    out = bound.call(rt, env=env)
    events.emit({"type": "exec", "code": bound.code.name, "code_id": bound.code.uid,
                 "ms": (time.perf_counter() - t0) * 1e3})
    return out


def aim(runner, hit: Signature, vals, out) -> None:
    """Point the guard at this signature, whose replay just ran: its Guard when built; else its
    trampoline is asked of the background compiler (``Signature.guard``)."""
    state = hit.guard
    if state is None:
        state = hit.guard = _guard_pattern(hit.variant, vals)
        if state:
            from .compiler import build, entry

            build.worker().submit(lambda: entry.prepare_guard(state, build.kernel_cache()))
        return
    if type(state) is tuple:
        from .compiler import entry

        ready = entry.guard_ready(state)
        if ready is None:
            return
        try:
            hit.guard = state = _make_guard(state, hit, vals, out, runner) if ready else False
        except Exception as e:  # noqa: BLE001 - a guard only saves time; the Python way still runs
            log.logger.debug("no call guard for %s: %s", type(runner.cell).__name__, e)
            hit.guard = state = False
    if state:
        point(runner, state)


def options(runner) -> None:
    """The runner's variants, memo and guard for the jit options now (context.RECOMPILE): a Cell keeps
    them per options, so one called under two settings in turn (bench/peers.py's fused and unfused
    nets, a test of fusion on and off) compiles each once; the first call under new ones says why."""
    now = compile_options()
    if runner.options is not None and now != runner.options:
        if runner.stash is None:
            runner.stash = {}
        runner.stash[runner.options] = (runner.variants, runner.memo, runner.guard)
        runner.variants, runner.memo, guard = runner.stash.pop(now, ({}, {}, None))
        if not runner.variants:
            runner.dropped = reasons.options_now()
        point(runner, guard)
    runner.options, runner.epoch = now, OPTIONS_EPOCH[0]
    if runner.guard is not None:
        runner.guard.options = OPTIONS_EPOCH[0]


def point(runner, guard: Guard | None) -> None:
    """The runner's guard is now ``guard`` (None: dropped), and so is its owner's while the owner
    still runs through this runner."""
    runner.guard = guard
    owner = runner.owner
    if owner is not None and owner.__dict__.get("_runner") is runner:
        owner.__dict__["_guard"] = guard       # (a Cell's __setattr__ would drop its runner)


# ---------------------------------------------------------------- making guards

def _tensor_slots():
    """The offsets of a Tensor's ``_data``, ``_pshape`` and ``_dtype`` (__slots__ members) in the
    object, found by looking for markers there; None unless found alike twice."""
    import ctypes

    found = set()
    for _ in range(2):
        t, marks = _new_tensor(Tensor), (object(), object(), object())
        t._data, t._pshape, t._dtype = marks
        found.add(tuple(next((off for off in range(16, Tensor.__basicsize__, 8)
                              if ctypes.c_void_p.from_address(id(t) + off).value == id(m)), None) for m in marks))
    slots = found.pop() if len(found) == 1 else None
    return slots if slots is not None and None not in slots else None


_SLOTS = _tensor_slots()


def _guard_pattern(var, vals):
    """The guard trampoline's pattern for these call values (compiler/entry.py ``guard_ir``), or
    False where a value is neither an exact Tensor nor a bool."""
    if _SLOTS is None:
        return False
    passed = set(var.runtime_idx) if var.partial else set(range(len(vals)))
    pattern = []
    for k, v in enumerate(vals):
        if type(v) is Tensor and type(v._data) is np.ndarray:
            pattern.append(("t", v._data.ndim, k in passed))
        elif type(v) is bool:
            pattern.append(("b", k in passed))
        else:
            return False
    return tuple(pattern)


def _make_guard(pattern, hit: Signature, vals, out, runner):
    """The Guard for the signature of ``vals`` (a list, where the pattern that asked for it is a
    tuple), or False where none can be made."""
    from .compiler import entry

    rp, names = hit.replay, runner.names
    expected, keep = [], [rp, names]
    for v in vals:
        if type(v) is bool:
            expected.append(id(v))
        else:
            a = v._data
            keep.append(a.dtype)
            expected += [id(a.dtype), *a.shape, *a.strides]
    res = None
    if type(out) is np.ndarray and _BY_NP.get(out.dtype) is not None:
        res = (out.dtype, _BY_NP[out.dtype])
        keep.append(res)
    made = entry.make_guard(pattern, rp, Tensor, _SLOTS, res, names, expected)
    return False if made is None else Guard(made[0], made[1], keep, hit, runner.shapes_seen)
