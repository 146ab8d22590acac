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


MAX_MESSAGE = 64 << 20       # a larger Content-Length is refused, never allocated
MAX_LINE = 1 << 16           # header lines are read in pieces of at most this
_HEADER = b"content-length:"


class BadMessage(Exception):
    """A frame that was read and skipped: a malformed header or a body that is not a JSON object.
    The stream stays usable; DAP has no error response without a request seq to answer."""


class Channel:
    """Reads and writes framed JSON messages; writes are serialized and numbered."""

    def __init__(self, reader, writer):
        self.reader, self.writer = reader, writer
        self.lock = threading.Lock()
        self.seq = 0

    def read(self) -> dict | None:
        """The next message, or None at end of input. Raises BadMessage for a frame it skipped."""
        length, problem = None, None
        while True:
            line = self.reader.readline(MAX_LINE)
            if not line:
                return None
            # after a frame whose length was unknown or refused, resynchronize on the next header
            at = line.lower().find(_HEADER)
            if at > 0:
                line = line[at:]
            line = line.strip()
            if not line:
                if length is not None or problem is not None:
                    break
                continue
            name, _, value = line.decode("ascii", errors="replace").partition(":")
            if name.strip().lower() == "content-length":
                try:
                    length = int(value.strip())
                    if length < 0:
                        raise ValueError
                except ValueError:
                    length, problem = None, f"malformed Content-Length header {line[:80]!r}"
        if problem is not None:
            raise BadMessage(problem + " (message skipped)")
        if length > MAX_MESSAGE:       # its body is skipped as the garbage before the next header
            raise BadMessage(f"a {length}-byte message is over the {MAX_MESSAGE}-byte limit (skipped)")
        body = self._read_exactly(length)
        if body is None:
            return None
        try:
            msg = json.loads(body.decode("utf-8"))
        except ValueError as e:       # UnicodeDecodeError and JSONDecodeError are ValueErrors
            raise BadMessage(f"a {length}-byte message is not JSON ({e}); skipped") from None
        if not isinstance(msg, dict):
            raise BadMessage(f"a message is JSON but not an object ({type(msg).__name__}); skipped")
        _log("<-", msg)
        return msg

    def _read_exactly(self, n: int) -> bytes | None:
        chunks, got = [], 0
        while got < n:
            chunk = self.reader.read(min(n - got, 1 << 20))
            if not chunk:
                return None
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

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


class InFlight:
    """Requests written to a peer and not answered yet, so that each gets exactly one answer:
    the peer's response takes its entry (``take``); a request whose write fails is the sender's
    to answer (``send`` returns False); when the peer's stream ends (``close``), the rest are
    handed back to be answered by the reader. A request relayed to a program that dies before
    it answers is never left waiting."""

    def __init__(self):
        self.lock = threading.Lock()
        self.items: dict = {}
        self.open = True

    def add(self, seq, item) -> bool:
        """Record a request about to be written; False once the peer is gone (answer it now)."""
        with self.lock:
            if self.open:
                self.items[seq] = item
            return self.open

    def take(self, seq):
        """The entry of the request ``seq`` answers (None: not ours, or already answered)."""
        with self.lock:
            return self.items.pop(seq, None)

    def close(self) -> list:
        """The peer is gone: every unanswered (seq, item), which nobody else will answer now."""
        with self.lock:
            self.open = False
            left, self.items = list(self.items.items()), {}
        return left

    def send(self, channel: Channel, req: dict, item) -> bool:
        """Write ``req`` (its own seq) on ``channel``, recorded as ``item``. False when the
        caller must answer it itself: the peer is gone and nobody else will."""
        seq = req.get("seq")
        added = self.add(seq, item)
        if added and channel.write(req, renumber=False):
            return True
        if not added:
            return False
        with self.lock:                      # not written: ours to answer, unless close() took it first
            return self.items.pop(seq, self) is self


def response(req: dict, body=None, error: str | None = None, show: bool = False) -> dict:
    """The DAP response to ``req``: its body, or a failure whose message the client may show."""
    msg = {"type": "response", "request_seq": req.get("seq"), "command": req.get("command"), "success": error is None}
    if error is not None:
        msg["message"] = error
        msg["body"] = {"error": {"id": 1, "format": error, "showUser": show}}
    elif body is not None:
        msg["body"] = body
    return msg
