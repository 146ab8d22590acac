"""The kernel cache: compiled object code in memory and on disk.

Key: sha256 over the kernel IR text, the tier, the device, the bytecode ABI, the
compiler versions (llvmlite/LLVM, and a hash of msvm's own lowering sources) and the
target (triple, CPU name, features). Disk layout:
``$MSVM_CACHE_DIR`` or ``~/.cache/msvm/kernels``, one folder per ABI
(``abi-1/``), mode 0700; one file per key, written to a temporary file and renamed
(atomic; two processes writing the same key both leave a whole file). A file is

    b"MSVMKRN1" | u32 header length | header JSON (key, function names, ...) | object bytes | sha256

and is used only when the magic, the checksum and the key inside all match; a
corrupt or foreign file is deleted, counted and rebuilt, never executed.
"""

from __future__ import annotations

import collections
import hashlib
import json
import os
import struct
import tempfile
import threading
import time

from .. import events
from ..bytecode.opcodes import ABI_VERSION

MAGIC = b"MSVMKRN1"


def _compiler_fingerprint() -> str:
    """The code generator's own version: a hash of the sources that turn kernel IR into machine
    code, so a changed lowering never loads objects an older one wrote (no version to forget)."""
    h = hashlib.sha256()
    here = os.path.dirname(os.path.abspath(__file__))
    for name in ("lower.py", "lower_gpu.py", "codegen.py", "kir.py"):
        try:
            with open(os.path.join(here, name), "rb") as f:
                h.update(f.read())
        except OSError:
            h.update(name.encode())
    return "msvm-jit-" + h.hexdigest()[:16]


MSVM_COMPILER_VERSION = _compiler_fingerprint()


def default_dir() -> str:
    base = os.environ.get("MSVM_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "msvm", "kernels")
    return os.path.join(base, f"abi-{ABI_VERSION}")


def make_key(kernel_text: str, level: int, device: str, compiler: str, target: str) -> str:
    h = hashlib.sha256()
    for part in (kernel_text, f"L{level}", device, f"abi={ABI_VERSION}", compiler, MSVM_COMPILER_VERSION, target):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


class KernelCache:
    """Memory + disk cache of object code, with hit/miss statistics."""

    def __init__(self, directory: str | None = None):
        self.dir = directory or default_dir()
        self.mem: dict = {}
        self.lock = threading.Lock()
        self.stats = collections.Counter()
        self.recent: collections.deque = collections.deque(maxlen=10)
        self._dir_ready = False

    # --- disk
    def _ensure_dir(self) -> bool:
        if self._dir_ready:
            return True
        try:
            os.makedirs(self.dir, mode=0o700, exist_ok=True)
            os.chmod(self.dir, 0o700)
            for name in os.listdir(self.dir):          # temporary files left by a killed process
                if name.startswith(".tmp-"):
                    p = os.path.join(self.dir, name)
                    try:
                        if time.time() - os.path.getmtime(p) > 60:
                            os.unlink(p)
                    except OSError:
                        pass
            self._dir_ready = True
        except OSError:
            return False
        return True

    def path(self, key: str) -> str:
        return os.path.join(self.dir, f"{key}.o")

    def write(self, key: str, obj: bytes, header: dict) -> None:
        if not self._ensure_dir():
            return
        header = dict(header, key=key)
        hb = json.dumps(header, sort_keys=True).encode()
        body = MAGIC + struct.pack("<I", len(hb)) + hb + obj
        data = body + hashlib.sha256(body).digest()
        fd, tmp = tempfile.mkstemp(dir=self.dir, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:     # no fsync: a file torn by a crash fails its checksum
                f.write(data)                    # on load and is rebuilt, so durability costs nothing here
            os.replace(tmp, self.path(key))
        except OSError:
            try:
                os.unlink(tmp)
            except OSError:
                pass

    def read(self, key: str):
        """(object bytes, header) from disk, or None; a bad file is deleted and counted."""
        p = self.path(key)
        try:
            with open(p, "rb") as f:
                data = f.read()
        except OSError:
            return None
        why = None
        if len(data) < len(MAGIC) + 4 + 32 or not data.startswith(MAGIC):
            why = "bad magic or truncated"
        elif hashlib.sha256(data[:-32]).digest() != data[-32:]:
            why = "checksum mismatch"
        else:
            (hl,) = struct.unpack_from("<I", data, len(MAGIC))
            try:
                header = json.loads(data[len(MAGIC) + 4: len(MAGIC) + 4 + hl])
            except ValueError:
                header, why = None, "bad header"
            if header is not None and header.get("key") != key:
                why = "foreign entry (key differs)"
        if why is not None:
            self.stats["corrupt"] += 1
            events.emit({"type": "cache", "event": "corrupt", "key": key, "why": why})
            try:
                os.unlink(p)
            except OSError:
                pass
            return None
        obj = data[len(MAGIC) + 4 + hl: -32]
        return obj, header

    # --- bookkeeping
    def note_key(self, key: str, info: dict, source: str):
        """A kernel was looked up for a new shape: found in memory, on disk, or compiled."""
        with self.lock:
            self.recent.appendleft(dict(info, key=key[:16], source=source))
        events.emit(dict(info, type="cache", event=source, key=key, stats=self.counts()))

    def counts(self) -> dict:
        hits, misses = self.stats["hits"], self.stats["misses"]
        return {"hits": hits, "misses": misses, "hit_rate": hits / (hits + misses) if hits + misses else 0.0}

    def snapshot(self) -> dict:
        """hits/misses count jit-able instruction executions that did / did not find a compiled kernel."""
        with self.lock:
            hits, misses = self.stats["hits"], self.stats["misses"]
            return {
                "hits": hits, "misses": misses,
                "hit_rate": hits / (hits + misses) if hits + misses else 0.0,
                "compiles": self.stats["compiles"], "disk_loads": self.stats["disk_loads"],
                "failures": self.stats["failures"], "corrupt": self.stats["corrupt"],
                "memory_entries": len(self.mem), "directory": self.dir,
                "recent": list(self.recent),
            }

    def clear_disk(self) -> int:
        n = 0
        if os.path.isdir(self.dir):
            for name in os.listdir(self.dir):
                if name.endswith(".o") or name.startswith(".tmp-"):
                    try:
                        os.unlink(os.path.join(self.dir, name))
                        n += 1
                    except OSError:
                        pass
        return n

    def disk_entries(self) -> list:
        if not os.path.isdir(self.dir):
            return []
        return sorted(n for n in os.listdir(self.dir) if n.endswith(".o"))
