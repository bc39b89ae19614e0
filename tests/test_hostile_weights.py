"""Hostile weight files (issue #32 "Weights", #26 §3): shapes that lie (no columns, rows
megabytes wide, a dtype the data does not match), NaN/Inf rows, shard indexes that name a
10,000-character file or themselves. Each is one line and exit 2 (or a finding), never exit 3,
never rows read before the shape is judged, and a JSON document never holds NaN or Infinity."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

from .helpers import cli

EOT = 610  # <|im_end|> of the synthetic ChatML model
VOCAB = 611


@pytest.fixture
def folder(synth_root, tmp_path) -> Path:
    target = tmp_path / "model"
    shutil.copytree(synth_root / "clean-chatml", target)
    return target


def _safetensors(path: Path, tensors: dict[str, tuple[str, list[int], bytes | int]]) -> None:
    """{name: (dtype, shape, data or a byte count of zeros written sparse)}."""
    document, offset, blobs = {}, 0, []
    for name, (dtype, shape, data) in tensors.items():
        size = data if isinstance(data, int) else len(data)
        document[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
        blobs.append(data)
    header = json.dumps(document).encode()
    with path.open("wb") as handle:
        handle.write(struct.pack("<Q", len(header)) + header)
        for blob in blobs:
            if isinstance(blob, int):
                handle.seek(blob, 1)  # sparse: the test's disk holds none of it
            else:
                handle.write(blob)
        handle.truncate(handle.tell())


def _strict_json(text: str) -> dict:
    def refuse(constant: str):
        raise AssertionError(f"the JSON document holds the bare constant {constant}")

    return json.loads(text, parse_constant=refuse)


def _one_line_exit_2(run, says: str) -> None:
    assert run.code == 2, (run.code, run.stdout[-500:], run.stderr[-500:])
    errors = [line for line in run.stderr.splitlines() if line.startswith("stopdoctor: error:")]
    assert len(errors) == 1 and says in errors[0], run.stderr[-1000:]


def test_an_embedding_with_no_columns_is_one_line(folder):
    _safetensors(folder / "model.safetensors", {"model.embed_tokens.weight": ("F32", [VOCAB, 0], b"")})
    _one_line_exit_2(cli("inspect", "--weights", str(folder)), "rows of 0 columns")


def test_a_gguf_embedding_with_no_columns_is_one_line(tmp_path):
    from .test_hostile_inputs import gguf_with_tensors

    path = tmp_path / "zero.gguf"
    path.write_bytes(gguf_with_tensors([("token_embd.weight", 0, [0, 3], 0)], data=0))
    _one_line_exit_2(cli("inspect", "--weights", str(path)), "rows of 0 columns")


@pytest.mark.parametrize("dtype, width", [("F32", 2**20), ("F64", 2**23)])
def test_rows_megabytes_wide_are_refused_before_any_row_is_read(folder, monkeypatch, dtype, width):
    """An embedding [611, 2^20] F32 (4 MB a row) or [611, 2^23] F64 (64 MB a row), the data sparse:
    the shape is called implausible and no row is read."""
    import stopdoctor.facts.weights as weights

    reads = []
    monkeypatch.setattr(weights, "read_rows", lambda *args: reads.append(args) or {})
    itemsize = {"F32": 4, "F64": 8}[dtype]
    _safetensors(folder / "model.safetensors",
                 {"model.embed_tokens.weight": (dtype, [VOCAB, width], VOCAB * width * itemsize)})
    _one_line_exit_2(cli("inspect", "--weights", str(folder)), f"{width:,} columns wide: an implausible shape")
    assert reads == []


def test_an_untied_lm_head_that_wide_is_refused_too(folder):
    rows = np.ones((VOCAB, 8), dtype="<f4").tobytes()
    _safetensors(folder / "model.safetensors", {"model.embed_tokens.weight": ("F32", [VOCAB, 8], rows),
                                                "lm_head.weight": ("F32", [VOCAB, 2**20], VOCAB * 2**22)})
    _one_line_exit_2(cli("inspect", "--weights", str(folder)), "'lm_head.weight' has rows 1,048,576 columns wide")


def test_the_rows_read_are_bounded_in_all(folder, monkeypatch):
    """Many special rows of a wide (but plausible) matrix: the rows past the byte budget are not
    read, the watched and baseline rows are, and the cut is counted."""
    import stopdoctor.facts.weights as weights
    from stopdoctor import api
    from stopdoctor.analysis.weights import analyze_weights

    monkeypatch.setattr(weights, "MAX_ROW_BYTES_IN_ALL", 8 * 4 * 100)  # 100 rows of 8 columns
    rng = np.random.default_rng(1)
    _safetensors(folder / "model.safetensors",
                 {"model.embed_tokens.weight": ("F32", [VOCAB, 8], rng.normal(size=(VOCAB, 8)).astype("<f4").tobytes())})
    result = api.inspect_model(str(folder))
    report = analyze_weights(result.analysis)
    assert len(report.rows.embedding_rows) == 100
    assert report.rows.rows_cut > 0
    assert EOT in report.rows.embedding_rows  # the watched rows come first


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_a_nan_or_inf_end_of_turn_row_is_a_finding_and_valid_json(folder, value):
    rows = np.random.default_rng(0).normal(size=(VOCAB, 16)).astype("<f4")
    rows[EOT, 3] = value
    _safetensors(folder / "model.safetensors", {"model.embed_tokens.weight": ("F32", [VOCAB, 16], rows.tobytes())})
    run = cli("inspect", "--weights", "--json", str(folder))
    document = _strict_json(run.stdout)
    assert run.code == 1
    watched = {row["id"]: row for row in document["weights"]["rows"]}
    assert watched[EOT]["untrained"] is True
    assert any("NaN or infinite" in reason for reason in watched[EOT]["reasons"])
    assert "SD801" in [f["code"] for f in document["findings"]]


def test_a_shard_index_naming_a_10k_character_file(folder):
    _safetensors(folder / "model.safetensors", {"model.embed_tokens.weight": ("F32", [VOCAB, 8], VOCAB * 32)})
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"model.embed_tokens.weight": "x" * 10_000 + ".safetensors"}}))
    run = cli("inspect", "--weights", str(folder))
    _one_line_exit_2(run, "which is not a file in the model folder")
    assert len(run.stderr) < 2000


def test_a_shard_index_naming_itself(folder):
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"model.embed_tokens.weight": "model.safetensors.index.json"}}))
    _one_line_exit_2(cli("inspect", "--weights", str(folder)), "names itself")


def test_a_shard_index_naming_40000_shards_is_refused_unread(folder):
    weight_map = {f"layer{i}.embed_tokens.weight": f"model-{i:05d}-of-40000.safetensors" for i in range(40_000)}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    _one_line_exit_2(cli("inspect", "--weights", str(folder)), "names 40,000 shards holding embedding or output tensors")


def _gguf_with_sampling(value: float) -> bytes:
    from .test_hardening import ARRAY, STRING, UINT32, gguf, gguf_ints, gguf_str, gguf_strings

    return gguf({
        "general.architecture": (STRING, gguf_str("llama")),
        "general.sampling.temp": (6, struct.pack("<f", value)),  # FLOAT32
        "general.sampling.top_p": (6, struct.pack("<f", 0.9)),
        "tokenizer.ggml.model": (STRING, gguf_str("gpt2")),
        "tokenizer.ggml.tokens": (ARRAY, gguf_strings(["a", "b", "</s>"])),
        "tokenizer.ggml.token_type": (ARRAY, gguf_ints([1, 1, 3])),
        "tokenizer.ggml.eos_token_id": (UINT32, struct.pack("<I", 2)),
    })


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_nan_or_inf_sampling_values_of_a_gguf_never_reach_json(tmp_path, value):
    path = tmp_path / "sampling.gguf"
    path.write_bytes(_gguf_with_sampling(value))
    run = cli("inspect", "--json", str(path))
    assert run.code in (0, 1), run.stderr
    text = json.dumps(_strict_json(run.stdout))
    assert "0.9" in text  # the finite value is kept


def test_nan_or_inf_in_generation_config_never_reach_json(folder):
    (folder / "generation_config.json").write_text('{"temperature": NaN, "top_p": Infinity, "top_k": -Infinity, '
                                                   '"min_p": 1e999, "eos_token_id": 610}')
    run = cli("inspect", "--json", str(folder))
    assert run.code in (0, 1), run.stderr
    _strict_json(run.stdout)
