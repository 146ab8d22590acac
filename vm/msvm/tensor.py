"""``ms.Tensor`` and ``ms.Parameter``.

A Tensor holds an array of its device (numpy on the CPU, CuPy on the GPU: ``msvm/device.py``;
a Tensor made from host data goes to the current device) or is a *placeholder* with a shape whose
dims may be None (``Tensor(shape=[None, 768], dtype=ms.float32)``), used by
``Cell.set_inputs``. Operators and methods call ``msvm.ops`` functions, so the
same code runs eagerly on Tensors and symbolically on the frontend's graph
values (``TensorMethods`` is installed on both).
"""

from __future__ import annotations

import numpy as np

from . import device as _device
from . import dtype as dt

# the placeholder shape of ``Tensor(dtype=...)``: its rank is not known either (set_inputs: each
# call's rank gets a variant whose dims are all dynamic)
DYNAMIC_RANK = ("<dynamic rank>",)


class TensorMethods:
    """Operators and methods shared by Tensor and the frontend's graph values."""

    __slots__ = ()

    def __add__(self, o): return _ops().add(self, o)
    def __radd__(self, o): return _ops().add(o, self)
    def __sub__(self, o): return _ops().sub(self, o)
    def __rsub__(self, o): return _ops().sub(o, self)
    def __mul__(self, o): return _ops().mul(self, o)
    def __rmul__(self, o): return _ops().mul(o, self)
    def __truediv__(self, o): return _ops().div(self, o)
    def __rtruediv__(self, o): return _ops().div(o, self)
    def __floordiv__(self, o): return _ops().floor_divide(self, o)
    def __rfloordiv__(self, o): return _ops().floor_divide(o, self)
    def __pow__(self, o): return _ops().pow(self, o)
    def __rpow__(self, o): return _ops().pow(o, self)
    def __mod__(self, o): return _ops().remainder(self, o)
    def __rmod__(self, o): return _ops().remainder(o, self)
    def __matmul__(self, o): return _ops().matmul(self, o)
    def __rmatmul__(self, o): return _ops().matmul(o, self)
    def __neg__(self): return _ops().neg(self)
    def __pos__(self): return self
    def __abs__(self): return _ops().abs(self)
    def __lt__(self, o): return _ops().less(self, o)
    def __le__(self, o): return _ops().less_equal(self, o)
    def __gt__(self, o): return _ops().greater(self, o)
    def __ge__(self, o): return _ops().greater_equal(self, o)
    def __eq__(self, o): return _ops().equal(self, o)
    def __ne__(self, o): return _ops().not_equal(self, o)
    def __and__(self, o): return _ops().and_(self, o)
    def __rand__(self, o): return _ops().and_(o, self)
    def __or__(self, o): return _ops().or_(self, o)
    def __ror__(self, o): return _ops().or_(o, self)
    def __xor__(self, o): return _ops().xor_(self, o)
    def __rxor__(self, o): return _ops().xor_(o, self)
    def __invert__(self): return _ops().invert_(self)
    __hash__ = object.__hash__

    def reshape(self, *shape):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        return _ops().reshape(self, shape)

    def view(self, *shape):
        return self.reshape(*shape)

    def transpose(self, *perm):
        if len(perm) == 1 and isinstance(perm[0], (tuple, list)):
            perm = tuple(perm[0])
        if not perm:
            perm = tuple(range(len(self.shape)))[::-1]
        return _ops().transpose(self, perm)

    def permute(self, *perm):
        return self.transpose(*perm)

    def swapaxes(self, a, b):
        perm = list(range(len(self.shape)))
        perm[a], perm[b] = perm[b], perm[a]
        return _ops().transpose(self, tuple(perm))

    def astype(self, dtype):
        return _ops().cast(self, dtype)

    def to(self, dtype=None):
        return self if dtype is None else _ops().cast(self, dtype)

    def float(self):
        return _ops().cast(self, dt.float32)

    def sum(self, axis=None, keepdims=False):
        return _ops().sum(self, axis, keepdims)

    def mean(self, axis=None, keep_dims=False):
        return _ops().mean(self, axis, keep_dims)

    def max(self, axis=None, keepdims=False):
        return _ops().amax(self, axis, keepdims)

    def min(self, axis=None, keepdims=False):
        return _ops().amin(self, axis, keepdims)

    def argmax(self, axis=None, keepdims=False):
        return _ops().argmax(self, axis, keepdims)

    def expand_dims(self, axis):
        return _ops().expand_dims(self, axis)

    def unsqueeze(self, dim):
        return _ops().expand_dims(self, dim)

    def squeeze(self, axis=None):
        return _ops().squeeze(self, axis)

    # exp, log, sin, add, ... : made from msvm/ops/registry.py (one definition per op for its
    # function, primitive and method), installed when msvm.ops is imported

    def flatten(self, start_dim=0, end_dim=-1):
        return _ops().flatten(self, start_dim=start_dim, end_dim=end_dim)

    # (model zoo) methods the NLP models call
    def broadcast_to(self, shape):
        return _ops().broadcast_to(self, shape)

    def expand_as(self, other):
        return _ops().broadcast_to(self, tuple(other.shape))

    def repeat(self, repeats, axis=None):
        """MindSpore's Tensor.repeat: np.repeat (each element repeats times along axis)."""
        return _ops().repeat_interleave(self, repeats, axis)

    def tile(self, reps):
        return _ops().tile(self, reps)

    def masked_fill(self, mask, value):
        return _ops().masked_fill(self, mask, value)

    def cumsum(self, axis=None, dtype=None):
        return _ops().cumsum(self, 0 if axis is None else axis, dtype)

    def split(self, split_size_or_sections, axis=0):
        return _ops().split(self, split_size_or_sections, axis)

    def type_as(self, other):
        return _ops().cast(self, other.dtype)

    def pow(self, o):
        return _ops().pow(self, o)

    def matmul(self, o):
        return _ops().matmul(self, o)

    @property
    def T(self):
        return self.transpose()

    @property
    def ndim(self):
        return len(self.shape)

    def dim(self):
        return len(self.shape)


_OPS = None


def _ops():
    global _OPS
    if _OPS is None:
        from . import ops
        _OPS = ops
    return _OPS


class Tensor(TensorMethods):
    """A tensor on the CPU (numpy), or a placeholder with a symbolic shape."""

    __slots__ = ("_data", "_pshape", "_dtype", "__weakref__")

    def __init__(self, input_data=None, dtype=None, shape=None, init=None, const_arg=False):
        if isinstance(input_data, Tensor):
            input_data = input_data._data if input_data._data is not None else None
            if input_data is None:
                raise ValueError("Tensor(placeholder) copies nothing; pass shape= and dtype= instead")
        if input_data is None:
            if shape is None and dtype is not None and init is None:    # (issue 21) MindSpore's dynamic rank
                self._data, self._pshape, self._dtype = None, DYNAMIC_RANK, dt.as_dtype(dtype)
                return
            if shape is None:
                raise ValueError("Tensor() needs input_data, or shape= and dtype= for a placeholder")
            if isinstance(shape, int):
                shape = (shape,)
            for d in shape:
                if d is not None and not isinstance(d, str) and (not isinstance(d, int) or d < -1):
                    raise ValueError(f"placeholder dims are ints, None or -1 (dynamic), or names; got {d!r}")
            self._data = None
            self._pshape = tuple(None if d == -1 else d for d in shape)
            self._dtype = dt.as_dtype(dtype) if dtype is not None else dt.float32
            if init is not None:
                self._materialize(init)
            return
        d = dt.as_dtype(dtype) if dtype is not None else None
        if not isinstance(input_data, (np.ndarray, np.generic)) and isinstance(input_data, _device.ARRAYS):
            arr = input_data                   # an array of a device: it stays there
            d = d or dt.from_numpy(arr.dtype)
            dev = _device.device_of(arr)
            self._data = arr if arr.dtype == d.np and arr.flags.c_contiguous else dev.contiguous(arr, d.np)
            self._pshape = None
            self._dtype = d
            return
        if isinstance(input_data, np.ndarray):
            arr = input_data
            if d is None:
                d = dt.from_numpy(arr.dtype)
            arr = _contiguous(arr, d)
        else:
            if isinstance(input_data, (bool, np.bool_)):
                d = d or dt.bool_
            elif isinstance(input_data, (int, np.integer)) and d is None:
                d = dt.int64
            elif isinstance(input_data, float) and d is None:
                d = dt.float32
            arr = np.array(input_data)
            if d is None:
                d = dt.float32 if arr.dtype.kind == "f" else dt.from_numpy(arr.dtype)
            arr = _contiguous(arr, d)
        dev = _device._current[0]
        self._data = arr if dev is _device.CPU else dev.from_host(arr)
        self._pshape = None
        self._dtype = d

    def _materialize(self, init):
        if any(x is None or isinstance(x, str) for x in self._pshape):
            raise ValueError("init= needs a fully known shape")
        shape = self._pshape
        if init in ("zeros", "zero"):
            arr = np.zeros(shape)
        elif init in ("ones", "one"):
            arr = np.ones(shape)
        elif init == "normal":
            arr = np.random.normal(0.0, 0.01, shape)
        else:                           # an Initializer object or another name (halonet's TruncatedNormal(sigma=.02))
            from .common.initializer import as_initializer

            arr = as_initializer(init)(shape)
        self._data = _device.current().from_host(arr.astype(self._dtype.np))
        self._pshape = None

    @classmethod
    def from_numpy(cls, arr):
        return cls(np.asarray(arr))

    # --- in-place updates (issue 21: MindSpore's Assign, AssignAdd, ScatterNdAdd ... in PyNative)
    def assign_value(self, value):
        """MindSpore's Tensor.assign_value: this tensor holds ``value`` now; returns self."""
        self._set_value(value)
        return self

    def _set_value(self, value) -> np.ndarray:
        """Make this tensor hold ``value`` (same shape, cast to its dtype): a new array is put in
        place, so views taken before keep the old values and nothing shares the new one."""
        self._data = _checked_new_data(self, value, _copied)
        return self._data

    # --- metadata
    @property
    def shape(self) -> tuple:
        if self._pshape is DYNAMIC_RANK:
            return (-2,)                 # MindSpore's shape of a tensor of unknown rank
        if self._data is None:
            return tuple(-1 if (d is None or isinstance(d, str)) else d for d in self._pshape)
        return self._data.shape

    @property
    def placeholder_shape(self) -> tuple | None:
        """The declared dims of a placeholder (None / names for dynamic ones), else None."""
        return self._pshape

    @property
    def is_placeholder(self) -> bool:
        return self._data is None

    @property
    def dtype(self) -> dt.DType:
        return self._dtype

    @property
    def size(self) -> int:
        return int(np.prod(self.shape)) if self._data is not None else -1

    @property
    def device(self) -> str:
        """Where the data lives: "CPU:0", "GPU:0" (a placeholder: the current device)."""
        return _device.name_of(self._data) if self._data is not None else _device.current().name

    @property
    def strides(self) -> tuple:
        self._need_data()
        return tuple(s // self._data.itemsize for s in self._data.strides)

    def __len__(self):
        return self.shape[0]

    # --- data
    def _need_data(self):
        if self._data is None:
            raise ValueError(f"placeholder Tensor(shape={list(self._pshape)}, dtype={self._dtype}) has no data")

    def init_data(self):
        """MindSpore materialises a lazily initialised Tensor here; msvm's hold their data already."""
        return self

    def asnumpy(self) -> np.ndarray:
        """The data as numpy: the array itself on the CPU, a copy from a device's memory; a copy where the
        array is read-only (a Parameter's, or a view of one: ``param.view(...).asnumpy()``), writable as
        MindSpore's is. Writing into a Parameter's copy does not change the Parameter; ``set_data`` (or
        ``ops.assign``) does, as MindSpore code must on Ascend and GPU, where asnumpy copies too (mindyolo's
        heads edit their biases so: ``b = conv.bias.asnumpy(); b[:nc] = ...; ops.assign(conv.bias, Tensor(b))``)."""
        a = self._host()
        return a if a is not self._data or a.flags.writeable else a.copy()

    def _host(self) -> np.ndarray:
        """The data as a host numpy array, as it is (read-only for a Parameter): for reading."""
        self._need_data()
        a = self._data
        return a if type(a) is np.ndarray else _device.to_host(a)

    def numpy(self) -> np.ndarray:
        return self.asnumpy()

    def __array__(self, dtype=None, copy=None):
        a = self._host()
        if copy:                    # (np.array(t): an array of its own, whatever the Tensor's is)
            a = a.copy()
        return a if dtype is None else a.astype(dtype)

    def item(self):
        self._need_data()
        return self._data.item()

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __bool__(self):
        self._need_data()
        return bool(self._data)

    def __getitem__(self, index):
        self._need_data()
        dev = _device.device_of(self._data) or _device.current()
        r = self._data[_on(dev, index, "x[index]: the index")]
        return Tensor(np.asarray(r) if type(r) is np.ndarray or isinstance(r, np.generic) else r)

    def __setitem__(self, index, value):
        """``x[index] = value`` eagerly (PYNATIVE), in place as MindSpore's; value cast to x's dtype.
        A Parameter (mindcv's convit edits ``weight.data[i, j]`` while it initializes) takes the edited
        copy through set_data: a new read-only array and version, so nothing prepared from the old one
        (a packed or transposed weight, a compiled convolution's folded weight) is used again."""
        self._need_data()
        dev = _device.device_of(self._data) or _device.current()
        data = self._data.copy()           # (the array may be shared with numpy or read-only)
        index = _on(dev, index, "x[index] = value: the index")
        value = _on(dev, value, "x[index] = value: the value")
        if isinstance(value, _device.ARRAYS):
            value = value.astype(data.dtype)
        else:
            value = dev.from_host(np.asarray(value, data.dtype))
        data[index] = value
        if isinstance(self, Parameter):
            self.set_data(data)
        else:
            self._data = data

    def __repr__(self):
        if self._data is None:
            return f"Tensor(shape={list(self.shape if self._pshape is DYNAMIC_RANK else self._pshape)}, " \
                   f"dtype={self._dtype}, placeholder)"
        return f"Tensor(shape={list(self.shape)}, dtype={self._dtype}, value=\n{self.asnumpy()})"

    def __str__(self):
        return str(self.asnumpy()) if self._data is not None else repr(self)


def _on(dev, v, what: str):
    """An index or value as dev uses it: a Tensor's array must be on dev (a DeviceMismatch naming
    both devices otherwise), host data (a numpy array, a list) is copied to dev."""
    if isinstance(v, Tensor):
        v._need_data()
        _device.check_same(what, [v._data], dev)
        return v._data
    if type(v) is np.ndarray and dev is not _device.CPU:
        return dev.from_host(v)
    return v


def _contiguous(arr, d: dt.DType) -> np.ndarray:
    """A C-contiguous array of dtype d with arr's shape: a 0-d array stays 0-d
    (``np.ascontiguousarray`` would make it 1-d, so ``Tensor(np.array(768.))`` had shape (1,))."""
    return np.asarray(arr, dtype=d.np, order="C")


class Parameter(Tensor):
    """A named, trainable Tensor held by a Cell.

    Its array is a private, read-only copy: a weight changes only through ``set_data`` (as in
    MindSpore, where ``asnumpy()`` is not a handle for writing a parameter). So the compiler may
    keep derived forms of a weight, such as the transposed copy a matmul prefers, for as long
    as the same array is in place."""

    __slots__ = ("name", "requires_grad", "version")

    def __init__(self, default_input, name=None, requires_grad=True, layerwise_parallel=False,
                 parallel_optimizer=True, storage_format="", device=None):
        if isinstance(default_input, Tensor) and default_input.is_placeholder:
            Tensor.__init__(self, shape=default_input.placeholder_shape, dtype=default_input.dtype)
        elif isinstance(default_input, Tensor):
            default_input._need_data()
            Tensor.__init__(self, default_input._data)
        elif isinstance(default_input, (int, float)) and not isinstance(default_input, bool):
            Tensor.__init__(self, np.array(default_input, dtype=np.float32))
        else:
            Tensor.__init__(self, default_input)
        if self._data is not None:
            self._data = _frozen(self._data)
        self.name = name
        self.requires_grad = requires_grad
        self.version = 0        # bumped by every write (set_data, assign_value)

    def set_data(self, data, slice_shape=False):
        """The new value, kept on this Parameter's device (host data is copied there). ``slice_shape``
        is MindSpore's for a Parameter sliced across devices: one device here, nothing to do. A
        placeholder (the static view's: no data) makes this Parameter a placeholder of its dims."""
        if isinstance(data, Tensor) and data.is_placeholder:
            self._data, self._pshape = None, data.placeholder_shape
            self.version += 1
            PARAMETER_SHAPES[0] += 1
            return self
        new = data._data if isinstance(data, Tensor) else data
        old = self._data
        dev = (_device.device_of(old) if old is not None else None) or _device.current()
        if type(new) is not dev.array_type:
            new = dev.from_host(np.asarray(_device.to_host(new)))
        self._data = _frozen(dev.asarray(new, dtype=self._dtype.np))
        self.version += 1
        if old is None or old.shape != self._data.shape:
            if old is not None:
                from . import reasons

                reasons.parameter_reshaped(self.name, old.shape, self._data.shape)
            PARAMETER_SHAPES[0] += 1
        return self

    @property
    def data(self):
        """The Parameter itself, as MindSpore's ``Parameter.data`` (mindcv's coat and convit read
        ``self.cls_token.data.shape`` to initialize it)."""
        return self

    def value(self):
        """The Parameter's value as a Tensor (MindSpore's ``Parameter.value()``; in construct, the Parameter)."""
        self._need_data()
        return Tensor(self._data)

    def _set_value(self, value) -> np.ndarray:
        """The in-place update MindSpore's Assign (and the scatters on a Parameter) make: the
        Parameter gets a new read-only array with ``value`` (its shape, cast to its dtype) and
        its version bumps. Anything derived from the old array (a transposed copy, a data
        pointer) is keyed on that array object, which is not reused, so it is not taken for the
        new data. Called by ASSIGN_PARAM at every tier and by the eager ops (assign_value)."""
        self._data = _checked_new_data(self, value, _frozen_in_memory)
        self.version += 1
        return self._data

    def __repr__(self):
        return f"Parameter(name={self.name}, shape={list(self.shape)}, dtype={self._dtype})"


# bumped when set_data gives a Parameter another shape: bytecode verified for the old shape is
# stale, so runners drop their compiled variants and compile (and verify) again on their next call
PARAMETER_SHAPES = [0]


def _checked_new_data(t: Tensor, value, make):
    """value as t's new array (t's shape, broadcast where it may be; t's dtype), made by ``make``
    from an array on t's device (host values are copied there)."""
    if t._data is None:
        raise ValueError("a placeholder tensor holds no data to update")
    dev = _device.device_of(t._data) or _device.current()
    new = value._data if isinstance(value, Tensor) else value
    if type(new) is not dev.array_type:
        new = dev.from_host(np.asarray(_device.to_host(new)))
    if new.shape != t._data.shape:
        if new.size == 1 and new.ndim <= t._data.ndim or new.ndim < t._data.ndim:
            new = np.broadcast_to(new, t._data.shape)     # numpy's, or the device's by dispatch
        else:
            raise ValueError(f"cannot assign a value of shape {list(new.shape)} to a tensor of shape "
                             f"{list(t._data.shape)}")
    return make(dev.asarray(new, dtype=t._dtype.np))


def _copied(a):
    """A C-contiguous copy that owns its data, on a's device."""
    dev = _device.device_of(a)
    return (dev.creation()["array"] if dev is not None else np.array)(a, order="C", copy=True)


class ParameterTuple(tuple):
    """MindSpore's ParameterTuple: a tuple of Parameters (unique names) a Cell holds as one attribute;
    each is the Cell's Parameter ``<attribute>.<index>`` (its path, as a CellList's Cells are), and
    construct reads ``self.attr[i]`` as it reads any Parameter (mindcv's crossvit keeps its per-branch
    position embeddings and class tokens so)."""

    def __new__(cls, iterable=()):
        items = tuple(iterable)
        for p in items:
            if not isinstance(p, Parameter):
                raise TypeError(f"ParameterTuple: its items must be Parameters, got {type(p).__name__}")
        names = [p.name for p in items if p.name is not None]
        if len(set(names)) != len(names):
            raise ValueError(f"ParameterTuple: the Parameters' names must differ, got {names}")
        return super().__new__(cls, items)

    def clone(self, prefix, init="same"):
        """A ParameterTuple of copies named ``prefix.<name>`` (``init``: 'same', or an initializer name)."""
        from .common.initializer import initializer

        out = []
        for p in self:
            data = Tensor(np.array(p._data)) if init == "same" else initializer(init, p.shape, p.dtype)
            out.append(Parameter(data, name=f"{prefix}.{p.name}", requires_grad=p.requires_grad))
        return ParameterTuple(out)


def _frozen(a):
    """A Parameter's new array (set at its making and by ``set_data``): a C-contiguous private copy
    on a's device, read-only where the device can say so (numpy can); a large numpy one is in the
    weight store (weights.py: mapped from a private file, so a weight the compiler prepared is held
    once)."""
    if type(a) is np.ndarray or isinstance(a, np.generic):
        from . import weights

        return weights.store(a)
    return _device.device_of(a).frozen(a)


def _frozen_in_memory(a):
    """``_frozen`` without the store: ASSIGN_PARAM's in-place updates (a running mean, a counter,
    an optimizer's step) are made at every call, and stay in memory."""
    if type(a) is np.ndarray or isinstance(a, np.generic):
        from . import weights

        return weights.in_memory(a)
    return _device.device_of(a).frozen(a)


def wrap(v):
    """Results as the caller gets them: ndarrays become Tensors, and so do numpy scalars (numpy
    gives one for an op on 0-d arrays; it is a 0-d tensor of its dtype); tuples stay tuples
    (of wrapped items); Python scalars stay."""
    if isinstance(v, np.ndarray) or (isinstance(v, _device.ARRAYS) and not isinstance(v, np.generic)):
        t = Tensor.__new__(Tensor)          # (numpy's array first: the common case; or a device's, CuPy's)
        t._data = v
        t._pshape = None
        t._dtype = dt.from_numpy(v.dtype)
        return t
    if isinstance(v, tuple):
        return tuple(wrap(x) for x in v)
    if isinstance(v, np.generic):
        return wrap(np.asarray(v))
    return v


def unwrap(v):
    """Tensors become ndarrays (the VM's runtime values)."""
    if isinstance(v, Tensor):
        v._need_data()
        return v._data
    if isinstance(v, (tuple, list)):
        return tuple(unwrap(x) for x in v)
    return v


def _install_graph_methods():
    """Give the frontend's graph values the same operators and methods as Tensor,
    so construct code reads the same in GRAPH_MODE and PYNATIVE_MODE."""
    from .frontend.graph import GraphValue

    for name, value in vars(TensorMethods).items():
        if name in ("__slots__", "__module__", "__doc__", "__qualname__", "__dict__", "__weakref__"):
            continue
        setattr(GraphValue, name, value)


_install_graph_methods()
