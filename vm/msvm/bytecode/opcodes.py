"""The one opcode table. Every instruction is defined here and nowhere else.

Each row: name, opcode byte, operands (name, kind), stack effect (pops, pushes),
shape rule, kind, and a one-line semantics doc. The assembler, disassembler,
verifier, binary reader, interpreter and compiler all read this table; groups
such as ``ELEMENTWISE`` are derived from it.

Encoding: one opcode byte, then one little-endian u16 per operand. Operand kinds:
``local`` (slot in varnames), ``const`` (index into the constant pool), ``name``
(index into names), ``label`` (absolute byte offset of the target), ``count``
(an immediate count), ``callee`` (index into the code's sub-Cell table).

Pops may depend on a ``count`` operand (``BUILD_TUPLE n`` pops n); pushes may too
(``UNPACK_TUPLE n`` pushes n).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import partial
from typing import Callable

from . import shapes as S

ABI_VERSION = 1

OPERAND_KINDS = ("local", "const", "name", "label", "count", "callee")
KINDS = ("control", "memory", "layout", "elementwise", "reduction", "matmul", "conv", "fused")


@dataclass(frozen=True)
class OpInfo:
    name: str
    code: int
    operands: tuple          # ((operand name, kind), ...)
    pops: int | str          # int, or the name of a count operand
    pushes: int | str
    rule: Callable
    kind: str
    doc: str
    terminator: bool = False  # control never falls through (JUMP, RETURN)
    view: bool = False        # result may alias the input's memory
    parts: tuple = ()         # for fused instructions: the ops it replaces

    @property
    def size(self) -> int:
        return 1 + 2 * len(self.operands)

    def n_pops(self, args) -> int:
        return args[self._index(self.pops)] if isinstance(self.pops, str) else self.pops

    def n_pushes(self, args) -> int:
        return args[self._index(self.pushes)] if isinstance(self.pushes, str) else self.pushes

    def _index(self, operand: str) -> int:
        return [n for n, _ in self.operands].index(operand)

    @property
    def label_operand(self) -> int | None:
        for i, (_, kind) in enumerate(self.operands):
            if kind == "label":
                return i
        return None


_ROWS: list[OpInfo] = []


def _op(name, code, operands, pops, pushes, rule, kind, doc, **kw):
    ops = tuple(tuple(o.split(":")) for o in operands)
    for _, k in ops:
        assert k in OPERAND_KINDS, (name, k)
    assert kind in KINDS, (name, kind)
    _ROWS.append(OpInfo(name, code, ops, pops, pushes, rule, kind, doc, **kw))


# --- control and data movement ------------------------------------------------------------
_op("NOP", 0x00, [], 0, 0, S.nothing, "control", "do nothing")
_op("LOAD_TENSOR", 0x01, ["slot:local"], 0, 1, S.load_tensor, "memory",
    "push local[slot] (tensor or scalar); its shape/dtype/strides go on the metadata stack")
_op("STORE_TENSOR", 0x02, ["slot:local"], 1, 0, S.store_tensor, "memory", "local[slot] := pop()")
_op("LOAD_CONST", 0x03, ["value:const"], 0, 1, S.load_const, "memory", "push consts[value]")
_op("LOAD_PARAM", 0x04, ["attr:name"], 0, 1, S.load_param, "memory",
    "push the Cell's parameter or tensor attribute names[attr] (no copy)")
_op("LOAD_SYM", 0x05, ["expr:const"], 0, 1, S.load_sym, "memory",
    "push the value of a symbolic expression over the bound symbols")
_op("SET_SYM", 0x06, ["symbol:name", "expr:const"], 0, 0, S.set_sym, "control",
    "bind symbol names[symbol] to the value of consts[expr] (loop counters)")
_op("BUILD_TUPLE", 0x07, ["n:count"], "n", 1, S.build_tuple, "memory", "pop n values, push them as a tuple")
_op("UNPACK_TUPLE", 0x08, ["n:count"], 1, "n", S.unpack_tuple, "memory",
    "pop a tuple of n, push its items so that item 0 is on top")
_op("POP_TOP", 0x09, [], 1, 0, S.nothing, "memory", "discard the top of the stack")
_op("JUMP", 0x0A, ["target:label"], 0, 0, S.branch, "control", "pc := target", terminator=True)
_op("BRANCH_IF_SYMBOLIC", 0x0B, ["pred:const", "target:label"], 0, 0, S.branch, "control",
    "if the predicate over symbols/flags is false, pc := target (a shape predicate or a bool flag)")
_op("CALL_CELL", 0x0C, ["callee:callee", "n:count"], "n", 1, S.call_cell, "control",
    "pop n arguments, run the sub-Cell callees[callee] in a new frame, push its result")
_op("RETURN", 0x0D, [], 1, 0, S.nothing, "control", "pop the result and leave the frame", terminator=True)
_op("RAISE", 0x5F, ["exc:const", "message:const"], 0, 0, S.nothing, "control",
    "raise the built-in exception consts[exc] with the message consts[message] (strings and symbolic dims)",
    terminator=True)
_op("ALLOC_DEVICE_MEM", 0x0E, ["device:const", "stream:const"], 0, 0, S.nothing, "memory",
    "take the frame's workspace (reused output buffers) on device/stream")
_op("FREE_DEVICE_MEM", 0x0F, ["device:const", "stream:const"], 0, 0, S.nothing, "memory",
    "give the frame's workspace back on device/stream")

# --- elementwise: broadcast binaries --------------------------------------------------------
_BINARY = [
    ("BROADCAST_ADD", 0x10, "a + b", None), ("BROADCAST_SUB", 0x11, "a - b", None),
    ("BROADCAST_MUL", 0x12, "a * b", None), ("BROADCAST_DIV", 0x13, "a / b (true division)", "float"),
    ("BROADCAST_POW", 0x14, "a ** b", None), ("BROADCAST_MAX", 0x15, "maximum(a, b)", None),
    ("BROADCAST_MIN", 0x16, "minimum(a, b)", None),
    ("BROADCAST_EQ", 0x17, "a == b", "bool"), ("BROADCAST_NE", 0x18, "a != b", "bool"),
    ("BROADCAST_LT", 0x19, "a < b", "bool"), ("BROADCAST_LE", 0x1A, "a <= b", "bool"),
    ("BROADCAST_GT", 0x1B, "a > b", "bool"), ("BROADCAST_GE", 0x1C, "a >= b", "bool"),
    ("BROADCAST_AND", 0x1D, "logical a and b", "bool"), ("BROADCAST_OR", 0x1E, "logical a or b", "bool"),
    ("BROADCAST_FLOORDIV", 0x32, "floor(a / b) (ints stay ints)", None),
    ("BROADCAST_TRUNCDIV", 0x33, "trunc(a / b), rounded toward zero (ints stay ints)", None),
]
for _n, _c, _d, _o in _BINARY:
    _op(_n, _c, [], 2, 1, partial(S.binary, name=_n, out_dtype=_o), "elementwise",
        f"pop b, a; push {_d} with numpy broadcasting")

_op("WHERE", 0x1F, [], 3, 1, S.where, "elementwise", "pop b, a, cond; push where(cond, a, b)")

# --- elementwise: unary ------------------------------------------------------------------
_UNARY = [
    ("NEG", 0x20, "-x", None), ("ABS", 0x21, "|x|", None), ("EXP", 0x22, "e**x", "float"),
    ("LOG", 0x23, "ln x", "float"), ("SQRT", 0x24, "sqrt x", "float"), ("RSQRT", 0x25, "1/sqrt x", "float"),
    ("TANH", 0x26, "tanh x", "float"), ("SIGMOID", 0x27, "1/(1+e**-x)", "float"),
    ("RELU", 0x28, "max(x, 0)", None), ("GELU", 0x29, "x*Phi(x), exact (erf)", "float"),
    ("GELU_TANH", 0x2A, "x*Phi(x), tanh approximation", "float"), ("ERF", 0x2B, "erf x", "float"),
    ("RECIPROCAL", 0x2C, "1/x", "float"), ("LOGICAL_NOT", 0x2D, "not x", "bool"),
]
for _n, _c, _d, _o in _UNARY:
    _op(_n, _c, [], 1, 1, partial(S.unary, name=_n, out_dtype=_o), "elementwise", f"pop x; push {_d}")

_op("CAST", 0x2E, ["dtype:const"], 1, 1, S.cast, "elementwise", "pop x; push x converted to dtype")
_op("FILL", 0x2F, ["shape:const", "value:const", "dtype:const"], 0, 1, S.fill, "memory",
    "push a new tensor of shape filled with value")

# --- matmul -------------------------------------------------------------------------------
_op("MATMUL", 0x30, ["transpose_a:const", "transpose_b:const"], 2, 1, S.matmul, "matmul",
    "pop b, a; push a @ b for 2-D tensors, optionally transposed")
_op("BATCH_MATMUL", 0x31, ["transpose_a:const", "transpose_b:const"], 2, 1, S.batch_matmul, "matmul",
    "pop b, a; push batched a @ b over broadcast leading dims")

# --- reductions and normalizations --------------------------------------------------------
for _n, _c, _o, _d in [("REDUCE_SUM", 0x38, None, "sum"), ("REDUCE_MEAN", 0x39, "float", "mean"),
                       ("REDUCE_MAX", 0x3A, None, "max"), ("REDUCE_MIN", 0x3B, None, "min")]:
    _op(_n, _c, ["axes:const", "keep_dims:const"], 1, 1, partial(S.reduce, name=_n, out_dtype=_o),
        "reduction", f"pop x; push the {_d} over axes (None: all)")
_op("ARGMAX", 0x3C, ["axis:const", "keep_dims:const"], 1, 1, partial(S.argreduce, name="ARGMAX"),
    "reduction", "pop x; push the int32 index of the max along axis")
_op("SOFTMAX", 0x3D, ["axis:const"], 1, 1, S.softmax, "reduction", "pop x; push softmax along axis")
_op("LOG_SOFTMAX", 0x3E, ["axis:const"], 1, 1, partial(S.softmax, name="LOG_SOFTMAX"), "reduction",
    "pop x; push log(softmax(x)) along axis")
_op("LAYER_NORM", 0x3F, ["begin_norm_axis:const", "begin_params_axis:const", "epsilon:const"], 3, 1,
    S.layer_norm, "reduction", "pop beta, gamma, x; push (x-mean)/sqrt(var+eps)*gamma+beta")

# --- layout -------------------------------------------------------------------------------
_op("RESHAPE", 0x40, ["shape:const"], 1, 1, S.reshape, "layout",
    "pop x; push a view with the given shape (dims are exprs, -1 already resolved)", view=True)
_op("TRANSPOSE", 0x41, ["perm:const"], 1, 1, S.transpose, "layout", "pop x; push x permuted", view=True)
_op("EXPAND_DIMS", 0x42, ["axis:const"], 1, 1, S.expand_dims, "layout", "pop x; insert a dim of 1", view=True)
_op("SQUEEZE", 0x43, ["axes:const"], 1, 1, S.squeeze, "layout", "pop x; drop dims of 1", view=True)
_op("BROADCAST_TO", 0x44, ["shape:const"], 1, 1, S.broadcast_to, "layout", "pop x; broadcast to shape", view=True)
_op("CONCAT", 0x45, ["n:count", "axis:const"], "n", 1, S.concat, "layout", "pop n tensors; join them along axis")
_op("STACK", 0x46, ["n:count", "axis:const"], "n", 1, partial(S.concat, name="STACK"), "layout",
    "pop n tensors; stack them along a new axis")
_op("SLICE", 0x47, ["index:const"], 1, 1, S.slice_, "layout", "pop x; push x[index] (basic indexing)", view=True)

# --- convolution, pooling, gather (NCHW; pad is ("same",) or (top, bottom, left, right)) ------------
_op("CONV2D", 0x70, ["stride:const", "pad:const", "dilation:const", "group:const"], 2, 1, S.conv2d, "conv",
    "pop w [O, C/group, kh, kw], x [N, C, H, W]; push the cross-correlation [N, O, Ho, Wo]")
_op("MAX_POOL2D", 0x71, ["kernel:const", "stride:const", "pad:const"], 1, 1, partial(S.pool2d, name="MAX_POOL2D"),
    "conv", "pop x [N, C, H, W]; push the max over each kernel window (padding never wins)")
_op("AVG_POOL2D", 0x72, ["kernel:const", "stride:const", "pad:const", "count_pad:const"], 1, 1,
    partial(S.pool2d, name="AVG_POOL2D"), "conv",
    "pop x [N, C, H, W]; push the mean over each kernel window (padding counted when count_pad)")
_op("ADAPTIVE_AVG_POOL2D", 0x73, ["size:const"], 1, 1, S.adaptive_pool2d, "conv",
    "pop x [N, C, H, W]; push [N, C, oh, ow], each the mean of its bin (PyTorch/MindSpore's bins)")
_op("GATHER", 0x74, ["axis:const"], 2, 1, S.gather, "layout",
    "pop indices, x; push x's slices at the (int) indices along axis: x.shape[:axis]+idx.shape+x.shape[axis+1:]")

# --- conformance (issue 21): MindSpore's math, bitwise and band ops -------------------------------
_CONF_UNARY = [
    ("SIN", 0x90, "sin x", "float"), ("COS", 0x91, "cos x", "float"), ("TAN", 0x92, "tan x", "float"),
    ("ASIN", 0x93, "arcsin x", "float"), ("ACOS", 0x94, "arccos x", "float"), ("ATAN", 0x95, "arctan x", "float"),
    ("SINH", 0x96, "sinh x", "float"), ("COSH", 0x97, "cosh x", "float"), ("ASINH", 0x98, "arcsinh x", "float"),
    ("ACOSH", 0x99, "arccosh x", "float"), ("ATANH", 0x9A, "arctanh x", "float"),
    ("FLOOR", 0x9B, "floor x (ints stay ints)", None), ("CEIL", 0x9C, "ceil x (ints stay ints)", None),
    ("ROUND", 0x9D, "x rounded half to even (ints stay ints)", None),
    ("TRUNC", 0x9E, "x rounded toward zero (ints stay ints)", None), ("SIGN", 0x9F, "-1, 0 or 1 (NaN stays)", None),
    ("ISNAN", 0xA0, "x is NaN", "bool"), ("ISINF", 0xA1, "x is +-inf", "bool"),
    ("ISFINITE", 0xA2, "x is neither NaN nor +-inf", "bool"), ("SQUARE", 0xA3, "x * x", None),
    ("LOG1P", 0xA4, "ln(1 + x)", "float"), ("EXPM1", 0xA5, "e**x - 1", "float"), ("ERFC", 0xA6, "1 - erf x", "float"),
    ("INVERT", 0xA7, "bitwise not (bool: logical not)", None),
    ("SOFTPLUS", 0xA8, "ln(1 + e**x), without overflow", "float"),
    ("ERFINV", 0xAB, "the inverse of erf (+-inf at +-1, NaN outside [-1, 1])", "float"),
]
for _n, _c, _d, _o in _CONF_UNARY:
    _op(_n, _c, [], 1, 1, partial(S.unary, name=_n, out_dtype=_o), "elementwise", f"pop x; push {_d}")
_CONF_BINARY = [
    ("BROADCAST_BITAND", 0xB0, "a & b bitwise (ints and bools)", None),
    ("BROADCAST_BITOR", 0xB1, "a | b bitwise (ints and bools)", None),
    ("BROADCAST_BITXOR", 0xB2, "a ^ b bitwise (ints and bools)", None),
    ("BROADCAST_XOR", 0xB3, "logical a xor b", "bool"), ("BROADCAST_ATAN2", 0xB4, "arctan2(a, b)", "float"),
    ("BROADCAST_MOD", 0xB5, "a - floor(a / b) * b, the sign of b (ints stay ints)", None),
]
for _n, _c, _d, _o in _CONF_BINARY:
    _op(_n, _c, [], 2, 1, partial(S.binary, name=_n, out_dtype=_o), "elementwise",
        f"pop b, a; push {_d} with numpy broadcasting")
_op("MATRIX_BAND_PART", 0xB8, ["lower:const", "upper:const"], 1, 1, S.band_part, "layout",
    "pop x [..., M, N]; push x with zeros outside the band i - j <= lower, j - i <= upper (-1: no limit)")
for _n, _c, _o, _d in [("REDUCE_PROD", 0xB9, None, "product"), ("REDUCE_ALL", 0xBA, "bool", "logical and"),
                       ("REDUCE_ANY", 0xBB, "bool", "logical or")]:
    _op(_n, _c, ["axes:const", "keep_dims:const"], 1, 1, partial(S.reduce, name=_n, out_dtype=_o),
        "reduction", f"pop x; push the {_d} over axes (None: all)")
_op("TENSOR_SCATTER", 0xBD, ["mode:const"], 3, 1, S.tensor_scatter, "layout",
    "pop updates, indices [..., K], x; push x with x[indices] combined with updates by mode "
    "(update, add, sub, mul, div, max, min); an index out of range raises")
_op("GATHER_ND", 0xBE, [], 2, 1, S.gather_nd, "layout",
    "pop indices [..., K], x; push x[indices] over x's first K dims: indices.shape[:-1] + x.shape[K:]")
_op("GATHER_D", 0xBF, ["dim:const"], 2, 1, S.gather_d, "layout",
    "pop index, x; push take_along_axis(x, index, dim) (index has x's rank)")
_op("ARGSORT", 0xA9, ["axis:const", "descending:const"], 1, 1, S.argsort, "reduction",
    "pop x; push the int32 indices that sort x along axis (stable: equal values keep their order; NaN last)")
_op("UNSORTED_SEGMENT", 0xAA, ["num_segments:const", "mode:const"], 2, 1, S.unsorted_segment, "reduction",
    "pop ids, x; push [num_segments, ...]: row k combines (sum, prod, max, min) the rows of x whose id is k; "
    "an empty segment holds the combination's identity (max: the dtype's lowest), ids outside are dropped")
_op("SCATTER_ELEMENTS", 0xAC, ["axis:const", "reduction:const"], 3, 1, S.scatter_elements, "layout",
    "pop updates, indices, x; push x with x[..., indices[i], ...] (along axis) set to, or for reduction 'add' "
    "plus, updates[i]; indices and updates have one shape, of x's rank")
_op("ARGMIN", 0xBC, ["axis:const", "keep_dims:const"], 1, 1, partial(S.argreduce, name="ARGMIN"),
    "reduction", "pop x; push the int32 index of the min along axis")

# --- fused (produced by the fusion pass, jit/fuse.py; the interpreter runs them too) ---------
# A fused instruction carries its expression as a program (postfix tuple of nodes: ("in", k),
# ("c", value) or (OPNAME, *operands)); the disassembler names it after its parts:
# FUSED_ADD_RELU_CAST, FUSED_MATMUL_RELU, FUSED_MATMUL_BIAS_GELU ...
_op("FUSED_ELEMENTWISE", 0x60, ["program:const", "n:count"], "n", 1, S.fused_elementwise, "fused",
    "pop n inputs; push the elementwise program over them (one pass, no temporaries)")
_op("FUSED_MATMUL", 0x61, ["transpose_a:const", "transpose_b:const", "batched:const", "program:const", "n:count"],
    "n", 1, S.fused_matmul, "fused",
    "pop n inputs (a, b, extras); push program(a @ b, extras...) applied to each block of the product")


# ---------------------------------------------------------------- derived views

TABLE: tuple[OpInfo, ...] = tuple(_ROWS)
BY_NAME: dict[str, OpInfo] = {r.name: r for r in TABLE}
BY_CODE: dict[int, OpInfo] = {r.code: r for r in TABLE}
assert len(BY_NAME) == len(TABLE) and len(BY_CODE) == len(TABLE), "duplicate opcode name or byte"

ELEMENTWISE = frozenset(r.name for r in TABLE if r.kind == "elementwise")
BINARY = frozenset(r.name for r in TABLE if r.kind == "elementwise" and r.pops == 2)
UNARY = frozenset(r.name for r in TABLE if r.kind == "elementwise" and r.pops == 1)
CONTROL = frozenset(r.name for r in TABLE if r.kind == "control")
VIEWS = frozenset(r.name for r in TABLE if r.view)
FUSED = frozenset(r.name for r in TABLE if r.kind == "fused")


def fingerprint() -> bytes:
    """16 bytes that change whenever a row's name, byte or operands change."""
    h = hashlib.sha256()
    for r in TABLE:
        h.update(f"{r.code:02x}:{r.name}:{','.join(k for _, k in r.operands)};".encode())
    return h.digest()[:16]


FINGERPRINT = fingerprint()
