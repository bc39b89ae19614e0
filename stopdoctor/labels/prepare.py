"""Each dataset example rendered to the text a trainer tokenizes, before tokenization: the chat
template applied (with `{% generation %}` spans recorded), TRL's eos appended to plain text, the
completion-only prompt rendered alone, and every assistant turn located in the text with the
end-of-turn marker that follows it.

Imports: core, facts (datasets), template (the renderer, its deadline), labels.result.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from stopdoctor.core.errors import InputError, TemplateError
from stopdoctor.facts.datasets import Example
from stopdoctor.template.limits import render_deadline
from stopdoctor.template.render import ChatRenderer
from stopdoctor.labels.result import LabelSettings


@dataclass
class PreparedExample:
    """One example rendered to text, before tokenization."""

    example: Example
    collator: str
    text: str
    special: bool  # tokenize with the tokenizer's special tokens (plain text) or not (chat)
    prompt_text: str | None = None  # completion-only: the prompt alone
    generation: list[tuple[int, int]] = field(default_factory=list)
    # chat: (message index, content start, content end, end start, end end) in characters;
    # end None when no end-of-turn follows the content
    turns: list[tuple[int, int, int, int | None, int | None]] = field(default_factory=list)
    expected_from: int = 0  # completion-only chat: first message index of the completion
    unlocated: int = 0


def prepare_example(example: Example, renderer: ChatRenderer | None, settings: LabelSettings, eos_text: str | None,
                    eot_res: list[re.Pattern]) -> PreparedExample:
    """`example` rendered as its collator's trainer renders it (`renderer`: the chat template, None
    without one; `eot_res`: the end-of-turn markers looked for after assistant content), within a
    render deadline of its own. An error names the example and its line."""
    try:
        # Each example gets its own render time limit: the command's shared deadline is for the
        # fixed number of renders of the analysis, and a dataset can hold millions of examples.
        with render_deadline(own=True):
            return _prepare(example, renderer, settings, eos_text, eot_res)
    except TemplateError as error:  # a template that rejects one example: say which
        raise type(error)(f"example {example.index} (line {example.line}): {error.message}", error.hint,
                          error.line) from error
    except InputError as error:  # a message the renderer refuses (a lone surrogate): say which
        raise InputError(f"example {example.index} (line {example.line}): {error.message}", error.hint) from error


def _resolve(collator: str, example: Example) -> str:
    if collator != "auto":
        return collator
    return "completion-only" if example.kind == "prompt-completion" else "full"


def _prepare(example: Example, renderer: ChatRenderer | None, settings: LabelSettings, eos_text: str | None,
             eot_res) -> PreparedExample:
    collator = _resolve(settings.collator, example)
    row = example.row
    if not example.conversational:
        if example.kind == "text":
            prompt, body = "", row["text"]
        else:
            prompt, body = row["prompt"], row["completion"]
        if settings.append_eos and eos_text and not body.endswith(eos_text):
            body += eos_text  # TRL add_eos
        prepared = PreparedExample(example, collator, prompt + body, True)
        if collator == "completion-only" and example.kind == "prompt-completion":
            prepared.prompt_text = prompt
        return prepared

    tools = row.get("tools")
    if isinstance(tools, str):
        try:
            tools = json.loads(tools)
        except json.JSONDecodeError as exc:
            raise InputError(f"\"tools\" is not JSON: {exc.msg}") from exc
    if example.kind == "messages":
        messages = row["messages"]
        prompt_messages = messages[:-1] if messages[-1].get("role") == "assistant" else None
    else:
        messages = row["prompt"] + row["completion"]
        prompt_messages = row["prompt"]
    generation: list[tuple[int, int]] = []
    assert renderer is not None  # build.py refuses chat rows when the model has no template (_check_kinds)
    text = renderer.render(messages, tools=tools, generation_spans=generation)
    prepared = PreparedExample(example, collator, text, False, generation=generation)
    if collator == "completion-only":
        if prompt_messages:
            prepared.prompt_text = renderer.render(prompt_messages, tools=tools, add_generation_prompt=True)
            prepared.expected_from = len(prompt_messages)
        else:
            prepared.prompt_text = ""
            prepared.expected_from = len(messages) if prompt_messages is None else 0
    _locate_turns(prepared, messages, eot_res)
    return prepared


def _content_text(message: dict) -> str | None:
    content = message.get("content")
    if isinstance(content, list):  # content blocks: the text blocks, as most templates join them
        content = "".join(b.get("text", "") for b in content if isinstance(b, dict))
    return content.strip() if isinstance(content, str) else None


def _end_after(text: str, end: int, eot_res) -> re.Match | None:
    return next((m for m in (pattern.match(text, end) for pattern in eot_res) if m), None)


def _locate_turns(prepared: PreparedExample, messages: list[dict], eot_res) -> None:
    """Find each message's content in the rendered text, in order, and what follows assistant
    content. An assistant content may also occur in the scaffolding before it (content
    "assistant" and the header `<|im_start|>assistant`): the first occurrence followed by an
    end-of-turn wins, among those before the next message's content."""
    text, cursor = prepared.text, 0
    needles = [_content_text(m) for m in messages]
    for number, (message, needle) in enumerate(zip(messages, needles)):
        expected = message.get("role") == "assistant" and number >= prepared.expected_from
        if needle is None:
            prepared.unlocated += expected
            continue
        at = text.find(needle, cursor) if needle else -1
        if at < 0:
            if not expected:
                continue
            if needle:
                prepared.unlocated += 1
                continue
            at = cursor  # empty content: look for the end-of-turn right here
        match = _end_after(text, at + len(needle), eot_res) if expected else None
        if expected and match is None and needle:
            following = next((n for n in needles[number + 1:] if n), None)
            stop = text.find(following, at + 1) if following else -1
            stop = len(text) if stop < 0 else stop
            other = text.find(needle, at + 1)
            while 0 <= other < stop:
                match = _end_after(text, other + len(needle), eot_res)
                if match is not None:
                    at = other
                    break
                other = text.find(needle, other + 1)
        end = at + len(needle)
        cursor = end
        if not expected:
            continue
        if match is None:
            prepared.turns.append((number, at, end, None, None))
        else:
            prepared.turns.append((number, at, end, _marker_start(match), match.end()))
            cursor = match.end()


def _marker_start(match: re.Match) -> int:
    whitespace = len(match.group(0)) - len(match.group(0).lstrip())
    return match.start() + whitespace
