"""The disassembler: ``records(code)`` yields one ``Instruction`` per instruction;
text (``dump``), JSON (``to_json``) and the debugger's view are formatters over
those records. ``to_json``/``from_json`` also serve as the assembler: a program
written as JSON (or produced by ``to_json``) assembles back to an equal Code.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import dtype as dt
from ..errors import BytecodeError
from .code import Code, Instr, Loc
from .symbolic import Expr, Pred, fmt_shape
from .tables import code_from_data, instr_from_record, loc_from_data, type_from_data, value_from_data
from .types import NoneType, ScalarType, ShapeError, TensorType, TupleType

__all__ = ["Instruction", "code_from_data", "code_to_data", "dump", "from_json", "loc_from_data", "loc_to_data",
           "records", "to_json", "type_from_data", "type_to_data", "value_from_data", "value_to_data"]


@dataclass(frozen=True)
class Instruction:
    offset: int
    op: str
    args: tuple          # decoded operand values
    argrepr: str
    stack_depth: int     # operand-stack depth after the instruction (-1 if unreachable)
    loc: Loc
    parts: tuple         # ((op, Loc), ...) for fused instructions
    out_type: str        # static type pushed (or "")
    index: int = 0


def display_name(ins: Instr) -> str:
    """Fused instructions are named after their parts: FUSED_ADD_RELU_CAST, FUSED_MATMUL_BIAS_GELU,
    FUSED_CONV_BN_ADD_RELU."""
    if ins.op.kind != "fused" or not ins.parts:
        return ins.op.name
    names = []
    for k, (p, _loc) in enumerate(ins.parts):
        short = p.replace("BROADCAST_", "")
        if p == "BATCH_MATMUL":
            short = "BMM"
        if short == "ADD" and k == 1 and ins.op.name == "FUSED_MATMUL":
            short = "BIAS"
        short = {"CONV2D": "CONV", "BATCH_NORM": "BN"}.get(short, short)      # (issue 18: FUSED_CONV_BN_RELU)
        names.append(short)
    return "FUSED_" + "_".join(names)


def argrepr(code: Code, ins: Instr) -> str:
    parts = []
    for (oname, kind), raw, val in zip(ins.op.operands, ins.args, code.decode_args(ins)):
        if kind == "local":
            parts.append(f"{code.varnames[raw]}")
        elif kind == "label":
            parts.append(f"0x{raw:04x}")
        elif kind == "callee":
            parts.append(f"self.{val[0]} -> {val[1].name}")
        elif kind == "count":
            parts.append(str(raw))
        elif kind == "name":
            parts.append(str(val))
        elif oname in ("program", "prologue", "scale"):      # (issue 18: FUSED_RMS_NORM has three)
            parts.append(program_repr(val))
        elif oname == "batched":
            continue
        else:
            parts.append(_const_repr(val, oname))
    return " ".join(parts)


def program_repr(program) -> str:
    """A fused program as an expression: relu((in0 + in1))."""
    from .program import evaluate

    def op(row, args, operands):
        name = row.name.replace("BROADCAST_", "")
        sym = {"ADD": "+", "SUB": "-", "MUL": "*", "DIV": "/", "POW": "**"}.get(name)
        if sym and len(args) == 2:
            return f"({args[0]} {sym} {args[1]})"
        extra = "".join(f", {_const_repr(x, '')}" for x in operands)
        return f"{name.lower()}({', '.join(args)}{extra})"

    try:
        return evaluate(program, lambda k: f"in{k}", repr, op)
    except ShapeError:
        return "?"


def _const_repr(v, oname: str) -> str:
    if isinstance(v, Pred):
        return f"({v})"
    if isinstance(v, Expr):
        return str(v)
    if isinstance(v, tuple) and oname in ("shape",):
        return fmt_shape(v)
    if isinstance(v, np.ndarray):
        return f"array{list(v.shape)}:{v.dtype}"
    if isinstance(v, dt.DType):     # dumps spell dtypes as numpy does, like Tensor[float32, ...]
        return v.name
    if isinstance(v, bool) and oname in ("transpose_a", "transpose_b", "keep_dims"):
        return f"{oname}={v}"
    if isinstance(v, tuple):
        return "(" + ", ".join(_const_repr(x, "") for x in v) + ("," if len(v) == 1 else "") + ")"
    return repr(v) if isinstance(v, str) else str(v)


def records(code: Code):
    for i, ins in enumerate(code.instrs):
        st = code.stack_types[i] if i < len(code.stack_types) else None
        args = code.decode_args(ins)
        if st is None:
            depth, out = -1, ""
        else:
            depth = len(st) - ins.op.n_pops(args) + ins.op.n_pushes(args)
            nxt = code.stack_types[i + 1] if i + 1 < len(code.stack_types) else None
            out = str(nxt[-1]) if (ins.op.n_pushes(args) == 1 and nxt) else ""
        yield Instruction(ins.offset, display_name(ins), args, argrepr(code, ins), depth, ins.loc, ins.parts, out, i)


def header(code: Code) -> str:
    return f"[MS] Bytecode dump for {code.name}:"


def dump(code: Code, with_callees: bool = True, show_types: bool = True) -> str:
    """The text listing: address, name, operands, stack depth, source, type."""
    out = []
    for c in (code.all_codes() if with_callees else [code]):
        out.append(header(c))
        sig = ", ".join(f"{p}: {t}" for p, t in c.params)
        out.append(f"  ; ({sig}) -> {c.result_type}")
        for a, b, _why in c.assumptions:
            out.append(f"  ; assumes {a} == {b} (checked on entry)")
        base = c.filename.rsplit("/", 1)[-1]
        for r in records(c):
            src = f"{base}:{r.loc}" if r.loc.line else ""
            line = f"  0x{r.offset:04x}: {r.op:<20} {r.argrepr:<28} depth={r.stack_depth:<3} {src}"
            if show_types and r.out_type:
                line += f"  -> {r.out_type}"
            out.append(line.rstrip())
            for pname, ploc in r.parts:
                out.append(f"          | {pname:<18} {base}:{ploc}")
        if c.memplan is not None:            # (compiler/memplan.py: buffers, sizes as expressions, peak)
            out.extend(c.memplan.lines(c))
        elif getattr(c, "memplan_refused", None):
            out.append(f"  ; memory plan refused: {c.memplan_refused}")
    return "\n".join(out)


# ---------------------------------------------------------------- JSON (records and assembler)

def value_to_data(v):
    """Tagged JSON form of a constant-pool value (never pickle)."""
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, int):
        return {"int": v}
    if isinstance(v, float):
        return {"float": repr(v)}
    if isinstance(v, (Expr, Pred)):
        return {"sym": v.to_data()}
    if isinstance(v, dt.DType):
        return {"dtype": v.name}
    if isinstance(v, tuple):
        return {"tuple": [value_to_data(x) for x in v]}
    if isinstance(v, np.ndarray):
        data = np.stack([v.real, v.imag], -1) if v.dtype.kind == "c" else v    # (complex: [re, im] pairs)
        return {"array": data.tolist(), "dtype": dt.from_numpy(v.dtype).name, "shape": list(v.shape)}
    raise BytecodeError(f"constant {v!r} of type {type(v).__name__} cannot be serialized")


def type_to_data(t):
    if isinstance(t, TensorType):
        return {"tensor": [d.to_data() for d in t.shape], "dtype": t.dtype.name}
    if isinstance(t, ScalarType):
        return {"scalar": t.kind, "value": t.value.to_data() if t.value is not None else None}
    if isinstance(t, TupleType):
        return {"tuple": [type_to_data(x) for x in t.items]}
    if isinstance(t, NoneType):
        return {"none": True}
    raise BytecodeError(f"type {t!r} cannot be serialized")


def loc_to_data(loc: Loc):
    return [loc.line, loc.col, loc.end_line, loc.end_col]


def code_to_data(code: Code, index: dict) -> dict:
    """One function as JSON; ``index`` maps callee Code ids to their position in the file."""
    d = {
        "name": code.name, "filename": code.filename, "firstlineno": code.firstlineno,
        "consts": [value_to_data(c) for c in code.consts],
        "names": list(code.names), "varnames": list(code.varnames),
        "params": [[p, type_to_data(t)] for p, t in code.params],
        "attr_types": {k: type_to_data(t) for k, t in code.attr_types.items()},
        "callees": [[path, index[id(sub)]] for path, sub in code.callees],
    }
    if code.may_be_one:
        d["may_be_one"] = sorted(code.may_be_one)
    return d


def to_json(code: Code) -> dict:
    """Program JSON: every function (callees first) with tables and instruction records."""
    codes = code.all_codes()
    index = {id(c): i for i, c in enumerate(codes)}
    funcs = []
    for c in codes:
        d = code_to_data(c, index)
        d["instructions"] = [{
            "offset": r.offset, "op": r.op, "opcode": ins.op.name, "args": list(ins.args), "argrepr": r.argrepr,
            "stackDepth": r.stack_depth, "loc": loc_to_data(r.loc), "type": r.out_type,
            "parts": [[p, loc_to_data(pl)] for p, pl in r.parts],
        } for r, ins in zip(records(c), c.instrs)]
        d["result"] = str(c.result_type) if c.result_type is not None else None
        d["assumptions"] = [f"{a} == {b}" for a, b, _ in c.assumptions]
        if c.memplan is not None:
            d["memoryPlan"] = c.memplan.summary()
        funcs.append(d)
    return {"abi": code.abi, "functions": funcs}


def from_json(data: dict) -> Code:
    """Assemble a program from ``to_json`` output (op names, raw operands, locations)."""
    if not isinstance(data, dict) or not isinstance(data.get("functions"), list) or not data["functions"]:
        raise BytecodeError("expected an object with a non-empty 'functions' list")
    done: list = []
    for fi, f in enumerate(data["functions"]):
        if not isinstance(f, dict) or not isinstance(f.get("instructions"), list):
            raise BytecodeError(f"functions[{fi}]: expected an object with an 'instructions' list")
        instrs = [instr_from_record(r, f"functions[{fi}] instruction {k}") for k, r in enumerate(f["instructions"])]
        done.append(code_from_data(f, instrs, done))
    return done[-1]
