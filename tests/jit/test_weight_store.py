"""The weight store (msvm/weights.py, issue 18: peak memory): a Parameter's large arrays are mapped
from private unlinked files, and a weight the compiler has prepared (packed, transposed) is spilled:
its pages leave the process while every read of the Parameter still gives its values."""

import gc
import os
import stat
import subprocess
import sys

import msvm as ms
import numpy as np
import pytest
from msvm import nn, weights
from msvm.compiler import tiers

BIG = (640, 512)          # float32: 1.25 MiB, over weights.STORE_MIN


def test_a_large_array_is_stored_read_only_and_equal(rng):
    a = rng.standard_normal(BIG).astype(np.float32)
    s = weights.store(a)
    assert weights.stored(s) and s.flags.c_contiguous and not s.flags.writeable
    assert s.dtype == a.dtype and s.shape == a.shape and np.array_equal(s, a)
    assert not np.shares_memory(s, a)
    with pytest.raises(ValueError):
        s.flags.writeable = True         # (mapped PROT_READ: not even the flag can be turned back)
    small = weights.store(a[:10])
    assert not weights.stored(small) and small.flags.owndata and not small.flags.writeable
    assert np.array_equal(small, a[:10])
    odd = weights.store(np.asfortranarray(rng.standard_normal(BIG)))   # (float64, Fortran order)
    assert weights.stored(odd) and odd.flags.c_contiguous and odd.dtype == np.float64


def test_the_store_directory_is_private_and_holds_no_named_file(rng):
    d = weights.directory()
    assert d is not None
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    before = set(os.listdir(d))
    keep = weights.store(rng.standard_normal(BIG).astype(np.float32))
    assert set(os.listdir(d)) == before and weights.stored(keep)


def test_spill_lets_the_pages_go_and_a_read_brings_the_values_back(rng):
    a = rng.standard_normal((1024, 1024)).astype(np.float32)
    s = weights.store(a)
    float(s.sum())                                   # (read: every page mapped)
    assert weights.resident(s) >= s.nbytes - 8192
    assert weights.spill(s) >= s.nbytes - 8192
    assert weights.resident(s) < 64 * 1024
    assert np.array_equal(s, a)                      # the values come back from the file
    assert weights.resident(s) >= s.nbytes - 8192
    assert weights.spill(a) == 0 and weights.spill(s[::2]) == 0 and weights.spill(s[:10]) == 0  # (not stored; views)
    assert weights.stored(s) and not weights.stored(s[:10]) and not weights.stored(s.reshape(-1))
    assert np.array_equal(a, a.copy())


@pytest.mark.skipif(os.environ.get("MSVM_TEST_DEVICE") not in (None, "", "CPU"),
                    reason="a Parameter on another device keeps that device's array")
def test_a_parameter_is_stored_and_set_data_stores_the_new_array(rng):
    w = rng.standard_normal(BIG).astype(np.float32)
    p = ms.Parameter(ms.Tensor(w), name="w")
    assert weights.stored(p._data) and np.array_equal(p.asnumpy(), w)
    w2 = rng.standard_normal(BIG).astype(np.float32)
    old = p._data
    p.set_data(ms.Tensor(w2))
    assert p._data is not old and weights.stored(p._data) and np.array_equal(p.asnumpy(), w2)
    assert not weights.stored(ms.Parameter(ms.Tensor(w[:4]), name="s")._data)


def test_a_freed_stored_array_releases_its_file(rng):
    def mapped():
        with open("/proc/self/maps") as f:
            return sum(1 for line in f if "(deleted)" in line and weights.directory() in line)
    n = mapped()
    s = weights.store(rng.standard_normal(BIG).astype(np.float32))
    assert mapped() == n + 1
    del s
    gc.collect()
    assert mapped() == n


class Wide(nn.Cell):
    """Two Dense layers whose weights are stored (x @ W.T: packed, or transposed for many rows)."""

    def __init__(self):
        super().__init__()
        self.a = nn.Dense(512, 640)
        self.b = nn.Dense(640, 512, activation="relu")

    def construct(self, x):
        return self.b(self.a(x))


def _ref(net, vals, x):
    """numpy's answer from copies of the weights (reading the Parameters would map their pages back)."""
    h = x.astype(np.float64) @ vals[0].T + net.a.bias.asnumpy()
    return np.maximum(h @ vals[1].T + net.b.bias.asnumpy(), 0)


@pytest.mark.parametrize("tier", ["L2", "L3", "auto"])
def test_a_prepared_weight_is_spilled_and_still_reads_as_itself(level, tier, rng):
    net = Wide()
    ws = [net.a.weight._data, net.b.weight._data]
    vals = [w.copy() for w in ws]
    assert all(weights.stored(w) for w in ws)
    level(tier)
    x = rng.standard_normal((2, 9, 512)).astype(np.float32)
    for _ in range(4):
        out = net(ms.Tensor(x)).asnumpy()
        tiers.wait_for_compiles(60)
    np.testing.assert_allclose(out, _ref(net, vals, x), rtol=1e-4, atol=1e-4)
    assert all(weights.resident(w) < w.nbytes // 4 for w in ws), "a packed weight's own pages stayed"
    for _ in range(3):       # replayed calls read the panels, never the spilled pages
        out = net(ms.Tensor(x)).asnumpy()
    assert all(weights.resident(w) < w.nbytes // 4 for w in ws)
    # every other read of the Parameter gives its values: the interpreter at L1, another shape, asnumpy
    level("L1")
    y = rng.standard_normal((1, 300, 512)).astype(np.float32)
    np.testing.assert_allclose(net(ms.Tensor(y)).asnumpy(), _ref(net, vals, y), rtol=1e-4, atol=1e-4)
    level(tier)
    for _ in range(2):
        np.testing.assert_allclose(net(ms.Tensor(y)).asnumpy(), _ref(net, vals, y), rtol=1e-4, atol=1e-4)
        tiers.wait_for_compiles(60)
    assert all(np.array_equal(w, v) for w, v in zip(ws, vals))


def test_one_row_after_a_packed_call_keeps_the_weight_spilled(level, rng):
    """A decoder's steps: a prompt of many rows packs the weights, then calls of one row multiply the
    same panels (not W itself, whose pages would come back for good)."""
    net = Wide()
    ws = [net.a.weight._data, net.b.weight._data]
    vals = [w.copy() for w in ws]
    level("auto")
    x = rng.standard_normal((1, 12, 512)).astype(np.float32)
    for _ in range(3):
        net(ms.Tensor(x))
        tiers.wait_for_compiles(60)
    assert all(weights.resident(w) < w.nbytes // 4 for w in ws)
    for _ in range(6):
        y = rng.standard_normal((1, 1, 512)).astype(np.float32)
        np.testing.assert_allclose(net(ms.Tensor(y)).asnumpy(), _ref(net, vals, y), rtol=1e-4, atol=1e-4)
        tiers.wait_for_compiles(60)
    assert all(weights.resident(w) < w.nbytes // 4 for w in ws), "one row read the weight itself"
    # one packed copy per weight, however many Codes multiply it (here a variant per input shape)
    packs = {}
    for v in net._runner.variants.values():
        for c in v.code.all_codes():
            for site in c.jit_sites.values():
                for w, bp in site.pcache.values():
                    packs.setdefault(id(w), set()).add(id(bp))
    assert set(packs) == {id(w) for w in ws} and all(len(p) == 1 for p in packs.values())


@pytest.mark.parametrize("tier", ["L3", "auto"])
def test_one_row_by_a_stored_weight_runs_packed_and_spills_it(level, tier, rng):
    """A classifier at batch 1 (MobileNet's 1280 -> 1000): the stored weight is packed at the first
    compile (BLAS's sgemm of one row ran 4.6x slower), its own pages leave, and every answer is
    numpy's, with NaN and inf in the row."""
    net = nn.Dense(512, 640)
    w, b = net.weight._data, net.bias.asnumpy()
    assert weights.stored(w)
    vals = w.copy()
    level(tier)
    for i in range(12):
        x = rng.standard_normal((1, 512)).astype(np.float32)
        if i == 11:
            x[0, 5], x[0, 9] = np.nan, np.inf
        got = net(ms.Tensor(x)).asnumpy()
        tiers.wait_for_compiles(60)
        with np.errstate(invalid="ignore"):
            np.testing.assert_allclose(got, x @ vals.T + b, rtol=1e-4, atol=1e-4)
    (site,) = [s for v in net._runner.variants.values() for c in v.code.all_codes()
               for s in c.jit_sites.values() if s.weight_t]
    assert site.l3 and site.pcache and not site.wcache, "one row by a stored weight: packed, no W.T copy"
    assert weights.resident(w) < w.nbytes // 4, "the packed weight's own pages stayed"
    assert np.array_equal(w, vals)


class Sliced(nn.Cell):
    """A fused weight split in construct: its row views are new arrays at every call."""

    def __init__(self, d):
        super().__init__()
        rng = np.random.default_rng(3)
        self.d = d
        self.w = ms.Parameter(ms.Tensor(rng.standard_normal((3 * d, d)).astype(np.float32)), name="qkv")
        self.mm = ms.ops.MatMul(transpose_b=True)

    def construct(self, x):
        d = self.d
        return (self.mm(x, self.w[0:d]) + 1.0) + (self.mm(x, self.w[d:2 * d]) + 1.0)


def test_a_view_of_a_stored_weight_is_not_prepared_per_call(level, rng):
    """A slice of a weight is a new array at every call: the sites must not take it for a fixed
    weight (packed, spilled and kept per call: 1.8 GB after 300 calls before this was checked)."""
    net = Sliced(768)
    level("auto")
    x = rng.standard_normal((16, 768)).astype(np.float32)
    w = net.w.asnumpy()
    want = (x @ w[:768].T + 1.0) + (x @ w[768:1536].T + 1.0)
    spilled = weights.stats["spilled"]
    for _ in range(12):
        out = net(ms.Tensor(x)).asnumpy()
        tiers.wait_for_compiles(60)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)
    sites = [s for v in net._runner.variants.values() for c in v.code.all_codes() for s in c.jit_sites.values()]
    assert not any(s.pcache or s.wcache for s in sites)
    assert weights.stats["spilled"] == spilled


def _child(env_value, tmp_path):
    code = ("import numpy as np, msvm as ms; from msvm import weights; "
            "p = ms.Parameter(ms.Tensor(np.ones((640, 512), np.float32)), name='w'); "
            "print(weights.stored(p._data), weights.directory())")
    env = dict(os.environ, MSVM_WEIGHT_STORE=env_value, XDG_CACHE_HOME=str(tmp_path))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


def test_the_store_is_off_when_asked_or_on_a_memory_filesystem(tmp_path):
    assert _child("off", tmp_path) == ["False", "None"]
    assert _child("false", tmp_path) == ["False", "None"]
    mine = tmp_path / "store"
    assert _child(str(mine), tmp_path) == ["True", str(mine)]
    assert stat.S_IMODE(os.stat(mine).st_mode) == 0o700
    assert _child("on", tmp_path) == ["True", str(tmp_path / "msvm" / "weights")]
    assert _child("relative/dir", tmp_path) == ["False", "None"]       # (never a directory in the cwd)
    assert not os.path.exists("relative")
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    assert _child(str(shared), tmp_path) == ["False", "None"]            # (left as it was: not chmod'ed)
    assert stat.S_IMODE(os.stat(shared).st_mode) == 0o1777
    if weights._fs_type("/dev/shm") in weights.MEMORY_FS:
        assert _child("/dev/shm/msvm-test-store", tmp_path) == ["False", "None"]


def test_a_gather_maps_the_rows_it_reads_not_the_table(rng):
    """An embedding table read by rows (a gather of a few tokens) maps little more than those rows:
    the store writes in WRITE_BYTES pieces, so the page cache does not hand back 2 MB at a fault."""
    src = rng.standard_normal((8192, 512)).astype(np.float32)                  # 16 MB
    table = weights.store(src)
    weights.spill(table)
    ids = rng.integers(0, 8192, 8)
    assert np.array_equal(table[ids], src[ids])
    assert weights.resident(table) <= 8 * 4 * weights.WRITE_BYTES + (1 << 20), weights.resident(table)
