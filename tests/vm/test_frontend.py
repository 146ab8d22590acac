"""The frontend: what compiles, to what, and the errors for what does not."""

import msvm as ms
import numpy as np
import pytest
from cells import DynamicMatmulCell
from msvm import nn, ops
from msvm.bytecode import records


def ops_of(code):
    return [r.op for r in records(code)]


def variants(cell):
    return cell._runner.variants


def test_article_cell_matches_numpy_and_reuses_bytecode(rng):
    net = DynamicMatmulCell()
    y = rng.standard_normal((768, 1024)).astype(np.float32)
    for n in (32, 64, 7):
        x = rng.standard_normal((n, 768)).astype(np.float32)
        out = net(ms.Tensor(x), ms.Tensor(y), training=True)
        np.testing.assert_allclose(out.asnumpy(), np.maximum(x @ y, 0), rtol=1e-5, atol=1e-4)
        out = net(ms.Tensor(x), ms.Tensor(y), training=False)
        np.testing.assert_allclose(out.asnumpy(), x @ y, rtol=1e-5, atol=1e-4)
    assert len(variants(net)) == 1          # one bytecode for every batch size and both flag values
    code = next(iter(variants(net).values())).code
    branch = [r for r in records(code) if r.op == "BRANCH_IF_SYMBOLIC"]
    assert len(branch) == 1 and str(branch[0].args[0]) == "training"
    assert branch[0].loc.line == DynamicMatmulCell.construct.__code__.co_firstlineno + 2


class ShapeBranch(nn.Cell):
    def construct(self, x):
        if x.shape[0] > 32:
            y = x * 2.0
        else:
            y = x + 1.0
        return y


def test_branch_on_shape_predicate():
    net = ShapeBranch()
    big, small = np.ones((40, 3), np.float32), np.ones((8, 3), np.float32)
    assert (net(ms.Tensor(big)).asnumpy() == 2).all()
    assert (net(ms.Tensor(small)).asnumpy() == 2).all() and net(ms.Tensor(small)).shape == (8, 3)
    code = next(iter(variants(net).values())).code
    (br,) = [r for r in records(code) if r.op == "BRANCH_IF_SYMBOLIC"]
    assert str(br.args[0]) == "x0 > 32"
    assert len(variants(net)) == 1


class Loops(nn.Cell):
    def __init__(self):
        super().__init__()
        self.layers = nn.CellList([nn.Dense(4, 4) for _ in range(3)])

    def construct(self, x, n):
        for layer in self.layers:
            x = ops.relu(layer(x))
        acc = x * 0.0
        for _i in range(n):
            acc = acc + x
        for _j in range(2):
            acc = acc * 1.0
        return acc


def test_loops_unrolled_and_symbolic(rng):
    net = Loops()
    x = rng.standard_normal((5, 4)).astype(np.float32)
    ref = x
    for layer in net.layers:
        ref = np.maximum(ref @ layer.weight.asnumpy().T + layer.bias.asnumpy(), 0)
    for n in (0, 1, 4):
        np.testing.assert_allclose(net(ms.Tensor(x), n).asnumpy(), ref * n, rtol=1e-5, atol=1e-6)
    code = next(iter(variants(net).values())).source        # (before fusion, which inlines leaf sub-Cells)
    names = ops_of(code)
    assert names.count("CALL_CELL") == 3 and "SET_SYM" in names and "JUMP" in names
    assert len(variants(net)) == 1


class Pair(nn.Cell):
    def construct(self, x):
        return x + 1.0, x * 2.0


class UsesPair(nn.Cell):
    def __init__(self):
        super().__init__()
        self.pair = Pair()

    def construct(self, x):
        a, b = self.pair(x)
        return a - b


def test_sub_cell_tuple_result():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_allclose(UsesPair()(ms.Tensor(x)).asnumpy(), (x + 1) - x * 2)


class Reshaper(nn.Cell):
    def construct(self, x):
        b, s, h = x.shape
        y = ops.reshape(x, (b, s, 2, -1))
        return ops.reshape(ops.transpose(y, (0, 2, 1, 3)), (-1, h // 2))


def test_reshape_minus_one_is_resolved_in_the_bytecode(rng):
    x = rng.standard_normal((2, 3, 8)).astype(np.float32)
    out = Reshaper()(ms.Tensor(x))
    ref = x.reshape(2, 3, 2, 4).transpose(0, 2, 1, 3).reshape(-1, 4)
    np.testing.assert_allclose(out.asnumpy(), ref)
    net = Reshaper()
    net(ms.Tensor(x))
    code = next(iter(variants(net).values())).code
    for r in records(code):
        if r.op == "RESHAPE":
            assert all(not (isinstance(d, int) and d < 0) for d in r.args[0])
            assert "-1" not in r.argrepr


def test_pynative_runs_construct_eagerly(rng):
    ms.set_context(mode=ms.PYNATIVE_MODE)
    net = DynamicMatmulCell()
    x, y = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((4, 5)).astype(np.float32)
    out = net(ms.Tensor(x), ms.Tensor(y))
    np.testing.assert_allclose(out.asnumpy(), np.maximum(x @ y, 0), rtol=1e-6)
    assert net._runner is None


@ms.jit
def scaled(x, y):
    d = x.shape[-1]
    return ops.softmax(ops.matmul(x, y) * (d ** -0.5), -1)


def test_jit_function_with_symbolic_scalar(rng):
    x, y = rng.standard_normal((3, 16)).astype(np.float32), rng.standard_normal((16, 5)).astype(np.float32)
    out = scaled(ms.Tensor(x), ms.Tensor(y)).asnumpy()
    s = (x @ y) * np.float32(16 ** -0.5)
    ref = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(out, ref / ref.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)
    assert out.dtype == np.float32


def test_jit_dump_bytecode_prints_the_dump(capsys):
    def double(x):
        return x * 2

    f = ms.jit(double, jit_config={"dump_bytecode": True})
    f(ms.Tensor(np.ones(3, np.float32)))
    out = capsys.readouterr().out
    assert "[MS] Bytecode dump for test_jit_dump_bytecode_prints_the_dump.<locals>.double:" in out
    assert "BROADCAST_MUL" in out


class Helper(nn.Cell):
    def scale(self, x, k=3.0):
        y = x * k
        return y

    def construct(self, x):
        y = x + 1.0
        z = self.scale(y)
        return y + z


def test_inlined_helper_keeps_caller_locals():
    x = np.ones((2, 2), np.float32)
    np.testing.assert_allclose(Helper()(ms.Tensor(x)).asnumpy(), (x + 1) + (x + 1) * 3)


class IntArg(nn.Cell):
    def construct(self, x, n):
        return x * n + x.shape[0]


def test_int_argument_is_a_runtime_symbol():
    net = IntArg()
    x = np.ones((3,), np.float32)
    assert (net(ms.Tensor(x), 2).asnumpy() == 5).all()
    assert (net(ms.Tensor(x), 5).asnumpy() == 8).all()
    assert len(variants(net)) == 1


BAD = {
    "while": "        while True:\n            x = x + 1\n        return x\n",
    "while_tensor": "        while x.sum() > 0:\n            x = x - 1\n        return x\n",
    "try": "        try:\n            x = x + 1\n        except Exception:\n            pass\n        return x\n",
    "setcomp": "        ys = {1 for _ in range(3)}\n        return x\n",
    "dict_runtime_key": "        return {1: x}.get(x)\n",
    "tensor_if": "        if x > 0:\n            x = x + 1\n        return x\n",
    "attr_assign": "        self.y = x\n        return x\n",
    "undefined": "        return x + zzz\n",
    "numpy_on_tensor": "        return np.exp(x)\n",
}
EXPECT = {"while": "while loop still running after 4096 passes",
          "while_tensor": "a while loop on a tensor's values is not supported", "try": "try/except",
          "setcomp": "set comprehension",
          "dict_runtime_key": "dict.get() of a symbolic or run-time key",
          "tensor_if": "branching on a tensor", "attr_assign": "assigning to attributes",
          "undefined": "name 'zzz' is not defined", "numpy_on_tensor": "numpy.exp cannot take msvm tensors"}


@pytest.mark.parametrize("kind", sorted(BAD))
def test_unsupported_constructs_name_file_line_col(kind, tmp_path):
    src = ("import numpy as np\nimport msvm as ms\nfrom msvm import nn, ops\n\n\nclass Bad(nn.Cell):\n"
           "    def construct(self, x):\n" + BAD[kind])
    path = tmp_path / f"bad_{kind}.py"
    path.write_text(src)
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"bad_{kind}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with pytest.raises(ms.FrontendError) as e:
        mod.Bad()(ms.Tensor(np.ones(3, np.float32)))
    msg = str(e.value)
    assert msg.startswith(f"{path}:8:"), msg
    assert EXPECT[kind] in msg, msg


class Named(nn.Cell):
    def __init__(self):
        super().__init__()
        self.tag = "layer"
        self.k = 3

    def construct(self, x):
        name = f"{self.tag}_{self.k:02d}"
        if name == "layer_03":
            x = x + 1.0
        return x


def test_f_strings_of_constants_fold_and_of_tensors_fail(tmp_path):
    x = np.zeros(2, np.float32)
    assert (Named()(ms.Tensor(x)).asnumpy() == 1).all()
    path = tmp_path / "fstr.py"
    path.write_text("from msvm import nn\n\n\nclass F(nn.Cell):\n    def construct(self, x):\n"
                    "        s = f\"{x}\"\n        return x\n")
    import importlib.util

    spec = importlib.util.spec_from_file_location("fstr", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with pytest.raises(ms.FrontendError, match=r"fstr.py:6:.*f-string of a run-time"):
        mod.F()(ms.Tensor(x))
