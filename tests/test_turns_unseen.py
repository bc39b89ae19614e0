"""Turn structure on template shapes the first corpus never showed (issue #22 §1): each shape
comes from a real template of a collection measured apart (tests/data/fresh_template_labels.json)
or from the class the issue names, reduced to the lines that matter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures.synth import build_family
from stopdoctor.api import inspect_model
from stopdoctor.template.turns import analyze_turns


def _folder_with_tokens(tmp_path: Path, template: str, tokens: list[str], eos: str | None = None) -> Path:
    """A ChatML synthetic folder whose vocabulary also has `tokens` as added special tokens."""
    folder = build_family("chatml", tmp_path / "m", chat_template=template)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    next_id = max(t["id"] for t in tokenizer["added_tokens"]) + 1
    for i, text in enumerate(tokens):
        entry = {"id": next_id + i, "content": text, "single_word": False, "lstrip": False, "rstrip": False,
                 "normalized": False, "special": True}
        tokenizer["added_tokens"].append(entry)
        config["added_tokens_decoder"][str(next_id + i)] = {k: v for k, v in entry.items() if k != "id"}
    if eos is not None:  # every file names it: the tokenizer, config.json, generation_config.json
        config["eos_token"] = eos
        eos_id = next_id + tokens.index(eos)
        for name in ("config.json", "generation_config.json"):
            if (folder / name).is_file():
                data = json.loads((folder / name).read_text())
                data["eos_token_id"] = eos_id
                (folder / name).write_text(json.dumps(data))
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


# --- a close written by position: before every message but the first --------------------------

# AI21 Jamba's shape (axolotl's jamba.jinja): `<|eom|>` is written before each message after the
# first, under `ns.message_count > 0`, and before the generation prompt; here without the final
# `<|eom|>` that axolotl's copy writes when add_generation_prompt is false.
CLOSE_BY_POSITION = (
    "{%- set ns = namespace(count=0) -%}{{- '<|startoftext|>' -}}{%- for m in messages -%}"
    "{%- if ns.count > 0 -%}{{- '<|eom|>' -}}{%- endif -%}{{- '<|bom|><|' + m['role'] + '|> ' + m['content'] -}}"
    "{%- set ns.count = ns.count + 1 -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{%- if ns.count > 0 -%}{{- '<|eom|>' -}}{%- endif -%}{{- '<|bom|><|assistant|>' -}}{%- endif -%}"
)


def test_a_close_written_before_each_later_message_is_the_end_of_turn():
    known = ["<|startoftext|>", "<|eom|>", "<|bom|>", "<|user|>", "<|assistant|>", "<|system|>"]
    turns = analyze_turns(CLOSE_BY_POSITION, {"eos_token": "<|endoftext|>"}, known)
    assert (turns.style, [m.text for m in turns.end_of_turn]) == ("only-when-followed", ["<|eom|>"])
    assert "<|eom|>" not in turns.openers


def test_a_close_written_by_position_is_no_never_closes_finding(tmp_path):
    folder = _folder_with_tokens(tmp_path, CLOSE_BY_POSITION, ["<|startoftext|>", "<|eom|>", "<|bom|>", "<|user|>", "<|assistant|>"])
    result = inspect_model(str(folder))
    assert not [f for f in result.findings if f.code == "SD202"]
    assert [m.text for m in result.analysis.end_of_turn] == ["<|eom|>"]


# --- several closes by turn kind, one shared ----------------------------------------------------

# Command A's shape (axolotl's command_a*.jinja): answers end <|END_RESPONSE|><|END_OF_TURN_TOKEN|>,
# tool-call turns <|END_ACTION|><|END_OF_TURN_TOKEN|>.
CLOSE_BY_KIND = (
    "{%- for m in messages -%}{%- if m['role'] == 'assistant' -%}{{- '<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>' -}}"
    "{%- if m.tool_calls -%}{{- '<|START_ACTION|>' -}}{%- for c in m.tool_calls -%}{{- c['function']['name'] -}}{%- endfor -%}"
    "{{- '<|END_ACTION|><|END_OF_TURN_TOKEN|>' -}}{%- else -%}{{- '<|START_RESPONSE|>' + m['content'] + '<|END_RESPONSE|><|END_OF_TURN_TOKEN|>' -}}"
    "{%- endif -%}{%- else -%}{{- '<|START_OF_TURN_TOKEN|><|USER_TOKEN|>' + m['content'] + '<|END_OF_TURN_TOKEN|>' -}}{%- endif -%}"
    "{%- endfor -%}{%- if add_generation_prompt -%}{{- '<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|><|START_RESPONSE|>' -}}{%- endif -%}"
)
COHERE_TOKENS = ["<|START_OF_TURN_TOKEN|>", "<|END_OF_TURN_TOKEN|>", "<|CHATBOT_TOKEN|>", "<|USER_TOKEN|>",
                 "<|START_RESPONSE|>", "<|END_RESPONSE|>", "<|START_ACTION|>", "<|END_ACTION|>"]


def test_a_close_only_answers_write_never_ends_a_turn_alone():
    turns = analyze_turns(CLOSE_BY_KIND, {"eos_token": "<|endoftext|>"}, COHERE_TOKENS)
    assert [m.text for m in turns.end_of_turn] == ["<|END_OF_TURN_TOKEN|>"]
    assert "<|END_RESPONSE|>" not in {m.text for m in turns.also_ends}


def test_a_stop_set_of_the_answer_close_alone_misses_the_end_of_turn(tmp_path):
    folder = _folder_with_tokens(tmp_path, CLOSE_BY_KIND, COHERE_TOKENS)
    analysis = inspect_model(str(folder)).analysis
    vocab = analysis.facts.vocab
    answer_close, turn_end = vocab.id_of("<|END_RESPONSE|>"), vocab.id_of("<|END_OF_TURN_TOKEN|>")
    assert analysis.required_stop_ids() == [turn_end]
    assert analysis.misses_end_of_turn([answer_close])


# --- the next role header right after the answer ------------------------------------------------

HEADER_NO_SPACE = (
    "{%- for m in messages -%}{%- if m['role'] == 'user' -%}{{- '### User: ' + m['content'] -}}"
    "{%- else -%}{{- '### Assistant: ' + m['content'] -}}{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '### Assistant:' -}}{%- endif -%}"
)


def test_one_newline_before_the_next_header_does_not_flip_the_verdict():
    with_newline = HEADER_NO_SPACE.replace("'### User: '", "'\\n### User: '")
    found = []
    for template in (HEADER_NO_SPACE, with_newline):
        turns = analyze_turns(template, {"eos_token": "</s>"}, ["</s>"])
        found.append((turns.style, [(m.text, m.kind) for m in turns.end_of_turn]))
    assert found[0] == found[1] == ("whitespace", [("### User:", "text")])


def test_a_header_right_after_the_answer_is_no_never_closes_finding(tmp_path):
    result = inspect_model(str(build_family("chatml", tmp_path / "m", chat_template=HEADER_NO_SPACE)))
    assert not [f for f in result.findings if f.code == "SD202"]
    assert [m.text for m in result.analysis.end_of_turn] == ["### User:"]


# --- a role label with a long fixed instruction after it -----------------------------------------

INSTRUCTION = ("You must put your answer inside <answer></answer> tags, think step by step before you answer, "
               "keep the answer under two hundred words and never repeat the question back to the person asking it.")
LONG_USER_PREFIX = (
    "{%- for m in messages -%}{%- if m['role'] == 'user' -%}{{- 'User: " + INSTRUCTION + " ' + m['content'] + '\\n\\n' -}}"
    "{%- else -%}{{- 'Assistant: ' + m['content'] + '\\n\\n' -}}{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- 'Assistant:' -}}{%- endif -%}"
)


def test_the_stop_after_a_role_label_is_the_label_not_the_instruction():
    turns = analyze_turns(LONG_USER_PREFIX, {"eos_token": "</s>"}, ["</s>"])
    assert (turns.style, [m.text for m in turns.end_of_turn]) == ("whitespace", ["User:"])


# --- a close that also ends a message inside the turn (Harmony <|end|>) --------------------------

# A gpt-oss template variant that ends the final message <|end|> as it ends the analysis one
# (no <|return|>): <|end|> is what follows the answer, and also what ends the thought before it.
HARMONY_END_ONLY = (
    "{%- for m in messages -%}{%- if m['role'] == 'assistant' -%}{%- if m.get('thinking') -%}"
    "{{- '<|start|>assistant<|channel|>analysis<|message|>' + m['thinking'] + '<|end|>' -}}{%- endif -%}"
    "{{- '<|start|>assistant<|channel|>final<|message|>' + m['content'] + '<|end|>' -}}"
    "{%- else -%}{{- '<|start|>' + m['role'] + '<|message|>' + m['content'] + '<|end|>' -}}{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|start|>assistant' -}}{%- endif -%}"
)
HARMONY_TOKENS = ["<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|return|>", "<|call|>"]


def test_a_close_written_inside_the_turn_too_is_refused_as_a_stop(tmp_path):
    folder = _folder_with_tokens(tmp_path, HARMONY_END_ONLY, HARMONY_TOKENS, eos="<|end|>")
    analysis = inspect_model(str(folder)).analysis
    end = analysis.facts.vocab.id_of("<|end|>")
    assert analysis.stop_hazard(end) is not None
    assert end not in analysis.required_stop_ids()
    assert [d.text for d in analysis.facts.declared_for("eos")][:1] == ["<|end|>"]
    assert not [e for e in analysis.verdict.evidence if "turn-end token <|end|>" in e.clue]


# --- a template that loops over `tools` unguarded ------------------------------------------------

# Hermes-2-Pro tool_use's shape: the system turn loops over `tools` with no guard (None is not
# iterable), and, as Llama 3.1 ends tool turns with <|eom_id|>, this one closes assistant turns
# differently once tools are given. An empty list renders the plain conversation.
TOOLS_UNGUARDED = (
    "{{- '<|im_start|>system\\nYou may call functions: <tools>' -}}{%- for tool in tools -%}{{- tool | tojson -}}{%- endfor -%}"
    "{{- '</tools><|im_end|>\\n' -}}{%- for m in messages -%}{{- '<|im_start|>' + m['role'] + '\\n' + m['content'] -}}"
    "{%- if m['role'] == 'assistant' and tools -%}{{- '<|eom_id|>' -}}{%- else -%}{{- '<|im_end|>' -}}{%- endif -%}{{- '\\n' -}}"
    "{%- endfor -%}{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


def test_an_unguarded_tools_loop_is_rendered_with_an_empty_list_first():
    turns = analyze_turns(TOOLS_UNGUARDED, {"eos_token": "<|im_end|>"}, ["<|im_start|>", "<|im_end|>", "<|eom_id|>"])
    assert turns.tools == ()
    assert [m.text for m in turns.end_of_turn] == ["<|im_end|>"]


def test_the_real_hermes_tool_use_template_needs_only_an_empty_tools_list(template_corpus):
    name = "llama.cpp/NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use"
    if name not in template_corpus.entries:
        pytest.skip("the fetched template corpus is absent; run `python fixtures/realmodels.py`")
    analysed = template_corpus.analysed(name)
    assert analysed.turns.tools == ()
    assert [m.text for m in analysed.turns.end_of_turn] == ["<|im_end|>"]


# --- templates that render no plain conversation: read statically -------------------------------

# firefunction-v1's shape (its template, as huggingface.js's jinja tests carry it): it raises
# unless a `functions` message follows the system one, and closes assistant turns through a
# namespace variable, `ns.content + eos_token`, written as `ROLE: content\n\n`.
NEEDS_FUNCTIONS_MESSAGE = (
    "{%- set ns = namespace(messages=messages, content='') -%}{{ bos_token }}"
    "{%- if ns.messages[0]['role'] | upper != 'SYSTEM' -%}"
    "{%- set ns.messages = [{'role': 'SYSTEM', 'content': 'You are a helpful assistant with access to functions.'}] + ns.messages -%}"
    "{%- endif -%}"
    "{%- if ns.messages | length < 2 or ns.messages[1]['role'] | upper != 'FUNCTIONS' -%}"
    "{{ raise_exception('Expected either \"functions\" or [\"system\", \"functions\"] as the first messages') }}"
    "{%- endif -%}"
    "{%- for message in ns.messages -%}{%- set role = message['role'] | upper -%}"
    "{%- set ns.content = message['content'] if message.get('content') else '' -%}"
    "{%- if role == 'ASSISTANT' and '<functioncall>' not in ns.content -%}{%- set ns.content = '<plain>' + ns.content -%}{%- endif -%}"
    "{%- if role == 'ASSISTANT' -%}{%- set ns.content = ns.content + eos_token -%}{%- endif -%}"
    "{{ role }}: {{ ns.content }}{{ '\\n\\n' }}{%- endfor -%}ASSISTANT:{{ ' ' }}"
)

# Mixtral-Instruct's template with a filter Jinja (and so transformers) lacks on the user content.
UNKNOWN_FILTER = (
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}"
    "{{ '[INST] ' + message['content'] | regex_replace('\\s+$', '') + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token }}{% endif %}{% endfor %}"
)


def test_a_template_that_needs_a_functions_message_is_read_statically(tmp_path):
    folder = build_family("llama2", tmp_path / "m", chat_template=NEEDS_FUNCTIONS_MESSAGE)
    result = inspect_model(str(folder))
    assert [(m.text, m.ids) for m in result.analysis.end_of_turn] == [("</s>", (2,))]
    assert "functions" in result.analysis.turns.static
    assert "not rendered" in result.analysis.end_of_turn[0].evidence
    assert not [f for f in result.findings if f.code == "SD202"]
    # said, as info: the template raises on purpose for a plain conversation
    assert [(f.code, f.severity.label) for f in result.findings if f.code == "SD207"] == [("SD207", "info")]


def test_inspect_says_the_answer_is_static(tmp_path):
    folder = build_family("llama2", tmp_path / "m", chat_template=NEEDS_FUNCTIONS_MESSAGE)
    run = subprocess.run([sys.executable, "-m", "stopdoctor", "inspect", str(folder)], capture_output=True, text=True,
                         env={**os.environ, "NO_COLOR": "1"})
    assert run.returncode == 0, run.stderr
    assert "read from the template's source, not rendered" in run.stdout
    doc = json.loads(subprocess.run([sys.executable, "-m", "stopdoctor", "inspect", str(folder), "--json"],
                                    capture_output=True, text=True).stdout)
    assert doc["turn_static"].startswith("chat template raised")
    assert [e["text"] for e in doc["end_of_turn"]] == ["</s>"]


def test_a_template_calling_a_filter_jinja_lacks_is_read_statically():
    turns = analyze_turns(UNKNOWN_FILTER, {"eos_token": "</s>", "bos_token": "<s>"}, ["<s>", "</s>"])
    assert [m.text for m in turns.end_of_turn] == ["</s>"]
    assert "regex_replace" in turns.static


def test_the_static_reading_needs_every_assistant_close_to_agree():
    """Assistant content closed `A + Z` in one branch (answers with citations) and `B + Z` in another
    ends with `Z`, the last token they share; two closes with nothing shared give no answer rather
    than a guess."""
    from stopdoctor.template.static_turns import read_close

    two_closes = ("{%- for m in messages -%}{%- if m['role'] == 'assistant' -%}{%- if m.citations -%}"
                  "{{- m['content'] + '<|END_ACTION|><|END_OF_TURN_TOKEN|>' -}}{%- else -%}"
                  "{{- m['content'] + '<|END_RESPONSE|><|END_OF_TURN_TOKEN|>' -}}{%- endif -%}"
                  "{%- else -%}{{- '<|USER_TOKEN|>' + m['content'] + '<|END_OF_TURN_TOKEN|>' -}}{%- endif -%}{%- endfor -%}")
    found = read_close(two_closes, {}, COHERE_TOKENS, "test")
    assert found is not None and found.marker == "<|END_OF_TURN_TOKEN|>"
    nothing_shared = two_closes.replace("'<|END_ACTION|><|END_OF_TURN_TOKEN|>'", "'<|END_ACTION|>'")
    assert read_close(nothing_shared, {}, COHERE_TOKENS, "test") is None


def test_a_template_that_ignores_the_messages_is_not_read_around(tmp_path):
    from stopdoctor.template.render import TemplateIgnoresMessages

    with pytest.raises(TemplateIgnoresMessages):
        analyze_turns("{{ bos_token }}Hello{{ eos_token }}", {"eos_token": "</s>", "bos_token": "<s>"}, ["<s>", "</s>"])


def test_the_static_reading_skips_a_tool_call_turns_opener():
    """Inside the assistant's branch, `{% if message.tool_calls %}` writes content then the call's
    opener: not the end of turn; `{% if not message.tool_calls %}` is the answer, its else the call."""
    from stopdoctor.template.static_turns import read_close

    known = ["<tool_call>", "<|im_end|>", "<|im_start|>"]
    nested = ("{% for m in messages %}{% if m.role == 'assistant' %}{% if m.tool_calls %}{{ m.content + '<tool_call>' }}"
              "{% for c in m.tool_calls %}{{ c.name }}{% endfor %}{{ '<|im_end|>' }}{% else %}{{ m.content + '<|im_end|>' }}"
              "{% endif %}{% else %}{{ '<|im_start|>' + m.content + '<|im_end|>' }}{% endif %}{% endfor %}")
    assert read_close(nested, {}, known, "test").marker == "<|im_end|>"
    negated = nested.replace("{% if m.tool_calls %}{{ m.content + '<tool_call>' }}{% for c in m.tool_calls %}{{ c.name }}"
                             "{% endfor %}{{ '<|im_end|>' }}{% else %}{{ m.content + '<|im_end|>' }}{% endif %}",
                             "{% if not m.tool_calls %}{{ m.content + '<|im_end|>' }}{% else %}{{ m.content + '<tool_call>' }}"
                             "{% endif %}")
    assert negated != nested and read_close(negated, {}, known, "test").marker == "<|im_end|>"
