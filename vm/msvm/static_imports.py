"""Imports in the abstract evaluator (``static_eval``): what an imported name is when
nothing may run.

- an absolute import binds a module only where importing it only defines names (msvm's
  and numpy's modules, math and a few pure standard modules: ``allowed_module``);
  ``mindspore.*`` is msvm's alias of it; anything else is ``Unknown``;
- a package-relative import (``from .helpers import to_2tuple``, ``from ..layers.mlp
  import Mlp``, any level) reads the file next to the document on disk (``x.py`` or
  ``x/__init__.py``) and evaluates it abstractly the same way: it is parsed, never
  imported or executed, so nothing of the user's workspace runs. Each file is read once
  per document (an import cycle sees what was defined so far), within a count, a depth
  and a size.

``Imports`` is a mixin of ``static_eval.StaticModule``.
"""

from __future__ import annotations

import ast
import os

from .static_objects import StaticNamespace
from .static_values import Unknown

# standard modules whose import only defines names (model zoos' helpers use them: to_2tuple)
PURE_STDLIB = ("collections", "collections.abc", "itertools", "functools", "typing", "copy")


def allowed_module(name: str) -> bool:
    """Modules the analysis may import to know what a name is: msvm's, numpy's and math, but
    never a ``__main__`` (``from msvm import __main__`` runs the msvm command), a private
    module or a test configuration, whose import does more than define names."""
    parts = name.split(".")
    if any(p.startswith("_") or p == "conftest" for p in parts):
        return False
    return name in ("msvm", "numpy", "math") + PURE_STDLIB or name.startswith(("msvm.", "numpy."))


def resolve_module(name: str):
    """The module ``name`` when the analysis may import it (``allowed_module``; ``mindspore``
    is msvm's alias), else Unknown."""
    import importlib

    if name == "mindspore" or name.startswith("mindspore."):
        from .compat import MODULES  # the alias's own map: mindspore.ops.operations, ...

        name = MODULES.get(name) or "msvm" + name[len("mindspore"):]
    if not allowed_module(name):
        return Unknown(f"module {name}")
    try:
        return importlib.import_module(name)
    except ImportError:
        return Unknown(f"module {name}")


def package_root(filename: str) -> str | None:
    """The directory of the top-level package holding ``filename`` (the highest directory above
    it that has an ``__init__.py``), or None when the file is not in a package."""
    d = os.path.dirname(os.path.abspath(filename))
    root = None
    for _ in range(32):
        if not os.path.isfile(os.path.join(d, "__init__.py")):
            break
        root = d
        parent = os.path.dirname(d)
        if parent == d:
            break
        d = parent
    return root


class Imports:
    """The import half of the abstract evaluator (mixed into ``StaticModule``)."""

    MAX_IMPORTS = 64        # files of the package read for imports, per document
    MAX_IMPORT_DEPTH = 8    # a file imported by a file imported by ... the document
    MAX_FILE_BYTES = 1 << 20

    def exec_import(self, st, env):
        """``import a.b [as c]`` and ``from x import y`` (absolute or package-relative)."""
        if isinstance(st, ast.Import):
            for a in st.names:
                local = self.package_path(a.name)
                if local is not None and a.asname:
                    env[a.asname] = self.load(local) or Unknown(f"module {a.name}")
                    continue
                if local is not None:
                    top = a.name.split(".")[0]
                    env[top] = self.load(self.package_path(top)) or Unknown(f"module {top}")
                    continue
                mod = resolve_module(a.name)
                env[(a.asname or a.name).split(".")[0]] = mod if a.asname or "." not in a.name else \
                    resolve_module(a.name.split(".")[0])
            return
        if st.level:
            pkg = os.path.dirname(os.path.abspath(self.filename))
            for _ in range(st.level - 1):
                pkg = os.path.dirname(pkg)
            self.import_from_files(st, os.path.join(pkg, *(st.module.split(".") if st.module else [])), env)
            return
        local = self.package_path(st.module or "")
        if local is not None:           # the document's own package, by its absolute name
            self.import_from_files(st, local, env)
            return
        base = st.module or ""
        for a in st.names:
            mod = resolve_module(f"{base}.{a.name}")
            if isinstance(mod, Unknown):
                parent = resolve_module(base)
                mod = getattr(parent, a.name, Unknown(f"{base}.{a.name}")) if not isinstance(parent, Unknown) \
                    else Unknown(f"import {base}")
            env[a.asname or a.name] = mod

    def package_path(self, dotted: str) -> str | None:
        """Where the module ``dotted`` of the document's own package lies (without .py), when its
        first part names that package; else None."""
        root = package_root(self.filename)
        parts = dotted.split(".")
        if root is None or not dotted or parts[0] != os.path.basename(root):
            return None
        return os.path.join(os.path.dirname(root), *parts)

    def import_from_files(self, st: ast.ImportFrom, target: str, env):
        """``from <target> import names``: each name a submodule file or a name the target's file
        defines; ``*`` binds the target's ``__all__`` (or its public names)."""
        what = f"{'.' * st.level}{st.module or ''}"
        for a in st.names:
            if a.name == "*":
                mod = self.load(target)
                if mod is None:
                    continue
                names = mod.module.env.get("__all__")
                if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
                    names = [n for n in mod.module.env if not n.startswith("_")]
                for n in names:
                    if n in mod.module.env:
                        env[n] = mod.module.env[n]
                continue
            value = self.load(os.path.join(target, a.name))       # a submodule
            if value is None:
                mod = self.load(target)
                value = mod.module.env.get(a.name, Unknown(f"{a.name} of {mod.module.filename}")) if mod else \
                    Unknown(f"import {what}")
            env[a.asname or a.name] = value

    def load(self, base: str):
        """The StaticNamespace of base.py or base/__init__.py, read and evaluated abstractly once
        per document (never imported: nothing of it runs)."""
        path = next((p for p in (base + ".py", os.path.join(base, "__init__.py")) if os.path.isfile(p)), None)
        if path is None or self.import_depth >= self.MAX_IMPORT_DEPTH:
            return None
        path = os.path.abspath(path)
        if path in self.imports:
            return self.imports[path]
        if len(self.imports) >= self.MAX_IMPORTS or os.path.getsize(path) > self.MAX_FILE_BYTES:
            return None
        self.imports[path] = None       # (an import cycle sees nothing of it)
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
            module = type(self)(text, path, self.budget, self.imports, self.import_depth + 1, self.started)
        except (OSError, SyntaxError, ValueError, RecursionError, UnicodeDecodeError):
            return None
        self.imports[path] = StaticNamespace(module)
        return self.imports[path]
