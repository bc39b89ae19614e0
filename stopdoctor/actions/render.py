"""Plain functions behind `stopdoctor render`: the fully templated prompt exactly as transformers
builds it, and a comparison of two templates on the same messages. No printing, no exiting.

Fidelity contract (transformers 5.x `apply_chat_template`): the text is what
`apply_chat_template(..., tokenize=False)` returns, and the ids are what `tokenize=True` returns,
which is the text encoded with `add_special_tokens=False`. So the ids never gain a BOS the
template did not write; a template that writes `bos_token` while the tokenizer also adds one only
doubles BOS when the text is encoded again with special tokens on (`tokenizer(text)`, or a
llama.cpp server given the rendered text) — `RenderedPrompt.bos` says when that would happen.

Imports: core, facts (model facts, vocabulary), template (the sandbox, turns). The tokenizer comes
from the vocabulary, i.e. the `tokenizers` library. Never transformers or torch: this is the static path.
"""

from __future__ import annotations

import difflib
import json
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import field
from pathlib import Path
from typing import Any, NamedTuple

from stopdoctor.core.errors import InputError, TemplateError
from stopdoctor.core.records import record
from stopdoctor.core.types import ChatTemplate, Location
from stopdoctor.facts.model_facts import MAX_JSON_BYTES, ModelFacts, load_json, load_text, parse_json

# Used when the user gives no messages (the CLI says so on stderr).
SAMPLE_CONVERSATION: list[dict[str, str]] = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is the capital of France?"},
]

# A template line quoted in an error message is cut to this many characters.
_QUOTED_LINE_CHARS = 100


# --------------------------------------------------------------------------------------------
# Inputs: messages, tools, templates
# --------------------------------------------------------------------------------------------


def _conversation(value: Any, where: str) -> list[dict]:
    if isinstance(value, dict) and isinstance(value.get("messages"), list):
        value = value["messages"]
    if not isinstance(value, list) or not value or not all(isinstance(m, dict) for m in value):
        raise InputError(
            f"{where}: expected a non-empty list of messages ({{\"role\": ..., \"content\": ...}})",
            hint='e.g. [{"role": "user", "content": "Hi"}]',
        )
    return value


def load_conversations(path: str | Path) -> list[list[dict]]:
    """Read messages: a JSON list of messages (one conversation), a JSON list of such lists, an
    object with "messages", or JSONL with one conversation (list or {"messages": [...]}) a line."""
    path = Path(path)
    text = load_text(path, path.name, max_bytes=MAX_JSON_BYTES)
    try:
        data = parse_json(text, path.name, hint=None)
    except InputError as error:
        if not isinstance(error.__cause__, json.JSONDecodeError):
            raise
        conversations = []
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            where = f"{path.name} line {number}"
            try:
                item = parse_json(line, where, hint=None)
            except InputError as line_error:
                if isinstance(line_error.__cause__, json.JSONDecodeError):
                    raise InputError(
                        f"{path.name}: line {number} is not JSON: {line_error.__cause__.msg}",
                        hint="give a JSON list of messages, or JSONL with one conversation a line",
                    ) from line_error
                raise
            conversations.append(_conversation(item, where))
        if not conversations:
            raise InputError(f"{path.name}: holds no conversation") from None
        return conversations
    if isinstance(data, list) and data and all(isinstance(item, (list, dict)) for item in data) and all(
        isinstance(item, list) or "messages" in item for item in data
    ):
        return [_conversation(item, f"{path.name} item {i}") for i, item in enumerate(data)]
    return [_conversation(data, path.name)]


def load_tools(path: str | Path) -> list[dict]:
    """A JSON list of tool schemas (or one schema)."""
    path = Path(path)
    data = load_json(path, path.name)
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list) or not all(isinstance(tool, dict) for tool in data):
        raise InputError(f"{path.name}: expected a JSON list of tool schemas")
    return data


def special_token_map(facts: ModelFacts) -> dict[str, str]:
    """The named special tokens a template sees (`bos_token`, `eos_token`, ...)."""
    return facts.special_token_texts()


# The roles chat formats define: OpenAI's (system, developer, user, assistant, tool, function),
# Llama 3.1's ipython, GLM's observation, Gemma's model, and tool_response/tool_call.
KNOWN_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function", "ipython", "observation",
                         "model", "tool_response", "tool_call"})


def check_typed_roles(template: ChatTemplate | None, messages: Sequence[dict]) -> None:
    """Refuse a role typed on the command line (`-m usr …`) that no chat format defines and the
    template never names: many templates write any role as it is (`<|im_start|>usr`), so a typo
    would render without a word. A file's roles are the user's data and are left alone."""
    import re

    named = set(re.findall(r"['\"]([A-Za-z_][\w-]{0,40})['\"]", template.source)) if template is not None else set()
    for message in messages:
        role = message.get("role")
        if not isinstance(role, str) or role in KNOWN_ROLES or role in named:
            continue
        known = sorted(KNOWN_ROLES | message_roles(template))
        close = difflib.get_close_matches(role, known, n=1, cutoff=0.6)
        guess = f" (did you mean {close[0]!r}?)" if close else ""
        raise InputError(f"-m {role}: no chat format has the role {role!r} and the template never names it{guess}",
                         hint="roles: system, user, assistant, tool (and any role the template names); "
                              "a --messages file's roles are taken as they are")


def message_roles(template: ChatTemplate | None) -> set[str]:
    """Roles a template compares against by name (`message.role == 'x'`, `role == "x"`)."""
    import re

    if template is None:
        return set()
    return set(re.findall(r"role['\"\]]*\s*(?:==|!=)\s*['\"]([A-Za-z_][\w-]{0,40})['\"]", template.source))


def select_template(facts: ModelFacts, template: str | None = None, tools: list[dict] | None = None) -> ChatTemplate:
    """The template transformers' `get_chat_template` would pick: a named one, the `tool_use`
    template when tools are given, else the default. `template` may also be a file (a .jinja
    text, or a JSON file with a "chat_template" key such as tokenizer_config.json)."""
    names = {t.name: t for t in reversed(facts.templates)}  # first of each name wins
    if template is None:
        if tools is not None and "tool_use" in names:
            return names["tool_use"]
        if facts.template is None:
            raise InputError(
                f"{facts.source.spec}: has no chat template",
                hint="pass one with --template FILE; a base model has no chat format",
            )
        return facts.template
    if template in names:
        return names[template]
    path = Path(template).expanduser()
    if path.is_file():
        return template_from_file(path)
    known = ", ".join(sorted(names)) or "none"
    raise InputError(
        f"--template {template}: not a template name of this model nor a file",
        hint=f"named templates here: {known}",
    )


def template_from_file(path: Path) -> ChatTemplate:
    if path.suffix.lower() == ".json":
        data = load_json(path, path.name)
        value = data.get("chat_template") if isinstance(data, dict) else None
        if isinstance(value, list):
            value = next((e.get("template") for e in value if isinstance(e, dict) and e.get("name") == "default"), None)
        if not isinstance(value, str):
            raise InputError(f"{path.name}: has no chat_template string")
        return ChatTemplate(path.stem, value, Location(path.name, "chat_template"))
    return ChatTemplate(path.stem, load_text(path, path.name), Location(str(path)))


# --------------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------------


class PromptToken(NamedTuple):
    """One token of a rendered prompt. A tuple, not a dataclass: a 2M-character prompt can have
    over a million of them, and a tuple is built several times faster."""

    index: int  # type: ignore[assignment]  # a field named like tuple.index, which nobody calls on a token
    id: int
    text: str  # the decoded piece (what the token writes), not the vocabulary form
    special: bool
    start: int  # character span in the rendered text
    end: int


@record
class SpecialSpan:
    start: int
    end: int
    text: str
    id: int | None


@record
class BosReport:
    token: str | None
    written_by_template: bool
    tokenizer_adds_bos: bool | None
    note: str | None  # set when re-encoding the text with special tokens would double BOS


@record
class RenderedPrompt:
    """One conversation rendered as transformers' apply_chat_template would render it."""

    model: str
    template: ChatTemplate
    messages: list[dict]
    add_generation_prompt: bool
    continue_final_message: bool
    text: str
    ids: list[int] | None  # None when the model has no tokenizer to encode with
    tokens: Sequence[PromptToken]  # a PromptTokens when encoded
    special_spans: list[SpecialSpan]
    bos: BosReport
    notes: list[str] = field(default_factory=list)
    thinking: str = "default"  # --thinking: the mode rendered ("on", "off"), or the template's default
    thinking_call: str = ""  # how that mode is asked of the template (enable_thinking=false, /no_think…)


def _quote_line(source: str, line: int | None) -> str | None:
    if not line:
        return None
    lines = source.splitlines()
    if not 0 < line <= len(lines):
        return None
    text = lines[line - 1].strip()
    return text if len(text) <= _QUOTED_LINE_CHARS else text[: _QUOTED_LINE_CHARS - 1] + "…"


def with_template_line(error: TemplateError, template: ChatTemplate) -> TemplateError:
    """The same error, its message quoting the template line that failed and naming the file (how
    render and probe-stop report a template that fails)."""
    quoted = _quote_line(template.source, error.line)
    message = f"{error.message} [{template.location}]"
    if quoted:
        message += f": {quoted}"
    return type(error)(message, error.hint, error.line)


def _render_text(template: ChatTemplate, messages: list[dict], special_tokens: dict[str, str], *,
                 add_generation_prompt: bool, continue_final_message: bool, tools: list[dict] | None,
                 extra: dict | None = None) -> str:
    from stopdoctor.template.render import render_chat

    try:
        return render_chat(template.source, messages, add_generation_prompt=add_generation_prompt,
                           continue_final_message=continue_final_message, tools=tools,
                           special_tokens=special_tokens, extra=extra)
    except TemplateError as error:
        raise with_template_line(error, template) from error


def _has_tokenizer(facts: ModelFacts) -> bool:
    return facts.vocab.tokenizer_file is not None or facts.vocab.gguf_header is not None


def _spans_by_text(text: str, specials: Sequence[str]) -> list[SpecialSpan]:
    """Special-token spans found by text, longest token first, for models without a tokenizer."""
    ordered = sorted({s for s in specials if s}, key=len, reverse=True)
    spans: list[SpecialSpan] = []
    i = 0
    while i < len(text):
        hit = next((s for s in ordered if text.startswith(s, i)), None)
        if hit is None:
            i += 1
            continue
        spans.append(SpecialSpan(i, i + len(hit), hit, None))
        i += len(hit)
    return spans


def encode_prompt(facts: ModelFacts, text: str) -> tuple[list[int], PromptTokens]:
    """Encode as apply_chat_template(tokenize=True) does: add_special_tokens=False."""
    tokenizer = facts.vocab.tokenizer()
    encoding = tokenizer.encode(text, add_special_tokens=False)
    added = tokenizer.get_added_tokens_decoder()
    ids = encoding.ids
    # (piece, special) per distinct id: a long prompt repeats ids, and each decode is a call into Rust
    known: dict[int, tuple[str, bool]] = {}
    for token_id in set(ids):
        entry = added.get(token_id)
        special = bool(entry is not None and entry.special) or facts.vocab.is_special(token_id)
        piece = entry.content if entry is not None else tokenizer.decode([token_id], skip_special_tokens=False)
        known[token_id] = (piece, special)
    spans = array("q", (offset for span in encoding.offsets for offset in span))
    return list(ids), PromptTokens(ids, spans, known)


class PromptTokens(Sequence[PromptToken]):
    """The tokens of a prompt, each built when asked for: a 2M-character prompt can have over a
    million, and a list of them would take ~400 MB; this keeps ids, spans and one entry per distinct id."""

    def __init__(self, ids: list[int], spans: array, known: dict[int, tuple[str, bool]]) -> None:
        self._ids = ids
        self._spans = spans  # start, end of each token, flattened
        self._known = known

    def __len__(self) -> int:
        return len(self._ids)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        token_id = self._ids[index]
        piece, special = self._known[token_id]
        return PromptToken(index, token_id, piece, special, self._spans[2 * index], self._spans[2 * index + 1])

    def __iter__(self) -> Iterator[PromptToken]:
        known, spans = self._known, self._spans
        for index, token_id in enumerate(self._ids):
            piece, special = known[token_id]
            yield PromptToken(index, token_id, piece, special, spans[2 * index], spans[2 * index + 1])

    def special(self) -> Iterator[PromptToken]:
        """Only the special tokens (without building the others)."""
        for index, token_id in enumerate(self._ids):
            if self._known[token_id][1]:
                yield self[index]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<PromptTokens: {len(self)} tokens>"


def _bos_report(facts: ModelFacts, text: str, special_tokens: dict[str, str]) -> BosReport:
    bos = special_tokens.get("bos_token")
    written = bool(bos and text.startswith(bos))
    adds = facts.add_bos.value if facts.add_bos is not None else None
    note = None
    if written and adds:
        where = facts.add_bos.location if facts.add_bos is not None else "the tokenizer"
        note = (
            f"the template writes {bos} and the tokenizer adds BOS ({where}): these ids (add_special_tokens=False, "
            "as apply_chat_template) hold one BOS, but encoding this text again with special tokens on "
            "(tokenizer(text), a llama.cpp server given the text) starts with two"
        )
    return BosReport(bos, written, adds, note)


def render_prompt(
    facts: ModelFacts,
    messages: list[dict],
    *,
    template: ChatTemplate | None = None,
    tools: list[dict] | None = None,
    add_generation_prompt: bool = True,
    continue_final_message: bool = False,
    tokenize: bool = True,
    thinking: Any = None,
) -> RenderedPrompt:
    """Render `messages` with the model's template (or `template`), and encode the text.
    `thinking`: a `stopdoctor.analysis.reasoning_run.ThinkingCall`, the template's thinking switch
    (extra variables, or a flag in the system message), applied as `generate --thinking` applies it."""
    chosen = template or select_template(facts, None, tools)
    specials = special_token_map(facts)
    if continue_final_message:
        add_generation_prompt = False  # transformers refuses both; continuing wins
    extra = None
    if thinking is not None:
        messages = thinking.messages(messages)
        extra = dict(thinking.variant.extra) or None
    text = _render_text(chosen, messages, specials, add_generation_prompt=add_generation_prompt,
                        continue_final_message=continue_final_message, tools=tools, extra=extra)
    notes: list[str] = []
    ids: list[int] | None = None
    tokens: Sequence[PromptToken] = []
    if tokenize and _has_tokenizer(facts):
        ids, tokens = encode_prompt(facts, text)
        spans = [SpecialSpan(t.start, t.end, text[t.start:t.end], t.id) for t in tokens.special()]
    else:
        if tokenize:
            notes.append("no tokenizer.json (nor GGUF vocabulary): token ids are not shown")
        spans = _spans_by_text(text, [*facts.vocab.special_tokens, *specials.values()])
    return RenderedPrompt(
        model=facts.source.spec,
        template=chosen,
        messages=messages,
        add_generation_prompt=add_generation_prompt,
        continue_final_message=continue_final_message,
        text=text,
        ids=ids,
        tokens=tokens,
        special_spans=spans,
        bos=_bos_report(facts, text, specials),
        notes=notes,
        thinking=thinking.mode if thinking is not None else "default",
        thinking_call=thinking.describe if thinking is not None else "",
    )


# --------------------------------------------------------------------------------------------
# Comparing two templates on the same messages
# --------------------------------------------------------------------------------------------


@record
class PromptComparison:
    left: RenderedPrompt
    right: RenderedPrompt
    left_label: str
    right_label: str
    diff: list[str]  # unified diff of the texts, newlines shown as \n
    left_end_of_turn: list[str] | None  # None when it could not be determined
    right_end_of_turn: list[str] | None
    end_of_turn_error: str | None = None

    @property
    def identical(self) -> bool:
        return self.left.text == self.right.text

    @property
    def ids_identical(self) -> bool | None:
        if self.left.ids is None or self.right.ids is None:
            return None
        return self.left.ids == self.right.ids

    @property
    def end_of_turn_differs(self) -> bool | None:
        if self.left_end_of_turn is None or self.right_end_of_turn is None:
            return None
        return self.left_end_of_turn != self.right_end_of_turn


def visible_lines(text: str) -> list[str]:
    """Lines with their newline shown as a trailing `\\n` (the last line has none)."""
    parts = text.split("\n")
    return [p + "\\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def end_of_turn_texts(facts: ModelFacts, template: ChatTemplate) -> list[str]:
    from stopdoctor.template.turns import find_end_of_turn

    try:
        markers = find_end_of_turn(template.source, special_token_map(facts), list(facts.vocab.special_tokens))
    except TemplateError as error:
        raise with_template_line(error, template) from error
    return [m.text + m.trailing for m in markers]


# difflib is quadratic in the lines that differ: two 250k-line prompts took minutes. Past this many
# line pairs the changed block (after the common start and end) is shown whole, as one hunk.
MAX_DIFF_PAIRS = 25_000_000


def bounded_unified_diff(a: list[str], b: list[str], fromfile: str, tofile: str, n: int = 2) -> list[str]:
    """difflib.unified_diff(a, b, lineterm="", n=n) when the lines that differ are few enough;
    otherwise one hunk: the common start and end kept as context, everything between replaced."""
    if a == b:
        return []
    start = 0
    while start < min(len(a), len(b)) and a[start] == b[start]:
        start += 1
    end = 0
    while end < min(len(a), len(b)) - start and a[-1 - end] == b[-1 - end]:
        end += 1
    if (len(a) - start - end) * (len(b) - start - end) <= MAX_DIFF_PAIRS:
        return list(difflib.unified_diff(a, b, fromfile=fromfile, tofile=tofile, lineterm="", n=n))
    first = max(0, start - n)
    a_stop, b_stop = min(len(a), len(a) - end + n), min(len(b), len(b) - end + n)
    hunk = [f"--- {fromfile}", f"+++ {tofile}", f"@@ -{first + 1},{a_stop - first} +{first + 1},{b_stop - first} @@"]
    hunk += [" " + line for line in a[first:start]]
    hunk += ["-" + line for line in a[start:len(a) - end]]
    hunk += ["+" + line for line in b[start:len(b) - end]]
    hunk += [" " + line for line in a[len(a) - end:a_stop]]
    return hunk


def compare_prompts(
    left_facts: ModelFacts,
    left: RenderedPrompt,
    right_facts: ModelFacts,
    right: RenderedPrompt,
    left_label: str,
    right_label: str,
) -> PromptComparison:
    diff = bounded_unified_diff(visible_lines(left.text), visible_lines(right.text), left_label, right_label)
    error = None
    try:
        left_eot: list[str] | None = end_of_turn_texts(left_facts, left.template)
        right_eot: list[str] | None = end_of_turn_texts(right_facts, right.template)
    except TemplateError as exc:
        left_eot = right_eot = None
        error = exc.message
    return PromptComparison(left, right, left_label, right_label, diff, left_eot, right_eot, error)


@record
class RenderResult:
    """`stopdoctor render`: each conversation rendered, the comparisons with `--compare`, and what
    the run had to say (a fallback taken)."""

    prompts: list[RenderedPrompt]
    comparisons: list[PromptComparison] | None
    notes: list[str]


@record
class RenderRequest:
    """What `render` was asked: the conversations (None: the sample one), the tools, a template file
    or name, a second template or model to compare with, the generation-prompt options, the thinking
    switch ("on", "off", "both") and whether the messages were typed on the command line."""

    spec: str
    conversations: list[list[dict]] | None
    tools: list[dict] | None
    template: str | None
    compare: str | None
    add_generation_prompt: bool
    continue_final_message: bool
    thinking: str | None
    typed: bool


def render_conversations(facts: ModelFacts, request: RenderRequest, load: Any) -> RenderResult:
    """Render each conversation of `request` with `facts`' template (`load(spec, None)` reads a model
    to compare with)."""
    from stopdoctor.analysis.core import analyze
    from stopdoctor.analysis.reasoning_run import thinking_calls

    notes = []
    conversations = request.conversations if request.conversations is not None else [list(SAMPLE_CONVERSATION)]
    sample = request.conversations is None
    if sample:
        notes.append("no messages given; rendering a sample conversation (system + user). "
                     "Use -m ROLE TEXT or --messages FILE.")
    chosen = select_template(facts, request.template, request.tools)
    if request.typed:
        for conversation in conversations:
            check_typed_roles(chosen, conversation)
    # the switch the template reads (as generate finds it); None: the template's default, one render
    calls = thinking_calls(analyze(facts).reasoning, request.thinking) if request.thinking is not None else [None]
    options: dict[str, Any] = dict(tools=request.tools, add_generation_prompt=request.add_generation_prompt,
                   continue_final_message=request.continue_final_message)
    try:
        prompts = [render_prompt(facts, conversation, template=chosen, thinking=call, **options)
                   for conversation in conversations for call in calls]
    except TemplateError:
        if not sample:
            raise
        # the sample's system turn is what templates most often reject (Mistral, Gemma 1)
        notes.append("the template rejects a system turn; rendering the user message alone.")
        prompts = [render_prompt(facts, conversations[0][1:], template=chosen, thinking=call, **options) for call in calls]
    comparisons = None
    if request.compare is not None:
        other_path = Path(request.compare).expanduser()
        if other_path.is_file() and other_path.suffix.lower() != ".gguf":
            other_facts, other_template = facts, template_from_file(other_path)
        else:
            other_facts = load(request.compare, None)
            other_template = select_template(other_facts, None, request.tools)
        comparisons = [compare_prompts(facts, left, other_facts,
                                       render_prompt(other_facts, left.messages, template=other_template, **options),
                                       request.spec, request.compare)
                       for left in prompts]
    return RenderResult(prompts, comparisons, notes)
