"""The model zoos' activation Cells are the ops functions (one definition per op), against
numpy formulas, with NaN, ±inf, ±0 and 0-d inputs, eagerly and compiled in a Cell."""

import msvm as ms
import numpy as np
import pytest
from msvm import nn


def relu6(x): return np.minimum(np.maximum(x, 0), 6)


def softplus(x, beta, thr):
    with np.errstate(over="ignore"):
        return np.where(x * beta > thr, x, np.log1p(np.exp(x * beta)) / beta)


CASES = [
    (nn.ReLU6(), relu6),
    (nn.HSigmoid(), lambda x: relu6(x + 3) / 6),
    (nn.HSwish(), lambda x: x * relu6(x + 3) / 6),
    (nn.SiLU(), lambda x: x / (1 + np.exp(-x))),
    (nn.ELU(0.5), lambda x: np.where(x > 0, x, 0.5 * np.expm1(x))),
    (nn.LeakyReLU(0.1), lambda x: np.where(x >= 0, x, 0.1 * x)),
    (nn.Softplus(2.0, 3.0), lambda x: softplus(x, 2.0, 3.0)),
]


class Wrap(nn.Cell):
    def __init__(self, act):
        super().__init__()
        self.act = act

    def construct(self, x):
        return self.act(x)


@pytest.mark.parametrize("cell,ref", CASES, ids=[type(c).__name__ for c, _ in CASES])
@pytest.mark.parametrize("shape", [(), (7,), (3, 5)])
def test_activation_cells(cell, ref, shape, rng):
    x = rng.standard_normal(shape).astype(np.float32) * 4
    if shape:
        x.flat[: 4] = [np.nan, np.inf, -np.inf, -0.0][: x.size]
    with np.errstate(all="ignore"):
        want = ref(x.astype(np.float64)).astype(np.float32)
        for got in (cell(ms.Tensor(x)), Wrap(cell)(ms.Tensor(x))):
            assert got.shape == shape
            np.testing.assert_allclose(got.asnumpy(), want, rtol=2e-5, atol=1e-6, equal_nan=True)
