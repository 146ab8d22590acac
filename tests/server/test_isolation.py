"""Neither server imports anything from the workspace, started exactly as the extension
starts them (its argument list is read from extension/src/server-command.json), and the
debugged program still sees its own directory as ``python PROGRAM`` would.

The servers run in a venv whose site-packages holds this checkout (as an installed msvm
would be), so ``-I`` can do what it does for users: ignore PYTHONPATH."""

import json
import os
import pathlib
import subprocess
import sys
import sysconfig

import pytest
from paths import ROOT
from stdio_client import Framed, env_without_python_vars

COMMAND = json.loads((pathlib.Path(ROOT) / "extension" / "src" / "server-command.json").read_text())

# named like the standard library's, numpy's, msvm's and the servers' own modules
SHADOWS = ["hashlib", "tempfile", "json", "asyncio", "os", "numpy", "msvm", "msvm_server", "pygls", "lsprotocol",
           "site", "sitecustomize", "usercustomize", "encodings", "runpy", "socket", "threading", "subprocess",
           "secrets", "shutil", "signal", "typing", "re", "ast", "linecache", "struct", "ctypes", "llvmlite",
           "cupy", "attrs", "cattrs", "logging", "inspect", "dataclasses", "importlib", "operator", "math",
           "random", "string", "selectors", "queue", "uuid", "platform", "contextlib", "functools", "enum",
           "traceback", "warnings", "io", "abc", "codecs", "copy", "weakref", "pathlib", "urllib", "zipfile"]
# what `python -m msvm_server` has imported (from the cwd, first on sys.path) before main() runs
BEFORE_MAIN = {"msvm_server", "runpy", "importlib", "contextlib", "functools", "abc", "codecs", "collections", "enum",
               "io", "operator", "os", "pathlib", "re", "types", "urllib", "warnings", "encodings", "site", "copyreg"}
PACKAGES = {"encodings", "msvm", "msvm_server", "numpy", "asyncio", "importlib", "json", "pygls", "urllib"}

CELL = '''import msvm as ms
from msvm import nn, ops


class Block(nn.Cell):
    def construct(self, x: "B, 8"):
        return ops.relu(x) * 2.0
'''


@pytest.fixture(scope="session")
def installed_python(tmp_path_factory):
    """A venv with this checkout's msvm and msvm_server (and the test venv's libraries) installed."""
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    purelib = subprocess.run([py, "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    libs = sysconfig.get_paths()["purelib"]
    pathlib.Path(purelib, "msvm_checkout.pth").write_text(
        "\n".join([os.path.join(ROOT, "vm"), os.path.join(ROOT, "server"), libs]) + "\n")
    return py


def hostile_workspace(root: pathlib.Path, names=SHADOWS):
    """A folder full of modules that each leave a marker file when imported."""
    ws, markers = root / "ws", root / "markers"
    ws.mkdir()
    markers.mkdir()
    for name in names:
        code = f"open({str(markers / name)!r}, 'w').close()\n"
        if name in PACKAGES:
            (ws / name).mkdir()
            (ws / name / "__init__.py").write_text(code)
            (ws / name / "__main__.py").write_text(code)
        else:
            (ws / f"{name}.py").write_text(code)
    (ws / "startup.py").write_text(f"open({str(markers / 'PYTHONSTARTUP')!r}, 'w').close()\n")
    (ws / "cells.py").write_text(CELL)
    return ws, markers


def workspace_env(ws):
    """The environment a careless shell gives the editor: PYTHONPATH and PYTHONSTARTUP into the workspace."""
    return env_without_python_vars(PYTHONPATH=f"{ws}{os.pathsep}.{os.pathsep}", PYTHONSTARTUP=str(ws / "startup.py"),
                                   PYTHONINSPECT="", MSVM_CACHE_DIR=str(ws.parent / "kernels"))


def lsp_round_trip(server: Framed, ws):
    uri = (ws / "cells.py").as_uri()
    server.lsp_request("initialize", {"processId": None, "rootUri": ws.as_uri(), "capabilities": {},
                                      "workspaceFolders": [{"uri": ws.as_uri(), "name": "ws"}],
                                      "initializationOptions": {"workspaceTrusted": False}})
    server.lsp_notify("initialized", {})
    server.lsp_notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1,
                                                                "text": CELL}})
    res = server.lsp_request("msvm/bytecode", {"uri": uri, "cell": "Block"})
    assert [i["op"] for i in res["instructions"]][:2] == ["LOAD_TENSOR", "RELU"] or res["instructions"], res
    lenses = server.lsp_request("textDocument/codeLens", {"textDocument": {"uri": uri}})
    assert [lens["command"]["arguments"][1] for lens in lenses] == ["Block"]
    server.lsp_request("shutdown", None)
    server.lsp_notify("exit", None)


def test_language_server_imports_nothing_from_the_workspace(installed_python, tmp_path):
    ws, markers = hostile_workspace(tmp_path)
    # the cwd is the workspace here (the extension uses its storage folder): the flags alone must hold
    server = Framed([installed_python, *COMMAND["lsp"]], cwd=ws, env=workspace_env(ws))
    try:
        lsp_round_trip(server, ws)
    finally:
        server.close()
    assert sorted(os.listdir(markers)) == []


def test_started_without_isolation_the_server_still_drops_its_cwd(installed_python, tmp_path):
    """``python -m`` puts the cwd first before any of msvm_server runs: only the launch flags keep
    msvm_server itself, runpy and what runpy imports from there; main() keeps everything after."""
    ws, markers = hostile_workspace(tmp_path, [n for n in SHADOWS if n not in BEFORE_MAIN])
    server = Framed([installed_python, "-m", "msvm_server", "lsp"], cwd=ws,
                    env=env_without_python_vars(MSVM_CACHE_DIR=str(tmp_path / "kernels")))
    try:
        lsp_round_trip(server, ws)
    finally:
        server.close()
    assert sorted(os.listdir(markers)) == []


PROGRAM = '''import os
import sys

import helper
import msvm as ms
import numpy as np
from msvm import nn, ops


class Block(nn.Cell):
    def construct(self, x):
        return ops.relu(x) * 2.0


out = Block()(ms.Tensor(np.ones((2, 4), np.float32)))
print("PATH0", sys.path[0])
print("CWD_ON_PATH", any(os.path.realpath(p or ".") == os.path.realpath(os.getcwd()) for p in sys.path))
print("HELPER", helper.VALUE, float(out.asnumpy().sum()))
'''


def launch_and_finish(adapter: Framed, program, cwd):
    adapter.dap_request("initialize", {"adapterID": "msvm", "linesStartAt1": True, "columnsStartAt1": True})
    adapter.dap_request("launch", {"program": str(program), "cwd": str(cwd), "jitLevel": "L1"})
    adapter.dap_event("initialized")
    adapter.dap_request("setBreakpoints", {"source": {"path": str(program)}, "breakpoints": []})
    adapter.dap_request("configurationDone")
    code = adapter.dap_event("exited", timeout=120)["body"]["exitCode"]
    adapter.dap_event("terminated")
    out = "".join(m["body"]["output"] for m in adapter.seen
                  if m.get("event") == "output" and m["body"].get("category") == "stdout")
    err = "".join(m["body"]["output"] for m in adapter.seen
                  if m.get("event") == "output" and m["body"].get("category") == "stderr")
    adapter.dap_request("disconnect")
    return code, out, err


def test_debug_adapter_and_debuggee_import_nothing_from_the_workspace(installed_python, tmp_path):
    ws, markers = hostile_workspace(tmp_path)
    prog_dir = ws / "prog"
    prog_dir.mkdir()
    (prog_dir / "helper.py").write_text("VALUE = 42\n")
    program = prog_dir / "main.py"
    program.write_text(PROGRAM)
    env = dict(env_without_python_vars(MSVM_CACHE_DIR=str(tmp_path / "kernels")), PYTHONSTARTUP=str(ws / "startup.py"))
    adapter = Framed([installed_python, *COMMAND["dap"]], cwd=ws, env=env)
    try:
        code, out, err = launch_and_finish(adapter, program, cwd=ws)
    finally:
        adapter.close()
    assert code == 0, err
    assert f"PATH0 {prog_dir}" in out, "the program's own directory comes first, as with `python main.py`"
    assert "CWD_ON_PATH False" in out, "the cwd is not on the program's sys.path, as with `python main.py`"
    assert "HELPER 42 16.0" in out
    assert sorted(os.listdir(markers)) == []


def test_debuggee_imports_modules_next_to_the_program(installed_python, tmp_path):
    """A module next to the program is the program's to import, as with `python main.py`, even
    when its name is a standard module's that msvm itself has not imported."""
    prog_dir = tmp_path / "proj"
    prog_dir.mkdir()
    (prog_dir / "helper.py").write_text("VALUE = 42\n")
    (prog_dir / "colorsys.py").write_text("MINE = True\n")
    program = prog_dir / "main.py"
    program.write_text(PROGRAM.replace("import helper\n", "import colorsys\nimport helper\n")
                       .replace('print("HELPER"', 'print("MINE", colorsys.MINE)\nprint("HELPER"'))
    adapter = Framed([installed_python, *COMMAND["dap"]], cwd=tmp_path,
                     env=env_without_python_vars(MSVM_CACHE_DIR=str(tmp_path / "kernels")))
    try:
        code, out, err = launch_and_finish(adapter, program, cwd=tmp_path)
    finally:
        adapter.close()
    assert code == 0, err
    assert "MINE True" in out and "HELPER 42 16.0" in out
    assert f"PATH0 {prog_dir}" in out
