"""Calling a Cell or a jit function with bad or optional arguments (issue 15): every bad call
is a TypeError that names the Cell/function and the parameter; ``m=None`` optional tensors,
bool flags given 0/1 and int arguments tested for truth run as Python would."""

import msvm as ms
import numpy as np
import pytest
from msvm import nn


class Masked(nn.Cell):
    def construct(self, x, m=None, training=False):
        if m is not None:
            x = x * m
        if training:
            x = x + 1.0
        return x


@ms.jit
def masked(x, m=None, training=False):
    if m is not None:
        x = x * m
    if training:
        x = x + 1.0
    return x


def reference(x, m=None, training=False):
    if m is not None:
        x = x * m
    return x + 1.0 if training else x


CALLEES = {"cell": (Masked, "Masked.construct()"), "jit": (lambda: masked, "masked()")}

X = np.arange(6, dtype=np.float32).reshape(2, 3)
M = np.full((2, 3), 3.0, np.float32)


def T(a):
    return ms.Tensor(a)


# (args, kwargs) -> the reference's (args, kwargs), with None standing for a Tensor argument
GOOD = [
    ((X,), {}), ((X, M), {}), ((X, None), {}), ((X,), {"m": M}), ((X,), {"training": True}),
    ((X, M, True), {}), ((X, None, False), {}), ((X,), {"m": None, "training": True}), ((), {"x": X}),
    ((X,), {"training": 1}), ((X, M), {"training": 0}), ((X, None, 1), {}), ((X,), {"training": np.bool_(True)}),
]


@pytest.mark.parametrize("kind", sorted(CALLEES))
@pytest.mark.parametrize("args,kwargs", GOOD)
def test_optional_tensor_and_flag_arguments_run(kind, args, kwargs):
    fn = CALLEES[kind][0]()
    wrap = lambda v: T(v) if isinstance(v, np.ndarray) else v
    want = reference(*args, **{k: v for k, v in kwargs.items()})
    for _ in range(3):              # again: the call memo and its replay take the same values
        out = fn(*[wrap(a) for a in args], **{k: wrap(v) for k, v in kwargs.items()})
        assert isinstance(out, ms.Tensor)
        np.testing.assert_allclose(out.asnumpy(), want)


BAD = [  # (args, kwargs, what the message must say besides the callee's name)
    ((), {}, "missing 1 required argument: 'x'"),
    ((X, M, True, 4), {}, "takes 3 arguments (x, m, training) but 4 were given"),
    ((X,), {"z": 1}, "unexpected keyword argument 'z'"),
    ((X,), {"x": X}, "multiple values for argument 'x'"),
    ((X, M), {"m": M}, "multiple values for argument 'm'"),
    ((X, None, None), {}, "argument 'training' is a bool flag"),
    ((X,), {"training": "yes"}, "argument 'training' is a bool flag"),
    ((X,), {"training": [True]}, "argument 'training' is a bool flag"),
    ((X,), {"training": 2}, "argument 'training' is a bool flag"),
    ((X,), {"training": 0.5}, "argument 'training' is a bool flag"),
    ((X, "mask"), {}, "argument 'm' = 'mask' (str)"),
    ((X, [1.0, 2.0]), {}, "argument 'm' = [1.0, 2.0] (list)"),
    (("x",), {}, "argument 'x' = 'x' (str)"),
    ((None,), {}, "argument 'x' = None (NoneType)"),
]


class TailMasked(nn.Cell):
    def construct(self, x, m=None):
        if m is not None:
            return x * m
        return x


@ms.jit
def tail_masked(x, m=None):
    if m is not None:
        return x * m
    return x


@pytest.mark.parametrize("fn", [TailMasked(), tail_masked], ids=["cell", "jit"])
@pytest.mark.parametrize("m", [None, M, None, "M"])
def test_a_trailing_optional_tensor_argument_may_be_omitted(fn, m):
    """Baked-in arguments last (``m=None``): the run-time ones are still picked out of the call."""
    for _ in range(3):
        out = fn(T(X)) if m is None else fn(T(X), T(M)) if isinstance(m, np.ndarray) else fn(T(X), m=T(M))
        np.testing.assert_allclose(out.asnumpy(), X if m is None else X * M)


@pytest.mark.parametrize("kind", sorted(CALLEES))
@pytest.mark.parametrize("args,kwargs,says", BAD)
def test_bad_calls_are_type_errors_naming_callee_and_parameter(kind, args, kwargs, says):
    make, label = CALLEES[kind]
    fn = make()
    wrap = lambda v: T(v) if isinstance(v, np.ndarray) else v
    fn(T(X))                        # a good call first: the bad one must not be taken by the fast paths
    for _ in range(2):
        with pytest.raises(TypeError) as e:
            fn(*[wrap(a) for a in args], **{k: wrap(v) for k, v in kwargs.items()})
        assert label in str(e.value) and says in str(e.value), str(e.value)
        assert "NameError" not in str(e.value)


class Inner(nn.Cell):
    def construct(self, x, scale=None):
        return x if scale is None else x * scale


class Outer(nn.Cell):
    def __init__(self, call):
        super().__init__()
        self.inner = Inner()
        self.flagged = Masked()
        self.call = call

    def construct(self, x):
        if self.call == "missing":
            return self.inner()
        if self.call == "extra":
            return self.inner(x, 2.0, 3.0)
        if self.call == "keyword":
            return self.inner(x, factor=2.0)
        if self.call == "flag":
            return self.flagged(x, training="yes")
        return self.inner(x, scale=2.0) + self.inner(x)


@pytest.mark.parametrize("call,says", [("missing", "missing 1 required argument: 'x'"),
                                       ("extra", "takes 2 arguments (x, scale) but 3 were given"),
                                       ("keyword", "unexpected keyword argument 'factor'"),
                                       ("flag", "argument 'training' is a bool flag")])
def test_bad_sub_cell_calls_name_the_sub_cell(call, says):
    with pytest.raises(ms.errors.FrontendError) as e:
        Outer(call)(T(X))
    assert ("Masked" if call == "flag" else "Inner") + ".construct()" in str(e.value) and says in str(e.value)


def test_sub_cell_optional_argument_omitted():
    np.testing.assert_allclose(Outer("good")(T(X)).asnumpy(), X * 3)


class IntTruth(nn.Cell):
    def construct(self, x, n, k=0):
        if n:
            x = x + 1.0
        if not k:
            x = x * 2.0
        if n and k:
            x = x - 1.0
        if not (n or k):
            x = -x
        return x


@pytest.mark.parametrize("n,k", [(0, 0), (1, 0), (5, 0), (0, 3), (2, -1), (-1, 1)])
def test_truth_of_an_int_argument_is_tested_at_run_time(n, k):
    """``if n:`` on an int argument (a run-time symbol) is ``n != 0``, as in Python."""
    def ref(x, n, k=0):
        if n:
            x = x + 1.0
        if not k:
            x = x * 2.0
        if n and k:
            x = x - 1.0
        if not (n or k):
            x = -x
        return x
    net = IntTruth()
    for _ in range(3):
        np.testing.assert_allclose(net(T(X), n, k).asnumpy(), ref(X, n, k))
    assert len(net._runner.variants) == 1       # one bytecode for every value of n and k


def test_argument_errors_are_frontend_errors_with_a_location():
    with pytest.raises(ms.errors.ArgumentError) as e:
        masked(T(X), "mask")
    assert e.value.filename == __file__ and e.value.line == masked.fn.__code__.co_firstlineno + 3


def test_an_int_flag_runs_the_flag_code():
    net = Masked()
    a = net(T(X), training=1).asnumpy()
    b = net(T(X), training=True).asnumpy()
    np.testing.assert_allclose(a, b)
