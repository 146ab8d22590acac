"""Cells the test suites and the benchmarks share (tests/conftest.py and the bench scripts put
tests/ on sys.path)."""

from msvm import nn, ops


class DynamicMatmulCell(nn.Cell):
    """The article's section 4.2 Cell."""

    def __init__(self):
        super().__init__()
        self.matmul = ops.MatMul()
        self.relu = ops.ReLU()

    def construct(self, x, y, training=True):
        out = self.matmul(x, y)
        if training:
            out = self.relu(out)
        return out


# ---------------------------------------------------------------- a small conv net (device tests, issue 19)

class SmallConvNet(nn.Cell):
    """conv-bn-relu, a depthwise conv, max and adaptive pools, a dense head: the CV ops in one Cell."""

    def __init__(self, classes=10):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, stride=1, pad_mode="pad", padding=1, has_bias=True)
        self.bn = nn.BatchNorm2d(8)
        self.relu = nn.ReLU()
        self.dw = nn.Conv2d(8, 8, 3, stride=2, pad_mode="same", group=8)
        self.pool = nn.MaxPool2d(kernel_size=2, stride=2)
        self.gap = nn.AdaptiveAvgPool2d((1, 1))
        self.flatten = nn.Flatten()
        self.head = nn.Dense(8, classes)
        self.softmax = nn.Softmax(axis=-1)

    def construct(self, x):
        x = self.relu(self.bn(self.conv(x)))
        x = self.pool(self.relu(self.dw(x)))
        return self.softmax(self.head(self.flatten(self.gap(x))))


class Fn(nn.Cell):
    """construct(*xs) = fn(*xs, *consts): one op, primitive or function of ops as a Cell."""

    def __init__(self, fn, *consts):
        super().__init__()
        self.fn = fn
        self.consts = consts

    def construct(self, *xs):
        return self.fn(*xs, *self.consts)
