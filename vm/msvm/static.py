"""Static analysis of a Python file: its Cells and jit functions as bytecode,
without executing the file.

The modules of the analysis, each importing only those after it:

- ``static`` (this one): ``analyze``: every Cell and jit function of a file, as ``Entry``s;
- ``static_ranks``: compiling with assumed ranks, the notes of what was assumed;
- ``static_specs``: each argument's spec (known, or a ``RankVar`` of fresh symbols);
- ``static_infer``: what ``construct`` says about an argument by how it uses it;
- ``static_eval``: the bounded abstract evaluator of the file (statements, expressions),
  with its halves ``static_calls`` (calls: call sites, functions, constructors, msvm
  placeholders) and ``static_imports`` (imports: msvm/numpy, package files read, never run);
- ``static_objects``: the file's functions, classes and Cells as the evaluator holds them;
- ``static_values``: the values (``Unknown``, ``SymInt``, ``UnknownData``, abstract arrays),
  the ``Budget`` (steps, time, int size, memory, loop iterations) and ``Note``.

The module's top level, its functions and each Cell's ``__init__`` are evaluated
abstractly; only msvm placeholders are built, never user objects or effects.

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
import os
import re
from dataclasses import dataclass, field

from .bytecode.code import Code
from .errors import FrontendError, MsvmError, SourceError, VerifyError
from .frontend.argspec import ArgSpec
from .frontend.compiler import compile_cell_for, compile_function, named_children
from .nn.cell import Cell
from .static_eval import StaticCell, StaticModule  # noqa: F401 - StaticCell: re-exported
from .static_ranks import AssumedShapeError, compile_assuming
from .static_specs import RankVar, attr_vars, specs_for
from .static_values import Budget, Note, OutOfBudget, SymInt, Unknown

__all__ = ["AssumedShapeError", "Budget", "Entry", "Note", "StaticModule", "Unknown", "analyze", "analyze_file"]


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


_MSVM_DIR = os.path.dirname(os.path.abspath(__file__))
_UNBOUND = re.compile(r"uses ([\w, ]+): no argument binds it")


def _compile_cell(e: Entry, cell, specs, attrs, filename, rounds: int = 3):
    """compile_assuming for a Cell; a size nobody passed that construct needs as a value (a shape
    ``(-1, hidden)``: a symbol no argument binds) takes its assumed value, noted, and it is tried again."""
    for k in range(rounds + 1):
        try:
            compile_assuming(e, specs, attrs, _baking_bools(e, cell, lambda sp, c=cell: compile_cell_for(c, sp)),
                             filename)
            return
        except (FrontendError, VerifyError) as err:
            m = _UNBOUND.search(str(err))
            fixed = _assume_sizes(cell, {n.strip() for n in m.group(1).split(",")}) if m and k < rounds else []
            if not fixed:
                if k and isinstance(err, SourceError) and getattr(err, "certain", True):
                    raise AssumedShapeError(f"{err.message} (with sizes nobody passes assumed; see the notes)",
                                            err.filename, err.line, err.col, err.end_line, err.end_col) from None
                raise
            e.assumed = True
            for name, value, line, col in fixed:
                e.notes.append(Note(line, col, f"assumed {name} = {value}: construct needs its value and nobody "
                                               f"passes it (pass it where the Cell is built to know it)"))


def _baking_bools(e: Entry, cell, compile_fn):
    """compile_fn, but where a bool argument kept as a run-time flag decides the structure of a
    value (``if output_attentions: outputs += (w,)``), the Python bools its first call or its
    defaults give are baked in and it is compiled again (noted), as a sub-Cell's call does."""
    def fn(specs):
        try:
            return compile_fn(specs)
        except FrontendError as err:
            if "holds different Python objects" not in str(err):
                raise
            calls = cell.__dict__.get("_static_calls") or []
            call_args, call_kwargs = calls[0] if calls else ((), {})
            baked, out = [], list(specs)
            for k, ((name, default), s) in enumerate(zip(cell.__msvm_construct_params__(), specs)):
                v = call_args[k] if k < len(call_args) else call_kwargs.get(name, default)
                if isinstance(s, ArgSpec) and s.kind == "scalar" and isinstance(v, bool):
                    out[k] = ArgSpec("const", value=v)
                    baked.append(f"{name} = {v}")
            if not baked:
                raise
            code = compile_fn(out)
            cnode = cell._static_class.find_method("construct").node if hasattr(cell, "_static_class") else None
            line, col = (cnode.lineno, cnode.col_offset) if cnode is not None else (e.line, e.col)
            note = (f"{', '.join(baked)} baked in: as a run-time flag it decides the structure of a value "
                    f"({err.message})")
            if not any(n.message == note for n in e.notes):
                e.notes.append(Note(line, col, note))
            return code
    return fn


def _assume_sizes(cell, names: set) -> list:
    """Set the SymInt attributes of the Cell tree named in ``names`` to their assumed values;
    [(name, value, line, col)] of those set."""
    out, seen = [], set()

    def walk(obj):
        if id(obj) in seen:
            return
        seen.add(id(obj))
        for k, v in list(obj.__dict__.items()):
            if isinstance(v, SymInt) and v.expr.as_symbol() in names:
                object.__setattr__(obj, k, v.assumed)
                node = getattr(getattr(obj, "_static_class", None), "node", None)
                out.append((v.name, v.assumed, getattr(node, "lineno", 1), getattr(node, "col_offset", 0)))
            elif isinstance(v, (tuple, list)) and any(isinstance(x, SymInt) and x.expr.as_symbol() in names
                                                      for x in v):
                object.__setattr__(obj, k, type(v)(x.assumed if isinstance(x, SymInt) and x.expr.as_symbol() in
                                                   names else x for x in v))
                out.append((", ".join(sorted(names)), SymInt.ASSUMED, 1, 0))
        for _, child in named_children(obj):
            walk(child)

    walk(cell)
    return out


def _inside(err, cls) -> bool:
    node = cls.node
    return os.path.abspath(err.filename) == os.path.abspath(cls.module.filename) and \
        node.lineno <= err.line <= (node.end_lineno or node.lineno)


def _in_library_class(obj, err) -> bool:
    try:
        lines, start = inspect.getsourcelines(type(obj))
        path = inspect.getsourcefile(type(obj))
    except (OSError, TypeError):
        return False
    return os.path.abspath(path or "") == os.path.abspath(err.filename) and start <= err.line < start + len(lines)


def _leads_to(obj, err, depth: int = 0, strict: bool = True) -> bool:
    """The error lies in the Cell ``obj``: its class in the document, or (an msvm layer) its class's
    source (``strict``) or any of msvm's library code."""
    if not isinstance(obj, Cell):
        return False
    cls = getattr(obj, "_static_class", None)
    if cls is None:
        if strict:
            return _in_library_class(obj, err)
        return depth < 8 and os.path.abspath(err.filename).startswith(_MSVM_DIR)
    if _inside(err, cls):
        return True
    construct = cls.find_method("construct")
    for n in ast.walk(construct.node) if construct is not None and depth < 8 else ():
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name) \
                and n.func.value.id == "self":
            sub = obj.__dict__.get(n.func.attr)
            if sub is not None and sub is not obj and _leads_to(sub, err, depth + 1, strict):
                return True
    return False


def _at_call_site(err, cell, cls, filename):
    """An error found in a sub-Cell (or in msvm's own layers) while compiling ``cls`` is reported at
    the line of ``cls.construct`` that calls it, with the callee's message (both shapes) and where
    it arose: the place the caller's shapes go wrong."""
    if not isinstance(err, SourceError) or cell is None or _inside(err, cls):
        return err
    construct = cls.find_method("construct")
    calls = [n for n in ast.walk(construct.node) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
             and isinstance(n.func.value, ast.Name) and n.func.value.id == "self"]
    if not isinstance(err, (FrontendError, AssumedShapeError, VerifyError)):   # shape errors: FrontendValueError
        return err
    for strict, n in [(True, n) for n in calls] + [(False, n) for n in calls]:     # its own class first
        sub = cell.__dict__.get(n.func.attr)
        if sub is not None and _leads_to(sub, err, 0, strict):
            where = f"{os.path.basename(err.filename)}:{err.line}"
            return type(err)(f"{err.message} (in {type(sub).__name__}, {where})", filename, n.lineno, n.col_offset,
                             n.end_lineno, n.end_col_offset)
    return err


def _uncertain_if_built_on_assumptions(err, name, cell):
    """A certain error of a Cell whose ``__init__`` ran on values the analysis assumed (an
    ``if`` it could not decide, a symbol's assumed value, a loop it stopped) is not certain: the
    real structure may differ."""
    n = getattr(cell, "__dict__", {}).get("_static_assumed", 0)
    if err is None or not n or not isinstance(err, SourceError) or not getattr(err, "certain", True):
        return err
    return AssumedShapeError(f"{err.message} (found with {n} value(s) the analysis assumed while building {name}; "
                             f"see the notes)", err.filename, err.line, err.col, err.end_line, err.end_col)


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
        cell = None
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
            specs = specs_for(cell.__msvm_construct_params__(), cnode, declared, calls, module, True, cell)
            taken = {s.name for s in specs if isinstance(s, RankVar)} | set(param_names(cnode))
            _compile_cell(e, cell, specs, attr_vars(cell, taken), filename)
        except (FrontendError, VerifyError) as err:
            e.error = err
        except MsvmError as err:
            e.error = _as_source_error(err, filename, cnode)
        except RecursionError:
            e.error = FrontendError(f"{cls.name} nests too deeply to compile", filename, cnode.lineno,
                                    cnode.col_offset)
        except OutOfBudget as stop:
            e.error = FrontendError(f"cannot build {cls.name} statically: {stop.what}", filename, cls.node.lineno,
                                    cls.node.col_offset)
        except Exception as err:  # noqa: BLE001 - an analysis bug must not cost the file its other Cells
            e.error = FrontendError(f"msvm could not compile {cls.name} statically ({type(err).__name__}: {err})",
                                    filename, cnode.lineno, cnode.col_offset)
        e.error = _uncertain_if_built_on_assumptions(e.error, cls.name, cell)
        try:
            e.error = _at_call_site(e.error, cell, cls, filename)
        except Exception:  # noqa: BLE001 - where to report it is a nicety: the error stands where it arose
            pass
    # a Cell whose shapes were assumed on its own is shown as its parent calls it
    # (and one that does not compile on its own, when a parent that compiles calls it: said in a note)
    called, by_any = {}, {}
    for e in entries:
        for c in e.code.all_codes() if e.code is not None else ():
            by_any.setdefault(c.name, (c, e.name))
            if not e.assumed:
                called.setdefault(c.name, c)
    for e in entries:
        key = f"{e.name}.construct"
        if e.assumed and key in called:
            e.code, e.error, e.notes, e.assumed = called[key], None, [], False
        elif e.code is None and key in by_any and by_any[key][1] != e.name:
            code, parent = by_any[key]
            why = getattr(e.error, "message", str(e.error))
            e.notes = [Note(e.line, e.col, f"shown as {parent} calls it; on its own it does not compile: {why}")]
            e.code, e.error = code, None
    for f in module.functions:
        if not f.jit:
            continue
        e = Entry(f.name, f.node.lineno, f.node.col_offset, "jit", construct_line=f.node.lineno,
                  end_line=f.node.end_lineno or f.node.lineno)
        entries.append(e)
        try:
            params = [(p.name, p.default) for p in f.signature().parameters.values()]
            specs = specs_for(params, f.node, None, f.calls, module, False)
            compile_assuming(e, specs, [], lambda sp, f=f: compile_function(f.source(), sp, name=f.name), filename)
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


def param_names(node: ast.FunctionDef) -> list:
    return [a.arg for a in node.args.args]


def analyze_file(path: str) -> Entries:
    with open(path, encoding="utf-8") as f:
        return analyze(f.read(), path)

