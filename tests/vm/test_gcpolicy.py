"""msvm.gcpolicy: a call that builds plans, callers or a replay freezes what is alive (later
collections do not walk a compiled model again), and the next Cell made gives it back to the
collector, so a model dropped while frozen is reclaimed."""

import gc
import weakref

import msvm as ms
import numpy as np
import pytest
from msvm import gcpolicy, nn, ops


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.w = ms.Parameter(ms.Tensor(np.ones((4, 4), np.float32)), "w")
        object.__setattr__(self, "_cycle", [self])      # (a reference cycle, as compiled Cells hold)

    def construct(self, x):
        return ops.relu(ops.matmul(x, self.w)) + 1.0


@pytest.fixture(autouse=True)
def thawed():
    gcpolicy.thaw()
    gc.unfreeze()
    yield
    gcpolicy.thaw()
    gc.unfreeze()


def call(net, n):
    return net(ms.Tensor(np.ones((n, 4), np.float32))).asnumpy()


def test_a_new_signature_freezes_and_a_new_cell_thaws():
    net = Net()
    assert gc.get_freeze_count() == 0
    np.testing.assert_allclose(call(net, 3), np.full((3, 4), 5.0))
    assert gc.get_freeze_count() > 0            # (the call resolved a new signature)
    Net()
    assert gc.get_freeze_count() == 0


def test_a_model_dropped_while_frozen_is_reclaimed():
    net = Net()
    for n in (2, 3, 3, 3, 5):
        call(net, n)
    assert gc.get_freeze_count() > 0
    ref = weakref.ref(net)
    del net
    gc.collect()
    assert ref() is not None                    # (frozen: the cycle collector does not see it)
    Net()                                       # (a Cell made: thawed)
    gc.collect()
    assert ref() is None


def test_off_by_environment_and_with_the_collector_disabled(monkeypatch):
    net = Net()
    monkeypatch.setenv("MSVM_GC_FREEZE", "0")
    call(net, 3)
    assert gc.get_freeze_count() == 0
    monkeypatch.delenv("MSVM_GC_FREEZE")
    gc.disable()
    try:
        call(net, 4)
        assert gc.get_freeze_count() == 0
    finally:
        gc.enable()
    call(net, 6)
    assert gc.get_freeze_count() > 0



def test_the_collector_waits_out_a_call_that_resolves_a_new_signature(monkeypatch):
    held = gcpolicy.hold()
    assert held and not gc.isenabled()
    gcpolicy.release(held, built=True)
    assert gc.isenabled() and gc.get_freeze_count() > 0
    gcpolicy.thaw()
    gc.unfreeze()
    net = Net()
    a = gc.get_count()[0]
    call(net, 3)                       # (a new signature: no collection walked what it built; it is settled)
    assert gc.isenabled() and gc.get_count()[0] <= a + 50 and gc.get_freeze_count() > 0
    gcpolicy.thaw()
    gc.unfreeze()
    from msvm.interp.interpreter import BoundCode

    def fails(self, *a, **k):
        assert not gc.isenabled()
        raise RuntimeError("a kernel failed")
    monkeypatch.setattr(BoundCode, "call", fails)
    with pytest.raises(RuntimeError, match="a kernel failed"):
        call(net, 5)
    assert gc.isenabled() and gc.get_freeze_count() == 0     # (back after a call that raised; nothing settled)
