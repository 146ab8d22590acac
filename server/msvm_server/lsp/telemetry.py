"""The server's end of ``MSVM_TELEMETRY``: a private socket msvm programs stream to.

On POSIX it is a Unix socket in a fresh 0700 directory (``unix:/tmp/msvm-lsp-XXXX/t.sock``);
elsewhere loopback TCP with a random token that the first line must carry
(``tcp:127.0.0.1:PORT#TOKEN``). Messages are the JSON lines ``msvm.telemetry`` writes;
``on_message(program, msg)`` gets each one, ``program`` being the sender's hello.

What one program can cost the server is bounded: a line is at most ``LINE_LIMIT`` bytes
(a longer one is skipped to its newline without being kept, and logged), at most
``MAX_CLIENTS`` programs are connected at once (another is refused, and logged), a client
reads through a ``CHUNK``-sized stream buffer, and one that has not said hello within
``HELLO_TIMEOUT_S`` (or whose first line is too long) is dropped. A line that is not JSON,
or not an object, is ignored.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import os
import secrets
import shutil
import socket
import tempfile

from msvm.telemetry import LINE_LIMIT

MAX_CLIENTS = 16
HELLO_TIMEOUT_S = 10.0
CHUNK = 64 * 1024                   # the stream's buffer: reading pauses above twice this
DROPPED = object()                  # what _Lines.next returns for a line over the limit
logger = logging.getLogger(__name__)


class _Lines:
    """Newline-delimited lines of a stream, each at most ``limit`` bytes; longer ones are skipped unread."""

    def __init__(self, reader: asyncio.StreamReader, limit: int):
        self.reader, self.limit = reader, limit
        self.buf = bytearray()
        self.skipping = False               # inside a line over the limit: discard up to its newline
        self.ready = collections.deque()   # lines (or DROPPED) cut from the last chunk, not yet returned
        self.eof = False

    async def next(self):
        """The next line (bytes, without its newline), DROPPED, or None at the end of the stream."""
        while not self.ready:
            if self.eof:
                return None
            chunk = await self.reader.read(CHUNK)
            if not chunk:
                self.eof = True
                if self.buf and not self.skipping:
                    self.ready.append(bytes(self.buf))
                self.buf.clear()
                continue
            self._cut(chunk)
        return self.ready.popleft()

    def _cut(self, chunk: bytes) -> None:
        start = 0
        while (nl := chunk.find(b"\n", start)) >= 0:
            if self.skipping:
                self.skipping = False
            elif len(self.buf) + nl - start > self.limit:
                self.ready.append(DROPPED)
            else:
                self.buf += chunk[start:nl]
                self.ready.append(bytes(self.buf))
            self.buf.clear()
            start = nl + 1
        if self.skipping:
            return
        if len(self.buf) + len(chunk) - start > self.limit:
            self.buf.clear()
            self.skipping = True
            self.ready.append(DROPPED)
        else:
            self.buf += chunk[start:]


def _parse(line: bytes):
    """A JSON object, or None for anything else (not JSON, not UTF-8, nested too deep, not an object)."""
    try:
        msg = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return msg if isinstance(msg, dict) else None


class TelemetryHub:
    def __init__(self, on_message, log=None, max_clients: int = MAX_CLIENTS, line_limit: int = LINE_LIMIT,
                 hello_timeout: float = HELLO_TIMEOUT_S):
        self.on_message = on_message
        self.log = log or logger.warning
        self.max_clients, self.line_limit, self.hello_timeout = max_clients, line_limit, hello_timeout
        self.address = None
        self.dir = None
        self.token = None
        self.server = None
        self.programs = 0                   # programs that said hello, ever
        self.connected = 0                  # connections open now

    async def start(self) -> str:
        if hasattr(socket, "AF_UNIX"):
            self.dir = tempfile.mkdtemp(prefix="msvm-lsp-")       # mode 0700
            os.chmod(self.dir, 0o700)
            path = os.path.join(self.dir, "t.sock")
            self.server = await asyncio.start_unix_server(self._client, path, limit=CHUNK)
            self.address = f"unix:{path}"
        else:
            self.token = secrets.token_hex(16)
            self.server = await asyncio.start_server(self._client, "127.0.0.1", 0, limit=CHUNK)
            port = self.server.sockets[0].getsockname()[1]
            self.address = f"tcp:127.0.0.1:{port}#{self.token}"
        return self.address

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        if self.connected >= self.max_clients:
            self.log(f"[MS] telemetry: {self.connected} programs are connected already (the most is "
                     f"{self.max_clients}); refused another")
            writer.close()
            return
        self.connected += 1
        program, dropped = None, 0
        lines = _Lines(reader, self.line_limit)
        try:
            while True:
                if program is None:
                    line = await asyncio.wait_for(lines.next(), self.hello_timeout)
                else:
                    line = await lines.next()
                if line is None:
                    break
                if line is DROPPED:
                    if program is None:
                        self.log(f"[MS] telemetry: a first line over {self.line_limit} bytes; dropped the connection")
                        break
                    if not dropped:
                        self.log(f"[MS] telemetry: pid {program.get('pid')} sent a line over {self.line_limit} bytes; "
                                 "skipped it (and any more)")
                    dropped += 1
                    continue
                msg = _parse(line)
                if msg is None:
                    continue
                if program is None:
                    if msg.get("type") != "hello" or (self.token and msg.get("token") != self.token):
                        break
                    self.programs += 1
                    program = {"pid": msg.get("pid"), "script": msg.get("script"), "argv": msg.get("argv", [])}
                try:
                    self.on_message(program, msg)
                except Exception:  # noqa: BLE001 - a bad message never takes the server down
                    pass
        except asyncio.TimeoutError:
            self.log(f"[MS] telemetry: no hello within {self.hello_timeout} s; dropped the connection")
        except (ConnectionError, OSError):
            pass
        finally:
            self.connected -= 1
            if dropped > 1:
                self.log(f"[MS] telemetry: pid {program.get('pid')} sent {dropped} lines over {self.line_limit} bytes")
            writer.close()

    def close(self):
        if self.server is not None:
            self.server.close()
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
