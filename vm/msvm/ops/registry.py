"""One definition per op for MindSpore's three faces of it (issue 21).

MindSpore offers most ops three ways: a function (``ops.sin(x)``), a primitive built with
constructor arguments and then called (``P.Sin()(x)``, ``P.Elu(alpha=0.5)(x)``) and a Tensor
method (``x.sin()``). Written by hand, the three drift apart (one takes ``axis``, one forgets
the int case). Here each row names one implementation, a function of ``functional.py``, and
every name it goes by; the primitive classes and Tensor methods are made from the rows, so
all three call the same code with the same argument handling.

A row: ``api(impl, functions, primitives, methods, attrs)``; names are space-separated.
``attrs`` are a primitive's constructor parameters ``(name, default, keyword)``: the value is
passed to ``impl`` as ``keyword`` (``None``: accepted and ignored, as ``output_type``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .. import dtype as dt
from . import extra_ops as X
from . import functional as F
from . import random_ops as R


@dataclass(frozen=True)
class OpAPI:
    impl: Callable
    functions: tuple[str, ...]    # ms.ops.<name> (beyond the impl's own name)
    primitives: tuple[str, ...]   # ms.ops.<Name>(attrs...)(inputs...)
    methods: tuple[str, ...]      # Tensor.<name>(self, ...)
    attrs: tuple = ()             # ((constructor parameter, default, impl keyword or None), ...)
    stream: bool = False          # a random op: each primitive owns a generator (impl keyword ``stream``)
    check: Callable | None = None  # validates the constructor's values ({name: value}) when it is built


API: list[OpAPI] = []


def api(impl, functions="", primitives="", methods="", attrs=(), stream=False, check=None):
    API.append(OpAPI(impl, tuple(functions.split()), tuple(primitives.split()), tuple(methods.split()),
                     tuple(a if len(a) == 3 else (a[0], a[1], a[0]) for a in attrs), stream, check))


def _gelu_tanh(x):
    return F.gelu(x, "tanh")           # MindSpore's GeLU primitive is the tanh form


def _flatten_batch(x):
    """P.Flatten: keep dim 0, flatten the rest ((N,) becomes (N, 1))."""
    s = F._shape(x)
    return F.reshape(x, (s[0] if s else 1, -1))


def _argmax(x, axis=-1):
    return F.argmax(x, axis)


def _argmin(x, axis=-1):
    return F.argmin(x, axis)


def _broadcast_to(x, shape):
    return F.broadcast_to(x, shape)


def _reduce_prim(fn):
    """ReduceProd/All/Any: ``P(keep_dims)(x, axis=())``, () meaning every axis."""
    def call(x, axis=(), keep_dims=False):
        return fn(x, None if isinstance(axis, (tuple, list)) and len(axis) == 0 else axis, keep_dims)
    return call


def _method_reduce(fn):
    """x.all(axis=None, keep_dims=False) and friends."""
    def call(x, axis=None, keep_dims=False):
        return fn(x, axis, keep_dims)
    return call


# --- elementwise unary (existing ones migrated here; new ones from issue 21)
api(F.abs, "absolute", "Abs", "abs absolute")
api(F.neg, "negative", "Neg", "neg negative")
api(F.exp, "", "Exp", "exp")
api(F.log, "", "Log", "log")
api(F.sqrt, "", "Sqrt", "sqrt")
api(F.rsqrt, "", "Rsqrt", "rsqrt")
api(F.reciprocal, "", "Reciprocal", "reciprocal")
api(F.tanh, "", "Tanh", "tanh")
api(F.sigmoid, "", "Sigmoid", "sigmoid")
api(F.erf, "", "Erf", "erf")
api(F.relu, "", "ReLU", "relu")
api(_gelu_tanh, "", "GeLU", "")
api(F.sin, "", "Sin", "sin")
api(F.cos, "", "Cos", "cos")
api(F.tan, "", "Tan", "tan")
api(F.asin, "arcsin", "Asin", "asin arcsin")
api(F.acos, "arccos", "ACos", "acos arccos")
api(F.atan, "arctan", "Atan", "atan arctan")
api(F.sinh, "", "Sinh", "sinh")
api(F.cosh, "", "Cosh", "cosh")
api(F.asinh, "arcsinh", "Asinh", "asinh arcsinh")
api(F.acosh, "arccosh", "Acosh", "acosh arccosh")
api(F.atanh, "arctanh", "Atanh", "atanh arctanh")
api(F.floor, "", "Floor", "floor")
api(F.ceil, "", "Ceil", "ceil")
api(F.round_, "round rint", "Round Rint", "round")
api(F.trunc, "fix", "Trunc", "trunc fix")
api(F.sign, "", "Sign", "sign")
api(F.isnan, "", "IsNan", "isnan")
api(F.isinf, "", "IsInf", "isinf")
api(F.isfinite, "", "IsFinite", "isfinite")
api(F.square, "", "Square", "square")
api(F.log1p, "", "Log1p", "log1p")
api(F.expm1, "", "Expm1", "expm1")
api(F.erfc, "", "Erfc", "erfc")
api(F.inv, "", "Inv", "inv")
api(F.invert, "bitwise_not", "Invert", "invert bitwise_not")
api(F.logical_not, "", "LogicalNot", "logical_not")

# --- elementwise binary
api(F.add, "", "Add", "add")
api(F.sub, "subtract", "Sub", "sub subtract")
api(F.mul, "multiply", "Mul", "mul multiply")
api(F.div, "divide true_divide", "Div", "div divide true_divide")
api(F.div, "", "RealDiv", "")
api(F.floor_divide, "floor_div", "FloorDiv", "floor_divide")
api(F.truncate_div, "", "TruncateDiv", "")
api(F.remainder, "floor_mod", "FloorMod", "remainder")
api(F.pow, "", "Pow", "pow")
api(F.maximum, "", "Maximum", "maximum")
api(F.minimum, "", "Minimum", "minimum")
api(F.equal, "eq", "Equal", "equal eq")
api(F.not_equal, "ne", "NotEqual", "not_equal ne")
api(F.less, "lt", "Less", "less lt")
api(F.less_equal, "le", "LessEqual", "less_equal le")
api(F.greater, "gt", "Greater", "greater gt")
api(F.greater_equal, "ge", "GreaterEqual", "greater_equal ge")
api(F.logical_and, "", "LogicalAnd", "logical_and")
api(F.logical_or, "", "LogicalOr", "logical_or")
api(F.logical_xor, "", "LogicalXor", "logical_xor")
api(F.bitwise_and, "", "BitwiseAnd", "bitwise_and")
api(F.bitwise_or, "", "BitwiseOr", "bitwise_or")
api(F.bitwise_xor, "", "BitwiseXor", "bitwise_xor")
api(F.atan2, "arctan2", "Atan2", "atan2 arctan2")
api(F.squared_difference, "", "SquaredDifference", "")
api(F.where, "select", "Select", "")
api(F.matmul, "", "", "matmul")
api(F.bmm, "", "", "bmm")

# --- activations
api(F.softplus, "", "Softplus", "softplus")
api(F.softsign, "", "Softsign", "softsign")
api(F.mish, "", "Mish", "mish")
api(F.selu, "", "SeLU", "selu")
api(F.elu, "", "Elu", "elu", attrs=(("alpha", 1.0),))
api(F.celu, "", "CeLU", "celu", attrs=(("alpha", 1.0),))
api(F.hardtanh, "", "Hardtanh", "hardtanh", attrs=(("min_val", -1.0), ("max_val", 1.0)))
api(F.hardshrink, "", "HShrink", "hardshrink", attrs=(("lambd", 0.5),))
api(F.softshrink, "", "SoftShrink", "softshrink", attrs=(("lambd", 0.5),))
api(F.hardswish, "", "HSwish", "hardswish")
api(F.hardsigmoid, "", "HSigmoid", "hardsigmoid")
api(F.relu6, "", "ReLU6", "relu6")
api(F.silu, "", "SiLU", "silu")
api(F.leaky_relu, "", "", "", attrs=(("alpha", 0.2),))
api(F.fast_gelu, "", "FastGeLU", "")

# --- reductions, band, layout
api(F.prod, "", "", "prod")
api(F.all_, "all", "", "")
api(F.any_, "any", "", "")
api(_method_reduce(F.all_), "", "", "all")
api(_method_reduce(F.any_), "", "", "any")
api(_reduce_prim(F.prod), "", "ReduceProd", "", attrs=(("keep_dims", False),))
api(_reduce_prim(F.all_), "", "ReduceAll", "", attrs=(("keep_dims", False),))
api(_reduce_prim(F.any_), "", "ReduceAny", "", attrs=(("keep_dims", False),))
api(F.std, "", "", "std")
api(F.var, "", "", "var")
api(F.logsumexp, "", "", "logsumexp")
api(F.norm, "", "", "norm")
api(F.argmin, "", "", "argmin")
api(_argmax, "", "Argmax", "", attrs=(("axis", -1), ("output_type", dt.int32, None)))
api(_argmin, "", "Argmin", "", attrs=(("axis", -1), ("output_type", dt.int32, None)))
api(F.log_softmax, "", "LogSoftmax", "log_softmax", attrs=(("axis", -1),))
api(F.matrix_band_part, "", "MatrixBandPart", "")
api(F.bias_add, "", "BiasAdd", "", attrs=(("data_format", "NCHW"),))
api(_flatten_batch, "", "Flatten", "")
api(_broadcast_to, "", "BroadcastTo", "broadcast_to", attrs=(("shape", None),))
api(F.zeros_like, "", "ZerosLike", "")
api(F.ones_like, "", "OnesLike", "")
api(F.shift, "", "Shift", "", attrs=(("periods", 1), ("axis", -1)))

# --- composites
api(F.padding, "", "Padding", "", attrs=(("pad_dim_size", 8),))
api(F.ger, "", "Ger", "ger")
api(F.std_mean, "", "", "")
api(F.var_mean, "", "", "")
api(F.square_sum_all, "", "SquareSumAll", "")
api(F.l2_loss, "", "L2Loss", "")
api(F.rank, "", "Rank", "")
api(F.size, "", "Size", "")
api(F.gather, "", "", "gather")
api(F.dot, "", "", "")
api(F.kl_div, "", "KLDivLoss", "", attrs=(("reduction", "mean"),))
api(F.binary_cross_entropy_with_logits, "", "BCEWithLogitsLoss", "", attrs=(("reduction", "mean"),))
api(F.depth_to_space, "", "DepthToSpace", "", attrs=(("block_size", 2),))
api(F.space_to_depth, "", "SpaceToDepth", "", attrs=(("block_size", 2),))
api(F.lp_norm, "", "LpNorm", "", attrs=(("axis", 0), ("p", 2), ("keep_dims", False), ("epsilon", 1e-12)))
api(F.lerp, "", "Lerp", "lerp")
api(lambda inputs, indexing="xy": F.meshgrid(*inputs, indexing=indexing), "", "Meshgrid", "",
    attrs=(("indexing", "xy"),))
api(F.xdivy, "", "Xdivy", "")
api(F.xlogy, "", "Xlogy", "xlogy")
api(F.div_no_nan, "", "DivNoNan", "")
api(F.fmod, "truncate_mod", "Mod TruncateMod", "fmod")
api(F.approximate_equal, "", "ApproximateEqual", "approximate_equal", attrs=(("tolerance", 1e-5),))
api(F.clip, "clamp", "", "clip clamp")            # (Tensor.clip: mindocr's TPS transformer)
api(F.identity, "", "Identity", "")
api(F.stop_gradient, "", "StopGradient", "")
api(X.grid_sample, "grid_sample", "", "")
api(F.addn, "add_n", "AddN", "")
api(F.equal_count, "", "EqualCount", "")
api(F.dense, "", "Dense", "")
api(F.smooth_l1_loss, "", "SmoothL1Loss", "", attrs=(("beta", 1.0), ("reduction", "none")))
api(F.binary_cross_entropy, "", "BinaryCrossEntropy", "", attrs=(("reduction", "mean"),))
api(F.prelu, "", "PReLU", "")
api(F.l2_normalize, "", "L2Normalize", "", attrs=(("axis", 0), ("epsilon", 1e-4)))
api(F.tanhshrink, "", "", "")
api(F.slice, "", "Slice", "")
api(F.dtype, "", "DType", "")

# --- scatter: one TENSOR_SCATTER instruction under every name
for _m in ("update", "add", "sub", "mul", "div", "max", "min"):
    _M = _m.capitalize()
    api(getattr(F, f"tensor_scatter_{_m}"), "", f"TensorScatter{_M}",
        f"tensor_scatter_{_m}" + ("" if _m == "update" else f" scatter_{_m}"), attrs=(("use_locking", False, None),))
    # (issue 21) these update a Parameter input_x in place (F.scatter_nd_*, F.scatter_*: ASSIGN_PARAM)
    api(getattr(F, f"scatter_nd_{_m}"), "", f"ScatterNd{_M}", "", attrs=(("use_locking", False, None),))
    api(getattr(F, f"scatter_{_m}"), "", f"Scatter{_M}", "", attrs=(("use_locking", False, None),))
api(F.inplace_update, "", "", "inplace_update")
api(lambda x, v, indices=None: F.inplace_update_param(x, v, indices), "", "InplaceUpdate", "",
    attrs=(("indices", 0),))
api(lambda x, v, indices=None: F.inplace_add(x, v, indices), "", "InplaceAdd", "", attrs=(("indices", 0),))
api(lambda x, v, indices=None: F.inplace_sub(x, v, indices), "", "InplaceSub", "", attrs=(("indices", 0),))
api(lambda x, indices, y, axis=0: F.index_add(x, indices, y, axis), "", "IndexAdd", "",
    attrs=(("axis", 0), ("use_lock", True, None), ("check_index_bound", True, None)))
api(F.index_add, "", "", "")
api(lambda x, dim, index, source, alpha=1: F.index_add(x, index, source if alpha == 1 else F.mul(source, alpha), dim),
    "", "", "index_add")      # Tensor.index_add(dim, index, source, *, alpha=1), as MindSpore 2's
api(F.gather_nd, "", "GatherNd", "gather_nd")
api(F.gather_elements, "gather_d", "", "gather_elements")
api(lambda x, dim, index: F.gather_elements(x, dim, index), "", "GatherD", "")
api(F.argsort, "", "", "argsort")
api(F.tensor_scatter_elements, "scatter_elements", "TensorScatterElements", "scatter_elements",
    attrs=(("axis", 0), ("reduction", "none")))
api(F.erfinv, "", "Erfinv", "erfinv")
api(F.renorm, "", "", "renorm")
api(lambda x, p=2, dim=0, maxnorm=1.0: F.renorm(x, p, dim, maxnorm), "", "Renorm", "",
    attrs=(("p", 2), ("dim", 0), ("maxnorm", 1.0)))
for _name, _d in (("int", dt.int32), ("long", dt.int64), ("half", dt.float16), ("double", dt.float64),
                  ("bool", dt.bool_), ("short", dt.int16)):
    api(lambda x, _d=_d: F.cast(x, _d), "", "", _name)
for _m in ("sum", "prod", "max", "min"):
    api(getattr(F, f"unsorted_segment_{_m}"), "", f"UnsortedSegment{_m.capitalize()}", "")
api(F.sort, "", "Sort", "sort", attrs=(("axis", -1), ("descending", False)))
api(F.topk, "", "", "topk")
api(lambda x, k, sorted=True: F.topk(x, k, sorted=sorted), "", "TopK", "", attrs=(("sorted", True),))
api(F.cdist, "", "Cdist", "", attrs=(("p", 2.0),))
api(F.sigmoid_cross_entropy_with_logits, "", "SigmoidCrossEntropyWithLogits", "")
api(F.mse_loss, "", "", "")
api(F.batch_to_space_nd, "", "BatchToSpaceND", "", attrs=(("block_shape", 2), ("crops", ((0, 0), (0, 0)))))
api(F.space_to_batch_nd, "", "SpaceToBatchND", "", attrs=(("block_shape", 2, "block_size"), ("paddings", ((0, 0), (0, 0)))))
api(F.argmax_with_value, "", "ArgMaxWithValue", "", attrs=(("axis", 0), ("keep_dims", False)))
api(F.argmin_with_value, "", "ArgMinWithValue", "", attrs=(("axis", 0), ("keep_dims", False)))

# --- in-place updates (issue 21): the first input, a Parameter, is updated (ASSIGN_PARAM)
api(F.assign, "", "Assign", "")
api(F.assign_add, "", "AssignAdd", "")
api(F.assign_sub, "", "AssignSub", "")
api(lambda x, indices, v: F.inplace_update_param(x, v, indices), "", "InplaceUpdateV2", "")
api(F.inplace_index_add, "", "", "")

# --- complex numbers (issue 21)
api(F.real, "", "Real", "real")
api(F.imag, "", "Imag", "imag")
api(F.conj, "conjugate", "Conj", "conj conjugate")
api(F.angle, "", "Angle", "angle")
api(F.complex, "", "Complex", "")
api(F.conjugate_transpose, "", "ConjugateTranspose", "")


# --- random ops (issue 21, conf21-apis): each primitive owns its stream (interp/rng.py)
_SEEDS = (("seed", 0), ("seed2", 0))
api(R.standard_normal, "", "StandardNormal", "", attrs=_SEEDS, stream=True)
api(R.standard_laplace, "", "StandardLaplace", "", attrs=_SEEDS, stream=True)
api(R.uniform_real, "", "UniformReal", "", attrs=_SEEDS, stream=True)
api(R.uniform_int, "", "UniformInt", "", attrs=_SEEDS, stream=True)
api(R.uniform_like, "", "Uniform", "", attrs=(("minval", 0.0), ("maxval", 1.0), ("seed", 0), ("offset", 0)),
    stream=True)
api(R.truncated_normal, "", "TruncatedNormal", "", attrs=_SEEDS + (("dtype", dt.float32),), stream=True)
api(R.parameterized_truncated_normal, "", "ParameterizedTruncatedNormal", "", attrs=_SEEDS, stream=True)
api(R.random_poisson, "", "RandomPoisson", "", attrs=_SEEDS + (("dtype", dt.int64),), stream=True)
api(lambda shape, alpha, seed=0, seed2=0, stream=None: R.random_gamma(shape, alpha, seed, seed2, stream=stream),
    "", "RandomGamma", "", attrs=_SEEDS, stream=True)
api(R.shuffle, "", "RandomShuffle", "", attrs=_SEEDS, stream=True)
api(R.multinomial_prim, "", "Multinomial", "", attrs=_SEEDS + (("dtype", dt.int32),), stream=True)
api(lambda x, seed, offset, numsamples=1, replacement=False:
    R.multinomial_with_replacement(x, seed, offset, numsamples, replacement), "", "MultinomialWithReplacement", "",
    attrs=(("numsamples", 1), ("replacement", False)))
api(R.random_categorical, "", "RandomCategorical", "", attrs=(("dtype", dt.int64),), stream=True)
api(R.choice_with_mask, "", "RandomChoiceWithMask", "", attrs=(("count", 256),) + _SEEDS, stream=True)
api(R.uniform_candidate_sampler, "", "UniformCandidateSampler", "",
    attrs=(("num_true", 1), ("num_sampled", 1), ("unique", True), ("range_max", 1), ("seed", 0),
           ("remove_accidental_hits", False)), stream=True)
api(R.log_uniform_candidate_sampler, "", "LogUniformCandidateSampler", "",
    attrs=(("num_true", 1), ("num_sampled", 5), ("unique", True), ("range_max", 5), ("seed", 0)), stream=True)
api(R.dropout_prim, "", "Dropout", "", attrs=(("keep_prob", 0.5), ("Seed0", 0, "seed0"), ("Seed1", 0, "seed1")),
    stream=True)
api(lambda x, keep_prob=0.5, stream=None: R.dropout_prim(x, keep_prob, 0, 0, 2, stream=stream), "", "Dropout2D", "",
    attrs=(("keep_prob", 0.5),), stream=True)
api(lambda x, keep_prob=0.5, stream=None: R.dropout_prim(x, keep_prob, 0, 0, 3, stream=stream), "", "Dropout3D", "",
    attrs=(("keep_prob", 0.5),), stream=True)

# --- missing APIs (issue 21, conf21-apis): extra_ops.py
api(X.print_, "print_", "Print", "")
api(X.unique, "unique", "Unique", "")
api(X.unique_with_pad, "unique_with_pad", "UniqueWithPad", "")
api(X.pad_prim, "", "Pad", "", attrs=(("paddings", ()),))
api(X.mirror_pad, "", "MirrorPad", "", attrs=(("mode", "REFLECT"),))
api(X.pad, "pad", "", "")
api(lambda x, paddings, value=None, mode="constant", paddings_contiguous=True:
    X.pad_v3(x, paddings, value, mode, paddings_contiguous), "", "PadV3", "",
    attrs=(("mode", "constant"), ("paddings_contiguous", True)))
api(X.strided_slice, "strided_slice", "", "")
api(X.cummin, "cummin", "", "cummin")
api(X.cummax, "cummax", "", "cummax")
api(lambda x, axis=0: X.cummin(x, axis), "", "Cummin", "", attrs=(("axis", 0),))
api(lambda x, axis=0: X.cummax(x, axis), "", "Cummax", "", attrs=(("axis", 0),))
api(X.cumprod, "cumprod", "", "cumprod")
api(X.cumprod_prim, "", "CumProd", "", attrs=(("exclusive", False), ("reverse", False)))
api(X.matrix_solve, "matrix_solve", "", "")
api(lambda matrix, rhs, adjoint=False: X.matrix_solve(matrix, rhs, adjoint), "", "MatrixSolve", "",
    attrs=(("adjoint", False),))
api(X.cholesky, "cholesky", "", "cholesky")
api(lambda x, upper=False: X.cholesky(x, upper), "", "Cholesky", "", attrs=(("upper", False),))
api(X.cholesky_inverse, "cholesky_inverse", "", "cholesky_inverse")
api(lambda x, upper=False: X.cholesky_inverse(x, upper), "", "CholeskyInverse", "", attrs=(("upper", False),))
api(X.lstsq, "lstsq", "", "lstsq")
api(X.pinv, "pinv", "", "")
api(X.matrix_inverse, "matrix_inverse inverse", "MatrixInverse", "", attrs=(("adjoint", False),))
api(X.masked_select, "masked_select", "MaskedSelect", "masked_select")
api(F.masked_fill, "", "MaskedFill", "")
api(X.linspace, "linspace", "LinSpace", "")
api(X.range_, "range", "Range", "", attrs=(("maxlen", 1000000, None),))
api(X.iou, "iou", "IOU", "", attrs=(("mode", "iou"),))
api(X.check_valid, "check_valid", "CheckValid", "")
api(X.bounding_box_encode, "bounding_box_encode", "BoundingBoxEncode", "",
    attrs=(("means", (0.0, 0.0, 0.0, 0.0)), ("stds", (1.0, 1.0, 1.0, 1.0))))
api(lambda a, d, max_shape, means=(0.0,) * 4, stds=(1.0,) * 4, wh_ratio_clip=0.016:
    X.bounding_box_decode(a, d, max_shape, means, stds, wh_ratio_clip), "", "BoundingBoxDecode", "",
    attrs=(("max_shape", None), ("means", (0.0,) * 4), ("stds", (1.0,) * 4), ("wh_ratio_clip", 0.016)))
api(X.bounding_box_decode, "bounding_box_decode", "", "")
api(X.in_top_k, "intopk in_top_k", "", "")
api(lambda p, t, k=1: X.in_top_k(p, t, k), "", "InTopK", "", attrs=(("k", 1),))
api(X.searchsorted, "searchsorted", "", "")
api(X.searchsorted_prim, "", "SearchSorted", "", attrs=(("dtype", dt.int64), ("right", False)))
api(X.reverse_sequence, "reverse_sequence", "", "reverse_sequence")
api(lambda x, seq_lengths, seq_dim=0, batch_dim=0: X.reverse_sequence(x, seq_lengths, seq_dim, batch_dim), "",
    "ReverseSequence", "", attrs=(("seq_dim", 0), ("batch_dim", 0)))
api(X.expand, "expand", "", "expand")
api(X.embedding_lookup, "", "EmbeddingLookup", "")
api(X.fill_diagonal, "fill_diagonal", "", "fill_diagonal")
api(lambda x, fill_value=0.0, wrap=False: X.fill_diagonal(x, fill_value, wrap), "", "FillDiagonal", "",
    attrs=(("fill_value", 0.0), ("wrap", False)))
api(X.cross, "cross", "", "cross")
api(X.addmv, "addmv", "", "addmv")
api(X.addr, "addr", "", "addr")
api(X.batch_dot, "batch_dot", "", "")
api(X.pdist, "pdist", "", "")
api(X.data_format_dim_map, "", "DataFormatDimMap", "", attrs=(("src_format", "NHWC"), ("dst_format", "NCHW")))
api(X.nll_loss, "nll_loss", "", "")
api(lambda logits, labels, weight, reduction="mean", ignore_index=-100:
    X.nll_loss_prim(logits, labels, weight, reduction, ignore_index), "", "NLLLoss", "",
    attrs=(("reduction", "mean"), ("ignore_index", -100)))
api(X.cross_entropy, "cross_entropy", "", "")
api(X.softmax_cross_entropy_with_logits, "", "SoftmaxCrossEntropyWithLogits", "")
api(X.crop_and_resize, "crop_and_resize", "", "")
api(X.crop_and_resize_prim, "", "CropAndResize", "", attrs=(("method", "bilinear"), ("extrapolation_value", 0.0)))
api(lambda x, size, coordinate_transformation_mode="align_corners": X.resize_linear_1d(
    x, size, coordinate_transformation_mode), "", "ResizeLinear1D", "",
    attrs=(("coordinate_transformation_mode", "align_corners"),))
api(X.avg_pool1d, "avg_pool1d", "", "")
api(X.avg_pool3d, "avg_pool3d", "", "")
api(X.max_pool3d, "max_pool3d", "", "")
api(X.max_pool3d_prim, "", "MaxPool3D", "", attrs=(("kernel_size", 1), ("strides", 1), ("pad_mode", "VALID"),
                                                    ("pad_list", 0), ("ceil_mode", None), ("data_format", "NCDHW")))
api(X.avg_pool3d_prim, "", "AvgPool3D", "",
    attrs=(("kernel_size", 1), ("strides", 1), ("pad_mode", "valid"), ("pad", 0), ("ceil_mode", False),
           ("count_include_pad", True), ("divisor_override", 0), ("data_format", "NCDHW")))
api(X.adaptive_max_pool1d, "adaptive_max_pool1d", "", "")
api(X.adaptive_max_pool2d, "adaptive_max_pool2d", "", "")
api(X.adaptive_max_pool3d, "adaptive_max_pool3d", "", "")
api(lambda x, output_size=None: X.adaptive_max_pool2d(x, output_size, True), "", "AdaptiveMaxPool2D", "",
    attrs=(("output_size", None),))
api(X.nextafter, "nextafter", "NextAfter", "nextafter")
api(X.population_count, "population_count", "PopulationCount", "")
api(X.lrn, "lrn", "LRN", "", attrs=(("depth_radius", 5), ("bias", 1.0), ("alpha", 1.0), ("beta", 0.5),
                                      ("norm_region", "ACROSS_CHANNELS")))
api(X.bidense, "bidense", "", "")
api(X.tensor_shape, "", "TensorShape", "")
api(X.unfold, "unfold", "", "")
api(X.fold, "fold", "", "fold")
api(X.matrix_diag, "matrix_diag", "", "")
api(X.matrix_diag_part, "matrix_diag_part", "", "")
api(lambda x, k, num_rows, num_cols, padding_value, align="RIGHT_LEFT": X.matrix_diag(
    x, k, num_rows, num_cols, padding_value, align), "", "MatrixDiagV3", "", attrs=(("align", "RIGHT_LEFT"),))
api(lambda x, k, padding_value, align="RIGHT_LEFT": X.matrix_diag_part(x, k, padding_value, align), "",
    "MatrixDiagPartV3", "", attrs=(("align", "RIGHT_LEFT"),))
api(lambda b, iou_threshold=0.5: X.nms_with_mask(b, iou_threshold), "", "NMSWithMask", "",
    attrs=(("iou_threshold", 0.5),))
api(X.lgamma, "lgamma", "Lgamma", "lgamma")
api(X.mvlgamma, "mvlgamma", "", "mvlgamma")
api(X.blackman_window, "blackman_window", "", "")
api(X.batch_norm, "batch_norm", "", "")
api(lambda condition, input_data, summarize=3: X.assert_(condition, input_data, summarize), "", "Assert", "",
    attrs=(("summarize", 3),))
api(X.concat_offset_v1, "", "ConcatOffsetV1", "")
api(X.conv3d, "conv3d", "", "")
api(X.ctc_greedy_decoder, "ctc_greedy_decoder", "", "")
api(X.no_repeat_ngram, "", "NoRepeatNGram", "", attrs=(("ngram_size", 1),))
api(lambda x, sl, merge_repeated=True: X.ctc_greedy_decoder(x, sl, merge_repeated), "", "CTCGreedyDecoder", "",
    attrs=(("merge_repeated", True),))
api(X.conv3d_transpose_prim, "", "Conv3DTranspose", "",
    attrs=(("in_channel", 1), ("out_channel", 1), ("kernel_size", 1), ("mode", 1), ("pad_mode", "valid"),
           ("pad", 0), ("stride", 1), ("dilation", 1), ("group", 1), ("output_padding", 0),
           ("data_format", "NCDHW")))
api(X.conv3d_prim, "", "Conv3D", "",
    attrs=(("out_channel", 1), ("kernel_size", 1), ("mode", 1), ("pad_mode", "valid"), ("pad", 0), ("stride", 1),
           ("dilation", 1), ("group", 1), ("data_format", "NCDHW")))
api(X.ps_roi_pooling, "", "PSROIPooling", "", attrs=(("spatial_scale", 1.0), ("group_size", 1), ("output_dim", 1)),
    check=X.check_ps_roi_pooling)
api(X.max_pool_with_argmax, "", "MaxPoolWithArgmax", "",
    attrs=(("kernel_size", 1), ("strides", 1), ("pad_mode", "valid"), ("data_format", "NCHW")))

# ---------------------------------------------------------------- the faces, made from the rows

class _Made:
    """Marks what this module made, so tests can tell the derived faces from hand-written ones."""


def _primitive(name: str, row: OpAPI, base: type) -> type:
    params = row.attrs

    def __init__(self, *args, **kwargs):
        if len(args) > len(params):
            raise TypeError(f"{name}() takes {len(params)} constructor arguments, got {len(args)}")
        values = {p: d for p, d, _ in params}
        values.update(zip((p for p, _, _ in params), args))
        for k, v in kwargs.items():
            if k not in values:
                raise TypeError(f"{name}() got an unexpected argument {k!r}; it takes "
                                f"{', '.join(p for p, _, _ in params) or 'none'}")
            values[k] = v
        if row.check is not None:
            row.check(values)
        base.__init__(self, **values)
        self._call_kw = {kw: values[p] for p, _, kw in params if kw is not None}
        if row.stream:
            from ..interp.rng import new_stream

            self._call_kw["stream"] = new_stream(self)
        for p, v in values.items():
            setattr(self, p, v)

    def __call__(self, *inputs):
        return row.impl(*inputs, **self._call_kw)

    doc = f"MindSpore's ``{name}`` primitive: calls ``{getattr(row.impl, '__name__', 'impl')}``."
    return type(name, (base, _Made), {"__init__": __init__, "__call__": __call__, "__doc__": doc,
                                      "__module__": "msvm.ops.primitives", "_row": row})


def primitives(base: type) -> dict:
    """{class name: primitive class} for every row with primitive names."""
    return {n: _primitive(n, row, base) for row in API for n in row.primitives}


def functions() -> dict:
    """{ms.ops name: function}: every row's function names (the impl's own name is in functional)."""
    return {n: row.impl for row in API for n in row.functions}


def _method(name: str, row: OpAPI):
    def method(self, *args, **kwargs):
        return row.impl(self, *args, **kwargs)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"Tensor.{name}: calls ``{getattr(row.impl, '__name__', 'impl')}``."
    return method


def methods() -> dict:
    return {n: _method(n, row) for row in API for n in row.methods}


def install_methods(cls: type) -> None:
    """Put every row's Tensor methods on ``cls`` (TensorMethods: Tensor and graph values), unless
    the class defines its own (reshape, sum, ... keep their MindSpore-specific signatures)."""
    for name, m in methods().items():
        if name not in cls.__dict__:
            setattr(cls, name, m)
