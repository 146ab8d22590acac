"""The compiler tests (LLVM): GRAPH_MODE with the default tiers."""

import msvm as ms
import pytest


@pytest.fixture(autouse=True)
def graph_mode():
    ms.set_context(mode=ms.GRAPH_MODE, jit_config={"dump_bytecode": False, "jit_level": "auto",
                                                   "enable_fusion": True})
    yield
    ms.set_context(mode=ms.GRAPH_MODE, jit_config={"jit_level": "auto", "enable_fusion": True})
