"""msvm_server: the editor side of msvm (language server and debug adapter).

The language server (issue: pygls, ``python -m msvm_server lsp``) and the debug
adapter (``python -m msvm_server dap``) are built on top of ``msvm``; this
package imports msvm, never the other way round.
"""
