"""`check --html FILE`: the CI gate's run as one self-contained page to keep as a build artifact
(html_page): pass or fail at the top with the exit code, every model and serving file checked
with its counts, findings per model by severity as a chart, and each model's findings with their
fixes and file:line (relative to the working folder, as SARIF and the JSON document give them).
Pure functions; never prints.

Imports: core.findings (severities, the exit-code rule), reporters (escaping, html_page, sarif's locations).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stopdoctor.core.findings import Report, Severity
from stopdoctor.reporters.html_page import chart, count_ticks, findings_table, page
from stopdoctor.reporters.plain import html_isolated, html_text
from stopdoctor.reporters.sarif import locate, relative_uri

SEVERITIES = (Severity.ERROR, Severity.WARNING, Severity.INFO)
COLOURS = {"error": "#c62828", "warning": "#ef6c00", "info": "#1565c0"}
PASS, FAIL, CANNOT = "pass", "fail", "could not check"

STYLE = ("<style>.banner{font-size:1.4em;font-weight:bold;padding:.6em .9em;color:#fff;border-radius:4px}"
         ".banner.pass{background:#2e7d32}.banner.fail{background:#c62828}.banner.cannot{background:#6a1b9a}"
         "td.pass{color:#2e7d32;font-weight:bold}td.fail{color:#c62828;font-weight:bold}td.cannot{color:#6a1b9a;font-weight:bold}"
         ".baseline{color:#555;font-style:italic}</style>")


def subject_status(subject: Any, fail_on: Severity) -> str:
    if subject.error is not None:
        return CANNOT
    return FAIL if Report("check", [subject], fail_on).exit_code() else PASS  # the one rule, model by model


def _count(findings: Any, severity: Severity) -> int:
    return sum(1 for f in findings if f.severity == severity)


def _banner(report: Any, exit_zero: bool) -> str:
    code = report.exit_code(exit_zero)
    failing = sum(1 for f in report.findings if f.severity >= report.fail_on and not f.baseline)
    if report.failed:
        css, words = "cannot", f"FAIL: {len(report.failed)} of {len(report.subjects)} model(s) could not be checked"
    elif failing:
        css, words = "fail", f"FAIL: {failing} finding(s) at or above {report.fail_on.label}"
    else:
        css, words = "pass", f"PASS: no finding at or above {report.fail_on.label}"
    if exit_zero and failing and not report.failed:
        words += " (--exit-zero: the job passes anyway)"
    return f'<p class="banner {css}" data-exit-code="{code}">{html_text(words)} · exit code {code}</p>'


def _overview(report: Any, base: Path) -> str:
    rows = []
    for s in report.subjects:
        result = s.result
        verdict = result.analysis.verdict.kind if result is not None and result.analysis.verdict else "—"
        kind = result.source.kind if result is not None else "—"
        serving = "<br>".join(html_isolated(relative_uri(p, base)[0]) for p in s.serving) or "—"
        status = subject_status(s, report.fail_on)
        rows.append(f'<tr class="subject"><td>{html_isolated(s.name)}</td><td>{html_text(kind)}</td><td>{html_text(verdict)}</td>'
                    f"<td>{serving}</td><td class=num>{len(s.checks)}</td>"
                    + "".join(f"<td class=num>{_count(s.findings, v)}</td>" for v in SEVERITIES)
                    + f'<td class="{status.split()[0]}">{html_text(status)}</td></tr>')
    return ("<h2>Models and serving files checked</h2><table><tr><th>model</th><th>kind</th><th>verdict</th>"
            "<th>serving files</th><th>checks run</th><th>errors</th><th>warnings</th><th>infos</th><th>result</th></tr>"
            + "".join(rows) + "</table>")


def findings_spec(report: Any) -> dict[str, Any]:
    """Findings per model, stacked by severity, each segment and each total written on the chart."""
    values = [{"model": s.name, "order": i, "severity": v.label, "findings": _count(s.findings, v)}
              for i, s in enumerate(report.subjects) for v in SEVERITIES]
    top = max([len(s.findings) for s in report.subjects] or [0])
    ticks = count_ticks(top)
    y = {"field": "model", "type": "nominal", "sort": {"field": "order", "op": "min"},
         "axis": {"title": None, "labelLimit": 420}}
    return {"height": 34 * len(report.subjects), "data": {"values": values}, "encoding": {"y": y},
            "layer": [{"mark": "bar", "transform": [{"filter": "datum.findings > 0"}], "encoding": {
                "x": {"field": "findings", "type": "quantitative", "aggregate": "sum", "scale": {"domain": [0, ticks[-1]]},
                      "axis": {"title": "findings", "values": ticks, "format": ",d"}},
                "color": {"field": "severity", "type": "nominal", "title": None,
                          "scale": {"domain": list(COLOURS), "range": list(COLOURS.values())}, "legend": {"orient": "top"}},
                "tooltip": [{"field": "model"}, {"field": "severity"}, {"field": "findings"}]}},
                {"transform": [{"aggregate": [{"op": "sum", "field": "findings", "as": "total"}], "groupby": ["model", "order"]}],
                 "mark": {"type": "text", "align": "left", "dx": 5, "fontSize": 12, "color": "#222"},
                 "encoding": {"x": {"field": "total", "type": "quantitative"}, "text": {"field": "total", "format": ","}}}]}


def _subject_html(subject: Any, base: Path, fail_on: Severity) -> str:
    status = subject_status(subject, fail_on)
    parts = [f'<section class="model"><h2>{html_isolated(subject.name)} — <span class="{status.split()[0]}">'
             f"{html_text(status)}</span></h2>"]
    if subject.error is not None:
        parts.append(f'<p class="error">{html_isolated(subject.error_line or "")}</p>'
                     + (f"<p>hint: {html_isolated(subject.error.hint)}</p>" if subject.error.hint else ""))
    if subject.serving:
        parts.append("<p>serving files: " + ", ".join(html_isolated(relative_uri(p, base)[0]) for p in subject.serving) + "</p>")

    def where(finding: Any) -> str:
        place = locate(subject, finding)
        if place is None:
            return ""
        text = relative_uri(place.path, base)[0] + (f":{place.line}" if place.line else "")
        key = finding.location.key if finding.location is not None else None
        accepted = '<div class="baseline">in the baseline: accepted, not failing</div>' if finding.baseline else ""
        return (f"<code>{html_text(text)}</code>" + (f' <span class="where">{html_isolated(key)}</span>' if key else "")
                + accepted)

    if subject.error is None or subject.findings:
        parts.append(findings_table(subject.findings, where, "file:line", heading=False, inline_where=False))
    live = subject.live
    if live is not None:
        parts.append(f"<p>live probe: <b>{html_text(live.verdict)}</b>: {html_isolated(live.reason)}</p>")
    return "".join(parts) + "</section>"


def render_check_html(report: Any, base: Path, exit_zero: bool = False) -> str:
    counts = ", ".join(f"{_count(report.findings, v)} {v.label}" for v in SEVERITIES)
    parts = [STYLE, "<h1>stopdoctor check</h1>", _banner(report, exit_zero),
             f"<p>{len(report.subjects) - len(report.failed)} of {len(report.subjects)} model(s) checked: {counts} "
             f"(fail-on {html_text(report.fail_on.label)})"
             + (f"; config {html_isolated(str(report.config_file))}" if report.config_file else "")
             + (f"; baseline {html_isolated(str(report.baseline))}" if report.baseline else "") + "</p>",
             _overview(report, base)]
    if report.subjects:
        parts.append(chart("findings-per-model", "findings-per-model", "findings per model, by severity", findings_spec(report)))
    parts += [_subject_html(s, base, report.fail_on) for s in report.subjects]
    return page("stopdoctor check", "".join(parts))
