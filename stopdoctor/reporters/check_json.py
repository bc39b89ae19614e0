"""The `check --format json` document (schema_version 1). Fields are public interface: add, never rename.

Imports: core, reporters.inspect_json (finding and summary shapes), render.sarif
(locations). Never prints.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from stopdoctor.core.findings import Report, Subject
from stopdoctor.reporters.document import finding as finding_document
from stopdoctor.reporters.document import header, summary
from stopdoctor.reporters.sarif import locate, relative_uri


def _model(model: Subject, base: Path) -> dict[str, Any]:
    result = model.result
    findings = []
    for f in model.findings:
        place = locate(model, f)
        findings.append({**finding_document(f), "baseline": f.baseline,
                         "path": relative_uri(place.path, base)[0] if place else None,
                         "line": place.line if place else None})
    return {
        "spec": model.name,
        "kind": result.source.kind if result is not None else None,
        "verdict": result.analysis.verdict.kind if result is not None and result.analysis.verdict else None,
        "serving": [str(p) for p in model.serving],
        "checks": list(model.checks),
        "error": None if model.error is None else {
            "target": model.failed_target, "message": model.error.message, "hint": model.error.hint},
        "findings": findings,
        "summary": summary(model.findings),
        "live": _live(model.live),
        # per serving file that changes a runtime's sampling: path → runtime → key → {value, default, source}
        "served_sampling": _served_sampling(result),
    }


def _served_sampling(result: Any) -> dict[str, Any]:
    if result is None or not result.serving:
        return {}
    from stopdoctor.reporters.sampling_text import served_sampling_document

    return served_sampling_document(result.facts, result.serving)


def _live(verdict: Any) -> dict[str, Any] | None:
    """What `--live` ran on the model and what it found; None when it did not run."""
    if verdict is None:
        return None
    from stopdoctor.reporters.generation import fragment_document

    document = fragment_document("", verdict)
    return {key: document[key] for key in ("verdict", "reason", "probes", "stop_evidence")}


def check_document(report: Report, base: Path, exit_zero: bool = False) -> dict[str, Any]:
    return {
        **header("stopdoctor.check/1"),
        "config_file": str(report.config_file) if report.config_file else None,
        "fail_on": report.fail_on.label,
        "exit_code": report.exit_code(exit_zero),
        "models": [_model(m, base) for m in report.subjects],
        "summary": summary(report.findings),
    }


def render_check_json(report: Report, base: Path, exit_zero: bool = False) -> str:
    return json.dumps(check_document(report, base, exit_zero), indent=2, ensure_ascii=False, default=str) + "\n"
