"""FUSED_CONV and MAX_POOL2D in the tiers (issue 18): which convolutions get which compiled kernel,
and how each is called. Algorithms chosen by measurement (one thread, this machine's OpenBLAS):

- **Depthwise** (group == in channels), and grouped convolutions of at most
  DIRECT_MAX_CHANNELS input channels per group and DIRECT_MAX_TAPS weights per output (RGB stems
  were too, until the taps product ran channel-major: see ``K.folds``): one LLVM kernel (``DepthwiseConv``, lowered in
  ``lower_conv.py``): per (image, channel) plane and output row, the taps are summed over a vector
  of output columns straight from the unpadded NCHW input (padded rows read a row of zeros, padded
  columns are masked at the row ends), then the folded batch norm bias and the epilogue (ReLU6, a
  residual add, ...) run while the vector is in registers, and it is stored once. The L1 kernel
  (interp/kernels.py ``_depthwise_taps``) made kh*kw passes over memory with a temporary each:
  MobileNet v2's depthwise layers went from 27 to ~3.5 ms at 224. Same floats as L1 (the same
  products and sums in the same order, no FMA contraction).
- **Dense and grouped, BLAS route**: the BLAS product (a compiled direct convolution written here would not
  beat OpenBLAS's sgemm, which runs these layers at 60-95% of its peak in isolation), then the
  bias and the epilogue as one compiled elementwise pass over the product, in place (the L1
  kernel makes one numpy pass per step). 1x1 is one product on the input; the rest a compiled
  im2col copy per block of output rows and its product (``BlasConv``), one product per group.
  Measured and not used:
  row-blocked GEMM with the epilogue per block in cache (lower_matmul's MatmulEpilogue; 0.8-1.1x
  the GEMM + one compiled pass on ResNet-50's 1x1 layers); an LLVM 1x1 kernel register-blocked
  4 channels x 2 vectors with FMAs and the epilogue in registers (1.1-1.2x on MobileNet's two
  largest expand layers, K = 16 and 24; 0.4-0.95x on every other 1x1 layer of both models).
- **Dense and grouped on msvm's own GEMM** (``TapsConv``, compiler/gemm.py ``ir_taps``): per image
  and group out[Co, P] = W[Co, K] @ B[K, P], the 12x32 register tiles of the packed Dense product,
  A = the Parameter's weight read where it lies (``a_in_place``; tiles of 8 rows where its rows
  are a multiple of 4 KB apart; the batch norm is not folded into it but applied in the epilogue,
  x scale + shift), B read where it lies rather than packed per call: the image's
  planes (1x1 stride 1: no copy at all), its subsampled planes (1x1 strided: one copy of P x Cin),
  or its padded stride phases side by side (k x k: each tap a shift in one phase, so a strided
  conv needs no im2col). The k loop runs channel by channel, each channel's taps in turn, so few
  channels per tap cost nothing extra: the RGB stem (7x7 stride 2, 3 channels) took 2.96 ms at 224
  as an im2col matrix (the windows copied, then the product: the copy was half of it) and takes
  1.48 ms on the phases (AMD EPYC Zen 5, one core, fastest of 15), so im2col is gone. Panels of 32
  output columns stay in L1 while every row tile of a 1 MB block of A runs over them. The
  epilogue (bias, a residual add, ReLU, ReLU6: ``fused_epilogue``; every one of
  ResNet's and MobileNet's) is applied to the tile in registers before its only store, with
  numpy's NaN rules; other epilogues, and a residual where the result is cropped from a wider
  grid, run the compiled pass after. ``route`` picks it (``MSVM_CONV_GEMM=blas`` keeps the BLAS
  route). Measured (one pinned core, the thread's CPU time, interleaved, medians), the product
  alone:

  ====================================  ======  ==================
  ResNet-50 / MobileNet v2 at 224       mode    taps / BLAS
  ====================================  ======  ==================
  3x3 stride 2 (56, 28, 14 wide)        phase   1.12-1.26x
  1x1 stride 2 downsample               sub     1.01-1.24x
  3x3 stride 1, 7 and 14 wide           phase   1.02-1.32x
  3x3 stride 1, 28 and 56 wide          phase   0.99x
  1x1, 7x7 maps (49 pixels)             direct  1.04-1.15x
  1x1, <= 32 out of >= 64 channels      direct  1.21-1.27x
  1x1 256 -> 64/128 at 56               direct  1.14-1.32x
  1x1 others (14-56 wide)               direct  0.89-1.03x
  1x1 16 -> 96, 32 -> 16 at 112         direct  0.72-0.77x (K = 16, 32: bound by stores)
  7x7 stride 2 stem on RGB              im2col  1.01x (now phase: see above)
  ====================================  ======  ==================

  (That table and the next paragraph were measured on an Intel Xeon, whose OpenBLAS ran these
  layers at 60-95% of its peak; on an AMD EPYC Zen 5 OpenBLAS reaches ~100 GFLOP/s and msvm's
  tiles ~190, and the taps route runs ResNet-50's forward 1.68-1.78x faster than the BLAS one.)

  In the models, one forward (bench/conv_routes.py: both routes on one net, alternating):
  every dense convolution on the taps route against every one on BLAS, ResNet-50 1.03x at 224 and
  1.07x at 160 (per layer kind: 3x3 stride 2 1.18-1.45x, 1x1 stride 2 0.95-1.18x, 3x3 stride 1
  1.01-1.06x, 1x1 0.93-0.99x, stem 1.05-1.08x), MobileNet v2 1.20-1.24x (its 1x1 layers 1.07-1.15x;
  the rest of the forward gains too, not explained). The per-shape choice of the table (taps where
  it is ahead) measured 1.02x / 1.06x on ResNet-50 and 0.99x on MobileNet v2, so ``route`` takes
  the taps route for every shape there. **On an AVX2 target** (AMD EPYC Zen 3, 16 vector registers,
  one core) the tiles are 6 x 16, the same as OpenBLAS's Haswell kernel, and reading A and B where
  they lie loses to OpenBLAS's packed operands: ResNet-50's convolutions taps / BLAS 0.74 (1x1),
  0.84 (3x3), 0.75 (3x3 stride 2), 1.15 (the RGB stem), after two fixes found there: a panel's
  column masks (vector registers on AVX2) were spilled and rebuilt every k step beside the 12
  accumulators (whole panels now run tiles without masks: the taps route 285 -> 164 ms), and a k
  block's source rows, a plane apart, thrash the 8-way L1 (``gemm.packs_b``). So there ``route``
  takes BLAS at one thread but for the stems (msvm/ort on ResNet-50 at 224, bench/peers.py one
  thread: 2.39 -> 1.49). The kernel reaches 165-188 GFLOP/s on blocks that
  stay in L2 (OpenBLAS 164-166) but 115-150 where B streams from memory (P >= 3136 pixels), about
  what OpenBLAS gets. **In a model the weights come from memory** (ResNet-50's 98 MB do not stay
  in cache from one forward to the next): on an AMD EPYC (Zen 5, one pinned core, the thread's CPU
  time, fastest of 21 interleaved calls, caches flushed before each as a forward leaves them) the
  7x7 maps' layers (A of 4-9 MB, each element used 49 times) ran at 77-119 GFLOP/s against 143-160
  with A in cache. So each tile prefetches its packed A gemm.A_PREFETCH k steps ahead and its C
  lines (to write) at its start: 77-119 -> 128-145 GFLOP/s there, 14 wide 116-141 -> 149-159, and
  the warm figures rose too (3x3 at 7 wide 86 -> 143); distances of 24-256 steps measured, 64-96
  best. ResNet-50's forward on the taps route: 90.6 -> 70.4 ms (bench/conv_routes.py, median of
  15; the sum of each layer's fastest call 69 -> 56 ms). The source rows and the C lines are
  prefetched one panel on (the driver reaches them after every row tile of this panel; rows ahead
  in this panel end with a k block of few channels): MobileNet v2's and ResNet-50's layer shapes,
  the sum of their fastest calls 7.2-9.3 -> 6.0-7.4 ms (the 1x1 layers of 16-96 channels 25-65 ->
  45-112 GFLOP/s). Measured and not kept: B copied per
  (tap, k block) into a contiguous stack panel that every row tile reads, as BLIS packs it
  (0.83-1.0x: the strided rows are prefetched well enough); prefetching the next panel into L2 instead of (or
  besides) the rows ahead (0.9-1.05x), the tiles inlined into the driver (no call: 0.9-1.05x);
  k blocks of 64-512 changed nothing measurable (a loaded machine, wall clock).
- **Small maps, and every k x k convolution** (issue 18): where the taps product's panels leave lanes
  idle (a 7x7 map is 49 of 64 lanes, a 3x3 convolution's grid two columns a row more) an AVX-512 target
  takes another product: a 1x1 convolution the inner products of compiler/gemm_dot.py (``use_dot``: the
  columns transposed into rows, vectors over K, the weight read in place), a k x k one whose output
  channels fill whole panels, from K = COUT_MIN_K, the output-channel tiles of compiler/gemm_cout.py
  (``use_cout``: the weight packed in panels, its Parameter spilled, ``prepared_cout``), at every map
  size: its tiles of a row's pixels in about equal parts (14: 7 + 7) leave no lane idle, and it stores
  the NCHW result once where the taps product crops its grid with one more pass. ResNet-50, one core,
  the convolutions' sum per forward: at 160 25.9-27.7 -> 24.0 ms (dot) -> 23.2-23.7 (cout on the small
  maps: 10x10 3x3 3.5-3.7 -> 2.8 ms, 5x5 3x3 1.8 -> 1.6), at 224 45.4 -> 43.5 (dot; the 7x7 3x3 with
  cout 2.8 -> 2.5 ms); then cout on every 3x3 and the stem, 28x28 3x3 7% faster, 3x3 stride 2 at 56
  13% (``use_cout``'s figures). Both agree with L1 to rounding (other k orders).
- **Winograd's F(2x2, 3x3)** (compiler/winograd.py, ``use_winograd``): a dense 3x3 convolution of stride 1
  whose output channels fill gemm_cout's panels, from WINO_MIN_C input channels, on maps of
  WINO_MIN_PIXELS: 16 products on gemm_cout's tiles between the image's and the output's transforms
  (``TapsConv._run_wino``; blocks of tile rows: ``wino_rows``), the weight packed once at its own
  size and transformed a panel at a time per call (``prepared_wino``; a small U held). A non-finite
  patch or weight runs the direct sum natively. ResNet-50 at 224,
  one core, the layers' time in a forward against gemm_cout: 28x28 128 2.94 -> 1.68-1.80 ms, 14x14
  256 5.09 -> 3.58-3.98, 56x56 64 3.05 -> 2.14-2.34 (in blocks), 7x7 512 2.33 -> 2.27; at 160 the
  5x5 512 1.48 -> 1.45, at 192 the 6x6 512 1.90 -> 1.42 (whole tiles). Maps from 81 pixels: the
  512-channel layers' transformed weights (17 MB each, against 9.4 MB spilled) held 28 MB more at
  ResNet-50's peak for those small maps' gains (then held transformed; now transformed per call).
- **The im2col route** (``use_im2col``, ``TapsConv._run_im2col``): a weight of 4 MB or more on a map of at
  most 64 pixels (ResNet-50's 512-channel 3x3 layers on 5x5-7x7 maps, and of stride 2 to 8x8; its 1x1 layers
  to and from 2048 channels) runs the packed Dense product (compiler/gemm.py) on the image's windows copied
  as rows (gemm_dot's ``xt``; ``xt1`` for a 1x1 of stride 1), by gemm_cout's own packed panels, a block of
  images at a time, then stores the [rows][channels] product transposed into the NCHW result with the epilogue
  (gemm_cout.ir_rows). gemm_cout's tiles there are a short row's pixels (5 of a 5x5 map) and each tile
  reads its panel again (the panel of a 3x3 512 layer is 590 KB: from L2 at 25 B a cycle); the Dense
  product's 12-row tiles run over every image's pixels, its blocks reading each panel once. Layers alone
  (Intel Xeon, one core, copy + product against the route replaced, batch 1 / 8): 3x3 stride 2 512 at
  160 0.67 / 0.61, 192 0.70 / 0.70, 224 0.85 / 0.90; 3x3 512 on 5x5 0.93 / 0.70 (gemm_cout), on 7x7 0.91 /
  0.87 (Winograd); 1x1 2048 -> 512 on 7x7 0.80 / 0.94 (dot). ResNet-50, one core, msvm / onnxruntime,
  alternating processes: at 160 1.14 -> 1.09-1.10, at 224 1.12 -> 1.11, at 160 batch 8 1.17 -> 1.09;
  two cores at 160 1.29-1.31 -> 1.20-1.26. Below 4 MB (1024 -> 512 at 14x14: 1.04-1.10) or past 64 pixels
  the copy of the windows (0.8-0.9 ns an element) outweighs the gain.
- **Threads**: where the cores allow two (``threads_for``: the process's affinity, MSVM_THREADS),
  a product of at least SPLIT_MIN_FLOPS per image gives the second half of its output columns
  to the pool's thread (compiler/pool.py: a spinning hand-off, no OS wake-up), on either route:
  the taps product whole panels, the BLAS route (``BlasConv``) half the columns of each tap's
  product, each half one BLAS call on its thread with the BLAS set to one thread; the depthwise and
  max-pool kernels half their planes. The taps and depthwise results are the same bit for bit
  (each column / plane is computed by one thread with the same code); the BLAS route's agree to
  rounding (OpenBLAS picks its kernels by the product's size, so a half can round differently).
  On an Intel Xeon (shared, loaded), two cores pinned,
  OPENBLAS_NUM_THREADS=2, ResNet-50's forward took 138 ms on the taps route against 451 ms on
  OpenBLAS's own two threads (bench/conv_routes.py, wall clock); on an AMD Zen 3 (two vCPUs, a
  KVM guest) OpenBLAS's own two threads ran it in 104.7 ms, the taps route split through a
  ThreadPoolExecutor in 146.7 (slower than one thread's BLAS, 160.4), the BLAS route split through
  the spinning pool in 99-124 ms (``BlasConv``).
- **Calls kept** (``Steps``, ``Memo``): a replay brings a site the same Parameter arrays and the same
  memory plan buffers at every call, so a convolution's native calls repeat with the same arguments.
  The dense (taps, dot, cout) and depthwise callers keep their last calls and, while a call brings
  the same fixed arrays (read-only, by identity) and its images at the same strides, run them again
  packed into one native call (pool.Calls) instead of preparing the weight, the batch norm and
  each argument in Python and converting them through ctypes; an input that is a new array at each
  call (a sub-Cell's result, the model's image, the residual, a result not in the memory plan)
  moves the pointer arguments that point into it. Calls that copied in numpy (a subsampled or
  strided image) are not kept; the padded phase images, and the taps product's grid cropped into the
  result, are native calls (compiler/phases.py, split by channels on two threads), so the k x k layers
  are kept (the crop: MobileNet v2's RGB stem, ~1.6 MB through numpy at 224, 72-107 us).
  MobileNet v2's 1x1 layer, one core: 9.7 -> 3.4 us a call; the whole forward at 32x32 0.85 -> 0.70
  ms. The phases in native code, ResNet-50 at 224 (alternating processes, medians): one core 0.98x,
  two cores 0.95x.
- **MAX_POOL2D**: the depthwise kernel with a running maximum (numpy's: NaN wins) over -inf
  padding: one pass instead of kh*kw.
- **Flat planes**: a depthwise kernel (or max pool) of stride 1 with Wo = W on rows narrower than
  FLAT_ROWS vectors runs over each plane as one flat vector loop (``flat_ok``: a 7 x 7 plane is 4
  vectors, not 7 rows of a 4-lane vector and 3 scalar columns): 2.6x on MobileNet v2's 960 x 7 x 7.

L2: dims, pads and the vector loops' column range are kernel arguments (one kernel per shape
class: kernel size, stride, dilation, dtype, epilogue); L3: they are constants and the vector width
fits the row. Weights are prepared once per Parameter array (``set_data`` gives a new array, so it
prepares again): depthwise and few-channel weights (``K.folds``) folded with their batch norm, as L1
does (kernels.prepared_weight: a few KB each); every other weight is read by the taps product
where it lies in the Parameter (``prepared_a``), unfolded, the batch norm being the kernel's
epilogue (out * scale + shift, as L1 computes it after its product of the Parameter itself), except
with tiles of 8 rows where its rows lie a multiple of 4 KB apart (``tile_rows_in_place``).
ResNet-50 held a packed copy of every weight until the product ran channel-major (221 MB at a
steady forward against onnxruntime's 128; the folded copy before that was 90 MB next to 98 MB of
Parameters).
The staging buffers are one workspace per thread (``workspace``).
"""

from __future__ import annotations

import ctypes
import functools
import os
import weakref
from dataclasses import dataclass

import numpy as np

from ..bytecode.opcodes import KERNEL_KINDS
from ..interp import kernels as K
from ..interp.capture import TAP
from .build import blas
from .callconv import cores, elementwise_caller
from .entry import data_pointer
from .gemm import TapsGemm, pack, pack_rows, packs_b, panel_width, taps_function, tile_rows, wide_tiles
from .kir import dtype_name
from .lower import BINARY, TYPES, UNARY, Unsupported, vec_width
from .phases import function as phases_function
from .pool import parts, share
from .winograd import XI
from .workspace import Workspace, stale, thread_workspace, workspace, workspace_bytes  # noqa: F401

OPS = frozenset(op for op, kind in KERNEL_KINDS.items() if kind == "conv")   # the rows whose Site plans here
# a grouped convolution of few input channels per group runs the direct kernel (the depthwise one,
# summing over them; measured against im2col + BLAS: 3x3 on 3 channels 1.9x, on 4 1.4x; 7x7 on 3
# (147 taps) 0.35x, 5x5 on 2 (50) 0.9x); a dense one, an RGB stem, the taps product (K.folds)
DIRECT_MAX_CHANNELS = K.DIRECT_MAX_CHANNELS     # (K.folds: the L1 kernel folds the batch norm for the same ones)
DIRECT_MAX_TAPS = K.DIRECT_MAX_TAPS


@dataclass(frozen=True)
class DepthwiseConv:
    """A depthwise kh x kw convolution over NCHW planes with a per-channel bias and an epilogue
    program (input 0 = the convolution, then the extras: "t" tensors of the output's shape, "s"
    scalars)."""
    dtype: str
    kh: int
    kw: int
    stride: tuple
    dilation: tuple
    has_bias: bool
    kinds: tuple                 # per extra input of the epilogue: "t" or "s"
    program: tuple
    width: int                   # vector lanes of the main loop (a 4-lane loop follows when wider)
    dims: tuple | None = None    # L3: the DIMS values; L2: None (arguments)
    reduce: str = "conv"         # "conv": the weighted sum of the taps; "max": their maximum (MAX_POOL2D)
    cg: int = 1                  # input channels per group, summed (a direct dense conv of few channels)
    og: int = 1                  # output channels per group
    flat: bool = False           # vectors over the whole plane (lower_conv.lower_flat; ``flat_ok``)

    kind = "depthwise"
    opt_level = 3                # L2 too: the IR passes and O3 codegen (30-40 ms more; few shape classes),
    #                              since L2 is the steady state of a site that sees many sizes (1.4x at O0)

    def text(self) -> str:
        return (f"depthwise reduce={self.reduce} cg={self.cg} og={self.og} dtype={self.dtype} k={self.kh}x{self.kw} "
                f"stride={self.stride} dil={self.dilation} bias={self.has_bias} kinds={self.kinds} width={self.width} "
                f"dims={self.dims} opt={self.opt_level} program={self.program!r}" + (" flat" if self.flat else ""))

    @property
    def name(self) -> str:
        ops = "_".join(n[0].replace("BROADCAST_", "").lower() for n in self.program if n[0] not in ("in", "c"))
        head = "dw" if self.reduce == "conv" else "maxpool"
        return f"{head}{self.kh}x{self.kw}s{self.stride[0]}" + (f"_{ops}"[:40] if ops else "")


def _split(args, inputs):
    """(bn operand, eps, has conv bias, number of bn/bias inputs, extras) of a FUSED_CONV's inputs."""
    bn = args[4]
    has_bias = isinstance(bn, tuple)
    eps = bn[1] if has_bias else bn
    nbn = 0 if bn is None else 5 if has_bias else 4
    return eps, nbn, list(inputs[2 + nbn:])


def _dtype(x, w, bnp):
    """The convolution's dtype as the L1 kernel computes it (the weights are folded into it): the
    input's, which must be float32 or float64 and at least as wide as the weights'."""
    d = np.result_type(x, w, *bnp)
    if d not in (np.float32, np.float64) or x.dtype != d:
        raise Unsupported(f"a convolution in {d} of a {x.dtype} input")
    return d


def _pads(x_shape, w_shape, stride, pad, dil):
    """((top, bottom), (left, right)) of a convolution's padding."""
    if pad == ("same",):
        return (K._same_pads(x_shape[2], w_shape[2], stride[0], dil[0]),
                K._same_pads(x_shape[3], w_shape[3], stride[1], dil[1]))
    return (pad[0], pad[1]), (pad[2], pad[3])


def dims_of(x_shape, w_shape, stride, pad, dil, width_step=1):
    """(Ho, Wo, pt, pl, lo, hi) for a depthwise conv: lo..hi is the range of output columns whose
    taps all read inside the row (the vector loops run there: ow + lanes <= hi)."""
    _, _, h, w = x_shape
    _, _, kh, kw = w_shape
    sh, sw = stride
    dh, dw = dil
    ph, pw = _pads(x_shape, w_shape, stride, pad, dil)
    span_h, span_w = dh * (kh - 1) + 1, dw * (kw - 1) + 1
    if span_h > h + sum(ph) or span_w > w + sum(pw):
        raise Unsupported("the window is larger than the padded input (the interpreter says so)")
    ho = (h + sum(ph) - span_h) // sh + 1
    wo = (w + sum(pw) - span_w) // sw + 1
    pl = pw[0]
    lo = min(-(-pl // sw), wo)
    hi = max(lo, min((w + pl - (kw - 1) * dw) // sw, wo))
    return ho, wo, ph[0], pl, lo, hi


def plan_knobs() -> tuple:
    """What a convolution's plan reads besides its site and inputs: the route's knobs (``route``), in the
    shared plans' key (planning.shared_plan: a model repeats its blocks; MobileNet v2 at a new input size
    has 52 sites and 29 plans)."""
    return os.environ.get(ROUTE_ENV), AB[0]


def plan(site, inputs):
    """The Site plan of a FUSED_CONV (a depthwise kernel, or the product with an epilogue: ``plan_gemm``)
    or a MAX_POOL2D."""
    from .planning import Plan  # (planning imports this module: its names are read here)

    if site.op == "MAX_POOL2D":
        return plan_pool(site, inputs)
    stride, pad, dil, group, bn, program, _n = site.args
    x, w = inputs[0], inputs[1]
    if not (isinstance(x, np.ndarray) and isinstance(w, np.ndarray) and x.ndim == 4 and w.ndim == 4):
        raise Unsupported("a convolution of non-4-d inputs")
    o, cg, kh, kw = w.shape
    c = x.shape[1]
    if c != cg * group or o % group:
        raise Unsupported("channels that do not match the weight (the interpreter says so)")
    if not K.folds(w.shape, group):
        return plan_gemm(site, inputs)
    eps, nbn, extras = _split(site.args, inputs)
    bnp = list(inputs[2:2 + nbn])
    if not all(isinstance(a, np.ndarray) and a.shape == (o,) for a in bnp):
        raise Unsupported("batch norm parameters that are not [channels] tensors")
    d = _dtype(x, w, bnp)
    ho, wo, pt, pl, lo, hi = dims_of(x.shape, w.shape, stride, pad, dil)
    out_shape = (x.shape[0], o, ho, wo)
    kinds = []
    for e in extras:
        if isinstance(e, np.ndarray) and e.ndim > 0:
            if e.shape != out_shape or e.dtype != d:
                raise Unsupported("an epilogue tensor not of the output's shape and dtype")
            kinds.append("t")
        elif isinstance(e, (int, float, np.generic)) or (isinstance(e, np.ndarray) and e.dtype == d):
            kinds.append("s")
        else:
            raise Unsupported("an epilogue scalar of another dtype")
    for node in program:
        tag = node[0]
        if tag in ("in", "c"):
            continue
        if tag == "CAST":
            if getattr(node[1], "name", node[1]) != dtype_name(d):
                raise Unsupported("cast to another dtype")
        elif tag not in UNARY and tag not in BINARY:
            raise Unsupported(f"{tag} in a convolution's epilogue has no lowering")
    flat = flat_ok(stride, wo, x.shape[3], d)
    cls = ("dw", dtype_name(d), kh, kw, tuple(stride), tuple(dil), nbn > 0, tuple(kinds), program, cg, o // group, flat)
    dims = (o, x.shape[2], x.shape[3], ho, wo, pt, pl, lo, hi)
    return Plan(cls, (cls, dims), out_shape, d, {"dims": dims, "planes": x.shape[0] * o, "eps": eps, "nbn": nbn,
                                                  "kinds": tuple(kinds)})


FLAT_ROWS = 4        # rows narrower than this many vectors run flat (``flat_ok``)


def flat_ok(stride, wo: int, w: int, dtype) -> bool:
    """Whether a depthwise kernel (or max pool) runs flat (lower_conv.lower_flat): stride 1 with Wo = W,
    so each tap reads the plane at a constant offset from its output, on rows narrower than FLAT_ROWS
    vectors. Measured (AMD EPYC Zen 5, AVX-512, one core, thread CPU time, MobileNet v2's 3x3
    depthwise layers + batch norm + ReLU6 at L3, best of 15 rounds alternating, flat / by rows, us):
    960 x 7 x 7 26.4 / 69.5, 384 x 14 x 14 33.1 / 47.7, 576 x 14 x 14 44.5 / 66.3, 192 x 28 x 28
    56.6 / 101.3, 144 x 56 x 56 145.4 / 173.4, 32 x 112 x 112 135.0 / 115.3 (there the rows' plain
    loads beat the masked ones and their mask table)."""
    from .codegen import codegen

    return tuple(stride) == (1, 1) and wo == w and w < FLAT_ROWS * vec_width(codegen().features, TYPES[dtype_name(dtype)])


@functools.lru_cache(maxsize=256)      # (shared by the sites of one plane shape: read-only)
def flat_masks(plane: tuple, kh: int, kw: int, dil, width: int) -> np.ndarray:
    """The flat kernel's lane masks: per output vector of ``width`` lanes (q = v * width + lane, over
    Ho * Wo) and per tap (i, j), an int32 whose bit ``lane`` says that output q's tap reads inside the
    plane (row oh + i * dh - pt in [0, H), column ow + j * dw - pl in [0, W)) and that q < Ho * Wo."""
    h, w, ho, wo, pt, pl = plane            # (a plan's dims[1:7])
    nvec = -(-ho * wo // width)
    oh, ow = np.divmod(np.arange(nvec * width), max(wo, 1))
    ih = oh + (np.arange(kh) * dil[0] - pt)[:, None]                  # [i][q]
    iw = ow + (np.arange(kw) * dil[1] - pl)[:, None]                  # [j][q]
    rows, cols = (oh < ho) & (ih >= 0) & (ih < h), (iw >= 0) & (iw < w)
    ok = (rows[:, None, :] & cols[None, :, :]).reshape(kh * kw, nvec, width)     # [tap][vector][lane]
    # (lane l is bit l: each vector's lanes packed little-endian into bytes, then the bytes into one word;
    # as a product by 1 << lane, an integer matmul numpy loops over, a 112 x 112 plane took 0.7 ms, a new
    # input size's first call plans several)
    packed = np.packbits(ok, axis=-1, bitorder="little")                          # [tap][vector][byte]
    masks = np.zeros(packed.shape[:2], np.uint32)
    for i in range(packed.shape[2]):
        masks |= packed[:, :, i].astype(np.uint32) << np.uint32(8 * i)
    out = np.ascontiguousarray(masks.T).view(np.int32)
    out.flags.writeable = False
    return out


@functools.lru_cache(maxsize=256)      # (a plan and a caller ask per site: programs repeat)
def with_affine(program: tuple) -> tuple:
    """The epilogue program with the batch norm (inputs 1 and 2: scale and shift, [1, O, 1, 1])
    applied to the convolution first, ``conv * scale + shift``, as the L1 kernel applies it after
    the product of the unfolded weight; the extras move up by two."""
    out: list = []
    for node in program:
        if node == ("in", 0):
            out += [("in", 0), ("in", 1), ("BROADCAST_MUL",), ("in", 2), ("BROADCAST_ADD",)]
        elif node[0] == "in":
            out.append(("in", node[1] + 2))
        else:
            out.append(node)
    return tuple(out)


def plan_gemm(site, inputs):
    """A dense or grouped convolution: its product (``route``: msvm's taps GEMM, or the BLAS products of
    ``BlasConv``), then the bias and the epilogue in one compiled pass over the product, in place (the
    L1 kernel makes one numpy pass per step) where the taps kernel does not apply them in registers."""
    from .planning import Plan, _Shape, plan_elementwise

    stride, pad, dil, group, bn, program, _n = site.args
    x, w = inputs[0], inputs[1]
    eps, nbn, extras = _split(site.args, inputs)
    bnp = list(inputs[2:2 + nbn])
    if not all(isinstance(a, np.ndarray) and a.shape == (w.shape[0],) for a in bnp):
        raise Unsupported("batch norm parameters that are not [channels] tensors")
    d = _dtype(x, w, bnp)
    if x.shape[1] != w.shape[1] * group:
        raise Unsupported("channels that do not match the weight (the interpreter says so)")
    ho, wo = dims_of(x.shape, w.shape, stride, pad, dil)[:2]
    out_shape = (x.shape[0], w.shape[0], ho, wo)
    prog = with_affine(program) if nbn else program
    how = route(x.shape, w.shape, stride, pad, dil, group, d)
    if prog == (("in", 0),) and how == "blas" and dtype_name(d) not in blas()[1]:
        raise Unsupported(f"a convolution in {d} without an epilogue (the L1 kernel's product is all of it)")
    if x.shape[0] == 0:
        raise Unsupported("an empty batch")
    for e in extras:            # (the epilogue runs over the product: an operand may not make it larger)
        shape = getattr(e, "shape", ())
        if len(shape) > 4 or any(a not in (1, b) for a, b in zip(reversed(shape), reversed(out_shape))):
            raise Unsupported("an epilogue operand that does not broadcast to the convolution's output")
    heads = [_Shape(out_shape, d)] + ([_Shape((1, w.shape[0], 1, 1), d)] * 2 if nbn else [])
    in_registers = how == "taps" and _in_registers(prog, nbn, extras, out_shape, d, x.shape, w.shape, stride, pad, dil,
                                                   group)
    epi = plan_elementwise(site, heads + extras, prog, out_shape) if prog != (("in", 0),) and not in_registers else None
    cls = ("gemm", epi.cls if epi is not None else None, prog)      # (the route follows from the shapes: key)
    return Plan(cls, (cls, epi.key[1] if epi is not None else None, x.shape, w.shape), out_shape, d,
                {"epi": epi, "eps": eps, "nbn": nbn, "heads": len(heads),
                 "x_shape": x.shape, "w_shape": w.shape, "route": how})


def _in_registers(prog, nbn, extras, out_shape, d, x_shape, w_shape, stride, pad, dil, group) -> bool:
    """Whether a convolution on the taps route always applies its epilogue in the kernel's registers
    (``fused_epilogue``: its residual, if any, a tensor of the result's shape and dtype, and not
    over a phase grid, whose rows are wider than the result's), so that it needs no compiled
    epilogue: its plan has none (``plan_gemm``), its kernel is the taps product alone, and a new
    input size plans and compiles no epilogue pass (MobileNet v2 at a new size: 35 plans and 35
    kernels fewer). Not while bench/conv_routes.py runs the BLAS route beside it (``AB``)."""
    fused = fused_epilogue(prog, nbn > 0) if AB[0] is None else None
    if fused is None:
        return False
    if fused[1] is None:
        return True
    r = extras[fused[1] - (3 if nbn else 1)]
    return (isinstance(r, np.ndarray) and r.shape == out_shape and r.dtype == d
            and taps_mode(x_shape, w_shape, stride, pad, dil, group, d) != "phase")


def plan_pool(site, inputs):
    """MAX_POOL2D as the depthwise kernel with a maximum over the taps instead of a weighted sum
    (padding is -inf, NaN wins as in numpy's maximum): one pass instead of kh*kw."""
    from .planning import Plan

    kernel, stride, pad = site.args
    x = inputs[0]
    if not (isinstance(x, np.ndarray) and x.ndim == 4):
        raise Unsupported("a pool of a non-4-d input")
    if x.dtype not in (np.float32, np.float64):
        raise Unsupported(f"a max pool in {x.dtype}")
    c = x.shape[1]
    ho, wo, pt, pl, lo, hi = dims_of(x.shape, (c, 1) + tuple(kernel), stride, pad, (1, 1))
    cls = ("maxpool", str(x.dtype), kernel[0], kernel[1], tuple(stride), (1, 1), False, (), (("in", 0),), 1, 1,
           flat_ok(stride, wo, x.shape[3], x.dtype))
    dims = (c, x.shape[2], x.shape[3], ho, wo, pt, pl, lo, hi)
    return Plan(cls, (cls, dims), (x.shape[0], c, ho, wo), x.dtype, {"dims": dims, "planes": x.shape[0] * c})


def kernel_ir(site, level: int, plan):
    cls, d, p = plan.cls, plan.dtype, plan.details
    if cls[0] == "gemm":
        from .kir import Elementwise

        stride, pad, dil = site.args[:3]
        if p["epi"] is None and p["route"] == "taps":      # (the taps product alone: the TapsGemm its caller runs)
            _, cg, kh, kw = p["w_shape"]
            return taps_kernel(d, cg * kh * kw)
        if p["epi"] is None:            # (BLAS's product alone: the site's kernel is the windows copy it may run)
            return Im2col(str(d), stride[1])
        if p["route"] == "blas" and str(d) in blas()[1] and \
                blas_mode(p["x_shape"], p["w_shape"], stride, pad, dil) == "im2col":
            im2col_function(str(d), stride[1])    # (here, in the compile's thread: its caller finds it made)
        ep = p["epi"].details
        return Elementwise(ep["program"], ep["kinds"], tuple(ep["bcast"]), str(d), ep["dims"] if level >= 3 else None)
    _, dtype, kh, kw, stride, dil, has_bias, kinds, program, cg, og, flat = cls
    from .codegen import codegen

    full = vec_width(codegen().features, TYPES[dtype])
    if flat:
        width = full
    elif level >= 3:
        lo, hi = p["dims"][7], p["dims"][8]
        width = full if hi - lo >= full else max(4, full // 2) if hi - lo >= full // 2 else 4
    else:
        width = full             # (the 4-lane loop after it takes narrow rows)
    return DepthwiseConv(dtype, kh, kw, stride, dil, has_bias, kinds, program, width,
                         p["dims"] if level >= 3 else None, "max" if cls[0] == "maxpool" else "conv", cg, og, flat)


def caller(site, compiled, plan, output):
    """``go(inputs, out)``: the folded weight and bias (once per Parameter array, as the L1 kernel
    folds them), then one call over every plane."""
    cls, d, p = plan.cls, plan.dtype, plan.details
    if cls[0] == "gemm":
        return _gemm_caller(site, compiled, plan)
    fn, ptr = compiled.fn, site.ptr
    dims, planes = p["dims"], p["planes"]
    if cls[11]:                 # (the flat kernel's fifth pointer: its lane masks)
        zrow = flat_masks(dims[1:7], cls[2], cls[3], cls[5], compiled.kernel.width)
    else:
        zrow = np.zeros(max(dims[2], 1) + 64, dtype=d)
    zp = data_pointer(zrow)
    # two threads take half the planes each where the work is large enough (``threads_for``)
    split = threads_for(PLANE_FLOPS * planes * dims[3] * dims[4] * cls[2] * cls[3] * cls[9]) if planes >= 2 else 1

    def run(*rest, steps=None):
        steps = Steps() if steps is None else steps
        if split > 1:
            steps.share([[(fn, (a, b, *rest))] for a, b in parts(planes, 1)])
        else:
            steps.call(fn, (0, planes, *rest))
    if cls[0] == "maxpool":
        if not cls[11]:
            zrow[:] = -np.inf

        def pool(inputs, out):
            out = output(out)
            run(*dims, data_pointer(out), ptr(0, inputs[0]), None, None, zp)
            return out
        pool.zero_row = zrow
        return pool
    eps, nbn, kinds = p["eps"], p["nbn"], p["kinds"]
    first = 2 + nbn
    memo = Memos() if "s" not in kinds else None         # (a scalar input's value is not in the key)

    def go(inputs, out):
        res = output(out)
        if memo is not None and memo.hit(inputs[1:first], (inputs[0], res, *inputs[first:])):
            return res
        wm, bias = K.prepared_weight(inputs[1], list(inputs[2:first]), eps, d)
        extras = []
        for j, kind in enumerate(kinds):
            e = inputs[first + j]
            extras.append(ptr(first + j, e) if kind == "t" else float(e))
        steps = Steps()
        run(*dims, data_pointer(res), ptr(0, inputs[0]), data_pointer(wm),
            data_pointer(bias) if bias is not None else None, zp, *extras, steps=steps)
        if memo is not None:
            steps.keep += [wm, bias]
            memo.made(inputs[1:first], (inputs[0], res, *inputs[first:]), steps, (0, 1))
        return res
    go.zero_row = zrow           # (kept alive with the caller: the kernel reads it through zp)
    return go


def _gemm_caller(site, compiled, plan):
    d, p = plan.dtype, plan.details
    stride, pad, dil, group = site.args[:4]
    eps, nbn, heads, ptr = p["eps"], p["nbn"], p["heads"], site.ptr
    first = 2 + nbn
    # the epilogue's inputs: the product (written in place), [the bias,] the extras (at first + j)
    epi = None if p["epi"] is None else elementwise_caller(
        compiled, p["epi"].details, None, lambda j, a: data_pointer(a) if j < heads else ptr(first + j - heads, a))
    taps = _taps_caller(site, plan, epi) if p["route"] == "taps" else None
    if taps is not None and AB[0] is None:      # (the taps route alone; bench/conv_routes.py keeps both)
        return taps

    o, cg, kh, kw = p["w_shape"]
    depthwise = cg == 1 and o == group > 1          # (a product of one row per group: the L1 kernel's taps)
    blas_ok = not depthwise and dtype_name(d) in blas()[1]
    # (made at the first call that runs it: on the taps route only AB asks for it)
    bcs = [BlasConv(p["x_shape"], p["w_shape"], stride, pad, dil, d, group)] if blas_ok and taps is None else []
    split = threads_for(2.0 * o * cg * kh * kw * plan.out_shape[2] * plan.out_shape[3])     # per image

    def go(inputs, out):
        if taps is not None and AB[0] != "blas":
            return taps(inputs, out)
        if blas_ok and not bcs:
            bcs.append(BlasConv(p["x_shape"], p["w_shape"], stride, pad, dil, d, group))
        bc = bcs[0] if bcs else None
        x, w = inputs[0], inputs[1]
        # (``out``: the memory plan's buffer, taken where it is C-contiguous of the result's shape and dtype)
        if bc is not None:
            res = bc(x, w, out, split)
        else:
            res = K.conv_gemm(x, K.weight_view(w), w.shape, stride, pad, dil, group, d, out)
        return res if epi is None else epi([res] + _affine_heads(inputs[2:first], eps, d) + list(inputs[first:]), res)
    go.taps = taps
    return go


def _affine_heads(bnp, eps, d) -> list:
    """[scale, shift] as [1, O, 1, 1] (the epilogue's inputs 1 and 2, ``with_affine``), or []."""
    if not bnp:
        return []
    scale, shift = K.conv_affine(list(bnp), eps, d)
    return [scale.reshape(1, -1, 1, 1), shift.reshape(1, -1, 1, 1)]


AB = [None]      # bench/conv_routes.py: "blas" runs the BLAS route where the taps one was chosen, "taps" the taps one
#                  (side by side: set before the callers are made, so that they keep the BLAS route's epilogue)


def _taps_geometry(site, plan):
    """(TapsConv, its in-register epilogue or None) of a plan on the taps route."""
    p = plan.details
    stride, pad, dil, group = site.args[:4]
    w_shape = p["w_shape"]
    mode = taps_mode(p["x_shape"], w_shape, stride, pad, dil, group, plan.dtype)
    prog = with_affine(site.args[5]) if p["nbn"] else site.args[5]
    fused = fused_epilogue(prog, p["nbn"] > 0)
    tc = TapsConv(p["x_shape"], w_shape, tuple(stride), pad, tuple(dil), group, plan.dtype, mode,
                  residual=fused is not None and fused[1] is not None)
    if fused is not None and fused[1] is not None and tc.grid is not None:
        assert p["epi"] is not None  # (``_in_registers`` keeps a compiled epilogue for a residual over a phase grid)
        fused = None                 # (a residual of the result's layout, not the wider grid's)
    return tc, fused


def _taps_caller(site, plan, epi):
    """``go(inputs, out)`` of a dense or grouped convolution on msvm's GEMM (``TapsConv``): the
    epilogue in the kernel's registers where it is one ``fused_epilogue`` knows (a bias, a residual
    add, ReLU, ReLU6: every one of ResNet's and MobileNet's), else a compiled pass over the result
    in place, as the BLAS route does."""
    d, p = plan.dtype, plan.details
    stride, pad, dil, group = site.args[:4]
    eps, nbn = p["eps"], p["nbn"]
    first = 2 + nbn
    shared = p.get("taps")          # (one per plan: the sites that share a plan share its geometry)
    if shared is None:
        shared = p["taps"] = _taps_geometry(site, plan)
    tc, fused = shared
    o, cg, kh, kw = p["w_shape"]
    split = threads_for(2.0 * o * cg * kh * kw * plan.out_shape[2] * plan.out_shape[3])       # per image
    memo = Memos()

    def go(inputs, out):
        if fused is not None:
            has_bn, add, lo, hi = fused
            r = inputs[first + add - (3 if nbn else 1)] if add is not None else None
            if out is None:                 # (the caller's result: a new array, where the kept calls write too)
                out = np.empty(tc.shape, d)
            if memo.hit(inputs[1:first], (inputs[0], out, r)):
                return out
            a = prepared_a(inputs[1], group, d, tc.inplace)
            # (a residual read where the result is written: the partial sums would overwrite it first)
            if r is not None and epi is None and (not r.flags.c_contiguous or np.may_share_memory(r, out)):
                # (no compiled epilogue to fall back on: the plan checked its shape and dtype; a copy of
                # it where it is the result's own buffer or a view)
                r = np.array(r, order="C")
            if r is None or (isinstance(r, np.ndarray) and r.shape == tc.shape and r.dtype == d and
                             r.flags.c_contiguous and not (out is not None and np.may_share_memory(r, out))):
                bn = K.conv_affine(list(inputs[2:first]), eps, d) if has_bn else None
                steps = Steps()
                res = tc(inputs[0], a, out, split, bn, r, lo, hi, steps)
                if res is out:
                    steps.keep += [a, bn]
                    memo.made(inputs[1:first], (inputs[0], out, r), steps, (0, 1, 2))
                return res
        a = prepared_a(inputs[1], group, d, tc.inplace)
        res = tc(inputs[0], a, out, split)
        if epi is None:              # (no epilogue at all: a plan with one in registers took the path above)
            return res
        return epi([res] + _affine_heads(inputs[2:first], eps, d) + list(inputs[first:]), res)
    go.conv = tc
    go.fused = fused
    return go


@functools.lru_cache(maxsize=256)      # (a plan and a caller ask per site: programs repeat)
def fused_epilogue(prog: tuple, has_bn: bool):
    """(bn, residual, lo, hi) where the epilogue program (the batch norm applied first: ``with_affine``)
    is ``min(max(conv [* scale + shift] [+ residual], lo), hi)`` as the taps kernel computes it in
    registers: scale and shift its inputs 1 and 2, the residual its input ``residual`` (a tensor of
    the result's shape), lo = 0 for ReLU, hi = 6 for ReLU6 (as ReLU then a minimum with 6); else None."""
    nodes = list(prog)
    if nodes[:1] != [("in", 0)]:
        return None
    nodes = nodes[1:]
    bn = has_bn and nodes[:4] == [("in", 1), ("BROADCAST_MUL",), ("in", 2), ("BROADCAST_ADD",)]
    if has_bn and not bn:
        return None
    if bn:
        nodes = nodes[4:]
    add = None
    if len(nodes) >= 2 and nodes[0][0] == "in" and nodes[0][1] > (2 if has_bn else 0) and \
            nodes[1] in (("BROADCAST_ADD",), ("ADD",)):
        add, nodes = nodes[0][1], nodes[2:]
    lo, hi = -np.inf, np.inf
    if nodes[:1] == [("RELU",)]:
        lo, nodes = 0.0, nodes[1:]
        if nodes[:2] in ([("c", 6), ("BROADCAST_MIN",)], [("c", 6.0), ("BROADCAST_MIN",)]):
            hi, nodes = 6.0, nodes[2:]
    if nodes:
        return None
    return bn, add, lo, hi


ROUTE_ENV = "MSVM_CONV_GEMM"     # "taps" | "blas": every dense convolution takes that route (bench, tests)
# per image: from here two threads share a product (pool.share; gemm's doc). 8e6 until a kept split's
# tasks were posted again without Python (``Memo``, pool.Calls); measured then (AMD Zen 5, two cores,
# MobileNet v2 alone, ms per forward, medians of 30, separate processes in turn), 8e6 / 2e6 / 1e6 / 4e5:
# at 160 2.54-2.84 / 1.78-2.55 / 1.85-2.09 / 1.76-1.91, at 224 - / 2.93-3.15 / 2.90-3.28 / 2.99-3.39
SPLIT_MIN_FLOPS = 2e6
PLANE_FLOPS = 16                 # a depthwise / pool tap costs about what 16 GEMM flops do (MobileNet v2's
#                                  depthwise layers: 41 MFLOP in ~2.8 ms, ~15 GFLOP/s, against ~130)
IM2COL_BLOCK_BYTES = 2 << 20     # the im2col mode's windows per block of output rows (BlasConv._im2col)
# Two threads on a wide map split the output channels from this many per group (else the columns). Measured
# (AMD Zen 3, two cores, ResNet-50's layers at 224 alone, interleaved medians, ms, columns / channels): 1x1
# 64->256 at 56 1.21 / 1.08, 256->1024 at 14 0.90 / 0.83, 1024->512 at 14 1.80 / 1.61, 3x3 256->256 at 14
# 2.16 / 2.04, stride 2 1x1 512->1024 1.83 / 1.67; but 256->64 at 56 0.98 / 1.11, 3x3 64->64 at 56 2.48 /
# 2.60 (each thread's half of 64 channels is a narrow product), 512->128 at 28 even.
CHANNEL_SPLIT_MIN = 128
ROW_SPLIT_COLS = 128            # output columns below which two threads split a BLAS convolution by its output channels
FEW_CHANNELS = 4                 # input channels per group of a convolution that route() keeps on taps


def route(x_shape, w_shape, stride, pad, dil, group, d, wide=None) -> str:
    """Which product a dense or grouped convolution runs: "taps" (msvm's GEMM, ``TapsConv``) or
    "blas" (OpenBLAS: ``BlasConv``, or the L1 kernel's conv_gemm for dtypes BLAS lacks); BLAS for dtypes other
    than float32 and float64; ``MSVM_CONV_GEMM`` forces either. By measurement (the module doc):

    - taps on an AVX-512 target (``wide``: gemm.wide_tiles, msvm's 12 x 32 register tiles), whatever
      kernels OpenBLAS runs there: with OpenBLAS on its Haswell kernels (AMD EPYC Zen 5) 1.7x BLAS on
      ResNet-50's forward; with OpenBLAS on its own AVX-512 kernels (an Intel Xeon, OpenBLAS 0.3.31
      "skylakex"; one and two cores, alternating processes, ms per forward at 224 / 160, msvm over
      onnxruntime in the same process) ResNet-50 one core BLAS 82.3 / 50.5 (1.44-1.60x ort), taps
      69.4-71.8 / 40.9-42.7 (1.22-1.31x); two cores 54.6 / 33.3 against 49.5 / 31.6; MobileNet v2
      one core 11.1 / 7.0 against 9.1 / 5.5, two cores 8.8 / 6.2 against 7.4 / 5.2 (this rule took
      BLAS there before: taps only where OpenBLAS's tiles were narrower, ``wider_than_blas``);
    - taps on few channels per tap (FEW_CHANNELS: RGB stems, 1.15-1.5x BLAS's im2col);
    - else BLAS: on an AVX2 target both run 6 x 16 register tiles and OpenBLAS's packed operands
      beat reading A and B where they lie (AMD EPYC Zen 3, one core, ResNet-50's convolutions,
      taps / BLAS per layer kind in one run: 1x1 0.74, 3x3 0.84, 3x3 stride 2 0.75, the stem 1.15;
      bench/conv_routes.py). On two threads too, now that the BLAS route splits its products over
      msvm's pool (``BlasConv``): the same machine, two cores, ResNet-50 at 224, wall clock per
      forward, taps split 138-162 ms, BLAS split 99-124 ms (the taps route on every split product
      was the rule before: 146.7 ms, slower than one thread's BLAS)."""
    if np.dtype(d) not in (np.float32, np.float64):
        return "blas"
    forced = os.environ.get(ROUTE_ENV, "")
    if forced in ("taps", "blas"):
        return forced
    if w_shape[1] <= FEW_CHANNELS:
        return "taps"
    if wide is None:
        wide = wide_tiles()
    return "taps" if wide else "blas"


def threads_for(flops: float) -> int:
    """How many threads share one image's product: 2 (or what MSVM_THREADS says, at most the
    cores this process may run on and the kernel pool's size) from SPLIT_MIN_FLOPS, else 1."""
    if flops < SPLIT_MIN_FLOPS:
        return 1
    return min(cores(), 2)


def _blas_gemm(dtype: str):
    """The BLAS's xgemm for dtype as one ctypes function per process (pool.share knows it by identity)."""
    hit = _GEMM.get(dtype)
    if hit is None:
        hit = _GEMM[dtype] = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * 13))(blas()[1][dtype])
    return hit


_GEMM: dict = {}


@dataclass(frozen=True)
class Im2col:
    """The kernel-cache entry of the windows copy BlasConv's im2col mode runs (lower_conv.lower_im2col;
    one per dtype, column stride and target: every other size is an argument)."""
    dtype: str
    sw: int

    kind = "im2col"
    opt_level = 3

    @property
    def name(self) -> str:
        return f"im2col_s{self.sw}"

    def text(self) -> str:
        return f"im2col v1 dtype={self.dtype} sw={self.sw}"


_IM2COL: dict = {}          # (dtype, sw) -> ctypes function


def im2col_function(dtype: str, sw: int):
    """ctypes ``im2col(c0, c1, oh0, oh1, H, W, Wo, kh, kw, sh, dh, dw, pt, pl, dst, x, zrow)``
    (``lower_conv.lower_im2col``; callconv.HEAD), compiled (or loaded from the kernel cache) once per
    process: the Compiled's own function, one object (pool.share knows a function by identity)."""
    key = (dtype, sw)
    hit = _IM2COL.get(key)
    if hit is None:
        from .build import compile_kernel

        hit = _IM2COL[key] = compile_kernel(Im2col(dtype, sw), 3, {"op": "IM2COL", "shape": [], "dtype": dtype}).fn
    return hit


def blas_mode(x_shape, w_shape, stride, pad, dil) -> str:
    """BlasConv's mode: "direct" (1x1, stride 1, unpadded: B is the image) or "im2col"."""
    ph, pw = _pads(x_shape, w_shape, stride, pad, dil)
    direct = w_shape[2] == w_shape[3] == 1 and tuple(stride) == (1, 1) and sum(ph) + sum(pw) == 0
    return "direct" if direct else "im2col"


class BlasConv:
    """A dense or grouped NCHW convolution as BLAS products (xgemm through numpy's own OpenBLAS pointer,
    ``build.blas``), per image and group out[Og, P] = W_g[Og, K] @ B_g[K, P] (K: the group's channels x taps;
    depthwise convolutions run their own kernel or the L1 kernel's taps):

    - ``direct`` (1x1, stride 1, unpadded): B is the image's planes, no copy;
    - ``im2col`` (the rest): per block of output rows, the windows copied to [C*kh*kw, rows*Wo] by a
      compiled kernel (``im2col_function``: padding written as zeros, no padded copy of the image),
      then one product into those columns of the result. Blocks of at most IM2COL_BLOCK_BYTES keep
      the copy in cache for the product and bound the workspace (ResNet-50's 56-wide 3x3: 7.2 MB of
      windows, 2 MB per block).

    ``split`` = 2: two threads (this one and msvm's spinning pool: pool.share, the BLAS set to one
    thread: callconv.blas_once), as onnxruntime splits its convolutions' GEMMs over its pool: the
    output columns in two halves (direct: one BLAS call each; im2col: each half's blocks, copy then
    product, in a workspace of its own). Below ROW_SPLIT_COLS output columns (a narrow map: 5x5 to
    10x10) the halves are the output channels instead, each thread the product by its half of the
    weight's rows, after both copied half the channels' windows (two products of 13 and 12 columns
    ran OpenBLAS at ~2/3 of its rate). The halves agree with one call to rounding, not bit for bit
    (OpenBLAS picks its kernels by the product's size).

    Measured (AMD EPYC Zen 3, one core, 3x3 layers of ResNet-50 at 224, alone, interleaved medians,
    ms): the compiled copy in blocks against the numpy windows copy (np.pad, a 6-d transposed copy:
    0.37-0.70 ms of a 3 ms layer) before one product: 14 wide 2.75 / 3.21, 7 wide 3.27 / 3.72, stride
    2 at 56 / 28 / 14 2.93 / 3.54, 2.91 / 3.50, 3.46 / 3.88; and against the per-tap products over the
    padded image with beta = 1 (the "shifted" mode it replaces at 16 wide and up: no copy of the
    windows, but the weight copied per tap and call, kh*kw thin products, the padded columns computed
    and cropped): 28 wide 2.91 / 3.17, 56 wide 3.06 / 3.24; two cores 1.98 / 2.38 and 2.30 / 2.45.
    Blocks of 1-2 MB and the whole image measure the same; 512 KB (a block of 4 rows at 7 wide, 4608
    channels x taps) 0.8x. Earlier measurements: the split by channels on narrow maps (two cores,
    GFLOP/s, columns / channels: 2048->512 1x1 at 5x5 63.6 / 78.7, 512->512 3x3 at 7x7 54.7 / 70.6);
    strided convolutions as stride x stride phase images, each tap a shift of one phase: 0.92-0.99x
    the im2col GEMM on ResNet-50's stride-2 3x3s, 0.76x on the 7x7 stem."""

    def __init__(self, x_shape, w_shape, stride, pad, dil, d, group=1):
        n, c, h, w = x_shape
        o, cg, kh, kw = w_shape
        ho, wo = dims_of(x_shape, w_shape, stride, pad, dil)[:2]
        ph, pw = _pads(x_shape, w_shape, stride, pad, dil)
        self.stride, self.pad, self.dil = tuple(stride), pad, tuple(dil)
        self.ho, self.wo, self.o, self.c, self.kh, self.kw, self.d = ho, wo, o, c, kh, kw, np.dtype(d)
        self.group, self.og = group, o // group
        self.cols = ho * wo
        self.k = cg * kh * kw               # (per group: its channels' rows of B follow the group before)
        self.mode = blas_mode(x_shape, w_shape, stride, pad, dil)
        if self.mode == "im2col":
            self.block_rows = max(1, IM2COL_BLOCK_BYTES // (self.k * group * wo * self.d.itemsize))
            self.copy = im2col_function(str(self.d), self.stride[1])
            self.geometry = (h, w, wo, kh, kw, self.stride[0], dil[0], dil[1], ph[0], pw[0])
            self.zrow = np.zeros(w + 64, self.d)        # (a padded row's source: W zeros)
        self.shape = (n, o, ho, wo)
        bits, gemm = blas()
        it = ctypes.c_int64 if bits == 64 else ctypes.c_int32
        ft = ctypes.c_float if self.d == np.float32 else ctypes.c_double
        self.gemm = _blas_gemm(str(self.d))
        self._it = it
        # the by-reference scalars of the Fortran interface, kept for the process
        self._keep = [ctypes.c_char(b"N"), it(self.og), it(self.k), ft(1.0), ft(0.0), it(self.cols), it(self.k),
                      it(self.cols)]
        self._ref = [ctypes.addressof(v) for v in self._keep]

    def __call__(self, x, w, out=None, split=1):
        """x by the 4-d weight ``w`` into ``out`` where it is C-contiguous of the result's shape and
        dtype (the memory plan's buffer), else a new array."""
        n = x.shape[0]
        ok = out is not None and out.shape == self.shape and out.dtype == self.d and out.flags.c_contiguous
        res = out if ok else np.empty(self.shape, self.d)
        if n == 0 or res.size == 0:
            return res
        wm = np.ascontiguousarray(np.asarray(w, self.d).reshape(self.o, -1))
        wp = data_pointer(wm)
        narrow = self.split_channels(split)       # (the output channels in halves, or groups; else the columns)
        wide = split > 1 and not narrow and self.cols >= ROW_SPLIT_COLS
        cols, cref = self._keep[7], self._ref[5]
        for b in range(n):
            xb, cp = np.ascontiguousarray(x[b], self.d), data_pointer(res[b])
            if self.mode == "direct":
                sp = data_pointer(xb)
            else:
                sp = self._im2col(xb, cp, wp, wide, narrow)
                if sp is None:
                    continue
            if narrow and self.group == 1:
                cuts = parts(self.o, 8)
                counts = [self._it(stop - start) for start, stop in cuts]
                share([self._rows(sp, wp, cp, a, m) for (a, _), m in zip(cuts, counts)])
            elif narrow:
                share([[self._product(sp, wp, cp, 0, cols, cref, self.cols, g) for g in range(g0, g1)]
                       for g0, g1 in parts(self.group, 1, 2)])
            elif wide:
                cuts = parts(self.cols, 16)                      # (whole cache lines of C per task)
                ms = [self._it(stop - start) for start, stop in cuts]
                share([[self._product(sp, wp, cp, a, m, cref, self.cols, g) for g in range(self.group)]
                       for (a, _), m in zip(cuts, ms)])
            else:
                for g in range(self.group):
                    fn, args = self._product(sp, wp, cp, 0, cols, cref, self.cols, g)
                    fn(*args)
        return res

    def split_channels(self, split) -> bool:
        """Whether two threads split this convolution's output channels (whole groups where it has
        several) rather than its columns: on a narrow map (fewer than ROW_SPLIT_COLS columns) where
        there are channels to share, and where there are at least CHANNEL_SPLIT_MIN of them and the
        windows of a whole image fit in two im2col blocks (the channel split copies them all first)."""
        if split < 2 or (self.o < 16 if self.group == 1 else self.group < 2):
            return False
        if self.cols < ROW_SPLIT_COLS:
            return True
        whole = self.k * self.group * self.cols * self.d.itemsize
        return self.og >= CHANNEL_SPLIT_MIN and (self.mode == "direct" or whole <= 2 * IM2COL_BLOCK_BYTES)

    def _im2col(self, xb, cp, wp, wide, narrow):
        """The im2col mode's copies and products of one image. A narrow map split by channels: every
        window copied (each thread half the channels) into one workspace, whose address is returned for
        the products; else per block of output rows the copy then its products (one per group), each
        half of the rows (two threads) in a workspace of its own, and None."""
        isz = self.d.itemsize
        xp, zp = data_pointer(xb), data_pointer(self.zrow)
        if narrow:
            buf = data_pointer(workspace(0, self.k * self.group * self.cols, self.d))
            share([[(self.copy, (c0, c1, 0, self.ho, *self.geometry, buf, xp, zp))] for c0, c1 in parts(self.c, 1, 2)])
            return buf
        halves = parts(self.ho, 1, 2) if wide else [(0, self.ho)]
        rows = min(self.block_rows, -(-self.ho // len(halves)))
        area = self.k * self.group * rows * self.wo
        buf = data_pointer(workspace(0, area * len(halves), self.d))
        keep, tasks = [], []
        for h, (a, z) in enumerate(halves):
            dst, calls = buf + h * area * isz, []
            for oh0 in range(a, z, rows):
                oh1 = min(oh0 + rows, z)
                m = self._it((oh1 - oh0) * self.wo)        # (the block's columns: B's leading dimension too)
                keep.append(m)
                calls.append((self.copy, (0, self.c, oh0, oh1, *self.geometry, dst, xp, zp)))
                calls += [self._product(dst - oh0 * self.wo * isz, wp, cp, oh0 * self.wo, m, ctypes.addressof(m),
                                        m.value, g) for g in range(self.group)]
            tasks.append(calls)
        share(tasks)
        return None

    def _product(self, sp, wp, cp, j0, m, lda, ld, g=0):
        """(gemm, args): out[g's channels, j0:j0 + m] = W_g @ src[g's rows, j0:j0 + m], column-major as
        BLAS sees them: C^T [m, Og] = B^T [m, K] . W_g^T [K, Og] (``lda``: the address of B's row
        length, ``ld`` its value)."""
        ch, og, k, one, zero, _, ldb, ldc = self._ref
        isz = self.d.itemsize
        b = sp + (g * self.k * ld + j0) * isz
        c = cp + (g * self.og * self.cols + j0) * isz
        return self.gemm, (ch, ch, ctypes.addressof(m), og, k, one, b, lda, wp + g * self.og * self.k * isz, ldb,
                           zero, c, ldc)

    def _rows(self, sp, wp, cp, o0, o):
        """[(gemm, args)]: out[o0:o0 + o, :] = W[o0:o0 + o] @ src (one group): C^T's columns from o0 (the
        weight's rows from o0, K apart; C's rows, cols apart)."""
        ch, _, k, one, zero, lda, ldb, ldc = self._ref
        isz = self.d.itemsize
        op, mp = ctypes.addressof(o), ctypes.addressof(self._keep[7])
        return [(self.gemm, (ch, ch, mp, op, k, one, sp, lda, wp + o0 * self.k * isz, ldb, zero,
                             cp + o0 * self.cols * isz, ldc))]


# ---------------------------------------------------------------- one workspace per thread
# The convolutions' padded images, phase images, im2col matrices and cropped accumulators live in the
# thread's workspace (compiler/workspace.py: one buffer per slot, grown to the largest layer's need, not
# one per layer and caller: ResNet-50 kept ~19 MB of them); a layer writes the borders it reads before each
# use (compiler/phases.py).


# ---------------------------------------------------------------- dense convolutions on msvm's own GEMM

_TAPW: dict = {}             # (id(weight Parameter array), layout, group, dtype) -> (weakref, prepared A)


# The taps product reads the weight from the Parameter itself (``a_in_place``: no copy held, so a
# model's weights are held once). Measured (AMD EPYC Zen 5, one pinned core, thread CPU time, fastest
# of 11-15 interleaved calls, caches flushed before each as a forward leaves them, and warm; ResNet-50's
# layer shapes at 224), in place / packed, GFLOP/s: 1x1 and 3x3 of every K but the multiples of 1024
# floats at par (3x3 7 wide 138 / 140, 14 wide 158 / 155, 28 wide 140 / 144; 1x1 512 -> 2048
# 125 / 122, 256 -> 1024 147 / 158, 64 -> 256 160 / 158). Rows a multiple of 4 KB apart (K = 1024,
# 2048) put a tile's 12 rows in one L1 set (12 ways): at par in most processes, 76-93 / 109-117 in
# some (the same code and shapes; a busy neighbour?); tiles of 8 rows there (ALIAS_ROWS) measured
# 96-104 in those and at par or better in the others (1024 -> 256 at 14 wide 141-164 / 125-150), so
# those layers read in place with 8-row tiles (ResNet-50: 23 MB of packed copies no longer held).
# Measured and not kept: the kernel copying each 1 MB block of such rows, one cache line further
# apart, into a workspace before the tiles read it: 88-134 against packed 128-163.
A_ENV = "MSVM_CONV_A"       # "packed": a packed copy of every weight, held beside it (else in place)
ALIAS_BYTES = 4096          # rows a multiple of this apart take ALIAS_ROWS-row tiles (see above)
ALIAS_ROWS = 8


def a_in_place() -> bool:
    """Whether the taps product reads A from the Parameter itself (else from a packed copy held
    beside it, ``prepared_a``: MSVM_CONV_A=packed)."""
    return os.environ.get(A_ENV, "") != "packed"


def tile_rows_in_place(lda: int, d) -> int:
    """Rows per register tile of the in-place product over weight rows ``lda`` elements of dtype d
    apart: ALIAS_ROWS where they alias in L1 (see above), else 0 (gemm.shape's MR)."""
    alias = (lda * np.dtype(d).itemsize) % ALIAS_BYTES == 0
    return ALIAS_ROWS if alias and ALIAS_ROWS < tile_rows(d) else 0      # (AVX2's tiles are 6 rows already)


def prepared_a(w, group, d, inplace=False):
    """The 4-d weight [O, Cg, kh, kw] (a Parameter's array, not folded: the batch norm is the
    kernel's epilogue) as the taps product's A, rows [O, (Cg, kh, kw)] in its own order:
    ``inplace`` (``a_in_place``), the Parameter itself where it is contiguous in dtype d, else one
    converted copy; packed, per group its rows in blocks of MR (gemm.pack_rows), the groups one after
    the other, in dtype d. A copy is made once per read-only array (``set_data`` gives a new one;
    the entry goes with the array), per call for a writable one."""
    w = np.asarray(w)
    if inplace:
        a = np.ascontiguousarray(w, dtype=d)
        if a is w or a.base is w:
            return a                 # (the Parameter itself: [O, (ci, kh, kw)] rows, no copy)
    layout = "inplace" if inplace else "packed"
    key = (id(w), layout, group, np.dtype(d).str)
    hit = _TAPW.get(key)
    if hit is not None and hit[0]() is w:
        return hit[1]
    a = np.ascontiguousarray(w, dtype=d) if inplace else _packed(w, group, d)
    if K._frozen(w):
        a.flags.writeable = False    # (read by kernels only; prepared_cout caches what it makes of it)
        # (over a copy: another thread, or a weak reference's callback, may change the table meanwhile)
        for k in [k for k, v in _TAPW.copy().items() if k[0] == id(w) and v[0]() is not w]:
            _TAPW.pop(k, None)       # (a stale entry of a recycled id)
        try:
            _TAPW[key] = (weakref.ref(w, lambda _r, k=key: _TAPW.pop(k, None)), a)
        except TypeError:            # (an array type without weak references: not cached)
            pass
    return a


def _packed(w, group, d):
    """``prepared_a``'s packed A (a new array)."""
    o, cg, kh, kw = w.shape
    a = w.reshape(o, cg * kh * kw)
    og, mr = o // group, tile_rows(d)
    return np.concatenate([pack_rows(a[g * og:(g + 1) * og].astype(d, copy=False), mr).reshape(-1)
                           for g in range(group)])


def prepared_bytes() -> dict:
    """Bytes held by the convolutions' prepared-weight caches, per cache (tests: at most one copy per
    weight): the taps product's packed weights, L1's folded small weights, the batch norms' scale/shift."""
    def nbytes(v):
        return sum(nbytes(x) for x in v) if isinstance(v, tuple) else getattr(v, "nbytes", 0)
    return {"taps": sum(v[1].nbytes for v in _TAPW.values() if v[0]() is not None),
            "folded": sum(nbytes(v[1]) for v in K._PREPARED.values()),
            "affine": sum(nbytes(v[1]) for v in K._AFFINE.values())}


def _odd_lines(n: int, itemsize: int) -> int:
    """n rounded up so that a row of n elements spans an odd number of cache lines (rows read at
    that stride then fall in every L1 set, not a fraction of them)."""
    per = 64 // itemsize
    n = -(-n // per) * per
    return n if (n // per) % 2 else n + per


class TapsConv:
    """A dense or grouped NCHW convolution as msvm's own GEMM (gemm.ir_taps) per image and group,
    out[Co, P] = W[Co, K] @ B[K, P], with B read where it lies rather than packed:

    - ``direct`` (1x1, stride 1, no padding): B is the image's planes themselves, C the result's;
    - ``sub`` (1x1, strided, no padding; or at stride 1 on planes of a multiple of 4 KB: ``taps_mode``):
      the subsampled planes copied once (P x Cin) into rows of an odd number of cache lines, C the result;
    - ``phase`` (k x k): the padded image split into stride x stride phase images side by side,
      each tap a shift in one of them (stride 1: the padded image, the shifted GEMMs of
      ``BlasConv``), over a grid as wide as a phase row; the grid's extra columns are cropped;

    One kernel call per image and group (``split``: the output columns in pool.parts of whole
    panels, shared with the pool's thread by pool.share)."""

    def __init__(self, x_shape, w_shape, stride, pad, dil, group, d, mode=None, inplace=None, dot=None, cout=None,
                 residual=False, wino=None, im2col=None):
        n, c, h, w = x_shape
        o, cg, kh, kw = w_shape
        sh, sw = stride
        ho, wo, pt, pl = dims_of(x_shape, w_shape, stride, pad, dil)[:4]
        ph, pw = _pads(x_shape, w_shape, stride, pad, dil)
        unpadded = sum(ph) + sum(pw) == 0
        if mode is None:
            mode = taps_mode(x_shape, w_shape, stride, pad, dil, group, d)
        self.mode, self.d, self.group, self.og, self.cg = mode, np.dtype(d), group, o // group, cg
        self.n, self.o, self.ho, self.wo, self.c = n, o, ho, wo, c
        self.shape = (n, o, ho, wo)
        isz = self.d.itemsize
        if mode in ("direct", "sub"):
            assert kh == kw == 1 and unpadded
            self.q, self.ci, self.taps, self.wq = ho * wo, cg, np.zeros(1, np.int64), wo
            self.row = h * w if mode == "direct" else _odd_lines(ho * wo, isz)
            self.grid = None
            self.src = None if mode == "direct" else (c, self.row)
            # (sub: the subsampled planes x[:, ::sh, ::sw], phases.py's first phase)
            self.phases = phases_function(self.d) if mode == "sub" else None
            self.phase_geom = (c, h, w, sh, sw, 0, 0, ho, wo, self.row, 1) if mode == "sub" else None
        else:                           # phase
            hp, wp = h + sum(ph), w + sum(pw)
            hq, wq = -(-hp // sh), -(-wp // sw)
            over = (kw - 1) * dil[1] // sw
            self.row = _odd_lines(hq * wq + over, isz)
            nph = sh * sw
            self.src = (nph * c, self.row)              # [phase][channel][row]; borders stay zero
            self.hq = hq
            # (compiler/phases.py writes every row of every phase, borders and the tail past the grid)
            self.phases = phases_function(self.d)
            self.phase_geom = (c, h, w, sh, sw, ph[0], pw[0], hq, wq, self.row, sh * sw)
            taps = []
            for i in range(kh):
                for j in range(kw):
                    di, dj = i * dil[0], j * dil[1]
                    phase = (di % sh) * sw + dj % sw
                    taps.append(phase * c * self.row + (di // sh) * wq + dj // sw)
            self.taps = np.array(taps, np.int64)
            self.q, self.ci, self.wq = ho * wq, cg, wq
            self.grid = None if wq == wo else (o, ho, wq)
        self.lda = len(self.taps) * self.ci       # (A's rows: [(ci, kh, kw)], the weight's own order)
        k = taps_kernel(self.d, self.lda, inplace)
        self.inplace = inplace = k.a_inplace
        self.rows = k.rows
        self.fn = gemm_taps(k)
        self.nr = panel_width(self.d)
        self.acc = (o, ho * self.wq) if self.grid is not None else None
        mr = tile_rows(self.d)
        # A elements per group: packed row blocks, or the weight's own rows
        self.gstride = (self.og if inplace else -(-self.og // mr) * mr) * self.lda
        self.row_cut = _row_cut(self.q, self.nr, self.og, self.rows or mr) if group == 1 else None
        # Winograd's F(2x2, 3x3) (compiler/winograd.py): 16 products on gemm_cout's tiles between two transforms
        asked = wino
        if wino is None:
            wino = inplace and use_winograd(x_shape, w_shape, stride, pad, dil, group, self.d)
        # the image's windows as rows and the packed Dense product (``use_im2col``): small maps, large weights
        # (Winograd keeps the maps of IM2COL_MAX_PIXELS, and those it was asked to run)
        if im2col is None:
            im2col = (group == 1 and inplace and not asked and not (wino and ho * wo >= IM2COL_MAX_PIXELS)
                      and use_im2col(o, self.lda, ho * wo, self.nr, self.d))
        self.im2col = bool(im2col) and group == 1 and inplace       # (gemm_cout's panels of the weight in place)
        self.wino = bool(wino) and not self.im2col
        if self.wino:
            from . import winograd

            self.grid = self.acc = self.src = None
            self.th, self.tw = winograd.tiles(ho, wo)
            self.wgeom = (h, w, pt, pl)
            self.wrows = wino_rows(self.th, self.tw, c, o, self.d)
            self.wfn = {part: winograd.function(self.d, part) for part in ("in", "mm", "out")}
            cout = dot = False
        if self.im2col:
            from .gemm import function as gemm_function
            from .gemm_cout import function as cout_function
            from .gemm_dot import function as dot_function

            self.grid = self.acc = self.src = None
            self.xt1 = kh == kw == 1 and (sh, sw) == (1, 1) and unpadded     # (a transpose of the planes)
            self.xt = dot_function(self.d, "xt1" if self.xt1 else "xt")
            self.geom = (c, h, w, kh, kw, sh, sw, pt, pl, dil[0], dil[1], ho, wo)
            self.gemmfn, self.rowsfn = gemm_function(dtype_name(self.d)), cout_function(self.d, "rows")
            cout = dot = False
        # vectors over output channels (gemm_cout): the weight packed once in panels, the image read in place
        if cout is None:
            cout = (group == 1 and inplace and ho * wo > 0
                    and use_cout(o, self.lda, len(self.taps), self.nr, self.d, residual, ho * wo))
        self.cout = bool(cout) and group == 1
        if self.cout:
            from .gemm_cout import function as cout_function

            self.grid = self.acc = None
            self.coutfn = cout_function(self.d)
            dot = False
        # the inner-product route (gemm_dot): the image's columns copied as rows, no lane idle
        if dot is None:
            dot = group == 1 and inplace and use_dot(ho * wo, self.q, self.lda, len(self.taps), self.nr, self.d)
        self.dot = bool(dot) and group == 1
        if self.dot:
            from .gemm_dot import TI, function

            self.grid = self.acc = None
            self.xt1 = mode in ("direct", "sub")        # a transpose of the (subsampled) planes, else the k x k copy
            self.xt, self.dotfn = function(self.d, "xt1" if self.xt1 else "xt"), function(self.d, "dot")
            self.geom = (c, h, w, kh, kw, sh, sw, pt, pl, dil[0], dil[1], ho, wo)
            tiles = -(-o // TI)
            self.row_cut = -(-tiles // 2) * TI if tiles > 1 else None     # (two threads: halves of whole tiles)

    def __call__(self, x, a, out=None, split=1, bn=None, add=None, lo=-np.inf, hi=np.inf, steps=None):
        """The convolution of x (any strides) by ``a`` (``prepared_a``) into ``out`` where it is
        C-contiguous of the result's shape and dtype (the memory plan's buffer), else a new array;
        then, in the kernel's registers, * scale + shift (``bn`` = (scale [O], shift [O])), + ``add``
        (C-contiguous, of the result's shape; not where the result is cropped from a wider grid),
        max(., lo), min(., hi). The staging buffers are the thread's ``workspace``. Its native calls
        go through ``steps`` (a ``Steps``: they run as they come, and the caller may keep them)."""
        steps = Steps() if steps is None else steps
        n = x.shape[0]
        ok = out is not None and out.shape == self.shape and out.dtype == self.d and out.flags.c_contiguous
        res = out if ok else np.empty(self.shape, self.d)
        if n == 0 or res.size == 0:
            steps.copied()
            return res
        assert add is None or (self.grid is None and add.shape == self.shape and add.flags.c_contiguous)
        if self.dot:
            self._run_dot(x, a, res, split, bn, add, lo, hi, steps)
            return res
        if self.im2col:
            a = prepared_cout(a, self.d, self.nr)
            steps.keep.append(a)
            self._run_im2col(x, a, res, split, bn, add, lo, hi, steps)
            return res
        sbuf = None if self.src is None else workspace(0, self.src[0] * self.src[1], self.d).reshape(self.src)
        acc = None if self.acc is None else workspace(1, self.acc[0] * self.acc[1], self.d).reshape(self.acc)
        if self.wino:
            up, bad, pre = prepared_wino(a, self.d, self.nr, self.c)
            steps.keep += [up, a]
            self._run_wino(x, a, up, bad, pre, res, split, bn, add, lo, hi, steps)
            return res
        if self.cout:
            a = prepared_cout(a, self.d, self.nr)
            steps.keep.append(a)
        self._run(x, a, res, sbuf, acc, split, bn, add, lo, hi, steps)
        return res

    def _run(self, x, a, res, sbuf, acc, split, bn, add, lo, hi, steps):
        ap, tp = data_pointer(a), data_pointer(self.taps)
        isz = self.d.itemsize
        fn, og, q, row, ntaps = self.fn, self.og, self.q, self.row, len(self.taps)
        for b in range(x.shape[0]):
            xb = x[b]
            if self.mode == "direct":
                src = xb if xb.flags.c_contiguous else steps.copied(np.ascontiguousarray(xb))
            else:                       # the subsampled planes, or the padded phases
                src = self._copy_phases(xb, sbuf, split, steps)
            cbuf = acc if acc is not None else res[b].reshape(self.o, self.ho * self.wo)
            ldc = cbuf.shape[1]
            sp, cp = data_pointer(src), data_pointer(cbuf)
            # (per group: its og rows of A and C, its channel rows of src)
            bias, scale = (bn[1], bn[0]) if bn is not None else (None, None)
            bp = data_pointer(bias) if bias is not None else 0
            scp = data_pointer(scale) if scale is not None else 0
            rp = data_pointer(add[b]) if add is not None else 0
            calls = [((og, self.ci, ntaps, tp, q, ap + g * self.gstride * isz, self.lda, sp + g * self.ci * row * isz,
                       row, cp + g * og * ldc * isz, ldc),
                      (bias is not None, scp and scp + g * og * isz, bp and bp + g * og * isz,
                       rp and rp + g * og * ldc * isz, ldc, lo, hi))
                     for g in range(self.group)]
            if self.cout:
                self._run_cout(a, src, cbuf, split, calls[0][1], steps)
                continue
            if split > 1 and self.row_cut is not None:
                steps.share([_taps_calls(fn, _rows_of(calls, r0, r1, self.lda, isz), 0, q)
                             for r0, r1 in ((0, self.row_cut), (self.row_cut, og))])
            elif split > 1 and q > self.nr:
                steps.share([_taps_calls(fn, calls, a, b) for a, b in parts(q, self.nr)])
            else:
                for f, args in _taps_calls(fn, calls, 0, q):
                    steps.call(f, args)
            if acc is not None:
                # (the grid's rows cropped into the result: phases.py's copy at stride 1 without padding,
                # in halves of the channels on two threads; numpy's pass was ~2 x its bytes at copy speed and
                # kept the layer's calls from being kept)
                head = (self.o, self.ho, self.wq, 1, 1, 0, 0, self.ho, self.wo, self.ho * self.wo, 1, cp,
                        data_pointer(res[b]))
                if split > 1 and self.o > 1:
                    steps.share([[(self.phases, (*head, 0, self.o // 2))], [(self.phases, (*head, self.o // 2, self.o))]])
                else:
                    steps.call(self.phases, (*head, 0, self.o))


    def _copy_phases(self, xb, sbuf, split, steps):
        """sbuf, made from the image xb: its padded stride phases (mode "phase") or its subsampled planes
        ("sub"), by phases.py's copy in halves of the channels on two threads."""
        xb = xb if xb.flags.c_contiguous else steps.copied(np.ascontiguousarray(xb))
        head, c = (*self.phase_geom, data_pointer(xb), data_pointer(sbuf)), self.c
        if split > 1 and c > 1:
            steps.share([[(self.phases, (*head, 0, c // 2))], [(self.phases, (*head, c // 2, c))]])
        else:
            steps.call(self.phases, (*head, 0, c))
        return sbuf

    def _run_wino(self, x, a, up, bad, pre, res, split, bn, add, lo, hi, steps):
        """Per image and block of tile rows (``wino_rows``), Winograd's three kernels (compiler/winograd.py)
        on the workspace: the image's transform V [16][C][T] (slot 0; each block's flag in slot 2), the 16
        products M [16][O][T] (slot 1; each task transforms its panels of the weight ``up`` into its own
        scratch past M in that slot, unless ``pre``: ``up`` is U, ``prepared_wino``), M's transform into
        the result's rows with the epilogue. On two threads, where U is at most WINO_ROWS_SPLIT_BYTES, each
        thread runs all three on its half of the tile rows (V and M of its own: nothing read across cores,
        one hand-off an image); else each kernel in halves (of the channels, the panels, the output
        channels). Then, where any block flagged a non-finite V (or the weight ``bad``: not finite), the
        image's result is the direct sum of the image and the weight ``a`` instead (its NaN and inf where
        L1 has them): one call after the blocks, so the answer does not depend on the blocks, nor on
        the threads."""
        h, w, pt, pl = self.wgeom
        th, tw, c, o, ho, wo = self.th, self.tw, self.c, self.o, self.ho, self.wo
        isz = self.d.itemsize
        panels = -(-o // self.nr)
        two = split > 1
        by_rows = two and th > 1 and XI * c * panels * self.nr * isz <= WINO_ROWS_SPLIT_BYTES
        if by_rows:
            half = -(-th // 2)
            spans, rows = ((0, half), (half, th)), min(self.wrows, half)
        else:
            spans, rows = ((0, th),), th if two else self.wrows     # (two threads: two L2s, three hand-offs a block)
        t = rows * tw
        wide = two and not by_rows
        parts = ((0, panels // 2), (panels // 2, panels)) if wide and panels > 1 else ((0, panels),)
        halves = ((0, c // 2), (c // 2, c)) if wide and c > 1 else ((0, c),)
        outs = ((0, o // 2), (o // 2, o)) if wide and o > 1 else ((0, o),)
        su = 0 if pre else XI * c * self.nr  # (a task's scratch: one panel's transformed weight)
        # (M and the tasks' scratch in one slot: the small maps' M leaves room that another layer's grew,
        # so ResNet-50's 7x7 layers take none: 1 MB less at its peak than a slot of their own)
        vs, ms = 16 * c * t, 16 * o * t + su * len(parts)
        v, m = workspace(0, len(spans) * vs, self.d), workspace(1, len(spans) * ms, self.d)
        nf = sum(-(-(s1 - s0) // rows) for s0, s1 in spans) * len(halves)
        fp = data_pointer(workspace(2, nf, np.int64))
        upp, ap = data_pointer(up), data_pointer(a)
        fin, fmm, fout = self.wfn["in"], self.wfn["mm"], self.wfn["out"]
        scp, bp = (data_pointer(bn[0]), data_pointer(bn[1])) if bn is not None else (None, None)
        for b in range(x.shape[0]):
            xb = x[b] if x[b].flags.c_contiguous else steps.copied(np.ascontiguousarray(x[b]))
            xp, yp = data_pointer(xb), data_pointer(res[b])
            rp = data_pointer(add[b]) if add is not None else None
            tasks: list = [[] for _ in spans]
            f = 0
            for k, (s0, s1) in enumerate(spans):
                vp, mp = data_pointer(v) + k * vs * isz, data_pointer(m) + k * ms * isz
                sp = None if pre else mp + 16 * o * t * isz
                for ty0 in range(s0, s1, rows):
                    n, y0 = min(rows, s1 - ty0), 2 * ty0 * wo * isz
                    tb, ptb = n * tw, pt - 2 * ty0
                    ins = [(fin, (xp, c0, c1, h, w, ptb, pl, n, tw, vp, c * tb, fp + 8 * (f + j), int(bad)))
                           for j, (c0, c1) in enumerate(halves)]
                    f += len(halves)
                    # (the flags are read once, after every block: ``mm`` and ``out`` run on whatever V holds)
                    mms = [(fmm, (o, c, upp, vp, tb, mp, j0, j1, fp, 0, sp and sp + q * su * isz))
                           for q, (j0, j1) in enumerate(parts)]
                    tail = (n, tw, yp + y0, min(2 * n, ho - 2 * ty0), wo, ho * wo, bn is not None, scp, bp,
                            rp and rp + y0, lo, hi, fp, 0, xp, c, h, w, ptb, pl, ap)
                    outs_ = [(fout, (mp, o * tb, o0, o1, *tail)) for o0, o1 in outs]
                    if by_rows:
                        tasks[k] += ins + mms + outs_
                    else:
                        for calls in (ins, mms, outs_):     # (each a call, or two over two threads)
                            self._tasks(steps, [[c] for c in calls])
            if by_rows:
                steps.share(tasks)
            # (M null: nothing where no flag is set, else the whole image's direct sum)
            steps.call(fout, (None, 0, 0, o, th, tw, yp, ho, wo, ho * wo, bn is not None, scp, bp, rp, lo, hi, fp, nf,
                              xp, c, h, w, pt, pl, ap))

    def _run_im2col(self, x, wp, res, split, bn, add, lo, hi, steps):
        """A block of images at a time (at most IM2COL_BLOCK_BYTES of windows, and of products): their
        windows as rows, A [rows][K] (gemm_dot's ``xt``, or ``xt1`` for a 1x1 convolution of stride 1: a
        transpose of its planes; rows an odd number of cache lines apart; slot 1), the packed Dense product
        of A by ``wp`` (``prepared_cout``: the same panels) into Cw [rows][whole panels] (slot 0), then
        Cw's transposed store with the epilogue into the result (gemm_cout.ir_rows). On two threads the
        copies in halves of each image's rows, then each thread half of the panels: its product and its
        store (two hand-offs a block)."""
        isz, o, k, p, n, nr = self.d.itemsize, self.o, self.lda, self.ho * self.wo, x.shape[0], self.nr
        lda = _odd_lines(k, isz)       # (A's rows a multiple of 1-4 KB apart alias: the product 4-11% slower)
        panels = -(-o // nr)
        ldc = panels * nr              # (whole panels a row: the store reads a panel's width of every row)
        g = max(1, min(n, IM2COL_BLOCK_BYTES // max(p * max(lda, ldc) * isz, 1)))
        ap = data_pointer(workspace(1, g * p * lda, self.d))
        cp = data_pointer(workspace(0, g * p * ldc, self.d))
        wpp, two = data_pointer(wp), split > 1
        halves = ((0, panels // 2), (panels // 2, panels)) if two and panels > 1 else ((0, panels),)
        hasb = bn is not None
        scp, bp = (data_pointer(bn[0]), data_pointer(bn[1])) if hasb else (None, None)
        c, h, w = self.geom[:3]
        for b0 in range(0, n, g):
            gg = min(g, n - b0)
            copies: list = [[], []] if two else [[]]
            held = []                  # (an image copied contiguous lives until its windows are copied)
            for b in range(b0, b0 + gg):
                xb = x[b] if x[b].flags.c_contiguous else steps.copied(np.ascontiguousarray(x[b]))
                held.append(xb)
                xp, dst = data_pointer(xb), ap + (b - b0) * p * lda * isz
                last = p if self.xt1 else self.ho
                cuts = ((0, last // 2), (last // 2, last)) if two else ((0, last),)
                for t, (r0, r1) in enumerate(cuts):
                    args = (c, h * w, xp, dst, r0, r1, lda) if self.xt1 else (*self.geom, xp, dst, r0, r1, lda)
                    copies[t].append((self.xt, args))
            self._tasks(steps, copies)
            del held
            # (each half of the panels: its product, then its store, which reads only the columns it wrote)
            rp = data_pointer(add[b0]) if add is not None else None
            self._tasks(steps, [[(self.gemmfn, (gg * p, k, min(j1 * nr, o) - j0 * nr, ap, lda, wpp + j0 * k * nr * isz,
                                                cp + j0 * nr * isz, ldc)),
                                 (self.rowsfn, (o, cp, ldc, gg, p, data_pointer(res[b0]), j0, j1, hasb, scp, bp, rp,
                                                lo, hi))] for j0, j1 in halves])

    @staticmethod
    def _tasks(steps, tasks) -> None:
        """One task's calls in turn, or tasks over two threads (pool.share)."""
        if len(tasks) == 1:
            for fn, args in tasks[0]:
                steps.call(fn, args)
        else:
            steps.share(tasks)

    def _run_cout(self, wp, src, cbuf, split, epi, steps):
        """One image on gemm_cout: the packed weight ``wp`` (``prepared_cout``) over the image's rows in
        ``src`` (as the taps product reads them), into cbuf [O][P]; the panels in halves on two threads
        (their output rows where the panels are odd: 96 channels are 3 panels)."""
        hasb, scp, bp, rp, _ldr, lo, hi = epi
        panels = -(-self.o // self.nr)
        # (a grid as wide as the map, a 1x1 convolution's: its rows are one row, tiles of a whole 12 pixels)
        ho, wo, wq = (1, self.ho * self.wo, self.ho * self.wo) if self.wq == self.wo else (self.ho, self.wo, self.wq)
        head = (self.o, self.ci, len(self.taps), data_pointer(self.taps), data_pointer(wp), data_pointer(src), self.row,
                ho, wo, wq, data_pointer(cbuf), self.ho * self.wo)
        tail = (hasb, scp or None, bp or None, rp or None, lo, hi)
        if split > 1 and panels % 2 == 0:
            steps.share([[(self.coutfn, (*head, j0, j1, *tail))] for j0, j1 in ((0, panels // 2), (panels // 2, panels))])
        elif split > 1 and (ho > 1 or wo > 1):
            # (an odd count of panels: the output rows in halves, or a 1x1 map's pixels)
            isz, m = self.d.itemsize, ho if ho > 1 else wo
            parts = []
            for r0, r1 in ((0, m // 2), (m // 2, m)):
                g0, p0 = (r0 * wq, r0 * wo) if ho > 1 else (r0, r0)
                rows = (r1 - r0, wo) if ho > 1 else (1, r1 - r0)
                h = (*head[:5], head[5] + g0 * isz, self.row, *rows, wq, head[10] + p0 * isz, head[11])
                parts.append([(self.coutfn, (*h, 0, panels, hasb, scp or None, bp or None,
                                             rp and rp + p0 * isz or None, lo, hi))])
            steps.share(parts)
        else:
            steps.call(self.coutfn, (*head, 0, panels, *tail))

    def _run_dot(self, x, a, res, split, bn, add, lo, hi, steps):
        """Per image: its columns as rows (B^T [P][K]: ``xt1`` on the planes, or on the subsampled planes,
        else ``xt`` from the image itself), then ``dot`` into the result's [O][P] (its rows in halves on
        two threads)."""
        isz = self.d.itemsize
        o, p, k = self.o, self.ho * self.wo, self.lda
        bt = workspace(1, p * k, self.d)
        btp = data_pointer(bt)
        sbuf = workspace(0, self.src[0] * self.src[1], self.d).reshape(self.src) if self.mode == "sub" else None
        head = (k, data_pointer(a), k, btp, k)
        epi = (bn is not None, data_pointer(bn[0]) if bn is not None else 0, data_pointer(bn[1]) if bn is not None else 0)
        for b in range(x.shape[0]):
            xb = x[b] if x[b].flags.c_contiguous else steps.copied(np.ascontiguousarray(x[b]))
            if self.mode == "sub":
                sub = self._copy_phases(xb, sbuf, split, steps)
                steps.call(self.xt, (self.c, self.row, data_pointer(sub), btp, 0, p, k))
            elif self.xt1:
                steps.call(self.xt, (self.c, self.row, data_pointer(xb), btp, 0, p, k))
            else:
                steps.call(self.xt, (*self.geom, data_pointer(xb), btp, 0, self.ho, k))
            out = (data_pointer(res[b]), data_pointer(add[b]) if add is not None else 0)
            cuts = ((0, self.row_cut), (self.row_cut, o)) if split > 1 and self.row_cut is not None else ((0, o),)
            calls = [[(self.dotfn, _dot_rows(r0, r1, p, head, out, epi, lo, hi, isz))] for r0, r1 in cuts]
            if len(calls) > 1:
                steps.share(calls)
            else:
                steps.call(*calls[0][0])


def _dot_rows(r0, r1, p, head, out, epi, lo, hi, isz) -> tuple:
    """The arguments of ``dot`` over the output rows [r0, r1) of one image (``TapsConv._run_dot``): A,
    C, the batch norm's scale and shift and the residual moved on by r0 rows."""
    k, ap, lda, bp, ldb = head
    cp, rp = out
    hasb, sp, bip = epi
    return (r1 - r0, p, k, ap + r0 * lda * isz, lda, bp, ldb, cp + r0 * p * isz, p, hasb,
            sp and sp + r0 * isz or None, bip and bip + r0 * isz or None, rp and rp + r0 * p * isz or None, p, lo, hi)


def use_cout(o: int, k: int, ntaps: int, nr: int, d, residual: bool = False, p: int = 0) -> bool:
    """Whether a convolution of o output channels, K = k and ntaps taps runs gemm_cout (vectors over output
    channels, the weight packed) rather than the taps product or the inner products: one whose channels
    fill whole panels of nr (o a multiple of nr: a panel of 16 or 24 channels leaves lanes idle there
    instead), on AVX-512 (its 24 accumulators want 32 vector registers); a k x k convolution (ntaps > 1)
    from K = COUT_MIN_K, a 1x1 one of p pixels from COUT_MIN_K_1X1, without a residual add (each tile's
    transposed store and epilogue weigh more below: the store reads a residual as 32 rows a tile) and on
    maps of COUT_1X1_PIXELS (in the model, the weight from memory and the image in cache, the three
    products tie on 7x7 maps and the taps product keeps up on 56x56). At every map size: the taps product
    leaves lanes idle where a map's row (a k x k grid) or plane (a 1x1 map) is not a multiple of the
    vector (7x7: 49 of 64, a 3x3 grid's two extra columns a row) and crops a k x k grid into the result
    with one more pass (so a residual is not fused there); gemm_cout stores the NCHW result once, its
    tiles of about equal size over a row (a 1x1 map's plane is one row). Measured (AMD EPYC Zen 5, one
    core, the product alone, warm / caches flushed as a forward leaves them, GFLOP/s taps / cout): 3x3 on
    7x7 512 179 / 229, 14x14 256 216 / 232, 28x28 128 223 / 237, 56x56 64 228 / 232, 3x3 stride 2 at 56
    198 / 204 (cold 132 / 176), the 7x7 stride 2 RGB stem (K = 147) 193 / 203 (cold 160 / 184), 3x3 32 at
    28x28 163 / 180; but 3x3 16 at 56x56 156 / 101 and 24 at 56x56 188 / 156 (the taps product stays).
    1x1 (taps / dot / cout): 1024 -> 256 at 14x14 168 / 201 / 231 (cold 129 / 147 / 177), 512 -> 128 at
    28x28 214 / 181 / 226 (165 / 106 / 189), 256 -> 64 at 56x56 226 / 144 / 224 (154 / 76 / 180), 1024 ->
    2048 stride 2 159 / 189 / 196 (144 / 152 / 153), 384 -> 96 at 14x14 181 / - / 209 (105 / - / 103);
    but 64 -> 256 at 56x56 225 / 100 / 186, and with a residual add 256 -> 1024 at 14x14 183 / - / 175
    (the taps product stays). In a forward's state (the weight from memory, the image in cache): 1024 ->
    256 at 14x14 142 / 166 / 199, 1024 -> 512 at 14x14 148 / 181 / 216, 512 -> 128 at 28x28 204 / 124 /
    202, 2048 -> 512 at 7x7 147 / 147 / 147, 256 -> 128 at 56x56 231 / 115 / 214. In ResNet-50 at 224
    (the layer's time in a forward, one core, two runs): 28x28 3x3 207-200 -> 225-222 GFLOP/s, 56x56
    208-197 -> 215-210, 3x3 stride 2 at 56 174-165 -> 197-186."""

    if np.dtype(d) not in (np.float32, np.float64) or o % nr or k < (COUT_MIN_K if ntaps > 1 else COUT_MIN_K_1X1):
        return False
    one = not residual and COUT_1X1_PIXELS[0] <= p <= COUT_1X1_PIXELS[1]
    return (ntaps > 1 or one) and wide_tiles()


def use_im2col(o: int, k: int, p: int, nr: int, d) -> bool:
    """Whether a convolution of o output channels, K = k and p output pixels an image takes the im2col route
    (``TapsConv._run_im2col``: the windows as rows, the packed Dense product by gemm_cout's panels, a
    transposed store): a weight of IM2COL_MIN_WEIGHT_BYTES or more (from memory in a forward: the Dense
    product's blocks read each panel once for every row) on a map of at most IM2COL_MAX_PIXELS pixels
    (where gemm_cout's tiles are a map's short rows and its panels are read again for each), whole panels of
    output channels, on AVX-512. Measured (Intel Xeon, AVX-512, one core, thread CPU time, medians of 11-15
    interleaved calls, the copy and the product against the route it replaced; batch 1 / 8): ResNet-50's
    3x3 stride 2 512 at 224 0.85 / 0.90 (cout), at 192 0.70 / 0.70, at 160 0.67 / 0.61, at 256 (8x8) 0.77 /
    0.84; 3x3 512 at 7x7 0.91 / 0.87 (Winograd), 6x6 0.82 / 0.88, 5x5 0.93 / 0.70 (cout); 1x1 2048 -> 512 at
    7x7 0.80 / 0.94 (dot), 5x5 0.79 / 0.70, 8x8 0.91 / 0.99 (taps); 512 -> 2048 at 7x7 0.83 / 0.81, 8x8 0.91
    / 0.93. Not taken: 1x1 1024 -> 512 at 14x14 (2 MB) 1.04 / 1.10, 1024 -> 256 at 10x10 1.08 / 1.15, 3x3
    256 at 10x10 1.48 (Winograd), 3x3 stride 2 128 at 40 -> 20 1.20 (the windows' copy, 0.8-0.9 ns an
    element, outweighs the product's gain there), 3x3 512 at 8x8 1.07 / 1.17 (Winograd stays: ``TapsConv``)."""
    if np.dtype(d) not in (np.float32, np.float64) or o % nr or p > IM2COL_MAX_PIXELS:
        return False
    return o * k * np.dtype(d).itemsize >= IM2COL_MIN_WEIGHT_BYTES and wide_tiles()


IM2COL_MIN_WEIGHT_BYTES = 4 << 20
IM2COL_MAX_PIXELS = 64
IM2COL_BLOCK_BYTES = 8 << 20    # the windows of a block of images (``TapsConv._run_im2col``)
COUT_MIN_K = 128
COUT_MIN_K_1X1 = 256
COUT_1X1_PIXELS = (100, 1024)   # the 1x1 maps that gemm_cout takes (use_cout)
_COUTW: dict = {}           # id(weight rows) -> (weakref, packed panels)


def prepared_cout(a, d, nr: int):
    """The weight rows a [O, K] (``prepared_a`` in place: the Parameter's own array) packed for gemm_cout,
    [ceil(O/nr)][K][nr] (gemm.pack), once per read-only array (per call for a writable one); the
    Parameter's own pages are then spilled (msvm/weights.py: a stored array's values stay in its file
    and map back where something reads them), so the weight is held once, as the packed Dense weights are."""
    return _prepared(_COUTW, a, lambda: pack(a.reshape(a.shape[0], -1).astype(d, copy=False), nr, transposed=True))


def prepared_wino(a, d, nr: int, c: int):
    """(weight, bad, transformed): the 3x3 weight rows a [O, C * 9] as Winograd's products read them, whether
    its transform is not finite (the convolution then runs its direct sum: ``TapsConv._run_wino``), and
    which form it is: U itself (winograd.transform_weight, [16][ceil(O/nr)][C][nr]) where it fits in
    WINO_BLOCK_BYTES, else the weight packed in panels, [ceil(O/nr)][C][9][nr] (winograd.pack_weight), that
    the products transform a panel at a time per call. Held as ``prepared_cout``'s are. U is 16/9 of the
    weight: held for ResNet-50's 3x3 layers it was 24.9 MB where the packed weights are 14 (the process
    held 145.4 MB at a steady forward's peak, onnxruntime 135.5); a small U is kept, since a map in blocks
    of tile rows (``wino_rows``: where U fits in WINO_BLOCK_BYTES) would transform it once per block
    (ResNet-50's 56x56 64-channel layers 9-12% slower, one core). The packed form is gemm_cout's own array
    (``prepared_cout``), seen per channel and tap: a layer that runs Winograd at one size and gemm_cout
    at another (ResNet-50's 512-channel layers: 7x7 maps at 224, 5x5 at 160) holds its weight once, and
    a first call at the new size does not pack it again (ResNet-50 at 160 after 224, one core: four
    weights of 9.4 MB packed, ~28 ms of the first call, most of it first touches of new pages)."""
    from .winograd import finite, transform_weight

    def make():
        w = a.reshape(a.shape[0], c, 3, 3).astype(d, copy=False)
        if small_u(c, -(-w.shape[0] // nr) * nr, d):
            return transform_weight(w, nr), not finite(w), True
        panels = prepared_cout(a, d, nr)     # (its values, zero past O: read, not the weight it spilled)
        return panels.reshape(panels.shape[0], c, 9, nr), not finite(panels), False

    return _prepared(_WINOW, a, make)


def _prepared(cache: dict, a, make):
    """make()'s array for the weight a, kept in ``cache`` by a's identity while a lives where a is
    read-only (the Parameter's own pages then spilled), else made per call."""
    from ..weights import spill

    hit = cache.get(id(a))
    if hit is not None and hit[0]() is a:
        return hit[1]
    wp = make()
    if K._frozen(a) or not a.flags.writeable:
        try:
            cache[id(a)] = (weakref.ref(a, lambda _r, k=id(a): cache.pop(k, None)), wp)
        except TypeError:
            return wp
        spill(a)
    return wp


_WINOW: dict = {}           # id(weight rows) -> (weakref, (Winograd's weight, not finite, is U))


def use_winograd(x_shape, w_shape, stride, pad, dil, group, d) -> bool:
    """Whether a convolution runs Winograd's F(2x2, 3x3) (compiler/winograd.py, ``TapsConv._run_wino``):
    a dense 3x3 one of stride 1 and dilation 1 whose output channels fill gemm_cout's panels, from
    WINO_MIN_C input channels, on maps of at least WINO_MIN_PIXELS output pixels, on AVX-512 (gemm_cout's
    tiles), unless MSVM_WINOGRAD=0. The maps started at 81 pixels while U was held (the 512-channel
    layers' U, 17 MB each, for little gain); transformed per panel it costs no memory, and ResNet-50's
    last 3x3 layers gained (Intel Xeon, one process, both settings alternating with onnxruntime, forward
    / onnxruntime's): one core at 224 (7x7) 1.20 -> 1.14, 192 (6x6) 1.23 -> 1.10, 256 (8x8) 1.26 -> 1.22,
    160 (5x5) 1.23 -> 1.24; two cores at 224 1.27 -> 1.13, 192 1.15 -> 1.11, 160 1.36 -> 1.33. The layer
    alone (caches flushed, one core, ms cout / Winograd): 5x5 3.11 / 2.85, 6x6 2.92 / 2.26, 7x7 3.92 /
    3.41, 8x8 2.79 / 2.42; 5x5 stays on cout for the forward's sake."""

    o, cg, kh, kw = w_shape
    if (kh, kw) != (3, 3) or tuple(stride) != (1, 1) or tuple(dil) != (1, 1) or group != 1:
        return False
    if os.environ.get(WINO_ENV) == "0":
        return False
    if np.dtype(d) not in (np.float32, np.float64) or o % panel_width(d) or cg < WINO_MIN_C:
        return False
    ho, wo = dims_of(x_shape, w_shape, stride, pad, dil)[:2]
    return ho * wo >= WINO_MIN_PIXELS and wide_tiles()


def wino_rows(th: int, tw: int, c: int, o: int, d) -> int:
    """Tile rows per block of Winograd's route (``TapsConv._run_wino``): blocks whose V and M fit in
    WINO_BLOCK_BYTES (at least one row) where the transformed weight does too (each block reads all of
    it: from L2 then), else the whole map. Measured (AMD EPYC Zen 5, one core, ResNet-50 at 224, the
    layer's time in a forward, ms for its 3 / 3 / 5 / 2 layers, whole maps -> blocks of 512 KB):
    56x56 64 2.59 -> 2.16 (U 256 KB), 28x28 128 1.80 -> 1.90 (U 1 MB), 14x14 256 3.98 -> 3.87 (4 MB),
    7x7 512 2.27 -> 3.00 (16 MB); 256 KB: 2.26 / 1.95 / 3.33 / 4.20. One core only: on two (two L2s,
    three hand-offs a block) the 56x56 layers took 1.35-1.40 ms whole, 1.53-1.56 in blocks."""
    row = XI * (c + o) * tw * np.dtype(d).itemsize
    if row * th <= WINO_BLOCK_BYTES or not small_u(c, o, d):
        return th
    return max(1, WINO_BLOCK_BYTES // row)


def small_u(c: int, o: int, d) -> bool:
    """Whether Winograd's transformed weight U of o output channels (a multiple of the panel, as
    ``use_winograd`` asks) and c input channels fits in WINO_BLOCK_BYTES: a map then runs in blocks of
    tile rows (``wino_rows``), each reading all of U, which is held transformed (``prepared_wino``)."""
    return XI * c * o * np.dtype(d).itemsize <= WINO_BLOCK_BYTES


WINO_BLOCK_BYTES = 512 << 10
# Two threads split Winograd's tile rows (each its V and M: nothing read across cores) where U is at most this
# many bytes, else each kernel in halves of its channels or panels (``TapsConv._run_wino``). Measured (Intel Xeon,
# two cores, the layer alone, wall clock, medians of 41 interleaved calls; one thread / channels / rows, ms):
# 64 at 40x40 0.697 / 0.497 / 0.374, 56x56 1.372 / 0.891 / 0.677, 128 at 20x20 0.574 / 0.382 / 0.331, 28x28
# 1.075 / 0.650 / 0.590; but 256 at 10x10 0.705 / 0.426 / 0.537, 14x14 1.152 / 0.690 / 0.813 (U of 4 MB read
# by both cores, each panel transformed twice), 12x12 0.959 / 0.597 / 0.592
WINO_ROWS_SPLIT_BYTES = 1 << 20
WINO_ENV = "MSVM_WINOGRAD"
WINO_MIN_C = 64
WINO_MIN_PIXELS = 36        # (6x6: see use_winograd)


def use_dot(p: int, q: int, k: int, ntaps: int, nr: int, d) -> bool:
    """Whether a 1x1 convolution of p output pixels (q columns on the taps product's grid) and K = k runs
    the inner-product route (``TapsConv._run_dot``) rather than the taps product: where the taps
    product's lanes are idle (p over q rounded up to whole panels of nr) beyond what the transposed copy
    of the columns costs. Measured (AMD EPYC Zen 5, one core, both kernels interleaved in one process, best of
    5 rounds, GFLOP/s taps / dot, the copy not counted): 1x1 7x7 512 -> 2048 180 / 192, 2048 -> 512
    179 / 190, 1x1 14x14 1024 -> 256 181 / 226, 256 -> 1024 205 / 193, 1x1 10x10 1024 -> 256 163 / 181;
    the copy (``xt1``, a transpose) 0.14-0.38 ns an element (2-4% of a 1x1 layer). A k x k convolution
    never takes it by itself (its copy, ``xt``, costs 0.8-0.9 ns an element, 8% of the 7x7 3x3 layer;
    ``use_cout`` serves those); ``TapsConv(dot=True)`` still runs one. On AVX-512 only (the dot tile's
    24 accumulators and 10 operands want its 32 vector registers). Not below K = DOT_MIN_K: a short k
    loop leaves the dot tile's reductions and the copy uncovered (the same machine, the product alone,
    taps / dot: 64 -> 384 at 10x10 144 / 86, 96 -> 576 at 10x10 170 / 124; onnxruntime's Conv 147, 183;
    K = 160 ties, 145 / 135 at 5x5, 154 / 156 at 6x6; MobileNet v2 at 160, one core, alternating
    processes: 0.93x a forward, at 192 and 224 even)."""

    if ntaps != 1 or np.dtype(d) not in (np.float32, np.float64) or p == 0 or k < DOT_MIN_K:
        return False
    used = p / (-(-q // nr) * nr)
    return (used < DOT_USED or (used < DOT_USED_LONG and k >= DOT_LONG_K)) and wide_tiles()


DOT_USED = 0.8              # 1x1: the taps product's share of used lanes below which dot runs (use_dot)
DOT_USED_LONG = 0.9         # ... and below this where K >= DOT_LONG_K
DOT_LONG_K = 1024
DOT_MIN_K = 128             # ... from this K (a shorter product runs taps: use_dot)


def _row_cut(q: int, nr: int, rows: int, unit: int) -> int | None:
    """Where two threads split a taps product's output rows (in whole tiles of ``unit`` rows), when
    that shares it more evenly than its column panels do, else None (split the columns). A 14 x 14
    map is 7 panels (4 to one thread, 3 to the other), a 256-row weight 22 tiles of 12 (11 and 11).
    Measured (AMD EPYC Zen 5, two cores, wall clock, medians of 40 alternating rounds, rows / columns,
    us, one image at 14 x 14): 3x3 256 -> 256 615 / 676, 1x1 1024 -> 256 300 / 342, 1x1 256 -> 1024
    259 / 294, 3x3 512 -> 512 2327 / 2558."""
    panels, tiles = -(-q // nr), -(-rows // unit)
    if tiles < 2 or (-(-tiles // 2)) * panels >= (-(-panels // 2)) * tiles:
        return None
    return (-(-tiles // 2)) * unit


def _rows_of(calls, r0: int, r1: int, lda: int, isz: int) -> list:
    """The one group's taps call (``TapsConv._run``) over its output rows [r0, r1): A, C, the batch
    norm's scale and shift and the residual moved on by r0 rows."""
    (og, ci, ntaps, tp, q, ap, lda_, sp, row, cp, ldc), (hasb, scp, bp, rp, ldr, lo, hi) = calls[0]
    return [((r1 - r0, ci, ntaps, tp, q, ap + r0 * lda * isz, lda_, sp, row, cp + r0 * ldc * isz, ldc),
             (hasb, scp and scp + r0 * isz, bp and bp + r0 * isz, rp and rp + r0 * ldr * isz, ldr, lo, hi))]


def _taps_calls(fn, calls, j0, j1) -> list:
    """(fn, args) of the taps kernel over the columns [j0, j1) of each group's call."""
    return [(fn, (*head, j0, j1, hasb, sp or None, bp or None, rp or None, ldr, lo, hi))
            for head, (hasb, sp, bp, rp, ldr, lo, hi) in calls]


def _run_calls(fn, calls, j0, j1):
    """The taps kernel over the columns [j0, j1) of each group's call."""
    for f, args in _taps_calls(fn, calls, j0, j1):
        f(*args)


class Steps:
    """The native calls of one convolution, in order (``TapsConv.__call__``): each runs as it is added
    (``call``: one kernel; ``share``: tasks over two threads, pool.share); ``copied`` marks a copy the
    call made from its arrays (a strided or subsampled image), after which
    the calls alone do not redo the convolution. ``keep``: arrays their pointers point into."""

    def __init__(self):
        self.items: list = []          # (fn, args) or (None, tasks)
        self.keep: list = []
        self.whole = True              # every write of the convolution is one of the items

    def call(self, fn, args) -> None:
        fn(*args)
        self.items.append((fn, args))

    def share(self, tasks) -> None:
        share(tasks)
        self.items.append((None, tasks))

    def copied(self, value=None):
        self.whole = False
        return value


class Memo:
    """A convolution caller's last calls, run again while a call brings the same arrays (``hit``): a
    replay gives a site the same Parameter arrays and memory plan buffers every call, so its native
    calls are the same, with the same pointers; an input that is a new array each call (a sub-Cell's
    result, the model's input) is ``movable``: its pointer arguments are moved with it. Made only
    where the calls are the whole convolution (``Steps.whole``), every fixed input is read-only (as
    ``_cached`` asks) and the result went into the caller's buffer; used by the thread that made them
    (its ``Workspace``: a weak reference, not the thread's identifier, which the next thread reuses)
    while that workspace has not grown since. A MobileNet v2
    1x1 layer's call 9.7 -> 3.4 us (AMD Zen 5, one core)."""

    __slots__ = ("ws", "gen", "fixed", "ptrs", "parts", "moves", "keep")

    def __init__(self, fixed, arrays, steps: Steps, movable):
        from .pool import Calls

        ws = thread_workspace()
        self.ws, self.gen = weakref.ref(ws), ws.gen
        self.fixed = tuple(fixed)
        self.ptrs = [(data_pointer(a), a.strides, a.shape) if a is not None else None for a in arrays]
        spans = [(k, self.ptrs[k][0], *_bounds(arrays[k], self.ptrs[k][0])) for k in movable if arrays[k] is not None]
        self.parts, self.moves, run = [], [], []
        for fn, args in steps.items + [(None, None)]:
            if fn is not None:
                run.append((fn, args))
                continue
            if run:
                self._part(Calls([run], True), spans)
                run = []
            if args is not None:
                self._part(Calls(args, False), spans)
        self.keep = steps.keep

    def _part(self, calls, spans) -> None:
        """Keep ``calls``, and where each pointer argument points into a movable input."""
        for c, (f, args) in enumerate(calls.calls):
            for j, (t, v) in enumerate(zip(f.argtypes, args)):
                if t is ctypes.c_void_p and type(v) is int:
                    self.moves += [(calls, c, j, k, v - p) for k, p, lo, hi in spans if lo <= v < hi]
        self.parts.append(calls)

    def hit(self, fixed, arrays) -> bool:
        if stale(self.ws, self.gen):
            return False
        for a, b in zip(fixed, self.fixed):
            if a is not b or a.flags.writeable:
                return False
        moved = None
        for k, (a, p) in enumerate(zip(arrays, self.ptrs)):
            if a is None or p is None:
                if a is not p:
                    return False
            elif type(a) is not np.ndarray or a.strides != p[1]:
                return False
            else:
                ap = data_pointer(a)
                if ap != p[0]:
                    if a.shape != p[2] or not any(m[3] == k for m in self.moves):
                        return False
                    moved = (moved or []) + [(k, ap)]
        if moved:
            if not self._move(moved, arrays):
                return False
        for f in self.parts:
            f()
        tap = TAP[0]
        if tap is not None:             # (a capture is recording: interp/capture.py)
            tap(self, arrays[OUT])
        return True

    def frozen(self) -> tuple:
        """The calls just run as private copies with the pointers they ran with (pool.Calls of their
        own: a later hit may move this memo's), what they point at besides their arrays, and the
        workspace they need: (calls, keep, (weak reference to the thread's ``Workspace``, its generation)),
        stale where the reference is dead or the generation moved (``stale``)."""
        from .pool import Calls

        return [Calls(c.tasks, c.here) for c in self.parts], self.keep, (self.ws, self.gen)

    def _move(self, moved, arrays) -> bool:
        """Point the calls at the moved arrays, where the result (``arrays[OUT]``, written while the
        others are read) overlaps none of the others."""
        ks = dict(moved)
        at = {j: _bounds(a, ks.get(j, self.ptrs[j][0])) for j, a in enumerate(arrays) if a is not None}
        if OUT in at:
            lo, hi = at[OUT]
            if any(j != OUT and p < hi and lo < q for j, (p, q) in at.items()):
                return False
        for k, p in moved:
            self.ptrs[k] = (p,) + self.ptrs[k][1:]
        for inl, i, j, k, off in self.moves:
            if k in ks:
                inl.set(i, j, ks[k] + off)
        return True


OUT = 1          # a Memo's arrays: (image, result, then the other inputs read)


def _bounds(a, p: int) -> tuple:
    """[lo, hi): the bytes a's elements lie in, where its first element is at p (strides of either sign)."""
    if a.size == 0:
        return p, p
    lo = p + sum((n - 1) * s for n, s in zip(a.shape, a.strides) if s < 0)
    return lo, p + sum((n - 1) * s for n, s in zip(a.shape, a.strides) if s > 0) + a.itemsize


class Memos:
    """A caller's ``Memo``: ``hit`` runs the last calls again where it can; ``made`` keeps the calls
    just made (``movable``: the positions of ``arrays`` that may move between calls), from the
    caller's second call on (a first call at a new input size makes a caller that may run once:
    MobileNet v2's 52 memos cost ~1 ms). A caller whose arrays change in another way at every call
    stops keeping them after MEMO_MISSES unused memos."""

    __slots__ = ("last", "used", "misses", "calls")

    def __init__(self):
        self.last, self.used, self.misses, self.calls = None, False, 0, 0

    def hit(self, fixed, arrays) -> bool:
        m = self.last
        if m is None or not m.hit(fixed, arrays):
            return False
        self.used = True
        return True

    def made(self, fixed, arrays, steps: Steps, movable=()) -> None:
        last = self.last
        # (a memo another thread made, or one from before this thread's workspace grew, is not a miss
        # of this caller's arrays: threads taking turns would otherwise stop its memos for good)
        if last is not None and not self.used and not stale(last.ws, last.gen):
            self.misses += 1
        self.last, self.used = None, False
        self.calls += 1
        if self.calls < 2 or self.misses >= MEMO_MISSES or not steps.whole or not steps.items or \
                any(type(a) is not np.ndarray or a.flags.writeable for a in fixed):
            return
        self.last = Memo(fixed, arrays, steps, movable)


MEMO_MISSES = 4


def taps_kernel(d, lda: int, inplace=None):
    """The taps product (gemm.TapsGemm) a convolution whose weight rows hold ``lda`` elements of
    dtype d runs: A in place (``a_in_place``, or as ``inplace`` says) with its tile rows, B packed
    per k block where this target takes it (gemm.packs_b). The one place that decides it: the
    Site compiles (kernel_ir) the kernel that TapsConv calls."""
    return _taps_kernel(np.dtype(d), lda, a_in_place() if inplace is None else inplace)


@functools.lru_cache(maxsize=256)
def _taps_kernel(d, lda: int, inplace: bool):
    return TapsGemm(str(d), a_inplace=inplace, rows=tile_rows_in_place(lda, d) if inplace else 0, pack_b=packs_b())


@functools.lru_cache(maxsize=64)      # (every caller at a new shape asks: the entry is hashed)
def gemm_taps(k):
    """The ctypes function of the TapsGemm ``k`` (``taps_kernel``)."""
    return taps_function(k.dtype, k.kc, k.a_inplace, k.rows, k.pack_b)


def taps_mode(x_shape, w_shape, stride, pad, dil, group, d) -> str:
    """Which layout of B the taps product reads for this convolution (``TapsConv``): a 1x1 one at
    stride 1 reads the image's planes in place ("direct") unless a plane is a whole multiple of
    ALIASED bytes (32x32 and 64x64 float32 maps) and the product has ALIASED_MIN_O output channels a group
    or more, where it reads them copied into rows of an odd number of cache lines, as the strided ones
    are ("sub": ``_odd_lines``). Rows ALIASED bytes apart share their low address bits (and the
    result's rows the input's), and the product's loads stall behind them; the copy is one pass over
    the image, which fewer output channels do not pay back. Measured (Intel Xeon, AVX-512, one core,
    the layer alone, warm, ms, in place / copied): 512 -> 128 at 64x64 8.11 / 4.89 (at 63x65 in place
    4.69), 512 -> 256 at 32x32 2.37 / 2.10, 64 -> 256 at 64x64 1.34 / 1.20, 128 -> 512 at 32x32 1.20 /
    1.08, gemm_cout's 512 -> 128 at 32x32 1.70 / 1.33 (at 31x33 in place 1.21); ResNet-50 at 256 (msvm /
    onnxruntime, one process, three runs each) 1.20 -> 1.14. But MobileNet v2's few output channels lose:
    144 -> 24 at 64x64 0.35 / 0.44, 192 -> 32 at 32x32 0.12 / 0.16, 64 -> 64 0.33 / 0.37; and 256 -> 64
    at 56x56 0.79 / 1.05, where nothing aliases."""
    o, cg, kh, kw = w_shape
    unpadded = pad != ("same",) and not any(pad) or (pad == ("same",) and kh == kw == 1)
    if kh == kw == 1 and unpadded:
        if tuple(stride) != (1, 1):
            return "sub"
        aliased = x_shape[2] * x_shape[3] * np.dtype(d).itemsize % ALIASED == 0
        return "sub" if aliased and o // group >= ALIASED_MIN_O else "direct"
    return "phase"


ALIASED = 4096          # a plane of a multiple of this many bytes is copied before a 1x1 product reads it (taps_mode)
ALIASED_MIN_O = 128     # ... where the product has this many output channels a group
