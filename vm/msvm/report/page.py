"""The self-contained HTML page of a profile (``msvm profile --html``), rendered here.

Everything in a report came from a program (Cell, file and op names, operands, dtypes,
cache keys, error messages), so every value goes through ``esc`` (``html.escape``) on its
way into the page, numbers included: a field of the wrong type is shown as text. The page
runs no script: its CSP is ``default-src 'none'`` plus the hash of its one stylesheet, and
the heat colours and bar widths are classes that stylesheet defines. The report itself is
kept in the page as inert JSON (``#profile-data``) for tools.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
from importlib.resources import files

COMPILE_RGB, EXEC_RGB = "228,87,46", "59,125,216"


def esc(v) -> str:
    """Any value as escaped text (None as nothing)."""
    return "" if v is None else html.escape(str(v), quote=True)


def _num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and abs(v) != float("inf")


def fixed(v, digits: int) -> str:
    return f"{v:.{digits}f}" if _num(v) else esc(v)


def _json(v) -> str:
    return esc(json.dumps(v, default=str))


def _list(v) -> list:
    return v if isinstance(v, list) else []


def _first(v):
    return v[0] if isinstance(v, list) and v else None


def _dict(v) -> dict:
    return v if isinstance(v, dict) else {}


class _Styles:
    """The classes the page uses for heat and bar widths, and the rules that define them."""

    def __init__(self):
        self.rules: dict = {}

    def heat(self, share, rgb: str, prefix: str) -> str:
        alpha = min(0.85, share * 1.5) if _num(share) and share > 0 else 0.0
        name = f"{prefix}{round(alpha * 100)}"
        self.rules[name] = f".{name}{{background:rgba({rgb},{round(alpha * 100) / 100})}}"
        return name

    def width(self, px: int) -> str:
        name = f"w{px}"
        self.rules[name] = f".{name}{{width:{px}px}}"
        return name

    def css(self) -> str:
        return "".join(self.rules[k] for k in sorted(self.rules))


def _code(c: dict, st: _Styles) -> list:
    label = f" · {esc(c.get('label'))}" if c.get("label") else ""     # (which Code of that name: profile.py)
    out = [f"<h2><code>{esc(c.get('name'))}</code> <span class='muted'>{esc(c.get('file') or '')}:{esc(c.get('line'))}"
           f"{label} · {esc(c.get('calls'))} calls</span></h2>",
           *_variants(_list(c.get("variants"))),
           "<table><tr><th>offset</th><th>instruction</th><th>operands</th><th>line</th><th>compile</th><th>exec</th>"
           "<th>tiers</th><th>why</th></tr>"]
    mp = c.get("memory_plan")
    if isinstance(mp, dict):        # (compiler/memplan.py)
        held = (f"; its arena held {esc(mp.get('arena_bytes'))} bytes, one buffer per value "
                f"{esc(mp.get('unplanned_bytes'))}" if "arena_bytes" in mp else "")
        slots = ", ".join(f"buf{esc(s.get('slot'))} {esc(s.get('bytes'))}" for s in map(_dict, _list(mp.get("slots"))))
        out.insert(1, f"<p class='muted'>Memory plan: {esc(mp.get('buffers'))} buffers for {esc(mp.get('values'))} "
                      f"values, peak <code>{esc(mp.get('peak'))}</code> bytes{held}<br><code>{slots}</code></p>")
    for i in map(_dict, _list(c.get("instructions"))):
        parts = ", ".join(f"{esc(p.get('op'))} @{esc(_first(p.get('loc')))}" for p in map(_dict, _list(i.get("parts"))))
        tiers = "<br>".join(f"L{esc(t.get('level'))}{'(disk)' if t.get('source') == 'disk' else ''}"
                            f"@{fixed(t.get('t_ms'), 0)}ms {_json(t.get('shape'))} {esc(t.get('reason_kind'))}"
                            for t in map(_dict, _list(i.get("tiers"))))
        why = "<br>".join([f"{esc(t.get('reason_kind'))}: {esc(t.get('reason'))}" for t in map(_dict, _list(i.get("tiers")))]
                          + [f"miss ×{esc(m.get('count'))} L{esc(m.get('level'))} {esc(m.get('reason_kind'))}: "
                             f"{esc(m.get('reason'))}" for m in map(_dict, _list(i.get("misses")))]
                          + [f"L1 {esc(m.get('reason_kind'))}: {esc(m.get('reason'))}"
                             for m in map(_dict, _list(i.get("l1")))])
        compile_ms, exec_ns = i.get("compile_ms"), i.get("exec_ns")
        exec_text = (f"{exec_ns / 1e3:.1f}" if _num(exec_ns) else esc(exec_ns)) + " µs" if exec_ns else ""
        out.append(
            f"<tr><td class='n mono'>{esc(i.get('offset'))}</td>"
            f"<td class='mono'>{esc(i.get('op'))}{f'<div class=muted>{parts}</div>' if parts else ''}</td>"
            f"<td class='mono'>{esc(i.get('argrepr'))}</td><td class='n'>{esc(_first(i.get('loc')))}</td>"
            f"<td class='n {st.heat(i.get('compile_share'), COMPILE_RGB, 'hc')}'>"
            f"{fixed(compile_ms, 2) + ' ms' if compile_ms else ''}</td>"
            f"<td class='n {st.heat(i.get('exec_share'), EXEC_RGB, 'he')}'>{exec_text}</td>"
            f"<td class='mono'>{tiers}</td><td>{why}</td></tr>")
    out.append("</table>")
    return out


def _why_error(e: dict) -> str:
    """An error's reason (kind: sentence, msvm.reasons) where it has one, else its ``why``."""
    kind = e.get("reason_kind")
    return f"{esc(kind)}: {esc(e.get('reason'))}" if kind else esc(e.get("why"))


def _variants(variants: list) -> list:
    """Why each bytecode variant of a Code was compiled."""
    rows = [f"<li>variant {esc(v.get('variant'))} ({fixed(v.get('compile_ms'), 2)} ms) "
            f"<code>{esc(v.get('reason_kind'))}</code>: {esc(v.get('reason'))}</li>" for v in map(_dict, variants)]
    return ["<ul class='muted'>" + "".join(rows) + "</ul>"] if rows else []


def _steps(steps: dict, st: _Styles) -> list:
    top = max([v for v in steps.values() if _num(v)] + [1e-9])
    out = ["<h2>Compile time by step</h2><table>"]
    for k, v in steps.items():
        px = round(200 * max(0.0, v) / top) if _num(v) else 0
        out.append(f"<tr><td>{esc(k)}</td><td class='n'>{fixed(v, 3)} ms</td>"
                   f"<td><span class='bar {st.width(px)}'></span></td></tr>")
    out.append("</table>")
    return out


def _compiles(compiles: list) -> list:
    out = ["<h2>Tier history</h2><table>"
           "<tr><th>t</th><th>region</th><th>tier</th><th>shape</th><th>how</th><th>ms</th><th>why</th></tr>"]
    t0 = compiles[0].get("time") if compiles else 0
    for c in compiles:
        t = c.get("time")
        when = f"{(t - t0) * 1e3:.1f} ms" if _num(t) and _num(t0) else esc(t)
        out.append(f"<tr><td class='n'>{when}</td><td class='mono'>{esc(c.get('code'))} @{esc(c.get('offset'))} "
                   f"{esc(c.get('op'))}</td><td>L{esc(c.get('level'))}</td><td class='mono'>{_json(c.get('shape'))} "
                   f"{esc(c.get('dtype'))}</td><td>{esc(c.get('source'))}</td>"
                   f"<td class='n'>{fixed(c.get('ms'), 2)}</td><td>{esc(c.get('reason_kind'))}: "
                   f"{esc(c.get('reason'))}</td></tr>")
    out.append("</table>")
    return out


def _cache(cache: dict) -> list:
    out = [f"<h2>Kernel cache</h2><p>{esc(cache.get('hits'))} hits, {esc(cache.get('misses'))} misses, "
           f"{esc(cache.get('compiles'))} compiled, {esc(cache.get('disk_loads'))} loaded from disk</p>",
           "<table><tr><th>key</th><th>kernel</th><th>shape</th><th>dtype</th><th>from</th><th>why</th></tr>"]
    for r in map(_dict, _list(cache.get("recent"))):
        out.append(f"<tr><td class='key'>{esc(r.get('key'))}</td><td class='mono'>{esc(r.get('op'))}</td>"
                   f"<td class='mono'>{_json(r.get('shape'))}</td><td>{esc(r.get('dtype'))}</td>"
                   f"<td>{esc(r.get('source'))}</td><td>{esc(r.get('reason_kind'))}: {esc(r.get('reason'))}</td></tr>")
    out.append("</table>")
    return out


def _data(report: dict) -> str:
    """The report as JSON that no HTML parser can end early: <, > and & are JSON escapes."""
    text = json.dumps(report, default=str)
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def render(report: dict) -> str:
    st = _Styles()
    cache = _dict(report.get("cache"))
    compiles = [_dict(c) for c in _list(report.get("compiles"))]
    rate = cache.get("hit_rate") or 0
    body = [f"<p class='muted'>{esc(report.get('script'))} · {fixed(report.get('wall_ms'), 1)} ms wall · "
            f"{len(compiles)} compiles · cache hit rate {fixed(100 * rate if _num(rate) else rate, 1)}%</p>"]
    for c in map(_dict, _list(report.get("codes"))):
        body += _code(c, st)
    body += _steps(_dict(report.get("steps_total")), st)
    body += _compiles(compiles)
    body += _cache(cache)
    errors = [_dict(e) for e in _list(report.get("errors"))]
    if errors:
        body.append("<h2>Errors</h2><ul>" + "".join(
            f"<li>{esc(e.get('op') or '')}{f' L{esc(lv)}' if (lv := e.get('level')) is not None else ''}: "
            f"{_why_error(e)}</li>"
            for e in errors) + "</ul>")
    css = files("msvm.report").joinpath("profile.css").read_text(encoding="utf-8") + st.css()
    digest = base64.b64encode(hashlib.sha256(css.encode()).digest()).decode()
    title = esc(f"msvm profile: {report.get('script', '')}")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title>"
            f"<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; style-src 'sha256-{digest}'\">"
            f"<style>{css}</style></head><body><h1>{title}</h1><div id='report'>\n" + "\n".join(body) +
            f"\n</div><script type='application/json' id='profile-data'>{_data(report)}</script></body></html>")
