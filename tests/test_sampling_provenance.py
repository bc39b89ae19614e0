"""Sampling provenance (`inspect` sampling section: per runtime, each value and its source) and
`inspect MODEL --against ORIGINAL` (SD107 eos-dropped, SD108 sampling-dropped), on copies of the
real SmolLM2 folder and its GGUF."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from stopdoctor.facts.model_facts import load_model
from stopdoctor.runtimes.sampling import effective_sampling
from tests.helpers import cli, model_copy


def _copy(real_models, tmp_path: Path, name: str, generation: dict | None = None, card: str | None = None) -> Path:
    folder = tmp_path / name
    model_copy(real_models.smollm2_hf, folder)
    if generation is not None:
        path = folder / "generation_config.json"
        document = json.loads(path.read_text())
        document.update(generation)
        path.write_text(json.dumps(document, indent=2))
    if card is not None:
        (folder / "README.md").write_text(card)
    return folder


@pytest.fixture
def original(real_models, tmp_path):
    return _copy(real_models, tmp_path, "orig", {"do_sample": True, "temperature": 0.6, "top_p": 0.95, "eos_token_id": [2, 0]},
                 "---\nlicense: mit\n---\n# X\nWe recommend Temperature=0.7, TopP=0.8, and `top_k: 20`.\n")


def test_each_runtime_names_the_source_of_each_value(original):
    rows = {r.runtime: r for r in effective_sampling(load_model(str(original)))}
    assert rows["transformers"].get("temperature").value == 0.6
    assert rows["transformers"].get("temperature").source == "generation_config.json temperature"
    assert not rows["transformers"].greedy
    assert rows["vllm"].get("top_k").default and rows["vllm"].get("top_k").value == 0
    assert rows["llama.cpp"].get("top_p").value == 0.95 and not rows["llama.cpp"].get("top_p").default
    assert rows["llama.cpp"].get("min_p").value == 0.05 and "common.h" in rows["llama.cpp"].get("min_p").source
    # forks ignore general.sampling.*: their own defaults
    assert rows["llama-cpp-python"].get("temperature").default and rows["ollama"].get("temperature").value == 0.8


def test_greedy_without_do_sample(real_models, tmp_path):
    folder = _copy(real_models, tmp_path, "m", {"temperature": 0.6})
    rows = {r.runtime: r for r in effective_sampling(load_model(str(folder)))}
    assert rows["transformers"].greedy and not rows["vllm"].greedy


def test_inspect_json_has_the_sampling_section_and_the_card(original):
    run = cli("inspect", str(original), "--json")
    sampling = run.json()["sampling"]
    assert sampling["declared"]["temperature"]["location"]["line"] is not None
    assert sampling["card"] == {"temperature": {"value": 0.7, "location": {"file": "README.md", "key": None, "line": 5}},
                                "top_p": {"value": 0.8, "location": {"file": "README.md", "key": None, "line": 5}},
                                "top_k": {"value": 20, "location": {"file": "README.md", "key": None, "line": 5}}}
    vllm = sampling["per_runtime"]["vllm"]["values"]
    assert vllm["temperature"] == {"value": 0.6, "default": False, "source": "generation_config.json temperature",
                                   "location": {"file": "generation_config.json", "key": "temperature",
                                                "line": vllm["temperature"]["location"]["line"]}}
    assert vllm["presence_penalty"]["default"] is True
    human = cli("inspect", str(original)).stdout
    assert "sampling  declared: do_sample True" in human and "card" in human


def test_against_flags_dropped_eos_and_sampling(real_models, original, tmp_path):
    copy = _copy(real_models, tmp_path, "copy")
    run = cli("inspect", str(copy), "--against", str(original), "--json")
    findings = {f["code"]: f for f in run.json()["findings"]}
    assert run.json()["against"] == str(original)
    assert findings["SD107"]["evidence"]["dropped"][0]["id"] == 0
    assert set(findings["SD108"]["evidence"]["dropped"]) == {"do_sample", "temperature", "top_p"}
    assert '"temperature": 0.6' in findings["SD108"]["fix"]


def test_against_itself_or_a_faithful_copy_is_clean(original, tmp_path):
    copy = tmp_path / "faithful"
    shutil.copytree(original, copy)
    codes = {f["code"] for f in cli("inspect", str(copy), "--against", str(original), "--json").json()["findings"]}
    assert not codes & {"SD107", "SD108"}


def test_gguf_against_its_hf_original_counts_only_keys_a_gguf_holds(real_models, original):
    run = cli("inspect", str(real_models.smollm2_gguf), "--against", str(original), "--json")
    findings = {f["code"]: f for f in run.json()["findings"]}
    # llama.cpp's end-of-generation set keeps both eos ids: nothing dropped for stopping
    assert "SD107" not in findings
    assert set(findings["SD108"]["evidence"]["dropped"]) == {"temperature", "top_p"}  # do_sample has no GGUF key
    assert "--temp 0.6 --top-p 0.95" in findings["SD108"]["fix"]


def test_against_a_missing_original_is_one_line_exit_2(real_models):
    run = cli("inspect", str(real_models.smollm2_hf), "--against", "/nonexistent/model-folder")
    assert run.code == 2 and len(run.stderr.strip().splitlines()) <= 2


def test_a_modelfile_and_a_request_body_are_sources(original, tmp_path):
    from stopdoctor.runtimes.serving import load_serving

    facts = load_model(str(original))
    modelfile = tmp_path / "Modelfile"
    modelfile.write_text("FROM ./model.gguf\nPARAMETER temperature 0.2\nPARAMETER repeat_penalty 1.3\n")
    rows = {r.runtime: r for r in effective_sampling(facts, load_serving(modelfile, "ollama"))}
    assert rows["ollama"].get("temperature").value == 0.2 and not rows["ollama"].get("temperature").default
    assert rows["ollama"].get("repetition_penalty").value == 1.3 and rows["ollama"].get("top_k").default
    assert rows["vllm"].get("temperature").value == 0.6  # a Modelfile is Ollama's only
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"model": "m", "messages": [], "temperature": 0}))
    rows = {r.runtime: r for r in effective_sampling(facts, load_serving(request, "request"))}
    assert all(r.greedy and r.get("temperature").source == "request.json temperature" for r in rows.values())


def test_check_with_a_serving_file_shows_the_sampling_it_serves(real_models, tmp_path):
    """A Modelfile's PARAMETERs and a request body's keys change what a runtime samples with:
    `check --serving` shows the rows they change, human and JSON, each value with its source."""
    modelfile = tmp_path / "Modelfile"
    modelfile.write_text("FROM ./smollm2.gguf\nPARAMETER stop \"<|im_end|>\"\nPARAMETER temperature 0.2\n")
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"model": "m", "messages": [{"role": "user", "content": "Hi"}], "temperature": 0}))
    model = str(real_models.smollm2_hf)
    human = cli("check", model, "--serving", str(modelfile), "--serving", str(request))
    assert f"served with {modelfile}:" in human.stdout
    served = human.stdout.split(f"served with {modelfile}:")[1].splitlines()[1]
    assert served.split()[:3] == ["ollama", "temp", "0.2*,"]
    document = json.loads(cli("check", model, "--serving", str(modelfile), "--serving", str(request), "--format", "json").stdout)
    sampled = document["models"][0]["served_sampling"]
    assert sampled[str(modelfile)]["ollama"]["temperature"] == {"value": 0.2, "default": False,
                                                                "source": "Modelfile PARAMETER temperature (line 3)"}
    assert set(sampled[str(modelfile)]) == {"ollama"}  # a Modelfile changes Ollama's row only
    assert sampled[str(request)]["vllm"]["temperature"]["value"] == 0.0  # a request's keys win in every row
