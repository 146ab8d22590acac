"""Functions the VM writes as Python source (a replay's path: replay.py; a captured program:
capture.py), compiled once per text.

A path's text does not change with the sizes it runs at: its constants (shapes, kernels, sites,
parameters) are names bound in the namespace the code runs in, not literals in the text. So every
new signature of a Code writes the same text, and a Code object compiled once serves them all;
``compile`` alone cost ~0.8 ms a Code (MobileNet v2's 22 Codes: 19 ms on the third call at each new
image size, and again when its program was recorded). A captured program's own text is not kept: it
names its native calls one a line, so it changes with the sizes (~0.5 MB of text and code for 3000
calls)."""

from __future__ import annotations

KEPT = 128                # texts kept (the oldest dropped first; a path's text is the same at every size)
_CODES: dict = {}         # (text, filename) -> the compiled module code


def define(src: str, filename: str, ns: dict, name: str, keep: bool = True):
    """Run ``src`` (which defines the function ``name``) in the namespace ``ns`` and return that
    function, with its text as ``.source``. ``keep=False``: a text that is not written again (a captured
    program's names one native call a line, and their count changes with the sizes), compiled and not kept."""
    if not keep:
        exec(compile(src, filename, "exec"), ns)
        fn = ns[name]
        fn.source = src
        return fn
    key = (src, filename)
    code = _CODES.get(key)
    if code is None:
        if len(_CODES) >= KEPT:
            for old in list(_CODES)[:len(_CODES) - KEPT + 1]:     # (list(): one step, whatever other threads do)
                _CODES.pop(old, None)
        code = _CODES[key] = compile(src, filename, "exec")
    exec(code, ns)
    fn = ns[name]
    fn.source = src
    return fn
