"""``ms.ops`` primitives: objects built with constructor arguments, then called
(``self.matmul = ops.MatMul(transpose_b=True)``; ``self.matmul(x, w)``)."""

from __future__ import annotations

from . import functional as F
from . import registry


class Primitive:
    """Base of the primitives; ``attrs`` are the constructor arguments."""

    __msvm_primitive__ = True     # the frontend calls primitives (msvm's and users' subclasses) directly

    def __init__(self, **attrs):
        self.attrs = attrs
        self.name = type(self).__name__

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.attrs.items())
        return f"{self.name}({args})"

    def set_device(self, device_target):
        """MindSpore's placement hint (``P.EmbeddingLookup().set_device("CPU")``): msvm runs it where
        the Cell runs; returns the primitive."""
        self.attrs["primitive_target"] = device_target
        return self


class MatMul(Primitive):
    def __init__(self, transpose_a=False, transpose_b=False):
        super().__init__(transpose_a=transpose_a, transpose_b=transpose_b)
        self.transpose_a, self.transpose_b = bool(transpose_a), bool(transpose_b)

    def __call__(self, x, y):
        _matmul_dtypes(x, y, type(self).__name__)
        return F.apply("MATMUL", (x, y), (self.transpose_a, self.transpose_b))


# (issue 21) what MindSpore's CPU MatMul takes: bool and the wide unsigned ints are a TypeError there
_MATMUL_KINDS = frozenset("ifc")


def _matmul_dtypes(x, y, name):
    for v in (x, y):
        d = getattr(v, "dtype", None)
        if d is not None and not (d.kind in _MATMUL_KINDS or d.name == "uint8"):
            raise TypeError(f"For '{name}', the inputs must be uint8, int, float or complex tensors, got {d}")


class BatchMatMul(MatMul):
    def __call__(self, x, y):
        _matmul_dtypes(x, y, "BatchMatMul")
        return F.apply("BATCH_MATMUL", (x, y), (self.transpose_a, self.transpose_b))


class Softmax(Primitive):
    def __init__(self, axis=-1):
        super().__init__(axis=axis)
        self.axis = axis[0] if isinstance(axis, (tuple, list)) else axis

    def __call__(self, x):
        return F.softmax(x, self.axis)


class Concat(Primitive):
    def __init__(self, axis=0):
        super().__init__(axis=axis)
        self.axis = axis

    def __call__(self, tensors):
        return F.concat(tensors, self.axis)


class Stack(Primitive):
    def __init__(self, axis=0):
        super().__init__(axis=axis)
        self.axis = axis

    def __call__(self, tensors):
        return F.stack(tensors, self.axis)


class Reshape(Primitive):
    def __init__(self):
        super().__init__()

    def __call__(self, x, shape):
        return F.reshape(x, shape)


class Transpose(Primitive):
    def __init__(self):
        super().__init__()

    def __call__(self, x, perm):
        return F.transpose(x, perm)


class ExpandDims(Primitive):
    def __init__(self):
        super().__init__()

    def __call__(self, x, axis):
        return F.expand_dims(x, axis)


class Squeeze(Primitive):
    def __init__(self, axis=()):
        super().__init__(axis=axis)
        self.axis = axis

    def __call__(self, x):
        return F.squeeze(x, self.axis if self.axis != () else None)


class Cast(Primitive):
    def __init__(self):
        super().__init__()

    def __call__(self, x, dtype):
        return F.cast(x, dtype)


def _reduce(fn, keep_name):
    class P(Primitive):
        def __init__(self, keep_dims=False, **kw):
            super().__init__(keep_dims=keep_dims)
            self.keep_dims = keep_dims

        def __call__(self, x, axis=()):
            if isinstance(axis, tuple) and axis == ():
                return fn(x, None, self.keep_dims)
            try:
                axes = F._axes(axis, "axis")
            except TypeError as e:
                raise TypeError(f"{self.name}: {e}") from None
            return fn(x, axes, self.keep_dims)
    return P


ReduceSum = type("ReduceSum", (_reduce(F.sum, "keepdim"),), {})
ReduceMean = type("ReduceMean", (_reduce(F.mean, "keep_dims"),), {})
ReduceMax = type("ReduceMax", (_reduce(F.amax, "keepdims"),), {})
ReduceMin = type("ReduceMin", (_reduce(F.amin, "keepdims"),), {})


class Conv2D(Primitive):
    """MindSpore's ``P.Conv2D(out_channel, kernel_size, mode=1, pad_mode='valid', pad=0, stride=1, dilation=1, group=1)``."""

    def __init__(self, out_channel, kernel_size, mode=1, pad_mode="valid", pad=0, stride=1, dilation=1, group=1,
                 data_format="NCHW"):
        if data_format != "NCHW":
            raise NotImplementedError("Conv2D: only data_format='NCHW' is supported")
        super().__init__(out_channel=out_channel, kernel_size=kernel_size, pad_mode=pad_mode, pad=pad, stride=stride,
                         dilation=dilation, group=group)
        self.out_channel, self.kernel_size = out_channel, kernel_size
        self.pad = F.conv_pad(pad_mode, pad, "Conv2D")
        self.stride, self.dilation, self.group = F._pair(_hw(stride), "Conv2D"), F._pair(_hw(dilation), "Conv2D"), group

    def __call__(self, x, w):
        return F.apply("CONV2D", (x, w), (self.stride, self.pad, self.dilation, int(self.group)))


class Conv2DTranspose(Primitive):
    """MindSpore's ``P.Conv2DTranspose(out_channel, kernel_size, pad_mode='valid', pad=0, pad_list=None, mode=1,
    stride=1, dilation=1, group=1)`` (Conv2DBackpropInput): ``(dout, weight, input_size)``, the transposed
    convolution of dout by the forward convolution's weight into ``input_size``'s shape; the padding is the
    forward convolution's ('same': as much as a forward convolution of input_size would pad, half on top)."""

    def __init__(self, out_channel, kernel_size, pad_mode="valid", pad=0, pad_list=None, mode=1, stride=1,
                 dilation=1, group=1, data_format="NCHW"):
        if data_format != "NCHW":
            raise NotImplementedError("Conv2DTranspose: only data_format='NCHW' is supported")
        super().__init__(out_channel=out_channel, kernel_size=kernel_size, pad_mode=pad_mode, pad=pad,
                         stride=stride, dilation=dilation, group=group)
        self.out_channel, self.kernel_size = int(out_channel), F._pair(kernel_size, "Conv2DTranspose: kernel_size")
        self.pad = F.conv_pad(pad_mode, pad if pad_list is None else pad_list, "Conv2DTranspose")
        self.stride = F._pair(_hw(stride), "Conv2DTranspose: stride")
        self.dilation, self.group = F._pair(_hw(dilation), "Conv2DTranspose: dilation"), int(group)

    def __call__(self, dout, weight, input_size):
        size = tuple(input_size)
        if len(size) != 4:
            raise ValueError(f"Conv2DTranspose: input_size must be (N, C, H, W), got {input_size!r}")
        _, _, h, w = F._shape(dout)
        if self.pad == ("same",):
            need = [(n - 1) * s + d * (k - 1) + 1 - out for n, s, d, k, out in
                    zip((h, w), self.stride, self.dilation, self.kernel_size, size[2:])]
            pads = tuple(max(v, 0) // 2 if isinstance(v, int) else F.smax(v, 0) // 2 for v in need)
        else:
            pads = (self.pad[0], self.pad[2])
        return F._conv_transpose(dout, weight, size[2:], self.stride, pads, self.dilation, self.group)


def _hw(v):
    """MindSpore's strides may be (1, 1, sh, sw)."""
    return tuple(v)[2:] if isinstance(v, (tuple, list)) and len(v) == 4 else v


class MaxPool(Primitive):
    def __init__(self, kernel_size=1, strides=1, pad_mode="valid", data_format="NCHW"):
        super().__init__(kernel_size=kernel_size, strides=strides, pad_mode=pad_mode)
        self.k, self.s = F._pair(_hw(kernel_size), "MaxPool"), F._pair(_hw(strides), "MaxPool")
        self.pad = F.conv_pad(pad_mode, 0, "MaxPool")

    def __call__(self, x):
        return F.apply("MAX_POOL2D", (x,), (self.k, self.s, self.pad))


class AvgPool(MaxPool):
    def __call__(self, x):
        return F.apply("AVG_POOL2D", (x,), (self.k, self.s, self.pad, False))


class AdaptiveAvgPool2D(Primitive):
    def __init__(self, output_size):
        super().__init__(output_size=output_size)
        self.output_size = output_size

    def __call__(self, x):
        return F.adaptive_avg_pool2d(x, self.output_size)


class Gather(Primitive):
    def __init__(self, batch_dims=0):
        super().__init__(batch_dims=batch_dims)
        self.batch_dims = batch_dims

    def __call__(self, input_params, input_indices, axis):
        return F.gather(input_params, input_indices, axis, self.batch_dims)


# ---------------------------------------------------------------- indexing and creation (model zoo)

class OneHot(Primitive):
    def __init__(self, axis=-1):
        super().__init__(axis=axis)
        self.axis = axis

    def __call__(self, indices, depth, on_value, off_value):
        return F.one_hot(indices, depth, on_value, off_value, self.axis)


class StridedSlice(Primitive):
    """x[begin:end:strides] per dim, with MindSpore's bit masks (bit i is dim i of the spec)."""

    def __init__(self, begin_mask=0, end_mask=0, ellipsis_mask=0, new_axis_mask=0, shrink_axis_mask=0):
        super().__init__(begin_mask=begin_mask, end_mask=end_mask, ellipsis_mask=ellipsis_mask,
                         new_axis_mask=new_axis_mask, shrink_axis_mask=shrink_axis_mask)
        self.masks = (begin_mask, end_mask, ellipsis_mask, new_axis_mask, shrink_axis_mask)

    def __call__(self, x, begin, end, strides):
        bm, em, elm, nm, sm = self.masks
        if not len(begin) == len(end) == len(strides):
            raise ValueError(f"StridedSlice: begin, end and strides differ in length: {begin}, {end}, {strides}")
        spec = []
        for i, (b, e, st) in enumerate(zip(begin, end, strides)):
            bit = 1 << i
            if elm & bit:
                spec.append(("e",))
            elif nm & bit:
                spec.append(("n",))
            elif sm & bit:
                spec.append(("i", b))
            else:
                spec.append(("s", None if bm & bit else b, None if em & bit else e, None if st == 1 else st))
        return F.apply("SLICE", (x,), (tuple(spec),))


class Tile(Primitive):
    def __call__(self, x, multiples):
        return F.tile(x, multiples)


class CumSum(Primitive):
    def __init__(self, exclusive=False, reverse=False):
        super().__init__(exclusive=exclusive, reverse=reverse)
        self.exclusive, self.reverse = bool(exclusive), bool(reverse)

    def __call__(self, x, axis):
        return F.apply("CUMSUM", (x,), (int(axis), self.exclusive, self.reverse))


class Shape(Primitive):
    def __call__(self, x):
        return F.shape(x)


class DType(Primitive):
    def __call__(self, x):
        return F.dtype(x)


class MaskedFill(Primitive):
    def __call__(self, input, mask, value):
        return F.masked_fill(input, mask, value)


class Fill(Primitive):
    def __call__(self, type, shape, value):
        return F.full(shape, value, dtype=type)


class Ones(Primitive):
    def __call__(self, shape, type=None):
        return F.ones(shape, type)


class Zeros(Primitive):
    def __call__(self, shape, type=None):
        return F.zeros(shape, type)


class Range(Primitive):
    def __call__(self, start, limit, delta):
        return F.arange(start, limit, delta)


class ScalarToTensor(Primitive):
    def __call__(self, input_x, dtype=None):
        from .. import dtype as dt
        return F.scalar_to_tensor(input_x, dtype or dt.float32)


class Unstack(Primitive):
    def __init__(self, axis=0, num=None):
        super().__init__(axis=axis)
        self.axis = axis

    def __call__(self, x):
        return F.unstack(x, self.axis)


class Split(Primitive):
    """MindSpore's ``P.Split(axis=0, output_num=1)``: output_num equal pieces."""

    def __init__(self, axis=0, output_num=1):
        super().__init__(axis=axis, output_num=output_num)
        self.axis, self.output_num = axis, output_num

    def __call__(self, x):
        from ..bytecode.symbolic import Expr
        from ..frontend.graph import current

        rank, k = F._rank(x), self.output_num
        d = F._shape(x)[self.axis % rank] if -rank <= self.axis < rank else None
        if isinstance(d, Expr) and d.const_value() is None and current() is not None:
            # (issue 21) a dynamic dim: pieces of d // k, the entry checks that k divides d
            from ..bytecode import symbolic as S

            ax, size = self.axis % rank, d // k
            current().check(S.compare("==", d % k, 0), "ValueError",
                            (f"Split: the size of axis {ax}, ", d, f", is not divisible by output_num {k}"))
            return tuple(F._take(x, ax, size * i, size * (i + 1)) for i in range(k))
        axis, n = F._known_dim(x, self.axis, "Split")
        if n % self.output_num:
            raise ValueError(f"Split: axis size {n} is not divisible by output_num {self.output_num}")
        return F.split(x, n // self.output_num, axis)


class LayerNorm(Primitive):
    """Returns (y, mean, variance) as MindSpore's primitive does; mean/var are recomputed."""

    def __init__(self, begin_norm_axis=1, begin_params_axis=1, epsilon=1e-7):
        super().__init__(begin_norm_axis=begin_norm_axis, begin_params_axis=begin_params_axis, epsilon=epsilon)
        self.begin_norm_axis, self.begin_params_axis, self.epsilon = begin_norm_axis, begin_params_axis, epsilon

    def __call__(self, x, gamma, beta):
        y = F.apply("LAYER_NORM", (x, gamma, beta), (self.begin_norm_axis, self.begin_params_axis,
                                                      float(self.epsilon)))
        r = len(x.shape)
        axes = tuple(range(self.begin_norm_axis % r, r))
        mean = F.mean(x, axes, True)
        xc = F.sub(x, mean)
        var = F.mean(F.mul(xc, xc), axes, True)
        return y, mean, var


# ---------------------------------------------------------------- made from ops/registry.py (conformance)
# Abs, Exp, Add, Greater, Sin, BitwiseAnd, Elu(alpha), ...: one class per registry row's primitive
# name, calling the row's implementation (the same function ms.ops.<name> and Tensor.<name> call).

globals().update(registry.primitives(Primitive))


class ResizeNearestNeighbor(Primitive):
    """Nearest-neighbour resize of [N, C, H, W] to ``size``, the source index floor(dst * in / out)
    (``ops.interpolate``'s 'nearest'; mindcv's hrnet fuses its branches with it); ``align_corners``
    round(dst * (in - 1) / (out - 1)) (mindocr's PP-OCRv3 neck), ``half_pixel_centers`` floor((dst + 0.5) *
    in / out), as TensorFlow's and MindSpore's kernels map them."""

    def __init__(self, size, align_corners=False, half_pixel_centers=False):
        super().__init__(size=size, align_corners=align_corners, half_pixel_centers=half_pixel_centers)
        if align_corners and half_pixel_centers:
            raise ValueError("ResizeNearestNeighbor: align_corners and half_pixel_centers cannot both be True")
        self.size, self.align_corners, self.half_pixel_centers = tuple(size), bool(align_corners), half_pixel_centers

    def __call__(self, x):
        size = tuple(F._plain(F._dim_of(d)) for d in self.size)
        if not (self.align_corners or self.half_pixel_centers):
            return F.interpolate(x, size=size, mode="nearest")
        mode = "nearest_half_pixel" if self.half_pixel_centers else "nearest"
        return F.apply("RESIZE", (x,), (size, None, mode, self.align_corners))


class ResizeBilinearV2(Primitive):
    """MindSpore's ResizeBilinearV2(align_corners, half_pixel_centers)(x, size): ResizeBilinear with the size
    an input (a tuple, or an int Tensor known while compiling) (mindocr's EAST and PSENet necks)."""

    def __init__(self, align_corners=False, half_pixel_centers=False):
        super().__init__(align_corners=align_corners, half_pixel_centers=half_pixel_centers)
        self.align_corners, self.half_pixel_centers = align_corners, half_pixel_centers

    def __call__(self, x, size):
        size = tuple(int(v) for v in size.asnumpy().reshape(-1)) if hasattr(size, "asnumpy") else tuple(size)
        return ResizeBilinear(size, self.align_corners, self.half_pixel_centers)(x)


class ResizeBilinear(Primitive):
    """Bilinear resize of [N, C, H, W] to ``size``, MindSpore's ResizeBilinear: by default the source
    coordinate dst * in / out (TensorFlow's legacy mapping), ``align_corners`` the corners'
    (in - 1) / (out - 1), ``half_pixel_centers`` (dst + 0.5) * in / out - 0.5 (mindcv's pvt)."""

    def __init__(self, size, align_corners=False, half_pixel_centers=False):
        super().__init__(size=size, align_corners=align_corners, half_pixel_centers=half_pixel_centers)
        if align_corners and half_pixel_centers:
            raise ValueError("ResizeBilinear: align_corners and half_pixel_centers cannot both be True")
        self.size, self.align_corners, self.half_pixel_centers = tuple(size), align_corners, half_pixel_centers

    def __call__(self, x):
        size = tuple(F._plain(F._dim_of(d)) for d in self.size)    # (ints a sub-Cell returned: their expressions)
        if self.align_corners or self.half_pixel_centers:
            return F.interpolate(x, size=size, mode="bilinear", align_corners=self.align_corners)
        return F.apply("RESIZE", (x,), (size, None, "bilinear_asymmetric", False))


class PrimitiveWithInfer(Primitive):
    """Base of primitives defined in user code the MindSpore way (``@prim_attr_register``
    ``__init__``, ``infer_shape``/``infer_dtype``): calling one runs msvm's implementation of the
    primitive with the same name (MindSpore too picks the kernel by the primitive's name)."""

    def __init__(self, name=None, **attrs):
        super().__init__(**attrs)
        if name:
            self.name = name

    def init_prim_io_names(self, inputs=None, outputs=None):
        self.input_names, self.output_names = inputs, outputs

    def add_prim_attr(self, name, value):
        self.attrs[name] = value
        return self

    def __call__(self, *inputs):
        made = globals().get(self.name)
        row = getattr(made, "_row", None)
        if row is None:
            raise NotImplementedError(f"primitive {self.name!r} (a {type(self).__mro__[1].__name__} defined in "
                                      f"{type(self).__module__}): msvm has no implementation under that name")
        kw = {k: self.attrs.get(p, getattr(self, p, d)) for p, d, k in row.attrs if k is not None}
        return row.impl(*inputs, **kw)


PrimitiveWithCheck = PrimitiveWithInfer


def prim_attr_register(fn):
    """Decorator of a primitive's ``__init__``: its arguments (defaults filled in) become attrs."""
    import functools
    import inspect

    sig = inspect.signature(fn)

    @functools.wraps(fn)
    def init(self, *args, **kwargs):
        bound = sig.bind(self, *args, **kwargs)
        bound.apply_defaults()
        Primitive.__init__(self, **{k: v for k, v in list(bound.arguments.items())[1:]})
        fn(self, *args, **kwargs)
    return init
