"""stopdoctor.facts.gguf and gguf_tokenizer: the GGUF header reader and the tokenizer built from it.

Synthetic files are written with gguf's own GGUFWriter; real files (SmolLM2, Gemma 3) come from
$STOPDOCTOR_TEST_MODELS and are compared with gguf's GGUFReader and transformers' AutoTokenizer.
"""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

gguf = pytest.importorskip("gguf")

from stopdoctor.core.errors import InputError  # noqa: E402
from stopdoctor.facts.gguf import GGUFHeader, LazyStrings, read_header  # noqa: E402
from stopdoctor.core.types import Token  # noqa: E402

from .helpers import test_models_dir

SMOLLM2 = "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA = "gemma-3-270m-q4_k_m.gguf"

# A vocabulary with what real ones hold: multi-byte and astral characters, whitespace, an empty
# token, control and user-defined tokens, and enough entries (> 256) to take the bulk-decode path.
SPECIAL = ["<unk>", "<s>", "</s>", "<pad>", "<|eot|>", "<|eom|>", "<think>"]
TOKENS = SPECIAL + ["", " ", "\n\n", "é", "日本", "🙂", "a b"] + [f"tok{i}" for i in range(500)]
TOKEN_TYPES = [2, 3, 3, 3, 3, 3, 4] + [1] * (len(TOKENS) - 7)
MERGES = [f"t o{i}" for i in range(400)]


def write_gguf(path: Path, build, tensor: bool = True) -> Path:
    writer = gguf.GGUFWriter(str(path), "llama")
    build(writer)
    if tensor:
        writer.add_tensor("token_embd.weight", np.ones((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def full_model(writer) -> None:
    writer.add_name("Tiny Test")
    writer.add_finetune("Instruct")
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(TOKENS)
    writer.add_token_types(TOKEN_TYPES)
    writer.add_token_scores([float(-i) for i in range(len(TOKENS))])
    writer.add_token_merges(MERGES)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_pad_token_id(3)
    writer.add_eot_token_id(4)
    writer.add_eom_token_id(5)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_chat_template(
        [
            {"name": "default", "template": "{{ messages[0]['content'] }}<|eot|>"},
            {"name": "tool_use", "template": "{{ tools }}"},
        ]
    )
    writer.add_context_length(2048)
    writer.add_uint64("test.big", 2**40 + 3)
    writer.add_int8("test.neg", -5)
    writer.add_float64("test.f64", 0.125)
    writer.add_array("test.small_strings", ["x", "yz"])
    writer.add_array("test.nested", [[1, 2], [3]])


@pytest.fixture
def model_file(tmp_path: Path) -> Path:
    return write_gguf(tmp_path / "tiny.gguf", full_model)


def test_header_fields_and_properties(model_file: Path) -> None:
    header = read_header(model_file)
    assert isinstance(header, GGUFHeader)
    assert header.path == model_file
    assert header.version == 3
    assert header.tensor_count == 1
    assert header.architecture == "llama"
    assert header.name == "Tiny Test"
    assert header.finetune == "Instruct"
    assert header.tokenizer_model == "gpt2"
    assert header.tokens == TOKENS
    assert header.token_types is not None and header.token_types.tolist() == TOKEN_TYPES
    assert (header.unk_id, header.bos_id, header.eos_id, header.pad_id, header.eot_id, header.eom_id) == (
        0,
        1,
        2,
        3,
        4,
        5,
    )
    assert header.add_bos is True
    assert header.add_eos is False
    assert header.chat_template == "{{ messages[0]['content'] }}<|eot|>"
    assert header.named_chat_templates == {"tool_use": "{{ tools }}"}
    assert header.get("llama.context_length") == 2048
    assert header.get("test.big") == 2**40 + 3
    assert header.get("test.neg") == -5
    assert header.get("test.f64") == 0.125
    assert header.get("test.small_strings") == ["x", "yz"]
    assert [a.tolist() for a in header.get("test.nested")] == [[1, 2], [3]]
    assert header.get("no.such.key", "fallback") == "fallback"


def test_arrays_are_numpy_and_big_string_arrays_lazy(model_file: Path) -> None:
    header = read_header(model_file)
    scores = header.get("tokenizer.ggml.scores")
    assert isinstance(scores, np.ndarray) and scores.dtype == np.float32
    assert scores[:3].tolist() == [0.0, -1.0, -2.0]
    merges = header.get("tokenizer.ggml.merges")
    assert isinstance(merges, LazyStrings)
    assert len(merges) == len(MERGES)
    assert merges[7] == "t o7"  # one item, before the rest are decoded
    assert merges == MERGES
    assert list(merges)[-1] == "t o399"


def test_token_carries_control_flag(model_file: Path) -> None:
    header = read_header(model_file)
    assert header.token(2) == Token(2, "</s>", True)  # control
    assert header.token(6) == Token(6, "<think>", False)  # user-defined: whole, not special
    assert header.token(12) == Token(12, "🙂", False)
    assert header.token(len(TOKENS)) is None
    assert header.token(-1) is None


def test_missing_keys_give_none(tmp_path: Path) -> None:
    header = read_header(write_gguf(tmp_path / "bare.gguf", lambda w: None, tensor=False))
    assert header.tensor_count == 0
    assert header.architecture == "llama"
    assert header.name is None and header.tokens is None and header.token_types is None
    assert header.eos_id is None and header.add_bos is None and header.chat_template is None
    assert header.named_chat_templates == {}
    assert header.token(0) is None


def test_unusual_strings_decode_like_one_by_one(tmp_path: Path) -> None:
    """Long tokens (> 255 bytes), NULs, and raw non-UTF-8 byte tokens all take the careful paths."""
    raw = [b"\xe6\x97", b"\xa5", b"ok\x00nul", ("long" * 100).encode(), b"\xff"] + [b"w%d" % i for i in range(300)]

    def build(writer) -> None:
        writer.add_token_list(raw)
        writer.add_array("test.long_strings", ["é" * 300, "", "x"])

    header = read_header(write_gguf(tmp_path / "odd.gguf", build))
    assert header.tokens == [token.decode("utf-8", "replace") for token in raw]
    assert header.get("test.long_strings") == ["é" * 300, "", "x"]


# --- Bad input ---------------------------------------------------------------------------------------


def patched(source: Path, target: Path, offset: int, data: bytes) -> Path:
    blob = bytearray(source.read_bytes())
    blob[offset : offset + len(data)] = data
    target.write_bytes(bytes(blob))
    return target


def value_offset(path: Path, key: str) -> int:
    """Offset of the u32 value type that follows `key` in the file."""
    blob = path.read_bytes()
    encoded = key.encode()
    return blob.index(struct.pack("<Q", len(encoded)) + encoded) + 8 + len(encoded)


def expect_input_error(path: Path, *words: str) -> str:
    with pytest.raises(InputError) as caught:
        header = read_header(path)
        header.tokens  # noqa: B018 - decoding must not fail either
    message = caught.value.message
    assert "\n" not in message
    assert str(path) in message
    for word in words:
        assert word in message
    return message


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.gguf"
    path.write_bytes(b"")
    expect_input_error(path, "empty")


def test_missing_file_and_directory(tmp_path: Path) -> None:
    expect_input_error(tmp_path / "nope.gguf", "cannot read")
    expect_input_error(tmp_path, "cannot read")


def test_bad_magic(model_file: Path, tmp_path: Path) -> None:
    expect_input_error(patched(model_file, tmp_path / "bad.gguf", 0, b"GGML"), "not a GGUF file", "GGML")
    json_file = tmp_path / "config.gguf"
    json_file.write_text('{"model_type": "llama"}')
    expect_input_error(json_file, "not a GGUF file")


@pytest.mark.parametrize("version", [1, 4, 0xFFFFFFFF])
def test_unsupported_version(model_file: Path, tmp_path: Path, version: int) -> None:
    path = patched(model_file, tmp_path / "v.gguf", 4, struct.pack("<I", version))
    expect_input_error(path, f"unsupported GGUF version {version}")


def test_big_endian_is_named(model_file: Path, tmp_path: Path) -> None:
    path = patched(model_file, tmp_path / "be.gguf", 4, struct.pack(">I", 3))
    expect_input_error(path, "big-endian")


@pytest.mark.parametrize(
    "where",
    ["fixed header", "a key", "inside the vocabulary", "last token", "merges", "chat template", "tensor table"],
)
def test_truncated(model_file: Path, tmp_path: Path, where: str) -> None:
    blob = model_file.read_bytes()
    tokens_at = value_offset(model_file, "tokenizer.ggml.tokens")
    cut = {
        "fixed header": 10,
        "a key": blob.index(b"general.name") + 3,
        "inside the vocabulary": tokens_at + 4 + 12 + 100,
        "last token": blob.index(b"tok499") + 2,
        "merges": blob.index(b"t o200"),
        "chat template": blob.index(b"messages[0]"),
        "tensor table": blob.index(b"token_embd.weight") + 4,
    }[where]
    path = tmp_path / "cut.gguf"
    path.write_bytes(blob[:cut])
    expect_input_error(path, "truncated")


def test_huge_array_length(model_file: Path, tmp_path: Path) -> None:
    count_at = value_offset(model_file, "tokenizer.ggml.tokens") + 4 + 4
    path = patched(model_file, tmp_path / "huge.gguf", count_at, struct.pack("<Q", 2**60))
    message = expect_input_error(path, "corrupt", "tokenizer.ggml.tokens")
    assert "the file has only" in message


def test_huge_numeric_array_length(model_file: Path, tmp_path: Path) -> None:
    count_at = value_offset(model_file, "tokenizer.ggml.scores") + 4 + 4
    path = patched(model_file, tmp_path / "huge.gguf", count_at, struct.pack("<Q", 2**62))
    expect_input_error(path, "corrupt", "tokenizer.ggml.scores")


def test_huge_string_length(model_file: Path, tmp_path: Path) -> None:
    length_at = value_offset(model_file, "general.name") + 4
    path = patched(model_file, tmp_path / "huge.gguf", length_at, struct.pack("<Q", 2**63))
    expect_input_error(path, "corrupt", "general.name")


def test_huge_metadata_count(model_file: Path, tmp_path: Path) -> None:
    path = patched(model_file, tmp_path / "huge.gguf", 16, struct.pack("<Q", 2**50))
    expect_input_error(path, "metadata entries cannot fit")


def test_unknown_value_type(model_file: Path, tmp_path: Path) -> None:
    path = patched(model_file, tmp_path / "type.gguf", value_offset(model_file, "general.name"), struct.pack("<I", 13))
    expect_input_error(path, "unknown value type 13", "general.name")


def test_unknown_array_element_type(model_file: Path, tmp_path: Path) -> None:
    at = value_offset(model_file, "tokenizer.ggml.scores") + 4
    expect_input_error(patched(model_file, tmp_path / "t.gguf", at, struct.pack("<I", 99)), "element type 99")


def test_non_utf8_key(model_file: Path, tmp_path: Path) -> None:
    at = model_file.read_bytes().index(b"general.name")
    expect_input_error(patched(model_file, tmp_path / "key.gguf", at, b"\xff"), "not valid UTF-8")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_corruption_is_an_input_error_or_a_header(model_file: Path, tmp_path: Path, data) -> None:
    """Whatever bytes are flipped in the header, the reader answers or raises InputError."""
    blob = bytearray(model_file.read_bytes())
    header_end = blob.index(b"token_embd.weight") + 40
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, header_end))
        blob[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.one_of(st.none(), st.integers(0, header_end)))
    path = tmp_path / "fuzz.gguf"
    path.write_bytes(bytes(blob if cut is None else blob[:cut]))
    try:
        header = read_header(path)
        for value in header.metadata.values():
            if isinstance(value, LazyStrings):
                value.to_list()
    except InputError as error:
        assert "\n" not in error.message


# --- Real files --------------------------------------------------------------------------------------


def real_model(name: str) -> Path:
    folder = test_models_dir()
    if not (folder / name).is_file():
        pytest.skip(f"{name} not found in {folder}: run `python fixtures/realmodels.py`")
    return folder / name


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (SMOLLM2, {"architecture": "llama", "tokenizer_model": "gpt2", "eos_id": 2, "bos_id": 1, "vocab": 49152}),
        (GEMMA, {"architecture": "gemma3", "tokenizer_model": "llama", "eos_id": 1, "bos_id": 2, "vocab": 262144}),
    ],
)
def test_real_file_facts(name: str, expected: dict) -> None:
    header = read_header(real_model(name))
    assert header.architecture == expected["architecture"]
    assert header.tokenizer_model == expected["tokenizer_model"]
    assert header.eos_id == expected["eos_id"]
    assert header.bos_id == expected["bos_id"]
    assert len(header.tokens) == expected["vocab"]
    assert header.token(header.eos_id).special


def test_gemma_header_and_lookups_do_no_work_per_token() -> None:
    """The whole point of not using GGUFReader, measured in work, not seconds (a busy machine
    slows seconds, not calls): reading the 262k-token header makes no Python call per token
    (the string walk is vectorised; it was a lambda per token, 262,146 calls), and looking up a
    few token texts neither decodes nor indexes the whole vocabulary (it did: ~43 MB)."""
    import tracemalloc

    from stopdoctor.facts.vocab import Vocabulary, read_gguf_vocab

    path = real_model(GEMMA)
    calls = 0

    def count(frame, event, arg):  # noqa: ARG001 - the profiler's signature
        nonlocal calls
        calls += event in ("call", "c_call")

    sys.setprofile(count)
    try:
        header = read_header(path)
    finally:
        sys.setprofile(None)
    assert calls < 50_000
    vocab = Vocabulary()
    read_gguf_vocab(vocab, header)
    tracemalloc.start()
    try:
        ids = [vocab.id_of(text) for text in ("<end_of_turn>", "<eos>", "hello", "<|im_end|>")]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert ids == [106, 1, 23391, None]
    assert peak < 24e6
    assert len(header.tokens) == 262144


@pytest.mark.slow
@pytest.mark.parametrize("name", [SMOLLM2, GEMMA])
def test_real_file_matches_gguf_reader(name: str) -> None:
    path = real_model(name)
    header = read_header(path)
    reader = gguf.GGUFReader(str(path))
    reference = {key: field for key, field in reader.fields.items() if not key.startswith("GGUF.")}
    assert list(header.metadata) == list(reference)
    assert header.tensor_count == len(reader.tensors)
    for key, field in reference.items():
        mine, theirs = header.metadata[key], field.contents()
        if isinstance(mine, np.ndarray):
            mine = mine.tolist()
        elif isinstance(mine, LazyStrings):
            mine = mine.to_list()
        if isinstance(theirs, float):
            assert mine == pytest.approx(theirs), key
        else:
            assert mine == theirs, key
    id_keys = {
        "bos_id": "tokenizer.ggml.bos_token_id",
        "eos_id": "tokenizer.ggml.eos_token_id",
        "pad_id": "tokenizer.ggml.padding_token_id",
        "unk_id": "tokenizer.ggml.unknown_token_id",
        "eot_id": "tokenizer.ggml.eot_token_id",
        "eom_id": "tokenizer.ggml.eom_token_id",
    }
    for attribute, key in id_keys.items():
        assert getattr(header, attribute) == (reference[key].contents() if key in reference else None), attribute


# --- Tokenizer ---------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("name", [SMOLLM2, GEMMA])
@pytest.mark.needs_torch
def test_tokenizer_matches_transformers(name: str) -> None:
    """Same ids as `AutoTokenizer.from_pretrained(dir, gguf_file=...)`. Gemma takes ~40 s: transformers
    rebuilds its merges from the vocabulary, both here and in the oracle."""
    from stopdoctor.facts.gguf_tokenizer import header_to_tokenizer

    path = real_model(name)
    transformers = pytest.importorskip("transformers")
    header = read_header(path)
    tokenizer = header_to_tokenizer(header)
    oracle = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    texts = ["What is the capital of France?", "  two  spaces\nand 日本語 🙂", header.chat_template or ""]
    for text in texts:
        assert tokenizer.encode(text).ids == oracle(text)["input_ids"], text
    # Control tokens stay whole and are special; the eos token is one of them.
    eos = header.token(header.eos_id)
    assert tokenizer.encode(eos.text, add_special_tokens=False).ids == [header.eos_id]
    added = {token.content: token.special for token in tokenizer.get_added_tokens_decoder().values()}
    assert added[eos.text] is True


def test_tokenizer_without_vocabulary_is_an_input_error(tmp_path: Path) -> None:
    from stopdoctor.facts.gguf_tokenizer import header_to_tokenizer

    header = read_header(write_gguf(tmp_path / "bare.gguf", lambda w: None, tensor=False))
    with pytest.raises(InputError, match="no vocabulary"):
        header_to_tokenizer(header)


def test_the_vectorised_string_walk_equals_the_walk_one_by_one() -> None:
    """Empty strings, runs of NULs inside strings, strings of 256+ bytes, padding after the array:
    the offsets found without a Python step per string are those of the checked walk."""
    import random

    from stopdoctor.facts.gguf import _Parser  # the walk itself is what is tested

    rng = random.Random(28)
    for _ in range(300):
        strings = []
        for _ in range(rng.randint(1, 60)):
            roll = rng.random()
            if roll < 0.15:
                strings.append(b"")
            elif roll < 0.25:
                strings.append(b"\x00" * rng.randint(1, 12))
            elif roll < 0.3:
                strings.append(bytes(rng.randrange(256) for _ in range(rng.randint(256, 300))))
            else:
                strings.append(bytes(rng.choice(b"ab\x00c\x01") for _ in range(rng.randint(1, 10))))
        lead = b"\x07" * rng.randint(0, 5)
        data = lead + b"".join(struct.pack("<Q", len(s)) + s for s in strings) + b"\x00" * rng.randint(0, 40)
        fast, careful = _Parser(Path("x.gguf"), data), _Parser(Path("x.gguf"), data)
        fast.pos = careful.pos = len(lead)
        starts, end = fast.walk_strings(len(strings))
        expected, expected_end = careful.walk_strings_checked(len(strings))
        assert starts.tolist() == expected.tolist() and end == expected_end


def test_token_types_are_read_from_the_bytes_as_numpy_reads_them(model_file: Path) -> None:
    """`ids_of_types` scans the int32 array's bytes for `3 0 0 0` / `4 0 0 0` at multiples of 4,
    without numpy: the same ids as numpy's comparison, and the array stays unread."""
    header = read_header(model_file)
    assert header.ids_of_types((3, 4), len(TOKENS)) == [1, 2, 3, 4, 5, 6]
    assert header.ids_of_types((3,), 4) == [1, 2, 3]  # only ids below the limit
    assert header.metadata.numeric("tokenizer.ggml.token_type") is not None  # never read whole
    types = header.token_types  # now read: numpy, the same ids
    assert np.flatnonzero((types == 3) | (types == 4)).tolist() == header.ids_of_types((3, 4), len(TOKENS))


@settings(max_examples=200, deadline=None)
@given(values=st.lists(st.sampled_from([0, 1, 2, 3, 4, 5, 768, 3 << 8, 3 << 16, 3 << 24, 4 << 8, -1, 2**31 - 1]), max_size=60))
def test_the_byte_scan_of_token_types_finds_exactly_the_aligned_values(values) -> None:
    """Values whose bytes hold a 3 or 4 off the 4-byte grid (768 = 00 03 00 00) never match, and
    never hide an aligned one."""
    from stopdoctor.facts.gguf import NumericArray

    data = struct.pack(f"<{len(values)}i", *values)
    array = NumericArray(data, "<i4", len(values), 0)
    assert array.ids_of((3, 4), len(values)) == [i for i, v in enumerate(values) if v in (3, 4)]
    assert [array.value_at(i) for i in range(len(values))] == values


@settings(max_examples=200, deadline=None)
@given(values=st.lists(st.integers(0, 6), max_size=80), limit=st.integers(0, 90))
def test_token_types_below_256_are_found_from_their_low_bytes(values, limit) -> None:
    """A real token-type array (every value below 256) is read through its low bytes, in runs: the
    same ids as a comparison of each value, below the limit, ascending."""
    from stopdoctor.facts.gguf import NumericArray, _ids_of_small

    data = struct.pack(f"<{len(values)}i", *values)
    assert _ids_of_small(data, (3, 4)) == [i for i, v in enumerate(values) if v in (3, 4)]
    array = NumericArray(data, "<i4", len(values), 0)
    assert array.ids_of((4, 3), limit) == [i for i, v in enumerate(values[:limit]) if v in (3, 4)]


@settings(max_examples=100, deadline=None)
@given(strings=st.lists(st.sampled_from(["", "a", "ab", "<x>", "<y>", "\x00", "a\x00\x00\x00\x00\x00\x00\x00b", "é", "<|end|>",
                                         "z\x03\x00\x00\x00\x00\x00\x00\x00<x>", "\x03\x00\x00\x00\x00\x00\x00\x00<y>",
                                         "L" * 300, "<" * 255]),
                        min_size=1, max_size=40),
       wanted=st.lists(st.sampled_from(["", "a", "ab", "<x>", "<y>", "b", "\x00", "é", "<|end|>", "zz", "L" * 300, "<" * 255]),
                       max_size=6),
       last_first=st.booleans())
def test_lookups_by_text_equal_a_linear_search(strings, wanted, last_first) -> None:
    """First and last index of each text, found in the array's bytes, as a linear search over the
    decoded strings finds them: repeats, empty strings, NULs, a string holding the bytes of another
    (`z` + the length and bytes of `<x>`), texts of 255 and 300 bytes, either lookup first."""
    from stopdoctor.facts.gguf_strings import LazyStrings, walk_strings

    raw = [s.encode() for s in strings]
    data = b"\x09" + b"".join(struct.pack("<Q", len(r)) + r for r in raw) + b"\x00" * 3
    starts, end = walk_strings(data, 1, len(raw), len(data))
    lazy = LazyStrings(data, starts, end, "k")
    first = {t: strings.index(t) for t in wanted if t in strings}
    last = {t: len(strings) - 1 - strings[::-1].index(t) for t in wanted if t and t in strings}
    if last_first:
        assert lazy.last_indices(wanted) == last
    assert lazy.first_indices(wanted) == first
    assert lazy.last_indices(wanted) == last
    assert lazy.to_list() == strings
