"""The ``[MS]`` logger. Level from ``MSVM_LOG`` (DEBUG, INFO, WARNING), the CLI's
``--log-level`` or ``set_context(jit_config={"jit_log_level": ...})``."""

from __future__ import annotations

import logging
import os
import sys

logger = logging.getLogger("msvm")
_handler = logging.StreamHandler(sys.stderr)
_handler.setFormatter(logging.Formatter("[MS] %(message)s"))
logger.addHandler(_handler)
logger.propagate = False
logger.setLevel(os.environ.get("MSVM_LOG", "WARNING").upper())


def set_level(level: str) -> None:
    logger.setLevel(str(level).upper())


def debug_enabled() -> bool:
    return logger.isEnabledFor(logging.DEBUG)


def emit_block(text: str) -> None:
    """Print a multi-line block (a bytecode dump); its first line already starts with [MS]."""
    print(text, file=sys.stderr if os.environ.get("MSVM_DUMP_TO_STDERR") else sys.stdout, flush=True)
