"""`stopdoctor fix`: show (and with --write, apply) the safe mechanical fixes as a unified diff.
What to fix and what remains is decided by `stopdoctor.fix.prepare_fix`; this module says it.

Exit codes (the one rule, `Report.exit_code`, over `stopdoctor.rules.verdicts.fix_report`), as
`check` would exit once the shown fixes are in: 0 nothing left that fails the gate (nothing to fix,
or the fix was written); 1 a diff was shown but not written (so CI can detect "fix needed"), or a
finding at/above fail-on remains that has no mechanical fix (a template made for another
tokenizer): `fix` never says "nothing to fix" on a model `check` fails; 2 bad input.
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
    from stopdoctor.api import fix_report
    from stopdoctor.fix import prepare_fix

    prepared = prepare_fix(model, serving, kind, revision, write=write, backup=backup)
    try:
        outcome = _tell(prepared, format, output, color)
    finally:
        prepared.discard()
    report = fix_report(outcome, prepared.fail_on)
    if format != "human":  # a document says what was written: written after the files
        write_report(report, format, output, color)
    return report.exit_code()


def _tell(prepared, format: str, output: Path | None, color: bool | None):
    """Say what remains, show the diff (before the files change), and with staged files rename
    them into place; the outcome."""
    from stopdoctor.api import fix_report

    plan, remaining, fail_on = prepared.outcome.plan, prepared.outcome.remaining, prepared.fail_on
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
                f"{fail_on.label}) remain{'s' if len(remaining) == 1 else ''}: fix {'it' if len(remaining) == 1 else 'them'} by hand")
        else:
            say("nothing to fix")
        return prepared.outcome
    if format == "human":
        write_report(fix_report(prepared.outcome, fail_on), format, output, color)
    for edit in plan.edits:
        say(f"{edit.label}: {edit.reason}")
    if prepared.staged is None:
        say("run again with --write to apply")
        return prepared.outcome
    outcome = prepared.commit()
    shown = {(f.code, f.message) for f in remaining}
    for finding in outcome.remaining:
        if (finding.code, finding.message) not in shown:
            say(f"remains after the fix: {finding.severity.label} {finding.code} {finding.name}: {finding.message}")
    say(f"wrote {len(plan.edits)} file(s)" + (f"; {_count(outcome.remaining)} with no mechanical fix remain (above)"
                                              if outcome.remaining else ""))
    return outcome


def _count(findings) -> str:
    return f"{len(findings)} finding{'' if len(findings) == 1 else 's'}"
