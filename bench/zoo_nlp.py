"""Steady forward time of the NLP model zoo (issue 16): BERT, GPT-2 and LLaMA from tests/models,
per sequence length, msvm (L1 and L3 with fusion) against the float64 numpy references of
tests/refs/nlp.py. Median of a few runs after warm-up (the compiles are done first).

    python bench/zoo_nlp.py [--runs 7] [--layers 2] [--hidden 128]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "vm"))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

import msvm as ms  # noqa: E402
from msvm.compiler import tiers  # noqa: E402

ms.as_mindspore()
from models import bert, gpt2, llama  # noqa: E402
from refs import nlp  # noqa: E402

LENGTHS = (16, 37, 128)
VOCAB = 1000


def median_ms(fn, args, runs):
    """(median, min) of runs calls of fn(*args), in ms, after one warm-up call."""
    fn(*args)
    ts = []
    for _ in range(runs):
        t = time.perf_counter()
        fn(*args)
        ts.append((time.perf_counter() - t) * 1e3)
    return statistics.median(ts), min(ts)


def models(layers, hidden):
    heads = max(hidden // 32, 1)
    b = bert.BertModel(bert.BertConfig(seq_length=128, vocab_size=VOCAB, hidden_size=hidden, num_hidden_layers=layers,
                                       num_attention_heads=heads, intermediate_size=4 * hidden,
                                       max_position_embeddings=128, type_vocab_size=2), is_training=False)
    gcfg = gpt2.GPT2Config(vocab_size=VOCAB, n_positions=128, n_embd=hidden, n_layer=layers, n_head=heads)
    lcfg = llama.LlamaConfig(vocab_size=VOCAB, hidden_size=hidden, num_layers=layers, num_heads=heads,
                             n_kv_heads=max(heads // 2, 1), intermediate_size=4 * hidden, seq_length=128)
    bcfg = argparse.Namespace(num_attention_heads=heads, num_hidden_layers=layers, use_relative_positions=False)
    g, lm = gpt2.GPT2Model(gcfg), llama.LlamaModel(lcfg)
    return [
        ("BERT", b, lambda ids, m: (ids, ids * 0, m), lambda p, ids, m: nlp.bert(p, bcfg, ids, ids * 0, m)),
        ("GPT-2", g, lambda ids, m: (ids, m), lambda p, ids, m: nlp.gpt2(p, gcfg, ids, m)),
        ("LLaMA", lm, lambda ids, m: (ids, m), lambda p, ids, m: nlp.llama(p, lcfg, ids, m)),
    ]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--batch", type=int, default=1)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    print(f"batch {a.batch}, {a.layers} layers, hidden {a.hidden}; median of {a.runs} runs, ms")
    print("median (min) per call")
    print(f"{'model':6} {'S':>4} {'msvm L1':>16} {'msvm L3':>16} {'numpy f64':>16} {'L3/numpy':>9}")
    for name, net, args_of, ref in models(a.layers, a.hidden):
        p = nlp.params(net)
        for s in LENGTHS:
            ids = rng.integers(0, VOCAB, (a.batch, s)).astype(np.int32)
            mask = np.ones((a.batch, s), np.int32)
            inputs = [ms.Tensor(x) for x in args_of(ids, mask)]
            row = {}
            for level in ("L1", "L3"):
                ms.set_context(jit_config={"jit_level": level, "enable_fusion": True})
                net(*inputs)
                tiers.wait_for_compiles(120)
                row[level] = median_ms(net, inputs, a.runs)
            t_np = median_ms(ref, (p, ids, mask), a.runs)
            cells = " ".join(f"{m:>7.2f} ({lo:.2f})" for m, lo in (row["L1"], row["L3"], t_np))
            print(f"{name:6} {s:>4} {cells} {row['L3'][0] / t_np[0]:>9.2f}")
        assert len(net._runner.variants) == 1


if __name__ == "__main__":
    main()
