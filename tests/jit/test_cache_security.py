"""The kernel cache runs only objects this user's msvm wrote (needs LLVM).

Each test plants or damages something in a cache directory, then asks for one kernel
(``relu(x * 2)``) and checks that it computes the right answer, was compiled again, and
that the bad entry is gone. A planted object computes ``x * -3`` under the right symbol
name: loading it would give a wrong answer rather than a crash. Tests that need another
owner chown to uid 12345 and run only as root (as the CI does).
"""

import hashlib
import json
import logging
import os
import stat
import struct
import subprocess
import sys
import textwrap
import tracemalloc

import numpy as np
import pytest
from msvm import log
from msvm.bytecode.opcodes import ABI_VERSION
from msvm.compiler import tiers
from msvm.compiler.cache import KernelCache, make_key
from msvm.compiler.codegen import codegen
from msvm.compiler.kir import Elementwise
from msvm.compiler.lower import lower
from paths import ROOT

GOOD = Elementwise((("in", 0), ("c", 2.0), ("BROADCAST_MUL",), ("RELU",)), ("t",), ((True, True, False),), "float32")
EVIL = Elementwise((("in", 0), ("c", -3.0), ("BROADCAST_MUL",)), ("t",), ((True, True, False),), "float32")
KEY_FILE = ".msvm-key"
OTHER_UID = 12345
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")


@pytest.fixture(autouse=True)
def session_cache_after():
    yield
    tiers.reset_cache()


@pytest.fixture
def warnings():
    """The [MS] records logged at WARNING or above during the test."""
    records = []
    h = logging.Handler(logging.WARNING)
    h.emit = records.append
    log.logger.addHandler(h)
    yield records
    log.logger.removeHandler(h)


def _key() -> str:
    cg = codegen()
    return make_key(GOOD.text(), 2, "cpu", cg.version, cg.target_id)


def _abi(root) -> str:
    return os.path.join(str(root), f"abi-{ABI_VERSION}")


def _evil_object(key: str) -> bytes:
    """Object code for EVIL under GOOD's function name: linkable, and wrong."""
    cg = codegen()
    return cg.compile(lower(EVIL, f"msvm_{GOOD.name}_{key[:12]}", cg.features), 2)[0]


def _planted(key: str, obj: bytes, fmt: str) -> bytes:
    """An entry whose only check is a self-checksum: the format before this fix ("v1"), or today's
    layout with sha256 where the HMAC belongs ("v2")."""
    hb = json.dumps({"key": key, "name": f"msvm_{GOOD.name}_{key[:12]}", "level": 2, "kernel": GOOD.text(),
                     "created": 0}, sort_keys=True).encode()
    if fmt == "v1":
        body = b"MSVMKRN1" + struct.pack("<I", len(hb)) + hb + obj
    else:
        body = struct.pack("<8sIQ", b"MSVMKRN2", len(hb), len(obj)) + hb + obj
    return body + hashlib.sha256(body).digest()


def _write(path, data: bytes) -> None:
    os.makedirs(os.path.dirname(str(path)), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def _run(cache: KernelCache):
    """Compile GOOD through ``cache`` (the process-wide one) and check its answer."""
    assert tiers.kernel_cache() is cache
    k = tiers.compile_kernel(GOOD, 2, {"op": "t"})
    x = np.array([[-1.0, 2.0]], np.float32)
    out = np.empty_like(x)
    k.fn(0, 1, 1, 2, out.ctypes.data, x.ctypes.data, 0, 0)
    assert out.tolist() == [[0.0, 4.0]], "a planted kernel ran"
    return k


def _genuine(root) -> str:
    """A cache under ``root`` holding GOOD's entry as msvm writes it; returns the entry's path."""
    cache = tiers.reset_cache(_abi(root))
    _run(cache)
    assert cache.stats["compiles"] == 1
    return cache.path(_key())


def _rebuilt(path) -> KernelCache:
    """Ask again through a fresh cache: GOOD is compiled (not loaded) and its entry is now genuine."""
    cache = tiers.reset_cache(os.path.dirname(str(path)))
    _run(cache)
    assert cache.stats["compiles"] == 1 and cache.stats["disk_loads"] == 0
    st = os.lstat(path)
    assert stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o022
    again = KernelCache(os.path.dirname(str(path)))
    assert again.read(_key()) is not None and again.stats["corrupt"] == 0
    return cache


# ---------------------------------------------------------------- the directories

def test_world_writable_root_and_abi_folder_are_made_private(tmp_path):
    root = tmp_path / "kernels"
    path = os.path.join(_abi(root), f"{_key()}.o")
    _write(path, _planted(_key(), _evil_object(_key()), "v1"))
    os.chmod(_abi(root), 0o777)
    os.chmod(root, 0o777)
    cache = _rebuilt(path)
    assert stat.S_IMODE(os.stat(root).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(_abi(root)).st_mode) == 0o700
    assert cache.stats["corrupt"] == 1


@as_root
@pytest.mark.parametrize("which", ["root", "abi"])
def test_a_directory_owned_by_another_user_is_not_used(tmp_path, which, warnings):
    root = tmp_path / "kernels"
    path = os.path.join(_abi(root), f"{_key()}.o")
    planted = _planted(_key(), _evil_object(_key()), "v1")
    _write(path, planted)
    os.chmod(_abi(root), 0o755)
    os.chown(root if which == "root" else _abi(root), OTHER_UID, -1)
    cache = tiers.reset_cache(_abi(root))
    _run(cache)
    cache.write(_key(), b"x", {})                                  # later looks: still memory only, no warning
    assert cache.read(_key()) is None
    assert cache.stats["compiles"] == 1 and cache.stats["disk_loads"] == 0
    assert f"uid {OTHER_UID}" in (cache.refused or "")
    assert open(path, "rb").read() == planted                     # not ours: left alone, never linked
    assert sorted(os.listdir(_abi(root))) == [os.path.basename(path)]
    assert len([r for r in warnings if "not using" in r.getMessage()]) == 1


@pytest.mark.parametrize("which", ["root", "abi"])
def test_a_symlinked_directory_is_not_used(tmp_path, which, warnings):
    real = tmp_path / "elsewhere"
    planted = _planted(_key(), _evil_object(_key()), "v1")
    root = tmp_path / "kernels"
    if which == "root":
        _write(os.path.join(_abi(real), f"{_key()}.o"), planted)
        os.symlink(real, root)
    else:
        _write(os.path.join(real, f"{_key()}.o"), planted)
        os.makedirs(root)
        os.symlink(real, _abi(root))
    cache = tiers.reset_cache(_abi(root))
    _run(cache)
    assert cache.stats["compiles"] == 1 and cache.refused and "symbolic link" in cache.refused
    assert len([r for r in warnings if "not using" in r.getMessage()]) == 1
    left = [os.path.join(d, n) for d, _, names in os.walk(real) for n in names]
    assert len(left) == 1 and open(left[0], "rb").read() == planted


def test_cli_reports_a_refused_directory(tmp_path):
    real = tmp_path / "elsewhere"
    _write(os.path.join(_abi(real), "0" * 64 + ".o"), b"x")
    os.symlink(real, tmp_path / "kernels")
    env = dict(os.environ, MSVM_CACHE_DIR=str(tmp_path / "kernels"))
    for action in ("stats", "clear"):
        r = subprocess.run([sys.executable, "-m", "msvm", "cache", action], capture_output=True, text=True,
                           env=env, timeout=60)
        assert r.returncode == 0, r.stderr
        assert "symbolic link" in r.stdout and "[MS]" in r.stderr
    assert os.listdir(_abi(real)) == ["0" * 64 + ".o"]


# ---------------------------------------------------------------- the entries

@pytest.mark.parametrize("how", ["planted v1", "planted v2", "changed object", "symlink", "group-writable",
                                 "other owner"])
def test_an_entry_not_written_by_this_users_msvm_is_discarded_and_rebuilt(tmp_path, how):
    if how == "other owner" and os.geteuid() != 0:
        pytest.skip("chown to another uid needs root")
    key = _key()
    path = _genuine(tmp_path / "kernels")
    evil = _evil_object(key)
    target = None
    if how.startswith("planted"):
        _write(path, _planted(key, evil, how[-2:]))
    elif how == "changed object":
        # the object bytes replaced and every checksum the file has recomputed over them
        data = open(path, "rb").read()
        if data.startswith(b"MSVMKRN1"):
            _write(path, _planted(key, evil, "v1"))
        else:
            _, hl, ol = struct.unpack_from("<8sIQ", data)
            hb = data[20:20 + hl]
            body = struct.pack("<8sIQ", b"MSVMKRN2", hl, len(evil)) + hb + evil
            _write(path, body + hashlib.sha256(body).digest())
    elif how == "symlink":
        target = tmp_path / "planted.o"
        _write(target, _planted(key, evil, "v1"))
        os.unlink(path)
        os.symlink(target, path)
    elif how == "group-writable":
        os.chmod(path, 0o666)
    else:
        os.chown(path, OTHER_UID, -1)
    cache = _rebuilt(path)
    assert cache.stats["corrupt"] == 1
    if target is not None:
        assert open(target, "rb").read() == _planted(key, evil, "v1")      # the link's target is not touched


FIFO_SCRIPT = textwrap.dedent("""
    import os, stat, sys
    import numpy as np
    from msvm.compiler import tiers
    from msvm.compiler.cache import make_key
    from msvm.compiler.codegen import codegen
    from msvm.compiler.kir import Elementwise
    e = Elementwise((("in", 0), ("c", 2.0), ("BROADCAST_MUL",), ("RELU",)), ("t",), ((True, True, False),),
                    "float32")
    cache = tiers.reset_cache(sys.argv[1])
    cg = codegen()
    key = make_key(e.text(), 2, "cpu", cg.version, cg.target_id)
    os.makedirs(sys.argv[1], exist_ok=True)
    os.mkfifo(cache.path(key))
    k = tiers.compile_kernel(e, 2, {"op": "t"})
    x = np.array([[-1.0, 2.0]], np.float32)
    out = np.empty_like(x)
    k.fn(0, 1, 1, 2, out.ctypes.data, x.ctypes.data, 0, 0)
    print(out.tolist(), cache.stats["compiles"], stat.S_ISREG(os.lstat(cache.path(key)).st_mode))
""")


def test_a_fifo_named_like_an_entry_does_not_hang(tmp_path):
    r = subprocess.run([sys.executable, "-c", FIFO_SCRIPT, _abi(tmp_path / "kernels")], capture_output=True,
                       text=True, cwd=ROOT, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("]]")[1].split() == ["1", "True"] and r.stdout.startswith("[[0.0, 4.0]]")


@pytest.mark.parametrize("how", ["sparse 400 MB", "declares 400 MB"])
def test_a_huge_entry_is_rejected_without_reading_it(tmp_path, how):
    key = _key()
    path = _genuine(tmp_path / "kernels")
    big = 400 << 20
    with open(path, "wb") as f:
        f.write(struct.pack("<8sIQ", b"MSVMKRN2", 2, big - 20 - 2 - 32) + b"{}")
        if how.startswith("sparse"):
            f.truncate(big)
    cache = tiers.reset_cache(os.path.dirname(path))
    tracemalloc.start()
    try:
        assert cache.read(key) is None
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, f"{peak} bytes allocated reading a rejected entry"
    assert not os.path.exists(path) and cache.stats["corrupt"] == 1
    _rebuilt(path)


BAD_OBJECT_SCRIPT = textwrap.dedent("""
    import numpy as np, msvm as ms
    from msvm import ops
    ms.set_context(jit_config={"jit_level": "L2"})
    @ms.jit
    def f(x, y):
        return ops.relu(x * 2.0 + y) * 0.5
    x = ms.Tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
    assert np.allclose(f(x, x).asnumpy(), np.maximum(x.asnumpy() * 3, 0) * 0.5)
    s = ms.cache_stats()
    print(s["compiles"], s["disk_loads"], s["failures"])
""")


@pytest.mark.parametrize("bad", ["not an object", "wrong symbols"])
def test_an_entry_whose_object_does_not_load_is_rebuilt_for_later_processes(tmp_path, bad):
    root = tmp_path / "kernels"
    env = dict(os.environ, MSVM_CACHE_DIR=str(root), MSVM_LOG="INFO")
    script = tmp_path / "bad_object.py"
    script.write_text(BAD_OBJECT_SCRIPT)

    def run():
        r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, cwd=ROOT,
                           timeout=120)
        assert r.returncode == 0, r.stderr
        return r.stdout.split(), r.stderr

    assert run()[0] == ["1", "0", "0"]
    cache = KernelCache(_abi(root))
    (name,) = cache.disk_entries()
    key = name[:-2]
    _, header = cache.read(key)
    obj = b"\x7fELF not really" * 8 if bad == "not an object" else \
        codegen().compile("define void @msvm_not_this_kernel() {\n  ret void\n}\n", 2)[0]
    cache.write(key, obj, header)                         # authentic (this user's msvm wrote it), unusable
    assert cache.read(key)[0] == obj
    counts, err = run()
    assert counts == ["1", "0", "0"], err                  # discarded, compiled again, not stuck on L1
    assert "entry discarded: object does not load" in err
    assert run()[0] == ["0", "1", "0"]                    # and the next process loads the rebuilt entry
    assert KernelCache(_abi(root)).read(key)[0] != obj


# ---------------------------------------------------------------- the key

@pytest.mark.parametrize("how", ["attacker key, mode 0666", "attacker key, other owner", "symlink to attacker key",
                                 "fifo", "short", "changed bytes"])
def test_a_tampered_key_file_is_not_trusted(tmp_path, how, warnings):
    if how == "attacker key, other owner" and os.geteuid() != 0:
        pytest.skip("chown to another uid needs root")
    import hmac
    root = tmp_path / "kernels"
    path = _genuine(root)
    key_path = os.path.join(root, KEY_FILE)
    st = os.stat(key_path)
    assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == os.geteuid() and st.st_size == 32
    attacker = b"A" * 32
    os.unlink(key_path)
    if how == "symlink to attacker key":
        _write(tmp_path / "their-key", attacker)
        os.symlink(tmp_path / "their-key", key_path)
    elif how == "fifo":
        os.mkfifo(key_path)
    elif how == "short":
        _write(key_path, attacker[:31])
        os.chmod(key_path, 0o600)
    else:
        _write(key_path, attacker if how != "changed bytes" else os.urandom(32))
        os.chmod(key_path, 0o666 if "0666" in how else 0o600)
        if "other owner" in how:
            os.chown(key_path, OTHER_UID, -1)
    if how.startswith(("attacker", "symlink")):
        # an entry signed with the key the attacker planted
        body = _planted(_key(), _evil_object(_key()), "v2")[:-32]
        _write(path, body + hmac.new(attacker, _key().encode() + b"\0" + body, hashlib.sha256).digest())
    _rebuilt(path)
    st = os.lstat(key_path)
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == os.geteuid()
    assert open(key_path, "rb").read() != attacker
    if how == "symlink to attacker key":
        assert open(tmp_path / "their-key", "rb").read() == attacker
    refused = [r for r in warnings if "key file" in r.getMessage()]
    assert len(refused) == (0 if how == "changed bytes" else 1)


def _fake_gpu_runtime(directory):
    """A GpuRuntime over a stand-in for CuPy whose Module.load rejects PTX that is not PTX (no GPU needed)."""
    import threading
    from types import SimpleNamespace

    from msvm.compiler import gpu

    class Module:
        def load(self, ptx):
            if not ptx.lstrip().startswith(b"//"):
                raise RuntimeError("CUDA_ERROR_INVALID_PTX")

        def get_function(self, name):
            return name

    rt = object.__new__(gpu.GpuRuntime)
    rt.cp = SimpleNamespace(cuda=SimpleNamespace(function=SimpleNamespace(Module=Module)))
    rt.arch, rt.device, rt.version = "sm_90", "cuda:sm_90", "llvmlite-test"
    rt.cache, rt.mem, rt.plans, rt.modules, rt.lock = KernelCache(directory), {}, {}, [], threading.Lock()
    return rt


def test_a_ptx_entry_that_does_not_load_is_rebuilt(tmp_path):
    first = _fake_gpu_runtime(str(tmp_path))
    gk, steps = first.kernel(GOOD, 2)
    assert "ptx" in steps
    _, header = first.cache.read(gk.key)
    first.cache.write(gk.key, b"not ptx", header)
    again = _fake_gpu_runtime(str(tmp_path))
    gk2, steps = again.kernel(GOOD, 2)
    assert "ptx" in steps and gk2.fn == gk.fn and again.cache.stats["corrupt"] == 1
    assert _fake_gpu_runtime(str(tmp_path)).cache.read(gk.key)[0].lstrip().startswith(b"//")
