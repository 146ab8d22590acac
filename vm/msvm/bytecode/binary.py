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

A reader rejects, with a ``BytecodeError`` that names the file, the byte offset
in it (and, inside a function's code, the function and the instruction's
offset) and what was expected and found: a short file, a bad magic, another ABI
(naming both versions), another opcode table, a bad checksum, an unknown opcode
(naming the byte), a length or count that runs past what is left, malformed
tables, and anything the verifier rejects. Every length, count and index is
checked before it is used, the work is linear in the size of the file, and the
nesting the recursive readers walk is capped (see ``tables`` and ``symbolic``
for the caps on JSON and symbolic values). Limits of the format: at most
MAX_FUNCTIONS functions, MAX_CODE bytes of code per function (labels are u16),
65536 entries per table, and sub-Cell calls nested at most MAX_CALL_DEPTH deep.
Loaded code is verified, every function of the file, before it is returned.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import tempfile

from ..errors import BytecodeError, VerifyError
from .code import Code, Instr
from .disasm import code_to_data, loc_to_data
from .opcodes import ABI_VERSION, BY_CODE, FINGERPRINT
from .tables import MAX_JSON_DEPTH, check_json, code_from_data, loc_from_data, parts_from_data, short
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


def decode_instrs(data: bytes, func: str = "") -> list:
    """Instructions from code bytes; a BytecodeError names the instruction offset (``code_offset``)."""
    out, off = [], 0
    while off < len(data):
        byte = data[off]
        op = BY_CODE.get(byte)
        if op is None:
            raise BytecodeError(f"unknown opcode 0x{byte:02x} at offset 0x{off:04x}: expected one of this VM's "
                                f"opcodes (bytecode ABI {ABI_VERSION})", code_offset=off)
        if off + op.size > len(data):
            raise BytecodeError(f"truncated {op.name}: needs {op.size} bytes, {len(data) - off} left in the code",
                                code_offset=off)
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


MAX_FUNCTIONS = 4096
MAX_CODE = 0xFFFF
MAX_CALL_DEPTH = 64


class _Reader:
    """Where the reader is (for the last-line-of-defence error) and how it fails."""

    def __init__(self, data: bytes, source: str):
        self.data, self.source = data, source
        self.at = 0                 # the offset of what is being read
        self.function = None

    def fail(self, message: str, offset: int | None = None, **kw):
        raise BytecodeError(message, self.source, self.at if offset is None else offset,
                            kw.pop("function", self.function), **kw)

    def u32(self, off: int, end: int, what: str) -> int:
        self.at = off
        if off + 4 > end:
            self.fail(f"truncated {what}: expected a u32, {max(end - off, 0)} bytes left in the payload")
        return struct.unpack_from("<I", self.data, off)[0]


def loads(data: bytes, source: str = "<bytes>") -> Code:
    """The entry Code of a ``.msbc`` image; raises BytecodeError (never anything else) for bad data."""
    r = _Reader(bytes(data), str(source))
    try:
        return _read(r)
    except BytecodeError:
        raise
    except Exception as e:  # noqa: BLE001 - the last line of defence: every failure is a BytecodeError
        raise BytecodeError(f"malformed content the reader did not expect ({type(e).__name__}: {e})",
                            r.source, r.at, r.function) from None


def _read(r: _Reader) -> Code:
    data = r.data
    if len(data) < _HEADER.size + _SUM:
        r.fail(f"truncated: {len(data)} bytes, a header and checksum need {_HEADER.size + _SUM}", len(data))
    magic, abi, flags, fp, nfunc, plen = _HEADER.unpack_from(data, 0)
    if magic != MAGIC:
        r.fail(f"not an msvm bytecode file: expected the magic {MAGIC!r}, found {magic!r}", 0)
    if abi != ABI_VERSION:
        r.fail(f"bytecode ABI {abi} is not supported; this VM reads ABI {ABI_VERSION}. "
               f"Recompile the Cell with this msvm (msvm dump --out).", 4)
    want = _HEADER.size + plen + _SUM
    if len(data) < want:
        r.fail(f"truncated: the payload length field says {plen} bytes, so a file of {want} bytes; "
               f"the file has {len(data)}", 28)
    if len(data) > want:
        r.fail(f"{len(data) - want} unexpected bytes after the checksum (the payload length field says {plen})",
               want)
    end = len(data) - _SUM
    if hashlib.sha256(data[:end]).digest() != data[end:]:
        r.fail("checksum mismatch: the sha256 of the file does not match the one stored here; the file is corrupt",
               end)
    if fp != FINGERPRINT:
        r.fail(f"opcode table fingerprint {fp.hex()} differs from this VM's {FINGERPRINT.hex()} although both "
               f"say ABI {ABI_VERSION}", 8)
    if flags != 0:
        r.fail(f"expected flags 0, found 0x{flags:04x}", 6)
    if not 1 <= nfunc <= min(MAX_FUNCTIONS, plen // 8):
        r.fail(f"expected 1 to {min(MAX_FUNCTIONS, plen // 8)} functions (each record takes at least 8 of the "
               f"{plen} payload bytes; the limit is {MAX_FUNCTIONS}), found {nfunc}", 24)
    off = _HEADER.size
    done: list = []
    starts: dict = {}           # id(Code) -> (metadata offset, code offset)
    depth: dict = {}            # id(Code) -> how deep its sub-Cell calls nest
    for fi in range(nfunc):
        r.function = None
        mlen = r.u32(off, end, f"function {fi} record (metadata length)")
        meta_at = off + 4
        if mlen > end - meta_at:
            r.fail(f"function {fi}: metadata length {mlen} runs past the payload ({end - meta_at} bytes left)")
        meta = _json(r, data[meta_at:meta_at + mlen], meta_at, f"function {fi} metadata")
        if isinstance(meta, dict) and isinstance(meta.get("name"), str) and meta["name"].isprintable():
            r.function = meta["name"]
        off = meta_at + mlen
        clen = r.u32(off, end, f"function {fi} code length")
        code_at = off + 4
        if clen > end - code_at:
            r.fail(f"function {fi}: code length {clen} runs past the payload ({end - code_at} bytes left)")
        if clen > MAX_CODE:
            r.fail(f"function {fi}: {clen} bytes of code; the limit is {MAX_CODE} (labels are u16)")
        r.at = code_at
        try:
            instrs = decode_instrs(data[code_at:code_at + clen])
        except BytecodeError as e:
            raise e.located(r.source, code_at + (e.code_offset or 0), r.function) from None
        off = code_at + clen
        r.at = meta_at
        try:
            if not isinstance(meta, dict):
                raise BytecodeError(f"expected a JSON object, found {short(meta)}")
            _source_map(meta, instrs)
            code = code_from_data(meta, instrs, done)
        except BytecodeError as e:
            raise BytecodeError(f"metadata: {e.message}", r.source, meta_at, r.function) from None
        depth[id(code)] = 1 + max((depth[id(sub)] for _, sub in code.callees), default=0)
        if depth[id(code)] > MAX_CALL_DEPTH:
            r.fail(f"sub-Cell calls nest {depth[id(code)]} deep; the limit is {MAX_CALL_DEPTH}")
        starts[id(code)] = (meta_at, code_at)
        done.append(code)
    r.function = None
    if off != end:
        r.fail(f"{end - off} bytes after the last of the {nfunc} function records (the payload ends at "
               f"0x{end:04x})", off)
    for code in done:                   # callees come first, so each is verified before its callers
        r.function, (r.at, code_at) = code.name, starts[id(code)]
        try:
            verify(code)
        except VerifyError as e:
            at = code_at + e.offset if e.offset is not None else r.at
            raise BytecodeError(f"verification failed: {e}", r.source, at, code.name, e.offset) from None
    return done[-1]


def _json(r: _Reader, raw: bytes, at: int, what: str):
    r.at = at
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        r.fail(f"{what}: expected UTF-8 JSON, found the byte 0x{raw[e.start]:02x}", at + e.start)
    try:
        v = json.loads(text)
    except json.JSONDecodeError as e:
        r.fail(f"{what}: malformed JSON: {e.msg}", at + len(text[:e.pos].encode("utf-8")))
    except RecursionError:
        r.fail(f"{what}: JSON nested too deeply (the limit is {MAX_JSON_DEPTH} levels)")
    except ValueError as e:             # an integer of more digits than Python converts
        r.fail(f"{what}: malformed JSON: {str(e).split(':')[0]}")
    try:
        check_json(v, what)
    except BytecodeError as e:
        r.fail(e.message)
    return v


def _source_map(meta: dict, instrs: list):
    locs, parts = meta.get("locs"), meta.get("parts")
    for key, table in (("locs", locs), ("parts", parts)):
        if not isinstance(table, list) or len(table) != len(instrs):
            found = f"{len(table)} entries" if isinstance(table, list) else short(table)
            raise BytecodeError(f"source map {key!r}: expected one entry for each of the {len(instrs)} "
                                f"instructions, found {found}")
    for k, (ins, loc, ps) in enumerate(zip(instrs, locs, parts)):
        ins.loc = loc_from_data(loc, f"locs[{k}]")
        ins.parts = parts_from_data(ps, f"parts[{k}]")


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
