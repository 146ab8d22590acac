"""The L1 interpreter: trace hook, events, buffer reuse, errors while running."""

import msvm as ms
import numpy as np
import pytest
from msvm import events, nn, ops
from msvm.bytecode import records


class Mlp(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Dense(8, 16)
        self.fc2 = nn.Dense(16, 4)

    def construct(self, x):
        h = ops.gelu(self.fc1(x))
        return ops.softmax(self.fc2(h) * 0.5, -1)


def _ref(net, x):
    h = x @ net.fc1.weight.asnumpy().T + net.fc1.bias.asnumpy()
    from scipy.special import erf
    h = 0.5 * h * (1 + erf(h / np.float32(np.sqrt(2))))
    s = (h @ net.fc2.weight.asnumpy().T + net.fc2.bias.asnumpy()) * np.float32(0.5)
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_trace_hook_sees_every_instruction_in_order(rng):
    net = Mlp()
    x = ms.Tensor(rng.standard_normal((3, 8)).astype(np.float32))
    net(x)
    seen = []

    def hook(frame, pc):
        seen.append((frame.code.name, pc, frame.depth, len(frame.stack)))
        assert all(isinstance(m, dict) for m in frame.metadata_stack())

    ms.set_trace(hook)
    try:
        out = net(x)
    finally:
        ms.set_trace(None)
    np.testing.assert_allclose(out.asnumpy(), _ref(net, x.asnumpy()), rtol=1e-5, atol=1e-6)
    code = next(iter(net._runner.variants.values())).code
    top = [pc for name, pc, depth, _ in seen if depth == 0]
    assert top == [r.offset for r in records(code)]             # straight-line code: every offset once
    assert {name for name, *_ in seen} == {"Mlp.construct", "Dense.construct"}
    for _name, pc, depth, n in seen:                              # stack depth agrees with the disassembler
        if depth == 0:
            rec = next(r for r in records(code) if r.offset == pc)
            assert n == len(code.stack_types[rec.index])


def test_events_bytecode_and_exec(rng):
    got = []
    unsub = events.subscribe(got.append)
    try:
        net = Mlp()
        net(ms.Tensor(rng.standard_normal((2, 8)).astype(np.float32)))
    finally:
        unsub()
    kinds = [e["type"] for e in got]
    assert kinds.count("bytecode") == 1 and kinds.count("exec") == 1
    bc = next(e for e in got if e["type"] == "bytecode")
    assert bc["code"] == "Mlp.construct" and bc["program"]["functions"][-1]["instructions"]


def test_exec_events_from_jit_functions_and_repeated_calls(rng):
    """Every call sends its exec event while someone listens: the first (which compiles) and
    the repeated ones (served by the call memo), for Cells and jit functions alike."""
    @ms.jit
    def f(x, scale: float):
        return x * scale

    got = []
    unsub = events.subscribe(got.append)
    try:
        x = ms.Tensor(rng.standard_normal((2, 8)).astype(np.float32))
        net = Mlp()
        for scale in (0.5, 2.0, 2.0):
            np.testing.assert_allclose(f(x, scale).asnumpy(), x.asnumpy() * scale)
            net(x)
    finally:
        unsub()
    execs = [e["code"] for e in got if e["type"] == "exec"]
    assert execs.count("Mlp.construct") == 3 and sum(c.endswith("f") for c in execs) == 3


def test_profiling_subscriber_gets_per_instruction_times(rng):
    got = []
    unsub = events.subscribe(got.append, types={"exec"}, profile=True)
    try:
        Mlp()(ms.Tensor(rng.standard_normal((2, 8)).astype(np.float32)))
    finally:
        unsub()
    per = [e for e in got if "instr_ns" in e]
    assert per and all(v >= 0 for e in per for v in e["instr_ns"].values())
    assert not events.profiling


def test_reused_buffers_never_leak_into_results(rng):
    net = Mlp()
    x1 = ms.Tensor(rng.standard_normal((4, 8)).astype(np.float32))
    x2 = ms.Tensor(rng.standard_normal((4, 8)).astype(np.float32))
    a = net(x1)
    a_copy = a.asnumpy().copy()
    b = net(x2)
    c = net(x1)
    np.testing.assert_array_equal(a.asnumpy(), a_copy)    # a was not overwritten by later calls
    np.testing.assert_allclose(c.asnumpy(), a_copy, rtol=1e-6)
    assert not np.shares_memory(a.asnumpy(), b.asnumpy())
    bound = next(iter(net._runner.variants.values())).bound
    assert bound.reusable or bound.memplan.values     # some intermediates are reused (kept, or the memory plan's)


class Divider(nn.Cell):
    def construct(self, x, y):
        return ops.reshape(x, (-1, 3)) + y


def test_runtime_failure_names_instruction_and_line():
    net = Divider()
    with pytest.raises((ms.ExecutionError, ms.ShapeMismatch)) as e:
        net(ms.Tensor(np.ones((4, 6), np.float32)), ms.Tensor(np.ones((5, 3), np.float32)))
    # x0*x1 // 3 may be 1 (x[1:]-like dims can be), so it broadcasts against y0: checked on entry
    msg, line = str(e.value), Divider.construct.__code__.co_firstlineno + 1
    assert f"test_interp.py:{line}:" in msg and "BROADCAST_ADD: cannot broadcast" in msg, msg
    assert "must be equal or 1" in msg and "= 8" in msg and "= 5" in msg, msg


def test_reshape_that_cannot_fit_fails_on_entry_with_its_line():
    with pytest.raises(ms.ShapeMismatch) as e:
        Divider()(ms.Tensor(np.ones((4, 5), np.float32)), ms.Tensor(np.ones((6, 3), np.float32)))
    msg = str(e.value)
    line = Divider.construct.__code__.co_firstlineno + 1
    assert f"test_interp.py:{line}:" in msg and "RESHAPE: cannot reshape [x0,x1]" in msg and "x0=4, x1=5" in msg


def test_concurrent_calls_do_not_share_buffers(rng):
    import threading

    net = Mlp()
    xs = [ms.Tensor(rng.standard_normal((16, 8)).astype(np.float32)) for _ in range(4)]
    refs = [_ref(net, x.asnumpy()) for x in xs]
    errors = []

    def work(i):
        for _ in range(20):
            out = net(xs[i]).asnumpy()
            if not np.allclose(out, refs[i], rtol=1e-5, atol=1e-6):
                errors.append(i)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_a_new_rank_is_a_new_variant_not_an_error():
    """Arguments of another rank (no dim of 1 in either) compile a variant of their own."""
    @ms.jit
    def f(a, b):
        return a + b

    a2, b2 = np.ones((3, 4), np.float32), np.full((3, 4), 2, np.float32)
    np.testing.assert_array_equal(f(ms.Tensor(a2), ms.Tensor(b2)).asnumpy(), a2 + b2)
    b1 = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(f(ms.Tensor(a2), ms.Tensor(b1)).asnumpy(), a2 + b1)

    class Add(nn.Cell):
        def construct(self, x, y):
            return x + y

    net = Add()
    np.testing.assert_array_equal(net(ms.Tensor(a2), ms.Tensor(b2)).asnumpy(), a2 + b2)
    np.testing.assert_array_equal(net(ms.Tensor(a2), ms.Tensor(b1)).asnumpy(), a2 + b1)
    np.testing.assert_array_equal(net(ms.Tensor(b1), ms.Tensor(b1)).asnumpy(), b1 + b1)


class _Scale(nn.Cell):
    def __init__(self):
        super().__init__()
        self.w = ms.Parameter(ms.Tensor(np.ones((3, 4), np.float32)))

    def construct(self, x):
        return ops.matmul(x, self.w) * 2.0


def test_set_data_with_another_shape_verifies_again():
    """The bytecode was verified for the Parameter's old shape: after set_data with another one
    the Cell compiles and verifies again (a weight that fits gives numpy's answer at its new shape;
    with one that does not, the argument is refused before anything runs)."""
    net = _Scale()
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_allclose(net(ms.Tensor(x)).asnumpy(), x @ np.ones((3, 4)) * 2)
    w = np.arange(15, dtype=np.float32).reshape(3, 5)
    net.w.set_data(ms.Tensor(w))
    np.testing.assert_allclose(net(ms.Tensor(x)).asnumpy(), x @ w * 2)
    net.w.set_data(ms.Tensor(np.ones((4, 5), np.float32)))
    with pytest.raises(ms.ShapeMismatch, match=r"argument x has dim 1 = 3"):
        net(ms.Tensor(x))
