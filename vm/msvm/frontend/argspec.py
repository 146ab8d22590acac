"""How arguments enter compiled code: ``ArgSpec`` and the functions that make one
from a value (``arg_spec``) or from a shape (``tensor_spec``).

A compile-time notion, shared by the executor (specs of the values of a call) and
static analysis (specs of declared, annotated or assumed shapes): a tensor's dtype
and dims (a dim that is not 1 becomes a symbol ``x0``, ``x1``... named after the
argument, a declared dim keeps its name), a bool/int is a run-time symbol, anything
else is a constant baked into the code.
"""

from __future__ import annotations

import numpy as np

from .. import dtype as dt
from ..bytecode import symbolic as S
from ..bytecode.symbolic import Expr
from ..bytecode.types import ScalarType, TensorType
from ..errors import ShapeMismatch
from ..tensor import DYNAMIC_RANK, Tensor


class ArgSpec:
    """How one argument enters compiled code: a tensor type, a run-time scalar, or a baked constant."""

    __slots__ = ("kind", "type", "value", "may_be_one")

    def __init__(self, kind: str, type_=None, value=None, may_be_one=frozenset()):
        self.kind = kind      # 'tensor' | 'scalar' | 'const'
        self.type = type_
        self.value = value
        self.may_be_one = frozenset(may_be_one)   # dim symbols of type that may be 1 at run time


def declared_dims(name, placeholder) -> list:
    """Dims of a declared shape: None -> a fresh symbol ``{name}{i}``, a str -> that symbol."""
    dims = []
    for i, d in enumerate(placeholder):
        if d is None:
            dims.append(S.sym(f"{name}{i}"))
        elif isinstance(d, str):
            dims.append(S.sym(d))
        elif isinstance(d, Expr):
            dims.append(d)
        else:
            dims.append(Expr.const(d))
    return dims


def tensor_spec(name: str, shape, d: dt.DType, declared=None) -> ArgSpec:
    """A tensor argument: declared dims (set_inputs) or symbols for every dim that is not 1."""
    if declared is not None and declared.placeholder_shape is DYNAMIC_RANK:   # Tensor(dtype=...): any rank
        if declared.dtype is not d:
            raise ShapeMismatch(f"argument {name}: set_inputs declared {declared.dtype} of any rank, got {d}")
        declared = Tensor(shape=(None,) * len(shape), dtype=d)
    if declared is not None:
        ph = declared.placeholder_shape or declared.shape
        if len(ph) != len(shape) or declared.dtype is not d:
            raise ShapeMismatch(f"argument {name}: set_inputs declared {declared.dtype}{list(ph)}, got "
                                f"{d}{list(shape)}")
        dims = declared_dims(name, ph)       # (dynamic dims may be 1 when it runs)
        return ArgSpec("tensor", TensorType(tuple(dims), d), may_be_one={x.as_symbol() for x in dims} - {None})
    dims = [Expr.const(1) if n == 1 else S.sym(f"{name}{i}") for i, n in enumerate(shape)]
    return ArgSpec("tensor", TensorType(tuple(dims), d))      # (a variant per pattern of 1 dims: these are not)


def arg_spec(name: str, v, declared=None, flag: bool = False) -> ArgSpec:
    """How argument ``name`` enters the bytecode (a Tensor, placeholder, array, bool, int, float or
    constant); ``flag``: its default is a bool, so an int (0 or 1, checked by ``check_flags``) is the
    same run-time flag as False/True."""
    if isinstance(v, Tensor) and v.is_placeholder:
        return tensor_spec(name, v.placeholder_shape, v.dtype, v)
    if isinstance(v, Tensor) or isinstance(v, np.ndarray):
        arr = v.asnumpy() if isinstance(v, Tensor) else v
        d = v.dtype if isinstance(v, Tensor) else dt.from_numpy(arr.dtype)
        return tensor_spec(name, arr.shape, d, declared)
    if isinstance(v, (bool, np.bool_)) or (flag and isinstance(v, (int, np.integer))):
        return ArgSpec("scalar", ScalarType("b", S.flag(name)))
    if isinstance(v, (int, np.integer)):
        return ArgSpec("scalar", ScalarType("i", S.sym(name)))
    if isinstance(v, (float, np.floating)):
        return ArgSpec("scalar", ScalarType("f"))
    return ArgSpec("const", value=v)


__all__ = ["ArgSpec", "arg_spec", "declared_dims", "tensor_spec"]
