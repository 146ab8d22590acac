"""Functions that share a code object compile with their own closure, defaults and globals
(issue 15): factory-made jit functions, helpers a Cell's construct calls, Cells made by
factories; each result is checked against numpy."""

import types

import msvm as ms
import numpy as np
import pytest
from msvm import nn, ops

BINARY = [(ops.add, np.add), (ops.sub, np.subtract), (ops.mul, np.multiply), (ops.maximum, np.maximum),
          (ops.minimum, np.minimum)]


def closure_fn(op, k):
    def f(x, y):
        return op(x, y) * k
    return f


def default_fn(op, k):
    def f(x, y, s=k):           # s is omitted by every caller: its default is this function's own
        return op(x, y) + s
    return f


def _reads_globals(x, y):
    return GOP(x, y) - GK       # noqa: F821 - each function object gets its own globals dict


def globals_fn(op, k):
    g = dict(globals(), GOP=op, GK=k)
    return types.FunctionType(_reads_globals.__code__, g, "reads_globals")


def lambda_fn(op, k):
    return lambda x, y: op(x, y) * k + k


KINDS = {"closure": (closure_fn, lambda ref, k, x, y: ref(x, y) * k),
         "default": (default_fn, lambda ref, k, x, y: ref(x, y) + k),
         "globals": (globals_fn, lambda ref, k, x, y: ref(x, y) - k),
         "lambda": (lambda_fn, lambda ref, k, x, y: ref(x, y) * k + k)}


def cases(seed, n):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        kind = list(KINDS)[rng.integers(len(KINDS))]
        op, ref = BINARY[rng.integers(len(BINARY))]
        out.append((kind, op, ref, float(rng.integers(-4, 5))))
    return out


def expected(kind, ref, k, x, y):
    return KINDS[kind][1](ref, k, x, y)


class CallsHelper(nn.Cell):
    """construct calls a helper held as an attribute (inlined)."""

    def __init__(self, helper):
        super().__init__()
        self.helper = helper

    def construct(self, x, y):
        return self.helper(x, y)


def cell_over(helper):
    """A Cell class made by a factory: every class's construct shares one code object."""
    class Closes(nn.Cell):
        def construct(self, x, y):
            return helper(x, y) + 0.0
    return Closes()


def check_all(callables, data):
    """Call every callable twice, interleaved, each against its numpy reference."""
    x, y = data
    for _ in range(2):
        for fn, want in callables:
            out = fn(ms.Tensor(x), ms.Tensor(y))
            np.testing.assert_allclose(out.asnumpy(), want, rtol=1e-6)


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    return rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((3, 4)).astype(np.float32)


@pytest.mark.parametrize("seed", range(3))
def test_factory_made_jit_functions_each_run_their_own(seed, data):
    made = [(ms.jit(KINDS[kind][0](op, k)), expected(kind, ref, k, *data)) for kind, op, ref, k in cases(seed, 24)]
    check_all(made, data)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("how", ["attribute", "attribute-jit", "closure", "closure-jit"])
def test_cells_call_factory_made_helpers(seed, how, data):
    made = []
    for kind, op, ref, k in cases(seed + 10, 16):
        helper = KINDS[kind][0](op, k)
        if how.endswith("jit"):
            helper = ms.jit(helper)
        net = CallsHelper(helper) if how.startswith("attribute") else cell_over(helper)
        made.append((net, expected(kind, ref, k, *data)))
    check_all(made, data)


def test_pynative_and_graph_agree_on_factory_functions(data):
    made = [(KINDS[kind][0](op, k), expected(kind, ref, k, *data)) for kind, op, ref, k in cases(7, 12)]
    ms.set_context(mode=ms.PYNATIVE_MODE)
    try:
        check_all([(CallsHelper(f), want) for f, want in made], data)
    finally:
        ms.set_context(mode=ms.GRAPH_MODE)
    check_all([(CallsHelper(f), want) for f, want in made], data)


SCALE = 2.0


@ms.jit
def scaled(x):
    return x * SCALE


def test_a_global_is_read_when_a_signature_compiles(data):
    """The documented rule: closure values, defaults and globals are compile-time constants of
    the signature that read them; a signature compiled later reads the value of that time."""
    global SCALE
    x = data[0]
    try:
        np.testing.assert_allclose(scaled(ms.Tensor(x)).asnumpy(), x * 2.0)
        SCALE = 3.0
        np.testing.assert_allclose(scaled(ms.Tensor(x)).asnumpy(), x * 2.0)          # compiled: kept
        np.testing.assert_allclose(scaled(ms.Tensor(x.astype(np.float64))).asnumpy(), x * 3.0)  # new signature
        np.testing.assert_allclose(ms.jit(scaled.fn)(ms.Tensor(x)).asnumpy(), x * 3.0)  # a new jit function
    finally:
        SCALE = 2.0
