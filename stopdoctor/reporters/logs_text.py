"""`stopdoctor logs`: the people-facing report (rich, into a string) and the JSON document
(`stopdoctor.logs/1`, the shared schema header). Pure functions; never prints.

Imports: api (the result), render.human (finding styles), render.inspect_json (shared shapes).
"""

from __future__ import annotations

import json
from typing import Any

from rich.markup import escape
from rich.table import Table

from stopdoctor.rules.results import LogsResult
from stopdoctor.core.findings import Severity
from stopdoctor.reporters.console import capture, text_of
from stopdoctor.reporters.logs_charts import charts_document, print_charts
from stopdoctor.reporters.human import print_findings, visible
from stopdoctor.reporters.document import finding as finding_document
from stopdoctor.reporters.document import header, summary

FINISH_ORDER = ("stop", "length")
MAX_LINES = 10_000  # flagged lines listed in JSON per problem; `count` is always the full number


def _percent(count: int, total: int) -> str:
    return f"{count / total * 100:.1f}%" if total else "-"


def _columns(groups: dict[str, dict[str, int]]) -> list[str]:
    seen = {f for counts in groups.values() for f in counts}
    return [f for f in FINISH_ORDER if f in seen] + sorted(seen - set(FINISH_ORDER))


def _table(title: str, groups: dict[str, dict[str, int]], limit: int = 15) -> Table:
    table = Table(box=None, show_header=True, header_style="bold", pad_edge=False)
    table.add_column(title)
    table.add_column("responses", justify="right")
    finishes = _columns(groups)
    for finish in finishes:
        table.add_column(finish, justify="right")
    table.add_column("length share", justify="right")
    rows = sorted(groups.items(), key=lambda kv: -sum(kv[1].values())) if title == "model" else list(groups.items())
    for key, counts in rows[:limit]:
        total = sum(counts.values())
        table.add_row(escape(key), f"{total:,}", *(f"{counts.get(f, 0):,}" for f in finishes),
                      _percent(counts.get("length", 0), total))
    if len(rows) > limit:
        table.add_row(f"… {len(rows) - limit} more", "", *("" for _ in finishes), "")
    return table


def render_logs_human(result: LogsResult, color: bool = False, width: int = 100) -> str:
    report = result.report
    out = capture(color, width)
    files = ", ".join(report.files)
    out.print(f"[bold]stopdoctor logs[/] {escape(files)}")
    out.print(f"  lines      {report.lines:,}: {report.responses:,} responses, {report.bad_lines:,} bad, "
              f"{report.blank:,} blank, {report.unrecognised:,} JSON without a response  [dim]({report.seconds:.2f} s)[/]")
    if report.bad_examples:
        where = ", ".join(f"{escape(f)}:{n}" for f, n in report.bad_examples)
        out.print(f"  bad lines  [yellow]{where}{' …' if report.bad_lines > len(report.bad_examples) else ''}[/]")
    if report.shapes:
        out.print("  shapes     " + ", ".join(f"{escape(k)} {v:,}" for k, v in report.shapes.items()))
    if report.multi_choice:
        out.print(f"  choices    {report.multi_choice:,} answers are choices of n > 1 responses (each choice is counted)")
    if report.streams:
        out.print(f"  streams    {report.streams:,} streamed answers reassembled from {report.chunks:,} chunk lines")
    out.print(f"  turns      headers of {escape(report.vocabulary)}")
    if not report.responses:
        out.print("\n[yellow]No responses found.[/] Each line should be an OpenAI-compatible response, a "
                  "request/response pair, or Ollama/TGI/llama.cpp output; --field maps other shapes.")
    else:
        out.print()
        out.print("[bold]finish_reason[/]  " + ", ".join(
            f"{escape(k)} {v:,} ({_percent(v, report.responses)})" for k, v in report.finish.items()))
        raw = {k: v for k, v in report.finish_raw.items() if k not in report.finish}
        if raw:
            out.print("  as logged  " + ", ".join(f"{escape(k)} {v:,}" for k, v in report.finish_raw.items()))
        if report.stop_reasons:
            out.print("  stop_reason  " + ", ".join(f"{escape(k)} {v:,}" for k, v in list(report.stop_reasons.items())[:10]))
        out.print()
        out.print(_table("model", report.by_model))
        out.print()
        out.print(_table("max_tokens", report.by_max_tokens))
        out.print()
        print_charts(out, report.charts)
        out.print("[bold]problems[/]")
        for problem in report.problems.values():
            mark = "[green]0[/]" if not problem.count else f"[yellow]{problem.count:,}[/]"
            out.print(f"  {mark} ({_percent(problem.count, report.responses)}) {problem.key}: {escape(problem.description)}")
            for example in problem.examples:
                detail = f"  [dim]{escape(example.detail)}[/]" if example.detail else ""
                model = f" {escape(example.model)}" if example.model else ""
                out.print(f"      {escape(example.file)}:{example.line}{model}{detail}")
                out.print(f"        │ {escape(visible(example.excerpt))}")
    out.print()
    print_findings(out, result.findings)
    return text_of(out)


def _example(example: Any) -> dict[str, Any]:
    return {"file": example.file, "line": example.line, "model": example.model,
            "finish_reason": example.finish_reason, "native_finish_reason": example.native_finish_reason,
            "excerpt": example.excerpt, "detail": example.detail}


def _lines(flagged) -> dict[str, Any]:
    return {"lines": [{"file": f, "line": n} for f, n in flagged[:MAX_LINES]],
            "lines_truncated": len(flagged) > MAX_LINES}


def logs_document(result: LogsResult, fail_on: Severity = Severity.ERROR) -> dict[str, Any]:
    report = result.report
    return {
        **header("stopdoctor.logs/1"),
        "files": list(report.files),
        "turn_headers_from": report.vocabulary,
        "lines": {"total": report.lines, "responses": report.responses, "bad": report.bad_lines,
                  "blank": report.blank, "unrecognised": report.unrecognised,
                  "multi_choice": report.multi_choice,
                  "bad_examples": [{"file": f, "line": n} for f, n in report.bad_examples]},
        "shapes": report.shapes,
        "finish_reason": report.finish,
        "finish_reason_as_logged": report.finish_raw,
        "finish_reason_native": report.finish_native,
        "streams": {"answers": report.streams, "chunks": report.chunks},
        "charts": charts_document(report.charts),
        "length_share": report.length_share,
        "by_model": report.by_model,
        "by_max_tokens": report.by_max_tokens,
        "stop_reason": report.stop_reasons,
        "problems": {key: {"description": p.description, "count": p.count, "share": p.share,
                           "by_model": p.by_model, "examples": [_example(e) for e in p.examples],
                           **(_lines(report.flagged[key]) if key in report.flagged else {})}
                     for key, p in report.problems.items()},
        "thresholds": {"max_length_share": report.settings.max_length_share,
                       "max_turn_share": report.settings.max_turn_share},
        "seconds": round(report.seconds, 3),
        "fail_on": fail_on.label,
        "findings": [finding_document(f) for f in result.findings],
        "summary": summary(result.findings),
    }


def render_logs_json(result: LogsResult, fail_on: Severity = Severity.ERROR) -> str:
    return json.dumps(logs_document(result, fail_on), indent=2, ensure_ascii=False, default=str) + "\n"
