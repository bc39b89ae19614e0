"""`stopdoctor inspect` and `stopdoctor rules`."""

from __future__ import annotations

from typing import Annotated

import typer

from stopdoctor.cli.app import ColorOpt, FailOnOpt, FormatOpt, JsonOpt, ModelArg, OutputOpt, RevisionOpt, app, chosen_format, handles_errors, parse_severity
from stopdoctor.cli.output import color_for_stdout, emit, width_for_stdout, working, write_report


@app.command()
@handles_errors
def inspect(model: ModelArg, revision: RevisionOpt = None, json: JsonOpt = False, fail_on: FailOnOpt = "error",
            color: ColorOpt = None, format: FormatOpt = None, output: OutputOpt = None,
            weights: Annotated[bool, typer.Option("--weights", help="Also read the end-of-turn, eos, bos, pad and header rows of the embedding and output matrices (no torch, seconds): is the end-of-turn token trained?")] = False,
            against: Annotated[str | None, typer.Option("--against", metavar="ORIGINAL", help="The original model (folder, .gguf, hub id) this one was converted, quantized or re-uploaded from: flag eos ids or sampling keys it dropped.")] = None) -> int:
    """Find why a model would not stop: end-of-turn vs stop ids, template mismatches, base vs instruct."""
    threshold = parse_severity(fail_on)
    format = chosen_format(format, json)
    from stopdoctor.api import inspect_model, inspect_report

    with working(f"inspecting {model}…"):
        report = inspect_report(inspect_model(model, revision, weights=weights, against=against), threshold)
    write_report(report, format, output, color)
    return report.exit_code()


@app.command()
@handles_errors
def rules(code: Annotated[str | None, typer.Argument(metavar="[CODE]", help="A check code (SD101) or name to explain.")] = None,
          json: JsonOpt = False, color: ColorOpt = None) -> int:
    """List the checks, or explain one."""
    from stopdoctor.api import find_rule, rules
    from stopdoctor.core.errors import InputError

    if code is not None:
        found = find_rule(code)
        if found is None:
            raise InputError(f"no check {code!r}", hint="`stopdoctor rules` lists them")
        checks = [found]
    else:
        checks = rules()
    if json:
        import json as json_module

        from stopdoctor.reporters.document import header

        emit(json_module.dumps({**header("stopdoctor.rules/1"), "rules": [
            {"code": c.code, "name": c.name, "severity": c.severity.label, "summary": c.summary, "doc": c.sections}
            for c in checks
        ]}, indent=2) + "\n")
    else:
        from stopdoctor.reporters.human import render_rules_human

        emit(render_rules_human(checks, color_for_stdout(color), width_for_stdout(), detail=code is not None))
    return 0
