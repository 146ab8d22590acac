"""``python -m msvm_server lsp|dap``."""

import sys


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in ("lsp", "dap"):
        print("usage: python -m msvm_server lsp|dap", file=sys.stderr)
        return 2
    print(f"msvm_server: the {argv[0]} server is not available in this version of msvm", file=sys.stderr)
    return 3


if __name__ == "__main__":
    sys.exit(main())
