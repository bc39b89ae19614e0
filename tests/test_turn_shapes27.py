"""Template shapes still misread (issue #27 §3), each reduced from a real template to the lines
that matter (the source named beside it), or built from the test corpora, and each failed before
its fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fixtures.reasoning import HARMONY, build_reasoning
from stopdoctor.api import inspect_model
from stopdoctor.template.turns import analyze_turns


def _with_template(folder: Path, template: str) -> Path:
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["chat_template"] = template
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


# Unsloth's gpt-oss template (unsloth/gpt-oss-20b, "Chat template fixes by Unsloth") closes the final
# answer of a training conversation with <|end|>, where OpenAI's writes <|return|>.
UNSLOTH_HARMONY = HARMONY.replace("message.content + '<|return|>' }}", "message.content + '<|end|>' }}")


def test_harmony_has_one_answer_in_json_and_text(tmp_path):
    """<|end|> closes the thought; the reasoning section says never to stop on it. The end of turn,
    the reasoning stops and the findings must say the same: <|return|> (and <|call|>). Before:
    end of turn none (SD202), the reasoning asked to stop on <|end|> (SD150) while saying never to."""
    from stopdoctor.reporters.human import render_inspect_human
    from stopdoctor.reporters.inspect_json import render_inspect_json

    assert UNSLOTH_HARMONY != HARMONY
    folder = _with_template(build_reasoning("harmony", tmp_path / "m"), UNSLOTH_HARMONY)
    result = inspect_model(str(folder))
    analysis = result.analysis
    vocab = analysis.facts.vocab
    assert [m.text for m in analysis.end_of_turn] == ["<|return|>"]
    assert analysis.reasoning.stop_texts == ("<|return|>", "<|call|>")
    assert not [f for f in result.findings if f.code in ("SD150", "SD202", "SD101")]
    document = json.loads(render_inspect_json(result))
    assert [e["text"] for e in document["end_of_turn"]] == ["<|return|>"]
    assert document["reasoning"]["stop_ids_needed"] == [vocab.id_of("<|return|>"), vocab.id_of("<|call|>")]
    assert vocab.id_of("<|end|>") not in document["reasoning"]["stop_ids_needed"]
    text = render_inspect_human(result, width=200)
    assert "end of turn  <|return|>" in text and "stop on <|end|>" not in text


# microsoft/Phi-4-mini-reasoning's template, whole: a fixed system block closed by <|end|>, every
# message closed by the same role-generic <|end|>, and eos_token once, after the last message.
PHI4_MINI_REASONING = (
    "{{ '<|system|>Your name is Phi, an AI math expert developed by Microsoft.' }}{% for message in messages %}"
    "{% if message['role'] == 'system' %} {{ message['content'] }}{% if 'tools' in message and message['tools'] is not none %}"
    "{{ '<|tool|>' + message['tools'] + '<|/tool|>' }}{% endif %}{% endif %}{% endfor %}{{ '<|end|>' }}"
    "{% for message in messages %}{% if message['role'] != 'system' %}{{ '<|' + message['role'] + '|>' + message['content'] + '<|end|>' }}"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>' }}{% else %}{{ eos_token }}{% endif %}"
)
PHI_TOKENS = ["<|system|>", "<|user|>", "<|assistant|>", "<|end|>", "<|endoftext|>", "<|tool|>", "<|/tool|>"]


def test_a_role_generic_closer_is_the_turn_end_not_the_final_eos():
    """Every turn ends <|end|>; eos follows only the conversation's last message. Before: the
    closer shared with the system block was read as part of the next user header, and the final
    eos was taken for the turn's end."""
    turns = analyze_turns(PHI4_MINI_REASONING, {"eos_token": "<|endoftext|>"}, PHI_TOKENS)
    assert (turns.style, [m.text for m in turns.end_of_turn]) == ("token", ["<|end|>"])


# axolotl's command_a.jinja, its no-tools branch: answers are <|START_RESPONSE|>…<|END_RESPONSE|>
# then <|END_OF_TURN_TOKEN|>, and the chatbot header is written after the last message whatever
# add_generation_prompt says.
COMMAND_A = (
    "{{ bos_token }}{% for message in messages %}"
    "{%- if message.role|lower == 'system' %}<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>{{ message.content }}<|END_OF_TURN_TOKEN|>"
    "{%- elif message.role|lower == 'user' %}<|START_OF_TURN_TOKEN|><|USER_TOKEN|>{{ message.content }}<|END_OF_TURN_TOKEN|>"
    "{%- elif message.role|lower == 'assistant' or message.role|lower == 'chatbot' %}"
    "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|><|START_RESPONSE|>{{message.content}}<|END_RESPONSE|><|END_OF_TURN_TOKEN|>"
    "{%- endif %}{%- endfor %}<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>{%- if add_generation_prompt -%}<|START_RESPONSE|>{%- endif %}"
)
COMMAND_A_TOKENS = ["<BOS_TOKEN>", "<|END_OF_TURN_TOKEN|>", "<|START_OF_TURN_TOKEN|>", "<|SYSTEM_TOKEN|>", "<|USER_TOKEN|>",
                    "<|CHATBOT_TOKEN|>", "<|START_RESPONSE|>", "<|END_RESPONSE|>", "<|START_ACTION|>", "<|END_ACTION|>"]


def test_command_a_ends_its_turn_at_the_end_of_turn_token_not_the_response_close():
    """<|END_RESPONSE|> closes the response section the turn opened with <|START_RESPONSE|>: a
    tool-call turn never writes it, so it never ends a turn. Before: it was accepted as an earlier
    token of the same close, so a stop set of <|END_RESPONSE|> alone passed."""
    turns = analyze_turns(COMMAND_A, {"eos_token": "<|END_OF_TURN_TOKEN|>", "bos_token": "<BOS_TOKEN>"}, COMMAND_A_TOKENS)
    assert [m.text for m in turns.end_of_turn] == ["<|END_OF_TURN_TOKEN|>"]
    assert "<|END_RESPONSE|>" not in {m.text for m in turns.also_ends}


# A turn closed only when another follows, its headers plain text: ChatML whose <|im_start|> is
# no special token of the vocabulary (only the eos <|im_end|> is), and a "role: " chat closed by eos.
CLOSED_WHEN_FOLLOWED = {
    "chatml, <|im_end|> the only special": (
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}{% if not loop.last or add_generation_prompt %}"
        "<|im_end|>\n{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
        {"eos_token": "<|im_end|>"}, ["<|im_end|>"], "<|im_end|>"),
    "role labels, eos close": (
        "{% for m in messages %}{{ m.role }}: {{ m.content }}{% if not loop.last or add_generation_prompt %}{{ eos_token }}\n"
        "{% endif %}{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}",
        {"eos_token": "</s>", "bos_token": "<s>"}, ["</s>", "<s>"], "</s>"),
}


@pytest.mark.parametrize("name", sorted(CLOSED_WHEN_FOLLOWED))
def test_a_turn_closed_only_when_another_follows_closes(name):
    """The close is written before the generation prompt too, so it is the first special token of
    the prompt; with plain-text headers it was taken for the opener of every turn, cut away, and
    the template read as never closing (a false SD202). It is the turn's end."""
    source, specials, known, close = CLOSED_WHEN_FOLLOWED[name]
    turns = analyze_turns(source, specials, known)
    assert (turns.style, [m.text for m in turns.end_of_turn]) == ("only-when-followed", [close])


# A template that ignores add_generation_prompt: the assistant's header follows the last message
# whatever the flag says, and nothing but a newline closes a turn.
ALWAYS_HEADER = ("{% for m in messages %}{% if m.role == 'user' %}Human: {{ m.content }}\n{% elif m.role == 'assistant' %}"
                 "Assistant: {{ m.content }}\n{% endif %}{% endfor %}Assistant:")


def test_an_always_written_next_header_is_not_glued_onto_the_close():
    """After the last answer the template writes "\\nAssistant:" (the next prompt), after an earlier
    one "\\nHuman: ": the turn ends at the newline, and the stop is the next user header. Before:
    "Assistant:" (the header the model never writes after its answer) was taken as the end of turn."""
    turns = analyze_turns(ALWAYS_HEADER, {"eos_token": "</s>"}, ["</s>"])
    assert (turns.style, [(m.text, m.kind) for m in turns.end_of_turn]) == ("whitespace", [("Human:", "text")])
