"""``python -m msvm_server lsp``: the msvm language server (pygls, stdio).

Features (each a thin handler over ``analysis``):

- code lenses "View MS Bytecode" (command ``msvm.viewBytecode`` with [uri, name])
- ``msvm/bytecode {uri, cell?, position?, fused?}`` -> instructions with source ranges
- diagnostics from the frontend and verifier, debounced while typing
- hover: a name's symbolic shape and dtype
- ``msvm/telemetry`` notification (and request) with the address programs stream to;
  ``msvm/cacheStats`` and ``msvm/profile`` notifications from those programs
- ``msvm/runProfile {uri}`` runs the file under ``msvm profile`` in a subprocess, only
  when the client said the workspace is trusted (``initializationOptions.workspaceTrusted``
  or ``msvm/setTrusted {trusted}``)

Static analysis runs on one worker thread so the server keeps answering while a
large file is analyzed; nothing of the user's code is executed except by runProfile.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import signal
import sys
import tempfile

from lsprotocol import types
from lsprotocol.converters import get_converter
from pygls.exceptions import JsonRpcException
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path

from .. import __version__
from . import analysis as A
from .telemetry import TelemetryHub

DEBOUNCE_S = 0.25
PROFILE_TIMEOUT_S = 120.0
_conv = get_converter()


class NotTrusted(JsonRpcException):
    CODE = -32001


class MsvmLanguageServer(LanguageServer):
    def __init__(self):
        # Full sync: pygls applies incremental edits by str.splitlines, which also breaks
        # lines at U+2028, \x0c, \x85..., so an edit below such a character lands elsewhere
        super().__init__("msvm-lsp", __version__, text_document_sync_kind=types.TextDocumentSyncKind.Full)
        self.analyses: dict = {}           # uri -> Analysis of the latest text
        self.pending: dict = {}            # uri -> debounce task
        self.pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="msvm-analysis")
        self.trusted = False
        self.fusion = True
        self.profile_timeout = PROFILE_TIMEOUT_S
        self.hub = TelemetryHub(self.on_telemetry)
        self.last_stats: dict | None = None
        self.hub_ready = asyncio.Event()

    # --- documents
    def source_of(self, uri: str) -> tuple:
        doc = self.workspace.get_text_document(uri)
        return doc.source, (to_fs_path(uri) or uri)

    async def analysis(self, uri: str) -> A.Analysis:
        source, path = self.source_of(uri)
        cached = self.analyses.get(uri)
        digest = A.digest(source)
        if cached is not None and cached.digest == digest:
            return cached
        a = await asyncio.get_running_loop().run_in_executor(self.pool, A.analyze, source, path)
        if a.error is not None and not a.entries and cached is not None:
            a.entries = cached.entries     # mid-typing syntax error: keep the last lenses and bytecode
        self.analyses[uri] = a
        return a

    def schedule(self, uri: str, delay: float = DEBOUNCE_S):
        old = self.pending.pop(uri, None)
        if old is not None:
            old.cancel()
        self.pending[uri] = asyncio.ensure_future(self._publish_later(uri, delay))

    async def _publish_later(self, uri: str, delay: float):
        try:
            await asyncio.sleep(delay)
            a = await self.analysis(uri)
        except (asyncio.CancelledError, KeyError):
            return
        except Exception as e:  # noqa: BLE001 - the server outlives any analysis failure
            self.window_log_message(types.LogMessageParams(types.MessageType.Error, f"[MS] analysis failed: {e}"))
            return
        self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(
            uri=uri, diagnostics=[_conv.structure(d, types.Diagnostic) for d in A.diagnostics(a)]))

    # --- telemetry
    def on_telemetry(self, program: dict, msg: dict):
        kind = msg.get("type")
        if kind == "stats":
            s = msg.get("stats") or {}
            self.last_stats = {"pid": program.get("pid"), "script": program.get("script"),
                               "hits": s.get("hits", 0), "misses": s.get("misses", 0),
                               "rate": s.get("hit_rate", 0.0), "compiles": s.get("compiles", 0),
                               "disk_loads": s.get("disk_loads", 0), "recent": s.get("recent", [])}
            self.protocol.notify("msvm/cacheStats", self.last_stats)
        elif kind == "profile":
            self.protocol.notify("msvm/profile", {"pid": program.get("pid"), "script": program.get("script"),
                                                  "profile": msg.get("profile")})
        elif kind == "event":
            ev = msg.get("event") or {}
            if ev.get("type") in ("compile", "error"):
                self.protocol.notify("msvm/jitEvent", dict(ev, pid=program.get("pid")))


server = MsvmLanguageServer()


@server.feature(types.INITIALIZE)
def on_initialize(ls: MsvmLanguageServer, params: types.InitializeParams):
    opts = params.initialization_options or {}
    if isinstance(opts, dict):
        ls.trusted = bool(opts.get("workspaceTrusted", False))
        ls.fusion = bool(opts.get("enableFusion", True))
        ls.profile_timeout = float(opts.get("profileTimeout", PROFILE_TIMEOUT_S))


@server.feature(types.INITIALIZED)
async def on_initialized(ls: MsvmLanguageServer, params):
    try:
        address = await ls.hub.start()
    except OSError as e:
        ls.window_log_message(types.LogMessageParams(types.MessageType.Warning,
                                                     f"[MS] no telemetry channel: {e}"))
        return
    finally:
        ls.hub_ready.set()
    ls.protocol.notify("msvm/telemetry", {"address": address, "env": {"MSVM_TELEMETRY": address}})


@server.feature(types.SHUTDOWN)
def on_shutdown(ls: MsvmLanguageServer, params):
    ls.hub.close()


@server.feature(types.TEXT_DOCUMENT_DID_OPEN)
def did_open(ls: MsvmLanguageServer, params: types.DidOpenTextDocumentParams):
    ls.schedule(params.text_document.uri, 0.0)


@server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
def did_change(ls: MsvmLanguageServer, params: types.DidChangeTextDocumentParams):
    ls.schedule(params.text_document.uri)


@server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
def did_close(ls: MsvmLanguageServer, params: types.DidCloseTextDocumentParams):
    uri = params.text_document.uri
    task = ls.pending.pop(uri, None)
    if task is not None:
        task.cancel()
    ls.analyses.pop(uri, None)
    ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))


@server.feature(types.TEXT_DOCUMENT_CODE_LENS)
async def code_lens(ls: MsvmLanguageServer, params: types.CodeLensParams):
    uri = params.text_document.uri
    a = await ls.analysis(uri)
    return [_conv.structure(d, types.CodeLens) for d in A.code_lenses(a, uri)]


@server.feature(types.TEXT_DOCUMENT_HOVER)
async def hover(ls: MsvmLanguageServer, params: types.HoverParams):
    a = await ls.analysis(params.text_document.uri)
    h = A.hover(a, params.position.line, params.position.character)
    return _conv.structure(h, types.Hover) if h else None


def _get(params, name, default=None):
    if params is None:
        return default
    if isinstance(params, dict):
        return params.get(name, default)
    return getattr(params, name, default)


@server.feature("msvm/bytecode")
async def bytecode(ls: MsvmLanguageServer, params):
    uri = _get(params, "uri")
    if not uri:
        raise JsonRpcException("msvm/bytecode needs a uri", code=-32602)
    a = await ls.analysis(uri)
    pos = _get(params, "position")
    line0 = _get(pos, "line") if pos is not None else None
    fused = _get(params, "fused")
    return A.bytecode(a, _get(params, "cell"), line0, ls.fusion if fused is None else bool(fused))


@server.feature("msvm/telemetry")
async def telemetry_address(ls: MsvmLanguageServer, params):
    try:
        await asyncio.wait_for(ls.hub_ready.wait(), 10)
    except asyncio.TimeoutError:
        pass
    return {"address": ls.hub.address, "stats": ls.last_stats}


@server.feature("msvm/setTrusted")
def set_trusted(ls: MsvmLanguageServer, params):
    ls.trusted = bool(_get(params, "trusted", False))


@server.feature("msvm/runProfile")
async def run_profile(ls: MsvmLanguageServer, params):
    """Run the file under ``msvm profile`` (trusted workspaces only); returns its profile."""
    if not ls.trusted:
        raise NotTrusted("the workspace is not trusted: msvm does not run its code")
    uri = _get(params, "uri")
    path = to_fs_path(uri) if uri else None
    if not path or not os.path.isfile(path):
        raise JsonRpcException(f"no such file: {uri}", code=-32602)
    timeout = float(_get(params, "timeout", ls.profile_timeout))
    with tempfile.TemporaryDirectory(prefix="msvm-profile-") as d:
        out = os.path.join(d, "profile.json")
        env = dict(os.environ)
        extra = _get(params, "env") or {}
        items = extra.items() if isinstance(extra, dict) else extra._asdict().items()
        env.update({str(k): str(v) for k, v in items if str(k).startswith("MSVM_")})   # only msvm's own settings
        if ls.hub.address:
            env["MSVM_TELEMETRY"] = ls.hub.address
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "msvm", "profile", "--json", out, path, cwd=os.path.dirname(path), env=env,
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            start_new_session=True)         # its own process group: a timeout ends what it started too
        try:
            stdout, stderr = await asyncio.wait_for(proc.communicate(), timeout)
        except asyncio.TimeoutError:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                proc.kill()
            await proc.wait()
            return {"status": None, "error": f"{os.path.basename(path)} ran past {timeout:g}s and was stopped",
                    "profile": None}
        report = None
        if os.path.exists(out):
            try:
                with open(out, encoding="utf-8") as f:
                    report = json.load(f)
            except (OSError, ValueError):
                report = None
        tail = stderr.decode(errors="replace")[-4000:]
        result = {"status": proc.returncode, "profile": report, "stdout": stdout.decode(errors="replace")[-4000:],
                  "stderr": tail}
        if proc.returncode != 0:
            lines = [x for x in tail.strip().splitlines() if not x.startswith("msvm: wrote ")]
            why = (report or {}).get("error") or (lines[-1] if lines else "")
            result["error"] = f"{os.path.basename(path)} exited with status {proc.returncode}: {why}"
        if report is not None:
            ls.protocol.notify("msvm/profile", {"pid": proc.pid, "script": path, "profile": report})
        return result


def main() -> int:
    server.start_io()
    return 0
