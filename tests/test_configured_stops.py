"""SD420 stop-inside-turn on real templates (Qwen3 thinking and tool calls, gpt-oss Harmony) over
the real SmolLM2 tokenizer with the templates' tokens added; SD270 pre-tokenizer-missing and SD271
gguf-merges-missing on the real GGUFs and on copies with the key renamed; SD272 pre-tokenizer-mismatch
on SmolLM2 relabelled with other pre-tokenizers."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from stopdoctor.api import inspect_model, serving_findings
from stopdoctor.runtimes.serving import load_serving

from tests.helpers import model_copy

TEMPLATES = Path.home() / ".cache" / "stopdoctor" / "templates" / "llama.cpp"
QWEN3_TOKENS = ["<think>", "</think>", "<tool_call>", "</tool_call>"]
HARMONY_TOKENS = ["<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|return|>", "<|call|>", "<|constrain|>"]


def model_with(real_models, tmp_path: Path, template: str, tokens: list[str]) -> Path:
    from tokenizers import Tokenizer

    folder = tmp_path / "model"
    model_copy(real_models.smollm2_hf, folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["chat_template"] = (TEMPLATES / template).read_text()
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.add_special_tokens(tokens)
    tokenizer.save(str(folder / "tokenizer.json"))
    return folder


def codes(folder: Path, tmp_path: Path, name: str, text: str) -> list[str]:
    serving = tmp_path / name
    serving.write_text(text)
    analysis = inspect_model(str(folder)).analysis
    return [f.code for f in serving_findings(analysis, load_serving(serving))]


@pytest.fixture
def qwen3(real_models, tmp_path):
    if not (TEMPLATES / "Qwen-Qwen3-0.6B.jinja").is_file():
        pytest.skip("the template corpus is not cached (python fixtures/templates.py)")
    return model_with(real_models, tmp_path, "Qwen-Qwen3-0.6B.jinja", QWEN3_TOKENS)


@pytest.fixture
def gptoss(real_models, tmp_path):
    if not (TEMPLATES / "openai-gpt-oss-120b.jinja").is_file():
        pytest.skip("the template corpus is not cached (python fixtures/templates.py)")
    return model_with(real_models, tmp_path, "openai-gpt-oss-120b.jinja", HARMONY_TOKENS)


def test_think_close_as_stop(qwen3, tmp_path):
    found = codes(qwen3, tmp_path, "Modelfile", 'FROM ./m.gguf\nPARAMETER stop "</think>"\nPARAMETER stop "<|im_end|>"\n')
    assert "SD420" in found


def test_tool_call_opener_as_stop(qwen3, tmp_path):
    found = codes(qwen3, tmp_path, "request.json", json.dumps({"model": "m", "stop": ["<tool_call>"]}))
    assert "SD420" in found and "SD403" not in found  # one advice: remove it, not "use its id"


def test_end_of_turn_stop_is_fine(qwen3, tmp_path):
    assert "SD420" not in codes(qwen3, tmp_path, "request.json", json.dumps({"model": "m", "stop": ["<|im_end|>"]}))
    assert "SD420" not in codes(qwen3, tmp_path, "Modelfile", 'FROM ./m.gguf\nPARAMETER stop "<|im_end|>"\n')


def test_harmony_framing_token_as_stop(gptoss, tmp_path):
    assert "SD420" in codes(gptoss, tmp_path, "Modelfile", 'FROM ./m.gguf\nPARAMETER stop "<|message|>"\n')
    ids = inspect_model(str(gptoss)).facts.vocab.exact_ids(["<|channel|>"])
    request = json.dumps({"model": "m", "stop_token_ids": [ids["<|channel|>"]]})
    assert "SD420" in codes(gptoss, tmp_path, "request.json", request)


def test_harmony_return_and_call_are_fine(gptoss, tmp_path):
    found = codes(gptoss, tmp_path, "Modelfile", 'FROM ./m.gguf\nPARAMETER stop "<|return|>"\nPARAMETER stop "<|call|>"\n')
    assert "SD420" not in found


def test_plain_chatml_never_fires(real_models, tmp_path):
    # the same stop texts on a model whose template writes none of them
    found = codes(real_models.smollm2_hf, tmp_path, "request.json", json.dumps({"model": "m", "stop": ["</think>", "<tool_call>"]}))
    assert "SD420" not in found


def test_realworld_serving_fixtures_do_not_fire(real_models):
    root = Path(__file__).resolve().parents[1] / "fixtures" / "serving"
    analysis = inspect_model(str(real_models.smollm2_hf)).analysis
    for path in sorted(root.iterdir()):
        if path.suffix == ".jinja":
            continue
        assert "SD420" not in [f.code for f in serving_findings(analysis, load_serving(path))], path.name


def rename_key(source: Path, target: Path, key: bytes, new: bytes) -> Path:
    assert len(key) == len(new)
    data = bytearray(source.read_bytes()[:64 * 1024 * 1024])
    at = data.index(key)
    data[at:at + len(key)] = new
    with open(source, "rb") as whole, open(target, "wb") as out:
        out.write(data)
        whole.seek(len(data))
        shutil.copyfileobj(whole, out)
    return target


def test_pre_tokenizer_present_on_real_gguf(real_gguf_models):
    for path in (real_gguf_models.smollm2_gguf, real_gguf_models.gemma_gguf):
        assert not {"SD270", "SD271"} & {f.code for f in inspect_model(str(path)).findings}


def test_pre_tokenizer_missing(real_gguf_models, tmp_path):
    path = rename_key(real_gguf_models.smollm2_gguf, tmp_path / "nopre.gguf", b"tokenizer.ggml.pre", b"tokenizer.ggml.prx")
    (finding,) = [f for f in inspect_model(str(path)).findings if f.code == "SD270"]
    assert finding.name == "pre-tokenizer-missing" and finding.location.key == "tokenizer.ggml.pre"


def test_spm_gguf_needs_no_pre_tokenizer(real_gguf_models, tmp_path):
    # Gemma's vocabulary is SentencePiece ("llama"): llama.cpp uses no pre-tokenizer for it
    path = rename_key(real_gguf_models.gemma_gguf, tmp_path / "nopre.gguf", b"tokenizer.ggml.pre", b"tokenizer.ggml.prx")
    assert "SD270" not in {f.code for f in inspect_model(str(path)).findings}


@pytest.mark.slow
@pytest.mark.parametrize("pre, cut", [("smollm", None), ("gpt-2", None), ("llama3", 117), ("smaug-bpe", 117),
                                      ("qwen2", 117), ("default", 252), ("falcon", 243)])
def test_pre_tokenizer_mismatch_on_relabelled_smollm2(real_gguf_models, tmp_path, pre, cut):
    """SmolLM2's vocabulary was trained with single digits and GPT-2's whitespace rule: llama3's and
    qwen2's `\\s*[\\r\\n]+` cut its "\\n   " tokens, default's and falcon's punctuation runs cut " (".
    gpt-2 keeps every token whole too, so nothing tells it from smollm: no finding (a miss, not an error)."""
    from tests.gguf_rewrite import pack_string, with_value

    path = with_value(real_gguf_models.smollm2_gguf, tmp_path / "m.gguf", "tokenizer.ggml.pre", pack_string(pre))
    findings = [f for f in inspect_model(str(path)).findings if f.code == "SD272"]
    if cut is None:
        assert findings == []
        return
    (finding,) = findings
    assert finding.name == "pre-tokenizer-mismatch" and finding.location.key == "tokenizer.ggml.pre"
    assert finding.evidence["unreachable"] == cut and finding.evidence["fits"] == ["smollm", "gpt-2"]


@pytest.mark.parametrize("repo, pre", [("Decentralised-AI__falcon-40b", "falcon"), ("junqi-jiang__oasstpythia1.5brm", "gpt-2")])
def test_a_vocabulary_under_its_own_pre_tokenizer_loses_no_token(realworld, repo, pre):
    """SD272's precision, measured on real byte-level BPE vocabularies (their tokenizer.json names the
    split they were trained with): under it, none of their 2,288 and 4,605 ordinary non-word tokens
    (the ones a split could cut) is cut."""
    from stopdoctor.facts.gguf_pretokenizer import byte_level_texts, llama_cpp_pre_tokenizer, unreachable

    data = json.loads((realworld / repo / "tokenizer.json").read_text())
    added = {token["content"] for token in data.get("added_tokens", [])}
    vocab = sorted(data["model"]["vocab"], key=data["model"]["vocab"].get)
    texts = byte_level_texts(vocab, [3 if token in added else 1 for token in vocab])
    assert len(texts) > 2000
    assert unreachable(texts, llama_cpp_pre_tokenizer(pre)) == []
    assert unreachable(texts, llama_cpp_pre_tokenizer("qwen2"), limit=10)  # and a wrong split does cut some


def test_a_fill_in_the_middle_role_named_by_its_gguf_key_is_not_found_by_text(real_gguf_models, tmp_path):
    """llama.cpp finds a fill-in-the-middle token by its text (and makes it control) only when no
    `tokenizer.ggml.fim_*_token_id` key names one: SmolLM2's <reponame> is fim_rep by text; with a
    fim_rep key it is not, in the stop set's view as in the tokenizer's."""
    from stopdoctor.facts.model_facts import load_model
    from stopdoctor.runtimes.stops import llama_cpp_control_by_text

    plain = load_model(str(real_gguf_models.smollm2_gguf))
    reponame = plain.vocab.id_of("<reponame>")
    assert reponame in llama_cpp_control_by_text(plain)
    path = rename_key(real_gguf_models.smollm2_gguf, tmp_path / "fim.gguf", b"tokenizer.ggml.padding_token_id",
                      b"tokenizer.ggml.fim_rep_token_id")
    assert reponame not in llama_cpp_control_by_text(load_model(str(path)))
