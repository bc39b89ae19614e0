"""`stopdoctor check`: the CI gate. Static checks on every configured model and the serving files
deployed with it, in a format a CI system reads (human, json, sarif, junit, github).

Settings: stopdoctor.toml / [tool.stopdoctor] < STOPDOCTOR_* variables < flags (see stopdoctor.config).
Exit codes: 0 clean, 1 a finding at/above fail-on (0 with --exit-zero), 2 a model, serving file or
the configuration could not be used (the other models are still reported), 3 internal error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, List, Optional  # typer reads these; `list[str] | None` trips its list parser

import typer

from stopdoctor.cli.app import ColorOpt, FormatOpt, OutputOpt, RevisionOpt, app, chosen_format, handles_errors
from stopdoctor.cli.output import say, working, write_report

ModelsArg = Annotated[Optional[List[str]], typer.Argument(metavar="[MODEL]...",
    help="Models to check (folders, .gguf files, hub ids); default: the configured models.", show_default=False)]
ServingOpt = Annotated[Optional[List[str]], typer.Option(
    "--serving", help="Serving configuration deployed with the models (vLLM, Ollama Modelfile, llama.cpp, request); repeatable.",
    show_default=False)]
ConfigOpt = Annotated[Path | None, typer.Option("--config", help="Config file (default: stopdoctor.toml or pyproject.toml, searched upward).")]
CheckFailOnOpt = Annotated[str | None, typer.Option("--fail-on", help="Lowest severity that makes the exit code 1 (default: error).", show_default=False)]
SelectOpt = Annotated[Optional[List[str]], typer.Option("--select", help="Only these rules: codes, prefixes (SD1) or names; repeatable or comma-separated.", show_default=False)]
IgnoreOpt = Annotated[Optional[List[str]], typer.Option("--ignore", help="Skip these rules: codes, prefixes or names.", show_default=False)]
LiveOpt = Annotated[bool, typer.Option("--live", help="Also run the generate probe (needs torch and the model weights).")]
CheckJsonOpt = Annotated[bool, typer.Option("--json", help="Same as --format json: one JSON document on stdout.")]
BaselineOpt = Annotated[Path | None, typer.Option(
    "--baseline", help="Findings accepted in this file stay listed but never fail the gate; only new ones do.",
    show_default=False)]
WriteBaselineOpt = Annotated[bool, typer.Option(
    "--write-baseline", help="Write every current finding to the --baseline file (default stopdoctor-baseline.json) and exit 0.")]
HtmlOpt = Annotated[Path | None, typer.Option(
    "--html", metavar="FILE", help="Also write the run as one self-contained HTML page (a CI artifact): pass/fail at the top, "
    "every model and serving file, the findings with their fixes and file:line.", show_default=False)]
ExitZeroOpt = Annotated[bool, typer.Option("--exit-zero", help="Exit 0 even when findings reach --fail-on (2 and 3 still apply).")]


@app.command()
@handles_errors
def check(models: ModelsArg = None, serving: ServingOpt = None, config: ConfigOpt = None, format: FormatOpt = None,
          output: OutputOpt = None, fail_on: CheckFailOnOpt = None, select: SelectOpt = None, ignore: IgnoreOpt = None,
          revision: RevisionOpt = None, live: LiveOpt = False, exit_zero: ExitZeroOpt = False, color: ColorOpt = None,
          json: CheckJsonOpt = False, baseline: BaselineOpt = None, write_baseline: WriteBaselineOpt = False,
          html: HtmlOpt = None) -> int:
    """Check models and their serving configuration in CI: SARIF, JUnit, GitHub annotations or JSON."""
    from stopdoctor.config import load_settings, with_flags
    from stopdoctor.gate import DEFAULT_BASELINE, apply_baseline, read_baseline, require_live, run_gate
    from stopdoctor.gate import write_baseline as write_baseline_file

    if json:
        format = chosen_format(format, json)
    settings = with_flags(load_settings(config=config), models=models, revision=revision, serving=serving,
                          fail_on=fail_on, select=select, ignore=ignore, format=format)
    if settings.config_file is not None:
        say(f"stopdoctor: config {settings.config_file}")
    accepted = read_baseline(baseline) if baseline is not None and not write_baseline else None  # before the run
    if live:
        require_live()  # before the static run: a runner without torch should fail fast, not after minutes
    with working("checking…"):
        report = run_gate(settings, live=live)
    base = Path.cwd()
    if write_baseline:
        target = baseline if baseline is not None else Path(DEFAULT_BASELINE)
        written = write_baseline_file(report, target, base)
        say(f"stopdoctor: wrote {written} finding(s) to the baseline {target}; later runs with --baseline {target} "
            "fail only on new ones")
        for model in report.failed:
            say(f"stopdoctor: error: {model.error_line}")
        return report.exit_code(exit_zero=True)
    stale = 0
    if accepted is not None and baseline is not None:  # accepted was read from baseline
        report, stale = apply_baseline(report, accepted, baseline, base)
    if html is not None:
        from stopdoctor.cli.output import write_document
        from stopdoctor.reporters.check_html import render_check_html

        write_document(render_check_html(report, base, exit_zero), html, "the HTML report")
    write_report(report, settings.format, output, color, exit_zero=exit_zero)
    _summarise(report, exit_zero)
    if accepted is not None:
        kept = sum(f.baseline for f in report.findings)
        say(f"stopdoctor: {kept} in the baseline {baseline} (accepted, not failing)"
            + (f"; {stale} baseline entr{'y' if stale == 1 else 'ies'} no longer found: fixed, rewrite it with "
               "--write-baseline" if stale else ""))
    return report.exit_code(exit_zero)


def _summarise(report, exit_zero: bool) -> None:
    from stopdoctor.core.findings import Severity

    findings = report.findings
    counts = ", ".join(f"{sum(1 for f in findings if f.severity == s)} {s.label}" for s in (Severity.ERROR, Severity.WARNING, Severity.INFO))
    checked = len(report.subjects) - len(report.failed)
    say(f"stopdoctor: {checked} of {len(report.subjects)} model(s) checked: {counts} (fail-on {report.fail_on.label})")
    for model in report.failed:
        say(f"stopdoctor: error: {model.error_line}")
        if model.error.hint:
            say(f"hint: {model.error.hint}")
    if report.failed and checked:
        say("stopdoctor: the other models are reported above; exit 2 because not every model could be checked")
    elif exit_zero and any(f.severity >= report.fail_on for f in findings):
        say("stopdoctor: --exit-zero: findings reach fail-on, exiting 0 anyway")
