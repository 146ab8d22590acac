"""``msvm profile --html``: a report whose every field is hostile markup renders it as text.

Programs name the Cells, files, ops and kernels a report lists, and errors quote them, so
each value is replaced here by markup that would add elements or run if it were parsed as
HTML; the page must show it literally and stay script-free.
"""

import base64
import hashlib
import json
import re
import shutil
import subprocess
from html.parser import HTMLParser

import pytest
from msvm.profile import render_html

REPORT = {
    "version": 1, "script": "/w/prog.py", "argv": ["--n", "3"], "wall_ms": 812.5, "status": 0,
    "codes": [{"id": 7, "name": "Block.construct", "label": "variant 1 (training=False)", "program": 7,
               "file": "/w/prog.py", "line": 12, "calls": 5, "call_ms": 1.5,
               "variants": [{"variant": 1, "compile_ms": 2.5, "reason_kind": "cold", "reason": "first call"}],
               "instructions": [
        {"offset": 0, "op": "LOAD_TENSOR", "argrepr": "x", "loc": [13, 8, 13, 40], "parts": [], "type": "Tensor",
         "exec_ns": 1000, "exec_share": 0.1, "compile_ms": 0, "compile_share": 0, "steps": {}, "tiers": []},
        {"offset": 3, "op": "FUSED_MATMUL_BIAS", "argrepr": "w", "loc": [13, 8, 13, 40], "type": "Tensor",
         "parts": [{"op": "MATMUL", "loc": [13, 15, 13, 30]}], "exec_ns": 9000, "exec_share": 0.9, "compile_ms": 12.5,
         "compile_share": 1.0, "steps": {"Step1 Parse": 1.0},
         "tiers": [{"level": 2, "shape": [4, 8], "source": "compiled", "t_ms": 40.0, "reason_kind": "cold",
                    "reason": "the first kernel"}],
         "misses": [{"level": 2, "reason_kind": "pending", "reason": "compiling", "count": 3}],
         "l1": [{"reason_kind": "new_layout", "reason": "a strided view"}]},
    ]}],
    "compiles": [{"type": "compile", "code": "Block.construct", "offset": 3, "op": "FUSED_MATMUL_BIAS", "level": 2,
                  "shape": [4, 8], "dtype": "float32", "ms": 12.5, "source": "compiled", "time": 1000.0, "key": "abc",
                  "reason_kind": "new_dtype", "reason": "input 0: dtype float64 vs cached float32"}],
    "tiers": [], "errors": [{"type": "error", "op": "RELU", "level": 3, "why": "no lowering"},
                            {"type": "error", "op": "RELU", "level": 2, "why": "x", "reason_kind": "over_budget",
                             "reason": "compile took 1s"}],
    "steps_total": {"Step1 Parse": 1.0, "Step2 Shape Resolution": 0.5},
    "cache": {"hits": 4, "misses": 1, "hit_rate": 0.8, "compiles": 1, "disk_loads": 0,
              "recent": [{"key": "abc", "op": "FUSED_MATMUL_BIAS", "shape": [4, 8], "dtype": "float32",
                          "source": "compiled", "reason_kind": "cold", "reason": "cold cache"}]},
}


def payload(path: str) -> str:
    return (f"<img src=x onerror=\"alert('{path}')\"></script><script>alert(1)</script>"
            f"\"' onmouseover=alert(2) ${{alert(3)}} <b id=\"pwn\">{path}</b>")


def poison(v, path=""):
    """v with every string and number leaf (and every dict key but the report's own) replaced by payload(path)."""
    if isinstance(v, list):
        return [poison(x, f"{path}[{k}]") for k, x in enumerate(v)]
    if isinstance(v, dict):
        out = {k: poison(x, f"{path}.{k}" if path else k) for k, x in v.items()}
        if path == "steps_total":
            out[payload("step")] = 1.0
        return out
    if isinstance(v, (str, int, float)) and not isinstance(v, bool):
        return payload(path)
    return v


I1 = "codes[0].instructions[1]."
SHOWN = ["script", "wall_ms", "codes[0].name", "codes[0].label", "codes[0].file", "codes[0].line", "codes[0].calls",
         *(I1 + f for f in ("offset", "op", "argrepr", "loc[0]", "parts[0].op", "parts[0].loc[0]", "compile_ms", "exec_ns",
                            "tiers[0].level", "tiers[0].t_ms")),
         "step", "steps_total.Step1 Parse", "compiles[0].code", "compiles[0].offset", "compiles[0].op", "compiles[0].level",
         "compiles[0].dtype", "compiles[0].source", "compiles[0].ms", "cache.hits", "cache.misses", "cache.compiles",
         "cache.disk_loads", "cache.recent[0].key", "cache.recent[0].op", "cache.recent[0].dtype", "cache.recent[0].source",
         "errors[0].op", "errors[0].level", "errors[0].why",
         # why (msvm/reasons.py)
         "codes[0].variants[0].variant", "codes[0].variants[0].reason_kind", "codes[0].variants[0].reason",
         *(I1 + f for f in ("tiers[0].reason_kind", "tiers[0].reason", "misses[0].count", "misses[0].reason_kind",
                            "misses[0].reason", "l1[0].reason_kind", "l1[0].reason")),
         "compiles[0].reason_kind", "compiles[0].reason", "cache.recent[0].reason_kind", "cache.recent[0].reason",
         "errors[1].reason_kind", "errors[1].reason"]
TAGS = {"html", "head", "meta", "title", "style", "body", "h1", "h2", "div", "p", "span", "code", "table", "tr", "th", "td",
        "br", "ul", "li", "script", "tbody"}
ATTRS = {"charset", "http-equiv", "content", "class", "id", "type", "lang"}


class Page(HTMLParser):
    """The elements, attributes and text of a page; the content of its style and data blocks."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.tags, self.attrs, self.text, self.blocks, self.stack = [], [], [], {}, []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += [(tag, k, v) for k, v in attrs]
        if tag not in ("br", "meta"):
            self.stack.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        if self.stack and self.stack[-1][0] == tag:
            self.stack.pop()

    def handle_data(self, data):
        tag, attrs = self.stack[-1] if self.stack else ("", {})
        if tag in ("style", "script"):
            self.blocks[attrs.get("id", tag)] = self.blocks.get(attrs.get("id", tag), "") + data
        else:
            self.text.append(data)


def assert_inert_and_literal(page: Page, report: dict):
    assert set(page.tags) <= TAGS, set(page.tags) - TAGS
    assert page.tags.count("script") == 1, "only the report's JSON data block"
    assert {(t, k) for t, k, _ in page.attrs if k not in ATTRS} == set()
    assert ("script", "type", "application/json") in page.attrs
    text = "".join(page.text)
    for p in SHOWN:
        assert payload(p) in text, f"{p} is shown literally"
    assert json.dumps(poison(REPORT["compiles"][0]["shape"], "compiles[0].shape")) in text


def test_hostile_report_renders_as_text_with_a_strict_csp():
    report = poison(REPORT)
    page_html = render_html(report)
    page = Page(page_html)
    assert_inert_and_literal(page, report)
    # the data block is the report, and nothing in it can end the block
    assert json.loads(page.blocks["profile-data"]) == report
    assert "</" not in page.blocks["profile-data"] and "<!--" not in page.blocks["profile-data"]
    # the CSP: nothing but the page's one stylesheet, by its hash
    (csp,) = [v for t, k, v in page.attrs if k == "content" and "default-src" in v]
    digest = base64.b64encode(hashlib.sha256(page.blocks["style"].encode()).digest()).decode()
    assert csp == f"default-src 'none'; style-src 'sha256-{digest}'"
    assert "unsafe" not in page_html and not re.search(r"(src|href)\s*=\s*[\"']?(https?:)?//", page_html)


def test_report_of_the_wrong_types_still_renders():
    odd = dict(REPORT, codes=[{"name": None, "instructions": [{"loc": "13", "parts": None, "tiers": {"a": 1}}]}],
               compiles="x", cache=None, steps_total={"Step1 Parse": "slow"}, errors=[None])
    page = Page(render_html(odd))
    assert "slow ms" in "".join(page.text)


@pytest.mark.skipif(shutil.which("chromium") is None, reason="needs chromium")
def test_hostile_report_in_chromium(tmp_path):
    """The DOM a browser builds from the page: no element or attribute from the report."""
    f = tmp_path / "p.html"
    f.write_text(render_html(poison(REPORT)), encoding="utf-8")
    r = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                        "--disable-background-networking", "--disable-component-update", "--dump-dom", f.as_uri()],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert_inert_and_literal(Page(r.stdout), poison(REPORT))
