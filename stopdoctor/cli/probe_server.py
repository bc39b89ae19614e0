"""`stopdoctor probe-server URL`: a black-box stop battery against a live server.

Exit codes: 0 no probe failed, 1 a probe failed, 2 bad input or an unreachable server, 3 internal error.
"""

from __future__ import annotations

from typing import Annotated

import typer

from stopdoctor.cli.app import ColorOpt, JsonOpt, OutputOpt, app, chosen_format, handles_errors
from stopdoctor.cli.output import say, working, write_report

@app.command("probe-server")
@handles_errors
def probe_server(
    url: Annotated[str, typer.Argument(metavar="URL", show_default=False,
                                       help="The server's base URL, e.g. http://127.0.0.1:8080 (a trailing /v1 is fine).")],
    model: Annotated[str | None, typer.Option("--model", metavar="NAME", show_default=False,
                                              help="The served model to ask (default: the first of /v1/models).")] = None,
    api_key_env: Annotated[str | None, typer.Option("--api-key-env", metavar="VAR", show_default=False,
                                                    help="Environment variable holding the API key (sent as a Bearer token).")] = None,
    timeout: Annotated[float | None, typer.Option("--timeout", metavar="SECONDS", show_default=False,
                                                  help="Longest wait for one whole answer, connect to last byte (default 20).")] = None,
    json: JsonOpt = False,
    format: Annotated[str | None, typer.Option("--format", metavar="FORMAT", help="human or json (default: human; --json is --format json).",
                                               show_default=False)] = None,
    output: OutputOpt = None,
    color: ColorOpt = None,
) -> int:
    """Probe a live server: does it end turns, honour stop strings, flush held text, report finish reasons truthfully?"""
    from stopdoctor.core.errors import InputError

    import math

    chosen = chosen_format(format, json, "probe-server")
    if timeout is not None and not (math.isfinite(timeout) and 0 < timeout <= 3600):
        raise InputError(f"--timeout {timeout}: give seconds between 0 and 3600")
    from stopdoctor.api import probe_server as run, probe_server_report

    with working(f"probing {url}…"):
        result = run(url, model, api_key_env, request_s=timeout)
    report = probe_server_report(result)
    write_report(report, chosen, output, color)
    failed = [p.name for p in result.failed]
    say(f"stopdoctor: {len(result.probes)} probes, {result.requests} requests in {result.seconds:.1f} s"
        + (f"; failed: {', '.join(failed)}" if failed else ""))
    return report.exit_code()
