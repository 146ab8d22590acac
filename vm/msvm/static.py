"""Static analysis of a Python file: its Cells and jit functions as bytecode,
without executing the file.

The module's top level, its functions and each Cell's ``__init__`` are evaluated
abstractly by ``static_eval`` over the values of ``static_values`` (bounded in steps, time, int size, memory and loop
iterations; it builds only msvm placeholders, never user objects or effects).

Shapes are symbols unless something in the file makes them known:

- an argument's shape comes from ``set_inputs`` (anywhere: under the main guard,
  in a ``try:``, in a function), an annotation (``x: "B, 768"``,
  ``x: ms.Tensor(shape=[None, 768], ...)``) or the first call of the Cell seen
  in the file (``net(x)`` with ``x = ms.Tensor(rng.standard_normal((32, 768)))``);
  a dim that is not 1 is a symbol named after the argument (``x0``, ``x1``), as at
  run time, so one dump serves every batch size;
- an argument nobody describes gets fresh symbols ``x0, x1, ...``; its *rank* is
  inferred from use: ``b, s, _ = x.shape`` fixes it, ``x.shape[2]`` bounds it, and
  otherwise the first of ranks 2, 3, 1, 4 with which the Cell compiles and
  verifies is taken (MatMul, Dense fix rank 2 this way). The bytecode has a fixed
  rank per operand, so an assumed rank is said in a note (``; note:`` in the dump,
  an Information diagnostic in the editor): ``x: rank 2 assumed``;
- a Parameter or tensor whose data comes from outside (``np.load``, a constructor
  argument) gets the same treatment, its symbols named after the attribute
  (``self.w`` -> ``w0, w1``);
- a constructor argument nobody passes (a file that only defines Cells and
  factories) is a symbol named after it: ``nn.Dense(cin, cout)`` has weight
  ``[cout,cin]``; where structure depends on its value (``range(depth)``), an
  assumed value is used and noted. Constructor arguments come from call sites in
  the file first: module level, the main guard, functions (factories such as
  ``def resnet50(): return ResNet(Bottleneck, [3, 4, 6, 3])`` are evaluated even if
  nothing calls them), ``try:`` blocks and loops, then from defaults.

A compile or verify error found under assumed shapes is reported as not certain
(``AssumedShapeError``, Information); with known shapes it is an error at its line.

Used by ``msvm dump``, the language server and the debugger's breakpoint check.
"""

from __future__ import annotations

import ast
import inspect
import itertools
import time
from dataclasses import dataclass, field

from . import dtype as dt
from .bytecode.code import Code
from .bytecode.symbolic import fmt_shape
from .bytecode.types import TensorType
from .errors import FrontendError, MsvmError, SourceError, VerifyError
from .frontend.argspec import ArgSpec, arg_spec, declared_dims, tensor_spec
from .frontend.compiler import compile_cell_for, compile_function, named_children
from .static_eval import OutOfBudget, StaticCell, StaticModule  # noqa: F401 - StaticCell: re-exported
from .static_values import AbstractArray, Budget, Note, SymInt, Unknown, UnknownData, parameter, to_msvm  # noqa: F401
from .tensor import Tensor

__all__ = ["AssumedShapeError", "Budget", "Entry", "Note", "StaticModule", "Unknown", "analyze", "analyze_file"]

RANKS = (2, 3, 1, 4)         # the ranks tried, in order, for a tensor whose rank nothing fixes
MAX_TRIES = 16               # compiles tried per Cell when ranks are assumed
COMPILE_SECONDS = 2.0        # time for those tries, per Cell


@dataclass
class Entry:
    """One compiled unit of a file: a Cell's construct or a jit function."""

    name: str
    line: int                 # 1-based line of the class / def
    col: int
    kind: str                 # 'cell' | 'jit'
    code: Code | None = None
    error: MsvmError | None = None
    construct_line: int = 0
    end_line: int = 0         # last line of the class / def
    notes: list = field(default_factory=list)     # Notes: what was assumed for this entry
    assumed: bool = False     # some argument or attribute shape was assumed


class Entries(list):
    """analyze()'s result: the entries, and the notes about the whole file."""

    notes: list = []


class AssumedShapeError(FrontendError):
    """A compile or verify error under assumed shapes: not certain to happen at run time."""

    certain = False


# ---------------------------------------------------------------- unknown shapes

@dataclass
class _RankVar:
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


def _rank_hint(body_nodes, is_ref) -> tuple:
    """(exact rank or None, minimum rank) from ``a, b = v.shape`` and ``v.shape[k]`` in the body."""
    exact, least = None, 0
    for node in body_nodes:
        for n in ast.walk(node):
            if isinstance(n, ast.Assign) and isinstance(n.value, ast.Attribute) and n.value.attr == "shape" and \
                    is_ref(n.value.value):
                for t in n.targets:
                    if isinstance(t, (ast.Tuple, ast.List)) and not any(isinstance(e, ast.Starred) for e in t.elts):
                        exact = len(t.elts)
            if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Attribute) and n.value.attr == "shape" and \
                    is_ref(n.value.value) and isinstance(n.slice, ast.Constant) and isinstance(n.slice.value, int):
                k = n.slice.value
                least = max(least, k + 1 if k >= 0 else -k)
    return exact, least


def _candidates(exact, least) -> tuple:
    if exact is not None:
        return (exact,), True
    ranks = tuple(r for r in RANKS if r >= least) or (least,)
    return ranks, False


def _arg_var(pname, a: ast.arg, node: ast.FunctionDef, dtype=None) -> _RankVar:
    exact, least = _rank_hint(node.body, lambda e: isinstance(e, ast.Name) and e.id == pname)
    ranks, is_exact = _candidates(exact, least)
    return _RankVar(pname, f"argument {pname}", dtype or dt.float32, ranks, is_exact, a.lineno, a.col_offset)


def _attr_vars(cell, taken: set) -> list:
    """_RankVars for every attribute of unknown data in the Cell tree."""
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
                exact, least = _rank_hint(body, lambda e, k=k: isinstance(e, ast.Attribute) and e.attr == k and
                                          isinstance(e.value, ast.Name) and e.value.id == "self")
                ranks, is_exact = _candidates(exact, least)
                node = cls.node if cls is not None else None
                line, col = (v.line, v.col) if v.line else (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))
                out.append(_RankVar(name, f"self.{k}", v.dtype, ranks, is_exact, line, col, obj, k, v.parameter))
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


def _specs_for(params, node: ast.FunctionDef, declared, calls, module, skip_self: bool) -> list:
    """Per argument: an ArgSpec from set_inputs, an annotation or the first call seen in the
    module, or a _RankVar where nothing says its shape."""
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
            specs.append(_arg_var(pname, a, node, getattr(v, "dtype", None) if isinstance(v, UnknownData) else None))
            continue
        specs.append(_value_spec(pname, v))
    star = node.args.vararg
    if star is not None:      # *inputs: as many as set_inputs declares or the first call passes
        n = max(len(call_args), len(declared) if declared is not None else 0)
        for k in range(len(args), n):
            v = declared[k] if declared is not None and k < len(declared) else call_args[k]
            v = to_msvm(v)
            name = f"{star.arg}_{k - len(args)}"
            specs.append(_arg_var(name, star, node) if isinstance(v, (Unknown, UnknownData)) else _value_spec(name, v))
    return specs


# ---------------------------------------------------------------- compiling with assumed ranks

def _assumption(var: _RankVar, rank: int) -> str:
    shape = fmt_shape([f"{var.name}{i}" for i in range(rank)])
    return f"{var.what}: Tensor<{var.dtype.name}, {shape}>"


def _rank_combinations(choices):
    """Every combination of candidate ranks, those nearest the first choices first (each variable
    gets to try its other ranks early, not only the last one's), lazily for many variables."""
    if len(choices) > 8:                       # 4**8 combinations: keep itertools' order
        yield from itertools.product(*choices)
        return
    for idx in sorted(itertools.product(*[range(len(c)) for c in choices]), key=lambda t: (sum(t), t)):
        yield tuple(c[i] for c, i in zip(choices, idx))


def _compile_assuming(entry: Entry, specs: list, attr_vars: list, compile_fn, filename):
    """Compile with every combination of candidate ranks (best first) until one verifies."""
    arg_vars = [s for s in specs if isinstance(s, _RankVar)]
    rank_vars = arg_vars + attr_vars
    if not rank_vars:
        entry.code = compile_fn(specs)
        return
    entry.assumed = any(not v.exact for v in rank_vars)
    first_err, deadline = None, time.monotonic() + COMPILE_SECONDS
    for k, ranks in enumerate(_rank_combinations([v.ranks for v in rank_vars])):
        if k >= MAX_TRIES or (k and time.monotonic() > deadline):
            break
        chosen = dict(zip(map(id, rank_vars), ranks))
        for v in attr_vars:
            t = v.tensor(chosen[id(v)])
            setattr(v.owner, v.attr, parameter(t, v.attr) if v.parameter else t)
        concrete = [arg_spec(s.name, s.tensor(chosen[id(s)])) if isinstance(s, _RankVar) else s for s in specs]
        try:
            entry.code = compile_fn(concrete)
        except (FrontendError, VerifyError, MsvmError) as err:
            if first_err is None:
                first_err = (err, ranks)
            continue
        for v, r in zip(rank_vars, ranks):
            how = f"its rank is {r}, from its use" if v.exact else \
                f"rank {r} assumed: the first of {', '.join(map(str, v.ranks))} with which {entry.name} compiles"
            entry.notes.append(Note(v.line, v.col, f"{_assumption(v, r)} ({how}; declare it with set_inputs "
                                                   f"or an annotation to know it)"))
        return
    err, ranks = first_err
    if any(not v.exact for v in rank_vars) and isinstance(err, SourceError):
        what = "; ".join(_assumption(v, r) for v, r in zip(rank_vars, ranks))
        raise AssumedShapeError(f"{err.message} (assuming {what}; the shapes are not known statically)",
                                err.filename, err.line, err.col, err.end_line, err.end_col) from None
    raise err


def _as_source_error(err, filename, node) -> SourceError:
    if isinstance(err, SourceError):
        return err
    return FrontendError(str(err), filename, node.lineno, node.col_offset)


def _byte_col(e: SyntaxError) -> int:
    """A SyntaxError's 0-based column in UTF-8 bytes, as every other Loc (its offset counts characters)."""
    col = max(0, (e.offset or 1) - 1)
    if not e.text:
        return col
    return len(e.text[:col].encode("utf-8", "surrogatepass"))


def analyze(source: str, filename: str, budget: Budget | None = None) -> Entries:
    """Every Cell class and jit function in the source, compiled where possible."""
    try:
        module = StaticModule(source, filename, budget)
    except SyntaxError as e:
        raise FrontendError(f"syntax error: {e.msg}", filename, e.lineno or 1, _byte_col(e)) from None
    except (RecursionError, MemoryError):
        raise FrontendError("the file nests too deeply to analyze", filename, 1, 0) from None
    entries = Entries()
    seen_classes = set()
    instances = {id(c): c for c, _ in module.instances}
    for cls in module.classes:
        if not cls.is_cell or cls.find_method("construct") is None or id(cls) in seen_classes:
            continue
        seen_classes.add(id(cls))
        cnode = cls.find_method("construct").node
        e = Entry(cls.name, cls.node.lineno, cls.node.col_offset, "cell", construct_line=cnode.lineno,
                  end_line=cls.node.end_lineno or cls.node.lineno)
        entries.append(e)
        try:
            objs = [i for i in cls.instances if id(i) in instances] + list(cls.instances)
            if objs:
                cell = objs[0]
            else:
                module.slice(f"building {cls.name}")
                try:
                    cell = module.instantiate(cls, [], {})
                except OutOfBudget as stop:
                    raise FrontendError(f"cannot build {cls.name} statically: {stop.what}", filename,
                                        cls.node.lineno, cls.node.col_offset) from None
            if isinstance(cell, Unknown):
                raise FrontendError(f"cannot build {cls.name} statically: {cell.why}", filename, cls.node.lineno,
                                    cls.node.col_offset)
            declared = cell.__dict__.get("_msvm_inputs")
            calls = cell.__dict__.get("_static_calls") or []
            specs = _specs_for(cell.__msvm_construct_params__(), cnode, declared, calls, module, True)
            taken = {s.name for s in specs if isinstance(s, _RankVar)} | set(_param_names(cnode))
            _compile_assuming(e, specs, _attr_vars(cell, taken), lambda sp, c=cell: compile_cell_for(c, sp),
                              filename)
        except (FrontendError, VerifyError) as err:
            e.error = err
        except MsvmError as err:
            e.error = _as_source_error(err, filename, cnode)
        except RecursionError:
            e.error = FrontendError(f"{cls.name} nests too deeply to compile", filename, cnode.lineno,
                                    cnode.col_offset)
        except Exception as err:  # noqa: BLE001 - an analysis bug must not cost the file its other Cells
            e.error = FrontendError(f"msvm could not compile {cls.name} statically ({type(err).__name__}: {err})",
                                    filename, cnode.lineno, cnode.col_offset)
    # a Cell whose shapes were assumed on its own is shown as its parent calls it
    called = {}
    for e in entries:
        if e.code is not None and not e.assumed:
            for c in e.code.all_codes():
                called.setdefault(c.name, c)
    for e in entries:
        if e.assumed and f"{e.name}.construct" in called:
            e.code, e.error, e.notes, e.assumed = called[f"{e.name}.construct"], None, [], False
    for f in module.functions:
        if not f.jit:
            continue
        e = Entry(f.name, f.node.lineno, f.node.col_offset, "jit", construct_line=f.node.lineno,
                  end_line=f.node.end_lineno or f.node.lineno)
        entries.append(e)
        try:
            params = [(p.name, p.default) for p in f.signature().parameters.values()]
            specs = _specs_for(params, f.node, None, f.calls, module, False)
            _compile_assuming(e, specs, [], lambda sp, f=f: compile_function(f.source(), sp, name=f.name), filename)
        except (FrontendError, VerifyError) as err:
            e.error = err
        except MsvmError as err:
            e.error = _as_source_error(err, filename, f.node)
        except RecursionError:
            e.error = FrontendError(f"{f.name} nests too deeply to compile", filename, f.node.lineno,
                                    f.node.col_offset)
        except Exception as err:  # noqa: BLE001
            e.error = FrontendError(f"msvm could not compile {f.name} statically ({type(err).__name__}: {err})",
                                    filename, f.node.lineno, f.node.col_offset)
    entries.notes = list(module.notes)
    return entries


def _param_names(node: ast.FunctionDef) -> list:
    return [a.arg for a in node.args.args]


def analyze_file(path: str) -> Entries:
    with open(path, encoding="utf-8") as f:
        return analyze(f.read(), path)

