"""Fusion on bytecode: Code -> Code.

Two passes over each straight-line stretch of a verified Code:

1. *store/load forwarding*: ``STORE_TENSOR v; LOAD_TENSOR v`` where v is dead after
   the load leaves the value on the stack (so ``x = a + b; x = relu(x)`` becomes one
   expression);
2. *fusion*: a run of elementwise instructions over loads and scalar constants that
   computes one value becomes ``FUSED_ELEMENTWISE(program, n)`` (a lone transcendental
   op — GELU, ERF, TANH, ... — too, so it gets a compiled kernel: FUSED_GELU); a MATMUL or
   BATCH_MATMUL whose result feeds such a run becomes ``FUSED_MATMUL(..., program, n)``
   (bias add, relu, gelu, scaling applied to the product).

A fused instruction lists the source location of every part (``Instr.parts``), has
the same signature as what it replaced (the verifier re-checks it), and is named
after its parts by the disassembler (FUSED_ADD_RELU_CAST, FUSED_MATMUL_BIAS_GELU).
"""

from __future__ import annotations

from .. import dtype as dt
from ..bytecode.code import Code, Instr
from ..bytecode.opcodes import BY_NAME, COSTLY, FUSABLE, LEAVES, MATMULS
from ..bytecode.verify import verify
from .attention import fuse_attention
from .epilogue import append_activations
from .inline import inline_leaf_calls
from .norm import fuse_add_norm, fuse_rms_norm

FLOAT_DTYPES = (dt.float16, dt.float32, dt.float64)


def fuse(code: Code, cpu: bool = True) -> Code:
    """A new, verified Code with fused instructions (callees fused too). ``code`` is unchanged.
    ``cpu``: the Code runs on the CPU (FUSED_ADD_LAYER_NORM has CPU kernels only; on a GPU the
    layer norm keeps its own GPU row kernel)."""
    callees = [(path, fuse(sub, cpu)) for path, sub in code.callees]
    instrs = [Instr(i.op, i.args, i.loc, i.parts) for i in code.instrs]
    new = Code(code.name, code.filename, code.firstlineno, instrs, list(code.consts), list(code.names),
               list(code.varnames), list(code.params), dict(code.attr_types), callees, may_be_one=code.may_be_one)
    new.hover = code.hover
    targets = _targets_as_indexes(new)
    append_activations(new, code, targets, _const, _is_target, _replace_target, _live_after,   # (issue 18:
                       lambda m: fuse(m, cpu))                                                   # epilogue.py)
    inline_leaf_calls(new, targets, _const, _replace_target, code.callees)   # (issue 18: conv, bn, relu in one Code)
    _forward_stores(new, targets, code)
    if cpu:
        fuse_add_norm(new, targets, _is_target, _replace_target)     # (issue 18: compiler/norm.py)
    _fuse_runs(new, targets, code)
    if cpu:
        fuse_rms_norm(new, targets, _is_target, _live_after)     # (issue 18: compiler/norm.py)
    fuse_attention(new, targets, _const, _is_target)       # (issue 18: compiler/attention.py)
    _retarget(new, targets)
    new.relayout()
    verify(new)
    new.fused_from = code
    return new


# ---------------------------------------------------------------- jump bookkeeping

def _targets_as_indexes(code: Code) -> dict:
    """{instruction object: target instruction object} for every jump (survives rewriting)."""
    out = {}
    for ins in code.instrs:
        li = ins.op.label_operand
        if li is not None:
            out[id(ins)] = (ins, code.instrs[code.index_at(ins.args[li])])
    return out


def _is_target(code, targets, ins) -> bool:
    return any(t is ins for _, t in targets.values())


def _retarget(code: Code, targets: dict):
    code.relayout()
    pos = {id(i): i.offset for i in code.instrs}
    for ins, target in targets.values():
        li = ins.op.label_operand
        args = list(ins.args)
        args[li] = pos[id(target)]
        ins.args = tuple(args)


def _replace_target(targets, old, new):
    for k, (ins, t) in list(targets.items()):
        if t is old:
            targets[k] = (ins, new)


# ---------------------------------------------------------------- liveness and forwarding

def _successors(code: Code, i: int, targets) -> list:
    ins = code.instrs[i]
    out = [] if ins.op.terminator else [i + 1]
    if id(ins) in targets:
        out.append(code.instrs.index(targets[id(ins)][1]))
    return [j for j in out if j < len(code.instrs)]


def _live_after(code: Code, targets) -> list:
    """Sets of local slots that may be read after each instruction."""
    n = len(code.instrs)
    live_in = [set() for _ in range(n)]
    changed = True
    while changed:
        changed = False
        for i in range(n - 1, -1, -1):
            ins = code.instrs[i]
            out = set()
            for j in _successors(code, i, targets):
                out |= live_in[j]
            new = set(out)
            if ins.op.name == "STORE_TENSOR":
                new.discard(ins.args[0])
            elif ins.op.name == "LOAD_TENSOR":
                new.add(ins.args[0])
            if new != live_in[i]:
                live_in[i] = new
                changed = True
    return [set().union(*(live_in[j] for j in _successors(code, i, targets))) if _successors(code, i, targets)
            else set() for i in range(n)]


def _forward_stores(code: Code, targets, original: Code):
    """A value stored to a local and loaded straight back (nothing else reads the local) stays on
    the stack; so does a convolution's result stored, then loaded as the second operand of a
    commutative binary whose first is a local loaded in between (``out += self.down_sample(x)``:
    STORE t, LOAD out, LOAD t, ADD becomes LOAD out, ADD), so that the convolution's run reaches the
    binary (its epilogue); and a local loaded before a convolution's run whose result is the second
    operand of a commutative binary is loaded after it instead (``x + self.conv(x)``, MobileNet v2's
    residual: ``_sink_into_conv_run``). Only after a convolution: other passes match their operands in
    order (norm.py's ``x * r * w``)."""
    while _forward_one(code, targets) or _swap_into_conv_run(code, targets) or _sink_into_conv_run(code, targets):
        pass


def _forward_one(code: Code, targets) -> bool:
    """One STORE t; LOAD t (t dead after) removed; whether there was one."""
    live = _live_after(code, targets)
    for i in range(len(code.instrs) - 1):
        a, b = code.instrs[i], code.instrs[i + 1]
        if (a.op.name == "STORE_TENSOR" and b.op.name == "LOAD_TENSOR" and a.args[0] == b.args[0]
                and a.args[0] not in live[i + 1] and not _is_target(code, targets, b)):
            after = code.instrs[i + 2] if i + 2 < len(code.instrs) else None
            if _is_target(code, targets, a):
                if after is None:
                    continue
                _replace_target(targets, a, after)
            del code.instrs[i:i + 2]
            return True
    return False


def _swap_into_conv_run(code: Code, targets) -> bool:
    """One CONV2D/BATCH_NORM; STORE t; LOAD a; LOAD t; <commutative> (t dead after) made
    CONV2D/BATCH_NORM; LOAD a; <commutative>; whether there was one."""
    live = _live_after(code, targets)
    for i in range(1, len(code.instrs) - 3):
        a, b, c, op = code.instrs[i:i + 4]
        if (code.instrs[i - 1].op.name in ("CONV2D", "BATCH_NORM")
                and a.op.name == "STORE_TENSOR" and b.op.name == "LOAD_TENSOR" and c.op.name == "LOAD_TENSOR"
                and op.op.commutative and a.args[0] == c.args[0] != b.args[0] and a.args[0] not in live[i + 2]
                and not any(_is_target(code, targets, x) for x in (b, c, op))):
            if _is_target(code, targets, a):
                _replace_target(targets, a, b)
            del code.instrs[i + 2]
            del code.instrs[i]
            return True
    return False


def _sink_into_conv_run(code: Code, targets) -> bool:
    """One LOAD a; <a straight stretch that pushes one value, ending in CONV2D/BATCH_NORM, with no
    STORE a>; <commutative> made <the stretch>; LOAD a; <commutative> (the same values, bit for bit:
    OpInfo.commutative); whether there was one."""
    for q in range(2, len(code.instrs)):
        op = code.instrs[q]
        if not op.op.commutative or code.instrs[q - 1].op.name not in ("CONV2D", "BATCH_NORM"):
            continue
        need, s = 1, q
        while need > 0 and s > 0:          # (back to where the second operand's stretch starts)
            s -= 1
            ins = code.instrs[s]
            need += ins.op.n_pops(ins.args) - ins.op.n_pushes(ins.args)
        if need != 0 or s < 1:
            continue
        load, stretch = code.instrs[s - 1], code.instrs[s:q]
        if load.op.name != "LOAD_TENSOR" or any(
                i.op.terminator or i.op.label_operand is not None or i.op.effect
                or (i.op.name == "STORE_TENSOR" and i.args[0] == load.args[0]) for i in stretch):
            continue
        if any(_is_target(code, targets, i) for i in code.instrs[s - 1:q + 1]):
            continue
        code.instrs[s - 1:q] = stretch + [load]
        return True
    return False


# ---------------------------------------------------------------- fusion

def _fuse_runs(code: Code, targets, original: Code):
    shapes = _result_shapes(code, targets)
    i = 0
    while i < len(code.instrs):
        j, repl = _try_fuse_at(code, i, targets, shapes)
        if repl is None:
            i += 1
            continue
        first = code.instrs[i]
        if _is_target(code, targets, first):
            _replace_target(targets, first, repl[0])
        code.instrs[i:j] = repl
        i += len(repl)


def _result_shapes(code: Code, targets):
    """id(instruction) -> the shape of the value it pushes (the verifier's stack types of the code
    as fusion found it), or None where the code does not verify here."""
    from ..errors import VerifyError

    try:
        _retarget(code, targets)
        verify(code)
    except VerifyError:
        return None
    out = {}
    for i, ins in enumerate(code.instrs[:-1]):
        after = code.stack_types[i + 1] if i + 1 < len(code.stack_types) else None
        if after and ins.op.pushes == 1:
            out[id(ins)] = getattr(after[-1], "shape", None)
    return out


def _grows(head, result) -> bool:
    """Whether ``result`` (a shape, or None: unknown) may be larger than ``head``: another rank, or
    a dim that is 1 in head and not 1 in result."""
    def one(d):
        return (d.const_value() if hasattr(d, "const_value") else d) == 1
    return result is None or len(result) != len(head) or any(one(h) and not one(r) for h, r in zip(head, result))


def _try_fuse_at(code: Code, start: int, targets, shapes=None):
    """Find the longest fusable run starting at ``start``; returns (end, replacement) or (start, None).
    A convolution's run takes only ops whose result is no larger than the convolution's (its epilogue
    is computed over the convolution's output: ``conv(s) * x`` with x larger, as in a squeeze-excite
    gate, stays out of it; conv.plan_gemm checks the run-time shapes too); where ``shapes``
    (``_result_shapes``) is None, no op joins a convolution's run."""
    instrs = code.instrs
    first = instrs[start]
    conv = _conv_head(code, start, targets)                # (issue 18: CONV2D [+ BATCH_NORM] heads a run)
    matmul = first.op.name in MATMULS or conv is not None
    pos = start + 1 + (conv[4] if conv else 0) if matmul else start
    local: list = []          # run-local stack of program fragments (lists of nodes)
    below = 1 if matmul else 0  # values consumed from under the run (the matmul result counts as one)
    if matmul:
        local.append([("in", 0)])
    leaves: list = []         # runtime leaf instructions, in order
    parts: list = [(first.op.name, first.loc)] if matmul else []
    n_ops = 0
    best = None
    if conv and conv[1]:
        if conv[3]:
            parts.append(("BIAS", conv[3][2].loc))
        parts.append(("BATCH_NORM", conv[2].loc))
        best = (pos, [("in", 0)], [], list(parts), below, None)
    k = pos
    head_shape = None
    if conv:
        head_shape = shapes.get(id(instrs[pos - 1])) if shapes is not None else None
        if head_shape is None:
            head_shape = False                 # (unknown: nothing joins the run)
    below_inputs = ["mm"] if matmul else []
    ext = _PastReshape(code, targets) if matmul and conv is None else None
    while k < len(instrs):
        ins = instrs[k]
        if k > start and _is_target(code, targets, ins):
            break
        name = ins.op.name
        if conv and name == "RESHAPE" and leaves and local and local[-1] == [("leaf", len(leaves) - 1)] and \
                _param_leaf(leaves[-1]):
            leaves[-1] = (leaves[-1] if isinstance(leaves[-1], list) else [leaves[-1]]) + [ins]   # (a bias [1,O,1,1])
            k += 1
            continue
        if ext is not None:             # (issue 18: the epilogue past the product's reshape and local)
            step = ext.step(ins, local, n_ops)
            if step == "break":
                break
            if step == "took":
                k += 1
                if ext.valid(k, n_ops, local):
                    best = (k, list(local[0]), list(leaves), list(parts), below, ext.reshape)
                continue
        if name in LEAVES:
            if name == "LOAD_CONST":
                v = code.consts[ins.args[0]]
                if isinstance(v, bool) or not isinstance(v, (int, float)):
                    break
                local.append([("c", v)])      # (an int stays an int: int chains keep their dtype)
            else:
                leaves.append(ins)
                local.append([("leaf", len(leaves) - 1)])
        elif name in FUSABLE:
            if name == "CAST" and code.consts[ins.args[0]] not in FLOAT_DTYPES:
                break
            if head_shape is not None and (head_shape is False or _grows(head_shape, shapes.get(id(ins)))):
                break
            arity = ins.op.pops
            if len(local) < arity:
                need = arity - len(local)
                if matmul:
                    break
                for _ in range(need):     # the run consumes values that were on the stack before it
                    below_inputs.insert(0, f"b{below}")
                    local.insert(0, [("below", below)])
                    below += 1
            args = local[len(local) - arity:]
            del local[len(local) - arity:]
            node = (name,) + tuple(code.decode_args(ins))
            local.append([x for a in args for x in a] + [node])
            parts.append((name, ins.loc))
            n_ops += 1
        else:
            break
        k += 1
        if len(local) == 1 and (n_ops >= 2 or (matmul and n_ops >= 1) or (n_ops == 1 and parts[0][0] in COSTLY)) \
                and (ext is None or ext.valid(k, n_ops, local)):
            best = (k, list(local[0]), list(leaves), list(parts), below, ext.reshape if ext else None)
    if best is None and (conv is not None or _by_weight(code, start)):
        # (a convolution, or a product by a Parameter, with nothing to fuse: FUSED_CONV / FUSED_MATMUL all the
        # same, so its compiled route applies: the packed product, split over two cores, not the interpreter's
        # BLAS call on the weight's transposed view; LLaMA's projections have no bias)
        best = (start + 1, [("in", 0)], [], [(first.op.name, first.loc)], 1, None)
    if best is None:
        return start, None
    end, prog, used_leaves, used_parts, n_below, reshape_after = best
    # inputs: values from below (deepest first), then the runtime leaves in load order
    n_leaves = len(used_leaves)
    mapping_below = {}
    # below indexes were assigned in consumption order: index 0 is the top of the stack under the run
    for bi in range(n_below):
        mapping_below[bi] = n_below - 1 - bi
    program = []
    for node in prog:
        if node[0] == "below":
            program.append(("in", mapping_below[node[1]]))
        elif node[0] == "leaf":
            program.append(("in", n_below + node[1]))
        elif node[0] == "in":      # the matmul product
            program.append(("in", 0))
        else:
            program.append(node)
    program = tuple(program)
    flat = [x for li in used_leaves for x in (li if isinstance(li, list) else [li])]
    if conv:
        return end, _conv_replacement(code, first, conv, flat, program, n_leaves, used_parts)
    repl = [Instr(li.op, li.args, li.loc, li.parts) for li in flat]
    if matmul:
        a = code.decode_args(first)
        fused = Instr(BY_NAME["FUSED_MATMUL"], (_const(code, a[0]), _const(code, a[1]),
                                                 _const(code, first.op.name == "BATCH_MATMUL"),
                                                 _const(code, program), 2 + n_leaves),
                      first.loc, tuple(used_parts))
        if reshape_after is not None:      # (issue 18: the product's reshape, now of the fused result)
            repl.append(fused)
            fused = Instr(reshape_after.op, reshape_after.args, reshape_after.loc, reshape_after.parts)
    else:
        fused = Instr(BY_NAME["FUSED_ELEMENTWISE"], (_const(code, program), n_below + n_leaves),
                      used_parts[-1][1], tuple(used_parts))
    repl.append(fused)
    return end, repl


def _by_weight(code: Code, start: int) -> bool:
    """Whether instruction ``start`` is a MATMUL whose second operand a LOAD_PARAM just pushed (x @ W,
    ``nn.Dense(has_bias=False)``)."""
    return code.instrs[start].op.name == "MATMUL" and start > 0 and code.instrs[start - 1].op.name == "LOAD_PARAM"


def _const(code: Code, v) -> int:
    from ..bytecode.code import _const_key

    key = _const_key(v)
    for k, c in enumerate(code.consts):
        if _const_key(c) == key:
            return k
    code.consts.append(v)
    return len(code.consts) - 1


# ---------------------------------------------------------------- issue 18: the convolution's epilogue

def _param_leaf(leaf) -> bool:
    first = leaf[0] if isinstance(leaf, list) else leaf
    return first.op.name == "LOAD_PARAM" and (not isinstance(leaf, list) or len(leaf) == 1)


def _conv_head(code: Code, start: int, targets):
    """(CONV2D, loads, BATCH_NORM, bias add or None, n instructions) when a CONV2D at ``start`` is
    followed by a batch norm of Parameters (folded into the weights), optionally after the conv's
    own bias add (``LOAD_PARAM b; RESHAPE [1, O, 1, 1]; BROADCAST_ADD``, nn.Conv2d's has_bias: folded
    too); (CONV2D, [], None, None, 0) for a plain one; None otherwise."""
    instrs = code.instrs
    first = instrs[start]
    if first.op.name != "CONV2D":
        return None
    at, bias = start + 1, None
    trio = instrs[at:at + 3]
    if (len(trio) == 3 and [i.op.name for i in trio] == ["LOAD_PARAM", "RESHAPE", "BROADCAST_ADD"]
            and _channel_shape(code.decode_args(trio[1])[0])):
        bias, at = trio, at + 3
    loads = instrs[at:at + 4]
    bn = instrs[at + 4] if at + 4 < len(instrs) else None
    if (bn is not None and bn.op.name == "BATCH_NORM" and len(loads) == 4
            and all(i.op.name == "LOAD_PARAM" for i in loads)
            and not any(_is_target(code, targets, i) for i in loads + [bn] + list(bias or []))):
        return first, ([bias[0]] if bias else []) + loads, bn, bias, at + 5 - start - 1
    return first, [], None, None, 0


def _channel_shape(shape) -> bool:
    """(1, O, 1, 1): a per-channel bias."""
    return isinstance(shape, tuple) and len(shape) == 4 and all(
        getattr(d, "const_value", lambda d=d: d)() == 1 for i, d in enumerate(shape) if i != 1)


def _conv_replacement(code: Code, first, conv, leaves, program, n_leaves, parts):
    _, loads, bn, bias, _n = conv
    a = code.decode_args(first)
    eps = code.decode_args(bn)[0] if bn is not None else None
    if bias:
        eps = ("bias", eps)               # (the conv's own bias [O] comes before the batch norm's four)
    repl = [Instr(li.op, li.args, li.loc, li.parts) for li in list(loads) + leaves]
    n = 2 + len(loads) + n_leaves
    fused = Instr(BY_NAME["FUSED_CONV"], (_const(code, a[0]), _const(code, a[1]), _const(code, a[2]),
                                         _const(code, a[3]), _const(code, eps), _const(code, program), n),
                  first.loc, tuple(parts))
    return repl + [fused]


# ---------------------------------------------------------------- issue 18: a matmul's epilogue past a reshape

MAX_READS = 4          # LOAD v reads of the stored product an epilogue may take


class _PastReshape:
    """Lets a matmul's epilogue run continue past ``RESHAPE`` of the product and past ``STORE v``
    of it with ``LOAD v`` reads after (GPT-2's Conv1D ends ``x.view(size_out)`` and its GELU reads
    its input three times): the reshape moves after the fused instruction, which is exact because
    only numeric constants and the product itself may follow it (elementwise ops of those commute
    with any reshape); each ``LOAD v`` reads the product's fragment, and v must be dead once the run
    ends (at most MAX_READS reads, of a fragment with no costly op: each read recomputes it). A run
    that takes either is kept only where it fuses at least one op more past them."""

    def __init__(self, code, targets):
        self.code, self.targets = code, targets
        self.reshape = None
        self.alias = None            # (slot, the product's program fragment)
        self.ops_before = None       # n_ops when the first of them was taken
        self.live = None
        self.reads = 0

    def step(self, ins, local, n_ops: int) -> str:
        """"took" (the instruction is part of the run), "break" or "" (fuse's own handling)."""
        name = ins.op.name
        first = self.reshape is None and self.alias is None
        if name == "RESHAPE" and first and len(local) == 1:
            self.reshape = ins
        elif name == "STORE_TENSOR" and self.alias is None and len(local) == 1 and \
                not any(node[0] in COSTLY for node in local[0]):       # (each read recomputes the fragment)
            self.alias = (ins.args[0], local.pop())
        elif name == "LOAD_TENSOR" and self.alias is not None and ins.args[0] == self.alias[0]:
            self.reads += 1
            if self.reads > MAX_READS:
                return "break"
            local.append(list(self.alias[1]))
            return "took"
        elif name in LEAVES and name != "LOAD_CONST" and self.reshape is not None:
            return "break"             # (a tensor would broadcast against the reshaped product)
        elif name in ("STORE_TENSOR", "RESHAPE") and not first:
            return "break"
        else:
            return ""
        if self.ops_before is None:
            self.ops_before = n_ops
        return "took"

    def valid(self, end: int, n_ops: int, local) -> bool:
        """Whether a run ending before instruction ``end`` may be kept."""
        if self.ops_before is None:
            return True
        if n_ops <= self.ops_before or len(local) != 1:
            return False
        if self.alias is not None:
            if self.live is None:
                self.live = _live_after(self.code, self.targets)
            if self.alias[0] in self.live[end - 1]:
                return False
        return True
