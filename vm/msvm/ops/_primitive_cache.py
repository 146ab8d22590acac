"""``mindspore.ops._primitive_cache._get_cache_prim``: one primitive object per (class, constructor
arguments), as MindSpore's functional ops reuse them; works eagerly and inside construct (the
frontend calls msvm functions directly, so the primitive is built while the Cell compiles)."""

from __future__ import annotations

_CACHE: dict = {}


def _get_cache_prim(cls):
    def make(*args, **kwargs):
        try:
            key = (cls, args, tuple(sorted(kwargs.items())))
            hash(key)
        except TypeError:                  # (unhashable arguments: a fresh primitive)
            return cls(*args, **kwargs)
        prim = _CACHE.get(key)
        if prim is None:
            prim = _CACHE[key] = cls(*args, **kwargs)
        return prim
    make.__name__ = f"_get_cache_prim({getattr(cls, '__name__', cls)})"
    return make
