"""Turn structure: what a chat template writes around each message, learnt by rendering sentinel
conversations in the sandbox, never from a list of known model families.

Imports: the standard library, `stopdoctor.sandbox` and `stopdoctor.errors`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from stopdoctor.errors import TemplateError
from stopdoctor.sandbox import RenderLimits, TemplateIgnoresMessages, TemplateLimitError, render_chat

# --------------------------------------------------------------------------------------------
# Learning a template's turn structure from sentinel conversations
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EndOfTurnMarker:
    """What a template writes right after assistant content to close the turn."""

    text: str  # e.g. "<|im_end|>", "<end_of_turn>", "</s>"
    trailing: str  # whitespace written after the marker before the next turn, e.g. "\n"
    evidence: str  # e.g. 'after assistant content the template writes "<|im_end|>\n"'


# Sentinels: plain alphanumerics that survive |trim, |lower is not common enough to plan for.
_SYS, _U1, _A1, _U2 = "sdSentSys7q", "sdSentUsrOne7q", "sdSentAstOne7q", "sdSentUsrTwo7q"
_BOS = "sdSentBos7q"
# The limits of the find_* call in progress, so the helpers below need not pass them around.
_SENTINEL_LIMITS: ContextVar[RenderLimits] = ContextVar("stopdoctor_sentinel_limits", default=RenderLimits())
# A rough tokenisation for comparing the text around turns when no vocabulary is given:
# chat-control-looking tags, bracket tags, whitespace runs, words, single characters.
_PIECE_RE = re.compile(r"<\|[^|<>]*\|>|<[^<>\s]{1,40}>|\[/?[A-Za-z_]{1,20}\]|\s+|[^\s<\[]+|.", re.S)


@contextmanager
def _sentinel_limits(limits: RenderLimits) -> Iterator[None]:
    token = _SENTINEL_LIMITS.set(limits)
    try:
        yield
    finally:
        _SENTINEL_LIMITS.reset(token)


def _try_render(source: str, messages: list[dict], special_tokens: Mapping[str, str] | None,
                add_generation_prompt: bool = False) -> str | None:
    """Render, or None when the template rejects this conversation shape. Limit and sandbox
    errors are not a matter of shape: they propagate."""
    try:
        return render_chat(source, messages, add_generation_prompt=add_generation_prompt,
                           special_tokens=special_tokens, limits=_SENTINEL_LIMITS.get())
    except TemplateLimitError:
        raise
    except TemplateError as exc:
        if "syntax error" in exc.message:
            raise
        return None


def _pieces(text: str, known: list[str]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(text):
        for special in known:
            if text.startswith(special, i):
                out.append(special)
                i += len(special)
                break
        else:
            match = _PIECE_RE.match(text, i)
            # Stop plain-text runs at the start of a known special token.
            piece = match.group(0)
            for special in known:
                cut = piece.find(special)
                if cut > 0:
                    piece = piece[:cut]
            out.append(piece)
            i += len(piece)
    return out


def _common_prefix(a: str, b: str, known: list[str]) -> str:
    pa, pb = _pieces(a, known), _pieces(b, known)
    out = []
    for x, y in zip(pa, pb):
        if x != y:
            break
        out.append(x)
    return "".join(out)


def _between(text: str, start: str, end: str | None) -> str | None:
    at = text.rfind(start)
    if at < 0:
        return None
    after = at + len(start)
    if end is None:
        return text[after:]
    stop = text.find(end, after)
    return text[after:stop] if stop >= 0 else None


def _known_texts(special_tokens: Mapping[str, str] | None, known_special_texts: Iterable[str]) -> list[str]:
    known = {t for t in known_special_texts if t}
    known |= {str(v) for v in (special_tokens or {}).values() if v}
    return sorted(known, key=len, reverse=True)  # longest first: a token before its prefixes


def _assistant_close_texts(source: str, special_tokens: Mapping[str, str] | None,
                           known: list[str]) -> list[str]:
    """What the template writes after assistant content, per conversation shape that renders."""
    system = {"role": "system", "content": _SYS}
    u1, a1 = {"role": "user", "content": _U1}, {"role": "assistant", "content": _A1}
    u2 = {"role": "user", "content": _U2}
    results: list[str] = []
    for prefix in ([], [system]):
        end = _try_render(source, [*prefix, u1, a1], special_tokens)
        mid = _try_render(source, [*prefix, u1, a1, u2], special_tokens)
        after_end = _between(end, _A1, None) if end is not None else None
        after_mid = _between(mid, _A1, _U2) if mid is not None else None
        if after_end is not None and after_mid is not None:
            common = _common_prefix(after_end, after_mid, known)
            # If the ends disagree from the start, the final turn's close is what a model
            # trained on this template learns to emit before stopping.
            results.append(common if common.strip() else after_end)
        elif after_end is not None:
            results.append(after_end)
        elif after_mid is not None:
            header = _user_header_from(source, special_tokens, prefix)
            if header and after_mid.endswith(header):
                after_mid = after_mid[: -len(header)]
            results.append(after_mid)
    return results


def _with_bos_sentinel(special_tokens: Mapping[str, str] | None) -> dict[str, str] | None:
    """Swap the bos text for a sentinel, so a header can tell the `bos_token` variable apart from
    the same text written literally (SmolLM2's bos is "<|im_start|>")."""
    if not special_tokens or not special_tokens.get("bos_token"):
        return dict(special_tokens) if special_tokens else None
    return {**special_tokens, "bos_token": _BOS}


def _text_before(source: str, special_tokens: Mapping[str, str] | None, messages: list[dict],
                 sentinel: str, after: str | None = None) -> str | None:
    """What the template writes before `sentinel` (and after `after`), less a leading bos_token."""
    text = _try_render(source, messages, _with_bos_sentinel(special_tokens))
    if text is None or sentinel not in text:
        return None
    before = text[: text.find(sentinel)]
    if after is not None:
        at = before.rfind(after)
        before = before[at + len(after):] if at >= 0 else before
    return before.removeprefix(_BOS)


def _user_header_from(source: str, special_tokens: Mapping[str, str] | None, prefix: list[dict]) -> str | None:
    """Text before the first user message's content, less any bos token."""
    return _text_before(source, special_tokens, [*prefix, {"role": "user", "content": _U1}], _U1,
                        after=_SYS if prefix else None)


def _split_markers(close: str, known: list[str]) -> list[tuple[str, str]]:
    """'<|im_end|>\\n' → [('<|im_end|>', '\\n')]; ' </s>' → [('</s>', '')].

    With known special tokens, each one written in the close text is a marker (plain text such as
    a closing tag before it cannot be a stop token). Without, the first non-whitespace run is.
    """
    markers: list[tuple[str, str]] = []
    pieces = _pieces(close, known)
    for i, piece in enumerate(pieces):
        if piece in known:
            after = pieces[i + 1] if i + 1 < len(pieces) and pieces[i + 1].isspace() else ""
            markers.append((piece, after))
    if markers:
        return markers
    match = re.match(r"\s*(\S+)(\s*)", close)
    return [(match.group(1), match.group(2))] if match else []


def find_end_of_turn(
    source: str,
    special_tokens: Mapping[str, str] | None = None,
    known_special_texts: Iterable[str] = (),
    *,
    limits: RenderLimits = RenderLimits(),
) -> list[EndOfTurnMarker]:
    """The marker(s) the template writes after assistant content, found by rendering sentinel
    conversations. Empty when the template writes nothing there (it never closes the turn).

    Pass the model's special tokens: templates write `eos_token` by variable, and without it the
    variable renders empty (as it would in transformers for a tokenizer without that token).
    Raises TemplateError when no conversation shape renders, or on a sandbox/limit violation.
    """
    with _sentinel_limits(limits):
        return _find_end_of_turn(source, special_tokens, known_special_texts)


def _find_end_of_turn(source: str, special_tokens: Mapping[str, str] | None,
                      known_special_texts: Iterable[str]) -> list[EndOfTurnMarker]:
    known = _known_texts(special_tokens, known_special_texts)
    closes = _assistant_close_texts(source, special_tokens, known)
    if not closes:
        # Every shape was rejected: surface the template's own reason for the simplest one.
        render_chat(source, [{"role": "user", "content": _U1}, {"role": "assistant", "content": _A1}],
                    special_tokens=special_tokens, limits=_SENTINEL_LIMITS.get())
        raise TemplateIgnoresMessages("chat template renders no user/assistant conversation: the messages never appear in its output",
                                      "a chat template must write each message's content")
    markers: list[EndOfTurnMarker] = []
    seen: set[str] = set()
    for close in closes:
        for text, trailing in _split_markers(close, known):
            if text in seen:
                continue
            seen.add(text)
            markers.append(EndOfTurnMarker(
                text=text,
                trailing=trailing,
                evidence=f"after assistant content the template writes {json.dumps(close, ensure_ascii=False)}",
            ))
    return markers


def find_turn_headers(source: str, special_tokens: Mapping[str, str] | None = None, *,
                      limits: RenderLimits = RenderLimits()) -> dict[str, str]:
    """role → text the template writes right before that role's content.

    The user header is taken from a second user turn (what follows a closed assistant turn, the
    thing a runaway model hallucinates); the assistant header from the generation prompt when the
    template has one. Roles the template rejects are left out.
    """
    with _sentinel_limits(limits):
        return _find_turn_headers(source, special_tokens)


def _find_turn_headers(source: str, special_tokens: Mapping[str, str] | None) -> dict[str, str]:
    known = _known_texts(special_tokens, ())
    u1, a1 = {"role": "user", "content": _U1}, {"role": "assistant", "content": _A1}
    u2 = {"role": "user", "content": _U2}
    headers: dict[str, str] = {}

    mid = _try_render(source, [u1, a1, u2], special_tokens)
    closes = _assistant_close_texts(source, special_tokens, known)
    if mid is not None:
        between = _between(mid, _A1, _U2)
        if between is not None:
            close = next((c for c in closes if between.startswith(c)), "")
            headers["user"] = between[len(close):]
    if "user" not in headers:
        first = _user_header_from(source, special_tokens, [])
        if first is not None:
            headers["user"] = first

    plain = _try_render(source, [u1], special_tokens, add_generation_prompt=False)
    prompted = _try_render(source, [u1], special_tokens, add_generation_prompt=True)
    pair = _try_render(source, [u1, a1], special_tokens)
    between_ua = _between(pair, _U1, _A1) if pair is not None else None
    gen_prompt = None
    if plain is not None and prompted is not None and prompted.startswith(plain):
        gen_prompt = prompted[len(plain):]
    if gen_prompt and (between_ua is None or between_ua.endswith(gen_prompt)):
        headers["assistant"] = gen_prompt
    elif between_ua is not None and plain is not None:
        user_close = _between(plain, _U1, None) or ""
        headers["assistant"] = between_ua[len(_common_prefix(user_close, between_ua, known)):]

    system = _text_before(source, special_tokens, [{"role": "system", "content": _SYS}, u1], _SYS)
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
    with _sentinel_limits(limits):
        text = _first_render(source, {**specials, "bos_token": _BOS_SENTINEL})
        if text is None:
            return False
        if text.startswith(_BOS_SENTINEL):
            return True
        if not text.startswith(bos_token):
            return False
        return not any(header.startswith(bos_token) for header in _find_turn_headers(source, specials).values())


def _first_render(source: str, special_tokens: Mapping[str, str]) -> str | None:
    """The first of a few simple conversations the template accepts, rendered."""
    user = {"role": "user", "content": _U1}
    for messages, prompt in (([user], True), ([user], False),
                             ([user, {"role": "assistant", "content": _A1}], False)):
        text = _try_render(source, messages, special_tokens, add_generation_prompt=prompt)
        if text is not None:
            return text
    return None
