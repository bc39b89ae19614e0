"""`stopdoctor probe-stop`: how stop strings tokenize in real contexts, and whether they fire in answers."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from stopdoctor.cli.app import ColorOpt, JsonOpt, OutputOpt, PlainFormatOpt, RevisionOpt, app, chosen_format, handles_errors
from stopdoctor.cli.output import say, working, write_report


@app.command("probe-stop", options_metavar="--model MODEL [OPTIONS]")
@handles_errors
def probe_stop(
    stops: Annotated[list[str] | None, typer.Argument(metavar="STOP...",
        help="Stop strings to probe; \\n, \\t, \\r and \\\\ are read as escapes.", show_default=False)] = None,
    # Required, but checked in the body: a missing --model gets one line with a hint, not click's box.
    model: Annotated[str | None, typer.Option("--model", metavar="MODEL", show_default=False,
                                              help="Model whose tokenizer to use (folder, hub id or .gguf).  [required]")] = None,
    corpus: Annotated[list[Path] | None, typer.Option(
        "--corpus", help="Plain-text file of answers to search for false positives; the whole file is one "
        "sample (repeatable).", show_default=False)] = None,
    from_template: Annotated[bool, typer.Option(
        "--from-template", help="Also probe the stop strings the model's template suggests (its user-turn header).")] = False,
    fail_on_miss: Annotated[bool, typer.Option(
        "--fail-on-miss", help="Exit 1 when a token-id match would miss a stop or a stop fires in the sample answers.")] = False,
    revision: RevisionOpt = None,
    json: JsonOpt = False,
    color: ColorOpt = None,
    format: PlainFormatOpt = None,
    output: OutputOpt = None,
) -> int:
    """Show how each stop string tokenizes after typical text, where an id match misses, and false positives."""
    from stopdoctor.core.errors import InputError

    format = chosen_format(format, json, "probe-stop")
    if model is None:
        raise InputError("probe-stop needs --model: stop strings tokenize differently in every vocabulary",
                         hint='e.g. stopdoctor probe-stop "\\nUser:" --model HuggingFaceTB/SmolLM2-135M-Instruct')
    from stopdoctor.api import probe_stop_report, probe_stops, stop_string

    texts = [stop_string(s) for s in stops or []]
    if not texts and not from_template:
        raise InputError("no stop strings given", hint="give STOP arguments, or --from-template")
    with working(f"reading {model} and probing…"):
        report = probe_stops(model, texts, from_template=from_template, corpus=corpus, revision=revision)
    for note in report.notes:
        say(f"stopdoctor: {note}")
    judged = probe_stop_report(model, report, fail_on_miss)
    write_report(judged, format, output, color)
    return judged.exit_code()
