"""LMDeploy (runtimes/engines/lmdeploy.py), the engine added as one module: its launchers and
command line, its stop set as lmdeploy 0.16.0 computes it (tokenizer eos ∪ generation_config.json
eos, never config.json's), `check --serving` on its command, its hidden budgets, and what
probe-server expects of it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stopdoctor.api import inspect_model, serving_findings
from stopdoctor.runtimes.advice import serving_stop_line
from stopdoctor.runtimes.engines import engine, engine_for_launcher
from stopdoctor.runtimes.expected import expected_of
from stopdoctor.runtimes.serving import load_serving, served_stops

from tests.helpers import model_copy


@pytest.fixture
def smol(real_models, tmp_path) -> Path:
    """A copy of the real SmolLM2 folder to edit: <|endoftext|> is 0, <|im_end|> 2."""
    folder = tmp_path / "smol"
    model_copy(real_models.smollm2_hf, folder)
    return folder


def edit_json(path: Path, drop: tuple[str, ...] = (), **changes) -> None:
    data = json.loads(path.read_text())
    data.update(changes)
    for key in drop:
        data.pop(key, None)
    path.write_text(json.dumps(data, indent=2))


def serve(tmp_path: Path, command: str) -> Path:
    path = tmp_path / "serve.sh"
    path.write_text(command + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("command, model", [
    ("lmdeploy serve api_server ./smol --server-port 23333 --tp 1", "./smol"),
    ("CUDA_VISIBLE_DEVICES=0 lmdeploy serve api_server internlm/internlm2_5-7b-chat --backend pytorch",
     "internlm/internlm2_5-7b-chat"),
    ("python -m lmdeploy.serve.openai.api_server ./smol --server_port 23333", "./smol"),
])
def test_its_command_lines_are_read(tmp_path, command, model):
    config = load_serving(serve(tmp_path, command))
    assert config.kind == "lmdeploy" and config.model is not None and config.model.value == model


def test_its_launchers_are_its_own():
    assert engine_for_launcher("lmdeploy").name == "lmdeploy"
    assert engine_for_launcher("lmdeploy.serve.openai.api_server").name == "lmdeploy"
    assert engine_for_launcher("lmdeploy-serve") is None  # a name containing it is not it


def test_stop_set_is_tokenizer_eos_and_generation_config(smol, tmp_path):
    config = load_serving(serve(tmp_path, "lmdeploy serve api_server ./smol"))
    analysis = inspect_model(str(smol)).analysis
    stops = served_stops(analysis.facts, config, analysis.stops)
    assert stops.complete and stops.ids == [2] and "lmdeploy 0.16.0" in stops.rule
    assert not [f for f in serving_findings(analysis, config) if f.code == "SD401"]


def test_config_json_eos_is_not_read(smol, tmp_path):
    # get_hf_gen_cfg reads generation_config.json only: config.json's eos 2 is not a stop for
    # lmdeploy, while SGLang (config.json ∪ generation_config.json) stops on it.
    edit_json(smol / "tokenizer_config.json", eos_token="<|endoftext|>")
    edit_json(smol / "generation_config.json", drop=("eos_token_id",))
    edit_json(smol / "config.json", eos_token_id=2)
    analysis = inspect_model(str(smol)).analysis
    lmdeploy = served_stops(analysis.facts, load_serving(serve(tmp_path, "lmdeploy serve api_server ./smol")))
    sglang = served_stops(analysis.facts, load_serving(serve(tmp_path, "python -m sglang.launch_server --model-path ./smol")))
    assert lmdeploy.ids == [0] and sglang.ids == [0, 2]


def test_check_serving_names_the_missed_end_of_turn(smol, tmp_path):
    edit_json(smol / "tokenizer_config.json", eos_token="<|endoftext|>")
    edit_json(smol / "generation_config.json", eos_token_id=0)
    analysis = inspect_model(str(smol)).analysis
    found = [f for f in serving_findings(analysis, load_serving(serve(tmp_path, "lmdeploy serve api_server ./smol")))
             if f.code == "SD401"]
    assert found and "lmdeploy stops on [0]" in found[0].message
    assert "add 2 to the model's generation_config.json eos_token_id" in found[0].fix
    assert found[0].location.line == 1  # where the command names the model


def test_a_gguf_is_not_loaded(real_gguf_models, tmp_path):
    analysis = inspect_model(str(real_gguf_models.smollm2_gguf)).analysis
    stops = served_stops(analysis.facts, load_serving(serve(tmp_path, "lmdeploy serve api_server ./m.gguf")), analysis.stops)
    assert not stops.complete and "does not load this model format" in stops.rule


def test_it_is_not_in_inspects_listing(real_models):
    # stop_sets_in_inspect=False: inspect's engine listing (and its snapshots) are unchanged
    runtimes = [s.runtime for s in inspect_model(str(real_models.smollm2_hf)).analysis.stops]
    assert "lmdeploy" not in runtimes and "sglang" in runtimes


def test_probe_server_expectation():
    found = expected_of("lmdeploy", "0.16.0")
    assert found.known and found.engine == "lmdeploy" and "generation_config.json" in found.stop_rule
    # the OpenAI routes give the rest of the session: no hidden budget to expect there
    assert found.default_budget("chat") is None and found.default_budget("completions") is None
    assert {d.value for d in found.defaults} == {128, 512}
    assert "lmdeploy" in engine("lmdeploy").owned_by


def test_advice_is_the_generation_config():
    line = serving_stop_line("lmdeploy", "<|im_end|>", 2)
    assert line == "add 2 to the model's generation_config.json eos_token_id (stopdoctor fix MODEL --write)"


def test_explicit_kind(tmp_path):
    config = load_serving(serve(tmp_path, "lmdeploy serve api_server ./smol"), "lmdeploy")
    assert config.kind == "lmdeploy" and config.model.value == "./smol"


def test_one_module_is_the_whole_engine(smol, tmp_path, monkeypatch):
    # A module in a folder the registry reads, and nothing else: check --serving reads its command
    # line, computes its stop set and reports the end-of-turn it misses.
    from stopdoctor.runtimes import engines as registry

    folder = tmp_path / "more_engines"
    folder.mkdir()
    (folder / "tinyserve.py").write_text(
        "from stopdoctor.facts.serving_engines import CommandSyntax\n"
        "from stopdoctor.runtimes.engines.engine import Engine\n"
        "from stopdoctor.runtimes.stops import RuntimeStops, stop_ids, tokenizer_eos\n"
        "def stop_sets(facts, llama_eog):\n"
        "    return [RuntimeStops('tinyserve', tuple(stop_ids(tokenizer_eos(facts))), 'tokenizer eos only (tiny.py)')]\n"
        "ENGINE = Engine(name='tinyserve', listed=99, serving_kind='tinyserve', stop_rule='tokenizer eos only',\n"
        "                stop_rule_source='tinyserve/server.py', launchers=('tinyserve',), launchers_source='tiny.py',\n"
        "                command=CommandSyntax('tinyserve', r'\\btinyserve\\b', ('--model',)), stop_sets=stop_sets,\n"
        "                stop_sets_in_inspect=False)\n", encoding="utf-8")
    monkeypatch.setattr(registry, "__path__", [*registry.__path__, str(folder)])
    registry.engines.cache_clear()
    registry._by_spelling.cache_clear()
    try:
        edit_json(smol / "tokenizer_config.json", eos_token="<|endoftext|>")
        config = load_serving(serve(tmp_path, "tinyserve --model ./smol"))
        assert config.kind == "tinyserve" and config.model.value == "./smol"
        analysis = inspect_model(str(smol)).analysis
        found = [f for f in serving_findings(analysis, config) if f.code == "SD401"]
        assert found and "tinyserve stops on [0]" in found[0].message
    finally:
        monkeypatch.undo()
        registry.engines.cache_clear()
        registry._by_spelling.cache_clear()
    assert engine("tinyserve") is None


def test_its_reasoning_parsers_are_not_judged_by_vllms(real_models, tmp_path):
    # lmdeploy's parsers (default, deepseek-v3, ...) are not vLLM's: a vLLM parser verdict would be
    # a guess; the same flag on a vLLM command is judged.
    analysis = inspect_model(str(real_models.smollm2_hf)).analysis
    lmdeploy = load_serving(serve(tmp_path, "lmdeploy serve api_server ./smol --reasoning-parser deepseek_r1"))
    vllm = load_serving(serve(tmp_path, "vllm serve ./smol --reasoning-parser deepseek_r1"))
    assert "SD450" not in {f.code for f in serving_findings(analysis, lmdeploy)}
    assert "SD450" in {f.code for f in serving_findings(analysis, vllm)}
