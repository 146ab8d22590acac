"""The tier manager on the GPU device, without a GPU (compiler/gpu_tiers.py): the dispatch
decision of every jit-able instruction of real Cells (tier, kernel IR, cache key keyed by the GPU
architecture), the auto policy (L2, then L3 after ``l3_after`` calls, polymorphic sites stay on
L2), what stays on L1, the PTX of every kernel the sites decide (``ptxas`` for sm_80 and sm_90),
and the behaviour without a usable GPU (a warning and the CPU, or MSVM_STRICT_DEVICE=1's error).
Launching the kernels needs a GPU: tests/gpu."""

import logging
import os
import shutil
import subprocess

import msvm as ms
import numpy as np
import pytest
from bert_layer import BertLayer
from cells import DynamicMatmulCell, Fn, SmallConvNet
from msvm import device, executor, ops
from msvm.compiler import fuse as fuse_module
from msvm.compiler import gpu_tiers, tiers
from msvm.compiler.cache import make_key
from msvm.compiler.gpu import kernel_key
from msvm.compiler.kir import Elementwise, RowKernel
from msvm.compiler.lower import Unsupported
from msvm.compiler.lower_gpu import emit_ptx, lower_gpu
from msvm.interp import interpreter

PTXAS = shutil.which("ptxas")
VERSION = "llvmlite-test"


class PtxRuntime:
    """The GPU runtime's compile step without CUDA: what a GpuSite asks to compile is lowered to
    NVVM IR and PTX (as ``GpuRuntime.kernel`` does) and, where ptxas is installed, assembled for
    the architecture. Loading and launching are the GPU's (tests/gpu)."""

    def __init__(self, tmp_path, arch="sm_90"):
        self.arch, self.version, self.tmp, self.built = arch, VERSION, tmp_path, []

    def kernel(self, kernel, level):
        ptx = emit_ptx(lower_gpu(kernel, f"msvm_{kernel.name}"), self.arch, level)
        if PTXAS is not None:
            f = self.tmp / f"k{len(self.built)}.ptx"
            f.write_text(ptx)
            r = subprocess.run([PTXAS, f"-arch={self.arch}", str(f), "-o", os.devnull], capture_output=True, text=True)
            assert r.returncode == 0, r.stderr[:2000]
        self.built.append((kernel, level))
        return None, {"ptx": 0.0}


def site_inputs(net, *args):
    """(code, index, inputs) of every jit-able instruction one interpreted call of net runs."""
    found = []

    def hook(frame, pc):
        ins = frame.code.instrs[frame.index]
        if ins.op.name in gpu_tiers.JITABLE:
            n = ins.op.n_pops(frame.code.decode_args(ins))
            found.append((frame.code, frame.index, list(frame.stack[len(frame.stack) - n:])))

    ms.set_context(jit_config={"jit_level": "L1"})
    old = interpreter.set_trace(hook)
    try:
        net(*args)
    finally:
        interpreter.set_trace(old)
        ms.set_context(jit_config={"jit_level": "auto"})
    return found


@pytest.fixture(scope="module")
def bert_sites():
    rng = np.random.default_rng(5)
    with pytest.MonkeyPatch.context() as mp:      # the Code fusion makes for a GPU: fuse(cpu=False) keeps LAYER_NORM
        mp.setattr(fuse_module, "fuse_add_norm", lambda *a: None)
        return site_inputs(BertLayer(64, 4, 128), ms.Tensor(rng.standard_normal((2, 9, 64)).astype(np.float32)))


def test_every_site_of_the_bert_layer_decides_a_gpu_kernel(bert_sites, tmp_path):
    rt = PtxRuntime(tmp_path)
    kinds = set()
    for code, i, inputs in bert_sites:
        site = gpu_tiers.GpuSite(code, i, "sm_90", VERSION, rt)
        d2, d3 = site.decide(inputs, "L2"), site.decide(inputs, "L3")
        if site.op == "FUSED_ATTENTION":      # (issue 18: no GPU planner yet: its L1 kernel, CuPy's ops)
            assert d2 is None and d3 is None
            kinds.add((site.op, "l1"))
            continue
        assert d2 is not None, (site.name, [(x.shape, x.strides) for x in inputs])
        kinds.add((site.op, d2.kind))
        assert (d2.level, d3.level) == (2, 3)
        for d in (d2, d3):
            if d.kernel is None:
                assert site.op == "FUSED_MATMUL"          # cuBLAS alone: nothing to compile
                continue
            assert d.key == kernel_key(d.kernel, d.level, "sm_90", VERSION)
            if isinstance(d.kernel, Elementwise):
                assert (d.kernel.dims is None) == (d.level == 2)       # L2 shape-generic, L3 specialized
            else:
                assert isinstance(d.kernel, RowKernel) and (d.kernel.n is None) == (d.level == 2)
                assert d.kernel.n in (None, inputs[0].shape[-1])
            rt.kernel(d.kernel, d.level)
    assert {("FUSED_MATMUL", "matmul"), ("LAYER_NORM", "rows"), ("FUSED_ATTENTION", "l1")} <= kinds, kinds
    assert len(rt.built) >= 8


def test_cache_keys_are_keyed_by_gpu_architecture(bert_sites):
    code, i, inputs = next((c, i, x) for c, i, x in bert_sites if c.instrs[i].op.name == "LAYER_NORM")
    d = {arch: gpu_tiers.GpuSite(code, i, arch, VERSION).decide(inputs, "L3") for arch in ("sm_80", "sm_90")}
    assert d["sm_80"].kernel == d["sm_90"].kernel and d["sm_80"].key != d["sm_90"].key
    l2 = gpu_tiers.GpuSite(code, i, "sm_90", VERSION).decide(inputs, "L2")
    cpu = make_key(d["sm_90"].kernel.text(), 3, "cpu", VERSION, "x86_64")
    assert len({d["sm_80"].key, d["sm_90"].key, l2.key, cpu}) == 4


def test_auto_runs_l1_then_l2_then_l3_and_a_polymorphic_site_stays_on_l2(tmp_path):
    rng = np.random.default_rng(2)
    net = DynamicMatmulCell()
    (code, i, inputs), = site_inputs(net, ms.Tensor(rng.standard_normal((4, 8)).astype(np.float32)),
                                     ms.Tensor(rng.standard_normal((8, 3)).astype(np.float32)), True)
    assert code.instrs[i].op.name == "FUSED_MATMUL"
    rt = PtxRuntime(tmp_path)
    site = gpu_tiers.GpuSite(code, i, "sm_90", VERSION, rt)
    ref = []
    site.launch = lambda d, xs, out: pytest.fail("nothing is compiled yet: the reference runs")
    out = site(inputs, lambda *a: ref.append(a) or "reference")        # first call: L1, the L2 epilogue queued
    assert out == "reference" and len(ref) == 1
    tiers.wait_for_compiles(60)
    levels = [site.decide(inputs).level for _ in range(8)]
    assert levels[:3] == [2, 2, 2]
    tiers.wait_for_compiles(60)
    assert site.decide(inputs).level == 3                 # l3_after calls at one shape: its L3 kernel
    assert [lv for _k, lv in rt.built] == [2, 3]
    for n in (5, 6, 7, 9):                                 # more shapes than L3_SHAPES: polymorphic
        x = rng.standard_normal((n, 8)).astype(np.float32)
        for _ in range(6):
            d = site.decide([x, inputs[1]])
    assert site.polymorphic and d.level == 2
    tiers.wait_for_compiles(60)
    assert sum(1 for _k, lv in rt.built if lv == 3) <= tiers.L3_SHAPES


def test_what_stays_on_l1(tmp_path, rng):
    # (the BERT layer's softmax is inside its FUSED_ATTENTION now: a softmax of its own)
    sites = site_inputs(Fn(ops.softmax, -1), ms.Tensor(rng.standard_normal((2, 4, 9, 9)).astype(np.float32)))
    code, i, inputs = next((c, i, x) for c, i, x in sites if c.instrs[i].op.name == "SOFTMAX")
    site = gpu_tiers.GpuSite(code, i, "sm_90", VERSION, PtxRuntime(tmp_path))
    x = inputs[0]
    assert site.decide([x.astype(np.int32)], "L2") is None                     # not a float dtype
    assert site.decide([np.swapaxes(x, -1, -2)], "L2") is None                 # strided
    assert site.decide([x.astype(np.float64)], "L2") is not None
    # f64 softmax needs libdevice's exp: the compile fails, the site stays on the reference kernel
    ms.set_context(jit_config={"jit_level": "L2"})
    try:
        got = site([x.astype(np.float64)], lambda a: "reference")
    finally:
        ms.set_context(jit_config={"jit_level": "auto"})
    assert got == "reference" and site.stats["failures"] == 1
    with pytest.raises(Unsupported, match="libdevice"):
        lower_gpu(site.decide([x.astype(np.float64)], "L2").kernel, "k")


def test_conv_net_and_random_programs_sites_decide_kernels_ptxas_accepts(tmp_path, rng):
    """The CV ops stay interpreted (no GPU kernels for them yet); their fused tails and the head
    get kernels, and every kernel decided lowers to PTX ptxas accepts, for sm_80 too."""
    sites = site_inputs(SmallConvNet(), ms.Tensor(rng.standard_normal((2, 3, 16, 16)).astype(np.float32)))
    assert sites
    for arch in ("sm_80", "sm_90"):
        rt = PtxRuntime(tmp_path, arch)
        for code, i, inputs in sites:
            for level in ("L2", "L3"):
                d = gpu_tiers.GpuSite(code, i, arch, VERSION, rt).decide(inputs, level)
                if d is not None and d.kernel is not None:
                    rt.kernel(d.kernel, d.level)
        assert rt.built


def test_the_accelerator_follows_the_device():
    import foreign_device

    foreign_device.install()
    ms.set_context(device_target="CPU")
    assert executor.accelerator() is tiers.ACCELERATOR
    ms.set_context(device_target="FOREIGN")
    try:
        assert executor.accelerator() is None        # a device without compiled tiers: the interpreter runs all
    finally:
        ms.set_context(device_target="CPU")


class Records(logging.Handler):
    """The [MS] logger's records (it does not propagate to pytest's caplog)."""

    def __enter__(self):
        self.records = []
        logging.getLogger("msvm").addHandler(self)
        return self.records

    def __exit__(self, *exc):
        logging.getLogger("msvm").removeHandler(self)

    def emit(self, record):
        self.records.append(record.getMessage())


@pytest.mark.skipif(ms.context.gpu_problem() is None, reason="this machine has a usable GPU (tests/gpu covers it)")
def test_without_a_usable_gpu_the_cpu_runs_or_strict_raises(monkeypatch):
    problem = ms.context.gpu_problem()
    with Records() as records:
        ms.set_context(device_target="GPU")
    assert ms.get_context("device_target") == "CPU" and device.current() is device.CPU
    assert any("device_target='GPU' requested but" in r and problem in r for r in records), records
    monkeypatch.setenv("MSVM_STRICT_DEVICE", "1")
    with pytest.raises(RuntimeError, match=r"device_target='GPU': .*(CuPy|CUDA)"):
        ms.set_context(device_target="GPU")
    assert device.current() is device.CPU
    # a CUDA device whose kernels cannot run (here: no CuPy at all): warning and no accelerator,
    # or the strict error naming the problem
    from msvm.compiler.gpu import GpuRuntime

    dev = device.Device(7)
    dev.gpu_runtime = GpuRuntime         # (what accelerator_for makes for a CUDA device: the real runtime, which needs CuPy)
    monkeypatch.delenv("MSVM_STRICT_DEVICE")
    gpu_tiers._accels.clear()
    with Records() as records:
        assert gpu_tiers.accelerator_for(dev) is None
    assert any("msvm's GPU kernels cannot run" in r for r in records), records
    gpu_tiers._accels.clear()
    monkeypatch.setenv("MSVM_STRICT_DEVICE", "1")
    with pytest.raises(RuntimeError, match="GPU kernels cannot run: msvm GPU runtime: .*(CuPy|CUDA)"):
        gpu_tiers.accelerator_for(dev)
    gpu_tiers._accels.clear()
