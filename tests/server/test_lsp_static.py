"""The language server on the files static analysis must read without running them
(issue 17): the same programs as tests/vm/test_static.py, through a real client."""

import socket

import pytest
import static_programs as P
from lsprotocol import types
from test_lsp import diagnostics_for, field, open_doc, request

pytestmark = pytest.mark.asyncio(loop_scope="function")

ERROR, INFO = types.DiagnosticSeverity.Error, types.DiagnosticSeverity.Information


async def test_main_guard_program_has_bytecode_and_no_diagnostics(client, tmp_path):
    path = tmp_path / "article.py"
    path.write_text(P.MAIN_GUARD)
    uri = open_doc(client, path)
    await diagnostics_for(client, uri, lambda d: d == [])
    res = await request(client, "msvm/bytecode", {"uri": uri, "cell": "DynamicMatmulCell", "fused": False})
    assert "x: Tensor[float32, [x0,x1]], y: Tensor[float32, [x1,y1]]" in field(res, "text")


async def test_set_inputs_in_try_is_an_error_with_both_shapes(client, tmp_path):
    path = tmp_path / "proj.py"
    path.write_text(P.TRY_SET_INPUTS)
    uri = open_doc(client, path)
    (d,) = await diagnostics_for(client, uri, lambda d: len(d) == 1)
    assert d.severity == ERROR and "[x0,512] @ [768,1024]" in d.message
    line = P.TRY_SET_INPUTS.splitlines()[d.range.start.line]
    assert line[d.range.start.character:d.range.end.character] == "self.matmul(x, self.w)"


async def test_data_built_weights_are_notes_and_bytecode(client, tmp_path):
    path = tmp_path / "data.py"
    path.write_text(P.DATA_WEIGHTS)
    uri = open_doc(client, path)
    got = await diagnostics_for(client, uri, lambda d: len(d) >= 2)
    assert all(d.severity == INFO for d in got), [(d.severity, d.message) for d in got]
    assert any("self.w: Tensor<float32, [w0,w1]>" in d.message for d in got)
    res = await request(client, "msvm/bytecode", {"uri": uri, "cell": "Proj", "fused": False})
    params = [i for i in field(res, "instructions") if field(i, "op") == "LOAD_PARAM"]
    assert params and field(params[0], "type") == "Tensor[float32, [w0,w1]]"


async def test_hostile_document_keeps_the_server_answering(client, tmp_path):
    path = tmp_path / "hostile.py"
    loop = "net = Net()\nx = ms.Tensor(np.zeros((4, 8), np.float32))\nfor e in range(100):\n    for s in range(1000):\n" \
           "        net(x)\n"
    path.write_text(P.HOSTILE_CELL + "\n".join(P.HOSTILE) + "\n" + loop)
    uri = open_doc(client, path)
    lenses = await client.text_document_code_lens_async(types.CodeLensParams(types.TextDocumentIdentifier(uri)))
    assert [lens.command.arguments[1] for lens in lenses] == ["Net"]
    res = await request(client, "msvm/bytecode", {"uri": uri, "cell": "Net", "fused": False})
    assert field(res, "instructions")
    got = await diagnostics_for(client, uri, lambda d: any("not evaluated" in x.message for x in d))
    assert all(d.severity == INFO for d in got)


async def test_a_document_cannot_make_the_server_connect_out(client, tmp_path):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    target = tmp_path / "written.txt"
    path = tmp_path / "effects.py"
    path.write_text(P.HOSTILE_CELL + f"import msvm.telemetry\nt = msvm.telemetry.Telemetry('tcp:127.0.0.1:{port}#x')\n"
                                     f"open({str(target)!r}, 'w').write('x')\n")
    try:
        uri = open_doc(client, path)
        lenses = await client.text_document_code_lens_async(types.CodeLensParams(types.TextDocumentIdentifier(uri)))
        assert [lens.command.arguments[1] for lens in lenses] == ["Net"]     # the analysis has run
        srv.setblocking(False)
        with pytest.raises(BlockingIOError):
            srv.accept()
    finally:
        srv.close()
    assert not target.exists()


async def test_kinds_from_use_and_a_sub_cell_mismatch_at_the_parents_call(client, tmp_path):
    path = tmp_path / "uses.py"
    path.write_text(P.USES)
    uri = open_doc(client, path)
    lenses = await client.text_document_code_lens_async(types.CodeLensParams(types.TextDocumentIdentifier(uri)))
    assert sorted(lens.command.arguments[1] for lens in lenses) == ["Block", "Parent", "Tok"]
    res = await request(client, "msvm/bytecode", {"uri": uri, "cell": "Tok", "fused": False})
    assert "ids: Tensor[int32, [ids0,ids1]], n: int(n), use_bias: bool(use_bias)" in field(res, "text")
    got = await diagnostics_for(client, uri, lambda d: any("int ids" in x.message for x in d))
    assert all(d.severity == INFO for d in got), [(d.severity, d.message) for d in got]

    bad = tmp_path / "mismatch.py"
    bad.write_text(P.USES_MISMATCH)
    uri = open_doc(client, bad)
    errors = await diagnostics_for(client, uri, lambda d: any(x.severity == ERROR for x in d))
    (d,) = [x for x in errors if x.severity == ERROR]
    assert "[x0*x1,512] @ [10,768]" in d.message
    line = P.USES_MISMATCH.splitlines()[d.range.start.line]
    assert line[d.range.start.character:d.range.end.character] == "self.block(x)"


async def test_mindcv_vit_through_the_server(client):
    import importlib.util
    import pathlib

    spec = importlib.util.find_spec("mindcv")
    if spec is None:
        pytest.fail("mindcv is not installed: `make` installs it (pip install --no-deps mindcv==0.3.0)")
    path = pathlib.Path(spec.submodule_search_locations[0]) / "models" / "vit.py"
    uri = open_doc(client, path)
    res = await request(client, "msvm/bytecode", {"uri": uri, "cell": "VisionTransformer", "fused": False})
    assert "x: Tensor[float32, [x0,3,x2,x3]]" in field(res, "text")
