"""Ops msvm already had that gave wrong answers or misleading errors against MindSpore
(issue 21): each case runs eagerly (PyNative) and as bytecode in a Cell (L1), against numpy."""

import msvm as ms
import numpy as np
import pytest
from msvm import nn, ops
from msvm.errors import FrontendError
from scipy import special

R = np.random.default_rng(21)


def f32(*shape):
    return R.standard_normal(shape).astype(np.float32)


def gelu_erf(x):
    return 0.5 * x * (1 + special.erf(x / np.float32(np.sqrt(2))))


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(np.float32(np.sqrt(2 / np.pi)) * (x + 0.044715 * x ** 3)))


class Apply(nn.Cell):
    """construct(x, ...) = fn(x, ...), with fn's sub-Cells/primitives made in __init__."""

    def __init__(self, make):
        super().__init__()
        self.fn = make()

    def construct(self, x):
        return self.fn(x)


def _both(make, x):
    """(eager result, Cell result in GRAPH_MODE) of make()(x)."""
    ms.set_context(mode=ms.PYNATIVE_MODE)
    eager = make()(ms.Tensor(x)).asnumpy()
    ms.set_context(mode=ms.GRAPH_MODE)
    graph = Apply(make)(ms.Tensor(x)).asnumpy()
    return eager, graph


# --- 2. each GELU face computes what MindSpore's does --------------------------------------

GELU_FACES = [
    ("ops.GeLU", lambda: ops.GeLU(), gelu_tanh),                     # the primitive: tanh form
    ("ops.gelu", lambda: ops.gelu, gelu_erf),                        # default approximate='none'
    ("ops.gelu_tanh", lambda: (lambda x: ops.gelu(x, approximate="tanh")), gelu_tanh),
    ("nn.GELU", lambda: nn.GELU(), gelu_tanh),                       # default approximate=True
    ("nn.GELU_exact", lambda: nn.GELU(approximate=False), gelu_erf),
    ("nn.Dense_gelu", None, gelu_tanh),                              # activation='gelu' is nn.GELU()
]


@pytest.mark.parametrize("name,make,ref", GELU_FACES, ids=[f[0] for f in GELU_FACES])
def test_gelu_faces_match_mindspore(name, make, ref):
    x = f32(4, 6) * 3
    if make is None:
        w = np.eye(6, dtype=np.float32)
        make = lambda: nn.Dense(6, 6, weight_init=ms.Tensor(w), activation="gelu")  # noqa: E731
    eager, graph = _both(make, x)
    np.testing.assert_allclose(eager, ref(x), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(graph, ref(x), rtol=1e-5, atol=1e-6)
    other = gelu_erf if ref is gelu_tanh else gelu_tanh
    assert np.abs(graph - other(x)).max() > 1e-4       # the two forms differ by up to ~4e-4


# --- 4. Squeeze without an axis drops the dims the signature knows are 1 -------------------

@pytest.mark.parametrize("shape", [(1, 5, 1, 1), (1, 7), (3, 1, 4), (2, 3)])
@pytest.mark.parametrize("declared", [False, True])
def test_squeeze_without_axis_on_symbolic_dims(shape, declared):
    x = f32(*shape)
    net = Apply(lambda: ops.Squeeze())
    if declared:    # set_inputs: the dims that are not 1 are dynamic
        net.set_inputs(ms.Tensor(shape=[1 if n == 1 else None for n in shape], dtype=ms.float32))
    out = net(ms.Tensor(x))
    np.testing.assert_array_equal(out.asnumpy(), x.squeeze())
    net2 = Apply(lambda: (lambda t: ops.squeeze(t)))
    np.testing.assert_array_equal(net2(ms.Tensor(x)).asnumpy(), x.squeeze())


# --- 6. negative slice steps -------------------------------------------------------------

SLICES = [
    ("last_axis_2_1_-1", lambda a: a[..., 2:1:-1], lambda a: a[..., 2:1:-1]),
    ("reverse", lambda a: a[::-1], lambda a: a[::-1]),
    ("reverse_cols", lambda a: a[:, ::-1], lambda a: a[:, ::-1]),
    ("step_-2", lambda a: a[:, ::-2], lambda a: a[:, ::-2]),
    ("neg_bounds", lambda a: a[-1:-4:-1, 3:0:-2], lambda a: a[-1:-4:-1, 3:0:-2]),
    ("past_the_end", lambda a: a[10:1:-1], lambda a: a[10:1:-1]),
    ("empty", lambda a: a[1:3:-1], lambda a: a[1:3:-1]),
    ("then_compute", lambda a: a[::-1] * 2.0 + a, lambda a: a[::-1] * np.float32(2) + a),
]


@pytest.mark.parametrize("name,fn,ref", SLICES, ids=[s[0] for s in SLICES])
@pytest.mark.parametrize("declared", [False, True])
def test_negative_slice_steps(name, fn, ref, declared):
    x = f32(5, 6)
    ms.set_context(mode=ms.PYNATIVE_MODE)
    np.testing.assert_array_equal(fn(ms.Tensor(x)).asnumpy(), ref(x))
    ms.set_context(mode=ms.GRAPH_MODE)
    net = Apply(lambda: fn)
    if declared:
        net.set_inputs(ms.Tensor(shape=[None, None], dtype=ms.float32))
    for rows in (5, 2, 1, 7):      # one bytecode, symbolic lengths evaluated per call
        x = f32(rows, 6)
        out = net(ms.Tensor(x))
        assert out.shape == ref(x).shape
        np.testing.assert_array_equal(out.asnumpy(), ref(x))


def test_slice_step_zero_is_an_error_at_the_line():
    class Net(nn.Cell):
        def construct(self, a):
            return a[::0]

    with pytest.raises(FrontendError, match=r"test_conform.py:\d+:\d+.*step cannot be zero"):
        Net()(ms.Tensor(f32(3, 4)))


# --- 6. reduce axes given as tensors ---------------------------------------------------------

class ReduceByConstTensor(nn.Cell):
    def __init__(self, prim, axis):
        super().__init__()
        self.r = prim
        self.axis = axis

    def construct(self, x):
        return self.r(x, ms.Tensor(self.axis))     # a Tensor made in construct is a constant


REDUCES = [("ReduceSum", ops.ReduceSum, np.sum), ("ReduceMean", ops.ReduceMean, np.mean),
           ("ReduceMax", ops.ReduceMax, np.max), ("ReduceMin", ops.ReduceMin, np.min)]


@pytest.mark.parametrize("name,prim,ref", REDUCES, ids=[r[0] for r in REDUCES])
@pytest.mark.parametrize("axis", [1, (0, 2)])
@pytest.mark.parametrize("keep", [False, True])
def test_reduce_with_a_constant_tensor_axis(name, prim, ref, axis, keep):
    x = f32(3, 4, 5)
    want = ref(x, axis=axis, keepdims=keep)
    ms.set_context(mode=ms.PYNATIVE_MODE)
    np.testing.assert_allclose(prim(keep)(ms.Tensor(x), ms.Tensor(axis)).asnumpy(), want, rtol=1e-5, atol=1e-6)
    ms.set_context(mode=ms.GRAPH_MODE)
    out = ReduceByConstTensor(prim(keep), axis)(ms.Tensor(x))
    np.testing.assert_allclose(out.asnumpy(), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name,prim,ref", REDUCES, ids=[r[0] for r in REDUCES])
def test_reduce_with_a_run_time_tensor_axis_names_the_op_and_the_axis(name, prim, ref):
    class ByAttr(nn.Cell):
        def __init__(self):
            super().__init__()
            self.r = prim()
            self.ax = ms.Tensor(np.array([1], np.int32))

        def construct(self, x):
            return self.r(x, self.ax)

    class ByArg(nn.Cell):
        def __init__(self):
            super().__init__()
            self.r = prim()

        def construct(self, x, a):
            return self.r(x, a)

    x = ms.Tensor(f32(3, 4))
    line = ByAttr.construct.__code__.co_firstlineno + 1
    with pytest.raises(FrontendError, match=rf"test_conform.py:{line}:\d+: .*{name}: axis must be a constant"):
        ByAttr()(x)
    line = ByArg.construct.__code__.co_firstlineno + 1
    with pytest.raises(FrontendError, match=rf"test_conform.py:{line}:\d+: .*{name}: axis .*run-time value"):
        ByArg()(x, ms.Tensor(np.array([1], np.int32)))


# --- 6. div with a rounding mode -------------------------------------------------------------

def _trunc_ref(a, b):
    q = np.trunc(np.true_divide(a, b))
    return q.astype(np.result_type(a, b)) if np.result_type(a, b).kind != "f" else q


class Div2(nn.Cell):
    def __init__(self, mode):
        super().__init__()
        self.mode = mode

    def construct(self, x, y):
        return ops.div(x, y, rounding_mode=self.mode)


DIVS = [
    ("floor_f32", "floor", f32(4, 5) * 5, f32(5) + 3, lambda a, b: np.floor(a / b)),
    ("floor_f32_scalar", "floor", f32(4, 5) * 5, 0.3, lambda a, b: np.floor(a / np.float32(b))),
    ("floor_i32", "floor", np.array([-7, -6, 5, 7, 3, 0], np.int32), np.array([2, 4, -3, 2, 3, -5], np.int32),
     np.floor_divide),
    ("floor_i32_scalar", "floor", np.arange(-6, 6, dtype=np.int32), 4, lambda a, b: np.floor_divide(a, b)),
    ("trunc_f32", "trunc", f32(4, 5) * 5, f32(4, 1) + 3, lambda a, b: np.trunc(a / b)),
    ("trunc_i32", "trunc", np.array([-7, -6, 5, 7, 3, 0], np.int32), np.array([2, 4, -3, 2, 3, -5], np.int32),
     _trunc_ref),
    ("trunc_i64_bcast", "trunc", np.arange(-9, 9, dtype=np.int64).reshape(3, 6), np.array([4, -4, 5, -5, 7, 1]),
     _trunc_ref),
    ("none", None, f32(3, 4), f32(3, 4) + 5, np.true_divide),
]


@pytest.mark.parametrize("name,mode,a,b,ref", DIVS, ids=[d[0] for d in DIVS])
def test_div_rounding_modes(name, mode, a, b, ref):
    want = np.asarray(ref(a, b))
    t = (lambda v: ms.Tensor(v) if isinstance(v, np.ndarray) else v)
    for mode_ in (ms.PYNATIVE_MODE, ms.GRAPH_MODE):
        ms.set_context(mode=mode_)
        out = Div2(mode)(t(a), t(b)).asnumpy()
        assert out.dtype == want.dtype and out.shape == want.shape, (mode_, out.dtype, want.dtype)
        np.testing.assert_allclose(out, want, rtol=1e-6, atol=0)


def test_div_floor_is_the_floor_of_the_quotient_and_tensor_floordiv():
    a = np.array([1.0, -1.0, 2.5], np.float32)
    ms.set_context(mode=ms.PYNATIVE_MODE)
    out = ops.div(ms.Tensor(a), 0.1, rounding_mode="floor").asnumpy()
    np.testing.assert_array_equal(out, np.floor(a / np.float32(0.1)))     # 1.0 / 0.1 -> 10, not 9
    i = np.arange(-5, 5, dtype=np.int32)
    np.testing.assert_array_equal((ms.Tensor(i) // 3).asnumpy(), i // 3)
    with pytest.raises(ValueError, match="rounding_mode must be None, 'floor' or 'trunc'"):
        ops.div(ms.Tensor(a), 2.0, rounding_mode="round")


# --- 7. dtypes print as MindSpore's do; dumps keep numpy's spelling ----------------------------

MS_NAMES = [(ms.float16, "Float16"), (ms.float32, "Float32"), (ms.float64, "Float64"), (ms.int8, "Int8"),
            (ms.int16, "Int16"), (ms.int32, "Int32"), (ms.int64, "Int64"), (ms.uint8, "UInt8"), (ms.bool_, "Bool")]


@pytest.mark.parametrize("d,name", MS_NAMES, ids=[n for _, n in MS_NAMES])
def test_dtype_str_and_repr_are_mindspores(d, name):
    assert str(d) == name and repr(d) == name and f"{d}" == name
    assert ms.dtype.as_dtype(name) is d and ms.dtype.as_dtype(d.name) is d    # both spellings read back
    assert f"dtype={name}" in repr(ms.Tensor(np.zeros(2, d.np)))


def test_dumps_spell_dtypes_as_numpy():
    class Net(nn.Cell):
        def construct(self, x):
            return ops.cast(x, ms.float16) + 1

    from msvm.bytecode.disasm import dump

    net = Net()
    net(ms.Tensor(f32(2, 3)))
    text = dump(next(iter(net._runner.variants.values())).code)
    assert "CAST" in text and "float16" in text and "Float16" not in text
    assert "Tensor[float16, [x0,x1]]" in text


# --- 3. construct(self, *inputs) ---------------------------------------------------------------

class Star(nn.Cell):
    """Indexing, unpacking, len, iteration and slicing of the *inputs tuple."""

    def construct(self, *inputs):
        a, b = inputs[:2]
        s = inputs[0] * len(inputs)
        for t in inputs[1:]:
            s = s + t
        return s - a * b + inputs[-1]


def star_ref(*xs):
    s = xs[0] * len(xs)
    for t in xs[1:]:
        s = s + t
    return s - xs[0] * xs[1] + xs[-1]


class FixedThenStar(nn.Cell):
    def __init__(self):
        super().__init__()
        self.star = Star()

    def construct(self, x, *rest):
        return self.star(x, *rest) + len(rest), rest


@pytest.mark.parametrize("n", [2, 3, 5])
@pytest.mark.parametrize("mode", [ms.PYNATIVE_MODE, ms.GRAPH_MODE])
def test_construct_with_varargs(n, mode):
    ms.set_context(mode=mode)
    xs = [f32(2, 3) for _ in range(n)]
    net = Star()
    for _ in range(3):      # the memo and the replay serve the later calls
        np.testing.assert_allclose(net(*[ms.Tensor(x) for x in xs]).asnumpy(), star_ref(*xs), rtol=1e-6)
    ys = [f32(4, 3) for _ in range(n + 1)]      # another count and shape: another signature
    np.testing.assert_allclose(net(*[ms.Tensor(y) for y in ys]).asnumpy(), star_ref(*ys), rtol=1e-6)
    out, rest = FixedThenStar()(*[ms.Tensor(x) for x in xs])
    np.testing.assert_allclose(out.asnumpy(), star_ref(*xs) + (n - 1), rtol=1e-6)
    assert isinstance(rest, tuple) and len(rest) == n - 1
    np.testing.assert_array_equal(rest[-1].asnumpy(), xs[-1])


def test_varargs_with_set_inputs_and_jit():
    net = Star()
    net.set_inputs(ms.Tensor(shape=[None, 3], dtype=ms.float32), ms.Tensor(shape=[None, 3], dtype=ms.float32))
    for rows in (2, 5):
        xs = [f32(rows, 3), f32(rows, 3)]
        np.testing.assert_allclose(net(*[ms.Tensor(x) for x in xs]).asnumpy(), star_ref(*xs), rtol=1e-6)

    @ms.jit
    def scale_first(*xs):
        return xs[0] * len(xs)

    x = f32(2, 2)
    np.testing.assert_allclose(scale_first(ms.Tensor(x), ms.Tensor(x)).asnumpy(), x * 2)
    np.testing.assert_allclose(scale_first(ms.Tensor(x)).asnumpy(), x)


def test_varargs_misuse_is_reported_at_the_line():
    net = Star()
    line = Star.construct.__code__.co_firstlineno + 1
    with pytest.raises(FrontendError, match=rf"test_conform.py:{line}:\d+: cannot unpack 1 values into 2 names"):
        net(ms.Tensor(f32(2, 3)))


# --- 5. a dim that may be 1 when the code runs broadcasts ------------------------------------------

class Sub(nn.Cell):
    def construct(self, a, b):
        return a - b


class SubThenMore(nn.Cell):
    """The broadcast result feeds more ops and a sub-Cell, whose own dims may then be 1 too."""

    def __init__(self):
        super().__init__()
        self.sub = Sub()

    def construct(self, a, b, c):
        d = ops.relu(a - b) * 2.0
        return self.sub(d, c) + b


# (a, b[, c]) shapes that one bytecode (all dims None) must broadcast like numpy
BCAST = [
    [(2, 3, 4, 4), (4, 1)],             # the case: b's last dim is 1
    [(2, 3, 4, 4), (4, 4)],
    [(2, 3, 1, 4), (4, 1)],             # both sides broadcast
    [(1, 1, 1, 1), (4, 5)],
    [(2, 1, 4, 1), (1, 6)],
    [(3, 2, 5, 1), (5, 7)],
]


@pytest.mark.parametrize("shapes", BCAST, ids=[f"{a}-{b}" for a, b in BCAST])
def test_set_inputs_none_dims_broadcast_at_run_time(shapes):
    a, b = (f32(*s) for s in shapes)
    net = Sub()
    net.set_inputs(ms.Tensor(shape=[None] * 4, dtype=ms.float32), ms.Tensor(shape=[None] * 2, dtype=ms.float32))
    for x, y in [(a, b)] + [(f32(*s1), f32(*s2)) for s1, s2 in BCAST]:    # one bytecode serves them all
        out = net(ms.Tensor(x), ms.Tensor(y))
        np.testing.assert_array_equal(out.asnumpy(), x - y)
    assert len(net._runner.variants) == 1


def test_broadcast_through_ops_and_sub_cells():
    net = SubThenMore()
    net.set_inputs(*[ms.Tensor(shape=[None, None], dtype=ms.float32) for _ in range(3)])
    for sa, sb, sc in [((4, 5), (4, 5), (4, 5)), ((4, 1), (1, 5), (4, 5)), ((1, 5), (4, 1), (1, 1)),
                       ((4, 5), (1, 1), (4, 1)), ((1, 1), (1, 1), (3, 2))]:
        a, b, c = f32(*sa), f32(*sb), f32(*sc)
        out = net(ms.Tensor(a), ms.Tensor(b), ms.Tensor(c))
        np.testing.assert_allclose(out.asnumpy(), (np.maximum(a - b, 0) * 2 - c) + b, rtol=1e-6)


def test_a_sliced_dim_may_be_1_without_set_inputs():
    class Net(nn.Cell):
        def construct(self, x, y):
            return x[1:] + y           # x[1:] has x0 - 1 rows: 1 when x has 2

    for sx, sy in [((2, 3), (5, 3)), ((6, 3), (5, 3)), ((3, 3), (2, 3))]:
        x, y = f32(*sx), f32(*sy)
        out = Net()(ms.Tensor(x), ms.Tensor(y))
        np.testing.assert_array_equal(out.asnumpy(), x[1:] + y)


def test_incompatible_dims_fail_on_entry_naming_the_op_and_line():
    net = Sub()
    net.set_inputs(ms.Tensor(shape=[None] * 4, dtype=ms.float32), ms.Tensor(shape=[None] * 2, dtype=ms.float32))
    with pytest.raises(ms.ShapeMismatch) as e:
        net(ms.Tensor(f32(2, 3, 4, 4)), ms.Tensor(f32(3, 1)))
    msg, line = str(e.value), Sub.construct.__code__.co_firstlineno + 1
    assert f"test_conform.py:{line}:" in msg and "BROADCAST_SUB: cannot broadcast [a0,a1,a2,a3] with [b0,b1]" in msg
    assert "a2=4" in msg and "b0=3" in msg, msg


def test_the_verifier_reports_a_broadcast_mismatch_only_when_certain():
    from msvm.bytecode import CodeBuilder, Loc, verify
    from msvm.bytecode import symbolic as S
    from msvm.bytecode.types import TensorType
    from msvm.errors import VerifyError

    def code(sa, sb, may_be_one=()):
        cb = CodeBuilder("t", "t.py", 1)
        c = cb.code
        c.params = [("a", TensorType(sa, ms.float32)), ("b", TensorType(sb, ms.float32))]
        c.may_be_one = frozenset(may_be_one)
        loc = Loc(1, 0, 1, 1)
        for n in ("a", "b"):
            cb.emit("LOAD_TENSOR", cb.local(n), loc=loc)
        cb.emit("BROADCAST_SUB", loc=loc)
        cb.emit("RETURN", loc=loc)
        return verify(cb.finish())

    a0, a1, b0 = S.sym("a0"), S.sym("a1"), S.sym("b0")
    one, four, five = S.Expr.const(1), S.Expr.const(4), S.Expr.const(5)
    c = code((a0, a1), (b0,), may_be_one={"a1", "b0"})       # two unknowns: an unknown result, checked later
    assert str(c.result_type) == "Tensor[float32, [a0,(b0 if a1 == 1 else a1)]]"
    assert c.params[1][1].shape == (b0,) and len(c.assumptions) == 1
    c = code((a0, a1), (four,), may_be_one={"a1"})           # a known 4: a1 is 1 or 4
    assert c.result_type.shape == (a0, four) and c.params[0][1].shape == (a0, a1)
    c = code((a0, a1), (b0,))                                # both known not to be 1: unified, as before
    assert c.params[1][1].shape == (a1,) and not c.assumptions
    with pytest.raises(VerifyError, match="cannot broadcast"):
        code((a0, four), (five,))                            # certain
    c = code((a0, one), (five,))
    assert c.result_type.shape == (a0, five)


def test_may_be_one_survives_save_and_load(tmp_path):
    from msvm import bytecode

    net = Sub()
    net.set_inputs(ms.Tensor(shape=[None] * 4, dtype=ms.float32), ms.Tensor(shape=[None] * 2, dtype=ms.float32))
    net(ms.Tensor(f32(2, 3, 4, 4)), ms.Tensor(f32(4, 1)))
    code = next(iter(net._runner.variants.values())).code
    assert {"a2", "a3", "b0", "b1"} <= code.may_be_one
    bytecode.save(code, tmp_path / "sub.msbc")
    back = bytecode.load(tmp_path / "sub.msbc")
    assert back == code and back.may_be_one == code.may_be_one
    assert [str(a) for a in back.assumptions] == [str(a) for a in code.assumptions]


class AddInLoop(nn.Cell):
    def __init__(self):
        super().__init__()
        self.b = ms.Parameter(ms.Tensor(np.arange(4, dtype=np.float32)))

    def construct(self, x, n):
        for _ in range(n):          # a loop over a symbolic range: x keeps one shape
            x = x + self.b
        return x


def test_a_loop_carried_none_dim_takes_the_broadcast_dim():
    net = AddInLoop()
    net.set_inputs(ms.Tensor(shape=[None, None], dtype=ms.float32))
    for rows, n in ((2, 3), (5, 1)):
        x = f32(rows, 4)
        np.testing.assert_allclose(net(ms.Tensor(x), n).asnumpy(), x + n * np.arange(4, dtype=np.float32), rtol=1e-6)
    with pytest.raises(ms.ShapeMismatch, match=r"argument x has dim 1 = 1, .* \[x0,4\]"):
        net(ms.Tensor(f32(2, 1)), 2)     # its shape would change in the first iteration


def test_static_analysis_of_a_varargs_construct():
    from msvm.static import analyze

    src = (
        "import msvm as ms\n"
        "from msvm import nn\n"
        "class Star(nn.Cell):\n"
        "    def construct(self, x, *inputs):\n"
        "        a, b = inputs\n"
        "        return x + a * b\n"
        "net = Star()\n"
        "net.set_inputs(*[ms.Tensor(shape=[None, 4], dtype=ms.float32)] * 3)\n"
    )
    (e,) = analyze(src, "star.py")
    assert e.error is None, e.error
    assert [p for p, _ in e.code.params] == ["x", "inputs_0", "inputs_1"]
