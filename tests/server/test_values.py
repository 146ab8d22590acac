"""What the debugger shows of a stopped program: columns and previews."""

import numpy as np
from msvm_server.dap.values import _col1, preview


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
