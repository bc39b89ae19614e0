"""inspect on the real test models (GGUF headers, and SmolLM2 converted to an HF folder)."""

from __future__ import annotations

from stopdoctor.api import inspect_model

from .helpers import cli


def test_smollm2_gguf_is_instruct_and_stops_on_im_end(real_gguf_models):
    doc = cli("inspect", "--json", str(real_gguf_models.smollm2_gguf)).json()
    assert doc["verdict"]["kind"] == "instruct"
    assert doc["end_of_turn"] == [{"text": "<|im_end|>", "ids": [2], "single_special_token": True,
                                   "template": "default", "evidence": doc["end_of_turn"][0]["evidence"], "kind": "token"}]
    assert doc["turn_style"] == "token" and doc["end_of_turn_refused"] == []
    assert 2 in doc["stop_ids"]["effective"]
    assert doc["stop_ids"]["runtime"] == "llama.cpp"
    assert not [f for f in doc["findings"] if f["severity"] == "error"]
    assert doc["model"]["vocab_size"] == 49152


def test_gemma_gguf_is_base_without_template(real_gguf_models):
    run = cli("inspect", "--json", str(real_gguf_models.gemma_gguf))
    assert run.code == 0
    doc = run.json()
    assert doc["verdict"]["kind"] == "base"
    assert doc["end_of_turn"] == []
    assert [(f["name"], f["severity"]) for f in doc["findings"]] == [("no-chat-template", "info")]
    assert doc["model"]["vocab_size"] == 262144
    # llama.cpp would still stop on Gemma's <end_of_turn> (on its end-of-generation list)
    per_runtime = doc["stop_ids"]["per_runtime"]["llama.cpp"]
    assert {s["text"] for s in per_runtime["sources"]} >= {"<eos>", "<end_of_turn>"}


def test_smollm2_hf_with_broken_eos_names_id_2_and_generation_config(real_models):
    result = inspect_model(str(real_models.smollm2_hf_broken_eos))
    (finding,) = [f for f in result.findings if f.name == "end-of-turn-not-a-stop-id"]
    assert finding.evidence["id"] == 2 and finding.evidence["end_of_turn"] == "<|im_end|>"
    assert finding.location.file == "generation_config.json"
    assert "generation_config.json" in finding.fix and "[0, 2]" in finding.fix


def test_smollm2_hf_good_has_no_error(real_models):
    result = inspect_model(str(real_models.smollm2_hf))
    assert not [f for f in result.findings if f.severity.label == "error"]
    assert result.analysis.runtime("transformers").ids == [2]
