"""What the language server knows about one document, as pure functions.

``analyze(source, path)`` compiles the document's Cells and jit functions statically
(``msvm.static``: nothing of the user's runs) and returns an ``Analysis``; the server's
handlers are thin wrappers over ``code_lenses``, ``bytecode``, ``diagnostics`` and
``hover``. Positions: msvm's Loc has 1-based lines and 0-based *UTF-8 byte* columns
(Python's ast); LSP has 0-based lines and UTF-16 columns. ``Lines`` converts. Lines
end where both LSP and Python's tokenizer end them: at ``\n``, ``\r\n`` and ``\r`` only
(not at U+2028, U+2029, ``\x0c``, ``\x85``... where ``str.splitlines`` would).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

from msvm.bytecode import dump
from msvm.bytecode.disasm import records
from msvm.errors import MsvmError, SourceError
from msvm.static import analyze as static_analyze

SEVERITY_ERROR, SEVERITY_WARNING, SEVERITY_INFO = 1, 2, 3


_EOL = re.compile(r"\r\n|\r|\n")
_SURROGATE = re.compile("[\ud800-\udfff]")


def clean(source: str) -> str:
    """The document's text with each lone surrogate (which no UTF-8 encoder takes, and
    JSON can carry) replaced by U+FFFD: one UTF-16 unit for one, so no position moves."""
    if not _SURROGATE.search(source):
        return source
    return source.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def digest(source: str) -> str:
    return hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()


def split_lines(source: str) -> list:
    """The document's lines as LSP numbers them (``\n``, ``\r\n``, ``\r``)."""
    return _EOL.split(source)


class Lines:
    """Column conversion between Python byte offsets and LSP UTF-16 offsets."""

    def __init__(self, source: str):
        self.lines = split_lines(clean(source))

    def _line(self, line0: int) -> str:
        return self.lines[line0] if 0 <= line0 < len(self.lines) else ""

    def to_lsp(self, line1: int, col_bytes: int) -> dict:
        text = self._line(line1 - 1)
        chars = text.encode("utf-8")[:max(0, col_bytes)].decode("utf-8", errors="ignore")
        return {"line": max(0, line1 - 1), "character": len(chars.encode("utf-16-le")) // 2}

    def from_lsp(self, line0: int, character: int) -> tuple:
        """(1-based line, byte column)."""
        text = self._line(line0)
        units = text.encode("utf-16-le")[:2 * max(0, character)].decode("utf-16-le", errors="ignore")
        return line0 + 1, len(units.encode("utf-8"))

    def range(self, loc) -> dict:
        """An LSP range from a Loc (or its [line, col, end_line, end_col] list)."""
        line, col, end_line, end_col = (loc.line, loc.col, loc.end_line, loc.end_col) if hasattr(loc, "line") else loc
        if line <= 0:
            return {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}}
        return {"start": self.to_lsp(line, col), "end": self.to_lsp(end_line or line, end_col)}


@dataclass
class Analysis:
    path: str
    lines: Lines
    entries: list = field(default_factory=list)
    error: MsvmError | None = None      # the whole file failed (a syntax error)
    digest: str = ""
    notes: list = field(default_factory=list)   # what the analysis assumed or could not afford

    def entry(self, name: str | None = None, line0: int | None = None):
        for e in self.entries:
            if name is not None and e.name == name:
                return e
        if line0 is not None:
            for e in self.entries:
                if e.line - 1 <= line0 <= (e.end_line or e.line) - 1:
                    return e
        if name is None and line0 is None and self.entries:
            return self.entries[0]
        return None


def analyze(source: str, path: str) -> Analysis:
    """Never raises for bad user code: errors become part of the Analysis."""
    a = Analysis(path, Lines(source), digest=digest(source))
    source = clean(source)
    try:
        a.entries = static_analyze(source, path)
        a.notes = list(getattr(a.entries, "notes", [])) + [n for e in a.entries for n in e.notes]
    except MsvmError as e:
        a.error = e
    except RecursionError:
        a.error = SourceError("the file nests too deeply to analyze", path, 1, 0)
    except (Exception, SystemExit) as e:  # noqa: BLE001 - a bug in the analysis must not end the server
        a.error = SourceError(f"msvm could not analyze this file ({type(e).__name__}: {e})", path, 1, 0)
    return a


def code_lenses(a: Analysis, uri: str) -> list:
    return [{"range": {"start": {"line": e.line - 1, "character": 0}, "end": {"line": e.line - 1, "character": 0}},
             "command": {"title": "View MS Bytecode", "command": "msvm.viewBytecode",
                         "arguments": [uri, e.name]}} for e in a.entries]


def _fused(code, fused: bool):
    if not fused:
        return code
    from msvm.compiler.fuse import fuse

    return fuse(code)


def instructions(code, lines: Lines) -> list:
    out = []
    for r in records(code):
        out.append({
            "offset": r.offset, "op": r.op, "args": [_plain(v) for v in r.args], "argrepr": r.argrepr,
            "stackDepth": r.stack_depth, "type": r.out_type, "range": lines.range(r.loc),
            "line": r.loc.line,
            "parts": [{"op": p, "range": lines.range(pl)} for p, pl in r.parts],
        })
    return out


def _plain(v):
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    return str(v)


def bytecode(a: Analysis, cell: str | None = None, line0: int | None = None, fused: bool = True) -> dict:
    """The msvm/bytecode result: the Cell's instructions with their 0-based source ranges."""
    e = a.entry(cell, line0)
    if e is None:
        names = ", ".join(x.name for x in a.entries) or "none"
        why = str(a.error) if a.error else f"no Cell or jit function {'named ' + repr(cell) if cell else 'here'} " \
                                           f"(this file has: {names})"
        return {"cell": cell, "instructions": [], "text": "", "error": why, "cells": [x.name for x in a.entries]}
    if e.code is None:
        return {"cell": e.name, "instructions": [], "text": "", "error": str(e.error),
                "cells": [x.name for x in a.entries]}
    try:
        code = _fused(e.code, fused)
    except MsvmError:
        code = e.code
    functions = [{"name": c.name, "instructions": instructions(c, a.lines)} for c in code.all_codes() if c is not code]
    return {"cell": e.name, "name": code.name, "instructions": instructions(code, a.lines),
            "text": dump(code, with_callees=True), "functions": functions, "fused": code is not e.code,
            "cells": [x.name for x in a.entries]}


def diagnostics(a: Analysis) -> list:
    errs = [a.error] if a.error is not None else [e.error for e in a.entries if e.error is not None]
    out = []
    for err in errs:
        if isinstance(err, SourceError):
            line, col = max(1, err.line), max(0, err.col)
            end_line = err.end_line if err.end_line and err.end_line >= line else line
            end_col = err.end_col if (end_line > line or err.end_col > col) else col + 1
            rng = a.lines.range((line, col, end_line, end_col))
            msg = err.message
        else:
            rng, msg = a.lines.range((1, 0, 1, 1)), str(err)
        known = getattr(err, "certain", True)     # (msvm.static.AssumedShapeError: found under assumed shapes)
        out.append({"range": rng, "message": msg, "source": "msvm",
                    "severity": SEVERITY_ERROR if known else SEVERITY_INFO,
                    "code": type(err).__name__.lstrip("_")})
    for n in a.notes:       # assumed shapes and values, loops and values the analysis did not afford
        line = max(1, n.line)
        out.append({"range": a.lines.range((line, 0, line, len(a.lines._line(line - 1).encode()))),
                    "message": n.message, "source": "msvm", "severity": SEVERITY_INFO, "code": "note"})
    return out


def hover(a: Analysis, line0: int, character: int) -> dict | None:
    """The innermost named value at the position: ``x: Tensor[float32, (B, 1024)]``."""
    line1, col = a.lines.from_lsp(line0, character)
    best = None
    for e in a.entries:
        if e.code is None:
            continue
        for c in e.code.all_codes():
            for loc, name, t in c.hover:
                if loc.line == line1 and loc.col <= col <= max(loc.end_col, loc.col + 1) and loc.end_line == line1:
                    if best is None or (loc.end_col - loc.col) < (best[0].end_col - best[0].col):
                        best = (loc, name, t)
    if best is None:
        return None
    loc, name, t = best
    desc = t.describe() if hasattr(t, "describe") else repr(t)
    return {"contents": {"kind": "markdown", "value": f"```python\n{name}: {desc}\n```"}, "range": a.lines.range(loc)}
