"""Fuzzing the .msbc reader: real images from the examples, mutated with their
checksum recomputed so that the mutation reaches the parser. The property:
``loads`` either returns a Code that verifies and links, or raises a
BytecodeError that names the file and an offset, on one line; never another
exception, and within a time bound (hypothesis' deadline). Inputs that once
crashed the reader live in tests/vm/corpus/ and are replayed as a plain test.
"""

import glob
import os

import msbc_fuzz as F
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from msvm import bytecode
from msvm.bytecode import binary
from msvm.bytecode.opcodes import FINGERPRINT
from msvm.errors import BytecodeError
from msvm.static import analyze_file
from paths import EXAMPLES

CORPUS = os.path.join(os.path.dirname(__file__), "corpus")

# About 400 examples in all, a few seconds on this machine; the deadline is the time bound
# (loading a 2000-term dim took 4-6 s before the fix, the examples load in ~25 ms).
FUZZ = settings(max_examples=100, deadline=3000, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.fixture(scope="module")
def samples():
    out = []
    for path, name in ((f"{EXAMPLES}/dynamic_matmul.py", None), (f"{EXAMPLES}/bert_layer.py", "BertLayer")):
        for e in analyze_file(path):
            if e.code is not None and (name is None or e.name == name):
                out.append(binary.dumps(e.code))
    assert len(out) == 2
    return out


def check_property(data: bytes):
    try:
        code = binary.loads(data, "fuzz.msbc")
    except BytecodeError as e:
        msg = str(e)
        assert msg.startswith("fuzz.msbc: offset 0x"), msg
        assert "\n" not in msg and "\r" not in msg, msg
        return
    for c in code.all_codes():
        bytecode.verify(c)
    F.link(code)


raw = st.one_of(
    st.tuples(st.just(F.bitflip), st.integers(0, 1 << 20), st.integers(0, 7)),
    st.tuples(st.just(F.setbyte), st.integers(0, 1 << 20), st.sampled_from([0, 0xFF, 0x7F, 0x5B, 0x22, 0x39, 0x0B])),
    st.tuples(st.just(F.truncate), st.integers(0, 1 << 20)),
    st.tuples(st.just(F.splice), st.integers(0, 1 << 20), st.integers(1, 64), st.integers(0, 1 << 20), st.booleans()),
    st.tuples(st.just(F.header_field), st.sampled_from(["n", "flags"]), st.sampled_from([0, 2, 13, 2 ** 32 - 1])),
)
structured = st.one_of(
    st.tuples(st.just(F.bump_length), st.integers(0, 64), st.sampled_from([-8, -1, 1, 3, 8, 1000, 2 ** 31, -2 ** 31])),
    st.tuples(st.just(F.set_code), st.integers(0, 64), st.integers(0, 1 << 16),
              st.one_of(st.integers(0, 0xFFFF), st.sampled_from([0, 1, 2, 3, 5, 6, 0x0A, 0x0B, 0xFFFF])),
              st.sampled_from([1, 2])),
)
json_text = st.one_of(
    st.sampled_from(F.interesting_json()),
    st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-2 ** 70, 2 ** 70), st.text(max_size=6),
                           st.sampled_from(["sym", "poly", "flag", "cmp", "int", "tuple", "float32"])),
                 lambda ch: st.one_of(st.lists(ch, max_size=4),
                                      st.dictionaries(st.sampled_from(["int", "sym", "tuple", "dtype", "tensor",
                                                                        "scalar", "value", "none"]), ch, max_size=2)),
                 max_leaves=10).map(F.json_dumps),
)


def apply(data, m):
    fn, *args = m
    return fn(data, *args)


@FUZZ
@given(which=st.integers(0, 1), m=raw)
def test_fuzz_raw_bytes(samples, which, m):
    check_property(apply(samples[which], m))


@FUZZ
@given(which=st.integers(0, 1), m=structured, then=st.none() | raw)
def test_fuzz_length_fields_and_code(samples, which, m, then):
    data = apply(samples[which], m)
    check_property(apply(data, then) if then else data)


@FUZZ
@given(which=st.integers(0, 1), rec=st.integers(0, 64), pick=st.integers(0, 1 << 20), text=json_text)
def test_fuzz_metadata_values(samples, which, rec, pick, text):
    check_property(F.replace_json(samples[which], rec, pick, text))


@FUZZ
@given(which=st.integers(0, 1), rec=st.integers(0, 64), pick=st.integers(0, 1 << 20),
       a=st.sampled_from(F.interesting_json()), m=raw)
def test_fuzz_metadata_then_bytes(samples, which, rec, pick, a, m):
    check_property(apply(F.replace_json(samples[which], rec, pick, a), m))


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(CORPUS, "*.bin"))), ids=os.path.basename)
def test_corpus(path):
    """Inputs that once raised something other than a BytecodeError (or took seconds)."""
    with open(path, "rb") as f:
        data = f.read()
    data = F.seal(data, F.payload(data), header={"fp": FINGERPRINT})   # still reaches the parser when the
    check_property(data)                                              # opcode table grows
    with pytest.raises(BytecodeError) as e:
        binary.loads(data)
    assert "fingerprint" not in str(e.value) and "checksum" not in str(e.value)


def test_corpus_is_there():
    assert len(glob.glob(os.path.join(CORPUS, "*.bin"))) >= 8
