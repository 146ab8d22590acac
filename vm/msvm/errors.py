"""The errors msvm raises for bad input. Each says what and where."""

from __future__ import annotations


class MsvmError(Exception):
    """Base of every error msvm raises on purpose."""


def one_line(text: str) -> str:
    """``text`` with every character Python does not print as itself (line breaks, C0 and C1 controls, DEL,
    other separators) escaped as Python writes them: a name read from a file (a symbol, a function) can hold
    any character, and the message stays one line that a terminal shows as it is."""
    return "".join(c if c.isprintable() or c == "\t" else repr(c)[1:-1] for c in text)


class BytecodeError(MsvmError):
    """A .msbc file or a Code object is malformed.

    It names what was expected and what was found; when it comes from a file it
    also names the file, the byte offset in the file and, inside a function's
    code, the function and the instruction's offset in that code. ``str()`` is one
    line: ``FILE: offset 0x002a: function 'F': instruction 0x0006: message``.
    """

    def __init__(self, message: str, filename: str | None = None, offset: int | None = None,
                 function: str | None = None, code_offset: int | None = None):
        self.message = message
        self.filename = filename
        self.offset = offset                # byte offset in the file
        self.function = function            # the function (Code name) it is in
        self.code_offset = code_offset      # the instruction's offset in that function's code
        super().__init__(self._text())

    def _text(self) -> str:
        parts = []
        if self.filename is not None:
            parts.append(self.filename)
        if self.offset is not None:
            parts.append(f"offset 0x{self.offset:04x}")
        if self.function is not None:
            parts.append(f"function {self.function!r}")
        if self.code_offset is not None:
            parts.append(f"instruction 0x{self.code_offset:04x}")
        return one_line(": ".join(parts + [self.message]))

    def located(self, filename=None, offset=None, function=None, code_offset=None) -> "BytecodeError":
        """This error with the places it lacks filled in (the outer reader knows the file)."""
        def pick(mine, given):
            return mine if mine is not None else given
        return BytecodeError(self.message, pick(self.filename, filename), pick(self.offset, offset),
                             pick(self.function, function), pick(self.code_offset, code_offset))


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


class ShapeMismatch(MsvmError, ValueError):
    """Arguments do not satisfy what the compiled bytecode requires (checked on entry). A ValueError,
    as MindSpore's shape errors are (issue 21)."""


class ExecutionError(SourceError, RuntimeError):
    """An instruction failed while running (names the instruction and its source)."""


_KINDS = (TypeError, ValueError, IndexError, KeyError, ZeroDivisionError, OverflowError)
_KINDED: dict = {}


def execution_error_like(cause: BaseException) -> type:
    """ExecutionError, also of the built-in kind ``cause`` is (TypeError, ValueError, IndexError...):
    an op's TypeError stays catchable as one when it runs inside a Cell, as in PyNative and as
    MindSpore raises it (issue 21)."""
    bases = tuple(k for k in _KINDS if isinstance(cause, k) and not issubclass(ExecutionError, k))
    if not bases:
        return ExecutionError
    cls = _KINDED.get(bases)
    if cls is None:
        names = "".join(k.__name__ for k in bases)
        cls = _KINDED[bases] = type(f"Execution{names}", (ExecutionError, *bases),
                                    {"__doc__": f"An instruction failed while running with a {names}.",
                                     "__module__": __name__})
        globals()[cls.__name__] = cls       # (found by name, as pickle looks classes up)
    return cls


class UnknownDim(MsvmError, ValueError):
    """Compiling needs a dim's value (to split a tensor into that many parts, to loop over it) and
    the dim is symbolic: the caller recompiles for the call's exact shapes (see executor)."""
