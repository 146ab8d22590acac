"""The ``.msbc`` binary format: ``save(code, path)`` and ``load(path)``.

Layout (little-endian)::

    0   4  magic  b"MSBC"
    4   2  bytecode ABI version
    6   2  flags (0)
    8  16  opcode-table fingerprint (see opcodes.fingerprint)
   24   4  number of functions (callees first, the entry last)
   28   4  payload length
   32   .  payload: per function  u32 meta length, meta JSON (tables, types,
           source map), u32 code length, code bytes (opcode u8, u16 operands)
  end  32  sha256 of everything before it

A reader rejects, with a ``BytecodeError`` that says what and where: a short
file, a bad magic, another ABI (naming both versions), another opcode table,
a bad checksum, an unknown opcode (naming the byte and its offset) and
malformed tables. Loaded code is verified before it is returned.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import tempfile

from ..errors import BytecodeError, VerifyError
from .code import Code, Instr
from .disasm import code_from_data, code_to_data, loc_from_data, loc_to_data
from .opcodes import ABI_VERSION, BY_CODE, FINGERPRINT
from .verify import verify

MAGIC = b"MSBC"
_HEADER = struct.Struct("<4sHH16sII")
_SUM = 32


def encode_instrs(instrs) -> bytes:
    out = bytearray()
    for ins in instrs:
        out.append(ins.op.code)
        for a in ins.args:
            out += struct.pack("<H", a)
    return bytes(out)


def decode_instrs(data: bytes, func: str) -> list:
    out, off = [], 0
    while off < len(data):
        byte = data[off]
        op = BY_CODE.get(byte)
        if op is None:
            raise BytecodeError(f"unknown opcode 0x{byte:02x} at offset 0x{off:04x} in {func} "
                                f"(this VM reads bytecode ABI {ABI_VERSION})")
        if off + op.size > len(data):
            raise BytecodeError(f"truncated {op.name} at offset 0x{off:04x} in {func}: needs {op.size} bytes, "
                                f"{len(data) - off} left")
        args = struct.unpack_from("<" + "H" * len(op.operands), data, off + 1) if op.operands else ()
        out.append(Instr(op, tuple(args)))
        off += op.size
    return out


def dumps(code: Code) -> bytes:
    codes = code.all_codes()
    index = {id(c): i for i, c in enumerate(codes)}
    payload = bytearray()
    for c in codes:
        meta = code_to_data(c, index)
        meta["locs"] = [loc_to_data(i.loc) for i in c.instrs]
        meta["parts"] = [[[p, loc_to_data(pl)] for p, pl in i.parts] for i in c.instrs]
        mb = json.dumps(meta, separators=(",", ":")).encode()
        cb = encode_instrs(c.instrs)
        payload += struct.pack("<I", len(mb)) + mb + struct.pack("<I", len(cb)) + cb
    head = _HEADER.pack(MAGIC, code.abi, 0, FINGERPRINT, len(codes), len(payload))
    body = head + bytes(payload)
    return body + hashlib.sha256(body).digest()


def loads(data: bytes, source: str = "<bytes>") -> Code:
    if len(data) < _HEADER.size + _SUM:
        raise BytecodeError(f"{source}: truncated: {len(data)} bytes, a header and checksum need "
                            f"{_HEADER.size + _SUM}")
    magic, abi, _flags, fp, nfunc, plen = _HEADER.unpack_from(data, 0)
    if magic != MAGIC:
        raise BytecodeError(f"{source}: not an msvm bytecode file (magic {magic!r} at offset 0, expected {MAGIC!r})")
    if abi != ABI_VERSION:
        raise BytecodeError(f"{source}: bytecode ABI {abi} (at offset 0x0004) is not supported; this VM reads "
                            f"ABI {ABI_VERSION}. Recompile the Cell with this msvm (msvm dump --out).")
    want = _HEADER.size + plen + _SUM
    if len(data) < want:
        raise BytecodeError(f"{source}: truncated: header says {want} bytes, file has {len(data)}")
    if len(data) > want:
        raise BytecodeError(f"{source}: {len(data) - want} unexpected bytes after offset 0x{want:x}")
    body, digest = data[:-_SUM], data[-_SUM:]
    if hashlib.sha256(body).digest() != digest:
        raise BytecodeError(f"{source}: checksum mismatch (sha256 at offset 0x{len(body):x}); the file is corrupt")
    if fp != FINGERPRINT:
        raise BytecodeError(f"{source}: opcode table fingerprint {fp.hex()} (offset 0x0008) differs from this "
                            f"VM's {FINGERPRINT.hex()} although both say ABI {ABI_VERSION}")
    off = _HEADER.size
    done: list = []
    for fi in range(nfunc):
        try:
            (mlen,) = struct.unpack_from("<I", data, off)
            meta = json.loads(bytes(data[off + 4: off + 4 + mlen]).decode())
            off += 4 + mlen
            (clen,) = struct.unpack_from("<I", data, off)
            cbytes = bytes(data[off + 4: off + 4 + clen])
            if len(cbytes) != clen or off + 4 + clen > len(body):
                raise BytecodeError(f"{source}: function {fi} code runs past the payload")
            code_off = off + 4
            off += 4 + clen
        except (struct.error, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise BytecodeError(f"{source}: function {fi} record at offset 0x{off:x} is malformed: {e}") from None
        name = str(meta.get("name", f"function {fi}"))
        try:
            instrs = decode_instrs(cbytes, name)
        except BytecodeError as e:
            raise BytecodeError(f"{source}: {e} (file offset 0x{code_off:x} + code offset)") from None
        locs, parts = meta.get("locs", []), meta.get("parts", [])
        if len(locs) != len(instrs) or len(parts) != len(instrs):
            raise BytecodeError(f"{source}: {name}: source map has {len(locs)} entries for {len(instrs)} instructions")
        for ins, loc, ps in zip(instrs, locs, parts):
            ins.loc = loc_from_data(loc)
            ins.parts = tuple((str(p), loc_from_data(pl)) for p, pl in ps)
        try:
            done.append(code_from_data(meta, instrs, done))
        except (TypeError, ValueError, KeyError, AttributeError) as e:
            raise BytecodeError(f"{source}: {name}: malformed tables: {e}") from None
    if off != len(body) or not done:
        raise BytecodeError(f"{source}: payload length does not match its {nfunc} function records")
    entry = done[-1]
    try:
        verify(entry)
    except VerifyError as e:
        raise BytecodeError(f"{source}: verification failed: {e}") from None
    return entry


def save(code: Code, path) -> None:
    """Write atomically (temp file + rename)."""
    data = dumps(code)
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".msbc-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def load(path) -> Code:
    with open(path, "rb") as f:
        data = f.read()
    return loads(data, str(path))
