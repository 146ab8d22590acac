"""What each constant operand of an instruction must be, by operand name.

The opcode table names each operand and its kind; for a ``const`` operand the
verifier also checks the value in the constant pool before a shape rule, the
interpreter or the compiler uses it (a file could hold an array where MATMUL
wants a bool). ``CONST_OPERANDS`` maps an operand name (or ``OP.operand`` where
one instruction differs) to a check and what it expects; a test checks every
const operand of the table has an entry.
"""

from __future__ import annotations

import builtins

from .. import dtype as dt
from .opcodes import BY_NAME
from .shapes import RESIZE_MODES
from .symbolic import Expr, Pred


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _ints(v) -> bool:
    return isinstance(v, tuple) and all(_is_int(x) for x in v)


def _number(v) -> bool:
    return isinstance(v, (int, float))


def _positive_pair(v) -> bool:
    return isinstance(v, tuple) and len(v) == 2 and all(_is_int(x) and x > 0 for x in v)


def _pad(v) -> bool:
    return v == ("same",) or (isinstance(v, tuple) and len(v) == 4 and all(_is_int(x) and x >= 0 for x in v))


def _exception_name(v) -> bool:
    exc = getattr(builtins, v, None) if isinstance(v, str) else None
    return isinstance(exc, type) and issubclass(exc, Exception)


def _slice_spec(v) -> bool:
    def item(s):
        if not isinstance(s, tuple) or not s:
            return False
        if s[0] == "i":
            return len(s) == 2 and _is_int(s[1])
        if s[0] == "s":         # (bounds may be symbolic dims: x[:, :x.shape[1]])
            return len(s) == 4 and all(x is None or _is_int(x) or isinstance(x, Expr) for x in s[1:])
        return s in (("n",), ("e",))
    return isinstance(v, tuple) and all(item(s) for s in v)


def _program(v) -> bool:
    """A fused program: ("in", k) | ("c", number) | (ELEMENTWISE_OP, *its constant operands)."""
    if not isinstance(v, tuple) or not v:
        return False
    for node in v:
        if not isinstance(node, tuple) or not node or not isinstance(node[0], str):
            return False
        if node[0] in ("in", "c"):
            if len(node) != 2 or not (_is_int(node[1]) and node[1] >= 0 if node[0] == "in" else _number(node[1])):
                return False
            continue
        op = BY_NAME.get(node[0])
        if op is None or op.kind != "elementwise" or len(node) != 1 + len(op.operands):
            return False
        if any(const_problem(op.name, oname, x) for (oname, _), x in zip(op.operands, node[1:])):
            return False
    return True


# What each constant operand must be, by operand name ("OP.operand" where one op differs);
# a test checks every const operand of the table has an entry.
CONST_OPERANDS = {
    "value": (lambda v: True, "a value"),          # LOAD_CONST: typed by the rule (type_of_const)
    "FILL.value": (_number, "a number"),
    "expr": (lambda v: isinstance(v, (Expr, Pred)), "a symbolic expression or predicate"),
    "SET_SYM.expr": (lambda v: isinstance(v, Expr), "a symbolic integer expression"),
    "pred": (lambda v: isinstance(v, Pred), "a predicate"),
    "device": (lambda v: (_is_int(v) and v >= 0) or isinstance(v, str), "a device id"),
    "stream": (lambda v: (_is_int(v) and v >= 0) or isinstance(v, str), "a stream id"),
    "dtype": (lambda v: isinstance(v, dt.DType), "a dtype"),
    "shape": (lambda v: isinstance(v, tuple) and all(isinstance(d, Expr) or (_is_int(d) and d >= 0) for d in v),
              "a tuple of dims (ints >= 0 or symbolic)"),
    "transpose_a": (lambda v: isinstance(v, bool), "a bool"),
    "transpose_b": (lambda v: isinstance(v, bool), "a bool"),
    "keep_dims": (lambda v: isinstance(v, bool), "a bool"),
    "batched": (lambda v: isinstance(v, bool), "a bool"),
    "axes": (lambda v: v is None or _is_int(v) or _ints(v), "None, an int or a tuple of ints"),
    "axis": (lambda v: v is None or _is_int(v), "an int (or None)"),
    "begin_norm_axis": (_is_int, "an int"),
    "begin_params_axis": (_is_int, "an int"),
    "epsilon": (lambda v: _number(v) and not isinstance(v, bool), "a number"),
    "perm": (_ints, "a tuple of ints"),
    "index": (_slice_spec, "a slice spec: a tuple of ('i', k), ('s', start, stop, step), ('n',), ('e',)"),
    # (model zoo) ARANGE, CUMSUM
    "start": (lambda v: isinstance(v, Expr) or (_number(v) and not isinstance(v, bool)), "a number or a symbolic dim"),
    "stop": (lambda v: isinstance(v, Expr) or (_number(v) and not isinstance(v, bool)), "a number or a symbolic dim"),
    "step": (lambda v: _number(v) and not isinstance(v, bool) and v != 0, "a non-zero number"),
    "exclusive": (lambda v: isinstance(v, bool), "a bool"),
    "reverse": (lambda v: isinstance(v, bool), "a bool"),
    "program": (_program, "a fused elementwise program"),
    "bn": (lambda v: v is None or (_number(v) and not isinstance(v, bool))
           or (isinstance(v, tuple) and len(v) == 2 and v[0] == "bias" and _number(v[1]) and not isinstance(v[1], bool)),
           "None, a batch norm epsilon or ('bias', epsilon)"),
    "exc": (_exception_name, "the name of a built-in exception"),
    "message": (lambda v: isinstance(v, tuple) and all(isinstance(x, (str, Expr, Pred)) for x in v),
                "a tuple of strings and symbolic values"),
    "stride": (_positive_pair, "a pair of positive ints"),
    "dilation": (_positive_pair, "a pair of positive ints"),
    "kernel": (_positive_pair, "a pair of positive ints"),
    "pad": (_pad, "('same',) or 4 ints >= 0"),
    "group": (lambda v: _is_int(v) and v > 0, "a positive int"),
    "count_pad": (lambda v: isinstance(v, bool), "a bool"),
    "out_size": (lambda v: v is None or (isinstance(v, tuple) and len(v) == 2 and
                                         all(isinstance(d, Expr) or (_is_int(d) and d > 0) for d in v)),
                 "None or a pair of positive ints or symbolic dims"),
    "scale": (lambda v: v is None or (isinstance(v, tuple) and len(v) == 2 and all(_is_int(d) and d > 0 for d in v)),
              "None or a pair of positive ints"),
    "RESIZE.mode": (lambda v: v in RESIZE_MODES, f"one of {RESIZE_MODES}"),
    "align_corners": (lambda v: isinstance(v, bool), "a bool"),
    # conformance ops (issue 21)
    "lower": (_is_int, "an int (-1: no limit)"),
    "upper": (_is_int, "an int (-1: no limit)"),
    "TENSOR_SCATTER.mode": (lambda v: v in ("update", "add", "sub", "mul", "div", "max", "min"),
                            "one of update, add, sub, mul, div, max, min"),
    "UNSORTED_SEGMENT.mode": (lambda v: v in ("sum", "prod", "max", "min"), "one of sum, prod, max, min"),
    "dim": (_is_int, "an int"),
    "descending": (lambda v: isinstance(v, bool), "a bool"),
    "num_segments": (lambda v: _is_int(v) and v >= 0, "an int >= 0"),
    "reduction": (lambda v: v in ("none", "add"), "'none' or 'add'"),
    "size": (lambda v: isinstance(v, tuple) and len(v) == 2 and all(x is None or (_is_int(x) and x > 0) for x in v),
             "a pair of positive ints or None"),
    # missing APIs and random ops (issue 21): RANDOM, PRINT
    "dist": (lambda v: v in _random_dists(), "a distribution name of RANDOM"),
    "attrs": (lambda v: isinstance(v, tuple), "a tuple of the distribution's attributes"),
    "seed": (lambda v: isinstance(v, tuple) and len(v) == 3 and all(isinstance(x, Expr) or (_is_int(x) and x >= 0)
                                                                    for x in v[:2]) and _is_int(v[2]) and v[2] >= 0,
             "(seed, seed2, stream): ints >= 0 (the seeds may be symbolic ints)"),
    "pad_value": (lambda v: v is None or isinstance(v, Expr) or (_number(v) and not isinstance(v, bool)),
                  "None, a number or a symbolic int"),
    "CUMULATE.mode": (lambda v: v in ("prod", "min", "max"), "one of prod, min, max"),
    "fn": (lambda v: v in _linalg_fns(), "a LINALG function name"),
    "crop_size": (lambda v: isinstance(v, tuple) and len(v) == 2 and all(_is_int(d) and d > 0 for d in v),
                  "a pair of positive ints"),
    "method": (lambda v: v in ("bilinear", "nearest"), "'bilinear' or 'nearest'"),
    "extrapolation_value": (lambda v: _number(v) and not isinstance(v, bool), "a number"),
    "window": (lambda v: isinstance(v, tuple) and len(v) == 6 and v[0] in ("max", "avg", "argmax"),
               "(mode, kernel, stride, pads, count_pad, ceil_mode)"),
    "bins": (lambda v: isinstance(v, tuple) and 1 <= len(v) <= 3 and all(x is None or (_is_int(x) and x > 0) for x in v),
             "1 to 3 positive ints or None"),
    "with_indices": (lambda v: isinstance(v, bool), "a bool"),
    "MATRIX_DIAG.mode": (lambda v: v in ("diag", "part"), "'diag' or 'part'"),
    "align": (lambda v: v in ("RIGHT_LEFT", "LEFT_RIGHT", "LEFT_LEFT", "RIGHT_RIGHT"),
              "RIGHT_LEFT, LEFT_RIGHT, LEFT_LEFT or RIGHT_RIGHT"),
    "spatial_scale": (lambda v: _number(v) and not isinstance(v, bool) and v > 0, "a positive number"),
    "group_size": (lambda v: _is_int(v) and v > 0, "a positive int"),
    "output_dim": (lambda v: _is_int(v) and v > 0, "a positive int"),
    "iou_threshold": (lambda v: _number(v) and not isinstance(v, bool) and 0 <= v <= 1, "a number in [0, 1]"),
    "PAD_V3.mode": (lambda v: v in ("constant", "reflect", "edge", "circular"), "constant, reflect, edge or circular"),
    "contiguous": (lambda v: isinstance(v, bool), "a bool"),
    "conv": (lambda v: isinstance(v, tuple) and len(v) == 4 and _is_int(v[3]) and v[3] > 0,
             "(stride, pads, dilation, group)"),
    "merge_repeated": (lambda v: isinstance(v, bool), "a bool"),
    "ngram_size": (lambda v: _is_int(v) and v > 0, "a positive int"),
    "dims": (lambda v: isinstance(v, tuple) and all(isinstance(d, tuple) and len(d) == 3 and isinstance(d[0], str)
                                                    and d[0] and _is_int(d[1]) and _is_int(d[2]) and d[2] >= 0
                                                    for d in v),
             "a tuple of (symbol, item, dim)"),
    "parts": (lambda v: isinstance(v, tuple) and all(x is None or isinstance(x, str) for x in v),
              "a tuple of strings and None (a value's place)"),
}
CONST_OPERANDS["FUSED_ATTENTION.layout"] = (lambda v: isinstance(v, tuple) and (v == () or sorted(v) == list(range(len(v)))),
                                            "() or a permutation of the context's axes")       # (issue 18)


def _linalg_fns():
    from .shapes_more import LINALG_FNS

    return LINALG_FNS


def _random_dists():
    from .shapes_more import DISTS

    return DISTS


def const_problem(opname: str, oname: str, v) -> str | None:
    check, what = CONST_OPERANDS.get(f"{opname}.{oname}") or CONST_OPERANDS.get(oname, (None, None))
    if check is None:
        return f"operand {oname!r} has no type check (add it to operands.CONST_OPERANDS)"
    return None if check(v) else f"operand {oname} must be {what}, found {_short(v)}"


def _short(v) -> str:
    r = repr(v)
    return r if len(r) <= 60 else r[:57] + "..."

# (issue 18) FUSED_RMS_NORM's other two programs
CONST_OPERANDS["FUSED_RMS_NORM.prologue"] = CONST_OPERANDS["FUSED_RMS_NORM.scale"] = CONST_OPERANDS["program"]
