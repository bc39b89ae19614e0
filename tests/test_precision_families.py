"""No false error on the families people deploy today (issue #27 §1): each case is a real file
rewritten (tests/gguf_rewrite.py), a real template of the cached corpora, or a faithfully reduced
folder, and each failed before its fix.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fixtures.templates import llamacpp_templates
from stopdoctor.api import inspect_model
from stopdoctor.facts.gguf import read_header
from stopdoctor.facts.gguf_constants import GGUFValueType
from tests.gguf_rewrite import pack_int32_array, pack_string, pack_string_array, with_values
from tests.test_turns_unseen import _folder_with_tokens


def _template(name: str) -> str:
    templates = llamacpp_templates()
    if f"llama.cpp/{name}" not in templates:
        pytest.skip("the llama.cpp template corpus is not cached; run `python fixtures/templates.py`")
    return templates[f"llama.cpp/{name}"]


# GLM-4.5's special tokens in vocabulary order (zai-org/GLM-4.5 tokenizer_config.json, 151329-151338).
GLM_SPECIALS = ["[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>", "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>"]


def _glm_folder(tmp_path: Path, architecture: str) -> tuple[Path, dict[str, int]]:
    """GLM-4.5's shape: its real template (llama.cpp's GLM-4.6, the same family), eos
    <|endoftext|>, and generation_config.json listing [<|endoftext|>, <|user|>, <|observation|>]."""
    folder = _folder_with_tokens(tmp_path, _template("GLM-4.6"), GLM_SPECIALS)
    ids = {t["content"]: t["id"] for t in json.loads((folder / "tokenizer.json").read_text())["added_tokens"]}
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["eos_token"] = "<|endoftext|>"
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    for name in ("config.json", "generation_config.json"):
        data = json.loads((folder / name).read_text())
        data["eos_token_id"] = [ids["<|endoftext|>"], ids["<|user|>"], ids["<|observation|>"]]
        if name == "config.json":
            data["architectures"] = [architecture]
        (folder / name).write_text(json.dumps(data))
    return folder, ids


def test_a_glm_folder_whose_generation_config_lists_the_headers_has_no_sd101(tmp_path):
    """convert_hf_to_gguf.py writes eot <|user|> and eom <|observation|> for GLM-4.5/5
    (`_set_vocab_glm`, llama.cpp PR #14939): the llama.cpp row of the HF folder stops on both,
    so no runtime misses the turn's end. Before: SD101 (error) whose fix repeated the current value."""
    folder, ids = _glm_folder(tmp_path, "Glm4MoeForCausalLM")
    report = inspect_model(str(folder))
    llama = report.analysis.runtime("llama.cpp")
    assert {ids["<|user|>"], ids["<|observation|>"]} <= set(llama.ids)
    assert not [f for f in report.findings if f.code == "SD101"]


def test_an_architecture_the_converter_writes_no_eot_for_still_misses_and_says_how(tmp_path):
    """The same files under an architecture whose converter class writes no eot: llama.cpp stops
    on none of the headers, and SD101's fix is no longer the value generation_config.json has."""
    folder, ids = _glm_folder(tmp_path, "LlamaForCausalLM")
    (finding,) = [f for f in inspect_model(str(folder)).findings if f.code == "SD101"]
    assert finding.evidence["runtimes_missing"] == ["llama.cpp"]
    assert finding.evidence["suggested"] == finding.evidence["current"]  # nothing to add there
    assert "eos_token_id\": [" not in finding.fix and "convert_hf_to_gguf" in finding.fix


# Gemma 4's ids (google/gemma-4 tokenizer): the turn markers and tool-response opener.
GEMMA4_TOKENS = {46: "<|tool>", 47: "<tool|>", 48: "<|tool_call>", 49: "<tool_call|>", 50: "<|tool_response>",
                 51: "<tool_response|>", 52: '<|"|>', 98: "<|think|>", 100: "<|channel>", 101: "<channel|>",
                 105: "<|turn>", 106: "<turn|>"}


def _gemma4_gguf(real_gguf_models, target: Path, end_ids: list[int] | None) -> Path:
    """The real Gemma 3 270M GGUF with Gemma 4's markers at Gemma 4's ids, Gemma 4's template, and
    (Unsloth's layout) `tokenizer.ggml.eos_token_ids` = `end_ids` beside eos 1."""
    source = real_gguf_models.gemma_gguf
    header = read_header(source)
    tokens = list(header.metadata["tokenizer.ggml.tokens"])
    types = [int(t) for t in header.token_types]
    for token_id, text in GEMMA4_TOKENS.items():
        tokens[token_id], types[token_id] = text, 3  # control, as in the real file
    added = {"tokenizer.chat_template": (GGUFValueType.STRING, pack_string(_template("google-gemma-4-31B-it")))}
    if end_ids is not None:
        added["tokenizer.ggml.eos_token_ids"] = (GGUFValueType.ARRAY, pack_int32_array(end_ids))
    return with_values(source, target, {"tokenizer.ggml.tokens": pack_string_array(tokens),
                                        "tokenizer.ggml.token_type": pack_int32_array(types)}, added)


def test_a_gguf_listing_its_end_ids_in_eos_token_ids_has_no_sd101(real_gguf_models, tmp_path):
    """Unsloth's Gemma 4 layout, eos 1 plus [1, 106, 50]: llama.cpp stops on <turn|> (its EOG
    list) and Ollama on the listed ids. Before: SD101 (error) for transformers/vLLM/TGI."""
    path = _gemma4_gguf(real_gguf_models, tmp_path / "gemma4.gguf", [1, 106, 50])
    report = inspect_model(str(path))
    assert [m.text for m in report.analysis.end_of_turn] == ["<turn|>"]
    assert 106 in report.analysis.runtime("llama.cpp").ids
    assert not [f for f in report.findings if f.code == "SD101"]


def test_the_same_gguf_without_the_list_still_has_sd101(real_gguf_models, tmp_path):
    """Without `tokenizer.ggml.eos_token_ids` nothing in the file names <turn|> as a stop: a loader
    that reads the eos (transformers, vLLM) misses it, and SD101 says so."""
    path = _gemma4_gguf(real_gguf_models, tmp_path / "gemma4.gguf", None)
    (finding,) = [f for f in inspect_model(str(path)).findings if f.code == "SD101"]
    assert "transformers" in finding.evidence["runtimes_missing"]


def _serving(tmp_path: Path, name: str, text: str):
    from stopdoctor.runtimes.serving import load_serving

    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return load_serving(path)


# Qwen3's card (Qwen/Qwen3-8B README.md, "Best Practices" 3. and its quickstart), the lines that
# name an output length.
QWEN3_CARD = """# Qwen3-8B

```python
generated_ids = model.generate(
    **model_inputs,
    max_new_tokens=32768
)
```

3. **Adequate Output Length**: We recommend using an output length of 32,768 tokens for most queries. For benchmarking on highly complex problems, such as those found in math and programming competitions, we suggest setting the max output length to 38,912 tokens. This provides the model with sufficient space to generate detailed and comprehensive responses, thereby enhancing its overall performance.
"""


def test_sd451_takes_the_length_the_card_recommends_not_its_benchmark_ceiling(tmp_path):
    """A request at the card's own 32,768 is fine; 38,912 is for benchmarking only. Before: SD451
    compared with the largest length the card mentions and flagged 32,768."""
    from fixtures.reasoning import build_reasoning
    from stopdoctor.api import serving_findings

    folder = build_reasoning("hybrid", tmp_path / "m")
    (folder / "README.md").write_text(QWEN3_CARD)
    analysis = inspect_model(str(folder)).analysis
    assert not serving_findings(analysis, _serving(tmp_path, "ok.json", '{"model": "m", "max_tokens": 32768}'))
    (short,) = serving_findings(analysis, _serving(tmp_path, "short.json", '{"model": "m", "max_tokens": 2000}'))
    assert short.code == "SD451" and short.evidence["recommended"] == 32768


def test_the_card_length_follows_the_mode_in_use(tmp_path):
    """A card that states one length per mode: thinking gets the thinking length, a model served
    with thinking off the other one."""
    from fixtures.reasoning import build_reasoning
    from stopdoctor.facts.card import card_output_tokens

    folder = build_reasoning("hybrid", tmp_path / "m")
    (folder / "README.md").write_text(
        "# Model\n\nIn non-thinking mode we recommend an output length of 8,192 tokens.\n"
        "In thinking mode we recommend an output length of 32,768 tokens.\n"
        "For benchmarking we suggest a max output length of 81,920 tokens.\n")
    facts = inspect_model(str(folder)).analysis.facts
    assert card_output_tokens(facts, thinking=True).value == 32768
    assert card_output_tokens(facts, thinking=False).value == 8192
    # a code sample's short budget is no recommendation
    folder = build_reasoning("hybrid", tmp_path / "sample")
    (folder / "README.md").write_text("# Model\n\n```python\nmodel.generate(**inputs, max_new_tokens=512)\n```\n\n"
                                      "We recommend using an output length of 32,768 tokens for most queries.\n")
    assert card_output_tokens(inspect_model(str(folder)).analysis.facts).value == 32768


def test_an_ollama_generate_body_is_read_with_its_options(tmp_path):
    """Ollama's /api/generate keeps its budget and stops under "options": num_predict is the
    budget, and with or without it the body is no OpenAI completions request (SD430's 16-token
    default is vLLM's, SGLang's and llama-cpp-python's, not Ollama's -1). Before: SD430 fired."""
    from fixtures.synth import build_family
    from stopdoctor.api import serving_findings

    analysis = inspect_model(str(build_family("chatml", tmp_path / "m"))).analysis
    body = _serving(tmp_path, "generate.json", json.dumps(
        {"model": "m", "prompt": "Why is the sky blue?", "stream": False,
         "options": {"num_predict": 512, "stop": ["<|im_end|>"]}}))
    assert body.max_tokens.value == 512 and body.max_tokens.key == "options.num_predict"
    assert [s.value for s in body.stop] == ["<|im_end|>"]
    assert "SD430" not in {f.code for f in serving_findings(analysis, body)}
    bare = _serving(tmp_path, "bare.json", json.dumps({"model": "m", "prompt": "Hi", "keep_alive": "5m"}))
    assert "SD430" not in {f.code for f in serving_findings(analysis, bare)}
    openai = _serving(tmp_path, "openai.json", json.dumps({"model": "m", "prompt": "Hi"}))
    assert "SD430" in {f.code for f in serving_findings(analysis, openai)}  # still caught


# GLM's specials over SmolLM2's (ids 1-11), as a GGUF converted without eot/eom keys would carry
# them (converters before llama.cpp PR #14939, or another tool): eos <|endoftext|> only.
GLM_GGUF_TOKENS = {1: "[gMASK]", 2: "<sop>", 3: "[MASK]", 4: "[sMASK]", 5: "<eop>", 6: "<|system|>", 7: "<|user|>",
                   8: "<|assistant|>", 9: "<|observation|>", 10: "<think>", 11: "</think>"}


def _glm_gguf(real_gguf_models, target: Path) -> Path:
    import struct

    source = real_gguf_models.smollm2_gguf
    tokens = list(read_header(source).metadata["tokenizer.ggml.tokens"])
    for token_id, text in GLM_GGUF_TOKENS.items():
        tokens[token_id] = text
    return with_values(source, target, {"tokenizer.ggml.tokens": pack_string_array(tokens),
                                        "tokenizer.ggml.eos_token_id": struct.pack("<I", 0),
                                        "tokenizer.chat_template": pack_string(_template("GLM-4.6"))})


def test_a_glm_gguf_served_gets_one_sd401_with_one_value_per_key(real_gguf_models, tmp_path):
    """GLM's turn ends where <|user|> or <|observation|> opens: one cause, one finding, whose fix
    sets each key once (llama.cpp eot and eom, as the converter writes them; vLLM one id list).
    Before: two SD401 per server, each setting tokenizer.ggml.eos_token_id to another id."""
    from stopdoctor.api import serving_findings

    path = _glm_gguf(real_gguf_models, tmp_path / "glm.gguf")
    analysis = inspect_model(str(path)).analysis
    assert [m.text for m in analysis.end_of_turn] == ["<|user|>", "<|observation|>"]
    (llama,) = [f for f in serving_findings(analysis, _serving(tmp_path, "serve.sh", "llama-server -m glm.gguf --jinja\n"))
                if f.code == "SD401"]
    assert llama.fix.count("--override-kv") == 2 and "eot_token_id=int:7" in llama.fix and "eom_token_id=int:9" in llama.fix
    fixed = _serving(tmp_path, "fixed.sh", f"llama-server -m glm.gguf --jinja {llama.fix.removeprefix('add ')}\n")
    assert not [f for f in serving_findings(analysis, fixed) if f.code == "SD401"]  # the fix is enough
    (vllm,) = [f for f in serving_findings(analysis, _serving(tmp_path, "v.sh", "vllm serve ./glm.gguf\n")) if f.code == "SD401"]
    assert '"stop_token_ids": [7, 9]' in vllm.fix


def test_a_modelfile_stop_inside_the_thought_and_the_turn_is_reported_once(real_gguf_models, tmp_path):
    """`PARAMETER stop "</think>"` on GLM: SD420 (a stop inside the turn) says it; SD452 no longer
    says it again. Before: both, for the one stop."""
    from stopdoctor.api import serving_findings

    path = _glm_gguf(real_gguf_models, tmp_path / "glm.gguf")
    analysis = inspect_model(str(path)).analysis
    modelfile = _serving(tmp_path, "Modelfile", 'FROM ./glm.gguf\nPARAMETER stop "</think>"\nPARAMETER stop "<|user|>"\n'
                                                'PARAMETER stop "<|observation|>"\n')
    found = [(f.code, f.location.key) for f in serving_findings(analysis, modelfile)]
    assert [code for code, _ in found].count("SD420") == 1 and "SD452" not in [code for code, _ in found], found


@pytest.mark.parametrize("command", ["vllm-mlx serve mlx-community/Qwen3-8B-4bit --port 8000\n",
                                     "llama-server-proxy -m m.gguf --port 8080\n", "./my_server --model m\n"])
def test_an_unknown_launcher_is_said_to_be_unknown(tmp_path, command):
    """`vllm-mlx` (an MLX server with its own stop rule) is not vLLM: read as one, its stop set
    would be vLLM's. Before: `vllm-mlx serve M` was read as `vllm serve M`."""
    from stopdoctor.core.errors import InputError

    with pytest.raises(InputError, match="launcher .* is not one stopdoctor knows"):
        _serving(tmp_path, "serve.sh", command)


@pytest.mark.parametrize("command, kind", [
    ("#!/bin/bash\nexport HF_HOME=/data\nCUDA_VISIBLE_DEVICES=0 vllm serve m --port 8000\n", "vllm"),
    ("python3 -m vllm.entrypoints.openai.api_server --model m\n", "vllm"),
    ("huggingface-cli download m --local-dir m\n/opt/llama.cpp/build/bin/llama-server -m m/m.gguf --jinja\n", "llamacpp"),
    ("docker run --gpus all vllm/vllm-openai:latest --model m\n", "vllm"),
    ("uv run python -m sglang.launch_server --model-path m\n", "sglang"),
])
def test_known_launchers_keep_their_kind(tmp_path, command, kind):
    assert _serving(tmp_path, "serve.sh", command).kind == kind
