"""SD42x: stops a user configured that fire too early — inside the assistant's own turn.

The same safe-stop knowledge `Analysis.stop_hazard` applies to the ids stopdoctor suggests, here
applied to the stops a serving file sets: Modelfile `PARAMETER stop`, llama.cpp `-r`, a request
body's `stop` and `stop_token_ids`.
"""

from __future__ import annotations

from stopdoctor.analysis.core import Analysis
from stopdoctor.core.findings import Severity
from stopdoctor.rules.inputs import ServingInput
from stopdoctor.rules.registry import Rule, rule
from stopdoctor.runtimes.advice import serving_stop_lines

# Tokens that frame the middle of an assistant turn, by what they do there. Each counts only when
# the model's template (or vocabulary, for Harmony) shows the model uses it.
HARMONY_INSIDE = ("<|channel|>", "<|message|>", "<|start|>", "<|end|>")  # gpt-oss: a turn is several messages
REASONING_INSIDE = ("<think>", "</think>", "<|begin_of_thought|>", "<|end_of_thought|>", "<seed:think>", "</seed:think>")
TOOL_CALL_OPENERS = ("<tool_call>", "<|tool_call_begin|>", "<|tool_calls_section_begin|>", "[TOOL_CALLS]",
                     "<|python_tag|>", "<｜tool▁calls▁begin｜>", "<function_call>")


def inside_turn(analysis: Analysis, text: str) -> tuple[str, str] | None:
    """(token, why) when the stop `text` matches something the template writes inside an assistant
    turn (so the stop fires before the turn ends); None when it is safe."""
    facts = analysis.facts
    ends = {m.text for m in analysis.end_of_turn} | ({m.text for m in analysis.turns.also_ends} if analysis.turns else set())
    if text.strip() in ends:
        return None
    vocab_ids = facts.vocab.exact_ids(("<|channel|>", "<|return|>"))
    harmony = len(vocab_ids) == 2
    source = facts.template.source if facts.template is not None else ""
    inner = set(analysis.turns.inner) if analysis.turns is not None else set()
    for token in sorted(inner | set(HARMONY_INSIDE) | set(REASONING_INSIDE) | set(TOOL_CALL_OPENERS), key=len, reverse=True):
        if not token.strip() or token not in text or token in ends:
            continue
        if token in HARMONY_INSIDE and harmony:
            return token, f"{token} frames the messages inside a Harmony (gpt-oss) assistant turn"
        if token in inner:
            return token, f"the template writes {token} inside an assistant turn"
        if token in REASONING_INSIDE and token in source:
            return token, f"{token} closes or opens the thought, before the answer is written"
        if token in TOOL_CALL_OPENERS and token in source:
            return token, f"{token} opens a tool call the assistant writes inside its turn"
    return None


@rule("SD420", "stop-inside-turn", Severity.ERROR, input=ServingInput)
def stop_inside_turn(subject: ServingInput, self: Rule):
    """A configured stop the template writes inside an assistant turn: replies end too early.

    What it checks:
    Every stop string and stop id the serving file sets (Ollama `PARAMETER stop`, llama.cpp `-r`,
    a request's `stop` and `stop_token_ids`) against what the model's template writes inside an
    assistant turn: Harmony's `<|channel|>`, `<|message|>`, `<|start|>`, `<|end|>`; a reasoning
    tag (`<think>`, `</think>`); a tool-call opener (`<tool_call>`, `<|python_tag|>`, `[TOOL_CALLS]`).

    Why it matters:
    Generation stops at the first match, which comes before the turn ends: a gpt-oss reply is cut
    after its first framing token (ollama #17939: replies of about three tokens); `</think>` as a
    stop ends the reply right after the thought, with no answer; a tool-call opener ends the turn
    where the call should begin.

    Example:
    `PARAMETER stop "<|message|>"` for gpt-oss; `"stop": ["</think>"]` for Qwen3.

    Fix:
    Remove the stop, and stop on the end-of-turn token instead (`<|return|>`/`<|call|>` for gpt-oss,
    `<|im_end|>` for Qwen3).

    How the runtimes decide (source):
    Every runtime ends at the first stop match in the decoded text (vLLM detokenizer stop check;
    Ollama runner `findStop`; llama.cpp server `find_stopping_strings`) or at a stop id
    (`stop_token_ids`), whatever turn the model is in.
    """
    analysis, serving = subject.analysis, subject.serving
    vocab = analysis.facts.vocab
    configured = [(s.value, s) for s in serving.stop if isinstance(s.value, str) and s.value]
    configured += [(text, s) for s in serving.stop_token_ids if (text := vocab.text_of(s.value)) is not None]
    ends = [(m.text, m.stop_id) for m in analysis.end_of_turn]
    if analysis.turns is None or analysis.turns.style != "next-header":
        ends = ends[-1:]  # the turn's last closing token; a next-header template needs every header
    for text, setting in configured:
        hit = inside_turn(analysis, text)
        if hit is None:
            continue
        token, why = hit
        instead = serving_stop_lines(serving.kind, ends) if ends else "stop on the end-of-turn token"
        yield self.finding(
            f"{setting.key} {text!r} stops inside the assistant's turn: {why}, so replies end too early",
            f"remove it; {instead}",
            serving.location(setting), stop=text, token=token)
