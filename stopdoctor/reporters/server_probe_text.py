"""People-facing text and JSON for `stopdoctor probe-server`.

JSON schema `stopdoctor.probe-server/1` (fields are public interface: add, never rename):
`url`, `server {engine, version, told_by, model, models, context, routes}`, `expected {engine,
known, stop_rule, defaults: [{applies_to, what, value, version_read, source}]}`, `probes: [{name,
status, summary, requests, seconds, figures, evidence: [{request, status, answer, finish_reason,
usage, …}]}]`, `summary {pass, fail, warn, skip}`, `requests`, `seconds`, `exit_code`.

Imports: rich, reporters.console, reporters.document, actions.probe_server.battery (data).
"""

from __future__ import annotations

import json
from typing import Any

from rich.markup import escape

from stopdoctor.actions.probe_server.battery import ServerProbeReport
from stopdoctor.actions.probe_server.probe import FAIL, STATUSES, WARN
from stopdoctor.reporters.console import capture, text_of
from stopdoctor.reporters.document import header

SCHEMA = "stopdoctor.probe-server/1"
STYLES = {"pass": "green", "fail": "bold red", "warn": "yellow", "skip": "dim"}


def server_probe_document(report: ServerProbeReport, exit_code: int) -> dict[str, Any]:
    identity, expected = report.identity, report.expectation
    return {
        **header(SCHEMA),
        "url": report.url,
        "server": {"engine": identity.engine, "version": identity.version, "told_by": identity.told_by,
                   "model": identity.model, "models": list(identity.models), "context": identity.context,
                   "routes": identity.seen},
        "expected": {"engine": expected.engine, "known": expected.known, "stop_rule": expected.stop_rule,
                     "defaults": [{"applies_to": d.applies_to, "what": d.what, "value": d.value,
                                   "version_read": d.version, "source": d.source} for d in expected.defaults]},
        "probes": [{"name": p.name, "status": p.status, "summary": p.summary, "requests": p.requests,
                    "seconds": p.seconds, "figures": p.figures, "evidence": list(p.evidence)} for p in report.probes],
        "summary": {s: sum(1 for p in report.probes if p.status == s) for s in STATUSES},
        "requests": report.requests,
        "seconds": round(report.seconds, 3),
        "exit_code": exit_code,  # the Report's: 1 when a probe failed
    }


def render_server_probe_json(report: ServerProbeReport, exit_code: int) -> str:
    return json.dumps(server_probe_document(report, exit_code), indent=2, ensure_ascii=False) + "\n"


def _evidence_line(item: dict[str, Any]) -> str:
    if "request" not in item:
        return json.dumps(item, ensure_ascii=False)[:200]
    request = item["request"]
    asked = {k: v for k, v in request.items() if k not in ("messages", "prompt", "route", "model")}
    prompt = request.get("prompt")
    if prompt is None and isinstance(request.get("messages"), list) and request["messages"]:
        last = request["messages"][-1]
        prompt = last.get("content") if isinstance(last, dict) else None
    parts = [f"{request.get('route')} {json.dumps(prompt, ensure_ascii=False)[:60]} {json.dumps(asked, ensure_ascii=False)}"]
    if item.get("error"):
        parts.append(f"→ HTTP {item.get('status')}: {str(item['error'])[:80]}")
    else:
        tokens = (item.get("usage") or {}).get("completion_tokens") if isinstance(item.get("usage"), dict) else None
        answer = item.get("answer")
        shown = json.dumps(answer if not isinstance(answer, str) or len(answer) <= 80 else "…" + answer[-80:],
                           ensure_ascii=False)  # the end: where a stop, a cut or a lost tail shows
        parts.append(f"→ {shown} finish {item.get('finish_reason')!r}"
                     + (f", {tokens} tokens" if tokens is not None else ""))
    return " ".join(parts)


def render_server_probe_human(report: ServerProbeReport, color: bool = False, width: int = 100) -> str:
    out = capture(color, width)
    out.print(f"[bold]stopdoctor probe-server[/] {escape(report.url)}")
    name = max(len(p.name) for p in report.probes) if report.probes else 0
    for probe in report.probes:
        style = STYLES[probe.status] if color else ""
        label = f"[{style}]{probe.status:<4}[/]" if style else f"{probe.status:<4}"
        out.print(f"  {label}  {probe.name:<{name}}  {escape(probe.summary)}")
        if probe.status in (FAIL, WARN):
            for item in probe.evidence[-4:]:
                out.print(f"  {'':4}  {'':<{name}}    {escape(_evidence_line(item))}")
    counts = ", ".join(f"{sum(1 for p in report.probes if p.status == s)} {s}" for s in STATUSES)
    out.print(f"  {report.requests} requests in {report.seconds:.1f} s: {counts}")
    return text_of(out)
