"""The GPU device's compiled tiers end to end on the CPU (tests/emulated_gpu.py): GpuSite →
GpuRuntime (real PTX through llvmlite, the kernel cache keyed by architecture, planning and
argument marshalling) → a launch evaluated with numpy from the kernel's declared signature.
Also runs tests/gpu on that device with its compiled-tier assertions on."""

import os
import subprocess
import sys

import emulated_gpu
import msvm as ms
import numpy as np
import pytest
from bert_layer import BertLayer
from cells import DynamicMatmulCell
from msvm import device, executor
from msvm.compiler import gpu_tiers, tiers
from paths import ROOT

emulated_gpu.install()


@pytest.fixture
def emulated():
    ms.set_context(device_target="EMULATED", jit_config={"jit_level": "auto"})
    yield device.current()
    ms.set_context(device_target="CPU", jit_config={"jit_level": "auto"})


def test_the_bert_layer_reaches_l3_gpu_kernels(emulated, rng):
    x = rng.standard_normal((2, 9, 64)).astype(np.float32)
    ms.set_context(device_target="CPU")
    ref = BertLayer(64, 4, 128)
    params = {n: p.asnumpy().copy() for n, p in ref.parameters_dict().items()}
    want = ref(ms.Tensor(x)).asnumpy()
    ms.set_context(device_target="EMULATED")
    acc = executor.accelerator()
    assert isinstance(acc, gpu_tiers.GpuAccelerator) and acc.arch == "sm_90"
    net = BertLayer(64, 4, 128)
    for n, p in net.parameters_dict().items():
        p.set_data(params[n])
    xt = ms.Tensor(x)
    emulated_gpu.LAUNCHES.clear()
    first = net(xt)                               # L1 (the reference on device arrays); L2 compiles queued
    assert not emulated_gpu.LAUNCHES
    for _ in range(8):
        out = net(xt)
        tiers.wait_for_compiles(120)
    out = net(xt)
    launched = set(emulated_gpu.LAUNCHES)
    assert {("Elementwise", 2), ("Elementwise", 3), ("RowKernel", 2), ("RowKernel", 3)} <= launched, launched
    for r in (first, out):
        assert type(r._data) is emulated.array_type
        np.testing.assert_allclose(r.asnumpy(), want, rtol=2e-5, atol=2e-6)
    keys = set(acc.rt.mem)                       # every kernel loaded is keyed by sm_90
    assert keys and all(len(k) == 64 for k in keys)


def test_jit_level_l3_compiles_synchronously_and_l1_never(emulated, rng):
    x = rng.standard_normal((4, 8)).astype(np.float32)
    y = rng.standard_normal((8, 3)).astype(np.float32)
    want = np.maximum(x @ y, 0)
    for level, expect in (("L1", set()), ("L3", {("Elementwise", 3)})):
        ms.set_context(jit_config={"jit_level": level})
        emulated_gpu.LAUNCHES.clear()
        out = DynamicMatmulCell()(ms.Tensor(x), ms.Tensor(y), True)
        assert set(emulated_gpu.LAUNCHES) == expect
        np.testing.assert_allclose(out.asnumpy(), want, rtol=1e-5, atol=1e-6)


def test_gpu_tests_pass_on_the_emulated_gpu():
    env = dict(os.environ, MSVM_GPU_TEST_TARGET="EMULATED")
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "tests/gpu"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0 and " passed" in r.stdout and "skipped" not in r.stdout, r.stdout[-4000:] + r.stderr[-2000:]


def test_gpu_check_runs_on_the_emulated_gpu():
    """bench/gpu_check.py --dry-run: its sections 1, 3, 4, 5 on the emulated GPU (2 is section 1's
    kernel over 16M elements, slow to emulate; 6, ResNet-50, is section 5's Cell path with mindcv's
    model, slow on the CPU)."""
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "gpu_check.py"), "--dry-run", "--only", "1,3,4,5"],
                       cwd=ROOT, capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, PYTHONPATH=os.path.join(ROOT, "vm")))
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "all kernels and Cells match numpy (0 failures)" in r.stdout
    for k in (1, 3, 4, 5):
        assert f"(section {k}:" in r.stdout
    assert "MATMUL_BIAS_GELU float32 L3" in r.stdout and "auto" in r.stdout
