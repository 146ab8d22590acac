"""The real model zoo: mindcv's resnet18, resnet50, mobilenet_v2_100 and mobilenet_v3_large_100
built with ``mindcv.create_model`` under ``msvm.as_mindspore()``, in eval mode, at several
image sizes through one bytecode per Cell, against float64 numpy implementations of the
architectures (tests/refs/cv.py) that read the same weights by parameter name.

The alias is installed for this module only: the fixture takes its finder off
``sys.meta_path`` and forgets every ``mindspore*``/``mindcv*`` module afterwards."""

import msvm as ms
import numpy as np
import pytest
from refs import cv

# model -> image sizes, in L1 and in L3 (fusion on); resnet50 at two to save time
SIZES = {"resnet18": (224, 160, 192), "resnet50": (224, 160), "mobilenet_v2_100": (224, 160, 192),
         "mobilenet_v3_large_100": (224, 160, 192)}
TOL = 1e-4          # max |msvm - reference| relative to the reference's max |logit|


_BUILT: dict = {}      # model -> (net, float64 weights, {size: (image, reference logits)})


@pytest.fixture
def model(mindcv, request):
    name = request.param
    if name not in _BUILT:
        net = mindcv.create_model(name)
        net.set_train(False)
        params = net.parameters_dict()
        for k, v in cv.test_weights([(k, p.shape) for k, p in params.items()]).items():
            params[k].set_data(ms.Tensor(v))
        _BUILT[name] = (net, cv.as_float64(net.parameters_dict()), {})
    return (name, *_BUILT[name])


def reference(name, p, cache, size):
    """The image of this size (seeded) and its float64 reference logits, computed once."""
    if size not in cache:
        x = np.random.default_rng(size).standard_normal((1, 3, size, size)).astype(np.float32)
        cache[size] = (x, cv.MODELS[name](p, x.astype(np.float64)))
    return cache[size]


def check(net, x, want, what):
    got = net(ms.Tensor(x)).asnumpy()
    assert got.shape == want.shape == (1, 1000), what
    err = np.abs(got - want).max() / np.abs(want).max()
    assert err < TOL, f"{what}: max error {err:.2e} of the max |logit| {np.abs(want).max():.3g}"


@pytest.mark.parametrize("model", list(SIZES), indirect=True)
def test_l1_matches_reference_at_every_size(model):
    name, net, p, cache = model
    ms.set_context(jit_config={"jit_level": "L1", "enable_fusion": True})
    net.set_train(False)                       # (drops what an earlier test compiled)
    for size in SIZES[name]:
        x, want = reference(name, p, cache, size)
        check(net, x, want, f"{name} L1 {size}")
    assert len(net._runner.variants) == 1, "a new image size recompiled the model"
    a, b = (cache[s][1] for s in SIZES[name][:2])          # the comparison has power: the logits
    assert np.abs(a - b).max() > 1e-2 * np.abs(a).max()    # depend on the image far above TOL


@pytest.mark.parametrize("model", list(SIZES), indirect=True)
def test_l3_fused_matches_reference(model):
    pytest.importorskip("llvmlite")
    from msvm.compiler import tiers

    name, net, p, cache = model
    ms.set_context(jit_config={"jit_level": "L3", "enable_fusion": True})
    try:
        net.set_train(False)
        sizes = SIZES[name]
        for size in sizes:                     # the first calls run while the kernels compile
            x, want = reference(name, p, cache, size)
            check(net, x, want, f"{name} L3 {size} (compiling)")
        tiers.wait_for_compiles(60)
        for rep in range(3):                   # then the compiled kernels; the fourth call at a
            for size in sizes:                 # size runs that size's straight-line replay (executor)
                x, want = reference(name, p, cache, size)
                check(net, x, want, f"{name} L3 {size} (call {rep + 2})")
        assert all(entry.replay for entry in net._runner.memo.values()), "a size was never replayed"
        assert len(net._runner.variants) == 1, "a new image size recompiled the model"
        codes = next(iter(net._runner.variants.values())).code.all_codes()
        sites = [s for c in codes for s in c.__dict__.get("jit_sites", {}).values()]
        levels = {k.level for s in sites for k in list(s.l3.values()) if isinstance(k, tiers.Compiled)}
        assert levels == {3}, "nothing was compiled at L3"
    finally:
        ms.set_context(jit_config={"jit_level": "L1", "enable_fusion": True})



# every model at every tier with fusion on and off: L1 and L3 fused run above at every size; the
# other settings run here at the smallest size, twice (the compiling call, then the compiled kernels)
OTHER_SETTINGS = [("L1", False), ("L2", True), ("L2", False), ("L3", False)]


@pytest.mark.parametrize("level,fusion", OTHER_SETTINGS, ids=[f"{lv}-{'fused' if f else 'unfused'}"
                                                              for lv, f in OTHER_SETTINGS])
@pytest.mark.parametrize("model", list(SIZES), indirect=True)
def test_the_other_tier_settings_match_reference(model, level, fusion):
    pytest.importorskip("llvmlite")
    from msvm.compiler import tiers

    name, net, p, cache = model
    ms.set_context(jit_config={"jit_level": level, "enable_fusion": fusion})
    try:
        net.set_train(False)
        x, want = reference(name, p, cache, 160)
        for call in range(2):
            check(net, x, want, f"{name} {level} fusion={fusion} 160 (call {call + 1})")
            tiers.wait_for_compiles(60)
        codes = next(iter(net._runner.variants.values())).code.all_codes()
        fused = any(i.op.kind == "fused" for c in codes for i in c.instrs)
        assert fused == fusion, "the bytecode is fused exactly when fusion is on"
        if level != "L1" and fusion:         # (unfused, a CNN's ops are convolutions, pools and lone
            sites = [s for c in codes for s in c.__dict__.get("jit_sites", {}).values()]
            done = {k.level for s in sites for k in list(s.l2.values()) + list(s.l3.values())
                    if isinstance(k, tiers.Compiled)}
            assert int(level[1]) in done, f"nothing was compiled at {level}"     # elementwise ops: L1 kernels)
    finally:
        ms.set_context(jit_config={"jit_level": "L1", "enable_fusion": True})


F16_TOL = 1e-2      # float16 (11 significant bits) through 20 layers, against the float64 reference


@pytest.mark.parametrize("model", ["resnet18"], indirect=True)
def test_to_float16_runs_in_float16_in_every_tier(model):
    """``net.to_float(mstype.float16)`` (MindSpore's mixed precision): every Cell casts its inputs
    and Parameters to float16 where it starts, so the logits are float16 and within float16's
    error of the float64 reference, in L1 and the compiled tiers; the compiled tiers' planners
    keep float16 sites in the interpreter and say so (``Site.l1_why``)."""
    name, net, p, cache = model
    x, want = reference(name, p, cache, 160)
    try:
        net.to_float(ms.float16)
        for level, fusion in (("L1", True), ("L2", False), ("L3", True)):
            ms.set_context(jit_config={"jit_level": level, "enable_fusion": fusion})
            net.set_train(False)
            for call in range(2 if level != "L1" else 1):
                out = net(ms.Tensor(x))
                assert out.dtype == ms.float16, level
                err = np.abs(out.asnumpy().astype(np.float64) - want).max() / np.abs(want).max()
                assert 1e-5 < err < F16_TOL, f"{level} fusion={fusion} call {call}: error {err:.2e}"
        codes = next(iter(net._runner.variants.values())).code.all_codes()
        whys = {w for c in codes for s in c.__dict__.get("jit_sites", {}).values() for w in s.l1_why.values()}
        assert "dtype float16" in whys, whys
    finally:
        net.to_float(ms.float32)
        ms.set_context(jit_config={"jit_level": "L1", "enable_fusion": True})
