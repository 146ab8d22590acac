"""The plan of a FUSED_ATTENTION site (issue 18): what its compiled tiers run for given inputs.

The instruction's score program (compiler/attention.py: scale, masks, casts, WHERE, over the
scores ``in 0`` and the extra inputs ``in 1..``) is split once per site (``split``):

- every subtree that does not read the scores (``(1 - cast(mask)) * -10000``, a mask sliced and
  compared, a FILL) is a *pre* program: run once per call at its own, small shape by the
  reference kernels (so ints, bools and casts behave exactly as in L1);
- the chain of nodes from the scores up to the program's result becomes *stages*: its float
  arithmetic one compiled elementwise kernel over the scores in place (operands: inputs, pre
  values, constants), then each WHERE whose value operand is the scores, in place by
  ``np.copyto`` with the condition (numpy's ``where``, NaN and all). A WHERE moves past the
  arithmetic after it exactly: ``f(where(c, s, y), z) == where(c, f(s, z), f(y, z))`` for an
  elementwise f, and ``f(y, z)`` does not read the scores (a pre program at the masks' shape).

Where the masks' leading dims collapse to three (``row_operands``), the plan's ``fused`` says how the
softmax's row kernel runs every stage instead (``row_inputs``, ``row_programs``; compiler/attention_site.py).

``plan`` checks a call's inputs (float32/float64 q, k and v of one dtype and batch dims, nothing
empty, every stage operand of the scores' dtype or a Python number, masks that broadcast to the
scores and no further, every value that reads the scores of their dtype; a stage whose masks
broadcast in ways the elementwise kernels' 3 dims cannot hold takes them at the scores' shape) and returns the Plan whose
details the site (compiler/attention_site.py) runs; anything else raises ``Unsupported`` and the
site says why and runs the L1 kernel.
"""

from __future__ import annotations

import math

import numpy as np

from ..bytecode.opcodes import BY_NAME
from ..bytecode.program import evaluate
from ..interp import kernels as K
from .kir import dtype_name
from .lower import Unsupported
from .planning import Plan, _Shape, float_dtype, plan_elementwise


def _tree(program):
    stack: list = []
    for node in program:
        if node[0] in ("in", "c"):
            stack.append((tuple(node), []))
        else:
            n = BY_NAME[node[0]].pops
            kids = stack[len(stack) - n:]
            del stack[len(stack) - n:]
            stack.append((tuple(node), kids))
    if len(stack) != 1:
        raise Unsupported("a score program that is not one expression")
    return stack[0]


def _post(t) -> list:
    node, kids = t
    return [x for k in kids for x in _post(k)] + [node]


def _reads_scores(t) -> bool:
    node, kids = t
    return node == ("in", 0) or any(_reads_scores(k) for k in kids)


def split(program):
    """(pre, stages) of a score program. ``pre``: postfix programs over the inputs (the subtrees
    that do not read the scores and are not a leaf). ``stages``, bottom first: ``("ew", program,
    refs)`` (program over [scores, operands...]) or ``("where", cond, other, scores_is_a)``. A ref
    is ``("in", k)`` (the program's input k), ``("pre", j)`` or ``("c", value)``."""
    t = _tree(program)
    chain, cur = [], t
    while cur[0] != ("in", 0):
        node, kids = cur
        dep = [j for j, k in enumerate(kids) if _reads_scores(k)]
        if len(dep) != 1:
            raise Unsupported("the scores read more than once by the score program")
        chain.append((node, kids, dep[0]))
        cur = kids[dep[0]]
    chain.reverse()
    pre: list = []

    def ref(k):
        node, _kids = k
        if node[0] in ("in", "c"):
            return node
        pre.append(tuple(_post(k)))
        return ("pre", len(pre) - 1)

    ew = ["ew", [("in", 0)], []]
    wheres: list = []         # [cond subtree, other subtree, scores_is_a], innermost first
    for node, kids, d in chain:
        if node[0] == "WHERE":
            if d == 0:
                raise Unsupported("a WHERE whose condition is computed from the scores")
            # (its other value as WHERE makes it: of the scores' dtype, ``AS_SCORES``, before any f)
            wheres.append([kids[0], (("AS_SCORES",), [kids[2] if d == 1 else kids[1]]), d == 1])
            continue
        # f(where(c, s, y), z) == where(c, f(s, z), f(y, z)): every WHERE moves past f (exactly: f is
        # elementwise), its other value becomes f of it (score-free: a pre program)
        for w in wheres:
            w[1] = (node, [w[1] if j == d else k for j, k in enumerate(kids)])
        pieces = []
        for j, k in enumerate(kids):
            r = None if j == d else ref(k)
            if j == d:
                pieces.append(ew[1])
            elif r[0] == "c":
                pieces.append([r])
            else:
                ew[2].append(r)
                pieces.append([("in", len(ew[2]))])
        ew[1] = [x for p in pieces for x in p] + [node]
    stages = ([ew] if len(ew[1]) > 1 else []) + [("where", ref(c), ref(o), a) for c, o, a in wheres]
    return tuple(pre), tuple((s[0], tuple(s[1]), tuple(s[2])) if s[0] == "ew" else s for s in stages)


def values(pre, extras, dtype) -> list:
    """The pre programs' values for this call's extra inputs: the reference kernels, as
    ``kernels.run_program`` runs them, and ``AS_SCORES`` (to the scores' dtype, as WHERE converts)."""
    out = []
    for program in pre:
        stack: list = []
        for node in program:
            tag = node[0]
            if tag == "in":
                stack.append(extras[node[1] - 1])
            elif tag == "c":
                stack.append(node[1])
            elif tag == "AS_SCORES":
                stack.append(np.asarray(stack.pop(), dtype=dtype))
            else:
                n = BY_NAME[tag].pops
                args = stack[len(stack) - n:]
                del stack[len(stack) - n:]
                stack.append(K.KERNELS[tag](*args, *node[1:]))
        out.append(stack[0])
    return out


def chain_dtypes(program, extras) -> set:
    """The dtypes of the program's values that read the scores (run on one element of each input)."""
    seen: set = set()

    def op(row, args, operands):
        v = K.KERNELS[row.name](*[a for a, _ in args], *operands)
        dep = any(d for _, d in args)
        if dep:
            seen.add(np.asarray(v).dtype)
        return v, dep

    return seen, evaluate(program, lambda k: extras[k], lambda c: (c, False), op)[0]


def operand(ref, extras, pre_vals):
    tag = ref[0]
    if tag == "in":
        return extras[ref[1] - 1]
    if tag == "pre":
        return pre_vals[ref[1]]
    return ref[1]


def _tiny(x):
    if isinstance(x, np.ndarray) and x.ndim:
        return np.zeros((1,), x.dtype)
    return x


def plan(site, inputs) -> Plan:
    program, layout = site.args[0], tuple(site.args[1])
    q, k, v, extras = inputs[0], inputs[1], inputs[-1], list(inputs[2:-1])
    for x in (q, k, v):
        if type(x) is not np.ndarray or x.ndim < 3:
            raise Unsupported("attention on tensors of rank < 3")
    d = float_dtype([q, k, v])
    if not (q.shape[:-2] == k.shape[:-2] == v.shape[:-2]):
        raise Unsupported("attention batch dims that broadcast")
    if min(q.shape + k.shape + v.shape) == 0:
        raise Unsupported("empty attention inputs")
    pre, stages = site.split
    scores = q.shape[:-1] + (k.shape[-2],)
    # every value that reads the scores is of their dtype (the reference kernels' promotion, on one
    # element): the compiled stages compute in it
    with np.errstate(all="ignore"):         # (zeros: only the dtypes matter)
        seen, _ = chain_dtypes(program, [(np.zeros((1,), d), True)] + [(_tiny(x), False) for x in extras])
    if seen - {np.dtype(d)}:
        raise Unsupported(f"a score program whose result is {sorted(map(str, seen - {np.dtype(d)}))[0]}, "
                          f"not {d}")
    with np.errstate(all="ignore"):         # (their shapes and dtypes; a placeholder's zeros may divide)
        pre_vals = values(pre, extras, d)
    epis, expand = [], []
    for st in stages:
        ops = [operand(r, extras, pre_vals) for r in (st[2] if st[0] == "ew" else st[1:3])]
        for x in ops:
            if isinstance(x, np.ndarray) and x.ndim and np.broadcast_shapes(x.shape, scores) != scores:
                raise Unsupported("a mask that broadcasts the scores to a larger shape")
        if st[0] == "where":
            other = ops[1]
            if isinstance(other, np.ndarray) and other.dtype != d or not isinstance(other, (np.ndarray, int, float)):
                raise Unsupported("a WHERE whose other value is not of the scores' dtype")
            epis.append(None)
            expand.append(False)
            continue
        for x in ops:
            if isinstance(x, np.ndarray) and x.dtype != d or isinstance(x, (bool, np.bool_)):
                raise Unsupported(f"a score operand of dtype {getattr(x, 'dtype', type(x).__name__)}, not {d}")
        shaped = [_Shape(x.shape, x.dtype) if isinstance(x, np.ndarray) and x.ndim else
                  (np.zeros((), d) if isinstance(x, np.ndarray) else x) for x in ops]
        try:
            epis.append(plan_elementwise(site, [_Shape(scores, d)] + shaped, st[1], scores))
            expand.append(False)
        except Unsupported:   # (masks broadcast in ways 3 dims cannot hold: they go in at the scores' shape)
            full = [_Shape(scores, d) if isinstance(x, _Shape) else x for x in shaped]
            epis.append(plan_elementwise(site, [_Shape(scores, d)] + full, st[1], scores))
            expand.append(True)
    ctx = q.shape[:-1] + (v.shape[-1],)
    out_shape = tuple(ctx[p] for p in layout) if layout else ctx
    rows, n = math.prod(scores[:-1]), scores[-1]
    fused = None
    if FUSE_SOFTMAX:                # (masks never expanded here)
        fused = row_operands(row_inputs(stages, extras, pre_vals, d), scores)
        if fused is not None:
            fused["programs"] = row_programs(stages)
    cls = ("attn", dtype_name(d), tuple(e.cls if e is not None else "where" for e in epis), layout,
           None if fused is None else ("softmax", fused["kinds"], fused["rowb"]))
    key = (cls, tuple(x.shape if type(x) is np.ndarray else None for x in inputs),
           tuple(x.shape for x in pre_vals if isinstance(x, np.ndarray)))
    return Plan(cls, key, out_shape, d, {"epis": epis, "expand": expand, "scores": scores, "ctx": ctx,
                                         "rows": rows, "n": n, "layout": layout, "fused": fused})


FUSE_SOFTMAX = True     # (tests turn it off: the stage kernel, then the plain softmax, must give the same bits)


def row_inputs(stages, extras, pre_vals, dtype) -> list:
    """The softmax row kernel's inputs 1.. for this call: the float stage's operands, then each
    WHERE's condition (as 0 / 1 of the scores' dtype, as ``np.asarray(c, dtype=bool)`` reads it) and
    its other value."""
    out = []
    for st in stages:
        if st[0] == "ew":
            out += [operand(r, extras, pre_vals) for r in st[2]]
            continue
        c = operand(st[1], extras, pre_vals)
        c = np.asarray(c, dtype=bool)
        out += [c.astype(dtype) if c.ndim else float(c), operand(st[2], extras, pre_vals)]
    return out


def row_programs(stages) -> tuple:
    """(program or None, its operand count m, ((cond, other, scores_is_a), ...)) for lower_row: the
    WHEREs' inputs are numbered after the program's, as ``row_inputs`` lays them out."""
    program, m, wheres = None, 0, []
    for st in stages:
        if st[0] == "ew":
            program, m = st[1], len(st[2])
        else:
            j = m + 2 * len(wheres)
            wheres.append((j, j + 1, bool(st[3])))
    return program, m, tuple(wheres)


def row_operands(ops, scores) -> dict | None:
    """How the softmax row kernel reads the score stage's operands (``lower._row_operands``): per
    operand "t" (a tensor, C-contiguous as the site passes it) or "s" (a scalar); whether a tensor is
    one value per row (its last dim broadcast); and the scores' leading dims collapsed to three, [n0,
    n1, n2], with each tensor's three strides over them: row r = (i0 * n1 + i1) * n2 + i2 reads at
    i0 * s0 + i1 * s1 + i2 * s2. None where the leading dims do not collapse to three for every operand
    (rank 5 scores and more)."""
    lead, n = tuple(scores[:-1]), scores[-1]
    kinds, rowb, strides = [], [], []
    for x in ops:
        if not (isinstance(x, np.ndarray) and x.ndim):
            kinds.append("s")
            rowb.append(True)
            continue
        shape = (1,) * (len(scores) - x.ndim) + tuple(x.shape)
        st, acc = [0] * len(shape), 1
        for i in range(len(shape) - 1, -1, -1):       # C-contiguous strides, 0 where broadcast
            st[i] = acc if shape[i] != 1 else 0
            acc *= shape[i]
        kinds.append("t")
        rowb.append(shape[-1] == 1 or n == 1)
        strides.append(st[:-1])
    dims = [i for i, size in enumerate(lead) if size != 1]
    groups: list = []               # runs of leading dims that merge: [first dim, ..., last dim]
    for i in dims:
        if groups and all(s[groups[-1][-1]] == s[i] * lead[i] for s in strides):
            groups[-1].append(i)
        else:
            groups.append([i])
    if len(groups) > 3:
        return None
    groups = [[]] * (3 - len(groups)) + groups
    n1, n2 = (math.prod([lead[i] for i in g]) if g else 1 for g in groups[1:])
    return {"kinds": tuple(kinds), "rowb": tuple(rowb), "n1": n1, "n2": n2,
            "strides": [tuple(s[g[-1]] if g else 0 for g in groups) for s in strides]}
