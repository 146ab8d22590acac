"""BROADCAST_POW lowered without a libm call per element (issue 18).

``x ** c`` with a constant exponent becomes multiplies, a square root or a reciprocal:

- c = 0 -> 1 (numpy's pow(NaN, 0) is 1 too), c = 1 -> x, c = -1 -> 1 / x;
- c = 0.5 -> sqrt(x), as numpy's fast path for a scalar 0.5 gives it (sqrt(-0.0) = -0.0,
  sqrt(-inf) = NaN where C's pow gives +0 and +inf; a scalar argument of 0.5 gets the same);
  c = -0.5 -> 1 / sqrt(x) with pow's answers where they differ (pow(-0.0, -0.5) = +inf,
  pow(-inf, -0.5) = +0);
- an integer c by squaring: in a float32 kernel the product runs in double (|c| <= 32: each
  double rounding is 2^-53, so the one rounding back to float gives powf's answer, and x^-n
  = 1 / x^n neither overflows nor underflows where powf does not); in float64 for |c| <= 4
  (x^-n as (1/x)^n, a few ulps at most).

Any other exponent (a tensor, a scalar input, a constant such as 1.5) in float32 is
exp(y * log|x|) computed in double on vectors (Cephes' log and exp, relative error ~1e-16,
so |y log x| <= 110 costs far below a float ulp), then C99/numpy's special cases: a negative
finite base with a non-integer exponent is NaN, an odd integer exponent keeps the base's
sign (-0.0 and -inf included), pow(x, ±0) = pow(1, y) = pow(-1, ±inf) = 1, NaN otherwise
propagates, and 0, inf and ±inf exponents follow from log|x| = ∓inf. (A tensor exponent that
numpy happens to iterate with stride 0 gets its sqrt fast path at 0.5 in L1; the compiled
tiers give C's pow there: -0.0 -> +0, -inf -> +inf.) float64 keeps
``llvm.pow`` (libm) where the exponent is not one of the forms above: its exp(y log x) in
double would lose |y log x| ulps.
"""

from __future__ import annotations

import math

MAX_INT_F32 = 32        # |c| of the integer exponents a float32 kernel multiplies out (in double)
MAX_INT_F64 = 4         # ... and a float64 kernel (each product rounds)


class Const(str):
    """A constant's emitted text that remembers its value (so BROADCAST_POW sees c)."""

    value: float

    def __new__(cls, text: str, value: float):
        s = super().__new__(cls, text)
        s.value = value
        return s


class Scalar(str):
    """A scalar argument's loaded value (numpy runs pow by a scalar through its scalar fast paths)."""


def _ivec(v, bits: int) -> str:
    return f"i{bits}" if v.w == 1 else f"<{v.w} x i{bits}>"


def _iconst(v, n: int, bits: int) -> str:
    return str(n) if v.w == 1 else f"splat (i{bits} {n})"


def _double(v):
    """Vals of the same class and width in double, sharing v's builder and intrinsics."""
    if v.t == "double":
        return v
    d = type(v)(v.b, "double", v.w)
    d.intrinsics = v.intrinsics
    return d


def _ext(v, d, x: str) -> str:
    return x if v is d else v.b.op(f"fpext {v.vt} {x} to {d.vt}")


def _trunc(v, d, x: str) -> str:
    return x if v is d else v.b.op(f"fptrunc {d.vt} {x} to {v.vt}")


def _ipow(v, x: str, n: int) -> str:
    """x^n (n >= 1) by squaring."""
    result, base = None, x
    while n:
        if n & 1:
            result = base if result is None else v.bin("fmul", result, base)
        n >>= 1
        if n:
            base = v.bin("fmul", base, base)
    return result


def pow_const(v, x: str, c: float) -> str | None:
    """x ** c for a constant c in one of the module's forms, or None (the general pow)."""
    if c == 0:
        return v.const(1.0)
    if c == 1:
        return x
    if c == -1:
        return v.recip(x)
    if c == 0.5:           # numpy's own fast path for a scalar 0.5: sqrt (-0.0 -> -0.0, -inf -> NaN)
        return v.call("sqrt", x)
    if c == -0.5:
        d = _double(v)
        s = _trunc(v, d, d.recip(d.call("sqrt", _ext(v, d, x))))
        s = v.select_cmp("oeq", x, v.const(0.0), v.const(math.inf), s)           # ±0 -> pow's +inf
        return v.select_cmp("oeq", x, v.const(-math.inf), v.const(0.0), s)      # -inf -> pow's +0
    if not math.isfinite(c) or c != int(c):
        return None
    n = int(c)
    if v.t == "float" and abs(n) <= MAX_INT_F32:
        d = _double(v)
        p = _ipow(d, _ext(v, d, x), abs(n))
        return _trunc(v, d, d.recip(p) if n < 0 else p)
    if v.t == "double" and abs(n) <= MAX_INT_F64:
        return _ipow(v, v.recip(x) if n < 0 else x, abs(n))
    return None


# ------------------------------------------------------------------ exp and log in double, on vectors
_LOG_P = (1.01875663804580931796e-4, 4.97494994976747001425e-1, 4.70579119878881725854e0,
          1.44989225341610930846e1, 1.79368678507819816313e1, 7.70838733755885391666e0)
_LOG_Q = (1.0, 1.12873587189167450590e1, 4.52279145837532221105e1, 8.29875266912776603211e1,
          7.11544750618563894466e1, 2.31251620126765340583e1)
_EXP_P = (1.26177193074810590878e-4, 3.02994407707441961300e-2, 9.99999999999999999910e-1)
_EXP_Q = (3.00198505138664455042e-6, 2.52448340349684104192e-3, 2.27265548208155028766e-1,
          2.00000000000000000009e0)


def _horner(d, z: str, coefs) -> str:     # (no contraction: both tiers give the same bits)
    y = d.const(coefs[0])
    for c in coefs[1:]:
        y = d.bin("fadd", d.bin("fmul", y, z), d.const(c))
    return y


def log_pos(d, x: str) -> str:
    """ln x for positive normal doubles x (Cephes log: x = 2^e m, m in [sqrt(1/2), sqrt(2)))."""
    b, it = d.b, _ivec(d, 64)
    bits = b.op(f"bitcast {d.vt} {x} to {it}")
    e = b.op(f"sub {it} {b.op(f'lshr {it} {bits}, {_iconst(d, 52, 64)}')}, {_iconst(d, 1022, 64)}")
    mb = b.op(f"or {it} {b.op(f'and {it} {bits}, {_iconst(d, 0x800FFFFFFFFFFFFF - (1 << 64), 64)}')}, "
              f"{_iconst(d, 0x3FE0000000000000, 64)}")
    m = b.op(f"bitcast {it} {mb} to {d.vt}")                     # in [0.5, 1)
    low = b.op(f"fcmp olt {d.vt} {m}, {d.const(0.70710678118654752440)}")
    e = b.op(f"select {d.it} {low}, {it} {b.op(f'sub {it} {e}, {_iconst(d, 1, 64)}')}, {it} {e}")
    z = d.select(low, d.bin("fsub", d.bin("fadd", m, m), d.const(1.0)), d.bin("fsub", m, d.const(1.0)))
    ef = b.op(f"sitofp {it} {e} to {d.vt}")
    zz = d.bin("fmul", z, z)
    y = d.bin("fmul", z, d.bin("fdiv", d.bin("fmul", zz, _horner(d, z, _LOG_P)), _horner(d, z, _LOG_Q)))
    y = d.bin("fsub", y, d.bin("fmul", ef, d.const(2.121944400546905827679e-4)))
    y = d.bin("fsub", y, d.bin("fmul", zz, d.const(0.5)))
    return d.bin("fadd", d.bin("fadd", z, y), d.bin("fmul", ef, d.const(0.693359375)))


def exp_bounded(d, x: str) -> str:
    """e^x for doubles in [-1000, 1000] (Cephes exp; 2^n through the exponent bits in two factors)."""
    b, it = d.b, _ivec(d, 64)
    fx = d.call("floor", d.bin("fadd", d.bin("fmul", x, d.const(1.4426950408889634073599)), d.const(0.5)))
    r = d.bin("fsub", x, d.bin("fmul", fx, d.const(6.93145751953125e-1)))
    r = d.bin("fsub", r, d.bin("fmul", fx, d.const(1.42860682030941723212e-6)))
    rr = d.bin("fmul", r, r)
    px = d.bin("fmul", r, _horner(d, rr, _EXP_P))
    y = d.bin("fdiv", px, d.bin("fsub", _horner(d, rr, _EXP_Q), px))
    y = d.bin("fadd", d.const(1.0), d.bin("fmul", y, d.const(2.0)))
    n = b.op(f"fptosi {d.vt} {fx} to {it}")
    n1 = b.op(f"ashr {it} {n}, {_iconst(d, 1, 64)}")
    for p in (n1, b.op(f"sub {it} {n}, {n1}")):
        e = b.op(f"shl {it} {b.op(f'add {it} {p}, {_iconst(d, 1023, 64)}')}, {_iconst(d, 52, 64)}")
        y = d.bin("fmul", y, b.op(f"bitcast {it} {e} to {d.vt}"))
    return y


def _and(v, *conds: str) -> str:
    r = conds[0]
    for c in conds[1:]:
        r = v.b.op(f"and {v.it} {r}, {c}")
    return r


def _or(v, *conds: str) -> str:
    r = conds[0]
    for c in conds[1:]:
        r = v.b.op(f"or {v.it} {r}, {c}")
    return r


def _cmp(v, pred: str, a: str, c: float) -> str:
    return v.b.op(f"fcmp {pred} {v.vt} {a}, {v.const(c)}")


def pow_general(v, x: str, y: str) -> str:
    """x ** y elementwise with numpy's special cases; float32 only (see the module docstring)."""
    if v.t == "double":
        return v.call("pow", x, y)
    d = _double(v)
    xd, yd = _ext(v, d, v.call("fabs", x)), _ext(v, d, y)
    tiny = d.select_cmp("olt", xd, d.const(1e-300), d.const(1.0), xd)       # (0 is fixed below)
    lg = log_pos(d, d.select_cmp("oeq", xd, d.const(math.inf), d.const(1.0), tiny))
    lg = d.select_cmp("oeq", xd, d.const(0.0), d.const(-math.inf), lg)
    lg = d.select_cmp("oeq", xd, d.const(math.inf), d.const(math.inf), lg)
    lg = d.select(d.isnan(xd), xd, lg)
    t = d.bin("fmul", yd, lg)                    # NaN for 0 * inf: the cases given 1 below
    tc = d.select_cmp("ole", t, d.const(100.0), t, d.const(100.0))          # (float: inf above 88.8)
    tc = d.select_cmp("oge", tc, d.const(-110.0), tc, d.const(-110.0))      # (float: 0 below -103.3)
    r = _trunc(v, d, d.select(d.isnan(t), t, exp_bounded(d, tc)))
    fy = v.call("floor", y)
    is_int = v.b.op(f"fcmp oeq {v.vt} {fy}, {y}")                      # (±inf counts: even)
    h = v.bin("fmul", y, v.const(0.5))
    odd = _and(v, is_int, v.b.op(f"fcmp une {v.vt} {v.call('floor', h)}, {h}"))
    it = _ivec(v, 32 if v.t == "float" else 64)
    neg = v.b.op(f"icmp slt {it} {v.b.op(f'bitcast {v.vt} {x} to {it}')}, {_iconst(v, 0, 32 if v.t == 'float' else 64)}")
    r = v.select(_and(v, neg, odd), v.b.op(f"fneg {v.vt} {r}"), r)
    not_int = v.b.op(f"xor {v.it} {is_int}, {'true' if v.w == 1 else 'splat (i1 true)'}")
    bad = _and(v, _cmp(v, "olt", x, 0.0), _cmp(v, "one", x, -math.inf), not_int)
    r = v.select(bad, v.const(math.nan), r)
    one = _or(v, _cmp(v, "oeq", y, 0.0), _cmp(v, "oeq", x, 1.0),
              _and(v, _cmp(v, "oeq", x, -1.0), _cmp(v, "oeq", v.call("fabs", y), math.inf)))
    return v.select(one, v.const(1.0), r)


def lower_pow(v, x: str, y: str) -> str:
    """BINARY's BROADCAST_POW: the constant forms where y is a known constant, else the general pow
    (for a scalar argument y with numpy's fast path for a scalar 0.5: sqrt's answers)."""
    if isinstance(y, Const):
        r = pow_const(v, x, y.value)
        if r is not None:
            return r
    r = pow_general(v, x, y)
    if isinstance(y, (Const, Scalar)):
        r = v.select_cmp("oeq", y, v.const(0.5), v.call("sqrt", x), r)
    return r
