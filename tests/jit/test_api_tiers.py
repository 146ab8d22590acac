"""Issue 21's composites and L1-only rows inside compiled Cells: IOU, LRN, reflect padding,
linspace, cummax, masked_select, unique and a 3-D pool next to fused elementwise work, at L1, L2,
L3 and auto, over repeated calls (compiled kernels and replays run), against numpy."""

import msvm as ms
import numpy as np
import pytest
from msvm import nn, ops
from msvm.compiler import tiers

LEVELS = ["L1", "L2", "L3", "auto"]


class Mixed(nn.Cell):
    def __init__(self):
        super().__init__()
        self.pad = nn.Pad(((0, 0), (0, 0), (1, 2), (2, 1)), "REFLECT")
        self.lrn = ops.LRN(2, 1.0, 0.5, 0.75)

    def construct(self, x, boxes, start):
        a = ops.tanh(self.pad(x) * 0.5 + 1.0)
        b = self.lrn(x) * 2.0 - 1.0
        o = ops.iou(boxes, boxes) + 0.25
        line = ops.linspace(start, start + 3.0, 7) * 2.0
        v, i = ops.cummax(x, 2)
        sel = ops.masked_select(x, x > 0.5).sum() + 1.0
        u, _ = ops.unique(i)
        p = ops.max_pool3d(ops.expand_dims(x, 2), (1, 2, 2), (1, 2, 2)) + 1.0
        return a, b, o, line, v * 3.0, sel, u, p


def _ref(x, boxes, start):
    pad = np.pad(x, ((0, 0), (0, 0), (1, 2), (2, 1)), "reflect")
    a = np.tanh(pad * np.float32(0.5) + np.float32(1))
    sq = np.stack([(x[:, max(c - 2, 0):c + 3] ** 2).sum(1) for c in range(x.shape[1])], 1)
    b = x / (1 + 0.5 * sq) ** 0.75 * 2 - 1
    w = np.maximum(np.minimum(boxes[None, :, 2], boxes[:, None, 2]) - np.maximum(boxes[None, :, 0], boxes[:, None, 0])
                   + 1, 0)
    h = np.maximum(np.minimum(boxes[None, :, 3], boxes[:, None, 3]) - np.maximum(boxes[None, :, 1], boxes[:, None, 1])
                   + 1, 0)
    area = (boxes[:, 2] - boxes[:, 0] + 1) * (boxes[:, 3] - boxes[:, 1] + 1)
    inter = w * h
    o = inter / (area[None, :] + area[:, None] - inter) + 0.25
    line = np.linspace(start, start + 3, 7) * 2
    v = np.maximum.accumulate(x, 2) * 3
    sel = x[x > 0.5].sum() + 1
    n, c, hh, ww = x.shape
    p = x[:, :, :hh // 2 * 2, :ww // 2 * 2].reshape(n, c, hh // 2, 2, ww // 2, 2).max((3, 5))[:, :, None] + 1
    return a, b, o, line, v, sel, p


@pytest.mark.parametrize("tier", LEVELS)
def test_new_apis_inside_compiled_cells(level, tier, rng):
    level(tier)
    net = Mixed()
    for k, (n, hw) in enumerate([(2, (5, 6)), (2, (5, 6)), (1, (4, 7)), (2, (5, 6)), (2, (5, 6))]):
        x = rng.standard_normal((n, 3) + hw).astype(np.float32)
        boxes = np.concatenate([rng.uniform(0, 10, (4, 2)), rng.uniform(10, 20, (4, 2))], 1).astype(np.float32)
        start = np.float32(rng.standard_normal())
        got = net(ms.Tensor(x), ms.Tensor(boxes), ms.Tensor(start))
        a, b, o, line, v, sel, p = _ref(x, boxes, start)
        for g, r in zip((got[0], got[1], got[2], got[3], got[4], got[5], got[7]), (a, b, o, line, v, sel, p)):
            np.testing.assert_allclose(g.asnumpy(), r, rtol=2e-5, atol=2e-5, err_msg=f"{tier} call {k}")
        idx = np.zeros(x.shape, np.int64)
        for j in range(1, x.shape[2]):
            idx[:, :, j] = np.where(x[:, :, j] >= np.maximum.accumulate(x, 2)[:, :, j - 1], j, idx[:, :, j - 1])
        flat = idx.reshape(-1)
        np.testing.assert_array_equal(got[6].asnumpy(), flat[np.sort(np.unique(flat, return_index=True)[1])])
        tiers.wait_for_compiles(30)
    sites = [s for v in net._runner.variants.values() for c in v.code.all_codes()
             for s in c.__dict__.get("jit_sites", {}).values()]
    levels = {kk.level for s in sites for kk in list(s.l2.values()) + list(s.l3.values())
              if isinstance(kk, tiers.Compiled)}
    assert levels == {"L1": set(), "L2": {2}, "L3": {3}}.get(tier, levels) and (tier != "auto" or 2 in levels), levels
