"""Run MindSpore's own per-op CPU tests (``tests/st/ops/cpu/test_*.py``) with ``mindspore``
aliased to msvm, and report what passes and why the rest fails.

Their test files stay outside msvm's repository. Bring them here first:

    python bench/conformance/run.py extract /path/to/mindspore.git /tmp/ms_st_cpu

(a MindSpore git directory, bare or not: it writes ``tests/st/ops/cpu/*.py`` and the few
``tests/`` helpers they import), then:

    python bench/conformance/run.py run /tmp/ms_st_cpu [--only abs,sin] [--json out.json]

Each group of files runs in its own pytest process with conftest.py (copied to the tree's
root) calling ``msvm.as_mindspore()``. Files about training (gradients, optimizers) are
excluded from the target, named with the rule that excluded them.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
TEST_DIR = "tests/st/ops/cpu"
HELPERS = ("tests/__init__.py", "tests/mark_utils.py", "tests/st/__init__.py", "tests/st/common/__init__.py",
           "tests/st/common/random_generator.py", "tests/st/ops/__init__.py", "tests/st/utils/test_utils.py",
           "tests/st/pynative/__init__.py", "tests/st/pynative/utils/__init__.py",
           "tests/st/pynative/utils/grad.py", "tests/st/pynative/utils/tools.py")

# a file is out of the target when its name or its code is about training: msvm runs forward passes
EXCLUDE_NAME = re.compile(r"grad|^test_(apply_|sparse_apply_|adam|sgd|momentum|rmsprop|fused_ada_factor|"
                          r"l1_regularizer|rl_buffer|priority_replay)")


def extract(git_dir: str, dest: str, commit: str = "HEAD") -> None:
    def show(path):
        return subprocess.run(["git", "-C", git_dir, "show", f"{commit}:{path}"], capture_output=True, check=True).stdout

    names = subprocess.run(["git", "-C", git_dir, "ls-tree", "--name-only", f"{commit}", f"{TEST_DIR}/"],
                           capture_output=True, text=True, check=True).stdout.split()
    for path in [n for n in names if n.endswith(".py")] + list(HELPERS):
        out = Path(dest) / path
        out.parent.mkdir(parents=True, exist_ok=True)
        try:
            out.write_bytes(show(path))
        except subprocess.CalledProcessError:
            print(f"not in {commit}: {path}", file=sys.stderr)
    print(f"{len(names)} test files under {Path(dest) / TEST_DIR}")


def excluded(path: Path) -> str | None:
    m = EXCLUDE_NAME.search(path.name)
    return f"training op ({m.group(0).strip('_')})" if m else None


def cause(rec: dict) -> str:
    """One line naming why a test failed, grouped across files."""
    t, msg = rec.get("type") or "?", rec.get("message") or ""
    if t == "MindSporeGap":
        name = msg.split(" is not provided")[0]
        if "training" in msg or "datasets" in msg:
            return f"out of scope (training/export): {name}"
        return f"missing API: {name}"
    if "msvm does not do training" in msg or "msvm does not export" in msg:
        return f"out of scope (training/export): {msg[:80]}"
    if t == "AssertionError":
        return "wrong values (assertion)"
    if t in ("ModuleNotFoundError", "ImportError"):
        return f"import: {msg[:100]}"
    if t == "AttributeError":
        m = re.search(r"has no attribute '(\w+)'", msg)
        return f"missing attribute: {m.group(1)}" if m else f"AttributeError: {msg[:80]}"
    if t in ("ShapeMismatch", "VerifyError") or "shape" in msg.lower():
        return f"shape: {t}"
    if t == "ConformanceTimeout":
        return "timeout"
    if t == "FrontendError":
        return f"frontend: {re.sub(r'^.*?: ', '', msg)[:90]}"
    if t == "Failed" and "DID NOT RAISE" in msg:
        return "expected an error, none raised"
    return f"{t}: {re.sub(r'[0-9]+', 'N', msg)[:90]}"


def run_group(root: Path, files: list[Path], timeout: int) -> list[dict]:
    fd, out = tempfile.mkstemp(suffix=".jsonl")
    os.close(fd)
    env = dict(os.environ, MSVM_CONFORMANCE_OUT=out, MSVM_CONFORMANCE_TIMEOUT=str(timeout))
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(root),
           "-o", "addopts=", "--continue-on-collection-errors", "--tb=no", "-W", "ignore", *map(str, files)]
    proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True,
                          timeout=timeout * 20 + 60 * len(files))
    recs = [json.loads(line) for line in Path(out).read_text().splitlines() if line.strip()]
    os.unlink(out)
    seen = {r["file"] for r in recs}
    for f in files:                      # a process that died leaves files without records
        rel = str(f.relative_to(root))
        if rel not in seen and proc.returncode not in (0, 1, 5):
            recs.append({"nodeid": rel, "file": rel, "when": "crash", "outcome": "error", "type": "Crash",
                         "message": f"pytest exited {proc.returncode}: {proc.stderr[-200:]}", "where": None})
    return recs


def run(root: str, only: str | None, jobs: int, group: int, timeout: int, json_out: str | None) -> dict:
    root = Path(root).resolve()
    shutil.copy(HERE / "conftest.py", root / "conftest.py")
    files = sorted((root / TEST_DIR).glob("test_*.py"))
    if only:
        keys = only.split(",")
        files = [f for f in files if any(k in f.stem for k in keys)]
    skipped = {f.name: why for f in files if (why := excluded(f))}
    target = [f for f in files if f.name not in skipped]
    groups = [target[i:i + group] for i in range(0, len(target), group)]
    recs: list[dict] = []
    with ThreadPoolExecutor(jobs) as pool:
        for part in pool.map(lambda g: run_group(root, g, timeout), groups):
            recs += part

    per_file = collections.defaultdict(collections.Counter)
    causes = collections.Counter()
    examples = {}
    for r in recs:
        ok = r["outcome"] == "passed"
        c = None if ok or r["outcome"] == "skipped" else cause(r)
        if c and c.startswith("out of scope"):   # a test of gradients or export inside a forward op's file
            r["outcome"] = "out_of_scope"
        per_file[Path(r["file"]).name]["passed" if ok else r["outcome"]] += 1
        if c:
            causes[c] += 1
            examples.setdefault(c, r["nodeid"])
    passed = sum(c["passed"] for c in per_file.values())
    total = sum(sum(c[k] for k in c if k not in ("skipped", "out_of_scope")) for c in per_file.values())
    out_of_scope = sum(c["out_of_scope"] for c in per_file.values())
    files_ok = sum(1 for c in per_file.values() if c["passed"] and not (c["failed"] or c["error"]))
    print(f"{len(recs)} records from {len(groups)} pytest runs")
    report = {"files": len(target), "files_all_passed": files_ok, "cases": total, "passed": passed,
              "out_of_scope_cases": out_of_scope,
              "excluded": skipped, "per_file": {k: dict(v) for k, v in sorted(per_file.items())},
              "causes": causes.most_common(), "examples": examples, "records": recs}
    print(f"{'file':44} passed failed error out-of-scope")
    for name, c in sorted(per_file.items()):
        print(f"{name:44} {c['passed']:6} {c['failed']:6} {c['error']:5} {c['out_of_scope']:5}")
    print(f"\nexcluded ({len(skipped)} files, training):")
    for name, why in sorted(skipped.items()):
        print(f"  {name}: {why}")
    print("\nfailures by cause:")
    for c, n in causes.most_common():
        print(f"  {n:5}  {c}    e.g. {examples[c]}")
    print(f"\n{passed} of {total} cases passed; {files_ok} of {len(target)} files passed completely "
          f"({len(skipped)} files excluded; {out_of_scope} cases of gradients/export in the others not counted)")
    if json_out:
        Path(json_out).write_text(json.dumps(report, indent=1))
    return report


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("extract", help="copy MindSpore's CPU op tests out of a git directory")
    e.add_argument("git_dir")
    e.add_argument("dest")
    e.add_argument("--commit", default="HEAD")
    r = sub.add_parser("run", help="run the extracted tests under msvm")
    r.add_argument("root", help="the directory extract wrote")
    r.add_argument("--only", help="comma-separated parts of file names")
    r.add_argument("--jobs", type=int, default=1)
    r.add_argument("--group", type=int, default=25, help="files per pytest process")
    r.add_argument("--timeout", type=int, default=60, help="seconds per test")
    r.add_argument("--json", dest="json_out")
    a = ap.parse_args(argv)
    if a.cmd == "extract":
        extract(a.git_dir, a.dest, a.commit)
    else:
        run(a.root, a.only, a.jobs, a.group, a.timeout, a.json_out)


if __name__ == "__main__":
    main()
