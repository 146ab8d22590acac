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
from .bytecode.symbolic import fmt_shape
from .bytecode.types import TensorType
from .frontend.argspec import ArgSpec, arg_spec, declared_dims, tensor_spec
from .frontend.compiler import named_children
from .static_infer import Use, infer, rank_hint
from .static_values import SymInt, Unknown, UnknownData, to_msvm
from .tensor import Tensor

RANKS = (2, 3, 1, 4)         # the ranks tried, in order, for a tensor whose rank nothing fixes


ASSUMED_INT = 8              # the value tried for an int argument when a run-time symbol does not compile


@dataclass
class RankVar:
    """An argument or attribute whose shape (rank and dims) or scalar form is chosen at compile
    time: a tensor (``kind`` 'tensor' or 'int_tensor': ``ranks`` are its candidate ranks), an int
    (candidates: a run-time symbol, then ``ASSUMED_INT``), a bool flag, or a tuple of ``items``."""

    name: str                  # symbol prefix
    what: str                  # 'argument x' | 'self.w'
    dtype: dt.DType
    ranks: tuple               # candidates, best first
    exact: bool                # the rank (kind) is known from use
    line: int
    col: int
    owner: object = None       # the Cell holding the attribute
    attr: str = ""
    parameter: bool = False
    kind: str = "tensor"       # 'tensor' | 'int_tensor' | 'int' | 'bool' | 'tuple'
    why: str = ""              # the use it was read from
    items: tuple = ()          # a tuple's RankVars

    def tensor(self, rank: int) -> Tensor:
        return Tensor(shape=[f"{self.name}{i}" for i in range(rank)], dtype=self.dtype)

    def leaves(self) -> list:
        """The variables chosen on their own: a tuple's items, else itself."""
        return [x for it in self.items for x in it.leaves()] if self.kind == "tuple" else [self]

    def spec(self, chosen: dict) -> ArgSpec:
        """Its spec under ``chosen`` (id of a leaf -> the candidate taken)."""
        if self.kind == "tuple":
            return ArgSpec("tuple", value=[it.spec(chosen) for it in self.items])
        c = chosen[id(self)]
        if self.kind == "int":
            return arg_spec(self.name, 0) if c == "symbol" else ArgSpec("const", value=c)
        if self.kind == "bool":
            return arg_spec(self.name, True)
        return arg_spec(self.name, self.tensor(c))

    def assumed(self, c) -> bool:
        return not self.exact or (self.kind == "int" and c != "symbol")

    def describe(self, c) -> str:
        """``argument x: Tensor<float32, [x0,x1]>`` / ``argument n: int n`` / ``argument n: int = 8``."""
        if self.kind == "int":
            return f"{self.what}: int {self.name} (a run-time symbol)" if c == "symbol" else \
                f"{self.what}: int = {c}"
        if self.kind == "bool":
            return f"{self.what}: bool (a run-time flag)"
        shape = fmt_shape([f"{self.name}{i}" for i in range(c)])
        return f"{self.what}: Tensor<{self.dtype.name}, {shape}>"


def candidates(exact, least) -> tuple:
    if exact is not None:
        return (exact,), True
    ranks = tuple(r for r in RANKS if r >= least) or (least,)
    return ranks, False


def _var_of_use(name: str, what: str, use: Use, dtype, line: int, col: int) -> RankVar:
    if use.kind == "tuple":
        items = tuple(_var_of_use(f"{name}_{j}", f"{what}[{j}]", u, None, line, col) for j, u in enumerate(use.items))
        return RankVar(name, what, dt.float32, (), True, line, col, kind="tuple", why=use.why, items=items)
    if use.kind == "int":
        return RankVar(name, what, dt.int32, ("symbol", ASSUMED_INT), True, line, col, kind="int", why=use.why)
    if use.kind == "bool":
        return RankVar(name, what, dt.bool_, ("flag",), True, line, col, kind="bool", why=use.why)
    ranks, is_exact = candidates(use.exact, use.least)
    d = dt.int32 if use.kind == "int_tensor" else dtype or dt.float32
    return RankVar(name, what, d, ranks, is_exact, line, col, kind=use.kind, why=use.why)


def arg_var(pname, a: ast.arg, node: ast.FunctionDef, dtype=None, cell=None) -> RankVar:
    """The variable of an argument nobody describes: its kind and rank from its use in ``node``
    (and in the sub-Cells and methods of ``cell`` it is passed to)."""
    use = infer(node, pname, cell)
    return _var_of_use(pname, f"argument {pname}", use, dtype, a.lineno, a.col_offset)


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


def specs_for(params, node: ast.FunctionDef, declared, calls, module, skip_self: bool, cell=None) -> list:
    """Per argument: an ArgSpec from set_inputs, an annotation or the first call seen in the
    module, or a RankVar where nothing says its shape (``cell``: whose construct it is, so that
    the uses in its sub-Cells count)."""
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
            specs.append(arg_var(pname, a, node, getattr(v, "dtype", None) if isinstance(v, UnknownData) else None, cell))
            continue
        specs.append(_value_spec(pname, v))
    star = node.args.vararg
    if star is not None:      # *inputs: as many as set_inputs declares or the first call passes
        n = max(len(call_args), len(declared) if declared is not None else 0)
        for k in range(len(args), n):
            v = declared[k] if declared is not None and k < len(declared) else call_args[k]
            v = to_msvm(v)
            name = f"{star.arg}_{k - len(args)}"
            specs.append(arg_var(name, star, node, None, cell) if isinstance(v, (Unknown, UnknownData))
                         else _value_spec(name, v))
        if n <= len(args):        # nobody passes any: as many as construct unpacks or indexes
            use = infer(node, star.arg, cell)
            items = use.items if use.kind == "tuple" else [Use()] * _items_indexed(node, star.arg)
            for j, u in enumerate(items):
                specs.append(_var_of_use(f"{star.arg}_{j}", f"argument {star.arg}[{j}]", u, None, star.lineno,
                                         star.col_offset))
    return specs


def _items_indexed(node: ast.FunctionDef, name: str) -> int:
    """1 + the largest constant index of ``name[k]`` in the body (``inputs[1]``: 2), else 0."""
    n = 0
    for e in ast.walk(node):
        if isinstance(e, ast.Subscript) and isinstance(e.value, ast.Name) and e.value.id == name and \
                isinstance(e.slice, ast.Constant) and isinstance(e.slice.value, int) and e.slice.value >= 0:
            n = max(n, e.slice.value + 1)
    return n
