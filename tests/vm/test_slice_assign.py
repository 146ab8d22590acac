"""Assignment into a tensor's items in construct by basic indexing (MindSpore's setitem): ``x[index] =
value`` and ``x[index] op= value`` with ints (negative too), slices of step 1 with constant or
symbolic bounds and ``...``; value a tensor broadcast to the region and cast to x's dtype, or a
number. mindcv's rexnet adds its shortcut with ``x[:, 0:self.in_channels] += shortcut``. Checked
against numpy's in-place assignment in graph mode (L1 and the compiled tiers, one bytecode over
several shapes, with NaN, inf and empty batches) and eagerly; what it does not take is refused at
its line."""

import msvm as ms
import numpy as np
import pytest
from msvm import nn, ops

SPECIAL = np.array([np.nan, np.inf, -np.inf, -0.0], np.float32)


class Shortcut(nn.Cell):
    """rexnet's block end, with a bound from a constant attribute and one from an argument's shape."""

    def __init__(self, c):
        super().__init__()
        self.c = c

    def construct(self, x, s, t):
        x[:, 0:self.c] += s
        x[..., :t.shape[-1]] -= t
        return x


class Mixed(nn.Cell):
    def construct(self, x, v, k):
        x[1] = v                    # an int: a whole row, v broadcast over it
        x[..., -2:] = 0.5           # a number, ... and a negative start
        x[:, 1:3, 2] *= 2.0         # a slice and an int together
        x[-1, :, -1] -= v[0]        # negative ints
        x[0, 0] = k                 # an int argument's value (cast to x's dtype)
        return x


def shortcut_ref(x, s, t):
    x = x.copy()
    x[:, 0:s.shape[1]] += s
    x[..., :t.shape[-1]] -= t
    return x


def mixed_ref(x, v, k):
    x = x.copy()
    x[1] = v
    x[..., -2:] = 0.5
    x[:, 1:3, 2] *= 2.0
    x[-1, :, -1] -= v[0]
    x[0, 0] = k
    return x


@pytest.mark.parametrize("level", ["L1", "L2", "L3", "auto", "pynative"])
def test_assignment_into_items_matches_numpy(level, rng):
    ms.set_context(mode=ms.PYNATIVE_MODE if level == "pynative" else ms.GRAPH_MODE,
                   jit_config={"jit_level": "auto" if level == "pynative" else level})
    try:
        net = Shortcut(3)
        for b, c, h in ((2, 5, 4), (3, 7, 3), (0, 5, 4), (2, 5, 4), (4, 3, 2)):
            x = rng.standard_normal((b, c, h, h)).astype(np.float32)
            x.flat[:: 7] = np.resize(SPECIAL, x.flat[::7].shape)
            s = rng.standard_normal((b, 3, h, h)).astype(np.float32)
            t = rng.standard_normal((1, 1, 1, h - 1)).astype(np.float32)
            got = net(ms.Tensor(x), ms.Tensor(s), ms.Tensor(t)).asnumpy()
            np.testing.assert_array_equal(got, shortcut_ref(x, s, t))
        mixed = Mixed()
        for n in (4, 6, 4):
            x = rng.standard_normal((3, n, 5)).astype(np.float32)
            v = rng.standard_normal(5).astype(np.float32)
            np.testing.assert_array_equal(mixed(ms.Tensor(x), ms.Tensor(v), 7).asnumpy(), mixed_ref(x, v, 7))
    finally:
        from msvm.compiler import tiers

        tiers.wait_for_compiles(120)
        ms.set_context(mode=ms.GRAPH_MODE, jit_config={"jit_level": "auto"})


def test_an_int_tensor_takes_values_cast_to_its_dtype():
    class Ints(nn.Cell):
        def construct(self, x, v):
            x[:, 1:] = v
            x[0] += 2
            return x

    x = np.arange(12, dtype=np.int32).reshape(3, 4)
    v = np.array([1.7, -2.2, 3.9], np.float32)
    want = x.copy()
    want[:, 1:] = v.astype(np.int32)
    want[0] += 2
    got = Ints()(ms.Tensor(x), ms.Tensor(v))
    assert got.dtype == ms.int32
    np.testing.assert_array_equal(got.asnumpy(), want)


def _stepped(x):
    x[:, ::2] = 0.0
    return x


def _too_wide(x):
    x[0] = ms.ops.ones((3, 4), ms.float32)
    return x


def _new_axis(x):
    x[None, 0] = 1.0
    return x


@pytest.mark.parametrize("fn, match", [(_stepped, "slices of step 1"), (_too_wide, "does not broadcast"),
                                       (_new_axis, "slices of step 1")])
def test_what_it_does_not_take_is_refused_at_its_line(fn, match):
    with pytest.raises(ms.MsvmError, match=match) as e:
        ms.jit(fn)(ms.Tensor(np.zeros((2, 4), np.float32)))
    assert "test_slice_assign.py" in str(e.value)


def _empty(x):
    x[3:1] = 7.0
    return x


def _empty_from_the_end(x):
    x[-1:2] = 7.0
    return x


def _inner(x):
    x[1:-1, 0] += 1.0
    return x


def _last_column(x):
    x[..., -1] = 7.0
    return x


def _tail(x):
    x[-2:] = 3.0
    return x


def _past_the_end(x):
    x[1:100] = 2.0
    return x


def _row_five(x):
    x[5] = 7.0
    return x


def _row_minus_six(x):
    x[-6, 1] = 7.0
    return x


@pytest.mark.parametrize("fn", [_empty, _empty_from_the_end, _inner, _last_column, _tail, _past_the_end, _row_five,
                                _row_minus_six])
def test_bounds_as_numpy_takes_them(fn):
    """An empty region leaves x as it is, bounds past the end are clamped, an int index out of range
    raises IndexError when it runs (the dims are symbols), as numpy's in-place assignment."""
    f = ms.jit(fn)
    for shape in ((5, 2), (4, 3), (5, 2)):
        x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
        try:
            want = fn(x.copy())
        except IndexError:
            with pytest.raises(IndexError, match="out of range"):
                f(ms.Tensor(x))
            continue
        np.testing.assert_array_equal(f(ms.Tensor(x)).asnumpy(), want)


def test_an_empty_region_on_a_dim_known_when_compiling():
    @ms.jit
    def f(x):
        y = ops.reshape(x, (5, 2))            # (literal dims: the bounds are clamped while compiling)
        y[3:1] = 7.0
        y[-1:2, 1] += 1.0
        return y

    x = np.arange(10, dtype=np.float32)
    np.testing.assert_array_equal(f(ms.Tensor(x)).asnumpy(), x.reshape(5, 2))
