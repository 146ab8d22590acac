"""Streams this program's JIT events to the language server.

When ``MSVM_TELEMETRY`` names an address the server opened (``unix:/dir/telemetry.sock``
or ``tcp:127.0.0.1:PORT#TOKEN``), ``import msvm`` connects and sends newline-delimited
JSON messages:

    {"type": "hello", "version": 1, "pid", "script", "argv", "token"?}
    {"type": "event", "event": {...}}      compile / tier / error / cache events
    {"type": "stats", "stats": {...}}      ms.cache_stats(), at most every 0.25 s when it changed
    {"type": "profile", "profile": {...}}  the profile (msvm.profile) when the program exits

A telemetry problem never breaks the program: a failed connect or send turns it off, and
a message longer than ``LINE_LIMIT`` (which the server would skip) is not sent.
Per-instruction execution times are collected only with ``MSVM_PROFILE=1``.
"""

from __future__ import annotations

import atexit
import json
import os
import socket
import sys
import threading

from . import events

PROTOCOL = 1
PERIOD_S = 0.25
LINE_LIMIT = 4 * 1024 * 1024     # the longest line the server reads; a profile is one line (tens of kB for a BERT layer)
_active = None


def _connect(address: str):
    if address.startswith("unix:"):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(2.0)
        s.connect(address[5:])
        return s, None
    if address.startswith("tcp:"):
        hostport, _, token = address[4:].partition("#")
        host, _, port = hostport.rpartition(":")
        if host not in ("127.0.0.1", "localhost", "::1"):
            raise OSError(f"telemetry goes to loopback only, not {host}")
        s = socket.create_connection((host, int(port)), timeout=2.0)
        return s, token
    raise OSError(f"unknown telemetry address {address!r}")


class Telemetry:
    def __init__(self, address: str):
        from .profile import Profiler

        self.sock, token = _connect(address)
        self.lock = threading.Lock()
        self.pending: list = []
        self.last_stats = None
        self.closed = False
        self.wake = threading.Event()
        self._send({"type": "hello", "version": PROTOCOL, "pid": os.getpid(), "script": sys.argv[0] if sys.argv else "",
                    "argv": sys.argv[1:], **({"token": token} if token else {})})
        self.profiler = Profiler(sys.argv[0] if sys.argv else "", sys.argv[1:])
        self.profiler.start(exec_times=os.environ.get("MSVM_PROFILE") == "1")
        self._unsub = events.subscribe(self._on_event, ("compile", "tier", "error", "cache"))
        self.thread = threading.Thread(target=self._loop, name="msvm-telemetry", daemon=True)
        self.thread.start()
        atexit.register(self.close)

    def _on_event(self, ev: dict):
        with self.lock:
            if len(self.pending) < 1000:
                self.pending.append(ev)

    def _send(self, msg: dict) -> None:
        if self.closed:
            return
        line = (json.dumps(msg, default=str) + "\n").encode()
        if len(line) > LINE_LIMIT:
            from . import log

            log.logger.warning("telemetry: a %s message of %d bytes is over the %d-byte line limit; not sent",
                               msg.get("type"), len(line), LINE_LIMIT)
            return
        try:
            self.sock.sendall(line)
        except OSError:
            self.closed = True

    def _flush(self) -> None:
        with self.lock:
            batch, self.pending = self.pending, []
        for ev in batch:
            ev = {k: v for k, v in ev.items() if k != "stats"}
            self._send({"type": "event", "event": ev})
        stats = _stats()
        busy = stats is not None and any(stats.get(k) for k in ("hits", "misses", "compiles", "disk_loads"))
        if busy and stats != self.last_stats:
            self.last_stats = stats
            self._send({"type": "stats", "stats": stats})

    def _loop(self):
        while not self.closed:
            self.wake.wait(PERIOD_S)
            if self.closed:
                break
            self._flush()

    def close(self):
        if self.closed:
            return
        self._unsub()
        self.profiler.stop()
        self._flush()
        try:
            from .compiler.tiers import wait_for_compiles

            if "msvm.compiler.tiers" in sys.modules:
                wait_for_compiles(5)
        except ImportError:
            pass
        if os.environ.get("MSVM_TELEMETRY_PROFILE") != "0":
            self._send({"type": "profile", "profile": self.profiler.report(_stats())})
        self._flush()
        self.closed = True
        self.wake.set()
        try:
            self.sock.close()
        except OSError:
            pass


def _stats():
    """The cache statistics, without loading the compiler when nothing used it."""
    if "msvm.compiler.tiers" not in sys.modules:
        return {"hits": 0, "misses": 0, "hit_rate": 0.0, "compiles": 0, "disk_loads": 0, "recent": []}
    from .compiler.tiers import stats

    return json.loads(json.dumps(stats(), default=str))


def start_from_env() -> None:
    """Called by ``import msvm``: connect when MSVM_TELEMETRY is set (once per process)."""
    global _active
    address = os.environ.get("MSVM_TELEMETRY")
    if not address or _active is not None:
        return
    try:
        _active = Telemetry(address)
    except (OSError, ValueError) as e:
        _active = False
        from . import log

        log.logger.warning("MSVM_TELEMETRY=%s: cannot connect (%s); this program's statistics will not reach "
                           "the editor", address, e)
