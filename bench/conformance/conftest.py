"""pytest plugin for running MindSpore's own op tests under msvm (see run.py).

``run.py`` copies this file to the root of the extracted test tree. It makes ``import
mindspore`` resolve to msvm before any test module is imported, stops a test that runs past
``MSVM_CONFORMANCE_TIMEOUT`` seconds, and appends one JSON line per test outcome (and per
file that fails to import) to the file named by ``MSVM_CONFORMANCE_OUT``.
"""

import json
import os
import signal
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # MindSpore's own tests.* helpers

import msvm  # noqa: E402

msvm.as_mindspore()

_OUT = os.environ.get("MSVM_CONFORMANCE_OUT")
_TIMEOUT = int(os.environ.get("MSVM_CONFORMANCE_TIMEOUT", "60"))


class ConformanceTimeout(Exception):
    """The test ran past MSVM_CONFORMANCE_TIMEOUT seconds."""


def _alarm(signum, frame):
    raise ConformanceTimeout(f"test ran past {_TIMEOUT} s")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(_TIMEOUT)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


_PLATFORM = os.environ.get("MSVM_CONFORMANCE_MARK", "cpu_linux")


def pytest_configure(config):
    for mark in ("cpu_linux", "cpu_windows", "cpu_macos", "platform_ascend", "platform_ascend910b",
                 "platform_ascend310p", "platform_gpu", "level0", "level1", "level2", "level3", "level4",
                 "onecard", "allcards", "dryrun", "dryrun_only", "essential", "unessential"):
        config.addinivalue_line("markers", mark)


def pytest_collection_modifyitems(config, items):
    """Keep the tests MindSpore's CPU runs select (marked cpu_linux by arg_mark); helpers named
    test_* that other tests call with arguments are not tests there either."""
    keep = [it for it in items if it.get_closest_marker(_PLATFORM)]
    drop = [it for it in items if not it.get_closest_marker(_PLATFORM)]
    if drop:
        config.hook.pytest_deselected(items=drop)
    items[:] = keep


def _cause(excinfo):
    """(exception type, first line of its message, innermost frame in msvm or the test)."""
    if excinfo is None:
        return None, None, None
    exc = excinfo.value
    msg = str(exc).strip().splitlines()
    where = None
    for entry in reversed(excinfo.traceback):
        where = f"{os.path.basename(str(entry.path))}:{entry.lineno + 1}"
        break
    return type(exc).__name__, (msg[0][:300] if msg else ""), where


def _write(record):
    if _OUT:
        with open(_OUT, "a") as f:
            f.write(json.dumps(record) + "\n")


def pytest_runtest_logreport(report):
    if report.when != "call" and report.outcome == "passed":
        return
    if report.when == "teardown" and report.outcome != "failed":
        return
    etype, msg, where = _cause(getattr(report, "_msvm_excinfo", None))
    _write({"nodeid": report.nodeid, "file": report.nodeid.split("::")[0], "when": report.when,
            "outcome": report.outcome, "type": etype, "message": msg, "where": where})


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    rep._msvm_excinfo = call.excinfo


def pytest_collectreport(report):
    if report.failed:
        text = str(report.longrepr).strip().splitlines()
        err = next((ln for ln in reversed(text) if ln.startswith("E ")), text[-1] if text else "")
        etype, _, msg = err[1:].strip().partition(": ")
        _write({"nodeid": report.nodeid, "file": report.nodeid, "when": "collect", "outcome": "error",
                "type": etype, "message": msg[:300], "where": None})
