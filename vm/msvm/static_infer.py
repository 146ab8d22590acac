"""What a Cell's ``construct`` says about its arguments by how it uses them, read from the
source (nothing runs): ``b, s, _ = x.shape`` fixes x's rank, ``x.shape[2]`` bounds it.

Used by ``static_specs`` for arguments and attributes nobody describes.
"""

from __future__ import annotations

import ast


def rank_hint(body_nodes, is_ref) -> tuple:
    """(exact rank or None, minimum rank) from ``a, b = v.shape`` and ``v.shape[k]`` in the body."""
    exact, least = None, 0
    for node in body_nodes:
        for n in ast.walk(node):
            if isinstance(n, ast.Assign) and isinstance(n.value, ast.Attribute) and n.value.attr == "shape" and \
                    is_ref(n.value.value):
                for t in n.targets:
                    if isinstance(t, (ast.Tuple, ast.List)) and not any(isinstance(e, ast.Starred) for e in t.elts):
                        exact = len(t.elts)
            if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Attribute) and n.value.attr == "shape" and \
                    is_ref(n.value.value) and isinstance(n.slice, ast.Constant) and isinstance(n.slice.value, int):
                k = n.slice.value
                least = max(least, k + 1 if k >= 0 else -k)
    return exact, least
