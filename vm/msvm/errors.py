"""The errors msvm raises for bad input. Each says what and where."""

from __future__ import annotations


class MsvmError(Exception):
    """Base of every error msvm raises on purpose."""


class BytecodeError(MsvmError):
    """A .msbc file or a Code object is malformed (names what, the offset, the ABIs)."""


class SourceError(MsvmError):
    """An error tied to a place in the user's source: ``file:line:col: message``."""

    def __init__(self, message: str, filename: str = "<unknown>", line: int = 0, col: int = 0,
                 end_line: int | None = None, end_col: int | None = None, offset: int | None = None):
        self.message = message
        self.filename = filename
        self.line = line
        self.col = col                      # 0-based
        self.end_line = end_line if end_line is not None else line
        self.end_col = end_col if end_col is not None else col + 1
        self.offset = offset                # bytecode offset, when there is one
        where = f"{filename}:{line}:{col + 1}"
        at = f" (bytecode offset 0x{offset:04x})" if offset is not None else ""
        super().__init__(f"{where}: {message}{at}")


class FrontendError(SourceError):
    """Python in construct/jit that msvm cannot compile."""


class ArgumentError(FrontendError, TypeError):
    """A call's argument cannot be compiled with (names the Cell or function and the parameter)."""


class FrontendValueError(FrontendError, ValueError):
    """A ValueError raised by an op's argument check while compiling construct (keeps its type, so
    ``except ValueError`` and MindSpore's tests see what MindSpore raises)."""


class VerifyError(SourceError):
    """The verifier rejected the bytecode: a shape, dtype or stack error."""


class ShapeMismatch(MsvmError):
    """Arguments do not satisfy what the compiled bytecode requires (checked on entry)."""


class ExecutionError(SourceError, RuntimeError):
    """An instruction failed while running (names the instruction and its source)."""


class UnknownDim(MsvmError, ValueError):
    """Compiling needs a dim's value (to split a tensor into that many parts, to loop over it) and
    the dim is symbolic: the caller recompiles for the call's exact shapes (see executor)."""
