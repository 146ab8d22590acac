"""The telemetry socket under hostile senders: huge lines, garbage, too many clients, silence.

The hub runs in this process (what it buffers is this process's memory); the clients are
asyncio streams in the same loop, each writing from one small reused chunk, so the memory
they need themselves is a few hundred kB.
"""

import asyncio
import json
import logging

from msvm_server.lsp.telemetry import LINE_LIMIT, TelemetryHub

MiB = 1024 * 1024


def status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def reset_peak() -> bool:
    """Resets VmHWM to the current RSS (Linux 4.0+); False where that is not allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def line(msg: dict) -> bytes:
    return (json.dumps(msg) + "\n").encode()


def hello(pid: int) -> bytes:
    return line({"type": "hello", "version": 1, "pid": pid, "script": f"p{pid}.py", "argv": []})


def stats(pid: int) -> bytes:
    return line({"type": "stats", "stats": {"hits": pid, "misses": 0, "recent": []}})


class Hub:
    """A started TelemetryHub with what it passed on and what it logged."""

    def __init__(self, **kw):
        self.got: list = []
        self.logged: list = []
        self.arrived = asyncio.Condition()
        self.hub = TelemetryHub(self._on_message, **kw)
        self.handler = logging.Handler()
        self.handler.emit = lambda record: self.logged.append(record.getMessage())

    def _on_message(self, program, msg):
        self.got.append((program["pid"], msg))
        asyncio.get_running_loop().create_task(self._notify())

    async def _notify(self):
        async with self.arrived:
            self.arrived.notify_all()

    async def wait_for(self, pred, timeout=60):
        """Until pred(messages so far) holds; the timeout only turns a hang into a failure."""
        async with self.arrived:
            await asyncio.wait_for(self.arrived.wait_for(lambda: pred(self.got)), timeout)

    async def __aenter__(self):
        logging.getLogger("msvm_server.lsp.telemetry").addHandler(self.handler)
        address = await self.hub.start()
        assert address.startswith("unix:")
        self.path = address[5:]
        return self

    async def __aexit__(self, *exc):
        self.hub.close()
        logging.getLogger("msvm_server.lsp.telemetry").removeHandler(self.handler)

    async def connect(self):
        return await asyncio.open_unix_connection(self.path)


async def send(writer, *parts):
    for p in parts:
        writer.write(p)
        await writer.drain()


def test_huge_lines_are_skipped_memory_stays_bounded_and_others_get_through():
    """Eight programs each send a 60 MB line; a ninth, well-formed one is heard, and so are the eight's later lines."""
    chunk = b"x" * MiB

    async def hostile(hub, pid):
        _, w = await hub.connect()
        await send(w, hello(pid), b'{"type": "stats", "stats": {"pad": "')
        for _ in range(60):
            await send(w, chunk)
        await send(w, b'"}}\n', stats(pid))
        w.close()

    async def main():
        async with Hub() as hub:
            before = status_kb("VmRSS")
            exact = reset_peak()
            peak = before

            async def sample():
                nonlocal peak
                while True:
                    peak = max(peak, status_kb("VmRSS"))
                    await asyncio.sleep(0.005)

            sampler = None if exact else asyncio.create_task(sample())    # VmHWM where it can be reset
            _, good = await hub.connect()
            await asyncio.gather(*(hostile(hub, pid) for pid in range(1, 9)), send(good, hello(100), stats(100)))
            await hub.wait_for(lambda got: {p for p, m in got if m["type"] == "stats"} == set(range(1, 9)) | {100})
            if sampler is not None:
                sampler.cancel()
            else:
                peak = status_kb("VmHWM")
            good.close()
            return hub, (peak - before) * 1024

    hub, growth = asyncio.run(main())
    assert LINE_LIMIT <= 4 * MiB
    assert growth < 64 * MiB, f"the server grew by {growth / MiB:.0f} MiB for eight 60 MB lines"
    assert all(m["stats"].get("hits") == p for p, m in hub.got if m["type"] == "stats"), "the huge lines were not passed on"
    assert sum("over" in m and "bytes" in m for m in hub.logged) == 8, hub.logged


def test_lines_that_are_not_json_objects_are_ignored():
    async def main():
        async with Hub() as hub:
            r, w = await hub.connect()
            await send(w, hello(1), b"not json\n", b"[1, 2]\n", b"\xff\xfe\x00 not utf-8\n", b"[" * 200_000 + b"\n",
                       b'{"type": "stats", "stats": \n', b"\n", b"null\n", stats(1))
            await hub.wait_for(lambda got: any(m["type"] == "stats" for _, m in got))
            w.close()
            # the listener still takes programs
            _, w2 = await hub.connect()
            await send(w2, hello(2), stats(2))
            await hub.wait_for(lambda got: any(p == 2 and m["type"] == "stats" for p, m in got))
            w2.close()
            return hub

    hub = asyncio.run(main())
    assert [(p, m["type"]) for p, m in hub.got] == [(1, "hello"), (1, "stats"), (2, "hello"), (2, "stats")]


def test_too_many_programs_at_once_the_extra_one_is_refused():
    async def main():
        async with Hub(max_clients=2) as hub:
            conns = [await hub.connect() for _ in range(2)]
            for pid, (_, w) in enumerate(conns, 1):
                await send(w, hello(pid))
            await hub.wait_for(lambda got: len(got) == 2)
            r3, w3 = await hub.connect()
            assert await asyncio.wait_for(r3.read(), 60) == b"", "the third connection is closed by the server"
            assert any("refused" in m for m in hub.logged), hub.logged
            # the first one says goodbye; once the server has closed its end, its slot is free
            conns[0][1].write_eof()
            assert await conns[0][0].read() == b""
            _, w4 = await hub.connect()
            await send(w4, hello(4), stats(4))
            await hub.wait_for(lambda got: any(p == 4 and m["type"] == "stats" for p, m in got))
            for _, w in conns[1:] + [(None, w4)]:
                w.close()

    asyncio.run(main())


def test_a_silent_or_oversized_first_line_drops_the_connection():
    async def main():
        async with Hub(hello_timeout=0.2, line_limit=1000) as hub:
            r, _ = await hub.connect()
            assert await r.read() == b""
            r2, w2 = await hub.connect()
            await send(w2, b"y" * 5000)
            assert await r2.read() == b""
            return hub

    hub = asyncio.run(main())
    assert any("no hello" in m for m in hub.logged) and any("first line over 1000" in m for m in hub.logged), hub.logged


def test_the_sender_keeps_to_the_line_limit():
    """msvm.telemetry does not send what the server would skip, and says so; the rest arrives."""
    from msvm import telemetry

    async def main():
        async with Hub() as hub:
            loop = asyncio.get_running_loop()
            t = await loop.run_in_executor(None, telemetry.Telemetry, hub.hub.address)
            try:
                t._send({"type": "stats", "stats": {"pad": "x" * LINE_LIMIT}})
                t._send({"type": "stats", "stats": {"hits": 7}})
                await hub.wait_for(lambda got: any(m["type"] == "stats" for _, m in got))
            finally:
                await loop.run_in_executor(None, t.close)
            return hub

    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger("msvm").addHandler(handler)
    try:
        hub = asyncio.run(main())
    finally:
        logging.getLogger("msvm").removeHandler(handler)
    sent = [m["stats"] for _, m in hub.got if m["type"] == "stats"]   # (the process's own stats may come too)
    assert {"hits": 7} in sent and not any("pad" in s for s in sent)
    assert any("line limit" in r.getMessage() for r in records)
    assert not any("over" in m for m in hub.logged)
