"""The ``msvm`` command line.

    msvm run SCRIPT [ARGS...] [--log-level DEBUG] [--dump]   run a script under the VM
    msvm dump SCRIPT [--cell NAME] [--json] [--out FILE.msbc] compile a file's Cells without running it
              [--emit llvm|ptx [--arch sm_90] [--flag NAME=0]]   ... or print their kernels' LLVM IR / PTX
    msvm check FILE.msbc                                     load and verify a bytecode file
    msvm opcodes                                             print the opcode table
    msvm cache stats|clear                                   the compiled-kernel cache on disk
    msvm profile SCRIPT [ARGS...] [--html F] [--json F]      run a script and report compile/exec time
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import sys

from . import log
from .errors import BytecodeError, MsvmError


def _parser():
    p = argparse.ArgumentParser(prog="msvm", description="msvm: a bytecode VM for dynamic-shape tensor programs")
    sub = p.add_subparsers(dest="cmd", required=True)

    r = sub.add_parser("run", help="run a Python script with msvm (its Cells run as bytecode)")
    r.add_argument("--log-level", default=None, help="DEBUG shows every [MS] line (or set MSVM_LOG)")
    r.add_argument("--dump", action="store_true", help="print each Cell's bytecode when it is compiled")
    r.add_argument("--mindspore", action="store_true",
                   help="run MindSpore code unchanged: `import mindspore` resolves to msvm (or MSVM_AS_MINDSPORE=1)")
    r.add_argument("script")
    r.add_argument("args", nargs=argparse.REMAINDER)

    d = sub.add_parser("dump", help="compile every Cell and jit function of a file, without executing it")
    d.add_argument("script")
    d.add_argument("--cell", help="only this Cell class or jit function")
    d.add_argument("--json", action="store_true", help="print the instruction records as JSON")
    d.add_argument("--out", help="write the (one) Cell's bytecode to this .msbc file")
    d.add_argument("--callees", action="store_true", help="also print the code of the sub-Cells each one calls")
    d.add_argument("--plan", action="store_true",
                   help="print what runs: the code after fusion and the memory plan (buffers, sizes, peak bytes)")
    d.add_argument("--emit", choices=["llvm", "ptx"], help="print the Cell's kernels: LLVM IR for the CPU, or PTX")
    d.add_argument("--arch", default="sm_90", help="GPU architecture for --emit ptx (sm_80, sm_90)")
    d.add_argument("--flag", action="append", default=[], metavar="NAME=0|1",
                   help="value of a bool flag argument for --emit (default: every flag true)")

    c = sub.add_parser("check", help="load and verify a .msbc file")
    c.add_argument("file")

    sub.add_parser("opcodes", help="print the opcode table")

    pr = sub.add_parser("profile", help="run a script under the VM and write its compile/execution profile")
    pr.add_argument("--html", help="write a self-contained HTML report here")
    pr.add_argument("--json", help="write the profile as JSON here (the editor's heatmap reads it)")
    pr.add_argument("--no-exec-times", action="store_true", help="do not time each instruction")
    pr.add_argument("--mindspore", action="store_true", help="`import mindspore` resolves to msvm")
    pr.add_argument("script")
    pr.add_argument("args", nargs=argparse.REMAINDER)

    k = sub.add_parser("cache", help="the compiled-kernel cache on disk")
    k.add_argument("action", choices=["stats", "clear"])
    return p


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    try:
        return {"run": cmd_run, "dump": cmd_dump, "check": cmd_check, "opcodes": cmd_opcodes,
                "cache": cmd_cache, "profile": cmd_profile}[args.cmd](args)
    except MsvmError as e:
        print(f"msvm: {e}", file=sys.stderr)
        return 1
    except FileNotFoundError as e:
        print(f"msvm: {e.filename}: no such file", file=sys.stderr)
        return 2


def _leading_run_options(args):
    """msvm's own options may also follow the script name: msvm run x.py --log-level DEBUG --dump."""
    rest = list(args.args)
    while rest:
        if rest[0] in ("--html", "--json") and len(rest) > 1 and hasattr(args, rest[0][2:]):
            setattr(args, rest[0][2:], rest[1])
            del rest[:2]
        elif rest[0] == "--dump" and hasattr(args, "dump"):
            args.dump = True
            rest.pop(0)
        elif rest[0] == "--mindspore":
            args.mindspore = True
            rest.pop(0)
        elif rest[0] == "--log-level" and len(rest) > 1:
            args.log_level = rest[1]
            del rest[:2]
        elif rest[0].startswith("--log-level="):
            args.log_level = rest.pop(0).split("=", 1)[1]
        elif rest[0] == "--":
            rest.pop(0)
            break
        else:
            break
    args.args = rest


def cmd_run(args) -> int:
    _leading_run_options(args)
    _configure_run(args)
    _run_script(args)
    return 0


def _configure_run(args):
    if args.log_level:
        os.environ["MSVM_LOG"] = args.log_level.upper()
        log.set_level(args.log_level)
    if args.dump:
        os.environ["MSVM_DUMP_BYTECODE"] = "1"
        from . import context
        context.set_context(jit_config={"dump_bytecode": True})
    if getattr(args, "mindspore", False) or os.environ.get("MSVM_AS_MINDSPORE", "") not in ("", "0"):
        os.environ["MSVM_AS_MINDSPORE"] = "1"          # the script's own child processes too
        from .compat import as_mindspore
        as_mindspore()


def _run_script(args):
    if not os.path.exists(args.script):
        raise FileNotFoundError(2, "no such file", args.script)
    sys.argv = [args.script] + list(args.args)
    sys.path.insert(0, os.path.dirname(os.path.abspath(args.script)))
    runpy.run_path(args.script, run_name="__main__")


def cmd_profile(args) -> int:
    """Run the script with a Profiler subscribed; write the report even when the script fails."""
    from .profile import Profiler, render_html

    args.log_level, args.dump = None, False
    _leading_run_options(args)
    _configure_run(args)
    if not (args.html or args.json):
        args.html = "msvm-profile.html"
    os.environ["MSVM_TELEMETRY_PROFILE"] = "0"      # this command reports the profile itself
    prof = Profiler(args.script, args.args).start(exec_times=not args.no_exec_times)
    status, failure = 0, None
    try:
        _run_script(args)
    except SystemExit as e:
        status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except FileNotFoundError:
        raise
    except BaseException as e:  # noqa: BLE001 - the report is written whatever the script did
        import traceback

        traceback.print_exc()
        prof.errors.append({"type": "error", "what": "script", "why": f"{type(e).__name__}: {e}"})
        failure = f"{type(e).__name__}: {e}"
        status = 1
    finally:
        prof.stop()
    try:
        from .compiler.tiers import wait_for_compiles

        wait_for_compiles(30)
    except ImportError:
        pass
    report = prof.report()
    report["status"] = status
    if failure:
        report["error"] = failure
    for path, text in ((args.json, lambda: json.dumps(report, indent=1)), (args.html, lambda: render_html(report))):
        if path:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text())
            print(f"msvm: wrote {path}", file=sys.stderr)
    return status


def cmd_dump(args) -> int:
    from .bytecode import dump, save, to_json
    from .static import analyze_file

    entries = analyze_file(args.script)
    if args.cell:
        entries = [e for e in entries if e.name == args.cell]
        if not entries:
            print(f"msvm: no Cell or jit function named {args.cell!r} in {args.script}", file=sys.stderr)
            return 1
    failed = [e for e in entries if e.error is not None]
    if args.emit:
        for e in entries:
            if e.code is not None:
                print(emit_kernels(e.code, args.emit, args.arch, args.flag))
        for e in failed:
            print(f"msvm: {e.error}", file=sys.stderr)
        return 1 if failed else 0
    if args.out:
        good = [e for e in entries if e.code is not None]
        if len(entries) != 1 or not good:
            print("msvm: --out writes one Cell: choose it with --cell NAME" if len(entries) != 1 else
                  f"msvm: {entries[0].error}", file=sys.stderr)
            return 1
        save(good[0].code, args.out)
        print(f"wrote {args.out} ({os.path.getsize(args.out)} bytes)")
        return 0
    file_notes = getattr(entries, "notes", [])
    if args.json:
        out = [{"name": e.name, "kind": e.kind, "line": e.line, **(to_json(e.code) if e.code else {}),
                "error": str(e.error) if e.error else None,
                "notes": [{"line": n.line, "message": n.message} for n in file_notes + e.notes]} for e in entries]
        json.dump(out, sys.stdout, indent=1)
        print()
    else:
        for n in file_notes:        # what the analysis assumed or could not afford
            print(f"; note: {args.script}:{n.line}: {n.message}")
        for e in entries:
            for n in e.notes:
                print(f"; note: {args.script}:{n.line}: {e.name}: {n.message}")
            if e.code is not None:
                print(dump(planned(e.code) if getattr(args, "plan", False) else e.code, with_callees=args.callees))
    for e in failed:
        print(f"msvm: {e.error}", file=sys.stderr)
    return 1 if failed else 0


def planned(code):
    """The Code as it runs: what the executor makes of it (``executor.optimize``: fused when fusion is
    on, memory-planned when the plan is on and the device is the CPU)."""
    from .executor import optimize

    return optimize(code)


def emit_kernels(code, what: str, arch: str = "sm_90", flags=()) -> str:
    """The LLVM IR (CPU) or PTX (GPU) of the L2 kernels of a Code after fusion, one block per kernel."""
    from .compiler.fuse import fuse
    from .compiler.lower import Unsupported, lower
    from .compiler.specialize import flag_params, specialize
    from .compiler.static_kernels import kernels_of

    values = {}
    for f in flags:
        name, _, v = f.partition("=")
        values[name.strip()] = v.strip().lower() not in ("0", "false", "no", "")
    fl = flag_params(code)
    if fl:
        code = specialize(code, {n: values.get(n, True) for _, n in fl})
    run = fuse(code, cpu=what != "ptx")       # (the Code a GPU runs keeps its own rows: compiler/norm.py)
    out, seen = [], set()
    for k in kernels_of(run):
        ident = (k.code, k.offset, k.kernel.text() if k.kernel is not None else k.why)
        if ident in seen:          # sub-Cells of the same class and shapes share their kernels
            continue
        seen.add(ident)
        head = f"; {k.code} @0x{k.offset:04x} {k.op} (L2: shape-generic)"
        if k.kernel is None:
            out.append(f"{head}\n; stays in the interpreter: {k.why}\n")
            continue
        name = f"msvm_{k.kernel.name}"
        try:
            if what == "llvm":
                from .compiler.codegen import codegen

                text = lower(k.kernel, name, codegen().features)
            else:
                from .compiler.lower_gpu import emit_ptx, lower_gpu

                text = emit_ptx(lower_gpu(k.kernel, name), arch)
                head = head.replace(";", "//", 1) + f" {arch}"
        except Unsupported as e:
            out.append(f"{head}\n; stays in the interpreter: {e}\n")
            continue
        out.append(f"{head}\n{text}")
    if not out:
        out.append(f"; {code.name}: no instruction compiles to a kernel (everything runs in the interpreter)")
    return "\n".join(out)


def cmd_check(args) -> int:
    """One line either way: ``FILE: ok: ...`` on stdout, or ``FILE: offset 0x..: message`` on stderr (exit 1)."""
    from .bytecode import load

    try:
        code = load(args.file)
    except BytecodeError as e:
        _one_line(str(e))
        return 1
    except OSError as e:
        _one_line(f"{args.file}: cannot read: {e.strerror or e}")
        return 2 if isinstance(e, FileNotFoundError) else 1
    n = sum(len(c.instrs) for c in code.all_codes())
    print(f"{args.file}: ok: {code.name}, {len(code.all_codes())} function(s), {n} instructions, ABI {code.abi}")
    return 0


def _one_line(message: str):
    print(message.replace("\r", "\\r").replace("\n", "\\n"), file=sys.stderr)


def cmd_cache(args) -> int:
    from .compiler.cache import KernelCache

    cache = KernelCache()
    if args.action == "clear":
        n = cache.clear_disk()
        print(f"removed {n} kernel(s) from {cache.dir}")
        if cache.refused:
            print(f"not used: {cache.refused}")
        return 0
    entries = cache.disk_entries()
    print(f"directory: {cache.dir}")
    if cache.refused:
        print(f"not used:  {cache.refused}")
    print(f"kernels:   {len(entries)} ({cache.disk_bytes() / 1024:.1f} KiB)")
    print("hits/misses are counted per process: see ms.cache_stats() or msvm profile")
    return 0


def cmd_opcodes(args) -> int:
    from .bytecode.opcodes import TABLE

    for r in TABLE:
        ops = " ".join(f"{n}:{k}" for n, k in r.operands)
        print(f"0x{r.code:02x} {r.name:<20} {r.kind:<12} {ops:<40} {r.doc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
