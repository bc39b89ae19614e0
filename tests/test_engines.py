"""The engines beyond the core four (runtimes/engine_stops.py): each one's stop set as its source
computes it, in inspect's per_runtime, in check --serving and in generate --stops runtime:NAME;
and fix --write on a GGUF (metadata rewritten in place, tensors byte for byte, --backup), with
the same advice from inspect, check and fix."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from stopdoctor.writers.gguf_edit import data_section_digest, read_layout, set_int_key
from stopdoctor.api import inspect_model, serving_findings
from stopdoctor.cli.app import app
from stopdoctor.core.errors import InputError
from stopdoctor.runtimes.serving import load_serving
from stopdoctor.runtimes.engine_stops import ENGINES

from tests.helpers import model_copy


def run(*args):
    result = CliRunner().invoke(app, [str(a) for a in args])
    return result.exit_code, result.stdout


def per_runtime(spec) -> dict[str, list[int]]:
    return {s.runtime: s.ids for s in inspect_model(str(spec)).analysis.stops}


@pytest.fixture
def smol(real_models, tmp_path) -> Path:
    """A copy of the real SmolLM2 folder to edit: <|endoftext|> is 0, <|im_end|> 2."""
    folder = tmp_path / "smol"
    model_copy(real_models.smollm2_hf, folder)
    return folder


def edit_json(path: Path, **changes) -> None:
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data, indent=2))


def test_gemma_shape_list_in_generation_config(smol):
    # Gemma 3: tokenizer eos 1 (<eos>), generation_config [1, 106]. Here: tokenizer eos 0, gen [0, 2].
    edit_json(smol / "tokenizer_config.json", eos_token="<|endoftext|>")
    edit_json(smol / "generation_config.json", eos_token_id=[0, 2])
    edit_json(smol / "config.json", eos_token_id=0)
    stops = per_runtime(smol)
    assert stops["mlx-lm"] == [0, 2] and stops["mlx-vlm"] == [0, 2] and stops["sglang"] == [0, 2]
    assert stops["mlx-vlm-legacy"] == [0]  # mlx-vlm #244: only tokenizer.eos_token_id
    assert stops["llama-cpp-python"] == stops["llama.cpp"]


def test_mlx_lm_ignores_a_falsy_generation_eos(smol):
    # mlx_lm/utils.py load_config: `if eos_token_id := generation_config.get("eos_token_id", False)`
    edit_json(smol / "generation_config.json", eos_token_id=0)
    edit_json(smol / "config.json", eos_token_id=2)
    stops = per_runtime(smol)
    assert stops["mlx-lm"] == [2]  # config.json's 2 (and the tokenizer eos 2); the 0 was dropped
    assert stops["mlx-vlm"] == [0, 2]  # the key was present: 0 replaces config.json's, plus tokenizer 2
    assert stops["transformers"] == [0]


def test_sglang_adds_its_stop_tokens(smol):
    tokenizer = json.loads((smol / "tokenizer.json").read_text())
    eom = next(t for t in tokenizer["added_tokens"] if t["id"] == 3)  # repurpose a special token's text
    eom["content"] = "<|eom_id|>"
    (smol / "tokenizer.json").write_text(json.dumps(tokenizer))
    config = json.loads((smol / "tokenizer_config.json").read_text())
    if "3" in config.get("added_tokens_decoder", {}):
        config["added_tokens_decoder"]["3"]["content"] = "<|eom_id|>"
        (smol / "tokenizer_config.json").write_text(json.dumps(config))
    analysis = inspect_model(str(smol)).analysis
    eom_id = analysis.facts.vocab.id_of("<|eom_id|>")
    assert eom_id is not None and eom_id in analysis.runtime("sglang").ids
    assert eom_id not in analysis.runtime("transformers").ids


def test_gguf_engines(real_gguf_models):
    stops = per_runtime(real_gguf_models.gemma_gguf)
    assert "mlx-lm" not in stops  # MLX does not load a GGUF
    assert stops["sglang"] == [1] and stops["llama-cpp-python"] == stops["llama.cpp"]


def test_generate_stops_runtime_name(real_models):
    from stopdoctor.actions.generate.request import resolve_stops

    analysis = inspect_model(str(real_models.smollm2_hf)).analysis
    assert resolve_stops(analysis, "runtime:sglang", [], []).ids == [2]
    gguf = inspect_model(str(real_models.gemma_gguf)).analysis
    with pytest.raises(InputError, match="does not load a GGUF"):
        resolve_stops(gguf, "runtime:mlx-lm", [], [])


@pytest.mark.parametrize("command, kind", [
    ("python -m sglang.launch_server --model-path ./m --port 30000", "sglang"),
    ("mlx_lm.server --model ./m --max-tokens 4096", "mlx-lm"),
    ("python -m mlx_vlm.server --model ./m", "mlx-vlm"),
    ("python -m llama_cpp.server --model ./m.gguf --n_ctx 4096", "llama-cpp-python"),
])
def test_engine_commands_are_recognised(tmp_path, command, kind):
    path = tmp_path / "serve.sh"
    path.write_text(command + "\n")
    assert load_serving(path).kind == kind
    assert kind in ENGINES


def test_check_serving_engine(smol, tmp_path):
    serve = tmp_path / "sglang.sh"
    serve.write_text("python -m sglang.launch_server --model-path ./smol\n")
    analysis = inspect_model(str(smol)).analysis
    assert not [f for f in serving_findings(analysis, load_serving(serve)) if f.code == "SD401"]
    # <|endoftext|> everywhere: SGLang never stops on <|im_end|>
    edit_json(smol / "tokenizer_config.json", eos_token="<|endoftext|>")
    edit_json(smol / "generation_config.json", eos_token_id=0)
    edit_json(smol / "config.json", eos_token_id=0)
    analysis = inspect_model(str(smol)).analysis
    found = [f for f in serving_findings(analysis, load_serving(serve)) if f.code == "SD401"]
    assert found and "sglang stops on [0]" in found[0].message and '"stop_token_ids": [2]' in found[0].fix


@pytest.fixture
def broken_gguf(real_gguf_models, tmp_path) -> Path:
    path = tmp_path / "smol.gguf"
    shutil.copyfile(real_gguf_models.smollm2_gguf, path)
    set_int_key(path, "tokenizer.ggml.eos_token_id", 0)  # <|endoftext|>: HF runtimes miss <|im_end|>
    return path


def test_fix_write_gguf_eos(broken_gguf):
    digest = data_section_digest(broken_gguf)
    findings = inspect_model(str(broken_gguf)).findings
    sd101 = next(f for f in findings if f.code == "SD101")
    # inspect, check and fix give one advice: the GGUF's eos_token_id, with fix --write
    assert "tokenizer.ggml.eos_token_id to 2" in sd101.fix and "fix smol.gguf --write" in sd101.fix
    code, out = run("fix", broken_gguf)
    assert code == 1 and "+tokenizer.ggml.eos_token_id = 2" in out
    code, _ = run("fix", broken_gguf, "--write", "--backup")
    assert code == 0
    assert read_layout(broken_gguf).size == read_layout(broken_gguf.with_name("smol.gguf.bak")).size
    assert data_section_digest(broken_gguf) == digest  # tensors byte for byte
    assert not [f for f in inspect_model(str(broken_gguf)).findings if f.severity >= 3]
    assert run("fix", broken_gguf)[0] == 0
    assert run("check", broken_gguf)[0] == 0
    # the backup is the old file, whole
    assert [f.code for f in inspect_model(str(broken_gguf.with_name("smol.gguf.bak"))).findings if f.code == "SD101"]


@pytest.mark.slow  # gguf-py's reader takes ~3 s CPU on the SmolLM2 GGUF; test_fix_write_gguf_eos checks the digest quickly
def test_gguf_added_key_keeps_tensors(broken_gguf):
    import gguf

    digest = data_section_digest(broken_gguf)
    set_int_key(broken_gguf, "tokenizer.ggml.eot_token_id", 2)
    assert data_section_digest(broken_gguf) == digest
    reader = gguf.GGUFReader(broken_gguf)  # the reference reader agrees
    assert int(reader.fields["tokenizer.ggml.eot_token_id"].parts[-1][0]) == 2
    assert len(reader.tensors) == 272


def test_backup_refuses_to_overwrite(broken_gguf):
    broken_gguf.with_name("smol.gguf.bak").write_text("earlier")
    code, _ = run("fix", broken_gguf, "--write", "--backup")
    assert code == 2
    assert [f for f in inspect_model(str(broken_gguf)).findings if f.code == "SD101"]  # unchanged
    assert run("fix", broken_gguf, "--backup")[0] == 2  # --backup without --write


def test_hidden_defaults_cite_their_source():
    from stopdoctor.runtimes.defaults import DEFAULTS

    for default in DEFAULTS:
        assert default.version and re.search(r"\.(py|go|rs) ", default.source) and default.key


@pytest.mark.parametrize("body, fires", [
    ({"model": "m", "prompt": "Write a poem"}, True),
    ({"model": "m", "prompt": "Write a poem", "max_tokens": 512}, False),
    ({"model": "m", "messages": [{"role": "user", "content": "Hi"}]}, False),  # chat: no 16-token default
])
def test_default_budget_finding(tmp_path, body, fires):
    examples = Path(__file__).resolve().parents[1] / "fixtures" / "examples" / "chatml-ok"
    path = tmp_path / "request.json"
    path.write_text(json.dumps(body))
    codes = {f.code for f in serving_findings(inspect_model(str(examples)).analysis, load_serving(path))}
    assert ("SD430" in codes) == fires
