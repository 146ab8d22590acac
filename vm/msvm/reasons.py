"""Why a compile happened, and why a call ran without a compiled kernel: one place for the
sentences the ``[MS]`` log, the profile and the editor's list of recent kernel keys show
(as JAX's ``explain_cache_misses`` and PyTorch's recompile reasons do).

A ``Reason`` is a kind and a sentence. The kinds:

==================  ===========================================================================
cold                nothing compiled yet: the first call of a Cell / of a kernel site
new_dtype           an input's dtype differs from every compiled one (which input, from what)
new_shape_class     an input's rank, its dims of size 1 (broadcasting) or scalar-vs-tensor
                    differ: a new shape-generic (L2) kernel / a new bytecode variant
new_layout          a layout the kernels depend on differs: a strided view where they take
                    C-contiguous arrays, a fixed weight run on its transpose vs a writable one
new_shape           the same class at new concrete dims: a specialized (L3) kernel, or a Cell
                    that compiles per exact shape
hot                 a site called ``l3_after`` times at one shape: specialized (L3), and then its
                    light L2 kernel compiled again optimized, after the other queued compiles
polymorphic         a site's shapes kept changing: its light L2 kernel compiled again optimized
new_value           a Python value baked into the bytecode (a str, a tuple, an int a primitive
                    needs) differs
new_type            an argument's Python type differs (a Tensor where an int was)
new_flags           bool flag values the bytecode was not yet specialized for
discarded           what was cached was dropped: a disk entry rejected (why), or the bytecode
                    variants of a Cell after one of its Parameters changed shape
failed              the compile raised (the error)
over_budget         the compile took longer than its tier's budget (seconds vs budget)
pending             a call ran the interpreter while its kernel compiles in the background
unsupported         inputs the compiled tiers do not take (float16, mixed dtypes...): L1
==================  ===========================================================================

Kernel reasons have two parts, joined in one sentence: why this site needed a kernel
(``kernel_needed``) and where the kernel came from (``from_cache``: memory, disk, or compiled
because the cache held nothing — cold — or its disk entry was discarded).

This module imports nothing of msvm: the tier managers (CPU: ``tiers.Site`` and
``build.compile_kernel``; GPU), the executor, the call path (``callpath.call``: variants dropped
after a Parameter changed shape) and ``Parameter.set_data`` call it with what they know (input
shapes and dtypes, the keys they hold); they do the logging and the events.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

# what outranks what when one sentence has several causes (the kind names the first)
_RANK = ("discarded", "new_dtype", "new_layout", "new_type", "new_shape_class", "new_value", "new_shape")


@dataclass(frozen=True)
class Reason:
    kind: str
    text: str

    def fields(self) -> dict:
        """The two event / record fields: ``reason_kind`` and ``reason``."""
        return {"reason_kind": self.kind, "reason": self.text}

    def then(self, more: str, kind: str | None = None) -> "Reason":
        """This reason with a second clause (and, where given, a kind that outranks it)."""
        return Reason(kind or self.kind, f"{self.text}; {more}")


class OverBudget(TimeoutError):
    """A compile that finished after its tier's budget."""

    def __init__(self, level: int, seconds: float, budget: float):
        self.level, self.seconds, self.budget = level, seconds, budget
        scale = os.environ.get("MSVM_COMPILE_BUDGET_SCALE")
        how = f" (MSVM_COMPILE_BUDGET_SCALE={scale})" if scale else ""
        super().__init__(f"compile took {seconds:.3f}s of CPU time, over the L{level} budget of {budget:.3f}s{how}")


def check_budget(level: int, seconds: float, budget: float) -> None:
    if seconds > budget:
        raise OverBudget(level, seconds, budget)


def failure(e: BaseException, level: int) -> Reason:
    """A compile that raised: over its budget, or failed with this error."""
    if isinstance(e, OverBudget):
        return Reason("over_budget", f"L{level} {e}; the site stays on L1 for this shape class")
    return Reason("failed", f"L{level} compile failed ({type(e).__name__}: {e}); the site stays on L1 for this "
                            "shape class")


# ---------------------------------------------------------------- inputs of a kernel site

def where(name: str, code: str, offset: int, filename: str | None, line) -> str:
    """A site as the sentences name it: ``FUSED_MUL_ADD at Net.construct+0x0006 (net.py:12)``."""
    return f"{name} at {code}+0x{offset:04x} ({os.path.basename(filename or '')}:{line})"


def _shape(s) -> str:
    return "(" + ", ".join(str(int(n)) for n in s) + ("," if len(s) == 1 else "") + ")"


def describe(ck) -> str:
    """A site's inputs (a plan key: (shape, dtype) | None per input, a trailing bool for a
    transposed weight) as text."""
    parts = []
    for x in ck:
        if isinstance(x, bool):
            continue
        parts.append("scalar" if x is None else f"{x[1]}{list(int(n) for n in x[0])}")
    return "[" + ", ".join(parts) + "]"


def _input_diffs(new, old) -> list:
    """[(kind, text)] for the inputs whose description differs (most telling first): an input
    whose dtype and shape both differ counts twice, so the closest cached inputs are the ones
    that differ least."""
    out = []
    for i, (a, b) in enumerate(zip(new, old)):
        if a == b:
            continue
        if isinstance(a, bool) or isinstance(b, bool):
            fixed = "a fixed weight (a read-only Parameter array, run transposed or packed once)"
            out.append(("new_layout", f"input 1: {fixed if a else 'a writable array'} vs cached "
                                      f"{fixed if b else 'a writable array'}"))
            continue
        if a is None or b is None:
            what = (lambda x: "a scalar" if x is None else f"a tensor {x[1]}{_shape(x[0])}")
            out.append(("new_shape_class", f"input {i}: {what(a)} vs cached {what(b)}"))
            continue
        if str(a[1]) != str(b[1]):
            out.append(("new_dtype", f"input {i}: dtype {a[1]} vs cached {b[1]}"))
        sa, sb = tuple(a[0]), tuple(b[0])
        if sa == sb:
            continue
        if len(sa) != len(sb):
            out.append(("new_shape_class", f"input {i}: rank {len(sa)} {_shape(sa)} vs cached rank {len(sb)} "
                                           f"{_shape(sb)}"))
        elif [n == 1 for n in sa] != [n == 1 for n in sb]:
            ones = [d for d, (p, q) in enumerate(zip(sa, sb)) if (p == 1) != (q == 1)]
            out.append(("new_shape_class", f"input {i}: shape {_shape(sa)} vs cached {_shape(sb)} (dim "
                                           f"{', '.join(map(str, ones))} of size 1 or not: another broadcast)"))
        else:
            out.append(("new_shape", f"input {i}: shape {_shape(sa)} vs cached {_shape(sb)}"))
    out.sort(key=lambda d: _RANK.index(d[0]))
    return out


def _closest(new, olds):
    """(old, diffs) with the fewest differing inputs (JAX's "closest seen signature")."""
    best = None
    for old in olds:
        d = _input_diffs(new, old)
        if best is None or len(d) < len(best[1]):
            best = (old, d)
    return best


def kernel_needed(where: str, level: int, ck, others: list, calls: int | None = None,
                  l3_after: int | None = None, variant: Reason | None = None) -> Reason:
    """Why a site at ``where`` ("FUSED_MATMUL_ADD at Block.construct+0x0006 (prog.py:14)") asks for
    an L``level`` kernel for inputs ``ck``: ``others`` are the inputs of its other kernels at that
    tier (another shape class for L2, another shape for L3); ``calls``: an automatic L3 compile
    after that many calls at one shape (``l3_after``); ``variant``: why the site's bytecode was
    compiled (a site of a new variant has no kernels of its own: the variant says what is new)."""
    head = f"{where}: L{level} kernel for inputs {describe(ck)}"
    if calls is not None:
        text = f"{head}: called {calls} times at these shapes (l3_after={l3_after}), so specialized"
        if others:
            text += f" (other shapes specialized: {', '.join(describe(o) for o in others)})"
        return Reason("hot", text)
    if not others:
        if variant is not None and variant.kind != "cold":
            return Reason(variant.kind, f"{head}: the first kernel of this site, in new bytecode ({variant.text})")
        return Reason("cold", f"{head}: the first kernel of this site at L{level}")
    old, diffs = _closest(ck, others)
    if level == 2:
        diffs = [d for d in diffs if d[0] != "new_shape"] or [("new_shape_class", "the collapsed dims or broadcast "
                                                                                   "pattern differ")]
        kind = diffs[0][0]
        what = "new dtype" if kind == "new_dtype" else "new layout" if kind == "new_layout" else "new shape class"
    else:
        kind, what = (diffs[0][0] if diffs else "new_shape"), "new shape"
    n = len(others)
    return Reason(kind, f"{head}: {what}: {'; '.join(t for _, t in diffs)} (closest of {n} cached: "
                        f"{describe(old)})")


def promoted(where: str, ck, most: int) -> Reason:
    """Why a site's shape-generic kernel is compiled again, optimized (compiler/tiers.py ``Site._promote``)."""
    return Reason("polymorphic", f"{where}: L2 kernel for inputs {describe(ck)} compiled again with the IR passes "
                                 f"and O3: its shapes kept changing (more than {most} specialized), so this "
                                 "shape-generic kernel serves every shape from now on")


def promoted_ahead(where: str, ck) -> Reason:
    """Why a hot site's shape-generic kernel is compiled again, optimized, once its specialized kernel
    landed (compiler/tiers.py ``Site._promote(ahead=True)``)."""
    return Reason("hot", f"{where}: L2 kernel for inputs {describe(ck)} compiled again with the IR passes and "
                         "O3 once this site's specialized (L3) kernel was ready: the site is hot, so a shape "
                         "it meets later runs an optimized kernel at once")


def l1_only(where: str, ck, why: str, strides=None) -> Reason:
    """Why inputs run the L1 kernel at a site: a strided view (``strides``: (input, strides,
    contiguous strides)) or what the planner does not take."""
    if strides is not None:
        i, got, want = strides
        return Reason("new_layout", f"{where}: inputs {describe(ck)} run the L1 kernel: input {i} is a strided view "
                                    f"(strides {_shape(got)} vs the C-contiguous {_shape(want)} the kernels take)")
    return Reason("unsupported", f"{where}: inputs {describe(ck)} run the L1 kernel: {why}")


def pending(level: int) -> Reason:
    return Reason("pending", f"its L{level} kernel is compiling in the background; the L1 kernel runs meanwhile")


def from_cache(source: str, discarded: str | None = None, refused: str | None = None) -> str:
    """Where a kernel came from, as a clause: memory, disk, or compiled (why the cache had none)."""
    if source == "memory":
        return "found in the kernel cache in memory (compiled earlier in this process)"
    if source == "disk":
        return "loaded from the kernel cache on disk"
    if discarded:
        return f"compiled: its disk cache entry was discarded ({discarded})"
    if refused:
        return f"compiled: cold (the disk cache is off: {refused})"
    return "compiled: cold cache (not in memory, not on disk)"


def kernel_source(need: Reason | None, source: str, discarded: str | None, refused: str | None) -> Reason:
    """``need`` joined with where the kernel came from; a discarded disk entry names the kind."""
    clause = from_cache(source, discarded, refused)
    if need is None:
        return Reason("discarded" if discarded else "cold", clause)
    return need.then(clause, "discarded" if discarded else None)


# ---------------------------------------------------------------- bytecode variants (executor)

def _arg_diff(name: str, new, old, v) -> list:
    """[(kind, text)] for one argument's part of a variant key (executor._key_of) that differs
    (a tensor whose dtype and dims of size 1 both differ gives two)."""
    if type(new) is tuple and type(old) is tuple and len(new) == 3 and len(old) == 3 and new[0] == "nd" == old[0]:
        new, old = (new[1], len(new[2]), new[2]), (old[1], len(old[2]), old[2])     # (a numpy array argument)
    if type(new) is tuple and type(old) is tuple and new and old and hasattr(new[0], "itemsize") \
            and hasattr(old[0], "itemsize"):
        shape = f"{_shape(v.shape)}" if hasattr(v, "shape") else ""
        out = []
        if new[0] != old[0]:
            out.append(("new_dtype", f"argument {name}: dtype {new[0]} vs cached {old[0]} (shape {shape})"))
        if new[1] != old[1]:
            out.append(("new_shape_class", f"argument {name}: rank {new[1]} vs cached rank {old[1]} (shape {shape})"))
        elif new[2:] != old[2:]:
            ones = lambda k: [d for d, one in enumerate(k[2] or ()) if one] if len(k) > 2 else []  # noqa: E731
            out.append(("new_shape_class", f"argument {name}: shape {shape} has dims of size 1 at "
                                           f"{ones(new) or 'none'} vs cached at {ones(old) or 'none'} (a dim of size 1 "
                                           "is compiled as the constant 1; set_inputs with None keeps it a symbol)"))
        return out
    if type(new) is tuple and type(old) is tuple and new[:1] == ("c",) == old[:1] and new[1] is old[1]:
        return [("new_value", f"argument {name}: {new[2]!r} vs cached {old[2]!r} (baked into the bytecode)")]

    def tname(k):
        if type(k) is type:
            return k.__name__
        if type(k) is tuple and k and hasattr(k[0], "itemsize"):
            return f"Tensor[{k[0]}]"
        if type(k) is tuple and k[:1] == ("c",):
            return f"{k[1].__name__} {k[2]!r}"
        return "an object" if type(k) is tuple and k[:1] == ("id",) else str(k)
    return [("new_type", f"argument {name}: {tname(new)} vs cached {tname(old)}")]


def _split_exact(key):
    k = list(key)
    for j, part in enumerate(k):
        if part == "exact":
            return tuple(k[:j]), tuple(k[j + 1:])
    return tuple(k), None


def variant_needed(label: str, names, key: tuple, vals, cached, dropped: str | None = None) -> Reason:
    """Why ``label`` (``Net.construct()``) compiles bytecode for a call whose signature is ``key``
    (executor: per argument its dtype, rank and dims of size 1, or its Python type / baked value;
    then the exact shapes when the Cell needs them); ``cached``: the keys it already has."""
    if not cached:
        if dropped:
            return Reason("discarded", f"{label}: compiled again: {dropped}")
        return Reason("cold", f"{label}: first call with these argument kinds")
    base, exact = _split_exact(key)
    best = None
    for old in cached:
        ob, oe = _split_exact(old)
        diffs = []
        if len(ob) != len(base):
            diffs.append(("new_type", f"{len(base)} arguments vs cached {len(ob)}"))
        for k, (p, q) in enumerate(zip(base, ob)):
            if p != q:
                name = names[k] if k < len(names) else f"#{k}"
                diffs += _arg_diff(name, p, q, vals[k] if k < len(vals) else None)
        if not diffs and exact is not None and oe is not None:
            for k, (p, q) in enumerate(zip(exact, oe)):
                if p != q:
                    name = names[k] if k < len(names) else f"#{k}"
                    diffs.append(("new_shape", f"argument {name}: {_shape(p) if type(p) is tuple else p} vs cached "
                                               f"{_shape(q) if type(q) is tuple else q} (this Cell compiles per exact "
                                               "shape: its code needs a dim's value)"))
        if not diffs:
            diffs.append(("new_shape", "compiled for exact shapes from now on: the code needs a dim's value"))
        if best is None or len(diffs) < len(best):
            best = diffs
    best.sort(key=lambda d: _RANK.index(d[0]) if d[0] in _RANK else len(_RANK))
    return Reason(best[0][0], f"{label}: {'; '.join(t for _, t in best)} (closest of {len(cached)} compiled "
                              "variants)")


def flags_needed(label: str, flags: dict, cached: list) -> Reason:
    """Why bytecode is specialized for these bool flag values (``cached``: the value tuples it has)."""
    vals = ", ".join(f"{k}={v}" for k, v in flags.items())
    if not cached:
        return Reason("cold", f"{label}: first call with flags {vals}")
    shown = "; ".join(", ".join(f"{k}={v}" for k, v in zip(flags, c)) for c in cached)
    return Reason("new_flags", f"{label}: flags {vals} vs cached {shown}")


_param_change: list = [None]


def parameter_reshaped(name: str, old, new) -> None:
    """A Parameter got data of another shape (``Parameter.set_data``): every Cell's variants are
    verified again, and the next compile says which Parameter it was."""
    _param_change[0] = f"Parameter {name} changed shape {_shape(tuple(old))} -> {_shape(tuple(new))}"


def attribute_set(cell: str, name: str) -> None:
    """An attribute of a compiled Cell was set (a constant construct read, or a sub-Cell swapped):
    every Cell's variants are compiled again (a parent's Code holds its sub-Cells' constants), and
    the next compile says which attribute it was."""
    _param_change[0] = f"{cell}.{name} was set"


def device_changed(target: str) -> None:
    """The device changed: every Cell links again, and the next compile says so."""
    _param_change[0] = f"set_context changed device_target to {target}"


_option_change: list = [None]


def option_changed(changed) -> None:
    """jit_config options the compiled Code depends on changed (``changed``: (name, old, new) each): a
    Cell's next call under them compiles for them (its variants for the old ones are kept), and says so."""
    _option_change[0] = "set_context changed jit_config " + ", ".join(f"{n} {o} -> {v}" for n, o, v in changed)


def options_now() -> str:
    """The clause for a Cell's first compile under jit options it has not run with yet."""
    return (_option_change[0] or "set_context changed jit_config") + " (the variants for the old values are kept)"


def variants_dropped(n: int) -> str | None:
    """The clause for a compile after ``n`` variants were dropped because a Parameter changed shape,
    a compiled Cell's attribute was set or the device changed."""
    if not n:
        return None
    what = _param_change[0] or "a Parameter changed shape"
    return f"{n} compiled variant{'s' if n > 1 else ''} discarded: {what}"
