"""Render chat templates the way transformers does, inside the sandbox.

- `compile_template` / `render_chat`: a renderer whose output is byte-identical to
  `tokenizer.apply_chat_template(..., tokenize=False)` for the same messages and special tokens;
  `ChatRenderer` renders many conversations with one template (labels: a whole dataset).
- Inputs are prepared as apply_chat_template prepares them (plain JSON data, reasoning fields
  aliased, `continue_final_message`); errors of any kind become one-line `TemplateError`s that
  name the template line.

The environment is `template.environment` (transformers' globals and filters, metered); the
limits are `template.limits` (`RenderLimits`, `render_deadline`).

Imports: the standard library, `stopdoctor.core.errors`, `stopdoctor.template.limits`; jinja2 and
`stopdoctor.template.environment` when a template is first compiled (a model without a chat
template never pays for jinja2). Never transformers or torch: this is on the static `inspect` /
`render` / `probe-stop` path.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import field
from typing import TYPE_CHECKING, Any

from stopdoctor.core.errors import InputError, TemplateError
from stopdoctor.core.records import record
from stopdoctor.template.limits import (
    LimitExceeded,
    RenderLimits,
    TemplateLimitError,
    charged,
    metering,
    render_budget,
)

if TYPE_CHECKING:  # pragma: no cover
    import jinja2

__all__ = [
    "ChatRenderer",
    "CompiledTemplate",
    "TemplateIgnoresMessages",
    "TemplateRaisedError",
    "check_template_size",
    "compile_template",
    "render_chat",
]


class TemplateRaisedError(TemplateError):
    """The template called its own `raise_exception(message)`: it rejects this conversation."""


class TemplateIgnoresMessages(TemplateError):
    """The template renders, but the conversation's content never appears in its output."""


_TEMPLATE_FILENAME = "<template>"


def _template_line(exc: BaseException) -> int | None:
    import jinja2.exceptions

    lineno = getattr(exc, "lineno", None)
    if isinstance(exc, jinja2.exceptions.TemplateSyntaxError) and lineno:
        return lineno
    line = None
    tb = exc.__traceback__
    while tb is not None:  # jinja rewrites frames of template code to the template's lines
        if tb.tb_frame.f_code.co_filename == _TEMPLATE_FILENAME:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def _one_line(text: object) -> str:
    return " ".join(str(text).split()) if "\n" in str(text) or "\r" in str(text) else str(text)


def _with_line(message: str, line: int | None) -> str:
    return f"{message} (template line {line})" if line else message


_UNKNOWN_NAME = re.compile(r"No (filter|test) named '([^']{1,60})'")


def _convert(exc: BaseException) -> TemplateError:
    import jinja2.exceptions

    from stopdoctor.template.environment import TemplateRaised

    line = _template_line(exc)
    if isinstance(exc, TemplateRaised):
        message = exc.args[0] if exc.args else ""
        return TemplateRaisedError(
            _with_line(f"chat template raised: {_one_line(message)}", line),
            "the template rejects this conversation (its own raise_exception); "
            "check the roles and order of the messages",
            line,
        )
    unknown = (_UNKNOWN_NAME.match(str(getattr(exc, "message", "") or ""))
               if isinstance(exc, jinja2.exceptions.TemplateAssertionError | jinja2.exceptions.TemplateRuntimeError) else None)
    if unknown is not None:  # valid Jinja, but a filter or test this Jinja (and transformers') lacks
        return TemplateError(
            _with_line(f"chat template uses a {unknown.group(1)} transformers' Jinja lacks: {unknown.group(2)}", line),
            "transformers cannot render it either; replace the filter with a standard Jinja one",
            line,
        )
    if isinstance(exc, jinja2.exceptions.TemplateSyntaxError):
        return TemplateError(
            _with_line(f"chat template syntax error: {_one_line(exc.message or exc)}", line),
            "fix the Jinja syntax of the chat template",
            line,
        )
    if isinstance(exc, SyntaxError):
        # Python's, compiling the code jinja generated (blocks nested past Python's limit): its
        # line number is the generated code's, which means nothing in the template.
        return TemplateLimitError(
            f"chat template nests its blocks too deeply to compile: {_one_line(exc.msg)}",
            "no real chat template nests so deeply; do not use it",
            None,
        )
    if isinstance(exc, jinja2.exceptions.SecurityError):
        return TemplateLimitError(
            _with_line(f"chat template broke the sandbox: {_one_line(exc)}", line),
            "the template touches Python internals; do not use it",
            line,
        )
    if isinstance(exc, LimitExceeded):
        return TemplateLimitError(
            _with_line(f"chat template stopped: {_one_line(exc)}", line),
            "the template loops or builds text without bound; raise RenderLimits only if you trust it",
            line,
        )
    if isinstance(exc, (RecursionError, MemoryError, OverflowError)):
        return TemplateLimitError(
            _with_line(f"chat template stopped: {type(exc).__name__}: {_one_line(exc)}", line),
            "the template recursed or grew without bound",
            line,
        )
    if isinstance(exc, jinja2.exceptions.UndefinedError):
        return TemplateError(
            _with_line(f"chat template used an undefined value: {_one_line(exc)}", line),
            "the template expects a variable or message field this conversation lacks",
            line,
        )
    return TemplateError(
        _with_line(f"chat template failed: {type(exc).__name__}: {_one_line(exc)}", line),
        "the template cannot render this conversation",
        line,
    )


@record
class CompiledTemplate:
    """A parsed, instrumented chat template. Render it with `render_chat` (or `.render`)."""

    source: str
    _template: jinja2.Template = field(repr=False, compare=False)

    def render(self, variables: Mapping[str, Any], limits: RenderLimits = RenderLimits(),
               generation_spans: list[tuple[int, int]] | None = None) -> str:
        """Render with exactly these template variables, within `limits`. When
        `generation_spans` is a list, the (start, end) character span of every
        `{% generation %}` block is appended to it."""
        from stopdoctor.template.environment import GenerationRecorder, recording

        budget = render_budget(limits)
        if budget.out_of_time():  # the shared allowance is spent already
            raise _convert(LimitExceeded(budget.overdue))
        recorder = GenerationRecorder() if generation_spans is not None else None
        chunks: list[str] = []
        total = 0
        with charged(budget), metering(budget), recording(recorder):
            generator = self._template.generate(**variables)
            try:
                for chunk in generator:
                    total += len(chunk)
                    if total > limits.max_output_chars:
                        raise TemplateLimitError(
                            f"chat template stopped: output over {limits.max_output_chars} characters",
                            "the template writes without bound; raise RenderLimits only if you trust it",
                        )
                    budget.tick()
                    chunks.append(chunk)
                    if recorder is not None:
                        recorder.offset = total
            except LimitExceeded as exc:  # from the tick() above, outside the template
                raise _convert(exc) from exc
            except TemplateError:
                raise
            except Exception as exc:  # anything the untrusted template does is its error
                raise _convert(exc) from exc
            finally:
                generator.close()  # type: ignore[attr-defined]  # jinja types generate() as an Iterator: it is a generator
        if recorder is not None and generation_spans is not None:
            generation_spans.extend(recorder.spans)
        return "".join(chunks)


@functools.lru_cache(maxsize=64)
def _compile_cached(source: str) -> CompiledTemplate:
    from stopdoctor.template.environment import sandbox_environment

    try:
        template = sandbox_environment().from_string(source)
    except Exception as exc:  # syntax errors, nesting too deep for the parser
        raise _convert(exc) from exc
    # A ChainMap over the environment's globals, copied into every render's context: flattened
    # once (the environment's globals never change after it is built).
    template.globals = dict(template.globals)
    return CompiledTemplate(source, template)


def compile_template(source: str, limits: RenderLimits = RenderLimits()) -> CompiledTemplate:
    """Parse a chat template into the sandbox. Cached by source text."""
    if not isinstance(source, str):
        raise TemplateError(
            f"chat template must be a string, got {type(source).__name__}",
            "a tokenizer_config.json chat_template list of named templates must be resolved to one first",
        )
    check_template_size(source, limits)
    return _compile_cached(source)


def check_template_size(source: str, limits: RenderLimits = RenderLimits()) -> None:
    """Refuse a source too long, or with too many tags, to be a plausible chat template."""
    if len(source) > limits.max_template_chars:
        raise TemplateLimitError(
            f"chat template is {len(source)} characters, over the {limits.max_template_chars} limit",
            "this is not a plausible chat template; raise RenderLimits.max_template_chars if you trust it",
        )
    tags = _tag_count(source)
    if tags > limits.max_template_tags:
        raise TemplateLimitError(
            f"chat template has {tags} Jinja tags, over the {limits.max_template_tags} limit",
            "this is not a plausible chat template; raise RenderLimits.max_template_tags if you trust it",
        )


_TAG_RE = re.compile(r"\{[{%]")


@functools.lru_cache(maxsize=64)
def _tag_count(source: str) -> int:
    return len(_TAG_RE.findall(source))


# Names a message's reasoning is passed under (transformers `_REASONING_FIELDS`).
_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")
_CONTINUE_TAG = "CONTINUE_FINAL_MESSAGE_TAG "  # transformers' `continue_final_message_tag`
_RESERVED = frozenset({"messages", "tools", "documents", "add_generation_prompt"})


class _LoneSurrogate(Exception):
    """A lone surrogate found while copying inputs; the caller says which input held it."""


def _plain(value: Any) -> Any:
    """transformers' `_plain_template_data`: rebuild inputs out of plain JSON types, and replace
    any other object by an inert `<TypeName>` placeholder, so the template sees no methods.
    Raises _LoneSurrogate on a string (or key) holding a lone surrogate: no tokenizer encodes it."""
    kind = type(value)
    if kind is str:
        if not value.isascii() and (found := _SURROGATE.search(value)):  # isascii: a C-speed scan
            raise _LoneSurrogate(found.group())
        return value
    if value is None or kind in (int, float, bool):
        return value
    if kind is dict:
        return {_plain(key): _plain(item) for key, item in value.items()}
    if kind is list:
        return [_plain(item) for item in value]
    if isinstance(value, str):
        return _plain(str.__str__(value))
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, Mapping):
        return {_plain(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, tuple):
        return tuple(_plain(item) for item in value)
    if (type(value).__module__ == "numpy" and type(value).__name__ != "ndarray"
            and getattr(value, "shape", None) == () and callable(getattr(value, "item", None))):
        # numpy scalars (np.generic): `np.bool_(False)` must not become a truthy placeholder
        return _plain(value.item())
    return f"<{type(value).__name__}>"


def _plain_input(what: str, value: Any) -> Any:
    try:
        return _plain(value)
    except _LoneSurrogate as exc:
        raise InputError(f"{what} holds a lone surrogate (\\u{ord(exc.args[0]):04x}), which is not Unicode text",
                         "undecodable bytes (not UTF-8) or a bad \\u escape; no tokenizer can encode it") from None
    except RecursionError:
        raise InputError(f"{what} is nested too deeply to be template data",
                         "chat messages, tools and documents are a few levels of lists and objects") from None


_SURROGATE = re.compile("[\ud800-\udfff]")


def _plain_chat(messages: Any) -> list[dict]:
    """apply_chat_template's message preparation in one pass: drop keys whose value is None, copy
    into plain data (`_plain`), alias the reasoning fields (`_alias_reasoning_fields`)."""
    if not isinstance(messages, (list, tuple)) or not messages:
        raise InputError("cannot render an empty conversation", "give at least one message")
    chat = []
    for message in messages:
        if not isinstance(message, Mapping):
            raise InputError(f"chat messages must be dicts, got {type(message).__name__}", None)
        chat.append({k: v for k, v in message.items() if v is not None})
    chat = _plain_input("a message", chat)
    for number, message in enumerate(chat):
        reasoning = next((message[k] for k in _REASONING_FIELDS if message.get(k) is not None), None)
        if reasoning is not None:
            chat[number] = {"thinking": reasoning, **message, "reasoning_content": reasoning}
    return chat


class ChatRenderer:
    """`render_chat` for many conversations: the template, special tokens and extra variables
    are checked and prepared once; `render` does the per-conversation part."""

    def __init__(self, source: str, *, special_tokens: Mapping[str, str] | None = None,
                 extra: Mapping | None = None, limits: RenderLimits = RenderLimits()) -> None:
        self.source = source
        self.limits = limits
        self.compiled = compile_template(source, limits)
        clash = _RESERVED & set(extra or {})
        if clash:
            raise InputError(f"extra template variables clash with {sorted(clash)}", None)
        # apply_chat_template: `{**special_tokens_map, **kwargs}`
        variables = _plain_input("a special token", {
            k: str(v) for k, v in (special_tokens or {}).items() if v is not None})
        variables.update(_plain_input("a template variable", dict(extra or {})))
        self.variables = variables

    def render(
        self,
        messages: list[dict],
        *,
        add_generation_prompt: bool = False,
        continue_final_message: bool | str = False,
        tools: list[dict] | None = None,
        documents: Any = None,
        generation_spans: list[tuple[int, int]] | None = None,
    ) -> str:
        """See `render_chat`."""
        if continue_final_message and add_generation_prompt:
            raise InputError(
                "continue_final_message and add_generation_prompt cannot both be set",
                "continue the final message, or start a new assistant turn, not both",
            )
        if tools is not None and not all(isinstance(tool, dict) for tool in tools):
            raise InputError("tools must be JSON-schema dicts", "convert functions to schemas first")
        if documents is not None and not all(isinstance(doc, dict) for doc in documents):
            raise InputError("documents must be dicts with 'title' and 'text' keys", None)
        if continue_final_message and generation_spans is not None:
            raise InputError("continue_final_message cannot be combined with generation spans",
                             "transformers refuses it with return_assistant_tokens_mask too")
        chat = _plain_chat(messages)
        tools = _plain_input("a tool", tools)
        documents = _plain_input("a document", documents)
        source = self.source

        final_text = None
        if continue_final_message:
            key = continue_final_message if isinstance(continue_final_message, str) else "content"
            final_text = chat[-1].get(key)
            if final_text is None:
                raise InputError(f'continue_final_message is set but the final message has no "{key}"', None)
            fields = [key]
            if key in _REASONING_FIELDS:
                fields = [f for f in _REASONING_FIELDS if chat[-1].get(f) == final_text]
            if not any(f in source for f in fields):
                raise TemplateError(
                    f'continue_final_message is set to "{key}" but the chat template never reads that field',
                    "continue a field the template renders",
                )
            if isinstance(final_text, (list, tuple)):
                for block in reversed(final_text):
                    if "text" in block:
                        final_text = block["text"]
                        block["text"] = block["text"] + _CONTINUE_TAG
                        break
                else:
                    raise InputError("continue_final_message is set but the final message has no text block", None)
            else:
                for f in fields:
                    chat[-1][f] = chat[-1][f] + _CONTINUE_TAG

        rendered = self.compiled.render(
            {
                **self.variables,
                "messages": chat,
                "tools": tools,
                "documents": documents,
                "add_generation_prompt": add_generation_prompt,
            },
            self.limits,
            generation_spans,
        )

        if not rendered.isascii() and (found := _SURROGATE.search(rendered)):
            raise TemplateLimitError(
                f"chat template wrote a lone surrogate (\\u{ord(found.group()):04x}), which is not Unicode text",
                "a \\ud800-style escape in the template; no tokenizer can encode its output",
            )
        if continue_final_message:
            tag = _CONTINUE_TAG.strip()
            if str(final_text).strip() not in rendered or tag not in rendered:
                raise TemplateError(
                    "continue_final_message is set but the final message does not appear in the rendered chat",
                    "the template deletes part of the final message; it cannot be continued",
                )
            at = rendered.rindex(tag)
            if rendered[at: at + len(_CONTINUE_TAG)] == _CONTINUE_TAG:
                rendered = rendered[:at]  # the template keeps spacing
            else:
                rendered = rendered[:at].rstrip()  # trailing spacing was trimmed; be cautious
        return rendered


def render_chat(
    source: str,
    messages: list[dict],
    *,
    add_generation_prompt: bool = False,
    continue_final_message: bool | str = False,
    tools: list[dict] | None = None,
    documents: Any = None,
    special_tokens: Mapping[str, str] | None = None,
    extra: Mapping | None = None,
    limits: RenderLimits = RenderLimits(),
    generation_spans: list[tuple[int, int]] | None = None,
) -> str:
    """Render `messages` as `tokenizer.apply_chat_template(messages, tokenize=False, ...)` would.

    `special_tokens` maps bos_token/eos_token/pad_token/unk_token/... to their texts; they become
    template variables, and `extra` entries override them (as apply_chat_template's kwargs do).
    `continue_final_message` (True, or the name of the field to continue) leaves the final message
    open: whatever the template writes after its content is cut off.
    `generation_spans`, when a list, receives the character span of every `{% generation %}`
    block (transformers' `return_assistant_tokens_mask` spans; not with continue_final_message).
    Rendering many conversations with one template: `ChatRenderer`.
    """
    return ChatRenderer(source, special_tokens=special_tokens, extra=extra, limits=limits).render(
        messages, add_generation_prompt=add_generation_prompt, continue_final_message=continue_final_message,
        tools=tools, documents=documents, generation_spans=generation_spans)
