"""`generate --html FILE` and `stop-odds --html FILE`: one self-contained page each (html_page).

generate: the token stream of the run, each token coloured by whether it could have ended the
turn (in the stop set, a turn-ending token the stop set lacks, the one where the stop was missed),
and P(end-of-turn) per step as a line chart with the missed stop and the stop that ended the run
marked; a server run has no probabilities, so the page shows its text and says so.
stop-odds: how P(end-of-turn) spreads over the reference answers (a histogram by decade, the
bars coloured by the verdict's thresholds) and every answer's numbers.
Pure functions; never prints.

Imports: reporters (plain's escaping, html_page, generation's cause line), actions.stop_odds's
thresholds (constants only; nothing here runs a model), the results (duck-typed).
"""

from __future__ import annotations

import json
import math
from typing import Any

from stopdoctor.actions.stop_odds import LEARNED, NEVER
from stopdoctor.reporters.generation import budget_or_weights, describe_cause, reasoning_line
from stopdoctor.reporters.html_page import chart, count_ticks, page
from stopdoctor.reporters.plain import html_isolated, html_text

# What a token could have done to the turn; the stream's classes and the chart's legend.
STOPPED, MISSED, ENDER, SPECIAL, PLAIN = ("in the stop set", "missed stop", "could end the turn, not a stop id",
                                          "other special token", "ordinary token")
TOKEN_KINDS = {STOPPED: ("stop", "#2e7d32"), MISSED: ("missed", "#c62828"), ENDER: ("ender", "#ef6c00"),
         SPECIAL: ("special", "#1565c0"), PLAIN: ("plain", "#90a4ae")}
FLOOR = 1e-12  # a log axis cannot draw 0: smaller odds are drawn at this floor (the numbers stay exact)

STYLE = ("<style>.stream{background:#fafafa;border:1px solid #ddd;padding:.8em;white-space:pre-wrap;"
         "word-break:break-word;line-height:1.9;font-family:ui-monospace,monospace;font-size:.92em}"
         ".tok{border-radius:3px;padding:0 1px}.tok.plain{background:#eceff1}.tok.special{background:#bbdefb}"
         ".tok.stop{background:#2e7d32;color:#fff}.tok.ender{background:#ffcc80}"
         ".tok.missed{background:#c62828;color:#fff;outline:2px solid #000}.key span{margin-right:1em}"
         ".verdict{font-size:1.1em;padding:.5em .8em;border-left:6px solid #999;background:#f7f7f7}"
         ".verdict.bad{border-color:#c62828}.verdict.good{border-color:#2e7d32}.verdict.meh{border-color:#ef6c00}</style>")


def _kind(step: Any, stop_ids: set[int], enders: dict[int, Any], missed_step: int | None) -> str:
    if step.step == missed_step:
        return MISSED
    if step.id in stop_ids:
        return STOPPED
    if step.id in enders:
        return ENDER
    return SPECIAL if step.special else PLAIN


def _key() -> str:
    return '<p class="key">' + "".join(f'<span><span class="tok {css}">&nbsp;{html_text(name)}&nbsp;</span></span>'
                                       for name, (css, _) in TOKEN_KINDS.items()) + "</p>"


def _stream(result: Any) -> str:
    """Every step as a span (its id, P(end-of-turn) and kind in the title), in order."""
    g, d = result.generation, result.diagnosis
    stop_ids = set(result.request.stops.ids)
    missed = d.should_have_stopped.step if d.should_have_stopped is not None else None
    spans = []
    for s in g.steps:
        kind = _kind(s, stop_ids, result.enders, missed)
        odds = f", P(end-of-turn) {s.p_end_of_turn:.3g}" if s.p_end_of_turn is not None else ""
        spans.append(f'<span class="tok {TOKEN_KINDS[kind][0]}" data-step="{s.step}" data-id="{s.id}" '
                     f'title="step {s.step}, id {s.id}{odds}: {html_text(kind)}">{html_text(s.text)}</span>')
    return f'<div class="stream">{"".join(spans)}</div>'


def odds_spec(result: Any) -> dict[str, Any] | None:
    """P(end-of-turn) before each token (the probability the model gave to ending the turn there),
    log scale; a red rule at the missed stop, a green one at the stop that ended the run."""
    g, d = result.generation, result.diagnosis
    stop_ids = set(result.request.stops.ids)
    missed = d.should_have_stopped
    # NaN or infinite odds (broken weights) are said under the chart, never drawn (JSON has no NaN)
    measured = [s for s in g.steps if s.p_end_of_turn is not None and math.isfinite(s.p_end_of_turn)]
    if not measured:
        return None
    values = [{"step": s.step, "p": s.p_end_of_turn, "drawn": max(s.p_end_of_turn, FLOOR), "token": s.text,
               "id": s.id, "kind": _kind(s, stop_ids, result.enders, missed.step if missed else None),
               "shown": f"{s.p_end_of_turn:.3g}"} for s in measured]
    lowest = min(v["drawn"] for v in values)
    domain = [10 ** math.floor(math.log10(lowest)), 1]
    marks = []  # (step, colour, short label on the chart, the whole sentence in the title)
    if missed is not None and missed.step is not None:
        p = next((v["p"] for v in values if v["step"] == missed.step), None)
        marks.append({"step": missed.step, "colour": "#c62828", "label": "missed stop",
                      "line": f"red dashed line: the missed stop, {missed.text or missed.id} at step {missed.step}"
                              + (f" (P {p:.3g})" if p is not None else "")})
    turn = d.hallucinated_turn
    if turn is not None and turn.step is not None:
        marks.append({"step": turn.step, "colour": "#6a1b9a", "label": f"{turn.role} turn",
                      "line": f"purple dashed line: the model wrote a {turn.role} turn itself at step {turn.step}"})
    cause = g.cause
    if g.finish_reason == "stop" and cause.step is not None and cause.step >= 0:
        marks.append({"step": cause.step, "colour": "#2e7d32", "label": "stopped",
                      "line": f"green dashed line: the stop that ended the run, at step {cause.step}"})
    kinds = [k for k in TOKEN_KINDS if any(v["kind"] == k for v in values)]
    x = {"field": "step", "type": "quantitative", "scale": {"domain": [0, max(len(g.steps) - 1, 1)], "nice": False},
         "axis": {"title": "step (generated token)", "format": "d", "tickMinStep": 1}}
    y = {"field": "drawn", "type": "quantitative", "scale": {"type": "log", "domain": domain},
         "axis": {"title": "P(end-of-turn) before the token (log)", "format": ".0e"}}
    layers: list[dict[str, Any]] = [
        {"mark": {"type": "line", "color": "#455a64"}, "encoding": {"x": x, "y": y}},
        {"mark": {"type": "point", "filled": True, "size": 45}, "encoding": {
            "x": x, "y": y,
            "color": {"field": "kind", "type": "nominal", "title": None,
                      "scale": {"domain": kinds, "range": [TOKEN_KINDS[k][1] for k in kinds]},
                      "legend": {"orient": "top", "labelLimit": 400}},
            "tooltip": [{"field": "step"}, {"field": "id"}, {"field": "token"}, {"field": "shown", "title": "P(end-of-turn)"},
                        {"field": "kind"}]}}]
    for k, m in enumerate(marks):
        layers.append({"data": {"values": [m]}, "mark": {"type": "rule", "strokeWidth": 2, "strokeDash": [4, 3], "color": m["colour"]},
                       "encoding": {"x": {"field": "step", "type": "quantitative"}}})
        layers.append({"data": {"values": [m]},
                       "mark": {"type": "text", "align": "left", "dx": 4, "dy": 12 + 14 * k, "fontSize": 11,
                                "fontWeight": "bold", "color": m["colour"]},
                       "encoding": {"x": {"field": "step", "type": "quantitative"}, "y": {"value": 0},
                                    "text": {"field": "label"}}})
    spec: dict[str, Any] = {"height": 260, "data": {"values": values}, "layer": layers}
    if marks:
        spec["title"] = {"text": [m["line"] for m in marks], "anchor": "start", "fontSize": 12, "fontWeight": "normal"}
    return spec


def _facts_table(result: Any, fix: Any, evidence: Any) -> str:
    g, d, request = result.generation, result.diagnosis, result.request
    rows = [("finish", describe_cause(g, request.max_new_tokens)),
            ("tokens", f"{g.new_tokens if g.new_tokens is not None else '?'} of a budget of {request.max_new_tokens}"),
            ("stop set", f"{request.stops.runtime}: " + (", ".join(f"{s.text or '?'} ({s.id})" for s in request.stops.stops) or "no ids")
             + (f"; strings {json.dumps(list(request.stops.texts), ensure_ascii=False)}" if request.stops.texts else "")
             + f" — {request.stops.rule}")]
    if g.server is not None:
        server, usage = g.server, g.server.get("usage") or {}
        said = f"finish_reason={server.get('finish_reason')}" + (
            f", stop_reason={server.get('stop_reason')}" if server.get("stop_reason") is not None else "") + (
            f", completion_tokens={usage['completion_tokens']}" if usage.get("completion_tokens") is not None else "")
        rows.append(("server said", f"{said} ({server.get('url', '')}, route {server.get('route', '')})"))
        if server.get("rejected_fields"):
            rows.append(("note", f"the server rejected {', '.join(server['rejected_fields'])}: it does not stop on "
                                 "those ids; sent without them"))
    if d.stop_string_left is not None:
        rows.append(("stop left", f"the stop string {json.dumps(d.stop_string_left.text, ensure_ascii=False)} is in the "
                                  f"answer at character {d.stop_string_left.offset}: the server did not cut there"))
    missed = d.should_have_stopped
    if missed is not None:
        where = f"at step {missed.step}" if missed.step is not None else "in the returned text"
        rows.append(("missed stop", f"{missed.text or '?'} (id {missed.id}) {where} should have ended the turn: "
                                    + "; ".join(missed.reasons)))
    if d.counterfactual is not None:
        cf = d.counterfactual
        rows.append(("with the fix", f"stop ids {list(cf.stop_ids)} would have ended it at step {cf.step}; "
                                     f"{cf.wasted} tokens wasted"))
    if d.hallucinated_turn is not None:
        t = d.hallucinated_turn
        rows.append(("next turn", f"the model wrote a {t.role} turn itself "
                                  + (f"at step {t.step}" if t.step is not None else f"at character {t.offset}")
                                  + f": {json.dumps(t.evidence, ensure_ascii=False)}"))
    thought = reasoning_line(result.reasoning)
    if thought is not None:
        rows.append(("thought", thought[1]))
    if (d.hallucinated_turn is None and missed is None and g.finish_reason == "length"
            and not (result.reasoning and result.reasoning.ran_out_thinking)):
        never = evidence is not None and evidence.never_stops
        rows.append(("weights" if never else "budget", budget_or_weights(result, evidence)))
    body = "".join(f"<tr><th>{html_text(k)}</th><td>{html_isolated(v)}</td></tr>" for k, v in rows)
    if fix is not None:
        body += f'<tr><th>fix</th><td class="fix">{html_isolated(fix.text)}</td></tr>'
    return f'<table class="facts">{body}</table>'


def _verdict_class(code: int, result: Any) -> str:
    return "bad" if code else ("good" if result.generation.finish_reason == "stop" else "meh")


def _run_html(index: int, result: Any, fix: Any, evidence: Any, code: int) -> str:
    g, request = result.generation, result.request
    mode = request.prompt.thinking
    where = (f"through {g.server.get('url', 'a server')}" if g.server is not None
             else f"{result.engine} on {result.device}")
    parts = [f"<h2>Run{'' if mode == 'default' else f' with thinking {html_text(mode)}'}: {html_isolated(where)}</h2>",
             f'<p class="verdict {_verdict_class(code, result)}">{html_isolated(describe_cause(g, request.max_new_tokens))}'
             f" — exit code {code}</p>", _facts_table(result, fix, evidence),
             f'<h3>Prompt</h3><div class="stream prompt">{html_text(request.prompt.text)}</div>']
    if g.steps:
        parts += ["<h3>The token stream</h3>", _key(), _stream(result)]
        spec = odds_spec(result)
        if spec is not None:
            parts += ["<h3>P(end-of-turn) at each step</h3>",
                      chart(f"odds-{index}", "odds", "how likely the model thought ending the turn was, before each token "
                            f"(log scale; below {FLOOR:.0e} drawn at {FLOOR:.0e})", spec)]
        broken = sum(1 for s in g.steps if s.p_end_of_turn is not None and not math.isfinite(s.p_end_of_turn))
        if broken:
            parts.append(f'<p class="no-odds error">{broken} of {len(g.steps)} steps have no finite P(end-of-turn): '
                         "the model's output holds NaN or infinite values (its weights are broken; see "
                         "<code>inspect --weights</code>)</p>")
        elif spec is None:
            parts.append('<p class="no-odds">P(end-of-turn) was not measured for this run.</p>')
    else:
        parts += ["<h3>The text the server returned</h3>", f'<div class="stream">{html_text(g.text or "")}</div>',
                  '<p class="no-odds">odds not available: a server returns text, not the model\'s probabilities, so '
                  "P(end-of-turn) per step cannot be drawn (run without --server to see them).</p>"]
    return "".join(parts)


def render_generation_html(runs: list) -> str:
    """`runs`: (result, fix, evidence, exit code) per run, as `generate` builds them."""
    first = runs[0][0]
    parts = [STYLE, f"<h1>stopdoctor generate {html_isolated(first.model)}</h1>"]
    parts += [_run_html(i, result, fix, evidence, code) for i, (result, fix, evidence, code) in enumerate(runs)]
    return page(f"stopdoctor generate {first.model}", "".join(parts))


# --------------------------------------------------------------------------------------------
# stop-odds
# --------------------------------------------------------------------------------------------

# Decades of P(end-of-turn); the bars below NEVER, between, and at or above LEARNED take the verdict's colours.
EDGES = (0.0, 1e-6, 1e-5, 1e-4, 1e-3, NEVER, LEARNED, 1.0)
ZONES = (f"never learned (< {NEVER:g})", f"sometimes ({NEVER:g} – {LEARNED:g})", f"ends turns (≥ {LEARNED:g})")


def _bin_label(k: int) -> str:
    low, high = EDGES[k], EDGES[k + 1]
    return f"< {high:g}" if k == 0 else f"{low:g} – {high:g}"


def _zone(high: float) -> str:
    return ZONES[0] if high <= NEVER else (ZONES[1] if high <= LEARNED else ZONES[2])


def odds_bins(values: list[float]) -> list[int]:
    """How many of `values` fall in each decade of EDGES (the last bin holds 1.0)."""
    counts = [0] * (len(EDGES) - 1)
    for p in values:
        k = next((k for k in range(len(EDGES) - 1) if p < EDGES[k + 1]), len(EDGES) - 2)
        counts[k] += 1
    return counts


def histogram_spec(values: list[float]) -> dict[str, Any]:
    counts = odds_bins(values)
    data = [{"order": k, "bin": _bin_label(k), "answers": n, "zone": _zone(EDGES[k + 1])} for k, n in enumerate(counts)]
    ticks = count_ticks(max(counts))
    return {"height": 220, "data": {"values": data},
            "encoding": {"x": {"field": "bin", "type": "ordinal", "sort": {"field": "order", "op": "min"},
                               "axis": {"title": "P(end-of-turn) where the answer ends", "labelAngle": 0}},
                         "y": {"field": "answers", "type": "quantitative", "scale": {"domain": [0, ticks[-1]]},
                               "axis": {"title": "answers", "values": ticks, "format": ",d"}}},
            "layer": [{"mark": "bar", "encoding": {
                "color": {"field": "zone", "type": "nominal", "title": None,
                          "scale": {"domain": list(ZONES), "range": ["#c62828", "#ef6c00", "#2e7d32"]},
                          "legend": {"orient": "top"}},
                "tooltip": [{"field": "bin"}, {"field": "answers"}]}},
                {"mark": {"type": "text", "dy": -6, "fontSize": 12, "color": "#222"},
                 "transform": [{"filter": "datum.answers > 0"}], "encoding": {"text": {"field": "answers"}}}]}


def strip_spec(odds: Any) -> dict[str, Any]:
    """Every answer of the verdict as a dot on a log axis of P(end-of-turn), with the median and
    the verdict's two thresholds as labelled rules."""
    values = [{"p": e.p_end_of_turn, "drawn": max(e.p_end_of_turn, FLOOR), "source": e.context.source,
               "answer": e.context.preview, "shown": f"{e.p_end_of_turn:.4g}"} for e in odds.judged]
    lowest = math.floor(math.log10(min([v["drawn"] for v in values] + [NEVER / 10])))
    x = {"field": "drawn", "type": "quantitative", "scale": {"type": "log", "domain": [10.0 ** lowest, 1]},
         "axis": {"title": "P(end-of-turn) where each answer ends (log)", "format": ".0e",
                  "values": [10.0 ** k for k in range(lowest, 1)]}}
    # the thresholds' labels along the top, the median's along the bottom: never on the dots
    rules = [{"at": odds.median_p_end_of_turn, "label": f"median {odds.median_p_end_of_turn:.4f}", "colour": "#000", "y": 100},
             {"at": NEVER, "label": f"{NEVER:g}: below, never learned", "colour": "#c62828", "y": 10},
             {"at": LEARNED, "label": f"{LEARNED:g}: above, ends turns", "colour": "#2e7d32", "y": 10}]
    for rule in rules:
        rule["drawn"] = max(rule["at"], FLOOR)
    rule_x = {"field": "drawn", "type": "quantitative"}
    return {"height": 110, "data": {"values": values},
            "layer": [{"mark": {"type": "point", "filled": True, "size": 70, "opacity": 0.7, "color": "#37474f"},
                       "encoding": {"x": x, "tooltip": [{"field": "source"}, {"field": "answer"},
                                                        {"field": "shown", "title": "P(end-of-turn)"}]}},
                      {"data": {"values": rules}, "mark": {"type": "rule", "strokeDash": [4, 3], "strokeWidth": 2},
                       "encoding": {"x": rule_x, "color": {"field": "colour", "type": "nominal", "scale": None}}},
                      {"data": {"values": rules}, "mark": {"type": "text", "align": "left", "dx": 4, "fontSize": 11},
                       "encoding": {"x": rule_x, "y": {"field": "y", "type": "quantitative", "scale": None},
                                    "text": {"field": "label"}, "color": {"field": "colour", "type": "nominal", "scale": None}}}]}


def _answers_table(odds: Any) -> str:
    rows = "".join(
        f'<tr class="answer"><td class="num">{e.context.index}</td><td>{html_isolated(e.context.source)}</td>'
        f"<td>{html_text(e.context.kind)}</td><td class=\"num p\">{e.p_end_of_turn:.4g}</td><td class=\"num\">{e.rank:,}</td>"
        f"<td><code>{html_text(e.context.preview)}</code></td>"
        f"<td>{', '.join(f'<code>{html_text(json.dumps(c.decoded, ensure_ascii=False))}</code> {c.p:.2f}' for c in e.top[:3])}</td></tr>"
        for e in odds.examples)
    skipped = "".join(f"<li>{html_isolated(source)}: {html_text(why)}</li>" for source, why in odds.skipped)
    return ("<h2>Every answer</h2><table><tr><th>#</th><th>source</th><th>rows</th><th>P(end-of-turn)</th><th>rank</th>"
            f"<th>answer end</th><th>most likely instead</th></tr>{rows}</table>"
            + (f"<h2>Not measured</h2><ul>{skipped}</ul>" if skipped else ""))


def render_stop_odds_html(odds: Any) -> str:
    judged = [e.p_end_of_turn for e in odds.judged]
    css = {"stops": "good", "configuration": "meh", "weak": "meh"}.get(odds.verdict, "bad")
    rows = "chat rows, P(end-of-turn)" if odds.verdict_kind == "chat" else "plain-text rows, P(eos) at the end"
    parts = [STYLE, f"<h1>stopdoctor stop-odds {html_isolated(odds.model)}</h1>",
             f"<p>{html_isolated(odds.data or 'built-in conversations')} · {html_text(odds.device)} · "
             f"{odds.tokens:,} tokens</p>",
             f'<p class="verdict {css}"><b>{html_text(odds.verdict)}</b>: {html_isolated(odds.reason)}</p>',
             f'<p>median <b class="median">{odds.median_p_end_of_turn:.4f}</b> over {len(judged)} {html_text(rows)}'
             + (f"; {len(odds.apart)} plain-text row(s) measured apart (median {odds.median_apart:.4f}), not in the verdict"
                if odds.apart else "") + "</p>"]
    if judged:
        parts += (chart("odds-histogram", "odds-histogram",
                           f"how P(end-of-turn) spreads over the {len(judged)} answers of the verdict (by decade)",
                           histogram_spec(judged)),
                     chart("odds-strip", "odds-strip", "every answer of the verdict as a dot, with the median and the "
                           "verdict's thresholds", strip_spec(odds)))
    parts.append(_answers_table(odds))
    return page(f"stopdoctor stop-odds {odds.model}", "".join(parts))
