"""`raise`/`assert` in construct become run-time checks that raise the user's own exception;
tuple comparisons of shapes; ops.unstack/split/chunk."""

import msvm as ms
import numpy as np
import pytest
from msvm import nn, ops


class Checked(nn.Cell):
    def __init__(self, patch=4, size=(8, 8)):
        super().__init__()
        self.patch, self.size = patch, size

    def construct(self, x, strict=True):
        b, c, h, w = x.shape
        if strict:
            if (h, w) != (self.size[0], self.size[1]):
                raise ValueError(f"Input height and width ({h},{w}) doesn't match model ({self.size[0]},{self.size[1]}).")
        if h % self.patch != 0:
            raise TypeError(f"height {h} is not a multiple of {self.patch}")
        assert b < 5, "batch too big"
        return x * 2.0


@pytest.mark.parametrize("shape,strict,exc,msg", [
    ((2, 3, 8, 8), True, None, None),
    ((2, 3, 8, 9), True, ValueError, "Input height and width (8,9) doesn't match model (8,8)."),
    ((2, 3, 12, 8), True, ValueError, "Input height and width (12,8) doesn't match model (8,8)."),
    ((2, 3, 12, 8), False, None, None),
    ((2, 3, 13, 8), False, TypeError, "height 13 is not a multiple of 4"),
    ((7, 3, 8, 8), True, AssertionError, "batch too big"),
])
def test_raise_under_a_shape_predicate_is_the_users_exception(shape, strict, exc, msg):
    net = Checked()
    x = np.ones(shape, np.float32)
    for _ in range(3):                         # the interpreter and the compiled (replayed) calls alike
        if exc is None:
            np.testing.assert_array_equal(net(ms.Tensor(x), strict=strict).asnumpy(), x * 2)
        else:
            with pytest.raises(exc) as info:
                net(ms.Tensor(x), strict=strict)
            assert str(info.value) == msg
            notes = getattr(info.value, "__notes__", [])
            assert any("Checked.construct at" in n and "test_raise_and_split.py:" in n for n in notes)


def test_the_checks_are_in_the_bytecode_and_dims_print_with_parentheses(tmp_path):
    import subprocess
    import sys
    import textwrap
    src = tmp_path / "checked.py"
    src.write_text(textwrap.dedent("""
        import msvm as ms
        from msvm import nn

        class Checked(nn.Cell):
            def construct(self, x: "B, C, H, W"):
                b, c, h, w = x.shape
                if (h - 16) // 16 > 3:
                    raise ValueError(f"too tall: {h}")
                return x
    """))
    r = subprocess.run([sys.executable, "-m", "msvm", "dump", str(src)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "RAISE" in r.stdout and "'ValueError' ('too tall: ', " in r.stdout
    assert "(((" in r.stdout and "- 16) // 16) > 3" in r.stdout


def test_assert_false_at_compile_time_is_a_frontend_error():
    class Bad(nn.Cell):
        def construct(self, x):
            assert 1 == 2, "never"
            return x

    with pytest.raises(ms.FrontendError, match="assertion is false at compile time"):
        Bad()(ms.Tensor(np.ones(3, np.float32)))


def test_raise_of_a_non_builtin_is_refused_at_its_line():
    class MyErr(Exception):
        pass

    class Bad(nn.Cell):
        def construct(self, x):
            if x.shape[0] > 2:
                raise MyErr("x")
            return x

    with pytest.raises(ms.FrontendError, match="construct may raise the built-in exceptions"):
        Bad()(ms.Tensor(np.ones(3, np.float32)))


class Parts(nn.Cell):
    def construct(self, x):
        x = ops.reshape(x, (3, x.shape[1], 4))     # the split axes' sizes are known (3 and 4)
        q, k, v = ops.unstack(x, 0)
        a, b = ops.split(v, 2, axis=-1)
        c = ops.chunk(q, 3, axis=-1)
        d = ops.Unstack(axis=1)(k)
        e = ops.Split(axis=1, output_num=2)(v)
        f = ops.split(v, [1, 3], axis=1)
        return a + b, c[0], c[-1], d[1], e[1], f[1]


@pytest.mark.parametrize("n", [2, 5])
def test_unstack_split_chunk_match_numpy(n):
    x = np.random.default_rng(n).standard_normal((3, n, 4)).astype(np.float32)
    net = Parts()
    for _ in range(2):
        ab, c0, clast, d1, e1, f1 = net(ms.Tensor(x))
        q, k, v = x
        np.testing.assert_array_equal(ab.asnumpy(), v[:, :2] + v[:, 2:])
        np.testing.assert_array_equal(c0.asnumpy(), q[:, :2])
        np.testing.assert_array_equal(clast.asnumpy(), q[:, 2:])
        np.testing.assert_array_equal(d1.asnumpy(), k[:, 1])
        np.testing.assert_array_equal(e1.asnumpy(), v[:, 2:])
        np.testing.assert_array_equal(f1.asnumpy(), v[:, 1:])


def test_split_needs_a_known_axis_size():
    class Dyn(nn.Cell):
        def construct(self, x):
            a, b = ops.split(x, 1, axis=0)
            return a

    net = Dyn()
    net.set_inputs(ms.Tensor(shape=[None, 2], dtype=ms.float32))     # declared dynamic: compiled per exact shape
    with pytest.raises(ms.FrontendError, match="cannot unpack 5 values into 2 names"):
        net(ms.Tensor(np.ones((5, 2), np.float32)))
    np.testing.assert_array_equal(net(ms.Tensor(np.ones((2, 2), np.float32))).asnumpy(), np.ones((1, 2)))
    # undeclared, the construct compiles for the call's exact shape (issue 21), so the unpacking is what is wrong
    with pytest.raises(ms.FrontendError, match="cannot unpack 5 values into 2 names"):
        Dyn()(ms.Tensor(np.ones((5, 2), np.float32)))


def _swap_halves(t):
    p, q = ops.chunk(t, 2, 1)
    return ops.concat((q, p), 1)


@ms.jit
def _jit_split(t, k=0.5):
    a, b = ops.split(t, [2, t.shape[1] - 2], 1)
    return ops.concat((b, a * k), 1)


def _make_chunker(scale):
    def chunker(t):
        return _swap_halves(t) * scale
    return chunker


_chunker = _make_chunker(2.0)


class Helpers(nn.Cell):
    def construct(self, x):
        return _swap_halves(x), _jit_split(x), _chunker(x)


@pytest.mark.parametrize("n", [5, 8])
def test_split_and_chunk_inside_helpers_compile_for_the_calls_shape(n):
    """(found by the random MindSpore-source programs) split and chunk of a dim the code cannot know
    compile for the call's exact shape (issue 21) also inside helper functions — plain, @ms.jit and
    made by a factory — whose statements' errors used to lose the "needs known dims" mark when the
    calling statement wrapped them again."""
    x = np.random.default_rng(n).standard_normal((3, n)).astype(np.float32)
    a, b, c = Helpers()(ms.Tensor(x))
    half = -(-n // 2)
    np.testing.assert_array_equal(a.asnumpy(), np.concatenate((x[:, half:], x[:, :half]), 1))
    np.testing.assert_array_equal(b.asnumpy(), np.concatenate((x[:, 2:], x[:, :2] * np.float32(0.5)), 1))
    np.testing.assert_array_equal(c.asnumpy(), np.concatenate((x[:, half:], x[:, :half]), 1) * 2)


def test_an_error_inside_a_helper_points_at_the_helpers_line():
    def bad(t):
        return ops.reshape(t, (7, -1))

    @ms.jit
    def f(x):
        return bad(x) + 1.0

    with pytest.raises(ms.MsvmError) as e:
        f(ms.Tensor(np.ones((3, 4), np.float32)))
    assert f"{__file__}:{bad.__code__.co_firstlineno + 1}:" in str(e.value), str(e.value)
    assert str(e.value).count(__file__) == 1, "located once, at the helper's statement"


class Strict(nn.Cell):
    """ViT's pattern: the size check comes before a position embedding that only fits one size."""

    def __init__(self):
        super().__init__()
        self.pos = ms.Parameter(ms.Tensor(np.ones((1, 16), np.float32)), name="pos")

    def construct(self, x):
        b, n = x.shape
        if n != 16:
            raise ValueError(f"Input length ({n}) doesn't match model (16).")
        return x + self.pos


@pytest.mark.parametrize("n", [16, 9])
def test_a_users_raise_comes_before_an_entry_check_it_guards(n):
    net = Strict()
    x = ms.Tensor(np.ones((2, n), np.float32))
    if n == 16:
        np.testing.assert_array_equal(net(x).asnumpy(), np.full((2, 16), 2, np.float32))
    else:
        with pytest.raises(ValueError, match=r"Input length \(9\) doesn't match model \(16\)\."):
            net(x)
