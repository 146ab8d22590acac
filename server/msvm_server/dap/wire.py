"""DAP's framing (``Content-Length: N\\r\\n\\r\\n`` + JSON) over binary streams and sockets."""

from __future__ import annotations

import json
import os
import threading

_LOG = os.environ.get("MSVM_DAP_LOG")      # a file to append every message to (for debugging the adapter)


def _log(direction: str, msg: dict):
    if _LOG:
        with open(_LOG, "a", encoding="utf-8") as f:
            f.write(f"{os.getpid()} {direction} {json.dumps(msg, default=str)[:2000]}\n")


class Channel:
    """Reads and writes framed JSON messages; writes are serialized and numbered."""

    def __init__(self, reader, writer):
        self.reader, self.writer = reader, writer
        self.lock = threading.Lock()
        self.seq = 0

    def read(self) -> dict | None:
        """The next message, or None at end of input."""
        length = None
        while True:
            line = self.reader.readline()
            if not line:
                return None
            line = line.strip()
            if not line:
                if length is not None:
                    break
                continue
            name, _, value = line.decode("ascii", errors="replace").partition(":")
            if name.strip().lower() == "content-length":
                length = int(value.strip())
        body = b""
        while len(body) < length:
            chunk = self.reader.read(length - len(body))
            if not chunk:
                return None
            body += chunk
        msg = json.loads(body.decode("utf-8"))
        _log("<-", msg)
        return msg

    def write(self, msg: dict, renumber: bool = True) -> bool:
        """renumber=False keeps the message's own seq (a request relayed as it came)."""
        with self.lock:
            if renumber or "seq" not in msg:
                self.seq += 1
                msg = dict(msg, seq=self.seq)
            data = json.dumps(msg, default=str).encode("utf-8")
            _log("->", msg)
            try:
                self.writer.write(b"Content-Length: %d\r\n\r\n" % len(data) + data)
                self.writer.flush()
                return True
            except (OSError, ValueError):
                return False


def response(req: dict, body=None, error: str | None = None, show: bool = False) -> dict:
    """The DAP response to ``req``: its body, or a failure whose message the client may show."""
    msg = {"type": "response", "request_seq": req.get("seq"), "command": req.get("command"), "success": error is None}
    if error is not None:
        msg["message"] = error
        msg["body"] = {"error": {"id": 1, "format": error, "showUser": show}}
    elif body is not None:
        msg["body"] = body
    return msg
