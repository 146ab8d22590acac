"""Starts the msvm debug adapter for DebugClient (which runs ``python FILE``)."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "server"))
from msvm_server.__main__ import main  # noqa: E402

sys.exit(main(["dap"]))
