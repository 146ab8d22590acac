"""What the debugger shows of a stopped program: columns and previews."""

import types

import msvm as ms
import numpy as np
from msvm import nn, ops
from msvm_server.dap.values import _col1, jit_state, preview


def test_columns_count_utf16_units_after_odd_line_breaks(tmp_path):
    src = "# \u2028 \u2029 \x0c \x85 \x1c\n" + 's = "\U0001F600\u00e9"; y = x + 1\n'
    path = tmp_path / "cols.py"
    path.write_text(src, encoding="utf-8")
    line = src.split("\n")[1]
    col_bytes = len(line[:line.index("x + 1")].encode("utf-8"))
    want = len(line[:line.index("x + 1")].encode("utf-16-le")) // 2 + 1
    assert _col1(str(path), 2, col_bytes) == want == 16


def test_preview_of_a_strided_tensor_reads_only_what_it_shows():
    a = np.arange(4000 * 3000, dtype=np.float32).reshape(4000, 3000).T      # no reshape(-1) view of this exists
    assert preview(a) == "[0, 3000, 6000, 9000, 1.2e+04, 1.5e+04, 1.8e+04, 2.1e+04, ...]"


def test_the_jit_scope_says_why_each_kernel_was_compiled(tmp_path):
    from msvm.compiler import tiers

    class Chain(nn.Cell):
        def construct(self, x):
            return ops.relu(x * 2.0 + 1.0)

    ms.set_context(mode=ms.GRAPH_MODE, jit_config={"jit_level": "L2"})
    try:
        tiers.reset_cache(str(tmp_path / "k"))
        net = Chain()
        net(ms.Tensor(np.ones((4, 8), np.float32)))
        net(ms.Tensor(np.ones((4, 1), np.float32)))      # (a new bytecode variant: a dim of size 1)
        (var, _) = net._runner.variants.values()
        (index,) = var.code.jit_sites
        state = jit_state(types.SimpleNamespace(code=var.code), index)
        assert list(state["why"]) == ["L2 0"]
        assert state["why"]["L2 0"].startswith("cold: ") and "the first kernel of this site at L2" in state["why"]["L2 0"]
    finally:
        ms.set_context(jit_config={"jit_level": "auto"})
        tiers.reset_cache()
