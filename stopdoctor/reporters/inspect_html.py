"""`stopdoctor inspect --html FILE`: one self-contained page (html_page) with the findings and
their fixes, the stop ids per runtime side by side (a Vega-Lite grid: which token stops which
runtime, from which file and key), and the rendered sample prompt with its special tokens and
the end of turn highlighted. Pure functions; never prints.

Imports: reporters (plain's escaping, html_page), the inspect result and rendered prompts (duck-typed).
"""

from __future__ import annotations

from typing import Any

from stopdoctor.reporters.html_page import chart, findings_table, page
from stopdoctor.reporters.plain import html_isolated, html_text

STOPS, MISSES = "stops", "does not stop"


def _token_rows(result: Any) -> list[tuple[int, str]]:
    """Every token any runtime stops on, the end-of-turn tokens and the declared ones, by id."""
    analysis, texts = result.analysis, dict[int, str]()
    for e in analysis.end_of_turn:
        for i in e.ids:
            texts.setdefault(i, e.text)
    for s in analysis.stops:
        for x in s.stops:
            texts.setdefault(x.id, x.text or "?")
    for d in result.facts.declared:
        if d.id is not None and d.role in ("eos", "eot", "eom"):
            texts.setdefault(d.id, d.text or "?")
    return sorted(texts.items())


def stops_spec(result: Any) -> dict[str, Any]:
    """One cell per (token, runtime): red when an end-of-turn token does not stop that runtime."""
    end_ids = {i for e in result.analysis.end_of_turn for i in e.ids}
    values, rows = [], _token_rows(result)
    for order, (token_id, text) in enumerate(rows):
        for s in result.analysis.stops:
            source = next((x for x in s.stops if x.id == token_id), None)
            stops = source is not None
            values.append({"token": f"{text} ({token_id})", "order": order, "runtime": s.runtime,
                           "state": STOPS if stops else MISSES,
                           "colour": "stops" if stops else ("end of turn, does not stop" if token_id in end_ids else "does not stop"),
                           "from": (f"{source.location.file}" + (f" {source.location.key}" if source.location.key else "")
                                    if source is not None and source.location is not None else "")})
    domain = ["stops", "end of turn, does not stop", "does not stop"]
    return {"height": 34 * max(1, len(rows)), "data": {"values": values},
            "encoding": {"x": {"field": "runtime", "type": "nominal", "sort": None,
                               "axis": {"title": "runtime", "orient": "top", "labelAngle": 0}},
                         "y": {"field": "token", "type": "nominal", "sort": {"field": "order", "op": "min"},
                               "axis": {"title": "token (id)"}}},
            "layer": [{"mark": {"type": "rect", "stroke": "#fff", "strokeWidth": 2},
                       "encoding": {"color": {"field": "colour", "type": "nominal", "title": None,
                                              "scale": {"domain": domain, "range": ["#2e7d32", "#c62828", "#e0e0e0"]},
                                              "legend": {"orient": "bottom"}},
                                    "tooltip": [{"field": "token"}, {"field": "runtime"}, {"field": "state"}, {"field": "from"}]}},
                      {"mark": {"type": "text", "fontSize": 11},
                       "encoding": {"text": {"field": "state"},
                                    "color": {"condition": {"test": "datum.colour !== 'does not stop'", "value": "#fff"}, "value": "#222"}}}]}


def _sources_table(result: Any) -> str:
    """The same grid as text, with where each stop id comes from (file and key) and each runtime's rule."""
    rows = "".join(
        f"<tr><td>{html_text(s.runtime)}</td><td>{html_text(s.rule)}{'' if s.complete else ' (incomplete: a file it reads is missing)'}</td><td>"
        + "<br>".join(f"{html_isolated(x.text or '?')} ({x.id}) — {html_isolated(x.location.file if x.location else '?')}"
                      + (f" <code>{html_text(x.location.key)}</code>" if x.location and x.location.key else "") for x in s.stops)
        + "</td></tr>" for s in result.analysis.stops)
    return f"<table><tr><th>runtime</th><th>how it picks its stops</th><th>stop ids, from which file and key</th></tr>{rows}</table>"


def _prompt_html(prompt: Any, end_texts: set[str]) -> str:
    """The rendered prompt with each special token in a <mark> (the end-of-turn ones marked apart)."""
    out, at = [], 0
    for span in sorted(prompt.special_spans, key=lambda s: s.start):
        if span.start < at:
            continue
        out.append(html_text(prompt.text[at:span.start]))
        kind = "eot" if span.text in end_texts else "special"
        title = f"id {span.id}" if span.id is not None else "special token"
        out.append(f'<mark class="{kind}" title="{title}">{html_text(span.text)}</mark>')
        at = span.end
    out.append(html_text(prompt.text[at:]))
    return f'<pre class="prompt">{"".join(out)}</pre>'


PROMPT_STYLE = ("<style>pre.prompt{background:#fafafa;border:1px solid #ddd;padding:.8em;white-space:pre-wrap}"
                "mark.special{background:#bbdefb;border-radius:3px}mark.eot{background:#c62828;color:#fff;border-radius:3px}</style>")


def render_inspect_html(result: Any, prompts: Any = (), prompt_error: str | None = None) -> str:
    analysis = result.analysis
    end = ", ".join(f"{html_isolated(e.text)} ({', '.join(map(str, e.ids))})" for e in analysis.end_of_turn) or "none found"
    parts = [PROMPT_STYLE, f"<h1>stopdoctor inspect {html_isolated(result.source.spec)}</h1>",
             f"<p>{html_text(analysis.verdict.kind)} model; end of turn: {end}</p>",
             findings_table(result.findings),
             "<h2>Stop ids per runtime</h2>",
             chart("stops", "stops", "which token stops which runtime (red: an end-of-turn token the runtime runs past)",
                   stops_spec(result)),
             _sources_table(result), "<h2>The rendered prompt</h2>"]
    end_texts = {e.text for e in analysis.end_of_turn}
    if prompt_error is not None:
        parts.append(f"<p>not rendered: {html_text(prompt_error)}</p>")
    for prompt in prompts:
        parts.append(f"<p>{html_text(prompt.template.name)} template, sample conversation; special tokens in blue, "
                     f"the end of turn in red</p>{_prompt_html(prompt, end_texts)}")
    return page(f"stopdoctor inspect {result.source.spec}", "".join(parts))
