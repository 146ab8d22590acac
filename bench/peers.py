"""msvm against onnxruntime (CPU) and numpy on the same weights, side by side in one run (not a test).

For mindcv's resnet18, resnet50 and mobilenet_v2_100 (``mindcv.create_model`` under ``msvm.as_mindspore()``, eval
mode, the weights of tests/refs/cv.py ``test_weights``), batch 1, one thread, at 224, 160 and 192:

- **msvm**: the Cell's steady time at jit_level 'auto' (compiles done, replays built) — and at
  'auto' with fusion off, so the fused convolution's share shows;
- **onnxruntime**: an ONNX graph translated from msvm's own bytecode (before fusion: every
  CONV2D, batch-norm multiply/add, ReLU, pool, reshape and matmul, with the Parameters as
  initializers), so both peers run exactly the same network and weights; dynamic H and W (one
  session serves every size), ``intra_op_num_threads=1``, all graph optimizations on (onnxruntime
  folds the batch norms into the convolutions itself);
- **numpy**: tests/refs/cv.py's reference in float32 (tap-by-tap convolutions; a reference,
  not a tuned peer);
- **floor**: the network's FLOPs (from the ONNX graph's inferred shapes) at the single-core
  sgemm peak measured in this run (numpy's BLAS, 1024^3 float32, best of a few).

Medians of interleaved runs (a shared machine's load hits all peers alike). A peer that is not
installed (``pip install .[bench]``) is skipped with a line saying so.

Also examples/bert_layer.py's BERT-base layer at S=16 and 128 (``bert``; onnxruntime gets a static
graph per length there, since the layer's reshapes carry two symbolic dims).

    python bench/peers.py [resnet18 resnet50 bert] [--sizes 224,160,192] [--lengths 16,128] [--runs 7]
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "vm"))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

import msvm as ms  # noqa: E402
import numpy as np  # noqa: E402
from msvm.compiler import tiers  # noqa: E402
from refs import cv  # noqa: E402
from zoo_cv import build  # noqa: E402 - the same model with the same test weights as bench/zoo_cv.py

try:
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
except ImportError:          # the bench extra is not installed: that peer is skipped
    onnx = ort = None

MODELS = ["resnet18", "resnet50", "mobilenet_v2_100", "bert"]


# ---------------------------------------------------------------- msvm bytecode -> ONNX

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

    def const(self, value, hint="c"):
        arr = np.asarray(value)
        if arr.dtype == np.float64:
            arr = arr.astype(np.float32)
        key = self.name(hint)
        self.inits[key] = numpy_helper.from_array(arr, key)
        return key


_BINARY = {"BROADCAST_ADD": "Add", "BROADCAST_SUB": "Sub", "BROADCAST_MUL": "Mul", "BROADCAST_DIV": "Div",
           "BROADCAST_MAX": "Max", "BROADCAST_MIN": "Min"}
_UNARY = {"RELU": "Relu", "SIGMOID": "Sigmoid", "TANH": "Tanh", "EXP": "Exp", "SQRT": "Sqrt", "NEG": "Neg"}


def _symbol(d):
    """The atom of a dim that is one plain symbol (x0), else None."""
    terms = getattr(d, "terms", None)
    if terms and len(terms) == 1:
        mono, coeff = terms[0]
        if coeff == 1 and len(mono) == 1 and mono[0][1] == 1:
            atom = mono[0][0]
            return atom.args[0] if getattr(atom, "args", None) else str(atom)
    return None


def _dims(shape, env=None):
    out = []
    for d in shape:
        v = d if isinstance(d, int) else d.const_value() if hasattr(d, "const_value") else None
        if v is None and env is not None:
            v = d.evaluate(env)
        out.append(-1 if v is None else int(v))
    if out.count(-1) > 1:
        raise Untranslated(f"RESHAPE to {shape}: more than one symbolic dim")
    return out


def _pads(pad, kh, kw):
    if pad == ("same",):
        return {"auto_pad": "SAME_UPPER"}          # MindSpore's 'same': the odd pixel after
    t, b, l, r = pad
    return {"pads": [t, l, b, r]}


def _translate(g: _Graph, code, cell, args, prefix, shapes=None):
    """Symbolically run one Code (straight-line) on ONNX value names; returns the returned value's name.
    With ``shapes`` ({value name: concrete shape}, the graph input's given) symbolic dims are
    evaluated at those shapes (a static graph: BERT's reshapes have two symbolic dims)."""
    from msvm.executor import resolve_path
    from msvm.frontend.compiler import cell_getattr

    local = dict(enumerate(args))
    stack = []
    env = None
    if shapes is not None:
        env = {}
        for (_, t), arg in zip(code.params, args):
            for d, actual in zip(getattr(t, "shape", ()), shapes.get(arg, ())):
                if _symbol(d) is not None:
                    env[_symbol(d)] = actual
    for idx, ins in enumerate(code.instrs):
        op, a = ins.op.name, code.decode_args(ins)
        if op == "LOAD_TENSOR":
            stack.append(local[ins.args[0]])
        elif op == "STORE_TENSOR":
            local[ins.args[0]] = stack.pop()
        elif op == "LOAD_PARAM":
            attr = a[0]
            key = f"{prefix}{attr}"
            if key not in g.inits:
                g.inits[key] = numpy_helper.from_array(np.asarray(cell_getattr(cell, attr).asnumpy()), key)
            stack.append(key)
        elif op == "LOAD_CONST":
            if not isinstance(a[0], (int, float)) or isinstance(a[0], bool):
                raise Untranslated(f"LOAD_CONST {a[0]!r}")
            stack.append(g.const(np.float32(a[0])))
        elif op == "CALL_CELL":
            (path, sub), n = a
            vals = stack[len(stack) - n:]
            del stack[len(stack) - n:]
            if env is not None:                  # the arguments' concrete shapes, from the verified types
                for v, t in zip(vals, code.stack_types[idx][-n:]):
                    shapes[v] = tuple(int(d) if isinstance(d, int) else d.evaluate(env) for d in t.shape)
            stack.append(_translate(g, sub, resolve_path(cell, path), vals, f"{prefix}{path}.", shapes))
        elif op == "RETURN":
            return stack.pop()
        elif op == "CONV2D":
            stride, pad, dil, group = a
            w = stack.pop()
            x = stack.pop()
            kh, kw = numpy_helper.to_array(g.inits[w]).shape[2:]
            stack.append(g.node("Conv", [x, w], "conv", strides=list(stride), dilations=list(dil), group=int(group),
                                kernel_shape=[int(kh), int(kw)], **_pads(pad, kh, kw)))
        elif op == "MAX_POOL2D":
            kernel, stride, pad = a
            stack.append(g.node("MaxPool", [stack.pop()], kernel_shape=list(kernel), strides=list(stride),
                                **_pads(pad, *kernel)))
        elif op == "ADAPTIVE_AVG_POOL2D" and tuple(a[0]) == (1, 1):
            stack.append(g.node("GlobalAveragePool", [stack.pop()]))
        elif op == "REDUCE_MEAN":
            axes, keep = a
            stack.append(g.node("ReduceMean", [stack.pop(), g.const(np.array(axes, np.int64))], keepdims=int(keep)))
        elif op == "RESHAPE":
            stack.append(g.node("Reshape", [stack.pop(), g.const(np.array(_dims(a[0], env), np.int64))]))
        elif op == "MATMUL":
            ta, tb = a
            b, x = stack.pop(), stack.pop()
            if ta:
                x = g.node("Transpose", [x], perm=[1, 0])
            if tb:
                b = g.node("Transpose", [b], perm=[1, 0])
            stack.append(g.node("MatMul", [x, b]))
        elif op in _BINARY:
            b, x = stack.pop(), stack.pop()
            stack.append(g.node(_BINARY[op], [x, b]))
        elif op in _UNARY:
            stack.append(g.node(_UNARY[op], [stack.pop()]))
        elif op == "RSQRT":
            stack.append(g.node("Reciprocal", [g.node("Sqrt", [stack.pop()])]))
        elif op == "BATCH_MATMUL":
            ta, tb = a
            b, x = stack.pop(), stack.pop()
            perm = [0, 1, 3, 2]                      # (rank 4: BERT's heads)
            if ta:
                x = g.node("Transpose", [x], perm=perm)
            if tb:
                b = g.node("Transpose", [b], perm=perm)
            stack.append(g.node("MatMul", [x, b]))
        elif op == "TRANSPOSE":
            stack.append(g.node("Transpose", [stack.pop()], perm=list(a[0])))
        elif op == "SOFTMAX":
            stack.append(g.node("Softmax", [stack.pop()], axis=int(a[0])))
        elif op == "LAYER_NORM" and a[0] == a[1] == -1:
            beta, gamma = stack.pop(), stack.pop()
            stack.append(g.node("LayerNormalization", [stack.pop(), gamma, beta], axis=-1, epsilon=float(a[2])))
        elif op == "GELU":                              # x * (1 + erf(x / sqrt 2)) / 2
            x = stack.pop()
            e = g.node("Erf", [g.node("Mul", [x, g.const(np.float32(1 / np.sqrt(2)))])])
            half = g.node("Mul", [x, g.const(np.float32(0.5))])
            stack.append(g.node("Mul", [half, g.node("Add", [e, g.const(np.float32(1))])]))
        elif op == "BATCH_NORM":
            var, mean, beta, gamma = stack.pop(), stack.pop(), stack.pop(), stack.pop()
            stack.append(g.node("BatchNormalization", [stack.pop(), gamma, beta, mean, var], "bn", epsilon=float(a[0])))
        elif op == "RELU6":
            stack.append(g.node("Clip", [stack.pop(), g.const(np.float32(0)), g.const(np.float32(6))]))
        else:
            raise Untranslated(f"{op} at {code.name} 0x{ins.offset:04x}")
    raise Untranslated(f"{code.name}: no RETURN")


def onnx_model(net, source_code, dims, name="image", static=False):
    """An onnx ModelProto of the Cell's (unfused) bytecode with its Parameters as initializers; the
    input's dims are ints or names (dynamic), or all ints with ``static`` (symbolic dims evaluated)."""
    g = _Graph()
    out = _translate(g, source_code, net, [name], "", {name: tuple(dims)} if static else None)
    inp = helper.make_tensor_value_info(name, TensorProto.FLOAT, list(dims))
    res = helper.make_tensor_value_info(out, TensorProto.FLOAT, None)
    graph = helper.make_graph(g.nodes, "msvm", [inp], [res], list(g.inits.values()))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def flops(model, shape) -> float:
    """Multiply-adds x 2 of every Conv and MatMul, from shapes inferred at a static input shape."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    dims = m.graph.input[0].type.tensor_type.shape.dim
    for d, v in zip(dims, shape):
        d.ClearField("dim_param")
        d.dim_value = v
    m = onnx.shape_inference.infer_shapes(m, data_prop=True)
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in m.graph.value_info}
    shapes.update({v.name: list(v.dims) for v in m.graph.initializer})
    total = 0.0
    for n in m.graph.node:
        if n.op_type == "Conv":
            w = shapes[n.input[1]]
            total += 2.0 * float(np.prod(shapes[n.output[0]])) * w[1] * w[2] * w[3]
        elif n.op_type == "MatMul":
            a, b = shapes[n.input[0]], shapes[n.input[1]]
            total += 2.0 * float(np.prod(a)) * b[-1]
    return total


# ---------------------------------------------------------------- timing

def sgemm_peak(n=1024, reps=5) -> float:
    a = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
    b = a.T.copy()
    a @ b
    best = min(_timed(lambda: a @ b) for _ in range(reps))
    return 2.0 * n ** 3 / best


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def run_model(mindcv, name, sizes, runs, peak):
    rng = np.random.default_rng(0)
    xs = {s: rng.standard_normal((1, 3, s, s)).astype(np.float32) for s in sizes}
    fused, weights = build(mindcv, name)
    unfused, _ = build(mindcv, name, weights)
    p32 = {k: v.astype(np.float32) for k, v in weights.items()}
    nets = {"fused": (fused, True), "unfused": (unfused, False)}

    def call(which, s):
        net, fusion = nets[which]
        ms.set_context(jit_config={"jit_level": "auto", "enable_fusion": fusion})
        return net(ms.Tensor(xs[s]))

    for _ in range(8):                         # 'auto' moves sites to L3 after a few calls
        for s in sizes:
            for which in nets:
                call(which, s)
        tiers.wait_for_compiles(120)
    peers = {"msvm": lambda s: call("fused", s), "msvm unfused": lambda s: call("unfused", s),
             "numpy f32": lambda s: cv.MODELS[name](p32, xs[s])}
    sess, model, why = None, None, ""
    if ort is None:
        why = "onnxruntime/onnx not installed (pip install .[bench])"
    else:
        try:
            var = next(iter(fused._runner.variants.values()))
            model = onnx_model(fused, var.source, ["N", 3, "H", "W"])
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = opts.inter_op_num_threads = 1
            opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
            peers["onnxruntime"] = lambda s: sess.run(None, {"image": xs[s]})[0]
        except Untranslated as e:
            why = f"the bytecode has an op the ONNX translation lacks: {e}"
    # the same answers first (the ONNX graph is built from the bytecode: it must agree)
    for s in sizes:
        ref = call("fused", s).asnumpy()
        for k, fn in peers.items():
            out = np.asarray(fn(s).asnumpy() if hasattr(fn(s), "asnumpy") else fn(s))
            err = np.abs(out - ref).max() / np.abs(ref).max()
            if err > 1e-3:
                print(f"  ! {name} {s}: {k} differs from msvm by {err:.1e} (relative to the max logit)")
    times = {k: {s: [] for s in sizes} for k in peers}
    for _ in range(runs):
        for s in sizes:
            for k, fn in peers.items():
                if k == "numpy f32" and len(times[k][s]) >= 3:
                    continue                   # the tap-by-tap reference is slow: three runs do
                times[k][s].append(_timed(lambda fn=fn, s=s: fn(s)) * 1e3)
    med = {k: {s: statistics.median(v) for s, v in d.items()} for k, d in times.items()}
    if why:
        print(f"  onnxruntime skipped: {why}")
    for s in sizes:
        f = flops(model, (1, 3, s, s)) if model is not None else None
        floor = f / peak * 1e3 if f else None
        o = med.get("onnxruntime", {}).get(s)
        m, u, n = med["msvm"][s], med["msvm unfused"][s], med["numpy f32"][s]
        cells = [f"{name:10} {s:>4}", f"{m:>8.1f}", f"{u:>9.1f}", f"{o:>8.1f}" if o else f"{'-':>8}",
                 f"{n:>8.1f}", f"{floor:>7.1f}" if floor else f"{'-':>7}",
                 f"{m / o:>8.2f}" if o else f"{'-':>8}", f"{m / n:>8.2f}",
                 f"{floor / m * 100:>6.0f}%" if floor else f"{'-':>7}", f"{floor / o * 100:>6.0f}%" if o else ""]
        print(" ".join(cells), flush=True)


def run_bert(lengths, runs, peak):
    """examples/bert_layer.py's BERT-base layer (hidden 768, 12 heads, FFN 3072) at each length S."""
    sys.path.insert(0, os.path.join(HERE, "..", "examples"))
    import bert_layer

    layer = bert_layer.layer
    rng = np.random.default_rng(2)
    xs = {s: rng.standard_normal((1, s, 768)).astype(np.float32) for s in lengths}
    ms.set_context(jit_config={"jit_level": "auto", "enable_fusion": True})
    for _ in range(8):
        for s in lengths:
            layer(ms.Tensor(xs[s]))
        tiers.wait_for_compiles(120)
    peers = {"msvm": lambda s: layer(ms.Tensor(xs[s])).asnumpy(),
             "numpy f32": lambda s: bert_layer.numpy_reference(layer, xs[s])}
    models, why = {}, ""
    if ort is None:
        why = "onnxruntime/onnx not installed (pip install .[bench])"
    else:
        var = next(iter(layer._runner.variants.values()))
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = opts.inter_op_num_threads = 1
        try:
            sessions = {}
            for s in lengths:      # (static per length: the layer's reshapes have two symbolic dims)
                models[s] = onnx_model(layer, var.source, [1, s, 768], "hidden", static=True)
                sessions[s] = ort.InferenceSession(models[s].SerializeToString(), opts,
                                                   providers=["CPUExecutionProvider"])
            peers["onnxruntime"] = lambda s: sessions[s].run(None, {"hidden": xs[s]})[0]
        except Untranslated as e:
            why = f"the bytecode has an op the ONNX translation lacks: {e}"
    for s in lengths:
        ref = peers["msvm"](s)
        for k, fn in peers.items():
            err = np.abs(np.asarray(fn(s)) - ref).max() / np.abs(ref).max()
            if err > 1e-3:
                print(f"  ! BERT S={s}: {k} differs from msvm by {err:.1e}")
    times = {k: {s: [] for s in lengths} for k in peers}
    for _ in range(runs):
        for s in lengths:
            for k, fn in peers.items():
                times[k][s].append(_timed(lambda fn=fn, s=s: fn(s)) * 1e3)
    med = {k: {s: statistics.median(v) for s, v in d.items()} for k, d in times.items()}
    if why:
        print(f"  onnxruntime skipped: {why}")
    for s in lengths:
        floor = flops(models[s], (1, s, 768)) / peak * 1e3 if s in models else None
        o, m, n = med.get("onnxruntime", {}).get(s), med["msvm"][s], med["numpy f32"][s]
        print(" ".join([f"{'bert-layer':10} {s:>4}", f"{m:>8.2f}", f"{'':>9}", f"{o:>8.2f}" if o else f"{'-':>8}",
                        f"{n:>8.2f}", f"{floor:>7.2f}" if floor else f"{'-':>7}", f"{m / o:>8.2f}" if o else f"{'-':>8}",
                        f"{m / n:>8.2f}", f"{floor / m * 100:>6.0f}%" if floor else f"{'-':>7}",
                        f"{floor / o * 100:>6.0f}%" if o else ""]), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("models", nargs="*", default=MODELS)
    ap.add_argument("--sizes", default="224,160,192")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--lengths", default="16,128", help="BERT layer sequence lengths")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    ms.as_mindspore()
    import mindcv

    peak = sgemm_peak()
    print(f"[peers] one thread, batch 1; sgemm peak {peak / 1e9:.1f} GFLOP/s (1024^3, this run); "
          f"onnxruntime {ort.__version__ if ort else 'not installed'}; ms, medians")
    print(f"{'model':10} {'size':>4} {'msvm':>8} {'unfused':>9} {'ort':>8} {'numpy':>8} {'floor':>7} "
          f"{'msvm/ort':>8} {'msvm/np':>8} {'msvm%pk':>7} {'ort%pk':>7}")
    for name in args.models:
        if name == "bert":
            run_bert([int(v) for v in args.lengths.split(",")], args.runs, peak)
        else:
            run_model(mindcv, name, sizes, args.runs, peak)


if __name__ == "__main__":
    main()
