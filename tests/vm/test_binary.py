"""The .msbc format: round trips, and a clear BytecodeError for every bad input."""

import struct
import subprocess
import sys

import msvm as ms
import numpy as np
import pytest
from msvm import bytecode
from msvm.bytecode import binary
from msvm.bytecode.opcodes import ABI_VERSION
from msvm.static import analyze_file
from paths import EXAMPLES


@pytest.fixture(scope="module")
def bert_code():
    (entry,) = [e for e in analyze_file(f"{EXAMPLES}/bert_layer.py") if e.name == "BertLayer"]
    return entry.code


@pytest.fixture(scope="module")
def matmul_code():
    (entry,) = analyze_file(f"{EXAMPLES}/dynamic_matmul.py")
    return entry.code


def test_save_load_round_trip(tmp_path, bert_code, matmul_code):
    for code in (bert_code, matmul_code):
        p = tmp_path / "c.msbc"
        bytecode.save(code, p)
        back = bytecode.load(p)
        assert back == code
        assert [c.name for c in back.all_codes()] == [c.name for c in code.all_codes()]
        assert bytecode.dump(back) == bytecode.dump(code)


def test_disassemble_assemble_round_trip(bert_code, matmul_code):
    for code in (bert_code, matmul_code):
        again = bytecode.assemble(bytecode.disassemble(code))
        assert again == code
        bytecode.verify(again)


def test_loaded_code_runs_like_the_original(tmp_path, rng):
    from msvm.interp.interpreter import BoundCode

    (entry,) = analyze_file(f"{EXAMPLES}/dynamic_matmul.py")
    p = tmp_path / "m.msbc"
    bytecode.save(entry.code, p)
    code = bytecode.load(p)
    x, y = rng.standard_normal((5, 7)).astype(np.float32), rng.standard_normal((7, 3)).astype(np.float32)
    out = BoundCode(code, None, {}, None).call([x, y, True])
    np.testing.assert_allclose(out, np.maximum(x @ y, 0), rtol=1e-6)


def _bytes(code):
    return bytearray(binary.dumps(code))


def _reseal(data):
    import hashlib

    body = bytes(data[:-32])
    return bytearray(body + hashlib.sha256(body).digest())


def test_other_abi_names_both_versions(matmul_code):
    data = _bytes(matmul_code)
    struct.pack_into("<H", data, 4, ABI_VERSION + 1)
    with pytest.raises(ms.BytecodeError) as e:
        binary.loads(bytes(_reseal(data)))
    assert f"ABI {ABI_VERSION + 1}" in str(e.value) and f"ABI {ABI_VERSION}" in str(e.value)


def test_unknown_opcode_names_byte_and_offset(matmul_code):
    data = _bytes(matmul_code)
    first = data.index(bytes([0x01, 0x00, 0x00]), 32 + 8)   # LOAD_TENSOR x, the first instruction
    data[first] = 0xEE
    with pytest.raises(ms.BytecodeError, match=r"unknown opcode 0xee at offset 0x0000"):
        binary.loads(bytes(_reseal(data)))


def test_bad_checksum(matmul_code):
    data = _bytes(matmul_code)
    data[40] ^= 0xFF
    with pytest.raises(ms.BytecodeError, match="checksum mismatch"):
        binary.loads(bytes(data))


@pytest.mark.parametrize("cut", [0, 10, 40, -1, -33])
def test_truncated(matmul_code, cut):
    data = bytes(_bytes(matmul_code))
    with pytest.raises(ms.BytecodeError, match="truncated"):
        binary.loads(data[:cut] if cut > 0 or cut < 0 else b"")


def test_bad_magic_and_fingerprint(matmul_code):
    data = _bytes(matmul_code)
    data[0:4] = b"XXXX"
    with pytest.raises(ms.BytecodeError, match="not an msvm bytecode file"):
        binary.loads(bytes(_reseal(data)))
    data = _bytes(matmul_code)
    data[8] ^= 0xFF
    with pytest.raises(ms.BytecodeError, match="fingerprint"):
        binary.loads(bytes(_reseal(data)))


def test_garbage_never_crashes(rng):
    for n in (0, 31, 64, 200, 4096):
        blob = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        with pytest.raises(ms.BytecodeError):
            binary.loads(b"MSBC" + blob)


def test_cli_check(tmp_path, matmul_code):
    good, bad = tmp_path / "good.msbc", tmp_path / "bad.msbc"
    bytecode.save(matmul_code, good)
    data = _bytes(matmul_code)
    data[-1] ^= 1
    bad.write_bytes(bytes(data))
    ok = subprocess.run([sys.executable, "-m", "msvm", "check", str(good)], capture_output=True, text=True)
    assert ok.returncode == 0 and "ok" in ok.stdout
    no = subprocess.run([sys.executable, "-m", "msvm", "check", str(bad)], capture_output=True, text=True)
    assert no.returncode == 1 and "checksum mismatch" in no.stderr and "Traceback" not in no.stderr
    assert len(no.stderr.strip().splitlines()) == 1


# ---------------------------------------------------------------- crafted content with a valid checksum

def _meta_replaced(code, key, value):
    """The image of ``code`` with one key of the entry function's metadata replaced, resealed."""
    import json

    import msbc_fuzz as F
    data = binary.dumps(code)
    recs = F.records(data)
    meta = json.loads(recs[-1][0])
    meta[key] = value(meta[key]) if callable(value) else value
    recs[-1][0] = json.dumps(meta).encode()
    return F.build(data, recs)


def test_errors_name_the_file_the_offset_and_what_was_found(matmul_code):
    import msbc_fuzz as F
    data = binary.dumps(matmul_code)
    (mlen,) = struct.unpack_from("<I", data, 32)
    code_at = 32 + 4 + mlen + 4
    bad = F.set_code(data, 0, 0, 0xEE, 1)
    with pytest.raises(ms.BytecodeError) as e:
        binary.loads(bad, "m.msbc")
    assert str(e.value) == (f"m.msbc: offset 0x{code_at:04x}: function 'DynamicMatmulCell.construct': "
                            "instruction 0x0000: unknown opcode 0xee at offset 0x0000: expected one of this "
                            f"VM's opcodes (bytecode ABI {ABI_VERSION})")
    assert (e.value.filename, e.value.offset, e.value.code_offset) == ("m.msbc", code_at, 0)
    with pytest.raises(ms.BytecodeError, match=rf"^m.msbc: offset 0x{code_at - 4:04x}: function "
                                               r"'DynamicMatmulCell.construct': truncated function 0 code length: "
                                               r"expected a u32, 2 bytes left in the payload"):
        binary.loads(F.truncate(data, 4 + mlen + 2), "m.msbc")
    with pytest.raises(ms.BytecodeError, match=r"^m.msbc: offset 0x0020: function 0: metadata length \d+ runs past"):
        binary.loads(F.bump_length(data, 0, 1000), "m.msbc")
    bad = _meta_replaced(matmul_code, "consts", lambda c: c + [{"int": 2 ** 70}])
    with pytest.raises(ms.BytecodeError, match=r"^m.msbc: offset 0x0024: function 'DynamicMatmulCell.construct': "
                                               r"metadata: consts\[\d+\]: expected an integer from .* found 1180"):
        binary.loads(bad, "m.msbc")


def test_verification_errors_name_the_instruction_in_the_file(matmul_code):
    import msbc_fuzz as F
    data = binary.dumps(matmul_code)
    (mlen,) = struct.unpack_from("<I", data, 32)
    code_at = 32 + 4 + mlen + 4
    bad = F.set_code(data, 0, 1, 0x4000, 2)            # LOAD_TENSOR's slot operand -> 0x4000
    with pytest.raises(ms.BytecodeError) as e:
        binary.loads(bad, "m.msbc")
    assert str(e.value).startswith(f"m.msbc: offset 0x{code_at:04x}: function 'DynamicMatmulCell.construct': "
                                   "instruction 0x0000: verification failed: ")
    assert "operand slot=16384 is out of range" in str(e.value)


def test_2000_term_dim_is_rejected_at_once_and_1000_terms_load_in_linear_time(matmul_code, monkeypatch):
    import time

    from msvm.bytecode import symbolic as S
    poly = ["poly", [[i + 1, [[["sym", f"s{i}"], 1]]] for i in range(2000)]]
    bad = _meta_replaced(matmul_code, "consts", lambda c: c + [{"sym": poly}])
    t = time.perf_counter()
    with pytest.raises(ms.BytecodeError, match=r"consts\[\d+\]: a symbolic dim of 2000 terms; the limit is 1024"):
        binary.loads(bad, "m.msbc")
    assert time.perf_counter() - t < 1.0              # it took 4-6 s to build before it was capped
    built = []
    init = S.Expr.__init__
    monkeypatch.setattr(S.Expr, "__init__", lambda self, terms: (built.append(1), init(self, terms))[1])
    e = S.from_data(["poly", poly[1][:1000]])
    assert len(e.terms) == 1000 and len(built) == 1  # one Expr, not one per term (that was quadratic)


def test_sub_cell_nesting_and_function_count_are_capped(tmp_path):
    from msvm.bytecode import CodeBuilder
    from msvm.bytecode.symbolic import sym
    from msvm.bytecode.types import TensorType
    t = TensorType((sym("B"),), ms.float32)

    def chain(n):
        prev = None
        for k in range(n):
            b = CodeBuilder(f"f{k}", "chain.py", 1)
            b.local("x")
            b.code.params.append(("x", t))
            b.emit("LOAD_TENSOR", 0)
            if prev is not None:
                b.code.callees.append(("sub", prev))
                b.emit("CALL_CELL", 0, 1)
            b.emit("RETURN")
            prev = b.finish()
        return prev
    assert [c.name for c in binary.loads(binary.dumps(chain(64))).all_codes()][-2:] == ["f62", "f63"]
    with pytest.raises(ms.BytecodeError, match="sub-Cell calls nest 65 deep; the limit is 64"):
        binary.loads(binary.dumps(chain(65)))
    import msbc_fuzz as F
    data = binary.dumps(chain(1))
    with pytest.raises(ms.BytecodeError, match=r"offset 0x0018: expected 1 to \d+ functions .* found 5000"):
        binary.loads(F.header_field(data, "n", 5000))


def test_assembler_rejects_malformed_json_with_a_bytecode_error(matmul_code):
    good = bytecode.disassemble(matmul_code)
    for bad in ({}, {"functions": [1]}, {"functions": [{"instructions": [{"op": "NOPE"}]}]},
                {"functions": [{"instructions": [{"op": "JUMP", "args": [70000], "loc": [1, 0, 1, 1]}]}]},
                {"functions": [dict(good["functions"][0], consts=[{"int": "3"}])]}):
        with pytest.raises(ms.BytecodeError):
            bytecode.assemble(bad)


@pytest.mark.parametrize("case", ["deep_json", "bad_const", "unbound_symbol", "newline_in_string"])
def test_cli_check_prints_one_line_for_crafted_content(tmp_path, matmul_code, case):
    if case == "deep_json":
        import msbc_fuzz as F
        data = F.replace_json(binary.dumps(matmul_code), 0, 3, "[" * 5000 + "]" * 5000)
    elif case == "bad_const":
        data = _meta_replaced(matmul_code, "consts", lambda c: [{"array": [[1, 2], [3]], "dtype": "float32",
                                                                 "shape": [2, 2]}] + c[1:])
    elif case == "unbound_symbol":
        data = _meta_replaced(matmul_code, "consts", lambda c: [{"sym": ["cmp", ">", ["poly", [[1, [[["sym", "Q"], 1]]]]],
                                                                 ["poly", [[3, []]]]]} if i == 0 else x
                                                                for i, x in enumerate(c)])
    else:
        data = _meta_replaced(matmul_code, "name", "two\nlines")
    p = tmp_path / "crafted.msbc"
    p.write_bytes(data)
    r = subprocess.run([sys.executable, "-m", "msvm", "check", str(p)], capture_output=True, text=True)
    assert r.returncode == 1 and r.stdout == ""
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{p}: offset 0x"), r.stderr


def test_an_unexpected_exception_in_the_reader_becomes_a_located_bytecode_error(matmul_code, monkeypatch):
    def broken(*a):
        raise KeyError("surprise")
    monkeypatch.setattr(binary, "code_from_data", broken)
    with pytest.raises(ms.BytecodeError, match=r"^m.msbc: offset 0x0024: function 'DynamicMatmulCell.construct': "
                                               r"malformed content the reader did not expect \(KeyError: 'surprise'\)"):
        binary.loads(binary.dumps(matmul_code), "m.msbc")


def test_shared_sub_cells_are_walked_once():
    from msvm.bytecode import CodeBuilder
    from msvm.bytecode.symbolic import sym
    from msvm.bytecode.types import TensorType
    t = TensorType((sym("B"),), ms.float32)
    prev = None
    for k in range(40):                      # each calls the one before twice: 2**40 paths, 40 functions
        b = CodeBuilder(f"f{k}", "dag.py", 1)
        b.local("x")
        b.code.params.append(("x", t))
        b.emit("LOAD_TENSOR", 0)
        if prev is not None:
            b.code.callees += [("a", prev), ("b", prev)]
            b.emit("CALL_CELL", 0, 1)
            b.emit("CALL_CELL", 1, 1)
        b.emit("RETURN")
        prev = b.finish()
    assert [c.name for c in prev.all_codes()] == [f"f{k}" for k in range(40)]
    assert [c.name for c in binary.loads(binary.dumps(prev)).all_codes()] == [f"f{k}" for k in range(40)]
