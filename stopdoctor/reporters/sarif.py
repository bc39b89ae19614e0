"""SARIF 2.1.0 for `stopdoctor check --format sarif` (GitHub code scanning and other CI viewers).

Any command's `Report` (check, inspect, labels, logs). One run; the rules are the registry's
checks (docs from their sections, default level from the configured severity); each result points
at the file to fix, relative to the base folder (the current directory) when it lies under it,
with the line resolved where the file was read. Also holds the helpers the other CI formats share.
Imports: core, rules (the registry). Never prints, never reads a file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from stopdoctor import __version__
from stopdoctor.core.records import record
from stopdoctor.rules.runner import REGISTRY
from stopdoctor.rules.registry import Rule
from stopdoctor.core.findings import Finding, Report, Severity, Subject

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}
INFORMATION_URI = "https://pypi.org/project/stopdoctor/"


@record
class Place:
    """Where a finding sends the reader: a file (absolute), and a line when one was found."""

    path: Path
    line: int | None = None


def locate(subject: Subject, finding: Finding | None) -> Place | None:
    """The file a finding is about: an absolute path (serving files, the config file) as is, a name
    relative to the subject through its files; without a file, the subject's own primary file, so
    every result has somewhere to point. The line was resolved where the file was read."""
    location = finding.location if finding is not None else None
    path: Path | None = None
    if location is not None and not location.file.startswith("("):
        given = Path(location.file)
        if given.is_absolute():
            path = given
        elif location.file in subject.files:
            path = subject.files[location.file]
    if path is None:
        path = primary_file(subject)
        return Place(absolute(path)) if path is not None else None
    return Place(absolute(path), location.line if location is not None else None)


def absolute(path: Path) -> Path:
    """The path made absolute without following links: a model linked into the repository
    (`models/m -> /data/m`) is annotated at its place in the repository, not at the link's target."""
    return Path(os.path.abspath(path))


def primary_file(subject: Subject) -> Path | None:
    files = subject.files
    for name in ("generation_config.json", "config.json", "tokenizer_config.json"):
        if name in files:
            return files[name]
    if files:
        return next(iter(files.values()))  # a .gguf model has exactly one file
    given = Path(subject.name)
    return given if given.exists() else None


def relative_uri(path: Path, base: Path) -> tuple[str, bool]:
    """(uri, relative?): a POSIX path relative to `base` when the file lies under it, else a file URI."""
    try:
        return absolute(path).relative_to(absolute(base)).as_posix(), True
    except ValueError:
        pass
    try:  # the working folder itself reached through a link
        return path.resolve().relative_to(base.resolve()).as_posix(), True
    except ValueError:
        return absolute(path).as_uri(), False


def descriptor(rule: Rule, level: Severity) -> dict[str, Any]:
    """The SARIF reportingDescriptor of a rule: its code, name and doc."""
    sections = rule.sections
    help_text = "\n\n".join(f"{heading}:\n{body}" for heading, body in sections.items()) or rule.summary
    help_markdown = "\n\n".join(f"**{heading}**\n\n{body}" for heading, body in sections.items()) or rule.summary
    return {
        "id": rule.code,
        "name": rule.name,
        "shortDescription": {"text": rule.summary},
        "fullDescription": {"text": sections.get("What it checks", rule.summary)},
        "help": {"text": help_text, "markdown": help_markdown},
        "defaultConfiguration": {"level": LEVEL[level]},
        "properties": {"tags": ["stopdoctor", rule.code[:3] + "xx"]},
    }


def sarif_document(report: Report, base: Path) -> dict[str, Any]:
    levels = report.levels
    codes = sorted({c for m in report.subjects for c in m.checks} | {f.code for f in report.findings})
    rules = [descriptor(REGISTRY[c], levels.get(c, REGISTRY[c].severity)) for c in codes if c in REGISTRY]
    index = {r["id"]: i for i, r in enumerate(rules)}
    results = []
    for model in report.subjects:
        for finding in model.findings:
            results.append(_result(model, finding, base, index, report.baseline is not None))
    notifications = [
        {
            "level": "error",
            "message": {"text": (model.error_line or "")
                                + (f" (hint: {model.error.hint})" if model.error and model.error.hint else "")},
            "descriptor": {"id": "load-error"},
            "properties": {"model": model.name},
        }
        for model in report.failed
    ]
    run: dict[str, Any] = {
        "tool": {"driver": {"name": "stopdoctor", "version": __version__, "semanticVersion": __version__,
                            "informationUri": INFORMATION_URI, "rules": rules}},
        "originalUriBaseIds": {"%SRCROOT%": {"uri": base.resolve().as_uri() + "/"}},
        "invocations": [{"executionSuccessful": not report.failed, "toolExecutionNotifications": notifications}],
        "results": results,
        "properties": {"command": report.command, "models": [m.name for m in report.subjects], "failOn": report.fail_on.label},
    }
    return {"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [run]}


def _result(model: Subject, finding: Finding, base: Path, index: dict[str, int], baselined: bool = False) -> dict[str, Any]:
    result: dict[str, Any] = {
        "ruleId": finding.code,
        "level": LEVEL[finding.severity],
        "message": {"text": f"{finding.message.rstrip('.')}. Fix: {finding.fix}"},
        "properties": {"model": model.name, "severity": finding.severity.label,
                       "key": finding.location.key if finding.location else None,
                       "evidence": json.loads(json.dumps(finding.evidence, default=str))},
    }
    if finding.code in index:
        result["ruleIndex"] = index[finding.code]
    if baselined:
        result["baselineState"] = "unchanged" if finding.baseline else "new"
    place = locate(model, finding)
    if place is not None:
        uri, relative = relative_uri(place.path, base)
        artifact: dict[str, Any] = {"uri": uri}
        if relative:
            artifact["uriBaseId"] = "%SRCROOT%"
        physical: dict[str, Any] = {"artifactLocation": artifact}
        if place.line is not None:
            physical["region"] = {"startLine": place.line}
        result["locations"] = [{"physicalLocation": physical}]
    return result


def render_sarif(report: Report, base: Path) -> str:
    return json.dumps(sarif_document(report, base), indent=2, ensure_ascii=False) + "\n"
