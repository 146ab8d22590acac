"""msvm bytecode -> an ONNX graph, so onnxruntime runs exactly the network msvm runs (bench only).

``onnx_model(net, code, dims)`` symbolically runs a Cell's unfused bytecode (its sub-Cells' too)
on ONNX value names: every op becomes the ONNX node(s) computing the same thing, the Parameters
become initializers, and the verified types of the bytecode (``code.stack_types``) say each
value's dtype, so mixed int/float operands get the Cast that msvm's promotion implies. Dims are
ints or names (a dynamic input: the CNNs), or, with ``static``, every symbolic dim is evaluated at
the given input shapes (the transformers: their reshapes carry two symbolic dims, and a static
graph per length is onnxruntime's best case). An op with no translation raises ``Untranslated``.

``flops(model, shapes)`` counts 2 x multiply-adds of every Conv, MatMul and Gemm at given input shapes.
"""

from __future__ import annotations

import numpy as np

try:
    import onnx
    from onnx import TensorProto, helper, numpy_helper
except ImportError:          # (onnx_model raises it: the benchmarks then skip onnxruntime and say so)
    onnx = None


class Untranslated(Exception):
    pass


class _Graph:
    def __init__(self):
        self.nodes, self.inits, self.n = [], {}, 0

    def name(self, hint):
        self.n += 1
        return f"{hint}_{self.n}"

    def node(self, op, ins, hint=None, **attrs):
        out = self.name(hint or op.lower())
        self.nodes.append(helper.make_node(op, list(ins), [out], **attrs))
        return out

    def const(self, value, hint="c", dtype=None):
        arr = np.asarray(value, dtype=dtype)
        if arr.dtype == np.float64:
            arr = arr.astype(np.float32)
        key = self.name(hint)
        self.inits[key] = numpy_helper.from_array(arr, key)
        return key


_NP = {"Float32": np.float32, "Float16": np.float16, "Float64": np.float32, "Int32": np.int32, "Int64": np.int64,
       "Bool": np.bool_, "Int8": np.int8, "UInt8": np.uint8, "Int16": np.int16}
_ONNX = {} if onnx is None else {
    np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16, np.int32: TensorProto.INT32,
    np.int64: TensorProto.INT64, np.bool_: TensorProto.BOOL, np.int8: TensorProto.INT8,
    np.uint8: TensorProto.UINT8, np.int16: TensorProto.INT16}
_BINARY = {"BROADCAST_ADD": "Add", "BROADCAST_SUB": "Sub", "BROADCAST_MUL": "Mul", "BROADCAST_DIV": "Div",
           "BROADCAST_MAX": "Max", "BROADCAST_MIN": "Min", "BROADCAST_POW": "Pow", "BROADCAST_GE": "GreaterOrEqual",
           "BROADCAST_GT": "Greater", "BROADCAST_LE": "LessOrEqual", "BROADCAST_LT": "Less", "BROADCAST_EQ": "Equal"}
_COMPARE = {"GreaterOrEqual", "Greater", "LessOrEqual", "Less", "Equal"}
_UNARY = {"RELU": "Relu", "SIGMOID": "Sigmoid", "TANH": "Tanh", "EXP": "Exp", "SQRT": "Sqrt", "NEG": "Neg",
          "LOGICAL_NOT": "Not", "ERF": "Erf", "ABS": "Abs"}


def _np_of(t):
    """The numpy dtype onnxruntime computes a bytecode type in (float64 runs as float32, as msvm's models do)."""
    d = getattr(t, "dtype", None)
    if d is None:
        return None
    name = getattr(d, "name", str(d))
    for k, v in _NP.items():
        if k.lower() == str(name).lower():
            return v
    raise Untranslated(f"dtype {name}")


def _symbol(d):
    """The atom of a dim that is one plain symbol (x0), else None."""
    terms = getattr(d, "terms", None)
    if terms and len(terms) == 1:
        mono, coeff = terms[0]
        if coeff == 1 and len(mono) == 1 and mono[0][1] == 1:
            atom = mono[0][0]
            return atom.args[0] if getattr(atom, "args", None) else str(atom)
    return None


def _value(d, env):
    """An int dim or bound (None stays None) evaluated at env; None when it stays symbolic."""
    if d is None or isinstance(d, (int, np.integer)):
        return d
    v = d.const_value() if hasattr(d, "const_value") else None
    if v is None and env is not None:
        v = d.evaluate(env)
    return None if v is None else int(v)


def _dims(shape, env=None):
    out = [_value(d, env) for d in shape]
    out = [-1 if v is None else v for v in out]
    if out.count(-1) > 1:
        raise Untranslated(f"RESHAPE to {shape}: more than one symbolic dim")
    return out


def _pads(pad, kh, kw):
    if pad == ("same",):
        return {"auto_pad": "SAME_UPPER"}          # MindSpore's 'same': the odd pixel after
    t, b, l, r = pad
    return {"pads": [t, l, b, r]}


class _Run:
    """One Code's symbolic run: ``stack`` holds ONNX value names (or tuples of them)."""

    def __init__(self, g, code, cell, prefix, env, shapes):
        self.g, self.code, self.cell, self.prefix, self.env, self.shapes = g, code, cell, prefix, env, shapes
        self.stack = []

    def pop(self, n):
        vals = self.stack[len(self.stack) - n:]
        del self.stack[len(self.stack) - n:]
        return vals

    def cast_to(self, name, have, want):
        return name if have is None or have == want else self.g.node("Cast", [name], to=_ONNX[want])

    def operands(self, idx, n, want):
        """The top n values, each cast to ``want`` (scalars are consts: made in that dtype)."""
        vals, types = self.pop(n), self.code.stack_types[idx][-n:]
        return [self.cast_to(v, _np_of(t), want) for v, t in zip(vals, types)]

    def out_type(self, idx):
        return _np_of(self.code.stack_types[idx + 1][-1])


def _translate(g: _Graph, code, cell, args, prefix, env, shapes):
    from msvm.executor import resolve_path
    from msvm.frontend.compiler import cell_getattr

    local = dict(enumerate(args))
    r = _Run(g, code, cell, prefix, env, shapes)
    st = r.stack
    for idx, ins in enumerate(code.instrs):
        op, a = ins.op.name, code.decode_args(ins)
        if op == "LOAD_TENSOR":
            st.append(local[ins.args[0]])
        elif op == "STORE_TENSOR":
            local[ins.args[0]] = st.pop()
        elif op == "LOAD_PARAM":
            key = f"{prefix}{a[0]}"
            if key not in g.inits:
                obj = cell
                for part in a[0].split("."):
                    obj = cell_getattr(obj, part)
                arr = np.asarray(obj.asnumpy())
                g.inits[key] = numpy_helper.from_array(arr.astype(np.float32) if arr.dtype == np.float64 else arr, key)
            st.append(key)
        elif op == "LOAD_CONST":
            v = a[0]
            if v is None:
                st.append(None)
            elif isinstance(v, np.ndarray) or (isinstance(v, (int, float)) and not isinstance(v, bool)):
                want = _np_of(code.stack_types[idx + 1][-1]) or np.float32
                st.append(g.const(np.asarray(v, dtype=want)))
            else:
                raise Untranslated(f"LOAD_CONST {v!r}")
        elif op == "LOAD_SYM":
            v = _value(a[0], env)
            if v is None:
                raise Untranslated("LOAD_SYM of a symbolic dim in a dynamic graph")
            st.append(g.const(np.int64(v)))
        elif op == "BUILD_TUPLE":
            st.append(tuple(r.pop(a[0])))
        elif op == "UNPACK_TUPLE":
            st.extend(reversed(st.pop()))
        elif op == "CALL_CELL":
            (path, sub), n = a
            vals = r.pop(n)
            if env is not None:                  # the arguments' concrete shapes, from the verified types
                for v, t in zip(vals, code.stack_types[idx][-n:]):
                    if isinstance(v, str) and hasattr(t, "shape"):
                        shapes[v] = tuple(_value(d, env) for d in t.shape)
            st.append(_translate(g, sub, resolve_path(cell, path), vals, f"{prefix}{path}.", _env_of(sub, vals, shapes)
                                 if env is not None else None, shapes))
        elif op == "RETURN":
            return st.pop()
        else:
            _OPS.get(op, _untranslated)(r, idx, op, a)
    raise Untranslated(f"{code.name}: no RETURN")


def _env_of(code, args, shapes):
    env = {}
    for (_, t), arg in zip(code.params, args):
        for d, actual in zip(getattr(t, "shape", ()), shapes.get(arg, ())):
            if _symbol(d) is not None and actual is not None:
                env[_symbol(d)] = actual
    return env


def _untranslated(r, idx, op, a):
    ins = r.code.instrs[idx]
    raise Untranslated(f"{op} at {r.code.name} 0x{ins.offset:04x}")


def _binary(r, idx, op, a):
    onnx_op = _BINARY[op]
    out = r.out_type(idx)
    if onnx_op in _COMPARE:                                   # compare in the operands' promoted dtype
        types = [_np_of(t) for t in r.code.stack_types[idx][-2:]]
        tensor_types = [t for t in types if t is not None]
        want = np.result_type(*tensor_types).type if tensor_types else np.float32
    else:
        want = out
    x, b = r.operands(idx, 2, want)
    r.stack.append(r.g.node(onnx_op, [x, b]))


def _unary(r, idx, op, a):
    (x,) = r.operands(idx, 1, r.out_type(idx))
    r.stack.append(r.g.node(_UNARY[op], [x]))


def _gelu(r, idx, op, a):
    g, (x,) = r.g, r.operands(idx, 1, r.out_type(idx))
    if op == "GELU":                                          # x * (1 + erf(x / sqrt 2)) / 2
        inner = g.node("Erf", [g.node("Mul", [x, g.const(np.float32(1 / np.sqrt(2)))])])
    else:                                                     # GELU_TANH: tanh(sqrt(2/pi) (x + 0.044715 x^3))
        cube = g.node("Mul", [g.node("Mul", [x, x]), x])
        poly = g.node("Add", [x, g.node("Mul", [cube, g.const(np.float32(0.044715))])])
        inner = g.node("Tanh", [g.node("Mul", [poly, g.const(np.float32(np.sqrt(2 / np.pi)))])])
    half = g.node("Mul", [x, g.const(np.float32(0.5))])
    r.stack.append(g.node("Mul", [half, g.node("Add", [inner, g.const(np.float32(1))])]))


def _conv(r, idx, op, a):
    stride, pad, dil, group = a
    g = r.g
    x, w = r.pop(2)
    kh, kw = numpy_helper.to_array(g.inits[w]).shape[2:]
    r.stack.append(g.node("Conv", [x, w], "conv", strides=list(stride), dilations=list(dil), group=int(group),
                          kernel_shape=[int(kh), int(kw)], **_pads(pad, kh, kw)))


def _matmul(r, idx, op, a):
    ta, tb = a
    g = r.g
    x, b = r.pop(2)
    rank = len(r.code.stack_types[idx][-1].shape)
    perm = list(range(rank - 2)) + [rank - 1, rank - 2]
    if ta:
        x = g.node("Transpose", [x], perm=perm)
    if tb:
        b = g.node("Transpose", [b], perm=perm)
    r.stack.append(g.node("MatMul", [x, b]))


def _slice(r, idx, op, a):
    """Basic indexing: Slice for the ranges, Gather+none for ints (drop the dim), Unsqueeze for None."""
    (spec,) = a
    g, env = r.g, r.env
    x = r.stack.pop()
    rank = len(r.code.stack_types[idx][-1].shape)
    n_real = sum(1 for s in spec if s[0] in ("i", "s"))
    full = []
    for s in spec:
        full.extend([("s", None, None, None)] * (rank - n_real) if s[0] == "e" else [s])
    full.extend([("s", None, None, None)] * (rank - sum(1 for s in full if s[0] in ("i", "s"))))
    starts, ends, axes, steps, drop, new = [], [], [], [], [], []
    dim = out_dim = 0
    for s in full:
        if s[0] == "n":
            new.append(out_dim)
            out_dim += 1
            continue
        if s[0] == "i":
            starts.append(s[1])
            ends.append(s[1] + 1 if s[1] != -1 else np.iinfo(np.int64).max)
            axes.append(dim)
            steps.append(1)
            drop.append(dim)
        else:
            start, stop, step = (_value(v, env) for v in s[1:])
            if any(v is None and b is not None for v, b in zip((start, stop, step), s[1:])):
                raise Untranslated("SLICE with symbolic bounds in a dynamic graph")
            step = 1 if step is None else step
            if (start, stop, step) != (None, None, 1):
                big = np.iinfo(np.int64).max
                starts.append(start if start is not None else (0 if step > 0 else -1))
                ends.append(stop if stop is not None else (big if step > 0 else -big))
                axes.append(dim)
                steps.append(step)
            out_dim += 1
        dim += 1
    if axes:
        x = g.node("Slice", [x, g.const(np.array(starts, np.int64)), g.const(np.array(ends, np.int64)),
                             g.const(np.array(axes, np.int64)), g.const(np.array(steps, np.int64))])
    if drop:
        x = g.node("Squeeze", [x, g.const(np.array(drop, np.int64))])
    if new:
        x = g.node("Unsqueeze", [x, g.const(np.array(new, np.int64))])
    r.stack.append(x)


def _layout(r, idx, op, a):
    g, x = r.g, r.stack.pop()
    if op == "RESHAPE":
        out = g.node("Reshape", [x, g.const(np.array(_dims(a[0], r.env), np.int64))])
    elif op == "TRANSPOSE":
        out = g.node("Transpose", [x], perm=list(a[0]))
    elif op == "EXPAND_DIMS":
        rank = len(r.code.stack_types[idx][-1].shape)
        axis = a[0] + rank + 1 if a[0] < 0 else a[0]
        out = g.node("Unsqueeze", [x, g.const(np.array([axis], np.int64))])
    elif op == "SQUEEZE":
        axes = a[0] if isinstance(a[0], (tuple, list)) else (a[0],)
        out = g.node("Squeeze", [x, g.const(np.array(axes, np.int64))]) if axes else g.node("Squeeze", [x])
    elif op == "BROADCAST_TO":
        out = g.node("Expand", [x, g.const(np.array(_dims(a[0], r.env), np.int64))])
    elif op == "CAST":
        out = r.cast_to(x, _np_of(r.code.stack_types[idx][-1]), r.out_type(idx))
    else:
        raise AssertionError(op)
    r.stack.append(out)


def _made(r, idx, op, a):
    """ARANGE and FILL make constants (their sizes are evaluated: static graphs)."""
    want = r.out_type(idx)
    if op == "ARANGE":
        start, stop, step = (_value(v, r.env) for v in a[:3])
        if None in (start, stop, step):
            raise Untranslated("ARANGE of a symbolic dim in a dynamic graph")
        r.stack.append(r.g.const(np.arange(start, stop, step).astype(want)))
    else:
        shape = _dims(a[0], r.env)
        if -1 in shape:
            raise Untranslated("FILL of a symbolic shape in a dynamic graph")
        r.stack.append(r.g.const(np.full(shape, a[1], dtype=want)))


def _where(r, idx, op, a):
    want = r.out_type(idx)
    cond, x, b = r.pop(3)
    tcond, tx, tb = r.code.stack_types[idx][-3:]
    cond = r.cast_to(cond, _np_of(tcond), np.bool_)
    r.stack.append(r.g.node("Where", [cond, r.cast_to(x, _np_of(tx), want), r.cast_to(b, _np_of(tb), want)]))


def _norm(r, idx, op, a):
    g = r.g
    if op == "LAYER_NORM":
        if not a[0] == a[1] == -1:
            raise Untranslated("LAYER_NORM over more than the last axis")
        x, gamma, beta = r.pop(3)
        r.stack.append(g.node("LayerNormalization", [x, gamma, beta], axis=-1, epsilon=float(a[2])))
    else:                                                  # BATCH_NORM (inference)
        x, gamma, beta, mean, var = r.pop(5)
        r.stack.append(g.node("BatchNormalization", [x, gamma, beta, mean, var], "bn", epsilon=float(a[0])))


def _misc(r, idx, op, a):
    g = r.g
    if op == "MAX_POOL2D":
        kernel, stride, pad = a
        r.stack.append(g.node("MaxPool", [r.stack.pop()], kernel_shape=list(kernel), strides=list(stride),
                              **_pads(pad, *kernel)))
    elif op == "AVG_POOL2D":
        kernel, stride, pad, count_pad = a
        r.stack.append(g.node("AveragePool", [r.stack.pop()], kernel_shape=list(kernel), strides=list(stride),
                              count_include_pad=int(bool(count_pad)), **_pads(pad, *kernel)))
    elif op == "ADAPTIVE_AVG_POOL2D":
        if tuple(a[0]) != (1, 1):
            raise Untranslated(f"ADAPTIVE_AVG_POOL2D {a[0]}")
        r.stack.append(g.node("GlobalAveragePool", [r.stack.pop()]))
    elif op in ("REDUCE_MEAN", "REDUCE_SUM"):
        axes, keep = a
        r.stack.append(g.node("ReduceMean" if op == "REDUCE_MEAN" else "ReduceSum",
                              [r.stack.pop(), g.const(np.array(axes, np.int64))], keepdims=int(keep)))
    elif op == "RSQRT":
        r.stack.append(g.node("Reciprocal", [g.node("Sqrt", [r.stack.pop()])]))
    elif op == "SQUARE":
        x = r.stack.pop()
        r.stack.append(g.node("Mul", [x, x]))
    elif op == "RELU6":
        r.stack.append(g.node("Clip", [r.stack.pop(), g.const(np.float32(0)), g.const(np.float32(6))]))
    elif op == "SOFTMAX":
        r.stack.append(g.node("Softmax", [r.stack.pop()], axis=int(a[0])))
    elif op == "GATHER":
        x, i = r.pop(2)
        r.stack.append(g.node("Gather", [x, i], axis=int(a[0])))
    elif op == "CONCAT":
        want = r.out_type(idx)
        r.stack.append(g.node("Concat", r.operands(idx, a[0], want), axis=int(a[1])))
    else:
        raise AssertionError(op)


_OPS = {**{k: _binary for k in _BINARY}, **{k: _unary for k in _UNARY}, "GELU": _gelu, "GELU_TANH": _gelu,
        "CONV2D": _conv, "MATMUL": _matmul, "BATCH_MATMUL": _matmul, "SLICE": _slice,
        **{k: _layout for k in ("RESHAPE", "TRANSPOSE", "EXPAND_DIMS", "SQUEEZE", "BROADCAST_TO", "CAST")},
        "ARANGE": _made, "FILL": _made, "WHERE": _where, "LAYER_NORM": _norm, "BATCH_NORM": _norm,
        **{k: _misc for k in ("MAX_POOL2D", "AVG_POOL2D", "ADAPTIVE_AVG_POOL2D", "REDUCE_MEAN", "REDUCE_SUM",
                              "RSQRT", "SQUARE", "RELU6", "SOFTMAX", "GATHER", "CONCAT")}}


def onnx_model(net, source_code, inputs, static=False):
    """An onnx ModelProto of the Cell's (unfused) bytecode with its Parameters as initializers.
    ``inputs``: [(name, dims, numpy dtype)], dims ints or names (dynamic); with ``static`` all ints
    and every symbolic dim is evaluated at them."""
    if onnx is None:
        raise ImportError("onnx is not installed (pip install .[bench])")
    g = _Graph()
    names = [n for n, _, _ in inputs]
    shapes = {n: tuple(d) for n, d, _ in inputs}
    env = _env_of(source_code, names, shapes) if static else None
    out = _translate(g, source_code, net, names, "", env, shapes)
    outs = [o for o in (out if isinstance(out, tuple) else (out,)) if o is not None]
    ins = [helper.make_tensor_value_info(n, _ONNX[np.dtype(t).type], list(d)) for n, d, t in inputs]
    res = [helper.make_empty_tensor_value_info(o) for o in outs]
    _clips(g, set(outs))
    graph = helper.make_graph(g.nodes, "msvm", ins, res, list(g.inits.values()))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _clips(g, outs) -> None:
    """``Min(Relu(x), c)`` (msvm's relu6: clip(relu(x), None, 6)) -> ``Clip(x, 0, c)`` where c is a
    scalar constant and nothing else reads the Relu: the node an exporter writes for ReLU6, which
    onnxruntime fuses into the convolution before it (as Relu + Min it left the NCHWc layout
    around every Min: MobileNet v2 paid 35 reorders each way, a third of its time)."""
    readers: dict = {}
    for n in g.nodes:
        for i in n.input:
            readers[i] = readers.get(i, 0) + 1
    made, dropped = {n.output[0]: n for n in g.nodes}, set()
    for k, n in enumerate(g.nodes):
        if n.op_type != "Min" or len(n.input) != 2:
            continue
        for a, c in (n.input, n.input[::-1]):
            src, bound = made.get(a), g.inits.get(c)
            if (src is not None and src.op_type == "Relu" and readers.get(a) == 1 and a not in outs
                    and bound is not None and not bound.dims and bound.data_type == TensorProto.FLOAT):
                g.nodes[k] = helper.make_node("Clip", [src.input[0], g.const(np.float32(0)), c], list(n.output))
                dropped.add(id(src))
                break
    g.nodes[:] = [n for n in g.nodes if id(n) not in dropped]


def flops(model, shapes) -> float:
    """Multiply-adds x 2 of every Conv and MatMul, from shapes inferred at static input shapes
    (``shapes``: one shape per graph input)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for inp, shape in zip(m.graph.input, shapes):
        for d, v in zip(inp.type.tensor_type.shape.dim, shape):
            d.ClearField("dim_param")
            d.dim_value = v
    m = onnx.shape_inference.infer_shapes(m, data_prop=True)
    dims = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in m.graph.value_info}
    dims.update({v.name: list(v.dims) for v in m.graph.initializer})
    dims.update({v.name: list(s) for v, s in zip(m.graph.input, shapes)})
    total = 0.0
    for n in m.graph.node:
        if n.op_type == "Conv":
            w = dims[n.input[1]]
            total += 2.0 * float(np.prod(dims[n.output[0]])) * w[1] * w[2] * w[3]
        elif n.op_type == "MatMul":
            a, b = dims[n.input[0]], dims[n.input[1]]
            total += 2.0 * float(np.prod(a)) * b[-1]
    return total
