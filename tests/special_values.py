"""Special floating-point values for the tests, and the comparison that checks a result holds
numpy's answer on them.

``edge_values(dtype)`` lists NaN, ±inf, ±0.0, subnormals, values whose squares overflow and a
few ordinary ones. ``assert_numpy_equal(out, ref)`` asks for NaN at exactly numpy's NaN
positions, the same infinities with their signs, the sign of every zero numpy's answer has,
and the other values within a tolerance (the compiled exp, tanh and erf are polynomials).
"""

import numpy as np


def edge_values(dtype) -> np.ndarray:
    tiny = 1e-40 if np.dtype(dtype) == np.float32 else 1e-310       # subnormal in that dtype
    return np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, tiny, -tiny, 1e30, -1e30,
                     1.0, -1.0, 0.5, -2.5, 3.0, 100.0, -100.0], dtype=dtype)


def sprinkle(rng, x: np.ndarray, share: float = 0.3) -> np.ndarray:
    """x with about ``share`` of its elements replaced by edge values (x itself is not changed)."""
    x = np.array(x, copy=True)
    if x.size:
        flat = x.reshape(-1)
        at = rng.random(flat.size) < share
        flat[at] = rng.choice(edge_values(x.dtype), int(at.sum()))
    return x


def assert_numpy_equal(out, ref, rtol=2e-5, atol=2e-5, msg=""):
    out, ref = np.asarray(out), np.asarray(ref)
    assert out.shape == ref.shape, f"{msg}: shape {out.shape} != {ref.shape}"
    if out.dtype.kind != "f" or ref.dtype.kind != "f":
        np.testing.assert_array_equal(out, ref, err_msg=msg)
        return
    nan = np.isnan(ref)
    np.testing.assert_array_equal(np.isnan(out), nan, err_msg=f"{msg}: NaN positions differ")
    inf = np.isinf(ref)
    np.testing.assert_array_equal(np.isinf(out), inf, err_msg=f"{msg}: inf positions differ")
    np.testing.assert_array_equal(out[inf], ref[inf], err_msg=f"{msg}: signs of inf differ")
    zero = (ref == 0) & (out == 0)         # (a polynomial may leave a tiny value where numpy has 0)
    np.testing.assert_array_equal(np.signbit(out[zero]), np.signbit(ref[zero]),
                                  err_msg=f"{msg}: signs of zeros differ")
    fin = ~(nan | inf)
    np.testing.assert_allclose(out[fin], ref[fin], rtol=rtol, atol=atol, err_msg=msg)
