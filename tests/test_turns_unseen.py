"""Turn structure on template shapes the first corpus never showed (issue #22 §1): each shape
comes from a real template of a collection measured apart (tests/data/fresh_template_labels.json)
or from the class the issue names, reduced to the lines that matter.
"""

from __future__ import annotations

import json
from pathlib import Path

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
