"""Mutations of real .msbc images for the reader's fuzz test (test_bcfuzz.py).

Each mutation takes a valid image and returns another one whose header length
and sha256 are recomputed, so the change reaches the parser instead of stopping
at the checksum: raw ones (bit flips, byte sets, truncations, splices, length
fields bumped) and structure-aware ones (a JSON value of a function's metadata
replaced, an instruction byte or operand changed). ``link`` links every function
of a loaded Code the way the interpreter does, which is what a verified Code
must survive.
"""

from __future__ import annotations

import hashlib
import json
import struct

import numpy as np

HEAD = struct.Struct("<4sHH16sII")
SUM = 32


def seal(orig: bytes, payload: bytes, nfunc: int | None = None, header: dict | None = None) -> bytes:
    """A new image with orig's header (fields in ``header`` replaced), this payload, a right length and sum."""
    magic, abi, flags, fp, n, _ = HEAD.unpack_from(orig)
    h = dict(magic=magic, abi=abi, flags=flags, fp=fp, n=n if nfunc is None else nfunc)
    h.update(header or {})
    body = HEAD.pack(h["magic"], h["abi"], h["flags"], h["fp"], h["n"], len(payload)) + payload
    return body + hashlib.sha256(body).digest()


def payload(data: bytes) -> bytes:
    return data[HEAD.size:-SUM]


def records(data: bytes) -> list:
    """[[meta bytes, code bytes], ...] of a valid image."""
    n = HEAD.unpack_from(data)[4]
    off, out = HEAD.size, []
    for _ in range(n):
        (ml,) = struct.unpack_from("<I", data, off)
        meta = data[off + 4: off + 4 + ml]
        off += 4 + ml
        (cl,) = struct.unpack_from("<I", data, off)
        out.append([meta, data[off + 4: off + 4 + cl]])
        off += 4 + cl
    return out


def build(orig: bytes, recs: list) -> bytes:
    return seal(orig, b"".join(struct.pack("<I", len(m)) + m + struct.pack("<I", len(c)) + c for m, c in recs))


def length_fields(data: bytes) -> list:
    """Payload-relative offsets of every u32 length field (meta, code) in a valid image."""
    out, off = [], 0
    for meta, code in records(data):
        out.append(off)
        off += 4 + len(meta)
        out.append(off)
        off += 4 + len(code)
    return out


# ---------------------------------------------------------------- raw mutations

def bitflip(data, pos, bit):
    p = bytearray(payload(data))
    p[pos % len(p)] ^= 1 << (bit % 8)
    return seal(data, bytes(p))


def setbyte(data, pos, value):
    p = bytearray(payload(data))
    p[pos % len(p)] = value & 0xFF
    return seal(data, bytes(p))


def truncate(data, pos):
    p = payload(data)
    return seal(data, p[:pos % (len(p) + 1)])


def splice(data, src, n, dst, overwrite):
    p = bytearray(payload(data))
    src, dst = src % len(p), dst % len(p)
    chunk = p[src:src + n]
    if overwrite:
        p[dst:dst + len(chunk)] = chunk
    else:
        p[dst:dst] = chunk
    return seal(data, bytes(p))


def bump_length(data, which, delta):
    fields = length_fields(data)
    at = fields[which % len(fields)]
    p = bytearray(payload(data))
    (v,) = struct.unpack_from("<I", p, at)
    struct.pack_into("<I", p, at, (v + delta) % 2 ** 32)
    return seal(data, bytes(p))


def header_field(data, field, value):
    if field == "n":
        return seal(data, payload(data), nfunc=value % 2 ** 32)
    return seal(data, payload(data), header={field: value % 2 ** 16})


# ---------------------------------------------------------------- structure-aware mutations

HOLE = "\x00HOLE"


def _paths(v, path=()):
    yield path
    if isinstance(v, dict):
        for k, x in v.items():
            yield from _paths(x, path + (k,))
    elif isinstance(v, list):
        for i, x in enumerate(v):
            yield from _paths(x, path + (i,))


def replace_json(data, rec, pick, raw: str):
    """Replace one value (chosen by ``pick``) of function ``rec``'s metadata with the JSON text ``raw``."""
    recs = records(data)
    rec %= len(recs)
    meta = json.loads(recs[rec][0])
    paths = list(_paths(meta))
    path = paths[pick % len(paths)]
    if not path:
        text = raw
    else:
        parent = meta
        for k in path[:-1]:
            parent = parent[k]
        parent[path[-1]] = HOLE
        text = json.dumps(meta, separators=(",", ":")).replace(json.dumps(HOLE), raw, 1)
    recs[rec][0] = text.encode("utf-8", "surrogatepass")
    return build(data, recs)


def set_code(data, rec, pos, value, width):
    """Set a byte (width 1) or a u16 (width 2) of function ``rec``'s code."""
    recs = records(data)
    rec %= len(recs)
    code = bytearray(recs[rec][1])
    if not code:
        return data
    pos %= len(code)
    if width == 1:
        code[pos] = value & 0xFF
    else:
        code[pos:pos + 2] = struct.pack("<H", value & 0xFFFF)
    recs[rec][1] = bytes(code)
    return build(data, recs)


def interesting_json() -> list:
    """Values that once crashed the reader or made it slow (as JSON text)."""
    poly = ["poly", [[i + 1, [[["sym", f"s{i}"], 1]]] for i in range(2000)]]
    nested = ["sym", "B"]
    for _ in range(100):
        nested = ["floordiv", ["poly", [[1, [[nested, 1]]], [1, []]]], ["poly", [[2, []]]]]
    blowup = ["poly", [[1, [[["max", ["poly", [[1, [[["sym", f"a{i}"], 1]]] for i in range(8)]],
                               ["poly", [[1, [[["sym", f"a{i}"], 1]]] for i in range(8)]]], 16]]]]]
    return [
        "[" * 5000 + "]" * 5000, "{\"tuple\":" * 3000 + "null" + "}" * 3000, "9" * 5000, "-1", "1e999", "NaN",
        "\"\\ud800\"", "\"a\\nb\"", "[]", "{}", "[[]]", "[null]", "true", "65536", "4294967296",
        json.dumps({"sym": poly}), json.dumps(poly), json.dumps({"sym": nested}), json.dumps({"sym": blowup}),
        json.dumps({"sym": ["and"] + [["flag", f"f{i}"] for i in range(2000)]}),
        json.dumps({"array": [[1, 2], [3]], "dtype": "float32", "shape": [2, 2]}),
        json.dumps({"array": [1000], "dtype": "int8", "shape": [1]}),
        json.dumps({"array": [], "dtype": "float32", "shape": [0, 10 ** 18]}),
        json.dumps({"tensor": [["const", True]], "dtype": "float32"}),
        json.dumps({"scalar": "i", "value": ["flag", "x"]}),
        json.dumps({"int": True}), json.dumps({"int": 2 ** 70}), json.dumps({"float": [1]}),
        json.dumps({"dtype": ["float32"]}), json.dumps({"sym": ["cmp", [1], ["poly", []], ["poly", []]]}),
        json.dumps(["poly", [[1, [[["floordiv", ["poly", [[1, [[["sym", "B"], 1]]]]], ["poly", []]], 1]]]]]),
        json.dumps([["x", [1, 2, 3, 4]]]), json.dumps([[0, 0, 0, 0]] * 3),
    ]


# ---------------------------------------------------------------- linking

def link(code):
    """Link every function as the interpreter does (attribute values stand in as tiny arrays)."""
    from msvm.bytecode.types import TensorType
    from msvm.interp.interpreter import BoundCode

    for c in code.all_codes():
        attrs = {k: np.zeros((1,) * t.rank, t.dtype.np) for k, t in c.attr_types.items() if isinstance(t, TensorType)}
        BoundCode(c, None, attrs, lambda path, sub: None)


def json_dumps(v) -> str:
    return json.dumps(v, separators=(",", ":"))
