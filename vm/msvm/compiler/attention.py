"""Attention as one instruction (issue 18): the fusion pattern that makes FUSED_ATTENTION.

The pattern is a data flow, not a spelling. After fuse.py's runs, each basic block of a Code is
read as a graph of values (what each instruction pops and pushes; a STORE_TENSOR / LOAD_TENSOR
pair only names a value), and every ``SOFTMAX(-1)`` is tried as the middle of

    scores = q @ k^T            BATCH_MATMUL(transpose_b) of q and k, or BATCH_MATMUL of q and an
                                explicit TRANSPOSE / swapaxes of k's last two axes, or a batched
                                FUSED_MATMUL of those (its epilogue program joins the score program)
    s = program(scores, ...)    any tree of elementwise instructions (FUSED_ELEMENTWISE programs,
                                BROADCAST_*, CAST, WHERE, the unary ops) with the scores as one leaf:
                                a scale by a multiply or by dividing by a constant, a 0-d tensor or a
                                FILL; an additive mask of any broadcastable shape, including one made
                                from an int mask by CAST / SUB / MUL; WHERE(causal mask, s, min);
                                casts. Its other leaves (masks, divisors, fills) are the fused
                                instruction's extra inputs; scalar constants go into the program
    p = SOFTMAX(s, -1)
    [CAST to p's own dtype, a Cell whose construct only returns its argument (eval-mode Dropout)]
    c = p @ v                   BATCH_MATMUL (no transposes)
    [TRANSPOSE(c, (0, 2, 1, 3))] the heads back to [B, S, H, D]

and the whole becomes ``q, k, extras..., v  FUSED_ATTENTION(program, layout, n)`` at the place of
its last instruction, named after its parts (FUSED_BMM_MUL_ADD_SOFTMAX_BMM_TRANSPOSE), each part
mapped to its source line.

Accepted around the pattern: any statements between its instructions (v's reshape, a mask's
slicing, other heads' work) that do not read its intermediate values; intermediate values stored
in locals (``attn = softmax(attn)``) when every read of them is part of the pattern and none is
live after the block; a copy of the probabilities into a local nobody reads (GPT-2's unused
``attn_weights``). The inputs are pushed again right before the fused instruction: a local that
still holds its value is loaded again, a constant, Parameter or FILL (no effect between) is
emitted again, anything else is kept in a fresh local (``attn<n>.<role>``) right where it was
computed.

Refused (the instructions stay as they are): a softmax over another axis; scores not made by a
batched product with k transposed; an intermediate value (the scores, the probabilities, the
context when the TRANSPOSE is taken) read by anything outside the pattern, returned, or live after
its block; a pattern whose instructions span a jump target or a jump; a score program in which
the scores appear more than once, or that goes through a non-elementwise instruction (a reshape,
a reduction); a dropout that is not the identity (training mode) or a cast to another dtype after
the softmax; a product by v with transposes.

The L1 kernel runs each part's own kernel in order (fusion on and off agree bit for bit). The
compiled tiers (compiler/attention_site.py, planned by compiler/attention_plan.py) keep the scores
in a buffer of their own, run the score program over them in place (the parts that do not read the
scores, such as ``(1 - cast(mask)) * -10000``, once per call at their own small shape), take the
softmax in one row kernel and write the context straight into the layout the TRANSPOSE asked for.
"""

from __future__ import annotations

from ..bytecode.code import Instr
from ..bytecode.opcodes import BY_NAME, FUSABLE

SCORE_OPS = FUSABLE | {"WHERE"}         # (WHERE is L1-compiled on its own; in a score program the site runs it)
# the inputs this pass emits again right before the fused instruction (when they pop nothing and have no
# effect): the constants, Parameters and FILLs (masks) attention inputs are made of. A choice of this pass,
# not a fact of the rows: another pure leaf (LOAD_SYM, ARANGE) would do, none has been seen as an input
_AGAIN = ("LOAD_CONST", "FILL", "LOAD_PARAM")


class _No(Exception):
    """This softmax does not head a pattern."""


def fuse_attention(code, targets, const, is_target) -> None:
    """Rewrite code.instrs in place (``targets``: fuse.py's jump bookkeeping; ``const`` adds a
    constant; a pattern with a jump target inside is left alone)."""
    if not any(i.op.name == "SOFTMAX" for i in code.instrs):
        return
    from ..bytecode.verify import verify
    from ..errors import VerifyError
    from .fuse import _live_after, _retarget

    tried: set = set()
    while any(i.op.name == "SOFTMAX" and id(i) not in tried for i in code.instrs):
        try:
            _retarget(code, targets)
            verify(code)             # (the stack types of the code as fusion left it: casts, ranks)
        except VerifyError:
            return
        live = _live_after(code, targets)
        for lo, hi in _blocks(code, targets):
            flow = _Flow(code, lo, hi, live)
            for s in range(lo, hi):
                ins = code.instrs[s]
                if ins.op.name != "SOFTMAX" or code.decode_args(ins)[0] != -1 or id(ins) in tried:
                    continue
                tried.add(id(ins))
                try:
                    m = _match(code, flow, s, targets, is_target)
                except _No:
                    continue
                _rewrite(code, flow, m, const)
                break
            else:
                continue
            break
        else:
            return
    # (then fuse() retargets and verifies the result: a code whose softmaxes were all tried is not verified here)


# ---------------------------------------------------------------- the data flow of a basic block

def _blocks(code, targets):
    n = len(code.instrs)
    starts = {0}
    tgt = {id(t) for _, t in targets.values()}
    for i, ins in enumerate(code.instrs):
        if id(ins) in tgt:
            starts.add(i)
        if ins.op.terminator or ins.op.label_operand is not None:
            starts.add(i + 1)
    starts = sorted(s for s in starts if s < n)
    return list(zip(starts, starts[1:] + [n]))


class _Flow:
    """Values of one block: ``ins_in[i]``: the (value, pusher) pairs instruction i pops, bottom
    first; ``uses[v]``: the (instruction, operand) pairs that pop v, stores included; ``slots[i]``:
    which value each local holds before i; ``escapes``: values on the stack or in a live local at
    the block's end."""

    def __init__(self, code, lo, hi, live):
        self.lo, self.hi = lo, hi
        self.ins_in, self.out, self.uses, self.slots = {}, {}, {}, {}
        st = code.stack_types[lo] if lo < len(code.stack_types) else None
        stack = [(("entry", k), None) for k in range(len(st or ()))]
        local: dict = {}
        for i in range(lo, hi):
            ins = code.instrs[i]
            self.slots[i] = dict(local)
            args = code.decode_args(ins)
            name = ins.op.name
            if name == "LOAD_TENSOR":
                v = local.get(ins.args[0], ("local", ins.args[0]))
                self.ins_in[i], self.out[i] = [], [v]
                stack.append((v, i))
                continue
            n = ins.op.n_pops(args)
            popped = stack[len(stack) - n:] if n else []
            del stack[len(stack) - n:]
            self.ins_in[i] = popped
            for k, (v, _p) in enumerate(popped):
                self.uses.setdefault(v, []).append((i, k))
            if name == "STORE_TENSOR":
                local[ins.args[0]] = popped[0][0]
                self.out[i] = []
                continue
            outs = [(i, k) for k in range(ins.op.n_pushes(args))]
            self.out[i] = outs
            stack += [(v, i) for v in outs]
        self.escapes = {v for v, _ in stack}
        end = live[hi - 1] if hi - 1 < len(live) else set()
        self.escapes |= {v for s, v in local.items() if s in end}

    @staticmethod
    def producer(v):
        """The instruction that made v, or None for a value from before the block."""
        return v[0] if isinstance(v[0], int) else None


# ---------------------------------------------------------------- the match

class _Match:
    def __init__(self):
        self.internal: set = set()     # instructions of the pattern (they go)
        self.values: set = set()       # values made inside the pattern (no reader outside it)
        self.extras: list = []         # (value, pusher) of the score program's extra inputs, in order
        self.parts: dict = {}          # instruction -> its parts, for the name


def _match(code, flow, s, targets, is_target):
    instrs = code.instrs
    m = _Match()
    types = code.stack_types

    def out_type(i):
        nxt = types[i + 1] if i + 1 < len(types) else None
        return nxt[-1] if nxt else None

    def single_consumer(v):
        """The one instruction (not a store) that pops v, through any stores and loads of it."""
        readers = [(i, k) for i, k in flow.uses.get(v, []) if instrs[i].op.name != "STORE_TENSOR"]
        if len(readers) != 1:
            raise _No
        return readers[0]

    # the probabilities, through identity casts and calls, into the product by v
    m.internal.add(s)
    m.parts[s] = [("SOFTMAX", instrs[s].loc)]
    p = flow.out[s][0]
    m.values.add(p)
    while True:
        i, k = single_consumer(p)
        ins = instrs[i]
        if ins.op.name == "CAST":
            t_in, t_out = types[i][-1] if types[i] else None, out_type(i)
            if t_in is None or t_out is None or getattr(t_in, "dtype", None) != getattr(t_out, "dtype", 0):
                raise _No
            m.parts[i] = [("CAST", ins.loc)]
        elif ins.op.name == "CALL_CELL" and _identity_call(code, ins):
            m.parts[i] = []
        elif ins.op.name == "BATCH_MATMUL" and k == 0 and tuple(code.decode_args(ins)) == (False, False):
            break
        else:
            raise _No
        m.internal.add(i)
        p = flow.out[i][0]
        m.values.add(p)
    pv = i
    m.internal.add(pv)
    m.parts[pv] = [("BATCH_MATMUL", instrs[pv].loc)]
    v_in = flow.ins_in[pv][1]
    final, layout = pv, ()
    c = flow.out[pv][0]
    readers = [(j, kk) for j, kk in flow.uses.get(c, []) if instrs[j].op.name != "STORE_TENSOR"]
    if len(readers) == 1 and c not in flow.escapes:
        j = readers[0][0]
        t = instrs[j]
        if t.op.name == "TRANSPOSE" and tuple(code.decode_args(t)[0]) == (0, 2, 1, 3):
            final, layout = j, (0, 2, 1, 3)
            m.internal.add(j)
            m.values.add(c)
            m.parts[j] = [("TRANSPOSE", t.loc)]

    # the score program, down from the softmax's input to the product q @ k^T
    found: dict = {}

    def depends(v) -> bool:
        i = flow.producer(v)
        if i is None or i < flow.lo:
            return False
        if v in found:
            return found[v]
        ins = instrs[i]
        r = False
        if _scores_product(code, flow, i):
            r = True
        elif ins.op.name in SCORE_OPS or ins.op.name == "FUSED_ELEMENTWISE":
            r = any(depends(x) for x, _ in flow.ins_in[i])
        found[v] = r
        return r

    def extra(v, pusher):
        ins = instrs[pusher] if pusher is not None else None
        if ins is not None and ins.op.name == "LOAD_CONST" and pusher == flow.producer(v):
            c = code.consts[ins.args[0]]
            if isinstance(c, (int, float)) and not isinstance(c, bool):
                m.internal.add(pusher)
                return [("c", c)]
        m.extras.append((v, pusher))
        return [("in", len(m.extras))]

    scores_at: list = []

    def expr(v, pusher):
        if not depends(v):
            return extra(v, pusher)
        i = flow.producer(v)
        ins = instrs[i]
        m.values.add(v)
        m.internal.add(i)
        if _scores_product(code, flow, i):
            if scores_at:
                raise _No           # (the scores twice in the program)
            scores_at.append(i)
            return _product_expr(code, flow, m, i, extra)
        args = code.decode_args(ins)
        subs = [expr(x, px) for x, px in flow.ins_in[i]]
        m.parts[i] = list(ins.parts) if ins.parts else [(ins.op.name, ins.loc)]
        if ins.op.name == "FUSED_ELEMENTWISE":
            return _substitute(args[0], subs)
        return [x for sub in subs for x in sub] + [(ins.op.name,) + tuple(args)]

    x0, px0 = flow.ins_in[s][0]
    if not depends(x0):
        raise _No
    program = tuple(expr(x0, px0))
    if not scores_at:
        raise _No
    q_in, k_in = m.q, m.k

    # every value made inside the pattern is read only inside it, and none outlives the block
    for v in m.values:
        if v in flow.escapes and v != flow.out[final][0]:
            raise _No
        for i, _k in flow.uses.get(v, []):
            if i in m.internal:
                continue
            if instrs[i].op.name != "STORE_TENSOR":
                raise _No
            m.internal.add(i)         # a store of it: its readers are checked through the value
    for v in m.values:              # the loads that push these values go too
        for i, _k in flow.uses.get(v, []):
            for pv_, pusher in flow.ins_in[i]:
                if pv_ == v and pusher is not None and instrs[pusher].op.name == "LOAD_TENSOR":
                    m.internal.add(pusher)
    m.internal.discard(final)
    first = min(m.internal | {final})
    if first < flow.lo or final >= flow.hi:
        raise _No
    if any(is_target(code, targets, instrs[i]) for i in range(first + 1, final + 1)) or \
            is_target(code, targets, instrs[first]):
        raise _No
    m.final, m.layout, m.program = final, layout, program
    inputs = [("q", q_in), ("k", k_in)] + [(f"mask{j}", e) for j, e in enumerate(m.extras)] + [("v", v_in)]
    # (a Parameter is loaded again only when nothing between may assign it: an effect, or a call)
    effects = any(instrs[i].op.effect or instrs[i].op.name.startswith("CALL") for i in range(first, final)
                  if i not in m.internal)
    m.inputs = []
    for role, (v, pusher) in inputs:       # how each input is pushed again before the fused instruction
        ins = instrs[pusher] if pusher is not None else None
        name = ins.op.name if ins is not None else None
        if name == "LOAD_TENSOR" and flow.slots[final].get(ins.args[0], ("local", ins.args[0])) == v:
            how = "again"                  # the local still holds it
        elif name in _AGAIN and pusher == flow.producer(v) and not ins.op.effect \
                and ins.op.n_pops(code.decode_args(ins)) == 0 and not (name == "LOAD_PARAM" and effects):
            how = "again"                  # a pure leaf, made again
        elif ins is not None and len(flow.out[pusher]) == 1:
            how = "spill"                  # kept in a fresh local where it was made
        else:
            raise _No
        m.inputs.append((role, v, pusher, how))
    m.internal.add(final)
    return m


def _identity_call(code, ins) -> bool:
    """A CALL_CELL of one argument whose construct returns it as is (nn.Dropout in eval mode)."""
    callee, n = code.decode_args(ins)
    sub = callee[1] if isinstance(callee, tuple) else None
    if n != 1 or sub is None or not hasattr(sub, "instrs"):
        return False
    ops = [i.op.name for i in sub.instrs]
    return ops == ["LOAD_TENSOR", "RETURN"] and sub.instrs[0].args[0] == 0 and len(sub.params) == 1


def _scores_product(code, flow, i) -> bool:
    """Whether instruction i is a batched q @ k^T (k transposed by the flag or by a TRANSPOSE of
    its last two axes, made in this block for this product only)."""
    ins = code.instrs[i]
    name = ins.op.name
    if name == "BATCH_MATMUL":
        ta, tb = code.decode_args(ins)
    elif name == "FUSED_MATMUL":
        ta, tb, batched, _prog, _n = code.decode_args(ins)
        if not batched:
            return False
    else:
        return False
    if ta:
        return False
    if tb:
        return True
    return _k_transpose(code, flow, i) is not None


def _k_transpose(code, flow, i):
    """The TRANSPOSE swapping the last two axes that made operand 1 of product i, when only i reads it."""
    kv, _ = flow.ins_in[i][1]
    j = flow.producer(kv)
    if j is None or j < flow.lo:
        return None
    t = code.instrs[j]
    if t.op.name != "TRANSPOSE":
        return None
    perm = tuple(code.decode_args(t)[0])
    r = len(perm)
    if r < 3 or perm != tuple(range(r - 2)) + (r - 1, r - 2):
        return None
    readers = [u for u, _ in flow.uses.get(kv, []) if code.instrs[u].op.name != "STORE_TENSOR"]
    if readers != [i]:
        return None
    return j


def _product_expr(code, flow, m, i, extra):
    """The scores' part of the program (the product's own epilogue, if fused) and q and k."""
    ins = code.instrs[i]
    m.parts[i] = list(ins.parts) if ins.parts else [(ins.op.name, ins.loc)]
    m.q = flow.ins_in[i][0]
    if code.decode_args(ins)[1]:          # (transpose_b, of BATCH_MATMUL and FUSED_MATMUL alike)
        m.k = flow.ins_in[i][1]
    else:
        j = _k_transpose(code, flow, i)
        m.internal.add(j)
        m.values.add(flow.ins_in[i][1][0])
        m.k = flow.ins_in[j][0]
        m.parts[j] = [("TRANSPOSE", code.instrs[j].loc)]
    if ins.op.name == "BATCH_MATMUL":
        return [("in", 0)]
    program = code.decode_args(ins)[3]
    subs = [[("in", 0)]] + [extra(x, px) for x, px in flow.ins_in[i][2:]]
    return _substitute(program, subs)


def _substitute(program, subs) -> list:
    """program with each ("in", k) replaced by the program subs[k]."""
    out: list = []
    for node in program:
        if node[0] == "in":
            out += subs[node[1]]
        else:
            out.append(tuple(node))
    return out


# ---------------------------------------------------------------- the rewrite

def _rewrite(code, flow, m, const) -> None:
    instrs = code.instrs
    final = m.final
    internal = m.internal
    spill: dict = {}        # instruction -> the fresh local its pushed value goes to
    pushes = []
    tag = sum(1 for i in instrs if i.op.name == "FUSED_ATTENTION")
    for role, _v, pusher, how in m.inputs:
        ins = instrs[pusher]
        if how == "again":
            pushes.append(Instr(ins.op, ins.args, ins.loc, ins.parts))
            internal.add(pusher)
            continue
        slot = len(code.varnames)
        code.varnames.append(f"attn{tag}.{role}")
        spill[pusher] = slot
        pushes.append(Instr(BY_NAME["LOAD_TENSOR"], (slot,), ins.loc))
    parts = [p for i in sorted(m.parts) for p in m.parts[i]]
    fin = instrs[final]
    fused = Instr(BY_NAME["FUSED_ATTENTION"], (const(code, m.program), const(code, m.layout), len(pushes)),
                  fin.loc, tuple(parts))
    new = []
    for i, ins in enumerate(instrs):
        if i == final:
            new += pushes + [fused]
            continue
        if i not in internal:
            new.append(ins)
        if i in spill:
            new.append(Instr(BY_NAME["STORE_TENSOR"], (spill[i],), ins.loc))
    code.instrs[:] = new
