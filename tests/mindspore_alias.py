"""msvm's MindSpore alias (``msvm.as_mindspore()``) for one test module or test: installed, then
taken off again with every ``mindspore*`` / ``mindcv*`` module forgotten, so other modules' tests
see no alias (``installed``); the ``mindcv`` fixture gives the package under it for a module."""

import contextlib
import importlib.util
import sys

import pytest


@contextlib.contextmanager
def installed():
    import msvm as ms  # (here, not at import: the root conftest imports this module before msvm may be)
    from msvm import compat

    was_active = compat.is_active()
    ms.as_mindspore()
    try:
        yield
    finally:
        if not was_active:
            sys.meta_path[:] = [f for f in sys.meta_path if f is not compat._FINDER]
            for name in [n for n in sys.modules if n.split(".")[0] in ("mindspore", "mindcv")]:
                del sys.modules[name]
            assert not compat.is_active()


@pytest.fixture(scope="module")
def mindcv():
    if importlib.util.find_spec("mindcv") is None:
        pytest.fail("mindcv is not installed: `make` installs it (pip install --no-deps mindcv==0.3.0)")
    with installed():
        import mindcv
        yield mindcv
