"""Reasoning structure: how a chat template frames a model's thought, learnt by rendering sentinel
conversations with and without the template's own thinking switches, never from a list of families.

What is learnt: the open and close markers of the thought (`<think>`/`</think>`, `<seed:think>`,
`<|START_THINKING|>`, Gemma's `<|channel>`/`<channel|>`), whether the generation prompt already opens
the thought, which switch turns thinking off (or on), whether earlier turns' thoughts are dropped, and
Harmony's channels (gpt-oss: the analysis message closed by `<|end|>`, the answer ending `<|return|>`,
tool calls ending `<|call|>`).

A template is called reasoning only when its *generation prompt* shows it: the prompt opens the
thought, or a switch of the template writes an empty or closed thought there, or names the thought's
tags when enabled, or the assistant's reply is written in channels. A template that merely renders a
`reasoning_content` field or strips `</think>` from history (Qwen3-2507 Instruct) is `none`: precision
first, a chat model must never be told it thinks.

Imports: the standard library, `stopdoctor.template.render`, `stopdoctor.core.errors`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import field

from stopdoctor.core.errors import TemplateError
from stopdoctor.core.records import record
from stopdoctor.template.limits import RenderLimits, TemplateLimitError, overall_deadline_passed
from stopdoctor.template.render import render_chat
from stopdoctor.template.tag_scan import MAX_KNOWN_CHARS as _MAX_KNOWN_CHARS
from stopdoctor.template.tag_scan import TAG as _TAG
from stopdoctor.template.tag_scan import switch_names as _switch_names
from stopdoctor.template.tag_scan import tag_spans as _tag_spans

STYLES = ("think-tags", "harmony", "untagged", "none")

_U, _U2, _A, _T = "sdReasonUsrOne7q", "sdReasonUsrTwo7q", "sdReasonAnswer7q", "sdReasonThought7q"
_FIELDS = ("reasoning_content", "thinking", "reasoning")
_CALL_ARGUMENT = "sdReasonCity7q"
_TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Get the weather.",
                                          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}
# Tag-looking pieces: <|x|>, <｜x｜>, <x>, </x>, <|x>, <x|>, [X], [/X].
# Bounds for a hostile template (a render is bounded by the sandbox; what is learnt from it here is
# bounded by these): the switch names weighed (those naming thinking or reasoning whole, then the
# shortest: enable_thinking, reasoning_effort),
# a switch name's length, the characters of a text scanned for tags (its head and its tail), the
# special-token texts taken for tags (longer ones are no tag), the distinct tags paired.
_MAX_SWITCH_NAMES = 64
_MAX_PAIRED_TAGS = 512
_NOT_SWITCHES = frozenset({"reasoning_content", "thinking_start_token", "thinking_end_token", "think_begin_token",
                           "think_end_token", "reasoning_instructions"})
_MAX_VARIANTS = 24
_THOUGHT_NAME = re.compile(r"think|thought|reason", re.I)
# A channel name after an open marker (`<|channel>thought`, `<|channel|>analysis`): the marker opens a thought.
_THOUGHT_CHANNEL = re.compile(r"(?:thought|think|thinking|reasoning|analysis)\b", re.I)
# A prose thought's end marker written in plain text: `[BEGIN FINAL RESPONSE]`, `[FINAL ANSWER]`.
_PLAIN_MARKER = re.compile(r"\[[A-Z][A-Z _]{2,38}\]")
_PLAIN_MARKER_WORD = re.compile(r"FINAL|RESPONSE|ANSWER")
# A prose opener ending the generation prompt: "Here are my reasoning steps:".
_PROSE_OPENER = re.compile(r"(?:think|thought|reason)[^\n<>\[\]]{0,60}:\s*$", re.I)


@record
class Variant:
    """One way of calling the template: extra variables, and a flag written in the system message."""

    extra: tuple[tuple[str, object], ...] = ()
    system_flag: str | None = None

    def describe(self) -> str:
        if self.system_flag is not None:
            return f"{self.system_flag} in the system message"
        return ", ".join(f"{k}={_show(v)}" for k, v in self.extra) or "the template's defaults"


def _show(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


@record
class ReasoningStructure:
    """What a template writes around a thought; see `analyze_reasoning`. Public JSON names:
    style, open, close, prefilled, can_disable, history_stripped (stop_ids_needed is mapped from
    `stop_texts` by the analysis, which knows the vocabulary)."""

    style: str = "none"  # "think-tags" | "harmony" | "untagged" (a prose thought) | "none"
    open: str | None = None  # what opens the thought (`<think>`, Harmony `<|channel|>analysis<|message|>`)
    close: str | None = None  # what closes it (`</think>`, Harmony `<|end|>`): never an end of turn
    prefilled: bool = False  # the default generation prompt already opens the thought
    default_on: bool | None = None  # thinks with the template's defaults (None: not a reasoning template)
    can_disable: str | None = None  # how to turn thinking off ("enable_thinking=false"), or None
    enable: str | None = None  # how to turn it on when it is off by default
    history_stripped: bool | None = None  # earlier turns' thoughts are dropped (None: not seen)
    answer_open: str | None = None  # Harmony: `<|channel|>final<|message|>`
    stop_texts: tuple[str, ...] = ()  # Harmony: what generation must stop on (`<|return|>`, `<|call|>`)
    channel_tokens: tuple[str, ...] = ()  # Harmony: tokens that frame a message (`<|channel|>`, `<|message|>`, `<|start|>`)
    evidence: tuple[str, ...] = field(default=())
    disable_with: Variant | None = None  # the call that turns thinking off (what `can_disable` describes)
    enable_with: Variant | None = None  # the call that turns it on (what `enable` describes)

    @property
    def is_reasoning(self) -> bool:
        return self.style != "none"

    def stop_hazard(self, text: str) -> str | None:
        """Why stopping on this token text would cut a reasoning reply short, or None."""
        if not self.is_reasoning or not text:
            return None
        if text == self.close or (self.style == "harmony" and text == self.close):
            return f"{text} closes the thought: stopping there returns an empty answer"
        if text in self.channel_tokens:
            return f"{text} frames a Harmony message: stopping there ends the reply after a few tokens"
        if text == self.open:
            return f"{text} opens the thought: stopping there returns nothing"
        return None


NONE = ReasoningStructure()


# --------------------------------------------------------------------------------------------


class _Probe:
    """Renders sentinel conversations for one template; any rejection is None (an optional probe)."""

    def __init__(self, source: str, special_tokens: Mapping[str, str] | None, limits: RenderLimits) -> None:
        self.source, self.special_tokens, self.limits = source, special_tokens, limits
        self.parts = self.tools = False
        for parts, tools in ((False, False), (True, False), (False, True), (True, True)):
            self.parts, self.tools = parts, tools
            text = self.render([_user(_U), {"role": "assistant", "content": _A}])
            if text is not None and _U in text and _A in text:
                return
        self.parts = self.tools = False

    def render(self, messages: list[dict], add_generation_prompt: bool = False, variant: Variant = Variant()) -> str | None:
        if variant.system_flag is not None:
            messages = [{"role": "system", "content": variant.system_flag}, *messages]
        if self.parts:
            messages = [{**m, "content": [{"type": "text", "text": m["content"]}]} if isinstance(m.get("content"), str) else m
                        for m in messages]
        extra: dict[str, object] = dict(variant.extra)
        for _ in range(3):
            try:
                return render_chat(self.source, messages, add_generation_prompt=add_generation_prompt,
                                   special_tokens=self.special_tokens, limits=self.limits,
                                   tools=[_TOOL] if self.tools else None, extra=extra or None)
            except TemplateLimitError:
                if overall_deadline_passed():
                    raise
                return None
            except TemplateError as exc:
                missing = re.search(r"'(\w{1,40})' is undefined", exc.message)
                if missing is None or missing.group(1) in extra or missing.group(1).endswith("_token"):
                    return None
                extra[missing.group(1)] = ""
        return None

    def generation_prompt(self, variant: Variant) -> tuple[str, str] | None:
        """(the prompt's added text, the whole prompt) under a variant."""
        plain = self.render([_user(_U)], False, variant)
        prompted = self.render([_user(_U)], True, variant)
        if plain is None or prompted is None:
            return None
        if not prompted.startswith(plain):
            # The prompt also changes what comes before the user's text (a BOS or a system line written
            # only with the prompt): compare what follows the user's text.
            if _U not in plain or _U not in prompted:
                return None
            before, after = plain[plain.rfind(_U) + len(_U):], prompted[prompted.rfind(_U) + len(_U):]
            return (after[len(before):] if after.startswith(before) else after), prompted
        if prompted == plain and _U in prompted:
            # The template writes the next header whatever add_generation_prompt says: what follows
            # the user's text is that prompt.
            return prompted[prompted.rfind(_U) + len(_U):], prompted
        return prompted[len(plain):], prompted


def _user(text: str) -> dict:
    return {"role": "user", "content": text}


def _tags(text: str, known: list[str]) -> list[str]:
    """The tag-looking pieces of a text, known special tokens first (longest first)."""
    return [text[start:end] for start, end in _tag_spans(text, known)]


def _core(tag: str) -> str:
    """A tag's name without its brackets, bars, slash and START/END words: `<|END_THINKING|>` → thinking."""
    name = re.sub(r"[<>\[\]|｜/]", "", tag).lower()
    return re.sub(r"^(start|begin|end)_?|_?(start|begin|end)$", "", name)


def _variants(source: str) -> list[Variant]:
    """The template's own thinking switches, read from its source: variables whose name speaks of
    thinking, reasoning or effort, with the values the template compares them to (and true/false),
    and `/think`-like flags it looks for in the system message."""
    names = sorted(_switch_names(source) - _NOT_SWITCHES,
                   key=lambda n: ("thinking" not in n and "reasoning" not in n, len(n), n))[:_MAX_SWITCH_NAMES]
    variants: list[Variant] = []
    for name in names:
        if not re.search(rf"(?<![\w.'\"]){name}\s*(?:is\b|==|!=|\bin\b|%\}}|-%\}}|\)|\band\b|\bor\b|\|)", source) \
                and not re.search(rf"\bif\s+(?:not\s+)?{name}\b", source):
            continue  # never tested: not a switch
        values: list[object] = [True, False]
        for m in re.finditer(rf"\b{name}\s*(?:==|!=)\s*['\"]([^'\"]{{1,24}})['\"]", source):
            values.append(m.group(1))
        for m in re.finditer(rf"\b{name}\s+(?:not\s+)?in\s*\[([^\]]{{1,200}})\]", source):
            values += re.findall(r"['\"]([^'\"]{1,24})['\"]", m.group(1))
        for m in re.finditer(rf"\b{name}\s*(?:==|!=)\s*(\d{{1,6}})\b", source):
            values.append(int(m.group(1)))
        if re.search(rf"(?<![<\w/]){name}\s*(?:<=|>=|<|>)\s*[\w(]", source):
            values.append(0)  # a budget compared with a threshold (`thinking_budget <= k`): zero is its way off
        # The values the template names first: `thinking_budget=0` says more than its equal, false.
        values = [*values[2:], True, False]
        for _, value in dict.fromkeys((type(v), v) for v in values):
            variants.append(Variant(((name, value),)))
    flags = dict.fromkeys(m.group(1) for m in re.finditer(r"['\"](/\w{0,12}think\w{0,12})['\"]", source))
    variants += [Variant(system_flag=flag) for flag in flags]
    return variants[:_MAX_VARIANTS]


# --------------------------------------------------------------------------------------------


def analyze_reasoning(source: str, special_tokens: Mapping[str, str] | None = None,
                      known_special_texts: Iterable[str] = (), *, limits: RenderLimits = RenderLimits()) -> ReasoningStructure:
    """Learn how the template frames a thought (see the module doc). `NONE` for a chat template
    whose prompt never shows one. Raises only on the command's overall render deadline."""
    known = sorted({t for t in known_special_texts if t} | {str(v) for v in (special_tokens or {}).values() if v},
                   key=len, reverse=True)
    probe = _Probe(source, special_tokens, limits)
    harmony = _harmony(probe, known)
    if harmony is not None:
        return harmony
    return _think_tags(probe, source, known)


def _harmony(probe: _Probe, known: list[str]) -> ReasoningStructure | None:
    """The reply written as messages in channels: `S1 analysis S2 thought CLOSE … S1 final S2 answer`."""
    for name in _FIELDS:
        text = probe.render([_user(_U), {"role": "assistant", "content": _A, name: _T}])
        if text is None or _T not in text or _A not in text or text.find(_T) > text.find(_A):
            continue
        before = text[text.rfind(_U):text.find(_T)]
        between = text[text.find(_T) + len(_T):text.find(_A)]
        head, tail = _channel_header(before, known), _channel_header(between, known)
        if head is None or tail is None or head[0] != tail[0] or head[2] != tail[2] or head[1] == tail[1]:
            continue
        close_tags = _tags(between, known)
        if not close_tags:
            continue
        close = close_tags[0]
        after = _tags(text[text.find(_A) + len(_A):], known)
        stops = [after[0]] if after else []
        call = _call_close(probe, known)
        if call is not None and call not in stops:
            stops.append(call)
        prompt = probe.generation_prompt(Variant())
        starts = [t for t in (_tags(prompt[0], known)[:1] if prompt else []) if t not in (head[0], head[2])]
        history = _history_stripped(probe, name)
        return ReasoningStructure(
            "harmony", head[0] + head[1] + head[2], close, prefilled=False, default_on=True, can_disable=None,
            history_stripped=history, answer_open=tail[0] + tail[1] + tail[2], stop_texts=tuple(stops),
            channel_tokens=tuple(dict.fromkeys((head[0], head[2], *starts))),
            evidence=(f"the assistant's {name} is written as {head[0] + head[1] + head[2]}…{close}, its answer as "
                      f"{tail[0] + tail[1] + tail[2]}…{stops[0] if stops else '?'}",))
    return None


def _channel_header(text: str, known: list[str]) -> tuple[str, str, str] | None:
    """The trailing `TAG word TAG` of a text (`<|channel|>analysis<|message|>`), or None."""
    spans = _tag_spans(text, known)
    if len(spans) < 2:
        return None
    (s1, e1), (s2, e2) = spans[-2], spans[-1]
    word = text[e1:s2]
    if e2 != len(text) or not re.fullmatch(r"[A-Za-z]{2,20}", word):
        return None
    return text[s1:e1], word, text[s2:e2]


def _call_close(probe: _Probe, known: list[str]) -> str | None:
    """The tag written right after a final tool call's arguments (Harmony `<|call|>`)."""
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": _CALL_ARGUMENT}}}
    text = probe.render([_user(_U), {"role": "assistant", "content": "", "tool_calls": [call]}])
    if text is None or _CALL_ARGUMENT not in text:
        return None
    after = _tags(text[text.rfind(_CALL_ARGUMENT):], known)
    return after[0] if after else None


def _history_stripped(probe: _Probe, name: str | None, open_tag: str | None = None, close: str | None = None) -> bool | None:
    """Whether an earlier turn's thought is dropped when another user turn follows."""
    if name is not None:
        message = {"role": "assistant", "content": _A, name: _T}
    elif open_tag and close:
        message = {"role": "assistant", "content": f"{open_tag}\n{_T}\n{close}\n\n{_A}"}
    else:
        return None
    text = probe.render([_user(_U), message, _user(_U2)])
    if text is None or _A not in text:
        return None
    return _T not in text


def _think_tags(probe: _Probe, source: str, known: list[str]) -> ReasoningStructure:
    default = probe.generation_prompt(Variant())
    if default is None:
        return NONE
    prompts: dict[Variant, tuple[str, str]] = {Variant(): default}
    for variant in _variants(source):
        prompt = probe.generation_prompt(variant)
        if prompt is not None:
            prompts[variant] = prompt
    user_text = probe.render([_user(_U)]) or ""
    header_tags = set(_tags(user_text[:user_text.find(_U)][-80:], known)) if _U in user_text else set()
    # Tags the prompts end with, beyond the user turn's own (a header tag is written there too).
    endings = {v: _last_tag(p[0], known) for v, p in prompts.items()}
    added = [_tags(p[1], known) for v, p in prompts.items() if v != Variant() and p[1] != default[1]]
    added_tags = [t for tags in added for t in tags if t not in default[1]]
    # Tags the default prompt writes in its own text (Phi-4-reasoning's system message asks for
    # `<think> {Thought section} </think>`): a candidate only when its name speaks of a thought.
    told_tags = [t for t in _tags(default[1], known) if _THOUGHT_NAME.search(_core(t))]
    openers = [*endings.values(), *added_tags, *told_tags]
    # A thought the prompt opens but the template never closes (the model writes the close, OLMo 3
    # Think, R1 distills): its closing form is derived from the opener's own name.
    prompt_tags = [t for p in prompts.values() for t in _tags(p[0], known)]
    named = list(dict.fromkeys(t for t in (*openers, *prompt_tags) if t))[:_MAX_PAIRED_TAGS]
    derived = {c for t in named if _speaks_of_thought(t, source) for c in [_close_form(t)] if c}
    # the template's literal tags, and the known texts it writes, of those names only: a template
    # naming 20,000 tokens is not searched 20,000 times
    cores = {_core(t) for t in named}
    literal_tags = set(_TAG.findall(source)) | {k for k in known if len(k) <= _MAX_KNOWN_CHARS and _core(k) in cores
                                                and k in source}
    for open_tag, close in _candidate_pairs(openers, prompts.values(), literal_tags | derived, known):
        mention = [v for v, p in prompts.items() if v != Variant() and _names_pair(p[1], open_tag, close)
                   and not _names_pair(default[1], open_tag, close)]
        speaks = _speaks_of_thought(open_tag, source)
        # The default prompt itself (before the user's text) tells the model to write its thought
        # between the tags.
        told = not mention and _THOUGHT_NAME.search(_core(open_tag)) is not None \
            and _names_pair(default[1][:default[1].find(_U)] if _U in default[1] else "", open_tag, close)
        if open_tag in header_tags and not told and not speaks:
            continue  # a turn header's tag, not a thought's
        state = {v: _state(p[0], open_tag, close, known) for v, p in prompts.items()}
        shown = {s for s in state.values() if s != "plain"}
        if not shown and not mention and not told:
            continue
        field_name, thought = _thought_field(probe, open_tag, close)
        stripped_history = _history_stripped(probe, field_name, open_tag, close)
        if not speaks and not thought and not stripped_history:
            continue  # a pair of header-like tags (`<|start_of_role|>`): nothing says it frames a thought
        opened = speaks and "open" in shown
        if not thought and not stripped_history and not ("empty" in shown or ("closed" in shown and "open" in shown)) \
                and not mention and not told and not opened:
            continue  # the pair is never shown around a thought: not a thought's tags
        base = state[Variant()]
        # A switch for thinking that opens the thought, or that drops the default's empty thought while
        # writing a thought marker elsewhere (Gemma 4's `<|think|>` in the system turn).
        opens = [v for v, st in state.items() if v != Variant() and _turns_on(v)
                 and (st == "open" or (st == "plain" and base != "plain" and _adds_thought_marker(prompts[v][1], default[1], known, source)))]
        # A switch against thinking that closes the thought, or leaves plain a prompt that opens it by default
        # (Ring-lite's `detailed thinking off`); values other than true/false first (`thinking_budget=0`).
        closes = sorted((v for v, st in state.items() if v != Variant() and not _turns_on(v)
                         and (st in ("closed", "empty") or (base == "open" and st == "plain"))),
                        key=lambda v: (v.system_flag is not None, bool(v.extra) and isinstance(v.extra[0][1], bool)))
        if base in ("closed", "empty") and not opens and not mention and not told:
            continue  # the thought is always written empty: the model never thinks (Qwen3Guard, Command R7B)
        # Plain by default: on unless the only switch seen opens the thought (Bielik, Motif 2) or only
        # names it (Hermes 4 swaps in a system prompt that asks for the tags).
        default_on = base == "open" or (base == "plain" and (bool(closes) or told or not (opens or mention)))
        off = closes[0] if default_on and closes else None
        on = None if default_on else (opens[0] if opens else mention[0] if mention else None)
        evidence = [f"with {v.describe()} the generation prompt ends {p[0][-60:]!r}" for v, p in prompts.items()
                    if state[v] != "plain"][:3]
        if mention:
            evidence.append(f"with {mention[0].describe()} the template names {open_tag}…{close}")
        if told:
            evidence.append(f"the default prompt asks for the thought between {open_tag} and {close}")
        if close in derived and close not in literal_tags:
            evidence.append(f"the template never writes {close}: the model writes it after the thought")
        return ReasoningStructure(
            "think-tags", open_tag, close, prefilled=base == "open", default_on=default_on,
            can_disable=off.describe() if off is not None else None,
            enable=on.describe() if on is not None else None, history_stripped=stripped_history,
            evidence=tuple(evidence), disable_with=off, enable_with=on)
    return _shown_elsewhere(probe, source, known, prompts) or _prose_thought(default, source, known) or NONE


def _adds_thought_marker(prompt: str, default: str, known: list[str], source: str) -> bool:
    return any(t not in default and _speaks_of_thought(t, source) for t in _tags(prompt, known))


def _turns_on(variant: Variant) -> bool:
    """Whether a switch's value asks for thinking (`enable_thinking=true`, `thinking_mode=on`), not against it."""
    if variant.system_flag is not None:
        return "no" not in variant.system_flag.lower()
    name, value = variant.extra[0] if variant.extra else ("", None)
    if isinstance(value, str):
        yes = value.lower() not in ("off", "none", "false", "no", "disabled", "disable", "chat", "0")
    else:
        yes = value is not False and value != 0 and value is not None
    # An inverted switch (`no_thinking`, `disable_reasoning`, `skip_thinking`) asks the other way.
    return yes != name.lower().startswith(("no_", "disable", "skip_", "without_"))


def _speaks_of_thought(tag: str, source: str) -> bool:
    """The tag's name speaks of a thought (`<think>`, `<|START_THINKING|>`), or the template writes it
    followed by a thought channel's name (Gemma 4 `<|channel>thought`)."""
    if _THOUGHT_NAME.search(_core(tag)):
        return True
    at = source.find(tag)
    for _ in range(64):  # bounded: a template writes a marker a handful of times
        if at < 0:
            return False
        if _THOUGHT_CHANNEL.match(source, at + len(tag)):
            return True
        at = source.find(tag, at + 1)
    return False


def _close_form(tag: str) -> str | None:
    """The closing form of an opening tag, from its own shape and name: `<think>` → `</think>`, `[THINK]` → `[/THINK]`,
    `<|think:start|>` → `<|think:end|>`, `<|START_THINKING|>` → `<|END_THINKING|>`."""
    if tag.startswith("<") and not tag.startswith(("</", "<|", "<｜")):
        return "</" + tag[1:]
    if tag.startswith("[") and not tag.startswith("[/"):
        return "[/" + tag[1:]
    if tag.startswith("<|") and not tag.endswith("|>"):
        return "<" + tag[2:-1] + "|>"  # Gemma 4: `<|channel>` → `<channel|>`
    lower = tag.lower()
    for word in ("start", "begin"):
        at = lower.find(word)
        if at >= 0:
            end = "END" if tag[at:at + len(word)].isupper() else "end"
            return tag[:at] + end + tag[at + len(word):]
    return None


def _open_form(tag: str) -> str | None:
    """The opening form of a closing tag (`</think>` → `<think>`), for a template that only writes the close."""
    if tag.startswith("</"):
        return "<" + tag[2:]
    if tag.startswith("[/"):
        return "[" + tag[2:]
    return None


def _shown_elsewhere(probe: _Probe, source: str, known: list[str],
                     prompts: Mapping[Variant, tuple[str, str]]) -> ReasoningStructure | None:
    """A thought the generation prompt never shows by default, seen in what else the template writes:
    (1) earlier turns' thoughts dropped from the history while no message field carries one (the
    original DeepSeek-R1 template: `content.split('</think>')[-1]`), or (2) a thought written around a
    message field plus a switch that changes only a system or settings line (`detailed thinking on`,
    Gemma 4's `<|think|>`, ` /no_think`, a budget line)."""
    literals = list(dict.fromkeys([*_TAG.findall(source), *(k for k in known if k in source)]))
    pairs = [(a, b) for a in literals for b in literals if _pairs(a, b) and _speaks_of_thought(a, source)]
    pairs += [(o, b) for b in literals for o in [_open_form(b)] if o and o not in literals and _pairs(o, b)
              and _speaks_of_thought(o, source)]
    default = prompts.get(Variant())
    switches = [v for v, p in prompts.items() if v.system_flag is None and v != Variant() and default is not None
                and p[1] != default[1]]
    for open_tag, close in pairs[:8]:
        field_name, thought = _thought_field(probe, open_tag, close)
        stripped = _history_stripped(probe, None, open_tag, close)
        if not thought and not stripped:
            continue
        if switches:
            off = next((v for v in switches if not _turns_on(v)), None)
            on = next((v for v in switches if _turns_on(v)), None) if off is None else None
            if off is None and on is None:
                continue
            where = off or on
            assert where is not None  # one of them, by the `continue` above
            return ReasoningStructure(
                "think-tags", open_tag, close, prefilled=False, default_on=off is not None,
                can_disable=off.describe() if off is not None else None, enable=on.describe() if on is not None else None,
                history_stripped=stripped, disable_with=off, enable_with=on,
                evidence=(f"with {where.describe()} only a system or settings line of the prompt changes; the template "
                          f"writes thoughts as {open_tag}…{close}",))
        if stripped and not thought:
            return ReasoningStructure(
                "think-tags", open_tag, close, prefilled=False, default_on=True, history_stripped=True,
                evidence=(f"earlier turns drop everything up to {close}: the model writes its own {open_tag}…{close}",))
    return None


def _prose_thought(default: tuple[str, str], source: str, known: list[str]) -> ReasoningStructure | None:
    """A thought in plain text: the prompt ends with a prose opener ("Here are my reasoning steps:") and
    the template names a bracketed marker that starts the answer (`[BEGIN FINAL RESPONSE]`)."""
    tags = _tag_spans(default[0][-400:], known)
    tail = default[0][-400:][tags[-1][1]:] if tags else default[0][-400:]
    if not tail.strip() or _PROSE_OPENER.search(tail[-120:]) is None:
        return None
    markers = [m.group(0) for m in _PLAIN_MARKER.finditer(source) if _PLAIN_MARKER_WORD.search(m.group(0))]
    if not markers:
        return None
    return ReasoningStructure("untagged", None, markers[0], prefilled=True, default_on=True,
                              evidence=(f"the generation prompt ends with prose {tail.strip()[-60:]!r}; the answer "
                                        f"follows {markers[0]}",))


def _last_tag(text: str, known: list[str]) -> str | None:
    tags = _tags(text, known)
    return tags[-1] if tags and text.rstrip().endswith(tags[-1]) else None


def _candidate_pairs(endings: Iterable[str | None], prompts: Iterable[tuple[str, str]], literals: set[str],
                     known: list[str]) -> list[tuple[str, str]]:
    """(open, close) pairs: an opening tag a prompt writes, and its closing form, written by a
    prompt or found as a literal of the template. Tags the prompts end with come first."""
    seen = [t for t in endings if t is not None]
    for prompt, _ in prompts:
        seen += _tags(prompt, known)
    seen = list(dict.fromkeys(seen))[:_MAX_PAIRED_TAGS]
    cores = {_core(t) for t in seen}
    by_core: dict[str, list[str]] = {}
    for tag in sorted(set(seen) | literals):  # only a closer whose name an opening tag has: linear, not seen x literals
        core = _core(tag)
        if core in cores:
            by_core.setdefault(core, []).append(tag)
    # The opener's own closing form first (`<|start_think|>` → `<|end_think|>`, before a stray `</think>`).
    return [(a, b) for a in seen for b in sorted(by_core.get(_core(a), ()), key=lambda c: c != _close_form(a))
            if _pairs(a, b)]


def _is_closing(tag: str) -> bool:
    return tag.startswith(("</", "[/")) or (tag.endswith("|>") and not tag.startswith("<|")) \
        or re.search(r"(^|[<|｜_:\[])end", tag, re.I) is not None


def _pairs(open_tag: str, close_tag: str) -> bool:
    return open_tag != close_tag and bool(_core(open_tag)) and _core(open_tag) == _core(close_tag) \
        and _is_closing(close_tag) and not _is_closing(open_tag)


def _state(prompt: str, open_tag: str, close: str, known: list[str]) -> str:
    """What a generation prompt does with the thought: 'open' (ends inside it), 'empty' or 'closed'
    (writes it closed), 'plain' (neither)."""
    body = prompt.rstrip()
    if body.endswith(close):
        at = body.rfind(open_tag)
        return "empty" if at >= 0 and re.fullmatch(r"\s*\w{0,20}\s*", body[at + len(open_tag):-len(close)]) else "closed"
    if body.endswith(open_tag):
        return "open"
    at = body.rfind(open_tag)
    if at >= 0 and close not in body[at:] and not _tags(body[at + len(open_tag):], known):
        return "open"  # <think>\n\n: opened, with whitespace only after it
    return "plain"


def _names_pair(text: str, open_tag: str, close: str) -> bool:
    at = text.find(open_tag)
    return at >= 0 and close in text[at:]


def _thought_field(probe: _Probe, open_tag: str, close: str) -> tuple[str | None, bool]:
    """The message field whose text the template writes between the tags, if any."""
    for name in _FIELDS:
        text = probe.render([_user(_U), {"role": "assistant", "content": _A, name: _T}])
        if text is not None and _T in text:
            at = text.find(_T)
            if open_tag in text[:at] and close in text[at:]:
                return name, True
    return None, False
