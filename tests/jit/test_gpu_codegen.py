"""GPU code generation without a GPU: every op and fused kernel lowers to PTX that the
machine's ``ptxas -arch=sm_90`` (and sm_80) accepts; ``msvm dump --emit ptx|llvm``."""

import os
import random
import re
import shutil
import subprocess
import sys

import pytest
from msvm.compiler.kir import Elementwise, MatmulEpilogue, RowKernel
from msvm.compiler.lower import BINARY, UNARY, Unsupported
from msvm.compiler.lower_gpu import emit_ptx, lower_gpu
from paths import EXAMPLES

PTXAS = shutil.which("ptxas")
needs_ptxas = pytest.mark.skipif(PTXAS is None, reason="ptxas is not on PATH")
FULL = (False, False, False)
ROWB = (True, True, False)
# what NVPTX cannot emit without libdevice: these instructions stay in the CuPy interpreter (a float32
# pow is lowered without libm since issue 18: compiler/lower_pow.py; a float64 one by a general exponent is not)
NOT_ON_GPU = {(op, "float64") for op in ("EXP", "LOG", "TANH", "SIGMOID", "ERF", "GELU", "GELU_TANH",
                                         "BROADCAST_POW", "softmax")} \
    | {(op, d) for op in ("SIN", "COS") for d in ("float32", "float64")}      # (issue 21: CPU kernels only)


def ptxas(ptx: str, arch: str, tmp_path) -> None:
    f = tmp_path / f"k_{arch}.ptx"
    f.write_text(ptx)
    r = subprocess.run([PTXAS, f"-arch={arch}", str(f), "-o", os.devnull], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[:2000]


def kernels():
    for d in ("float32", "float64"):
        for op in UNARY:
            yield f"{op}-{d}", op, Elementwise((("in", 0), (op,)), ("t",), (FULL,), d, None)
        for op in BINARY:
            yield f"{op}-{d}", op, Elementwise((("in", 0), ("in", 1), (op,)), ("t", "t"), (FULL, ROWB), d, None)
            yield f"{op}-scalar-L3-{d}", op, Elementwise((("in", 0), ("in", 1), (op,)), ("t", "s"), (FULL, ()), d,
                                                         (3, 4, 130))
        for op in ("softmax", "layer_norm"):
            yield f"{op}-{d}", op, RowKernel(op, d, op == "layer_norm", op == "layer_norm", 1e-5, None)
            yield f"{op}-L3-{d}", op, RowKernel(op, d, False, False, 1e-12, 768)
        for c in (3.0, -2.0, 0.5, -0.5):      # constant exponents: multiplies and square roots, any dtype
            yield f"pow{c}-{d}", "POW_CONST", Elementwise((("in", 0), ("c", c), ("BROADCAST_POW",)), ("t",), (FULL,),
                                                         d, None)
        epi = Elementwise((("in", 0), ("in", 1), ("BROADCAST_ADD",), ("RELU",)), ("t", "t"), (FULL, ROWB), d, None)
        yield f"matmul-bias-relu-{d}", "MATMUL", MatmulEpilogue(False, False, epi, d, 32, 768, 1024)


def random_programs(n=25, seed=7):
    """Fused elementwise chains like the ones fusion builds: random ops over 1-3 inputs."""
    rng = random.Random(seed)
    un = [op for op in UNARY if op != "ERF" and (op, "float32") not in NOT_ON_GPU] + ["ERF"]
    for k in range(n):
        n_in = rng.randint(1, 3)
        prog = [("in", 0)]
        depth = 1
        for j in range(1, n_in):
            prog.append(("in", j))
            depth += 1
        for _ in range(rng.randint(1, 6)):
            if depth > 1 and rng.random() < 0.5:
                prog.append((rng.choice([b for b in BINARY if b != "BROADCAST_POW"]),))
                depth -= 1
            elif rng.random() < 0.3:
                prog.append(("c", round(rng.uniform(-2, 2), 3)))
                prog.append((rng.choice(["BROADCAST_MUL", "BROADCAST_ADD"]),))
            else:
                prog.append((rng.choice(un),))
        while depth > 1:
            prog.append(("BROADCAST_ADD",))
            depth -= 1
        kinds = ("t",) * n_in
        bc = tuple(rng.choice([FULL, ROWB, (True, False, False)]) if j else FULL for j in range(n_in))
        dims = None if k % 2 else (2, 5, 67)
        yield f"random{k}", Elementwise(tuple(prog), kinds, bc, "float32", dims)


@needs_ptxas
@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
def test_every_op_lowers_to_ptx_that_ptxas_accepts(arch, tmp_path):
    unsupported = set()
    checked = 0
    for name, op, k in kernels():
        try:
            ptx = emit_ptx(lower_gpu(k, f"msvm_{k.name}"), arch, level=3 if "L3" in name else 2)
        except Unsupported:
            unsupported.add((op, k.dtype))
            continue
        assert f".target {arch}" in ptx and ".entry" in ptx, name
        ptxas(ptx, arch, tmp_path)
        checked += 1
    assert unsupported == NOT_ON_GPU
    assert checked >= 50


@needs_ptxas
def test_random_fused_programs_lower_to_valid_ptx(tmp_path):
    for name, k in random_programs():
        for level in (2, 3):
            ptxas(emit_ptx(lower_gpu(k, f"msvm_{name}"), "sm_90", level), "sm_90", tmp_path)


def modules(text: str) -> list:
    """``--emit ptx`` prints one PTX module per kernel, each after a ``// Cell @offset OP`` line."""
    parts = re.split(r"^// \S+ @0x[0-9a-f]{4} .*$", text, flags=re.M)
    return [p for p in parts if ".entry" in p]


def _dump(*args):
    return subprocess.run([sys.executable, "-m", "msvm", "dump", *args], capture_output=True, text=True, timeout=300)


@needs_ptxas
def test_dump_emit_ptx_and_llvm(tmp_path):
    article = os.path.join(EXAMPLES, "dynamic_matmul.py")
    r = _dump(article, "--emit", "ptx")
    assert r.returncode == 0, r.stderr
    assert "DynamicMatmulCell.construct @0x0006 FUSED_MATMUL_RELU (L2: shape-generic) sm_90" in r.stdout
    (module,) = modules(r.stdout)
    ptxas(module, "sm_90", tmp_path)
    off = _dump(article, "--emit", "ptx", "--flag", "training=0")
    assert "no instruction compiles to a kernel" in off.stdout, "training=False is a plain matmul (cuBLAS)"
    llvm = _dump(os.path.join(EXAMPLES, "bert_layer.py"), "--cell", "BertLayer", "--emit", "llvm")
    assert llvm.returncode == 0, llvm.stderr
    for kernel in ("FUSED_MATMUL_BIAS", "SOFTMAX", "LAYER_NORM"):
        assert kernel in llvm.stdout
    assert "define void @msvm_" in llvm.stdout
    sm80 = _dump(os.path.join(EXAMPLES, "bert_layer.py"), "--cell", "BertLayer", "--emit", "ptx", "--arch", "sm_80")
    assert ".target sm_80" in sm80.stdout
    mods = modules(sm80.stdout)
    assert len(mods) >= 4
    for m in mods:
        ptxas(m, "sm_80", tmp_path)


def test_gpu_runtime_without_a_gpu_names_the_problem():
    from msvm.compiler import gpu
    from msvm.context import gpu_problem

    assert gpu.target_arch("90") == "sm_90" and gpu.target_arch("89") == "sm_80"
    with pytest.raises(Unsupported, match="sm_80 or newer"):
        gpu.target_arch("75")
    if gpu_problem() is None:
        pytest.skip("this machine has a usable GPU: bench/gpu_check.py covers it")
    with pytest.raises(RuntimeError, match="msvm GPU runtime: .*(CuPy|CUDA)"):
        gpu.GpuRuntime()
    r = subprocess.run([sys.executable, os.path.join(os.path.dirname(EXAMPLES), "bench", "gpu_check.py")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "gpu_check: msvm GPU runtime:" in r.stdout
