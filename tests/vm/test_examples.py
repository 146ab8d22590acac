"""The examples: results against numpy, golden dumps, and the CLI around them."""

import os
import subprocess
import sys

import msvm as ms
import numpy as np
import pytest
from msvm.bytecode import dump
from msvm.static import analyze_file
from paths import EXAMPLES, ROOT

GOLDEN = os.path.join(os.path.dirname(__file__), "golden")


def _msvm(*args, env=None):
    e = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, "-m", "msvm", *args], capture_output=True, text=True, cwd=ROOT, env=e,
                          timeout=300)


@pytest.mark.parametrize("batch,seq", [(1, 16), (2, 33), (1, 128), (4, 5)])
def test_bert_layer_matches_numpy_for_any_batch_and_length(batch, seq):
    import bert_layer

    rng = np.random.default_rng(batch * 1000 + seq)
    x = rng.standard_normal((batch, seq, 768)).astype(np.float32)
    out = bert_layer.layer(ms.Tensor(x)).asnumpy()
    ref = bert_layer.numpy_reference(bert_layer.layer, x)
    assert out.shape == (batch, seq, 768) and out.dtype == np.float32
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    assert len(bert_layer.layer._runner.variants) == 1        # one bytecode for every (batch, seq)


@pytest.mark.parametrize("example", ["dynamic_matmul", "bert_layer"])
def test_golden_dump(example):
    got = "\n".join(dump(e.code, with_callees=True) for e in analyze_file(f"{EXAMPLES}/{example}.py") if e.code)
    path = os.path.join(GOLDEN, f"{example}.txt")
    if os.environ.get("MSVM_UPDATE_GOLDEN") == "1":
        with open(path, "w") as f:
            f.write(got + "\n")
    with open(path) as f:
        assert got + "\n" == f.read(), f"dump of {example} changed; rerun with MSVM_UPDATE_GOLDEN=1 if intended"


def test_static_dump_equals_the_runtime_dump(tmp_path):
    (static,) = analyze_file(f"{EXAMPLES}/dynamic_matmul.py")
    r = _msvm("run", f"{EXAMPLES}/dynamic_matmul.py", "--dump")
    assert r.returncode == 0, r.stderr
    assert dump(static.code) in r.stdout


def test_msvm_run_shows_dump_and_debug_logs():
    r = _msvm("run", "examples/dynamic_matmul.py", "--log-level", "DEBUG", "--dump")
    assert r.returncode == 0, r.stderr
    assert "[MS] Bytecode dump for DynamicMatmulCell.construct:" in r.stdout
    assert "BRANCH_IF_SYMBOLIC" in r.stdout
    assert "[MS] Compiled DynamicMatmulCell.construct" in r.stderr
    assert "max relative error vs numpy" in r.stdout


def test_msvm_dump_does_not_execute_the_file(tmp_path):
    marker = tmp_path / "executed"
    src = (f"import msvm as ms\nfrom msvm import nn, ops\nopen({str(marker)!r}, 'w').write('x')\n\n"
           "class Net(nn.Cell):\n    def __init__(self, d=768):\n        super().__init__()\n"
           "        self.w = ms.Parameter(ms.Tensor(np.zeros((d, 1024), np.float32)))\n"
           "    def construct(self, x: \"B, 768\", training=True):\n        y = ops.matmul(x, self.w)\n"
           "        if training:\n            y = ops.relu(y)\n        return y\n\nimport numpy as np\n")
    f = tmp_path / "net.py"
    f.write_text(src)
    r = _msvm("dump", str(f))
    assert r.returncode == 0, r.stderr
    assert not marker.exists()
    assert "[MS] Bytecode dump for Net.construct:" in r.stdout
    assert "x: Tensor[float32, [B,768]]" in r.stdout and "-> Tensor[float32, [B,1024]]" in r.stdout
    j = _msvm("dump", str(f), "--json")
    import json
    data = json.loads(j.stdout)
    ops = [i["op"] for i in data[0]["functions"][-1]["instructions"]]
    assert "BRANCH_IF_SYMBOLIC" in ops and data[0]["name"] == "Net"


def test_msvm_dump_reports_shape_errors_with_location(tmp_path):
    f = tmp_path / "bad.py"
    f.write_text("import numpy as np\nimport msvm as ms\nfrom msvm import nn, ops\n\n\nclass Net(nn.Cell):\n"
                 "    def __init__(self):\n        super().__init__()\n"
                 "        self.w = ms.Parameter(ms.Tensor(np.zeros((512, 1024), np.float32)))\n"
                 "    def construct(self, x):\n        return ops.matmul(x, self.w)\n\n\n"
                 "net = Net()\nnet.set_inputs(ms.Tensor(shape=[None, 768], dtype=ms.float32))\n")
    r = _msvm("dump", str(f))
    assert r.returncode == 1
    assert f"{f}:11:16: MATMUL: shapes [x0,768] @ [512,1024] do not match" in r.stderr
    assert "Traceback" not in r.stderr


def test_msvm_dump_out_and_check(tmp_path):
    out = tmp_path / "m.msbc"
    r = _msvm("dump", "examples/bert_layer.py", "--cell", "BertLayer", "--out", str(out))
    assert r.returncode == 0, r.stderr
    c = _msvm("check", str(out))
    assert c.returncode == 0 and "BertLayer.construct" in c.stdout


def test_msvm_run_missing_script_is_a_one_line_error():
    r = _msvm("run", "nope.py")
    assert r.returncode == 2 and "nope.py: no such file" in r.stderr and "Traceback" not in r.stderr
