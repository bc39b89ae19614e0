"""inspect on the synthetic fixtures: every check has a positive and a negative case, and each
case fires exactly the findings it was built for."""

from __future__ import annotations

import pytest

from fixtures.synth import CASES
from stopdoctor.api import inspect_model
from stopdoctor.rules.runner import REGISTRY

from .helpers import cli


@pytest.mark.parametrize("case", sorted(CASES))
def test_case_fires_exactly_its_findings(synth_root, case):
    result = inspect_model(str(synth_root / case))
    assert {f.name for f in result.findings} == set(CASES[case].expected)
    assert not any(f.code == "SD000" for f in result.findings)


@pytest.mark.parametrize("case", sorted(CASES))
def test_verdict(synth_root, case):
    kind = inspect_model(str(synth_root / case)).analysis.verdict.kind
    assert kind == ("base" if CASES[case].verdict == "base" else "instruct")


def test_every_check_has_a_positive_and_a_negative_fixture():
    fired = {name for case in CASES.values() for name in case.expected}
    clean = [name for name, case in CASES.items() if not case.expected]
    # serving, expectation and crash checks are covered by their own tests
    # the --against checks (a model and its original) have their cases in test_sampling_provenance.py
    model_checks = {c.name for c in REGISTRY.values() if c.code[:3] in ("SD1", "SD2", "SD3")
                    and c.input.__name__ != "ComparisonInput"}
    # the GGUF tokenizer checks have their positive cases on real GGUF copies (test_configured_stops.py,
    # test_llama_server.py); a template that renders no conversation, in test_turns_unseen.py; a
    # tokenizer larger than the embedding, on the real SmolLM2 folder (test_grown_tokenizer.py)
    uncovered = model_checks - fired - {"template-ignores-generation-prompt", "templates-differ",
                                        "template-renders-no-conversation",
                                        "pre-tokenizer-missing", "gguf-merges-missing", "pre-tokenizer-mismatch",
                                        "special-token-not-single", "tokenizer-larger-than-embedding"}
    assert not uncovered, f"checks without a synthetic positive case: {uncovered}"
    assert clean, "no clean fixture"


@pytest.mark.parametrize("family", ["llama2", "llama3", "chatml", "gemma", "mistral", "phi3", "zephyr"])
def test_end_of_turn_found_from_template(synth_root, family):
    from fixtures.synth import family_spec

    result = inspect_model(str(synth_root / f"clean-{family}"))
    spec = family_spec(family)
    markers = [e.text for e in result.analysis.end_of_turn]
    assert markers == [spec.end_of_turn]
    eot = result.analysis.end_of_turn[0]
    assert eot.single_special
    assert eot.ids[0] == result.facts.vocab.id_of(spec.end_of_turn)
    assert eot.ids[0] in result.analysis.runtime("transformers").ids


def test_llama3_eot_missing_names_runtimes_file_and_fix(synth_root):
    result = inspect_model(str(synth_root / "llama3-eot-missing"))
    (finding,) = [f for f in result.findings if f.name == "end-of-turn-not-a-stop-id"]
    eot_id = result.facts.vocab.id_of("<|eot_id|>")
    eos_id = result.facts.vocab.id_of("<|end_of_text|>")
    assert finding.code == "SD101" and finding.severity.label == "error"
    assert finding.location.file == "generation_config.json" and finding.location.key == "eos_token_id"
    assert f"(id {eot_id})" in finding.message
    assert finding.evidence["runtimes_missing"] == ["transformers", "vllm", "tgi"]
    assert finding.evidence["runtimes_stopping"] == ["llama.cpp"]
    assert f"[{eos_id}, {eot_id}]" in finding.fix


def test_stop_ids_disagree_says_which_runtime_stops_where(synth_root):
    result = inspect_model(str(synth_root / "stop-ids-disagree"))
    im_end = result.facts.vocab.id_of("<|im_end|>")
    assert im_end in result.analysis.runtime("vllm").ids
    assert im_end not in result.analysis.runtime("transformers").ids
    (finding,) = [f for f in result.findings if f.name == "end-of-turn-not-a-stop-id"]
    assert finding.evidence["runtimes_missing"] == ["transformers"]


def test_template_mismatch_lists_the_ordinary_pieces(synth_root):
    result = inspect_model(str(synth_root / "chatml-on-llama3-vocab"))
    (finding,) = result.findings
    assert finding.evidence["end_of_turn"] == "<|im_end|>"
    assert len(finding.evidence["ids"]) > 1
    assert "<|im_start|>" in finding.evidence["other_markers"]


def test_json_contract(synth_root):
    run = cli("inspect", "--json", str(synth_root / "llama3-eot-missing"))
    assert run.code == 1
    doc = run.json()
    assert doc["schema_version"] == 1
    assert doc["model"]["spec"].endswith("llama3-eot-missing")
    assert doc["verdict"]["kind"] == "instruct" and doc["verdict"]["evidence"]
    assert doc["end_of_turn"][0]["text"] == "<|eot_id|>"
    eot_id = doc["end_of_turn"][0]["ids"][0]
    assert eot_id not in doc["stop_ids"]["effective"]
    assert doc["stop_ids"]["sources"][0]["file"] == "generation_config.json"
    assert set(doc["stop_ids"]["per_runtime"]) == {"transformers", "vllm", "tgi", "llama.cpp", "mlx-lm", "mlx-vlm",
                                                   "mlx-vlm-legacy", "sglang", "llama-cpp-python"}
    finding = doc["findings"][0]
    assert set(finding) >= {"code", "name", "severity", "message", "fix", "location"}
    assert finding["location"] == {"file": "generation_config.json", "key": "eos_token_id", "line": 4}  # the line, resolved when read


def test_fail_on_and_exit_codes(synth_root):
    assert cli("inspect", str(synth_root / "clean-chatml")).code == 0
    assert cli("inspect", str(synth_root / "pad-is-eos")).code == 0  # warning < error
    assert cli("inspect", "--fail-on", "warning", str(synth_root / "pad-is-eos")).code == 1
    assert cli("inspect", "--fail-on", "info", str(synth_root / "base-no-template")).code == 1
    assert cli("inspect", str(synth_root / "never-closes-turn")).code == 1
    bad = cli("inspect", "--fail-on", "fatal", str(synth_root / "clean-chatml"))
    assert bad.code == 2 and "unknown severity" in bad.stderr


def test_human_output_has_code_message_evidence_fix(synth_root):
    run = cli("inspect", str(synth_root / "llama3-eot-missing"), env={"NO_COLOR": "1"})
    assert "\x1b[" not in run.stdout
    assert "SD101 end-of-turn-not-a-stop-id" in run.stdout
    assert "generation_config.json:eos_token_id" in run.stdout
    assert "fix: set generation_config.json" in run.stdout
    assert "kind      instruct" in run.stdout


def test_gen_config_only_says_what_is_missing(synth_root):
    doc = cli("inspect", "--json", str(synth_root / "gen-config-only")).json()
    assert set(doc["model"]["missing_files"]) == {"tokenizer_config.json", "tokenizer.json"}


def test_named_templates_are_all_listed(synth_root):
    result = inspect_model(str(synth_root / "named-templates"))
    assert {t.name for t in result.facts.templates} == {"default", "tool_use"}


def test_special_tokens_map_wins_without_added_tokens_decoder(synth_root, tmp_path):
    """transformers: a legacy tokenizer_config (no added_tokens_decoder) takes its special tokens
    from special_tokens_map.json."""
    import json
    import shutil

    folder = tmp_path / "legacy"
    shutil.copytree(synth_root / "clean-chatml", folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    del config["added_tokens_decoder"]
    config["eos_token"] = "<|endoftext|>"
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    special = json.loads((folder / "special_tokens_map.json").read_text())
    special["eos_token"] = "<|im_end|>"
    (folder / "special_tokens_map.json").write_text(json.dumps(special))
    result = inspect_model(str(folder))
    im_end = result.facts.vocab.id_of("<|im_end|>")
    assert result.facts.token_text("eos") == "<|im_end|>"
    assert [s.id for s in result.analysis.runtime("vllm").stops][0] == im_end


def test_template_that_ignores_messages_is_a_finding(tmp_path):
    import json

    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ bos_token }}", "bos_token": "<s>", "eos_token": "</s>"}))
    result = inspect_model(str(tmp_path))
    (finding,) = [f for f in result.findings if f.name == "template-never-closes-turn"]
    assert "never writes the conversation's messages" in finding.message
