"""Compiling a Cell or jit function whose argument or attribute ranks were not known
(``static_specs.RankVar``): every combination of candidate ranks is tried, those nearest
the first choices first, within a count and a time, until one compiles and verifies;
what was chosen becomes a ``Note``. An error found only under assumed shapes is not
certain (``AssumedShapeError``: an Information diagnostic, not an error).
"""

from __future__ import annotations

import itertools
import re
import time

from .bytecode.symbolic import SymbolicError, size_limit, work_limit
from .errors import FrontendError, MsvmError, SourceError, VerifyError
from .static_specs import RankVar
from .static_values import Note, parameter

MAX_TRIES = 16               # compiles tried per Cell when ranks are assumed
COMPILE_SECONDS = 2.0        # time for those tries, per Cell
COMPILE_WORK = 1 << 20       # term operations of symbolic arithmetic per try (the frontend's; verify has its own)
EXPR_SIZE = 2048             # atoms of one symbolic dim


class AssumedShapeError(FrontendError):
    """A compile or verify error under assumed shapes: not certain to happen at run time."""

    certain = False



def _rank_combinations(choices):
    """Every combination of candidate ranks, those nearest the first choices first (each variable
    gets to try its other ranks early, not only the last one's), lazily for many variables."""
    if len(choices) > 8:                       # 4**8 combinations: keep itertools' order
        yield from itertools.product(*choices)
        return
    for idx in sorted(itertools.product(*[range(len(c)) for c in choices]), key=lambda t: (sum(t), t)):
        yield tuple(c[i] for c, i in zip(choices, idx))


_RANK_ERROR = re.compile(r"\brank\b|out of range|must be known|dimensions?\b|too complex")


def _of_the_rank(err) -> bool:
    """An error that says only that the rank tried was wrong (``axis 2 is out of range for rank
    2``): the error of a try that got past the ranks tells more, so it is the one reported."""
    return bool(_RANK_ERROR.search(str(err)))


def compile_assuming(entry, specs: list, attr_vars: list, compile_fn, filename):
    """Compile with every combination of candidate ranks (best first) until one verifies."""
    rank_vars = [leaf for s in specs if isinstance(s, RankVar) for leaf in s.leaves()] + attr_vars
    if not rank_vars:
        entry.code = compile_fn([s.spec({}) if isinstance(s, RankVar) else s for s in specs])
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
        concrete = [s.spec(chosen) if isinstance(s, RankVar) else s for s in specs]
        try:
            with work_limit(COMPILE_WORK), size_limit(EXPR_SIZE):
                entry.code = compile_fn(concrete)
        except (FrontendError, VerifyError, MsvmError, SymbolicError) as err:
            if first_err is None or (_of_the_rank(first_err[0]) and not _of_the_rank(err)):
                first_err = (err, ranks)
            continue
        entry.assumed = any(v.assumed(r) for v, r in zip(rank_vars, ranks))
        for v, r in zip(rank_vars, ranks):
            if v.kind in ("int", "bool"):
                how = f"from its use: {v.why}" if r in ("symbol", "flag") else \
                    f"assumed: {v.name} as a run-time symbol does not compile; used as {v.why}"
            elif v.exact:
                how = f"its rank is {r}, from its use" + (f": {v.why}" if v.why else "")
            else:
                how = f"rank {r} assumed: the first of {', '.join(map(str, v.ranks))} with which {entry.name} compiles"
            if v.kind == "int_tensor":
                how = f"int ids: {v.why}; {how}"
            entry.notes.append(Note(v.line, v.col, f"{v.describe(r)} ({how}; declare it with set_inputs "
                                                   f"or an annotation to know it)"))
        return
    err, ranks = first_err
    if isinstance(err, SymbolicError):
        err = FrontendError(f"{entry.name} is too complex to compile statically ({err})", filename, entry.line,
                            entry.col)
    if any(v.assumed(r) for v, r in zip(rank_vars, ranks)) and isinstance(err, SourceError):
        what = "; ".join(v.describe(r) for v, r in zip(rank_vars, ranks))
        raise AssumedShapeError(f"{err.message} (assuming {what}; the shapes are not known statically)",
                                err.filename, err.line, err.col, err.end_line, err.end_col) from None
    raise err
