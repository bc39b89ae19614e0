"""`stopdoctor logs` pictures: output tokens against max_tokens per model (the pile-up at the
budget is what truncation looks like), the share of `length` per max_tokens value, and finish
reasons over time. In the terminal as small rich sparklines; as `--html FILE`, one
self-contained page of inline SVG (no script, no network fetch). Pure functions; never prints.

Imports: reporters (the human report's console, plain's HTML escaping), the logs report's chart data (duck-typed).
"""

from __future__ import annotations

from typing import Any

from rich.markup import escape

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
# HTML
# --------------------------------------------------------------------------------------------


def _bars(title: str, values: list[tuple[str, int, str]], width: int = 640, height: int = 160) -> str:
    """A bar chart as inline SVG: (label, value, colour) per bar; each bar a <rect class="bar">."""
    top = max((v for _, v, _ in values), default=0) or 1
    step = width / max(1, len(values))
    rects = []
    for i, (label, value, colour) in enumerate(values):
        h = value / top * (height - 20)
        rects.append(f'<rect class="bar" data-value="{value}" x="{i * step + 1:.1f}" y="{height - h:.1f}" '
                     f'width="{max(1.0, step - 2):.1f}" height="{h:.1f}" fill="{colour}"><title>{html_text(label)}: '
                     f'{value:,}</title></rect>')
    return (f'<figure><figcaption>{html_text(title)}</figcaption><svg xmlns="http://www.w3.org/2000/svg" '
            f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">'
            f'<rect x="0" y="0" width="{width}" height="{height}" fill="#fafafa"/>{"".join(rects)}</svg></figure>')


def _stacked(title: str, rows: list[tuple[str, dict[str, int]]], width: int = 640, height: int = 160) -> str:
    step = width / max(1, len(rows))
    top = max((sum(c.values()) for _, c in rows), default=0) or 1
    rects = []
    for i, (label, counts) in enumerate(rows):
        y = float(height)
        for finish, value in counts.items():
            h = value / top * (height - 20)
            y -= h
            rects.append(f'<rect class="bar" data-finish="{html_text(finish)}" data-value="{value}" x="{i * step + 1:.1f}" '
                         f'y="{y:.1f}" width="{max(1.0, step - 2):.1f}" height="{h:.1f}" '
                         f'fill="{COLOURS.get(finish, "#607d8b")}"><title>{html_text(label)} {html_text(finish)}: '
                         f'{value:,}</title></rect>')
    legend = " ".join(f'<span style="color:{c}">■ {f}</span>' for f, c in COLOURS.items())
    return (f'<figure><figcaption>{html_text(title)}</figcaption><svg xmlns="http://www.w3.org/2000/svg" '
            f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">'
            f'<rect x="0" y="0" width="{width}" height="{height}" fill="#fafafa"/>{"".join(rects)}</svg>'
            f'<div class="legend">{legend}</div></figure>')


def render_logs_html(result: Any) -> str:
    """One self-contained page: the counts, the problems and the pictures (inline SVG only)."""
    report = result.report
    parts = [f"<h1>stopdoctor logs</h1><p>{', '.join(html_isolated(f) for f in report.files)}: {report.lines:,} lines, "
             f"{report.responses:,} responses</p>",
             "<h2>finish_reason</h2><p>" + ", ".join(f"{html_isolated(k)} {v:,}" for k, v in report.finish.items()) + "</p>"]
    charts = report.charts
    if charts is not None:
        parts.append('<h2>Output tokens against max_tokens</h2><p>Each bar a twentieth of the budget; the red bar '
                     'the answers at (or over) the budget: a pile-up there is truncation.</p>')
        for h in charts.histograms:
            bins = [(f"{i * 5}-{(i + 1) * 5}% of {h.max_tokens}", v, "#78909c") for i, v in enumerate(h.bins)]
            bins.append((f"at the budget ({h.max_tokens})", h.at_budget, "#c62828"))
            parts.append(f'<div class="chart histogram">{_bars(f"{h.model} @ max_tokens {h.max_tokens} ({h.total:,} answers)", bins)}</div>')
    by_budget = [(key, counts.get("length", 0) * 100 // max(1, sum(counts.values())), "#c62828")
                 for key, counts in report.by_max_tokens.items()]
    if by_budget:
        parts.append('<h2>Share of length per max_tokens</h2><div class="chart length-share">'
                     + _bars("% of answers cut by the budget, per max_tokens: " + ", ".join(k for k, _, _ in by_budget), by_budget)
                     + "</div>")
    if charts is not None and charts.timeline is not None:
        parts.append(f'<h2>Finish reasons over time</h2><div class="chart timeline">'
                     f'{_stacked(f"per {charts.timeline.bucket} (UTC), {charts.timeline.rows[0][0]} … {charts.timeline.rows[-1][0]}", list(charts.timeline.rows))}</div>')
    rows = "".join(f"<tr><td>{html_isolated(p.key)}</td><td>{p.count:,}</td><td>{p.share * 100:.1f}%</td></tr>"
                   for p in report.problems.values())
    parts.append(f"<h2>Problems</h2><table><tr><th>problem</th><th>count</th><th>share</th></tr>{rows}</table>")
    findings = "".join(f"<li>{html_text(f.code)} {html_text(f.name)}: {html_isolated(f.message)}</li>" for f in result.findings)
    parts.append(f"<h2>Findings</h2><ul>{findings or '<li>none</li>'}</ul>")
    style = ("body{font-family:system-ui,sans-serif;margin:2em;max-width:60em}figure{margin:1em 0}"
             "figcaption{font-size:.9em;color:#444}table{border-collapse:collapse}td,th{padding:.2em .8em;"
             "border-bottom:1px solid #ddd;text-align:left}.legend{font-size:.8em}")
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>stopdoctor logs</title>'
            f"<style>{style}</style></head><body>{''.join(parts)}</body></html>\n")
