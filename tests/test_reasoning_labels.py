"""SD606 thought-training-mismatch: reasoning rows whose thought is trained without its close
marker, or whose earlier turns keep thoughts the model's template drops (fixtures/reasoning.py)."""

from __future__ import annotations

import json

from fixtures.reasoning import HYBRID, build_reasoning
from fixtures.synth import build_family
from stopdoctor.labels.result import LabelSettings
from stopdoctor.api import check_labels
from stopdoctor.core.types import ChatTemplate, Location

# A training template that writes every turn's thought (no history stripping) and whose
# {% generation %} blocks cover the thought's text, the answer and the end of turn.
_TRAINING = (
    "{%- for message in messages %}"
    "{%- if message.role == 'assistant' %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if message.reasoning_content %}{{- '<think>\\n' }}{% generation %}{{- message.reasoning_content + '\\n' }}"
    "{% endgeneration %}CLOSE{%- endif %}"
    "{% generation %}{{- message.content + '<|im_end|>' }}{% endgeneration %}{{- '\\n' }}"
    "{%- else %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}{%- endif %}"
    "{%- endfor %}"
)
CLOSE_MASKED = _TRAINING.replace("CLOSE", "{{- '</think>\\n\\n' }}")
CLOSE_TRAINED = _TRAINING.replace("{% endgeneration %}CLOSE", "{{- '</think>\\n\\n' }}{% endgeneration %}")


def _data(tmp_path, rows):
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(path)


ONE_TURN = {"messages": [{"role": "user", "content": "What is 17*24?"},
                         {"role": "assistant", "content": "408.", "reasoning_content": "17*20=340, 17*4=68."}]}
TWO_TURNS = {"messages": [{"role": "user", "content": "Hi"},
                          {"role": "assistant", "content": "Hello!", "reasoning_content": "A greeting."},
                          {"role": "user", "content": "What is 17*24?"},
                          {"role": "assistant", "content": "408.", "reasoning_content": "17*20=340, 17*4=68."}]}


def _sd606(folder, data, **settings):
    result = check_labels(str(folder), data, LabelSettings(**settings))
    return [f for f in result.findings if f.code == "SD606"], result


def _template(source):
    return ChatTemplate("training.jinja", source, Location("training.jinja"))


def test_close_masked_after_a_trained_thought(tmp_path):
    folder = build_reasoning("hybrid", tmp_path / "m")
    found, result = _sd606(folder, _data(tmp_path, [ONE_TURN]), collator="assistant-only",
                           template=_template(CLOSE_MASKED))
    assert [(f.severity.label, "</think> is masked" in f.message) for f in found] == [("error", True)]
    assert result.labels.thought_examples("close_untrained") == [0]
    ok, _ = _sd606(folder, _data(tmp_path, [ONE_TURN]), collator="assistant-only", template=_template(CLOSE_TRAINED))
    assert ok == []


def test_earlier_turns_keep_thoughts_the_template_drops(tmp_path):
    folder = build_reasoning("hybrid", tmp_path / "m")
    data = _data(tmp_path, [TWO_TURNS, ONE_TURN])
    found, _ = _sd606(folder, data, collator="full", template=_template(CLOSE_TRAINED))
    assert len(found) == 1 and "train/inference mismatch" in found[0].message and found[0].evidence["examples"] == [0]
    own, result = _sd606(folder, data, collator="full")  # the model's own template drops them
    assert own == [] and result.labels.thought_examples("earlier_kept") == []
    assert [e.thoughts.thoughts for e in result.labels.examples] == [1, 1]


def test_thoughts_written_in_content(tmp_path):
    folder = build_reasoning("hybrid", tmp_path / "m")
    row = {"messages": [{"role": "user", "content": "Hi"},
                        {"role": "assistant", "content": "<think>\nA greeting.\n</think>\n\nHello!"}]}
    found, result = _sd606(folder, _data(tmp_path, [row]), collator="full")
    assert found == [] and result.labels.examples[0].thoughts.thoughts == 1


def test_chat_model_with_think_text_is_not_judged(tmp_path):
    folder = build_family("chatml", tmp_path / "m")
    row = {"messages": [{"role": "user", "content": "Hi"},
                        {"role": "assistant", "content": "<think>\nA greeting.\n</think>\n\nHello!"},
                        {"role": "user", "content": "Bye"}, {"role": "assistant", "content": "Bye!"}]}
    found, result = _sd606(folder, _data(tmp_path, [row]), collator="full")
    assert found == [] and result.labels.examples[0].thoughts is None


def test_hybrid_template_is_what_the_fixture_says():
    assert "loop.last and reasoning" in HYBRID  # the model's template keeps only the last turn's thought
