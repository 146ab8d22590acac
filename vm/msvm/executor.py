"""Runs Cells and jit functions as bytecode: argument signatures, compile on a
new signature, link, run in the interpreter, events and ``[MS]`` logs.

A signature is, per argument: a tensor's dtype, rank and which dims are 1 (all
other dims are symbols, so one Code serves every batch size and sequence
length); a bool/int argument is a run-time symbol (``training=False`` reuses
the same bytecode); other Python values are baked into the code.
"""

from __future__ import annotations

import inspect
import re
import time

import numpy as np

from . import callpath, context, device, events, log, reasons
from .bytecode.disasm import display_name, dump, to_json
from .bytecode.symbolic import Expr
from .bytecode.types import TensorType
from .errors import ArgumentError, FrontendError, MsvmError, ShapeMismatch
from .frontend.argspec import ArgSpec, arg_spec
from .frontend.compiler import (
    bind_arguments,
    cell_getattr,
    compile_cell_for,
    compile_function,
    construct_params,
    expand_params,
    signature_params,
    source_of,
    vararg_index,
)
from .interp.interpreter import BoundCode, get_trace
from .tensor import PARAMETER_SHAPES, Tensor


def _key_of(v):
    t = type(v)
    if t is Tensor:
        a = v._data
        shape = a.shape
        return (a.dtype, len(shape), shape.count(1) and tuple(n == 1 for n in shape))
    if t is bool or t is int or t is float:
        return t
    if isinstance(v, Tensor):
        v._need_data()
        a = v._data
        return (a.dtype, a.ndim, a.shape.count(1) and tuple(n == 1 for n in a.shape))
    if isinstance(v, np.ndarray):
        return ("nd", v.dtype, tuple(n == 1 for n in v.shape))
    if isinstance(v, (bool, int, float, np.generic)):
        return type(v)
    try:
        hash(v)
        return ("c", type(v), v)
    except TypeError:
        return ("id", id(v))


def _key_declared(v):
    a = v._data if isinstance(v, Tensor) and v._data is not None else np.asarray(v)
    return (a.dtype, a.ndim)


def _runtime_value(v):
    if type(v) is Tensor:
        return v._data
    if isinstance(v, Tensor):            # a Parameter passed as an argument: its array, on its device
        v._need_data()
        return v._data
    if isinstance(v, np.ndarray):
        return v
    if isinstance(v, np.generic):
        return v.item()
    return v


class Variant:
    """One compiled signature: its Code, the linked program and which args are run-time.

    When fusion is on and a branch depends only on bool flags, what runs is specialized
    per flag values (``flags``: [(argument index, name)]; ``runs``: values -> BoundCode),
    so ``if training: relu`` can fuse into the matmul; the bytecode itself stays shared."""

    __slots__ = ("code", "bound", "runtime_idx", "partial", "flags", "runs", "link", "source")

    def __init__(self, code, bound, runtime_idx, nargs: int, source=None, link=None):
        self.code, self.bound, self.runtime_idx = code, bound, runtime_idx
        # some of the call's ``nargs`` arguments are baked in (None, str, ...): only the others run
        self.partial = runtime_idx != list(range(nargs))
        self.flags, self.runs, self.link, self.source = None, {}, link, source
        if source is not None and link is not None and context.jit_option("enable_fusion"):
            from .compiler.specialize import flag_params

            self.flags = flag_params(source) or None

    def bound_for(self, rt):
        """The BoundCode for this call's flag values (compiled on first use)."""
        key = tuple([bool(rt[k]) for k, _ in self.flags])
        b = self.runs.get(key)
        if b is None:
            from .compiler.specialize import specialize

            t0 = time.perf_counter()
            flags = {name: v for (_, name), v in zip(self.flags, key)}
            why = reasons.flags_needed(self.source.name, flags, list(self.runs))
            try:
                spec = specialize(self.source, flags)
            except MsvmError as e:      # the flag-generic code still runs; say why it was not specialized
                log.logger.warning("%s: not specialized for %s (%s); running the flag-generic bytecode",
                                   self.source.name, flags, e)
                spec = None
            if spec is None:
                b = self.bound
            else:
                run = optimize(spec)
                b = self.link(run)
                _announce(spec, run, len(self.runs) + 1, (time.perf_counter() - t0) * 1e3, {"dump_bytecode": False},
                          flags=getattr(spec, "specialized_on", {}), reason=why)
            self.runs[key] = b
        return b


_warm = [False]


def warm_up() -> None:
    """Once per process, in GRAPH_MODE: have the background compiler load LLVM now
    (``build.warm_up``)."""
    if not _warm[0] and context._ctx["mode"] == context.GRAPH_MODE:
        _warm[0] = True
        from .compiler import build

        build.warm_up()


def accelerator():
    """The tier manager's sites for the current device: the LLVM tiers on the CPU, the NVPTX
    kernels and cuBLAS on the GPU (``compiler/gpu_tiers.py``), none on a device without compiled
    tiers (the interpreter runs every instruction there). Linked whatever jit_level is now: each
    site reads the live jit_level on every call (L1 runs the reference kernel), so changing it
    with set_context also changes Cells that already ran."""
    dev = device.current()
    if dev is device.CPU:
        from .compiler.tiers import ACCELERATOR
        return ACCELERATOR
    if dev.accelerated:
        from .compiler.gpu_tiers import accelerator_for
        return accelerator_for(dev)
    return None


def optimize(code):
    """Fusion on bytecode when enabled (jit_config enable_fusion), then the memory plan (jit_config
    memory_plan, ``compiler/memplan.py``); returns the Code to run."""
    return _plan_memory(_fuse(code))


def _plan_memory(code):
    """The memory plan, on the CPU; not while a debugger's trace hook is installed (the Code it shows
    stays the one it would show without the plan, and no value it shows is ever overwritten)."""
    trace = get_trace()
    if not context.jit_option("memory_plan") or device.current() is not device.CPU or (
            trace is not None and not getattr(trace, "keeps_plan", False)):
        return code
    from .compiler import memplan

    return memplan.apply(code)


def _fuse(code):
    if not context.jit_option("enable_fusion"):
        return code
    from .compiler.fuse import fuse

    t0 = time.perf_counter()
    fused = fuse(code, cpu=device.current() is device.CPU)
    fused.fusion_s = time.perf_counter() - t0
    for c in fused.all_codes():            # each Code's share, for the Step4 figure of its kernels
        c.fusion_s = fused.fusion_s
    if log.debug_enabled():
        names = [display_name(i) for c in fused.all_codes() for i in c.instrs if i.op.kind == "fused"]
        log.logger.debug("Step4 Fusion: %.2fms, %s", fused.fusion_s * 1e3, ", ".join(names) or "nothing to fuse")
    return fused


def link_cell(code, cell, acc=None) -> BoundCode:
    """Link a Code to a Cell instance: its attributes and sub-Cells."""
    attrs = {name: resolve_path(cell, name) for name in code.attr_types}     # (dotted: an inlined sub-Cell's)
    for name, t in code.attr_types.items():
        shape = tuple(attrs[name].shape)
        want = tuple(d.const_value() for d in t.shape)
        if shape != want or attrs[name].dtype is not t.dtype:
            raise ShapeMismatch(f"{code.name}: attribute {name} is {attrs[name].dtype}{list(shape)} but the bytecode "
                                f"was compiled for {t}")
    links: dict = {}

    def resolve(path, sub):
        obj = resolve_path(cell, path)
        key = (id(obj), id(sub))
        if key not in links:
            links[key] = link_cell(sub, obj, acc)
        return links[key]
    return BoundCode(code, cell, attrs, resolve, acc)


def resolve_path(root, path: str):
    obj = root
    for part in path.split("."):
        obj = obj[int(part)] if part.isdigit() else cell_getattr(obj, part)
    return obj


def _announce(code, run, variant_count: int, t_ms: float, opts, flags: dict | None = None, reason=None):
    """Log the compiled bytecode and why it compiled (``reason``: msvm.reasons); the event carries
    what runs (after fusion), whose offsets later events use."""
    if reason is not None:                 # (a kernel site's first compile in this code says why it is new)
        for c in run.all_codes():
            if c.compile_reason is None:
                c.compile_reason = reason
    if events._subs:
        events.emit({"type": "bytecode", "code": run.name, "file": run.filename, "line": run.firstlineno,
                     "program": to_json(run), "compile_ms": t_ms, "variant": variant_count,
                     # (which Code object each of the program's functions is: the ids exec events carry)
                     "code_ids": [c.uid for c in run.all_codes()], "flags": dict(flags or {}),
                     **(reason.fields() if reason is not None else {})})
    if context.jit_option("dump_bytecode", opts):
        log.emit_block(dump(code))
    if log.debug_enabled():
        if flags is not None:
            vals = ", ".join(f"{k}={v}" for k, v in flags.items())
            log.logger.debug("Specialized %s for %s in %.2fms: %d instructions run%s", code.name, vals, t_ms,
                             len(run.instrs), f" ({reason.kind}: {reason.text})" if reason is not None else "")
            return
        sig = ", ".join(f"{p}: {t}" for p, t in code.params)
        log.logger.debug("Compiled %s (%s) -> %s in %.2fms: %d instructions, variant %d%s", code.name, sig,
                         code.result_type, t_ms, len(code.instrs), variant_count,
                         f" ({reason.kind}: {reason.text})" if reason is not None else "")


class _Runner:
    """What Cells and jit functions share: arguments to values, the call memo, the call.
    Subclasses set ``n``, ``names``, ``params``, ``label``, ``variants``, ``memo`` and define ``resolve``."""

    vararg = None       # the index of a *args parameter (then ``n`` is -1: no call has the plain count)

    def values(self, args, kwargs):
        if self.vararg is not None:
            return args if not kwargs and len(args) >= self.vararg else bind_arguments(
                self.params, args, dict(kwargs), self.label)
        if not kwargs and len(args) == self.n:
            return args
        if len(args) + len(kwargs) == self.n:      # the rest by keyword, all given
            vals = list(args)
            names = self.names
            try:
                for k in range(len(args), self.n):
                    vals.append(kwargs[names[k]])
                return vals
            except KeyError:
                pass
        return bind_arguments(self.params, args, kwargs, self.label)

    def check_flags(self, vals) -> None:
        """A parameter whose default is a bool takes a bool (or 0/1, the same flag); anything else
        is a TypeError that names the parameter. Asked when a call's signature is not in the memo."""
        for k in self.flag_idx:
            v = vals[k]
            if isinstance(v, (bool, np.bool_)) or (isinstance(v, (int, np.integer)) and v in (0, 1)):
                continue
            name, default = self.params[k]
            raise TypeError(f"{self.label}: argument '{name}' is a bool flag (its default is {default}), got "
                            f"{type(v).__name__} {_short(v)}; pass True or False (0 and 1 are taken as False and "
                            "True)")

    def compile_error(self, e: FrontendError, specs, vals) -> Exception:
        """A compile error that comes from an argument baked in as a constant (None, a str, a list
        where a tensor is used) as a TypeError naming the parameter; any other stays as it is."""
        baked = [(name, v) for (name, _), s, v in zip(self.params, specs, vals) if s.kind == "const"]
        blamed = [(name, v) for name, v in baked if re.search(rf"\b{re.escape(type(v).__name__)}\b", e.message)
                  or (v is not None and _short(v) in e.message)]
        if not blamed:
            return e
        what = ", ".join(f"'{name}' = {_short(v)} ({type(v).__name__})" for name, v in blamed)
        return ArgumentError(f"{self.label}: argument {what}, baked into the bytecode as a constant, cannot be used "
                             f"here: {e.message}; pass a Tensor (or a value this code accepts)",
                             e.filename, e.line, e.col, e.end_line, e.end_col)

    # the call itself, its memo of exact signatures and its guard: callpath.py
    __call__ = callpath.call
    shapes_seen = 0     # PARAMETER_SHAPES when the variants were compiled
    guard = None        # callpath.Guard: the last signature that ran its replay
    owner = None        # the Cell or JitFunction that calls this runner (and holds the guard too)
    options = None      # the jit options (context.compile_options) the variants, memo and guard are for,
    epoch = -1          # at this context.OPTIONS_EPOCH;
    stash = None        # and those of other options: {options: (variants, memo, guard)} (callpath.options)


def _short(v) -> str:
    r = repr(v)
    return r if len(r) <= 40 else r[:37] + "..."


def exact_specs(specs, vals) -> list:
    """specs with each tensor's dims fixed to this call's shape, and each int argument baked in: for
    code that needs a dim's or an int's value while compiling (ops.split into that many parts, vmap's
    loop, P.Renorm(p, axis) with p an argument, a shape tensor's length that sets a random draw's
    rank), which symbols cannot give; set_inputs' None dims too (the compile would fail otherwise); and
    each bool flag (a loop's break under ``if flag:``, ``while flag:``)."""
    out = []
    for s, v in zip(specs, vals):
        if s.kind == "tensor" and isinstance(v, Tensor) and not v.is_placeholder:
            s = ArgSpec("tensor", TensorType(tuple(Expr.const(n) for n in v.shape), s.type.dtype))
        elif s.kind == "scalar" and type(v) is int:    # (issue 21) an int a primitive's attribute needs
            s = ArgSpec("const", value=v)
        elif s.kind == "scalar" and type(v) in (bool, np.bool_):    # a bool flag a loop's break tests
            s = ArgSpec("const", value=bool(v))
        out.append(s)
    return out


def _exact_key(vals) -> tuple:
    return ("exact",) + tuple(tuple(v.shape) if isinstance(v, Tensor) else v if type(v) is int else
                              bool(v) if type(v) in (bool, np.bool_) else None for v in vals)


class CellRunner(_Runner):
    """Per Cell instance: compiled variants keyed by argument signature (and by exact shapes once
    its construct needed a dim's value: ``exact_shapes``)."""

    exact_shapes = False

    def __init__(self, cell):
        self.cell = self.owner = cell
        self.variants: dict = {}
        self.memo: dict = {}     # exact call signature -> callpath.Signature
        self.params = construct_params(cell)
        self.vararg = vararg_index(self.params)
        self.n = len(self.params) if self.vararg is None else -1
        self.defaults = [d for _, d in self.params]
        self.names = [n for n, _ in self.params]
        self.flag_idx = [k for k, (_, d) in enumerate(self.params) if type(d) is bool]
        self.label = f"{type(cell).__name__}.construct()"

    def resolve(self, vals):
        """(Variant, BoundCode for the flag values, run-time arguments) for this call; compiles a new signature."""
        if self.cell._msvm_inputs is None:
            key = tuple([_key_of(v) for v in vals])
        else:   # declared (set_inputs) dims are dynamic even when they are 1
            declared = self.cell._msvm_inputs
            key = tuple(_key_declared(v) if k < len(declared) and isinstance(declared[k], Tensor) else _key_of(v)
                        for k, v in enumerate(vals))
        exact = self.exact_shapes
        if exact:
            key += _exact_key(vals)
        var = self.variants.get(key)
        if var is None:
            self.check_flags(vals)
            var = self.compile(vals, reasons.variant_needed(self.label, self.names, key, vals, list(self.variants),
                                                            self.__dict__.pop("dropped", None)))
            if self.exact_shapes and not exact:     # (this compile found it needs exact shapes)
                key += _exact_key(vals)
            self.variants[key] = var
        elif self.flag_idx:
            self.check_flags(vals)
        rt = [_runtime_value(vals[i]) for i in var.runtime_idx] if var.partial else [_runtime_value(v) for v in vals]
        return var, (var.bound if var.flags is None else var.bound_for(rt)), rt

    def specs(self, vals):
        declared = getattr(self.cell, "_msvm_inputs", None)
        specs = []
        for k, ((name, _), v) in enumerate(zip(expand_params(self.params, len(vals)), vals)):
            dec = declared[k] if declared is not None and k < len(declared) else None
            specs.append(arg_spec(name, v, dec if isinstance(dec, Tensor) else None, k in self.flag_idx))
        return specs

    def compile(self, vals, reason=None):
        t0 = time.perf_counter()
        specs = self.specs(vals)
        if self.exact_shapes:
            specs = exact_specs(specs, vals)
        try:
            try:
                code = compile_cell_for(self.cell, specs, generation=PARAMETER_SHAPES[0])
            except FrontendError as e:
                if not getattr(e, "needs_known_dims", False) or self.exact_shapes:
                    raise
                self.exact_shapes = True         # (from now on a variant per exact shape)
                specs = exact_specs(specs, vals)
                code = compile_cell_for(self.cell, specs, generation=PARAMETER_SHAPES[0])
        except FrontendError as e:
            raise self.compile_error(e, specs, vals) from None
        run = optimize(code)
        _announce(code, run, len(self.variants) + 1, (time.perf_counter() - t0) * 1e3, None, reason=reason)
        bound = link_cell(run, self.cell, accelerator())
        return Variant(run, bound, [k for k, s in enumerate(specs) if s.kind != "const"], len(specs), code,
                       lambda c: link_cell(c, self.cell, accelerator()))


class JitRunner(_Runner):
    """``ms.jit`` on a plain function."""

    def __init__(self, fn, jit_config=None, owner=None):
        self.fn = fn
        self.owner = owner          # the JitFunction, whose __call__ calls the guard itself (callpath)
        self.opts = dict(jit_config or {})
        sig = inspect.signature(fn)
        self.params = signature_params(sig)
        self.vararg = vararg_index(self.params)
        self.n = len(self.params) if self.vararg is None else -1
        self.names = [n for n, _ in self.params]
        self.flag_idx = [k for k, (_, d) in enumerate(self.params) if type(d) is bool]
        self.label = f"{getattr(fn, '__qualname__', fn)}()"
        self.variants: dict = {}
        self.memo: dict = {}
        self.src = None

    cell = property(lambda self: self.fn)

    exact_shapes = False

    def resolve(self, vals):
        key = tuple(_key_of(v) for v in vals)
        if self.exact_shapes:
            key += _exact_key(vals)
            specs_exact = True
        else:
            specs_exact = False
        var = self.variants.get(key)
        if self.flag_idx:
            self.check_flags(vals)
        if var is None:
            t0 = time.perf_counter()
            why = reasons.variant_needed(self.label, self.names, key, vals, list(self.variants),
                                         self.__dict__.pop("dropped", None))
            specs = [arg_spec(name, v, None, k in self.flag_idx)
                     for k, ((name, _), v) in enumerate(zip(expand_params(self.params, len(vals)), vals))]
            if specs_exact:
                specs = exact_specs(specs, vals)
            try:
                try:
                    code = compile_function(source_of(self.fn), specs, name=self.fn.__qualname__)
                except FrontendError as e:
                    if not getattr(e, "needs_known_dims", False) or self.exact_shapes:
                        raise
                    self.exact_shapes = True
                    specs = exact_specs(specs, vals)
                    code = compile_function(source_of(self.fn), specs, name=self.fn.__qualname__)
                    key += _exact_key(vals)
            except FrontendError as e:
                raise self.compile_error(e, specs, vals) from None
            run = optimize(code)
            _announce(code, run, len(self.variants) + 1, (time.perf_counter() - t0) * 1e3, self.opts, reason=why)
            bound = BoundCode(run, None, {}, None, accelerator())
            var = self.variants[key] = Variant(run, bound, [k for k, s in enumerate(specs) if s.kind != "const"], len(specs))
        return var, var.bound, [_runtime_value(vals[i]) for i in var.runtime_idx]
