"""Serving-configuration parsers and the SD4xx checks, on the hand-written fixtures/serving files
and the Llama-3-style example model (end-of-turn <|eot_id|>)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stopdoctor.api import inspect_model
import stopdoctor.rules.serving  # noqa: F401  (registers SD4xx until checks/__init__ imports it)
from stopdoctor.rules.runner import REGISTRY, run_rules
from stopdoctor.core.errors import InputError
from stopdoctor.api import serving_findings
from stopdoctor.runtimes.serving import load_serving
from stopdoctor.runtimes.serving import served_stops

ROOT = Path(__file__).resolve().parents[1]
SERVING = ROOT / "fixtures" / "serving"
LLAMA3 = ROOT / "fixtures" / "examples" / "llama3-eot-missing"
CHATML = ROOT / "fixtures" / "examples" / "chatml-ok"


@pytest.fixture(scope="module")
def llama3():
    return inspect_model(str(LLAMA3)).analysis


@pytest.fixture(scope="module")
def chatml():
    return inspect_model(str(CHATML)).analysis


def codes(analysis, path, kind=None):
    return {f.code for f in serving_findings(analysis, load_serving(path, kind))}


def test_vllm_command_line_with_continuations_and_json_override():
    config = load_serving(SERVING / "vllm-serve.sh")
    assert config.kind == "vllm"
    assert config.model.value == "meta-llama/Meta-Llama-3-8B-Instruct"
    assert config.override_generation_config.value == {"eos_token_id": [128001, 128009], "temperature": 0.6}
    assert config.generation_config.value == "auto"  # vLLM's default


def test_vllm_yaml_config():
    config = load_serving(SERVING / "vllm-config.yaml")
    assert (config.kind, config.generation_config.value) == ("vllm", "vllm")
    assert config.override_generation_config.value == {"stop_token_ids": [128009]}


def test_modelfile_multiline_template_and_quoted_stops():
    good = load_serving(SERVING / "Modelfile.good")
    assert good.kind == "ollama" and good.model.value == "./llama3.gguf"
    assert [s.value for s in good.stop] == ["<|eot_id|>"]
    assert good.template.value.startswith("{{ if .System }}<|start_header_id|>system")
    assert good.template.value.endswith("{{ .Response }}<|eot_id|>")
    bad = load_serving(SERVING / "Modelfile.bad")
    assert [s.value for s in bad.stop] == ["User:"]  # unquoted
    assert bad.max_tokens.value == 8


def test_llamacpp_command_line():
    config = load_serving(SERVING / "llama-server.sh")
    assert config.kind == "llamacpp" and config.jinja
    assert config.template_name.value == "chatml"
    assert config.kv_overrides["tokenizer.ggml.eos_token_id"].value == 128001
    assert config.ignore_eos.value is True and config.max_tokens.value == 12


def test_request_body():
    config = load_serving(SERVING / "request-bad.json")
    assert [s.value for s in config.stop] == ["<|eot_id|>", "User:"]
    assert config.ignore_eos.value is True and config.max_tokens.value == 10


@pytest.mark.parametrize("body, message", [
    ('{"stop": 3}', "stop"),
    ('{"stop_token_ids": ["x"]}', "stop_token_ids"),
    ("[1]", "JSON object"),
    ("{", "invalid JSON"),
])
def test_bad_request_is_one_line_input_error(tmp_path, body, message):
    path = tmp_path / "r.json"
    path.write_text(body)
    with pytest.raises(InputError, match=message) as error:
        load_serving(path)
    assert "\n" not in error.value.message


def test_bad_inputs(tmp_path):
    unterminated = tmp_path / "Modelfile"
    unterminated.write_text('FROM x\nTEMPLATE """never closed\n')
    with pytest.raises(InputError, match="unterminated"):
        load_serving(unterminated)
    override = tmp_path / "serve.sh"
    override.write_text("vllm serve m --override-generation-config '{bad'")
    with pytest.raises(InputError, match="not valid JSON"):
        load_serving(override)
    with pytest.raises(InputError, match="cannot tell"):
        (tmp_path / "x.txt").write_text("hello")
        load_serving(tmp_path / "x.txt")
    with pytest.raises(InputError, match="unknown serving kind"):
        load_serving(override, "tgi")


def test_registered_checks_yield_nothing_without_a_serving_config(llama3):
    assert {c for c in REGISTRY if c.startswith("SD4")} >= {"SD401", "SD402", "SD403", "SD404", "SD405", "SD406", "SD407"}
    assert not [f for f in run_rules(llama3) if f.code.startswith("SD4")]
    for code in ("SD401", "SD402", "SD403", "SD404", "SD405", "SD406", "SD407"):
        sections = REGISTRY[code].sections
        assert set(sections) == {"What it checks", "Why it matters", "Example", "Fix", "How the runtimes decide (source)"}, code
        assert "source" in REGISTRY[code].doc


def test_vllm_stop_set_follows_generation_config(llama3, tmp_path):
    # The example model: tokenizer eos and generation eos are <|end_of_text|> (609); eot is 617.
    default = served_stops(llama3.facts, load_serving(SERVING / "vllm-serve.sh"))
    assert 617 not in default.ids and 609 in default.ids
    folder = tmp_path / "gen"
    folder.mkdir()
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": [609, 617]}))
    serve = tmp_path / "serve.sh"
    serve.write_text(f"vllm serve {LLAMA3} --generation-config {folder}\n")
    assert 617 in served_stops(llama3.facts, load_serving(serve)).ids
    assert "SD401" not in codes(llama3, serve)
    # "vllm" still reads the model's eos ids (only its sampling defaults are dropped).
    serve.write_text(f"vllm serve {LLAMA3} --generation-config vllm\n")
    assert "SD401" in codes(llama3, serve)


def test_vllm_override_with_eos_is_flagged(llama3):
    found = serving_findings(llama3, load_serving(SERVING / "vllm-serve.sh"))
    assert {f.code for f in found} == {"SD401", "SD407"}
    assert all(f.location.file == str(SERVING / "vllm-serve.sh") for f in found)


def test_vllm_chat_template_of_another_family(llama3, chatml, tmp_path):
    assert "SD402" in codes(llama3, SERVING / "vllm-serve-chatml-template.sh")
    # On a ChatML model the same template is its own: no mismatch, and <|im_end|> is a stop.
    assert codes(chatml, SERVING / "vllm-serve-chatml-template.sh") == set()


def test_modelfiles(llama3):
    assert codes(llama3, SERVING / "Modelfile.good") == set()
    assert codes(llama3, SERVING / "Modelfile.bad") == {"SD401", "SD402", "SD404", "SD406"}
    nostop = serving_findings(llama3, load_serving(SERVING / "Modelfile.nostop"))
    assert [f.code for f in nostop] == ["SD401"]
    assert nostop[0].evidence["end_of_turn"] == "<|eot_id|>"


def test_llamacpp(llama3, tmp_path):
    assert codes(llama3, SERVING / "llama-server-good.sh") == set()
    # SD401 follows from the foreign template and --ignore-eos: evidence of SD402, not a finding of its own
    assert codes(llama3, SERVING / "llama-server.sh") == {"SD402", "SD405", "SD406"}
    # An override that makes the end-of-turn the eos keeps it a stop.
    serve = tmp_path / "serve.sh"
    serve.write_text("llama-server -m m.gguf --override-kv tokenizer.ggml.eos_token_id=int:617\n")
    assert 617 in served_stops(llama3.facts, load_serving(serve)).ids


def test_requests(llama3, tmp_path):
    found = {f.code: f for f in serving_findings(llama3, load_serving(SERVING / "request-bad.json"))}
    assert set(found) == {"SD403", "SD404", "SD405", "SD406"}
    assert found["SD403"].location.key == "stop[0]" and found["SD404"].location.key == "stop[1]"
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"model": "m", "stop_token_ids": [617], "max_tokens": 1024}))
    assert codes(llama3, good) == set()
    out_of_vocab = tmp_path / "oov.json"
    out_of_vocab.write_text(json.dumps({"stop_token_ids": [128009]}))
    assert codes(llama3, out_of_vocab) == {"SD403"}
