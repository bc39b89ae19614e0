"""The probes of the server around the answer: `server`, `default-budget`, `context`,
`stream-whole`, `reasoning-split`.

Imports: actions.generate.stream (the one stream-vs-answer comparison), actions.probe_server.*.
"""

from __future__ import annotations

import math
from typing import Any

from stopdoctor.actions.generate.stream import StreamCapture, stream_issues
from stopdoctor.actions.probe_server.probe import FAIL, PASS, SKIP, WARN, Outcome, ProbeContext, verdict
from stopdoctor.actions.probe_server.stop_probes import (END_MARKERS, SHORT_QUESTION, THINK_CLOSE, refused_outcome,
                                                        short_answer, thinks)

COUNT_QUESTION = "Count from 1 to 1000, separated by commas."
BUDGET_READ = 256  # tokens read before hanging up: a default budget below this is seen
BUDGET_WARN = 256  # a reasoning model needs more; the 16 and 128 token defaults hide below it
CONTEXT_SENDABLE = 32768  # a longer served context takes too long to overflow in a probe
FILLER = "The quick brown fox jumps over the lazy dog. "
EMOJI_QUESTION = "Write three emoji for happy, sad and love, nothing else."


def server_probe(ctx: ProbeContext) -> Outcome:
    identity, expected = ctx.identity, ctx.expectation
    figures = {"engine": identity.engine, "version": identity.version, "told_by": identity.told_by,
               "model": identity.model, "models": list(identity.models), "context": identity.context,
               "expected": {"known": expected.known, "stop_rule": expected.stop_rule,
                            "defaults": [{"applies_to": d.applies_to, "what": d.what, "value": d.value,
                                          "version_read": d.version, "source": d.source} for d in expected.defaults]}}
    ctx.evidence.append({"identity_routes": identity.seen})
    if identity.seen.get("/v1/models") != 200 or not identity.models:
        return FAIL, (f"/v1/models answered {identity.seen.get('/v1/models', identity.seen.get('error'))!r}, not a model "
                      "list: not an OpenAI-compatible server, or the URL is wrong"), figures
    served = f"model {identity.model!r}"
    if identity.engine is None:
        return WARN, (f"{served}; the engine does not name itself (Server: {identity.seen.get('Server', 'none')}): "
                      "stopdoctor's tables cannot say what it should do, the other probes say what it does"), figures
    version = identity.version or "version not given"
    line = f"{identity.engine} {version} (from {identity.told_by}), {served}"
    if not expected.known:
        return WARN, f"{line}; stopdoctor's tables do not model this engine", figures
    return PASS, f"{line}; expected stop rule: {expected.stop_rule}", figures


def _budget_stream(ctx: ProbeContext, route: str, read: int) -> Any:
    if route == "chat":
        return ctx.chat_stream(COUNT_QUESTION, max_chunks=read)
    return ctx.keep(ctx.client.complete_stream("1, 2, 3, 4, 5,", max_chunks=read))


def default_budget(ctx: ProbeContext) -> Outcome:
    figures: dict[str, Any] = {}
    lines, warned = [], False
    for route, read in (("chat", BUDGET_READ), ("completions", 64)):
        streamed = _budget_stream(ctx, route, read)
        if streamed.error:
            lines.append(f"{route}: refused ({streamed.error[:80]})")
            continue
        tokens = (streamed.usage or {}).get("completion_tokens") or len(streamed.chunks)
        table = ctx.expectation.default_budget(route)
        told = f"; stopdoctor's tables expect {table.value} ({table.source})" if table else ""
        if streamed.closed_early:
            figures[route] = {"at_least": tokens}
            lines.append(f"{route}: no budget below {tokens} tokens")
        elif streamed.finish_reason == "length":
            figures[route] = {"tokens": tokens}
            lines.append(f"{route}: {tokens} tokens when the request names no budget{told}")
            warned = warned or tokens < BUDGET_WARN
        else:
            figures[route] = {"at_least": tokens, "finish_reason": streamed.finish_reason}
            lines.append(f"{route}: the model ended by itself after {tokens} tokens; no budget below that")
    said = ctx.identity.default_max_tokens
    if said is not None:
        figures["props_n_predict"] = said
        seen = figures.get("chat", {}).get("tokens")
        if seen is not None and seen != said:  # llama.cpp b10434 keeps -1 in /props under `-n 16`
            lines.append(f"/props says n_predict {said}: only a request shows the budget")
    if warned:
        return WARN, "; ".join(lines) + f" (below {BUDGET_WARN}: a reasoning model or a long answer is cut)", figures
    return PASS, "; ".join(lines), figures


def context(ctx: ProbeContext) -> Outcome:
    served = ctx.identity.context
    if served is None:
        return SKIP, "the server does not say its context (llama.cpp /props, TGI /info, vLLM max_model_len)", {}
    if served > CONTEXT_SENDABLE:
        return SKIP, f"the served context ({served} tokens) is too long to overflow within the probe's bounds", {}
    # Two short prompts measure what one filler sentence costs in this vocabulary.
    small, large = (ctx.chat(FILLER * n, max_tokens=1) for n in (8, 16))
    if small.prompt_tokens is None or large.prompt_tokens is None or large.prompt_tokens <= small.prompt_tokens:
        return SKIP, "the server reports no usage.prompt_tokens: a silent cut cannot be told", {}
    per = (large.prompt_tokens - small.prompt_tokens) / 8
    overhead = small.prompt_tokens - 8 * per
    repeats = math.ceil((served * 1.25 - overhead) / per)
    sent = round(overhead + repeats * per)
    answer = ctx.chat(FILLER * repeats, max_tokens=4)
    figures = {"served_context": served, "sent_tokens": sent, "prompt_tokens": answer.prompt_tokens}
    if answer.error is not None:
        return PASS, f"a prompt of about {sent} tokens (context {served}) is refused: HTTP {answer.status}", figures
    if answer.prompt_tokens is None:
        return WARN, f"a prompt of about {sent} tokens (context {served}) was answered, without usage", figures
    if answer.prompt_tokens < sent * 0.95:
        return FAIL, (f"a prompt of about {sent} tokens (context {served}) was cut silently to {answer.prompt_tokens} "
                      "tokens and answered: the model never saw the whole prompt"), figures
    return WARN, (f"a prompt of {answer.prompt_tokens} tokens (context {served}) was answered whole: a context "
                  "shift, the start of the prompt dropped from the model's view"), figures


def _compare(whole: Any, streamed: Any, specials: tuple[str, ...]) -> list[str]:
    """What the stream got wrong against the whole answer (`actions.generate.stream`'s judgement)."""
    if streamed.error:
        return [f"the streamed request was refused: {streamed.error[:120]}"]
    capture = StreamCapture(list(streamed.chunks), streamed.finish_reason,
                            None if streamed.finish_event is None else streamed.finish_event, streamed.after_finish,
                            streamed.done)
    problems = [f"{i.kind}: {i.detail}" for i in stream_issues(capture, whole.text or "", (), specials)
                if i.kind != "no-done"]
    if streamed.finish_reason is None:
        problems.append("no chunk carried a finish_reason")
    return problems


def _diverged(whole: Any, streamed: Any) -> list[str]:
    """Another text with no stream defect to name: a batched server's greedy decoding may vary."""
    if streamed.error or streamed.text == (whole.text or ""):
        return []
    return [f"the stream is {streamed.text[:80]!r}, the whole answer {(whole.text or '')[:80]!r}"]


def stream_whole(ctx: ProbeContext) -> Outcome:
    whole = short_answer(ctx)
    if (refused := refused_outcome(whole)) is not None:
        return refused
    asked: dict[str, Any] = {"stream_options": {"include_usage": True}}
    streamed = ctx.chat_stream(SHORT_QUESTION, max_tokens=64, **asked)
    emoji_whole = ctx.chat(EMOJI_QUESTION, max_tokens=16)
    emoji_stream = ctx.chat_stream(EMOJI_QUESTION, max_tokens=16, **asked)
    problems = _compare(whole, streamed, END_MARKERS) + _compare(emoji_whole, emoji_stream, END_MARKERS)
    notes = [] if problems else _diverged(whole, streamed) + _diverged(emoji_whole, emoji_stream)
    if streamed.usage is None or emoji_stream.usage is None:
        notes.append("no usage in the stream though stream_options.include_usage asked for it")
    if not (streamed.done and emoji_stream.done):
        notes.append("the stream ended without data: [DONE]")
    figures = {"chunks": len(streamed.chunks), "emoji_chunks": len(emoji_stream.chunks)}
    return verdict(problems, notes, "the streams equal the whole answers, characters whole, finish_reason and usage in "
                   "the last chunks", figures)


def reasoning_split(ctx: ProbeContext) -> Outcome:
    first = short_answer(ctx)
    if (refused := refused_outcome(first)) is not None:
        return refused
    if not thinks(first):
        return SKIP, "the model did not think (no reasoning field, no <think> in the answer): nothing to split", {}
    answer = ctx.chat(SHORT_QUESTION, max_tokens=512)
    text = answer.text or ""
    figures = {"reasoning_field": answer.reasoning_field, "thought_chars": len(answer.reasoning or ""),
               "answer_chars": len(text)}
    problems, notes = [], []
    if THINK_CLOSE in text:
        problems.append(f"the thought stayed in content ({THINK_CLOSE} in it): no reasoning parser, or one that "
                        "missed a thought the prompt opened")
    elif answer.reasoning and not text.strip() and answer.finish_reason == "stop":
        problems.append("the answer is empty: everything landed in the thought")
    off = ctx.chat(SHORT_QUESTION, max_tokens=128, chat_template_kwargs={"enable_thinking": False})
    if off.error is None and thinks(off) and (off.reasoning or "").strip():
        notes.append("chat_template_kwargs enable_thinking=false was not honoured: the model still thought")
    words = [w for w in (answer.reasoning or "").split() if len(w) >= 5 and w.isalpha() and w not in text]
    if words:
        stopped = ctx.chat(SHORT_QUESTION, max_tokens=512, stop=[words[0]])
        if stopped.error is None and not (stopped.text or "").strip() and stopped.finish_reason == "stop":
            notes.append(f"the stop string {words[0]!r} fired inside the thought: the answer was lost")
    return verdict(problems, notes, f"the thought is in {answer.reasoning_field!r}, the answer in content", figures)
