"""The device layer (msvm/device.py) on the CPU: a foreign CPU-side device whose arrays refuse
every implicit conversion to host numpy (tests/foreign_device.py) runs the interpreter's op
tests, random programs, the BERT-like layer and a small conv net as Cells, with every tensor,
Parameter and intermediate on the device; mixing devices is an error naming both;
ALLOC_DEVICE_MEM / FREE_DEVICE_MEM open and give back a frame's workspace on a stream."""

import os
import subprocess
import sys

import foreign_device as fd
import msvm as ms
import numpy as np
import pytest
from bert_layer import BertLayer
from cells import DynamicMatmulCell, SmallConvNet
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from msvm import device, nn, ops
from msvm.bytecode import CodeBuilder, verify
from msvm.bytecode import symbolic as S
from msvm.bytecode.types import TensorType
from msvm.interp import interpreter, replay
from msvm.interp.interpreter import BoundCode
from paths import ROOT
from random_programs import cpu_reference, trees

fd.install()
# the interpreter's op tests, run whole on the foreign device (their L2/L3 cases assert compiled
# kernels, which a device without compiled tiers does not have; at L1 they are the same tests)
OP_TESTS = ["tests/vm/test_ops.py", "tests/vm/test_interp.py", "tests/vm/test_conv_ops.py", "tests/vm/test_nlp_ops.py",
            "tests/vm/test_conformance_ops.py", "tests/vm/test_zero_d.py", "tests/vm/test_resize.py",
            "tests/vm/test_activation_layers.py", "tests/vm/test_mask_index.py", "tests/vm/test_mixed_precision.py"]
# what the foreign device's functions may be: CuPy 14's namespace has each (cupy_names.txt)
# ... except these: ufunc.at for multiply/divide/subtract (TENSOR_SCATTER's mul/div/sub modes), which CuPy
# documents only for "selected ufuncs" (add, maximum, minimum: its scatter ops); on a GPU these modes are expected to
# fail with CuPy's TypeError until they are written another way
NOT_IN_CUPY = {"numpy.multiply.at", "numpy.divide.at", "numpy.subtract.at"}
CUPY_NAMES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "cupy_names.txt")


@pytest.fixture
def foreign():
    old = ms.get_context("device_target")
    ms.set_context(device_target="FOREIGN")
    yield device.current()
    ms.set_context(device_target=old)


def host_params(net) -> dict:
    return {name: p.asnumpy().copy() for name, p in net.parameters_dict().items()}


def load(net, params) -> None:
    for name, p in net.parameters_dict().items():
        p.set_data(params[name])


def on_device(values) -> bool:
    """Every array among values lives on the foreign device (no host numpy array)."""
    for v in values:
        if isinstance(v, tuple):
            if not on_device(v):
                return False
        elif isinstance(v, np.ndarray) or (isinstance(v, np.generic)):
            return False
    return True


class StackWatch:
    """A trace hook that records whether any operand-stack value was ever a host array."""

    def __init__(self):
        self.host, self.seen = [], 0

    def __call__(self, frame, pc):
        self.seen += 1
        if not on_device(frame.stack):
            self.host.append((frame.code.name, pc, [type(v).__name__ for v in frame.stack]))


def test_op_tests_run_on_the_foreign_device(tmp_path):
    """The op tests pass with every tensor on the foreign device: no kernel, handler or Tensor
    method fell back to host numpy (it would have raised), and what they dispatched exists in CuPy."""
    out = tmp_path / "dispatched.txt"
    env = dict(os.environ, MSVM_TEST_DEVICE="FOREIGN", MSVM_TEST_DISPATCHED=str(out))
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "not L2 and not L3",
                        *OP_TESTS], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    used = {tuple(line.split(" ", 1)) for line in out.read_text().splitlines()}
    assert ("numpy", "add") in used and ("numpy", "matmul") in used and len(used) > 40
    cupy = {line.strip() for line in open(CUPY_NAMES) if line.strip() and not line.startswith("#")}
    missing = {f"{m}.{n}" for m, n in used if _cupy_name(m, n) not in cupy}
    assert missing == NOT_IN_CUPY, f"dispatched to functions CuPy 14 does not list: {sorted(missing)}"


def _cupy_name(module: str, name: str) -> str:
    """Where CuPy implements a numpy function or ufunc: cupy.<name>, cupy.lib.stride_tricks.<name>,
    cupyx.scipy.special.<name>; a ufunc method (add.at) is the ufunc's."""
    if module.startswith("scipy.special") or module == "scipy.special._ufuncs":
        return f"cupyx.scipy.special.{name}"
    if "stride_tricks" in module:
        return f"cupy.lib.stride_tricks.{name}"
    if module.startswith("numpy.linalg"):
        return f"cupy.linalg.{name}"
    return "cupy." + name


def test_tensors_and_parameters_live_on_the_device(foreign):
    x = ms.Tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    assert type(x._data) is fd.ForeignArray and x.device == "FOREIGN:0"
    with pytest.raises(fd.HostConversion):
        np.asarray(x._data)
    host = x.asnumpy()
    assert type(host) is np.ndarray and host.tolist() == [[0, 1, 2], [3, 4, 5]]
    host[0, 0] = 99                            # a copy: the device's data did not change
    assert x.asnumpy()[0, 0] == 0 and np.asarray(x)[0, 0] == 0
    d = nn.Dense(3, 4)
    assert all(type(p._data) is fd.ForeignArray for p in d.parameters_dict().values())
    d.weight.set_data(np.ones((4, 3), np.float32))
    assert type(d.weight._data) is fd.ForeignArray and d.weight.asnumpy().sum() == 12
    y = x[1]
    assert type(y._data) is fd.ForeignArray and y.asnumpy().tolist() == [3, 4, 5]
    z = ops.relu(x - 2.0) * x                  # eager ops
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert type(z._data) is fd.ForeignArray and np.array_equal(z.asnumpy(), np.maximum(a - 2, 0) * a)
    assert interpreter.describe_value(x._data)["device"] == "FOREIGN:0"


@pytest.mark.parametrize("make, shape", [(lambda: BertLayer(64, 4, 128), (2, 7, 64)), (SmallConvNet, (2, 3, 16, 16))],
                         ids=["bert-layer", "conv-net"])
def test_models_run_on_the_device_as_cells(make, shape, rng):
    """The same model with the same weights on the CPU and on the foreign device: equal results,
    and no operand of any instruction is ever a host array (interpreted); then the steady state
    (the replay) gives the same again."""
    x = rng.standard_normal(shape).astype(np.float32)
    ms.set_context(device_target="CPU")
    cpu_net = make()
    params = host_params(cpu_net)
    want = cpu_net(ms.Tensor(x)).asnumpy()
    ms.set_context(device_target="FOREIGN", jit_config={"jit_level": "auto"})
    try:
        net = make()
        load(net, params)
        assert all(type(p._data) is fd.ForeignArray for p in net.parameters_dict().values())
        xt = ms.Tensor(x)
        watch = StackWatch()
        old = interpreter.set_trace(watch)
        try:
            got = net(xt)
        finally:
            interpreter.set_trace(old)
        assert watch.seen > 20 and not watch.host, watch.host[:5]
        assert type(got._data) is fd.ForeignArray
        np.testing.assert_allclose(got.asnumpy(), want, rtol=2e-5, atol=2e-6)
        for _ in range(4):                      # memo, then the straight-line replay
            again = net(xt)
            assert type(again._data) is fd.ForeignArray
        np.testing.assert_allclose(again.asnumpy(), want, rtol=2e-5, atol=2e-6)
    finally:
        ms.set_context(device_target="CPU")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tree=trees(), B=st.sampled_from([0, 2, 3]), N=st.integers(6, 8), seed=st.integers(0, 2 ** 16),
       share=st.sampled_from([0.0, 0.2]))
def test_random_programs_on_the_device_match_the_cpu(tree, B, N, seed, share):
    """Random programs (NaN, inf, empty and 0-d inputs): the foreign device's interpreter and
    replay give the CPU interpreter's answer bit for bit."""
    case = cpu_reference(tree, B, N, seed, share)
    if case is None:
        return
    code, args, W, want = case
    ms.set_context(device_target="FOREIGN")
    try:
        dev = device.current()
        bound = BoundCode(code, None, {"W": ms.Tensor(W)}, None)
        dargs = [dev.from_host(np.array(a, order="C")) for a in args]
        with np.errstate(all="ignore"):
            got = bound.call(dargs)
            rp = replay.build(bound, bound.fast_bind(dargs))
            again = rp(*dargs) if rp is not None else got
        assert on_device([got, again])
        for g in (got, again):
            np.testing.assert_array_equal(device.to_host(g), np.asarray(want), err_msg=str(tree))
    finally:
        ms.set_context(device_target="CPU")


def test_mixing_devices_is_an_error_naming_both(rng):
    ms.set_context(device_target="CPU")
    net = DynamicMatmulCell()
    x_cpu = ms.Tensor(rng.standard_normal((4, 8)).astype(np.float32))
    y_cpu = ms.Tensor(rng.standard_normal((8, 3)).astype(np.float32))
    ms.set_context(device_target="FOREIGN")
    try:
        x_dev = ms.Tensor(x_cpu.asnumpy())
        y_dev = ms.Tensor(y_cpu.asnumpy())
        with pytest.raises(device.DeviceMismatch, match=r"CPU:0.*FOREIGN:0"):
            net(x_cpu, y_dev)                   # a CPU tensor into a Cell running on the device
        with pytest.raises(device.DeviceMismatch, match=r"(CPU:0.*FOREIGN:0|FOREIGN:0.*CPU:0)"):
            ops.add(x_cpu, x_dev)               # eager
        dense = None
        ms.set_context(device_target="CPU")
        dense = nn.Dense(8, 3)                  # Parameters on the CPU
        ms.set_context(device_target="FOREIGN")
        with pytest.raises(device.DeviceMismatch, match=r"attribute .* CPU:0.*FOREIGN:0"):
            dense(x_dev)
        out = net(x_dev, y_dev)
        np.testing.assert_allclose(out.asnumpy(), np.maximum(x_cpu.asnumpy() @ y_cpu.asnumpy(), 0), rtol=1e-5)
    finally:
        ms.set_context(device_target="CPU")
    with pytest.raises(device.DeviceMismatch, match=r"FOREIGN:0.*CPU:0"):
        net(x_dev, y_dev)                       # device tensors into a Cell running on the CPU again
    assert dense is not None


def test_setitem_stays_on_the_device_and_names_a_mixed_value(foreign):
    """``x[index] = value`` eagerly: a mask or int index, a scalar, host data or a Tensor value;
    the result stays a device array (it copied the data through numpy before); a value or index
    on the CPU is an error naming both devices (x[index] too), host data is copied in."""
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = ms.Tensor(a)
    t[t > 6.5] = -1.0
    t[ms.Tensor(np.array([0]))] = ms.Tensor(np.full((1, 4), 9.0, np.float32))
    t[1] = [5, 6, 7, 8]
    want = a.copy()
    want[want > 6.5] = -1.0
    want[[0]] = 9.0
    want[1] = [5, 6, 7, 8]
    assert type(t._data) is fd.ForeignArray
    np.testing.assert_array_equal(t.asnumpy(), want)
    ms.set_context(device_target="CPU")
    cpu = ms.Tensor(np.zeros(4, np.float32))
    cpu_rows = ms.Tensor(np.array([True, False, True]))
    ms.set_context(device_target="FOREIGN")
    with pytest.raises(device.DeviceMismatch, match=r"x\[index\] = value: the value: a tensor on CPU:0 met a tensor "
                                                    r"on FOREIGN:0"):
        t[2] = cpu
    np.testing.assert_array_equal(t[np.array([2, 0])].asnumpy(), want[[2, 0]])     # host data: copied in
    with pytest.raises(device.DeviceMismatch, match=r"x\[index\]: the index: a tensor on CPU:0 met a tensor on FOREIGN:0"):
        t[cpu_rows]


def _workspace_code(dev_id=0, stream=1, fail=False):
    """f(x) = relu(x) * x between ALLOC_DEVICE_MEM dev_id, stream and FREE_DEVICE_MEM (a RESHAPE
    that cannot fit raises in between when ``fail``)."""
    b = CodeBuilder("ws", "ws.py", 1)
    t = TensorType((S.sym("n"),), ms.float32)
    b.local("x")
    b.code.params.append(("x", t))
    b.emit("ALLOC_DEVICE_MEM", b.const(dev_id), b.const(stream))
    b.emit("LOAD_TENSOR", 0)
    b.emit("RELU")
    b.emit("LOAD_TENSOR", 0)
    b.emit("BROADCAST_MUL")
    if fail:
        b.emit("RESHAPE", b.const((S.Expr.const(3),)))
    b.emit("FREE_DEVICE_MEM", b.const(dev_id), b.const(stream))
    b.emit("RETURN")
    return b.finish()


def test_alloc_and_free_device_mem_open_and_give_back_the_workspace(foreign):
    code = _workspace_code()
    verify(code)
    bound = BoundCode(code, None, {}, None)
    x = foreign.from_host(np.array([-1.0, 2.0, 3.0, -4.0], np.float32))
    before = dict(foreign.stats)
    out = bound.call([x])
    assert foreign.stats["allocs"] == before["allocs"] + 1 and foreign.stats["frees"] == before["frees"] + 1
    assert not foreign.live and foreign.to_host(out).tolist() == [0.0, 4.0, 9.0, 0.0]
    assert replay.build(bound, bound.fast_bind([x])) is None       # workspaces are the interpreter's
    with pytest.raises(device.DeviceMismatch, match=r"ALLOC_DEVICE_MEM .*device 3, but this code runs on FOREIGN:0"):
        BoundCode(_workspace_code(dev_id=3), None, {}, None)
    failing = BoundCode(_workspace_code(fail=True), None, {}, None)
    with pytest.raises(ms.ExecutionError):
        failing.call([x])
    assert not foreign.live                     # the frame's open workspace went back when it raised


def test_cpu_device_is_numpy_itself():
    """On the CPU the device layer adds nothing: kernels.py's creation functions are numpy's own,
    and a Tensor's data is the very array it was given."""
    from msvm.interp import kernels

    ms.set_context(device_target="CPU")
    assert device.current() is device.CPU
    for name in device.CREATION:
        assert getattr(kernels.np, name) is getattr(np, name)
    a = np.ones((2, 2), np.float32)
    t = ms.Tensor(a)
    assert t._data is a and t.asnumpy() is a
