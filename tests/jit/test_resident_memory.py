"""What the compiled tiers keep between calls (issue 18, peak memory): no activation, and no second
copy of a weight that buys nothing.

- A site remembers the data pointers of the arrays it sees (``Site.ptr``) only for arrays whose
  memory is held anyway (read-only weights, views of the memory plan's arena): before, every site
  kept its last input alive between calls (28 MB of ResNet-50's resident set at 224).
- x @ W.T by a fixed weight keeps a contiguous W.T for two rows or more (BLAS multiplies it faster
  there) but not for one row, where W.T's view is as fast (a classifier at batch 1: 8 MB for
  ResNet-50's fc). Both agree with numpy and L1."""

import gc
import weakref

import msvm as ms
import numpy as np
import pytest
from msvm import nn, ops
from msvm.compiler import tiers


class Head(nn.Cell):
    """A conv block, then a Dense on the pooled features: FUSED_CONV and FUSED_MATMUL sites."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, pad_mode="same", has_bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Dense(8, 5)

    def construct(self, x):
        y = ops.relu(self.bn(self.conv(x)))
        return self.fc(ops.ReduceMean()(y, (2, 3)))


def _sites(net):
    return [s for v in net._runner.variants.values() for b in [v.bound, *v.runs.values()]
            for c in b.code.all_codes() for s in c.jit_sites.values()]


def _reference(net, x):
    ms.set_context(jit_config={"jit_level": "L1"})
    try:
        return net(ms.Tensor(x)).asnumpy()
    finally:
        ms.set_context(jit_config={"jit_level": "auto"})


@pytest.mark.parametrize("tier", ["L2", "L3"])
def test_sites_do_not_keep_the_last_activation_alive(level, tier, rng):
    net = Head()
    net.set_train(False)
    xs = [rng.standard_normal((2, 3, 9, 9)).astype(np.float32) for _ in range(4)]
    want = [_reference(net, x) for x in xs]
    level(tier)
    for x in xs[:3]:
        net(ms.Tensor(x))
        tiers.wait_for_compiles(60)
    sites = _sites(net)
    assert {s.op for s in sites} >= {"FUSED_CONV", "FUSED_MATMUL"}
    t = ms.Tensor(xs[3].copy())          # (a Tensor of an array holds that array: this one is its only holder)
    alive = weakref.ref(t._data)
    got = net(t).asnumpy()
    np.testing.assert_allclose(got, want[3], rtol=1e-4, atol=1e-5)
    del t
    gc.collect()
    assert alive() is None, "a site kept the last input alive"
    for s in sites:          # what they remember: weights (read-only) and arena views
        for e in s.ptrs:
            assert e is None or not e[0].flags.writeable or e[0].base is not None, (s.op, e[0].shape)
    for x, w in zip(xs, want):                          # and the answers stay right
        np.testing.assert_allclose(net(ms.Tensor(x)).asnumpy(), w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("tier", ["L2", "L3"])
def test_one_row_by_a_fixed_weight_keeps_no_transposed_copy(level, tier, rng):
    net = nn.Dense(24, 7)
    x1 = rng.standard_normal((1, 24)).astype(np.float32)
    x4 = rng.standard_normal((4, 24)).astype(np.float32)
    w, b = net.weight.asnumpy(), net.bias.asnumpy()
    level(tier)
    for _ in range(3):
        got = net(ms.Tensor(x1)).asnumpy()
        tiers.wait_for_compiles(60)
    np.testing.assert_allclose(got, x1 @ w.T + b, rtol=1e-5, atol=1e-6)
    (site,) = [s for s in _sites(net) if s.weight_t]
    assert site.l2 or site.l3, "the product ran compiled"
    assert not site.wcache, "one row: no contiguous W.T kept"
    for _ in range(3):
        got = net(ms.Tensor(x4)).asnumpy()
        tiers.wait_for_compiles(60)
    np.testing.assert_allclose(got, x4 @ w.T + b, rtol=1e-5, atol=1e-6)
    (four,) = [s for s in _sites(net) if s.weight_t and s is not site]     # (a variant of its own: dim 0 is not 1)
    assert four.wcache or four.pcache, "four rows: the prepared weight is made"
    assert not site.wcache
    for e in four.wcache.values():
        assert not e[1].flags.writeable        # (a prepared weight is as fixed as its Parameter)
    np.testing.assert_allclose(net(ms.Tensor(x1)).asnumpy(), x1 @ w.T + b, rtol=1e-5, atol=1e-6)


def _llvm_code_kb() -> int:
    """Resident KB of libllvmlite's read-only mappings (its code and constants) that are the file's
    pages (Rss less Anonymous: the relocated read-only part is the process's own, and stays)."""
    total, cur = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if head and "-" in head[0] and not head[0].endswith(":") and len(head) >= 5:
                cur = head[1] in ("r-xp", "r--p") and len(head) > 5 and "libllvmlite" in head[5]
            elif cur and head and head[0] in ("Rss:", "Anonymous:"):
                total += int(head[1]) * (1 if head[0] == "Rss:" else -1)
    return total


@pytest.mark.skipif(not __import__("sys").platform.startswith("linux"), reason="smaps and madvise: Linux")
@pytest.mark.parametrize("where", ["caller", "worker"])
def test_the_idle_compiler_gives_its_code_back(where, monkeypatch, rng):
    """Once the compiler is idle (build.release_compiler_memory: after the worker's last queued task, or
    after LLVM compiled or linked on another thread, codegen.ON_USE), LLVM's code pages leave the
    resident set: a compile touched megabytes of them, and wait_for_compiles returns with none left. A
    compile after that faults them back and its function runs; with MSVM_RELEASE_COMPILER=0 they stay."""
    import ctypes

    from msvm.compiler import build
    from msvm.compiler.codegen import codegen

    monkeypatch.delenv(build.RELEASE_ENV, raising=False)
    build.wait_for_compiles(60)

    def compiled(k: int) -> int:
        name = f"msvm_test_release_{k}"
        ir = (f"define i64 @{name}(i64 %x) {{\nentry:\n  %y = mul i64 %x, {k}\n  %z = add i64 %y, 7\n"
              f"  ret i64 %z\n}}\n")
        out = {}

        def task():
            cg = codegen()
            out.update(cg.load(cg.compile(ir, 3)[0], [name]))
        if where == "worker":
            build.worker().submit(task)
        else:
            task()
        build.wait_for_compiles(60)
        assert ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)(out[name])(5) == 5 * k + 7
        return _llvm_code_kb()

    k = int(rng.integers(1000, 10**6))
    assert compiled(k) < 256
    assert compiled(k + 1) < 256                 # (faulted back in, then given back again)
    monkeypatch.setenv(build.RELEASE_ENV, "0")
    assert compiled(k + 2) > 1024
