"""The kernel cache: compiled object code in memory and on disk.

Key: sha256 over the kernel IR text, the tier, the device, the bytecode ABI, the
compiler versions (llvmlite/LLVM, and a hash of msvm's own lowering sources) and the
target (triple, CPU name, features). Disk layout: the root ``$MSVM_CACHE_DIR`` or
``~/.cache/msvm/kernels`` holds this user's secret (``.msvm-key``, 32 random bytes,
mode 0600) and one folder per ABI (``abi-1/``) with one file per key. A file is

    b"MSVMKRN2" | u32 header length | u64 object length | header JSON (key, function names, ...)
    | object bytes | HMAC-SHA256(secret, key | everything before the tag)

The disk is only for objects this user's msvm wrote, since loading one runs it:

- the root and the ABI folder are opened without following a symlink and must be
  owned by this uid (a mode open to others is set back to 0700); a symlink or another
  owner turns the disk off for the process (memory only) with one ``[MS]`` warning;
- an entry is opened with O_NOFOLLOW | O_NONBLOCK (a FIFO never blocks) relative to
  that folder, and fstat'ed: a regular file of ours, not writable by others, its size
  under the cap and equal to what its prefix declares, before the rest is read;
- its tag must verify under the secret; anything else, and an entry whose object
  does not link (``load``), is deleted, counted, reported ("entry discarded: why")
  and rebuilt, never linked.
- writes go to a ``.tmp-`` file created with O_EXCL in the same folder, fsync'ed, then
  renamed (two processes writing one key both leave a whole file).
"""

from __future__ import annotations

import collections
import errno
import hashlib
import hmac
import json
import os
import secrets
import stat
import struct
import threading
import time

from .. import events, log
from ..bytecode.opcodes import ABI_VERSION

MAGIC = b"MSVMKRN2"
PREFIX = struct.Struct("<8sIQ")      # magic, header length, object length
TAG = 32                             # HMAC-SHA256
MAX_HEADER = 1 << 20
MAX_OBJECT = 64 << 20
MAX_ENTRY = PREFIX.size + MAX_HEADER + MAX_OBJECT + TAG
KEY_FILE = ".msvm-key"
KEY_BYTES = 32
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _NOFOLLOW | _CLOEXEC
_READ_FLAGS = os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0) | _CLOEXEC
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC
_SAFE_OS = bool(_NOFOLLOW) and os.open in os.supports_dir_fd and os.listdir in os.supports_fd


# every module that writes LLVM IR from a kernel's text (the elementwise and row lowering, pow, the
# GPU's, the convolutions' and the GEMMs': their kernel texts are descriptors, not the IR itself);
# entry.py's native entries are keyed on their IR text and build.py's warm-up is never cached
LOWERING_SOURCES = ("lower.py", "lower_gpu.py", "codegen.py", "kir.py", "lower_pow.py", "lower_conv.py", "gemm.py",
                    "gemm_dot.py", "gemm_cout.py", "pool.py", "phases.py", "winograd.py")


def _compiler_fingerprint() -> str:
    """The code generator's own version: a hash of the sources that turn kernel IR into machine
    code, so a changed lowering never loads objects an older one wrote (no version to forget)."""
    h = hashlib.sha256()
    here = os.path.dirname(os.path.abspath(__file__))
    for name in LOWERING_SOURCES:
        try:
            with open(os.path.join(here, name), "rb") as f:
                h.update(f.read())
        except OSError:
            h.update(name.encode())
    return "msvm-jit-" + h.hexdigest()[:16]


MSVM_COMPILER_VERSION = _compiler_fingerprint()


def default_root() -> str:
    return os.environ.get("MSVM_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "msvm", "kernels")


def default_dir() -> str:
    return os.path.join(default_root(), f"abi-{ABI_VERSION}")


def make_key(kernel_text: str, level: int, device: str, compiler: str, target: str) -> str:
    h = hashlib.sha256()
    for part in (kernel_text, f"L{level}", device, f"abi={ABI_VERSION}", compiler, MSVM_COMPILER_VERSION, target):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def _tag(secret: bytes, key: str, body: bytes) -> bytes:
    return hmac.new(secret, key.encode() + b"\0" + body, hashlib.sha256).digest()


def _read_exact(fd: int, n: int) -> bytes:
    """Up to ``n`` bytes from ``fd`` (fewer only at end of file)."""
    parts, left = [], n
    while left > 0:
        b = os.read(fd, left)
        if not b:
            break
        parts.append(b)
        left -= len(b)
    return b"".join(parts)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _file_problem(st: os.stat_result, private: bool = False) -> str | None:
    """Why a file we are about to read is not ours to trust, or None."""
    if not stat.S_ISREG(st.st_mode):
        kind = "a FIFO" if stat.S_ISFIFO(st.st_mode) else "a directory" if stat.S_ISDIR(st.st_mode) else \
            "not a regular file"
        return f"{kind} (mode 0o{st.st_mode:o})"
    if st.st_uid != os.geteuid():
        return f"owned by uid {st.st_uid}, not this user (uid {os.geteuid()})"
    if st.st_mode & (0o077 if private else 0o022):
        return f"mode 0o{st.st_mode & 0o777:03o} lets others {'read or ' if private else ''}write it"
    return None


class _Refused(Exception):
    """The cache directory (or its key) is not this user's alone: the disk is not used."""


class _Disk:
    """The open, checked cache folders (file descriptors) and the secret."""

    def __init__(self, root_fd: int, dir_fd: int, secret: bytes):
        self.root_fd, self.fd, self.secret = root_fd, dir_fd, secret

    def __del__(self):
        for fd in {self.root_fd, self.fd}:
            try:
                os.close(fd)
            except OSError:
                pass


def _open_dir(path: str, parent_fd: int | None = None) -> int:
    """A directory we own, opened without following a symlink (made 0700 if it was open to others)."""
    shown = path
    try:
        if parent_fd is None:
            os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
        os.mkdir(path, 0o700, dir_fd=parent_fd)
    except FileExistsError:
        pass
    try:
        fd = os.open(path, _DIR_FLAGS, dir_fd=parent_fd)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            raise _Refused(f"{shown} is a symbolic link or not a directory") from None
        raise
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid():
            raise _Refused(f"{shown} is owned by uid {st.st_uid}, not this user (uid {os.geteuid()})")
        if st.st_mode & 0o077:
            os.fchmod(fd, 0o700)
    except BaseException:
        os.close(fd)
        raise
    return fd


class KernelCache:
    """Memory + disk cache of object code, with hit/miss statistics.

    ``directory``: the folder of entries (default: ``default_dir()``); the root that holds the key
    is its parent when it is named ``abi-<ABI>``, else the folder itself."""

    def __init__(self, directory: str | None = None):
        self.dir = os.path.abspath(directory or default_dir())
        abi = os.path.basename(self.dir) == f"abi-{ABI_VERSION}"
        self.root = os.path.dirname(self.dir) if abi else self.dir
        self.mem: dict = {}
        self.lock = threading.Lock()
        self.stats = collections.Counter()
        self.recent: collections.deque = collections.deque(maxlen=10)
        self.discarded: dict = {}            # key -> why its disk entry was discarded (until a compile reports it)
        self.refused: str | None = None      # why the disk is not used (memory only), once known
        self._disk_state = None              # _Disk, or False once refused
        self._disk_lock = threading.Lock()

    # --- the folders and the key
    def _disk(self) -> _Disk | None:
        state = self._disk_state
        if state is None:
            with self._disk_lock:
                if self._disk_state is None:
                    self._disk_state = self._open_disk()
                state = self._disk_state
        return state or None

    def _open_disk(self):
        if not _SAFE_OS:
            self.refused = "this platform cannot open cache files without following symlinks"
            return False
        root_fd = dir_fd = None
        try:
            root_fd = _open_dir(self.root)
            dir_fd = root_fd if self.dir == self.root else _open_dir(os.path.basename(self.dir), root_fd)
            disk = _Disk(root_fd, dir_fd, self._secret(root_fd))
        except (_Refused, OSError) as e:
            for fd in {root_fd, dir_fd} - {None}:
                os.close(fd)
            self.refused = str(e) if isinstance(e, _Refused) else f"{self.root}: {e.strerror or e}"
            # not ours: a warning; could not be made (a read-only home): as quiet as before
            say = log.logger.warning if isinstance(e, _Refused) else log.logger.info
            say("kernel cache: not using %s on disk: %s; compiled kernels are kept in memory only "
                "(fix or remove that directory, or set MSVM_CACHE_DIR)", self.dir, self.refused)
            events.emit({"type": "cache", "event": "refused", "directory": self.dir, "why": self.refused})
            return False
        for fd in {root_fd, dir_fd}:
            self._drop_stale_temporaries(fd)
        return disk

    def _secret(self, root_fd: int) -> bytes:
        """This user's HMAC key from the root, made (atomically) when absent; a key file that is not
        ours alone is never trusted: it is replaced, so what was written under it is rebuilt."""
        shown = os.path.join(self.root, KEY_FILE)
        for _ in range(3):
            try:
                fd = os.open(KEY_FILE, _READ_FLAGS, dir_fd=root_fd)
            except FileNotFoundError:
                secret = self._make_secret(root_fd)
                if secret is not None:
                    return secret
                continue                                  # another process published one first
            except OSError as e:
                why = f"cannot be opened safely ({e.strerror})"
            else:
                try:
                    st = os.fstat(fd)
                    why = _file_problem(st, private=True)
                    if why is None and st.st_size != KEY_BYTES:
                        why = f"{st.st_size} bytes, not {KEY_BYTES}"
                    if why is None:
                        secret = _read_exact(fd, KEY_BYTES)
                        if len(secret) == KEY_BYTES:
                            return secret
                        why = "short read"
                finally:
                    os.close(fd)
            log.logger.warning("kernel cache: key file %s refused (%s); a new key replaces it and kernels "
                               "written under the old one are rebuilt", shown, why)
            events.emit({"type": "cache", "event": "key refused", "path": shown, "why": why})
            try:
                os.unlink(KEY_FILE, dir_fd=root_fd)
            except FileNotFoundError:
                pass
            except IsADirectoryError:
                raise _Refused(f"key file {shown} is a directory") from None
        raise _Refused(f"no usable key file {shown}")

    @staticmethod
    def _make_secret(root_fd: int) -> bytes | None:
        """A new key, published with link() so no process ever reads half of one; None if another
        process published one first."""
        tmp = f".tmp-key-{os.getpid()}-{secrets.token_hex(8)}"
        secret = secrets.token_bytes(KEY_BYTES)
        fd = os.open(tmp, _CREATE_FLAGS, 0o600, dir_fd=root_fd)
        try:
            try:
                os.fchmod(fd, 0o600)
                _write_all(fd, secret)
                os.fsync(fd)
            finally:
                os.close(fd)
            try:
                os.link(tmp, KEY_FILE, src_dir_fd=root_fd, dst_dir_fd=root_fd)
            except FileExistsError:
                return None
            return secret
        finally:
            try:
                os.unlink(tmp, dir_fd=root_fd)
            except OSError:
                pass

    @staticmethod
    def _drop_stale_temporaries(fd: int) -> None:
        """Temporary files left by a killed process."""
        try:
            names = os.listdir(fd)
        except OSError:
            return
        for name in names:
            if name.startswith(".tmp-"):
                try:
                    if time.time() - os.stat(name, dir_fd=fd, follow_symlinks=False).st_mtime > 60:
                        os.unlink(name, dir_fd=fd)
                except OSError:
                    pass

    # --- entries
    def path(self, key: str) -> str:
        return os.path.join(self.dir, f"{key}.o")

    def write(self, key: str, obj: bytes, header: dict) -> None:
        disk = self._disk()
        if disk is None:
            return
        hb = json.dumps(dict(header, key=key), sort_keys=True).encode()
        if len(hb) > MAX_HEADER or len(obj) > MAX_OBJECT:
            return
        body = PREFIX.pack(MAGIC, len(hb), len(obj)) + hb + obj
        data = body + _tag(disk.secret, key, body)
        tmp = f".tmp-{key[:16]}-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            fd = os.open(tmp, _CREATE_FLAGS, 0o600, dir_fd=disk.fd)
        except OSError:
            return
        try:
            try:
                _write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, f"{key}.o", src_dir_fd=disk.fd, dst_dir_fd=disk.fd)
        except OSError:
            try:
                os.unlink(tmp, dir_fd=disk.fd)
            except OSError:
                pass

    def read(self, key: str):
        """(object bytes, header) from disk, or None; an entry that is not what this user's msvm wrote
        is deleted, counted and reported, and nothing of it is returned."""
        disk = self._disk()
        if disk is None:
            return None
        try:
            fd = os.open(f"{key}.o", _READ_FLAGS, dir_fd=disk.fd)
        except FileNotFoundError:
            return None
        except OSError as e:
            self.discard(key, "a symbolic link" if e.errno == errno.ELOOP else f"cannot be opened ({e.strerror})")
            return None
        try:
            found, why = self._parse(fd, key, disk.secret)
        except OSError as e:
            found, why = None, f"read failed ({e.strerror})"
        finally:
            os.close(fd)
        if why is not None:
            self.discard(key, why)
        return found

    @staticmethod
    def _parse(fd: int, key: str, secret: bytes):
        """((object, header), None) or (None, why); reads nothing past the checks on the size."""
        st = os.fstat(fd)
        why = _file_problem(st)
        if why is not None:
            return None, why
        if st.st_size > MAX_ENTRY:
            return None, f"too large ({st.st_size} bytes, cap {MAX_ENTRY})"
        head = _read_exact(fd, PREFIX.size)
        if len(head) < PREFIX.size or not head.startswith(MAGIC):
            return None, "bad magic or truncated"
        _, hl, ol = PREFIX.unpack(head)
        if hl > MAX_HEADER or ol > MAX_OBJECT:
            return None, f"declared lengths over the cap (header {hl}, object {ol} bytes)"
        if PREFIX.size + hl + ol + TAG != st.st_size:
            return None, f"declared length {PREFIX.size + hl + ol + TAG} differs from the file size {st.st_size}"
        rest = _read_exact(fd, hl + ol + TAG)
        if len(rest) != hl + ol + TAG:
            return None, "truncated while reading"
        if not hmac.compare_digest(_tag(secret, key, head + rest[:-TAG]), rest[-TAG:]):
            return None, "authentication failed (not written by this user's msvm under this key, or changed since)"
        try:
            header = json.loads(rest[:hl])
        except ValueError:
            return None, "bad header"
        if not isinstance(header, dict) or header.get("key") != key:
            return None, "foreign entry (key differs)"
        return (rest[hl:hl + ol], header), None

    def load(self, key: str, link):
        """``(link(object bytes), object bytes)`` for the entry on disk under ``key``, or None. An entry
        whose object does not link (llvmlite rejects it, a function is missing) is discarded, so
        the caller compiles it again and this process and later ones do not stay on L1."""
        found = self.read(key)
        if found is None:
            return None
        try:
            return link(found[0]), found[0]
        except Exception as e:  # noqa: BLE001 - whatever the linker says, the entry is unusable
            self.discard(key, f"object does not load ({e})")
            return None

    def discard(self, key: str, why: str) -> None:
        """Delete the entry under ``key`` (the folder is ours), count and report it."""
        disk = self._disk()
        if disk is not None:
            try:
                os.unlink(f"{key}.o", dir_fd=disk.fd)
            except OSError:
                pass
        self.stats["corrupt"] += 1
        if len(self.discarded) > 256:
            self.discarded.clear()
        self.discarded[key] = why
        log.logger.info("kernel cache: entry discarded: %s (%s)", why, key[:16])
        events.emit({"type": "cache", "event": "discarded", "key": key, "why": why})

    # --- bookkeeping
    def note_key(self, key: str, info: dict, source: str):
        """A kernel was looked up for a new shape: found in memory, on disk, or compiled; or it
        failed to compile (``failed``), or inputs run the L1 kernel (``l1``, no key). ``info``
        carries why (``reason``, ``reason_kind``: msvm.reasons)."""
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
                "memory_entries": len(self.mem), "directory": self.dir, "refused": self.refused,
                "recent": list(self.recent),
            }

    def _names(self, disk: _Disk) -> list:
        try:
            return os.listdir(disk.fd)
        except OSError:
            return []

    def clear_disk(self) -> int:
        disk = self._disk()
        if disk is None:
            return 0
        n = 0
        for name in self._names(disk):
            if name.endswith(".o") or name.startswith(".tmp-"):
                try:
                    os.unlink(name, dir_fd=disk.fd)
                    n += 1
                except OSError:
                    pass
        return n

    def disk_entries(self) -> list:
        disk = self._disk()
        return [] if disk is None else sorted(n for n in self._names(disk) if n.endswith(".o"))

    def disk_bytes(self) -> int:
        """The size of the entries on disk (symlinks are not followed)."""
        disk, total = self._disk(), 0
        for name in self.disk_entries():
            try:
                total += os.stat(name, dir_fd=disk.fd, follow_symlinks=False).st_size
            except OSError:
                pass
        return total
