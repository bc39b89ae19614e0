"""One `Report` in, one string out, per format: the map every command renders through. Human and
JSON are per command (each command's document has its own schema); SARIF, JUnit and GitHub
annotations are the same for every command with rule findings.

Imports: core, and the format modules (each lazily: only the one asked for loads).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from stopdoctor.core.errors import InputError
from stopdoctor.core.findings import Report
from stopdoctor.core.records import record


@record
class Options:
    """How to render: the folder SARIF/JUnit/GitHub paths are relative to, colour and width for
    people, --exit-zero (written into the check JSON), how many labelled examples to show, and the
    detail people asked for (render --ids, generate --trace)."""

    base: Path = Path(".")
    color: bool = False
    width: int = 100
    exit_zero: bool = False
    show: int = 0
    ids: bool = False
    trace: bool = False


Writer = Callable[[Report, Options], str]


def _models_human(report: Report, options: Options) -> str:
    """inspect, check: the inspect report of each model (and check --live's probe)."""
    from stopdoctor.reporters.human import render_inspect_human
    from stopdoctor.reporters.plain import terminal_safe

    parts = []
    for subject in report.subjects:
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


def _labels_human(report: Report, options: Options) -> str:
    from stopdoctor.reporters.labels_text import render_labels_human

    return render_labels_human(report.subjects[0].result, options.show, options.color, options.width)


def _logs_human(report: Report, options: Options) -> str:
    from stopdoctor.reporters.logs_text import render_logs_human

    return render_logs_human(report.subjects[0].result, options.color, options.width)


def _probe_server_human(report: Report, options: Options) -> str:
    from stopdoctor.reporters.server_probe_text import render_server_probe_human

    return render_server_probe_human(report.subjects[0].result, options.color, options.width)


def _render_human(report: Report, options: Options) -> str:
    from stopdoctor.reporters.prompt_text import render_prompt_human

    result = report.subjects[0].result
    return render_prompt_human(result.prompts, result.comparisons, show_ids=options.ids, color=options.color,
                               width=options.width)


def _rules_human(report: Report, options: Options) -> str:
    from stopdoctor.reporters.human import render_rules_human

    listing = report.subjects[0].result
    return render_rules_human(list(listing.rules), options.color, options.width, detail=listing.detail)


def _diff_human(report: Report, options: Options) -> str:
    from stopdoctor.reporters.diff_text import render_diff_text

    return render_diff_text(report.subjects[0].result)


def _probe_stop_human(report: Report, options: Options) -> str:
    from stopdoctor.reporters.probe_text import render_probe_human

    return render_probe_human(report.subjects[0].result, color=options.color, width=options.width)


def _stop_odds_human(report: Report, options: Options) -> str:
    from stopdoctor.reporters.stop_odds_text import render_stop_odds_human

    return render_stop_odds_human(report.subjects[0].result, options.color, options.width)


def _generate_human(report: Report, options: Options) -> str:
    from stopdoctor.reporters.generation import render_generation_human

    return "\n".join(render_generation_human(run.result, options.color, options.width, trace=options.trace, fix=run.fix,
                                             evidence=run.evidence) for run in report.subjects[0].result.runs)


def _fragment_human(report: Report, options: Options) -> str:
    from stopdoctor.reporters.generation import render_fragment_human

    subject = report.subjects[0]
    return render_fragment_human(subject.name, subject.result, options.color, options.width)


def _fix_human(report: Report, options: Options) -> str:
    """The unified diff of the planned edits (what remains is said on stderr)."""
    plan = report.subjects[0].result.plan
    return plan.diff() if plan.edits else ""


def _inspect_json(report: Report, options: Options) -> str:
    from stopdoctor.reporters.inspect_json import render_inspect_json

    return render_inspect_json(report.subjects[0].result)


def _check_json(report: Report, options: Options) -> str:
    from stopdoctor.reporters.check_json import render_check_json

    return render_check_json(report, options.base, options.exit_zero)


def _labels_json(report: Report, options: Options) -> str:
    from stopdoctor.reporters.labels_text import render_labels_json

    return render_labels_json(report.subjects[0].result, options.show)


def _logs_json(report: Report, options: Options) -> str:
    from stopdoctor.reporters.logs_text import render_logs_json

    return render_logs_json(report.subjects[0].result, report.fail_on)


def _probe_server_json(report: Report, options: Options) -> str:
    from stopdoctor.reporters.server_probe_text import render_server_probe_json

    return render_server_probe_json(report.subjects[0].result, report.exit_code())


def _render_json(report: Report, options: Options) -> str:
    from stopdoctor.reporters.prompt_text import render_prompt_json

    result = report.subjects[0].result
    return render_prompt_json(result.prompts, result.comparisons)


def _rules_json(report: Report, options: Options) -> str:
    from stopdoctor.reporters.rules_json import render_rules_json

    return render_rules_json(list(report.subjects[0].result.rules))


def _diff_json(report: Report, options: Options) -> str:
    from stopdoctor.reporters.diff_text import render_diff_json

    return render_diff_json(report.subjects[0].result, report.exit_code())


def _probe_stop_json(report: Report, options: Options) -> str:
    from stopdoctor.reporters.probe_text import render_probe_json

    return render_probe_json(report.subjects[0].result)


def _stop_odds_json(report: Report, options: Options) -> str:
    from stopdoctor.reporters.stop_odds_text import render_stop_odds_json

    return render_stop_odds_json(report.subjects[0].result)


def _generate_json(report: Report, options: Options) -> str:
    from stopdoctor.reporters.generation import render_generation_json, render_generation_runs_json

    runs = report.subjects[0].result
    if runs.both:
        return render_generation_runs_json([(run.result, run.fix, run.evidence) for run in runs.runs])
    run = runs.runs[0]
    return render_generation_json(run.result, run.fix, run.evidence)


def _fragment_json(report: Report, options: Options) -> str:
    from stopdoctor.reporters.generation import render_fragment_json

    subject = report.subjects[0]
    return render_fragment_json(subject.name, subject.result)


def _fix_json(report: Report, options: Options) -> str:
    from stopdoctor.reporters.fix_json import render_fix_json

    outcome = report.subjects[0].result
    return render_fix_json(outcome.model, outcome.plan, outcome.written, report.exit_code(), outcome.remaining)


def _sarif(report: Report, options: Options) -> str:
    from stopdoctor.reporters.sarif import render_sarif

    return render_sarif(report, options.base)


def _junit(report: Report, options: Options) -> str:
    from stopdoctor.reporters.junit import render_junit

    return render_junit(report, options.base)


def _github(report: Report, options: Options) -> str:
    from stopdoctor.reporters.github import render_github

    return render_github(report, options.base)


# Each command's own human and JSON writers (each JSON document has its own schema).
HUMAN: dict[str, Writer] = {
    "inspect": _models_human, "check": _models_human, "labels": _labels_human, "logs": _logs_human,
    "probe-server": _probe_server_human, "render": _render_human, "rules": _rules_human, "diff": _diff_human,
    "probe-stop": _probe_stop_human, "stop-odds": _stop_odds_human, "generate": _generate_human,
    "fragment-test": _fragment_human, "fix": _fix_human,
}
JSON: dict[str, Writer] = {
    "inspect": _inspect_json, "check": _check_json, "labels": _labels_json, "logs": _logs_json,
    "probe-server": _probe_server_json, "render": _render_json, "rules": _rules_json, "diff": _diff_json,
    "probe-stop": _probe_stop_json, "stop-odds": _stop_odds_json, "generate": _generate_json,
    "fragment-test": _fragment_json, "fix": _fix_json,
}
# The CI formats, the same for every command whose findings are rule findings with locations.
CI: dict[str, Writer] = {"sarif": _sarif, "junit": _junit, "github": _github}
CI_COMMANDS = frozenset({"inspect", "check", "labels", "logs", "fix"})

FORMATS: tuple[str, ...] = ("human", "json", *CI)  # every format some command writes


def formats_of(command: str) -> tuple[str, ...]:
    """The formats `command` writes: human and JSON always, SARIF/JUnit/GitHub where there are findings."""
    return ("human", "json", *CI) if command in CI_COMMANDS else ("human", "json")


def written(formats: tuple[str, ...]) -> str:
    """The formats a command writes, in words: "human or json", "human, json, sarif, junit or github"."""
    return f"{', '.join(formats[:-1])} or {formats[-1]}"


def render(format: str, report: Report, options: Options = Options()) -> str:
    """`report` in `format` (one of `formats_of(report.command)`)."""
    allowed = formats_of(report.command)
    if format not in allowed:
        raise InputError(f"--format {format}: {report.command} writes {written(allowed)}",
                         hint="SARIF, JUnit and GitHub annotations are for the commands with rule findings"
                         if format in CI else f"use one of {', '.join(allowed)}")
    if format in CI:
        return CI[format](report, options)
    return (HUMAN if format == "human" else JSON)[report.command](report, options)
