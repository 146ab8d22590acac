"""MindSpore checkpoints (msvm.checkpoint): the .ckpt protobuf and .safetensors formats, parameter names,
loading into nets, and malformed files.

``fixtures/mindspore_lenet.ckpt`` was written by MindSpore itself (``network_2.ckpt`` in mindspore-lab/mindcv
at commit cf660ac, Apache-2.0): four Float32 tensors of a LeNet-like net."""

import math
import os
import struct
import subprocess
import sys
import textwrap

import msvm as ms
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from msvm import checkpoint as ckpt
from msvm import nn, ops
from msvm.checkpoint import CheckpointError, ParameterMismatch

FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "mindspore_lenet.ckpt")


class Block(nn.Cell):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, has_bias=True)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU()

    def construct(self, x):
        return self.relu(self.bn1(self.conv1(x)))


class SmallCNN(nn.Cell):
    def __init__(self):
        super().__init__()
        self.layer1 = nn.SequentialCell([Block(3, 4), Block(4, 4)])
        self.flatten = nn.Flatten()
        self.fc = nn.Dense(4 * 6 * 6, 5)

    def construct(self, x):
        return self.fc(self.flatten(self.layer1(x)))


class Encoder(nn.Cell):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.query = nn.Dense(hidden, hidden)
        self.key = nn.Dense(hidden, hidden)
        self.value = nn.Dense(hidden, hidden)
        self.norm1 = nn.LayerNorm((hidden,))
        self.ff = nn.Dense(hidden, 2 * hidden)
        self.gelu = nn.GELU()
        self.out = nn.Dense(2 * hidden, hidden)
        self.norm2 = nn.LayerNorm((hidden,))
        self.scale = 1.0 / math.sqrt(self.head_dim)

    def split(self, x):
        b, s, _ = x.shape
        return ops.transpose(ops.reshape(x, (b, s, self.heads, self.head_dim)), (0, 2, 1, 3))

    def construct(self, x):
        q, k, v = self.split(self.query(x)), self.split(self.key(x)), self.split(self.value(x))
        probs = ops.softmax(ops.matmul(q, ops.transpose(k, (0, 1, 3, 2))) * self.scale, -1)
        ctx = ops.transpose(ops.matmul(probs, v), (0, 2, 1, 3))
        b, s, h, d = ctx.shape
        x = self.norm1(x + ops.reshape(ctx, (b, s, h * d)))
        return self.norm2(x + self.out(self.gelu(self.ff(x))))


class TinyTransformer(nn.Cell):
    def __init__(self, vocab=11, hidden=8, heads=2, layers=2):
        super().__init__()
        self.embedding = nn.Embedding(vocab, hidden)
        self.layers = nn.CellList([Encoder(hidden, heads) for _ in range(layers)])
        self.head = nn.Dense(hidden, vocab)

    def construct(self, ids):
        x = self.embedding(ids)
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


class LeNetLike(nn.Cell):
    """The net the MindSpore fixture was saved from (as far as its names and shapes tell)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5, pad_mode="valid")
        self.conv2 = nn.Conv2d(6, 16, 5, pad_mode="valid")
        self.fc = nn.Dense(400, 10)


def randomize(net, seed):
    """Give every parameter (BatchNorm's moving statistics too) distinct random values."""
    rng = np.random.default_rng(seed)
    for _, p in net.parameters_and_names():
        a = p.asnumpy()
        if a.dtype.kind == "f":
            value = rng.uniform(0.5, 1.5, a.shape) if "variance" in p.name else rng.normal(0, 0.5, a.shape)
            p.set_data(ms.Tensor(value.astype(a.dtype)))
    return net


def outputs_equal(a, b, x):
    ya, yb = a(x).asnumpy(), b(x).asnumpy()
    assert np.array_equal(ya, yb)
    return ya


# --- names ---------------------------------------------------------------------------------------

def test_parameter_names_are_mindspores():
    net = SmallCNN()
    names = [p.name for _, p in net.parameters_and_names()]
    assert names == [f"layer1.{i}.{n}" for i in (0, 1) for n in
                     ("conv1.weight", "conv1.bias", "bn1.gamma", "bn1.beta", "bn1.moving_mean", "bn1.moving_variance")
                     ] + ["fc.weight", "fc.bias"]
    assert list(net.parameters_dict()) == names
    assert [n for n, _ in net.parameters_and_names()] == names        # the attribute paths agree
    t = TinyTransformer()
    tn = list(t.parameters_dict())
    assert tn[0] == "embedding.embedding_table" and "layers.1.norm2.gamma" in tn and tn[-1] == "head.bias"
    # a Cell on its own keeps its parameters' own names, as MindSpore's does (BatchNorm's are 'mean', 'variance')
    assert list(nn.BatchNorm2d(2).parameters_dict()) == ["gamma", "beta", "mean", "variance"]
    assert list(nn.LayerNorm((3,)).parameters_dict()) == ["gamma", "beta"]
    assert list(nn.Embedding(3, 2).parameters_dict()) == ["embedding_table"]


def test_slicing_a_cell_list_keeps_names():
    t = TinyTransformer()
    before = list(t.parameters_dict())
    assert len(t.layers[1:]) == 1
    assert list(t.parameters_dict()) == before


# --- round trips ---------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["ckpt", "safetensors"])
def test_cnn_round_trip(tmp_path, fmt):
    x = ms.Tensor(np.random.default_rng(0).normal(size=(2, 3, 6, 6)).astype(np.float32))
    a = randomize(SmallCNN(), 1).set_train(False)
    b = randomize(SmallCNN(), 2).set_train(False)
    ya, yb = a(x).asnumpy(), b(x).asnumpy()          # b runs (and compiles) before its weights change
    assert not np.allclose(ya, yb)
    path = tmp_path / f"cnn.{fmt}"
    ms.save_checkpoint(a, str(path), format=fmt)
    assert path.exists()
    d = ms.load_checkpoint(str(path))
    assert list(d) == sorted(d) if fmt == "safetensors" else list(d) == list(a.parameters_dict())
    assert isinstance(d["layer1.1.bn1.moving_mean"], ms.Parameter)
    assert ms.load_param_into_net(b, d, strict_load=True) == ([], [])
    outputs_equal(a, b, x)


@pytest.mark.parametrize("fmt", ["ckpt", "safetensors"])
def test_transformer_round_trip(tmp_path, fmt):
    ids = ms.Tensor(np.array([[1, 2, 3, 4], [5, 6, 7, 10]], dtype=np.int32))
    a, b = randomize(TinyTransformer(), 3), randomize(TinyTransformer(), 4)
    b(ids)
    path = str(tmp_path / "tiny")                       # the suffix is added, as MindSpore does
    ms.save_checkpoint(a, path, format=fmt)
    loaded = ms.load_checkpoint(f"{path}.{fmt}", net=b, strict_load=True)
    assert len(loaded) == len(list(a.get_parameters()))
    outputs_equal(a, b, ids)


def test_save_lists_dicts_and_append_dict(tmp_path):
    net = randomize(SmallCNN(), 5)
    p = str(tmp_path / "x.ckpt")
    ms.save_checkpoint(net.trainable_params(), p)
    assert list(ms.load_checkpoint(p)) == [q.name for q in net.trainable_params()]
    ms.save_checkpoint([{"name": "a", "data": ms.Tensor(np.arange(3, dtype=np.int32))},
                        {"name": "b", "data": net.fc.bias}], p,
                       append_dict={"epoch_num": 3, "lr": 0.5, "flag": True, "note": "hello"})
    d = ms.load_checkpoint(p)
    assert d["a"].asnumpy().tolist() == [0, 1, 2] and d["a"].dtype == ms.int32
    assert np.array_equal(d["b"].asnumpy(), net.fc.bias.asnumpy())
    assert d["epoch_num"].dtype == ms.int64 and d["epoch_num"].asnumpy() == 3 and d["epoch_num"].shape == ()
    assert d["lr"].dtype == ms.float32 and d["flag"].dtype == ms.bool_ and d["note"] == "hello"
    ms.save_checkpoint(d, p, choice_func=lambda n: n != "note")
    assert "note" not in ms.load_checkpoint(p) and "lr" in ms.load_checkpoint(p)


def test_large_tensors_are_split_and_joined(tmp_path, monkeypatch):
    monkeypatch.setattr(ckpt, "SLICE_BYTES", 16)
    w = np.arange(10, dtype=np.float32).reshape(2, 5)
    p = str(tmp_path / "split.ckpt")
    ms.save_checkpoint({"w": ms.Parameter(ms.Tensor(w)), "s": ms.Parameter(ms.Tensor(np.float32(2.5)))}, p)
    data = open(p, "rb").read()
    entries = ckpt._parse_ckpt(data, p)
    assert [(e.tag, e.dims, len(e.content)) for e in entries] == [("w", [2, 5], 16), ("w", [2, 5], 16),
                                                                  ("w", [2, 5], 8), ("s", [], 4)]
    d = ms.load_checkpoint(p)
    assert np.array_equal(d["w"].asnumpy(), w) and d["s"].shape == () and d["s"].asnumpy() == np.float32(2.5)


def test_crc(tmp_path):
    p = str(tmp_path / "crc.ckpt")
    ms.save_checkpoint({"w": ms.Parameter(ms.Tensor(np.ones(4, np.float32)))}, p, crc_check=True)
    data = bytearray(open(p, "rb").read())
    assert data[-17:-10] == b"crc_num"
    assert ms.load_checkpoint(p, crc_check=True)["w"].asnumpy().tolist() == [1, 1, 1, 1]
    data[-20] ^= 0x40                         # a byte of the tensor's content
    open(p, "wb").write(bytes(data))
    with pytest.raises(CheckpointError, match="CRC"):
        ms.load_checkpoint(p, crc_check=True)
    assert ms.load_checkpoint(p)["w"].asnumpy()[-1] != 1          # without crc_check the trailer is skipped


# --- the format, pinned independently of the reader -----------------------------------------------

# Checkpoint { value { tag: "fc.weight" tensor { dims: 1 dims: 2 tensor_type: "Float32"
#                                                tensor_content: <1.0, -2.0 as float32 LE> } } }
# then a second Checkpoint message { value { tag: "step" tensor { tensor_type: "Int64" tensor_content: <7> } } }
HAND_ASSEMBLED = bytes.fromhex(
    "0a24"                      # Checkpoint.value (field 1, length-delimited), 36 bytes
    "0a09" + b"fc.weight".hex() +          # Value.tag (field 1), 9 bytes
    "1217"                      # Value.tensor (field 2), 23 bytes
    "0801" "0802"               # TensorProto.dims (field 1, varint) 1, 2: unpacked, as proto2 writes them
    "1207" + b"Float32".hex() +            # TensorProto.tensor_type (field 2)
    "1a08" "0000803f" "000000c0"           # TensorProto.tensor_content (field 3): 1.0, -2.0
    "0a19"                      # the next Checkpoint message: value, 25 bytes
    "0a04" + b"step".hex() +
    "1211"                      # tensor, 17 bytes: no dims (a scalar)
    "1205" + b"Int64".hex() +
    "1a08" "0700000000000000")


def test_encoder_matches_hand_assembled_protobuf(tmp_path):
    p = str(tmp_path / "two.ckpt")
    ms.save_checkpoint([{"name": "fc.weight", "data": ms.Tensor(np.array([[1.0, -2.0]], np.float32))},
                        {"name": "step", "data": ms.Tensor(np.int64(7))}], p)
    assert open(p, "rb").read() == HAND_ASSEMBLED
    d = ms.load_checkpoint(p)
    assert d["fc.weight"].asnumpy().tolist() == [[1.0, -2.0]] and d["step"].dtype == ms.int64


def test_a_file_mindspore_wrote():
    data = open(FIXTURE, "rb").read()
    d = ms.load_checkpoint(FIXTURE)
    assert {k: (v.shape, str(v.dtype)) for k, v in d.items()} == {
        "conv1.weight": ((6, 1, 5, 5), "Float32"), "conv2.weight": ((16, 6, 5, 5), "Float32"),
        "fc.weight": ((10, 400), "Float32"), "fc.bias": ((10,), "Float32")}
    # fc.bias is the file's last tensor: its 40 bytes end the file; conv1.weight's content starts at byte 38
    assert np.array_equal(d["fc.bias"].asnumpy(), np.frombuffer(data[-40:], "<f4"))
    assert d["conv1.weight"].asnumpy().flat[0] == np.frombuffer(bytes.fromhex("685118be"), "<f4")[0]
    net = LeNetLike()
    assert ms.load_param_into_net(net, d, strict_load=True) == ([], [])
    assert np.array_equal(net.conv2.weight.asnumpy(), d["conv2.weight"].asnumpy())


def test_saving_what_mindspore_wrote_gives_the_same_bytes(tmp_path):
    net = LeNetLike()
    ms.load_checkpoint(FIXTURE, net=net)
    p = str(tmp_path / "again.ckpt")
    ms.save_checkpoint(net, p)
    assert open(p, "rb").read() == open(FIXTURE, "rb").read()


# --- safetensors interop -------------------------------------------------------------------------

def test_safetensors_interop(tmp_path):
    import safetensors.numpy as sf  # the dev extra: the real package, to check both directions
    from safetensors import safe_open

    arrays = {"a.weight": np.arange(6, dtype=np.float32).reshape(2, 3), "a.bias": np.array([1, -2], np.int64),
              "h": np.array([0.5, 2], np.float16), "m": np.array([[True, False]]), "s": np.array(3.25)}
    theirs = str(tmp_path / "theirs.safetensors")
    sf.save_file(arrays, theirs, metadata={"format": "pt"})
    d = ms.load_checkpoint(theirs)
    assert set(d) == set(arrays)
    for k, v in arrays.items():
        assert d[k].asnumpy().dtype == v.dtype and np.array_equal(d[k].asnumpy(), v)
    ours = str(tmp_path / "ours")
    ms.save_checkpoint({k: ms.Parameter(ms.Tensor(v)) for k, v in arrays.items()}, ours, format="safetensors",
                       crc_check=True)
    back = sf.load_file(ours + ".safetensors")
    assert set(back) == set(arrays) and all(np.array_equal(back[k], v) and back[k].dtype == v.dtype
                                            for k, v in arrays.items())
    with safe_open(ours + ".safetensors", framework="np") as f:
        assert f.metadata()["format"] == "ms" and "crc_num" in f.metadata()


def test_bfloat16_and_unsigned_load_exactly(tmp_path):
    bf = np.array([0x3F80, 0xC040, 0x0000], np.uint16)        # 1.0, -3.0, 0.0 as bfloat16
    body = {"b": {"dtype": "BF16", "shape": [3], "data_offsets": [0, 6]},
            "u": {"dtype": "U32", "shape": [2], "data_offsets": [6, 14]}}
    p = tmp_path / "x.safetensors"
    p.write_bytes(safetensors_bytes(body, bf.tobytes() + np.array([1, 2**32 - 1], "<u4").tobytes()))
    d = ms.load_checkpoint(str(p))
    assert d["b"].dtype == ms.float32 and d["b"].asnumpy().tolist() == [1.0, -3.0, 0.0]
    assert d["u"].dtype == ms.int64 and d["u"].asnumpy().tolist() == [1, 2**32 - 1]


# --- loading into nets: names, shapes, dtypes ------------------------------------------------------

def test_mismatches_name_the_parameter(tmp_path):
    p = str(tmp_path / "m.ckpt")
    ms.save_checkpoint(randomize(SmallCNN(), 6), p)
    d = ms.load_checkpoint(p)
    net = SmallCNN()
    before = {k: v.asnumpy().copy() for k, v in net.parameters_dict().items()}
    d["fc.weight"] = ms.Parameter(ms.Tensor(np.zeros((5, 7), np.float32)), name="fc.weight")
    with pytest.raises(ParameterMismatch, match=r"'fc.weight' has shape \(5, 144\) in the net but \(5, 7\)"):
        ms.load_param_into_net(net, d)
    assert all(np.array_equal(before[k], v.asnumpy()) for k, v in net.parameters_dict().items())   # nothing changed
    # missing and unexpected names: returned, as MindSpore does; missing ones raise under strict_load
    d = ms.load_checkpoint(p)
    del d["layer1.0.bn1.gamma"]
    d["moments.fc.weight"] = d["fc.weight"]
    assert ms.load_param_into_net(net, d) == (["layer1.0.bn1.gamma"], ["moments.fc.weight"])
    with pytest.raises(ParameterMismatch, match="lacks 1 of the net's parameters: layer1.0.bn1.gamma"):
        ms.load_param_into_net(SmallCNN(), d, strict_load=True)
    assert ms.load_param_into_net(net, d, strict_load=False)[0] == ["layer1.0.bn1.gamma"]
    with pytest.raises(TypeError, match="'fc.bias': ndarray"):
        ms.load_param_into_net(net, {"fc.bias": np.zeros(5, np.float32)})


def test_dtypes_convert_as_mindspore(tmp_path):
    """Float into float and int into int convert (strict_load=False; float16 -> float32 is exact); any other
    pair, or any difference under strict_load=True, is refused, as MindSpore's _type_convert does."""
    p = str(tmp_path / "h.ckpt")
    ms.save_checkpoint({"weight": ms.Tensor(np.array([[0.5, -1.25]], np.float16)),
                        "bias": ms.Tensor(np.array([1.5], np.float64))}, p)
    dense = nn.Dense(2, 1)
    ms.load_checkpoint(p, net=dense)
    assert dense.weight.dtype == ms.float32 and dense.weight.asnumpy().tolist() == [[0.5, -1.25]]
    assert dense.bias.dtype == ms.float32 and dense.bias.asnumpy().tolist() == [1.5]
    with pytest.raises(ParameterMismatch, match=r"'weight' is Float32 in the net but Float16 in the checkpoint"):
        ms.load_checkpoint(p, net=nn.Dense(2, 1), strict_load=True)
    ms.save_checkpoint({"weight": ms.Tensor(np.ones((1, 2), np.int32))}, p)
    with pytest.raises(ParameterMismatch, match=r"'weight' is Float32 in the net but Int32"):
        ms.load_checkpoint(p, net=nn.Dense(2, 1))


def test_prefix_and_filter(tmp_path):
    p = str(tmp_path / "pre.ckpt")
    src = randomize(SmallCNN(), 7)
    ms.save_checkpoint([{"name": "network." + q.name, "data": q} for q in src.get_parameters()], p)
    net = SmallCNN()
    assert ms.load_param_into_net(net, ms.load_checkpoint(p)) == ([], [])     # the prefix is found, as MindSpore does
    assert np.array_equal(net.fc.weight.asnumpy(), src.fc.weight.asnumpy())
    d = ms.load_checkpoint(p, filter_prefix="network.fc")
    assert not any(k.startswith("network.fc") for k in d) and len(d) == 12
    assert list(ms.load_checkpoint(p, specify_prefix=["network.fc."])) == ["network.fc.weight", "network.fc.bias"]
    with pytest.raises(ValueError, match="no parameters left"):
        ms.load_checkpoint(p, choice_func=lambda n: False)


def test_refused_variants(tmp_path):
    p = tmp_path / "e.ckpt"
    p.write_bytes(HAND_ASSEMBLED)
    with pytest.raises(CheckpointError, match="encrypted"):
        ms.load_checkpoint(str(p), dec_key=b"0" * 16)
    with pytest.raises(CheckpointError, match="encrypted"):
        ms.save_checkpoint(SmallCNN(), str(tmp_path / "f.ckpt"), enc_key=b"0" * 16)
    p.write_bytes(bytes(range(200, 256)) * 4)             # what an AES-GCM file looks like: noise
    with pytest.raises(CheckpointError, match="not a plain MindSpore checkpoint.*byte offset 0"):
        ms.load_checkpoint(str(p))
    value = b"\x0a\x01m" + b"\x1a\x00"                     # tag 'm', then a maptensor (field 3)
    p.write_bytes(b"\x0a" + bytes([len(value)]) + value)
    with pytest.raises(CheckpointError, match="m is a MapParameter"):
        ms.load_checkpoint(str(p))


# --- malformed files -----------------------------------------------------------------------------

def write(tmp_path, data, name="bad.ckpt"):
    p = tmp_path / name
    p.write_bytes(data)
    return str(p)


def tensor_value(tag=b"w", dims=(2,), tensor_type=b"Float32", content=b"\0" * 8, dims_raw=None):
    dims_bytes = dims_raw if dims_raw is not None else b"".join(b"\x08" + ckpt._varint(d) for d in dims)
    tensor = dims_bytes + ckpt._field(2, tensor_type) + ckpt._field(3, content)
    return ckpt._field(1, ckpt._field(1, tag) + ckpt._field(2, tensor))


@pytest.mark.parametrize("data, message", [
    (HAND_ASSEMBLED[:30], r"field 1 of Checkpoint declares 36 bytes but 28 remain \(length past the end\) at byte "
                          r"offset 0"),
    (HAND_ASSEMBLED[:38] + b"\x0a", r"truncated varint at byte offset 39"),
    (b"\x0a" + b"\xff" * 11, r"bad varint \(longer than 10 bytes\) at byte offset 1"),
    (tensor_value(dims=(1 << 40, 1 << 40)), r"'w' declares shape \(1099511627776, 1099511627776\) of Float32 "
                                            r"\(1208925819614629174706176 elements.* but holds 8 bytes"),
    (tensor_value(tensor_type=b"Float33"), r"'w' has tensor_type 'Float33'"),
    (tensor_value(dims_raw=b"\x08" + b"\xff" * 9 + b"\x01"), r"negative dim -1"),
    (tensor_value(content=b"\0" * 7), r"declares shape \(2,\) of Float32 \(2 elements, 8 bytes\) but holds 7 bytes"),
    (tensor_value() + b"\x10\x01", r"unexpected field 2 \(wire type 0\) in Checkpoint at byte offset 28"),
    (b"\x0a\x02\x0b\x00", r"wire type 3 \(field 1\) in Checkpoint.Value; a checkpoint has none at byte offset 2"),
    (b"\x0a\x03\x0a\x01w", r"Checkpoint.Value lacks its required tensor at byte offset 0"),
    (b"\x0a\x06\x12\x04\x1a\x02ab", r"lacks its required tensor_type at byte offset 2"),
    (tensor_value(tag=b"\xff"), r"tag is not UTF-8 at byte offset 4"),
])
def test_malformed_ckpt(tmp_path, data, message):
    with pytest.raises(CheckpointError, match=message) as e:
        ms.load_checkpoint(write(tmp_path, data))
    assert "bad.ckpt" in str(e.value)


def test_every_truncation_is_an_error_with_an_offset(tmp_path):
    for n in range(1, len(HAND_ASSEMBLED)):
        if n == 38:                       # the end of the first message: a valid checkpoint with one tensor
            assert list(ms.load_checkpoint(write(tmp_path, HAND_ASSEMBLED[:n]))) == ["fc.weight"]
            continue
        with pytest.raises(CheckpointError, match="byte offset"):
            ms.load_checkpoint(write(tmp_path, HAND_ASSEMBLED[:n]))
    with pytest.raises(ValueError, match="no parameters left"):
        ms.load_checkpoint(write(tmp_path, b""))


def safetensors_bytes(header, buffer=b""):
    text = __import__("json").dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + buffer


@pytest.mark.parametrize("data, message", [
    (b"\x01\x00", r"truncated safetensors file \(2 bytes.* at byte offset 0"),
    (struct.pack("<Q", 1 << 40) + b"{}", r"the header declares 1099511627776 bytes but 2 follow"),
    (struct.pack("<Q", 5) + b"{junk", r"not JSON .* at byte offset 9"),
    (struct.pack("<Q", 2) + b"\xff}", r"not UTF-8 at byte offset 8"),
    (safetensors_bytes([1, 2]), r"not an object"),
    (safetensors_bytes({"w": {"dtype": "F33", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4), r"'w' has dtype F33"),
    (safetensors_bytes({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}, b"\0" * 4), r"'w' needs dtype"),
    (safetensors_bytes({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 4),
     r"'w' has data_offsets \[0, 8\] outside the 4-byte buffer"),
    (safetensors_bytes({"w": {"dtype": "F32", "shape": [1 << 50], "data_offsets": [0, 4]}}, b"\0" * 4),
     r"'w' declares shape \(1125899906842624,\) of Float32"),
    (safetensors_bytes({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, b"\0" * 8),
     r"'a' starts at 4 in the buffer, expected 0"),
])
def test_malformed_safetensors(tmp_path, data, message):
    with pytest.raises(CheckpointError, match=message):
        ms.load_checkpoint(write(tmp_path, data, "bad.safetensors"))


def test_overlapping_safetensors_are_refused_before_allocating(tmp_path):
    """Many entries over the same bytes would each be a copy: the layout is checked first."""
    header = {f"t{i}": {"dtype": "F32", "shape": [1024], "data_offsets": [0, 4096]} for i in range(2000)}
    with pytest.raises(CheckpointError, match="a gap or an overlap"):
        ms.load_checkpoint(write(tmp_path, safetensors_bytes(header, b"\0" * 4096), "o.safetensors"))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_fuzz_any_bytes(data):
    for read in (lambda: ckpt._read_ckpt(data, "f.ckpt", False), lambda: ckpt._read_safetensors(data, "f.safetensors")):
        try:
            read()
        except CheckpointError as e:
            assert "byte offset" in str(e)


def mutations():
    """A good file with a few bytes overwritten, a run of bytes inserted, and the tail cut."""
    good = [HAND_ASSEMBLED, open(FIXTURE, "rb").read()[:600],
            safetensors_bytes({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 8)]
    return st.builds(_mutate, st.sampled_from(good), st.lists(st.tuples(st.integers(0, 700), st.integers(0, 255)),
                                                             max_size=4),
                     st.tuples(st.integers(0, 700), st.binary(max_size=12)), st.integers(0, 720))


def _mutate(data, flips, insert, cut):
    b = bytearray(data)
    for at, v in flips:
        b[at % len(b)] = v
    at, run = insert
    b[at % len(b):at % len(b)] = run
    return bytes(b[:max(1, cut)]) if cut < len(b) else bytes(b)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mutations())
def test_fuzz_reads_or_refuses(tmp_path, data):
    """Any mutation of a good file either loads or raises CheckpointError (never another exception)."""
    for name in ("f.ckpt", "f.safetensors"):
        try:
            ms.load_checkpoint(write(tmp_path, data, name))
        except CheckpointError as e:
            assert "byte offset" in str(e) or "CRC" in str(e)
        except ValueError as e:
            assert "no parameters left" in str(e)


def test_what_the_writer_refuses(tmp_path):
    w = ms.Parameter(ms.Tensor(np.ones(2, np.float32)), name="w")
    with pytest.raises(ValueError, match="two entries are named 'w'"):
        ms.save_checkpoint([w, ms.Parameter(ms.Tensor(np.ones(2, np.float32)), name="w")], str(tmp_path / "d"))
    with pytest.raises(ValueError, match="two entries are named 'w'"):
        ms.save_checkpoint([w], str(tmp_path / "d"), append_dict={"w": 1})
    with pytest.raises(ValueError, match="'s' is a str"):
        ms.save_checkpoint({"s": "text"}, str(tmp_path / "d"), format="safetensors")
    assert not list(tmp_path.iterdir())                  # nothing half-written is left behind


def test_reader_accepts_packed_dims_and_random_op(tmp_path):
    packed = ckpt._field(1, b"\x02\x01") + ckpt._field(2, b"Int8") + ckpt._field(3, b"\x05\x06")
    data = ckpt._field(1, ckpt._field(1, b"p") + ckpt._field(2, packed)) + ckpt.encode_value("random_op", [], "random_op",
                                                                                           b"\x01\x02")
    d = ms.load_checkpoint(write(tmp_path, data, "p.ckpt"))
    assert d["p"].shape == (2, 1) and d["p"].asnumpy().ravel().tolist() == [5, 6] and d["random_op"] == b"\x01\x02"
    ms.save_checkpoint(d, str(tmp_path / "q.ckpt"))
    assert ms.load_checkpoint(str(tmp_path / "q.ckpt"))["random_op"] == b"\x01\x02"
    assert ms.load_param_into_net(nn.Dense(1, 1), d) == (["weight", "bias"], ["p"])


def test_trailing_ones_are_dropped_as_mindspore_does(tmp_path):
    p = str(tmp_path / "t.ckpt")
    ms.save_checkpoint({"weight": ms.Tensor(np.arange(6, dtype=np.float32).reshape(3, 2, 1, 1))}, p)
    dense = nn.Dense(2, 3)
    assert ms.load_checkpoint(p, net=dense) and dense.weight.asnumpy().tolist() == [[0, 1], [2, 3], [4, 5]]


# --- the MindSpore alias -------------------------------------------------------------------------

def test_mindspore_imports_resolve_to_msvm():
    code = textwrap.dedent("""
        import msvm
        msvm.as_mindspore()
        import mindspore
        from mindspore import load_checkpoint, load_param_into_net, save_checkpoint
        from mindspore.train.serialization import load_checkpoint as l2, save_checkpoint as s2
        from mindspore.train import load_param_into_net as p3, Model
        import mindspore.train.serialization as ser
        assert load_checkpoint is l2 is ser.load_checkpoint is mindspore.load_checkpoint is msvm.load_checkpoint
        assert save_checkpoint is s2 is msvm.save_checkpoint and load_param_into_net is p3
        try:
            Model(None)
        except msvm.compat.MindSporeGap:
            print("ok")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd="/")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"


def test_a_model_zoo_loads_its_checkpoint(tmp_path):
    """mindcv's create_model(checkpoint_path=...) goes through mindspore.load_checkpoint / load_param_into_net."""
    code = textwrap.dedent("""
        import msvm
        msvm.as_mindspore()
        import mindcv, mindspore as ms, numpy as np, sys
        ms.set_context(jit_config={"jit_level": "L1"})
        net = mindcv.create_model("resnet18", num_classes=10)
        names = list(net.parameters_dict())
        assert names[:3] == ["conv1.weight", "bn1.gamma", "bn1.beta"], names[:3]
        assert "layer1.0.bn1.moving_mean" in names and names[-1] == "classifier.bias", names[-3:]
        ms.save_checkpoint(net, sys.argv[1])
        net2 = mindcv.create_model("resnet18", num_classes=10, checkpoint_path=sys.argv[1])
        x = ms.Tensor(np.random.default_rng(0).random((1, 3, 32, 32)).astype(np.float32))
        net.set_train(False)
        net2.set_train(False)
        print(np.array_equal(net(x).asnumpy(), net2(x).asnumpy()))
    """)
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "r18.ckpt")], capture_output=True, text=True,
                       timeout=300, cwd="/")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith("True")
