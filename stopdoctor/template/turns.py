"""Turn structure: what a chat template writes around each message, learnt by rendering sentinel
conversations in the sandbox, never from a list of known model families.

Imports: the standard library, `stopdoctor.template` (render, limits, pieces) and `stopdoctor.core.errors`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping

from stopdoctor.core.errors import TemplateError
from stopdoctor.core.records import field, record
from stopdoctor.template.limits import RenderLimits, TemplateLimitError, overall_deadline_passed
from stopdoctor.template.pieces import between, common_prefix, common_suffix, cut_at_opener, first_special, split_pieces
from stopdoctor.template.render import TemplateIgnoresMessages, render_chat

# --------------------------------------------------------------------------------------------
# Learning a template's turn structure from sentinel conversations
# --------------------------------------------------------------------------------------------


@record
class EndOfTurnMarker:
    """What ends an assistant turn: usually the token a template writes right after assistant
    content; for templates with no closing token, the header of the turn that follows."""

    text: str  # e.g. "<|im_end|>", "<end_of_turn>", "</s>", or "<|user|>" for a next-header template
    trailing: str  # whitespace written after the marker before the next turn, e.g. "\n"
    evidence: str  # e.g. 'after assistant content the template writes "<|im_end|>\n"'
    kind: str = "token"  # "token" (a closing token) | "header" (the next turn's header) | "text" (plain text)


# How a template ends an assistant turn:
# - "token": a closing token after the content (ChatML <|im_end|>, Llama-3 <|eot_id|>)
# - "only-when-followed": the close is written only when another turn follows (Apertus)
# - "next-header": nothing closes it; the next role header does (GLM-4 <|user|>, <|observation|>)
# - "whitespace": only whitespace follows the content before a plain-text header ("\n\nUser:")
# - "none": nothing at all follows assistant content
STYLES = ("token", "only-when-followed", "next-header", "whitespace", "none")


@record
class TurnStructure:
    """Everything learnt about a template's turns; see `analyze_turns`."""

    end_of_turn: tuple[EndOfTurnMarker, ...]
    style: str
    close: str  # the whole text written after assistant content, before the next turn opens
    # earlier special tokens of the close ('<|end|>' of '<|end|><|endoftext|>'): a runtime stopping
    # on one of them also ends the turn, but none is suggested
    also_ends: tuple[EndOfTurnMarker, ...] = ()
    headers: dict[str, str] = field(default_factory=dict)  # role → text written before its content
    openers: frozenset[str] = frozenset()  # tokens that open a turn (<|im_start|>, <|start_header_id|>)
    inner: frozenset[str] = frozenset()  # special tokens written inside an assistant turn
    content_as_parts: bool = False  # the template only reads content given as a list of parts
    tools: tuple[dict, ...] | None = None  # the tools list the template needs to render (empty first), or none
    # why nothing rendered when the structure was read from the template's source instead (the
    # answer is static: firefunction-v1 needs a `functions` message; a filter Jinja lacks); None when rendered
    static: str | None = None

    def header_tokens(self, known: Iterable[str]) -> frozenset[str]:
        """Special tokens written in any turn header, plus the openers; never the close's own
        tokens (a header learnt after a default system turn may begin with that turn's close)."""
        known = sorted(set(known), key=len, reverse=True)
        closes = set(split_pieces(self.close, known)) | {m.text for m in (*self.end_of_turn, *self.also_ends) if m.kind == "token"}
        texts = set(self.openers)
        for header in self.headers.values():
            texts |= {p for p in split_pieces(header, known) if p in known and p.strip()}
        return frozenset(texts - closes)


# Sentinels: plain alphanumerics that survive |trim, |lower is not common enough to plan for.
_SYS, _U1, _A1, _U2 = "sdSentSys7q", "sdSentUsrOne7q", "sdSentAstOne7q", "sdSentUsrTwo7q"
_THINK, _TOOL, _TOOL_NAME = "sdSentThink7q", "sdSentTool7q", "get_weather"
_BOS = "sdSentBos7q"
# A tool for templates that iterate `tools` without a guard (Hermes-2-Pro tool_use, Command R+).
_SAMPLE_TOOL = {
    "type": "function",
    "function": {
        "name": _TOOL_NAME,
        "description": "Get the weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "The city."}},
                       "required": ["city"]},
    },
}


@record
class _Shape:
    """How sentinel conversations are given to a template: content as a string or as a list of
    text parts (MiniMax, many VLM templates), with no tools list, an empty one, or a sample tool.
    An empty list comes first: a template that loops over `tools` unguarded (Hermes-2-Pro
    tool_use) then renders, and one that writes tool turns differently under `{% if tools %}`
    still shows its plain conversation."""

    parts: bool = False
    tools: tuple[dict, ...] | None = None

    def tools_list(self) -> list[dict] | None:
        return list(self.tools) if self.tools is not None else None


_SHAPES = tuple(_Shape(parts, tools) for tools in (None, (), (_SAMPLE_TOOL,)) for parts in (False, True))


@record
class _Probe:
    """How one analysis renders its sentinel conversations: the template, its limits, the
    conversation shape it needs, and the variables found missing so far (rendered empty; the
    dict fills in as the renders go, and is shared by every shape tried)."""

    source: str
    limits: RenderLimits
    shape: _Shape = _Shape()
    extra: dict[str, str] = field(default_factory=dict)


_UNDEFINED_RE = re.compile(r"'(\w{1,40})' is undefined")
_RESERVED_NAMES = frozenset({"messages", "tools", "documents", "add_generation_prompt", "message", "loop"})


def _probe_for(source: str, special_tokens: Mapping[str, str] | None, limits: RenderLimits) -> _Probe:
    """The first conversation shape under which the template writes both a user and an
    assistant message (the plain shape when none does)."""
    extra: dict[str, str] = {}
    for shape in _SHAPES:
        probe = _Probe(source, limits, shape, extra)
        if any(_writes_messages(probe, special_tokens, prefix) for prefix in ([], [_system()])):
            return probe
    return _Probe(source, limits, _Shape(), extra)


def _writes_messages(probe: _Probe, special_tokens: Mapping[str, str] | None, prefix: list[dict]) -> bool:
    text = _try_render(probe, [*prefix, _user(_U1), _assistant(_A1)], special_tokens)
    return text is not None and _U1 in text and _A1 in text


def _system() -> dict:
    return {"role": "system", "content": _SYS}


def _user(text: str) -> dict:
    return {"role": "user", "content": text}


def _assistant(text: str, **extra: object) -> dict:
    return {"role": "assistant", "content": text, **extra}


def _as_parts(message: dict) -> dict:
    content = message.get("content")
    if isinstance(content, str):
        return {**message, "content": [{"type": "text", "text": content}]}
    return message


def _try_render(probe: _Probe, messages: list[dict], special_tokens: Mapping[str, str] | None,
                add_generation_prompt: bool = False, optional: bool = False) -> str | None:
    """Render, or None when the template rejects this conversation shape. Limit and sandbox
    errors are not a matter of shape: they propagate, except from an `optional` probe (a tool
    call, reasoning, a tool role), which only refines what the plain conversation showed."""
    shape, extra = probe.shape, probe.extra
    if shape.parts:
        messages = [_as_parts(m) for m in messages]
    for _ in range(4):
        try:
            return render_chat(probe.source, messages, add_generation_prompt=add_generation_prompt,
                               special_tokens=special_tokens, limits=probe.limits,
                               tools=shape.tools_list(), extra=extra or None)
        except TemplateLimitError:
            if optional and not overall_deadline_passed():  # the command's deadline is no matter of shape
                return None
            raise
        except TemplateError as exc:
            if "syntax error" in exc.message:
                raise
            # A template that needs a variable of its own (firefunction's `functions`, `datetime`)
            # is rendered with it empty, as a caller passing it would.
            missing = _UNDEFINED_RE.search(exc.message)
            if (missing is None or missing.group(1) in extra or missing.group(1) in _RESERVED_NAMES
                    or missing.group(1).endswith("_token")):  # a special token the model lacks: a real failure
                return None
            extra[missing.group(1)] = ""
    return None


def _known_texts(special_tokens: Mapping[str, str] | None, known_special_texts: Iterable[str]) -> list[str]:
    known = {t for t in known_special_texts if t}
    known |= {str(v) for v in (special_tokens or {}).values() if v}
    return sorted(known, key=len, reverse=True)  # longest first: a token before its prefixes


def _with_bos_sentinel(special_tokens: Mapping[str, str] | None) -> dict[str, str] | None:
    """Swap the bos text for a sentinel, so a header can tell the `bos_token` variable apart from
    the same text written literally (SmolLM2's bos is "<|im_start|>")."""
    if not special_tokens or not special_tokens.get("bos_token"):
        return dict(special_tokens) if special_tokens else None
    return {**special_tokens, "bos_token": _BOS}


def _text_before(probe: _Probe, special_tokens: Mapping[str, str] | None, messages: list[dict],
                 sentinel: str, after: str | None = None) -> str | None:
    """What the template writes before `sentinel` (and after `after`), less a leading bos_token."""
    text = _try_render(probe, messages, _with_bos_sentinel(special_tokens))
    if text is None or sentinel not in text:
        return None
    before = text[: text.find(sentinel)]
    if after is not None:
        at = before.rfind(after)
        before = before[at + len(after):] if at >= 0 else before
    return before.removeprefix(_BOS)


def _user_header_from(probe: _Probe, special_tokens: Mapping[str, str] | None, prefix: list[dict]) -> str | None:
    """Text before the first user message's content, less any bos token."""
    return _text_before(probe, special_tokens, [*prefix, _user(_U1)], _U1,
                        after=_SYS if prefix else None)


def _openers(probe: _Probe, special_tokens: Mapping[str, str] | None, known: list[str],
             prefix: list[dict], generation_prompt: str | None) -> frozenset[str]:
    """Special tokens that open every turn, whatever its role: the first token of the generation
    prompt (`<|im_start|>`, `<|start_header_id|>`, or GLM's `<|assistant|>`), and the first token
    of the system and user headers when both begin with the same one (a template that ignores
    add_generation_prompt). Written right after every close, they are never part of it."""
    bos = (special_tokens or {}).get("bos_token")
    found = set()
    first_user = _text_before(probe, special_tokens, [*prefix, _user(_U1)], _SYS if prefix else _U1)
    first = _prompt_opener(generation_prompt, first_user, known, bos)
    if first is not None:
        found.add(first)
    system = first_special(_text_before(probe, special_tokens, [_system(), _user(_U1)], _SYS), known, skip=bos)
    user = first_special(first_user, known, skip=bos)
    if system is not None and system == user:
        found.add(system)
    return frozenset(found)


def _prompt_opener(generation_prompt: str | None, first_header: str | None, known: list[str], bos: str | None) -> str | None:
    """The generation prompt's first special token, unless it is the previous turn's close written
    by position (Jamba: `<|eom|>` before every message but the first, so before the prompt too):
    a token the first turn's header lacks, followed in the prompt by one that header has."""
    first = first_special(generation_prompt, known, skip=bos)
    if first is None or not first_header:
        return first
    in_header = {p for p in split_pieces(first_header, known) if p in known and p != bos}
    if first in in_header:
        return first
    later = [p for p in split_pieces(generation_prompt or "", known) if p in known and p != bos]
    if not in_header and (generation_prompt or "").split(first, 1)[1].strip():
        return None  # a plain-text header follows it: the close of the turn before, written when one follows
    return next((p for p in later[1:] if p in in_header), first)


def _generation_prompt(probe: _Probe, special_tokens: Mapping[str, str] | None, prefix: list[dict]) -> str | None:
    plain = _try_render(probe, [*prefix, _user(_U1)], special_tokens, add_generation_prompt=False)
    prompted = _try_render(probe, [*prefix, _user(_U1)], special_tokens, add_generation_prompt=True)
    if plain is not None and prompted is not None and prompted.startswith(plain):
        return prompted[len(plain):]
    return None


def _inner_tokens(probe: _Probe, special_tokens: Mapping[str, str] | None, known: list[str],
                  prefix: list[dict], openers: frozenset[str], close: str) -> frozenset[str]:
    """Special tokens written inside an assistant turn, between its opening and its content:
    thinking tags, channel markers, response delimiters. Rendered with and without reasoning."""
    inner: set[str] = set()
    user_close = between(_try_render(probe, [*prefix, _user(_U1)], special_tokens) or "", _U1, None) or ""
    for assistant in (_assistant(_A1), _assistant(_A1, reasoning_content=_THINK)):
        text = _try_render(probe, [*prefix, _user(_U1), assistant], special_tokens, optional=True)
        span = between(text, _U1, _A1) if text is not None else None
        if span is None:
            continue
        pieces = split_pieces(span, known)
        start = next((i for i, p in enumerate(pieces) if p in openers), None)
        if start is None:  # no opener: skip what the user turn writes after its content anyway
            start = len(split_pieces(common_prefix(user_close, span, known), known))
        inner |= {p for p in pieces[start + 1:] if p in known and p.strip() and p not in openers}
    # A token after which the turn still writes a tool call (Cohere <|END_TEXT|> before
    # <|START_ACTION|>) closes a segment, not the turn.
    call = {"id": "call_1", "type": "function", "function": {"name": _TOOL_NAME, "arguments": {"city": "Paris"}}}
    text = _try_render(probe, [*prefix, _user(_U1), _assistant(_A1, tool_calls=[call])], special_tokens, optional=True)
    after = between(text, _A1, None) if text is not None else None
    if after and _TOOL_NAME in after:
        before_call = after[: after.rfind(_TOOL_NAME)]
        # the call must be in the same turn: no opener before it, and not after the usual close
        # (GigaChat writes the call as a message of its own after <|message_sep|>)
        same_turn = cut_at_opener(before_call, openers, known) == before_call
        if same_turn and not (close.strip() and before_call.startswith(close)):
            inner |= {p for p in split_pieces(before_call, known) if p in known and p.strip()}
    return frozenset(inner)


def _markers_in(close: str, known: list[str], inner: frozenset[str], user_header: str | None) -> list[tuple[str, str]]:
    """The special tokens of a close text that may end a turn, in order: not whitespace, not
    written inside turns. The last is what the turn ends with ('<|END_RESPONSE|><|END_OF_TURN_TOKEN|>'
    → END_OF_TURN). Without known special tokens, the first non-whitespace run, unless that is
    the next user header ("\n\nUSER: " closes nothing: it opens the next turn)."""
    pieces = split_pieces(close, known)
    markers: list[tuple[str, str]] = []
    for i, piece in enumerate(pieces):
        if piece in known and piece.strip() and piece not in inner and all(piece != m for m, _ in markers):
            after = pieces[i + 1] if i + 1 < len(pieces) and pieces[i + 1].isspace() else ""
            markers.append((piece, after))
    if markers or any(p in known and p.strip() for p in pieces):
        return markers  # only inner tokens: none of them may end a turn
    match = re.match(r"\s*(\S+)(\s*)", close)
    if match is None or (user_header and match.group(1) in user_header):
        return []
    return [(match.group(1), match.group(2))]


def analyze_turns(
    source: str,
    special_tokens: Mapping[str, str] | None = None,
    known_special_texts: Iterable[str] = (),
    *,
    limits: RenderLimits = RenderLimits(),
) -> TurnStructure:
    """Learn how the template ends an assistant turn, by rendering sentinel conversations.

    The close is what follows assistant content when the conversation ends there and when a user
    turn follows, cut where the next turn opens; their common part is the end-of-turn. A final
    turn closed differently from earlier ones (gpt-oss `<|return|>` vs `<|end|>`) is closed with
    the final form: that is what generation ends with. Pass the model's special tokens: templates
    write `eos_token` by variable, and without it the variable renders empty.
    Raises TemplateError when no conversation shape renders, or on a sandbox/limit violation.
    """
    known = _known_texts(special_tokens, known_special_texts)
    try:
        return _analyze(_probe_for(source, special_tokens, limits), special_tokens, known)
    except (TemplateLimitError, TemplateIgnoresMessages):
        raise  # a runaway template, or one that ignores the messages: a defect, never read around
    except TemplateError as exc:
        if "syntax error" in exc.message:
            raise
        static = _static_structure(source, special_tokens, known, limits, exc.message)
        if static is None:
            raise
        return static


def _static_structure(source: str, special_tokens: Mapping[str, str] | None, known: list[str], limits: RenderLimits,
                      reason: str) -> TurnStructure | None:
    """The structure read from the template's syntax tree when no conversation renders: the
    close only (no headers, no openers); the answer is static, and says so."""
    from stopdoctor.template.static_turns import read_close  # jinja2's syntax tree: only when no conversation renders
    found = read_close(source, special_tokens, known, reason, limits)
    if found is None:
        return None
    marker = EndOfTurnMarker(found.marker, "", found.evidence)
    style = "only-when-followed" if found.conditional else "token"
    return TurnStructure((marker,), style, found.close, static=reason)


def _analyze(probe: _Probe, special_tokens: Mapping[str, str] | None, known: list[str]) -> TurnStructure:
    u1, a1, u2 = _user(_U1), _assistant(_A1), _user(_U2)
    for prefix in ([], [_system()]):
        end = _try_render(probe, [*prefix, u1, a1], special_tokens)
        mid = _try_render(probe, [*prefix, u1, a1, u2], special_tokens)
        after_end = between(end, _A1, None) if end is not None else None
        after_mid = between(mid, _A1, _U2) if mid is not None else None
        if after_end is not None or after_mid is not None:
            break
    else:
        # Every shape was rejected: surface the template's own reason for the simplest one.
        render_chat(probe.source, [u1, a1], special_tokens=special_tokens, limits=probe.limits)
        raise TemplateIgnoresMessages("chat template renders no user/assistant conversation: the messages never appear in its output",
                                      "a chat template must write each message's content")

    generation_prompt = _generation_prompt(probe, special_tokens, prefix)
    openers = _openers(probe, special_tokens, known, prefix, generation_prompt)
    headers = _headers(probe, special_tokens, known, openers)
    close_end = cut_at_opener(after_end, openers, known) if after_end is not None else None
    close_mid = cut_at_opener(after_mid, openers, known) if after_mid is not None else None
    if generation_prompt == "" and close_end and close_mid is not None:
        # add_generation_prompt ignored: the header that opened the answer follows it ("…\nAssistant:")
        shared = common_prefix(close_end, close_mid, known)
        rest = close_end[len(shared):].strip()
        if rest and (between(end or "", _U1, _A1) or "").rstrip().endswith(rest):
            close_end = shared
    if close_mid:
        # A role-specific user header (Apertus <|user_start|>) is no opener: it is what the first
        # user message is preceded by too. Nothing left means nothing closes the turn (GLM-4).
        first_user = _text_before(probe, special_tokens, [*prefix, u1], _U1)
        # ...never the close both endings share (a role-generic closer, Phi-4-mini-reasoning's <|end|>)
        shared = common_prefix(close_end, close_mid, known) if close_end and close_end.strip() else ""
        header = common_suffix(close_mid[len(shared):], first_user or "", known)
        if header.strip():
            close_mid = close_mid[: len(close_mid) - len(header)]

    style, close = "token", ""
    if close_end and close_end.strip() and close_mid and close_mid.strip():
        common = common_prefix(close_end, close_mid, known)
        close = common if common.strip() else close_end
    elif close_end and close_end.strip():
        close = close_end
    elif close_mid and close_mid.strip():
        close, style = close_mid, "only-when-followed"
    inner = _inner_tokens(probe, special_tokens, known, prefix, openers, close)
    evidence = f"after assistant content the template writes {json.dumps(close, ensure_ascii=False)}"
    found = [EndOfTurnMarker(text, trailing, evidence) for text, trailing in _markers_in(close, known, inner, headers.get("user"))] if close else []
    markers, also = found[-1:], found[:-1]
    if markers and also:
        also = _shared_by_tool_call_turns(probe, special_tokens, known, prefix, openers, markers[0].text, also)
        head = between(end, _U1, _A1) if end is not None else None
        also = [m for m in also if not _closes_a_section(m.text, head or "")]
    if not markers:
        style, markers = _headerish_end(probe, special_tokens, known, after_mid, close or (close_end or "") or (close_mid or ""),
                                        inner | openers)
    return TurnStructure(tuple(markers), style, close, tuple(also), headers, openers, inner, probe.shape.parts,
                         probe.shape.tools)


def _shared_by_tool_call_turns(probe: _Probe, special_tokens: Mapping[str, str] | None, known: list[str], prefix: list[dict],
                               openers: frozenset[str], last: str, earlier: list[EndOfTurnMarker]) -> list[EndOfTurnMarker]:
    """The earlier closing tokens that a tool-call turn writes too. Command A ends answers
    `<|END_RESPONSE|><|END_OF_TURN_TOKEN|>` and tool calls `<|END_ACTION|><|END_OF_TURN_TOKEN|>`: a
    runtime stopping on `<|END_RESPONSE|>` alone never ends a tool-call turn."""
    call = {"id": "call_1", "type": "function", "function": {"name": _TOOL_NAME, "arguments": {"city": "Paris"}}}
    text = _try_render(probe, [*prefix, _user(_U1), _assistant(_A1, tool_calls=[call])], special_tokens, optional=True)
    after = between(text, _TOOL_NAME, None) if text is not None and _TOOL_NAME in text.split(_U1)[-1] else None
    if after is None:
        return earlier
    pieces = split_pieces(cut_at_opener(after, openers, known), known)
    if last not in pieces:
        return earlier  # the tool-call turn closes some other way: nothing to compare with
    return [m for m in earlier if m.text in pieces]


# How a closing token names its opener: END_X / START_X, </x> / <x>, <x|> / <|x>, end_of_x / begin_of_x.
_PAIRS = ((re.compile(r"END"), ("START", "BEGIN")), (re.compile(r"end"), ("start", "begin")))


def _closes_a_section(token: str, head: str) -> bool:
    """`token` closes a span the turn opened before its content (Command A <|END_RESPONSE|>)."""
    openers = {sub.sub(word, token, count=1) for sub, words in _PAIRS for word in words if sub.search(token)}
    if token.startswith("</"):
        openers.add("<" + token[2:])
    if token.endswith("|>") and not token.startswith("<|"):
        openers.add("<|" + token[1:-2] + ">")
    openers.discard(token)
    return any(opener in head for opener in openers)


def _headerish_end(probe: _Probe, special_tokens: Mapping[str, str] | None, known: list[str], after_mid: str | None,
                   close: str, excluded: frozenset[str]) -> tuple[str, list[EndOfTurnMarker]]:
    """No closing token: the turn ends where the next one opens with a role's own token (GLM-4:
    `<|user|>`, `<|observation|>`), or at a plain-text header after whitespace, or nowhere. A
    token that opens every turn (`<|im_start|>`) or is written inside turns is never one."""
    following = [("user", after_mid)]
    for role in ("tool", "observation"):  # GLM calls the tool role "observation"
        tool = _try_render(probe, [_user(_U1), _assistant(_A1), {"role": role, "content": _TOOL}], special_tokens, optional=True)
        following.append((role, between(tool, _A1, _TOOL) if tool is not None else None))
    markers: list[EndOfTurnMarker] = []
    for role, text in following:
        first = first_special(text, known)
        if first is not None and first not in excluded and all(m.text != first for m in markers):
            evidence = f"nothing closes an assistant turn; the next {role} turn opens with {json.dumps(text, ensure_ascii=False)}"
            markers.append(EndOfTurnMarker(first, "", evidence, kind="header"))
    if markers:
        return "next-header", markers
    # A plain-text header right after the answer ("…answer### User:") is the same design as one
    # after a newline: one newline must not flip the verdict.
    plain = not any(p in known and p.strip() for p in split_pieces(after_mid or "", known))
    if after_mid and after_mid.strip() and (close.isspace() or after_mid[:1].isspace() or (not close and plain)):
        header = _role_label(after_mid.strip().splitlines()[0])
        evidence = f"only whitespace closes an assistant turn; the next turn opens with {json.dumps(after_mid, ensure_ascii=False)}"
        return "whitespace", [EndOfTurnMarker(header, "", evidence, kind="text")]
    return "none", []


# A role label: a few words ending in a colon at the start of a header ("### User:", "GPT4 Correct User:").
_ROLE_LABEL_RE = re.compile(r"[^:\n]{1,40}?:(?=\s|$)")


def _role_label(header: str) -> str:
    """The role label that opens a plain-text header, without a fixed instruction after it
    (`User: You must put your answer …` → `User:`): the stop a runtime needs, not 200 characters."""
    match = _ROLE_LABEL_RE.match(header)
    return match.group(0) if match else header


def render_in_shape(turns: TurnStructure, source: str, messages: list[dict], special_tokens: Mapping[str, str] | None,
                    add_generation_prompt: bool = False) -> str:
    """Render `messages` in the conversation shape the template was found to need (content as
    parts, a sample tools list), so a check sees what the template writes for a real caller."""
    if turns.content_as_parts:
        messages = [_as_parts(m) for m in messages]
    return render_chat(source, messages, add_generation_prompt=add_generation_prompt, special_tokens=special_tokens,
                       tools=list(turns.tools) if turns.tools is not None else None)


def find_end_of_turn(
    source: str,
    special_tokens: Mapping[str, str] | None = None,
    known_special_texts: Iterable[str] = (),
    *,
    limits: RenderLimits = RenderLimits(),
) -> list[EndOfTurnMarker]:
    """The marker(s) that end an assistant turn (see `analyze_turns`). Empty when the template
    writes nothing there (it never closes the turn)."""
    return list(analyze_turns(source, special_tokens, known_special_texts, limits=limits).end_of_turn)


def find_turn_headers(source: str, special_tokens: Mapping[str, str] | None = None, *,
                      limits: RenderLimits = RenderLimits()) -> dict[str, str]:
    """role → text the template writes right before that role's content.

    The user header is taken from a second user turn (what follows a closed assistant turn, the
    thing a runaway model hallucinates); the assistant header from the generation prompt when the
    template has one. Roles the template rejects are left out.
    """
    known = _known_texts(special_tokens, ())
    return _find_turn_headers(_probe_for(source, special_tokens, limits), special_tokens, known)


def _find_turn_headers(probe: _Probe, special_tokens: Mapping[str, str] | None, known: list[str]) -> dict[str, str]:
    generation_prompt = _generation_prompt(probe, special_tokens, [])
    return _headers(probe, special_tokens, known, _openers(probe, special_tokens, known, [], generation_prompt))


def _headers(probe: _Probe, special_tokens: Mapping[str, str] | None, known: list[str],
             openers: frozenset[str]) -> dict[str, str]:
    u1, a1, u2 = _user(_U1), _assistant(_A1), _user(_U2)
    headers: dict[str, str] = {}

    mid = _try_render(probe, [u1, a1, u2], special_tokens)
    if mid is not None:
        span = between(mid, _A1, _U2)
        if span is not None:
            close = cut_at_opener(span, openers, known)
            end = _try_render(probe, [u1, a1], special_tokens)
            after_end = between(end, _A1, None) if end is not None else None
            if not openers and after_end:  # no opener to cut at: the part shared with the final close
                close = common_prefix(after_end, span, known)
            headers["user"] = span[len(close):]
    if "user" not in headers:
        first = _user_header_from(probe, special_tokens, [])
        if first is not None:
            headers["user"] = first

    plain = _try_render(probe, [u1], special_tokens, add_generation_prompt=False)
    prompted = _try_render(probe, [u1], special_tokens, add_generation_prompt=True)
    pair = _try_render(probe, [u1, a1], special_tokens)
    between_ua = between(pair, _U1, _A1) if pair is not None else None
    gen_prompt = None
    if plain is not None and prompted is not None and prompted.startswith(plain):
        gen_prompt = prompted[len(plain):]
    if gen_prompt and (between_ua is None or between_ua.endswith(gen_prompt)):
        headers["assistant"] = gen_prompt
    elif between_ua is not None and plain is not None:
        user_close = between(plain, _U1, None) or ""
        header = between_ua[len(common_prefix(user_close, between_ua, known)):]
        if not header and openers:  # the template writes the assistant header after every turn
            pieces = split_pieces(between_ua, known)
            at = next((i for i, p in enumerate(pieces) if p in openers), None)
            header = "".join(pieces[at:]) if at is not None else ""
        headers["assistant"] = header

    system = _text_before(probe, special_tokens, [_system(), u1], _SYS)
    if system is not None:
        headers["system"] = system
    return headers


_BOS_SENTINEL = "\x00stopdoctor-bos\x00"


def template_writes_bos(source: str, bos_token: str | None, special_tokens: Mapping[str, str] | None = None, *,
                        limits: RenderLimits = RenderLimits()) -> bool:
    """True when the rendered prompt starts with bos (so a tokenizer that also adds BOS doubles
    it): through the `bos_token` variable (seen by swapping in a sentinel), or written literally,
    unless that literal is only a turn header that begins with the bos text (SmolLM2's bos is
    `<|im_start|>`)."""
    if not bos_token:
        return False
    specials = {**(special_tokens or {}), "bos_token": bos_token}
    probe = _probe_for(source, specials, limits)
    text = _first_render(probe, {**specials, "bos_token": _BOS_SENTINEL})
    if text is None:
        return False
    if text.startswith(_BOS_SENTINEL):
        return True
    if not text.startswith(bos_token):
        return False
    headers = _find_turn_headers(probe, specials, _known_texts(specials, ()))
    return not any(header.startswith(bos_token) for header in headers.values())


def _first_render(probe: _Probe, special_tokens: Mapping[str, str]) -> str | None:
    """The first of a few simple conversations the template accepts, rendered."""
    user = _user(_U1)
    for messages, prompt in (([user], True), ([user], False), ([user, _assistant(_A1)], False)):
        text = _try_render(probe, messages, special_tokens, add_generation_prompt=prompt)
        if text is not None:
            return text
    return None
