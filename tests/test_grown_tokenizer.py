"""A tokenizer larger than the embedding (issue #27 §6): tokens added to the real SmolLM2 HF
folder's tokenizer files without `resize_token_embeddings` (fixtures/grown_tokenizer.py, built
here in a temporary copy). `inspect` and `inspect --weights` name them (SD274); `generate` says so
(exit 2) instead of torch's IndexError (exit 3); `--thinking both` keeps the run that worked.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from fixtures.grown_tokenizer import grown_tokenizer_hf
from stopdoctor.cli.app import app

runner = CliRunner()


def _codes(result) -> dict[str, dict]:
    return {f["code"]: f for f in json.loads(result.stdout)["findings"]}


@pytest.fixture(scope="module")
def grown(real_models, tmp_path_factory):
    return grown_tokenizer_hf(real_models.smollm2_hf, tmp_path_factory.mktemp("grown") / "smollm2-grown")


def test_inspect_and_inspect_weights_name_the_tokens_past_the_embedding(grown, real_models):
    for args in (["inspect", str(grown), "--json"], ["inspect", "--weights", str(grown), "--json"]):
        finding = _codes(runner.invoke(app, args)).get("SD274")
        assert finding is not None, args
        assert finding["evidence"]["rows"] == 49152 and finding["evidence"]["ids"] == [49152, 49153]
        assert "<tool_call> (id 49152), </tool_call> (id 49153)" in finding["message"]
    assert "SD274" not in _codes(runner.invoke(app, ["inspect", str(real_models.smollm2_hf), "--json"]))


@pytest.mark.slow
@pytest.mark.needs_torch
def test_generate_says_which_tokens_the_embedding_lacks_instead_of_an_index_error(grown):
    result = runner.invoke(app, ["generate", str(grown), "-m", "user", "Call <tool_call> now", "--device", "cpu",
                                 "--max-new-tokens", "4"])
    assert result.exit_code == 2, result.output
    error = next(line for line in result.stderr.splitlines() if line.startswith("stopdoctor: error:"))
    assert "past the model's 49,152 embedding rows: <tool_call> (id 49152)" in error and "IndexError" not in result.output


@pytest.mark.slow
@pytest.mark.needs_torch
def test_thinking_both_keeps_the_run_that_worked(real_models, tmp_path):
    """A reasoning template whose `<think>`/`</think>` were added without resizing: thinking off
    writes them into the prompt (it cannot run); thinking on does not (it runs)."""
    from fixtures.reasoning import HYBRID

    folder = grown_tokenizer_hf(real_models.smollm2_hf, tmp_path / "m", ("<think>", "</think>"))
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["chat_template"] = HYBRID
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    result = runner.invoke(app, ["generate", str(folder), "-m", "user", "hi", "--thinking", "both", "--device", "cpu",
                                 "--max-new-tokens", "4", "--json"])
    assert result.exit_code == 2, result.output
    runs = json.loads(result.stdout)["runs"]
    assert [run["prompt"]["text"].endswith("<|im_start|>assistant\n") for run in runs] == [True]
    assert "the run with thinking off could not run" in result.stderr and "(id 49153)" in result.stderr
