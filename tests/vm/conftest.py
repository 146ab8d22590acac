"""Shared fixtures for the VM tests (no LLVM, no servers, no browser)."""

import os
import sys

import msvm as ms
import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples")
if EXAMPLES not in sys.path:
    sys.path.insert(0, EXAMPLES)


@pytest.fixture(autouse=True)
def graph_mode():
    """The core tests run the interpreter (L1); tests/jit covers the compiled tiers."""
    ms.set_context(mode=ms.GRAPH_MODE, jit_config={"dump_bytecode": False, "jit_level": "L1"})
    yield
    ms.set_context(mode=ms.GRAPH_MODE, jit_config={"jit_level": "auto"})


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture(autouse=True, scope="session")
def private_kernel_cache(tmp_path_factory):
    """Tests never touch the user's ~/.cache: kernels go to a fresh directory."""
    d = tmp_path_factory.mktemp("kernels")
    os.environ["MSVM_CACHE_DIR"] = str(d)
    from msvm.compiler import tiers

    tiers.reset_cache()
    yield d
