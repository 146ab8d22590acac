"""tests/gpu: msvm on a real NVIDIA GPU (issue 19, item 4). Every test here runs with
``device_target="GPU"`` and is skipped, with the CUDA problem as the reason, where there is no
usable GPU. ``tests/gpu/run.sh`` runs them and bench/gpu_check.py in one command.

``MSVM_GPU_TEST_TARGET=FOREIGN`` runs the same tests on the foreign CPU-side device
(tests/foreign_device.py), which has no compiled tiers, and ``EMULATED`` on that device with the
GPU's compiled tiers whose launches are evaluated on the CPU (tests/emulated_gpu.py): both check
the tests and the GPU path's Python on a machine without a GPU (tests/jit/test_gpu_emulated.py
runs them so); only ``GPU`` checks CUDA, the PTX's results and streams."""

import os

import pytest

TARGET = os.environ.get("MSVM_GPU_TEST_TARGET", "GPU")


def pytest_configure(config):
    config.addinivalue_line("markers", "optests: tests/vm's op tests run whole on the device (run.sh's last step)")


def pytest_collection_modifyitems(config, items):
    if TARGET != "GPU":
        return
    from msvm.context import gpu_problem

    problem = gpu_problem()
    if problem is None:
        return
    skip = pytest.mark.skip(reason=f"no usable GPU: {problem}")
    for item in items:
        if "tests/gpu/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def on_the_gpu(monkeypatch):
    """Each test runs on the GPU device (strict: no silent fallback to the CPU), then back on the CPU."""
    import msvm as ms
    from msvm import device

    if TARGET == "FOREIGN":
        import foreign_device

        foreign_device.install()
    elif TARGET == "EMULATED":
        import emulated_gpu

        emulated_gpu.install()
    monkeypatch.setenv("MSVM_STRICT_DEVICE", "1")
    ms.set_context(device_target=TARGET, jit_config={"jit_level": "auto"})
    yield device.current()
    ms.set_context(device_target="CPU", jit_config={"jit_level": "auto"})
