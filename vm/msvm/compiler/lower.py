"""Lowering: kernel IR -> LLVM IR text, table-driven.

Tables: ``TYPES`` (dtype -> LLVM type), ``BINARY``/``UNARY`` (op -> how to emit it). A
missing entry raises ``Unsupported`` naming the op and dtype, and the caller keeps
that instruction in the interpreter.

Elementwise kernels have the signature

    void @k(i64 start, i64 end, i64 n1, i64 n2, T* out,
            {T* in, i64 stride0, i64 stride1} per tensor input, {double} per scalar input)

and loop ``i0 in [start, end)`` (so a caller may split rows over threads), ``i1`` and
a vectorized inner loop over ``i2`` (tensor inputs are contiguous or broadcast along
it). In L3 the dims and strides are constants (no scalar tail when vectors cover a row)
and the module is optimized (codegen.L3_PASSES, codegen O3).

Matmul kernels call BLAS sgemm/dgemm (a function pointer argument) on row blocks
and apply the epilogue to each block while it is in cache.

Every tier gives numpy's answer on NaN, ±inf and signed zeros, so the IR carries no fast-math
flags (nnan, ninf and nsz would let LLVM fold NaN and zero signs away, arcp turns x / tiny into
x * inf, contract and reassoc move where a sum overflows), and each op is emitted with numpy's
semantics, once, in ``Vals``: ``maximum``/``minimum`` are numpy's (NaN if either operand is,
the second operand on ties: max(-0.0, 0.0) is 0.0), never ``llvm.maxnum`` (which drops NaN)
or a bare ordered compare; ``exp`` gives inf, 0 and NaN where numpy does; composites follow
the reference kernel's order of operations (``interp/kernels.py``) so they overflow where it
does. A CAST to another dtype is never lowered (the planner keeps it in the interpreter): NaN
or ±inf to an integer is undefined in C, and numpy's answer is the machine's (INT_MIN on x86),
so every tier gives whatever numpy gives there.
"""

from __future__ import annotations

import math

from ..bytecode.program import evaluate
from .kir import Elementwise, MatmulEpilogue, RowKernel, strides_for

TYPES = {"float32": "float", "float64": "double"}


class Unsupported(Exception):
    """The kernel IR has something this lowering cannot emit (stays in the interpreter)."""


class Builder:
    """SSA text emitter for one function."""

    def __init__(self):
        self.lines: list = []
        self.n = 0

    def tmp(self) -> str:
        self.n += 1
        return f"%t{self.n}"

    def op(self, text: str) -> str:
        r = self.tmp()
        self.lines.append(f"  {r} = {text}")
        return r

    def raw(self, text: str):
        self.lines.append(text)


def _fconst(v: float, t: str) -> str:
    if t == "float":
        import struct

        try:
            v = struct.unpack("f", struct.pack("f", v))[0]   # exactly representable as float
        except OverflowError:     # beyond float's range: inf, as numpy converts it
            v = math.copysign(math.inf, v)
    if math.isinf(v):
        return "0x7FF0000000000000" if v > 0 else "0xFFF0000000000000"
    if math.isnan(v):
        return "0x7FF8000000000000"
    import struct

    return "0x%016X" % struct.unpack("<Q", struct.pack("<d", v))[0]


class Vals:
    """Emits math on a scalar type T or a vector <W x T>."""

    def __init__(self, b: Builder, t: str, width: int):
        self.b, self.t, self.w = b, t, width
        self.vt = t if width == 1 else f"<{width} x {t}>"
        self.it = "i1" if width == 1 else f"<{width} x i1>"
        self.suffix = ("f32" if t == "float" else "f64") if width == 1 else f"v{width}{'f32' if t == 'float' else 'f64'}"
        self.intrinsics: set = set()

    def const(self, v: float) -> str:
        c = _fconst(v, self.t)
        if self.w == 1:
            return c
        return f"splat ({self.t} {c})"        # (short IR text: parsing is part of every compile)

    def bin(self, opname: str, a: str, b: str) -> str:
        return self.b.op(f"{opname} {self.vt} {a}, {b}")

    def call(self, name: str, *args: str) -> str:
        full = f"llvm.{name}.{self.suffix}"
        self.intrinsics.add(f"declare {self.vt} @{full}({', '.join([self.vt] * len(args))})")
        return self.b.op(f"call {self.vt} @{full}({', '.join(f'{self.vt} {a}' for a in args)})")

    def mad(self, a: str, b: str, c: str) -> str:
        """a * b + c, contracted to one FMA where the target has it: only inside the approximations,
        on bounded arguments (a program's own a * b + c keeps numpy's two roundings)."""
        return self.b.op(f"fadd contract {self.vt} {self.b.op(f'fmul contract {self.vt} {a}, {b}')}, {c}")

    def select(self, c: str, x: str, y: str) -> str:
        return self.b.op(f"select {self.it} {c}, {self.vt} {x}, {self.vt} {y}")

    def select_cmp(self, pred: str, a: str, b: str, x: str, y: str) -> str:
        return self.select(self.b.op(f"fcmp {pred} {self.vt} {a}, {b}"), x, y)

    def isnan(self, x: str) -> str:
        return self.b.op(f"fcmp uno {self.vt} {x}, {self.const(0.0)}")

    def _pick(self, pred: str, a: str, b: str) -> str:
        """numpy's maximum ("ogt") / minimum ("olt"): a where a wins or a is NaN, else b (so NaN
        in b, and b on ties: the order of signed zeros numpy gives)."""
        wins = self.b.op(f"or {self.it} {self.b.op(f'fcmp {pred} {self.vt} {a}, {b}')}, {self.isnan(a)}")
        return self.select(wins, a, b)

    def maximum(self, a: str, b: str) -> str:
        return self._pick("ogt", a, b)

    def minimum(self, a: str, b: str) -> str:
        return self._pick("olt", a, b)

    # composite functions
    def exp(self, x: str, lo: str | None = None) -> str:
        """e^x; with ``lo``, e^(x + lo), lo added after the range reduction: x - n ln2 is exact (Cody
        and Waite), so an x of magnitude 80 loses nothing to the sum's rounding (5e-6 relative)."""
        if self.t == "double":
            return self.call("exp", x if lo is None else self.bin("fadd", x, lo))
        # Cephes expf: x = n ln2 + r, e^r by a degree-6 polynomial, 2^n through the exponent bits in
        # two factors (n in [-150, 129]), so the result overflows to inf above 88.72 and is
        # subnormal, then 0, below -87.34 as numpy's; NaN computes on 89 and is put back at the end.
        # Below -104 the result rounds to 0: those lanes compute on 0 and are set to 0 at the end, since
        # products that underflow take a microcode assist (softmax rows under a -1e4 or -inf mask ran 3.7x
        # slower than unmasked ones)
        x0 = s = x if lo is None else self.bin("fadd", x, lo)
        big = self.b.op(f"fcmp ugt {self.vt} {s}, {self.const(89.0)}")            # (NaN -> 89)
        zero = self.b.op(f"fcmp olt {self.vt} {s}, {self.const(-104.0)}")
        x = self.select(zero, self.const(0.0), self.select(big, self.const(89.0), x))
        if lo is not None:         # (n from the sum; a clamped lane drops lo)
            clamped = self.b.op(f"or {self.it} {big}, {zero}")
            lo, s = self.select(clamped, self.const(0.0), lo), self.select(clamped, x, s)
        xl = self.b.op(f"fmul {self.vt} {x if lo is None else s}, {self.const(1.44269504088896341)}")
        fx = self.call("floor", self.b.op(f"fadd {self.vt} {xl}, {self.const(0.5)}"))
        r = self.b.op(f"fsub {self.vt} {x}, {self.b.op(f'fmul {self.vt} {fx}, {self.const(0.693359375)}')}")
        if lo is not None:
            r = self.bin("fadd", r, lo)
        r = self.b.op(f"fsub {self.vt} {r}, {self.b.op(f'fmul {self.vt} {fx}, {self.const(-2.12194440e-4)}')}")
        z = self.b.op(f"fmul {self.vt} {r}, {r}")
        y = self.const(1.9875691500e-4)
        for c in (1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1):
            y = self.mad(y, r, self.const(c))
        y = self.mad(y, z, r)
        y = self.b.op(f"fadd {self.vt} {y}, {self.const(1.0)}")
        it = "i32" if self.w == 1 else f"<{self.w} x i32>"
        n = self.b.op(f"fptosi {self.vt} {fx} to {it}")
        c1, c127, c23 = ("1", "127", "23") if self.w == 1 else ("splat (i32 1)", "splat (i32 127)", "splat (i32 23)")
        n1 = self.b.op(f"ashr {it} {n}, {c1}")
        for p in (n1, self.b.op(f"sub {it} {n}, {n1}")):
            e = self.b.op(f"shl {it} {self.b.op(f'add {it} {p}, {c127}')}, {c23}")
            y = self.b.op(f"fmul {self.vt} {y}, {self.b.op(f'bitcast {it} {e} to {self.vt}')}")
        return self.select(self.isnan(x0), x0, self.select(zero, self.const(0.0), y))

    def splat(self, x: str) -> str:
        """A scalar of type T broadcast to every lane."""
        one = self.b.op(f"insertelement {self.vt} undef, {self.t} {x}, i32 0")
        return self.b.op(f"shufflevector {self.vt} {one}, {self.vt} undef, <{self.w} x i32> zeroinitializer")

    def reduce(self, kind: str, x: str) -> str:
        """Lanes of x combined into one T: kind "fadd" (a sum) or "fmax" (numpy's maximum: NaN
        if any lane is; ``llvm.vector.reduce.fmax`` would drop it)."""
        if kind == "fadd":
            red = f"llvm.vector.reduce.fadd.{self.suffix}"
            self.intrinsics.add(f"declare {self.t} @{red}({self.t}, {self.vt})")
            return self.b.op(f"call reassoc {self.t} @{red}({self.t} {_fconst(-0.0, self.t)}, {self.vt} {x})")
        s = Vals(self.b, self.t, 1)
        lanes = [self.b.op(f"extractelement {self.vt} {x}, i32 {q}") for q in range(self.w)]
        while len(lanes) > 1:
            lanes = [s.maximum(lanes[q], lanes[q + 1]) for q in range(0, len(lanes) - 1, 2)] + \
                    (lanes[-1:] if len(lanes) % 2 else [])
        return lanes[0]

    def recip(self, x: str) -> str:
        return self.b.op(f"fdiv {self.vt} {self.const(1.0)}, {x}")

    def poly(self, z: str, coefs) -> str:
        """coefs[0] z^(n-1) + ... + coefs[-1], by Horner's rule."""
        y = self.const(coefs[0])
        for c in coefs[1:]:
            y = self.mad(y, z, self.const(c))
        return y

    def tanh(self, x: str, near_zero: bool = True) -> str:
        # tanh |x| with x's sign (so -0.0 stays -0.0): for |x| >= 0.625, 1 - 2 / (e^(2|x|) + 1) (saturates
        # at inf; NaN stays NaN); below, Cephes' |x| + |x| z P(z) (z = x^2), tanh x ~ x down to subnormal x.
        # ``near_zero`` False (a tanh whose only use is 1 + tanh: GELU's): in float, ``tanh_rational``
        if not near_zero and self.t == "float":
            return self.tanh_rational(x)
        ax = self.call("fabs", x)
        e = self.exp(self.bin("fmul", ax, self.const(2.0)))
        d = self.bin("fadd", e, self.const(1.0))
        big = self.bin("fsub", self.const(1.0), self.bin("fdiv", self.const(2.0), d))
        if not near_zero:      # (for 1 + tanh: its relative accuracy near 0 does not show)
            return self.call("copysign", big, x)
        z = self.bin("fmul", x, x)
        if self.t == "float":
            zp = self.bin("fmul", self.poly(z, (-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2,
                                                 1.33314422036e-1, -3.33332819422e-1)), z)
        else:
            p = self.poly(z, (-9.64399179425052238628e-1, -9.92877231001918586564e1, -1.61468768441708447952e3))
            q = self.poly(z, (1.0, 1.12811678491632931402e2, 2.23548839060100448583e3, 4.84406305325125486048e3))
            zp = self.bin("fdiv", self.bin("fmul", z, p), q)
        small = self.bin("fadd", ax, self.bin("fmul", ax, zp))
        return self.call("copysign", self.select_cmp("olt", ax, self.const(0.625), small, big), x)

    def tanh_rational(self, x: str) -> str:
        """float tanh as x P(x^2) / Q(x^2) on x clamped to [-9, 9] (Eigen's fast tanh: degree 13 over 6,
        no exp), the result clamped to [-1, 1], NaN kept: within 7 float ulps of tanh (4e-7 relative; numpy's
        1.4), about a third of the exp route's instructions. For 1 + tanh only (``tanh(near_zero=False)``),
        where an ulp of tanh near 0 or 1 is less than one of the sum. Measured (AMD Zen 3, one core, the
        epilogue of a 128 x 768 by 768 x 3072 product at L3, over the product alone, alternating): GELU_TANH
        0.77-0.79 -> 0.26-0.50 ms, GPT-2's GELU written out 1.05-1.07 -> 0.29-0.40 ms (of a 7.0 ms product)."""
        nine, one = self.const(9.0), self.const(1.0)
        c = self.select_cmp("ogt", x, nine, nine, x)              # (NaN: unordered compares keep x)
        c = self.select_cmp("olt", c, self.const(-9.0), self.const(-9.0), c)
        z = self.bin("fmul", c, c)
        p = self.const(-2.76076847742355e-16)
        for a in (2.00018790482477e-13, -8.60467152213735e-11, 5.12229709037114e-08, 1.48572235717979e-05,
                  6.37261928875436e-04, 4.89352455891786e-03):
            p = self.mad(p, z, self.const(a))
        q = self.const(1.19825839466702e-06)
        for a in (1.18534705686654e-04, 2.26843463243900e-03, 4.89352518554385e-03):
            q = self.mad(q, z, self.const(a))
        r = self.bin("fdiv", self.bin("fmul", c, p), q)
        r = self.select_cmp("ogt", r, one, one, r)
        return self.select_cmp("olt", r, self.const(-1.0), self.const(-1.0), r)

    def sigmoid(self, x: str) -> str:
        e = self.exp(self.b.op(f"fneg {self.vt} {x}"))
        return self.recip(self.b.op(f"fadd {self.vt} {e}, {self.const(1.0)}"))

    def erf(self, x: str) -> str:
        if self.t == "double":
            raise Unsupported("ERF in float64 (no vector erf; stays in the interpreter)")
        # |x| >= 1: Abramowitz & Stegun 7.1.26, |error| <= 1.5e-7
        ax = self.call("fabs", x)
        t = self.recip(self.b.op(f"fadd {self.vt} {self.b.op(f'fmul {self.vt} {ax}, {self.const(0.3275911)}')}, "
                                 f"{self.const(1.0)}"))
        y = self.bin("fmul", self.poly(t, (1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592)), t)
        e = self.exp(self.b.op(f"fneg {self.vt} {self.b.op(f'fmul {self.vt} {ax}, {ax}')}"))
        r = self.call("copysign", self.bin("fsub", self.const(1.0), self.bin("fmul", y, e)), x)
        # |x| < 1: Cephes' x T(x^2), exact in relative terms near 0 (tiny and subnormal x, -0.0)
        small = self.bin("fmul", x, self.poly(self.bin("fmul", x, x), (
            7.853861353153693e-5, -8.010193625184903e-4, 5.188327685732524e-3, -2.685381193529856e-2,
            1.128358514861418e-1, -3.761262582423300e-1, 1.128379165726710)))
        return self.select_cmp("olt", ax, self.const(1.0), small, r)

    def erfc_half_square(self, ax: str) -> str:
        """erfc(ax / sqrt 2) for ax >= 0 (NaN kept), in relative terms: Numerical Recipes' erfcc
        (t e^(P(t) - a^2), t = 1 / (1 + a / 2), relative error 1.2e-7), with a^2 = ax^2 / 2 split
        exactly into hi + lo by an FMA, so the steep tail keeps its accuracy (3e-7 measured)."""
        if self.t == "double":
            raise Unsupported("ERFC in float64 (no vector erfc; stays in the interpreter)")
        cap = self.const(15.6)        # (erfc(11) rounds to 0)
        ax = self.select_cmp("ogt", ax, cap, cap, ax)
        t = self.recip(self.mad(ax, self.const(0.5 / math.sqrt(2)), self.const(1.0)))
        p = self.poly(t, (0.17087277, -0.82215223, 1.48851587, -1.13520398, 0.27886807, -0.18628806,
                          0.09678418, 0.37409196, 1.00002368, -1.26551223))
        hi = self.bin("fmul", ax, ax)
        lo = self.call("fma", ax, ax, self.b.op(f"fneg {self.vt} {hi}"))
        half = self.const(-0.5)
        return self.bin("fmul", t, self.exp(self.bin("fmul", hi, half), self.mad(lo, half, p)))


def _gelu(v, x):
    """As the reference: x (erfc(-x / sqrt 2) / 2), erfc(-a) = 2 - erfc(a) for x >= 0 (no cancellation
    in the negative tail, where 1 + erf(x / sqrt 2) loses all its digits below -5 in float32)."""
    c = v.erfc_half_square(v.call("fabs", x))
    e = v.select_cmp("olt", x, v.const(0.0), c, v.bin("fsub", v.const(2.0), c))
    return v.bin("fmul", v.bin("fmul", e, v.const(0.5)), x)


def _gelu_tanh(v, x):   # as the reference: sigmoid((x * x * 0.044715 + 1) * x * (2 sqrt(2/pi))) * x
    inner = v.bin("fadd", v.bin("fmul", v.bin("fmul", x, x), v.const(0.044715)), v.const(1.0))
    inner = v.bin("fmul", v.bin("fmul", inner, x), v.const(2 * math.sqrt(2 / math.pi)))
    return v.bin("fmul", v.sigmoid(inner), x)


UNARY = {
    "NEG": lambda v, x: v.b.op(f"fneg {v.vt} {x}"),
    "ABS": lambda v, x: v.call("fabs", x),
    "EXP": lambda v, x: v.exp(x),
    "LOG": lambda v, x: v.call("log", x),
    "SQRT": lambda v, x: v.call("sqrt", x),
    "RSQRT": lambda v, x: v.recip(v.call("sqrt", x)),
    "TANH": lambda v, x: v.tanh(x),
    "SIGMOID": lambda v, x: v.sigmoid(x),
    "RELU": lambda v, x: v.maximum(x, v.const(0.0)),       # numpy's maximum(x, 0)
    "RECIPROCAL": lambda v, x: v.recip(x),
    "ERF": lambda v, x: v.erf(x),
    "GELU": _gelu,
    "GELU_TANH": _gelu_tanh,
    # conformance (issue 21): LLVM's own intrinsics, numpy's answers on NaN, inf and -0.0
    "FLOOR": lambda v, x: v.call("floor", x),
    "CEIL": lambda v, x: v.call("ceil", x),
    "ROUND": lambda v, x: v.call("rint", x),         # half to even, as np.rint
    "TRUNC": lambda v, x: v.call("trunc", x),
    "SQUARE": lambda v, x: v.bin("fmul", x, x),
    "SIN": lambda v, x: v.call("sin", x),
    "COS": lambda v, x: v.call("cos", x),
}
BINARY = {
    "BROADCAST_ADD": lambda v, a, b: v.bin("fadd", a, b),
    "BROADCAST_SUB": lambda v, a, b: v.bin("fsub", a, b),
    "BROADCAST_MUL": lambda v, a, b: v.bin("fmul", a, b),
    "BROADCAST_DIV": lambda v, a, b: v.bin("fdiv", a, b),
    "BROADCAST_MAX": lambda v, a, b: v.maximum(a, b),
    "BROADCAST_MIN": lambda v, a, b: v.minimum(a, b),
    "BROADCAST_POW": lambda v, a, b: _pow(v, a, b),
}


def _scalar(x):         # (issue 18: a scalar argument's value, marked for BROADCAST_POW: lower_pow.Scalar)
    from .lower_pow import Scalar

    return Scalar(x)


def _pow(v, a, b):      # (issue 18: multiplies for constant exponents, a vector pow: compiler/lower_pow.py)
    from .lower_pow import lower_pow

    return lower_pow(v, a, b)



def one_plus_tanh(program: tuple) -> set:
    """The positions (among the program's operation nodes, in order) of the TANHs whose only use is an
    add of the constant 1 (the tanh GELU written out: ``1.0 + ops.tanh(...)``): ``Vals.tanh``'s
    ``near_zero`` False is enough there."""
    from ..bytecode.opcodes import BY_NAME

    stack, ops, found = [], 0, set()      # stack: per value, (node tag, op position or None, constant)
    for node in program:
        tag = node[0]
        if tag in ("in", "c"):
            stack.append((tag, None, node[1] if tag == "c" else None))
            continue
        row = BY_NAME.get(tag)
        n = row.pops if row is not None else 0
        args = stack[len(stack) - n:] if n else []
        del stack[len(stack) - n:]
        if tag == "BROADCAST_ADD" and n == 2:
            for a, b in (args, args[::-1]):
                if a[0] == "TANH" and b[0] == "c" and b[2] == 1.0:
                    found.add(a[1])
        stack.append((tag, ops, None))
        ops += 1
    return found


def emit_program(v: Vals, program: tuple, inputs: list) -> str:
    """The program's value given the (already loaded) input values."""
    cheap = one_plus_tanh(program)
    at = [0]                                 # (the operation node being emitted, in program order)

    def op(row, args, operands):
        tag = row.name
        at[0] += 1
        if tag == "TANH" and at[0] - 1 in cheap:
            return v.tanh(args[0], near_zero=False)
        if tag == "CAST":
            if getattr(operands[0], "name", operands[0]) != ("float32" if v.t == "float" else "float64"):
                raise Unsupported(f"CAST to {operands[0]} inside a {v.t} kernel")
            return args[0]
        if tag in UNARY:
            return UNARY[tag](v, args[0])
        if tag in BINARY:
            return BINARY[tag](v, args[0], args[1])
        raise Unsupported(f"{tag} has no lowering for {v.t}")

    from .lower_pow import Const  # (constants carry their value: BROADCAST_POW's exponent)

    return evaluate(program, inputs.__getitem__, lambda c: Const(v.const(float(c)), float(c)), op)


def avx512(features: str) -> bool:
    """Whether the target has AVX-512: 512-bit vectors, 32 vector registers and mask registers."""
    return "+avx512f" in features


def vec_width(features: str, t: str) -> int:
    """Lanes of the widest vector register for LLVM type t ('float'/'double')."""
    bits = 512 if avx512(features) else 256 if "+avx" in features else 128
    return bits // (32 if t == "float" else 64)


def elementwise_entry(b: Builder, k: Elementwise, t: str, name: str, define: str, head: list, noalias: str):
    """The signature and entry block every elementwise kernel shares (CPU and GPU): after the
    ``head`` parameters come n1, n2, out and the operands as ``callconv`` lays them out.
    Returns (tensor inputs, scalar inputs, n1, n2, s0, s1, scalar values): constants in L3
    (``k.dims`` known), argument names in L2."""
    from .callconv import llvm_operands

    tensors = [i for i, kind in enumerate(k.kinds) if kind == "t"]
    scalars = [i for i, kind in enumerate(k.kinds) if kind == "s"]
    params = head + ["i64 %n1_arg", "i64 %n2_arg", f"{t}* {noalias}%out"] + llvm_operands(k.kinds, t, noalias)
    b.raw(f"{define} @{name}({', '.join(params)}) nounwind {{")
    b.raw("entry:")
    if k.dims is not None:
        n1, n2 = str(k.dims[1]), str(k.dims[2])
        strides = {i: strides_for(k.dims, k.bcast[i]) for i in tensors}
        s0 = {i: str(strides[i][0]) for i in tensors}
        s1 = {i: str(strides[i][1]) for i in tensors}
    else:
        n1, n2 = "%n1_arg", "%n2_arg"
        s0 = {i: f"%s0_{i}" for i in tensors}
        s1 = {i: f"%s1_{i}" for i in tensors}
    scal = {i: (b.op(f"fptrunc double %sc{i} to float") if t == "float" else f"%sc{i}") for i in scalars}
    return tensors, scalars, n1, n2, s0, s1, scal


def lower_elementwise(k: Elementwise, name: str, features: str) -> str:
    t = TYPES.get(k.dtype)
    if t is None:
        raise Unsupported(f"elementwise kernels in {k.dtype}")
    width = vec_width(features, t)
    b = Builder()
    intrinsics: set = set()
    tensors, scalars, n1, n2, s0, s1, scal = elementwise_entry(
        b, k, t, name, "define void", ["i64 %start", "i64 %end"], "")
    vw = width
    b.raw("  br label %loop0")
    # i0 loop
    b.raw("loop0:")
    b.raw("  %i0 = phi i64 [ %start, %entry ], [ %i0n, %end1 ]")
    b.raw("  %c0 = icmp slt i64 %i0, %end")
    b.raw("  br i1 %c0, label %body0, label %done")
    b.raw("body0:")
    b.raw("  br label %loop1")
    b.raw("loop1:")
    b.raw("  %i1 = phi i64 [ 0, %body0 ], [ %i1n, %end2 ]")
    b.raw(f"  %c1 = icmp slt i64 %i1, {n1}")
    b.raw("  br i1 %c1, label %body1, label %end1")
    b.raw("body1:")
    r0 = b.op(f"mul i64 %i0, {n1}")
    r1 = b.op(f"add i64 {r0}, %i1")
    rowo = b.op(f"mul i64 {r1}, {n2}")
    base = {}
    for i in tensors:
        base[i] = b.op(f"add i64 {b.op(f'mul i64 %i0, {s0[i]}')}, {b.op(f'mul i64 %i1, {s1[i]}')}")
    vec_end = b.op(f"sub i64 {n2}, {vw - 1}")
    b.raw("  br label %vloop")
    b.raw("vloop:")
    b.raw("  %j = phi i64 [ 0, %body1 ], [ %jn, %vbody ]")
    # L3 knows the row length: when vectors cover it exactly there is no scalar tail to compile
    tail = k.dims is None or k.dims[2] % vw != 0
    b.raw("  %cv = icmp slt i64 %j, " + vec_end)
    b.raw(f"  br i1 %cv, label %vbody, label %{'sloop_pre' if tail else 'end2'}")
    b.raw("vbody:")
    v = Vals(b, t, vw)
    loaded = {}
    vt = v.vt
    for i in tensors:
        if k.bcast[i][2]:
            p = b.op(f"getelementptr {t}, {t}* %in{i}, i64 {base[i]}")
            s = b.op(f"load {t}, {t}* {p}")
            ins_ = b.op(f"insertelement {vt} undef, {t} {s}, i32 0")
            loaded[i] = b.op(f"shufflevector {vt} {ins_}, {vt} undef, <{vw} x i32> zeroinitializer")
        else:
            off = b.op(f"add i64 {base[i]}, %j")
            p = b.op(f"getelementptr {t}, {t}* %in{i}, i64 {off}")
            pv = b.op(f"bitcast {t}* {p} to {vt}*")
            loaded[i] = b.op(f"load {vt}, {vt}* {pv}, align {4 if t == 'float' else 8}")
    for i in scalars:
        ins_ = b.op(f"insertelement {vt} undef, {t} {scal[i]}, i32 0")
        loaded[i] = _scalar(b.op(f"shufflevector {vt} {ins_}, {vt} undef, <{vw} x i32> zeroinitializer"))
    r = emit_program(v, k.program, [loaded.get(i) for i in range(len(k.kinds))])
    intrinsics |= v.intrinsics
    po = b.op(f"getelementptr {t}, {t}* %out, i64 {b.op(f'add i64 {rowo}, %j')}")
    pov = b.op(f"bitcast {t}* {po} to {vt}*")
    if k.stream:      # write around the caches: no read-for-ownership of lines that are only written
        b.raw(f"  store {vt} {r}, {vt}* {pov}, align {vw * (4 if t == 'float' else 8)}, !nontemporal !0")
    else:
        b.raw(f"  store {vt} {r}, {vt}* {pov}, align {4 if t == 'float' else 8}")
    b.raw(f"  %jn = add i64 %j, {vw}")
    b.raw("  br label %vloop")
    if tail:
        _scalar_tail(b, k, t, tensors, scalars, base, scal, rowo, n2, intrinsics)
    b.raw("end2:")
    b.raw("  %i1n = add i64 %i1, 1")
    b.raw("  br label %loop1")
    b.raw("end1:")
    b.raw("  %i0n = add i64 %i0, 1")
    b.raw("  br label %loop0")
    b.raw("done:")
    if k.stream:      # streaming stores are weakly ordered: drain them before anyone reads the output
        b.raw("  fence seq_cst")
    b.raw("  ret void")
    b.raw("}")
    meta = "\n!0 = !{i32 1}\n" if k.stream else ""
    return "\n".join(sorted(intrinsics)) + "\n\n" + "\n".join(b.lines) + "\n" + meta


def _scalar_tail(b, k, t, tensors, scalars, base, scal, rowo, n2, intrinsics):
    """The elements of a row after the last whole vector, one at a time."""
    b.raw("sloop_pre:")
    b.raw("  br label %sloop")
    b.raw("sloop:")
    b.raw("  %js = phi i64 [ %j, %sloop_pre ], [ %jsn, %sbody ]")
    b.raw(f"  %cs = icmp slt i64 %js, {n2}")
    b.raw("  br i1 %cs, label %sbody, label %end2")
    b.raw("sbody:")
    sv = Vals(b, t, 1)
    loaded = {}
    for i in tensors:
        off = base[i] if k.bcast[i][2] else b.op(f"add i64 {base[i]}, %js")
        p = b.op(f"getelementptr {t}, {t}* %in{i}, i64 {off}")
        loaded[i] = b.op(f"load {t}, {t}* {p}")
    for i in scalars:
        loaded[i] = _scalar(scal[i])
    r = emit_program(sv, k.program, [loaded.get(i) for i in range(len(k.kinds))])
    intrinsics |= sv.intrinsics      # (a set shared with the caller)
    po = b.op(f"getelementptr {t}, {t}* %out, i64 {b.op(f'add i64 {rowo}, %js')}")
    b.raw(f"  store {t} {r}, {t}* {po}")
    b.raw("  %jsn = add i64 %js, 1")
    b.raw("  br label %sloop")


def epilogue_params(k, extra: list, t: str) -> list:
    """A matmul kernel's parameters for its epilogue's inputs 1..: ``T* x, i64 s0, i64 s1`` per tensor,
    ``double`` per scalar (block_epilogue passes them on per row block)."""
    params = []
    for i in extra:
        if k.epilogue.kinds[i] == "t":
            params += [f"{t}* %x{i}", f"i64 %xs0_{i}", f"i64 %xs1_{i}"]
        else:
            params.append(f"double %xc{i}")
    return params


def block_epilogue(b, k, extra: list, epi_name: str, t: str, rows: str, n: int, c_blk: str) -> None:
    """The call of a matmul kernel's epilogue over its block of ``rows`` x n (from row %r0, in place
    in C): extra tensor inputs are indexed from the block's first row, scalars passed as they are."""
    args = ["i64 0", f"i64 {rows}", "i64 1", f"i64 {n}", f"{t}* {c_blk}", f"{t}* {c_blk}", f"i64 {n}", "i64 0"]
    for i in extra:
        if k.epilogue.kinds[i] == "t":
            s0 = f"%xs0_{i}"
            px = b.op(f"getelementptr {t}, {t}* %x{i}, i64 {b.op(f'mul i64 %r0, {s0}')}")
            args += [f"{t}* {px}", f"i64 {s0}", f"i64 %xs1_{i}"]
        else:
            args.append(f"double %xc{i}")
    b.raw(f"  call void @{epi_name}({', '.join(args)})")


def lower_matmul(k: MatmulEpilogue, name: str, features: str) -> str:
    """Row blocks: gemm(block) through the BLAS pointer, then the epilogue over the block."""
    if k.packed:         # (issue 18: by a weight packed once, msvm's own product: compiler/gemm.py)
        from .gemm import lower_matmul_packed

        return lower_matmul_packed(k, name, features)
    t = TYPES.get(k.dtype)
    if t is None:
        raise Unsupported(f"matmul kernels in {k.dtype}")
    epi_name = f"{name}_epi"
    epi_ir = ""
    extra = []
    if k.epilogue is not None:
        epi_ir = lower_elementwise(k.epilogue, epi_name, features)
        extra = [i for i, kind in enumerate(k.epilogue.kinds) if i > 0]
    # signature: (gemm*, A*, B*, C*, extras: {T* in, i64 s0, i64 s1} | double)
    it = f"i{k.int_bits}"          # the BLAS's integer (LP64: i32, ILP64: i64)
    params = [f"void (i8*, i8*, {it}*, {it}*, {it}*, {t}*, {t}*, {it}*, {t}*, {it}*, {t}*, {t}*, {it}*)* %gemm",
              f"{t}* %A", f"{t}* %B", f"{t}* %C"] + epilogue_params(k, extra, t)
    m, kk, n, bs = k.m, k.k, k.n, k.block
    b = Builder()
    b.raw(f"define void @{name}({', '.join(params)}) nounwind {{")
    b.raw("entry:")
    # Fortran arguments live in stack slots
    for var, val, ty in (("ta", 84 if k.tb else 78, "i8"), ("tb", 84 if k.ta else 78, "i8"), ("mm", n, it),
                         ("kk", kk, it), ("lda", kk if k.tb else n, it), ("ldb", m if k.ta else kk, it),
                         ("ldc", n, it)):
        b.raw(f"  %{var} = alloca {ty}")
        b.raw(f"  store {ty} {val}, {ty}* %{var}")
    b.raw(f"  %nb = alloca {it}")
    b.raw(f"  %alpha = alloca {t}")
    b.raw(f"  store {t} {_fconst(1.0, t)}, {t}* %alpha")
    b.raw(f"  %beta = alloca {t}")
    b.raw(f"  store {t} {_fconst(0.0, t)}, {t}* %beta")
    b.raw("  br label %bloop")
    b.raw("bloop:")
    b.raw("  %bi = phi i64 [ 0, %entry ], [ %bin, %bdone ]")
    b.raw(f"  %bc = icmp slt i64 %bi, {k.batch}")
    b.raw("  br i1 %bc, label %bbody, label %done")
    b.raw("bbody:")
    a_b = b.op(f"getelementptr {t}, {t}* %A, i64 {b.op(f'mul i64 %bi, {m * kk}')}")
    b_b = b.op(f"getelementptr {t}, {t}* %B, i64 {b.op(f'mul i64 %bi, {kk * n}')}")
    c_b = b.op(f"getelementptr {t}, {t}* %C, i64 {b.op(f'mul i64 %bi, {m * n}')}")
    b.raw("  br label %rloop")
    b.raw("rloop:")
    b.raw("  %r0 = phi i64 [ 0, %bbody ], [ %r0n, %rbody ]")
    b.raw(f"  %rc = icmp slt i64 %r0, {m}")
    b.raw("  br i1 %rc, label %rbody, label %bdone")
    b.raw("rbody:")
    rem = b.op(f"sub i64 {m}, %r0")
    lt = b.op(f"icmp slt i64 {rem}, {bs}")
    rows = b.op(f"select i1 {lt}, i64 {rem}, i64 {bs}")
    nrows = b.op(f"trunc i64 {rows} to i32") if it == "i32" else rows
    b.raw(f"  store {it} {nrows}, {it}* %nb")
    # C^T (n x rows, col-major) = op(B)^T-view x op(A)^T-view; A's block starts at row r0 (or column r0 if ta)
    a_off = b.op("add i64 %r0, 0") if k.ta else b.op(f"mul i64 %r0, {kk}")
    a_blk = b.op(f"getelementptr {t}, {t}* {a_b}, i64 {a_off}")
    c_blk = b.op(f"getelementptr {t}, {t}* {c_b}, i64 {b.op(f'mul i64 %r0, {n}')}")
    b.raw(f"  call void %gemm(i8* %ta, i8* %tb, {it}* %mm, {it}* %nb, {it}* %kk, {t}* %alpha, {t}* {b_b}, {it}* %lda, "
          f"{t}* {a_blk}, {it}* %ldb, {t}* %beta, {t}* {c_blk}, {it}* %ldc)")
    if k.epilogue is not None:
        block_epilogue(b, k, extra, epi_name, t, rows, n, c_blk)
    b.raw(f"  %r0n = add i64 %r0, {bs}")
    b.raw("  br label %rloop")
    b.raw("bdone:")
    b.raw("  %bin = add i64 %bi, 1")
    b.raw("  br label %bloop")
    b.raw("done:")
    b.raw("  ret void")
    b.raw("}")
    return epi_ir + "\n" + "\n".join(b.lines) + "\n"


def lower_row(k: RowKernel, name: str, features: str, width: int | None = None) -> str:
    """softmax / layer norm over rows of length n: void @k(i64 start, i64 end, i64 n, T* out, T* x, T* g, T* b).

    Each pass over a row runs <W x T> vectors with vector accumulators (reduced across lanes
    once per row), then a scalar tail; so L2 (no IR passes) gets vector code too. ``width``
    1 gives the scalar form (the GPU's per-thread row function)."""
    t = TYPES.get(k.dtype)
    if t is None:
        raise Unsupported(f"row kernels in {k.dtype}")
    w = width or vec_width(features, t)
    n = str(k.n) if k.n is not None else "%n_arg"
    b = Builder()
    sv, vv = Vals(b, t, 1), Vals(b, t, w)
    align = 4 if t == "float" else 8
    res = f", {t}* noalias %y" if k.residual else ""      # (issue 18: FUSED_ADD_LAYER_NORM's second addend)
    if k.op == "softmax" and k.programs:     # (issue 18: FUSED_ATTENTION's score stages: callconv's row operands)
        res += ", " + ", ".join(row_stage_params(k, t))
    b.raw(f"define void @{name}(i64 %start, i64 %end, i64 %n_arg, {t}* noalias %out, {t}* noalias %x, "
          f"{t}* %g, {t}* %bb{res}) nounwind {{")
    b.raw("entry:")
    nv = b.op(f"and i64 {n}, {-w}") if w > 1 else "0"      # the part of a row that fills whole vectors
    b.raw("  br label %rows")
    b.raw("rows:")
    b.raw("  %r = phi i64 [ %start, %entry ], [ %rn, %rowdone ]")
    b.raw("  %rc = icmp slt i64 %r, %end")
    b.raw("  br i1 %rc, label %row, label %done")
    b.raw("row:")
    base = b.op(f"mul i64 %r, {n}")
    xr = b.op(f"getelementptr {t}, {t}* %x, i64 {base}")
    orow = b.op(f"getelementptr {t}, {t}* %out, i64 {base}")

    def loop(label, v, lo, hi, step, body, init_vals):
        """for j in [lo, hi) by step: accs = body(v, j, accs); returns the final accumulators."""
        b.raw(f"  br label %{label}_pre")
        b.raw(f"{label}_pre:")
        b.raw(f"  br label %{label}")
        b.raw(f"{label}:")
        j = f"%{label}_j"
        accs = [f"%{label}_a{q}" for q in range(len(init_vals))]
        nxt = [f"%{label}_n{q}" for q in range(len(init_vals))]
        b.raw(f"  {j} = phi i64 [ {lo}, %{label}_pre ], [ %{label}_jn, %{label}_body ]")
        for a, iv, nx in zip(accs, init_vals, nxt):
            b.raw(f"  {a} = phi {v.vt} [ {iv}, %{label}_pre ], [ {nx}, %{label}_body ]")
        b.raw(f"  %{label}_c = icmp slt i64 {j}, {hi}")
        b.raw(f"  br i1 %{label}_c, label %{label}_body, label %{label}_end")
        b.raw(f"{label}_body:")
        outs = body(v, j, accs)
        for nx, o in zip(nxt, outs):
            b.raw(f"  {nx} = fadd {v.vt} {o}, {v.const(-0.0)}")     # (x + -0.0 is x, -0.0 too)
        b.raw(f"  %{label}_jn = add i64 {j}, {step}")
        b.raw(f"  br label %{label}")
        b.raw(f"{label}_end:")
        return accs

    def ptr(p, j, v):
        q = b.op(f"getelementptr {t}, {t}* {p}, i64 {j}")
        return q if v.w == 1 else b.op(f"bitcast {t}* {q} to {v.vt}*")

    def ld(v, p, j):
        return b.op(f"load {v.vt}, {v.vt}* {ptr(p, j, v)}, align {align}")

    def st(v, p, j, val):
        b.raw(f"  store {v.vt} {val}, {v.vt}* {ptr(p, j, v)}, align {align}")

    def row_pass(label, body, init, combine):
        """One pass over the row: vectors, then the scalar tail; returns the combined accumulator."""
        acc = None
        if w > 1:
            (va,) = loop(f"{label}v", vv, "0", nv, w, body, [vv.const(init)])
            acc = vv.reduce(combine, va)
        if k.n is not None and w > 1 and k.n % w == 0:     # L3: vectors cover the row exactly
            return acc
        (sa,) = loop(f"{label}s", sv, nv, n, 1, body, [acc if acc is not None else sv.const(init)])
        return sa

    def splat(x):
        return vv.splat(x) if w > 1 else x

    def bc(v, x):          # a row constant, as a scalar or splat to the vector width
        return x if v.w == 1 else vx[x]

    nf = b.op(f"sitofp i64 {n} to {t}")
    vx: dict = {}
    if k.op == "softmax" and k.programs:    # (issue 18) the max pass writes program(x, operands) into out
        operand = _row_operands(b, k, t, vx, splat)

        program, m, wheres = k.programs     # (compiler/attention_plan.py: the stages, in order)

        def prog_store(v, j, a):
            vals = [bc(v, o) if row else ld(v, o, j) for o, row in operand]
            y = ld(v, xr, j)
            if program is not None:
                y = emit_program(v, program, [y] + vals[:m])
            for c, o, scores_is_a in wheres:     # WHERE(cond, y, other) as np.copyto: exact selects
                pick = b.op(f"fcmp une {v.vt} {vals[c]}, {v.const(0.0)}")
                y = v.select(pick, y, vals[o]) if scores_is_a else v.select(pick, vals[o], y)
            st(v, orow, j, y)
            return [v.maximum(y, a[0])]
        mx = row_pass("mx", prog_store, -math.inf, "fmax")
        xr = orow
    elif k.op == "softmax":
        mx = row_pass("mx", lambda v, j, a: [v.maximum(ld(v, xr, j), a[0])], -math.inf, "fmax")
    if k.op == "softmax":
        vx[mx] = splat(mx)

        def exp_store(v, j, a):
            e = v.exp(v.bin("fsub", ld(v, xr, j), bc(v, mx)))
            st(v, orow, j, e)
            return [v.bin("fadd", a[0], e)]
        tot = row_pass("sm", exp_store, 0.0, "fadd")
        inv = sv.recip(tot)
        vx[inv] = splat(inv)

        def scale(v, j, a):
            st(v, orow, j, v.bin("fmul", ld(v, orow, j), bc(v, inv)))
            return a
        row_pass("sc", scale, 0.0, "fadd")
    elif k.op == "layer_norm":
        if k.residual:      # (issue 18) the first pass writes x + y into the output row; the others read it
            yr = b.op(f"getelementptr {t}, {t}* %y, i64 {base}")

            def add_store(v, j, a):
                s_ = v.bin("fadd", ld(v, xr, j), ld(v, yr, j))
                st(v, orow, j, s_)
                return [v.bin("fadd", a[0], s_)]
            s_ = row_pass("mean", add_store, 0.0, "fadd")
            xr = orow
        else:
            s_ = row_pass("mean", lambda v, j, a: [v.bin("fadd", a[0], ld(v, xr, j))], 0.0, "fadd")
        mean = b.op(f"fdiv {t} {s_}, {nf}")
        vx[mean] = splat(mean)

        def sq(v, j, a):
            d = v.bin("fsub", ld(v, xr, j), bc(v, mean))
            return [v.bin("fadd", a[0], v.bin("fmul", d, d))]
        ss = row_pass("var", sq, 0.0, "fadd")
        var = b.op(f"fdiv {t} {ss}, {nf}")
        inv = sv.recip(sv.call("sqrt", b.op(f"fadd {t} {var}, {sv.const(k.eps)}")))
        vx[inv] = splat(inv)

        def norm(v, j, a):
            y = v.bin("fmul", v.bin("fsub", ld(v, xr, j), bc(v, mean)), bc(v, inv))
            if k.has_gamma:
                y = v.bin("fmul", y, ld(v, "%g", j))
            if k.has_beta:
                y = v.bin("fadd", y, ld(v, "%bb", j))
            st(v, orow, j, y)
            return a
        row_pass("wr", norm, 0.0, "fadd")
    elif k.op == "rms_norm":       # (issue 18: FUSED_RMS_NORM, compiler/norm.py) mean of prologue(x) per row,
        prologue, scale, program = k.programs      # r = scale(mean), out = program(x, r, w)
        s_ = row_pass("ms", lambda v, j, a: [v.bin("fadd", a[0], emit_program(v, prologue, [ld(v, xr, j)]))],
                      0.0, "fadd")
        r = emit_program(sv, scale, [b.op(f"fdiv {t} {s_}, {nf}")])
        vx[r] = splat(r)

        def scaled(v, j, a):
            st(v, orow, j, emit_program(v, program, [ld(v, xr, j), bc(v, r), ld(v, "%g", j)]))
            return a
        row_pass("wr", scaled, 0.0, "fadd")
    else:
        raise Unsupported(f"row kernel {k.op}")
    b.raw("  br label %rowdone")
    b.raw("rowdone:")
    b.raw("  %rn = add i64 %r, 1")
    b.raw("  br label %rows")
    b.raw("done:")
    b.raw("  ret void")
    b.raw("}")
    return "\n".join(sorted(sv.intrinsics | vv.intrinsics)) + "\n\n" + "\n".join(b.lines) + "\n"


def row_stage_params(k: RowKernel, t: str) -> list:
    """The LLVM parameters after a softmax row kernel's head that its score stages read (issue 18:
    callconv's row operands): i64 %n1, %n2, then per tensor input %in{i} and its three strides, per
    scalar %sc{i}."""
    from .callconv import elementwise_order

    return ["i64 %n1", "i64 %n2"] + [
        f"{t}* noalias %in{i}, i64 %s0_{i}, i64 %s1_{i}, i64 %s2_{i}" if k.kinds[i] == "t" else f"double %sc{i}"
        for i in elementwise_order(k.kinds)]


def _row_operands(b, k: RowKernel, t: str, vx: dict, splat) -> list:
    """(value or pointer, per row?) of the score program's inputs 1.. in this row (issue 18): row r =
    (i0 * n1 + i1) * n2 + i2 of a tensor operand is at i0 * s0 + i1 * s1 + i2 * s2; one value per row
    (``rowb``) or a scalar is loaded once and splat (``vx``)."""
    q = b.op("udiv i64 %r, %n2")
    i2 = b.op(f"sub i64 %r, {b.op('mul i64 %n2, ' + q)}")
    i0 = b.op(f"udiv i64 {q}, %n1")
    i1 = b.op(f"sub i64 {q}, {b.op('mul i64 %n1, ' + i0)}")
    out = []
    for i, kind in enumerate(k.kinds):
        if kind == "t":
            off = b.op(f"add i64 {b.op(f'mul i64 {i0}, %s0_{i}')}, {b.op(f'mul i64 {i1}, %s1_{i}')}")
            off = b.op(f"add i64 {off}, {b.op(f'mul i64 {i2}, %s2_{i}')}")
            p = b.op(f"getelementptr {t}, {t}* %in{i}, i64 {off}")
            if not k.rowb[i]:
                out.append((p, False))
                continue
            val = b.op(f"load {t}, {t}* {p}")
        else:
            val = b.op(f"fptrunc double %sc{i} to float") if t == "float" else f"%sc{i}"
        vx[val] = splat(val)
        out.append((val, True))
    return out


LOWER = {"elementwise": lower_elementwise, "matmul": lower_matmul, "row": lower_row}


def _lower_gemm(k, name: str, features: str) -> str:      # (issue 18: compiler/gemm.py's packed product)
    from .gemm import lower_gemm

    return lower_gemm(k, name, features)


LOWER["gemm"] = _lower_gemm


def lower(kernel, name: str, features: str) -> str:
    """LLVM IR text for a kernel; raises Unsupported when there is no lowering."""
    fn = LOWER.get(kernel.kind)
    if fn is None:
        raise Unsupported(f"no lowering for {kernel.kind} kernels")
    return fn(kernel, name, features)


# ---------------------------------------------------------------- issue 18: convolution kernels (lower_conv.py)
def _lower_depthwise(kernel, name: str, features: str) -> str:
    from .lower_conv import lower_depthwise  # (it imports this module's Builder and Vals)

    return lower_depthwise(kernel, name, features)


LOWER["depthwise"] = _lower_depthwise


def _lower_im2col(kernel, name: str, features: str) -> str:
    from .lower_conv import lower_im2col

    return lower_im2col(kernel, name, features)


LOWER["im2col"] = _lower_im2col


def _lower_pool(kernel, name: str, features: str) -> str:   # (issue 18: compiler/pool.py's spinning hand-off)
    from .pool import lower_pool

    return lower_pool(kernel, name, features)


LOWER["pool"] = LOWER["tramp"] = _lower_pool
