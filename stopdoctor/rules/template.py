"""SD2xx: the chat template — present, closing its turns, written in this vocabulary's tokens."""

from __future__ import annotations

import re

from stopdoctor.analysis.core import Analysis
from stopdoctor.core.types import Location
from stopdoctor.core.findings import Severity
from stopdoctor.template.turns import render_in_shape
from stopdoctor.rules.registry import Rule, rule

# Marker-shaped text in a rendered prompt: <|...|>, <...>, [INST]-style. Used only to list
# evidence next to an end-of-turn marker that is not a special token.
MARKER = re.compile(r"<\|[^<>|\s]{1,40}\|>|<[a-z_]{3,30}>|</s>")


@rule("SD201", "template-token-not-special", Severity.ERROR)
def template_token_not_special(analysis: Analysis, self: Rule):
    """The template's end-of-turn marker is not one special token of this vocabulary.

    What it checks:
    Encodes the end-of-turn marker the template writes with the model's own tokenizer.

    Why it matters:
    The model was trained on another vocabulary's marker (another family's template, e.g. ChatML
    on a Llama-3 tokenizer): the text splits into ordinary pieces, the model cannot produce it as
    one token, and no stop id can ever match it.

    Example:
    `<|im_end|>` on a Llama-3 vocabulary encodes as `<`, `|`, `im`, `_end`, `|>`.

    Fix:
    Use the template that belongs to this tokenizer, or add the marker as a special token and
    fine-tune the model on it.
    """
    facts = analysis.facts
    template = facts.template
    for marker in analysis.end_of_turn:
        if marker.single_special or not marker.known or marker.kind == "text":  # a plain-text header is text by design
            continue
        if marker.text in (facts.token_text("eos"),):
            continue
        others = sorted({m for m in MARKER.findall(template.source if template else "") if (i := facts.vocab.id_of(m)) is None
                         or not facts.vocab.is_special(i)} - {marker.text})
        message = (f"the template ends turns with {marker.text!r}, which this tokenizer encodes as "
                   f"{len(marker.ids)} ordinary tokens {list(marker.ids)}")
        if others:
            message += f"; other markers it writes that are not special tokens: {', '.join(others[:6])}"
        yield self.finding(message, "use the chat template made for this tokenizer (or add the marker as a special token and fine-tune on it)",
                           template.location if template else None, end_of_turn=marker.text, ids=list(marker.ids), other_markers=others)


@rule("SD202", "template-never-closes-turn", Severity.ERROR)
def template_never_closes_turn(analysis: Analysis, self: Rule):
    """The template writes nothing after assistant content.

    What it checks:
    Renders a two-round conversation and looks at what follows the assistant's content.

    Why it matters:
    With no end-of-turn after the answer, fine-tuning never teaches the model to stop, and no
    runtime has a marker to stop on.

    Example:
    `{% for m in messages %}{{ m.role }}: {{ m.content }}\\n{% endfor %}` with nothing closing the
    assistant turn before the next `user:`.

    Fix:
    Close every assistant turn with the eos / end-of-turn token: `{{ message.content + eos_token }}`.
    """
    template = analysis.facts.template
    if template is not None and analysis.ignores_messages:
        yield self.finding("the chat template never writes the conversation's messages, so it has no turns to close",
                           "use a chat template that writes each message and closes assistant turns with the end-of-turn token",
                           template.location)
    elif template is not None and not analysis.end_of_turn:
        yield self.finding("the chat template writes nothing after assistant content: there is no end-of-turn to stop on",
                           "close assistant turns with the end-of-turn token, e.g. {{ message['content'] + eos_token }}",
                           template.location)


@rule("SD203", "no-chat-template", Severity.WARNING)
def no_chat_template(analysis: Analysis, self: Rule):
    """The model ships no chat template.

    What it checks:
    tokenizer_config.json `chat_template`, chat_template.jinja/.json, GGUF `tokenizer.chat_template`.

    Why it matters:
    Runtimes then fall back to a default or refuse chat requests; an instruct model prompted
    without its template often never emits its end-of-turn token. Warning on instruct-looking
    models, info on base models (which should be used as completion models).

    Example:
    An instruct fine-tune saved without `tokenizer.chat_template`.

    Fix:
    Add the template the model was trained with (tokenizer_config.json `chat_template` or
    chat_template.jinja); for a base model, use a completion endpoint.
    """
    facts = analysis.facts
    if facts.templates:
        return
    if not facts.is_gguf and "tokenizer_config.json" not in facts.documents:
        yield self.finding("no chat template found, and tokenizer_config.json is missing, where it would be",
                           "add tokenizer_config.json (with chat_template) or chat_template.jinja",
                           Location("tokenizer_config.json", "chat_template"), severity=Severity.INFO)
        return
    kind = analysis.verdict.kind if analysis.verdict else "unknown"
    severity = Severity.WARNING if kind == "instruct" else Severity.INFO
    where = (Location(next(iter(facts.source.files)), "tokenizer.chat_template") if facts.is_gguf
             else Location("tokenizer_config.json", "chat_template"))
    yield self.finding(
        f"no chat template ({'an instruct model needs one' if kind == 'instruct' else 'fine for a ' + kind + ' model used for completion'})",
        "add the chat template the model was trained with" if kind == "instruct" else "use a completion endpoint, or add a template only after chat fine-tuning",
        where, severity=severity, verdict=kind)


@rule("SD204", "double-bos", Severity.WARNING)
def double_bos(analysis: Analysis, self: Rule):
    """The template writes bos and the tokenizer adds bos too.

    What it checks:
    Whether the rendered prompt starts with the bos text, and whether the tokenizer prepends bos
    (tokenizer_config.json `add_bos_token`, tokenizer.json post-processor, GGUF add_bos_token).

    Why it matters:
    Encoding the rendered prompt with special tokens yields two bos tokens, a sequence the model
    never saw in training; quality drops and some models misbehave at the turn boundaries.

    Example:
    Gemma's template writes `<bos>` and its tokenizer adds `<bos>`: `[2, 2, 106, ...]`.

    Fix:
    Encode templated prompts with `add_special_tokens=False` (what `apply_chat_template(tokenize=True)`
    does), or set `add_bos_token` to false.
    """
    facts = analysis.facts
    if analysis.writes_bos and facts.add_bos is not None and facts.add_bos.value:
        bos = facts.token_text("bos")
        yield self.finding(
            f"the template writes {bos} and the tokenizer adds {bos} too ({facts.add_bos.location})",
            "encode the rendered prompt with add_special_tokens=False, or set add_bos_token false",
            facts.template.location if facts.template else None, bos=bos, add_bos=str(facts.add_bos.location))


@rule("SD205", "template-ignores-generation-prompt", Severity.WARNING)
def template_ignores_generation_prompt(analysis: Analysis, self: Rule):
    """The template renders the same prompt with and without add_generation_prompt.

    What it checks:
    Renders one user message with add_generation_prompt true and false.

    Why it matters:
    Either the assistant header is always written (training data then ends with an open turn and
    `continue_final_message` breaks), or it is never written and the model continues the user's
    text instead of answering.

    Example:
    A Qwen1.5 template that writes `<|im_start|>assistant\\n` after every user turn.

    Fix:
    Guard the assistant header with `{% if add_generation_prompt %}`.
    """
    facts = analysis.facts
    template = facts.template
    if template is None or not analysis.end_of_turn or analysis.turns is None or analysis.turns.static is not None:
        return  # a structure read statically: no plain conversation renders to compare
    specials = facts.special_token_texts()
    messages = [{"role": "user", "content": "Hello"}]
    with_prompt = render_in_shape(analysis.turns, template.source, messages, specials, add_generation_prompt=True)
    without = render_in_shape(analysis.turns, template.source, messages, specials, add_generation_prompt=False)
    # Llama-2/Mistral templates have no assistant header at all: the same output either way is
    # their design. The defect is a turn opened after the user's end-of-turn even when not asked for.
    marker = analysis.end_of_turn[0].text
    if with_prompt == without and marker in without:
        opened = without[without.rindex(marker) + len(marker):].strip()
        if opened:
            yield self.finding(
                f"the template ignores add_generation_prompt: it always ends with an opened turn {opened!r}",
                "wrap the assistant header in {% if add_generation_prompt %} … {% endif %}", template.location, header=opened)


@rule("SD207", "template-renders-no-conversation", Severity.WARNING)
def template_renders_no_conversation(analysis: Analysis, self: Rule):
    """The chat template renders no plain user/assistant conversation; its end of turn was read from its source.

    What it checks:
    Every sentinel conversation (content as text or parts, no tools, an empty list, a sample
    tool) failed to render, so the end of turn was read from the template's syntax tree
    (`inspect` JSON `turn_static`): a filter or variable Jinja lacks, a value every conversation
    leaves undefined, or the template's own raise_exception for a plain conversation.

    Why it matters:
    transformers' `apply_chat_template`, vLLM and TGI render templates with Jinja too: a filter
    Jinja lacks or an undefined value fails for every chat request. A template that raises on
    purpose (firefunction-v1 wants a `functions` message after the system one) only needs callers
    to send that message (info). Either way the end of turn was not seen rendered, only read.

    Example:
    `{{ message['content'] | regex_replace('\\s+$', '') }}`: Jinja has no `regex_replace`.

    Fix:
    Use standard Jinja filters and guard optional values (`{% if x is defined %}`); for a template
    that needs a special message, document it for every caller.
    """
    template, turns = analysis.facts.template, analysis.turns
    if template is None or turns is None or turns.static is None:
        return
    on_purpose = turns.static.startswith("chat template raised")
    yield self.finding(
        f"no plain conversation renders ({turns.static}); the end of turn was read from the template's source",
        "send the messages the template asks for (it raises on purpose)" if on_purpose else
        "use standard Jinja filters and guard optional values, so transformers and servers can render it",
        template.location, severity=Severity.INFO if on_purpose else None, reason=turns.static)


@rule("SD206", "templates-differ", Severity.INFO)
def templates_differ(analysis: Analysis, self: Rule):
    """The model stores its default template in more than one place, with different text.

    What it checks:
    chat_template.jinja, tokenizer_config.json `chat_template` and chat_template.json.

    Why it matters:
    Loaders prefer different files (transformers takes chat_template.jinja, processors
    chat_template.json), so two runtimes may render different prompts.

    Example:
    A Qwen2-VL fine-tune with the template in tokenizer_config.json and chat_template.json.

    Fix:
    Keep one copy (chat_template.jinja) and delete the others.
    """
    defaults = [t for t in analysis.facts.templates if t.name == "default"]
    if len(defaults) > 1:
        differing = {t.source for t in defaults}
        places = ", ".join(str(t.location) for t in defaults)
        yield self.finding(
            f"the default template is stored {len(defaults)} times ({places})" + ("; the copies differ" if len(differing) > 1 else ", identically"),
            "keep a single chat_template.jinja", defaults[0].location,
            severity=Severity.WARNING if len(differing) > 1 else Severity.INFO, places=[str(t.location) for t in defaults])
