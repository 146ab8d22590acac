"""float64 numpy references for convolution, pooling, gather, resize and four mindcv models.

Written from the definitions (a cross-correlation summed one kernel tap at a time, windows
walked tap by tap, bins by their bounds) and from the papers' architectures (ResNet basic
and bottleneck blocks, MobileNetV2 inverted residuals, MobileNetV3 with squeeze-excite and
hard-swish) -- never through msvm's kernels or Cells. The models read their weights from a
``{parameter name: array}`` dict (``net.parameters_dict()``), so the references share only
the weights with the network under test.
"""

from __future__ import annotations

import numpy as np

# ---------------------------------------------------------------- ops (NCHW)

def same_pads(d: int, k: int, s: int, dil: int = 1) -> tuple[int, int]:
    """TensorFlow/MindSpore 'same': output ceil(d / s); the odd pixel of padding goes after."""
    out = -(-d // s)
    total = max((out - 1) * s + dil * (k - 1) + 1 - d, 0)
    return total // 2, total - total // 2


def _pad_spec(x, k, s, dil, pad):
    """((top, bottom), (left, right)) for pad 'same', an int, (h, w) or (top, bottom, left, right)."""
    if pad == "same":
        return same_pads(x.shape[2], k[0], s[0], dil[0]), same_pads(x.shape[3], k[1], s[1], dil[1])
    if isinstance(pad, int):
        pad = (pad,) * 4
    if len(pad) == 2:
        pad = (pad[0], pad[0], pad[1], pad[1])
    return (pad[0], pad[1]), (pad[2], pad[3])


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def _taps(xp, k, s, dil, ho, wo):
    """(i, j, the input pixels kernel tap (i, j) meets: [N, C, ho, wo]) for every tap."""
    for i in range(k[0]):
        for j in range(k[1]):
            y0, x0 = i * dil[0], j * dil[1]
            yield i, j, xp[:, :, y0:y0 + s[0] * (ho - 1) + 1:s[0], x0:x0 + s[1] * (wo - 1) + 1:s[1]]


def _out_len(d, k, s, dil, before, after):
    return (d + before + after - (dil * (k - 1) + 1)) // s + 1


def conv2d(x, w, bias=None, stride=1, pad=0, dilation=1, groups=1):
    """out[n, o, y, x] = sum over c, i, j of xpad[n, g*C/g + c, y*s + i*d, x*s + j*d] * w[o, c, i, j]."""
    x, w = np.asarray(x, np.float64), np.asarray(w, np.float64)
    s, dil = _pair(stride), _pair(dilation)
    o, cg, kh, kw = w.shape
    n, c = x.shape[:2]
    assert c == cg * groups, (x.shape, w.shape, groups)
    ph, pw = _pad_spec(x, (kh, kw), s, dil, pad)
    xp = np.pad(x, ((0, 0), (0, 0), ph, pw))
    ho = _out_len(x.shape[2], kh, s[0], dil[0], *ph)
    wo = _out_len(x.shape[3], kw, s[1], dil[1], *pw)
    og = o // groups
    out = np.zeros((n, groups, og, ho * wo))
    wg = w.reshape(groups, og, cg, kh, kw)
    for i, j, tap in _taps(xp, (kh, kw), s, dil, ho, wo):
        t = tap.reshape(n, groups, cg, ho * wo)
        if cg == 1 and og == 1:                   # depthwise: one channel times one weight
            out += t * wg[None, :, :, 0, i, j, None]
        else:
            out += np.matmul(wg[None, :, :, :, i, j], t)
    out = out.reshape(n, o, ho, wo)
    if bias is not None:
        out = out + np.asarray(bias, np.float64).reshape(1, -1, 1, 1)
    return out


def max_pool2d(x, kernel, stride=None, pad=0):
    """The max over each window; padding is -inf so it never wins; NaN propagates (np.maximum)."""
    x = np.asarray(x, np.float64)
    k = _pair(kernel)
    s = k if stride is None else _pair(stride)
    ph, pw = _pad_spec(x, k, s, (1, 1), pad)
    xp = np.pad(x, ((0, 0), (0, 0), ph, pw), constant_values=-np.inf)
    ho, wo = _out_len(x.shape[2], k[0], s[0], 1, *ph), _out_len(x.shape[3], k[1], s[1], 1, *pw)
    out = np.full(x.shape[:2] + (ho, wo), -np.inf)
    for _, _, tap in _taps(xp, k, s, (1, 1), ho, wo):
        out = np.maximum(out, tap)
    return out


def avg_pool2d(x, kernel, stride=None, pad=0, count_include_pad=True):
    """The window's sum over its size; with count_include_pad False (and always for 'same', as
    MindSpore's AvgPool) over the number of real (unpadded) pixels in it."""
    x = np.asarray(x, np.float64)
    k = _pair(kernel)
    s = k if stride is None else _pair(stride)
    ph, pw = _pad_spec(x, k, s, (1, 1), pad)
    xp = np.pad(x, ((0, 0), (0, 0), ph, pw))
    real = np.pad(np.ones((1, 1) + x.shape[2:]), ((0, 0), (0, 0), ph, pw))
    ho, wo = _out_len(x.shape[2], k[0], s[0], 1, *ph), _out_len(x.shape[3], k[1], s[1], 1, *pw)
    total = np.zeros(x.shape[:2] + (ho, wo))
    count = np.zeros((1, 1, ho, wo))
    for (_, _, tap), (_, _, r) in zip(_taps(xp, k, s, (1, 1), ho, wo), _taps(real, k, s, (1, 1), ho, wo)):
        total += tap
        count += r
    if count_include_pad and pad != "same":
        return total / (k[0] * k[1])
    return total / count


def adaptive_avg_pool2d(x, size):
    """Bin (i, j) is rows floor(i*H/oh) .. ceil((i+1)*H/oh) and likewise for columns (PyTorch's bins)."""
    x = np.asarray(x, np.float64)
    h, w = x.shape[2:]
    oh, ow = _pair(size)
    oh, ow = h if oh is None else oh, w if ow is None else ow
    out = np.empty(x.shape[:2] + (oh, ow))
    for i in range(oh):
        for j in range(ow):
            r0, r1 = (i * h) // oh, -(-((i + 1) * h) // oh)
            c0, c1 = (j * w) // ow, -(-((j + 1) * w) // ow)
            out[:, :, i, j] = x[:, :, r0:r1, c0:c1].sum(axis=(2, 3)) / ((r1 - r0) * (c1 - c0))
    return out


def gather(x, idx, axis):
    """x's slices at idx along axis, one index at a time: shape x[:axis] + idx + x[axis+1:]."""
    x = np.asarray(x)
    axis = axis % x.ndim
    idx = np.asarray(idx)
    flat = [x[(slice(None),) * axis + (int(i) % x.shape[axis],)] for i in idx.reshape(-1)]
    if not flat:
        return np.empty(x.shape[:axis] + idx.shape + x.shape[axis + 1:], x.dtype)
    out = np.stack(flat, axis=axis)
    return out.reshape(x.shape[:axis] + idx.shape + x.shape[axis + 1:])


def resize(x, oh, ow, mode, align=False):
    """x [N, C, H, W] sampled to [N, C, oh, ow]: PyTorch/MindSpore's nearest (floor) and bilinear
    (align_corners: corner to corner; otherwise half-pixel, clamped) source coordinates."""
    n, c, h, w = x.shape
    out = np.zeros((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            if mode == "nearest":
                out[:, :, i, j] = x[:, :, min(i * h // oh, h - 1), min(j * w // ow, w - 1)]
                continue
            if align:
                sy = i * (h - 1) / (oh - 1) if oh > 1 else 0.0
                sx = j * (w - 1) / (ow - 1) if ow > 1 else 0.0
            else:
                sy, sx = max((i + 0.5) * h / oh - 0.5, 0.0), max((j + 0.5) * w / ow - 0.5, 0.0)
            y0, x0 = min(int(sy), h - 1), min(int(sx), w - 1)
            y1, x1 = min(y0 + 1, h - 1), min(x0 + 1, w - 1)
            fy, fx = sy - y0, sx - x0
            out[:, :, i, j] = ((x[:, :, y0, x0] * (1 - fx) + x[:, :, y0, x1] * fx) * (1 - fy)
                               + (x[:, :, y1, x0] * (1 - fx) + x[:, :, y1, x1] * fx) * fy)
    return out


# ---------------------------------------------------------------- layers

def batch_norm(x, p, name, eps=1e-5):
    """Inference batch norm with the moving statistics of BatchNorm2d ``name``."""
    g, b = p[f"{name}.gamma"], p[f"{name}.beta"]
    m, v = p[f"{name}.moving_mean"], p[f"{name}.moving_variance"]
    r = (1, -1, 1, 1)
    return (x - m.reshape(r)) / np.sqrt(v.reshape(r) + eps) * g.reshape(r) + b.reshape(r)


def relu(x):
    return np.maximum(x, 0)


def relu6(x):
    return np.clip(x, 0, 6)


def hsigmoid(x):
    return relu6(x + 3) / 6


def hswish(x):
    return x * hsigmoid(x)


def dense(x, p, name):
    out = x @ p[f"{name}.weight"].T
    return out + p[f"{name}.bias"] if f"{name}.bias" in p else out


def conv(x, p, name, stride=1, pad=0, groups=1):
    return conv2d(x, p[f"{name}.weight"], p.get(f"{name}.bias"), stride, pad, 1, groups)


def as_float64(params) -> dict:
    """{name: float64 array} from a Cell's parameters_dict() (or any name -> tensor mapping)."""
    return {k: np.asarray(v.asnumpy() if hasattr(v, "asnumpy") else v, np.float64) for k, v in params.items()}


# ---------------------------------------------------------------- ResNet (He et al. 2015; torchvision's v1.5 layout)

RESNET_DEPTHS = {"resnet18": ("basic", [2, 2, 2, 2]), "resnet34": ("basic", [3, 4, 6, 3]),
                 "resnet50": ("bottleneck", [3, 4, 6, 3]), "resnet101": ("bottleneck", [3, 4, 23, 3])}


def resnet(p, x, name):
    """7x7/2 stem, 3x3/2 max pool, four stages (stride 1, 2, 2, 2 at their first block), mean, fc."""
    kind, depths = RESNET_DEPTHS[name]
    x = relu(batch_norm(conv(x, p, "conv1", 2, 3), p, "bn1"))
    x = max_pool2d(x, 3, 2, "same")
    for stage, n in enumerate(depths):
        for b in range(n):
            pre = f"layer{stage + 1}.{b}"
            stride = 2 if stage > 0 and b == 0 else 1
            if f"{pre}.down_sample.0.weight" in p:          # projection shortcut: 1x1 conv + BN
                identity = batch_norm(conv(x, p, f"{pre}.down_sample.0", stride, "same"), p, f"{pre}.down_sample.1")
            else:
                identity = x
            if kind == "basic":                              # 3x3 -> 3x3
                out = relu(batch_norm(conv(x, p, f"{pre}.conv1", stride, 1), p, f"{pre}.bn1"))
                out = batch_norm(conv(out, p, f"{pre}.conv2", 1, 1), p, f"{pre}.bn2")
            else:                                            # 1x1 -> 3x3 (stride here, v1.5) -> 1x1 x4
                out = relu(batch_norm(conv(x, p, f"{pre}.conv1", 1, "same"), p, f"{pre}.bn1"))
                out = relu(batch_norm(conv(out, p, f"{pre}.conv2", stride, 1), p, f"{pre}.bn2"))
                out = batch_norm(conv(out, p, f"{pre}.conv3", 1, "same"), p, f"{pre}.bn3")
            x = relu(out + identity)
    return dense(x.mean(axis=(2, 3)), p, "classifier")


# ---------------------------------------------------------------- MobileNetV2 (Sandler et al. 2018)

MOBILENET_V2 = [  # expansion t, channels c, repeats n, first stride s
    (1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]


def mobilenet_v2(p, x):
    """3x3/2 stem to 32, 17 inverted residuals (1x1 expand, 3x3 depthwise, linear 1x1 project; a
    residual where stride 1 keeps the width), 1x1 to 1280, mean, fc; ReLU6 everywhere."""
    x = relu6(batch_norm(conv(x, p, "features.0", 2, 1), p, "features.1"))
    cin, f = 32, 3
    for t, c, n, s in MOBILENET_V2:
        for i in range(n):
            stride, pre, k = (s if i == 0 else 1), f"features.{f}.layers", 0
            h = x
            if t != 1:
                h = relu6(batch_norm(conv(h, p, f"{pre}.0", 1, 0), p, f"{pre}.1"))
                k = 3
            hidden = cin * t
            h = relu6(batch_norm(conv(h, p, f"{pre}.{k}", stride, 1, groups=hidden), p, f"{pre}.{k + 1}"))
            h = batch_norm(conv(h, p, f"{pre}.{k + 3}", 1, 0), p, f"{pre}.{k + 4}")
            x = x + h if stride == 1 and cin == c else h
            cin, f = c, f + 1
    x = relu6(batch_norm(conv(x, p, f"features.{f}", 1, 0), p, f"features.{f + 1}"))
    return dense(x.mean(axis=(2, 3)), p, "classifier.1")


# ---------------------------------------------------------------- MobileNetV3-Large (Howard et al. 2019)

MOBILENET_V3_LARGE = [  # kernel, expanded width, out width, squeeze-excite, activation, stride
    (3, 16, 16, False, "relu", 1), (3, 64, 24, False, "relu", 2), (3, 72, 24, False, "relu", 1),
    (5, 72, 40, True, "relu", 2), (5, 120, 40, True, "relu", 1), (5, 120, 40, True, "relu", 1),
    (3, 240, 80, False, "hswish", 2), (3, 200, 80, False, "hswish", 1), (3, 184, 80, False, "hswish", 1),
    (3, 184, 80, False, "hswish", 1), (3, 480, 112, True, "hswish", 1), (3, 672, 112, True, "hswish", 1),
    (5, 672, 160, True, "hswish", 2), (5, 960, 160, True, "hswish", 1), (5, 960, 160, True, "hswish", 1)]


def squeeze_excite(x, p, pre):
    """Global mean -> 1x1 reduce (+bias) -> ReLU -> 1x1 expand (+bias) -> hard sigmoid; scales x's channels."""
    s = x.mean(axis=(2, 3), keepdims=True)
    s = relu(conv(s, p, f"{pre}.conv_reduce"))
    return x * hsigmoid(conv(s, p, f"{pre}.conv_expand"))


def mobilenet_v3_large(p, x):
    """3x3/2 stem to 16 (h-swish), 15 bottlenecks (1x1 expand where the width changes, kxk depthwise
    'same', optional SE, linear 1x1), 1x1 to 960 (h-swish), mean, fc 1280 (h-swish), fc."""
    x = hswish(batch_norm(conv(x, p, "features.0", 2, 1), p, "features.1"))
    cin = 16
    for f, (k, mid, out, se, act, stride) in enumerate(MOBILENET_V3_LARGE, start=3):
        a = hswish if act == "hswish" else relu
        pre, i, h = f"features.{f}.layers", 0, x
        if cin != mid:
            h = a(batch_norm(conv(h, p, f"{pre}.0", 1, 0), p, f"{pre}.1"))
            i = 3
        assert p[f"{pre}.{i}.weight"].shape == (mid, 1, k, k), (pre, p[f"{pre}.{i}.weight"].shape)
        h = a(batch_norm(conv(h, p, f"{pre}.{i}", stride, "same", groups=mid), p, f"{pre}.{i + 1}"))
        i += 3
        if se:
            h = squeeze_excite(h, p, f"{pre}.{i}")
            i += 1
        h = batch_norm(conv(h, p, f"{pre}.{i}", 1, 0), p, f"{pre}.{i + 1}")
        x = x + h if stride == 1 and cin == out else h
        cin = out
    f = 3 + len(MOBILENET_V3_LARGE)
    x = hswish(batch_norm(conv(x, p, f"features.{f}", 1, 0), p, f"features.{f + 1}"))
    x = hswish(dense(x.mean(axis=(2, 3)), p, "classifier.0"))
    return dense(x, p, "classifier.3")


MODELS = {"resnet18": lambda p, x: resnet(p, x, "resnet18"), "resnet50": lambda p, x: resnet(p, x, "resnet50"),
          "mobilenet_v2_100": mobilenet_v2, "mobilenet_v3_large_100": mobilenet_v3_large}


def test_weights(named_shapes, seed: int = 0) -> dict:
    """float32 weights under which a random deep network's logits depend on the image and are
    well conditioned: He (fan-in) normal convolutions, 1/sqrt(fan-in) dense layers, BatchNorm
    scales in [0.6, 1.2] (larger gains make MobileNetV3's logits move by 3e-5 when the weights
    move by one float32 ulp), shifts, statistics and biases of about 0.1. (mindcv's own init
    draws depthwise weights by fan-out; with it and shifted BN the MobileNets' logits change by
    1e-8 between two images, so comparing them would test little.)"""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in named_shapes:
        shape = tuple(shape)
        leaf = name.rsplit(".", 1)[-1]
        if len(shape) == 4:
            v = rng.standard_normal(shape) * np.sqrt(2.0 / np.prod(shape[1:]))
        elif len(shape) == 2:
            v = rng.standard_normal(shape) / np.sqrt(shape[1])
        elif leaf in ("gamma", "moving_variance"):
            v = rng.uniform(0.6, 1.2, shape)
        else:                                   # beta, moving_mean, biases
            v = rng.normal(0.0, 0.1, shape)
        out[name] = v.astype(np.float32)
    return out
