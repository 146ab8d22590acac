"""What a Cell's ``construct`` says about an argument by how it uses it, read from the
source (nothing runs), through the sub-Cells and methods it passes the argument to:

- rank: ``b, s, _ = x.shape`` fixes it, ``x.shape[2]`` bounds it, a layer that takes one
  rank (``nn.Conv2d``: 4) fixes it, and so does the use of the sub-Cell's own argument
  (``self.block(x)`` where ``Block.construct`` unpacks ``x.shape``);
- kind: token ids given to ``nn.Embedding`` or as the indices of a gather are an int
  tensor; an argument used as a Python int (``range(n)``, ``F.make_range(n)``, a slice
  bound, an item of a shape tuple, compared with an int in an ``if``) is an int scalar;
  one tested as ``if flag:`` is a bool; one unpacked (``h, w = size``,
  ``cos, sin = freqs``) is a tuple whose items are inferred the same way.

Used by ``static_specs`` for the arguments nobody describes (no ``set_inputs``, no
annotation, no call seen). Each ``Use`` says where its kind or rank was read (``why``).
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from dataclasses import dataclass

from .nn.cell import Cell, SequentialCell

MAX_DEPTH = 6                 # sub-Cells / methods followed from one construct

# msvm's layers whose input rank is fixed (their construct would say it only through a primitive)
LAYER_RANKS = {"Conv2d": 4, "Conv2dTranspose": 4, "BatchNorm2d": 4, "MaxPool2d": 4, "AvgPool2d": 4,
               "Conv1d": 3, "Conv3d": 5, "BatchNorm3d": 5, "AdaptiveAvgPool2d": 4, "AdaptiveMaxPool2d": 4}
INDEX_LAYERS = {"Embedding": 0}          # argument k of these layers are int indices
INDEX_OPS = {"gather": 1, "Gather": 1, "GatherV2": 1, "one_hot": 0, "OneHot": 0, "embedding": 0,
             "EmbeddingLookup": 1}
SHAPE_OF = {"shape", "Shape", "get_shape", "shape_of"}
# layout ops whose result holds the argument's values (an int tensor stays one): ids = reshape(ids, ...)
LAYOUT_OPS = {"reshape", "Reshape", "view", "expand_dims", "ExpandDims", "squeeze", "Squeeze", "flatten", "Flatten",
              "transpose", "Transpose", "unsqueeze", "broadcast_to", "BroadcastTo", "tile", "Tile"}
INT_FUNCS = {"range", "make_range"}      # their arguments are Python ints
SHAPE_OPS = {"reshape", "Reshape", "view", "tile", "Tile", "broadcast_to", "BroadcastTo", "zeros", "ones",
             "fill", "Fill", "expand_dims"}


@dataclass
class Use:
    """What the uses of one argument say about it."""

    exact: int | None = None   # its rank, when fixed
    least: int = 0             # at least this rank
    kind: str = "tensor"       # 'tensor' | 'int_tensor' | 'int' | 'bool' | 'tuple'
    why: str = ""              # where the kind (or the fixed rank) was read
    items: tuple = ()          # a tuple's items (Uses)

    def add(self, other: "Use"):
        if other.exact is not None and self.exact is None:
            self.exact = other.exact
            self.why = self.why or other.why
        self.least = max(self.least, other.least)
        if other.kind != "tensor" and self.kind == "tensor":
            self.kind, self.items = other.kind, other.items
            self.why = other.why or self.why


def _name(func) -> str:
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _is_self_attr(e) -> str | None:
    if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "self":
        return e.attr
    return None


def _construct_node(obj):
    """(the construct FunctionDef of a Cell object, its filename), or (None, '')."""
    cls = getattr(obj, "_static_class", None)
    if cls is not None:
        m = cls.find_method("construct")
        if m is not None:
            return m.node, cls.module.filename
    construct = getattr(type(obj), "construct", None)
    if construct is None:
        return None, ""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(construct)))
        return tree.body[0], inspect.getsourcefile(construct) or ""
    except (OSError, TypeError, SyntaxError, IndexError):
        return None, ""


def _params(node: ast.FunctionDef, skip_self: bool) -> list:
    names = [a.arg for a in node.args.posonlyargs + node.args.args]
    return names[1:] if skip_self else names


# msvm layers whose output has their input's shape: ``self.attn(self.norm1(x))`` passes x's rank on
SAME_SHAPE = {"LayerNorm", "Dropout", "ReLU", "ReLU6", "GELU", "SiLU", "Sigmoid", "Tanh", "Softmax", "LeakyReLU",
              "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "Identity", "HSwish", "HSigmoid", "ELU", "Softplus"}


def infer(node: ast.FunctionDef, pname: str, cell=None, depth: int = 0, where: str = "") -> Use:
    """What ``node``'s body says about its parameter ``pname``; ``cell``: the object whose method
    it is (its sub-Cells are followed)."""
    use = Use()
    where = where or node.name

    def ref(e):
        if isinstance(e, ast.Name):
            return e.id == pname
        if isinstance(e, ast.Call) and len(e.args) == 1 and cell is not None:     # self.norm1(x)
            attr = _is_self_attr(e.func)
            target = cell.__dict__.get(attr) if attr is not None else None
            return type(target).__name__ in SAME_SHAPE and getattr(target, "_static_class", None) is None and \
                ref(e.args[0])
        return False

    def at(n) -> str:
        return f"{where} line {getattr(n, 'lineno', node.lineno)}"

    loops = _loop_cells(node, cell)
    for n in ast.walk(node):
        if isinstance(n, ast.Call) and loops and isinstance(n.func, ast.Name) and n.func.id in loops and \
                depth < MAX_DEPTH:                          # for layer in self.layers: x = layer(x, mask)
            for k, a in enumerate(n.args):
                if ref(a):
                    _cell_use(use, loops[n.func.id], k, depth + 1, at(n))
            continue
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name) and \
                n.targets[0].id != pname and depth < MAX_DEPTH and _layout_of(n.value, ref, cell):
            sub = infer(node, n.targets[0].id, cell, depth + 1, where)     # flat = reshape(ids, (-1,)); gather(t, flat)
            if sub.kind == "int_tensor":
                use.add(Use(kind="int_tensor", why=sub.why))
            continue
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], (ast.Tuple, ast.List)):
            t = n.targets[0]
            if any(isinstance(e, ast.Starred) for e in t.elts):
                continue
            if isinstance(n.value, ast.Attribute) and n.value.attr == "shape" and ref(n.value.value):
                use.add(Use(exact=len(t.elts), why=f"unpacked from its shape ({at(n)})"))
            elif ref(n.value) and all(isinstance(e, ast.Name) for e in t.elts):
                items = tuple(infer(node, e.id, cell, depth, where) for e in t.elts)
                use.add(Use(kind="tuple", items=items, why=f"unpacked into {len(t.elts)} names ({at(n)})"))
        elif isinstance(n, ast.Subscript) and isinstance(n.value, ast.Attribute) and n.value.attr == "shape" and \
                ref(n.value.value) and isinstance(n.slice, ast.Constant) and isinstance(n.slice.value, int):
            k = n.slice.value
            use.add(Use(least=k + 1 if k >= 0 else -k))
        elif isinstance(n, ast.Subscript) and isinstance(n.value, ast.Call) and _name(n.value.func) in SHAPE_OF and \
                n.value.args and ref(n.value.args[0]) and isinstance(n.slice, ast.Constant) and \
                isinstance(n.slice.value, int):          # F.shape(mask)[2], self.shape(x)[-1]
            k = n.slice.value
            use.add(Use(least=k + 1 if k >= 0 else -k))
        elif isinstance(n, ast.Slice) and any(ref(b) for b in (n.lower, n.upper, n.step)):
            use.add(Use(kind="int", why=f"a slice bound ({at(n)})"))
        elif isinstance(n, (ast.If, ast.IfExp, ast.While)):
            test = n.test.operand if isinstance(n.test, ast.UnaryOp) and isinstance(n.test.op, ast.Not) else n.test
            parts = test.values if isinstance(test, ast.BoolOp) else [test]
            if any(ref(p) for p in parts):
                use.add(Use(kind="bool", why=f"tested as a flag ({at(n)})"))
            elif isinstance(test, ast.Compare) and ref(test.left) and all(
                    isinstance(c, ast.Constant) and isinstance(c.value, int) and not isinstance(c.value, bool)
                    for c in test.comparators):
                use.add(Use(kind="int", why=f"compared with an int ({at(n)})"))
        elif isinstance(n, ast.Call):
            _call_use(use, n, ref, node, cell, depth, at)
    return use


def _layout_of(e, ref, cell) -> bool:
    """Whether ``e`` is a layout op of the argument (``ops.reshape(x, s)``, ``self.expand(x, -1)`` with
    ``self.expand = P.ExpandDims()``, ``x.view(-1)``): its values are the argument's."""
    if not isinstance(e, ast.Call):
        return False
    f = e.func
    if isinstance(f, ast.Attribute) and f.attr in LAYOUT_OPS and ref(f.value):
        return True
    fname = _name(f)
    attr = _is_self_attr(f)
    target = cell.__dict__.get(attr) if cell is not None and attr is not None else None
    if target is not None and type(target).__name__ in LAYOUT_OPS:
        fname = type(target).__name__
    return fname in LAYOUT_OPS and bool(e.args) and ref(e.args[0])


def _loop_cells(node, cell) -> dict:
    """{name: the first Cell} of ``for name in self.layers`` loops over a CellList / SequentialCell."""
    out = {}
    if cell is None:
        return out
    for n in ast.walk(node):
        if isinstance(n, ast.For) and isinstance(n.target, ast.Name) and _is_self_attr(n.iter):
            seq = cell.__dict__.get(_is_self_attr(n.iter))
            cells = list(seq.__dict__.get("_cells", {}).values()) if isinstance(seq, Cell) else []
            if cells:
                out[n.target.id] = cells[0]
    return out


def _call_use(use: Use, n: ast.Call, ref, node, cell, depth, at):
    positions = [k for k, a in enumerate(n.args) if ref(a)]
    fname = _name(n.func)
    if isinstance(n.func, ast.Call):          # P.Gather()(table, ids, 0)
        fname = _name(n.func.func)
    if fname in INT_FUNCS and positions:
        use.add(Use(kind="int", why=f"an argument of {fname}() ({at(n)})"))
        return
    if fname in SHAPE_OPS:                   # ops.reshape(x, (b, n, -1)): an item of a shape
        for a in n.args[1:]:
            if isinstance(a, (ast.Tuple, ast.List)) and any(ref(e) for e in a.elts):
                use.add(Use(kind="int", why=f"an item of the shape given to {fname} ({at(n)})"))
                return
    attr = _is_self_attr(n.func)
    target = cell.__dict__.get(attr) if cell is not None and attr is not None else None
    if attr is not None and target is not None and not fname.startswith("__"):
        tname = type(target).__name__
        if fname not in INDEX_OPS and tname in INDEX_OPS:         # self.gather = P.Gather()
            fname = tname
    for k in positions:
        if fname in INDEX_OPS and INDEX_OPS[fname] == k:
            use.add(Use(kind="int_tensor", why=f"the indices of {fname} ({at(n)})"))
            continue
        if attr is None or cell is None or depth >= MAX_DEPTH:
            continue
        method = getattr(getattr(cell, "_static_class", None), "find_method", lambda _: None)(attr)
        if method is not None and target is None:                   # self.forward_features(x)
            ps = _params(method.node, True)
            if k < len(ps):
                use.add(infer(method.node, ps[k], cell, depth + 1, f"{type(cell).__name__}.{attr}"))
            continue
        _cell_use(use, target, k, depth, at(n))


def _cell_use(use: Use, target, k: int, depth: int, where: str):
    """Argument k of a call of the sub-Cell ``target``."""
    if not isinstance(target, Cell):
        return
    tname = type(target).__name__
    if getattr(target, "_static_class", None) is None:
        if INDEX_LAYERS.get(tname) == k:
            use.add(Use(kind="int_tensor", why=f"the ids of nn.{tname} ({where})"))
            return
        if tname in LAYER_RANKS and k == 0:
            use.add(Use(exact=LAYER_RANKS[tname], why=f"the input of nn.{tname} ({where})"))
            return
        if isinstance(target, SequentialCell) and k == 0:
            cells = list(target.__dict__.get("_cells", {}).values())
            if cells:
                _cell_use(use, cells[0], 0, depth + 1, where)
            return
    cnode, _ = _construct_node(target)
    if cnode is None:
        return
    ps = _params(cnode, True)
    if k < len(ps):
        use.add(infer(cnode, ps[k], target, depth + 1, f"{tname}.construct"))


def rank_hint(body_nodes, is_ref) -> tuple:
    """(exact rank or None, minimum rank) from ``a, b = v.shape`` and ``v.shape[k]`` in the body
    (an attribute such as ``self.w``: ``is_ref`` says which expressions are it)."""
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
