"""GPT-2's MLP as tests/models/gpt2.py writes it (Conv1D, NewGELUActivation), for the tests of
compiler/epilogue.py (tests/vm/test_epilogue_fuse.py, tests/jit/test_epilogue_tiers.py); the
producer and the activation are in one file, as epilogue.py needs."""

import math

import msvm as ms
import numpy as np
from msvm import nn, ops


class Conv1D(nn.Cell):            # tests/models/gpt2.py's: addmm over the flattened input, then view
    def __init__(self, nf, nx, seed=0):
        super().__init__()
        rng = np.random.default_rng(seed)
        self.nf = nf
        self.weight = ms.Parameter(ms.Tensor((rng.standard_normal((nx, nf)) * 0.2).astype(np.float32)), "weight")
        self.bias = ms.Parameter(ms.Tensor(rng.standard_normal(nf).astype(np.float32)), "bias")

    def construct(self, x):
        size_out = x.shape[:-1] + (self.nf,)
        x = ops.addmm(self.bias, x.view(-1, x.shape[-1]), self.weight)
        x = x.view(size_out)
        return x


class NewGELU(nn.Cell):
    def construct(self, input):
        return 0.5 * input * (1.0 + ops.tanh(math.sqrt(2.0 / math.pi) * (input + 0.044715 * ops.pow(input, 3.0))))


class Scaled(nn.Cell):            # an activation with a Parameter: not appended
    def __init__(self):
        super().__init__()
        self.alpha = ms.Parameter(ms.Tensor(np.float32(0.3)), "alpha")

    def construct(self, x):
        return x * self.alpha


class MLP(nn.Cell):
    def __init__(self, n, hidden, act=None):
        super().__init__()
        self.c_fc = Conv1D(hidden, n)
        self.act = act or NewGELU()
        self.c_proj = Conv1D(n, hidden, seed=1)

    def construct(self, h):
        h = self.c_fc(h)
        h = self.act(h)
        return self.c_proj(h)


def gelu(h):
    return 0.5 * h * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * h ** 3)))


def mlp_numpy(net, x):
    a, b = net.c_fc, net.c_proj
    h = x.astype(np.float64) @ a.weight.asnumpy() + a.bias.asnumpy()
    return gelu(h) @ b.weight.asnumpy() + b.bias.asnumpy()
