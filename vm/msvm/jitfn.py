"""``ms.jit``: compile a function (or a Cell's construct) to bytecode."""

from __future__ import annotations

import functools

from .events import SLOW as _SLOW
from .tensor import PARAMETER_SHAPES, Tensor


def jit(function=None, *, capture_mode="ast", jit_level="O0", dynamic=0, fullgraph=False, backend="",
        jit_config=None, **options):
    """Decorator or call: ``@ms.jit`` / ``ms.jit(fn, jit_config={"dump_bytecode": True})``."""
    if capture_mode != "ast":
        raise ValueError(f"ms.jit: capture_mode={capture_mode!r} is not supported; msvm compiles the AST")
    config = dict(jit_config or {})

    def wrap(fn):
        return JitFunction(fn, config)
    return wrap(function) if function is not None else wrap


class JitFunction:
    """A jit-compiled function; as a method of a Cell it defers to the Cell's own compilation."""

    def __init__(self, fn, config):
        self.fn = fn
        self.__msvm_jit__ = fn
        self.config = config
        self._runner = None
        self._fast = None       # (guard, its "no", PARAMETER_SHAPES): set by the runner (executor.aimed)
        functools.update_wrapper(self, fn)
        from .executor import warm_up

        warm_up()

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        if getattr(obj, "__msvm_cell__", False):
            return functools.partial(self.fn, obj)   # Cell.__call__ compiles construct itself
        return functools.partial(self, obj)

    def __call__(self, *args, **kwargs):
        f = self._fast
        tried = f is not None and not _SLOW and PARAMETER_SHAPES[0] == f[2]
        if tried:
            out = f[0](*args, **kwargs)          # the last replayed signature's guard (as Cell.__call__)
            if type(out) is Tensor:
                return out
            tried = out is not f[1]          # the guard took the values: their replay's result, or a fall back
            if tried and out is not self._runner.FALLBACK:
                return self._runner.result(out)
        if self._runner is None:
            from .executor import JitRunner

            self._runner = JitRunner(self.fn, self.config, owner=self)
        return self._runner(args, kwargs, tried)
