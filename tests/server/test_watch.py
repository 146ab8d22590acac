"""Watch expressions evaluate only what reads: an allowlist, sized before anything large is built."""

import os

import msvm as ms
import numpy as np
import pytest
from msvm_server.dap.values import EvalError, safe_eval


class Holder:
    def __init__(self):
        self.w = np.arange(6.0).reshape(2, 3)
        self.d = {"k": 2}

    def _ran(self, *args):
        raise AssertionError("a user's method ran")

    __len__ = __float__ = __abs__ = __bool__ = __iter__ = __array__ = __index__ = __getitem__ = __eq__ = _ran
    __hash__ = object.__hash__

    @property
    def loud(self):
        raise AssertionError("a property ran")

    def __add__(self, other):
        raise AssertionError("a user's operator ran")


@pytest.fixture
def names(tmp_path):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    return {"np": np, "numpy": np, "x": x, "v": np.arange(10 ** 6, dtype=np.float64), "B": 3, "s": "ab",
            "net": Holder(), "t": ms.Tensor(np.ones((2, 5), np.float32)), "os": os, "path": str(tmp_path / "w"),
            "stack": [x], "top": x}


HOSTILE = [
    # writing files, mapping memory, loading code or pickles
    "np.save(path, x)", "np.savetxt(path, x)", "x.tofile(path)", "x.dump(path)", "np.memmap(path, mode='w+', shape=(4,))",
    "np.ctypeslib.load_library('libc', '/lib')", "np.load(path, allow_pickle=True)", "np.lib.format.open_memmap(path)",
    "np.fromfile(path)", "np.loadtxt(path)", "os.system('true')", "os.remove(path)", "open(path, 'w')",
    # writing into arrays
    "np.add(x, 1, out=x)", "x.fill(0)", "x.sort()", "x.resize(2)", "np.copyto(x, 0)", "np.put(x, 0, 1)",
    "x.itemset(0, 1)", "np.place(x, x > 0, 0)", "x.setflags(write=True)", "np.fill_diagonal(x, 0)",
    # imports, builtins, dunders and escapes
    "__import__('os')", "getattr(x, 'tofile')", "eval('1')", "exec('1')", "compile('1', 'f', 'eval')",
    "().__class__.__bases__[0].__subclasses__()", "x.__class__", "x._private", "net.__dict__", "type(x)",
    "vars(net)", "globals()", "np.__dict__", "print(1)", "breakpoint()", "x.ctypes", "x.data", "x.base",
    "net.loud", "net + 1", "np.ndarray", "np.testing", "len(net)", "float(net)", "abs(net)", "bool(net)",
    "list(net)", "np.asarray(net)", "np.mean([net])", "x[net]", "net[0]", "[net] == [net]", "not net",
    "{'k': net} == {'k': net}", "np.array([net], dtype=object) + 1", "x.astype(net)",
    # syntax that runs code or binds names
    "lambda: 0", "[a for a in (1, 2)]", "{a: 1 for a in (1,)}", "(a for a in (1,))", "(y := 1)", "f'{x}'",
    "{1, 2}", "{'a': 1}", "print(*[1])", "np.sum(**{'a': x})",
    # huge allocations
    "np.zeros(10**12)", "np.ones((10**6, 10**6))", "np.empty(10**12)", "np.full(10**12, 1)", "np.arange(10**12)",
    "'a' * 10**10", "[0] * 10**10", "(0,) * 10**10", "b'a' * 10**10", "10**10**10", "2 ** (10**8)",
    "v[:, None] + v[None, :]", "np.add(v[:, None], v)", "v[:, None] * v", "v[:, None] == v",
    "v[:, None] @ v[None, :]", "v[[0] * 10**6][:, None] * v", "x[[0] * 1000000][[0] * 1000000]",
    "v[np.zeros(10**9, int)]", "v.astype(np.complex128)[:, None] + v", "list(v) * 10**6", "'%*d' % (10**9, 1)",
    "np.outer(v, v)", "np.kron(v, v)", "np.tile(v, 10**6)", "np.repeat(v, 10**6)",
]


@pytest.mark.parametrize("expr", HOSTILE)
def test_hostile_expressions_are_refused(expr, names, tmp_path):
    before = sorted(os.listdir(tmp_path))
    x0 = names["x"].copy()
    with pytest.raises(EvalError) as e:
        safe_eval(expr, names)
    assert str(e.value) and "watch expression" in str(e.value) or "MiB" in str(e.value), str(e.value)
    assert sorted(os.listdir(tmp_path)) == before, "nothing was written"
    assert np.array_equal(names["x"], x0), "the tensor was not changed"


BENIGN = [
    ("x.shape", (3, 4)), ("x.dtype.name", "float32"), ("x[1, :2].tolist()", [4.0, 5.0]), ("B * 2 + 1", 7),
    ("x.sum()", 66.0), ("float(np.mean(x))", 5.5), ("x.T.shape", (4, 3)), ("x.reshape(2, 6).shape", (2, 6)),
    ("x.reshape((4, 3)).shape", (4, 3)), ("np.reshape(x, (6, 2)).shape", (6, 2)),
    ("x.astype('float64').dtype.name", "float64"),
    ("x.max(axis=0).tolist()", [8.0, 9.0, 10.0, 11.0]), ("int(np.argmax(x))", 11), ("len(stack)", 1),
    ("top.shape[0] > 2", True), ("x.ndim == 2 and B or 0", 3), ("1 if B > 2 else 0", 1), ("s + 'c'", "abc"),
    ("(x @ x.T).shape", (3, 3)), ("bool((x > 5).any())", True), ("int(np.count_nonzero(x[x > 5]))", 6),
    ("round(float(np.linalg.norm(x)), 3)", 22.494), ("net.w.shape", (2, 3)), ("t.shape", (2, 5)),
    ("float(t.asnumpy().sum())", 10.0), ("x[[0, 2]].shape", (2, 4)), ("v.sum() > 0", True), ("-x[0, 1]", -1.0),
    ("abs(-B)", 3), ("max(1, B)", 3), ("x is None", False), ("np.float32(2) * 2", 4.0), ("2 ** 64", 2 ** 64),
    ("(v[:100, None] + v[None, :100]).shape", (100, 100)), ("np.sqrt(x).dtype.name", "float32"),
    ("tuple(x.shape)", (3, 4)), ("net.d['k'] * 2", 4), ("[1, 2] == [1, 2]", True), ("stack[0].shape", (3, 4)),
    ("t.shape[1]", 5), ("np.asarray(t).shape", (2, 5)), ("np.isnan(x).sum()", 0), ("x[..., 0].shape", (3,)),
    ("x[None].shape", (1, 3, 4)), ("x.dtype == np.float32", True),
]


@pytest.mark.parametrize("expr,want", BENIGN)
def test_benign_expressions_work(expr, want, names):
    got = safe_eval(expr, names)
    if isinstance(want, float):
        assert float(got) == pytest.approx(want)
    else:
        assert got == want
