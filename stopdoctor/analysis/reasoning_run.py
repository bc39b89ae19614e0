"""What a generation on a reasoning model says about its thought: did it close, how many tokens it
took, is the answer empty. Also which template call turns thinking on or off for `generate
--thinking on|off|both`.

The thought is read from the generated text with special tokens visible (the local engine), or
from what a server's reasoning parser split out (`reasoning_content` / `reasoning` in the chat
message, vLLM, SGLang, llama.cpp, Ollama): then the split is the server's, and the token count
its `usage.completion_tokens_details.reasoning_tokens` when it gives one.

A thought that never closes is a runaway only when it loops (analysis.repetition: at least half of
its last word 4-grams repeat); otherwise it is a budget spent thinking, like any plain `length`.

Imports: analysis.diagnose (the generation data classes), analysis.repetition, template.reasoning.
"""

from __future__ import annotations


from stopdoctor.analysis.diagnose import FINISH_LENGTH, Generation
from stopdoctor.analysis.repetition import REPETITION_THRESHOLD, repeated_share
from stopdoctor.core.errors import InputError
from stopdoctor.core.records import record
from stopdoctor.template.reasoning import ReasoningStructure, Variant

THINKING_MODES = ("on", "off", "both")
# Message fields servers put the parsed thought in (vLLM/SGLang `reasoning_content`, newer vLLM
# and Ollama-compatible `reasoning`).
REASONING_FIELDS = ("reasoning_content", "reasoning")


@record
class ThinkingCall:
    """How the prompt is rendered for a thinking mode: `variant` is the template call (its extra
    variables, or a flag in the system message); `mode` "on", "off" or "default"."""

    mode: str
    variant: Variant
    describe: str

    def messages(self, messages: list[dict]) -> list[dict]:
        """The messages as this call sends them: a `/no_think`-style flag ends the system message
        (one is added when there is none); a switch by template variable leaves them as they are."""
        flag = self.variant.system_flag
        if flag is None:
            return messages
        if messages and messages[0].get("role") == "system" and isinstance(messages[0].get("content"), str):
            return [{**messages[0], "content": f"{messages[0]['content']} {flag}".strip()}, *messages[1:]]
        return [{"role": "system", "content": flag}, *messages]


def thinking_calls(reasoning: ReasoningStructure, thinking: str | None) -> list[ThinkingCall]:
    """The template calls for `--thinking` (None: the template's default, one run). Raises
    InputError when the template cannot do what is asked (precision: never pretend)."""
    if thinking is None:
        return [ThinkingCall("default", Variant(), "the template's defaults")]
    if thinking not in THINKING_MODES:
        raise InputError(f"--thinking {thinking!r}: use on, off or both")
    if not reasoning.is_reasoning:
        raise InputError("--thinking: the chat template shows no thought (not a reasoning template)",
                         hint="drop --thinking; `stopdoctor inspect MODEL` shows the template's reasoning structure")
    modes = ("on", "off") if thinking == "both" else (thinking,)
    calls = []
    for mode in modes:
        on_by_default = reasoning.default_on is not False
        if mode == "on":
            variant = Variant() if on_by_default else reasoning.enable_with
        else:
            variant = reasoning.disable_with if on_by_default else Variant()
        if variant is None:
            why = ("the template always thinks (no switch turns it off" +
                   (": its prompt already opens the thought)" if reasoning.prefilled else ")")
                   if mode == "off" else "no switch of the template turns thinking on")
            raise InputError(f"--thinking {mode}: {why}", hint="run without --thinking for the template's default")
        calls.append(ThinkingCall(mode, variant, variant.describe()))
    return calls


@record
class ReasoningOutcome:
    """JSON `reasoning`: `closed` (None when no thought was written, e.g. thinking off),
    `thought_tokens` (generated tokens before the close marker; None when not known),
    `answer_empty`, and how it was read."""

    mode: str  # "on" | "off" | "default"
    style: str
    open: str | None
    close: str | None
    thought: bool  # the reply holds a thought (or the prompt opened one)
    closed: bool | None
    thought_tokens: int | None
    answer_tokens: int | None
    answer_empty: bool
    answer: str
    thought_text: str
    source: str  # "text" (read from the generated text) | "server" (the server's reasoning field)
    ran_out_thinking: bool  # cut by the budget inside the thought
    thought_in_prompt: str  # "open" (the prompt opened it), "closed" (an empty thought: thinking off), "none"
    thought_repetition: float | None = None  # a thought cut by the budget: share of its last word 4-grams that repeat

    @property
    def runaway(self) -> bool:
        """The budget ran out inside a thought that loops: no budget would have ended it."""
        return self.ran_out_thinking and self.thought_repetition is not None and \
            self.thought_repetition >= REPETITION_THRESHOLD


def _prompt_state(reasoning: ReasoningStructure, prompt: str) -> str:
    """What the generation prompt did with the thought: 'open', 'closed' (written empty) or 'none'."""
    if not reasoning.open or not reasoning.close:
        return "none"
    at = prompt.rfind(reasoning.open)
    if at < 0:
        return "none"
    tail = prompt[at + len(reasoning.open):]
    if reasoning.close in tail:
        return "closed"
    return "open" if not tail.strip() else "none"


def reasoning_outcome(reasoning: ReasoningStructure, generation: Generation, mode: str = "default",
                      end_texts: tuple[str, ...] = ()) -> ReasoningOutcome | None:
    """None on a template that shows no thought. `end_texts`: end-of-turn texts stripped from the
    end of the answer before calling it empty."""
    if not reasoning.is_reasoning or not reasoning.close:
        return None
    open_, close = reasoning.open, reasoning.close
    in_prompt = _prompt_state(reasoning, generation.prompt)
    text = generation.text
    server = generation.server or {}
    field_text = server.get("reasoning")
    length = generation.finish_reason == FINISH_LENGTH
    if isinstance(field_text, str) and field_text:
        # The server's parser split the thought out: `text` is the answer only.
        answer = _strip_end(text, end_texts)
        usage = u if isinstance(u := server.get("usage"), dict) else {}
        details = d if isinstance(d := usage.get("completion_tokens_details"), dict) else {}
        count = details.get("reasoning_tokens")
        closed = bool(answer.strip()) or not length
        return ReasoningOutcome(mode, reasoning.style, open_, close, True, closed,
                                count if isinstance(count, int) and not isinstance(count, bool) else None,
                                None, not answer.strip(), answer, field_text, "server", length and not closed, in_prompt,
                                repeated_share(field_text) if length and not closed else None)
    start = text.find(open_) if open_ else -1
    if start >= 0:
        body_from = start
    elif in_prompt == "open":
        body_from = 0
    else:  # no thought written here (thinking off, or the model skipped it)
        answer = _strip_end(text, end_texts)
        return ReasoningOutcome(mode, reasoning.style, open_, close, False, None, 0 if generation.steps else None,
                                len(generation.steps) or None, not answer.strip(), answer, "", "text", False, in_prompt)
    at = text.find(close, body_from)
    if at < 0 and generation.cause.text == close and generation.cause.kind in ("eos", "stop_id", "stop_string"):
        at = len(text)  # it stopped on the close itself: runtimes leave the stop out of the text
        text = text + close
    closed = at >= 0
    thought_text = text[body_from:at] if closed else text[body_from:]
    answer = _strip_end(text[at + len(close):], end_texts) if closed else ""
    thought_tokens = answer_tokens = None
    if generation.steps:
        thought_tokens, answer_tokens = _count(generation, close, closed)
    return ReasoningOutcome(mode, reasoning.style, open_, close, True, closed, thought_tokens, answer_tokens,
                            not answer.strip(), answer, thought_text, "text", length and not closed, in_prompt,
                            repeated_share(thought_text) if length and not closed else None)


def _count(generation: Generation, close: str, closed: bool) -> tuple[int, int | None]:
    """Generated tokens before the step whose text completes the close marker, and after it."""
    if not closed:
        return len(generation.steps), 0
    seen = ""
    for index, step in enumerate(generation.steps):
        seen += step.text
        if close in seen:
            after = generation.steps[index + 1:]
            stopped = generation.cause.step is not None and after and after[-1].step == generation.cause.step \
                and generation.cause.kind in ("eos", "stop_id")
            return index, len(after) - (1 if stopped else 0)
    return len(generation.steps), 0


def _strip_end(text: str, end_texts: tuple[str, ...]) -> str:
    out = text.rstrip()
    for end in end_texts:
        if end and out.endswith(end):
            out = out[:-len(end)].rstrip()
    return out
