"""A second CPU-side device, for tests only: it behaves as a foreign device (CuPy) does.

Its arrays (``ForeignArray``) wrap host numpy arrays but are *not* numpy arrays: every implicit
conversion to one raises (``np.asarray(x)``, ``np.array(x)``, ``__array__``, a buffer), a numpy
array mixed into one of their operations raises (CuPy: "Unsupported type numpy.ndarray"), and
the only way back to the host is the device's explicit ``to_host``. Computing numpy functions
and ufuncs reach them only through NEP 13/18 dispatch (``__array_ufunc__``,
``__array_function__``), as they reach CuPy's arrays. So a program that runs through this device
and gives the right answer went through the device layer on every path: anything that fell back
to host numpy would have raised. What the device does not prove is that CuPy implements each
function the kernels dispatch: ``DISPATCHED`` records them (module, name) for that check.

    import foreign_device; foreign_device.install()       # registers target "FOREIGN"
    ms.set_context(device_target="FOREIGN")
"""

from __future__ import annotations

import numpy as np
from msvm import device as msdev
from numpy.lib.mixins import NDArrayOperatorsMixin

DISPATCHED: set = set()      # (module, name) of every numpy function / ufunc called on ForeignArrays


class HostConversion(TypeError):
    """A foreign array was about to become a host numpy array implicitly."""


def _refuse(what: str):
    raise HostConversion(f"{what}: implicit conversion of a FOREIGN device array to a host numpy array is not "
                         "allowed (use the device's to_host)")


class _Flags:
    """CuPy's flags: contiguity and ownership, no writeable flag."""

    __slots__ = ("c_contiguous", "f_contiguous", "owndata")

    def __init__(self, a: np.ndarray):
        self.c_contiguous, self.f_contiguous, self.owndata = (a.flags.c_contiguous, a.flags.f_contiguous,
                                                              a.flags.owndata)


def _unwrap(v, where: str):
    if type(v) is ForeignArray:
        return v._a
    if type(v) is np.ndarray:
        raise msdev.DeviceMismatch(f"{where}: a host numpy array (CPU:0) met a FOREIGN:0 array")
    if isinstance(v, (list, tuple)):
        return type(v)(_unwrap(x, where) for x in v)
    return v


def _wrap(v):
    if type(v) is np.ndarray:
        return ForeignArray(v)
    if isinstance(v, tuple):
        return tuple(_wrap(x) for x in v)
    if isinstance(v, list):
        return [_wrap(x) for x in v]
    return v


def _ufunc_module(ufunc) -> str:
    """numpy's ufuncs and scipy.special's all say __module__ "numpy": tell them apart."""
    import scipy.special

    return "scipy.special" if getattr(scipy.special, ufunc.__name__, None) is ufunc else "numpy"


class ForeignArray(NDArrayOperatorsMixin):
    """An array in FOREIGN device memory (a host array nobody may read implicitly)."""

    __slots__ = ("_a",)
    __array_priority__ = 100

    def __init__(self, a: np.ndarray):
        self._a = a

    # --- refused conversions
    def __array__(self, dtype=None, copy=None):
        _refuse("__array__")

    def __buffer__(self, flags):
        _refuse("buffer")

    def tolist(self):
        _refuse("tolist")

    # --- dispatch
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        DISPATCHED.add((_ufunc_module(ufunc), ufunc.__name__ + ("" if method == "__call__" else "." + method)))
        where = f"{ufunc.__name__}.{method}"
        args = _unwrap(inputs, where)
        out = kwargs.get("out")
        if out is not None:
            kwargs["out"] = _unwrap(out, where)
        r = getattr(ufunc, method)(*args, **kwargs)
        if out is not None:
            return out[0] if len(out) == 1 else out
        if isinstance(r, np.generic):          # (CuPy gives 0-d arrays, never numpy scalars)
            return ForeignArray(np.asarray(r))
        return _wrap(r)

    def __array_function__(self, func, types, args, kwargs):
        DISPATCHED.add((func.__module__, func.__name__))
        where = func.__name__
        r = func(*_unwrap(args, where), **{k: _unwrap(v, where) for k, v in kwargs.items()})
        if isinstance(r, np.generic):
            return ForeignArray(np.asarray(r))
        return _wrap(r)

    # --- metadata
    shape = property(lambda self: self._a.shape)
    dtype = property(lambda self: self._a.dtype)
    ndim = property(lambda self: self._a.ndim)
    size = property(lambda self: self._a.size)
    strides = property(lambda self: self._a.strides)
    itemsize = property(lambda self: self._a.itemsize)
    nbytes = property(lambda self: self._a.nbytes)
    flags = property(lambda self: _Flags(self._a))
    T = property(lambda self: ForeignArray(self._a.T))

    # --- the methods CuPy's ndarray has, computing on the device
    def _m(name):
        def method(self, *args, **kwargs):
            r = getattr(self._a, name)(*_unwrap(args, name), **{k: _unwrap(v, name) for k, v in kwargs.items()})
            return ForeignArray(np.asarray(r)) if isinstance(r, np.generic) else _wrap(r)
        method.__name__ = name
        return method

    for _name in ("reshape", "transpose", "astype", "copy", "sum", "mean", "max", "min", "prod", "argmax", "argmin",
                  "any", "all", "ravel", "flatten", "swapaxes", "squeeze", "view", "fill", "cumsum", "clip",
                  "repeat", "take", "var", "std", "nonzero", "argsort", "sort", "dot", "conj"):
        locals()[_name] = _m(_name)
    del _name, _m

    def get(self):
        """CuPy's explicit copy to the host."""
        return np.array(self._a, copy=True)

    # --- scalar reads (CuPy allows them: they synchronize)
    def item(self):
        return self._a.item()

    def __bool__(self):
        return bool(self._a)

    def __int__(self):
        return int(self._a)

    def __float__(self):
        return float(self._a)

    def __index__(self):
        return self._a.__index__()

    def __len__(self):
        return len(self._a)

    def __iter__(self):
        return (ForeignArray(np.asarray(r)) if not isinstance(r, np.ndarray) else ForeignArray(r) for r in self._a)

    # --- indexing
    def __getitem__(self, index):
        r = self._a[_unwrap(index, "__getitem__")]
        return ForeignArray(np.asarray(r)) if isinstance(r, np.generic) else ForeignArray(r)

    def __setitem__(self, index, value):
        self._a[_unwrap(index, "__setitem__")] = _unwrap(value, "__setitem__")

    def __repr__(self):
        return f"ForeignArray({self._a!r})"


def _creation(fn):
    """A numpy creation function made on the FOREIGN device (host data copied in)."""
    def make(*args, **kwargs):
        args = [a._a if type(a) is ForeignArray else a for a in args]
        kwargs.pop("like", None)
        r = fn(*args, **kwargs)
        return _wrap(r) if not isinstance(r, np.generic) else ForeignArray(np.asarray(r))
    make.__name__ = fn.__name__
    return make


def _asarray(a, dtype=None, order=None, **kwargs):
    if type(a) is ForeignArray:
        if dtype is None or a.dtype == np.dtype(dtype):
            return a if order is None or a._a.flags.c_contiguous else ForeignArray(np.ascontiguousarray(a._a))
        return ForeignArray(a._a.astype(dtype))
    return ForeignArray(np.asarray(_host_only(a), dtype=dtype, order=order))


def _host_only(a):
    """Host data copied to the device (lists of device arrays are not host data)."""
    if isinstance(a, (list, tuple)) and any(type(x) is ForeignArray for x in a):
        raise msdev.DeviceMismatch("a list mixing FOREIGN arrays given to asarray (use stack)")
    return a


def _array(a, dtype=None, copy=True, order="K", **kwargs):
    if type(a) is ForeignArray:
        return ForeignArray(np.array(a._a, dtype=dtype, copy=copy, order=order))
    return ForeignArray(np.array(_host_only(a), dtype=dtype, copy=copy, order=order))


def _ascontiguousarray(a, dtype=None, **kwargs):
    if type(a) is ForeignArray:
        return ForeignArray(np.ascontiguousarray(a._a, dtype=dtype))
    return ForeignArray(np.ascontiguousarray(a, dtype=dtype))


class ForeignDevice(msdev.Device):
    """Target "FOREIGN": host memory that only the device itself may read."""

    target = "FOREIGN"
    array_type = ForeignArray
    xp = None
    accelerated = False

    def creation(self) -> dict:
        fns = {n: _creation(getattr(np, n)) for n in msdev.CREATION}
        fns.update(asarray=_asarray, asanyarray=_asarray, array=_array, ascontiguousarray=_ascontiguousarray)
        return fns

    def asarray(self, x, dtype=None):
        return _asarray(x, dtype)

    def from_host(self, a):
        if type(a) is ForeignArray:
            return a
        return ForeignArray(np.array(a, order="C", copy=True))

    def contiguous(self, x, dtype=None):
        return _ascontiguousarray(x, dtype)

    def to_host(self, x):
        return np.array(x._a, copy=True)

    def frozen(self, a):
        return ForeignArray(np.array(a._a, order="C", copy=True))


def install() -> None:
    msdev.register("FOREIGN", ForeignDevice)
