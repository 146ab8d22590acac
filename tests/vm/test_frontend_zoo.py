"""What mindcv's other models write in construct (tried beyond the four the zoo tests check), each
against numpy at L1 and compiled, through one bytecode over several shapes:

- mobilevit: ``construct(self, x, *args, **kwargs)``; a Cell made and called in construct
  (``nn.Softmax(axis=-1)(attn)``); a dict literal carrying shapes between helpers; a helper method
  whose argument is reassigned under a shape condition;
- poolformer: nn.GroupNorm; hrnet: ops.ResizeNearestNeighbor; pvt: a sub-Cell returning (H, W) used as dims
  and in a shape condition, a helper returning on both sides of it, ops.ResizeBilinear; cmt: a Cell
  class of its own made in construct; swin: mindspore.numpy.roll; coat: mindspore.numpy.split, Parameter.data;
  BiT: nn.Conv2d.conv2d, nn.ConstantPad2d; pnasnet: init_parameters_data; halonet: Tensor(init=Initializer);
  convit: ops.constexpr, ops.eye, a Parameter edited by item; xcit: numpy array methods while compiling;
- rexnet and skresnet: tests/vm/test_slice_assign.py and test_cell_attributes.py; edgenext:
  test_conformance_ops.py (a sub-Cell that needs its int arguments' values)."""

import msvm as ms
import numpy as np
import pytest
from levels import at
from mindspore_alias import installed
from msvm import nn, ops


class Block(nn.Cell):
    def construct(self, x, *args, **kwargs):
        return x + 1.0 if not kwargs else x


class Folding(nn.Cell):
    """mobilevit's MobileViTBlock in miniature: unfold (a helper returning a dict), a Cell made in
    construct, fold (a helper reading the dict), a width made even under a shape condition."""

    def __init__(self):
        super().__init__()
        self.block = Block()

    def unfold(self, x):
        b, c, h, w = x.shape
        padded = False
        if w % 2 != 0:                       # (a symbolic condition: the argument x reassigned in one branch)
            x = ops.pad(x, (0, 1))
            padded = True
        info = {"batch": b, "width": w, "padded": padded}
        return ops.reshape(x, (b, c, -1)), info

    def fold(self, x, info):
        x = ops.reshape(x, (info["batch"], x.shape[1], -1, info["width"] + (1 if info["padded"] else 0)))
        return x

    def construct(self, x):
        y, info = self.unfold(x)
        y = nn.Softmax(axis=-1)(self.block(y))
        return self.fold(y, info)


def folding_ref(x):
    b, c, h, w = x.shape
    if w % 2:
        x = np.pad(x, ((0, 0), (0, 0), (0, 0), (0, 1)))
    y = x.reshape(b, c, -1) + 1.0
    e = np.exp(y - y.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)).reshape(b, c, h, -1)


@pytest.mark.parametrize("level", ["L1", "auto"])
def test_mobilevits_constructs(level, rng):
    with at(level):
        net = Folding()
        for shape in ((2, 3, 4, 5), (3, 2, 3, 4), (2, 3, 4, 5), (2, 3, 2, 7)):
            x = rng.standard_normal(shape).astype(np.float32)
            np.testing.assert_allclose(net(ms.Tensor(x)).asnumpy(), folding_ref(x), rtol=1e-6, atol=1e-7)
        assert len(net._runner.variants) == 1         # one bytecode: the width's parity is a branch in it


def test_a_keyword_into_kwargs_or_a_dict_with_a_computed_key_is_refused():
    class KwCaller(nn.Cell):
        def __init__(self):
            super().__init__()
            self.block = Block()

        def construct(self, x):
            return self.block(x, extra=1)

    with pytest.raises(ms.MsvmError, match="unexpected keyword argument 'extra'"):
        KwCaller()(ms.Tensor(np.zeros(2, np.float32)))

    def computed_key(x):
        return {x.shape[0]: x}[2]

    with pytest.raises(ms.MsvmError, match="constant keys"):
        ms.jit(computed_key)(ms.Tensor(np.zeros(2, np.float32)))


def test_a_cell_with_parameters_made_in_construct_is_still_refused():
    class Makes(nn.Cell):
        def construct(self, x):
            return nn.Dense(2, 2)(x)

    with pytest.raises(ms.MsvmError, match="is not a sub-Cell of Makes"):
        Makes()(ms.Tensor(np.zeros((1, 2), np.float32)))


class NormResize(nn.Cell):
    """poolformer's nn.GroupNorm and hrnet's ops.ResizeNearestNeighbor((height, width))."""

    def __init__(self):
        super().__init__()
        self.norm = nn.GroupNorm(2, 6, eps=1e-5)
        self.norm.gamma.set_data(ms.Tensor(np.linspace(0.5, 1.5, 6, dtype=np.float32)))
        self.norm.beta.set_data(ms.Tensor(np.linspace(-1, 1, 6, dtype=np.float32)))

    def construct(self, x, like):
        _, _, h, w = like.shape
        return ops.ResizeNearestNeighbor((h, w))(self.norm(x))


def norm_resize_ref(x, h, w):
    n, c = x.shape[:2]
    g = x.astype(np.float64).reshape(n, 2, int(np.prod(x.shape[1:])) // 2)      # (also for an empty batch)
    d = g - g.mean(-1, keepdims=True)
    y = (d / np.sqrt((d * d).mean(-1, keepdims=True) + 1e-5)).reshape(x.shape)
    y = y * np.linspace(0.5, 1.5, 6)[None, :, None, None] + np.linspace(-1, 1, 6)[None, :, None, None]
    rows = np.floor(np.arange(h) * (x.shape[2] / h)).astype(int)
    cols = np.floor(np.arange(w) * (x.shape[3] / w)).astype(int)
    return y[:, :, rows][:, :, :, cols]


@pytest.mark.parametrize("level", ["L1", "auto", "pynative"])
def test_group_norm_and_nearest_resize_match_numpy(level, rng):
    with at(level):
        net = NormResize()
        for (n, h, w), (oh, ow) in (((2, 5, 4), (10, 8)), ((3, 4, 4), (3, 7)), ((0, 5, 4), (10, 8)), ((2, 5, 4), (10, 8))):
            x = rng.standard_normal((n, 6, h, w)).astype(np.float32)
            got = net(ms.Tensor(x), ms.Tensor(np.zeros((1, 1, oh, ow), np.float32))).asnumpy()
            np.testing.assert_allclose(got, norm_resize_ref(x, oh, ow), rtol=2e-5, atol=2e-5)
    with pytest.raises(ValueError, match="multiple of num_groups"):
        nn.GroupNorm(4, 6)
    with pytest.raises(ValueError, match="cannot infer the -1"):     # (what GroupNorm no longer asks of reshape)
        ops.reshape(ms.Tensor(np.zeros((0, 4, 3), np.float32)), (0, 2, -1))


class Embed(nn.Cell):
    """pvt's patch embedding: returns the tokens and the grid's (H, W), ints a caller uses as dims."""

    def construct(self, x):
        b, c, h, w = x.shape
        h, w = h // 2, w // 2
        return ops.reshape(x[:, :, :2 * h, :2 * w], (b, c * 4, h * w)), (h, w)


class Pool(nn.Cell):
    """A Cell of the user's own, made in construct (cmt's ``GlobalAvgPooling()(x)``)."""

    def construct(self, x):
        return ops.mean(x, (2, 3), True)


class Pyramid(nn.Cell):
    def __init__(self):
        super().__init__()
        self.embed = Embed()
        self.grid = 4          # the grid the position table was made for

    def position(self, pos, h, w):
        if h * w == self.grid:                 # returns on both sides of a shape condition
            return pos
        else:
            p = ops.ResizeBilinear((h, w))(ops.reshape(pos, (1, 1, 2, 2)))
            return ops.reshape(p, (1, 1, h * w))

    def construct(self, x, pos):
        t, (h, w) = self.embed(x)
        t = t + self.position(pos, h, w)
        return Pool()(ops.reshape(t, (x.shape[0], -1, h, w)))


def _bilinear_asymmetric(a, oh, ow):
    h, w = a.shape[-2:]
    sy, sx = np.arange(oh) * (h / oh), np.arange(ow) * (w / ow)
    y0, x0 = np.floor(sy).astype(int), np.floor(sx).astype(int)
    y1, x1 = np.minimum(y0 + 1, h - 1), np.minimum(x0 + 1, w - 1)
    fy, fx = (sy - y0)[:, None], (sx - x0)[None, :]
    return (a[..., y0, :][..., x0] * (1 - fx) + a[..., y0, :][..., x1] * fx) * (1 - fy) + \
        (a[..., y1, :][..., x0] * (1 - fx) + a[..., y1, :][..., x1] * fx) * fy


def pyramid_ref(x, pos):
    b, c, h, w = x.shape
    h, w = h // 2, w // 2
    t = x[:, :, :2 * h, :2 * w].reshape(b, c * 4, h * w)
    p = pos if h * w == 4 else _bilinear_asymmetric(pos.reshape(1, 1, 2, 2), h, w).reshape(1, 1, h * w)
    return (t + p).reshape(b, -1, h, w).mean((2, 3), keepdims=True)


@pytest.mark.parametrize("level", ["L1", "auto"])
def test_a_sub_cells_ints_a_helper_returning_on_both_sides_and_a_cell_made_in_construct(level, rng):
    """pvt's and cmt's forms: the returned (H, W) take part in shapes and in a shape condition, the
    helper's value is the merge of its two returns, and the legacy ResizeBilinear samples at dst * in / out."""
    with at(level):
        net = Pyramid()
        pos = rng.standard_normal((1, 1, 4)).astype(np.float32)
        for shape in ((2, 3, 4, 4), (2, 3, 6, 9), (3, 3, 4, 5), (2, 3, 6, 9)):
            x = rng.standard_normal(shape).astype(np.float32)
            np.testing.assert_allclose(net(ms.Tensor(x), ms.Tensor(pos)).asnumpy(), pyramid_ref(x, pos),
                                       rtol=1e-5, atol=1e-6)


def test_resize_bilinears_three_mappings(rng):
    a = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    x = ms.Tensor(a)
    np.testing.assert_allclose(ops.ResizeBilinear((7, 3))(x).asnumpy(), _bilinear_asymmetric(a, 7, 3), rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_allclose(ops.ResizeBilinear((7, 3), align_corners=True)(x).asnumpy(),
                               ops.interpolate(x, size=(7, 3), mode="bilinear", align_corners=True).asnumpy())
    np.testing.assert_allclose(ops.ResizeBilinear((7, 3), half_pixel_centers=True)(x).asnumpy(),
                               ops.interpolate(x, size=(7, 3), mode="bilinear").asnumpy())
    with pytest.raises(ValueError, match="cannot both be True"):
        ops.ResizeBilinear((2, 2), True, True)


class Shifted(nn.Cell):
    """swin's shifted windows: ``mindspore.numpy.roll`` on the spatial axes, there and back."""

    def __init__(self):
        super().__init__()
        import mindspore.numpy  # (msvm's face of it: compat's alias, installed by the fixture)

        self.mnp = mindspore.numpy

    def construct(self, x):
        mnp = self.mnp
        y = mnp.roll(x, (-3, -3), (1, 2)) * 2.0
        return mnp.roll(y, (3, 3), (1, 2)) + mnp.arange(x.shape[-1], dtype=mnp.float32)


@pytest.fixture
def mindspore_alias():
    with installed():
        yield



@pytest.mark.parametrize("level", ["L1", "auto", "pynative"])
def test_roll_matches_numpy(level, rng, mindspore_alias):
    with at(level):
        net = Shifted()
        for shape in ((2, 7, 7, 3), (1, 4, 9, 2), (2, 0, 5, 3), (2, 7, 7, 3), (3, 2, 2, 4)):
            x = rng.standard_normal(shape).astype(np.float32)
            want = np.roll(np.roll(x, (-3, -3), (1, 2)) * 2.0, (3, 3), (1, 2)) + np.arange(shape[-1])
            np.testing.assert_array_equal(net(ms.Tensor(x)).asnumpy(), want.astype(np.float32))
    a = rng.standard_normal((3, 4)).astype(np.float32)
    for shift, dims in ((5, None), (-1, 0), ((1, 2), (0, 1)), (4, 1)):
        np.testing.assert_array_equal(ops.roll(ms.Tensor(a), shift, dims).asnumpy(), np.roll(a, shift, dims))
    with pytest.raises(ValueError, match="2 shifts for 1 dims"):
        ops.roll(ms.Tensor(a), (1, 2), 0)


class StdConv(nn.Conv2d):
    """BiT's StdConv2d: the weight standardized in construct, then MindSpore's ``self.conv2d``."""

    def construct(self, x):
        w = self.weight
        m = ops.mean(w, (1, 2, 3), True)
        w = (w - m) / ops.sqrt(ops.mean((w - m) * (w - m), (1, 2, 3), True) + 1e-10)
        return self.conv2d(x, w)


class Coat(nn.Cell):
    """coat's channel split at fixed indices (``mindspore.numpy.split``) and BiT's nn.ConstantPad2d."""

    def __init__(self):
        super().__init__()
        import mindspore.numpy

        self.mnp = mindspore.numpy
        self.pad = nn.ConstantPad2d((1, 0, 2, 1), 0.5)
        self.conv = StdConv(6, 4, 3, pad_mode="pad", padding=1)

    def construct(self, x):
        a, b, c = self.mnp.split(x, [1, 3], axis=1)
        return self.conv(self.pad(ops.concat((c, a, b), 1)))


def coat_ref(net, x):
    w = net.conv.weight.asnumpy().astype(np.float64)
    m = w.mean((1, 2, 3), keepdims=True)
    w = (w - m) / np.sqrt(((w - m) ** 2).mean((1, 2, 3), keepdims=True) + 1e-10)
    y = np.concatenate((x[:, 3:], x[:, :1], x[:, 1:3]), 1)
    y = np.pad(y, ((0, 0), (0, 0), (2, 1), (1, 0)), constant_values=0.5)
    y = np.pad(y, ((0, 0), (0, 0), (1, 1), (1, 1)))
    n, _, h, wd = y.shape
    out = np.zeros((n, 4, h - 2, wd - 2))
    for i in range(3):
        for j in range(3):
            out += np.einsum("nchw,oc->nohw", y[:, :, i:i + h - 2, j:j + wd - 2], w[:, :, i, j])
    return out


@pytest.mark.parametrize("level", ["L1", "auto", "pynative"])
def test_coats_split_bits_standardized_conv_and_constant_pad(level, rng, mindspore_alias):
    with at(level):
        net = Coat()
        for shape in ((2, 6, 5, 4), (1, 6, 3, 7), (2, 6, 5, 4)):
            x = rng.standard_normal(shape).astype(np.float32)
            np.testing.assert_allclose(net(ms.Tensor(x)).asnumpy(), coat_ref(net, x), rtol=1e-4, atol=1e-4)


def test_what_model_inits_ask_of_parameters_and_cells():
    """coat and convit read ``param.data.shape``; pnasnet calls ``self.init_parameters_data()``;
    halonet makes ``Tensor(shape=..., init=TruncatedNormal(sigma=.02))``."""
    from msvm.common.initializer import TruncatedNormal

    net = StdConv(2, 3, 1)
    assert net.weight.data is net.weight and net.weight.data.shape == (3, 2, 1, 1)
    assert net.init_parameters_data() == {p: p for p in net.get_parameters()}
    t = ms.Tensor(shape=(200, 50), dtype=ms.float32, init=TruncatedNormal(sigma=0.02)).asnumpy()
    assert t.shape == (200, 50) and 0.015 < t.std() < 0.025 and np.abs(t).max() <= 2.0     # (bounds absolute)


def test_constexpr_runs_while_compiling_and_eye(rng):
    """convit's ``@constexpr get_rel_indices(num_patches)``: run once per compile on its constant argument,
    its Tensor a constant of the bytecode; ``ops.eye`` for its weight init."""
    calls = []

    @ops.constexpr
    def ramp(n):
        calls.append(n)
        return ms.Tensor(np.arange(n, dtype=np.float32)) + ops.eye(1, n, ms.float32)

    class Ramp(nn.Cell):
        def construct(self, x):
            return x * ramp(4)

    net = Ramp()
    for b in (2, 3, 2):
        x = rng.standard_normal((b, 4)).astype(np.float32)
        np.testing.assert_array_equal(net(ms.Tensor(x)).asnumpy(), x * (np.arange(4) + np.eye(1, 4)).astype(np.float32))
    assert calls == [4]                       # (one bytecode for both batch sizes: one compile)

    class Symbolic(nn.Cell):
        def construct(self, x):
            return x * ramp(x.shape[1])

    sym = Symbolic()           # (a dim: compiled for each exact shape, as construct code that needs a dim's value)
    for n in (4, 3):
        np.testing.assert_array_equal(sym(ms.Tensor(np.ones((2, n), np.float32))).asnumpy(),
                                      np.broadcast_to(np.arange(n) + np.eye(1, n), (2, n)).astype(np.float32))
    assert sym._runner.exact_shapes

    class FromTensor(nn.Cell):
        def construct(self, x):
            return x * ramp(x)

    with pytest.raises(ms.MsvmError, match="must be known when compiling"):
        FromTensor()(ms.Tensor(np.zeros((2, 4), np.float32)))
    with pytest.raises(TypeError, match="non-negative ints"):
        ops.eye(-1)


class Sides(nn.Cell):
    """A helper returning a different tuple on each side of a shape condition; a dict that keeps the x
    it was made with; a check inside one side before a reshape after the if."""

    def helper(self, x):
        if x.shape[0] == 2:
            return x * 2.0, x.shape[0]
        else:
            return x + 100.0, 7

    def construct(self, x):
        d = {"a": x}
        y, n = self.helper(x)
        x = x + 1.0
        w = y
        if x.shape[0] % 2 == 1:
            assert x.shape[0] < 9, "nine rows"
            w = ops.pad(y, (0, 1))
        return d["a"] * 10.0 + x + y * n, ops.reshape(w, (-1,))


@pytest.mark.parametrize("level", ["L1", "auto"])
def test_sides_of_a_shape_condition(level):
    with at(level):
        net = Sides()
        for n in (2, 3, 5, 2):
            x = np.arange(n, dtype=np.float32)
            y, k = (x * 2, n) if n == 2 else (x + 100, 7)
            a, b = net(ms.Tensor(x))
            np.testing.assert_array_equal(a.asnumpy(), x * 10 + x + 1 + y * k)
            np.testing.assert_array_equal(b.asnumpy(), np.pad(y, (0, 1)) if n % 2 else y)
        with pytest.raises(AssertionError, match="nine rows"):
            net(ms.Tensor(np.zeros(9, np.float32)))


def unfold_ref(x, k, s, r, same):
    """ExtractImagePatches on NCHW, written out: the windows' depth (row, column, channel)."""
    n, c, h, w = x.shape
    (kh, kw), (sh, sw), (rh, rw) = k, s, r
    eh, ew = (kh - 1) * rh + 1, (kw - 1) * rw + 1
    if same:
        oh, ow = -(-h // sh), -(-w // sw)
        ph, pw = max((oh - 1) * sh + eh - h, 0), max((ow - 1) * sw + ew - w, 0)
        x = np.pad(x, ((0, 0), (0, 0), (ph // 2, ph - ph // 2), (pw // 2, pw - pw // 2)))
    else:
        oh, ow = (h - eh) // sh + 1, (w - ew) // sw + 1
    out = np.zeros((n, kh * kw * c, oh, ow), x.dtype)
    for i in range(kh):
        for j in range(kw):
            for a in range(oh):
                for b in range(ow):
                    out[:, (i * kw + j) * c:(i * kw + j + 1) * c, a, b] = x[:, :, a * sh + i * rh, b * sw + j * rw]
    return out


@pytest.mark.parametrize("level", ["L1", "auto", "pynative"])
def test_unfold_takes_every_window_as_channels(level, rng):
    """volo's and halonet's nn.Unfold: valid and same, strides and rates, over set_inputs' None dims."""
    cases = [((3, 3), (1, 1), (1, 1), "valid"), ((2, 3), (2, 1), (1, 2), "same"), ((4, 4), (2, 2), (1, 1), "valid"),
             ((3, 3), (3, 3), (1, 1), "same"), ((1, 1), (3, 2), (1, 1), "same")]
    with at(level):
        for k, s, r, pad in cases:
            net = nn.Unfold([1, *k, 1], [1, *s, 1], [1, *r, 1], pad)
            net.set_inputs(ms.Tensor(shape=[None, 3, None, None], dtype=ms.float32))
            for shape in ((2, 3, 7, 9), (1, 3, 8, 8), (2, 3, 5, 11)):
                x = rng.standard_normal(shape).astype(np.float32)
                np.testing.assert_array_equal(net(ms.Tensor(x)).asnumpy(), unfold_ref(x, k, s, r, pad == "same"))
    with pytest.raises(ValueError, match=r"ksizes must be \[1, ksize_row, ksize_col, 1\]"):
        nn.Unfold([3, 3], [1, 1, 1, 1], [1, 1, 1, 1])
    with pytest.raises(ValueError, match="padding must be 'same' or 'valid'"):
        nn.Unfold([1, 3, 3, 1], [1, 1, 1, 1], [1, 1, 1, 1], "pad")


class HaloBits(nn.Cell):
    """halonet's relative logits: mindspore.numpy.tensordot, MindSpore 1.x's ``ops.pad(x, paddings=...)``
    (pairs from the first dim), ``ops.squeeze(x, axis=())`` on dims that may be 1; volo's Cell made in
    construct from the input's dims."""

    def __init__(self, mnp):
        super().__init__()
        self.mnp = mnp

    def construct(self, q, rel_k):
        b, h, w, _ = q.shape
        x = self.mnp.tensordot(q, ops.transpose(rel_k, (1, 0)), axes=1)
        x = ops.pad(x, paddings=((0, 0), (0, 0), (0, 0), (0, 1)))
        x = ops.squeeze(ops.expand_dims(x, 1), axis=())
        return Scaled((h, w))(x)


class Scaled(nn.Cell):
    def __init__(self, size):
        super().__init__()
        self.scale = float(size[0] * size[1])       # (Python arithmetic on the dims: needs them known)

    def construct(self, x):
        return x * self.scale


@pytest.mark.parametrize("level", ["L1", "auto", "pynative"])
def test_halonets_tensordot_old_pad_and_squeeze_and_a_cell_made_from_dims(level, rng, mindspore_alias):
    import mindspore.numpy as mnp

    with at(level):
        net = HaloBits(mnp)
        net.set_inputs(ms.Tensor(shape=[None, None, None, 4], dtype=ms.float32),
                       ms.Tensor(shape=[5, 4], dtype=ms.float32))
        for shape in ((2, 3, 3, 4), (1, 1, 2, 4), (2, 3, 3, 4), (1, 2, 1, 4)):
            q = rng.standard_normal(shape).astype(np.float32)
            k = rng.standard_normal((5, 4)).astype(np.float32)
            want = np.pad(np.tensordot(q, k.T, 1), ((0, 0), (0, 0), (0, 0), (0, 1)))
            want = np.squeeze(want[:, None]) * float(shape[1] * shape[2])
            np.testing.assert_allclose(net(ms.Tensor(q), ms.Tensor(k)).asnumpy(), want, rtol=1e-5, atol=1e-5)
    a = rng.standard_normal((2, 3, 4)).astype(np.float32)
    b = rng.standard_normal((4, 3, 5)).astype(np.float32)
    for axes in (((1, 2), (1, 0)), 0, ([2], [0])):
        got = ops.tensordot(ms.Tensor(a), ms.Tensor(b if axes != ([2], [0]) else b), axes).asnumpy()
        np.testing.assert_allclose(got, np.tensordot(a, b, axes), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="does not match"):
        ops.tensordot(ms.Tensor(a), ms.Tensor(b), ((1,), (0,)))
    with pytest.raises(ValueError, match="pairs, one per dim"):
        ops.pad(ms.Tensor(a), paddings=((0, 1), (2,)))


class Fold(nn.Cell):
    """volo's Fold, shortened: made in construct from the input's dims, with a fixed float16 Tensor (not a
    Parameter) and a P.Conv2DTranspose: every window channel added back at its place (torch's fold)."""

    def __init__(self, channels, output_size, k, stride):
        super().__init__()
        self.h = int((output_size[0] + 2 - k) / stride + 1)      # (Python arithmetic: the dims must be known)
        self.size, self.c, self.k = output_size, channels, k
        w = np.zeros((channels * k * k, 1, k, k))
        for i in range(channels * k * k):
            w[i, 0, (i % (k * k)) // k, i % k] = 1
        self.weight = ms.Tensor(w, ms.float16)
        self.fold = ops.Conv2DTranspose(channels * k * k, k, pad_mode="pad", pad=(1, 1, 1, 1), stride=stride,
                                        group=channels)

    def construct(self, x):
        b = x.shape[0]
        x = ops.reshape(x, (b, self.c * self.k * self.k, self.h, -1))
        return self.fold(x, self.weight, (b, self.c, self.size[0], self.size[1]))


class Folder(nn.Cell):
    def construct(self, x, cols):
        b, c, h, w = x.shape
        return Fold(c, (h, w), 3, 2)(cols) + x


def fold_ref(x, cols):
    b, c, h, w = x.shape
    oh, ow = (h - 1) // 2 + 1, (w - 1) // 2 + 1
    cols = cols.reshape(b, c, 3, 3, oh, ow)
    out = np.zeros((b, c, h + 2, w + 2))
    for i in range(3):
        for j in range(3):
            out[:, :, i:i + 2 * oh - 1:2, j:j + 2 * ow - 1:2] += cols[:, :, i, j]
    return out[:, :, 1:h + 1, 1:w + 1] + x


@pytest.mark.parametrize("level", ["L1", "auto"])
def test_a_cell_made_in_construct_with_a_tensor_from_the_inputs_dims(level, rng):
    with at(level):
        net = Folder()
        net.set_inputs(ms.Tensor(shape=[None, 2, None, None], dtype=ms.float32),
                       ms.Tensor(shape=[None, 18, None], dtype=ms.float32))
        for h, w in ((5, 6), (4, 4), (5, 6)):
            x = rng.standard_normal((2, 2, h, w)).astype(np.float32)
            cols = rng.standard_normal((2, 18, ((h - 1) // 2 + 1) * ((w - 1) // 2 + 1))).astype(np.float32)
            np.testing.assert_allclose(net(ms.Tensor(x), ms.Tensor(cols)).asnumpy(), fold_ref(x, cols), rtol=1e-5,
                                       atol=1e-5)


class Branches(nn.Cell):
    """crossvit's per-branch Parameters in a ParameterTuple, read by index and by iteration, and its
    ``interpolate(x, size) if H != size else x``: a conditional expression on a shape predicate giving
    tensors (and ints)."""

    def __init__(self, rng):
        super().__init__()
        self.pos = ms.ParameterTuple([ms.Parameter(ms.Tensor(rng.standard_normal((1, i + 2, 4)).astype(np.float32)),
                                                   name=f"pos_embed.{i}") for i in range(2)])

    def construct(self, x):
        c = x.shape[1]
        x = ops.concat((x, x), 1) if c < 3 else x * 2.0
        k = c * 2 if c < 3 else c
        outs = []
        for i in range(2):
            outs.append(x[:, :i + 2] + self.pos[i])
        total = 0.0
        for p in self.pos:
            total = total + p.sum()
        return ops.concat(outs, 1) * total, k


def branches_ref(net, x):
    c = x.shape[1]
    x = np.concatenate((x, x), 1) if c < 3 else x * 2
    ps = [p.asnumpy() for p in net.pos]
    return np.concatenate([x[:, :i + 2] + ps[i] for i in range(2)], 1) * sum(p.sum() for p in ps), (c * 2 if c < 3
                                                                                                       else c)


@pytest.mark.parametrize("level", ["L1", "auto", "pynative"])
def test_a_parameter_tuple_and_a_conditional_expression_of_tensors(level, rng):
    net = Branches(rng)
    assert sorted(net.parameters_dict()) == ["pos_embed.0", "pos_embed.1"]
    net.set_inputs(ms.Tensor(shape=[None, None, 4], dtype=ms.float32))
    with at(level):
        for shape in ((2, 2, 4), (1, 5, 4), (2, 2, 4)):
            x = rng.standard_normal(shape).astype(np.float32)
            got, k = net(ms.Tensor(x))
            want, wk = branches_ref(net, x)
            np.testing.assert_allclose(got.asnumpy(), want, rtol=1e-5)
            assert int(k) == wk
        net.pos[1].set_data(ms.Tensor(np.full((1, 3, 4), 0.5, np.float32)))       # (a new value is read)
        x = rng.standard_normal((1, 5, 4)).astype(np.float32)
        np.testing.assert_allclose(net(ms.Tensor(x))[0].asnumpy(), branches_ref(net, x)[0], rtol=1e-5)
    with pytest.raises(TypeError, match="must be Parameters"):
        ms.ParameterTuple([ms.Tensor(np.ones(2, np.float32))])
    with pytest.raises(ValueError, match="names must differ"):
        ms.ParameterTuple([ms.Parameter(ms.Tensor(np.ones(2, np.float32)), name="a")] * 2)


class Up(nn.Cell):
    def construct(self, x, size=None):
        return ops.interpolate(x, size=size, mode="nearest")


class Skip(nn.Cell):
    """An FPN's top-down step (mobilevit's folding too): a sub-Cell given the caller's dims in a tuple
    (``size=(H, W)``). Passed whole as a constant, the caller's dim symbols were read as the sub-Cell's
    own of the same names (its input's), and the resize kept the small map's size: a wrong answer, or
    a false ShapeMismatch where a check followed."""

    def __init__(self):
        super().__init__()
        self.up = Up()

    def construct(self, x, small):
        h, w = x.shape[2], x.shape[3]
        return self.up(small, size=(h, w)) * 2.0, self.up(small, size=[h // 2, w])


@pytest.mark.parametrize("level", ["L1", "auto"])
def test_a_sub_cell_given_the_callers_dims_in_a_tuple(level, rng):
    net = Skip()
    net.set_inputs(ms.Tensor(shape=[None, 2, None, None], dtype=ms.float32),
                   ms.Tensor(shape=[None, 2, None, None], dtype=ms.float32))
    with at(level):
        for hw, small in (((8, 6), (2, 3)), ((4, 4), (2, 2)), ((8, 6), (2, 3))):
            x = rng.standard_normal((1, 2, *hw)).astype(np.float32)
            s = rng.standard_normal((1, 2, *small)).astype(np.float32)
            a, b = net(ms.Tensor(x), ms.Tensor(s))
            rows = (np.arange(hw[0]) * small[0]) // hw[0]
            cols = (np.arange(hw[1]) * small[1]) // hw[1]
            np.testing.assert_array_equal(a.asnumpy(), s[:, :, rows][:, :, :, cols] * 2.0)
            rows2 = (np.arange(hw[0] // 2) * small[0]) // (hw[0] // 2)
            np.testing.assert_array_equal(b.asnumpy(), s[:, :, rows2][:, :, :, cols])


class Contract(nn.Cell):
    def __init__(self, axes):
        super().__init__()
        self.axes = axes

    def construct(self, a, b):
        return ops.tensordot(a, b, self.axes)


class SqueezeAll(nn.Cell):
    def construct(self, x):
        return ops.squeeze(x) * 2.0


@pytest.mark.parametrize("level", ["L1", "auto"])
def test_contracted_dims_pair_up_and_squeeze_drops_every_dim_of_one(level):
    """ops.tensordot checks each contracted pair, not only their products (2 x 3 against 3 x 2 reshaped to
    one k of 6 gave a number); ops.squeeze(x) on set_inputs' None dims drops those that are 1 at the call
    (it kept them, a result of the wrong rank)."""
    with at(level):
        a, b = np.ones((2, 3), np.float32), np.arange(6, dtype=np.float32).reshape(3, 2)
        with pytest.raises(ValueError, match="dim 0"):
            Contract(([0, 1], [0, 1]))(ms.Tensor(a), ms.Tensor(b))
        net = SqueezeAll()
        net.set_inputs(ms.Tensor(shape=[None, 1, None], dtype=ms.float32))
        for shape in ((1, 1, 3), (2, 1, 1), (1, 1, 1), (2, 1, 3)):
            x = np.full(shape, 1.5, np.float32)
            assert net(ms.Tensor(x)).shape == np.squeeze(x).shape, shape


def _resize_nn(x, scale=0, shape=None):
    """mindocr's DBFPN helper: an early return under a shape condition, the rest of the function its else."""
    if scale == 1 or shape == x.shape[2:]:
        return x
    if scale:
        shape = (x.shape[2] * scale, x.shape[3] * scale)
    return ops.ResizeNearestNeighbor(shape)(x)


class DBFPN(nn.Cell):
    """mindocr's DBFPN top-down path: list items assigned and augmented (``features[i] += ...``)."""

    def construct(self, a, b, c):
        features = [a, b, c]
        for i in range(3):
            features[i] = features[i] * 2.0
        for i in range(1, -1, -1):
            features[i] += _resize_nn(features[i + 1], shape=features[i].shape[2:])
        features[1:] = [features[2], features[1]]
        return features[0], features[1], features[2], _resize_nn(c, scale=2)


def dbfpn_ref(a, b, c):
    def nearest(x, h, w):
        return x[:, :, (np.arange(h) * x.shape[2]) // h][:, :, :, (np.arange(w) * x.shape[3]) // w]
    f = [a * 2, b * 2, c * 2]
    for i in (1, 0):
        f[i] = f[i] + nearest(f[i + 1], *f[i].shape[2:])
    return f[0], f[2], f[1], nearest(c, c.shape[2] * 2, c.shape[3] * 2)


@pytest.mark.parametrize("level", ["L1", "auto", "pynative"])
def test_list_items_assigned_and_an_early_return_under_a_shape_condition(level, rng):
    net = DBFPN()
    spec = ms.Tensor(shape=[1, 2, None, None], dtype=ms.float32)
    net.set_inputs(spec, spec, spec)
    with at(level):
        for sizes in ((8, 4, 2), (4, 4, 4), (6, 3, 3), (8, 4, 2)):
            a, b, c = (rng.standard_normal((1, 2, s, s)).astype(np.float32) for s in sizes)
            for got, want in zip(net(ms.Tensor(a), ms.Tensor(b), ms.Tensor(c)), dbfpn_ref(a, b, c)):
                np.testing.assert_allclose(got.asnumpy(), want, rtol=1e-5, atol=1e-5)


class Picks(nn.Cell):
    """mindyolo's yolov10 postprocess ``boxes[batch_ids, index // nc]`` (int tensors side by side, broadcast),
    an int tensor among basic indices (``x[:, idx, 1:2]``, ``x[-1, idx]``), and lambdas (mindocr's table head):
    a default value, a name read from construct, one passed on to a helper."""

    def construct(self, boxes, index):
        i = ops.arange(boxes.shape[0])[..., None]
        scale = lambda t, k=2.0: t * k + boxes.shape[1]      # noqa: E731 - the form under test
        twice = lambda: index * 2                             # noqa: E731
        return (boxes[i, index // 3], boxes[:, index[0], 1:2], scale(boxes[0, index[0]]), boxes[-1, index],
                boxes[i, -1 - index % 2, :2], apply_to(twice))


def apply_to(fn):
    return fn() + 1


@pytest.mark.parametrize("level", ["L1", "auto", "pynative"])
def test_int_tensor_indices_side_by_side_and_lambdas(level, rng):
    net = Picks()
    net.set_inputs(ms.Tensor(shape=[None, None, 4], dtype=ms.float32), ms.Tensor(shape=[None, 5], dtype=ms.int32))
    with at(level):
        for b, n in ((2, 9), (3, 12), (2, 9)):
            boxes = rng.standard_normal((b, n, 4)).astype(np.float32)
            index = rng.integers(0, n, (b, 5)).astype(np.int32)
            i = np.arange(b)[..., None]
            want = (boxes[i, index // 3], boxes[:, index[0], 1:2], boxes[0, index[0]] * 2.0 + n, boxes[-1, index],
                    boxes[i, -1 - index % 2, :2], index * 2 + 1)
            for got, w in zip(net(ms.Tensor(boxes), ms.Tensor(index)), want):
                np.testing.assert_array_equal(got.asnumpy(), w)


class Spread(nn.Cell):
    """Lambdas with *args, keyword-only parameters, **kwargs and positional-only ones (mindocr's table_master
    head passes ``lambda *args: ...``): bound as Python binds them, the arguments spread into calls."""

    def construct(self, x, y):
        cat = lambda *args: ops.concat(args, axis=-1)               # noqa: E731 - the forms under test
        mix = lambda a, /, *rest, k=3.0, **kw: a * k + sum(rest) + kw["shift"]   # noqa: E731
        pick = lambda *args, **kw: args[kw.get("which", 0)]         # noqa: E731
        return cat(x, y, x), mix(x, y, y, shift=1.0), mix(y, k=0.5, shift=x), pick(x, y, which=1), pick(x, y)


def test_lambdas_with_varargs_keywords_and_positional_only(rng):
    net = Spread()
    net.set_inputs(ms.Tensor(shape=[None, 3], dtype=ms.float32), ms.Tensor(shape=[None, 3], dtype=ms.float32))
    for level in ("L1", "auto", "pynative"):
        with at(level):
            for n in (2, 5):
                x, y = (rng.standard_normal((n, 3)).astype(np.float32) for _ in range(2))
                want = (np.concatenate([x, y, x], -1), x * 3.0 + (y + y) + 1.0, y * 0.5 + x, y, x)
                for got, w in zip(net(ms.Tensor(x), ms.Tensor(y)), want):
                    np.testing.assert_allclose(got.asnumpy(), w, rtol=1e-6, atol=1e-6)


class Sublayer(nn.Cell):
    """A sub-Cell with a Parameter of its own, a helper method reading it, and a construct that calls the
    function it is given (mindocr's table_master SubLayerConnection: ``x + sublayer(self.norm(x))``)."""

    def __init__(self, k):
        super().__init__()
        self.w = ms.Parameter(ms.Tensor(np.full((4,), k, np.float32)), name="w")
        self.inner = nn.Dense(4, 4, weight_init="ones", bias_init="zeros")

    def construct(self, x, sublayer):
        return x + sublayer(self.scale(x))

    def scale(self, x):
        return self.inner(x) * self.w


class Passed(nn.Cell):
    """Functions passed to sub-Cells: a lambda reading construct's own values, a sub-Cell of the caller, a method
    of another sub-Cell; and a sub-Cell's helper method called from construct (its Parameters by their paths)."""

    def __init__(self):
        super().__init__()
        self.sub = nn.CellList([Sublayer(2.0), Sublayer(3.0)])
        self.ff = nn.Dense(4, 4, weight_init="ones", bias_init="zeros")

    def construct(self, x, m):
        y = self.sub[0](x, lambda t: t * m)
        y = self.sub[1](y, self.ff)
        return self.sub[0](y, self.sub[1].scale), self.sub[1].scale(x)


def test_functions_passed_to_sub_cells_and_their_helper_methods(rng):
    net = Passed()
    net.set_inputs(ms.Tensor(shape=[None, 4], dtype=ms.float32), ms.Tensor(shape=[None, 4], dtype=ms.float32))

    def scale(x, k):
        return x.sum(-1, keepdims=True) * np.ones(4, np.float32) * k
    for level in ("L1", "auto", "pynative"):
        with at(level):
            for n in (2, 3):
                x, m = (rng.standard_normal((n, 4)).astype(np.float32) for _ in range(2))
                y = x + scale(x, 2.0) * m
                y = y + scale(scale(y, 3.0), 1.0)
                want = (y + scale(scale(y, 2.0), 3.0), scale(x, 3.0))
                for got, w in zip(net(ms.Tensor(x), ms.Tensor(m)), want):
                    np.testing.assert_allclose(got.asnumpy(), w, rtol=1e-5, atol=1e-4)
    # a sub-Cell given a float16 precision of its own would run inline in the caller's float32: refused at its line
    half = Passed()
    half.sub[0].to_float(ms.float16)
    x = ms.Tensor(rng.standard_normal((2, 4)).astype(np.float32))
    with pytest.raises(ms.FrontendError, match="to_float precision of its own") as e:
        half(x, x)
    assert "test_frontend_zoo.py:" in str(e.value)


class Outside(nn.Cell):
    def construct(self, x, i, j):
        return x[i, j]


class Apart(nn.Cell):
    def construct(self, x, i):
        return x[0, :, i]


def test_int_tensor_indices_out_of_range_or_apart():
    """Each index checked against its own dim (flattened, x[0, 3] of a (2, 3) grid was x[1, 0]); ints and int
    tensors apart from each other, whose dims numpy moves to the front, refused at their line."""
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    for level in ("L1", "auto"):
        with at(level):
            for i, j in (([0], [3]), ([1], [-4]), ([2], [0])):
                with pytest.raises(IndexError, match="out of range"):
                    Outside()(ms.Tensor(x), ms.Tensor(np.array(i, np.int32)), ms.Tensor(np.array(j, np.int32)))
            np.testing.assert_array_equal(Outside()(ms.Tensor(x), ms.Tensor(np.array([1, -2], np.int32)),
                                                    ms.Tensor(np.array([-1], np.int32))).asnumpy(), x[[1, -2], [-1]])
            with pytest.raises(ms.FrontendError, match="separated by slices"):
                Apart()(ms.Tensor(x), ms.Tensor(np.array([1, 2], np.int32)))
    t = ms.Tensor(np.zeros(3, np.float32))
    a = np.array(t)
    a[0] = 5.0                                  # (np.array(t) is an array of its own)
    assert t.asnumpy()[0] == 0.0
