"""The opcode table's ``in_place`` rows at the compiled tiers: the memory plan may hand such a row's
site a dying input's buffer as ``out=`` (memplan._in_place), so its L2 and L3 kernels must give, writing
over that input, what L1 gives into a buffer of its own."""

import msvm as ms
import numpy as np
import pytest
from msvm.bytecode import CodeBuilder, verify
from msvm.bytecode import symbolic as S
from msvm.bytecode.opcodes import IN_PLACE, JITABLE
from msvm.bytecode.types import TensorType
from msvm.compiler import tiers
from msvm.interp.kernels import run_program

# each reads its input 0 more than once, after other inputs, or next to a broadcast one
PROGRAMS = [
    (("in", 0), ("in", 0), ("BROADCAST_MUL",), ("in", 1), ("BROADCAST_ADD",)),
    (("in", 1), ("in", 0), ("BROADCAST_SUB",), ("EXP",), ("in", 0), ("BROADCAST_MUL",)),
    (("in", 0), ("NEG",), ("in", 1), ("BROADCAST_MAX",), ("in", 0), ("BROADCAST_DIV",)),
]


def _site(prog, inputs):
    b = CodeBuilder("p", "p.py", 1)
    for k, v in enumerate(inputs):
        b.local(f"i{k}")
        b.code.params.append((f"i{k}", TensorType(tuple(S.Expr.const(d) for d in v.shape), ms.float32)))
        b.emit("LOAD_TENSOR", k)
    b.emit("FUSED_ELEMENTWISE", b.const(prog), len(inputs))
    b.emit("RETURN")
    return tiers.Site(verify(b.finish()), len(inputs))


def test_the_in_place_jit_able_rows_are_these():
    assert IN_PLACE & JITABLE == {"FUSED_ELEMENTWISE"}       # (a new one needs its case here)


@pytest.mark.parametrize("prog", PROGRAMS)
@pytest.mark.parametrize("other", [(37, 65), (65,), (37, 1), ()])
@pytest.mark.parametrize("level", [2, 3])
def test_fused_elementwise_writes_over_its_first_input(prog, other, level, rng):
    x = rng.standard_normal((37, 65)).astype(np.float32)
    x[0, :3] = [np.nan, np.inf, -0.0]
    y = rng.standard_normal(other).astype(np.float32)
    with np.errstate(all="ignore"):
        want = np.asarray(run_program(prog, [x, y]))
    site = _site(prog, [x, y])
    plan = site.plan([x, y])
    assert plan is not None and plan.out_shape == x.shape
    compiled = tiers.compile_kernel(site.kernel_ir(level, plan), level, site.info(plan.out_shape, plan.dtype))
    got = site.run(compiled, plan, [x, y], x)
    assert got is x
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6, equal_nan=True)
