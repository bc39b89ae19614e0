"""SARIF 2.1.0 for `stopdoctor check --format sarif` (GitHub code scanning and other CI viewers).

One run; the rules are the registry's checks (docs from their sections, default level from the
configured severity); each result points at the file to fix, relative to the base folder (the
current directory) when it lies under it, with the key's line when the file is text and names it.
Also holds the helpers the other CI formats share: where a finding's file is, and its line.
Imports: config (gate results), checks, report, model. Never prints.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stopdoctor import __version__
from stopdoctor.rules.runner import REGISTRY
from stopdoctor.rules.registry import Check
from stopdoctor.config import GateReport, ModelCheck
from stopdoctor.core.findings import Finding, Severity

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}
INFORMATION_URI = "https://pypi.org/project/stopdoctor/"
BINARY_SUFFIXES = {".gguf", ".safetensors", ".bin", ".pt", ".pth"}
MAX_TEXT_BYTES = 8 * 1024 * 1024  # tokenizer.json can be large; anything bigger is not a config


@dataclass(frozen=True)
class Place:
    """Where a finding sends the reader: a file (absolute), and a line when one was found."""

    path: Path
    line: int | None = None


def locate(model: ModelCheck, finding: Finding | None) -> Place | None:
    """The file a finding is about: an absolute path (serving files, the config file) as is, a name
    relative to the model root through the model's files; without a file, the model's own primary
    file, so every result has somewhere to point."""
    location = finding.location if finding is not None else None
    path: Path | None = None
    if location is not None and not location.file.startswith("("):
        given = Path(location.file)
        if given.is_absolute():
            path = given
        elif location.file in model.files:
            path = model.files[location.file]
        elif model.result is not None and model.result.source.kind != "gguf" and (model.result.source.root / given).is_file():
            path = model.result.source.root / given
    if path is None:
        path = primary_file(model)
        if path is None:
            return None
        return Place(path.resolve())
    return Place(path.resolve(), key_line(path, location.key) if location is not None else None)


def primary_file(model: ModelCheck) -> Path | None:
    files = model.files
    for name in ("generation_config.json", "config.json", "tokenizer_config.json"):
        if name in files:
            return files[name]
    if files:
        return next(iter(files.values()))  # a .gguf model has exactly one file
    given = Path(model.spec)
    return given if given.exists() else None


def key_line(path: Path, key: str | None) -> int | None:
    """The 1-based line declaring `key`: a "(line N)" the key carries, else its first component
    ("chat_template[1]" → chat_template) as a JSON key `"key":`, else as a TOML/YAML/Modelfile key
    at a line start. None for binary or large files (a .gguf) and keys not found."""
    if not key:
        return None
    given = re.search(r"\(line (\d+)\)", key)
    if given:
        return int(given.group(1))
    first = re.split(r"[.\[]", key, maxsplit=1)[0].strip()
    try:
        if not first or path.suffix.lower() in BINARY_SUFFIXES or path.stat().st_size > MAX_TEXT_BYTES:
            return None
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    patterns = (rf'"{re.escape(first)}"\s*:', rf"^\s*{re.escape(first)}\s*[=:]", rf"^\s*{re.escape(first)}\b",
                rf"(^|\s){re.escape(first)}(\s|=|$)")
    for pattern in patterns:
        found = re.search(pattern, text, flags=re.MULTILINE)
        if found:
            return text.count("\n", 0, found.start()) + 1
    return None


def relative_uri(path: Path, base: Path) -> tuple[str, bool]:
    """(uri, relative?): a POSIX path relative to `base` when the file lies under it, else a file URI."""
    try:
        return path.resolve().relative_to(base.resolve()).as_posix(), True
    except ValueError:
        return path.resolve().as_uri(), False


def rule(check: Check, level: Severity) -> dict[str, Any]:
    sections = check.sections
    help_text = "\n\n".join(f"{heading}:\n{body}" for heading, body in sections.items()) or check.summary
    help_markdown = "\n\n".join(f"**{heading}**\n\n{body}" for heading, body in sections.items()) or check.summary
    return {
        "id": check.code,
        "name": check.name,
        "shortDescription": {"text": check.summary},
        "fullDescription": {"text": sections.get("What it checks", check.summary)},
        "help": {"text": help_text, "markdown": help_markdown},
        "defaultConfiguration": {"level": LEVEL[level]},
        "properties": {"tags": ["stopdoctor", check.code[:3] + "xx"]},
    }


def sarif_document(report: GateReport, base: Path) -> dict[str, Any]:
    levels = report.levels
    codes = sorted({c for m in report.models for c in m.checks} | {f.code for f in report.findings})
    rules = [rule(REGISTRY[c], levels.get(c, REGISTRY[c].severity)) for c in codes if c in REGISTRY]
    index = {r["id"]: i for i, r in enumerate(rules)}
    results = []
    for model in report.models:
        for finding in model.findings:
            results.append(_result(model, finding, base, index))
    notifications = [
        {
            "level": "error",
            "message": {"text": model.error_line
                                + (f" (hint: {model.error.hint})" if model.error.hint else "")},
            "descriptor": {"id": "load-error"},
            "properties": {"model": model.spec},
        }
        for model in report.failed
    ]
    run: dict[str, Any] = {
        "tool": {"driver": {"name": "stopdoctor", "version": __version__, "semanticVersion": __version__,
                            "informationUri": INFORMATION_URI, "rules": rules}},
        "originalUriBaseIds": {"%SRCROOT%": {"uri": base.resolve().as_uri() + "/"}},
        "invocations": [{"executionSuccessful": not report.failed, "toolExecutionNotifications": notifications}],
        "results": results,
        "properties": {"models": [m.spec for m in report.models], "failOn": report.fail_on.label},
    }
    return {"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [run]}


def _result(model: ModelCheck, finding: Finding, base: Path, index: dict[str, int]) -> dict[str, Any]:
    result: dict[str, Any] = {
        "ruleId": finding.code,
        "level": LEVEL[finding.severity],
        "message": {"text": f"{finding.message.rstrip('.')}. Fix: {finding.fix}"},
        "properties": {"model": model.spec, "severity": finding.severity.label,
                       "key": finding.location.key if finding.location else None,
                       "evidence": json.loads(json.dumps(finding.evidence, default=str))},
    }
    if finding.code in index:
        result["ruleIndex"] = index[finding.code]
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


def render_sarif(report: GateReport, base: Path) -> str:
    return json.dumps(sarif_document(report, base), indent=2, ensure_ascii=False) + "\n"
