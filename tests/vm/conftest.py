"""The core tests (no LLVM needed): GRAPH_MODE, interpreter only."""

import msvm as ms
import pytest


@pytest.fixture(autouse=True)
def graph_mode():
    """The core tests run the interpreter (L1); tests/jit covers the compiled tiers."""
    ms.set_context(mode=ms.GRAPH_MODE, jit_config={"dump_bytecode": False, "jit_level": "L1"})
    yield
    ms.set_context(mode=ms.GRAPH_MODE, jit_config={"jit_level": "auto"})
