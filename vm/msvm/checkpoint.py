"""MindSpore checkpoints: ``load_checkpoint``, ``load_param_into_net``, ``save_checkpoint``.

Two file formats, read and written here without protobuf or safetensors installed:

- ``.ckpt``, MindSpore's own: a protobuf ``Checkpoint`` (``mindspore/ccsrc/utils/checkpoint.proto``, proto2)::

      message Checkpoint { message Value { required string tag = 1;
                                           oneof value { TensorProto tensor = 2; MapTensorProto maptensor = 3; } }
                           repeated Value value = 1; }
      message TensorProto { repeated int64 dims = 1; required string tensor_type = 2;
                            required bytes tensor_content = 3; }

  MindSpore writes one serialized ``Checkpoint`` holding one ``Value`` per parameter, back to back (which
  protobuf reads as one message); a tensor over 512 MiB is cut into several Values with the same tag and
  the same dims, whose contents are joined on load. ``dims`` are unpacked varints; ``tensor_type`` is the
  dtype's name (``Float32``, ``Int64``, ``Bool``...); the content is the raw little-endian C-order bytes. A
  scalar has no dims. A string (from ``append_dict``) is type ``str``, dims ``[0]``, numpy's UTF-32
  bytes. With ``crc_check=True`` MindSpore appends ``b"crc_num"`` and the CRC-32 of the messages as 10
  big-endian bytes. Encrypted files (``enc_key``) and MapParameters are refused with a message.
- ``.safetensors`` (MindSpore 2.3+ ``format="safetensors"``): an 8-byte little-endian header length, a
  JSON header ``{name: {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, "__metadata__":
  {...}}`` and the raw buffers.

Every read is bounded by the file: a length, dim or offset that points past the end, a bad varint, an
unknown field or dtype, raises ``CheckpointError`` naming the file and the byte offset, before anything
is allocated from it. Loading assigns through ``Parameter.set_data`` by MindSpore's parameter names
(``layer1.0.conv1.weight``, see ``Cell.update_parameters_name``); the names, shapes and dtypes are all
checked before the first parameter changes.

dtypes, as MindSpore: a checkpoint tensor whose dtype differs from its parameter's is converted when
both are floats or both signed integers and ``strict_load`` is False (a warning says so; float16 ->
float32 is exact), and refused otherwise. msvm has no bfloat16 or uint16/32/64: such tensors load as
float32 (exact) and int64 (exact; a uint64 value over 2**63-1 is refused).
"""

from __future__ import annotations

import binascii
import json
import os
import struct
from collections import Counter
from dataclasses import dataclass

import numpy as np

from . import dtype as dt
from .errors import MsvmError
from .log import logger
from .tensor import Parameter, Tensor

__all__ = ["CheckpointError", "ParameterMismatch", "load_checkpoint", "load_param_into_net", "save_checkpoint"]

SLICE_BYTES = 512 * 1024 * 1024      # MindSpore's chunk: a larger tensor is written as several Values
MAX_RANK = 64
MAX_SAFETENSORS_HEADER = 100 * 1024 * 1024      # the safetensors library's own limit

# tensor_type -> (numpy dtype in the file, the dtype msvm loads it as)
CKPT_TYPES = {d.ms_name: (d.np, d) for d in dt.ALL}
CKPT_TYPES.update({"BFloat16": (np.dtype("<u2"), dt.float32), "UInt16": (np.dtype("<u2"), dt.int64),
                   "UInt32": (np.dtype("<u4"), dt.int64), "UInt64": (np.dtype("<u8"), dt.int64)})
ST_TYPES = {"BOOL": "Bool", "U8": "UInt8", "I8": "Int8", "I16": "Int16", "I32": "Int32", "I64": "Int64",
            "F16": "Float16", "F32": "Float32", "F64": "Float64", "BF16": "BFloat16", "U16": "UInt16",
            "U32": "UInt32", "U64": "UInt64"}
ST_NAMES = {v: k for k, v in ST_TYPES.items()}


class CheckpointError(MsvmError, ValueError):
    """A checkpoint file is malformed or of a kind msvm does not read (names the file and the offset)."""


class ParameterMismatch(MsvmError, RuntimeError):
    """A checkpoint does not fit the network: a name, shape or dtype (names the parameter)."""


# --- the protobuf wire format ---------------------------------------------------------------------

@dataclass
class _Entry:
    """One ``Checkpoint.Value``: a tensor or a chunk of one."""

    tag: str
    dims: list
    tensor_type: str
    content: memoryview
    offset: int                      # where the Value starts in the file


class _Wire:
    """A cursor over protobuf bytes ``buf[pos:end]``; every error names the file and the offset."""

    def __init__(self, buf: memoryview, path: str, pos: int, end: int):
        self.buf, self.path, self.pos, self.end = buf, path, pos, end

    def error(self, what: str, at: int) -> CheckpointError:
        return CheckpointError(f"{self.path}: {what} at byte offset {at}")

    def varint(self) -> int:
        start, result, shift = self.pos, 0, 0
        while True:
            if self.pos >= self.end:
                raise self.error("truncated varint", start)
            b = self.buf[self.pos]
            self.pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                break
            shift += 7
            if shift >= 70:
                raise self.error("bad varint (longer than 10 bytes)", start)
        if result >> 64:
            raise self.error("bad varint (over 64 bits)", start)
        return result

    def fields(self, message: str):
        """(field number, wire type, value, offset): an int for varints, a sub-cursor for bytes."""
        while self.pos < self.end:
            at = self.pos
            key = self.varint()
            field, wire = key >> 3, key & 7
            if field == 0:
                raise self.error(f"field number 0 in {message}", at)
            if wire == 0:
                yield field, wire, self.varint(), at
            elif wire == 2:
                n = self.varint()
                if n > self.end - self.pos:
                    raise self.error(f"field {field} of {message} declares {n} bytes but {self.end - self.pos} "
                                     f"remain (length past the end)", at)
                yield field, wire, _Wire(self.buf, self.path, self.pos, self.pos + n), at
                self.pos += n
            elif wire in (1, 5):
                n = 8 if wire == 1 else 4
                if n > self.end - self.pos:
                    raise self.error(f"truncated fixed-width field {field} of {message}", at)
                self.pos += n
                yield field, wire, None, at
            else:
                raise self.error(f"wire type {wire} (field {field}) in {message}; a checkpoint has none", at)

    def text(self, what: str) -> str:
        try:
            return bytes(self.buf[self.pos:self.end]).decode("utf-8")
        except UnicodeDecodeError:
            raise self.error(f"{what} is not UTF-8", self.pos) from None

    def bytes_(self) -> memoryview:
        return self.buf[self.pos:self.end]


def _unexpected(w: _Wire, message: str, field: int, wire: int, at: int) -> CheckpointError:
    return w.error(f"unexpected field {field} (wire type {wire}) in {message}", at)


def _parse_tensor(w: _Wire, at: int):
    dims, tensor_type, content = [], None, None
    for field, wire, v, off in w.fields("TensorProto"):
        if field == 1 and wire == 0:
            dims.append(_dim(w, v, off))
        elif field == 1 and wire == 2:                         # packed, as a proto3 writer would
            while v.pos < v.end and len(dims) <= MAX_RANK:
                dims.append(_dim(w, v.varint(), off))
        elif field == 2 and wire == 2:
            tensor_type = v.text("tensor_type")
        elif field == 3 and wire == 2:
            content = v.bytes_()
        else:
            raise _unexpected(w, "TensorProto", field, wire, off)
        if len(dims) > MAX_RANK:
            raise w.error(f"TensorProto has more than {MAX_RANK} dims", off)
    if tensor_type is None or content is None:
        raise w.error(f"TensorProto lacks its required {'tensor_type' if tensor_type is None else 'tensor_content'}",
                      at)
    return dims, tensor_type, content


def _dim(w: _Wire, d: int, at: int) -> int:
    if d >= 1 << 63:                                            # an int64 below zero
        raise w.error(f"negative dim {d - (1 << 64)}", at)
    return d


def _parse_ckpt(data: bytes, path: str) -> list:
    buf = memoryview(data)
    top = _Wire(buf, path, 0, len(buf))
    if len(buf) and buf[0] != 0x0A:
        raise top.error(f"not a plain MindSpore checkpoint (it starts with byte 0x{buf[0]:02x}, a Checkpoint "
                        "starts with 0x0a); an encrypted one (saved with enc_key) is not read by msvm", 0)
    out = []
    for field, wire, v, at in top.fields("Checkpoint"):
        if field != 1 or wire != 2:
            raise _unexpected(top, "Checkpoint", field, wire, at)
        tag = tensor = None
        for f2, w2, v2, off in v.fields("Checkpoint.Value"):
            if f2 == 1 and w2 == 2:
                tag = v2.text("tag")
            elif f2 == 2 and w2 == 2:
                tensor = _parse_tensor(v2, off)
            elif f2 == 3 and w2 == 2:
                raise v.error(f"{tag or 'a Value'} is a MapParameter (maptensor), which msvm does not load", off)
            else:
                raise _unexpected(v, "Checkpoint.Value", f2, w2, off)
        if tag is None or tensor is None:
            raise top.error(f"Checkpoint.Value lacks its required {'tag' if tag is None else 'tensor'}", at)
        out.append(_Entry(tag, *tensor, at))
    return out


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field: key (number << 3 | 2), length, payload."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def encode_value(tag: str, dims, tensor_type: str, content: bytes) -> bytes:
    """One serialized ``Checkpoint`` holding one ``Value``, byte for byte what MindSpore writes."""
    tensor = b"".join(_varint(1 << 3) + _varint(int(d)) for d in dims)
    tensor += _field(2, tensor_type.encode()) + _field(3, bytes(content))
    return _field(1, _field(1, tag.encode("utf-8")) + _field(2, tensor))


# --- from entries to values, and back -------------------------------------------------------------

def _to_value(path: str, chunks: list):
    """A Parameter (or str / bytes) from the consecutive Values of one tag."""
    first = chunks[0]
    tag, tensor_type, dims = first.tag, first.tensor_type, first.dims
    for c in chunks[1:]:
        if c.tensor_type != tensor_type or c.dims != dims:
            raise CheckpointError(f"{path}: '{tag}' is in several Values that disagree on dims or type "
                                  f"(at byte offset {c.offset})")
    content = b"".join(c.content for c in chunks) if len(chunks) > 1 else first.content
    if tensor_type == "random_op":                # MindSpore 1.x's saved random state: kept as bytes
        return bytes(content)
    if tensor_type == "str":
        if len(content) % 4:
            raise CheckpointError(f"{path}: string '{tag}' has {len(content)} bytes, not UTF-32 "
                                  f"(at byte offset {first.offset})")
        try:                                      # numpy's <U: UTF-32-LE, padded with NULs
            return bytes(content).decode("utf-32-le").rstrip("\x00")
        except UnicodeDecodeError:
            raise CheckpointError(f"{path}: string '{tag}' is not UTF-32 (at byte offset {first.offset})") from None
    if tensor_type not in CKPT_TYPES:
        raise CheckpointError(f"{path}: '{tag}' has tensor_type {tensor_type!r}, not one of "
                              f"{', '.join(CKPT_TYPES)} (at byte offset {first.offset})")
    file_dtype, ms_dtype = CKPT_TYPES[tensor_type]
    return _make_param(path, tag, file_dtype, ms_dtype, dims, content, first.offset, tensor_type)


def _make_param(path, name, file_dtype, ms_dtype, dims, content, offset, type_name):
    shape = tuple(int(d) for d in dims)
    count = 1
    for d in shape:
        count *= d
    if count * file_dtype.itemsize != len(content):
        if shape == (0,) and len(content) == file_dtype.itemsize:
            shape, count = (), 1                 # MindSpore reads dims [0] as a scalar
        else:
            raise CheckpointError(f"{path}: '{name}' declares shape {shape} of {type_name} ({count} elements, "
                                  f"{count * file_dtype.itemsize} bytes) but holds {len(content)} bytes "
                                  f"(at byte offset {offset})")
    arr = np.frombuffer(content, file_dtype, count).reshape(shape)
    if type_name == "BFloat16":
        arr = (arr.astype(np.uint32) << 16).view(np.float32)
    elif type_name == "UInt64" and count and arr.max() >= 1 << 63:
        raise CheckpointError(f"{path}: '{name}' is UInt64 with values over int64's range; msvm has no uint64")
    return Parameter(Tensor(np.asarray(arr, dtype=ms_dtype.np)), name=name)


def _read_ckpt(data: bytes, path: str, crc_check: bool) -> dict:
    if data[-17:-10] == b"crc_num":
        crc, data = int.from_bytes(data[-10:], "big"), data[:-17]
        if crc_check and binascii.crc32(data) != crc:
            raise CheckpointError(f"{path}: the CRC check failed (the file is damaged)")
    elif crc_check:
        logger.warning("load_checkpoint: %s holds no CRC (it was saved without crc_check)", path)
    entries = _parse_ckpt(data, path)
    out, i = {}, 0
    while i < len(entries):
        j = i + 1
        while j < len(entries) and entries[j].tag == entries[i].tag:
            j += 1
        out[entries[i].tag] = entries[i:j]
        i = j
    return {tag: _to_value(path, chunks) for tag, chunks in out.items()}


def _read_safetensors(data: bytes, path: str) -> dict:
    def error(what, at):
        return CheckpointError(f"{path}: {what} at byte offset {at}")

    if len(data) < 8:
        raise error(f"truncated safetensors file ({len(data)} bytes, the header length alone takes 8)", 0)
    (n,) = struct.unpack_from("<Q", data, 0)
    if n > len(data) - 8 or n > MAX_SAFETENSORS_HEADER:
        raise error(f"the header declares {n} bytes but {len(data) - 8} follow (length past the end)", 0)
    try:
        header = json.loads(bytes(data[8:8 + n]).decode("utf-8"))
    except UnicodeDecodeError as e:
        raise error("the JSON header is not UTF-8", 8 + e.start) from None
    except json.JSONDecodeError as e:
        raise error(f"the JSON header is not JSON ({e.msg})", 8 + e.pos) from None
    except RecursionError:
        raise error("the JSON header nests too deeply", 8) from None
    if not isinstance(header, dict):
        raise error("the JSON header is not an object", 8)
    meta = header.pop("__metadata__", None) or {}
    if not isinstance(meta, dict):
        raise error("__metadata__ is not an object", 8)
    base, size = 8 + n, len(data) - 8 - n
    spans = []
    for name, info in header.items():
        if not (isinstance(info, dict) and isinstance(info.get("dtype"), str) and isinstance(info.get("shape"), list)
                and isinstance(info.get("data_offsets"), list) and len(info["data_offsets"]) == 2
                and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                        for d in info["shape"] + info["data_offsets"])):
            raise error(f"'{name}' needs dtype, shape (ints >= 0) and data_offsets [begin, end] in the header", 8)
        if info["dtype"] not in ST_TYPES or meta.get(name) == "qint4x2":
            raise error(f"'{name}' has dtype {meta.get(name) or info['dtype']}, not one of {', '.join(ST_TYPES)}", 8)
        if len(info["shape"]) > MAX_RANK:
            raise error(f"'{name}' has more than {MAX_RANK} dims", 8)
        begin, end = info["data_offsets"]
        if not begin <= end <= size:
            raise error(f"'{name}' has data_offsets [{begin}, {end}] outside the {size}-byte buffer", base)
        spans.append((begin, end, name))
    at = 0
    for begin, end, name in sorted(spans):      # the tensors tile the buffer: together no bigger than the file
        if begin != at:
            raise error(f"'{name}' starts at {begin} in the buffer, expected {at} (a gap or an overlap)", base + begin)
        at = end
    if at != size:
        raise error(f"the tensors cover {at} of the buffer's {size} bytes", base + at)
    buf, out = memoryview(data), {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        type_name = ST_TYPES[info["dtype"]]
        file_dtype, ms_dtype = CKPT_TYPES[type_name]
        out[name] = _make_param(path, name, file_dtype, ms_dtype, info["shape"], buf[base + begin:base + end],
                                base + begin, type_name)
    return out


def _entries(save_obj, choice_func) -> list:
    """(name, value) pairs from what MindSpore's save_checkpoint takes: a Cell, a list, a dict."""
    from .nn.cell import Cell

    if isinstance(save_obj, Cell):
        pairs = [(p.name, p) for _, p in save_obj.parameters_and_names()]
    elif isinstance(save_obj, dict):
        pairs = list(save_obj.items())
    elif isinstance(save_obj, (list, tuple)):
        pairs = []
        for item in save_obj:
            if isinstance(item, dict) and "name" in item and "data" in item:
                pairs.append((item["name"], item["data"]))
            elif isinstance(item, Parameter):
                pairs.append((item.name, item))
            else:
                raise TypeError("save_checkpoint: a list holds Parameters or {'name': ..., 'data': ...} dicts, "
                                f"got {type(item).__name__}")
    else:
        raise TypeError(f"save_checkpoint: save_obj is a Cell, a list or a dict, got {type(save_obj).__name__}")
    for name, _ in pairs:
        if not isinstance(name, str):
            raise TypeError(f"save_checkpoint: parameter names are str, got {name!r}")
    return [(k, v) for k, v in pairs if choice_func is None or choice_func(k)]


def _array(name, value) -> np.ndarray:
    if isinstance(value, Tensor):
        if value.is_placeholder:
            raise ValueError(f"save_checkpoint: '{name}' is a placeholder with no data")
        arr = value._host()                      # (read, not copied: a Parameter's array as it is)
    elif isinstance(value, np.ndarray):
        arr = value
    elif isinstance(value, (bool, int, float)):
        arr = Tensor(value).asnumpy()            # as MindSpore's Tensor(v): Bool, Int64, Float32
    else:
        raise TypeError(f"save_checkpoint: '{name}' is a {type(value).__name__}; values are Parameters, Tensors, "
                        "numpy arrays, numbers or str")
    return np.asarray(arr, dtype=dt.from_numpy(arr.dtype).np.newbyteorder("<"), order="C")   # keeps 0-d


def _write_ckpt(f, pairs, crc_check):
    crc = 0
    for name, value in pairs:
        if isinstance(value, str):
            chunks = [encode_value(name, [0], "str", np.array(value).astype("<U").tobytes())]
        elif isinstance(value, bytes) and name == "random_op":
            chunks = [encode_value(name, [], "random_op", value)]
        else:
            arr = _array(name, value)
            raw = memoryview(arr.reshape(-1)).cast("B") if arr.size else b""
            kind = dt.from_numpy(arr.dtype).ms_name
            chunks = (encode_value(name, arr.shape, kind, raw[i:i + SLICE_BYTES])
                      for i in range(0, max(len(raw), 1), SLICE_BYTES))
        for chunk in chunks:
            crc = binascii.crc32(chunk, crc)
            f.write(chunk)
    if crc_check:
        f.write(b"crc_num" + crc.to_bytes(10, "big"))


def _write_safetensors(f, pairs, crc_check):
    header, arrays, at, crc = {}, [], 0, 0
    for name, value in sorted(pairs, key=lambda kv: kv[0]):
        if isinstance(value, str):
            raise ValueError(f"save_checkpoint: '{name}' is a str, which format='safetensors' cannot hold")
        arr = _array(name, value)
        header[name] = {"dtype": ST_NAMES[dt.from_numpy(arr.dtype).ms_name], "shape": list(arr.shape),
                        "data_offsets": [at, at + arr.nbytes]}
        at += arr.nbytes
        arrays.append(arr)
        if crc_check:
            crc = binascii.crc32(arr.tobytes(), binascii.crc32(name.encode("utf-8"), crc))
    meta = {"format": "ms"}
    if crc_check:
        meta["crc_num"] = str(crc)
    text = json.dumps({"__metadata__": meta, **header}, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    f.write(struct.pack("<Q", len(text)) + text)
    for arr in arrays:
        f.write(memoryview(arr.reshape(-1)).cast("B") if arr.size else b"")


# --- the API -------------------------------------------------------------------------------------

def _prefixes(p, what):
    if p is None:
        return ()
    p = (p,) if isinstance(p, str) else tuple(p)
    if not p or not all(isinstance(x, str) and x for x in p):
        raise ValueError(f"load_checkpoint: {what} is a non-empty str or a list of them, got {p!r}")
    return p


def load_checkpoint(ckpt_file_name, net=None, strict_load=False, filter_prefix=None, dec_key=None, dec_mode="AES-GCM",
                    specify_prefix=None, choice_func=None, crc_check=False, remove_redundancy=False, format=None):
    """Read a ``.ckpt`` or ``.safetensors`` file (by its suffix unless ``format`` says) into
    ``{name: Parameter}`` (a ``str`` for a saved string), optionally loading it into ``net``."""
    path = os.fspath(ckpt_file_name)
    if dec_key is not None:
        raise CheckpointError(f"{path}: encrypted checkpoints (dec_key) are not read by msvm; decrypt it with "
                              "MindSpore and save it again without enc_key")
    fmt = format or ("safetensors" if path.endswith(".safetensors") else "ckpt")
    if fmt not in ("ckpt", "safetensors"):
        raise ValueError(f"load_checkpoint: format is 'ckpt' or 'safetensors', got {format!r}")
    if not os.path.isfile(path):
        raise ValueError(f"load_checkpoint: the checkpoint file {path} does not exist")
    with open(path, "rb") as f:
        data = f.read()
    params = _read_safetensors(data, path) if fmt == "safetensors" else _read_ckpt(data, path, crc_check)
    specify, filtered = _prefixes(specify_prefix, "specify_prefix"), _prefixes(filter_prefix, "filter_prefix")
    keep = {}
    for name, value in params.items():
        if specify and not name.startswith(specify) or filtered and name.startswith(filtered):
            continue
        if not (specify or filtered) and choice_func is not None and not choice_func(name):
            continue
        keep[name] = value
    if not keep:
        raise ValueError(f"load_checkpoint: no parameters left from {path} (the file holds none, or the prefixes "
                         "or choice_func removed them all)")
    if net is not None:
        load_param_into_net(net, keep, strict_load)
    return keep


def load_param_into_net(net, parameter_dict, strict_load=False, remove_redundancy=False):
    """Assign ``parameter_dict``'s tensors to ``net``'s parameters of the same names through ``set_data``.
    Returns MindSpore's ``(param_not_load, ckpt_not_load)``: the net's names that got nothing, and the
    dict's names that went nowhere. A shape or dtype that does not fit raises ParameterMismatch naming the
    parameter and both; so does, with ``strict_load=True``, a parameter of the net the dict lacks. Nothing
    changes unless everything fits."""
    from .nn.cell import Cell

    if not isinstance(net, Cell):
        raise TypeError(f"load_param_into_net: net is a Cell, got {type(net).__name__}")
    if not isinstance(parameter_dict, dict):
        raise TypeError(f"load_param_into_net: parameter_dict is a dict, got {type(parameter_dict).__name__}")
    for key, value in parameter_dict.items():
        if not isinstance(key, str) or not isinstance(value, (Tensor, str, bytes, list)):
            raise TypeError(f"load_param_into_net: parameter_dict maps names to Parameters, got {key!r}: "
                            f"{type(value).__name__}")
    params = [p for _, p in net.parameters_and_names()]
    plan, param_not_load = [], []
    ckpt_not_load = [k for k in parameter_dict if k != "random_op"]
    for p in params:
        if p.name in parameter_dict and isinstance(parameter_dict[p.name], Tensor):
            plan.append((p, p.name))
        else:
            param_not_load.append(p.name)
    if param_not_load and not strict_load:       # as MindSpore: the checkpoint's names may carry a prefix
        prefix = _common_prefix(param_not_load, parameter_dict)
        if prefix:
            for p in params:
                if p.name in param_not_load and isinstance(parameter_dict.get(prefix + p.name), Tensor):
                    plan.append((p, prefix + p.name))
                    param_not_load.remove(p.name)
    if strict_load and param_not_load:
        raise ParameterMismatch(f"load_param_into_net(strict_load=True): the checkpoint lacks {len(param_not_load)} "
                                f"of the net's parameters: {', '.join(param_not_load)}")
    updates = [(p, _fit(p, key, parameter_dict[key], strict_load)) for p, key in plan]
    for p, arr in updates:
        p.set_data(arr)
    for key in {key for _, key in plan}:
        ckpt_not_load.remove(key)
    if param_not_load:
        logger.warning("load_param_into_net: %d parameters of the net are not loaded: %s", len(param_not_load),
                       param_not_load)
    return param_not_load, ckpt_not_load


def _common_prefix(missing, parameter_dict):
    for name in missing:
        for key in parameter_dict:
            if key.endswith(name) and key != name:
                return key[:-len(name)]
    return ""


def _fit(p, key, value, strict_load) -> np.ndarray:
    """The array to give ``p``, or ParameterMismatch naming it."""
    arr, want = value._host(), tuple(p.shape)      # (read, not copied: set_data copies)
    if arr.shape != want:
        extra = arr.shape[len(want):]
        if arr.shape[:len(want)] == want and extra and all(d == 1 for d in extra):
            arr = arr.reshape(want)                  # as MindSpore: (12, 2048, 1, 1) into (12, 2048)
        else:
            raise ParameterMismatch(f"load_param_into_net: '{p.name}' has shape {want} in the net but "
                                    f"{tuple(arr.shape)} in the checkpoint ('{key}')")
    have, need = dt.from_numpy(arr.dtype), p.dtype
    if have is not need:
        kinds = {have.kind, need.kind}
        if strict_load or not (kinds == {"f"} or kinds == {"i"}):
            raise ParameterMismatch(f"load_param_into_net: '{p.name}' is {need} in the net but {have} in the "
                                    f"checkpoint ('{key}')" + (" (strict_load=True converts nothing)"
                                                               if strict_load else ""))
        logger.warning("load_param_into_net: '%s' is %s in the checkpoint, converted to the net's %s", p.name, have,
                       need)
        arr = arr.astype(need.np)
    return arr


def save_checkpoint(save_obj, ckpt_file_name, integrated_save=True, async_save=False, append_dict=None, enc_key=None,
                    enc_mode="AES-GCM", choice_func=None, crc_check=False, format="ckpt", **kwargs):
    """Write a Cell's parameters (or a list of Parameters / ``{"name", "data"}`` dicts, or a dict) as a
    MindSpore ``.ckpt`` or, with ``format="safetensors"``, a ``.safetensors`` file. The suffix is added
    when the name lacks it, as MindSpore does; the file is written whole or not at all (a temporary file,
    then a rename). ``async_save`` writes before returning."""
    if format not in ("ckpt", "safetensors"):
        raise ValueError(f"save_checkpoint: format is 'ckpt' or 'safetensors', got {format!r}")
    if enc_key is not None:
        raise CheckpointError("save_checkpoint: msvm does not write encrypted checkpoints (enc_key)")
    path = os.fspath(ckpt_file_name)
    if os.path.isdir(path):
        raise IsADirectoryError(f"save_checkpoint: {path} is a directory, not a file name")
    if not path.endswith(format):
        path += f".{format}"
    pairs = _entries(save_obj, choice_func)
    pairs += list((append_dict or {}).items())
    twice = [k for k, n in Counter(k for k, _ in pairs).items() if n > 1]
    if twice:
        raise ValueError(f"save_checkpoint: two entries are named '{twice[0]}'; a checkpoint is keyed on names "
                         "(give the parameters distinct names, or build the net with auto_prefix=True)")
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            (_write_safetensors if format == "safetensors" else _write_ckpt)(f, pairs, crc_check)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
