"""stop-odds on broken weights and long data (issue #32 "Weights"): an end-of-turn row of NaN or
±Inf is the verdict "broken" (exit 1), never a median computed from NaN, and the JSON holds no
NaN; --data work is bounded by tokens (a batch's padded tokens, a run's tokens), and the rows cut
are listed as not measured."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from .helpers import cli

IM_END = 2  # SmolLM2's <|im_end|>


def _strict(text: str) -> dict:
    def refuse(constant: str):
        raise AssertionError(f"the JSON document holds {constant}")

    return json.loads(text, parse_constant=refuse)


def _with_row(src: Path, dst: Path, value: float) -> Path:
    """SmolLM2's folder with <|im_end|>'s embedding row (tied: lm_head's too) set to `value`."""
    from stopdoctor.facts.safetensors import LocalFile, read_header

    dst.mkdir(parents=True)
    for item in src.iterdir():
        if item.is_file() and item.name != "model.safetensors":
            os.link(item, dst / item.name) if item.stat().st_dev == dst.stat().st_dev else shutil.copy(item, dst / item.name)
    shutil.copyfile(src / "model.safetensors", dst / "model.safetensors")
    with LocalFile(dst / "model.safetensors") as handle:
        tensor = read_header(handle).tensors["model.embed_tokens.weight"]
    width, dtype = tensor.shape[1], {"F32": "<f4", "BF16": None}[tensor.dtype]
    row = np.full(width, value, dtype=np.float32)
    row = row.astype(dtype).tobytes() if dtype else (row.view(np.uint32) >> 16).astype("<u2").tobytes()
    with open(dst / "model.safetensors", "r+b") as handle:
        handle.seek(tensor.start + IM_END * len(row))
        handle.write(row)
    return dst


@pytest.mark.slow
@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_a_nan_or_inf_end_of_turn_row_is_broken_not_weak(real_models, tmp_path, value):
    folder = _with_row(real_models.smollm2_hf, tmp_path / "m", value)
    run = cli("stop-odds", "--json", "--limit", "2", "--device", "cpu", str(folder))
    document = _strict(run.stdout)
    assert run.code == 1, run.stderr
    assert document["verdict"] == "broken" and "NaN or infinite" in document["reason"]
    assert document["examples"] == [] and len(document["skipped"]) == 2
    human = cli("stop-odds", "--limit", "2", "--device", "cpu", str(folder))
    assert "verdict  broken" in human.stdout and "weak" not in human.stdout
    assert not [line for line in human.stdout.splitlines() if line.strip().startswith("median") and "nan" in line]


@pytest.mark.slow
def test_data_work_is_bounded_by_tokens_and_the_cut_is_said(real_models, tmp_path, monkeypatch):
    import stopdoctor.actions.stop_odds as stop_odds

    monkeypatch.setitem(stop_odds.RUN_TOKENS, "cpu", 300)
    data = tmp_path / "rows.jsonl"
    answer = " ".join(["The answer is long."] * 20)  # ~100 tokens a row
    data.write_text("".join(json.dumps({"messages": [{"role": "user", "content": f"Question {i}?"},
                                                      {"role": "assistant", "content": answer}]}) + "\n"
                            for i in range(8)))
    run = cli("stop-odds", "--json", "--device", "cpu", "--data", str(data), str(real_models.smollm2_hf))
    document = _strict(run.stdout)
    assert run.code in (0, 1), run.stderr  # the verdict on these rows is not the point
    assert document["tokens"] <= 300 and 1 <= len(document["examples"]) < 8
    cut = [s for s in document["skipped"] if "not measured: the run's 300 tokens on cpu were spent" in s["why"]]
    assert len(cut) == 8 - len(document["examples"])


def test_batches_hold_at_most_their_rows_and_tokens():
    from stopdoctor.actions.stop_odds import Context, _batches

    lengths = [10, 20, 30, 40, 4096, 4096, 4096, 4096]
    contexts = [Context(i, "x", tuple(range(n)), (0,), "chat", "") for i, n in enumerate(lengths)]
    batches = _batches(contexts, list(range(len(contexts))), batch_size=8, batch_tokens=8192)
    assert [[len(c.ids) for c in b] for b in batches] == [[10, 20, 30, 40], [4096, 4096], [4096, 4096]]
    assert all(len(b) * max(len(c.ids) for c in b) <= 8192 for b in batches)
    assert [len(b) for b in _batches(contexts, list(range(8)), batch_size=2, batch_tokens=10**9)] == [2, 2, 2, 2]


@pytest.mark.slow
def test_check_live_on_a_nan_end_of_turn_row_says_broken(real_models, tmp_path):
    folder = _with_row(real_models.smollm2_hf, tmp_path / "m", np.nan)
    run = cli("check", "--live", "--format", "json", str(folder))
    model = _strict(run.stdout)["models"][0]
    assert run.code == 1, run.stderr
    assert "SD801" in [f["code"] for f in model["findings"]]
    assert model["live"]["reason"].startswith("the weights are broken")
    assert "ended its turn" not in model["live"]["reason"]


@pytest.mark.slow
def test_stop_odds_on_f32_data_labelled_f16_is_one_line(real_models, tmp_path):
    """The embedding's header says F16 with twice the columns (the same bytes): transformers
    refuses the shapes; one line, exit 2, not an internal error."""
    import struct

    folder = tmp_path / "m"
    folder.mkdir()
    for item in real_models.smollm2_hf.iterdir():
        if item.is_file() and item.name != "model.safetensors":
            shutil.copy(item, folder / item.name)
    data = (real_models.smollm2_hf / "model.safetensors").read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    tensor = header["model.embed_tokens.weight"]
    tensor["dtype"], tensor["shape"] = "F16", [tensor["shape"][0], tensor["shape"][1] * 2]
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (length - len(raw))
    assert len(raw) == length
    (folder / "model.safetensors").write_bytes(data[:8] + raw + data[8 + length:])
    run = cli("stop-odds", "--limit", "1", "--device", "cpu", str(folder))
    assert run.code == 2, run.stderr
    errors = [line for line in run.stderr.splitlines() if line.startswith("stopdoctor: error:")]
    assert len(errors) == 1 and "do not match config.json" in errors[0]
