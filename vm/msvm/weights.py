"""The weight store: a Parameter's large arrays live in private files, mapped read-only, so that a
weight the compiler has prepared (packed, transposed) is held once (issue 18: memory).

A Parameter's array is a private read-only copy (tensor.py). One of at least ``STORE_MIN`` bytes is
written to an unlinked file in this user's private directory (``~/.cache/msvm/weights``, 0700; the
file has no name, so no other process can open it, and its blocks are freed when the array dies)
and mapped back read-only (``PROT_READ``, ``MAP_SHARED``): an ordinary, C-contiguous numpy array
whose pages the kernel maps in as they are read.

Where a kernel reads a prepared form of the weight instead of the weight (the packed panels of a
Dense's product, compiler/gemm.py; a contiguous transpose), the site that made it calls ``spill``:
the array's pages leave the process (``madvise(MADV_DONTNEED)``: the values stay in the file), and
any later read of the array (``asnumpy``, the interpreter on a first call at a new shape, another
kernel) maps them back from the file, with the same values. So the process holds the weight once,
prepared, as onnxruntime does after it prepacks an initializer and frees the original, while the
Parameter still reads as itself everywhere: no placeholder, no second path for reading a weight.

Measured (AMD Zen 3 guest, 40 arrays of 9 MB): writing and mapping 1.56 s, about what the first
touch of as much fresh anonymous memory costs here (14 us a page); a read of spilled pages maps
them back at 0.3 us a page (27 ms for 360 MB), reads of mapped pages as fast as anonymous memory.

What a spill saves is resident memory: the pages leave the process at once, and they stay in the
kernel's page cache (where a container's memory limit still counts them) until they are written
back, after which the kernel may drop them as it needs the memory; they are written once, when the
array is made. A read after a spill maps the pages back until the next spill: a site spills the
weights it holds prepared again after each of its compiles (the calls that waited for it ran the
interpreter, which reads the weights: compiler/tiers.py ``Site.respill``), and one row by a stored
weight runs packed too (planning.plan_matmul: a classifier at batch 1, a decoder's steps after its
prompt), so those calls do not bring the pages back.

Not stored (kept in anonymous memory, as before): arrays under ``STORE_MIN``; a directory on a
memory filesystem (tmpfs, ramfs: the "file" would be memory, and spilling would only move it out of
the resident set's count) or a network one (NFS, SMB, FUSE...); a directory msvm did not make that
is open to other users, or that belongs to another user (never chmod'ed behind the user's back);
one that cannot be made or written (the first failure is logged and the store stays off for the
process); ``MSVM_WEIGHT_STORE=off`` (``on``: the default directory; an absolute path: that one).
ASSIGN_PARAM's updates stay in memory (tensor.py); ``set_data`` writes its new array (a weight
replaced 500 times over: 2.6 s against 1.1 s in memory, for 4 MB).
"""

from __future__ import annotations

import ctypes
import mmap
import os
import tempfile
import threading

import numpy as np

# bytes: smaller arrays stay in anonymous memory. 64 KB (16 pages): ResNet-50's 3x3 weights of 64 and 128
# channels (147 and 590 KB) are prepared (Winograd's transform, gemm_cout's panels) like the large ones, and
# were held twice below 1 MB (peak resident of a steady forward at 224, one core, bench/peers.py's memory
# child, Intel Xeon: 141.8 -> 137.7 MB, onnxruntime 135.7)
STORE_MIN = 64 << 10
# bytes per write: the page cache keeps the file in pieces of this size (folios), and a read maps the
# piece around it. Written at once, ext4 on Linux 6.18 made 2 MB pieces: 16 random rows of GPT-2's
# 154 MB token table (a gather) mapped 27 MB, 144 rows 131 MB (all of it at S=128); in 64 KB writes
# 1.1 MB and 9.6 MB, the 154 MB written in 0.06 s instead of 0.04.
WRITE_BYTES = 64 << 10
ENV = "MSVM_WEIGHT_STORE"    # "off": every array stays in anonymous memory; a path: the directory
MEMORY_FS = ("tmpfs", "ramfs", "hugetlbfs")
NETWORK_FS = ("nfs", "nfs4", "cifs", "smb3", "smbfs", "ceph", "glusterfs", "lustre", "9p")
OFF, ON = ("off", "0", "no", "false"), ("on", "1", "yes", "true")
_MADV_DONTNEED = 4
_lock = threading.Lock()
_dir: list = []              # [path] once checked, [None] when the store is off for this process
stats = {"stored": 0, "spilled": 0, "arrays": 0}     # bytes written, bytes spilled (both cumulative), arrays stored


class _Mapped(mmap.mmap):
    """The mapping under a stored array (its type tells ``stored`` the array is one)."""


def directory() -> str | None:
    """The private directory of stored weights, or None when the store is off."""
    if _dir:
        return _dir[0]
    with _lock:
        if not _dir:
            _dir.append(_open_dir())
    return _dir[0]


def _open_dir() -> str | None:
    env = os.environ.get(ENV, "").strip()
    if env.lower() in OFF:
        return None
    if os.name != "posix" or not hasattr(os, "pwrite"):       # (unlinked files, mmap's MAP_SHARED, madvise)
        return None
    if env and env.lower() not in ON and not os.path.isabs(env):
        _off(f"{ENV}={env!r} is neither off, on nor an absolute path")
        return None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    d = env if env and env.lower() not in ON else os.path.join(base, "msvm", "weights")
    try:
        made = not os.path.isdir(d)
        os.makedirs(d, mode=0o700, exist_ok=True)
        st = os.stat(d)
        if st.st_uid != os.getuid():
            _off(f"{d} belongs to another user")
            return None
        if made:
            os.chmod(d, 0o700)          # (a umask may have left it open)
        elif st.st_mode & 0o077:        # (a directory it did not make is not made private behind the user's back)
            _off(f"{d} is open to other users (mode {oct(st.st_mode & 0o777)})")
            return None
    except OSError as e:
        _off(f"cannot make {d}: {e}")
        return None
    fs = _fs_type(d)
    if fs in MEMORY_FS:
        _off(f"{d} is on {fs}: a file there is memory")
        return None
    if fs in NETWORK_FS or (fs or "").startswith("fuse."):
        _off(f"{d} is on {fs}: weights are not written over a network")
        return None
    return d


def _fs_type(path: str) -> str | None:
    """The filesystem type of the mount that holds ``path`` (/proc/self/mounts; None elsewhere)."""
    try:
        with open("/proc/self/mounts") as f:
            mounts = [line.split() for line in f]
    except OSError:
        return None
    real = os.path.realpath(path)
    best, kind = "", None
    for m in mounts:
        if len(m) >= 3:
            point = m[1].replace("\\040", " ")
            if (real == point or real.startswith(point.rstrip("/") + "/")) and len(point) >= len(best):
                best, kind = point, m[2]
    return kind


def _off(why: str) -> None:
    from . import log

    log.logger.info("weight store off (weights stay in memory): %s", why)


def store(a: np.ndarray) -> np.ndarray:
    """A read-only C-contiguous copy of the numpy array ``a`` (a Parameter's data): in the store when
    it is large enough and the store is on, else in memory."""
    a = np.asarray(a)
    if a.nbytes < STORE_MIN or a.dtype.hasobject or directory() is None:
        return in_memory(a)
    src = np.ascontiguousarray(a)
    try:
        with tempfile.TemporaryFile(dir=directory()) as f:       # (unlinked at once: no name to open)
            view = memoryview(src.reshape(-1).view(np.uint8))
            done = 0
            while done < len(view):
                done += os.pwrite(f.fileno(), view[done:done + WRITE_BYTES], done)
            m = _Mapped(f.fileno(), src.nbytes, mmap.MAP_SHARED, mmap.PROT_READ)
    except (OSError, ValueError) as e:      # (a full disk, a quota: this array stays in memory)
        _off_once(e)
        return in_memory(a)
    out = np.ndarray(src.shape, src.dtype, buffer=m)       # (its base is the mapping: ``stored``)
    stats["stored"] += src.nbytes
    stats["arrays"] += 1
    return out


def in_memory(a) -> np.ndarray:
    """A read-only C-contiguous copy of ``a`` in anonymous memory (what ``store`` gives where it does not store)."""
    out = np.array(a, order="C", copy=True)
    out.flags.writeable = False
    return out


_failed: list = []


def _off_once(e: Exception) -> None:
    if not _failed:
        _failed.append(e)
        _off(f"writing a weight failed ({e}); this one stays in memory")


def stored(a) -> bool:
    """Whether ``a`` is an array ``store`` made (not a view of one): fixed for as long as it lives, as
    a read-only array that owns its data is. A view (a slice or reshape of a weight in construct, a
    new object at every call) is not: the compiler prepares only what it will see again."""
    return type(getattr(a, "base", None)) is _Mapped


def spill(a) -> int:
    """Let a stored array's pages leave the process (their values stay in the file; a read maps
    them back). Returns the bytes spilled (0 for an array that is not stored, a view, or too small
    to cover a page)."""
    if type(a) is not np.ndarray or not stored(a):
        return 0
    page = mmap.PAGESIZE
    start = a.ctypes.data
    lo, hi = -(-start // page) * page, (start + a.nbytes) // page * page
    if hi <= lo:
        return 0
    if _madvise(lo, hi - lo, _MADV_DONTNEED) != 0:
        return 0
    stats["spilled"] += hi - lo
    return hi - lo


_libc: list = []


def _madvise(addr: int, length: int, advice: int) -> int:
    if not _libc:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
            _libc.append(libc)
        except (OSError, AttributeError, TypeError):
            _libc.append(None)
    return -1 if _libc[0] is None else _libc[0].madvise(addr, length, advice)


def resident(a) -> int:
    """Bytes of the array's pages mapped in this process now (``mincore``-free: /proc's pagemap is
    root-only, so this reads /proc/self/smaps's Rss of the mapping; tests)."""
    start = a.ctypes.data
    with open("/proc/self/smaps") as f:
        inside = False
        for line in f:
            head = line.split()
            if "-" in head[0] and not head[0].endswith(":"):
                lo, hi = (int(x, 16) for x in head[0].split("-"))
                inside = lo <= start < hi
            elif inside and head[0] == "Rss:":
                return int(head[1]) * 1024
    return 0
