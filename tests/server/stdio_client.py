"""A minimal Content-Length framed client (LSP's JSON-RPC and DAP share the framing) over a
child process's stdio, for tests that must start a server exactly as the extension does."""

import json
import os
import queue
import subprocess
import threading
import time


class Framed:
    def __init__(self, argv, cwd, env):
        self.proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)
        self.inbox: queue.Queue = queue.Queue()
        self.seen: list = []
        self.seq = 0
        threading.Thread(target=self._read, daemon=True).start()
        self.stderr = []
        threading.Thread(target=lambda: self.stderr.extend(iter(self.proc.stderr.readline, b"")), daemon=True).start()

    def _read(self):
        out = self.proc.stdout
        while True:
            length = None
            while True:
                line = out.readline()
                if not line:
                    self.inbox.put(None)
                    return
                if not line.strip():
                    break
                name, _, value = line.decode().partition(":")
                if name.lower() == "content-length":
                    length = int(value)
            self.inbox.put(json.loads(out.read(length)))

    def raw(self, data: bytes):
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, msg: dict):
        body = json.dumps(msg).encode()
        self.raw(b"Content-Length: %d\r\n\r\n" % len(body) + body)

    def wait(self, want, timeout=60.0, what="a message"):
        """The first message (seen before or arriving within timeout) for which want(msg) holds."""
        for m in self.seen:
            if want(m):
                self.seen.remove(m)
                return m
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {what} within {timeout}s; stderr: {b''.join(self.stderr)[-3000:]!r}")
            try:
                m = self.inbox.get(timeout=left)
            except queue.Empty:
                continue
            if m is None:
                raise AssertionError(f"the server exited ({self.proc.wait()}) before {what}; "
                                     f"stderr: {b''.join(self.stderr)[-3000:]!r}")
            if want(m):
                return m
            self.seen.append(m)

    # --- LSP
    def lsp_request(self, method, params, timeout=60.0):
        self.seq += 1
        self.send({"jsonrpc": "2.0", "id": self.seq, "method": method, "params": params})
        k = self.seq
        r = self.wait(lambda m: m.get("id") == k and "method" not in m, timeout, f"a reply to {method}")
        assert "error" not in r, r
        return r["result"]

    def lsp_notify(self, method, params):
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    # --- DAP
    def dap_request(self, command, arguments=None, timeout=60.0, ok=True):
        self.seq += 1
        self.send({"seq": self.seq, "type": "request", "command": command, "arguments": arguments or {}})
        k = self.seq
        r = self.wait(lambda m: m.get("type") == "response" and m.get("request_seq") == k, timeout,
                      f"the response to {command}")
        if ok:
            assert r["success"], r
        return r

    def dap_event(self, name, want=lambda m: True, timeout=60.0):
        return self.wait(lambda m: m.get("type") == "event" and m.get("event") == name and want(m), timeout,
                         f"a {name} event")

    def close(self):
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def alive(pid: int) -> bool:
    """Whether the process exists and is not a zombie (a container's init may never reap one)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def wait_until(cond, timeout=30.0, what="the condition"):
    """Poll cond (bounded); never a fixed sleep standing in for an event."""
    deadline = time.monotonic() + timeout
    delay = 0.01
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout}s")
        time.sleep(delay)
        delay = min(delay * 2, 0.2)


def env_without_python_vars(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(extra)
    return env
