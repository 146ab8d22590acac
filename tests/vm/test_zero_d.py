"""0-d tensors (issue 15, issue 21): ``ms.Tensor`` keeps a 0-d array 0-d, and every op family
on 0-d inputs gives a Tensor of shape () and the right dtype, in L1 and in PyNative (the
compiled tiers: tests/jit/test_zero_d_tiers.py)."""

import msvm as ms
import numpy as np
import pytest
from msvm import nn, ops
from zero_d_cases import CASES, check, inputs, run_case


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(CASES))
def test_every_op_family_on_0d_inputs_gives_a_0d_tensor(name, dtype):
    run_case(name, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(CASES))
def test_eager_ops_on_0d_tensors_give_0d_tensors(name, dtype):
    fn, ref, kind = CASES[name]
    x, y = inputs(dtype, seed=1)
    ms.set_context(mode=ms.PYNATIVE_MODE)
    try:
        check(fn(ms.Tensor(x), ms.Tensor(y)), ref(x, y), dtype, kind)
    finally:
        ms.set_context(mode=ms.GRAPH_MODE)


@pytest.mark.parametrize("value,dtype", [(np.array(768.0), np.float64), (np.array(3, np.int32), np.int32),
                                         (np.float32(2.5), np.float32), (np.array(True), np.bool_),
                                         (2.0, np.float32), (7, np.int64), (False, np.bool_)])
def test_tensor_of_a_0d_value_has_shape_empty(value, dtype):
    t = ms.Tensor(value)
    assert t.shape == () and t.asnumpy().shape == () and t.asnumpy().dtype == dtype
    assert ms.Tensor(value, dtype=ms.float32).shape == ()
    assert ms.Parameter(ms.Tensor(value)).shape == ()


def test_tensor_keeps_other_shapes_and_is_contiguous():
    a = np.arange(12, dtype=np.float32).reshape(3, 4).T            # not C-contiguous
    t = ms.Tensor(a)
    assert t.shape == (4, 3) and t.asnumpy().flags.c_contiguous
    np.testing.assert_array_equal(t.asnumpy(), a)
    assert ms.Tensor(np.zeros((0, 3), np.float32)).shape == (0, 3)
    assert ms.Tensor([1.0, 2.0]).shape == (2,) and ms.Tensor([[1]]).shape == (1, 1)
    assert ms.Tensor(a)[1, 2].shape == ()


class Reduce(nn.Cell):
    def construct(self, x):
        h = ops.mean(x)
        return ops.maximum(h, h)


def test_issue_example_mean_then_maximum():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for _ in range(3):
        out = Reduce()(ms.Tensor(x))
        assert isinstance(out, ms.Tensor) and out.shape == () and out.dtype == ms.float32
        assert out.asnumpy() == np.float32(2.5)
