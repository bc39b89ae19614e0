"""`stopdoctor inspect` and `stopdoctor rules`."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from stopdoctor.cli.app import (ColorOpt, FailOnOpt, FormatOpt, JsonOpt, ModelArg, OutputOpt, PlainFormatOpt, RevisionOpt, app,
                                chosen_format, handles_errors, parse_severity)
from stopdoctor.cli.output import working, write_report


@app.command()
@handles_errors
def inspect(model: ModelArg, revision: RevisionOpt = None, json: JsonOpt = False, fail_on: FailOnOpt = "error",
            color: ColorOpt = None, format: FormatOpt = None, output: OutputOpt = None,
            weights: Annotated[bool, typer.Option("--weights", help="Also read the end-of-turn, eos, bos, pad and header rows of the embedding and output matrices (no torch, seconds): is the end-of-turn token trained?")] = False,
            against: Annotated[str | None, typer.Option("--against", metavar="ORIGINAL", help="The original model (folder, .gguf, hub id) this one was converted, quantized or re-uploaded from: flag eos ids or sampling keys it dropped.")] = None,
            html: Annotated[str | None, typer.Option("--html", metavar="FILE", help="Also write one self-contained HTML page: the findings with fixes, the stop ids per runtime side by side, the rendered prompt with its special tokens highlighted.")] = None) -> int:
    """Find why a model would not stop: end-of-turn vs stop ids, template mismatches, base vs instruct."""
    threshold = parse_severity(fail_on)
    format = chosen_format(format, json, "inspect")
    from stopdoctor.api import inspect_model, inspect_report

    with working(f"inspecting {model}…"):
        result = inspect_model(model, revision, weights=weights, against=against)
        report = inspect_report(result, threshold)
    if html:
        _write_inspect_html(result, model, revision, html)
    write_report(report, format, output, color)
    return report.exit_code()


def _write_inspect_html(result, model: str, revision: str | None, html: str) -> None:
    from pathlib import Path

    from stopdoctor.api import render_prompts
    from stopdoctor.cli.output import write_document
    from stopdoctor.core.errors import InputError
    from stopdoctor.reporters.inspect_html import render_inspect_html

    prompts, error = list[Any](), None
    try:  # a template that cannot render the sample is a finding of inspect's, not a reason to write no page
        prompts = render_prompts(model, revision=revision).prompts
    except InputError as e:
        error = str(e)
    write_document(render_inspect_html(result, prompts, error), Path(html), "the HTML report")


@app.command()
@handles_errors
def rules(code: Annotated[str | None, typer.Argument(metavar="[CODE]", help="A rule code (SD101) or name to explain.")] = None,
          json: JsonOpt = False, color: ColorOpt = None, format: PlainFormatOpt = None, output: OutputOpt = None) -> int:
    """List the rules, or explain one."""
    from stopdoctor.api import find_rule, rules, rules_report
    from stopdoctor.core.errors import InputError

    format = chosen_format(format, json, "rules")
    if code is not None:
        found = find_rule(code)
        if found is None:
            raise InputError(f"no rule {code!r}", hint="`stopdoctor rules` lists them")
        report = rules_report([found], detail=True)
    else:
        report = rules_report(rules())
    write_report(report, format, output, color)
    return report.exit_code()
