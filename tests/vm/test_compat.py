"""``import mindspore`` as msvm (msvm.compat) and ``mindspore.common.initializer``.

Each test that installs the alias runs in a subprocess, so the alias never leaks into the
other tests' process."""

import math
import subprocess
import sys
import textwrap

import msvm as ms
import numpy as np
import pytest
from msvm import nn
from msvm.common import initializer as init


def run_py(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=300, cwd="/")


def test_mindspore_names_resolve_to_msvm():
    r = run_py("""
        import msvm
        msvm.as_mindspore()
        import mindspore
        import mindspore as ms
        from mindspore import nn, ops, Tensor, Parameter
        import mindspore.ops.operations as P
        import mindspore.ops.functional as F
        import mindspore.common.dtype as mstype
        from mindspore.common.initializer import initializer, Normal
        import mindspore.context as context
        from mindspore import context as context2, dtype as mstype2
        from mindspore.common.tensor import Tensor as T2
        from mindspore.common.parameter import Parameter as P2
        import msvm.ops.primitives
        assert ms.Tensor is msvm.Tensor and T2 is msvm.Tensor and P2 is msvm.Parameter
        assert nn.Cell is msvm.nn.Cell and nn.Dense is msvm.nn.Dense
        assert P.MatMul is msvm.ops.primitives.MatMul and F.relu is msvm.ops.relu
        assert mstype.float32 is msvm.float32 and mstype2.float16 is msvm.float16
        assert context.set_context is msvm.set_context and context2.GRAPH_MODE == msvm.GRAPH_MODE
        assert ms.ms_function is msvm.jit
        t = initializer(Normal(0.02), (4, 3), mstype.float32)
        assert isinstance(t, Tensor) and t.shape == (4, 3) and t.init_data() is t
        print("ok")
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"


def test_gaps_import_and_fail_when_used():
    r = run_py("""
        import msvm
        msvm.as_mindspore()
        import mindspore.dataset as ds
        from mindspore.dataset import vision, transforms
        from mindspore.train import Model, Callback
        from mindspore.nn.optim import Optimizer
        from mindspore import amp, RowTensor
        from mindspore.mindrecord import FileWriter as something     # (a module msvm lacks)
        import mindspore.ops as ops

        class MyOpt(Optimizer):          # subclassing a gap at import time is allowed
            pass

        def use(f):
            try:
                f()
            except msvm.compat.MindSporeGap as e:
                return str(e)
            return "no error"

        print(use(lambda: ds.GeneratorDataset([1, 2])))
        print(use(lambda: Model(None)))
        print(use(lambda: MyOpt()))
        print(use(lambda: ops.CTCLoss()(1)))
        print(use(lambda: something()))
    """)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 5
    for line, api in zip(lines, ["mindspore.dataset.GeneratorDataset", "mindspore.train.Model",
                                 "mindspore.nn.optim.Optimizer (base of MyOpt)", "mindspore.ops.CTCLoss",
                                 "mindspore.mindrecord.FileWriter"]):
        assert line.startswith(f"{api} is not provided by msvm (msvm's gap"), line
    assert "training" in lines[1] or "datasets" in lines[1]
    assert "does not implement it yet" in lines[3]


def test_names_mindspore_lacks_too_are_errors_not_gaps():
    """A name MindSpore has but msvm lacks is a gap; one MindSpore does not have at all raises
    AttributeError / ImportError / ModuleNotFoundError, as under MindSpore, so a library's
    ``try: from mindspore import X except ImportError:`` fallback runs."""
    r = run_py("""
        import msvm
        msvm.as_mindspore()
        import mindspore
        from mindspore import nn, ops
        import mindspore.ops.operations as P
        assert not hasattr(mindspore.nn, "Anything") and not hasattr(mindspore, "NoSuchThing")
        assert not hasattr(P, "NotAnOp") and not hasattr(mindspore.dataset, "NoSuchDataset")
        assert hasattr(nn, "GRU") and hasattr(P, "CTCLoss")      # MindSpore's, msvm's gaps
        try:
            from mindspore.nn import AnythingAtAll
        except ImportError as e:
            print("ImportError:", e)
        try:
            from mindspore import Conv3dFallback as layer
        except ImportError:
            layer = nn.Conv2d                    # the library's fallback is taken
        assert layer is msvm.nn.Conv2d
        try:
            import mindspore.no_such_module
        except ModuleNotFoundError as e:
            print("ModuleNotFoundError:", e.name)
        try:
            nn.Anything
        except AttributeError as e:
            print("AttributeError:", e)
        import mindspore.ops.operations._inner_ops as inner     # MindSpore's modules import (gaps inside)
        try:
            nn.MultiheadAttention(2, 4)
        except msvm.compat.MindSporeGap as e:
            print("gap:", e.api)
        try:
            inner.MixedPrecisionCast()
        except msvm.compat.MindSporeGap as e:
            print("gap:", e.api)
    """)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("ImportError: cannot import name 'AnythingAtAll' from 'mindspore.nn'"), lines[0]
    assert lines[1] == "ModuleNotFoundError: mindspore.no_such_module"
    assert lines[2].startswith("AttributeError: module 'mindspore.nn' has no attribute 'Anything' (nor has MindSpore 2.")
    assert lines[3:] == ["gap: mindspore.nn.MultiheadAttention",
                         "gap: mindspore.ops.operations._inner_ops.MixedPrecisionCast"]


def test_compat_api_records_mindspore():
    from msvm import compat_api

    assert compat_api.version().startswith("2.")
    assert compat_api.is_module("mindspore.nn") and compat_api.is_module("mindspore.dataset.vision")
    assert not compat_api.is_module("mindspore.no_such_module")
    assert compat_api.has_name("mindspore.nn", "Conv2d") and compat_api.has_name("mindspore.ops", "matmul")
    assert compat_api.has_name("mindspore.nn", "Anything") is False
    assert compat_api.has_name("mindspore.mindrecord", "FileWriter") is None      # not recorded: a gap
    for m in compat_api.RECORDED:
        assert compat_api.is_module(m) and compat_api.has_name(m, "NoSuchName_") is False, m


def test_gaps_at_a_library_import_are_lazy(tmp_path):
    """A library's top level may call a gap (decorators, registries); the call site fails when used."""
    (tmp_path / "zoo_lib.py").write_text(textwrap.dedent("""
        from mindspore import ops
        from mindspore.nn.optim.optimizer import opt_init_args_register
        _ema = ops.MultitypeFuncGraph("ema")

        @_ema.register("Tensor", "Tensor")
        def _ema_update(a, b):
            return a

        class Opt:
            @opt_init_args_register
            def __init__(self):
                pass
    """))
    r = run_py("""
        import sys
        import msvm
        msvm.as_mindspore()
        sys.path.insert(0, %r)
        import zoo_lib
        try:
            zoo_lib.Opt()
        except msvm.compat.MindSporeGap as e:
            print(e.api)
        try:
            bool(zoo_lib._ema)
        except msvm.compat.MindSporeGap as e:
            print(e.api)
    """ % str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["mindspore.nn.optim.optimizer.opt_init_args_register",
                                "mindspore.ops.MultitypeFuncGraph(...)"]


def test_msvm_run_mindspore_runs_an_unchanged_script(tmp_path):
    script = tmp_path / "ms_script.py"
    script.write_text(textwrap.dedent("""
        import numpy as np
        import mindspore as ms
        from mindspore import nn, ops, Tensor
        import mindspore.common.initializer as init

        class Net(nn.Cell):
            def __init__(self):
                super().__init__()
                self.fc = nn.Dense(8, 4, weight_init=init.XavierUniform(), bias_init="zeros")
                self.relu = ops.ReLU()

            def construct(self, x):
                return self.relu(self.fc(x))

        ms.set_context(mode=ms.GRAPH_MODE)
        net = Net()
        x = np.random.randn(3, 8).astype(np.float32)
        w = net.fc.weight.asnumpy()
        out = net(Tensor(x)).asnumpy()
        assert np.allclose(out, np.maximum(x @ w.T, 0), rtol=1e-5, atol=1e-6)
        print("ran", out.shape)
    """))
    r = subprocess.run([sys.executable, "-m", "msvm", "run", "--mindspore", str(script)], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ran (3, 4)"
    # MSVM_AS_MINDSPORE=1 is the same switch (for a terminal, or a library's child processes)
    r = subprocess.run([sys.executable, "-m", "msvm", "run", str(script)], capture_output=True, text=True,
                       timeout=300, env={"PATH": "/usr/bin:/bin", "MSVM_AS_MINDSPORE": "1"})
    assert r.returncode == 0, r.stderr


def test_mindcv_imports_under_the_alias():
    """The real model zoo (installed by `make` with --no-deps) loads; its models are built by the model-zoo work."""
    r = run_py("""
        import msvm
        msvm.as_mindspore()
        import mindcv
        print(sorted(mindcv.list_models("resnet*"))[:2])
    """)
    assert r.returncode == 0, r.stderr
    assert "resnet" in r.stdout


@pytest.mark.parametrize("name,cls,kwargs,std", [
    ("normal", init.Normal, {"sigma": 0.02}, lambda fi, fo: 0.02),
    ("he_normal", init.HeNormal, {}, lambda fi, fo: math.sqrt(2.0 / fi)),
    ("he_uniform", init.HeUniform, {"negative_slope": math.sqrt(5)}, lambda fi, fo: 1 / math.sqrt(fi) / math.sqrt(3)),
    ("xavier_uniform", init.XavierUniform, {}, lambda fi, fo: math.sqrt(2.0 / (fi + fo))),
    ("xavier_normal", init.XavierNormal, {}, lambda fi, fo: math.sqrt(2.0 / (fi + fo))),
    ("truncated", init.TruncatedNormal, {"sigma": 0.02}, lambda fi, fo: 0.02),
])
def test_initializers_have_mindspores_distributions(name, cls, kwargs, std):
    np.random.seed(0)
    shape = (256, 64, 3, 3)                        # fan_in 576, fan_out 2304
    t = init.initializer(cls(**kwargs), shape, ms.float32)
    a = t.asnumpy()
    assert t.shape == shape and a.dtype == np.float32
    assert abs(a.mean()) < 0.05 * std(576, 2304) + 1e-4
    want = std(576, 2304)
    got = a.std()
    if cls is init.TruncatedNormal:
        assert np.abs(a).max() <= 2.0
    assert abs(got - want) / want < 0.03, (name, got, want)


def test_initializer_forms_and_errors():
    assert np.array_equal(init.initializer("ones", (2, 2)).asnumpy(), np.ones((2, 2), np.float32))
    assert np.array_equal(init.initializer(init.Constant(3), [3]).asnumpy(), np.full(3, 3, np.float32))
    assert np.array_equal(init.initializer(0.5, 2).asnumpy(), np.full(2, 0.5, np.float32))
    assert init.initializer(np.zeros((2, 3)), (2, 3), ms.float16).dtype == ms.float16
    with pytest.raises(ValueError, match="unknown initializer 'bogus'"):
        init.initializer("bogus", (2,))
    with pytest.raises(ValueError, match=r"has shape \[2, 3\], expected \[3, 2\]"):
        init.initializer(np.zeros((2, 3)), (3, 2))
    d = nn.Dense(16, 8, weight_init=init.HeNormal(), bias_init=init.Constant(0.1))
    assert d.weight.shape == (8, 16) and np.allclose(d.bias.asnumpy(), 0.1)
    d.weight.set_data(init.initializer(init.Zero(), d.weight.shape, d.weight.dtype))
    assert not d.weight.asnumpy().any()


def test_sequential_cell_of_an_ordered_dict_names_its_cells():
    # MindSpore's SequentialCell(OrderedDict([...])) (mindcv's densenet): the keys name the Cells
    from collections import OrderedDict

    dense = nn.Dense(4, 3)
    seq = nn.SequentialCell(OrderedDict([("fc", dense), ("act", nn.ReLU())]))
    assert seq.fc is dense and len(seq) == 2 and seq[1].__class__.__name__ == "ReLU"
    x = np.arange(8, dtype=np.float32).reshape(2, 4) - 3.0
    w, b = dense.weight.asnumpy(), dense.bias.asnumpy()
    np.testing.assert_allclose(seq(ms.Tensor(x)).asnumpy(), np.maximum(x @ w.T + b, 0), rtol=1e-5, atol=1e-6)
    with pytest.raises(TypeError, match="CellList holds Cells, got int for 'n'"):
        nn.SequentialCell(OrderedDict([("n", 3)]))
