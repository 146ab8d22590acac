"""``python -I -m msvm_server lsp|dap``.

The servers import nothing from the directory they are started in, which is often a
workspace (a ``json.py`` or ``numpy.py`` there must not run). ``-I`` keeps it off sys.path
from the start (the extension always passes it, see extension/src/server-command.json);
without it ``-m`` has already put the cwd first, so before anything else is imported
``main`` takes it (and ``''``, and any entry naming the same directory) off sys.path.
"""

import os
import sys


def drop_cwd_from_path(path: list) -> list:
    """sys.path without the entries that name the current directory."""
    try:
        here = os.path.realpath(os.getcwd())
    except OSError:            # the cwd was removed: only '' and '.' can name it
        here = None
    out = []
    for p in path:
        if p in ("", "."):
            continue
        try:
            if here is not None and os.path.realpath(p) == here:
                continue
        except (OSError, ValueError):
            pass
        out.append(p)
    return out


def main(argv=None) -> int:
    sys.path[:] = drop_cwd_from_path(sys.path)
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in ("lsp", "dap"):
        print("usage: python -m msvm_server lsp|dap", file=sys.stderr)
        return 2
    os.environ.pop("MSVM_TELEMETRY", None)      # the servers receive telemetry; they never send it
    if argv[0] == "lsp":
        from .lsp.server import main as lsp_main

        return lsp_main()
    from .dap.adapter import main as dap_main

    return dap_main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
