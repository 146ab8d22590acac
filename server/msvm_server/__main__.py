"""``python -m msvm_server lsp|dap``."""

import os
import sys


def main(argv=None) -> int:
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
