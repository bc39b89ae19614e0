"""`stopdoctor fix`: show (and with --write, apply) the safe mechanical fixes as a unified diff.

Exit codes, as `check` would exit once the shown fixes are in: 0 nothing left that fails the gate
(nothing to fix, or the fix was written); 1 a diff was shown but not written (so CI can detect "fix
needed"), or a finding at/above fail-on remains that has no mechanical fix (a template made for
another tokenizer): `fix` never says "nothing to fix" on a model `check` fails; 2 bad input.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from stopdoctor.cli.app import ColorOpt, FormatOpt, JsonOpt, ModelArg, OutputOpt, RevisionOpt, app, chosen_format, handles_errors
from stopdoctor.cli.output import say, write_report

ServingOpt = Annotated[Path | None, typer.Option("--serving", help="A serving file to fix too: vLLM command/YAML, Ollama Modelfile, llama.cpp command, request JSON.")]
KindOpt = Annotated[str | None, typer.Option("--kind", help="Kind of the --serving file: vllm, ollama, llamacpp, request, sglang, mlx-lm, mlx-vlm or llama-cpp-python (default: guessed).")]
WriteOpt = Annotated[bool, typer.Option("--write", help="Write the changes (default: only show the diff).")]
BackupOpt = Annotated[bool, typer.Option("--backup", help="With --write: keep each changed file as FILE.bak.")]


@app.command()
@handles_errors
def fix(model: ModelArg, serving: ServingOpt = None, kind: KindOpt = None, write: WriteOpt = False,
        backup: BackupOpt = False, revision: RevisionOpt = None, json: JsonOpt = False, format: FormatOpt = None,
        output: OutputOpt = None, color: ColorOpt = None) -> int:
    """Show the safe fixes for stop defects as a diff; --write applies them (a GGUF's metadata in place)."""
    format = chosen_format(format, json, "fix")
    if backup and not write:
        from stopdoctor.core.errors import InputError

        raise InputError("--backup goes with --write", hint="stopdoctor fix MODEL --write --backup")
    report = _fix(model, serving, kind, write, revision, format, output, color, backup=backup)
    return report.exit_code()


def _fix(model: str, serving: Path | None, kind: str | None, write: bool, revision: str | None, format: str,
         output: Path | None, color: bool | None, backup: bool = False):
    """The fix's Report, written in `format` (the diff, or the JSON document holding it) before the
    staged files are renamed into place."""
    from stopdoctor.api import fix_report, inspect_model, read_serving, serving_findings
    from stopdoctor.config import apply, load_settings
    from stopdoctor.fix import plan_fixes

    settings = load_settings()  # check's select/ignore/severities and fail-on: the same verdict as check

    def judged():
        config = read_serving(serving, kind) if serving is not None else None
        result = inspect_model(model, revision)
        findings = list(result.findings) + (serving_findings(result.analysis, config) if config is not None else [])
        return config, result, [f for f in apply(settings, findings) if f.severity >= settings.fail_on]

    config, result, failing = judged()
    plan = plan_fixes(result.analysis, config)
    staged = _staged(plan, result, backup) if write and plan.edits else None
    try:
        outcome = _report(model, plan, staged, judged, failing, settings, format, output, color)
        return fix_report(outcome, settings.fail_on)
    finally:
        if staged is not None:
            staged.discard()


def _staged(plan, result, backup: bool):
    """Every new file written beside its target, before anything is printed: each refusal (a link, a
    FILE.bak in the way, a full disk, a GGUF the editor will not rewrite) is one line, nothing changed."""
    from stopdoctor.core.errors import InputError

    # a hub model's files are the shared cache: plan_fixes plans no edit there (a note instead)
    try:
        return plan.stage(backup=backup)
    except InputError as error:  # one line: what was refused, and what to do
        raise InputError(error.message + (f" ({error.hint})" if error.hint else "")) from None


def _report(model, plan, staged, judged, failing, settings, format, output, color):
    """Say what remains, show the diff, and with `staged` rename the staged files into place."""
    from stopdoctor.api import FixOutcome, fix_report
    from stopdoctor.fix import remaining_findings

    remaining = remaining_findings(failing, plan)
    told = {f.code for f in remaining}
    for note in plan.notes:
        if note.split(" ", 1)[0] not in told:  # a serving note "SD401 name: fix" is said once, below
            say(f"no safe fix: {note}")
    for finding in remaining:
        where = f" ({finding.location})" if finding.location else ""
        say(f"remains, no mechanical fix: {finding.severity.label} {finding.code} {finding.name}{where}: {finding.message}")
        say(f"  by hand: {finding.fix}")
    if not plan.edits:
        if remaining:
            say(f"nothing stopdoctor can change safely; {_count(remaining)} that `check` fails on (fail-on "
                f"{settings.fail_on.label}) remain{'s' if len(remaining) == 1 else ''}: fix {'it' if len(remaining) == 1 else 'them'} by hand")
        else:
            say("nothing to fix")
        outcome = FixOutcome(model, plan, False, tuple(remaining))
        write_report(fix_report(outcome, settings.fail_on), format, output, color)
        return outcome
    if format == "human":  # the diff before the files change; a document says what was written: after
        write_report(fix_report(FixOutcome(model, plan, False, tuple(remaining)), settings.fail_on), format, output, color)
    for edit in plan.edits:
        say(f"{edit.label}: {edit.reason}")
    if staged is None:
        say("run again with --write to apply")
        outcome = FixOutcome(model, plan, False, tuple(remaining))
        if format != "human":
            write_report(fix_report(outcome, settings.fail_on), format, output, color)
        return outcome
    staged.commit()
    shown = {(f.code, f.message) for f in remaining}
    remaining = judged()[2]  # what check now says of the written files, not what the plan expected
    for finding in remaining:
        if (finding.code, finding.message) not in shown:
            say(f"remains after the fix: {finding.severity.label} {finding.code} {finding.name}: {finding.message}")
    say(f"wrote {len(plan.edits)} file(s)" + (f"; {_count(remaining)} with no mechanical fix remain (above)" if remaining else ""))
    outcome = FixOutcome(model, plan, True, tuple(remaining))
    if format != "human":
        write_report(fix_report(outcome, settings.fail_on), format, output, color)
    return outcome


def _count(findings) -> str:
    return f"{len(findings)} finding{'' if len(findings) == 1 else 's'}"
