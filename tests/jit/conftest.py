"""The compiler tests (LLVM): GRAPH_MODE with the default tiers."""

import msvm as ms
import pytest


@pytest.fixture(autouse=True)
def graph_mode():
    ms.set_context(mode=ms.GRAPH_MODE, jit_config={"dump_bytecode": False, "jit_level": "auto",
                                                   "enable_fusion": True})
    yield
    ms.set_context(mode=ms.GRAPH_MODE, jit_config={"jit_level": "auto", "enable_fusion": True})


@pytest.fixture(autouse=True)
def fresh_plans():
    """Plans are shared by every site of a key in the process (planning.shared_plan); tests patch
    the planners' rules, so each starts with none."""
    from msvm.compiler import planning

    planning.forget_plans()
    yield
    planning.forget_plans()


@pytest.fixture
def level():
    """``level(name)`` sets jit_level for one test; the defaults come back after it."""
    def set_level(name):
        ms.set_context(jit_config={"jit_level": name})
    yield set_level
    ms.set_context(jit_config={"jit_level": "auto", "enable_fusion": True})
