"""Every compile and every miss says why (msvm/reasons.py): for a constructed case of each kind,
the reason is in the ``[MS]`` log, in the profile (``Profiler.report()``, what ``msvm profile``
writes) and in the kernel cache's recent keys (what the status bar's list shows), and it names
the input, the dims or dtypes from what to what. The seven steps time what README says."""

import html
import logging
import os

import msvm as ms
import numpy as np
import pytest
from msvm import log, nn, ops
from msvm.compiler import build, tiers
from msvm.compiler.codegen import codegen
from msvm.profile import Profiler, render_html

F32 = np.float32


class Chain(nn.Cell):
    def construct(self, x, y):
        return ops.relu(x * y + 1.0)


class Transposed(nn.Cell):
    def construct(self, x, y):
        return ops.relu(ops.transpose(x, (1, 0)) * y + 1.0)


class Weighted(nn.Cell):
    def __init__(self):
        super().__init__()
        self.w = ms.Parameter(ms.Tensor(np.ones((8, 4), F32)), name="w")

    def construct(self, x):
        return ops.relu(ops.matmul(x, self.w) + 1.0)


class TwoLayers(Weighted):
    def __init__(self):
        super().__init__()
        self.w2 = ms.Parameter(ms.Tensor(np.ones((4, 3), F32)), name="w2")

    def construct(self, x):
        return ops.matmul(ops.relu(ops.matmul(x, self.w) + 1.0), self.w2) * 2.0


class Flagged(nn.Cell):
    def construct(self, x, training=True):
        y = x * 2.0
        if training:
            y = ops.relu(y)
        return y


def t(*shape, dtype=F32):
    return ms.Tensor(np.ones(shape, dtype))


class Seen:
    """The log records, the profile and the recent keys of what runs inside it."""

    def __init__(self, cache_dir):
        self.cache_dir = str(cache_dir)
        self.records: list = []

    def __enter__(self):
        self.cache = tiers.reset_cache(self.cache_dir)
        self.prof = Profiler("test").start(exec_times=False)
        self.handler = logging.Handler(logging.DEBUG)
        self.handler.emit = lambda r: self.records.append(r.getMessage())
        self.level = log.logger.level
        log.logger.addHandler(self.handler)
        log.logger.setLevel(logging.DEBUG)
        return self

    def __exit__(self, *exc):
        tiers.wait_for_compiles(60)
        log.logger.removeHandler(self.handler)
        log.logger.setLevel(self.level)
        self.prof.stop()
        self.report = self.prof.report()

    def compiles(self, kind):
        return [c for c in self.report["compiles"] if c.get("reason_kind") == kind]

    def recent(self, kind):
        return [r for r in self.cache.snapshot()["recent"] if r.get("reason_kind") == kind]

    def logged(self, *words):
        return [m for m in self.records if all(w in m for w in words)]

    def variants(self, kind):
        return [v for c in self.report["codes"] for v in c["variants"] if v["reason_kind"] == kind]


@pytest.fixture(autouse=True)
def session_cache_after():
    yield
    tiers.wait_for_compiles(60)
    tiers.reset_cache()


def everywhere(seen, kind, *words):
    """The reason of this kind, with these words, in the compiles of the profile, the recent keys
    and the log; returns the profile's compile record."""
    comp = [c for c in seen.compiles(kind) if all(w in c["reason"] for w in words)]
    assert comp, (kind, words, [(c.get("reason_kind"), c.get("reason")) for c in seen.report["compiles"]])
    assert [r for r in seen.recent(kind) if all(w in r["reason"] for w in words)], seen.cache.snapshot()["recent"]
    assert seen.logged(*words), seen.records
    page = render_html(seen.report)             # (what ``msvm profile --html`` writes)
    assert all(html.escape(w) in page for w in words)
    return comp[0]


def test_cold_cache(level, tmp_path):
    level("L2")
    with Seen(tmp_path / "k") as seen:
        Chain()(t(4, 8), t(4, 8))
    c = everywhere(seen, "cold", "first kernel of this site at L2", "compiled: cold cache (not in memory, not on disk)")
    assert c["source"] == "compiled" and "Chain.construct+0x" in c["reason"] and "test_reasons.py" in c["reason"]
    assert seen.variants("cold") and "first call" in seen.variants("cold")[0]["reason"]
    assert seen.logged("Compiled Chain.construct", "cold")


def test_new_shape_class_within_one_bytecode(level, tmp_path):
    """Declared dims (set_inputs None) stay symbols: one bytecode, and a size-1 dim is a new
    broadcast class at the kernel, not a new variant."""
    level("L2")
    net = Chain()
    net.set_inputs(ms.Tensor(shape=[None, None], dtype=ms.float32), ms.Tensor(shape=[None, None], dtype=ms.float32))
    with Seen(tmp_path / "k") as seen:
        net(t(4, 8), t(4, 8))
        net(t(4, 8), t(1, 8))
    everywhere(seen, "new_shape_class", "input 1: shape (1, 8) vs cached (4, 8)", "dim 0 of size 1")
    assert len(seen.report["codes"][0]["variants"]) == 1


def test_new_shape_class_of_the_bytecode(level, tmp_path):
    level("L2")
    net = Chain()
    with Seen(tmp_path / "k") as seen:
        net(t(4, 8), t(4, 8))
        net(t(4, 8), t(1, 8))
    (v,) = seen.variants("new_shape_class")
    assert "argument y: shape (1, 8) has dims of size 1 at [0] vs cached at none" in v["reason"]
    # the site of the new variant has no kernel yet: its reason is the variant's
    everywhere(seen, "new_shape_class", "in new bytecode", "argument y: shape (1, 8)")
    assert seen.logged("Compiled Chain.construct", "argument y: shape (1, 8)")


def test_new_dtype(level, tmp_path):
    level("L2")
    net = Chain()
    with Seen(tmp_path / "k") as seen:
        net(t(4, 8), t(4, 8))
        net(t(4, 8, dtype=np.float64), t(4, 8, dtype=np.float64))
    (v,) = seen.variants("new_dtype")
    assert "argument x: dtype float64 vs cached float32" in v["reason"]
    c = everywhere(seen, "new_dtype", "argument y: dtype float64 vs cached float32", "float64[4, 8]")
    assert c["dtype"] == "float64"


def test_new_layout_strided_input(level, tmp_path):
    level("L2")
    net = Transposed()
    with Seen(tmp_path / "k") as seen:
        net(t(8, 4), t(4, 8))
    want = "input 0 is a strided view (strides (4, 16) vs the C-contiguous (32, 4) the kernels take)"
    (r,) = [r for r in seen.recent("new_layout") if want in r["reason"]]
    assert r["source"] == "l1" and r["level"] == 1
    (ins,) = [i for i in seen.report["codes"][0]["instructions"] if i["l1"]]
    assert ins["l1"][0]["reason_kind"] == "new_layout" and want in ins["l1"][0]["reason"]
    assert seen.logged("runs in L1", want)
    assert html.escape(want) in render_html(seen.report)


class ByTransposed(nn.Cell):
    def __init__(self):
        super().__init__()
        self.mm = ops.MatMul(transpose_b=True)

    def construct(self, x, w):
        return ops.relu(self.mm(x, w) + 1.0)


def test_new_layout_of_a_weight(level, tmp_path):
    """x @ w.T by a fixed weight (a Parameter's read-only array) runs on w's contiguous transpose;
    by a writable array of the same shape it is another layout, hence another kernel."""
    level("L2")
    net = ByTransposed()
    w = ms.Parameter(ms.Tensor(np.ones((4, 8), F32)), name="w")
    with Seen(tmp_path / "k") as seen:
        net(t(2, 8), w)
        net(t(2, 8), ms.Tensor(np.ones((4, 8), F32)))
    assert len(seen.report["codes"][0]["variants"]) == 1
    everywhere(seen, "new_layout", "input 1: a writable array vs cached a fixed weight")


def test_new_shape_and_hot(level, tmp_path):
    level("L3")
    net = Chain()
    with Seen(tmp_path / "k") as seen:
        net(t(4, 8), t(4, 8))
        net(t(4, 9), t(4, 9))
    everywhere(seen, "new_shape", "input 0: shape (4, 9) vs cached (4, 8)")
    level("auto")
    ms.set_context(jit_config={"l3_after": 2})
    try:
        with Seen(tmp_path / "k2") as seen:
            net2 = Chain()
            for _ in range(4):
                net2(t(3, 5), t(3, 5))
                tiers.wait_for_compiles(60)
    finally:
        ms.set_context(jit_config={"l3_after": 5})
    c = everywhere(seen, "hot", "called 2 times at these shapes (l3_after=2)")
    assert c["level"] == 3
    misses = [m for i in seen.report["codes"][0]["instructions"] for m in i["misses"]]
    assert any(m["reason_kind"] == "pending" and "compiling in the background" in m["reason"] for m in misses), misses


def test_disk_entry_discarded(level, tmp_path):
    level("L2")
    tiers.reset_cache(str(tmp_path / "k"))
    Chain()(t(4, 8), t(4, 8))
    cache = tiers.kernel_cache()
    (name,) = cache.disk_entries()
    path = os.path.join(cache.dir, name)
    data = bytearray(open(path, "rb").read())
    data[-1] ^= 1                                  # the HMAC tag no longer verifies
    open(path, "wb").write(data)
    with Seen(tmp_path / "k") as seen:             # (a fresh memory cache over the same directory)
        Chain()(t(4, 8), t(4, 8))
    c = everywhere(seen, "discarded", "its disk cache entry was discarded (authentication failed")
    assert c["source"] == "compiled" and "first kernel of this site" in c["reason"]


def test_failed_compile(level, tmp_path, monkeypatch):
    level("L2")

    def broken(kernel, name, features):
        raise RuntimeError("no lowering for this test")
    monkeypatch.setattr(build, "lower", broken)
    with Seen(tmp_path / "k") as seen:
        out = Chain()(t(4, 8), t(4, 8))
        Chain()(t(4, 8), t(4, 8))
    assert np.array_equal(out.asnumpy(), np.full((4, 8), 2, F32))
    f = seen.recent("failed")[0]
    assert "L2 compile failed (RuntimeError: no lowering for this test)" in f["reason"] and f["source"] == "failed"
    e = [e for e in seen.report["errors"] if e.get("reason_kind") == "failed"][0]
    assert "no lowering for this test" in e["reason"] and "first kernel of this site" in e["reason"]
    assert seen.logged("compile of FUSED_MUL_ADD_RELU failed", "RuntimeError: no lowering for this test")
    assert "failed: L2 compile failed (RuntimeError: no lowering for this test)" in render_html(seen.report)
    misses = [m for c in seen.report["codes"] for i in c["instructions"] for m in i["misses"]]
    assert misses and all(m["reason_kind"] == "failed" for m in misses)


def test_over_budget(level, tmp_path, monkeypatch):
    level("L2")
    monkeypatch.setitem(tiers.BUDGET_S, 2, 1e-9)
    with Seen(tmp_path / "k") as seen:
        Chain()(t(4, 8), t(4, 8))
    (f,) = seen.recent("over_budget")
    assert "over the L2 budget of 0.000s" in f["reason"] and "compile took" in f["reason"]
    assert [e for e in seen.report["errors"] if e.get("reason_kind") == "over_budget"]
    assert seen.logged("failed, staying in L1", "over the L2 budget")
    assert "over_budget: L2 compile took" in render_html(seen.report)
    # the compile itself finished (it is in the cache): its record says it was compiled cold
    assert seen.compiles("cold")


def test_parameter_reshaped_discards_variants(tmp_path):
    net = Weighted()
    with Seen(tmp_path / "k") as seen:
        net(t(2, 8))
        net.w.set_data(ms.Tensor(np.ones((8, 6), F32)))
        net(t(2, 8))
    (v,) = seen.variants("discarded")
    assert "1 compiled variant discarded: Parameter w changed shape (8, 4) -> (8, 6)" in v["reason"]
    assert seen.logged("Compiled Weighted.construct", "Parameter w changed shape (8, 4) -> (8, 6)")
    assert "Parameter w changed shape (8, 4) -&gt; (8, 6)" in render_html(seen.report)


@pytest.mark.parametrize("option", ["enable_fusion", "memory_plan"])
def test_a_changed_option_compiles_cells_that_already_ran(option, tmp_path):
    """The Code a Cell runs depends on jit_config's enable_fusion and memory_plan: after a change a
    Cell's next call compiles for the new values and says so, and a change back runs the variant it
    had (a Cell first called with fusion off kept its unfused Code when fusion was turned on: its
    convolutions and products ran in the interpreter)."""
    def fused(net):
        return {i.op.name for v in net._runner.variants.values() for c in v.code.all_codes() for i in c.instrs
                if i.op.kind == "fused"}

    def planned(net):
        return any(c.memplan is not None for v in net._runner.variants.values() for c in v.code.all_codes())

    probe = fused if option == "enable_fusion" else planned
    net = TwoLayers()
    ms.set_context(jit_config={option: False})
    try:
        net(t(2, 8))
        assert not probe(net)
        with Seen(tmp_path / "k") as seen:
            ms.set_context(jit_config={option: False})          # (the same value: nothing to compile)
            net(t(2, 8))
        assert not seen.variants("discarded") and not probe(net)
        with Seen(tmp_path / "k") as seen:
            ms.set_context(jit_config={option: True})
            out = net(t(2, 8))
    finally:
        ms.set_context(jit_config={option: True})
    assert probe(net)
    assert np.array_equal(out.asnumpy(), np.full((2, 3), 72, F32))
    (v,) = seen.variants("discarded")
    assert f"compiled again: set_context changed jit_config {option} False -> True (the variants for the old " \
           "values are kept)" in v["reason"]
    ms.set_context(jit_config={option: False})
    try:
        with Seen(tmp_path / "k3") as seen:             # (and back: the first variant again, nothing compiled)
            np.testing.assert_array_equal(net(t(2, 8)).asnumpy(), np.full((2, 3), 72, F32))
        assert not probe(net) and not seen.report["compiles"] and not seen.variants("discarded")
    finally:
        ms.set_context(jit_config={option: True})
    net(t(2, 8))
    assert probe(net)


def test_new_flags(tmp_path):
    net = Flagged()
    with Seen(tmp_path / "k") as seen:
        net(t(4, 8), True)
        net(t(4, 8), False)
    assert [v for v in seen.variants("new_flags") if "flags training=False vs cached training=True" in v["reason"]]


def test_steps_time_what_they_say(level, tmp_path, monkeypatch):
    """Step6 is LLVM's parse + passes + emit (codegen's own times), Step3 the IR text, Step5 the
    target mapping (recorded with the event); a disk load has no Step3/Step6."""
    level("L3")
    cg = codegen()
    seen_times = []
    real = type(cg).compile

    def spy(self, ir, lvl):
        obj, times = real(self, ir, lvl)
        seen_times.append(times)
        return obj, times
    monkeypatch.setattr(type(cg), "compile", spy)
    with Seen(tmp_path / "k") as seen:
        Chain()(t(4, 8), t(4, 8))
    (c,) = seen.report["compiles"]
    (times,) = seen_times
    steps = c["steps"]
    assert steps["Step6 Code Generation"] == pytest.approx(sum(times.values()) * 1e3, abs=1e-3)
    assert all(steps[s] > 0 for s in ("Step1 Parse", "Step2 Shape Resolution", "Step3 IR Generation",
                                      "Step5 Hardware Mapping", "Step6 Code Generation", "Step7 Kernel Cache"))
    assert c["mapping"]["opt"] == "O3" and c["mapping"]["lanes"] >= 1 and c["mapping"]["cpu"] == cg.cpu
    assert sum(steps.values()) <= c["ms"] + 1e-3
    with Seen(tmp_path / "k") as seen:          # the same kernel from disk
        Chain()(t(4, 8), t(4, 8))
    (d,) = seen.report["compiles"]
    assert d["source"] == "disk" and d["steps"]["Step3 IR Generation"] == d["steps"]["Step6 Code Generation"] == 0
    assert d["steps"]["Step7 Kernel Cache"] > 0 and "loaded from the kernel cache on disk" in d["reason"]


def test_gpu_sites_say_why(tmp_path):
    """The GPU tier manager (on the emulated GPU: real PTX, numpy launches) gives its kernels the
    same reasons, in its tier events (the profile's tiers) and the log."""
    import emulated_gpu

    emulated_gpu.install()
    ms.set_context(device_target="EMULATED", jit_config={"jit_level": "L2"})
    try:
        net = Chain()
        net.set_inputs(ms.Tensor(shape=[None, None], dtype=ms.float32), ms.Tensor(shape=[None, None], dtype=ms.float32))
        with Seen(tmp_path / "k") as seen:
            net(t(4, 8), t(4, 8))
            out = net(t(4, 8), t(1, 8))
    finally:
        ms.set_context(device_target="CPU", jit_config={"jit_level": "auto"})
    assert np.array_equal(out.asnumpy(), np.full((4, 8), 2, F32))
    kinds = [(x["level"], x["reason_kind"]) for x in seen.report["tiers"]]
    assert kinds == [(2, "cold"), (2, "new_shape_class")], kinds
    want = "input 1: shape (1, 8) vs cached (4, 8)"
    assert want in seen.report["tiers"][1]["reason"] and seen.logged("GPU L2 kernel", want)


def test_new_type_and_new_value_of_a_jit_function(tmp_path):
    @ms.jit
    def scaled(x, n, axes):
        return ops.transpose(x, axes) * n

    x = t(2, 3)
    with Seen(tmp_path / "k") as seen:
        scaled(x, 2, (1, 0))
        scaled(x, 2.5, (1, 0))
        scaled(x, 2.5, (0, 1))
    # (one profile entry per variant's Code, each with the compile that made it)
    assert [v["reason_kind"] for c in seen.report["codes"] for v in c["variants"]] == ["cold", "new_type", "new_value"]
    assert len(seen.report["codes"]) == 3 and all(len(c["variants"]) == 1 for c in seen.report["codes"])
    assert "argument n: float vs cached int" in seen.variants("new_type")[0]["reason"]
    assert "argument axes: (0, 1) vs cached (1, 0) (baked into the bytecode)" in seen.variants("new_value")[0]["reason"]
    assert seen.logged("Compiled test_new_type", "new_value: ", "scaled(): argument axes: (0, 1) vs cached (1, 0)")


def test_kernel_needed_names_the_closest_cached_inputs():
    """The pure part: of the site's cached inputs the closest is named, dtype before shape class
    before plain dims (a site's dtypes are fixed by its bytecode, so this is where a GPU or a
    future planner meets them)."""
    from msvm import reasons

    f32, f64 = np.dtype("float32"), np.dtype("float64")
    cached = [(((4, 8), f32), ((4, 8), f32)), (((4, 8), f32), ((1, 8), f32))]
    r = reasons.kernel_needed("OP at C+0x0000 (f.py:1)", 2, (((4, 8), f64), ((1, 8), f64)), cached)
    assert r.kind == "new_dtype" and "input 0: dtype float64 vs cached float32; input 1: dtype float64" in r.text
    assert "closest of 2 cached: [float32[4, 8], float32[1, 8]]" in r.text
    r = reasons.kernel_needed("OP", 2, (((4, 8), f32), None), cached[:1])
    assert r.kind == "new_shape_class" and "input 1: a scalar vs cached a tensor float32(4, 8)" in r.text
    r = reasons.kernel_needed("OP", 2, (((2, 8), f32), ((4, 8), f32), False), [(((2, 8), f32), ((4, 8), f32), True)])
    assert r.kind == "new_layout" and "input 1: a writable array vs cached a fixed weight" in r.text
    r = reasons.kernel_needed("OP", 3, (((4, 9), f32),), [(((4, 8), f32),)])
    assert r.kind == "new_shape" and "input 0: shape (4, 9) vs cached (4, 8)" in r.text


def test_variant_needed_names_the_closest_variant():
    from msvm import reasons

    f32, f64 = np.dtype("float32"), np.dtype("float64")
    x = t(4, 1, dtype=np.float64)
    cached = [((f32, 2, 0),), ((f32, 2, (False, True)),)]       # (executor._key_of: dtype, rank, dims of size 1)
    r = reasons.variant_needed("Net.construct()", ["x"], ((f64, 2, (False, True)),), [x], cached)
    assert r.kind == "new_dtype" and r.text == ("Net.construct(): argument x: dtype float64 vs cached float32 "
                                                "(shape (4, 1)) (closest of 2 compiled variants)")
    r = reasons.variant_needed("Net.construct()", ["x"], ((f32, 3, 0),), [t(2, 3, 4)], cached[:1])
    assert r.kind == "new_shape_class" and "argument x: rank 3 vs cached rank 2 (shape (2, 3, 4))" in r.text


def test_the_budget_counts_the_compiling_threads_cpu_time(level, tmp_path, monkeypatch):
    """(issue 18) A compile whose thread waits (another process's turn on a shared core: here a
    sleep inside the lowering) is not over budget for the wall-clock time it waited; its CPU time
    over the budget is."""
    import time

    level("L2")
    lower = build.lower

    def waits(kernel, name, features):
        time.sleep(0.3)
        return lower(kernel, name, features)
    monkeypatch.setattr(build, "lower", waits)
    monkeypatch.setitem(tiers.BUDGET_S, 2, 0.25)
    with Seen(tmp_path / "k") as seen:
        out = Chain()(t(4, 8), t(4, 8))
        Chain()(t(4, 8), t(4, 8))
    assert np.array_equal(out.asnumpy(), np.full((4, 8), 2, F32))
    assert not seen.recent("over_budget") and seen.compiles("cold")
    assert not [e for e in seen.report["errors"] if e.get("reason_kind") == "over_budget"]
