"""The opcode table is the one definition: every row is complete and used."""

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
