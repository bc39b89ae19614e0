"""`stopdoctor logs` pictures: output tokens against max_tokens per model (the pile-up at the
budget is what truncation looks like), the share of `length` per max_tokens value, and finish
reasons over time. In the terminal as small rich sparklines; as `--html FILE`, one
self-contained page of Vega-Lite charts (html_page: the library inlined, no network fetch) with
the findings, their fixes and example answers. Pure functions; never prints.

Imports: reporters (plain's HTML escaping, html_page), the logs report's chart data (duck-typed).
"""

from __future__ import annotations

from typing import Any

from rich.markup import escape

from stopdoctor.reporters.html_page import chart, count_ticks, findings_table, page
from stopdoctor.reporters.plain import html_isolated, html_text

BLOCKS = " ▁▂▃▄▅▆▇█"
COLOURS = {"stop": "#2e7d32", "length": "#c62828", "tool_calls": "#1565c0", "content_filter": "#6a1b9a",
           "error": "#ef6c00", "(none)": "#9e9e9e"}


def _spark(values: list[int]) -> str:
    top = max(values) if values else 0
    return "".join(BLOCKS[0 if not v else max(1, round(v / top * (len(BLOCKS) - 1)))] for v in values)


def charts_document(charts: Any) -> dict[str, Any] | None:
    """The charts' figures for --json."""
    if charts is None:
        return None
    return {"output_tokens": [{"model": h.model, "max_tokens": h.max_tokens, "bins": list(h.bins),
                               "at_budget": h.at_budget, "total": h.total} for h in charts.histograms],
            "without_tokens": charts.without_tokens,
            "timeline": None if charts.timeline is None else {
                "bucket": charts.timeline.bucket,
                "rows": [{"start": start, "finish_reason": counts} for start, counts in charts.timeline.rows]}}


def print_charts(out, charts: Any) -> None:
    """Small terminal pictures: one sparkline of output tokens per (model, max_tokens), the last
    cell the answers at the budget; the share of `length` per time bucket."""
    if charts is None or (not charts.histograms and charts.timeline is None):
        return
    if charts.histograms:
        out.print("[bold]output tokens[/] per model and max_tokens  [dim](0 → budget │ at the budget)[/]")
        width = max(len(f"{h.model} @ {h.max_tokens}") for h in charts.histograms)
        for h in charts.histograms:
            share = h.at_budget / h.total * 100 if h.total else 0.0
            colour = "red" if share >= 5 else "green"
            label = f"{h.model} @ {h.max_tokens}".ljust(width)
            out.print(f"  {escape(label)}  {_spark(list(h.bins))}│[{colour}]{_spark([h.at_budget]) if h.at_budget else ' '}[/]"
                      f"  {h.at_budget:,} of {h.total:,} at the budget ({share:.1f}%)")
    timeline = charts.timeline
    if timeline is not None and timeline.rows:
        shares = [counts.get("length", 0) / max(1, sum(counts.values())) for _, counts in timeline.rows]
        out.print(f"[bold]length share over time[/]  [dim]({timeline.bucket} buckets, UTC)[/]  "
                  f"{_spark([round(s * 100) for s in shares]) if any(shares) else '(no length)'}  "
                  f"[dim]{escape(timeline.rows[0][0])} … {escape(timeline.rows[-1][0])}[/]")
    out.print()


# --------------------------------------------------------------------------------------------
# HTML: Vega-Lite specs (plain data; every label drawn, values on the bars, nothing only on hover)
# --------------------------------------------------------------------------------------------

UNDER, AT = "under the budget", "at the budget"
EXAMPLES_SHOWN = 3
EXCERPT_SHOWN = 160


def _bar_labels(y: str, text: str) -> dict[str, Any]:
    """The value printed above each non-empty bar, so nothing needs a hover."""
    return {"mark": {"type": "text", "dy": -6, "fontSize": 11, "color": "#222"},
            "transform": [{"filter": f"datum.{y} > 0"}], "encoding": {"text": {"field": text}}}


def histogram_spec(h: Any) -> dict[str, Any]:
    """Output tokens of one (model, max_tokens): 20 bins of 5% of the budget, then the answers at it."""
    step, ticks = h.max_tokens / 20, count_ticks(max(h.bins + (h.at_budget,)))
    values = [{"order": i, "bin": f"{round(i * step):,}", "answers": v, "label": f"{v:,}", "kind": UNDER,
               "range": f"{round(i * step):,}–{round((i + 1) * step):,} tokens"} for i, v in enumerate(h.bins)]
    values.append({"order": 20, "bin": f"≥{h.max_tokens:,}", "answers": h.at_budget, "label": f"{h.at_budget:,}",
                   "kind": AT, "range": f"{h.max_tokens:,} tokens or more"})
    x = {"field": "bin", "type": "ordinal", "sort": {"field": "order", "op": "min"},
         "axis": {"title": f"output tokens (each bar 5% of max_tokens {h.max_tokens:,}; last bar: at the budget)",
                  "labelAngle": -45}}
    return {"height": 170, "data": {"values": values},
            "encoding": {"x": x, "y": {"field": "answers", "type": "quantitative",
                                       "scale": {"domain": [0, ticks[-1]]}, "axis": {"title": "answers", "values": ticks, "format": ",d"}}},
            "layer": [{"mark": "bar", "encoding": {
                "color": {"field": "kind", "type": "nominal", "title": None,
                          "scale": {"domain": [UNDER, AT], "range": ["#78909c", "#c62828"]}, "legend": {"orient": "top"}},
                "tooltip": [{"field": "range"}, {"field": "answers", "format": ","}]}},
                _bar_labels("answers", "label")]}


def length_share_spec(by_max_tokens: dict[str, dict[str, int]]) -> dict[str, Any]:
    """The share of `length` answers per max_tokens value, each bar labelled with its share and count."""
    values = []
    for order, (key, counts) in enumerate(by_max_tokens.items()):
        total, cut = sum(counts.values()), counts.get("length", 0)
        share = cut / total * 100 if total else 0.0
        values.append({"order": order, "max_tokens": key, "share": round(share, 1), "length": cut, "total": total,
                       "label": f"{share:.0f}% ({cut:,} of {total:,})"})
    return {"height": 200, "data": {"values": values},
            "encoding": {"x": {"field": "max_tokens", "type": "ordinal", "sort": {"field": "order", "op": "min"},
                               "axis": {"title": "max_tokens of the request", "labelAngle": 0}},
                         "y": {"field": "share", "type": "quantitative", "scale": {"domain": [0, 100]},
                               "axis": {"title": "% of answers cut (finish_reason length)"}}},
            "layer": [{"mark": {"type": "bar", "color": "#c62828"},
                       "encoding": {"tooltip": [{"field": "max_tokens"}, {"field": "label", "title": "length"}]}},
                      {"mark": {"type": "text", "dy": -6, "fontSize": 11, "color": "#222"},
                       "encoding": {"text": {"field": "label"}}}]}


def timeline_spec(timeline: Any) -> dict[str, Any]:
    """Finish reasons per time bucket, stacked, with the bucket's total above it and a legend."""
    values = [{"order": i, "time": start, "finish": finish, "answers": n}
              for i, (start, counts) in enumerate(timeline.rows) for finish, n in counts.items()]
    present = list(dict.fromkeys(v["finish"] for v in values))
    domain = [f for f in COLOURS if f in present] + [f for f in present if f not in COLOURS]
    x = {"field": "time", "type": "ordinal", "sort": {"field": "order", "op": "min"},
         "axis": {"title": f"time (UTC, per {timeline.bucket})", "labelAngle": -40, "labelOverlap": True}}
    return {"height": 200, "data": {"values": values}, "encoding": {"x": x},
            "layer": [{"mark": "bar", "encoding": {
                "y": {"field": "answers", "type": "quantitative", "aggregate": "sum", "axis": {"title": "answers"}},
                "color": {"field": "finish", "type": "nominal", "title": "finish_reason",
                          "scale": {"domain": domain, "range": [COLOURS.get(f, "#607d8b") for f in domain]},
                          "legend": {"orient": "top"}},
                "tooltip": [{"field": "time"}, {"field": "finish"}, {"field": "answers"}]}},
                {"transform": [{"aggregate": [{"op": "sum", "field": "answers", "as": "total"}], "groupby": ["time", "order"]}],
                 "mark": {"type": "text", "dy": -6, "fontSize": 11, "color": "#222"},
                 "encoding": {"y": {"field": "total", "type": "quantitative"}, "text": {"field": "total", "format": ","}}}]}


def _shortened(text: str) -> str:
    # An example is the answer's tail: its end is what shows how it stopped.
    return text if len(text) <= EXCERPT_SHOWN else "…" + text[-EXCERPT_SHOWN + 1:]


def _examples_html(examples: Any) -> str:
    items = "".join(
        f'<li><span class="where">{html_isolated(f"{e.file}:{e.line}")} · {html_isolated(e.model or "(no model)")} · '
        f'{html_text(e.native_finish_reason or e.finish_reason or "(none)")}</span><br><code>{html_text(_shortened(e.excerpt))}</code>'
        + (f' <span class="where">{html_text(e.detail)}</span>' if e.detail else "") + "</li>"
        for e in list(examples)[:EXAMPLES_SHOWN])
    return f'<ul class="examples">{items}</ul>' if items else ""


def finding_examples(finding: Any, problems: dict[str, Any]) -> tuple[Any, ...]:
    """The examples of the problem a finding reports: the one with the finding's count whose
    first example is the finding's location (the logs rules point at their problem's first example)."""
    where = finding.location
    for problem in problems.values():
        first = problem.examples[0] if problem.examples else None
        if (first is not None and where is not None and (first.file, first.line) == (where.file, where.line)
                and finding.evidence.get("count") == problem.count):
            return problem.examples
    return ()


def _problems_table(problems: dict[str, Any]) -> str:
    rows = "".join(f'<tr class="problem"><td>{html_isolated(p.key)}<br><span class="where">{html_text(p.description)}</span></td>'
                   f'<td class="num">{p.count:,}</td><td class="num">{p.share * 100:.1f}%</td>'
                   f"<td>{html_text(', '.join(f'{m} ({n:,})' for m, n in list(p.by_model.items())[:5]))}</td>"
                   f"<td>{_examples_html(p.examples)}</td></tr>"
                   for p in problems.values() if p.count)
    return ("<h2>Problems</h2><table><tr><th>problem</th><th>count</th><th>share</th><th>models</th><th>example answers</th></tr>"
            f"{rows or '<tr><td colspan=5>none</td></tr>'}</table>")


def _reasons(table: dict[str, dict[str, int]]) -> list[str]:
    """The finish reasons of a table, in the colours' order (the chart's and the table's)."""
    present = list(dict.fromkeys(r for counts in table.values() for r in counts))
    return [f for f in COLOURS if f in present] + [f for f in present if f not in COLOURS]


def shares_spec(table: dict[str, dict[str, int]], title: str) -> dict[str, Any]:
    """One bar per row (model or max_tokens), its finish reasons as shares of 100%, each segment of
    4% or more written with its share; the counts are in the table beside it."""
    domain = _reasons(table)
    values = []
    for order, (key, counts) in enumerate(table.items()):
        total = sum(counts.values())
        for finish in domain:
            n = counts.get(finish, 0)
            if n:
                share = n / total * 100
                values.append({"row": key, "order": order, "finish": finish, "rank": domain.index(finish), "answers": n,
                               "share": round(share, 1), "label": f"{share:.0f}%" if share >= 4 else ""})
    stack = {"stack": "answers", "groupby": ["row"], "sort": [{"field": "rank"}], "as": ["from", "to"], "offset": "normalize"}
    y = {"field": "row", "type": "nominal", "sort": {"field": "order", "op": "min"}, "axis": {"title": title, "labelLimit": 320}}
    return {"height": 30 * len(table), "data": {"values": values},
            "transform": [stack, {"calculate": "(datum.from + datum.to) / 2", "as": "middle"}],
            "encoding": {"y": y},
            "layer": [{"mark": {"type": "bar", "stroke": "#fff"}, "encoding": {
                "x": {"field": "from", "type": "quantitative", "scale": {"domain": [0, 1]},
                      "axis": {"title": "share of the answers", "format": ".0%", "values": [0, 0.25, 0.5, 0.75, 1]}},
                "x2": {"field": "to"},
                "color": {"field": "finish", "type": "nominal", "title": "finish_reason",
                          "scale": {"domain": domain, "range": [COLOURS.get(f, "#607d8b") for f in domain]},
                          "legend": {"orient": "top"}},
                "tooltip": [{"field": "row", "title": title}, {"field": "finish"}, {"field": "answers"}, {"field": "share"}]}},
                {"mark": {"type": "text", "fontSize": 11, "color": "#fff", "fontWeight": "bold"},
                 "transform": [{"filter": "datum.label !== ''"}],
                 "encoding": {"x": {"field": "middle", "type": "quantitative"}, "text": {"field": "label"}}}]}


def _share_cells(counts: dict[str, int], reasons: list[str]) -> str:
    total = sum(counts.values())
    return "".join(f"<td class=num>{counts.get(r, 0):,}"
                   + (f" <span class=where>({counts[r] / total * 100:.1f}%)</span>" if counts.get(r) else "") + "</td>"
                   for r in reasons)


def _drill_down(chart_id: str, title: str, first: str, table: dict[str, dict[str, int]], caption: str,
                extra_title: str, extra: Any) -> str:
    """A drill-down: the shares chart, then per row its answers, each finish reason's count and
    share, and `extra(key)` (a model's problems, a budget's answers at the budget)."""
    if not table:
        return ""
    reasons = _reasons(table)
    head = "".join(f"<th>{html_text(r)}</th>" for r in reasons)
    rows = "".join(f'<tr class="drill {chart_id}"><td>{html_isolated(key)}</td><td class=num>{sum(counts.values()):,}</td>'
                   f"{_share_cells(counts, reasons)}<td>{extra(key)}</td></tr>" for key, counts in table.items())
    return (f"<h2>{html_text(title)}</h2>" + chart(chart_id, "shares", caption, shares_spec(table, first))
            + f"<table><tr><th>{html_text(first)}</th><th>answers</th>{head}<th>{html_text(extra_title)}</th></tr>{rows}</table>")


def _model_problems(problems: dict[str, Any]):
    def cell(model: str) -> str:
        found = [(p.key, p.by_model[model]) for p in problems.values() if p.by_model.get(model)]
        return ", ".join(f"{html_text(key)} {n:,}" for key, n in found) or "none"
    return cell


def _budget_facts(charts: Any):
    """Per max_tokens: the answers at (or past) the budget and the models sent it (from the histograms)."""
    def cell(key: str) -> str:
        mine = [h for h in (charts.histograms if charts is not None else ()) if str(h.max_tokens) == key]
        if not mine:
            return ('<span class="where">— (not counted: the histograms above cover the most common model and '
                    'max_tokens pairs whose output tokens are logged)</span>')
        return "; ".join(f"{h.at_budget:,} of {h.total:,} ({html_isolated(h.model)})" for h in mine)
    return cell


def render_logs_html(result: Any) -> str:
    """One self-contained page: the counts, the findings with fixes and examples, the charts."""
    report = result.report
    parts = [f"<h1>stopdoctor logs</h1><p>{', '.join(html_isolated(f) for f in report.files)}: {report.lines:,} lines, "
             f"{report.responses:,} responses</p>",
             "<p>finish_reason: " + ", ".join(f"{html_isolated(k)} {v:,}" for k, v in report.finish.items()) + "</p>",
             findings_table(result.findings, lambda f: _examples_html(finding_examples(f, report.problems)), "example answers")]
    charts = report.charts
    if charts is not None and charts.histograms:
        parts.append('<h2>Output tokens against max_tokens</h2><p>Each grey bar a twentieth of the budget; the red bar '
                     'the answers at (or over) the budget: a pile-up there is truncation.</p><div class="grid">')
        parts += [chart(f"histogram-{i}", "histogram", f"{h.model} @ max_tokens {h.max_tokens:,}: {h.at_budget:,} of "
                        f"{h.total:,} answers at the budget", histogram_spec(h)) for i, h in enumerate(charts.histograms)]
        parts.append("</div>")
    if report.by_max_tokens:
        parts.append("<h2>Share of length per max_tokens</h2>"
                     + chart("length-share", "length-share", "% of answers cut by the budget, per max_tokens value",
                             length_share_spec(report.by_max_tokens)))
    if charts is not None and charts.timeline is not None and charts.timeline.rows:
        rows = charts.timeline.rows
        parts.append("<h2>Finish reasons over time</h2>"
                     + chart("timeline", "timeline", f"per {charts.timeline.bucket} (UTC), {rows[0][0]} … {rows[-1][0]}",
                             timeline_spec(charts.timeline)))
    parts.append(_problems_table(report.problems))
    parts.append(_drill_down("by-model", "Per model", "model", report.by_model,
                             "finish reasons per model, as shares of its answers", "problems found", _model_problems(report.problems)))
    parts.append(_drill_down("by-budget", "Per max_tokens", "max_tokens", report.by_max_tokens,
                             "finish reasons per max_tokens value, as shares of its answers", "answers at the budget (model)",
                             _budget_facts(charts)))
    return page("stopdoctor logs", "".join(parts))
