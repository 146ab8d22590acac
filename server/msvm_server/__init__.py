"""msvm_server: the editor side of msvm (language server and debug adapter).

    python -m msvm_server lsp    the language server (pygls, stdio): msvm_server.lsp
    python -m msvm_server dap    the debug adapter (DAP, stdio): msvm_server.dap

Built on top of ``msvm``; this package imports msvm, never the other way round.
"""

__version__ = "0.1.0"
