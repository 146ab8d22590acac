"""Lowering for NVIDIA GPUs: the same kernel IR -> NVVM IR text -> PTX (llvmlite's NVPTX
backend, ``nvptx64-nvidia-cuda``, sm_80 / sm_90).

Why LLVM and not CUDA C through NVRTC: the kernel IR already lowers to LLVM for the CPU
(``lower.py``); the math (Cephes exp, A&S erf, tanh, gelu) and the program emitter are
shared, so both devices compute the same formulas, and PTX can be produced and checked
with ``ptxas`` on a machine without a GPU. NVRTC would need a second code generator in C.

Kernels (one thread per element / per row, grid-stride loops):

    elementwise  void @k(i64 total, i64 n1, i64 n2, T* out,
                         {T* in, i64 s0, i64 s1} per tensor input, {double} per scalar)
    row          void @k(i64 rows, i64 n, T* out, T* x, T* gamma, T* beta)   softmax / layer norm

A matmul runs through cuBLAS (CuPy) and its fused epilogue as an elementwise kernel over
the product. What NVPTX cannot emit without libdevice (f64 exp/log/erf, pow) raises
``Unsupported``; that instruction stays in the CuPy interpreter.
"""

from __future__ import annotations

import threading

from .kir import Elementwise, MatmulEpilogue, RowKernel
from .lower import TYPES, Builder, Unsupported, Vals, elementwise_entry, emit_program, lower_row, row_stage_params
from .lower_pow import Scalar

TRIPLE = "nvptx64-nvidia-cuda"
ARCHS = ("sm_80", "sm_90")
_SREG = ("tid.x", "ctaid.x", "ntid.x", "nctaid.x")


class GpuVals(Vals):
    """Scalar math for NVPTX: intrinsics the backend lowers natively, approximations for the rest."""

    NATIVE = {"minnum", "maxnum", "floor", "ceil", "trunc", "rint", "fabs", "copysign", "sqrt", "fma"}

    def call(self, name: str, *args: str) -> str:
        if name in self.NATIVE:
            return super().call(name, *args)
        if name == "log" and self.t == "float":
            lg2 = "llvm.nvvm.lg2.approx.f"
            self.intrinsics.add(f"declare float @{lg2}(float)")
            return self.b.op(f"fmul float {self.b.op(f'call float @{lg2}(float {args[0]})')}, "
                             f"{self.const(0.6931471805599453)}")
        raise Unsupported(f"{name} in {self.t} on the GPU (needs libdevice; stays in the CuPy interpreter)")


def _header(b: Builder) -> list:
    decls = []
    for reg in _SREG:
        fn = f"llvm.nvvm.read.ptx.sreg.{reg}"
        decls.append(f"declare i32 @{fn}()")
    return decls


def _thread_index(b: Builder) -> tuple:
    """(first index, stride) of a grid-stride loop, as i64."""
    tid = b.op("call i32 @llvm.nvvm.read.ptx.sreg.tid.x()")
    bid = b.op("call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()")
    bdim = b.op("call i32 @llvm.nvvm.read.ptx.sreg.ntid.x()")
    gdim = b.op("call i32 @llvm.nvvm.read.ptx.sreg.nctaid.x()")
    base = b.op(f"mul i32 {bid}, {bdim}")
    first = b.op(f"zext i32 {b.op(f'add i32 {base}, {tid}')} to i64")
    stride = b.op(f"zext i32 {b.op(f'mul i32 {gdim}, {bdim}')} to i64")
    return first, stride


def lower_elementwise_gpu(k: Elementwise, name: str) -> str:
    t = TYPES.get(k.dtype)
    if t is None:
        raise Unsupported(f"GPU elementwise kernels in {k.dtype}")
    b = Builder()
    tensors, scalars, n1, n2, s0, s1, scal = elementwise_entry(
        b, k, t, name, "define ptx_kernel void", ["i64 %total"], "noalias ")
    first, stride = _thread_index(b)
    b.raw("  br label %loop")
    b.raw("loop:")
    b.raw(f"  %i = phi i64 [ {first}, %entry ], [ %inext, %body ]")
    b.raw("  %c = icmp slt i64 %i, %total")
    b.raw("  br i1 %c, label %body, label %done")
    b.raw("body:")
    i2 = b.op(f"urem i64 %i, {n2}")
    r = b.op(f"udiv i64 %i, {n2}")
    i1 = b.op(f"urem i64 {r}, {n1}")
    i0 = b.op(f"udiv i64 {r}, {n1}")
    v = GpuVals(b, t, 1)
    loaded = {}
    for i in tensors:
        off = b.op(f"add i64 {b.op(f'mul i64 {i0}, {s0[i]}')}, {b.op(f'mul i64 {i1}, {s1[i]}')}")
        if not k.bcast[i][2]:
            off = b.op(f"add i64 {off}, {i2}")
        loaded[i] = b.op(f"load {t}, {t}* {b.op(f'getelementptr {t}, {t}* %in{i}, i64 {off}')}")
    for i in scalars:
        loaded[i] = Scalar(scal[i])       # (marked for BROADCAST_POW: lower_pow.Scalar)
    res = emit_program(v, k.program, [loaded.get(i) for i in range(len(k.kinds))])
    b.raw(f"  store {t} {res}, {t}* {b.op(f'getelementptr {t}, {t}* %out, i64 %i')}")
    b.raw(f"  %inext = add i64 %i, {stride}")
    b.raw("  br label %loop")
    b.raw("done:")
    b.raw("  ret void")
    b.raw("}")
    decls = _header(b) + sorted(v.intrinsics)
    return "\n".join(decls) + "\n\n" + "\n".join(b.lines) + "\n"


def lower_row_gpu(k: RowKernel, name: str) -> str:
    """One thread per row: the CPU row function (scalar math) called from a grid-stride kernel."""
    t = TYPES.get(k.dtype)
    if t is None:
        raise Unsupported(f"GPU row kernels in {k.dtype}")
    if k.residual or k.op == "rms_norm":        # (issue 18: FUSED_ADD_LAYER_NORM, FUSED_RMS_NORM: CPU kernels only)
        raise Unsupported(f"{k.op} of FUSED_ADD_LAYER_NORM / FUSED_RMS_NORM on the GPU")
    row_ir = lower_row(k, f"{name}_rows", "", width=1)
    if "@llvm.log" in row_ir or "@llvm.exp.f64" in row_ir or "@llvm.pow" in row_ir:
        raise Unsupported(f"{k.op} in {k.dtype} on the GPU (needs libdevice)")
    row_ir = row_ir.replace(f"define void @{name}_rows(", f"define internal void @{name}_rows(", 1)
    b = Builder()
    # (issue 18: FUSED_ATTENTION's score stages in the softmax: their operands passed through)
    stage = row_stage_params(k, t) if k.op == "softmax" and k.programs else []
    more = "".join(", " + p.replace("noalias ", "") for p in stage)
    b.raw(f"define ptx_kernel void @{name}(i64 %rows, i64 %n, {t}* %out, {t}* %x, {t}* %g, {t}* %bb{more}) nounwind {{")
    b.raw("entry:")
    first, stride = _thread_index(b)
    b.raw("  br label %loop")
    b.raw("loop:")
    b.raw(f"  %r = phi i64 [ {first}, %entry ], [ %rnext, %body ]")
    b.raw("  %c = icmp slt i64 %r, %rows")
    b.raw("  br i1 %c, label %body, label %done")
    b.raw("body:")
    b.raw("  %r1 = add i64 %r, 1")
    b.raw(f"  call void @{name}_rows(i64 %r, i64 %r1, i64 %n, {t}* %out, {t}* %x, {t}* %g, {t}* %bb{more})")
    b.raw(f"  %rnext = add i64 %r, {stride}")
    b.raw("  br label %loop")
    b.raw("done:")
    b.raw("  ret void")
    b.raw("}")
    return "\n".join(_header(b)) + "\n" + row_ir + "\n" + "\n".join(b.lines) + "\n"


def lower_gpu(kernel, name: str) -> str:
    """Kernel IR -> NVVM IR text. A matmul lowers to its epilogue (the product comes from cuBLAS)."""
    if isinstance(kernel, Elementwise):
        return lower_elementwise_gpu(kernel, name)
    if isinstance(kernel, RowKernel):
        return lower_row_gpu(kernel, name)
    if isinstance(kernel, MatmulEpilogue):
        if kernel.epilogue is None:
            raise Unsupported("a plain matmul needs no kernel (cuBLAS)")
        return lower_elementwise_gpu(kernel.epilogue, f"{name}_epi")
    raise Unsupported(f"no GPU lowering for {type(kernel).__name__}")


_tm_lock = threading.Lock()
_tms: dict = {}


def _target_machine(arch: str, opt: int):
    import llvmlite.binding as llvm

    with _tm_lock:
        tm = _tms.get((arch, opt))
        if tm is None:
            llvm.initialize_all_targets()
            llvm.initialize_all_asmprinters()
            tm = _tms[(arch, opt)] = llvm.Target.from_triple(TRIPLE).create_target_machine(cpu=arch, opt=opt)
        return tm


def emit_ptx(ir: str, arch: str = "sm_90", level: int = 2) -> str:
    """NVVM IR text -> PTX text for arch (sm_80 or sm_90); L2: codegen O0 without passes, L3: O3."""
    import llvmlite.binding as llvm

    if arch not in ARCHS:
        raise Unsupported(f"GPU architecture {arch} (msvm targets {', '.join(ARCHS)})")
    tm = _target_machine(arch, 3 if level >= 3 else 0)
    with _tm_lock:
        mod = llvm.parse_assembly(ir)
        mod.triple = TRIPLE
        mod.data_layout = str(tm.target_data)
        mod.verify()
        if level >= 3:
            pto = llvm.create_pipeline_tuning_options(speed_level=3)
            pb = llvm.create_pass_builder(tm, pto)
            pb.getModulePassManager().run(mod, pb)
        return tm.emit_assembly(mod)
