"""``msvm profile``: the JSON and the self-contained HTML report of a real run."""

import json
import os
import re
import subprocess
import sys

PROGRAM = '''import numpy as np
import msvm as ms
from msvm import nn, ops

ms.set_context(jit_config={"jit_level": "L2"})


class Block(nn.Cell):
    def __init__(self):
        super().__init__()
        self.w = ms.Parameter(ms.Tensor(np.ones((16, 8), np.float32)))

    def construct(self, x, b):
        return ops.relu(ops.matmul(x, self.w) + b) * 0.5


net = Block()
b = ms.Tensor(np.ones((8,), np.float32))
for n in (4, 8, 4, 8, 4):
    net(ms.Tensor(np.ones((n, 16), np.float32)), b)
'''


def run_profile(tmp_path, body, *extra):
    script = tmp_path / "prog.py"
    script.write_text(body)
    env = dict(os.environ, MSVM_CACHE_DIR=str(tmp_path / "kernels"))
    env.pop("MSVM_TELEMETRY", None)
    return subprocess.run([sys.executable, "-m", "msvm", "profile", str(script), "--json", str(tmp_path / "p.json"),
                           "--html", str(tmp_path / "p.html"), *extra], env=env, capture_output=True, text=True,
                          timeout=300)


def test_profile_json_and_html(tmp_path):
    r = run_profile(tmp_path, PROGRAM)
    assert r.returncode == 0, r.stderr
    rep = json.loads((tmp_path / "p.json").read_text())
    assert rep["version"] == 1 and rep["status"] == 0
    (code,) = rep["codes"]
    assert code["name"] == "Block.construct" and code["calls"] == 5
    ops = [i["op"] for i in code["instructions"]]
    fused = [i for i in code["instructions"] if i["op"].startswith("FUSED_MATMUL")]
    assert fused, ops
    k = fused[0]
    assert k["compile_ms"] > 0 and k["exec_ns"] > 0 and 0 < k["compile_share"] <= 1
    assert list(k["steps"]) == ["Step1 Parse", "Step2 Shape Resolution", "Step3 IR Generation", "Step4 Fusion",
                                "Step5 Hardware Mapping", "Step6 Code Generation", "Step7 Kernel Cache"]
    assert {p["op"] for p in k["parts"]} >= {"MATMUL"} and all(len(p["loc"]) == 4 for p in k["parts"])
    assert k["tiers"] and k["tiers"][0]["level"] == 2
    assert abs(sum(i["exec_share"] for i in code["instructions"]) - 1) < 1e-6
    assert rep["cache"]["compiles"] >= 1 and rep["cache"]["hits"] >= 1
    # why: one bytecode variant (the first call) and the site's first kernel, from a cold cache
    assert [v["reason_kind"] for v in code["variants"]] == ["cold"]
    assert k["tiers"][0]["reason_kind"] == "cold" and "compiled: cold cache" in k["tiers"][0]["reason"]
    # the site's kernel, and the packed product it calls (a fixed weight at 4 rows: compiler/gemm.py), once
    (c,) = [c for c in rep["compiles"] if c["op"].startswith("FUSED_MATMUL")]
    (g,) = [c for c in rep["compiles"] if c["op"] == "GEMM_PACKED"]
    assert g["reason_kind"] == "cold" and len(rep["compiles"]) == 2
    assert c["reason_kind"] == "cold" and "at Block.construct+0x" in c["reason"] and "prog.py:" in c["reason"]
    assert all(r["reason"] for r in rep["cache"]["recent"])
    page = (tmp_path / "p.html").read_text()
    assert "profile-data" in page and "Block.construct" in page
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page), "the report loads nothing from the network"
    assert "Content-Security-Policy" in page
    assert "compiled: cold cache (not in memory, not on disk)" in page and "first call with these argument kinds" in page


def test_profile_of_a_failing_script_is_still_written(tmp_path):
    r = run_profile(tmp_path, PROGRAM + "raise ValueError('late failure')\n")
    assert r.returncode == 1
    rep = json.loads((tmp_path / "p.json").read_text())
    assert rep["status"] == 1 and "late failure" in rep["error"]
    assert rep["codes"][0]["calls"] == 5
