"""``at(level)``: run a block at one jit_level in graph mode, or ("pynative") eagerly, then back to the
defaults, with the block's background compiles waited for (no compile of its Cells lands in a later
test's records). The tests of model-zoo forms run each case at L1, compiled ("auto") and in pynative."""

import contextlib

import msvm as ms


@contextlib.contextmanager
def at(level):
    ms.set_context(mode=ms.PYNATIVE_MODE if level == "pynative" else ms.GRAPH_MODE,
                   jit_config={"jit_level": "auto" if level == "pynative" else level})
    try:
        yield
    finally:
        from msvm.compiler import tiers

        tiers.wait_for_compiles(120)
        ms.set_context(mode=ms.GRAPH_MODE, jit_config={"jit_level": "auto"})
