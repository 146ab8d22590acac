"""The language server through a real client over stdio: lenses, bytecode, diagnostics,
hover, robustness, and live statistics from real msvm programs. Waits on messages,
never sleeps."""

import asyncio
import os
import pathlib
import subprocess
import sys

import pytest
from lsprotocol import types
from paths import EXAMPLES

pytestmark = pytest.mark.asyncio(loop_scope="function")

ARTICLE = os.path.join(EXAMPLES, "dynamic_matmul.py")
BERT = os.path.join(EXAMPLES, "bert_layer.py")

BAD_CELL = '''import msvm as ms
import numpy as np
from msvm import nn, ops


class Proj(nn.Cell):
    def __init__(self):
        super().__init__()
        self.w = ms.Parameter(ms.Tensor(np.zeros((768, 1024), np.float32)))

    def construct(self, x):
        y = ops.matmul(x, self.w)
        return ops.relu(y)


net = Proj()
net.set_inputs(ms.Tensor(shape=[None, 768], dtype=ms.float32))
'''


def uri_of(path):
    return pathlib.Path(path).as_uri()


def open_doc(client, path, text=None, version=1):
    text = pathlib.Path(path).read_text() if text is None else text
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        types.TextDocumentItem(uri=uri_of(path), language_id="python", version=version, text=text)))
    return uri_of(path)


def change_doc(client, uri, text, version):
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        types.VersionedTextDocumentIdentifier(uri=uri, version=version),
        [types.TextDocumentContentChangeWholeDocument(text=text)]))


async def request(client, method, params, timeout=60):
    return await asyncio.wait_for(client.protocol.send_request_async(method, params), timeout)


def field(obj, name):
    return obj[name] if isinstance(obj, dict) else getattr(obj, name)


async def diagnostics_for(client, uri, want):
    """Wait until the latest diagnostics for uri satisfy want(list)."""
    while True:
        got = client.diagnostics.get(uri)
        got = None if got is None else list(got)
        if got is not None and want(got):
            return got
        await asyncio.wait_for(client.wait_for_notification(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS), 60)


async def test_code_lenses_over_cells_and_jit_functions(client, tmp_path):
    uri = open_doc(client, BERT)
    lenses = await client.text_document_code_lens_async(types.CodeLensParams(types.TextDocumentIdentifier(uri)))
    names = {lens.command.arguments[1] for lens in lenses}
    assert {"BertLayer", "SelfAttention"} <= names
    assert all(lens.command.title == "View MS Bytecode" and lens.command.command == "msvm.viewBytecode"
               for lens in lenses)
    src = pathlib.Path(BERT).read_text().splitlines()
    for lens in lenses:
        assert src[lens.range.start.line].lstrip().startswith(("class ", "def ", "@"))

    jit_file = tmp_path / "jitfn.py"
    jit_file.write_text("import msvm as ms\nfrom msvm import ops\n\n\n@ms.jit\ndef f(x: \"B, 4\"):\n"
                        "    return ops.relu(x) * 2.0\n")
    juri = open_doc(client, jit_file)
    lenses = await client.text_document_code_lens_async(types.CodeLensParams(types.TextDocumentIdentifier(juri)))
    assert [(lens.range.start.line, lens.command.arguments[1]) for lens in lenses] == [(5, "f")]


async def test_bytecode_of_the_article_cell(client):
    uri = open_doc(client, ARTICLE)
    res = await request(client, "msvm/bytecode", {"uri": uri, "cell": "DynamicMatmulCell", "fused": False})
    ins = field(res, "instructions")
    src = pathlib.Path(ARTICLE).read_text().splitlines()
    training_line = next(i for i, line in enumerate(src) if "if training:" in line)
    branch = [i for i in ins if field(i, "op") == "BRANCH_IF_SYMBOLIC"]
    assert len(branch) == 1
    rng = field(branch[0], "range")
    assert field(field(rng, "start"), "line") == training_line
    line_text = src[training_line]
    start, end = field(field(rng, "start"), "character"), field(field(rng, "end"), "character")
    assert line_text[start:end] == "training"
    offsets = [field(i, "offset") for i in ins]
    assert offsets == sorted(offsets) and offsets[0] == 0
    assert [field(i, "stackDepth") for i in ins][:3] == [1, 2, 1]
    assert "BRANCH_IF_SYMBOLIC" in field(res, "text")
    # by position instead of name: a line inside the class
    by_pos = await request(client, "msvm/bytecode", {"uri": uri, "position": {"line": training_line, "character": 4},
                                                     "fused": False})
    assert field(by_pos, "cell") == "DynamicMatmulCell"


async def test_bytecode_uses_unsaved_text_and_fused_parts(client):
    text = pathlib.Path(BERT).read_text()
    uri = open_doc(client, BERT, text)
    res = await request(client, "msvm/bytecode", {"uri": uri, "cell": "BertLayer"})
    fused = [i for i in field(res, "functions") for i in field(i, "instructions")
             if field(i, "op").startswith("FUSED_MATMUL_BIAS")]
    assert fused, "the Dense sub-Cells fuse their bias add into the matmul"
    parts = field(fused[0], "parts")
    assert len(parts) >= 2
    lines = {field(field(field(p, "range"), "start"), "line") for p in parts}
    assert len(lines) >= 2, "each part keeps its own source range"
    # an unsaved edit renames the Cell: the request sees the buffer, not the file on disk
    change_doc(client, uri, text.replace("BertLayer", "EncoderLayer"), 2)
    res = await request(client, "msvm/bytecode", {"uri": uri, "cell": "EncoderLayer"})
    assert field(res, "instructions") and field(res, "cell") == "EncoderLayer"


async def test_diagnostics_appear_and_clear(client, tmp_path):
    path = tmp_path / "proj.py"
    path.write_text(BAD_CELL)
    uri = open_doc(client, path)
    await diagnostics_for(client, uri, lambda d: d == [])
    broken = BAD_CELL.replace("(768, 1024)", "(512, 1024)")
    change_doc(client, uri, broken, 2)
    got = await diagnostics_for(client, uri, lambda d: len(d) == 1)
    d = got[0]
    assert d.severity == types.DiagnosticSeverity.Error and d.source == "msvm"
    assert "[x0,768] @ [512,1024]" in d.message
    line = broken.splitlines()[d.range.start.line]
    assert "ops.matmul(x, self.w)" in line
    assert line[d.range.start.character:d.range.end.character] == "ops.matmul(x, self.w)"
    change_doc(client, uri, BAD_CELL, 3)
    await diagnostics_for(client, uri, lambda d: d == [])


async def test_diagnostics_for_concat_reshape_and_unsupported_syntax(client, tmp_path):
    cases = {
        "ops.concat((y, y), axis=n)": "axis",
        "ops.reshape(y, (7, 5))": "reshape",
        "{v for v in (y, y)}": "set comprehension",
    }
    for k, (expr, word) in enumerate(cases.items()):
        text = BAD_CELL.replace("        return ops.relu(y)",
                                f"        n = x.shape[0]\n        z = {expr}\n        return z")
        path = tmp_path / f"case{k}.py"
        path.write_text(text)
        uri = open_doc(client, path)
        got = await diagnostics_for(client, uri, lambda d: len(d) == 1)
        line = text.splitlines()[got[0].range.start.line]
        assert expr.split("(")[0] in line or expr[:5] in line, (expr, got[0].message, line)
        assert word.lower() in got[0].message.lower(), got[0].message


async def test_hover_shows_symbolic_shape_and_dtype(client):
    uri = open_doc(client, ARTICLE)
    src = pathlib.Path(ARTICLE).read_text().splitlines()
    line = next(i for i, s in enumerate(src) if "out = self.matmul(x, y)" in s)
    h = await client.text_document_hover_async(types.HoverParams(types.TextDocumentIdentifier(uri),
                                                                 types.Position(line, src[line].index("out") + 1)))
    assert h is not None
    assert "out: Tensor[float32, (" in h.contents.value
    assert h.range.start.character == src[line].index("out")
    nothing = await client.text_document_hover_async(types.HoverParams(types.TextDocumentIdentifier(uri),
                                                                       types.Position(0, 0)))
    assert nothing is None


async def test_survives_syntax_errors_and_huge_files(client, tmp_path):
    path = tmp_path / "typing.py"
    path.write_text(BAD_CELL)
    uri = open_doc(client, path)
    await diagnostics_for(client, uri, lambda d: d == [])
    change_doc(client, uri, BAD_CELL.replace("def construct(self, x):", "def construct(self, x:"), 2)
    got = await diagnostics_for(client, uri, lambda d: len(d) == 1)
    assert "syntax" in got[0].message
    lenses = await client.text_document_code_lens_async(types.CodeLensParams(types.TextDocumentIdentifier(uri)))
    assert [lens.command.arguments[1] for lens in lenses] == ["Proj"], "the last good lenses stay while typing"

    many = ["import msvm as ms", "from msvm import nn, ops", ""]
    for k in range(200):
        many += [f"class C{k}(nn.Cell):", "    def construct(self, x: \"B, 8\"):",
                 f"        return ops.relu(x) * {k + 1}.0", ""]
    many += [f"value_{k} = {k} * 2" for k in range(10_000 - len(many))]
    big = tmp_path / "big.py"
    big.write_text("\n".join(many))
    buri = open_doc(client, big)
    lenses = await asyncio.wait_for(client.text_document_code_lens_async(
        types.CodeLensParams(types.TextDocumentIdentifier(buri))), 120)
    assert len(lenses) == 200
    h = await client.text_document_hover_async(types.HoverParams(types.TextDocumentIdentifier(uri),
                                                                 types.Position(11, 9)))
    assert h is not None and "y: Tensor[float32" in h.contents.value


def _program(tmp_path, body):
    p = tmp_path / "prog.py"
    p.write_text(body)
    return p


JIT_PROGRAM = '''import numpy as np
import msvm as ms
from msvm import nn, ops

ms.set_context(jit_config={"jit_level": "L2"})


class Block(nn.Cell):
    def construct(self, x, b):
        return ops.relu(x * 2.0 + b)


net = Block()
b = ms.Tensor(np.ones((16,), np.float32))
for n in (4, 8, 4, 8, 4):
    net(ms.Tensor(np.ones((n, 16), np.float32)), b)
print("done")
'''


async def test_statistics_from_a_real_program_reach_the_client(client, tmp_path):
    tel = await request(client, "msvm/telemetry", {})
    address = field(tel, "address")
    assert address and address.startswith(("unix:", "tcp:"))
    if address.startswith("unix:"):
        assert os.stat(os.path.dirname(address[5:])).st_mode & 0o777 == 0o700
    prog = _program(tmp_path, JIT_PROGRAM)
    profile = asyncio.ensure_future(client.wait_for_notification("msvm/profile"))
    env = dict(os.environ, MSVM_TELEMETRY=address, MSVM_CACHE_DIR=str(tmp_path / "kernels"))
    proc = await asyncio.create_subprocess_exec(sys.executable, str(prog), env=env, stdout=subprocess.PIPE)
    out, _ = await proc.communicate()
    assert proc.returncode == 0 and b"done" in out
    note = await asyncio.wait_for(profile, 60)
    report = field(note, "profile")
    assert field(report, "version") == 1
    assert [field(c, "name") for c in field(report, "codes")] == ["Block.construct"]
    assert len(field(report, "compiles")) >= 1
    stats = await request(client, "msvm/telemetry", {})
    s = field(stats, "stats")
    assert field(s, "hits") >= 3 and field(s, "compiles") >= 1 and 0 < field(s, "rate") <= 1
    assert field(field(s, "recent")[0], "shape") and field(field(s, "recent")[0], "dtype") == "float32"
    # each recent key says why it was compiled (msvm/reasons.py): here the site's first kernel, cold cache
    recent = field(s, "recent")
    assert all(field(r, "reason_kind") and "at Block.construct+0x" in field(r, "reason") for r in recent), recent
    assert any(field(r, "reason_kind") == "cold" and "compiled: cold cache" in field(r, "reason") for r in recent)
    assert field(field(report, "compiles")[0], "reason_kind") == "cold"


async def test_run_profile_needs_trust(client, tmp_path):
    prog = _program(tmp_path, JIT_PROGRAM)
    with pytest.raises(Exception, match="not trusted"):
        await request(client, "msvm/runProfile", {"uri": uri_of(prog)})


async def test_run_profile_crash_and_hang(trusted_client, tmp_path):
    client = trusted_client
    prog = _program(tmp_path, JIT_PROGRAM)
    res = await request(client, "msvm/runProfile", {"uri": uri_of(prog)})
    assert field(res, "status") == 0
    rep = field(res, "profile")
    code = field(rep, "codes")[0]
    assert any(field(i, "exec_ns") > 0 for i in field(code, "instructions"))
    assert any(field(i, "compile_ms") > 0 for i in field(code, "instructions"))

    crash = tmp_path / "crash.py"
    crash.write_text(JIT_PROGRAM.replace('print("done")', 'raise RuntimeError("boom")'))
    res = await request(client, "msvm/runProfile", {"uri": uri_of(crash)})
    assert field(res, "status") == 1 and "boom" in field(res, "error")
    assert field(res, "profile") is not None, "the profile is written even when the program fails"

    hang = tmp_path / "hang.py"
    pid_file = tmp_path / "child.pid"
    hang.write_text("import subprocess, sys, time\n"
                    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
                    f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
                    "while True:\n    time.sleep(0.05)\n")
    res = await request(client, "msvm/runProfile", {"uri": uri_of(hang), "timeout": 8})
    assert "ran past" in field(res, "error")
    from stdio_client import alive, wait_until

    assert pid_file.exists(), "the program started its child before the timeout"
    wait_until(lambda: not alive(int(pid_file.read_text())), 30, "the hung program's child ending with it")
    uri = open_doc(client, ARTICLE)
    res = await request(client, "msvm/bytecode", {"uri": uri})
    assert field(res, "instructions"), "the server still answers"


# Characters that str.splitlines treats as line ends but LSP (and Python's tokenizer) do not,
# a lone surrogate (JSON can carry one; no UTF-8 encoder takes it) and an astral character
# (two UTF-16 units), all in comments above the code whose positions are checked.
ODD = "# odd: \u2028 \u2029 \x0c \x85 \x1c \x1d \x1e \x0b \ud800 \U0001F600 \udfff\n"


def lsp_lines(text):
    """The document's lines as LSP numbers them: only \\n, \\r\\n and \\r end one."""
    import re

    return re.split(r"\r\n|\r|\n", text)


def utf16(s):
    return len(s.encode("utf-16-le", "surrogatepass")) // 2


def where(text, line_text, needle):
    """The LSP (line, UTF-16 character) where needle starts on the line that holds line_text."""
    lines = lsp_lines(text)
    k = next(i for i, s in enumerate(lines) if line_text in s)
    return k, utf16(lines[k][:lines[k].index(needle)])


async def test_positions_survive_odd_line_breaks_and_surrogates(client, tmp_path):
    text = BAD_CELL.replace("(768, 1024)", "(512, 1024)")
    text = text.replace("import msvm as ms\n", "import msvm as ms\n" + ODD * 3)
    text = text.replace("        y = ops.matmul", "        # \U0001F600\u2028\ud83d\n        y = ops.matmul")
    text = text.replace("        y = ops.matmul(x, self.w)", "        y = ops.matmul(x, self.w)  # \u2029")
    path = tmp_path / "odd.py"
    uri = open_doc(client, path, text)
    got = await diagnostics_for(client, uri, lambda d: len(d) == 1)
    line, char = where(text, "y = ops.matmul", "ops.matmul")
    assert (got[0].range.start.line, got[0].range.start.character) == (line, char)
    assert (got[0].range.end.line, got[0].range.end.character) == (line, char + len("ops.matmul(x, self.w)"))

    lenses = await client.text_document_code_lens_async(types.CodeLensParams(types.TextDocumentIdentifier(uri)))
    assert [(lens.range.start.line, lens.command.arguments[1]) for lens in lenses] == \
        [(where(text, "class Proj", "class")[0], "Proj")]

    good = text.replace("(512, 1024)", "(768, 1024)")
    change_doc(client, uri, good, 2)
    await diagnostics_for(client, uri, lambda d: d == [])
    res = await request(client, "msvm/bytecode", {"uri": uri, "cell": "Proj", "fused": False})
    mm = [i for i in field(res, "instructions") if field(i, "op") == "MATMUL"]
    assert mm, field(res, "instructions")
    rng = field(mm[0], "range")
    line, char = where(good, "y = ops.matmul", "ops.matmul")
    assert (field(field(rng, "start"), "line"), field(field(rng, "start"), "character")) == (line, char)
    assert field(field(rng, "end"), "character") == char + len("ops.matmul(x, self.w)")

    k, c = where(good, "y = ops.matmul", "y =")
    h = await client.text_document_hover_async(types.HoverParams(types.TextDocumentIdentifier(uri),
                                                                 types.Position(k, c)))
    assert h is not None and "y: Tensor[float32" in h.contents.value
    assert (h.range.start.line, h.range.start.character) == (k, c)


async def test_syntax_error_column_counts_utf16_units(client, tmp_path):
    text = "import msvm as ms\n" + ODD + 'x = "\U0001F600\u00e9\u2028" +* 1\n'
    uri = open_doc(client, tmp_path / "syn.py", text)
    got = await diagnostics_for(client, uri, lambda d: len(d) == 1)
    assert "syntax" in got[0].message
    assert (got[0].range.start.line, got[0].range.start.character) == where(text, "+*", "*")


async def test_incremental_edit_below_a_line_separator(client, tmp_path):
    """The server syncs whole documents: pygls's incremental edits split lines as str.splitlines does."""
    text = BAD_CELL.replace("import msvm as ms\n", "import msvm as ms\n" + ODD)
    uri = open_doc(client, tmp_path / "edit.py", text)
    await diagnostics_for(client, uri, lambda d: d == [])
    line, char = where(text, "(768, 1024)", "768")
    sync = client.init_result.capabilities.text_document_sync
    kind = sync.change if hasattr(sync, "change") else sync
    if kind == types.TextDocumentSyncKind.Incremental:
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            types.VersionedTextDocumentIdentifier(uri=uri, version=2),
            [types.TextDocumentContentChangePartial(range=types.Range(types.Position(line, char),
                                                                      types.Position(line, char + 3)), text="512")]))
    else:
        change_doc(client, uri, text.replace("(768, 1024)", "(512, 1024)"), 2)
    got = await diagnostics_for(client, uri, lambda d: len(d) == 1)
    assert "[x0,768] @ [512,1024]" in got[0].message


async def test_imports_that_would_run_a_program_are_not_followed(client, tmp_path):
    """Analysis imports msvm and numpy modules to resolve names, never a __main__ (msvm's runs
    the msvm command and exits), a private module or a conftest."""
    text = BAD_CELL.replace("from msvm import nn, ops\n", "from msvm import nn, ops\nfrom msvm import __main__\n"
                            "import numpy.f2py.__main__\nimport numpy.conftest\nfrom numpy import _pytesttester\n")
    uri = open_doc(client, tmp_path / "mains.py", text)
    await diagnostics_for(client, uri, lambda d: d == [])
    lenses = await client.text_document_code_lens_async(types.CodeLensParams(types.TextDocumentIdentifier(uri)))
    assert [lens.command.arguments[1] for lens in lenses] == ["Proj"]
    res = await request(client, "msvm/bytecode", {"uri": uri, "cell": "Proj"})
    assert field(res, "instructions"), "the server still answers"
