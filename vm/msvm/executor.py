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

from . import context, device, events, log
from . import dtype as dt
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
from .interp import replay
from .interp.interpreter import BoundCode, get_trace
from .interp.replay import FALLBACK
from .tensor import PARAMETER_SHAPES, Tensor, wrap


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


_new_tensor = object.__new__
MEMO_SIZE = 64          # exact call signatures remembered per Cell (layouts, dtypes, int and bool values)
REPLAY_AFTER = 2        # calls at one signature before its path is written as a straight-line replay
_JIT = context._ctx["jit_config"]    # the live jit_config (set_context updates it in place)
_DT = dt.from_numpy
_SLOW = events.SLOW     # reasons calls go through the interpreter (event subscribers, a trace hook, L1)
_BY_NP = dt._BY_NP


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
                          flags=getattr(spec, "specialized_on", {}))
            self.runs[key] = b
        return b


_warm = [False]


def warm_up() -> None:
    """Once per process, in GRAPH_MODE: have the background compiler load LLVM now
    (``tiers.warm_up``)."""
    if not _warm[0] and context._ctx["mode"] == context.GRAPH_MODE:
        _warm[0] = True
        from .compiler import tiers

        tiers.warm_up()


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
    fused = fuse(code)
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


def _announce(code, run, variant_count: int, t_ms: float, opts, flags: dict | None = None):
    """Log the compiled bytecode; the event carries what runs (after fusion), whose offsets later events use."""
    if events._subs:
        events.emit({"type": "bytecode", "code": run.name, "file": run.filename, "line": run.firstlineno,
                     "program": to_json(run), "compile_ms": t_ms})
    if context.jit_option("dump_bytecode", opts):
        log.emit_block(dump(code))
    if log.debug_enabled():
        if flags is not None:
            vals = ", ".join(f"{k}={v}" for k, v in flags.items())
            log.logger.debug("Specialized %s for %s in %.2fms: %d instructions run", code.name, vals, t_ms,
                             len(run.instrs))
            return
        sig = ", ".join(f"{p}: {t}" for p, t in code.params)
        log.logger.debug("Compiled %s (%s) -> %s in %.2fms: %d instructions, variant %d", code.name, sig,
                         code.result_type, t_ms, len(code.instrs), variant_count)


def _observed_call(var, bound, rt, env):
    """A call while someone listens to events: its time goes out as an ``exec`` event."""
    t0 = time.perf_counter()
    out = bound.call(rt, env=env)
    events.emit({"type": "exec", "code": var.code.name, "ms": (time.perf_counter() - t0) * 1e3})
    return out


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

    shapes_seen = 0     # PARAMETER_SHAPES when the variants were compiled
    guard = None        # (guard, its "no" answer, memo entry): the last signature that ran its replay

    FALLBACK = FALLBACK     # what a guard returns when its replay raised: the interpreter runs the call

    @staticmethod
    def result(out):
        """A replay's or interpreter's result as the caller gets it: an array becomes a Tensor."""
        if type(out) is np.ndarray:
            t = _new_tensor(Tensor)
            t._data, t._pshape, t._dtype = out, None, _BY_NP.get(out.dtype) or _DT(out.dtype)
            return t
        return wrap(out)

    def __call__(self, args, kwargs, guarded: bool = False):
        """``guarded``: the caller (Cell.__call__) has had the guard run these values, whose replay
        fell back; the guard is not asked again."""
        if PARAMETER_SHAPES[0] != self.shapes_seen:     # a Parameter changed shape: verify again
            self.variants.clear()
            self.memo.clear()
            self.guard = None
            self.shapes_seen = PARAMETER_SHAPES[0]
            self.aimed(None)
        vals = args if (not kwargs and len(args) == self.n) else self.values(args, kwargs)
        g = self.guard
        if g is not None and not guarded and not _SLOW and _JIT["jit_level"] != "L1":
            # the last replayed signature again? its guard checks the values natively and runs the replay
            out = g[0](*vals)
            if type(out) is Tensor:          # (the guard makes the Tensor of an array of the expected dtype)
                return out
            if out is not g[1] and out is not FALLBACK:
                return self.result(out)
        # the steady state: the same exact call signature as before -> its variant, program and bindings
        sig, rt = [], []
        for v in vals:
            t = type(v)
            if t is Tensor:
                a = v._data
                sig.append((a.shape, a.strides, a.dtype))
                rt.append(a)
            elif t is bool or t is int:
                sig.append((t, v))
                rt.append(v)
            elif t is float:
                sig.append(t)
                rt.append(v)
            elif v is None:         # an omitted optional argument (m=None): baked in, left out of rt below
                sig.append(None)
                rt.append(None)
            else:
                sig = None
                break
        hit = self.memo.get(tuple(sig)) if sig is not None else None
        out = FALLBACK
        if hit is not None:
            var, bound, env, rp = hit[0], hit[1], hit[2], hit[3]
            if var.partial:
                rt = [rt[i] for i in var.runtime_idx]
            if rp and not _SLOW and _JIT["jit_level"] != "L1":
                out = rp(*rt)           # the straight-line replay of this signature's path
                if out is not FALLBACK and (g is None or g[2] is not hit) and self.vararg is None:
                    self.aim(hit, vals, out)     # (a guard takes a fixed count of values: none for *args)
            elif rp is None:
                hit[4] += 1
                if hit[4] >= REPLAY_AFTER:
                    hit[3] = replay.build(bound, env) or False
            if out is FALLBACK:
                out = _observed_call(var, bound, rt, env.copy()) if events._subs else bound.call(rt, env=env.copy())
        else:
            var, bound, rt = self.resolve(vals)
            env = bound.fast_bind(rt)
            if env is not None and sig is not None:
                if len(self.memo) >= MEMO_SIZE:
                    self.memo.clear()
                self.memo[tuple(sig)] = [var, bound, env.copy(), None, 0, None]
            out = _observed_call(var, bound, rt, env) if events._subs else bound.call(rt, env=env)
        return self.result(out)

    def aim(self, hit: list, vals, out) -> None:
        """Point the guard at this memo entry's signature, whose replay just ran: its guard when
        built; else its trampoline is asked of the background compiler (hit[5]: None not yet
        asked, a pattern while building, False where these values take no guard)."""
        state = hit[5]
        if state is None:
            state = hit[5] = _guard_pattern(hit[0], vals)
            if state:
                from .compiler import entry, tiers

                tiers.worker().submit(lambda: entry.prepare_guard(state, tiers.kernel_cache()))
            return
        if type(state) is tuple:
            from .compiler import entry

            ready = entry.guard_ready(state)
            if ready is None:
                return
            try:
                hit[5] = state = _make_guard(state, hit[3], vals, out, self.names) if ready else False
            except Exception as e:  # noqa: BLE001 - a guard only saves time; the Python way still runs
                log.logger.debug("no call guard for %s: %s", type(self.cell).__name__, e)
                hit[5] = state = False
        if state:
            self.guard = (state[0], state[1], hit)
            self.aimed(self.guard)

    def aimed(self, guard) -> None:
        """The guard changed (None: dropped); a Cell's runner tells the Cell (``Cell.__call__``)."""


def _short(v) -> str:
    r = repr(v)
    return r if len(r) <= 40 else r[:37] + "..."


def _tensor_slots():
    """The offsets of a Tensor's ``_data``, ``_pshape`` and ``_dtype`` (__slots__ members) in the
    object, found by looking for markers there; None unless found alike twice."""
    import ctypes

    found = set()
    for _ in range(2):
        t, marks = _new_tensor(Tensor), (object(), object(), object())
        t._data, t._pshape, t._dtype = marks
        found.add(tuple(next((off for off in range(16, Tensor.__basicsize__, 8)
                              if ctypes.c_void_p.from_address(id(t) + off).value == id(m)), None) for m in marks))
    slots = found.pop() if len(found) == 1 else None
    return slots if slots is not None and None not in slots else None


_SLOTS = _tensor_slots()


def _guard_pattern(var, vals):
    """The guard trampoline's pattern for these call values (compiler/entry.py ``guard_ir``), or
    False where a value is neither an exact Tensor nor a bool."""
    if _SLOTS is None:
        return False
    passed = set(var.runtime_idx) if var.partial else set(range(len(vals)))
    pattern = []
    for k, v in enumerate(vals):
        if type(v) is Tensor and type(v._data) is np.ndarray:
            pattern.append(("t", v._data.ndim, k in passed))
        elif type(v) is bool:
            pattern.append(("b", k in passed))
        else:
            return False
    return tuple(pattern)


def _make_guard(pattern, rp, vals, out, names):
    """[guard, its "no" answer, what it needs alive] for the signature of ``vals`` (a list, where
    the pattern that asked for it is a tuple)."""
    from .compiler import entry

    expected, keep = [], [rp, names]
    for v in vals:
        if type(v) is bool:
            expected.append(id(v))
        else:
            a = v._data
            keep.append(a.dtype)
            expected += [id(a.dtype), *a.shape, *a.strides]
    result = None
    if type(out) is np.ndarray and _BY_NP.get(out.dtype) is not None:
        result = (out.dtype, _BY_NP[out.dtype])
        keep.append(result)
    made = entry.make_guard(pattern, rp, Tensor, _SLOTS, result, names, expected)
    return False if made is None else [made[0], made[1], keep]


def exact_specs(specs, vals) -> list:
    """specs with each tensor's dims fixed to this call's shape, and each int argument baked in: for
    code that needs a dim's or an int's value while compiling (ops.split into that many parts, vmap's
    loop, P.Renorm(p, axis) with p an argument, a shape tensor's length that sets a random draw's
    rank), which symbols cannot give; set_inputs' None dims too (the compile would fail otherwise)."""
    out = []
    for s, v in zip(specs, vals):
        if s.kind == "tensor" and isinstance(v, Tensor) and not v.is_placeholder:
            s = ArgSpec("tensor", TensorType(tuple(Expr.const(n) for n in v.shape), s.type.dtype))
        elif s.kind == "scalar" and type(v) is int:    # (issue 21) an int a primitive's attribute needs
            s = ArgSpec("const", value=v)
        out.append(s)
    return out


def _exact_key(vals) -> tuple:
    return ("exact",) + tuple(tuple(v.shape) if isinstance(v, Tensor) else v if type(v) is int else None
                              for v in vals)


class CellRunner(_Runner):
    """Per Cell instance: compiled variants keyed by argument signature (and by exact shapes once
    its construct needed a dim's value: ``exact_shapes``)."""

    exact_shapes = False

    def __init__(self, cell):
        self.cell = cell
        self.variants: dict = {}
        self.memo: dict = {}     # exact call signature -> (Variant, BoundCode, symbol bindings)
        self.params = construct_params(cell)
        self.vararg = vararg_index(self.params)
        self.n = len(self.params) if self.vararg is None else -1
        self.defaults = [d for _, d in self.params]
        self.names = [n for n, _ in self.params]
        self.flag_idx = [k for k, (_, d) in enumerate(self.params) if type(d) is bool]
        self.label = f"{type(cell).__name__}.construct()"

    def aimed(self, guard) -> None:
        fast = None if guard is None else (guard[0], guard[1], self.shapes_seen)
        if self.cell.__dict__.get("_runner") is self:
            object.__setattr__(self.cell, "_fast", fast)

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
            var = self.compile(vals)
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

    def compile(self, vals):
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
        _announce(code, run, len(self.variants) + 1, (time.perf_counter() - t0) * 1e3, None)
        bound = link_cell(run, self.cell, accelerator())
        return Variant(run, bound, [k for k, s in enumerate(specs) if s.kind != "const"], len(specs), code,
                       lambda c: link_cell(c, self.cell, accelerator()))


class JitRunner(_Runner):
    """``ms.jit`` on a plain function."""

    def __init__(self, fn, jit_config=None, owner=None):
        self.fn = fn
        self.owner = owner          # the JitFunction, whose __call__ calls the guard itself
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

    def aimed(self, guard) -> None:
        if self.owner is not None and self.owner._runner is self:
            self.owner._fast = None if guard is None else (guard[0], guard[1], self.shapes_seen)

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
            _announce(code, run, len(self.variants) + 1, (time.perf_counter() - t0) * 1e3, self.opts)
            bound = BoundCode(run, None, {}, None, accelerator())
            var = self.variants[key] = Variant(run, bound, [k for k, s in enumerate(specs) if s.kind != "const"], len(specs))
        return var, var.bound, [_runtime_value(vals[i]) for i in var.runtime_idx]
