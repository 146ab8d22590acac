"""MindSpore's random ops (issue 21): functions, and the implementations behind the primitives
``ops/registry.py`` makes (``StandardNormal(seed, seed2)(shape)``, ``RandomShuffle``, ``Dropout2D``...).

Each draw is one RANDOM instruction (an effect row: never folded at compile time, even when its
inputs are constants; never replayed), whose seed operand is ``(seed, seed2, stream)``; see
``interp/rng.py`` for MindSpore's seed semantics and what is (and is not) reproduced. A shape is a
tuple of ints or symbolic dims, or a 1-D int Tensor (inside construct its values are read at run
time: the output dims are data-dependent symbols).
"""

from __future__ import annotations

import itertools

import numpy as np

from .. import dtype as dt
from ..bytecode.symbolic import Expr
from ..errors import UnknownDim
from ..frontend.graph import is_graph, trace_op, tracing
from ..interp import rng
from ..interp.kernels import KERNELS
from ..tensor import Tensor, unwrap, wrap


def draw(dist: str, inputs: tuple, attrs: tuple, seed: tuple):
    """One RANDOM instruction (inside construct) or its kernel at once (PyNative)."""
    if tracing():
        return _unpack(trace_op("RANDOM", inputs, (len(inputs), dist, attrs, seed)))
    return wrap(KERNELS["RANDOM"](*(unwrap(x) for x in inputs), dist, attrs, seed))


def _seeds(seed, seed2, what):
    """Checked seeds; an int argument of construct is a symbolic int, its value read at run time."""
    s = 0 if seed is None else seed if isinstance(seed, Expr) else rng.check_seed(seed, f"{what}: seed")
    s2 = 0 if seed2 is None else seed2 if isinstance(seed2, Expr) else rng.check_seed(seed2, f"{what}: seed2")
    return s, s2


def _fn_seed(name, seed, seed2=None):
    """(seed, seed2, stream) of a function face's call (MindSpore's cached primitive per seeds)."""
    s, s2 = _seeds(seed, seed2, f"ops.{name}")
    if isinstance(s, Expr) or isinstance(s2, Expr):
        return s, s2, rng.named_stream(name, "run-time", None)
    return s, s2, rng.named_stream(name, seed, seed2)


def _check_dtype(d, allowed, what):
    d = dt.as_dtype(d) if d is not None else None
    if d is None or d.name not in allowed:
        raise TypeError(f"{what}: dtype must be one of {', '.join(allowed)}, got {d}")
    return d


_FLOATS = ("float16", "float32", "float64")


def _shape_arg(shape, what, tensor_only=False):
    """(attrs shape, inputs): a tuple of dims, or a 1-D int Tensor (read at run time in construct)."""
    if isinstance(shape, Tensor) or is_graph(shape):
        d = shape.dtype
        if d.kind not in "iu":
            raise TypeError(f"{what}: shape must be an int tensor, got {d}")
        if len(shape.shape) != 1:
            raise ValueError(f"{what}: shape must be a 1-D tensor, got rank {len(shape.shape)}")
        if isinstance(shape, Tensor):
            vals = tuple(int(v) for v in shape.asnumpy())
            if any(v < 0 for v in vals):
                raise ValueError(f"{what}: shape must not hold negative dims, got {vals}")
            return vals, ()
        n = shape.shape[0]
        if isinstance(n, Expr) and not n.is_const():
            raise UnknownDim(f"{what}: the shape tensor's length {n} sets the output's rank")
        return None, (shape,)
    if tensor_only:
        raise TypeError(f"{what}: shape must be a Tensor, got {type(shape).__name__}")
    if isinstance(shape, int) and not isinstance(shape, bool):
        shape = (shape,)
    if not isinstance(shape, (tuple, list)):
        raise TypeError(f"{what}: shape must be a tuple of ints, got {type(shape).__name__}")
    out = []
    for d in shape:
        if isinstance(d, Expr) or (isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0):
            out.append(d if isinstance(d, Expr) else int(d))
        else:
            raise ValueError(f"{what}: bad dimension {d!r} in shape {tuple(shape)}")
    return tuple(out), ()


def _tensor_arg(x, what, name="input"):
    if not (isinstance(x, Tensor) or is_graph(x)):
        raise TypeError(f"{what}: {name} must be a Tensor, got {type(x).__name__}")
    return x


# ---------------------------------------------------------------- implementations (all faces)

def standard_normal(shape, seed=None, seed2=None, *, stream=None):
    sh, ins = _shape_arg(shape, "standard_normal")
    return draw("normal", ins, (sh, dt.float32), _seed3("standard_normal", seed, seed2, stream))


def standard_laplace(shape, seed=None, seed2=None, *, stream=None):
    sh, ins = _shape_arg(shape, "standard_laplace")
    return draw("laplace", ins, (sh, dt.float32), _seed3("standard_laplace", seed, seed2, stream))


def _seed3(name, seed, seed2, stream):
    if stream is None:
        return _fn_seed(name, seed, seed2)
    s, s2 = _seeds(seed, seed2, name)
    return s, s2, stream


def uniform_real(shape, seed=0, seed2=0, *, stream=None):
    sh, ins = _shape_arg(shape, "UniformReal")
    return draw("uniform", ins, (sh, dt.float32, 0.0, 1.0), _seed3("uniform_real", seed, seed2, stream))


def uniform_int(shape, minval, maxval, seed=0, seed2=0, *, stream=None):
    sh, ins = _shape_arg(shape, "UniformInt")
    for v, n in ((minval, "minval"), (maxval, "maxval")):
        if isinstance(v, Tensor) and v.dtype.kind not in "iu":
            raise TypeError(f"UniformInt: {n} must be an int tensor, got {v.dtype}")
    return draw("uniform_int", ins + (minval, maxval), (sh, dt.int32), _seed3("uniform_int", seed, seed2, stream))


def uniform(shape, minval, maxval, seed=None, dtype=dt.float32):
    """ops.uniform: ints in [minval, maxval) for an int dtype, floats in [minval, maxval) otherwise."""
    d = dt.as_dtype(dtype)
    if d.kind in "iu":
        return uniform_int(shape, minval, maxval, seed or 0, 0, stream=rng.named_stream("uniform", seed, None))
    u = uniform_real(shape, seed or 0, 0, stream=rng.named_stream("uniform", seed, None))
    lo = minval if not isinstance(minval, Tensor) else minval.astype(dt.float32)
    hi = maxval if not isinstance(maxval, Tensor) else maxval.astype(dt.float32)
    from . import functional as F

    return F.cast(F.add(F.mul(u, F.sub(hi, lo)), lo), d)


def uniform_like(x, minval=0.0, maxval=1.0, seed=0, offset=0, *, stream=None):
    """The Uniform primitive: floats in [minval, maxval) of x's shape and float dtype."""
    _tensor_arg(x, "Uniform", "x")
    if not x.dtype.is_float:
        raise TypeError(f"Uniform: x must be float16, float32 or float64, got {x.dtype}")
    if minval > maxval:
        raise ValueError(f"Uniform: minval {minval} must not be larger than maxval {maxval}")
    return draw("uniform", (), (tuple(x.shape), x.dtype, float(minval), float(maxval)),
                _seed3("uniform", seed, offset, stream))


def truncated_normal(shape, seed=0, seed2=0, dtype=dt.float32, *, stream=None):
    sh, ins = _shape_arg(shape, "TruncatedNormal", tensor_only=True)
    d = _check_dtype(dtype, _FLOATS, "TruncatedNormal")
    return draw("truncated_normal", ins, (sh, d), _seed3("truncated_normal", seed, seed2, stream))


def parameterized_truncated_normal(shape, mean, stdevs, min, max, seed=0, seed2=0, *, stream=None):  # noqa: A002
    sh, ins = _shape_arg(shape, "ParameterizedTruncatedNormal", tensor_only=True)
    for v, n in ((mean, "mean"), (stdevs, "stdevs"), (min, "min"), (max, "max")):
        _tensor_arg(v, "ParameterizedTruncatedNormal", n)
    d = _check_dtype(mean.dtype, _FLOATS, "ParameterizedTruncatedNormal")
    return draw("param_truncated_normal", ins + (mean, stdevs, min, max), (sh, d),
                _seed3("parameterized_truncated_normal", seed, seed2, stream))


def random_poisson(shape, rate, seed=None, dtype=dt.float32, seed2=None, *, stream=None):
    sh, ins = _shape_arg(shape, "random_poisson", tensor_only=True)
    _tensor_arg(rate, "random_poisson", "rate")
    if rate.dtype.name not in ("float16", "float32", "float64", "int32", "int64"):
        raise TypeError(f"random_poisson: rate must be float16, float32, float64, int32 or int64, got {rate.dtype}")
    d = _check_dtype(dtype, _FLOATS + ("int32", "int64"), "random_poisson")
    return draw("poisson", ins + (rate,), (sh, d), _seed3("random_poisson", seed, seed2, stream))


def random_gamma(shape, alpha, seed=None, seed2=None, *, stream=None):
    sh, ins = _shape_arg(shape, "random_gamma", tensor_only=True)
    _tensor_arg(alpha, "random_gamma", "alpha")
    d = _check_dtype(alpha.dtype, _FLOATS, "random_gamma: alpha")
    return draw("gamma", ins + (alpha,), (sh, d), _seed3("random_gamma", seed, seed2, stream))


def shuffle(x, seed=None, seed2=None, *, stream=None):
    _tensor_arg(x, "shuffle", "x")
    return draw("shuffle", (x,), (), _seed3("shuffle", seed, seed2, stream))


def multinomial(input, num_samples, replacement=True, seed=None, *, stream=None, dtype=dt.int32):  # noqa: A002
    _tensor_arg(input, "multinomial")
    if not isinstance(num_samples, Expr) and (isinstance(num_samples, bool) or
                                              not isinstance(num_samples, (int, np.integer)) or num_samples < 0):
        raise ValueError(f"multinomial: num_samples must be an int >= 0, got {num_samples!r}")
    if not input.dtype.is_float:
        raise TypeError(f"multinomial: input must be a float tensor, got {input.dtype}")
    n = num_samples if isinstance(num_samples, Expr) else int(num_samples)
    return draw("multinomial", (input,), (n, dt.as_dtype(dtype), bool(replacement)),
                _seed3("multinomial", seed, None, stream))


def multinomial_prim(x, num_samples, seed=0, seed2=0, dtype=dt.int32, *, stream=None):
    """The Multinomial primitive: ``Multinomial(seed, seed2, dtype)(x, num_samples)``, with replacement."""
    return multinomial(x, num_samples, True, seed, stream=_seed3("multinomial", seed, seed2, stream)[2],
                       dtype=_check_dtype(dtype, ("int32", "int64"), "Multinomial"))


def multinomial_with_replacement(x, seed, offset, numsamples, replacement=False):
    s = int(np.asarray(unwrap(seed)).reshape(-1)[0]) if not is_graph(seed) else 0
    o = int(np.asarray(unwrap(offset)).reshape(-1)[0]) if not is_graph(offset) else 0
    return multinomial(x, numsamples, replacement, stream=rng.named_stream("multinomial_wr", s, o), dtype=dt.int64)


def random_categorical(logits, num_sample, seed=0, dtype=dt.int64, *, stream=None):
    _tensor_arg(logits, "random_categorical", "logits")
    d = _check_dtype(dtype, ("int16", "int32", "int64"), "RandomCategorical")
    s = int(np.asarray(unwrap(seed))) if isinstance(seed, Tensor) else seed
    s = s if isinstance(s, Expr) else rng.check_seed(s, "RandomCategorical: seed")
    if isinstance(num_sample, Expr) and num_sample.is_const():
        num_sample = num_sample.const_value()
    if not isinstance(num_sample, Expr) and (isinstance(num_sample, bool) or not isinstance(num_sample, (int, np.integer))
                                             or num_sample <= 0):
        raise ValueError(f"RandomCategorical: num_sample must be a positive int, got {num_sample!r}")
    st = stream if stream is not None else rng.named_stream("random_categorical", "run-time" if isinstance(s, Expr)
                                                             else s, None)
    return draw("categorical", (logits,), (num_sample if isinstance(num_sample, Expr) else int(num_sample), d),
                (s, 0, st))


def _sampler(dist, name, true_classes, num_true, num_sampled, unique, range_max, seed, remove_hits, stream):
    _tensor_arg(true_classes, name, "true_classes")
    for v, n in ((num_true, "num_true"), (num_sampled, "num_sampled"), (range_max, "range_max")):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v <= 0:
            raise ValueError(f"{name}: {n} must be a positive int, got {v!r}")
    if unique and num_sampled > range_max:
        raise ValueError(f"{name}: num_sampled {num_sampled} must not exceed range_max {range_max} when unique")
    attrs = (int(num_true), int(num_sampled), bool(unique), int(range_max), bool(remove_hits))
    return draw(dist, (true_classes,), attrs, _seed3(name, seed, None, stream))


def uniform_candidate_sampler(true_classes, num_true, num_sampled, unique, range_max, seed=0,
                              remove_accidental_hits=False, *, stream=None):
    return _sampler("candidates", "uniform_candidate_sampler", true_classes, num_true, num_sampled, unique,
                    range_max, seed, remove_accidental_hits, stream)


def log_uniform_candidate_sampler(true_classes, num_true=1, num_sampled=5, unique=True, range_max=5, seed=0,
                                  *, stream=None):
    return _sampler("log_uniform_candidates", "log_uniform_candidate_sampler", true_classes, num_true,
                    num_sampled, unique, range_max, seed, False, stream)


def choice_with_mask(input_x, count=256, seed=0, seed2=0, *, stream=None):
    # (MindSpore takes any int as this op's seeds: a negative one is read modulo 2**63)
    seed, seed2 = (int(v) % (1 << 63) if isinstance(v, int) and not isinstance(v, bool) else v for v in (seed, seed2))
    _tensor_arg(input_x, "RandomChoiceWithMask", "input_x")
    if input_x.dtype != dt.bool_:
        raise TypeError(f"RandomChoiceWithMask: input_x must be bool, got {input_x.dtype}")
    if isinstance(count, bool) or not isinstance(count, int) or count <= 0:
        raise ValueError(f"RandomChoiceWithMask: count must be a positive int, got {count!r}")
    return draw("choice_with_mask", (input_x,), (int(count),), _seed3("choice_with_mask", seed, seed2, stream))


def _keep(p, what, name="p"):
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
        raise ValueError(f"{what}: {name} must be a float in [0, 1], got {p!r}")
    return float(p)


def dropout_prim(x, keep_prob=0.5, seed0=0, seed1=0, nd=0, *, stream=None):
    """(output, mask) of the Dropout / Dropout2D / Dropout3D primitives: each element (nd 0) or each
    whole channel of [N, C, ...] (nd 2, 3) kept with probability keep_prob and scaled by 1/keep_prob."""
    what = "Dropout" if not nd else f"Dropout{nd}D"
    _tensor_arg(x, what, "x")
    keep = _keep(keep_prob, what, "keep_prob")
    if nd and len(x.shape) != nd + 2:
        raise ValueError(f"{what}: x must have rank {nd + 2}, got {len(x.shape)}")
    return draw("dropout", (x,), (keep, nd), _seed3(what.lower(), seed0, seed1, stream))


def dropout(input, p=0.5, training=True, seed=None):  # noqa: A002
    """ops.dropout: elements zeroed with probability p, the rest scaled by 1/(1-p); identity when not
    training."""
    p = _keep(p, "ops.dropout")
    if not training or p == 0.0:
        return input
    out, _ = _unpack(dropout_prim(input, 1.0 - p, seed or 0, 0, 0, stream=rng.named_stream("dropout", seed, None)))
    return out


def _dropout_nd(nd):
    def fn(input, p=0.5, training=True):  # noqa: A002
        p = _keep(p, f"ops.dropout{nd}d")
        if not training or p == 0.0:
            return input
        out, _ = _unpack(dropout_prim(input, 1.0 - p, 0, 0, nd, stream=rng.new_stream()))
        return out
    fn.__name__ = f"dropout{nd}d"
    fn.__doc__ = f"ops.dropout{nd}d: whole channels of [N, C, ...] zeroed with probability p, the rest scaled."
    return fn


dropout2d = _dropout_nd(2)
dropout3d = _dropout_nd(3)


def _unpack(v):
    """A RANDOM tuple result: a Python tuple eagerly; inside construct, its items (UNPACK_TUPLE)."""
    from ..bytecode.types import TupleType

    if is_graph(v) and isinstance(v.type, TupleType):
        from ..frontend.graph import current

        return current().unpack_graph_tuple(v, f"%rand{next(_hints)}")
    return v


_hints = itertools.count()


def set_seed(seed):
    rng.set_seed(seed)


def get_seed():
    return rng.get_seed()
