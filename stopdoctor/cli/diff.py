"""`stopdoctor diff A B`: what changed between two models, and whether it changes where
generation stops.

Exit codes: 0 no stop-relevant difference; 1 a stop-relevant difference (end-of-turn, stop ids
of a runtime, a declared eos/eot/eom, how the end-of-turn tokenizes); 2 bad input.
"""

from __future__ import annotations

from typing import Annotated

import typer

from stopdoctor.cli.app import ColorOpt, JsonOpt, OutputOpt, PlainFormatOpt, app, chosen_format, handles_errors
from stopdoctor.cli.output import working, write_report


@app.command()
@handles_errors
def diff(
    model_a: Annotated[str, typer.Argument(metavar="A", help="A model folder, .gguf file or hub id.")],
    model_b: Annotated[str, typer.Argument(metavar="B", help="The model to compare it with.")],
    revision_a: Annotated[str | None, typer.Option("--revision-a", help="Hub revision of A.")] = None,
    revision_b: Annotated[str | None, typer.Option("--revision-b", help="Hub revision of B.")] = None,
    json: JsonOpt = False,
    format: PlainFormatOpt = None,
    output: OutputOpt = None,
    color: ColorOpt = None,
) -> int:
    """What changed between two models: template, end-of-turn, stop ids per runtime, special ids, sampling, tokenization."""
    from stopdoctor.api import diff_models, diff_report

    format = chosen_format(format, json, "diff")
    with working(f"comparing {model_a} and {model_b}…"):
        report = diff_report(diff_models(model_a, model_b, revision_a, revision_b))
    write_report(report, format, output, color)
    return report.exit_code()
