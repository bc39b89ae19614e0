"""One `Report` in, one string out, per format: the map every command that judges something
(inspect, check, labels, logs, probe-server) renders through. Human and JSON are per command (each command's
document has its own schema); SARIF, JUnit and GitHub annotations are the same for every command.

Imports: core, rules.results, and the format modules (each lazily: only the one asked for loads).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from stopdoctor.core.errors import InputError
from stopdoctor.core.findings import Report


@dataclass(frozen=True)
class Options:
    """How to render: the folder SARIF/JUnit/GitHub paths are relative to, colour and width for
    people, --exit-zero (written into the check JSON), and how many labelled examples to show."""

    base: Path = Path(".")
    color: bool = False
    width: int = 100
    exit_zero: bool = False
    show: int = 0


def _human(report: Report, options: Options) -> str:
    from stopdoctor.reporters.plain import terminal_safe
    from stopdoctor.reporters.human import render_inspect_human

    subject = report.subjects[0]
    if report.command == "labels":
        from stopdoctor.reporters.labels_text import render_labels_human

        return render_labels_human(subject.result, options.show, options.color, options.width)
    if report.command == "logs":
        from stopdoctor.reporters.logs_text import render_logs_human

        return render_logs_human(subject.result, options.color, options.width)
    if report.command == "probe-server":
        from stopdoctor.reporters.server_probe_text import render_server_probe_human

        return render_server_probe_human(subject.result, options.color, options.width)
    parts = []
    for subject in report.subjects:  # inspect, check: the inspect report of each model
        if subject.result is not None:
            parts.append(render_inspect_human(replace(subject.result, findings=subject.findings), options.color,
                                              options.width, command=report.command, unfinished=subject.error_line))
        if subject.live is not None:
            from stopdoctor.reporters.generation import render_live_human

            parts.append(render_live_human(subject.live, options.color, options.width))
        if subject.error is not None and subject.result is None:
            hint = f"\nhint: {subject.error.hint}" if subject.error.hint else ""
            parts.append(terminal_safe(f"stopdoctor {report.command} {subject.name[:80]}\n"
                                   f"  could not check it: {subject.error_line}{hint}\n"))
    return "\n".join(parts)


def _json(report: Report, options: Options) -> str:
    subject = report.subjects[0]
    if report.command == "inspect":
        from stopdoctor.reporters.inspect_json import render_inspect_json

        return render_inspect_json(subject.result)
    if report.command == "labels":
        from stopdoctor.reporters.labels_text import render_labels_json

        return render_labels_json(subject.result, options.show)
    if report.command == "logs":
        from stopdoctor.reporters.logs_text import render_logs_json

        return render_logs_json(subject.result, report.fail_on)
    if report.command == "probe-server":
        from stopdoctor.reporters.server_probe_text import render_server_probe_json

        return render_server_probe_json(subject.result)
    from stopdoctor.reporters.check_json import render_check_json

    return render_check_json(report, options.base, options.exit_zero)


def _sarif(report: Report, options: Options) -> str:
    from stopdoctor.reporters.sarif import render_sarif

    return render_sarif(report, options.base)


def _junit(report: Report, options: Options) -> str:
    from stopdoctor.reporters.junit import render_junit

    return render_junit(report, options.base)


def _github(report: Report, options: Options) -> str:
    from stopdoctor.reporters.github import render_github

    return render_github(report, options.base)


FORMATS: dict[str, Callable[[Report, Options], str]] = {
    "human": _human,
    "json": _json,
    "sarif": _sarif,
    "junit": _junit,
    "github": _github,
}


def render(format: str, report: Report, options: Options = Options()) -> str:
    """`report` in `format` (one of FORMATS)."""
    if format not in FORMATS:
        raise InputError(f"unknown format {format!r}", hint=f"use one of {', '.join(FORMATS)}")
    return FORMATS[format](report, options)
