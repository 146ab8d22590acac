"""The one opcode table. Every instruction is defined here and nowhere else.

Each row: name, opcode byte, operands (name, kind), stack effect (pops, pushes),
shape rule, kind, and a one-line semantics doc, then what the tiers and passes need
to know of it (``OpInfo``'s flags: how the compiled tiers run it and the kind of
kernel they plan, whether its kernels write into ``out=``, return fresh memory or may
overwrite an input, its effects ...). The assembler, disassembler, verifier, binary
reader, interpreter and compiler all read this table; groups such as ``ELEMENTWISE``
are derived from it, and a pass that needs a fact of an op reads it here rather than
listing op names (tests/vm/test_table.py checks the names a module still spells out).

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
from . import shapes_more as SM
from .shapes_attention import fused_attention as _fused_attention_rule
from .shapes_norm import fused_add_layer_norm as _fused_add_layer_norm_rule
from .shapes_norm import fused_rms_norm as _fused_rms_norm_rule

ABI_VERSION = 1

OPERAND_KINDS = ("local", "const", "name", "label", "count", "callee")
KINDS = ("control", "memory", "layout", "elementwise", "reduction", "matmul", "conv", "fused", "random")
EFFECT_KINDS = ("", "param", "random", "io")
COMPILED = ("fused", "kernel", "l1")
KERNEL_KINDS_ALL = ("elementwise", "matmul", "row", "attention", "conv")     # OpInfo.kernel


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
    compiled: str = ""        # how L2/L3 run it: "fused" (a part of FUSED_* programs, lowered to LLVM),
    #                           "kernel" (a compiled kernel of its own), "l1" (its L1 kernel at every tier)
    out: bool = False         # its L1 kernel writes the whole result into ``out=`` (buffers are reused)
    costly: bool = False      # alone, still worth a compiled kernel (numpy makes several passes)
    commutative: bool = False  # a binary whose operands may swap: the same values, shape and dtype, bit for bit
    leaf: bool = False        # pushes a value without popping: may start a fused program
    binds: bool = False       # binds the symbol names[symbol] when it runs (a data-dependent dim, as SET_SYM does)
    effect: str = ""          # what it does beyond its result: "param" (installs a Parameter's new data),
    #                           "random" (draws from the generator its seed operand names: two runs differ),
    #                           "io" (writes to stdout); "" is pure. Such a row runs exactly once per execution,
    #                           in program order, at every tier: never fused, constant-folded, cached or replayed
    kernel: str = ""          # for a "kernel" row: the kind of compiled kernel its site plans and runs (KERNEL_KINDS):
    #                           "elementwise", "matmul", "row" (compiler/planning.py; FUSED_ADD_LAYER_NORM's and
    #                           FUSED_RMS_NORM's inputs are planned by compiler/norm.py), "attention"
    #                           (compiler/attention_plan.py) or "conv" (compiler/conv.py)
    fresh: bool = False       # its L1 kernel and compiled site always return a new array, never an input or a
    #                           view of one (the memory plan need not keep its inputs alive for its result)
    in_place: bool = False    # its result may be written over an input of its shape and dtype that dies there:
    #                           each output element reads only the same element of each input (elementwise),
    #                           and its kernels write through ``out=`` even when out is that input
    keeps_buffers: bool = False  # for a "kernel" row: its compiled site keeps its own result buffers per shape
    #                           and takes no ``out=`` (FUSED_ATTENTION's scores and context), so the memory
    #                           plan gives its result none
    raw_operands: bool = False  # its L1 kernel takes the decoded operands as they are, the count included
    #                           (``*inputs, ..., n``); other rows' operands drop counts and resolve symbolic dims

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
    assert kw.get("effect", "") in EFFECT_KINDS, (name, kw.get("effect"))
    computes = kind not in ("control", "memory") or name == "FILL"
    assert (kw.get("compiled") in COMPILED) == computes, f"{name}: compiled= must be one of {COMPILED} exactly " \
        "for a computing row"
    assert (kw.get("kernel", "") in KERNEL_KINDS_ALL) == (kw.get("compiled") == "kernel"), \
        f"{name}: kernel= must be one of {KERNEL_KINDS_ALL} exactly for a compiled='kernel' row"
    assert not kw.get("keeps_buffers") or kw.get("compiled") == "kernel", f"{name}: keeps_buffers= is for a kernel row"
    assert not kw.get("in_place") or kw.get("out") or kw.get("compiled") == "kernel", \
        f"{name}: in_place= needs kernels that write into out="
    assert not kw.get("raw_operands") or any(k == "count" for _, k in ops), f"{name}: raw_operands= needs a count"
    _ROWS.append(OpInfo(name, code, ops, pops, pushes, rule, kind, doc, **kw))


# --- control and data movement ------------------------------------------------------------
_op("NOP", 0x00, [], 0, 0, S.nothing, "control", "do nothing")
_op("LOAD_TENSOR", 0x01, ["slot:local"], 0, 1, S.load_tensor, "memory",
    "push local[slot] (tensor or scalar); its shape/dtype/strides go on the metadata stack", leaf=True)
_op("STORE_TENSOR", 0x02, ["slot:local"], 1, 0, S.store_tensor, "memory", "local[slot] := pop()")
_op("LOAD_CONST", 0x03, ["value:const"], 0, 1, S.load_const, "memory", "push consts[value]", leaf=True)
_op("LOAD_PARAM", 0x04, ["attr:name"], 0, 1, S.load_param, "memory",
    "push the Cell's parameter or tensor attribute names[attr] (no copy)", leaf=True)
_op("LOAD_SYM", 0x05, ["expr:const"], 0, 1, S.load_sym, "memory",
    "push the value of a symbolic expression over the bound symbols", leaf=True)
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
# (name, byte, semantics, result dtype, flags): flags "f" fused (lowered in FUSED_* programs, else
# its L1 kernel at every tier), "o" out-capable, "c" costly, "s" commutative (see OpInfo)
_BINARY = [
    ("BROADCAST_ADD", 0x10, "a + b", None, "fos"), ("BROADCAST_SUB", 0x11, "a - b", None, "fo"),
    ("BROADCAST_MUL", 0x12, "a * b", None, "fos"), ("BROADCAST_DIV", 0x13, "a / b (true division)", "float", "fo"),
    ("BROADCAST_POW", 0x14, "a ** b", None, "fo"), ("BROADCAST_MAX", 0x15, "maximum(a, b)", None, "fo"),
    ("BROADCAST_MIN", 0x16, "minimum(a, b)", None, "fo"),
    ("BROADCAST_EQ", 0x17, "a == b", "bool", ""), ("BROADCAST_NE", 0x18, "a != b", "bool", ""),
    ("BROADCAST_LT", 0x19, "a < b", "bool", ""), ("BROADCAST_LE", 0x1A, "a <= b", "bool", ""),
    ("BROADCAST_GT", 0x1B, "a > b", "bool", ""), ("BROADCAST_GE", 0x1C, "a >= b", "bool", ""),
    ("BROADCAST_AND", 0x1D, "logical a and b", "bool", ""), ("BROADCAST_OR", 0x1E, "logical a or b", "bool", ""),
    ("BROADCAST_FLOORDIV", 0x32, "floor(a / b) (ints stay ints)", None, ""),
    ("BROADCAST_TRUNCDIV", 0x33, "trunc(a / b), rounded toward zero (ints stay ints)", None, ""),
]


def _flags(f: str) -> dict:      # (an out-capable elementwise row may write over its input: in_place)
    return {"compiled": "fused" if "f" in f else "l1", "out": "o" in f, "in_place": "o" in f, "costly": "c" in f,
            "commutative": "s" in f}


for _n, _c, _d, _o, _f in _BINARY:
    _op(_n, _c, [], 2, 1, partial(S.binary, name=_n, out_dtype=_o), "elementwise",
        f"pop b, a; push {_d} with numpy broadcasting", **_flags(_f))

_op("WHERE", 0x1F, [], 3, 1, S.where, "elementwise", "pop b, a, cond; push where(cond, a, b)", compiled="l1")

# --- elementwise: unary ------------------------------------------------------------------
_UNARY = [
    ("NEG", 0x20, "-x", None, "fo"), ("ABS", 0x21, "|x|", None, "fo"), ("EXP", 0x22, "e**x", "float", "foc"),
    ("LOG", 0x23, "ln x", "float", "fo"), ("SQRT", 0x24, "sqrt x", "float", "fo"),
    ("RSQRT", 0x25, "1/sqrt x", "float", "fo"), ("TANH", 0x26, "tanh x", "float", "foc"),
    ("SIGMOID", 0x27, "1/(1+e**-x)", "float", "foc"), ("RELU", 0x28, "max(x, 0)", None, "fo"),
    ("GELU", 0x29, "x*Phi(x), exact (erf)", "float", "foc"),
    ("GELU_TANH", 0x2A, "x*Phi(x), tanh approximation", "float", "foc"), ("ERF", 0x2B, "erf x", "float", "foc"),
    ("RECIPROCAL", 0x2C, "1/x", "float", "fo"), ("LOGICAL_NOT", 0x2D, "not x", "bool", ""),
]
for _n, _c, _d, _o, _f in _UNARY:
    _op(_n, _c, [], 1, 1, partial(S.unary, name=_n, out_dtype=_o), "elementwise", f"pop x; push {_d}", **_flags(_f))

_op("CAST", 0x2E, ["dtype:const"], 1, 1, S.cast, "elementwise", "pop x; push x converted to dtype",
    compiled="fused")
_op("FILL", 0x2F, ["shape:const", "value:const", "dtype:const"], 0, 1, S.fill, "memory",
    "push a new tensor of shape filled with value", compiled="l1")

# --- matmul -------------------------------------------------------------------------------
_op("MATMUL", 0x30, ["transpose_a:const", "transpose_b:const"], 2, 1, S.matmul, "matmul",
    "pop b, a; push a @ b for 2-D tensors, optionally transposed (FUSED_MATMUL when an epilogue follows)",
    compiled="l1", out=True, fresh=True)
_op("BATCH_MATMUL", 0x31, ["transpose_a:const", "transpose_b:const"], 2, 1, S.batch_matmul, "matmul",
    "pop b, a; push batched a @ b over broadcast leading dims", compiled="l1", out=True, fresh=True)

# --- reductions and normalizations --------------------------------------------------------
for _n, _c, _o, _d in [("REDUCE_SUM", 0x38, None, "sum"), ("REDUCE_MEAN", 0x39, "float", "mean"),
                       ("REDUCE_MAX", 0x3A, None, "max"), ("REDUCE_MIN", 0x3B, None, "min")]:
    _op(_n, _c, ["axes:const", "keep_dims:const"], 1, 1, partial(S.reduce, name=_n, out_dtype=_o),
        "reduction", f"pop x; push the {_d} over axes (None: all)", compiled="l1", fresh=True)
_op("ARGMAX", 0x3C, ["axis:const", "keep_dims:const"], 1, 1, partial(S.argreduce, name="ARGMAX"),
    "reduction", "pop x; push the int32 index of the max along axis", compiled="l1", fresh=True)
_op("SOFTMAX", 0x3D, ["axis:const"], 1, 1, S.softmax, "reduction", "pop x; push softmax along axis", compiled="kernel",
    kernel="row", fresh=True)
_op("LOG_SOFTMAX", 0x3E, ["axis:const"], 1, 1, partial(S.softmax, name="LOG_SOFTMAX"), "reduction",
    "pop x; push log(softmax(x)) along axis", compiled="l1", fresh=True)
_op("LAYER_NORM", 0x3F, ["begin_norm_axis:const", "begin_params_axis:const", "epsilon:const"], 3, 1,
    S.layer_norm, "reduction", "pop beta, gamma, x; push (x-mean)/sqrt(var+eps)*gamma+beta", compiled="kernel",
    kernel="row", fresh=True)

# --- layout -------------------------------------------------------------------------------
_op("RESHAPE", 0x40, ["shape:const"], 1, 1, S.reshape, "layout",
    "pop x; push a view with the given shape (dims are exprs, -1 already resolved)", view=True, compiled="l1")
_op("TRANSPOSE", 0x41, ["perm:const"], 1, 1, S.transpose, "layout", "pop x; push x permuted", view=True, compiled="l1")
_op("EXPAND_DIMS", 0x42, ["axis:const"], 1, 1, S.expand_dims, "layout", "pop x; insert a dim of 1",
    view=True, compiled="l1")
_op("SQUEEZE", 0x43, ["axes:const"], 1, 1, S.squeeze, "layout", "pop x; drop dims of 1", view=True, compiled="l1")
_op("BROADCAST_TO", 0x44, ["shape:const"], 1, 1, S.broadcast_to, "layout", "pop x; broadcast to shape",
    view=True, compiled="l1")
_op("CONCAT", 0x45, ["n:count", "axis:const"], "n", 1, S.concat, "layout", "pop n tensors; join them along axis",
    compiled="l1", raw_operands=True)
_op("STACK", 0x46, ["n:count", "axis:const"], "n", 1, partial(S.concat, name="STACK"), "layout",
    "pop n tensors; stack them along a new axis", compiled="l1", raw_operands=True)
_op("SLICE", 0x47, ["index:const"], 1, 1, S.slice_, "layout", "pop x; push x[index] (basic indexing)",
    view=True, compiled="l1")

# --- convolution, pooling, gather (NCHW; pad is ("same",) or (top, bottom, left, right)) ------------
_op("CONV2D", 0x70, ["stride:const", "pad:const", "dilation:const", "group:const"], 2, 1, S.conv2d, "conv",
    "pop w [O, C/group, kh, kw], x [N, C, H, W]; push the cross-correlation [N, O, Ho, Wo]", compiled="l1",
    fresh=True)
_op("MAX_POOL2D", 0x71, ["kernel:const", "stride:const", "pad:const"], 1, 1, partial(S.pool2d, name="MAX_POOL2D"),
    "conv", "pop x [N, C, H, W]; push the max over each kernel window (padding never wins)", compiled="kernel",
    kernel="conv", fresh=True)
_op("AVG_POOL2D", 0x72, ["kernel:const", "stride:const", "pad:const", "count_pad:const"], 1, 1,
    partial(S.pool2d, name="AVG_POOL2D"), "conv",
    "pop x [N, C, H, W]; push the mean over each kernel window (padding counted when count_pad)", compiled="l1",
    fresh=True)
_op("ADAPTIVE_AVG_POOL2D", 0x73, ["size:const"], 1, 1, S.adaptive_pool2d, "conv",
    "pop x [N, C, H, W]; push [N, C, oh, ow], each the mean of its bin (PyTorch/MindSpore's bins)", compiled="l1",
    fresh=True)
_op("GATHER", 0x74, ["axis:const"], 2, 1, S.gather, "layout",
    "pop indices, x; push x's slices at the (int) indices along axis: x.shape[:axis]+idx.shape+x.shape[axis+1:]",
    compiled="l1", fresh=True)

# --- indexing and creation (model zoo) ----------------------------------------------------------
_op("ARANGE", 0x78, ["start:const", "stop:const", "step:const", "dtype:const"], 0, 1, S.arange, "layout",
    "push [start, start+step, ...) below stop (start and stop may be symbolic dims)", compiled="l1")
_op("CUMSUM", 0x79, ["axis:const", "exclusive:const", "reverse:const"], 1, 1, S.cumsum, "layout",
    "pop x; push the running sum along axis (exclusive: without the element itself; reverse: from the end)",
    compiled="l1")
_op("RESIZE", 0x7A, ["out_size:const", "scale:const", "mode:const", "align_corners:const"], 1, 1, S.resize, "conv",
    "pop x [N, C, H, W]; push it resized to out_size (or H, W times the int scale) by nearest or bilinear "
    "sampling (PyTorch/MindSpore's source coordinates; align_corners for bilinear, and for nearest rounding "
    "dst * (in - 1) / (out - 1); bilinear_asymmetric: the source dst * in / out, ResizeBilinear's default; "
    "nearest_half_pixel: floor((dst + 0.5) * in / out))", compiled="l1", fresh=True)

# --- boolean-mask indexing (issue 16): a result whose first dim depends on the data ------------------
_op("BOOL_INDEX", 0x7E, ["symbol:name"], 2, 1, S.bool_index, "layout",
    "pop mask, x; push x[mask] (mask: bools of x's leading dims): [K] + x.shape[mask.ndim:], K the count of "
    "True, a fresh symbol names[symbol] bound when it runs", compiled="l1", binds=True)
_op("BIND_DIM", 0x7F, ["symbol:name", "axis:const"], 1, 1, S.bind_dim, "memory",
    "pop x; push x, binding the fresh symbol names[symbol] to its dim axis (a dim the data decided in a sub-Cell)",
    binds=True)

# --- conformance (issue 21): MindSpore's math, bitwise and band ops -------------------------------
_CONF_UNARY = [
    ("SIN", 0x90, "sin x", "float", "fc"), ("COS", 0x91, "cos x", "float", "fc"), ("TAN", 0x92, "tan x", "float", ""),
    ("ASIN", 0x93, "arcsin x", "float", ""), ("ACOS", 0x94, "arccos x", "float", ""),
    ("ATAN", 0x95, "arctan x", "float", ""),
    ("SINH", 0x96, "sinh x", "float", ""), ("COSH", 0x97, "cosh x", "float", ""),
    ("ASINH", 0x98, "arcsinh x", "float", ""),
    ("ACOSH", 0x99, "arccosh x", "float", ""), ("ATANH", 0x9A, "arctanh x", "float", ""),
    ("FLOOR", 0x9B, "floor x (ints stay ints)", None, "f"), ("CEIL", 0x9C, "ceil x (ints stay ints)", None, "f"),
    ("ROUND", 0x9D, "x rounded half to even (ints stay ints)", None, "f"),
    ("TRUNC", 0x9E, "x rounded toward zero (ints stay ints)", None, "f"),
    ("SIGN", 0x9F, "-1, 0 or 1 (NaN stays)", None, ""),
    ("ISNAN", 0xA0, "x is NaN", "bool", ""), ("ISINF", 0xA1, "x is +-inf", "bool", ""),
    ("ISFINITE", 0xA2, "x is neither NaN nor +-inf", "bool", ""), ("SQUARE", 0xA3, "x * x", None, "f"),
    ("LOG1P", 0xA4, "ln(1 + x)", "float", ""), ("EXPM1", 0xA5, "e**x - 1", "float", ""),
    ("ERFC", 0xA6, "1 - erf x", "float", ""),
    ("INVERT", 0xA7, "bitwise not (bool: logical not)", None, ""),
    ("SOFTPLUS", 0xA8, "ln(1 + e**x), without overflow", "float", ""),
    ("ERFINV", 0xAB, "the inverse of erf (+-inf at +-1, NaN outside [-1, 1])", "float", ""),
]
for _n, _c, _d, _o, _f in _CONF_UNARY:
    _op(_n, _c, [], 1, 1, partial(S.unary, name=_n, out_dtype=_o), "elementwise", f"pop x; push {_d}", **_flags(_f))
_CONF_BINARY = [
    ("BROADCAST_BITAND", 0xB0, "a & b bitwise (ints and bools)", None, ""),
    ("BROADCAST_BITOR", 0xB1, "a | b bitwise (ints and bools)", None, ""),
    ("BROADCAST_BITXOR", 0xB2, "a ^ b bitwise (ints and bools)", None, ""),
    ("BROADCAST_XOR", 0xB3, "logical a xor b", "bool", ""), ("BROADCAST_ATAN2", 0xB4, "arctan2(a, b)", "float", ""),
    ("BROADCAST_MOD", 0xB5, "a - floor(a / b) * b, the sign of b (ints stay ints)", None, ""),
]
for _n, _c, _d, _o, _f in _CONF_BINARY:
    _op(_n, _c, [], 2, 1, partial(S.binary, name=_n, out_dtype=_o), "elementwise",
        f"pop b, a; push {_d} with numpy broadcasting", **_flags(_f))
_op("MATRIX_BAND_PART", 0xB8, ["lower:const", "upper:const"], 1, 1, S.band_part, "layout",
    "pop x [..., M, N]; push x with zeros outside the band i - j <= lower, j - i <= upper (-1: no limit)", compiled="l1")
for _n, _c, _o, _d in [("REDUCE_PROD", 0xB9, None, "product"), ("REDUCE_ALL", 0xBA, "bool", "logical and"),
                       ("REDUCE_ANY", 0xBB, "bool", "logical or")]:
    _op(_n, _c, ["axes:const", "keep_dims:const"], 1, 1, partial(S.reduce, name=_n, out_dtype=_o),
        "reduction", f"pop x; push the {_d} over axes (None: all)", compiled="l1")
_op("TENSOR_SCATTER", 0xBD, ["mode:const"], 3, 1, S.tensor_scatter, "layout",
    "pop updates, indices [..., K], x; push x with x[indices] combined with updates by mode "
    "(update, add, sub, mul, div, max, min); an index out of range raises", compiled="l1")
_op("GATHER_ND", 0xBE, [], 2, 1, S.gather_nd, "layout",
    "pop indices [..., K], x; push x[indices] over x's first K dims: indices.shape[:-1] + x.shape[K:]", compiled="l1")
_op("GATHER_D", 0xBF, ["dim:const"], 2, 1, S.gather_d, "layout",
    "pop index, x; push take_along_axis(x, index, dim) (index has x's rank)", compiled="l1")
_op("ARGSORT", 0xA9, ["axis:const", "descending:const"], 1, 1, S.argsort, "reduction",
    "pop x; push the int32 indices that sort x along axis (stable: equal values keep their order; NaN last)", compiled="l1")
_op("UNSORTED_SEGMENT", 0xAA, ["num_segments:const", "mode:const"], 2, 1, S.unsorted_segment, "reduction",
    "pop ids, x; push [num_segments, ...]: row k combines (sum, prod, max, min) the rows of x whose id is k; "
    "an empty segment holds the combination's identity (max: the dtype's lowest), ids outside are dropped "
    "(max, min: an id >= num_segments raises)", compiled="l1")
_op("SCATTER_ELEMENTS", 0xAC, ["axis:const", "reduction:const"], 3, 1, S.scatter_elements, "layout",
    "pop updates, indices, x; push x with x[..., indices[i], ...] (along axis) set to, or for reduction 'add' "
    "plus, updates[i]; indices and updates have one shape, of x's rank", compiled="l1")
_op("ARGMIN", 0xBC, ["axis:const", "keep_dims:const"], 1, 1, partial(S.argreduce, name="ARGMIN"),
    "reduction", "pop x; push the int32 index of the min along axis", compiled="l1", fresh=True)

# --- side effects (issue 21): MindSpore's in-place updates of a Parameter (Assign, AssignAdd,
# ScatterNdAdd on a Parameter, ...). The new value is computed by pure rows; this row installs it.
_op("ASSIGN_PARAM", 0xF0, ["attr:name"], 1, 1, S.assign_param, "memory",
    "pop v; the Cell's Parameter names[attr] := a copy of v (same shape and dtype; its data version bumps); "
    "push its new value", effect="param")

# --- complex numbers (issue 21): numpy's at L1; the tiers' planners take float32/float64 only, so
# complex values never reach a compiled kernel
for _n, _c, _d, _o in [("REAL", 0xF1, "the real part (a real x: x)", None),
                       ("IMAG", 0xF2, "the imaginary part (a real x: 0)", None),
                       ("CONJ", 0xF3, "the complex conjugate (a real x: x)", None),
                       ("ANGLE", 0xF4, "the argument atan2(Im x, Re x)", "float")]:
    _op(_n, _c, [], 1, 1, partial(S.unary, name=_n, out_dtype=_o), "elementwise", f"pop x; push {_d}",
        compiled="l1")
_op("COMPLEX", 0xF5, [], 2, 1, partial(S.binary, name="COMPLEX", out_dtype="complex"), "elementwise",
    "pop imag, real; push real + 1j * imag with numpy broadcasting (float64 parts: complex128)", compiled="l1")

# --- conformance (issue 21, missing APIs): effects and data-dependent sizes ---------------------
# RANDOM and PRINT have effects (OpInfo.effect): they run once per execution, in order, at every tier.
# Bytes 0xE0-0xED and 0xEF, 0xDB-0xDF (0xEE stays unused: tests/vm/test_binary.py plants it as an unknown opcode).
_op("RANDOM", 0xE0, ["n:count", "dist:const", "attrs:const", "seed:const"], "n", 1, SM.random, "random",
    "pop n inputs; push a draw from dist (normal, uniform, poisson, shuffle, dropout, ... see "
    "interp/kernels_more.py) made by the generator of seed (seed, seed2, stream); dims read from a shape "
    "tensor are data-dependent", compiled="l1", effect="random")
_op("PRINT", 0xE1, ["n:count", "parts:const"], "n", 0, SM.print_, "control",
    "pop n values; write the template parts to stdout, each None replaced by the next value (the parts hold the "
    "separators and the end)",
    effect="io")
_op("BIND_DIMS", 0xDB, ["dims:const"], 1, 1, SM.bind_dims, "control",
    "pop v, push it back with its data-dependent dims bound to symbols: dims = ((symbol, item, dim), ...), item -1 "
    "for a tensor, else the index in a tuple (issue 21; later operands may read the symbols)")
_op("UNIQUE", 0xE2, ["pad_value:const"], 1, 1, SM.unique, "layout",
    "pop x; push (its distinct values in order of first appearance [u], each element's index among them "
    "(int32, x's shape)); u is data-dependent, unless pad_value is a number: then x is 1-D and the values "
    "are padded with it to x's length", compiled="l1")
_op("CUMULATE", 0xE3, ["axis:const", "mode:const", "exclusive:const", "reverse:const"], 1, 1, SM.cumulate, "layout",
    "pop x; push the running product (mode prod) along axis, or for min / max the tuple (running values, int64 "
    "index of each: the last of equal values; NaN sticks with its index)", compiled="l1")
_op("LINALG", 0xE4, ["n:count", "fn:const", "attrs:const"], "n", 1, SM.linalg, "matmul",
    "pop n matrices [..., M, N]; push fn of them: solve (a x = b), cholesky, cholesky_inverse, pinv, lstsq, inv",
    compiled="l1")
_op("MASKED_SELECT", 0xE5, [], 2, 1, SM.masked_select, "layout",
    "pop mask, x; push the 1-D elements of x (broadcast with mask) where mask is True; its length is data-dependent",
    compiled="l1")
_op("CROP_AND_RESIZE", 0xE6, ["crop_size:const", "method:const", "extrapolation_value:const"], 3, 1,
    SM.crop_and_resize, "conv",
    "pop box_index [N], boxes [N, 4] (y1, x1, y2, x2 normalized), image [B, H, W, C]; push float32 [N, h, w, C]: "
    "each box's crop sampled (bilinear or nearest) at crop_size, extrapolation_value outside the image",
    compiled="l1")
_op("POOL_ND", 0xE7, ["window:const"], 1, 1, SM.pool_nd, "conv",
    "pop x [N, C, *spatial]; push the max or mean over each window (argmax: the tuple (max, int32 flat index of "
    "the first max over (C, *spatial), as TensorFlow's)): window = (mode, kernel, stride, pads (before and after per "
    "spatial dim, or ('same',)), count_pad, ceil_mode) for 1, 2 or 3 spatial dims",
    compiled="l1")
_op("ADAPTIVE_MAX_POOL", 0xE8, ["bins:const", "with_indices:const"], 1, 1, SM.adaptive_max_pool, "conv",
    "pop x [N, C, *spatial]; push the max of each of bins (None: the input's size) PyTorch-style bins; with_indices: "
    "(values, int64 flat index of each max within its spatial plane)", compiled="l1")
_op("BROADCAST_NEXTAFTER", 0xE9, [], 2, 1, partial(S.binary, name="BROADCAST_NEXTAFTER", out_dtype="float"),
    "elementwise", "pop b, a; push the next float after a toward b (numpy's nextafter) with numpy broadcasting",
    compiled="l1")
_op("POPULATION_COUNT", 0xEA, [], 1, 1, SM.population_count, "elementwise",
    "pop x (ints); push the number of 1 bits of each element (uint8)", compiled="l1")
_op("MATRIX_DIAG", 0xEB, ["n:count", "mode:const", "align:const"], "n", 1, SM.matrix_diag, "layout",
    "diag: pop padding_value, num_cols, num_rows, k, diagonals; push the matrices with those diagonals (TF's "
    "MatrixDiagV3); part: pop padding_value, k, x; push the diagonals k[0]..k[1] of x (MatrixDiagPartV3). align "
    "places the shorter diagonals (RIGHT_LEFT ...); sizes read from tensors are data-dependent", compiled="l1")
_op("PS_ROI_POOLING", 0xEC, ["spatial_scale:const", "group_size:const", "output_dim:const"], 2, 1,
    SM.ps_roi_pooling, "conv",
    "pop rois [B, 5, R] (batch index, x1, y1, x2, y2), x [B*R, output_dim*g*g, H, W]; push [B*R, output_dim, g, g]: "
    "position-sensitive ROI average pooling (R-FCN), bin (i, j) of channel c from input channel (c*g + i)*g + j",
    compiled="l1")
_op("NMS_WITH_MASK", 0xED, ["iou_threshold:const"], 1, 1, SM.nms_with_mask, "conv",
    "pop boxes [N, 5] (x1, y1, x2, y2, score); push (the boxes sorted by score, highest first; their int32 indices "
    "in the input; bool mask of the boxes greedy non-maximum suppression keeps: IOU > iou_threshold suppresses)",
    compiled="l1")
_op("LGAMMA", 0xDF, [], 1, 1, partial(S.unary, name="LGAMMA", out_dtype="float"), "elementwise",
    "pop x; push ln|gamma(x)| (+inf at the poles)", compiled="l1")
_op("PAD_V3", 0xEF, ["n:count", "mode:const", "contiguous:const"], "n", 1, SM.pad_v3, "layout",
    "pop [value], paddings (1-D ints, read when it runs), x; push x padded on its last dims, pairs from the last "
    "dim backwards (contiguous: (begin, end) pairs, else all begins then all ends; negative pads crop) in mode "
    "constant (value), reflect, edge or circular; the padded dims are data-dependent", compiled="l1")
_op("CONV_ND", 0xDE, ["conv:const"], 2, 1, SM.conv_nd, "conv",
    "pop w [O, C/group, *k], x [N, C, *spatial]; push the cross-correlation [N, O, *out] for 1 or 3 spatial dims: "
    "conv = (stride, pads (before and after per dim, or ('same',)), dilation, group)", compiled="l1")
_op("CTC_GREEDY_DECODER", 0xDD, ["merge_repeated:const"], 2, 1, SM.ctc_greedy_decoder, "reduction",
    "pop sequence_length [B], inputs [T, B, K]; push TF's greedy CTC decoding: (indices [u, 2] int64, values [u] "
    "int64, dense shape [2] int64, log_probability [B, 1]); the blank is class K-1, u is data-dependent",
    compiled="l1")
_op("NO_REPEAT_NGRAM", 0xDC, ["ngram_size:const"], 2, 1, SM.no_repeat_ngram, "layout",
    "pop log_probs [..., V], state_seq [..., L] (ints); push log_probs with -FLT_MAX at each token that would "
    "repeat an n-gram of the sequence (the token after an earlier copy of its last n-1 tokens)", compiled="l1")

# --- fused (produced by the fusion pass, jit/fuse.py; the interpreter runs them too) ---------
# A fused instruction carries its expression as a program (postfix tuple of nodes: ("in", k),
# ("c", value) or (OPNAME, *operands)); the disassembler names it after its parts:
# FUSED_ADD_RELU_CAST, FUSED_MATMUL_RELU, FUSED_MATMUL_BIAS_GELU ...
_op("FUSED_ELEMENTWISE", 0x60, ["program:const", "n:count"], "n", 1, S.fused_elementwise, "fused",
    "pop n inputs; push the elementwise program over them (one pass, no temporaries)", compiled="kernel",
    kernel="elementwise", in_place=True, raw_operands=True)
_op("FUSED_MATMUL", 0x61, ["transpose_a:const", "transpose_b:const", "batched:const", "program:const", "n:count"],
    "n", 1, S.fused_matmul, "fused",
    "pop n inputs (a, b, extras); push program(a @ b, extras...) applied to each block of the product", compiled="kernel",
    kernel="matmul", fresh=True, raw_operands=True)

# --- issue 18: batch norm as one op, and the convolution with its epilogue (FUSED_CONV_BN_RELU) ---------
_op("BATCH_NORM", 0xC0, ["epsilon:const"], 5, 1, S.batch_norm, "reduction",
    "pop var, mean, beta, gamma, x; push inference batch norm over axis 1: "
    "(x - mean) * gamma / sqrt(var + epsilon) + beta (frozen statistics)", compiled="l1", out=True, fresh=True)
_op("FUSED_CONV", 0x62, ["stride:const", "pad:const", "dilation:const", "group:const", "bn:const", "program:const",
                         "n:count"], "n", 1, S.fused_conv, "fused",
    "pop n inputs (x, w, [gamma, beta, mean, var when bn is an epsilon], extras); push program(conv, extras...) "
    "where conv is CONV2D(x, w) with the batch norm folded into w and a bias (once per Parameter array)",
    compiled="kernel", kernel="conv", fresh=True, raw_operands=True)

# --- issue 18: attention as one instruction (compiler/attention.py makes it) -----------------------
_op("FUSED_ATTENTION", 0x6A, ["program:const", "layout:const", "n:count"], "n", 1, _fused_attention_rule, "fused",
    "pop n inputs (q, k, extras, v); push softmax(program(q @ k^T, extras...)) @ v over the last axis (the "
    "program scales and masks the scores), transposed by layout when it is a permutation (else ())", compiled="kernel",
    kernel="attention", keeps_buffers=True)

# --- issue 18: the residual add and the layer norm after it as one row kernel (compiler/norm.py makes it) --
_op("FUSED_ADD_LAYER_NORM", 0x6C, ["begin_norm_axis:const", "begin_params_axis:const", "epsilon:const"], 4, 1,
    _fused_add_layer_norm_rule, "fused", "pop beta, gamma, b, a; push LAYER_NORM(a + b, gamma, beta) (one pass "
    "writes a + b into the output row, the others normalize it there)", compiled="kernel", kernel="row")
_op("FUSED_RMS_NORM", 0x6D, ["prologue:const", "scale:const", "program:const"], 2, 1, _fused_rms_norm_rule, "fused",
    "pop w, x; push program(x, r, w) where r = scale(mean(prologue(x)) over the last axis, kept): RMSNorm's "
    "x * rsqrt(mean(x^2) + eps) * w as one row kernel", compiled="kernel", kernel="row")


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
FUSABLE = frozenset(r.name for r in TABLE if r.compiled == "fused")       # may join a FUSED_* program
JITABLE = frozenset(r.name for r in TABLE if r.compiled == "kernel")      # the tier manager compiles them
KERNEL_KINDS = {r.name: r.kernel for r in TABLE if r.kernel}                 # jit-able row -> its kernel's kind
MATMULS = frozenset(r.name for r in TABLE if r.kind == "matmul")          # start a FUSED_MATMUL
LEAVES = frozenset(r.name for r in TABLE if r.leaf)
COSTLY = frozenset(r.name for r in TABLE if r.costly)
OUT_CAPABLE = frozenset(r.name for r in TABLE if r.out)
FRESH = frozenset(r.name for r in TABLE if r.fresh)                      # results never alias an input
IN_PLACE = frozenset(r.name for r in TABLE if r.in_place)                # may write over a dying input
EFFECTS = frozenset(r.name for r in TABLE if r.effect)                   # change state: run in order, once
assert not EFFECTS & (FUSABLE | JITABLE | LEAVES | OUT_CAPABLE | VIEWS), "a row with an effect must run as is"
assert not FRESH & VIEWS, "a view is never fresh memory"


def fingerprint() -> bytes:
    """16 bytes that change whenever a row's name, byte or operands change."""
    h = hashlib.sha256()
    for r in TABLE:
        h.update(f"{r.code:02x}:{r.name}:{','.join(k for _, k in r.operands)};".encode())
    return h.digest()[:16]


FINGERPRINT = fingerprint()
