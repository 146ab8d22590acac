"""The debug adapter over raw stdio: it survives frames that are not DAP messages, and the
processes the debugged program starts end with the session. Waits are on messages or on
bounded polls of process state, never fixed sleeps."""

import os
import sys

import pytest
from stdio_client import Framed, alive, wait_until

ADAPTER = [sys.executable, "-m", "msvm_server", "dap"]


@pytest.fixture
def adapter(tmp_path):
    a = Framed(ADAPTER, cwd=tmp_path, env=dict(os.environ, MSVM_CACHE_DIR=str(tmp_path / "kernels")))
    yield a
    a.close()


def frame(body: bytes, header: bytes | None = None) -> bytes:
    return (header if header is not None else b"Content-Length: %d" % len(body)) + b"\r\n\r\n" + body


BAD_FRAMES = {
    "non-numeric length": frame(b'{"seq": 1, "type": "request", "command": "threads"}', b"Content-Length: twelve"),
    "negative length": frame(b'{"seq": 1}', b"Content-Length: -5"),
    "empty length": frame(b'{"seq": 1}', b"Content-Length:"),
    "huge length": frame(b'{"seq": 1}', b"Content-Length: 99999999999999"),
    "not JSON": frame(b"{this is not json"),
    "not UTF-8": frame(b'{"a": "\xff\xfe"}'),
    "JSON but not an object": frame(b"[1, 2, 3]"),
    "a number": frame(b"42"),
}


@pytest.mark.parametrize("bad", list(BAD_FRAMES), ids=list(BAD_FRAMES))
def test_a_malformed_frame_is_reported_and_the_adapter_keeps_serving(adapter, bad):
    adapter.raw(BAD_FRAMES[bad])
    note = adapter.dap_event("output", lambda m: m["body"].get("category") == "important")
    assert "msvm debug adapter" in note["body"]["output"] and "skipped" in note["body"]["output"]
    r = adapter.dap_request("initialize", {"adapterID": "msvm"})
    assert r["body"]["supportsDisassembleRequest"] is True
    assert adapter.proc.poll() is None


def test_many_bad_frames_in_a_row_then_requests(adapter):
    adapter.raw(b"".join(BAD_FRAMES.values()) + b"garbage without a header\r\n\r\n")
    r = adapter.dap_request("initialize", {"adapterID": "msvm"})
    assert r["success"]
    notes = [m for m in adapter.seen if m.get("event") == "output" and m["body"].get("category") == "important"]
    assert len(notes) >= len(BAD_FRAMES) - 1     # a bad frame may swallow the garbage after it, never a request
    # a request the adapter cannot relay still gets an answer
    r = adapter.dap_request("threads", ok=True)
    assert r["body"]["threads"] == []
    r = adapter.dap_request("evaluate", {"expression": "1"}, ok=False)
    assert r["success"] is False


SPAWNER = '''import subprocess
import sys
import time

child = subprocess.Popen([sys.executable, "-c", """
import subprocess, sys, time
grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print(grandchild.pid, flush=True)
time.sleep(600)
"""], stdout=subprocess.PIPE)
grandchild = int(child.stdout.readline())
print("PIDS", child.pid, grandchild, flush=True)
if "--exit" not in sys.argv:
    time.sleep(600)
'''


def start_spawner(adapter, tmp_path, args=()):
    prog = tmp_path / "spawner.py"
    prog.write_text(SPAWNER)
    adapter.dap_request("initialize", {"adapterID": "msvm"})
    adapter.dap_request("launch", {"program": str(prog), "args": list(args)})
    adapter.dap_event("initialized")
    adapter.dap_request("configurationDone")
    out = adapter.dap_event("output", lambda m: m["body"]["output"].startswith("PIDS"))
    pids = [int(x) for x in out["body"]["output"].split()[1:]]
    assert all(alive(p) for p in pids)
    return pids


@pytest.mark.parametrize("how", ["disconnect", "terminate", "stdin closed"])
def test_children_of_the_program_end_with_the_session(adapter, tmp_path, how):
    pids = start_spawner(adapter, tmp_path)
    if how == "stdin closed":
        adapter.proc.stdin.close()
        assert adapter.proc.wait(60) == 0
    else:
        adapter.dap_request(how)
    wait_until(lambda: not any(alive(p) for p in pids), 30, f"the program's child and grandchild ending on {how}")


def test_children_outliving_the_program_end_at_disconnect(adapter, tmp_path):
    pids = start_spawner(adapter, tmp_path, ["--exit"])
    adapter.dap_event("terminated", timeout=60)
    assert all(alive(p) for p in pids), "the program's children may run on while the session lasts"
    adapter.dap_request("disconnect")
    wait_until(lambda: not any(alive(p) for p in pids), 30, "the children ending at disconnect")


def test_children_end_when_the_adapter_is_killed(adapter, tmp_path):
    pids = start_spawner(adapter, tmp_path)
    debuggee = adapter.dap_event("process")["body"]["systemProcessId"]
    adapter.proc.kill()                   # no disconnect, no stdin EOF seen by the adapter: the debuggee notices
    adapter.proc.wait()
    wait_until(lambda: not any(alive(p) for p in [debuggee, *pids]), 30, "the program and its children ending")


SLEEPER = "import time\nprint('READY', flush=True)\ntime.sleep(600)\n"


def start_sleeper(adapter, tmp_path) -> int:
    """A program that sleeps, launched and running (msvm alone): its pid."""
    prog = tmp_path / "sleeper.py"
    prog.write_text(SLEEPER)
    adapter.dap_request("initialize", {"adapterID": "msvm"})
    adapter.dap_request("launch", {"program": str(prog), "pythonDebugging": False})
    adapter.dap_event("initialized")
    adapter.dap_request("configurationDone")
    adapter.dap_event("output", lambda m: m["body"]["output"].startswith("READY"))
    return adapter.dap_event("process")["body"]["systemProcessId"]


def ask(adapter, command, arguments=None) -> int:
    """Send a request without waiting for its answer: its seq."""
    adapter.seq += 1
    adapter.send({"seq": adapter.seq, "type": "request", "command": command, "arguments": arguments or {}})
    return adapter.seq


def answer(adapter, seq, what):
    return adapter.wait(lambda m: m.get("type") == "response" and m.get("request_seq") == seq, 30, what)


def test_a_request_the_program_never_answers_is_answered_when_it_dies(adapter, tmp_path):
    """A request relayed to the program gets an answer even when the program dies before it
    answers (CI: a ``threads`` right after ``disconnect`` went to the dying program and the
    client waited forever). The program is frozen with SIGSTOP so the request is surely in flight."""
    import signal

    pid = start_sleeper(adapter, tmp_path)
    os.kill(pid, signal.SIGSTOP)
    wait_until(lambda: _state(pid) == "T", 30, "the program stopped by SIGSTOP")
    asked, evaluated = ask(adapter, "threads"), ask(adapter, "evaluate", {"expression": "1"})
    os.kill(pid, signal.SIGKILL)
    r = answer(adapter, asked, "the answer to threads")
    assert r["success"] and r["body"]["threads"] == []
    r = answer(adapter, evaluated, "the answer to evaluate")
    # (relayed and failed when the program died, or, read after the adapter saw the end, refused)
    assert r["success"] is False and ("ended" in r["message"] or "no program is running" in r["message"])
    adapter.dap_event("terminated")
    assert adapter.dap_request("threads")["body"]["threads"] == []


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rpartition(")")[2].split()[0]


@pytest.mark.parametrize("how", ["disconnect", "terminate"])
def test_requests_right_after_the_end_are_answered(adapter, tmp_path, how):
    """The client may ask at once after disconnect/terminate, before the adapter has seen the
    program's end: every request still gets its answer."""
    start_sleeper(adapter, tmp_path)
    for cmd, seq in [(cmd, ask(adapter, cmd, {"threadId": 1})) for cmd in (how, "threads", "stackTrace", "threads")]:
        answer(adapter, seq, f"the answer to {cmd}")
