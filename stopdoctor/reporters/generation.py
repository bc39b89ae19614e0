"""People-facing text and the `generate --json` document (schema_version 1) for a generation,
its diagnosis, and the fragment test. Pure functions: result in, string out. The budget and the
token count come from the result (its request; its steps, or a server's usage), never from len(steps)
alone: a server returns no steps.

Imports: runtimes.stops (the stop set), analysis.diagnose, actions.generate (data classes only; nothing here runs a model), reporters.
"""

from __future__ import annotations

import json
from typing import Any

from rich.markup import escape

from stopdoctor.analysis.diagnose import Generation, StopCause, end_of_turn_odds
from stopdoctor.actions.generate.run import FragmentVerdict, GenerateResult
from stopdoctor.runtimes.stops import RuntimeStops
from stopdoctor.reporters.console import capture, text_of
from stopdoctor.reporters.human import visible as _visible
from stopdoctor.reporters.document import header
from stopdoctor.reporters.document import location as _location


def _cause(cause: StopCause) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": cause.kind}
    if cause.id is not None:
        out["id"] = cause.id
    if cause.text is not None:
        out["text"] = cause.text
    if cause.location is not None:
        out["location"] = _location(cause.location)
    if cause.stop_string is not None:
        out["stop_string"] = cause.stop_string
    if cause.step is not None and cause.step >= 0:
        out["step"] = cause.step
    return out


def _stops(stops: RuntimeStops) -> dict[str, Any]:
    return {
        "source": stops.runtime,
        "rule": stops.rule,
        "ids": [{"id": s.id, "text": s.text, "location": _location(s.location)} for s in stops.stops],
        "strings": list(stops.texts),
    }


def generation_document(result: GenerateResult, fix: Any = None, evidence: Any = None) -> dict[str, Any]:
    """`fix`: a `stopdoctor.fix.GenerateFix` (the line under a runaway), or None; `evidence`: the
    stop evidence measured when a run went to the budget (`stopdoctor.actions.stop_odds`), or None."""
    g, d, request = result.generation, result.diagnosis, result.request
    missed = d.should_have_stopped
    turn = d.hallucinated_turn
    doc: dict[str, Any] = {
        **header("stopdoctor.generate/1"),
        "model": result.model,
        "engine": result.engine,
        "device": result.device,
        "prompt": {"text": request.prompt.text, "templated": request.prompt.templated, "tokens": g.prompt_tokens},
        "stops": _stops(request.stops),
        "max_new_tokens": request.max_new_tokens,
        "sampling": {"temperature": request.sampling.temperature, "top_p": request.sampling.top_p,
                     "seed": request.sampling.seed},
        "new_tokens": g.new_tokens,
        "finish_reason": g.finish_reason,
        "cause": _cause(g.cause),
        "text": g.text,
        "tokens": g.tokens if g.steps else None,
        "steps": [{"step": s.step, "id": s.id, "text": s.text, "special": s.special, "p_end_of_turn": s.p_end_of_turn}
                  for s in g.steps],
        "should_have_stopped": None if missed is None else {
            "id": missed.id, "text": missed.text, "step": missed.step, "reasons": list(missed.reasons), "offset": missed.offset,
        },
        "counterfactual": None if d.counterfactual is None else {
            "stop_ids": list(d.counterfactual.stop_ids), "step": d.counterfactual.step,
            "finish_reason": "stop", "wasted_tokens": d.counterfactual.wasted,
        },
        "hallucinated_turn": None if turn is None else _turn(turn),
        "turns": [_turn(t) for t in d.turns],
        "runaway": g.finish_reason == "length" and d.runaway_signs,
        "stop_string_left": None if d.stop_string_left is None else {
            "text": d.stop_string_left.text, "offset": d.stop_string_left.offset},
        "fix": None if fix is None else {"text": fix.text, "file": fix.file, "key": fix.key},
    }
    odds = end_of_turn_odds(g)
    doc["end_of_turn_odds"] = None if odds is None else {"max_p": odds.max_p, "step": odds.step, "never": odds.never}
    if evidence is not None:  # measured because the run went to the budget with no sign of a runaway
        doc["stop_evidence"] = _evidence(evidence)
    if g.server is not None:
        doc["server"] = g.server
        if "stream" in g.server:
            doc["stream"] = g.server["stream"]
    doc["reasoning"] = reasoning_document(result.reasoning)
    return doc


def reasoning_document(outcome: Any) -> dict[str, Any] | None:
    """JSON `reasoning` of a run (None on a model whose template shows no thought)."""
    if outcome is None:
        return None
    return {"thinking": outcome.mode, "style": outcome.style, "open": outcome.open, "close": outcome.close,
            "thought": outcome.thought, "closed": outcome.closed, "thought_tokens": outcome.thought_tokens,
            "answer_tokens": outcome.answer_tokens, "answer_empty": outcome.answer_empty,
            "ran_out_thinking": outcome.ran_out_thinking, "thought_in_prompt": outcome.thought_in_prompt,
            "source": outcome.source, "answer": outcome.answer, "thought_text": outcome.thought_text,
            "thought_repetition": outcome.thought_repetition, "runaway_thought": outcome.runaway}


def reasoning_line(outcome: Any) -> tuple[str, str] | None:
    """(style, plain line) of the `thought` line of a run, or None."""
    if outcome is None:
        return None
    mode = "" if outcome.mode == "default" else f"thinking {outcome.mode}: "
    frame = f"{outcome.open or ''}…{outcome.close}"
    by = " (split out by the server)" if outcome.source == "server" else ""
    if not outcome.thought:
        state = "an empty thought in the prompt" if outcome.thought_in_prompt == "closed" else "no thought written"
        empty = "; the answer is empty" if outcome.answer_empty else ""
        return ("yellow" if outcome.answer_empty else "green"), f"{mode}{state}{empty}"
    count = f" after {outcome.thought_tokens} tokens" if outcome.thought_tokens is not None else ""
    if outcome.closed:
        answer = "the answer is EMPTY" if outcome.answer_empty else (
            f"then {outcome.answer_tokens} answer tokens" if outcome.answer_tokens is not None else "then the answer")
        return ("bold red" if outcome.answer_empty else "green"), f"{mode}{frame} closed{count}{by}; {answer}"
    if outcome.runaway:
        return "bold red", (f"{mode}{frame} never closed: the thought LOOPS ({outcome.thought_repetition:.0%} of its last "
                            f"word 4-grams repeat) until the budget ran out{count}; the answer is empty (sample as the "
                            "card says: no greedy decoding, its presence penalty)")
    if outcome.ran_out_thinking:
        return "bold red", (f"{mode}{frame} never closed: the budget ran out inside the thought{count}; the answer is "
                            "empty (raise the budget, or turn thinking off)")
    return "bold red", f"{mode}{frame} never closed{count}{by}: the reply ended inside the thought; the answer is empty"


def _turn(turn) -> dict[str, Any]:
    return {"step": turn.step, "role": turn.role, "evidence": turn.evidence, "offset": turn.offset, "source": turn.source}


def render_generation_json(result: GenerateResult, fix: Any = None, evidence: Any = None) -> str:
    return json.dumps(generation_document(result, fix, evidence), indent=2, ensure_ascii=False) + "\n"


def render_generation_runs_json(runs: list) -> str:
    """`generate --thinking both`: one document per run (each as `generate --json` writes it) under `runs`."""
    document = {**header("stopdoctor.generate/1"), "thinking": "both",
                "runs": [generation_document(result, fix, evidence) for result, fix, evidence, *_ in runs]}
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def describe_cause(g: Generation, max_new_tokens: int | None = None) -> str:
    """One line: why generation ended. `max_new_tokens`: the budget, for a run that reached it
    (else the tokens the generation counts; the number is left out when nothing says it)."""
    cause = g.cause
    at = f" at step {cause.step}" if cause.step is not None and cause.step >= 0 else ""
    if cause.kind in ("eos", "stop_id"):
        what = "eos" if cause.kind == "eos" else "stop id"
        where = f", declared in {cause.location}" if cause.location is not None else ""
        token = f"{cause.text} (id {cause.id})" if cause.id is not None else (cause.text or "the end-of-sequence token")
        return f"stop: {what} {token}{at}{where}"
    if cause.kind == "stop_string":
        return f"stop: stop string {json.dumps(cause.stop_string, ensure_ascii=False)} matched in the text of step {cause.step}" \
            if cause.step is not None and cause.step >= 0 else f"stop: stop string {json.dumps(cause.stop_string, ensure_ascii=False)}"
    if cause.kind == "unreported":
        return f"stop: the server did not say which stop ended it (one of {cause.text})"
    if cause.kind == "repetition":
        return "repetition: the server stopped a loop (finish_reason repetition): a degenerate answer, not a finished one"
    budget = max_new_tokens if max_new_tokens is not None else g.new_tokens
    return f"length: ran to the token budget ({budget} new tokens)" if budget is not None else "length: ran to the token budget"


def render_generation_human(result: GenerateResult, color: bool = False, width: int = 100, trace: bool = False,
                            fix: Any = None, evidence: Any = None) -> str:
    out = capture(color, width)
    g, d, stops = result.generation, result.diagnosis, result.request.stops
    mode = result.request.prompt.thinking
    thinking = f", thinking {mode}" if mode != "default" else ""
    out.print(f"[bold]stopdoctor generate[/] {escape(result.model)}  "
              f"[dim]({escape(result.engine)} on {escape(result.device)}{escape(thinking)})[/]")
    ids = ", ".join(f"{s.id} {s.text}" if s.text else str(s.id) for s in stops.stops) or "none"
    strings = f"; strings {escape(json.dumps(list(stops.texts), ensure_ascii=False))}" if stops.texts else ""
    out.print(f"  stops     {escape(stops.runtime)}: {escape(f'[{ids}]')}{strings}  [dim]({escape(stops.rule)})[/]")
    if trace and g.steps:
        out.print("  trace")
        for s in g.steps:
            mark = "  [magenta]special[/]" if s.special else ""
            odds = f"  [dim]P(eot) {s.p_end_of_turn:.2g}[/]" if s.p_end_of_turn is not None else ""
            out.print(f"    {s.step:>4}  {s.id:>7}  {escape(json.dumps(s.text, ensure_ascii=False))}{mark}{odds}")
    out.print("  text")
    for line in (g.text or "").split("\n"):
        out.print(f"    [dim]│[/] {escape(line)}", soft_wrap=True)
    style = "green" if g.finish_reason == "stop" else ("bold red" if d.runaway_signs else "yellow")
    count = f"{g.new_tokens} tokens" if g.new_tokens is not None else ""
    out.print(f"  finish    [{style}]{escape(describe_cause(g, result.request.max_new_tokens))}[/]"
              + (f"  [dim]({count})[/]" if count else ""))
    if g.server is not None:
        server = g.server
        said = f"finish_reason={server.get('finish_reason')}"
        if server.get("stop_reason") is not None:
            said += f", stop_reason={server.get('stop_reason')}"
        usage = server.get("usage") or {}
        if usage.get("completion_tokens") is not None:
            said += f", completion_tokens={usage['completion_tokens']}"
        out.print(f"  server    {escape(said)}  [dim]({escape(server.get('url', ''))}, route {escape(server.get('route', ''))})[/]")
        if server.get("rejected_fields"):
            out.print(f"  [yellow]note[/]      the server rejected {escape(', '.join(server['rejected_fields']))}: "
                      "it does not stop on those ids; sent without them")
        stream = server.get("stream")
        if stream is not None:
            state = "[green]same text as the answer[/]" if not stream["issues"] else "[red]differs from the answer[/]"
            out.print(f"  stream    {stream['chunks']} chunks, finish_reason={escape(str(stream['finish_reason']))}: {state}")
            for issue in stream["issues"]:
                out.print(f"    [red]{issue['kind']}[/]  {escape(issue['detail'])}")
    left = d.stop_string_left
    if left is not None:
        out.print(f"  [bold red]stop left[/] the stop string {escape(json.dumps(left.text, ensure_ascii=False))} is in the "
                  f"answer at character {left.offset}: the server did not cut there, and the client is shown it")
    missed = d.should_have_stopped
    if missed is not None:
        where = f"at step {missed.step}" if missed.step is not None else "in the returned text"
        why = ("but the server went on past it" if missed.id in stops.ids
               else "but is not a stop id")
        out.print(f"  [bold red]missed[/]    {escape(missed.text or '?')} (id {missed.id}) {where} should have ended the turn "
                  f"{why}")
        for reason in missed.reasons:
            out.print(f"              [dim]- {escape(reason)}[/]")
    if fix is not None:
        out.print(f"  [bold]fix[/]       {escape(fix.text)}")
    if d.counterfactual is not None:
        cf = d.counterfactual
        label = "          " if fix is not None else "[bold]fix[/]       "
        out.print(f"  {label}with stop ids {list(cf.stop_ids)} this would have ended at step {cf.step} "
                  f"with finish_reason=stop; {cf.wasted} tokens wasted")
    thought = reasoning_line(result.reasoning)
    if thought is not None:
        out.print(f"  thought   [{thought[0]}]{escape(thought[1])}[/]")
    turn = d.hallucinated_turn
    if turn is not None:
        where = f"at step {turn.step}" if turn.step is not None else f"at character {turn.offset}"
        # a red "runaway" only when it really ran on; a stop that cut the turn short is a note
        label = "[bold red]runaway[/]  " if g.finish_reason == "length" else "[yellow]note[/]     "
        out.print(f"  {label} the model wrote a {escape(turn.role)} turn itself {where}: "
                  f"{escape(json.dumps(turn.evidence, ensure_ascii=False))} ({escape(turn.source)})")
    elif missed is None and g.finish_reason == "length" and not (result.reasoning and result.reasoning.ran_out_thinking):
        style = "bold red" if evidence is not None and evidence.never_stops else "dim"
        label = "weights   " if evidence is not None and evidence.never_stops else "budget    "
        out.print(f"  [{style}]{label}[/]{escape(budget_or_weights(result, evidence))}")
    return text_of(out)


def end_of_turn_name(result: GenerateResult) -> str:
    templated = [e.text for e in result.enders.values() if e.text and any(r.startswith("chat template") for r in e.reasons)]
    names = templated or [e.text for e in result.enders.values() if e.text]
    return " / ".join(dict.fromkeys(names)) or "the end-of-turn token"


def budget_or_weights(result: GenerateResult, evidence: Any = None) -> str:
    """Why a generation with no sign of a runaway ran to the budget: the budget, or weights that
    never learned to stop. `evidence`: `stopdoctor.actions.stop_odds.StopEvidence`, when measured."""
    odds = end_of_turn_odds(result.generation)
    name = end_of_turn_name(result)
    seen = "" if odds is None else f"the highest P({name}) during the run was {odds.max_p:.2g} (step {odds.step})"
    if evidence is not None and evidence.never_stops:
        return (f"the model never put more than {odds.max_p:.1g} on {name} in {odds.steps} steps, and "
                if odds is not None else "") + \
            (f"{evidence.explain()}: its weights never learned to stop; no stop configuration will end this "
             f"(see `stopdoctor inspect --weights`, `stop-odds`, `labels`)")
    if evidence is not None and evidence.reference_median is not None:
        return (f"no turn-ending token and no new turn in the text; {seen + '; ' if seen else ''}on reference answers it "
                f"ends its turn (median P {evidence.reference_median:.2f}): the budget may just be too small")
    return f"no turn-ending token and no new turn in the text{'; ' + seen if seen else ''}: the budget may just be too small"


def fragment_document(model: str, verdict: FragmentVerdict) -> dict[str, Any]:
    return {
        **header("stopdoctor.fragment-test/1"),
        "model": model,
        "verdict": verdict.verdict,
        "reason": verdict.reason,
        "max_new_tokens": verdict.max_new_tokens,
        "probes": [
            {"name": p.name, "prompt": p.prompt, "ended_turn": p.ended_turn, "finish_reason": p.generation.finish_reason,
             "cause": _cause(p.generation.cause), "text": p.generation.text, "tokens": p.generation.tokens,
             "new_tokens": p.generation.new_tokens}
            for p in verdict.probes
        ],
        "stop_evidence": _evidence(getattr(verdict, "evidence", None)),
    }


def _evidence(evidence: Any) -> dict[str, Any] | None:
    if evidence is None:
        return None
    return {"never_stops": evidence.never_stops, "reference_median_p_end_of_turn": evidence.reference_median,
            "reference_examples": evidence.reference_examples,
            "untrained_end_of_turn": [{"id": w.id, "text": w.text, "reasons": list(w.reasons)} for w in evidence.untrained_rows],
            "explanation": evidence.explain()}


def render_fragment_json(model: str, verdict: FragmentVerdict) -> str:
    return json.dumps(fragment_document(model, verdict), indent=2, ensure_ascii=False) + "\n"


def render_fragment_human(model: str, verdict: FragmentVerdict, color: bool = False, width: int = 100) -> str:
    out = capture(color, width)
    out.print(f"[bold]stopdoctor generate --fragment-test[/] {escape(model)}")
    _fragment_lines(out, verdict)
    return text_of(out)


def render_live_human(verdict: FragmentVerdict, color: bool = False, width: int = 100) -> str:
    """The `check --live` section under a model's report: the fragment probe it ran, and its verdict."""
    out = capture(color, width)
    out.print("[bold]live probe[/] (generate --fragment-test on the weights)")
    _fragment_lines(out, verdict)
    return text_of(out)


def _fragment_lines(out, verdict: FragmentVerdict) -> None:
    for p in verdict.probes:
        count = p.generation.new_tokens
        if p.ended_turn:
            ended = f"ended its turn ({escape(describe_cause(p.generation))})"
        elif count is not None:
            ended = f"did not end its turn in {count} tokens"
        elif verdict.max_new_tokens is not None:
            ended = f"did not end its turn within its {verdict.max_new_tokens}-token budget"
        else:
            ended = "did not end its turn"
        out.print(f"  {escape(p.name):<14} {escape(json.dumps(p.prompt, ensure_ascii=False))} → {ended}")
        out.print(f"    [dim]│[/] {escape(_visible(p.generation.text[:200]))}", soft_wrap=True)
    out.print(f"  verdict   [bold]{escape(verdict.verdict)}[/]: {escape(verdict.reason)}")
    evidence = getattr(verdict, "evidence", None)
    if evidence is not None and not evidence.never_stops and evidence.reference_median is not None:
        out.print(f"  odds      [dim]on reference answers it ends its turn (median P {evidence.reference_median:.2f}): "
                  f"the weights can stop[/]")
