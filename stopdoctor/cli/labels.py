"""`stopdoctor labels`: will fine-tuning on this dataset teach the model to stop?"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer

from stopdoctor.cli.app import ColorOpt, FailOnOpt, FormatOpt, JsonOpt, ModelArg, OutputOpt, RevisionOpt, app, chosen_format, handles_errors, parse_severity
from stopdoctor.cli.output import say, stderr_is_terminal, working, write_report

DataOpt = Annotated[Path, typer.Option(
    "--data", help="JSONL: one example a line, with messages (chat), prompt/completion, or text.", show_default=False)]
CollatorOpt = Annotated[str, typer.Option(
    "--collator", help="How labels are built: auto (TRL's defaults), assistant-only ({% generation %} markers), "
    "completion-only, full (padding masked by attention mask), pad-id (mask every pad-id token), axolotl "
    "(its chat_template strategy: turn content + eot_tokens).")]


class _Progress:
    """A progress bar on stderr, shown only once the work has run for a second (a plain line
    when stderr is not a terminal)."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.started = time.monotonic()
        self.bar: Any = None  # rich's Progress, imported when used
        self.task: Any = None
        self.said = False

    def __call__(self, done: int, total: int) -> None:
        if time.monotonic() - self.started < 1.0 or (done >= total and self.bar is None):
            return
        if not stderr_is_terminal():
            if not self.said:
                say(f"stopdoctor: {self.what} ({total} examples)…")
                self.said = True
            return
        if self.bar is None:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeRemainingColumn,
            )

            from stopdoctor.reporters.console import make_console

            self.bar = Progress(TextColumn(self.what), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                                console=make_console(stderr=True), transient=True)
            self.bar.start()
            self.task = self.bar.add_task(self.what, total=total)
        self.bar.update(self.task, completed=done)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


@app.command()
@handles_errors
def labels(
    model: ModelArg,
    data: DataOpt,
    collator: CollatorOpt = "auto",
    limit: Annotated[int | None, typer.Option("--limit", help="Read only the first N examples.", show_default=False)] = None,
    max_length: Annotated[int | None, typer.Option(
        "--max-length", help="The training sequence length: examples are truncated to it (keeping the start).",
        show_default=False)] = None,
    append_eos: Annotated[bool | None, typer.Option(
        "--append-eos/--no-append-eos", help="Append eos to texts and completions that lack it, as TRL's SFTTrainer "
        "does (default: on for the TRL collators auto, completion-only, full and assistant-only; off for pad-id, a "
        "plain transformers loop, and axolotl).", show_default=False)] = None,
    pad_token: Annotated[str | None, typer.Option(
        "--pad-token", help="Use this pad token instead of the tokenizer's (to try a fix).", show_default=False)] = None,
    template: Annotated[Path | None, typer.Option(
        "--template", help="Render chat rows with this template file instead of the model's (e.g. a training "
        "template with {% generation %} markers).", show_default=False)] = None,
    eot_token: Annotated[list[str] | None, typer.Option(
        "--eot-token", help="With --collator axolotl: its eot_tokens (repeatable; default: the eos token); "
        "\\n, \\t, \\r and \\\\ are read as escapes.",
        show_default=False)] = None,
    excess_length: Annotated[str, typer.Option(
        "--excess-length", help="With --collator axolotl: its excess_length_strategy for examples longer than "
        "--max-length: drop (Axolotl's default) or truncate.")] = "drop",
    packing: Annotated[str, typer.Option(
        "--packing", help="TRL's packing_strategy when SFTConfig(packing=True): bfd (cuts what overflows "
        "--max-length), bfd_split or wrapped (split long examples: nothing is cut); none: no packing.")] = "none",
    show: Annotated[int, typer.Option("--show", help="Print the first N examples token by token with their label state.")] = 0,
    revision: RevisionOpt = None,
    json: JsonOpt = False,
    fail_on: FailOnOpt = "error",
    color: ColorOpt = None,
    format: FormatOpt = None,
    output: OutputOpt = None,
) -> int:
    """Check that fine-tuning on a dataset trains the end-of-turn token: labels built as the SFT collators do."""
    threshold = parse_severity(fail_on)
    format = chosen_format(format, json, "labels")
    from stopdoctor.api import check_labels_of, labels_report, load
    from stopdoctor.core.errors import InputError
    from stopdoctor.api import COLLATORS, LabelSettings, stop_string, training_template

    if collator not in COLLATORS:
        raise InputError(f"--collator {collator!r} is not one of {', '.join(COLLATORS)}")
    chosen = None
    if template is not None:
        chosen = training_template(template)
    settings = LabelSettings(collator=collator, max_length=max_length, append_eos=append_eos,
                             pad_token=pad_token, template=chosen, tokenize_first=max(0, show),
                             eot_tokens=tuple(stop_string(t) for t in eot_token) if eot_token else None, excess_length=excess_length, packing=packing)
    with working(f"reading {model}…"):
        facts = load(model, revision)
    progress = _Progress("labelling")  # its own live display: not inside `working`'s spinner
    try:
        result = check_labels_of(facts, str(data), settings, limit, progress)
    finally:
        progress.close()
    report = labels_report(result, str(data), threshold)
    write_report(report, format, output, color, show=show)
    return report.exit_code()
