"""Loops in construct beyond ``for i in range(n)``: while loops, break, continue and the else clauses
(edgenext's ``while begin + width < C``, real code's searches and early exits), against numpy, at L1,
compiled and in pynative; a loop whose count hangs on symbolic dims compiles for the call's exact shapes,
and the errors say what and where."""

import msvm as ms
import numpy as np
import pytest
from levels import at
from msvm import nn, ops
from msvm.errors import FrontendError

LEVELS = ["L1", "auto", "pynative"]


class Split(nn.Cell):
    """edgenext's SDTAEncoder.ssplit: channel chunks of ``width`` by a while loop over ints, then a
    loop over the chunks with a running sum."""

    def __init__(self, width):
        super().__init__()
        self.width = width

    def ssplit(self, x, width):
        b, c, h, w = x.shape
        begin = 0
        temp = []
        while begin + width < c:
            temp.append(x[:, begin: begin + width, :, :])
            begin += width
        temp.append(x[:, begin:, :, :])
        return temp

    def construct(self, x):
        parts = self.ssplit(x, self.width)
        out = None
        for i in range(len(parts)):
            sp = parts[i] if i == 0 else parts[i] + out[:, :parts[i].shape[1]]
            out = sp if out is None else ops.concat((out, sp), axis=1)
        return out


def split_ref(x, width):
    c = x.shape[1]
    begin, parts = 0, []
    while begin + width < c:
        parts.append(x[:, begin:begin + width])
        begin += width
    parts.append(x[:, begin:])
    out = None
    for i, p in enumerate(parts):
        sp = p if i == 0 else p + out[:, :p.shape[1]]
        out = sp if out is None else np.concatenate((out, sp), axis=1)
    return out


@pytest.mark.parametrize("level", LEVELS)
def test_a_while_loop_over_ints_is_unrolled(level, rng):
    net = Split(3)
    with at(level):
        for shape in [(2, 8, 4, 4), (1, 8, 5, 3), (3, 8, 2, 6)]:
            x = rng.standard_normal(shape).astype(np.float32)
            for _ in range(3):
                np.testing.assert_allclose(net(ms.Tensor(x)).asnumpy(), split_ref(x, 3), rtol=1e-6, atol=1e-6)


class Jumps(nn.Cell):
    """break, continue and both else clauses over constants and attributes."""

    def __init__(self, stop=3):
        super().__init__()
        self.stop = stop
        self.skip = (1,)

    def construct(self, x):
        y = x
        for i in range(6):
            if i in self.skip:
                continue
            if i == self.stop:
                break
            y = y * 2.0 + i
        else:
            y = y - 100.0               # (where no break: self.stop past the range)
        n = 0
        while True:
            n += 1
            if n > 2:
                break
            y = y + n
        for j in (4, 5):
            if j == 7:
                break
        else:
            y = y + j                   # (reached: no break)
        k = 0
        while k < 2:
            k += 1
        else:
            y = y * k
        return y


def jumps_ref(x, stop=3):
    y = x
    for i in range(6):
        if i == 1:
            continue
        if i == stop:
            break
        y = y * 2.0 + i
    else:
        y = y - 100.0
    return ((y + 1 + 2) + 5) * 2


@pytest.mark.parametrize("level", LEVELS)
def test_break_continue_and_else_run_as_python_runs_them(level, rng):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    for stop in (3, 9):
        with at(level):
            np.testing.assert_allclose(Jumps(stop)(ms.Tensor(x)).asnumpy(), jumps_ref(x, stop), rtol=1e-6)


class ShapeStop(nn.Cell):
    """A loop's count hanging on a dim: a while loop on it, and a break under a shape condition in a
    for loop. With set_inputs' None dims the bytecode cannot hold the count: the caller compiles the
    call's exact shapes."""

    def construct(self, x):
        n = x.shape[0]
        y = x
        k = 1
        while k < n:
            y = y + k
            k *= 2
        for i in range(4):
            if x.shape[1] <= i:
                break
            y = y * 1.5
        return y


def shape_stop_ref(x):
    y, k = x, 1
    while k < x.shape[0]:
        y = y + k
        k *= 2
    for i in range(4):
        if x.shape[1] <= i:
            break
        y = y * 1.5
    return y


@pytest.mark.parametrize("level", LEVELS)
def test_a_loop_counted_by_symbolic_dims_compiles_exact_shapes(level, rng):
    net = ShapeStop()
    net.set_inputs(ms.Tensor(shape=[None, None], dtype=ms.float32))
    with at(level):
        for shape in [(5, 2), (1, 6), (9, 3), (5, 2)]:
            x = rng.standard_normal(shape).astype(np.float32)
            np.testing.assert_allclose(net(ms.Tensor(x)).asnumpy(), shape_stop_ref(x), rtol=1e-6)


class BreakInSymbolicLoop(nn.Cell):
    def construct(self, x):
        y = x
        for i in range(x.shape[0]):
            if i == 2:
                break
            y = y + 1.0
        return y


def test_a_break_in_a_symbolic_range_compiles_exact_shapes(rng):
    net = BreakInSymbolicLoop()
    net.set_inputs(ms.Tensor(shape=[None, 3], dtype=ms.float32))
    for n in (1, 2, 5):
        x = rng.standard_normal((n, 3)).astype(np.float32)
        np.testing.assert_allclose(net(ms.Tensor(x)).asnumpy(), x + min(n, 2), rtol=1e-6)


class Endless(nn.Cell):
    def construct(self, x):
        k = 0
        while k >= 0:
            k += 1
        return x


class OnValues(nn.Cell):
    def construct(self, x):
        while x.sum() > 0:
            x = x - 1.0
        return x


@pytest.mark.parametrize("cell, words", [
    (Endless, "while loop still running after 4096 passes"),
    (OnValues, "a while loop on a tensor's values is not supported"),
])
def test_a_loop_that_cannot_be_unrolled_says_where(cell, words):
    with pytest.raises(FrontendError) as e:
        cell()(ms.Tensor(np.ones((2, 2), np.float32)))
    assert words in e.value.message
    assert e.value.filename.endswith("test_loops.py") and e.value.line > 0


class FlagBreak(nn.Cell):
    """A bool argument decides a break and a while loop's passes: compiled per flag value."""

    def construct(self, x, flag=True):
        for _ in range(4):
            if flag:
                break
            x = x + 1.0
        n = 0
        go = not flag
        while go:
            x = x * 2.0
            n += 1
            go = n < 2
        return x


@pytest.mark.parametrize("level", LEVELS)
def test_a_flag_argument_decides_a_break_and_a_while(level):
    net = FlagBreak()
    x = np.ones((2, 3), np.float32)
    with at(level):
        for flag in (True, False, True, False):
            np.testing.assert_array_equal(net(ms.Tensor(x), flag).asnumpy(), x if flag else (x + 4.0) * 4.0)


class Nested(nn.Cell):
    def construct(self, x):
        k = 0
        for _ in range(300):
            for _ in range(300):
                k += 1
        return x * k


def test_nested_unrolled_loops_are_held_to_a_total():
    with pytest.raises(FrontendError) as e:
        Nested()(ms.Tensor(np.ones(2, np.float32)))
    assert "the loops unroll more than 65536 passes" in e.value.message and e.value.line > 0


class Strides(nn.Cell):
    """mindyolo's heads: ``for i, s in enumerate(self.stride)`` over a Parameter, zip with a tensor, a loop over
    a tensor's rows, comprehensions (list, generator, dict) whose values are pinned as they are made and whose
    loop names do not leak, ops.stop_gradient."""

    def __init__(self):
        super().__init__()
        self.stride = ms.Parameter(ms.Tensor(np.array([8, 16, 32], np.int32)), requires_grad=False)

    def construct(self, x, feats):
        i = 100
        out = []
        for k, s in enumerate(self.stride):
            out.append(x * s.astype(ms.float32) + k)
        for a, b in zip(feats, self.stride):
            out.append(a.sum() * b.astype(ms.float32))
        rows = [ops.stop_gradient(r) * 2.0 for r in x]
        flat = ops.concat([o.reshape((1, -1)) for o in out[:3] if o.shape[0] == 2], 1)
        total = sum(r.sum() for r in rows)
        named = {f"r{i}": r for i, r in enumerate(rows)}
        pairs = [a * b for a in (1.0, 2.0) for b in (3.0, 4.0) if a < b]
        return flat, out[3], out[5], total, named["r1"], pairs[-1] + x[0, 0] * 0.0, i


def strides_ref(x, feats):
    out = [x * s + k for k, s in enumerate((8, 16, 32))] + [a.sum() * b for a, b in zip(feats, (8, 16, 32))]
    rows = [r * 2.0 for r in x]
    flat = np.concatenate([o.reshape(1, -1) for o in out[:3]], 1)
    return flat, out[3], out[5], sum(r.sum() for r in rows), rows[1], 8.0, 100


@pytest.mark.parametrize("level", LEVELS)
def test_iterating_over_tensors_and_comprehensions(level, rng):
    net = Strides()
    with at(level):
        for shape in ((2, 3), (2, 5)):
            x = rng.standard_normal(shape).astype(np.float32)
            f = rng.standard_normal((4, 3)).astype(np.float32)
            for got, want in zip(net(ms.Tensor(x), ms.Tensor(f)), strides_ref(x, f)):
                got = got.asnumpy() if hasattr(got, "asnumpy") else got
                np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=1e-5, atol=1e-5)
    assert ops.stop_gradient is not None and ops.StopGradient()(ms.Tensor(np.ones(2, np.float32))).shape == (2,)


class LongRows(nn.Cell):
    def construct(self, x):
        return ops.concat([r * 2.0 for r in x], 0), ops.concat([x[i:i + 1] * i for i in range(x.shape[0])], 0)


def test_iterating_over_a_symbolic_dim_compiles_exact_shapes(rng):
    net = LongRows()
    net.set_inputs(ms.Tensor(shape=[None, 3], dtype=ms.float32))
    for n in (2, 4, 2):
        x = rng.standard_normal((n, 3)).astype(np.float32)
        rows, scaled = net(ms.Tensor(x))
        np.testing.assert_allclose(rows.asnumpy(), (x * 2.0).reshape(-1), rtol=1e-6)
        np.testing.assert_allclose(scaled.asnumpy(), x * np.arange(n)[:, None], rtol=1e-6)


class BreakInElse(nn.Cell):
    """A break on the else side of a shape condition (it was taken for a compile-time one: a label never placed),
    and an inlined helper returning from inside a loop on one side of a shape condition."""

    def construct(self, x):
        for _ in range(3):
            if x.shape[1] == 4:
                x = x * 2.0
            else:
                break
            x = x + 1.0
        return first_wide(x)


def first_wide(x):
    for i in range(3):
        if x.shape[0] > i + 1:
            return x * float(i)
        x = x + 1.0
    return x * 100.0


@pytest.mark.parametrize("level", LEVELS)
def test_a_break_on_the_else_side_and_a_return_inside_a_loop(level):
    net = BreakInElse()
    net.set_inputs(ms.Tensor(shape=[None, None], dtype=ms.float32))
    with at(level):
        for shape in ((3, 4), (1, 4), (3, 5), (1, 2)):
            x = np.ones(shape, np.float32)
            y = x
            for _ in range(3):
                if shape[1] != 4:
                    break
                y = y * 2.0 + 1.0
            z = next((y + i) * i for i in range(3) if shape[0] > i + 1) if shape[0] > 1 else (y + 3) * 100.0
            np.testing.assert_array_equal(net(ms.Tensor(x)).asnumpy(), z)


class LateBound(nn.Cell):
    def construct(self, x):
        s = 1.0
        f = lambda t: t * s          # noqa: E731 - the form under test
        s = 3.0
        return f(x)


def test_a_lambda_reads_names_when_it_is_called():
    x = np.ones(2, np.float32)
    for level in ("L1", "auto", "pynative"):
        with at(level):
            np.testing.assert_array_equal(LateBound()(ms.Tensor(x)).asnumpy(), x * 3.0)
