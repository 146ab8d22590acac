"""dap/debugpy_glue: the version check in front of debugpy's internals, and the probe of them."""

import os
import subprocess
import sys

import pytest
from msvm_server.dap import debugpy_glue as glue


def test_the_tested_version_passes():
    assert glue.problem(glue.TESTED) is None


@pytest.mark.parametrize("found", ["1.9.0", "1.8.21", "2.0.0b1"])
def test_another_version_is_refused_naming_both_versions(found, monkeypatch):
    monkeypatch.delenv(glue.UNTESTED_ENV, raising=False)
    why = glue.problem(found)
    assert f"debugpy {found} is installed" in why
    assert f"debugpy {glue.TESTED}'s internals" in why
    assert f"pip install debugpy=={glue.TESTED}" in why and glue.UNTESTED_ENV in why


def test_another_version_may_be_tried_on_request(monkeypatch):
    monkeypatch.setenv(glue.UNTESTED_ENV, "1")
    assert glue.problem("1.9.0") is None


PROGRAMS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "dap", "programs")


def _problem_under(debugpy_dir: str) -> str:
    """glue.problem() in a Python whose ``import debugpy`` finds the package in debugpy_dir first."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([debugpy_dir, *sys.path]))
    env.pop(glue.UNTESTED_ENV, None)
    r = subprocess.run([sys.executable, "-c", "from msvm_server.dap import debugpy_glue as g; print(g.problem())"],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_no_debugpy_is_said():
    """A debugpy that cannot be imported (tests/dap/programs/no_debugpy) is an absent one."""
    assert _problem_under(os.path.join(PROGRAMS, "no_debugpy")) == "debugpy is not installed"


def test_a_python_without_site_packages_has_no_debugpy():
    """``python -S`` (no site-packages, so no debugpy; nothing has imported importlib.util either):
    the version check answers None instead of failing on an attribute it did not import."""
    server = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(glue.__file__))))   # msvm_server's parent
    env = dict(os.environ, PYTHONPATH=server)
    r = subprocess.run([sys.executable, "-S", "-c", "from msvm_server.dap import debugpy_glue as g; print(g.problem())"],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "debugpy is not installed"


def test_an_installed_other_version_is_named():
    assert _problem_under(os.path.join(PROGRAMS, "other_debugpy")).startswith("debugpy 1.9.0 is installed")


# pydevd is imported in a child process: importing it here would patch this process's threads
PROBE = """
import sys
from msvm_server.dap import debugpy_glue as glue
if sys.argv[1] == "bogus":
    glue._INTERNALS = glue._INTERNALS + (("_pydevd_bundle.pydevd_constants", "NO_SUCH_NAME"),)
    glue._METHODS = glue._METHODS + (("PyDB", ("no_such_method",)),)
print(glue.missing_internals())
if sys.argv[1] == "bogus":
    try:
        glue.connect(1, "t", ())
    except RuntimeError as e:
        print(e)
"""


def _probe(mode: str) -> list:
    r = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().splitlines()


def test_every_internal_it_uses_exists_in_the_installed_debugpy():
    if glue.version() != glue.TESTED:
        pytest.fail(f"debugpy {glue.version()} installed; msvm[ide] pins {glue.TESTED}")
    assert _probe("ok") == ["[]"]


def test_a_missing_internal_is_named_and_connect_refuses_before_connecting():
    out = _probe("bogus")
    assert out[0] == "['_pydevd_bundle.pydevd_constants.NO_SUCH_NAME', 'PyDB.no_such_method']"
    assert out[1] == (f"debugpy {glue.version()} lacks _pydevd_bundle.pydevd_constants.NO_SUCH_NAME, "
                      "PyDB.no_such_method, which msvm's mixed-mode debugging uses")


def test_a_request_debugpy_never_answers_gets_a_failure_when_its_adapter_dies():
    """PyLink's callbacks run once each: with the response, or with a failure when debugpy's
    adapter is gone first (frozen by SIGSTOP so the request is surely unanswered, then killed),
    and at once for a request sent after that."""
    import signal
    import threading

    from msvm_server.dap.pylink import PyLink

    link = PyLink(lambda msg: None)
    try:
        assert link.request("initialize", {"adapterID": "msvm-python"})["success"]
        os.kill(link.proc.pid, signal.SIGSTOP)
        got, done = [], threading.Event()
        link.send("threads", {}, lambda msg: (got.append(msg), done.set()))
        link.proc.kill()
        assert done.wait(30), "the callback of the unanswered request never ran"
        assert got[0]["success"] is False and "ended" in got[0]["message"]
        link.reader.join(30)
        late = []
        link.send("threads", {}, late.append)
        assert len(late) == 1 and late[0]["success"] is False
        assert len(got) == 1
    finally:
        link.close()
