"""The transformers of bench/peers.py: msvm against onnxruntime on BERT-base, GPT-2 small and one
BERT-base layer, per sequence length, in the configuration (threads, batch) of the calling child.

- ``bert``: tests/models/bert.py's BertModel at BERT-base size (vocab 30522, hidden 768, 12 layers,
  12 heads, FFN 3072, 512 positions), inputs ids, token types and an attention mask with the last
  quarter of each row masked off;
- ``gpt2``: tests/models/gpt2.py's GPT2Model at GPT-2 small size (vocab 50257, 768, 12 layers, 12 heads,
  1024 positions), ids and a mask;
- ``bert-layer``: examples/bert_layer.py's single layer (the one msvm was first tuned on).

onnxruntime gets a static graph per length (bench/onnx_graph.py evaluates the reshapes' symbolic dims:
a static graph is its best case), built before any timing; msvm runs one Cell, one bytecode, for every
length. Then **a stream of 20 lengths** (drawn from 8..128, fixed seed) meets msvm cold for each new
length: the stream's total time on its first pass (compiles at new lengths included) and on a second
pass, against onnxruntime running the same stream on its prebuilt sessions.
"""

from __future__ import annotations

import numpy as np

STREAM = 20


def build(name, batch):
    """(Cell, input names, inputs_of(S) -> numpy arrays) at the model's real size."""
    from models import bert, gpt2

    rng = np.random.default_rng(0)
    if name == "bert":
        net = bert.BertModel(bert.BertConfig(seq_length=128, vocab_size=30522, hidden_size=768, num_hidden_layers=12,
                                             num_attention_heads=12, intermediate_size=3072,
                                             max_position_embeddings=512, type_vocab_size=2), is_training=False)
        names = ("input_ids", "token_type_ids", "input_mask")

        def inputs(s):
            ids = rng.integers(0, 30522, (batch, s)).astype(np.int32)
            mask = np.ones((batch, s), np.int32)
            mask[:, s - s // 4:] = 0
            return [ids, (ids % 2).astype(np.int32), mask]
    elif name == "gpt2":
        net = gpt2.GPT2Model(gpt2.GPT2Config(vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12, n_head=12))
        names = ("input_ids", "attention_mask")

        def inputs(s):
            return [rng.integers(0, 50257, (batch, s)).astype(np.int32), np.ones((batch, s), np.int32)]
    elif name == "bert-layer":
        import os
        import sys

        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
        import bert_layer

        net, names = bert_layer.layer, ("hidden",)

        def inputs(s):
            return [rng.standard_normal((batch, s, 768)).astype(np.float32)]
    else:            # (a misspelt name once ran the one-layer example in BERT-base's place)
        raise ValueError(f"no NLP model {name!r}: bert, gpt2 or bert-layer")
    net.set_train(False)
    return net, names, inputs


def _first(out):
    """The first output as numpy (BertModel returns a tuple)."""
    while isinstance(out, (tuple, list)):
        out = out[0]
    return np.asarray(out.asnumpy() if hasattr(out, "asnumpy") else out)


def run(name, lengths, threads, batch, runs, peak, bandwidth):
    import msvm as ms
    from msvm.compiler import tiers
    from onnx_graph import Untranslated, flops, onnx_model
    from peers import _medians, floor_rate, ort_session, row
    from timing import timed

    net, names, inputs_of = build(name, batch)
    xs = {s: inputs_of(s) for s in lengths}
    ms.set_context(jit_config={"jit_level": "auto", "enable_fusion": True})

    def call(s, x=None):
        return _first(net(*[ms.Tensor(a) for a in (x if x is not None else xs[s])]))

    for _ in range(8):
        for s in lengths:
            call(s)
        tiers.wait_for_compiles(120)
    peers = {"msvm": call}
    models, sessions, why = {}, {}, ""
    try:
        var = next(iter(net._runner.variants.values()))
        for s in lengths:
            models[s] = onnx_model(net, var.source, [(n, a.shape, a.dtype) for n, a in zip(names, xs[s])], static=True)
            sessions[s] = ort_session(models[s], threads)
        peers["ort"] = lambda s: sessions[s].run(None, dict(zip(names, xs[s])))[0]
    except ImportError:
        why = "onnxruntime/onnx not installed (pip install .[bench])"
    except Untranslated as e:
        why = f"the bytecode has an op the ONNX translation lacks: {e}"
    for s in lengths:
        ref = peers["msvm"](s)
        for k, fn in peers.items():
            err = np.abs(np.asarray(fn(s)) - ref).max() / np.abs(ref).max()
            if err > 1e-3:
                print(f"  ! {name} S={s}: {k} differs from msvm by {err:.1e}")
    peers["sgemm"] = lambda s: peak.call()     # the floor's product, timed in the same rounds
    med = _medians(peers, lengths, runs)
    if why:
        print(f"  onnxruntime skipped: {why}")
    for s in lengths:
        floor = None
        if s in models:
            weights = sum(int(np.prod(t.dims)) * 4 for t in models[s].graph.initializer if len(t.dims) >= 2)
            floor = max(flops(models[s], [a.shape for a in xs[s]]) / floor_rate(peak, med, s), weights / bandwidth) * 1e3
        print(row(name, threads, batch, s, med["msvm"][s], None, med.get("ort", {}).get(s), None, floor), flush=True)
    _stream(name, net, names, inputs_of, threads, batch, call, timed, onnx_model, ort_session, var if models else None)


def _stream(name, net, names, inputs_of, threads, batch, call, timed, onnx_model, ort_session, var):
    from msvm.compiler import tiers

    lengths = [int(v) for v in np.random.default_rng(7).integers(8, 129, STREAM)]
    xs = [inputs_of(s) for s in lengths]
    first = sum(timed(lambda s=s, x=x: call(s, x)) for s, x in zip(lengths, xs)) * 1e3
    tiers.wait_for_compiles(120)
    second = sum(timed(lambda s=s, x=x: call(s, x)) for s, x in zip(lengths, xs)) * 1e3
    line = f"  {name} stream of {STREAM} lengths (8..128): msvm {first:.0f} ms first pass, {second:.0f} ms second"
    if var is not None:          # one session per length, built, run once, timed once, dropped (memory)
        o = 0.0
        for x in xs:
            feed = dict(zip(names, x))
            sess = ort_session(onnx_model(net, var.source, [(n, a.shape, a.dtype) for n, a in zip(names, x)],
                                          static=True), threads)
            sess.run(None, feed)
            o += timed(lambda sess=sess, feed=feed: sess.run(None, feed)) * 1e3
            del sess
        line += f"; ort {o:.0f} ms (each session built and run once before) = {first / o:.2f}x / {second / o:.2f}x"
    print(line, f"({len(net._runner.variants)} variant{'s' if len(net._runner.variants) > 1 else ''})", flush=True)


def peak_memory(name, s, which):
    """(resident, transient) peak bytes of one steady forward at length s, batch 1 (peers.measure_peaks)."""
    import msvm as ms
    from onnx_graph import onnx_model
    from peers import _run_bytes, measure_peaks, ort_session

    ms.set_context(jit_config={"jit_level": "auto", "enable_fusion": True})
    if which == "msvm":
        def load():
            net, names, inputs_of = build(name, 1)
            x = inputs_of(s)
            return lambda: _first(net(*[ms.Tensor(a) for a in x]))
        return measure_peaks(load)
    net, names, inputs_of = build(name, 1)
    x = inputs_of(s)
    net.compile(*[ms.Tensor(a) for a in x])
    var = next(iter(net._runner.variants.values()))
    graph = onnx_model(net, var.source, [(n, a.shape, a.dtype) for n, a in zip(names, x)],
                       static=True).SerializeToString()
    del net, var
    return measure_peaks(lambda: _run_bytes(ort_session(graph, 1), dict(zip(names, x))))
