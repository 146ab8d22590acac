"""Compiling a Cell or jit function whose argument or attribute ranks were not known
(``static_specs.RankVar``): every combination of candidate ranks is tried, those nearest
the first choices first, within a count and a time, until one compiles and verifies;
what was chosen becomes a ``Note``. An error found only under assumed shapes is not
certain (``AssumedShapeError``: an Information diagnostic, not an error).
"""

from __future__ import annotations

import itertools
import time

from .bytecode.symbolic import fmt_shape
from .errors import FrontendError, MsvmError, SourceError, VerifyError
from .frontend.argspec import arg_spec
from .static_specs import RankVar
from .static_values import Note, parameter

MAX_TRIES = 16               # compiles tried per Cell when ranks are assumed
COMPILE_SECONDS = 2.0        # time for those tries, per Cell


class AssumedShapeError(FrontendError):
    """A compile or verify error under assumed shapes: not certain to happen at run time."""

    certain = False



def _assumption(var: RankVar, rank: int) -> str:
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


def compile_assuming(entry, specs: list, attr_vars: list, compile_fn, filename):
    """Compile with every combination of candidate ranks (best first) until one verifies."""
    arg_vars = [s for s in specs if isinstance(s, RankVar)]
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
        concrete = [arg_spec(s.name, s.tensor(chosen[id(s)])) if isinstance(s, RankVar) else s for s in specs]
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
