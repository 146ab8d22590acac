"""Programs that static analysis (msvm.static) must read without running them: shared by
tests/vm/test_static.py and the language server tests (issue 17)."""

HEAD = '''import math

import msvm as ms
import numpy as np
from msvm import nn, ops
'''

# the article's program, its calls under the main guard, inputs from a Generator
MAIN_GUARD = HEAD + '''

class DynamicMatmulCell(nn.Cell):
    def __init__(self):
        super().__init__()
        self.matmul = ops.MatMul()
        self.relu = ops.ReLU()

    def construct(self, x, y, training=True):
        out = self.matmul(x, y)
        if training:
            out = self.relu(out)
        return out


if __name__ == "__main__":
    rng = np.random.default_rng(0)
    x1 = ms.Tensor(rng.standard_normal((32, 768)).astype(np.float32))
    y = ms.Tensor(rng.standard_normal((768, 1024)).astype(np.float32))
    net = DynamicMatmulCell()
    out1 = net(x1, y, training=True)
'''

# weights from data nobody can see; the argument's shape is not described either
DATA_WEIGHTS = HEAD + '''
W = np.load("weights.npy")


class Proj(nn.Cell):
    def __init__(self, w):
        super().__init__()
        self.w = ms.Parameter(ms.Tensor(w))
        self.matmul = ops.MatMul()

    def construct(self, x):
        return self.matmul(x, self.w)


net = Proj(W)
'''

# set_inputs in a try: under the main guard, declaring a shape that cannot multiply
TRY_SET_INPUTS = HEAD + '''

class Proj(nn.Cell):
    def __init__(self):
        super().__init__()
        self.w = ms.Parameter(ms.Tensor(np.zeros((768, 1024), np.float32)))
        self.matmul = ops.MatMul()

    def construct(self, x):
        return self.matmul(x, self.w)


if __name__ == "__main__":
    net = Proj()
    try:
        net.set_inputs(ms.Tensor(shape=[None, 512], dtype=ms.float32))
    except Exception as e:
        print(e)
'''

# a model-zoo file: Cells and factories, nothing called; shapes follow constructor arguments
ZOO = HEAD + '''

class Block(nn.Cell):
    def __init__(self, cin, cout, expansion=4):
        super().__init__()
        self.fc1 = nn.Dense(cin, cout)
        self.fc2 = nn.Dense(cout, cout * expansion)
        self.relu = ops.ReLU()

    def construct(self, x):
        return self.relu(self.fc2(self.relu(self.fc1(x))))


class Net(nn.Cell):
    def __init__(self, block, layers, width=64, num_classes=1000):
        super().__init__()
        cells = []
        cin = width
        for n in layers:
            cells.append(block(cin, width))
            cin = width * 4
        self.body = nn.SequentialCell(cells)
        self.head = nn.Dense(cin, num_classes)

    def construct(self, x):
        b, s, _ = x.shape
        return self.head(self.body(x))


class Plain(nn.Cell):
    def __init__(self, cin, cout):
        super().__init__()
        self.fc = nn.Dense(cin, cout)

    def construct(self, x):
        return self.fc(x)


class Deep(nn.Cell):
    def __init__(self, dim, depth):
        super().__init__()
        self.layers = nn.CellList([nn.Dense(dim, dim) for _ in range(depth)])

    def construct(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def net50():
    return Net(Block, [3, 4, 6, 3])
'''

# constructor arguments from a file nobody can read; an activation nobody passes
CONFIG = HEAD + '''import json

cfg = json.load(open("config.json"))


class Head(nn.Cell):
    def __init__(self, hidden, classes, act):
        super().__init__()
        self.fc = nn.Dense(hidden, classes, activation=act)

    def construct(self, x):
        return self.fc(x)


head = Head(cfg["hidden"], cfg["classes"])
'''

# mindcv's shape: a helper method builds the stages, a class attribute with an annotation,
# factories with **kwargs that hand the class to a builder from another module
MINDCV_LIKE = HEAD + '''from .helpers import build_model_with_cfg, register_model


class Bottleneck(nn.Cell):
    expansion: int = 4

    def __init__(self, in_channels, channels, base_width=64, norm=None):
        super().__init__()
        width = int(channels * (base_width / 64.0))
        self.fc1 = nn.Dense(in_channels, width)
        self.fc2 = nn.Dense(width, channels * self.expansion)

    def construct(self, x):
        return self.fc2(self.fc1(x))


class ResNet(nn.Cell):
    def __init__(self, block, layers, num_classes=1000, in_channels=3):
        super().__init__()
        self.input_channels = 64
        self.stem = nn.Dense(in_channels, self.input_channels)
        self.layer1 = self._make_layer(block, 64, layers[0])
        self.layer2 = self._make_layer(block, 128, layers[1])
        self.head = nn.Dense(self.input_channels, num_classes)

    def _make_layer(self, block, channels, n):
        layers = []
        for _ in range(n):
            layers.append(block(self.input_channels, channels))
            self.input_channels = channels * block.expansion
        return nn.SequentialCell(layers)

    def construct(self, x):
        return self.head(self.layer2(self.layer1(self.stem(x))))


def _create_resnet(pretrained=False, **kwargs):
    return build_model_with_cfg(ResNet, pretrained, **kwargs)


@register_model
def resnet50(pretrained: bool = False, num_classes: int = 1000, in_channels=3, **kwargs):
    model_args = dict(block=Bottleneck, layers=[3, 4, 6, 3], num_classes=num_classes, in_channels=in_channels,
                      **kwargs)
    return _create_resnet(pretrained, **model_args)
'''

# a training loop at module level
TRAINING_LOOP = HEAD + '''

class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.dense = nn.Dense(768, 10)

    def construct(self, x):
        return self.dense(x)


net = Net()
x = ms.Tensor(np.zeros((4, 768), np.float32))
for e in range(100):
    for s in range(1000):
        net(x)
'''

# the training loop first, the Cell defined after it
LOOP_THEN_CELL = HEAD + '''
for a in range(100):
    for b in range(100):
        for c in range(100):
            n = a * b * c


class Late(nn.Cell):
    def construct(self, x: "B, 8"):
        return ops.relu(x)
'''

# one Cell, then a line the evaluator must not afford
HOSTILE_CELL = HEAD + '''

class Net(nn.Cell):
    def construct(self, x):
        return ops.relu(x)


'''

HOSTILE = [
    "n = sum(range(10**12))",
    "n = 2**2**2**2**2**2",
    "n = 10**10**10",
    "s = 'a'\nfor i in range(100):\n    s = s + s",
    "a = [0]*10**10",
    "n = math.factorial(10**7)",
    "s = 'x'*10**12",
    "for e in range(100):\n    for s in range(1000):\n        Net()(ms.Tensor(np.zeros((4, 8), np.float32)))",
    "while True:\n    pass",
    "a = np.zeros((10**6, 10**6))\nb = np.arange(10**12)",
    "x = (2).__pow__(10**10)",
    "x = list(range(10**9))",
    "x = max(range(10**12))",
    "x = '%*d' % (10**9, 1)",
    "def f(n):\n    return f(n + 1)\n\n\nf(0)",
    "x = math.prod(range(1, 10**7))",
    "x = sum([[0] * 1000] * 1000, [])",
    "x = [[0] * 10**6 for _ in range(200)]",
    "x = 1" + " + 1" * 2000,
    "x = list(range(10**6))\nfor i in range(256):\n    y = sorted(x)",
    "x = " + "[" * 190 + "]" * 190,
]

# kinds and ranks read from use (no call site, no set_inputs): through a sub-Cell, token ids,
# an int, a flag, a tuple
USES = HEAD + '''

class Block(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(768, 10)

    def construct(self, x):
        b, s, d = x.shape
        return self.fc(x)


class Parent(nn.Cell):
    def __init__(self):
        super().__init__()
        self.block = Block()

    def construct(self, x):
        return self.block(x)


class Tok(nn.Cell):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(100, 16)

    def construct(self, ids, n, use_bias, hw):
        h, w = hw
        out = self.emb(ids)
        for _ in range(n):
            out = out * 2.0
        if use_bias:
            out = out + 1.0
        return ops.reshape(out, (-1, h, w))
'''

# the same parent, declared with a last dim the sub-Cell's Dense cannot take
USES_MISMATCH = USES + '''

if __name__ == "__main__":
    net = Parent()
    net.set_inputs(ms.Tensor(shape=[None, None, 512], dtype=ms.float32))
'''
