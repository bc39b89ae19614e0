"""`stopdoctor stop-odds`: how likely the model is to end its turn where the template closes it.

Exit codes: 0 measured (the weights end turns, or only sometimes); 1 the weights never learned to
stop (median P(end-of-turn) < 0.01); 2 bad input or torch missing. torch is imported only by the
generate engine, inside the command.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from stopdoctor.cli.app import ColorOpt, JsonOpt, ModelArg, OutputOpt, PlainFormatOpt, RevisionOpt, app, chosen_format, handles_errors
from stopdoctor.cli.output import working, write_report


@app.command("stop-odds")
@handles_errors
def stop_odds(
    model: ModelArg,
    data: Annotated[Path | None, typer.Option("--data", help="JSONL rows to measure (messages, prompt/completion, or text); default: built-in conversations.")] = None,
    limit: Annotated[int | None, typer.Option("--limit", help="Measure at most this many rows.")] = None,
    batch_size: Annotated[int | None, typer.Option("--batch-size", help="Examples per forward pass (default 8 on CPU, 32 on a GPU).")] = None,
    device: Annotated[str, typer.Option("--device", help="auto (GPU when present), cpu or cuda.")] = "auto",
    allow_pickle: Annotated[bool, typer.Option("--allow-pickle", help="Load pickled .bin weights (they can run code) when there is no .safetensors.")] = False,
    html: Annotated[str | None, typer.Option("--html", metavar="FILE", help="Also write one self-contained HTML page: how P(end-of-turn) spreads over the answers, and every answer's numbers.", show_default=False)] = None,
    revision: RevisionOpt = None,
    json: JsonOpt = False,
    color: ColorOpt = None,
    format: PlainFormatOpt = None,
    output: OutputOpt = None,
) -> int:
    """Teacher-force conversations and report P(end-of-turn) where the turn should end: configuration bug, or weights that never learned to stop?"""
    from stopdoctor.api import stop_odds as run_stop_odds
    from stopdoctor.api import stop_odds_report
    from stopdoctor.core.errors import InputError

    format = chosen_format(format, json, "stop-odds")

    if data is not None and not data.is_file():
        raise InputError(f"{data}: no such data file", hint="give a JSONL file with one example a line")
    with working(f"measuring stop odds of {model}…") as status:
        odds = run_stop_odds(model, str(data) if data is not None else None, limit, device, revision, batch_size,
                             allow_pickle, progress=status.update)
    if html:
        from stopdoctor.cli.output import write_document
        from stopdoctor.reporters.generation_html import render_stop_odds_html

        write_document(render_stop_odds_html(odds), Path(html), "the HTML report")
    report = stop_odds_report(odds)
    write_report(report, format, output, color)
    return report.exit_code()
