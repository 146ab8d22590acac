"""Fixtures shared by every Python test suite: paths, a seeded rng, a private kernel cache."""

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# compile budgets are about latency, which bench/ measures: on a loaded machine a compile past its
# budget would leave a site on L1 and change what a test sees (this process and its subprocesses)
os.environ.setdefault("MSVM_COMPILE_BUDGET_SCALE", "20")
from mindspore_alias import mindcv  # noqa: E402, F401 - the fixture (mindcv under the alias, per module)
from paths import EXAMPLES  # noqa: E402

if EXAMPLES not in sys.path:
    sys.path.insert(0, EXAMPLES)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture(autouse=True, scope="session")
def private_kernel_cache(tmp_path_factory):
    """Tests never touch the user's ~/.cache: kernels and stored weights go to fresh directories."""
    d = tmp_path_factory.mktemp("kernels")
    os.environ["MSVM_CACHE_DIR"] = str(d)
    os.environ["MSVM_WEIGHT_STORE"] = str(tmp_path_factory.mktemp("weights") / "store")   # (msvm/weights.py)
    from msvm.compiler import tiers

    tiers.reset_cache()
    yield d


@pytest.fixture(autouse=True, scope="session")
def suite_device():
    """``MSVM_TEST_DEVICE=FOREIGN`` runs a suite on the foreign CPU-side device
    (tests/foreign_device.py: arrays that refuse every implicit conversion to host numpy), as
    tests/vm/test_device.py does for the op and model tests; ``GPU`` runs it on the GPU (tests/gpu)."""
    target = os.environ.get("MSVM_TEST_DEVICE")
    if not target or target == "CPU":
        yield None
        return
    import msvm as ms

    if target == "FOREIGN":
        import foreign_device

        foreign_device.install()
    elif target == "EMULATED":
        import emulated_gpu

        emulated_gpu.install()
    ms.set_context(device_target=target)
    yield target
    ms.set_context(device_target="CPU")
    record = os.environ.get("MSVM_TEST_DISPATCHED")
    if record and target in ("FOREIGN", "EMULATED"):       # what the kernels dispatched there (test_device checks it)
        import foreign_device

        with open(record, "w") as f:
            f.write("".join(f"{m} {n}\n" for m, n in sorted(foreign_device.DISPATCHED)))
