"""The probes of how an answer ends: `end-of-turn`, `stop-string`, `stop-held-back`, `finish-reason`.

Each derives what it needs (a word to stop on, an answer's tail) from a greedy answer of the same
server, so it holds for whatever the served model says.

Imports: analysis.diagnose (turn finding, a stop string left in a text), runtimes.engines (what the
engine found takes), actions.probe_server.probe/client.
"""

from __future__ import annotations

import json
import re
from typing import Any

from stopdoctor.actions.probe_server.probe import FAIL, PASS, SKIP, WARN, Outcome, ProbeContext, verdict
from stopdoctor.actions.probe_server.client import Answer
from stopdoctor.analysis.diagnose import find_turns, stop_string_in
from stopdoctor.runtimes.engines import engine as registered

SHORT_QUESTION = "What is 2+2?"  # short known answer: any instruct model ends its turn within a sentence
SHORT_BUDGET = 64
LONG_QUESTION = "Tell me a story about a dragon."  # an answer longer than LONG_BUDGET
LONG_BUDGET = 24  # less than the answer needs: the answer is cut at the budget
CUT_BUDGET = 6
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
DIVERGED = "(another answer) "
NEVER = "\x1f\x1f"  # two unit separators: no model writes them, so a stop ending with them never completes
# End-of-turn texts of the common templates; a server that returns one in content leaked it.
END_MARKERS = ("<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|end|>", "<|endoftext|>", "<|return|>", "</s>",
               "<｜end▁of▁sentence｜>", "<|end_of_text|>", "[/INST]", "<turn|>")
# Turn headers of the common template families (ChatML, Llama 3, Gemma, Mistral-less families use labels).
HEADERS = ({"user": "<|im_start|>user\n", "system": "<|im_start|>system\n"},
           {"user": "<|start_header_id|>user<|end_header_id|>", "system": "<|start_header_id|>system<|end_header_id|>"},
           {"user": "<start_of_turn>user\n"})
SPECIALS = ("<|im_start|>", "<|im_end|>", "<|start_header_id|>", "<|end_header_id|>", "<start_of_turn>", "<end_of_turn>")


def refused_outcome(answer: Answer) -> Outcome | None:
    """A probe cannot judge an answer the server refused: skip on 4xx, fail on 5xx."""
    if answer.error is None:
        return None
    status = FAIL if answer.status >= 500 else SKIP
    return status, f"the server refused the request (HTTP {answer.status}): {answer.error[:160]}", {}


def short_answer(ctx: ProbeContext) -> Answer:
    return ctx.cached("short", lambda: ctx.chat(SHORT_QUESTION, max_tokens=SHORT_BUDGET))


def long_answer(ctx: ProbeContext) -> Answer:
    return ctx.cached("long", lambda: ctx.chat(LONG_QUESTION, max_tokens=LONG_BUDGET))


def leaked_markers(text: str, eos: str | None) -> list[str]:
    markers = set(END_MARKERS) | ({eos} if eos else set())
    return sorted(m for m in markers if m and m in text)


def written_turns(text: str) -> list[str]:
    turns = {t.offset: t for headers in HEADERS for t in find_turns(text, headers, SPECIALS)}
    return [f"{t.role} turn at character {t.offset} ({t.source}: {t.evidence.strip()[:40]!r})" for _, t in sorted(turns.items())]


def thinks(answer: Any) -> bool:
    """The answer shows a thought: a reasoning field, or think tags left in the content."""
    text = answer.text or ""
    return bool(answer.reasoning) or THINK_OPEN in text or THINK_CLOSE in text


def end_of_turn(ctx: ProbeContext) -> Outcome:
    answer = short_answer(ctx)
    if (refused := refused_outcome(answer)) is not None:
        return refused
    if answer.finish_reason != "stop" and thinks(answer):
        # A thinking model may spend the whole budget thinking: ask again with thinking off.
        answer = ctx.chat(SHORT_QUESTION, max_tokens=SHORT_BUDGET, chat_template_kwargs={"enable_thinking": False})
        if answer.error is None and answer.finish_reason != "stop" and thinks(answer):
            return WARN, (f"the model thinks past {SHORT_BUDGET} tokens, also with enable_thinking=false: the end of "
                          "its turn was not reached (see reasoning-split)"), {"finish_reason": answer.finish_reason}
        if (refused := refused_outcome(answer)) is not None:
            return refused
    text = answer.text or ""
    figures = {"finish_reason": answer.finish_reason, "completion_tokens": answer.completion_tokens,
               "max_tokens": SHORT_BUDGET}
    problems = []
    if answer.finish_reason != "stop":
        problems.append(f"finish {answer.finish_reason!r} after {answer.completion_tokens} tokens on a question with a "
                        f"short answer (budget {SHORT_BUDGET}): the turn did not end")
    elif answer.completion_tokens is not None and answer.completion_tokens >= SHORT_BUDGET:
        problems.append(f"finish 'stop' but {answer.completion_tokens} tokens: the whole budget of {SHORT_BUDGET}")
    if leaked := leaked_markers(text, ctx.identity.eos_token):
        problems.append(f"end-of-turn text in the content: {', '.join(leaked)}")
    if turns := written_turns(text):
        problems.append(f"the model wrote the next turn itself: {turns[0]}")
    if problems:
        return FAIL, "; ".join(problems), figures
    return PASS, f"ended with finish 'stop' after {answer.completion_tokens} tokens (budget {SHORT_BUDGET})", figures


def stop_word(text: str) -> str | None:
    """A word of five letters or more met after the answer's start: a stop string of several
    tokens in most vocabularies, and its first occurrence is where the answer must end."""
    words = [w for w in dict.fromkeys(re.findall(r"[A-Za-z]{5,}", text)) if text.index(w) >= 8]
    return max(words, key=len) if words else None


def _judge_stop(answer: Any, stop: str, full: str, how: str) -> str | None:
    """None when `answer` ended right before `stop`'s first occurrence in `full`, else what went wrong."""
    if getattr(answer, "error", None):
        return f"{how}: refused: {answer.error[:120]}"
    expected = full[:full.index(stop)]
    text = answer.text or ""
    if stop_string_in(text, (stop,)) is not None:
        return f"{how}: the stop string {stop!r} is in the content"
    if text != expected:
        if text.startswith(expected):
            return f"{how}: the answer went on past the stop string: {text[len(expected):][:60]!r}"
        # Another answer altogether (a batched server's greedy decoding may vary): no verdict on the stop.
        return f"{DIVERGED}{how}: the answer is {text[-60:]!r}, not the text before the stop string ({expected[-60:]!r})"
    if answer.finish_reason != "stop":
        return f"{how}: finish {answer.finish_reason!r}, not 'stop', though the stop string ended the answer"
    return None


def stop_string(ctx: ProbeContext) -> Outcome:
    base = long_answer(ctx)
    if (refused := refused_outcome(base)) is not None:
        return refused
    full = base.text or ""
    word = stop_word(full)
    if word is None:
        return SKIP, f"no word of five letters in the answer to stop on: {full[:80]!r}", {}
    # The same word without its first two letters: a stop string that starts inside a token.
    stops = [word, word[2:]]
    problems = []
    for stop in stops:
        budget = LONG_BUDGET
        problems.append(_judge_stop(ctx.chat(LONG_QUESTION, max_tokens=budget, stop=[stop]), stop, full, f"{stop!r} whole"))
        problems.append(_judge_stop(ctx.chat_stream(LONG_QUESTION, max_tokens=budget, stop=[stop]), stop, full,
                                    f"{stop!r} streamed"))
    served = registered(ctx.identity.engine)
    if served is not None and served.stop_string_kept_on_request:  # their extension: the stop string kept on request
        kept = ctx.chat(LONG_QUESTION, max_tokens=LONG_BUDGET, stop=[word], include_stop_str_in_output=True)
        if not (kept.text or "").endswith(word):
            problems.append(f"include_stop_str_in_output: the answer does not end with {word!r}")
    figures: dict[str, Any] = {"stops": stops}
    route = served.tokenize_route if served is not None else None
    counts = {stop: _token_count(ctx, route, stop) for stop in stops} if route is not None else {}
    if counts and None not in counts.values():
        figures["stop_tokens"] = counts  # llama.cpp /tokenize: the evidence that each stop is several tokens
    failed = [p for p in problems if p and not p.startswith(DIVERGED)]
    diverged = [p[len(DIVERGED):] for p in problems if p and p.startswith(DIVERGED)]
    if diverged and not failed:
        diverged[0] = "the greedy answer changed between requests, no verdict: " + diverged[0]
    return verdict(failed, diverged, f"{' and '.join(repr(s) for s in stops)} ended the answer, whole and streamed, and "
                   "stayed out of it", figures)


def _token_count(ctx: ProbeContext, route: str, text: str) -> int | None:
    """How many tokens the server's tokenize route (llama.cpp's `/tokenize`) makes of `text` (no
    special tokens added)."""
    reply = ctx.client.transport.post(route, {"content": text, "add_special": False})
    tokens = reply.data.get("tokens") if reply.ok and isinstance(reply.data, dict) else None
    return len(tokens) if isinstance(tokens, list) else None


def held_early(chunks: tuple[str, ...], stop: str) -> str | None:
    """The first chunk boundary where the text so far ends with a proper prefix of `stop` and more
    text follows: that prefix reached the client before the match could fail."""
    text = ""
    for index, chunk in enumerate(chunks[:-1]):
        text += chunk
        for size in range(min(len(stop) - 1, len(text)), 0, -1):
            if text.endswith(stop[:size]):
                return f"after chunk {index} the client already had {stop[:size]!r}, the start of {stop!r}"
    return None


def stop_held_back(ctx: ProbeContext) -> Outcome:
    base = long_answer(ctx)
    if (refused := refused_outcome(base)) is not None:
        return refused
    full = base.text or ""
    if base.finish_reason != "length" or len(full) < 4:
        return SKIP, f"the answer was not cut at the budget of {LONG_BUDGET} tokens (finish {base.finish_reason!r})", {}
    problems = []
    word = stop_word(full)
    if word is not None:
        # A stop string whose start the answer meets mid-way, but which never completes.
        stop = word + NEVER
        streamed = ctx.chat_stream(LONG_QUESTION, max_tokens=LONG_BUDGET, stop=[stop])
        if early := held_early(streamed.chunks, stop):
            problems.append(early)
        elif streamed.text != full and not streamed.error:
            problems.append(f"with the stop {stop!r} the stream is {streamed.text[-60:]!r}, not the answer {full[-60:]!r}")
    # The answer's last two characters start a stop string: held back when the budget ends, they
    # must still be sent.
    tail = full[-2:]
    stop = tail + NEVER
    whole = ctx.chat(LONG_QUESTION, max_tokens=LONG_BUDGET, stop=[stop])
    streamed = ctx.chat_stream(LONG_QUESTION, max_tokens=LONG_BUDGET, stop=[stop])
    figures: dict[str, Any] = {"tail": tail, "stop": stop}
    if whole.text == full and full.startswith(streamed.text) and len(streamed.text) < len(full):
        lost = full[len(streamed.text):]
        figures["lost"] = lost
        problems.append(f"the budget ended while {lost!r} was held back as the start of {stop!r}; the stream never "
                        "sent it (the client lost the answer's end)")
    elif streamed.text != full and not streamed.error:
        problems.append(f"with the stop {stop!r} the stream is {streamed.text[-60:]!r}, not the answer {full[-60:]!r}")
    return verdict(problems, [], "partial stop matches were held back and sent once they failed, also when the budget "
                   "ended", figures)


def finish_reason(ctx: ProbeContext) -> Outcome:
    base = long_answer(ctx)
    if (refused := refused_outcome(base)) is not None:
        return refused
    cut = ctx.chat(LONG_QUESTION, max_tokens=CUT_BUDGET)
    if (refused := refused_outcome(cut)) is not None:
        return refused
    full, text = base.text or "", cut.text or ""
    figures: dict[str, Any] = {"max_tokens": CUT_BUDGET, "finish_reason": cut.finish_reason,
                               "completion_tokens": cut.completion_tokens}
    problems = []
    went_on = len(text) < len(full) and full.startswith(text)  # the same greedy answer continued past the cut
    if cut.finish_reason == "stop" and (went_on or cut.completion_tokens == CUT_BUDGET):
        why = "the same answer goes on with a larger budget" if went_on else f"completion_tokens == max_tokens == {CUT_BUDGET}"
        problems.append(f"an answer cut by max_tokens={CUT_BUDGET} says finish 'stop' ({why}): a client cannot tell it "
                        "was truncated")
    elif went_on and cut.finish_reason != "length":
        problems.append(f"an answer cut by max_tokens={CUT_BUDGET} says finish {cut.finish_reason!r}, not 'length'")
    completions = ctx.keep(ctx.client.complete("The sky is blue because", max_tokens=CUT_BUDGET))
    if completions.error is None:
        figures["completions_finish_reason"] = completions.finish_reason
        if completions.finish_reason == "stop" and completions.completion_tokens == CUT_BUDGET:
            problems.append(f"/v1/completions cut at max_tokens={CUT_BUDGET} says finish 'stop'")
    if ctx.identity.supports_tools:
        problems += _tool_call_cut(ctx)
    if problems:
        return FAIL, "; ".join(problems), figures
    if not went_on:
        return SKIP, f"the answer ended within {CUT_BUDGET} tokens by itself: nothing was cut to judge", figures
    return PASS, f"an answer cut by max_tokens={CUT_BUDGET} says finish 'length'", figures


WEATHER_TOOL = {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def _tool_call_cut(ctx: ProbeContext) -> list[str]:
    answer = ctx.keep(ctx.client.chat([{"role": "user", "content": "What is the weather in Paris? Use the tool."}],
                                      tools=[WEATHER_TOOL], max_tokens=CUT_BUDGET))
    if answer.finish_reason != "tool_calls" or not isinstance(answer.tool_calls, list):
        return []
    for call in answer.tool_calls:
        arguments = (call.get("function") or {}).get("arguments") if isinstance(call, dict) else None
        try:
            json.loads(arguments) if isinstance(arguments, str) else None
        except ValueError:
            return [f"a tool call cut at max_tokens={CUT_BUDGET} mid-JSON ({str(arguments)[:60]!r}) is reported as 'tool_calls'"]
    return []
