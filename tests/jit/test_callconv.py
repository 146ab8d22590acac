"""The kernel calling convention (compiler/callconv.py) against what the kernels really declare:
the parameters of the lowered LLVM IR (CPU) and NVVM IR (GPU), the ctypes prototype, and
kernels called with scalar operands before and among their tensor operands, at L2 and L3,
against numpy; the GPU launch on the emulated GPU, whose kernels check each argument against
the parameter the loaded PTX declares."""

import re
import sys

import msvm as ms
import numpy as np
import pytest
from msvm.bytecode import CodeBuilder, verify
from msvm.bytecode import symbolic as S
from msvm.bytecode.types import ScalarType, TensorType
from msvm.compiler import callconv, lower, lower_gpu, tiers
from msvm.compiler.kir import Elementwise, MatmulEpilogue
from msvm.interp.kernels import run_program

_LLVM = {"float": {"ptr": "float*", "i64": "i64", "double": "double"},
         "double": {"ptr": "double*", "i64": "i64", "double": "double"}}

# kinds in every arrangement that matters: a scalar first, between tensors, last, many scalars
KINDS = [("s", "t"), ("t", "s", "t"), ("t", "t", "s"), ("s", "s", "t", "s"), ("s",) * 9 + ("t",) + ("s",)]


def _params(ir: str, name: str) -> list:
    """The parameter types of function ``name``'s definition in LLVM IR text."""
    m = re.search(rf"define [^@]*@{name}\((.*?)\)", ir)
    assert m, f"no definition of {name}"
    return [p.split()[0] for p in m.group(1).split(", ")]


def _program(kinds) -> tuple:
    """in0 * 2 + in1 - in2 ... : every input read once."""
    prog = [("in", 0), ("c", 0.5), ("BROADCAST_MUL",)]
    for i in range(1, len(kinds)):
        prog += [("in", i), ("BROADCAST_ADD",) if i % 2 else ("BROADCAST_SUB",)]
    return tuple(prog)


@pytest.mark.parametrize("kinds", KINDS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_lowered_kernels_declare_what_the_convention_says(kinds, dtype):
    t = lower.TYPES[dtype]
    bcast = tuple((False, False, False) if k == "t" else () for k in kinds)
    for dims in (None, (2, 3, 8)):
        k = Elementwise(_program(kinds), kinds, bcast, dtype, dims)
        want = [_LLVM[t][a] for a in callconv.signature(k)]
        assert _params(lower.lower(k, "k", ""), "k") == want
        gpu = _params(lower_gpu.lower_gpu(k, "g"), "g")
        assert gpu == [_LLVM[t][a] for a in callconv.signature(k, gpu=True)]
        fn = callconv.prototype(k, 0x1000)
        assert len(fn.argtypes) == len(want)
        assert [a.__name__ for a in fn.argtypes].count("c_double") == kinds.count("s")


def _site(prog, inputs, dtype):
    b = CodeBuilder("p", "p.py", 1)
    for k, v in enumerate(inputs):
        b.local(f"i{k}")
        t = TensorType(tuple(S.Expr.const(d) for d in v.shape), ms.float32 if dtype == "float32" else ms.float64) \
            if isinstance(v, np.ndarray) else ScalarType("f")
        b.code.params.append((f"i{k}", t))
        b.emit("LOAD_TENSOR", k)
    b.emit("FUSED_ELEMENTWISE", b.const(prog), len(inputs))
    b.emit("RETURN")
    return tiers.Site(verify(b.finish()), len(inputs))


@pytest.mark.parametrize("kinds", KINDS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_scalars_before_and_among_tensors_reach_their_parameters(kinds, dtype, rng):
    """Each scalar a different value, so a scalar read from another's place (or a stride read as
    a scalar) changes the answer: L2 and L3 give numpy's."""
    inputs = [rng.standard_normal((5, 16)).astype(dtype) if k == "t" else float(j + 1) * 0.25
              for j, k in enumerate(kinds)]
    prog = _program(kinds)
    with np.errstate(all="ignore"):
        want = np.asarray(run_program(prog, inputs))
    site = _site(prog, inputs, dtype)
    plan = site.plan(inputs)
    assert plan is not None
    for level in (2, 3):
        compiled = tiers.compile_kernel(site.kernel_ir(level, plan), level, site.info(plan.out_shape, plan.dtype))
        got = site.run(compiled, plan, inputs, None)
        np.testing.assert_allclose(got, want, rtol=1e-6 if dtype == "float32" else 1e-12, err_msg=f"L{level}")


@pytest.mark.parametrize("kinds", [("s", "t"), ("t", "s", "t"), ("s", "s", "t", "s")])
def test_the_gpu_launch_passes_what_the_ptx_declares(kinds, rng):
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent.parent))
    import emulated_gpu as eg

    rt = eg.EmulatedRuntime()
    inputs = [rng.standard_normal((4, 6)).astype(np.float32) if k == "t" else float(j + 1) * 0.25
              for j, k in enumerate(kinds)]
    prog = _program(kinds)
    with np.errstate(all="ignore"):
        want = np.asarray(run_program(prog, inputs))
    for level in (2, 3):
        got = rt.elementwise(prog, [eg._wrap(x) if isinstance(x, np.ndarray) else x for x in inputs],
                             "float32", level)
        np.testing.assert_allclose(got._a, want, rtol=1e-6, err_msg=f"L{level}")


@pytest.mark.parametrize("kinds", [("t",), ("t", "s", "t"), ("t", "t", "s", "s")])
def test_a_matmul_kernel_declares_what_the_convention_says(kinds):
    """gemm, A, B, C, then the epilogue's inputs 1.. in input order (input 0 is the product)."""
    bcast = ((False, True, False),) + tuple((False, True, False) if k == "t" else () for k in kinds[1:])
    epi = Elementwise(_program(kinds), kinds, bcast, "float32", (4, 1, 8))
    k = MatmulEpilogue(False, False, epi, "float32", 4, 6, 8)
    m = re.search(r"define [^@]*@mm\((.*?)\) nounwind", lower.lower(k, "mm", ""))
    tail = m.group(1).split("%gemm, ")[1].split(", ")         # (the gemm pointer's own type has commas)
    assert ["ptr"] + [p.split()[0] for p in tail] == \
        ["ptr"] + [_LLVM["float"][a] for a in callconv.signature(k)[1:]]
    assert len(callconv.prototype(k, 0x1000).argtypes) == len(callconv.signature(k))
