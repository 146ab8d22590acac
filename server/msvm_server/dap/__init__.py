"""The msvm debug adapter (DAP, type ``msvm``), split as vscode-mock-debug splits it:

- ``runtime``:  protocol-free execution control over the interpreter's trace hook
                (breakpoints, stepping, stops, instruction addresses)
- ``values``:   what a stopped frame shows (scopes, variables, evaluate)
- ``debuggee``: the process that runs the user's program; answers DAP requests with the
                runtime over a private socket
- ``adapter``:  ``python -m msvm_server dap``: DAP over stdio, starts the debuggee,
                relays requests, turns its stdout/stderr into ``output`` events
- ``pylink``:   the adapter as a DAP client of debugpy's adapter (``pythonDebugging``)
- ``mixed``:    one session over both: routing by thread, frame id, variable reference, line
- ``pyside``:   debugpy inside the debuggee, and the hand-overs between the two debuggers
- ``debugpy_glue``: every use of debugpy's internals, behind a version check
- ``wire``:     Content-Length framing shared by all channels
"""
