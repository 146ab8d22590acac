"""``ms.jit``: compile a function (or a Cell's construct) to bytecode."""

from __future__ import annotations

import functools

from . import callpath


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
        self._guard = None      # callpath.Guard: set by the call path (callpath.point)
        functools.update_wrapper(self, fn)
        from .executor import warm_up

        warm_up()

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        if getattr(obj, "__msvm_cell__", False):
            return functools.partial(self.fn, obj)   # Cell.__call__ compiles construct itself
        return functools.partial(self, obj)

    # a call: its guard, then its runner's memo, replay and interpreter
    __call__ = callpath.jit_call

    def _make_runner(self):
        from .executor import JitRunner

        self._runner = JitRunner(self.fn, self.config, owner=self)
        return self._runner
