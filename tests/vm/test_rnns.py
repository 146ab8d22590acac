"""nn.LSTM, nn.GRU and nn.RNN (mindocr's CRNN and RARE necks) against a float64 numpy reference written out
step by step: layers, directions, batch_first, no bias, an initial state, sequence lengths that change
(set_inputs' None dims: compiled per length), at L1, compiled and in pynative; MindSpore's parameter names."""

import msvm as ms
import numpy as np
import pytest
from levels import at
from msvm import nn


def _sig(v):
    return 1.0 / (1.0 + np.exp(-v))


def reference(net, x, hx=None):
    """The recurrence in float64: each layer and direction over the time steps, MindSpore's gate order."""
    mode, n, dirs = net.mode, net.hidden_size, net.num_directions
    if net.batch_first:
        x = x.transpose(1, 0, 2)
    steps, batch = x.shape[:2]
    zero = np.zeros((net.num_layers * dirs, batch, n))
    h0 = zero if hx is None else (hx[0] if mode == "LSTM" else hx)
    c0 = zero if hx is None else (hx[1] if mode == "LSTM" else hx)
    seq, hn, cn = x.astype(np.float64), [], []
    for layer in range(net.num_layers):
        outs = []
        for d in range(dirs):
            k = layer * dirs + d
            wi, wh = (getattr(net, f"weight_{w}_l{layer}{'_reverse' if d else ''}").asnumpy().astype(np.float64)
                      for w in ("ih", "hh"))
            bi, bh = ((getattr(net, f"bias_{w}_l{layer}{'_reverse' if d else ''}").asnumpy() if net.has_bias else 0)
                      for w in ("ih", "hh"))
            h, c, hs = h0[k], c0[k], [None] * steps
            for t in (range(steps - 1, -1, -1) if d else range(steps)):
                xw, hw = seq[t] @ wi.T + bi, h @ wh.T + bh
                if mode == "LSTM":
                    g = xw + hw
                    c = _sig(g[:, n:2 * n]) * c + _sig(g[:, :n]) * np.tanh(g[:, 2 * n:3 * n])
                    h = _sig(g[:, 3 * n:]) * np.tanh(c)
                elif mode == "GRU":
                    r, z = _sig(xw[:, :n] + hw[:, :n]), _sig(xw[:, n:2 * n] + hw[:, n:2 * n])
                    h = (1 - z) * np.tanh(xw[:, 2 * n:] + r * hw[:, 2 * n:]) + z * h
                else:
                    h = np.tanh(xw + hw) if mode == "RNN_TANH" else np.maximum(xw + hw, 0)
                hs[t] = h
            outs.append(np.stack(hs))
            hn.append(h)
            cn.append(c)
        seq = np.concatenate(outs, 2)
    return (seq.transpose(1, 0, 2) if net.batch_first else seq), np.stack(hn), np.stack(cn)


CASES = [(nn.LSTM, dict(num_layers=2, bidirectional=True)), (nn.LSTM, dict(batch_first=True, has_bias=False)),
         (nn.GRU, dict(batch_first=True, bidirectional=True)), (nn.RNN, dict(num_layers=2, nonlinearity="relu"))]


@pytest.mark.parametrize("level", ["L1", "auto", "pynative"])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_recurrent_layers_match_the_recurrence(level, case, rng):
    cls, kw = CASES[case]
    net = cls(5, 4, **kw)
    net.set_inputs(ms.Tensor(shape=[None, None, 5], dtype=ms.float32))
    with at(level):
        for steps in (3, 6, 3):
            x = rng.standard_normal((steps, 2, 5)).astype(np.float32)
            out, state = net(ms.Tensor(x))
            want, hn, cn = reference(net, x)
            np.testing.assert_allclose(out.asnumpy(), want, rtol=1e-4, atol=1e-5)
            h = state[0] if cls is nn.LSTM else state
            np.testing.assert_allclose(h.asnumpy(), hn, rtol=1e-4, atol=1e-5)
            if cls is nn.LSTM:
                np.testing.assert_allclose(state[1].asnumpy(), cn, rtol=1e-4, atol=1e-5)


def test_an_initial_state_and_mindspores_names(rng):
    net = nn.LSTM(3, 2, num_layers=1, bidirectional=True)
    assert sorted(net.parameters_dict()) == sorted(f"{w}_{b}_l0{s}" for w in ("weight", "bias") for b in ("ih", "hh")
                                                   for s in ("", "_reverse"))
    assert net.weight_ih_l0.shape == (8, 3) and net.weight_hh_l0_reverse.shape == (8, 2)
    x = rng.standard_normal((4, 1, 3)).astype(np.float32)
    h0, c0 = (rng.standard_normal((2, 1, 2)).astype(np.float32) for _ in range(2))
    out, (hn, cn) = net(ms.Tensor(x), (ms.Tensor(h0), ms.Tensor(c0)))
    want, whn, wcn = reference(net, x, (h0, c0))
    np.testing.assert_allclose(out.asnumpy(), want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(cn.asnumpy(), wcn, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="nonlinearity"):
        nn.RNN(3, 2, nonlinearity="gelu")
