"""The spec of each argument of a Cell's ``construct`` or a jit function when the file is
analyzed statically (``msvm.static``): an ``ArgSpec`` where something in the file says
its shape (``set_inputs``, an annotation, the first call seen), else a ``RankVar``: a
tensor of fresh symbols whose rank is fixed by use (``static_infer``) or chosen when the
Cell is compiled (``static_ranks``). Attributes of unknown data (``self.w`` loaded from
a file) are RankVars too, their symbols named after the attribute.
"""

from __future__ import annotations

import ast
import inspect
from dataclasses import dataclass

from . import dtype as dt
from .bytecode.types import TensorType
from .frontend.argspec import ArgSpec, arg_spec, declared_dims, tensor_spec
from .frontend.compiler import named_children
from .static_infer import rank_hint
from .static_values import SymInt, Unknown, UnknownData, to_msvm
from .tensor import Tensor

RANKS = (2, 3, 1, 4)         # the ranks tried, in order, for a tensor whose rank nothing fixes


@dataclass
class RankVar:
    """A tensor whose rank and dims are chosen at compile time (an argument or an attribute)."""

    name: str                  # symbol prefix
    what: str                  # 'argument x' | 'self.w'
    dtype: dt.DType
    ranks: tuple               # candidates, best first
    exact: bool                # the rank is known (from use)
    line: int
    col: int
    owner: object = None       # the Cell holding the attribute
    attr: str = ""
    parameter: bool = False

    def tensor(self, rank: int) -> Tensor:
        return Tensor(shape=[f"{self.name}{i}" for i in range(rank)], dtype=self.dtype)


def candidates(exact, least) -> tuple:
    if exact is not None:
        return (exact,), True
    ranks = tuple(r for r in RANKS if r >= least) or (least,)
    return ranks, False


def arg_var(pname, a: ast.arg, node: ast.FunctionDef, dtype=None) -> RankVar:
    exact, least = rank_hint(node.body, lambda e: isinstance(e, ast.Name) and e.id == pname)
    ranks, is_exact = candidates(exact, least)
    return RankVar(pname, f"argument {pname}", dtype or dt.float32, ranks, is_exact, a.lineno, a.col_offset)


def attr_vars(cell, taken: set) -> list:
    """RankVars for every attribute of unknown data in the Cell tree."""
    out, seen = [], set()

    def walk(obj):
        if id(obj) in seen:
            return
        seen.add(id(obj))
        for k, v in list(obj.__dict__.items()):
            if isinstance(v, UnknownData):
                name = k if k not in taken else f"self_{k}"
                while name in taken:
                    name += "_"
                taken.add(name)
                cls = getattr(obj, "_static_class", None)
                construct = cls.find_method("construct") if cls is not None else None
                body = [construct.node] if construct is not None else []
                exact, least = rank_hint(body, lambda e, k=k: isinstance(e, ast.Attribute) and e.attr == k and
                                          isinstance(e.value, ast.Name) and e.value.id == "self")
                ranks, is_exact = candidates(exact, least)
                node = cls.node if cls is not None else None
                line, col = (v.line, v.col) if v.line else (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))
                out.append(RankVar(name, f"self.{k}", v.dtype, ranks, is_exact, line, col, obj, k, v.parameter))
        for _, child in named_children(obj):
            walk(child)

    walk(cell)
    return out

# ---------------------------------------------------------------- argument specs

def _annotation_spec(name, ann, module) -> ArgSpec | None:
    if ann is None:
        return None
    if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
        text = ann.value.strip()
        d = dt.float32
        if "[" in text and not text.startswith("["):
            head, text = text.split("[", 1)
            head = head.strip().split(".")[-1]
            if head and head not in ("Tensor",):
                try:
                    d = dt.by_name(head)
                except ValueError:
                    pass
            text = text.rsplit("]", 1)[0]
        text = text.strip("[]() ")
        if "," in text and text.split(",", 1)[0].strip() in [x.name for x in dt.ALL]:
            head, text = text.split(",", 1)
            d = dt.by_name(head.strip())
            text = text.strip().strip("[]() ")
        dims = []
        for part in [p.strip() for p in text.split(",") if p.strip()]:
            dims.append(int(part) if part.lstrip("-").isdigit() else (None if part in ("?", "None") else part))
        return tensor_spec(name, tuple(1 if isinstance(x, int) and x == 1 else 2 for x in dims), d,
                           Tensor(shape=dims, dtype=d))
    v = module.eval(ann, module.env)
    if isinstance(v, Tensor) and v.is_placeholder:
        return arg_spec(name, v)
    return None


def _value_spec(pname, v) -> ArgSpec:
    """The spec of a value seen in a call: a placeholder's int dims become symbols (as at run
    time), its named or symbolic dims stay."""
    if isinstance(v, Tensor) and v.is_placeholder:
        shape = v.placeholder_shape
        if all(isinstance(d, int) for d in shape):
            return tensor_spec(pname, shape, v.dtype)
        return ArgSpec("tensor", TensorType(tuple(declared_dims(pname, shape)), v.dtype))
    if isinstance(v, SymInt):
        v = v.assumed
    return arg_spec(pname, v)


def specs_for(params, node: ast.FunctionDef, declared, calls, module, skip_self: bool) -> list:
    """Per argument: an ArgSpec from set_inputs, an annotation or the first call seen in the
    module, or a RankVar where nothing says its shape."""
    args = node.args.args[1:] if skip_self else node.args.args
    call_args, call_kwargs = calls[0] if calls else ((), {})
    specs = []
    for k, ((pname, default), a) in enumerate(zip(params, args)):
        if declared is not None and k < len(declared) and isinstance(declared[k], Tensor):
            specs.append(arg_spec(pname, declared[k]))
            continue
        spec = _annotation_spec(pname, a.annotation, module)
        if spec is not None:
            specs.append(spec)
            continue
        v = call_args[k] if k < len(call_args) else call_kwargs.get(pname, default)
        v = to_msvm(v)
        if v is inspect.Parameter.empty or isinstance(v, (Unknown, UnknownData)):
            specs.append(arg_var(pname, a, node, getattr(v, "dtype", None) if isinstance(v, UnknownData) else None))
            continue
        specs.append(_value_spec(pname, v))
    star = node.args.vararg
    if star is not None:      # *inputs: as many as set_inputs declares or the first call passes
        n = max(len(call_args), len(declared) if declared is not None else 0)
        for k in range(len(args), n):
            v = declared[k] if declared is not None and k < len(declared) else call_args[k]
            v = to_msvm(v)
            name = f"{star.arg}_{k - len(args)}"
            specs.append(arg_var(name, star, node) if isinstance(v, (Unknown, UnknownData)) else _value_spec(name, v))
    return specs
