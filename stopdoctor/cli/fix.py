"""`stopdoctor fix`: show (and with --write, apply) the safe mechanical fixes as a unified diff.

Exit codes: 0 nothing to fix, or the fix was written; 1 a diff was shown but not written (so CI
can detect "fix needed"); 2 bad input.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from stopdoctor.cli.app import JsonOpt, ModelArg, RevisionOpt, app, handles_errors
from stopdoctor.cli.output import emit, say

ServingOpt = Annotated[Path | None, typer.Option("--serving", help="A serving file to fix too: vLLM command/YAML, Ollama Modelfile, llama.cpp command, request JSON.")]
KindOpt = Annotated[str | None, typer.Option("--kind", help="Kind of the --serving file: vllm, ollama, llamacpp, request, sglang, mlx-lm, mlx-vlm or llama-cpp-python (default: guessed).")]
WriteOpt = Annotated[bool, typer.Option("--write", help="Write the changes (default: only show the diff).")]
BackupOpt = Annotated[bool, typer.Option("--backup", help="With --write: keep each changed file as FILE.bak.")]


@app.command()
@handles_errors
def fix(model: ModelArg, serving: ServingOpt = None, kind: KindOpt = None, write: WriteOpt = False,
        backup: BackupOpt = False, revision: RevisionOpt = None, json: JsonOpt = False) -> int:
    """Show the safe fixes for stop defects as a diff; --write applies them (a GGUF's metadata in place)."""
    if backup and not write:
        from stopdoctor.core.errors import InputError

        raise InputError("--backup goes with --write", hint="stopdoctor fix MODEL --write --backup")
    code, plan, written = _fix(model, serving, kind, write, revision, quiet=json, backup=backup)
    if json:
        from stopdoctor.reporters.fix_json import render_fix_json

        emit(render_fix_json(model, plan, written, code))
    return code


def _fix(model: str, serving: Path | None, kind: str | None, write: bool, revision: str | None, quiet: bool,
         backup: bool = False):
    """(exit code, plan, written). `quiet`: the diff goes into the JSON document, not on stdout."""
    from stopdoctor.api import inspect_model, read_serving
    from stopdoctor.core.errors import InputError
    from stopdoctor.fix import plan_fixes

    config = read_serving(serving, kind) if serving is not None else None
    result = inspect_model(model, revision)
    plan = plan_fixes(result.analysis, config)
    for note in plan.notes:
        say(f"no safe fix: {note}")
    if not plan.edits:
        say("nothing to fix")
        return 0, plan, False
    staged = None
    if write:
        if result.source.kind == "hub" and any(e.label.endswith(".json") and e.path.is_relative_to(result.source.root) for e in plan.edits):
            raise InputError("refusing to write into the hub cache; download the model to a folder and fix that")
        try:  # every refusal (a link, a backup in the way, a full disk, a GGUF not to edit) before any output
            staged = plan.stage(backup=backup)
        except InputError as error:  # one line: what was refused, and what to do
            raise InputError(error.message + (f" ({error.hint})" if error.hint else "")) from None
    try:
        if not quiet:
            emit(plan.diff())
        for edit in plan.edits:
            say(f"{edit.label}: {edit.reason}")
        if staged is None:
            say("run again with --write to apply")
            return 1, plan, False
        staged.commit()
    finally:
        if staged is not None:
            staged.discard()
    say(f"wrote {len(plan.edits)} file(s)")
    return 0, plan, True
