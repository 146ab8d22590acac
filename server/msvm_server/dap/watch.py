"""Watch expressions: evaluate what reads, refuse everything else.

``safe_eval(expression, names)`` walks the expression's AST and allows, by name, only:
constants, names of the frame, attribute *reads* from a fixed list (``x.shape``,
``x.dtype.name``) or an instance's own data (``self.w``, looked up in its ``__dict__``,
so no property or ``__getattr__`` runs), subscripts, arithmetic, comparisons, ``and``/
``or``/``not``, ``a if c else b``, tuples and lists, and calls of listed pure functions
(``np.mean``, ``np.linalg.norm``, ``len``...) and listed array methods (``x.sum()``,
``x.astype("float64")``). It is an allowlist: anything not named here (lambdas,
comprehensions, f-strings, walrus, other modules, dunders, ``getattr``, ``np.save``,
``x.tofile``, ``out=``...) is refused with a message saying what and why. Operations that
would build something large (``np.zeros``-like results, ``"a" * 10**10``, ``10**10**10``,
outer broadcasts, fancy indexing) are sized before they run and refused over a budget.
"""

from __future__ import annotations

import ast
import builtins
import math
import operator
import sys

import numpy as np

MAX_BYTES = 256 << 20             # the most a watch expression may allocate in one step
MAX_ITEMS = 1 << 20               # the longest str / bytes / list / tuple it may build
MAX_INT_BITS = 1 << 16            # the largest int it may compute (about 20,000 digits)


class EvalError(Exception):
    """A watch expression that is refused or fails; the message is for the user."""


_BIN = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
        ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow, ast.MatMult: operator.matmul}
_UN = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_}
_CMP = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt,
        ast.GtE: operator.ge, ast.Is: operator.is_, ast.IsNot: operator.is_not}
_BUILTINS = {"len": len, "abs": abs, "min": min, "max": max, "float": float, "int": int, "round": round,
             "list": list, "tuple": tuple, "sum": sum, "bool": bool}
_CONSTANTS = {"True": True, "False": False, "None": None}

# Functions by what they return: a reduction is small whatever its input; the others are
# sized (the broadcast of their array arguments) before they run.
_NP_REDUCE = ("sum mean std var min max amin amax argmin argmax prod any all count_nonzero nansum nanmean nanstd "
              "nanvar nanmin nanmax allclose array_equal shape ndim size isscalar result_type finfo iinfo dtype")
_NP_SIZED = ("abs absolute sqrt exp log log2 log10 log1p expm1 sin cos tan sinh cosh tanh arcsin arccos arctan "
             "floor ceil round around rint clip sign negative maximum minimum add subtract multiply divide "
             "true_divide floor_divide power mod remainder where isnan isinf isfinite nan_to_num equal not_equal "
             "less less_equal greater greater_equal logical_and logical_or logical_not cumsum cumprod sort argsort "
             "median percentile quantile unique diff transpose reshape ravel squeeze expand_dims swapaxes moveaxis "
             "asarray array ascontiguousarray matmul "
             "float16 float32 float64 int8 int16 int32 int64 uint8 uint16 uint32 uint64 bool_ complex64 complex128")
_LINALG_REDUCE = "norm det matrix_rank cond slogdet"


def _pick(module, names: str) -> dict:
    return {n: getattr(module, n) for n in names.split() if hasattr(module, n)}


_NP = {**_pick(np, _NP_REDUCE), **_pick(np, _NP_SIZED)}
_NP_TYPES = tuple(f for f in _NP.values() if isinstance(f, type))
_LINALG = _pick(np.linalg, _LINALG_REDUCE)
_MODULES = {id(np): ("np", dict(_NP, linalg=np.linalg)), id(np.linalg): ("np.linalg", _LINALG)}
_REDUCING = {id(f) for f in (*_pick(np, _NP_REDUCE).values(), *_LINALG.values(), len, min, max, sum, bool,
                             float, int)}

# Array (numpy, CuPy) and msvm Tensor attributes that are plain reads, and methods that only read.
_ARRAY_ATTRS = frozenset("shape dtype ndim size strides itemsize nbytes T mT real imag device".split())
_ARRAY_REDUCE = frozenset("sum mean std var min max argmin argmax prod any all item trace".split())
_ARRAY_SIZED = frozenset("astype copy reshape ravel flatten transpose squeeze swapaxes round clip cumsum cumprod "
                         "conj argsort diagonal tolist get".split())
_DTYPE_ATTRS = frozenset("name kind itemsize char str byteorder".split())
_TENSOR_ATTRS = frozenset("shape dtype size strides ndim is_placeholder placeholder_shape".split())
_TENSOR_METHODS = frozenset({"asnumpy"})
_NUMBER_ATTRS = frozenset({"real", "imag"})


def _is_array(v) -> bool:
    return isinstance(v, (np.ndarray, np.generic)) or (type(v).__module__ or "").startswith("cupy") and \
        hasattr(v, "__cuda_array_interface__")


def _is_tensor(v) -> bool:
    t = sys.modules.get("msvm.tensor")
    return t is not None and isinstance(v, t.Tensor)


_PLAIN = (int, float, complex, bool, str, bytes, tuple, list, type(None), slice, type(Ellipsis), np.dtype)


def _pure(v, budget: list) -> bool:
    """Whether operators, conversions and numpy may touch v without running a user's code
    (__add__, __eq__, __len__, __array__, __index__...): plain values, arrays, and lists,
    tuples and dicts of them (walked up to a budget of items)."""
    budget[0] -= 1
    if budget[0] < 0:
        return False
    if type(v) in (list, tuple):
        return all(_pure(x, budget) for x in v)
    if type(v) is dict:
        return all(_pure(k, budget) and _pure(x, budget) for k, x in v.items())
    if isinstance(v, (list, tuple, dict)):
        return False                      # a user's subclass
    if _is_array(v):
        return v.dtype.kind != "O"            # an object array's operators call its elements'
    if isinstance(v, type):
        return any(v is t for t in _NP_TYPES)  # np.float32 and the like, as dtypes
    return isinstance(v, _PLAIN) and (type(v).__module__ or "").split(".")[0] in ("builtins", "numpy")


def _operand(v, what: str):
    """Operators only on values whose operators are known to be pure (no user __add__, __eq__...)."""
    if _pure(v, [10_000]):
        return v
    raise EvalError(f"{what} is not available on a {type(v).__name__} in a watch expression")


def _argument(v, fn_name: str):
    """A call's argument: pure, an msvm Tensor (numpy reads it through msvm's own __array__),
    or one of the listed numpy types (``np.float32`` as a dtype)."""
    if _pure(v, [10_000]) or _is_tensor(v):
        return v
    raise EvalError(f"{fn_name}() of a {type(v).__name__} is not available in a watch expression "
                    f"(it could run that object's own methods)")


def _nbytes(shape, itemsize: int = 8) -> int:
    return math.prod(int(d) for d in shape) * max(int(itemsize), 1)


def _check_bytes(n: int, what: str):
    if n > MAX_BYTES:
        raise EvalError(f"{what} would allocate about {n / 2**20:.0f} MiB; a watch expression may allocate at most "
                        f"{MAX_BYTES >> 20} MiB")


def _check_broadcast(values, what: str, itemsize: int | None = None):
    """Size what an elementwise step over these operands makes: their broadcast (when they
    do not broadcast, as a shape argument does not, the largest of them)."""
    shapes = [(tuple(v.shape), v.dtype.itemsize) for v in values if _is_array(v)]
    shapes += [((len(v),), 8) for v in values if isinstance(v, (list, tuple))]
    if not shapes:
        return
    size = max(8, *[i for _, i in shapes]) if itemsize is None else itemsize
    try:
        n = _nbytes(np.broadcast_shapes(*[s for s, _ in shapes]), size)
    except ValueError:
        n = max(_nbytes(s, size) for s, _ in shapes)
    _check_bytes(n, what)


def _check_sequence(n: int, what: str):
    if n > MAX_ITEMS:
        raise EvalError(f"{what} would build {n} items; a watch expression may build at most {MAX_ITEMS}")


def _binop(op: type, a, b):
    name = op.__name__
    a, b = _operand(a, f"operator {name}"), _operand(b, f"operator {name}")
    if op is ast.Mult:
        for seq, n in ((a, b), (b, a)):
            if isinstance(seq, (str, bytes, list, tuple)) and isinstance(n, (int, np.integer)):
                _check_sequence(len(seq) * max(int(n), 0), "repeating a sequence")
                return operator.mul(a, b)
    if op is ast.Mod and isinstance(a, (str, bytes)):
        raise EvalError("%-formatting is not available in a watch expression")
    if op is ast.Pow and isinstance(a, (int, np.integer)) and isinstance(b, (int, np.integer)) and b > 0:
        if abs(int(a)) > 1 and abs(int(a)).bit_length() * int(b) > MAX_INT_BITS:
            raise EvalError(f"{a} ** {b} is too large for a watch expression")
    if isinstance(a, (int, np.integer)) and isinstance(b, (int, np.integer)) and op is ast.Mult:
        if abs(int(a)).bit_length() + abs(int(b)).bit_length() > MAX_INT_BITS:
            raise EvalError("the product is too large for a watch expression")
    if op is ast.MatMult and _is_array(a) and _is_array(b) and a.ndim >= 1 and b.ndim >= 1:
        lead = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) if a.ndim > 2 or b.ndim > 2 else ()
        out = lead + ((a.shape[-2],) if a.ndim > 1 else ()) + ((b.shape[-1],) if b.ndim > 1 else ())
        _check_bytes(_nbytes(out, max(a.dtype.itemsize, b.dtype.itemsize)), "the matrix product")
    elif op is not ast.MatMult:
        _check_broadcast((a, b), f"operator {name}")
    return _BIN[op](a, b)


def _attribute(v, attr: str):
    """``v.attr`` when it is a listed read; never a dunder, never a descriptor of a user's class."""
    if attr.startswith("_"):
        raise EvalError(f"attribute {attr!r} is not available in a watch expression (no private or dunder names)")
    mod = _MODULES.get(id(v))
    if mod is not None:
        name, table = mod
        if attr in table:
            return table[attr]
        raise EvalError(f"{name}.{attr} is not available in a watch expression: it only calls functions that read "
                        f"(such as {name}.{next(iter(table))})")
    if _is_array(v):
        if attr in _ARRAY_ATTRS or attr in _ARRAY_REDUCE or attr in _ARRAY_SIZED:
            return getattr(v, attr)
    elif isinstance(v, np.dtype):
        if attr in _DTYPE_ATTRS:
            return getattr(v, attr)
    elif _is_tensor(v):
        if attr in _TENSOR_ATTRS or attr in _TENSOR_METHODS:
            return getattr(v, attr)
    elif isinstance(v, (int, float, complex)):
        if attr in _NUMBER_ATTRS:
            return getattr(v, attr)
    elif not isinstance(v, (type, type(sys))):
        try:                                    # an instance's own data: a read, whatever its class defines
            d = object.__getattribute__(v, "__dict__")
        except AttributeError:
            d = None
        if type(d) is dict and attr in d:
            return d[attr]
    raise EvalError(f"attribute {attr!r} of a {type(v).__name__} is not available in a watch expression")


def _callable(fn):
    """(kind, fn) for a callable a watch expression may call: 'reduce' or 'sized'."""
    if any(fn is f for f in _BUILTINS.values()) or id(fn) in _REDUCING:
        return "reduce" if id(fn) in _REDUCING else "sized"
    if any(fn is f for f in _NP.values()):
        return "sized"
    owner = getattr(fn, "__self__", None)
    name = getattr(fn, "__name__", "")
    if owner is not None and (_is_array(owner) or _is_tensor(owner)) and not isinstance(owner, type):
        if name in _ARRAY_REDUCE:
            return "reduce"
        if name in _ARRAY_SIZED or (_is_tensor(owner) and name in _TENSOR_METHODS):
            return "sized"
    return None


def _call(fn, args: list, kwargs: dict):
    kind = _callable(fn)
    if kind is None:
        what = getattr(fn, "__qualname__", None) or type(fn).__name__
        raise EvalError(f"{what} cannot be called in a watch expression: only listed functions that read "
                        f"(np.mean, np.linalg.norm, len, ...) and tensor methods (x.sum(), x.astype(...)) can")
    if "out" in kwargs:
        raise EvalError("out= writes into an array: not available in a watch expression")
    for a in list(args) + list(kwargs.values()):
        _argument(a, getattr(fn, "__name__", "the call"))
    owner = getattr(fn, "__self__", None)
    name = getattr(fn, "__name__", "")
    if fn in (list, tuple):
        if args and hasattr(args[0], "__len__"):
            _check_sequence(len(args[0]), f"{fn.__name__}(...)")
        elif args:
            raise EvalError(f"{fn.__name__}() of a {type(args[0]).__name__} is not available in a watch expression")
    if fn is sum and args and not hasattr(args[0], "__len__"):
        raise EvalError("sum() takes a sequence or a tensor here")
    if kind == "sized":
        operands = list(args) + list(kwargs.values())
        if owner is not None and _is_array(owner):
            operands.append(owner)
            if name == "tolist":
                _check_sequence(int(owner.size), "tolist()")
        itemsize = None
        if name == "astype" and args:
            try:
                itemsize = np.dtype(args[0]).itemsize
            except TypeError:
                raise EvalError(f"not a dtype: {args[0]!r}") from None
        _check_broadcast(operands, f"{getattr(fn, '__name__', 'the call')}(...)", itemsize)
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, (list, tuple)):
            _check_sequence(len(a), "an argument")
    return fn(*args, **kwargs)


def _index(v, key):
    """Basic indexing is a view; advanced indexing is sized before it runs."""
    if not _pure(key, [10_000]):
        raise EvalError(f"indexing with a {type(key).__name__} is not available in a watch expression")
    if not _is_array(v):
        if not (type(v) in (list, tuple, dict, str, bytes) or _is_tensor(v)):
            raise EvalError(f"indexing a {type(v).__name__} is not available in a watch expression")
        return v[key]
    keys = key if isinstance(key, tuple) else (key,)
    fancy = [np.asarray(k) if isinstance(k, list) else k for k in keys if _is_array(k) or isinstance(k, list)]
    if fancy:
        ints = [k for k in fancy if k.dtype != bool]
        if not ints:
            n = int(v.size)                   # masks select at most every element once
        else:
            try:
                n_idx = math.prod(np.broadcast_shapes(*[k.shape for k in ints]))
            except ValueError as e:
                raise EvalError(f"indexing: {e}") from None
            # the dimensions not indexed, taking the smallest ones as indexed (an upper bound)
            n = n_idx * (int(v.size) // max(1, math.prod(sorted(v.shape)[:len(ints)])))
        _check_bytes(n * v.dtype.itemsize, "indexing with an array")
    return v[key]


def safe_eval(expression: str, names: dict, unset=frozenset()):
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as e:
        raise EvalError(f"syntax error in {expression!r}: {e.msg}") from None

    def ev(n):
        if isinstance(n, ast.Constant):
            if isinstance(n.value, (str, bytes)):
                _check_sequence(len(n.value), "a constant")
            return n.value
        if isinstance(n, ast.Name):
            if n.id in names:
                return names[n.id]
            if n.id in _CONSTANTS:
                return _CONSTANTS[n.id]
            if n.id in _BUILTINS:
                return _BUILTINS[n.id]
            if hasattr(builtins, n.id):
                raise EvalError(f"{n.id} is not available in a watch expression (of the builtins only "
                                f"{', '.join(_BUILTINS)} are)")
            if n.id in unset:
                raise EvalError(f"{n.id!r} has no value at this instruction: not assigned yet, or fusion kept it "
                                f"on the operand stack (see Operand stack, or evaluate `top`; launch with "
                                f"\"enableFusion\": false to keep every local)")
            raise EvalError(f"name {n.id!r} is not defined here")
        if isinstance(n, ast.Attribute):
            return _attribute(ev(n.value), n.attr)
        if isinstance(n, ast.Subscript):
            return _index(ev(n.value), ev(n.slice))
        if isinstance(n, ast.Slice):
            return slice(*(ev(x) if x is not None else None for x in (n.lower, n.upper, n.step)))
        if isinstance(n, (ast.Tuple, ast.List)):
            if any(isinstance(e, ast.Starred) for e in n.elts):
                raise EvalError("* unpacking is not available in a watch expression")
            vals = [ev(e) for e in n.elts]
            return tuple(vals) if isinstance(n, ast.Tuple) else vals
        if isinstance(n, ast.BinOp) and type(n.op) in _BIN:
            return _binop(type(n.op), ev(n.left), ev(n.right))
        if isinstance(n, ast.UnaryOp) and type(n.op) in _UN:
            v = ev(n.operand)
            return _UN[type(n.op)](v if isinstance(n.op, ast.Not) and isinstance(v, _PLAIN) else _operand(v, "a sign"))
        if isinstance(n, ast.BoolOp):
            v = ev(n.values[0])
            for e in n.values[1:]:
                if bool(_operand(v, "and/or")) == isinstance(n.op, ast.Or):
                    return v
                v = ev(e)
            return v
        if isinstance(n, ast.IfExp):
            return ev(n.body) if bool(_operand(ev(n.test), "if/else")) else ev(n.orelse)
        if isinstance(n, ast.Compare) and all(type(op) in _CMP for op in n.ops):
            left = _operand(ev(n.left), "comparison")
            result = True
            for op, right_node in zip(n.ops, n.comparators):
                right = _operand(ev(right_node), "comparison")
                _check_broadcast((left, right), "comparison")
                r = _CMP[type(op)](left, right)
                if len(n.ops) == 1:
                    return r
                if not r:
                    return False
                result, left = r, right
            return result
        if isinstance(n, ast.Call):
            if any(isinstance(a, ast.Starred) for a in n.args) or any(k.arg is None for k in n.keywords):
                raise EvalError("* and ** arguments are not available in a watch expression")
            fn = ev(n.func)
            return _call(fn, [ev(a) for a in n.args], {k.arg: ev(k.value) for k in n.keywords})
        raise EvalError(f"{type(n).__name__} is not available in a watch expression (it reads names, attributes, "
                        f"items, arithmetic, comparisons and calls of functions that read)")

    try:
        return ev(tree.body)
    except EvalError:
        raise
    except RecursionError:
        raise EvalError("the expression nests too deeply") from None
    except MemoryError:
        raise EvalError("out of memory evaluating the expression") from None
