"""Tensor dtypes with MindSpore's names (``ms.float32``, ``ms.bool_``) and the
promotion rule every op uses (one place: ``promote``).

Promotion follows MindSpore, which differs from numpy in one way that matters:
an integer tensor combined with a float tensor takes the float's width
(int32 + float32 -> float32; numpy says float64). Python scalars are "weak":
they never widen a tensor's dtype (float32 tensor * 2.0 -> float32), except
that a float scalar turns an integer or bool tensor into float32.
"""

from __future__ import annotations

import numpy as np


class DType:
    """One tensor element type. Compare with ``is`` or ``==``; hashable."""

    __slots__ = ("name", "np", "kind", "code", "ms_name")

    def __init__(self, name: str, np_dtype, kind: str, code: int, ms_name: str):
        self.name = name            # numpy's spelling: what dumps, JSON and kernel keys use
        self.ms_name = ms_name      # MindSpore's spelling: what str() and repr() give ('Float32')
        self.np = np.dtype(np_dtype)
        self.kind = kind  # 'f' float, 'i' signed int, 'u' unsigned, 'b' bool, 'c' complex
        self.code = code  # stable number used by the binary format

    @property
    def itemsize(self) -> int:
        return self.np.itemsize

    @property
    def is_float(self) -> bool:
        return self.kind == "f"

    @property
    def is_complex(self) -> bool:
        return self.kind == "c"

    @property
    def is_inexact(self) -> bool:
        """Float or complex: what ops with a float result (exp, tanh, /) keep instead of making float32."""
        return self.kind in "fc"

    def __repr__(self):
        return self.ms_name

    __str__ = __repr__

    def __reduce__(self):
        return (by_name, (self.name,))


float16 = DType("float16", np.float16, "f", 1, "Float16")
float32 = DType("float32", np.float32, "f", 2, "Float32")
float64 = DType("float64", np.float64, "f", 3, "Float64")
int8 = DType("int8", np.int8, "i", 4, "Int8")
int16 = DType("int16", np.int16, "i", 5, "Int16")
int32 = DType("int32", np.int32, "i", 6, "Int32")
int64 = DType("int64", np.int64, "i", 7, "Int64")
uint8 = DType("uint8", np.uint8, "u", 8, "UInt8")
bool_ = DType("bool", np.bool_, "b", 9, "Bool")
uint16 = DType("uint16", np.uint16, "u", 10, "UInt16")
uint32 = DType("uint32", np.uint32, "u", 11, "UInt32")
uint64 = DType("uint64", np.uint64, "u", 12, "UInt64")
# (issue 21) complex: the interpreter computes with them (numpy); the compiled tiers' planners take
# float32/float64 only, so every complex instruction runs its L1 kernel at every tier
complex64 = DType("complex64", np.complex64, "c", 13, "Complex64")
complex128 = DType("complex128", np.complex128, "c", 14, "Complex128")

ALL = (float16, float32, float64, int8, int16, int32, int64, uint8, bool_, uint16, uint32, uint64,
       complex64, complex128)
_BY_NAME = {d.name: d for d in ALL}
_BY_NAME["bool_"] = bool_
_BY_NAME.update({d.ms_name: d for d in ALL})     # str(ms.float32) == 'Float32' reads back
_BY_CODE = {d.code: d for d in ALL}
_BY_NP = {d.np: d for d in ALL}

# MindSpore's groups of dtypes (those msvm has)
all_types = ALL
number_type = tuple(d for d in ALL if d.kind != "b")
int_type = tuple(d for d in ALL if d.kind == "i")
uint_type = tuple(d for d in ALL if d.kind == "u")
float_type = tuple(d for d in ALL if d.kind == "f")
complex_type = tuple(d for d in ALL if d.kind == "c")

# aliases MindSpore also exports
float_ = float32
half = float16
single = float32
double = float64
int_ = int32


def by_name(name: str) -> DType:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}; known: {', '.join(d.name for d in ALL)}") from None


def by_code(code: int) -> DType:
    try:
        return _BY_CODE[code]
    except KeyError:
        raise ValueError(f"unknown dtype code {code}") from None


def from_numpy(np_dtype) -> DType:
    """The msvm dtype of a numpy dtype; float64 arrays stay float64."""
    try:
        return _BY_NP[np.dtype(np_dtype)]
    except (KeyError, TypeError):
        raise TypeError(f"numpy dtype {np_dtype} has no msvm equivalent") from None


def as_dtype(x) -> DType:
    """Accept a DType, a numpy dtype/type or a name."""
    if isinstance(x, DType):
        return x
    if isinstance(x, str):
        return by_name(x)
    if x is bool:
        return bool_
    if x is int:
        return int64
    if x is float:
        return float32
    return from_numpy(x)


_RANK = {"b": 0, "u": 1, "i": 1, "f": 2, "c": 3}


def real_of(d: DType) -> DType:
    """The dtype of a complex dtype's parts (complex64 -> float32); others are their own."""
    return float32 if d is complex64 else float64 if d is complex128 else d


def complex_of(d: DType) -> DType:
    """The complex dtype with parts of d (float64 -> complex128; others complex64)."""
    return d if d.kind == "c" else complex128 if d is float64 else complex64


def dtype_to_nptype(type_) -> type:
    """The numpy scalar type of an msvm dtype (MindSpore's mstype.dtype_to_nptype)."""
    return as_dtype(type_).np.type


def promote(a: DType, b: DType) -> DType:
    """Result dtype of a binary op on two tensors."""
    if a is b:
        return a
    ra, rb = _RANK[a.kind], _RANK[b.kind]
    if ra != rb:
        hi, lo = (a, b) if ra > rb else (b, a)
        if hi.kind == "c" and lo is float64:        # complex64 with float64 -> complex128 (as numpy)
            return complex128
        return hi
    return a if a.itemsize >= b.itemsize else b


def scalar_kind(v) -> str:
    """'b', 'i', 'f' or 'c' for a Python/numpy scalar."""
    if isinstance(v, (bool, np.bool_)):
        return "b"
    if isinstance(v, (int, np.integer)):
        return "i"
    if isinstance(v, (complex, np.complexfloating)):
        return "c"
    return "f"


def promote_weak(t: DType, kind: str) -> DType:
    """Result dtype of a tensor of dtype ``t`` with a Python scalar of ``kind``."""
    if _RANK[kind] <= _RANK[t.kind]:
        return t
    if kind == "c":
        return complex_of(t)
    return float32 if kind == "f" else int64


def weak_default(kind: str) -> DType:
    """dtype of a Python scalar alone (two scalars combined)."""
    return {"b": bool_, "i": int64, "f": float32, "c": complex64}[kind]


def result_of(strong, weak) -> DType:
    """The promotion rule, once: tensors' dtypes (``strong``) promote with each other, then each
    Python scalar's kind (``weak``) lifts the result only across kinds (int tensor * 0.5 -> float32).
    The shape rules call it on static types, the L1 kernels on values."""
    if strong:
        out = strong[0]
        for d in strong[1:]:
            out = promote(out, d)
    else:
        out = weak_default(max(weak, key="bifc".index))
    for k in weak:
        out = promote_weak(out, k)
    return out
