"""GitHub Actions workflow commands for `stopdoctor check --format github`: one annotation per
finding (`::error file=…,line=…,title=SD101 end-of-turn-not-a-stop-id::message`), and one per
model or serving file that could not be read. Info findings become notices.
Any command's `Report`. Imports: core, reporters.sarif (locations), reporters.plain. Never prints.
"""

from __future__ import annotations

from pathlib import Path

from stopdoctor.core.findings import Report, Severity
from stopdoctor.reporters.plain import printable
from stopdoctor.reporters.sarif import locate, relative_uri

COMMAND = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


def escape_data(text: str) -> str:
    """The message part, escaped as GitHub's toolkit does (%, CR and LF, or the command ends early
    and the next line is read as a command of its own); other controls, escape sequences and
    bidi overrides shown as escapes first (`\\x1b`)."""
    return printable(text).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A property value: also ':' and ',' which separate properties."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def annotation(command: str, message: str, **properties: object) -> str:
    props = ",".join(f"{k}={escape_property(str(v))}" for k, v in properties.items() if v is not None)
    return f"::{command}{' ' + props if props else ''}::{escape_data(message)}"


def render_github(report: Report, base: Path) -> str:
    lines = []
    for model in report.subjects:
        for finding in model.findings:
            place = locate(model, finding)
            file = relative_uri(place.path, base)[0] if place is not None else None
            if place is not None and file is not None and file.startswith("file://"):
                file = str(place.path)  # outside the workspace: GitHub shows it unattached
            lines.append(annotation(
                COMMAND[finding.severity],
                f"{finding.message} (model {model.name}). Fix: {finding.fix}",
                file=file, line=place.line if place is not None else None,
                title=f"{finding.code} {finding.name}",
            ))
        if model.error is not None:
            hint = f" Hint: {model.error.hint}" if model.error.hint else ""
            lines.append(annotation("error", f"{model.error_line}.{hint}",
                                    title=f"stopdoctor could not check {model.failed_target}"))
    return "".join(line + "\n" for line in lines)
