"""`stopdoctor diff A B`: nothing between a model and itself (or an HF folder and its faithful
GGUF), the eos change between a model and a copy with another eos (exit 1, file and key named),
--json, bad input exit 2."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from typer.testing import CliRunner

from stopdoctor.writers.gguf_edit import set_int_key
from stopdoctor.api import diff_models, diff_report
from stopdoctor.cli.app import app

from tests.helpers import model_copy

EXAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "examples"


def run(*args):
    result = CliRunner().invoke(app, ["diff", *map(str, args)])
    return result.exit_code, result.stdout


def test_a_model_and_itself(real_models):
    assert run(real_models.smollm2_hf, real_models.smollm2_hf)[0] == 0
    assert not diff_models(str(real_models.smollm2_hf), str(real_models.smollm2_hf)).differences
    assert not diff_models(str(real_models.gemma_gguf), str(real_models.gemma_gguf)).differences


def test_hf_folder_and_its_gguf(real_models):
    # SmolLM2's GGUF was converted from the same files: same stop ids, special ids and tokenization
    assert diff_report(diff_models(str(real_models.smollm2_hf), str(real_models.smollm2_gguf))).exit_code() == 0


def test_eos_changed_in_a_copy(real_models, tmp_path):
    copy = tmp_path / "copy"
    model_copy(real_models.smollm2_hf, copy)
    generation = json.loads((copy / "generation_config.json").read_text())
    generation["eos_token_id"] = 0
    (copy / "generation_config.json").write_text(json.dumps(generation))
    result = diff_models(str(real_models.smollm2_hf), str(copy))
    assert diff_report(result).exit_code() == 1
    declared = [d for d in result.stop_relevant if d.aspect == "declared"]
    assert declared and declared[0].where_b == "generation_config.json:eos_token_id"
    transformers = next(d for d in result.stop_relevant if d.what == "transformers")
    assert transformers.before == ["<|im_end|> (2)"] and transformers.after == ["<|endoftext|> (0)"]
    code, out = run(real_models.smollm2_hf, copy, "--json")
    document = json.loads(out)
    assert code == 1 and document["schema"] == "stopdoctor.diff/1" and document["stop_relevant"] >= 2


def test_gguf_eos_changed(real_gguf_models, tmp_path):
    copy = tmp_path / "copy.gguf"
    shutil.copyfile(real_gguf_models.smollm2_gguf, copy)
    set_int_key(copy, "tokenizer.ggml.eos_token_id", 0)
    code, out = run(real_gguf_models.smollm2_gguf, copy)
    assert code == 1 and "tokenizer.ggml.eos_token_id" in out and "STOP" in out


def test_template_family_change_is_stop_relevant():
    result = diff_models(str(EXAMPLES / "chatml-ok"), str(EXAMPLES / "llama3-eot-missing"))
    aspects = {d.aspect for d in result.stop_relevant}
    assert "end_of_turn" in aspects and diff_report(result).exit_code() == 1
    template = next(d for d in result.differences if d.aspect == "template")
    assert "<|eot_id|>" in template.detail


def test_bad_input(tmp_path):
    code, _ = run(tmp_path / "missing", EXAMPLES / "chatml-ok")
    assert code == 2


def test_two_folders_with_one_tokenizer_file_are_not_encoded(real_models, tmp_path, monkeypatch):
    """A fine-tune keeps tokenizer.json byte for byte: both sides would encode alike, so no tokenizer
    is loaded (Gemma's takes 1.6 s); a tokenizer.json that differs is still loaded and compared."""
    from stopdoctor.facts.vocab import Vocabulary

    copy = tmp_path / "copy"
    model_copy(real_models.smollm2_hf, copy)
    loads = []
    real_tokenizer = Vocabulary.tokenizer
    monkeypatch.setattr(Vocabulary, "tokenizer", lambda self: loads.append(self) or real_tokenizer(self))
    assert not diff_models(str(real_models.smollm2_hf), str(copy)).differences and loads == []
    assert not diff_models(str(real_models.gemma_gguf), str(real_models.gemma_gguf)).differences and loads == []
    document = json.loads((copy / "tokenizer.json").read_text())
    document["added_tokens"] = [t for t in document["added_tokens"] if t["content"] != "<|im_end|>"]
    (copy / "tokenizer.json").write_text(json.dumps(document))
    result = diff_models(str(real_models.smollm2_hf), str(copy))
    assert len(loads) >= 2 and any(d.aspect == "tokenization" and d.what == "'<|im_end|>'" for d in result.differences)
