"""The server's end of ``MSVM_TELEMETRY``: a private socket msvm programs stream to.

On POSIX it is a Unix socket in a fresh 0700 directory (``unix:/tmp/msvm-lsp-XXXX/t.sock``);
elsewhere loopback TCP with a random token that the first line must carry
(``tcp:127.0.0.1:PORT#TOKEN``). Messages are the JSON lines ``msvm.telemetry`` writes;
``on_message(program, msg)`` gets each one, ``program`` being the sender's hello.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import socket
import tempfile

LINE_LIMIT = 64 * 1024 * 1024       # a profile is one line


class TelemetryHub:
    def __init__(self, on_message):
        self.on_message = on_message
        self.address = None
        self.dir = None
        self.token = None
        self.server = None
        self.programs = 0

    async def start(self) -> str:
        if hasattr(socket, "AF_UNIX"):
            self.dir = tempfile.mkdtemp(prefix="msvm-lsp-")       # mode 0700
            os.chmod(self.dir, 0o700)
            path = os.path.join(self.dir, "t.sock")
            self.server = await asyncio.start_unix_server(self._client, path, limit=LINE_LIMIT)
            self.address = f"unix:{path}"
        else:
            self.token = secrets.token_hex(16)
            self.server = await asyncio.start_server(self._client, "127.0.0.1", 0, limit=LINE_LIMIT)
            port = self.server.sockets[0].getsockname()[1]
            self.address = f"tcp:127.0.0.1:{port}#{self.token}"
        return self.address

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        program = None
        try:
            while True:
                try:
                    line = await reader.readline()
                except (ValueError, asyncio.LimitOverrunError):
                    break                                   # a line over the limit: drop this client
                if not line:
                    break
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue
                if not isinstance(msg, dict):
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
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    def close(self):
        if self.server is not None:
            self.server.close()
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
