"""Random streams: MindSpore's seed semantics for the RANDOM instruction.

In MindSpore each random primitive owns its generator, made from the op's ``(seed, seed2)``:
two primitives built with the same non-zero seeds give the same numbers, and one primitive's
successive calls continue its sequence (so two calls differ). With both seeds 0 the numbers
come from the global seed (``set_seed``) when one is set, else from the OS. msvm keeps that:
a *stream* is an int naming one generator; a primitive takes a new stream when it is built
(``new_stream(owner)``; it is dropped when the primitive is), a function face (``ops.shuffle(x,
seed=3)``) takes the stream of its (name, seed, seed2), as MindSpore's cached primitives do.
The RANDOM instruction carries ``(seed, seed2, stream)``; its kernel draws from
``generator(...)``, a numpy ``Generator`` (PCG64) seeded from ``SeedSequence([seed, seed2])``.
The numbers are numpy's, not MindSpore's (its Philox/MT streams are not reproduced): tests can
rely on shapes, dtypes, ranges, statistics and same-seed reproducibility, not on values.
"""

from __future__ import annotations

import itertools
import threading
import weakref

import numpy as np

_lock = threading.RLock()     # (re-entrant: a primitive's finalizer, run by the garbage collector while this
#                                thread holds the lock, forgets its stream under the same lock)
_streams: dict[tuple, np.random.Generator] = {}     # (stream, seed, seed2) -> its generator
_ids = itertools.count(1)
_named: dict = {}                 # (function name, seed, seed2) -> stream
_global = {"seed": None, "k": 0}   # the global seed and how many 0-seeded streams drew from it since


def check_seed(v, what="seed") -> int:
    """An op's seed: an int >= 0 (bools and floats are TypeErrors, negatives ValueErrors)."""
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{what} must be an int, got {type(v).__name__} {v!r}")
    if v < 0:
        raise ValueError(f"{what} must be >= 0, got {v}")
    return int(v)


def set_seed(seed) -> None:
    """MindSpore's ``set_seed``: 0-seeded ops made or first run after it draw reproducibly."""
    seed = check_seed(seed)
    with _lock:
        _global["seed"], _global["k"] = seed, 0
        _named.clear()


def get_seed():
    return _global["seed"]


def new_stream(owner=None) -> int:
    """A stream of its own (for one primitive; forgotten when ``owner`` is collected)."""
    sid = next(_ids)
    if owner is not None:
        weakref.finalize(owner, _forget, sid)
    return sid


def _forget(sid: int) -> None:
    with _lock:
        for key in [k for k in _streams if k[0] == sid]:
            del _streams[key]


def named_stream(name: str, seed, seed2) -> int:
    """The stream of a function face's call: shared by calls with the same (name, seed, seed2)
    when a seed is given; a new one per call when none is (and no global seed is set)."""
    if seed is None and seed2 is None and _global["seed"] is None:
        return new_stream()
    key = (name, seed, seed2)
    with _lock:
        sid = _named.get(key)
        if sid is None:
            sid = _named[key] = next(_ids)
        return sid


def generator(seed: int, seed2: int, stream: int) -> np.random.Generator:
    """The generator of ``stream`` for these seeds (a seed that is a run-time int argument of
    construct may differ between calls: each value has its own sequence)."""
    key = (stream, seed, seed2)
    g = _streams.get(key)
    if g is None:
        with _lock:
            g = _streams.get(key)
            if g is None:
                if seed or seed2:
                    ss = np.random.SeedSequence([seed, seed2])
                elif _global["seed"] is not None:
                    _global["k"] += 1
                    ss = np.random.SeedSequence([_global["seed"], _global["k"]])
                else:
                    ss = np.random.SeedSequence()
                g = _streams[key] = np.random.Generator(np.random.PCG64(ss))
    return g
