"""MindSpore's recurrent layers, nn.LSTM, nn.GRU and nn.RNN, as construct code over msvm's ops (mindocr's CRNN
and RARE necks read a feature map's columns with a two-layer bidirectional LSTM).

Each layer and direction projects the whole sequence by its input weights in one product, then steps through
time: the recurrent product, the gates and the new state, one step a pass of a Python loop. The loop collects
each step's output in a list, so its count must be known: the Cell compiles per sequence length (a
``set_inputs`` None length included: the executor's exact shapes), the steps unrolled as MindSpore's graph
mode unrolls them. The weights are MindSpore's, by name and layout: ``weight_ih_l{k}[_reverse]`` [gates *
hidden, input], ``weight_hh_l{k}[_reverse]`` [gates * hidden, hidden], ``bias_ih_l{k}[_reverse]`` and
``bias_hh_l{k}[_reverse]`` [gates * hidden]; the gates in MindSpore's (and PyTorch's) order: LSTM (i, f, g, o),
GRU (r, z, n). Inference only: ``dropout`` between layers is the identity, as MindSpore's in eval mode."""

from __future__ import annotations

import math

import numpy as np

from .. import dtype as dt
from .. import ops
from ..tensor import Parameter, ParameterTuple, Tensor
from .cell import Cell

_GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}


class _RNNBase(Cell):
    def __init__(self, mode, input_size, hidden_size, num_layers=1, has_bias=True, batch_first=False, dropout=0.0,
                 bidirectional=False, dtype=dt.float32):
        super().__init__()
        if not 0 <= dropout <= 1:
            raise ValueError(f"nn.{mode}: dropout must be in [0, 1], got {dropout}")
        if num_layers < 1 or hidden_size < 1 or input_size < 1:
            raise ValueError(f"nn.{mode}: input_size, hidden_size and num_layers must be positive")
        self.mode, self.input_size, self.hidden_size = mode, int(input_size), int(hidden_size)
        self.num_layers, self.has_bias, self.batch_first = int(num_layers), bool(has_bias), bool(batch_first)
        self.dropout, self.bidirectional = float(dropout), bool(bidirectional)
        self.num_directions = 2 if bidirectional else 1
        gates = _GATES[mode] * self.hidden_size
        stdv = 1.0 / math.sqrt(self.hidden_size)
        w_ih, w_hh, b_ih, b_hh = [], [], [], []
        for layer in range(self.num_layers):
            size = self.input_size if layer == 0 else self.hidden_size * self.num_directions
            for d in range(self.num_directions):
                sfx = f"l{layer}{'_reverse' if d else ''}"

                def param(name, shape):
                    # (numpy's global generator, as the other layers' default inits draw: ms.set_seed seeds it)
                    p = Parameter(Tensor(np.random.uniform(-stdv, stdv, shape).astype(dt.as_dtype(dtype).np)), name=name)
                    setattr(self, name, p)          # (MindSpore's name, as its checkpoints key the weight)
                    return p
                w_ih.append(param(f"weight_ih_{sfx}", (gates, size)))
                w_hh.append(param(f"weight_hh_{sfx}", (gates, self.hidden_size)))
                if self.has_bias:
                    b_ih.append(param(f"bias_ih_{sfx}", (gates,)))
                    b_hh.append(param(f"bias_hh_{sfx}", (gates,)))
        # (the same Parameters by layer and direction, for construct's index: the names above come first)
        self.w_ih, self.w_hh = ParameterTuple(w_ih), ParameterTuple(w_hh)
        self.b_ih, self.b_hh = (ParameterTuple(b_ih), ParameterTuple(b_hh)) if self.has_bias else ((), ())

    def _step(self, xw, h, c, w_hh, b_hh):
        """One time step from the input's projection xw [batch, gates * hidden]: the new (h, c). (A method of
        msvm's own Cell runs as Python on the frontend's values while construct compiles: ops only.)"""
        hw = ops.matmul(h, ops.transpose(w_hh, (1, 0)))
        if self.has_bias:
            hw = hw + b_hh
        n = self.hidden_size
        if self.mode == "LSTM":
            i, f, g, o = ops.split(xw + hw, n, 1)
            c = ops.sigmoid(f) * c + ops.sigmoid(i) * ops.tanh(g)
            return ops.sigmoid(o) * ops.tanh(c), c
        if self.mode == "GRU":
            xr, xz, xn = ops.split(xw, n, 1)
            hr, hz, hn = ops.split(hw, n, 1)
            r, z = ops.sigmoid(xr + hr), ops.sigmoid(xz + hz)
            cand = ops.tanh(xn + r * hn)
            return (1.0 - z) * cand + z * h, c
        pre = xw + hw
        return (ops.tanh(pre) if self.mode == "RNN_TANH" else ops.relu(pre)), c

    def construct(self, x, hx=None, seq_length=None):
        if seq_length is not None:
            raise NotImplementedError("nn.LSTM / GRU / RNN: seq_length (padded sequences) is not supported yet")
        if self.batch_first:
            x = ops.transpose(x, (1, 0, 2))
        steps, batch = x.shape[0], x.shape[1]
        layers = self.num_layers * self.num_directions
        if hx is None:
            h0 = ops.zeros((layers, batch, self.hidden_size), x.dtype)
            c0 = h0
        elif self.mode == "LSTM":
            h0, c0 = hx
        else:
            h0, c0 = hx, hx
        hn, cn = [], []
        seq = x
        for layer in range(self.num_layers):
            outs = []
            for d in range(self.num_directions):
                k = layer * self.num_directions + d
                xw = ops.matmul(ops.reshape(seq, (steps * batch, -1)), ops.transpose(self.w_ih[k], (1, 0)))
                if self.has_bias:
                    xw = xw + self.b_ih[k]
                xw = ops.reshape(xw, (steps, batch, -1))
                h, c = h0[k], c0[k]
                hs = []
                for t in range(steps):
                    h, c = self._step(xw[steps - 1 - t] if d else xw[t], h, c, self.w_hh[k],
                                      self.b_hh[k] if self.has_bias else None)
                    hs.append(h)
                if d:
                    hs = hs[::-1]
                outs.append(ops.stack(hs, 0))
                hn.append(h)
                cn.append(c)
            seq = outs[0] if self.num_directions == 1 else ops.concat(outs, 2)
        out = ops.transpose(seq, (1, 0, 2)) if self.batch_first else seq
        if self.mode == "LSTM":
            return out, (ops.stack(hn, 0), ops.stack(cn, 0))
        return out, ops.stack(hn, 0)


class LSTM(_RNNBase):
    """MindSpore's nn.LSTM: ``(x, hx=None) -> (output, (h_n, c_n))``, x [seq, batch, input] ([batch, seq,
    input] with ``batch_first``), hx (h_0, c_0) [num_layers * num_directions, batch, hidden]."""

    def __init__(self, *args, **kwargs):
        super().__init__("LSTM", *args, **kwargs)


class GRU(_RNNBase):
    """MindSpore's nn.GRU: ``(x, hx=None) -> (output, h_n)``."""

    def __init__(self, *args, **kwargs):
        super().__init__("GRU", *args, **kwargs)


class RNN(_RNNBase):
    """MindSpore's nn.RNN (``nonlinearity`` 'tanh' or 'relu'): ``(x, hx=None) -> (output, h_n)``."""

    def __init__(self, *args, nonlinearity="tanh", **kwargs):
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"nn.RNN: nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}")
        super().__init__("RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU", *args, **kwargs)
