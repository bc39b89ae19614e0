"""The turn-structure cases that were harmfully wrong (each reproduced first), on synthetic
folders, the real test GGUFs and real templates of the corpus.

A suggested stop must be safe by construction: never a whitespace token, a turn header or a token
the template writes inside an assistant turn; fixes write exactly the ids asserted here.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from fixtures.synth import build_family
from stopdoctor.analysis.core import analyze
from stopdoctor.api import inspect_model, load, serving_findings
from stopdoctor.rules.runner import run_rules
from stopdoctor.analysis.diagnose import StopCause, turn_enders
from stopdoctor.core.errors import InputError
from stopdoctor.fix import plan_fixes
from stopdoctor.actions.generate.server import _server_cause
from stopdoctor.core.types import ChatTemplate, Location
from stopdoctor.runtimes.serving import load_serving
from stopdoctor.runtimes.stops import RuntimeStops
from stopdoctor.template.turns import analyze_turns

from .helpers import cli

# Llama-3.1 merge whose template writes the assistant header after every conversation,
# add_generation_prompt or not.
LLAMA3_ALWAYS_APPENDS = (
    "{{- bos_token -}}{%- for m in messages -%}"
    "{{- '<|start_header_id|>' + m['role'] + '<|end_header_id|>\\n\\n' + m['content'] | trim + '<|eot_id|>' -}}"
    "{%- endfor -%}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}"
)
# Gemma 3's template (the published one, less the image handling)
GEMMA3 = (
    "{{ bos_token }}{%- if messages[0]['role'] == 'system' -%}{%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}"
    "{%- set loop_messages = messages[1:] -%}{%- else -%}{%- set first_user_prefix = '' -%}{%- set loop_messages = messages -%}"
    "{%- endif -%}{%- for message in loop_messages -%}{%- if message['role'] == 'assistant' -%}{%- set role = 'model' -%}"
    "{%- else -%}{%- set role = message['role'] -%}{%- endif -%}{{ '<start_of_turn>' + role + '\n' + "
    "(first_user_prefix if loop.first else '') }}{{ message['content'] | trim }}{{ '<end_of_turn>\n' }}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}"
)
# Content only as a list of parts (MiniMax and many VLM templates).
PARTS_ONLY = (
    "{%- for m in messages -%}{{- '<|im_start|>' + m['role'] + '\\n' + m['content'][0]['text'] + '<|im_end|>\\n' -}}"
    "{%- endfor -%}{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)
# Iterates `tools` without a guard (Hermes-2-Pro / Hermes-3 tool_use).
TOOLS_UNGUARDED = (
    "{{- '<|im_start|>system\\nTools: ' -}}{%- for tool in tools -%}{{- tool['function']['name'] + ' ' -}}{%- endfor -%}"
    "{{- '<|im_end|>\\n' -}}{%- for m in messages -%}{{- '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' -}}"
    "{%- endfor -%}{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)
# The assistant close is written only when another turn follows (Apertus, Apriel, Hunyuan).
ONLY_WHEN_FOLLOWED = (
    "{%- for m in messages -%}{%- if m['role'] == 'assistant' -%}{{- '<|im_start|>assistant\\n' + m['content'] -}}"
    "{%- if not loop.last -%}{{- '<|im_end|>\\n' -}}{%- endif -%}{%- else -%}"
    "{{- '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' -}}{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)
# "User: …\n\nAssistant: …\n\n": whitespace closes the turn.
WHITESPACE_CLOSE = (
    "{%- for m in messages -%}{{- m['role'] | capitalize + ': ' + m['content'] + '\\n\\n' -}}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- 'Assistant:' -}}{%- endif -%}"
)
# Inner closing tag: the answer segment closes with <|im_sep|>, which the template also writes
# before a tool call in the same turn; the turn ends with <|im_end|>.
INNER_CLOSE = (
    "{%- for m in messages -%}{{- '<|im_start|>' + m['role'] + '\\n' + m['content'] -}}"
    "{%- if m['role'] == 'assistant' -%}{{- '<|im_sep|>' -}}{%- for c in m.get('tool_calls', []) -%}"
    "{{- '<tool>' + c['function']['name'] + '</tool>' -}}{%- endfor -%}{%- endif -%}{{- '<|im_end|>\\n' -}}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


def _folder(tmp_path: Path, family: str, name: str = "m", **overrides) -> Path:
    return build_family(family, tmp_path / name, **overrides)


def _with_template(spec: str, source: str) -> tuple:
    facts = load(spec)
    facts.templates.clear()
    facts.templates.append(ChatTemplate("default", source, Location("test", "chat_template")))
    analysis = analyze(facts)
    return facts, analysis, run_rules(analysis)


# --- a template that always appends the assistant header -------------------------------------


def test_always_appended_assistant_header_is_not_an_end_of_turn(tmp_path):
    folder = _folder(tmp_path, "llama3", chat_template=LLAMA3_ALWAYS_APPENDS)
    result = inspect_model(str(folder))
    assert [m.text for m in result.analysis.end_of_turn] == ["<|eot_id|>"]
    assert not [f for f in result.findings if f.code == "SD101"]
    assert plan_fixes(result.analysis).edits == ()


def test_always_appended_header_fix_adds_only_the_end_of_turn_id(tmp_path):
    folder = _folder(tmp_path, "llama3", chat_template=LLAMA3_ALWAYS_APPENDS, gen_eos="<|end_of_text|>")
    result = inspect_model(str(folder))
    vocab = result.facts.vocab
    eot, end, header = (vocab.id_of(t) for t in ("<|eot_id|>", "<|end_of_text|>", "<|start_header_id|>"))
    assert [f.code for f in result.findings if f.code == "SD101"] == ["SD101"]
    assert cli("fix", "--write", str(folder)).code == 0
    written = json.loads((folder / "generation_config.json").read_text())["eos_token_id"]
    assert written == [end, eot] and header not in written


# --- Gemma 3 GGUF with its chat template ------------------------------------------------------


def test_gemma3_gguf_newline_token_is_never_an_end_of_turn(real_models, tmp_path):
    facts, analysis, findings = _with_template(str(real_models.gemma_gguf), GEMMA3)
    assert facts.vocab.text_of(107) == "\n"
    assert [(m.text, m.ids) for m in analysis.end_of_turn] == [("<end_of_turn>", (106,))]
    assert analysis.stop_hazard(107) is not None
    assert 107 not in turn_enders(analysis)
    sd101 = [f for f in findings if f.code == "SD101"]
    assert sd101 and "106" in sd101[0].fix and "107" not in sd101[0].fix
    modelfile = tmp_path / "Modelfile"
    modelfile.write_text(f"FROM {real_models.gemma_gguf}\n")
    edits = plan_fixes(analysis, load_serving(modelfile)).edits
    # the GGUF's own eos becomes <end_of_turn> (106, never the newline 107), and the Modelfile stops on it
    assert [e.after for e in edits] == ["tokenizer.ggml.eos_token_id = 106\n",
                                        f'FROM {real_models.gemma_gguf}\nPARAMETER stop "<end_of_turn>"\n']


def test_base_gguf_with_an_added_template_is_not_called_instruct(real_models):
    _, analysis, _ = _with_template(str(real_models.gemma_gguf), GEMMA3)
    assert analysis.verdict.kind != "instruct"
    assert all("llama.cpp" not in e.clue for e in analysis.verdict.evidence)


# --- llama.cpp's end-of-generation set, as llama-vocab.cpp computes it ----------------------


def test_llama_cpp_end_of_generation_ids_on_the_real_gguf_files(real_models):
    # compared by hand with llama-server (build 11434) on the same files
    smollm2 = inspect_model(str(real_models.smollm2_gguf)).analysis.runtime("llama.cpp")
    gemma = inspect_model(str(real_models.gemma_gguf)).analysis.runtime("llama.cpp")
    assert smollm2.ids == [0, 2, 4]  # 4 = <reponame>, auto-detected as the fim repo token
    assert gemma.ids == [1, 106, 212]  # 212 = </s>, on the end-of-generation text list


# --- inner closing tags -----------------------------------------------------------------------


def _corpus_turns(corpus, name: str):
    """The turn structure of one real template of the corpus, with the corpus test's specials."""
    if name not in corpus.entries:
        pytest.skip("the template corpus is absent; run `python fixtures/realmodels.py`")
    analysed = corpus.analysed(name)
    if analysed.error is not None:
        raise analysed.error
    return analysed.turns



def test_a_segment_close_written_before_a_tool_call_is_never_the_end_of_turn():
    turns = analyze_turns(INNER_CLOSE, {"eos_token": "<|im_end|>"}, ["<|im_start|>", "<|im_end|>", "<|im_sep|>", "<tool>", "</tool>"])
    assert [m.text for m in turns.end_of_turn] == ["<|im_end|>"]
    assert "<|im_sep|>" in turns.inner


@pytest.mark.corpus
@pytest.mark.parametrize("name, end, inner", [
    ("llama.cpp/Kimi-K3", "<|end_of_msg|>", {"<|close|>", "<|sep|>"}),
    ("llama.cpp/Cohere2MoE", "<|END_OF_TURN_TOKEN|>", {"<|END_TEXT|>"}),
    ("llama.cpp/openai-gpt-oss-120b", "<|return|>", {"<|end|>"}),
])
def test_real_templates_with_inner_closes(name, end, inner, template_corpus):
    turns = _corpus_turns(template_corpus, name)
    assert [m.text for m in turns.end_of_turn] == [end]
    assert not inner & {m.text for m in turns.end_of_turn}


# --- templates that close late, by whitespace, or at the next header --------------------------


@pytest.mark.corpus
@pytest.mark.parametrize("name, style, end", [
    ("llama.cpp/Apertus-8B-Instruct", "only-when-followed", ["<|assistant_end|>"]),
    ("llama.cpp/Apriel-1.6-15b-Thinker-fixed", "only-when-followed", ["<|end|>"]),
    ("llama.cpp/GLM-4.6", "next-header", ["<|user|>", "<|observation|>"]),
])
def test_real_templates_that_close_without_a_final_token(name, style, end, template_corpus):
    turns = _corpus_turns(template_corpus, name)
    assert (turns.style, [m.text for m in turns.end_of_turn]) == (style, end)


def test_close_only_when_followed_is_no_never_closes_finding(tmp_path):
    result = inspect_model(str(_folder(tmp_path, "chatml", chat_template=ONLY_WHEN_FOLLOWED)))
    assert result.analysis.turns.style == "only-when-followed"
    assert [m.text for m in result.analysis.end_of_turn] == ["<|im_end|>"]
    assert not [f for f in result.findings if f.code == "SD202"]


def test_whitespace_close_is_no_never_closes_finding_and_no_whitespace_stop(tmp_path):
    result = inspect_model(str(_folder(tmp_path, "chatml", chat_template=WHITESPACE_CLOSE)))
    assert result.analysis.turns.style == "whitespace"
    assert [(m.text, m.kind) for m in result.analysis.end_of_turn] == [("User:", "text")]
    assert not [f for f in result.findings if f.code in ("SD202", "SD201", "SD101")]


def test_next_header_template_needs_the_headers_as_stops(tmp_path):
    glm = (
        "[gMASK]<sop>{%- for m in messages -%}{{- '<|' + m['role'] + '|>\\n' + m['content'] -}}{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{- '<|assistant|>\\n' -}}{%- endif -%}"
    )
    folder = _folder(tmp_path, "chatml", chat_template=glm)
    # give the vocabulary GLM's role tokens as added special tokens
    config = json.loads((folder / "tokenizer_config.json").read_text())
    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    next_id = max(t["id"] for t in tokenizer["added_tokens"]) + 1
    for i, text in enumerate(["<|user|>", "<|assistant|>", "<|system|>", "<|observation|>", "[gMASK]", "<sop>"]):
        entry = {"id": next_id + i, "content": text, "single_word": False, "lstrip": False, "rstrip": False,
                 "normalized": False, "special": True}
        tokenizer["added_tokens"].append(entry)
        config["added_tokens_decoder"][str(next_id + i)] = {k: v for k, v in entry.items() if k != "id"}
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    result = inspect_model(str(folder))
    assert result.analysis.turns.style == "next-header"
    user, observation = next_id, next_id + 3
    assert result.analysis.required_stop_ids() == [user, observation]
    fixed = cli("fix", "--write", str(folder))
    assert fixed.code in (0, 1) and fixed.code == cli("check", str(folder)).code  # fix exits as check does after it
    written = json.loads((folder / "generation_config.json").read_text())["eos_token_id"]
    assert user in written and observation in written and next_id + 1 not in written


# --- conversation shapes a template insists on ------------------------------------------------


@pytest.mark.parametrize("template", [PARTS_ONLY, TOOLS_UNGUARDED], ids=["content-parts-only", "tools-unguarded"])
def test_templates_that_need_parts_or_tools_are_inspected(tmp_path, template):
    folder = _folder(tmp_path, "chatml", chat_template=template)
    run = cli("inspect", str(folder))
    assert run.code == 0, run.stderr
    result = inspect_model(str(folder))
    assert [m.text for m in result.analysis.end_of_turn] == ["<|im_end|>"]


# --- no stop id anywhere ----------------------------------------------------------------------


def test_no_stop_id_is_found_without_a_tokenizer_json(tmp_path):
    folder = _folder(tmp_path, "chatml", config_eos=None, gen_eos=None)
    (folder / "tokenizer.json").unlink()
    result = inspect_model(str(folder))
    assert [f.code for f in result.findings if f.severity.name == "ERROR"] == ["SD106"]


def test_fix_keeps_the_tokenizer_eos_when_eos_token_id_is_absent(tmp_path):
    folder = _folder(tmp_path, "chatml", config_eos=None, gen_eos=None)
    vocab = load(str(folder)).vocab
    assert cli("fix", "--write", str(folder)).code == 0
    assert json.loads((folder / "generation_config.json").read_text())["eos_token_id"] == [vocab.id_of("<|im_end|>")]
    assert "SD106" not in {f.code for f in inspect_model(str(folder)).findings}


# --- the human report -------------------------------------------------------------------------


def test_report_never_says_the_end_of_turn_is_a_stop_id_above_sd101():
    run = cli("inspect", str(Path(__file__).resolve().parents[1] / "fixtures" / "examples" / "llama3-eot-missing"))
    assert "SD101" in run.stdout
    assert "is a stop id (+" not in run.stdout and "declares the template's end-of-turn token as a stop id" not in run.stdout


# --- a server that does not say why it stopped -----------------------------------------------


def test_server_without_a_stop_reason_is_not_reported_as_eos(synth_root):
    facts = load(str(synth_root / "clean-chatml"))
    stop = RuntimeStops("request", (), "--stop", texts=("\nUser:",))
    cause = _server_cause("stop", None, stop, facts)
    assert cause.kind == "unreported" and "User:" in cause.text
    assert _server_cause("stop", "\nUser:", stop, facts) == StopCause("stop_string", text="\nUser:", stop_string="\nUser:")


# --- fix --write ------------------------------------------------------------------------------


def test_fix_write_is_atomic(tmp_path, monkeypatch):
    folder = _folder(tmp_path, "llama3", gen_eos="<|end_of_text|>")
    before = (folder / "generation_config.json").read_text()

    def broken(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken)
    plan = plan_fixes(inspect_model(str(folder)).analysis)
    with pytest.raises(InputError, match="No space left"):
        plan.write()
    assert (folder / "generation_config.json").read_text() == before
    assert sorted(p.name for p in folder.iterdir()) == sorted(p.name for p in folder.iterdir() if not p.name.endswith(".tmp"))


@pytest.mark.parametrize("link", ["symlink", "hardlink"])
def test_fix_write_never_writes_through_a_link(tmp_path, link):
    folder = _folder(tmp_path, "llama3", gen_eos="<|end_of_text|>")
    outside = tmp_path / "outside.json"
    shutil.move(folder / "generation_config.json", outside)
    if link == "symlink":
        (folder / "generation_config.json").symlink_to(outside)
    else:
        os.link(outside, folder / "generation_config.json")
    before = outside.read_text()
    run = cli("fix", "--write", str(folder))
    assert run.code == 2 and "link" in run.stderr
    assert outside.read_text() == before


def test_serving_fix_never_suggests_an_unsafe_stop(real_models, tmp_path):
    _, analysis, _ = _with_template(str(real_models.gemma_gguf), GEMMA3)
    modelfile = tmp_path / "Modelfile"
    modelfile.write_text(f"FROM {real_models.gemma_gguf}\n")
    for finding in serving_findings(analysis, load_serving(modelfile)):
        assert finding.evidence.get("end_of_turn") != "\n"


def test_tokenizer_eos_missing_from_the_vocabulary_is_a_finding(tmp_path):
    folder = _folder(tmp_path, "chatml")
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["eos_token"] = "<|not_in_vocab|>"
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    (folder / "special_tokens_map.json").unlink()
    findings = [f for f in inspect_model(str(folder)).findings if f.code == "SD103"]
    assert any("<|not_in_vocab|>" in f.message and f.location.file == "tokenizer_config.json" for f in findings)
