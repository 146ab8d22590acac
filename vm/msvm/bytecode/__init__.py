"""Tensor bytecode: the opcode table, Code objects, verifier, disassembler and
the ``.msbc`` binary format (``save`` / ``load``)."""

from ..errors import BytecodeError, VerifyError
from .binary import dumps, load, loads, save
from .code import Code, CodeBuilder, Instr, Loc
from .disasm import dump, from_json, records, to_json
from .opcodes import ABI_VERSION, BY_NAME, FINGERPRINT, TABLE
from .verify import verify

assemble = from_json
disassemble = to_json

__all__ = ["ABI_VERSION", "BY_NAME", "BytecodeError", "Code", "CodeBuilder", "FINGERPRINT", "Instr", "Loc",
           "TABLE", "VerifyError", "assemble", "disassemble", "dump", "dumps", "from_json", "load", "loads",
           "records", "save", "to_json", "verify"]
