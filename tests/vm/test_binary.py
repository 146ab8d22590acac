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
