"""The opcode table is the one definition: every row is complete and used."""

import numpy as np
from msvm.bytecode.opcodes import BY_CODE, FINGERPRINT, TABLE, fingerprint
from msvm.interp import kernels
from msvm.interp.interpreter import HANDLERS


def test_every_row_has_rule_handler_and_kernel():
    for r in TABLE:
        assert callable(r.rule), r.name
        assert HANDLERS[r.code] is not None, r.name
        assert r.doc, r.name
        if r.kind not in ("control", "memory") or r.name == "FILL":
            assert r.name in kernels.KERNELS, f"{r.name} has no reference kernel"


def test_every_computing_row_says_how_the_compiled_tiers_run_it():
    """compiled= is "fused" (a lowering for FUSED_* programs), "kernel" (a Site planner) or
    "l1" (the interpreter's kernel at every tier): never left to a name list elsewhere."""
    import inspect

    from msvm.bytecode.opcodes import COMPILED
    from msvm.compiler import gpu_tiers, lower, planning

    for r in TABLE:
        computes = r.kind not in ("control", "memory") or r.name == "FILL"
        assert (r.compiled in COMPILED) == computes, r.name
        if r.compiled == "fused":
            assert r.kind == "elementwise", r.name
            assert r.name in lower.UNARY or r.name in lower.BINARY or r.name == "CAST", f"{r.name} has no lowering"
        if r.compiled == "kernel":
            assert callable(planning.PLANNERS.get(r.name)), f"{r.name} has no planner"
            assert hasattr(gpu_tiers.GpuSite, "_plan_" + planning.KINDS[r.name]), f"{r.name} has no GPU planner"
        if r.out:
            assert "out" in inspect.signature(kernels.KERNELS[r.name]).parameters, f"{r.name}'s kernel takes no out="
        if r.leaf:
            assert r.pops == 0 and r.pushes == 1, r.name
    assert set(planning.PLANNERS) == {r.name for r in TABLE if r.compiled == "kernel"}


def test_codes_are_unique_and_fingerprint_is_stable():
    assert len(BY_CODE) == len(TABLE)
    assert fingerprint() == FINGERPRINT and len(FINGERPRINT) == 16


def test_article_core_instructions_exist():
    names = {r.name for r in TABLE}
    for n in ("LOAD_TENSOR", "STORE_TENSOR", "LOAD_CONST", "BROADCAST_ADD", "RELU", "MATMUL", "RESHAPE", "CONCAT",
              "CAST", "FUSED_ELEMENTWISE", "FUSED_MATMUL", "BRANCH_IF_SYMBOLIC", "JUMP", "RETURN", "ALLOC_DEVICE_MEM",
              "FREE_DEVICE_MEM"):
        assert n in names


def test_rows_with_an_effect_run_as_they_are():
    """A row that changes state (OpInfo.effect) is never fused, compiled, a leaf, a view or given a
    reused buffer; one that writes state (a Parameter, stdout) has a handler of its own, not the pure
    h_compute (a random draw goes through h_compute, which calls its kernel once per execution)."""
    from msvm.bytecode.opcodes import EFFECTS, FUSABLE, JITABLE, LEAVES, OUT_CAPABLE, VIEWS
    from msvm.interp.interpreter import h_compute

    assert EFFECTS == {r.name for r in TABLE if r.effect} and "ASSIGN_PARAM" in EFFECTS
    assert not EFFECTS & (FUSABLE | JITABLE | LEAVES | OUT_CAPABLE | VIEWS)
    for r in TABLE:
        if r.effect:
            assert r.compiled in ("", "l1"), r.name
            if r.effect != "random":
                assert HANDLERS[r.code] is not h_compute, r.name


# ---------------------------------------------------------------- facts the compiler reads from the rows

def _f(rng, *shape):
    return rng.standard_normal(shape)


def _jit_samples(rng):
    """One instruction of each jit-able row (its operands, as the builder takes them) and inputs its
    compiled kernels take (float32, shapes any planner accepts)."""
    def f(*s):
        return _f(rng, *s).astype(np.float32)

    return {
        "FUSED_ELEMENTWISE": (((("in", 0), ("in", 1), ("BROADCAST_ADD",), ("RELU",)), 2), [f(3, 8), f(8)]),
        "FUSED_MATMUL": ((False, False, False, (("in", 0), ("RELU",)), 2), [f(4, 8), f(8, 5)]),
        "SOFTMAX": ((-1,), [f(3, 8)]),
        "LAYER_NORM": ((-1, -1, 1e-5), [f(3, 8), f(8), f(8)]),
        "MAX_POOL2D": (((2, 2), (2, 2), (0, 0, 0, 0)), [f(1, 2, 6, 6)]),
        "FUSED_CONV": (((1, 1), (0, 0, 0, 0), (1, 1), 1, None, (("in", 0), ("RELU",)), 2),
                       [f(1, 3, 6, 6), f(4, 3, 3, 3)]),
        "FUSED_ATTENTION": (((("in", 0), ("c", 0.5), ("BROADCAST_MUL",)), (), 3), [f(1, 2, 5, 8)] * 3),
        "FUSED_ADD_LAYER_NORM": ((-1, -1, 1e-5), [f(3, 8), f(3, 8), f(8), f(8)]),
        "FUSED_RMS_NORM": (((("in", 0), ("SQUARE",)), (("in", 0), ("c", 1e-6), ("BROADCAST_ADD",), ("RSQRT",)),
                            (("in", 0), ("in", 1), ("BROADCAST_MUL",), ("in", 2), ("BROADCAST_MUL",))), [f(3, 8), f(8)]),
    }


def _site_of(op, operands, inputs):
    import msvm as ms
    from msvm.bytecode import CodeBuilder, verify
    from msvm.bytecode import symbolic as S
    from msvm.bytecode.opcodes import BY_NAME
    from msvm.bytecode.types import TensorType
    from msvm.compiler import tiers

    b = CodeBuilder("p", "p.py", 1)
    for k, v in enumerate(inputs):
        b.local(f"i{k}")
        b.code.params.append((f"i{k}", TensorType(tuple(S.Expr.const(d) for d in v.shape), ms.float32)))
        b.emit("LOAD_TENSOR", k)
    b.emit(op, *[a if kind == "count" else b.const(a) for a, (_, kind) in zip(operands, BY_NAME[op].operands)])
    b.emit("RETURN")
    return tiers._site_class(op)(verify(b.finish()), len(inputs))


def test_each_jit_able_row_is_planned_where_its_kernel_kind_says(rng):
    """OpInfo.kernel names the kind of kernel a row's site runs, and with it the module that plans it
    (planning.KINDS, conv.OPS, the attention Site are read from it): a sample of every jit-able row is
    planned there, and its L2 kernel IR is of that kind."""
    from msvm.bytecode.opcodes import JITABLE, KERNEL_KINDS, KERNEL_KINDS_ALL
    from msvm.compiler import attention_site, conv, kir, planning

    assert set(KERNEL_KINDS) == JITABLE and set(KERNEL_KINDS.values()) == set(KERNEL_KINDS_ALL)
    assert planning.KINDS == KERNEL_KINDS
    assert conv.OPS == {op for op, kind in KERNEL_KINDS.items() if kind == "conv"}
    samples = _jit_samples(rng)
    assert set(samples) == JITABLE, "a new jit-able row needs a sample here"
    ir = {"elementwise": kir.Elementwise, "matmul": kir.Elementwise, "row": kir.RowKernel}  # (L2 matmul: its epilogue)
    for op, (operands, inputs) in samples.items():
        kind = KERNEL_KINDS[op]
        site = _site_of(op, operands, inputs)
        assert isinstance(site, attention_site.AttentionSite) == (kind == "attention"), op
        if kind == "attention":
            assert planning.PLANNERS[op] is planning._plan_attention      # (attention_plan.plan, bound late)
        if kind == "conv":
            assert planning.PLANNERS[op] is conv.plan
        plan = site.plan(inputs)
        assert plan is not None, (op, site.l1_why)
        k2 = site.kernel_ir(2, plan)
        if kind == "conv":         # (conv.kernel_ir: the direct kernel, or the taps product's epilogue / product)
            from msvm.compiler.gemm import TapsGemm

            assert isinstance(k2, (conv.DepthwiseConv, kir.Elementwise, TapsGemm)), (op, k2)
        elif kind in ir:
            assert isinstance(k2, ir[kind]), (op, k2)


def _fresh_cases(rng):
    """(row, inputs, kernel operands): at least one per fresh row, edge cases included where a kernel
    could hand back its input (a 1x1 window, bins of one element, a resize to the same size, a
    reduction over no axis or one of length 1, an identity epilogue)."""
    x4, w = _f(rng, 1, 2, 4, 4), _f(rng, 3, 2, 1, 1)
    col, v = _f(rng, 3, 1), _f(rng, 4)
    ident = (("in", 0),)
    return [
        ("CONV2D", [x4, w], ((1, 1), (0, 0, 0, 0), (1, 1), 1)),
        ("MAX_POOL2D", [x4], ((1, 1), (1, 1), (0, 0, 0, 0))),
        ("AVG_POOL2D", [x4], ((1, 1), (1, 1), (0, 0, 0, 0), False)),
        ("ADAPTIVE_AVG_POOL2D", [x4], ((4, 4),)),
        ("RESIZE", [x4], ((4, 4), None, "nearest", False)),
        *[(r, [col], axes) for r in ("REDUCE_SUM", "REDUCE_MEAN", "REDUCE_MAX", "REDUCE_MIN")
          for axes in (((1,), True), ((), False), ((1,), False))],
        ("ARGMAX", [col], (1, True)), ("ARGMIN", [col], (0, False)),
        ("GATHER", [col, np.arange(3)], (0,)),
        ("SOFTMAX", [col], (-1,)), ("LOG_SOFTMAX", [col], (0,)),
        ("LAYER_NORM", [col, np.ones(1), np.zeros(1)], (-1, -1, 1e-5)),
        ("MATMUL", [col, np.ones((1, 1))], (False, False)), ("MATMUL", [v[None], np.eye(4)], (False, True)),
        ("BATCH_MATMUL", [_f(rng, 2, 3, 1), np.ones((2, 1, 1))], (False, False)),
        ("BATCH_NORM", [x4, np.ones(2), np.zeros(2), np.zeros(2), np.ones(2)], (0.0,)),
        ("FUSED_CONV", [x4, w], ((1, 1), (0, 0, 0, 0), (1, 1), 1, None, ident, 2)),
        ("FUSED_MATMUL", [col, np.ones((1, 1))], (False, False, False, ident, 2)),
    ]


def test_fresh_rows_never_return_an_input(rng):
    """OpInfo.fresh (memplan reads it: such a result keeps no input alive): the L1 kernel of each
    fresh row returns memory of its own, never an input or a view of one."""
    from msvm.bytecode.opcodes import BY_NAME, FRESH, VIEWS

    cases = _fresh_cases(rng)
    assert {r for r, _, _ in cases} == FRESH, "a new fresh row needs a case here"
    assert not FRESH & VIEWS
    for row, inputs, operands in cases:
        assert BY_NAME[row].fresh
        r = kernels.KERNELS[row](*inputs, *operands)
        for x in inputs:
            assert not np.shares_memory(np.asarray(r), x), (row, operands)


def test_in_place_rows_may_write_over_their_input(rng):
    """OpInfo.in_place (memplan reads it: the result takes a dying input's slot): each such row whose L1
    kernel writes into ``out=`` gives the same values when out is its first input (elementwise)."""
    from msvm.bytecode.opcodes import IN_PLACE, TABLE

    assert "BROADCAST_ADD" in IN_PLACE and "FUSED_ELEMENTWISE" in IN_PLACE
    for r in TABLE:
        if r.in_place:
            assert r.kind == "elementwise" or r.kernel == "elementwise", r.name
        if not r.in_place or r.compiled == "kernel":       # (FUSED_ELEMENTWISE's compiled kernel: tests/jit)
            continue
        inputs = [np.abs(_f(rng, 5, 7)) + 0.5 for _ in range(r.pops)]
        with np.errstate(all="ignore"):
            want = kernels.KERNELS[r.name](*[x.copy() for x in inputs])
            got = kernels.KERNELS[r.name](*inputs, out=inputs[0])
        assert got is inputs[0] or np.shares_memory(got, inputs[0]), r.name
        np.testing.assert_array_equal(got, want, err_msg=r.name)


def test_rows_that_keep_buffers_are_the_ones_memplan_leaves_alone():
    """OpInfo.keeps_buffers: a jit-able row whose site keeps its result buffers is not planned; every
    other jit-able row's L1 kernel takes ``out=`` (the memory plan hands it one)."""
    import inspect

    from msvm.bytecode.opcodes import JITABLE
    from msvm.compiler import memplan

    assert memplan.WRITES_INTO == JITABLE - {r.name for r in TABLE if r.keeps_buffers}
    assert "FUSED_ATTENTION" not in memplan.WRITES_INTO
    for name in memplan.WRITES_INTO:
        assert "out" in inspect.signature(kernels.KERNELS[name]).parameters, name


def test_raw_operand_rows_take_their_count(rng):
    """OpInfo.raw_operands: the interpreter passes such a row's decoded operands as they are, count
    included, to a kernel that unpacks them from the end of ``*args``: CONCAT's and STACK's give numpy's."""
    import inspect

    for r in TABLE:
        if r.raw_operands:
            assert any(kind == "count" for _, kind in r.operands), r.name
            params = inspect.signature(kernels.KERNELS[r.name]).parameters.values()
            assert any(p.kind is p.VAR_POSITIONAL for p in params), f"{r.name}'s kernel takes no *args"
    a, b = _f(rng, 2, 3), _f(rng, 2, 3)
    np.testing.assert_array_equal(kernels.KERNELS["CONCAT"](a, b, 2, 1), np.concatenate([a, b], 1))
    np.testing.assert_array_equal(kernels.KERNELS["STACK"](a, b, 2, 0), np.stack([a, b], 0))


# ---------------------------------------------------------------- op names a pass spells out

_PROGRAM_TAGS = {"AS_SCORES"}     # (attention_plan.py's own program node: its score program's dtype conversion)


def _listed_names(source: str):
    """(line, string) for each opcode-like string a module compares an op name with (``ins.op.name ==``,
    ``site.op in (...)``, ``name``, ``tag``) or lists in a collection of such strings."""
    import ast
    import re

    oplike = re.compile(r"^[A-Z][A-Z0-9]*(_[A-Z0-9]+)*$")

    def strings(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            for e in node.elts:
                yield from strings(e)
        elif isinstance(node, ast.Call) and getattr(node.func, "id", "") in ("frozenset", "set", "tuple"):
            for a in node.args:
                yield from strings(a)

    def names_op(node):
        if isinstance(node, ast.Attribute):
            return node.attr == "op" or (node.attr == "name" and isinstance(node.value, ast.Attribute)
                                         and node.value.attr == "op")
        if isinstance(node, ast.ListComp):
            return names_op(node.elt)
        return isinstance(node, ast.Name) and node.id in ("name", "op", "tag")

    from msvm.bytecode.opcodes import BY_NAME

    for n in ast.walk(ast.parse(source)):
        if isinstance(n, ast.Compare) and any(names_op(s) for s in (n.left, *n.comparators)):
            for s in (n.left, *n.comparators):
                yield from ((c.lineno, c.value) for c in strings(s) if oplike.match(c.value))
        elif isinstance(n, ast.Assign):
            cs = list(strings(n.value))
            if len(cs) > 1 and all(oplike.match(c.value) for c in cs) and any(c.value in BY_NAME for c in cs):
                yield from ((c.lineno, c.value) for c in cs)


def test_every_op_a_pass_names_is_a_row():
    """The op names the VM's modules still spell out (a pass's own choices, such as attention's inputs
    it emits again or the layers inlining looks for) are rows of the table: a renamed or misspelt row
    fails here, not silently in a comparison that is never true."""
    import pathlib

    import msvm
    import msvm_server

    assert list(_listed_names('if ins.op.name in ("LOAD_TENSOR", "LAOD_CONST"):\n    pass\n')) == \
        [(1, "LOAD_TENSOR"), (1, "LAOD_CONST")]
    assert list(_listed_names('_M = ("RESHAPE", "TRANSPOSE")\n_E = ("ON", "OFF")\n')) == \
        [(1, "RESHAPE"), (1, "TRANSPOSE")]
    from msvm.bytecode.opcodes import BY_NAME

    bad, seen = [], 0
    for pkg in (msvm, msvm_server):
        for path in sorted(pathlib.Path(pkg.__file__).parent.rglob("*.py")):
            for line, name in _listed_names(path.read_text()):
                seen += 1
                if name not in BY_NAME and name not in _PROGRAM_TAGS:
                    bad.append(f"{path.name}:{line}: {name}")
    assert not bad, bad
    assert seen > 100          # (the scan sees the modules' comparisons: 160 when this was written)
