"""The device layer: one ``Device`` per ``device_target``, which the interpreter, the eager ops
and ``ms.Tensor`` are written against.

A Device owns what differs between a host and an accelerator: creating arrays (from host data
or from nothing), copies between host and device, streams, and memory taken and given back by
``ALLOC_DEVICE_MEM`` / ``FREE_DEVICE_MEM``. ``CPU`` is numpy (its arrays *are* the host's);
``GPU`` is CuPy (``CupyDevice``; it needs CUDA, see ``context.gpu_problem``). Tests register a
third (``register``), a host device whose arrays refuse every implicit conversion to numpy, to
prove that nothing on the path silently falls back to the host.

How the kernels reach the device (the decision, see README "The device layer"): the reference
kernels in ``interp/kernels.py`` stay written against numpy's functions. Computing functions
(ufuncs, ``np.where``, ``np.concatenate``, ``np.pad``, ``np.einsum``, scipy.special's ufuncs, ...)
dispatch on their arguments' type through NEP 13/18 (``__array_ufunc__``,
``__array_function__``), which CuPy implements, so a CuPy array in gives a CuPy array out with
no change to the kernel. What cannot dispatch on an argument is array *creation*
(``np.asarray``, ``np.full``, ``np.arange``, ...): kernels.py's ``np`` is ``XNP``, numpy's own
namespace in which exactly those names are rebound to the current device's (``CREATION``) when
the device changes. On the CPU they are numpy's own functions, the same objects, so the CPU path
costs nothing extra; the kernels' bodies are unchanged.

The current device follows ``set_context(device_target=...)`` and is process-wide, as MindSpore's
context is; a Code is linked for the device current when it is linked (changing the device
relinks, ``tensor.PARAMETER_SHAPES``).
"""

from __future__ import annotations

import threading
import types

import numpy as np

# the creation functions rebound in XNP per device: what cannot dispatch on an argument
CREATION = ("asarray", "asanyarray", "array", "ascontiguousarray", "empty", "zeros", "ones", "full", "arange",
            "indices", "eye")


class DeviceMismatch(RuntimeError):
    """A value on one device met a program or value on another."""


class Device:
    """What the interpreter needs from a device. Subclasses set ``target`` ("CPU", "GPU", ...),
    ``array_type`` and ``xp`` (the array module) and override what differs."""

    target = "?"
    array_type: type = np.ndarray
    accelerated = False          # whether compiled tiers (tiers.py / gpu_tiers.py) serve its sites
    # (gpu_tiers.accelerator_for makes a CUDA device's kernel runtime; a test device that stands in
    # for a GPU defines ``gpu_runtime()`` returning its own: the device layer imports no compiler)

    def __init__(self, device_id: int = 0):
        self.id = device_id
        self.name = f"{self.target}:{device_id}"
        self.lock = threading.Lock()
        self.live = {}           # (frame id, stream id) -> Workspace, between ALLOC and FREE
        self.stats = {"allocs": 0, "frees": 0}

    def __repr__(self):
        return f"<msvm device {self.name}>"

    # --- arrays
    def holds(self, x) -> bool:
        """Whether x (an array of this device's type) is in this device's memory."""
        return True

    @staticmethod
    def owns_host(x) -> bool:
        """Whether x is a host (numpy) array, which this device must copy in before use."""
        return type(x) is np.ndarray

    def creation(self) -> dict:
        """The functions XNP binds for this device (numpy's names, numpy's signatures)."""
        return {n: getattr(self.xp, n) for n in CREATION}

    def asarray(self, x, dtype=None):
        return self.xp.asarray(x, dtype=dtype)

    def contiguous(self, x, dtype=None):
        """x (an array of this device) as a C-contiguous array of dtype (no copy when it is one)."""
        return self.xp.ascontiguousarray(x, dtype=dtype)

    def from_host(self, a: np.ndarray):
        """A device copy of a host array (C order)."""
        return self.xp.asarray(a, order="C")

    def to_host(self, x) -> np.ndarray:
        """An explicit copy to the host (the only way a device array becomes numpy)."""
        return x

    def frozen(self, a):
        """A Parameter's array: a private copy that owns its data, read-only where the device can
        say so (numpy can; CuPy arrays have no read-only flag)."""
        return self.xp.array(a, order="C", copy=True)

    def synchronize(self) -> None:
        """Wait for the work queued on this device."""

    # --- streams and memory (ALLOC_DEVICE_MEM / FREE_DEVICE_MEM)
    def stream(self, stream_id: int):
        """The stream with this id (0: the default stream); kernels launch on the current one."""
        return NullStream(stream_id)

    def alloc(self, frame_key, stream_id: int) -> Workspace:
        """ALLOC_DEVICE_MEM: open the frame's workspace on a stream, which becomes current."""
        ws = Workspace(self, stream_id, self.stream(stream_id))
        with self.lock:
            if (frame_key, stream_id) in self.live:
                raise RuntimeError(f"ALLOC_DEVICE_MEM: the workspace on {self.name} stream {stream_id} is "
                                   "already taken by this frame (no FREE_DEVICE_MEM in between)")
            self.live[(frame_key, stream_id)] = ws
            self.stats["allocs"] += 1
        ws.enter()
        return ws

    def free(self, frame_key, stream_id: int) -> Workspace:
        """FREE_DEVICE_MEM: give the workspace back (its buffers return to the device's pool on
        that stream) and make the previous stream current again."""
        with self.lock:
            ws = self.live.pop((frame_key, stream_id), None)
            if ws is None:
                raise RuntimeError(f"FREE_DEVICE_MEM: no workspace on {self.name} stream {stream_id} is open in "
                                   "this frame (FREE without ALLOC)")
            self.stats["frees"] += 1
        ws.exit()
        return ws

    def release(self, frame_key) -> None:
        """Give back every workspace a frame left open (it raised between ALLOC and FREE)."""
        with self.lock:
            open_ = [k for k in self.live if k[0] is frame_key]
            wss = [self.live.pop(k) for k in open_]
        for ws in reversed(wss):
            ws.exit()

    def pool_bytes(self) -> int:
        """Bytes the device's memory pool holds (0 where there is no pool)."""
        return 0


class NullStream:
    """A stream on a device that runs everything in order (the CPU)."""

    def __init__(self, stream_id: int):
        self.id = stream_id

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def synchronize(self) -> None:
        return None


class Workspace:
    """One frame's memory on one stream, between ALLOC_DEVICE_MEM and FREE_DEVICE_MEM: the output
    buffers its instructions keep (the frame's ``bufs``) belong to it and are dropped at FREE."""

    __slots__ = ("device", "stream_id", "stream", "entered")

    def __init__(self, device, stream_id, stream):
        self.device, self.stream_id, self.stream, self.entered = device, stream_id, stream, False

    def enter(self):
        self.stream.__enter__()
        self.entered = True

    def exit(self):
        if self.entered:
            self.entered = False
            self.stream.__exit__(None, None, None)


class CpuDevice(Device):
    """numpy: the host's own arrays. Everything here is numpy's own function, so the CPU path
    is what it was before the device layer."""

    target = "CPU"
    array_type = np.ndarray
    xp = np
    accelerated = True

    def asarray(self, x, dtype=None):
        return np.asarray(x, dtype=dtype)

    def from_host(self, a):
        return a

    def to_host(self, x):
        return x

    def frozen(self, a):
        out = np.array(a, order="C", copy=True)
        out.flags.writeable = False
        return out


class CupyDevice(Device):
    """CuPy on one NVIDIA GPU: arrays in device memory, copies through ``cupy.asarray`` /
    ``.get()``, streams are ``cupy.cuda.Stream`` (non-blocking), memory is CuPy's default pool
    (stream-ordered: a buffer freed on a stream is reused on it)."""

    target = "GPU"
    accelerated = True

    def __init__(self, device_id: int = 0):
        from .context import gpu_problem

        problem = gpu_problem()
        if problem is not None:
            raise RuntimeError(f"msvm GPU device: {problem}")
        import cupy

        super().__init__(device_id)
        self.xp = cupy
        self.array_type = cupy.ndarray
        self.cuda_device = cupy.cuda.Device(device_id)
        self.cuda_device.use()
        self.streams = {0: cupy.cuda.Stream.null}
        self.pool = cupy.get_default_memory_pool()

    def creation(self) -> dict:
        fns = super().creation()
        fns["indices"] = self.indices
        return fns

    def indices(self, dimensions, dtype=int, sparse=False):
        """numpy's ``indices`` with ``sparse`` (cupy.indices has no sparse form)."""
        cp = self.xp
        if not sparse:
            return cp.indices(dimensions, dtype=dtype)
        n = len(dimensions)
        return tuple(cp.arange(d, dtype=dtype).reshape((1,) * k + (d,) + (1,) * (n - k - 1))
                     for k, d in enumerate(dimensions))

    def holds(self, x) -> bool:
        return x.device.id == self.id

    def from_host(self, a):
        return self.xp.asarray(a, order="C")

    def to_host(self, x):
        return self.xp.asnumpy(x)

    def synchronize(self):
        self.xp.cuda.get_current_stream().synchronize()

    def stream(self, stream_id: int):
        s = self.streams.get(stream_id)
        if s is None:
            with self.lock:
                s = self.streams.setdefault(stream_id, self.xp.cuda.Stream(non_blocking=True))
        return s

    def pool_bytes(self) -> int:
        return int(self.pool.total_bytes())


# ---------------------------------------------------------------- the registry and the current device

_FACTORIES = {"CPU": CpuDevice, "GPU": CupyDevice}
_devices: dict = {}
_lock = threading.Lock()

CPU = CpuDevice(0)
_devices[("CPU", 0)] = CPU

# kernels.py's ``np``: numpy's namespace, creation rebound per device
XNP = types.ModuleType("msvm.device.xnp", "numpy, with array creation on the current device")
XNP.__dict__.update({k: v for k, v in vars(np).items() if not k.startswith("__") or k == "__getattr__"})
XNP.__dict__.update(CPU.creation())

_current = [CPU]
_recent: list = [CPU]     # devices by when they were last made current
# every array type a device makes (the kernels' test "is this an array or a Python scalar?")
ARRAYS = (np.ndarray, np.generic)


def register(target: str, factory) -> None:
    """Make ``set_context(device_target=target)`` build its device with ``factory(device_id)``
    (tests register a foreign host device this way)."""
    with _lock:
        _FACTORIES[target] = factory
        for key in [k for k in _devices if k[0] == target]:
            del _devices[key]


def targets() -> tuple:
    return tuple(_FACTORIES)


def get(target: str, device_id: int = 0) -> Device:
    """The device object for a target (made once per target and id)."""
    global ARRAYS
    key = (target, int(device_id))
    dev = _devices.get(key)
    if dev is None:
        with _lock:
            dev = _devices.get(key)
            if dev is None:
                if target not in _FACTORIES:
                    raise ValueError(f"device_target {target!r}: msvm knows {', '.join(_FACTORIES)}")
                dev = _devices[key] = _FACTORIES[target](int(device_id))
                if dev.array_type not in ARRAYS:
                    ARRAYS = ARRAYS + (dev.array_type,)
    return dev


def current() -> Device:
    return _current[0]


def use(dev: Device) -> Device:
    """Make dev current (``set_context`` calls this); returns the previous device."""
    old = _current[0]
    if dev is not old:
        XNP.__dict__.update(dev.creation())
        _current[0] = dev
        with _lock:
            if dev in _recent:
                _recent.remove(dev)
            _recent.insert(0, dev)
    return old


def device_of(x) -> Device | None:
    """The device an array lives on (None for Python scalars and other values)."""
    t = type(x)
    if t is np.ndarray or isinstance(x, np.generic):
        return CPU
    for dev in list(_recent):       # most recently current first (test devices may share an array type)
        if t is dev.array_type and dev.holds(x):
            return dev
    for dev in list(_devices.values()):
        if t is dev.array_type and dev.holds(x):
            return dev
    return None


def is_array(x) -> bool:
    return isinstance(x, ARRAYS)


def name_of(x) -> str:
    dev = device_of(x)
    return dev.name if dev is not None else type(x).__name__


def to_host(x):
    """Any array (or nested tuple of arrays) as numpy, copied from its device when it has one."""
    if type(x) is np.ndarray:
        return x
    if isinstance(x, tuple):
        return tuple(to_host(v) for v in x)
    dev = device_of(x)
    return dev.to_host(x) if dev is not None else x


def check_same(what: str, values, dev: Device | None = None) -> Device:
    """The one device all arrays among values live on (default: the current one); a
    DeviceMismatch naming both devices otherwise."""
    dev = dev or _current[0]
    for v in values:
        if isinstance(v, tuple):
            check_same(what, v, dev)
            continue
        if type(v) is dev.array_type or isinstance(v, np.generic):
            continue
        other = device_of(v)
        if other is not None and other is not dev:
            raise DeviceMismatch(f"{what}: a tensor on {other.name} met a tensor on {dev.name}; make both on one "
                                 "device (ms.Tensor(t.asnumpy()) copies t to the current device_target)")
    return dev


def device_of_any(values) -> Device:
    """The device of the first array among values (nested tuples too); the current one if none."""
    return _first_device(values) or _current[0]


def _first_device(values):
    for v in values:
        d = _first_device(v) if isinstance(v, tuple) else None if isinstance(v, np.generic) else device_of(v)
        if d is not None:
            return d
    return None
