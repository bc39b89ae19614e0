"""`stopdoctor generate`: run a model (locally with transformers, or through an OpenAI-compatible
server), stop as the chosen runtime would, and say why it stopped or why it did not.

Exit codes (the one rule, `Report.exit_code`): 0 it stopped in time (eos, stop id, stop string) or
ran to the budget with no sign of a runaway; 1 a runaway (`stopdoctor.rules.verdicts`), or with
--fragment-test a model that behaves as another kind than its files say (SD501); 2 bad input or
torch missing. torch is imported only by stopdoctor.actions.generate.local, inside the local engine.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import math

import typer

from stopdoctor.cli.app import (ColorOpt, JsonOpt, MessageOpt, MessagePairCommand, ModelArg, OutputOpt, PlainFormatOpt,
                                RevisionOpt, app, chosen_format, handles_errors, message_pairs)
from stopdoctor.cli.output import say, working, write_report

if TYPE_CHECKING:
    from stopdoctor.api import Engine  # a type only: the local or server engine


def check_server_url(server: str) -> None:
    """--server must be an http(s) URL that parses (`http://[::1` does not) with a host."""
    from urllib.parse import urlsplit

    from stopdoctor.core.errors import InputError

    hint = "e.g. --server http://127.0.0.1:8000"
    if not server.startswith(("http://", "https://")):
        raise InputError(f"--server {server!r}: not an http(s) URL", hint=hint)
    if any(ord(char) <= 0x20 or ord(char) == 0x7F for char in server):
        raise InputError(f"--server {server!r}: a URL holds no spaces or control characters", hint=hint)
    try:
        parts = urlsplit(server)
        parts.port  # noqa: B018 - raises on a port that is not a number or out of range
    except ValueError as error:
        raise InputError(f"--server {server!r}: not a valid URL ({error})", hint=hint) from None
    if not parts.hostname:
        raise InputError(f"--server {server!r}: names no host", hint=hint)


@app.command(cls=MessagePairCommand)
@handles_errors
def generate(
    model: ModelArg,
    message: MessageOpt = None,
    messages: Annotated[Path | None, typer.Option("--messages", help="A JSON file with a list of {role, content} messages.")] = None,
    prompt: Annotated[str | None, typer.Option("--prompt", help="One user message, or with --raw the exact prompt text.")] = None,
    raw: Annotated[bool, typer.Option("--raw", help="No chat template: send --prompt as a raw completion endpoint would.")] = False,
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens", help="Token budget.")] = 64,
    stop: Annotated[list[str] | None, typer.Option("--stop", help="A stop string, matched in the decoded text (repeatable); \\n, \\t, \\r and \\\\ are read as escapes.")] = None,
    stop_id: Annotated[list[int] | None, typer.Option("--stop-id", help="A stop token id (repeatable); replaces the model's set unless --stops is given.")] = None,
    stops: Annotated[str | None, typer.Option("--stops", help="Stop id set: model (the model's own runtime: transformers for folders, llama.cpp for GGUF), runtime:NAME (transformers, vllm, tgi, llama.cpp, mlx-lm, mlx-vlm, mlx-vlm-legacy, sglang, llama-cpp-python), or none.")] = None,
    temperature: Annotated[float, typer.Option("--temperature", help="0 is greedy (the default).")] = 0.0,
    top_p: Annotated[float, typer.Option("--top-p", help="Nucleus sampling mass (with --temperature > 0).")] = 1.0,
    seed: Annotated[int | None, typer.Option("--seed", help="Random seed for sampling.")] = None,
    device: Annotated[str, typer.Option("--device", help="auto (GPU when present), cpu or cuda.")] = "auto",
    allow_pickle: Annotated[bool, typer.Option("--allow-pickle", help="Load pickled .bin weights (they can run code) when there is no .safetensors.")] = False,
    server: Annotated[str | None, typer.Option("--server", help="An OpenAI-compatible server URL (vLLM, TGI, llama.cpp, Ollama, transformers serve).")] = None,
    route: Annotated[str | None, typer.Option("--route", help="Server route: chat or completions (default: chat for templated prompts).")] = None,
    server_model: Annotated[str | None, typer.Option("--server-model", help="Model name to send to the server (default: the one it serves).")] = None,
    server_timeout: Annotated[float, typer.Option("--server-timeout", metavar="SECONDS", help="With --server: the most each request may take, connect to last byte (a server that never answers or drips its answer is cut off).")] = 300.0,
    stream: Annotated[bool, typer.Option("--stream", help="With --server: also stream the request and check the reassembled stream against the answer (held-back stop strings, flush at the end, split UTF-8, special-token tails).")] = False,
    trace: Annotated[bool, typer.Option("--trace", help="Print every step: id, token text, special or not.")] = False,
    fragment_test: Annotated[bool, typer.Option("--fragment-test", help="Quick base-vs-instruct test by behaviour.")] = False,
    html: Annotated[str | None, typer.Option("--html", metavar="FILE", help="Also write one self-contained HTML page: the token stream coloured by whether each token could end the turn, and P(end-of-turn) per step with the missed stop marked.", show_default=False)] = None,
    thinking: Annotated[str | None, typer.Option("--thinking", metavar="on|off|both", help="A reasoning model: render the prompt with thinking on, off, or both (two runs); default: the template's default.")] = None,
    revision: RevisionOpt = None,
    json: JsonOpt = False,
    color: ColorOpt = None,
    format: PlainFormatOpt = None,
    output: OutputOpt = None,
) -> int:
    """Generate, stop as a runtime would, and diagnose: why it stopped, or which token should have stopped it."""
    from stopdoctor import api
    from stopdoctor.core.errors import InputError

    format = chosen_format(format, json, "generate")
    api.check_budget(max_new_tokens, fragment_test)
    how = api.sampling(temperature, top_p, seed)
    if server is not None:
        check_server_url(server)
    if fragment_test and (message or messages or prompt or stop or stop_id or stops or temperature or thinking):
        raise InputError("--fragment-test runs its own probes, greedy, with the model's stop ids",
                         hint="drop -m/--messages/--prompt/--stop/--stop-id/--stops/--temperature/--thinking, or drop --fragment-test")
    if not (math.isfinite(server_timeout) and 0 < server_timeout <= 86400):
        raise InputError("--server-timeout must be a number of seconds in (0, 86400]")
    if stream and server is None:
        raise InputError("--stream needs --server URL", hint="streaming is checked on a server's answer")
    if html and fragment_test:
        raise InputError("--html draws one generation; drop --fragment-test")
    if stream and fragment_test:
        raise InputError("--stream checks one request; drop --fragment-test")
    if route not in (None, "chat", "completions"):
        raise InputError(f"--route {route!r}: use chat or completions")
    given = sum(x is not None and x != [] for x in (message, messages, prompt))
    if given > 1:
        raise InputError("give the prompt one way: -m, --messages or --prompt")
    if not fragment_test and given == 0:
        raise InputError("nothing to generate from", hint='give -m user "text", --messages FILE, or --prompt TEXT (--raw)')
    if raw and prompt is None and not fragment_test:
        raise InputError("--raw needs --prompt TEXT")
    if thinking is not None and raw:
        raise InputError("--thinking switches the chat template; --raw sends no template")

    if server is None:
        api.check_device(device)
    chat = [{"role": r, "content": t} for r, t in message_pairs(message)] if message else None
    plan = api.plan_generation(model, revision, messages=chat, messages_file=messages, prompt=prompt, raw=raw,
                               thinking=thinking, stops=stops, stop_ids=stop_id or [], stop_strings=stop or [],
                               max_new_tokens=max_new_tokens, local=server is None, fragment=fragment_test)
    engine: Engine
    if server is not None:
        engine = api.server_engine(plan, server, model, route=route, model_name=server_model, stream=stream,
                                   timeout=server_timeout)
    else:
        with working(f"loading {model} with transformers…") as status:
            engine = api.local_engine(plan, device=device, allow_pickle=allow_pickle, progress=status.update)

    if fragment_test:
        with working("running the fragment test…"):
            verdict = api.fragment_test(plan, engine, max_new_tokens)
        report = api.fragment_report(model, plan.context.analysis, verdict)
        write_report(report, format, output, color)
        return report.exit_code()

    from stopdoctor.fix import generate_fix

    runs = api.run_generation(plan, engine, max_new_tokens, how, server is not None,
                              stage=working, fixer=generate_fix)
    for mode, error in runs.failed:
        say(f"stopdoctor: error: the run with thinking {mode} could not run: {error.message}")
        if error.hint:
            say(f"hint: {error.hint}")
    if html:
        from stopdoctor.cli.output import write_document
        from stopdoctor.reporters.generation_html import render_generation_html

        write_document(render_generation_html(_html_runs(model, runs)), Path(html), "the HTML report")
    report = api.generation_report(model, runs)
    write_report(report, format, output, color, trace=trace)
    return report.exit_code()


def _html_runs(model: str, runs) -> list:
    """(result, fix, evidence, exit code) per run, as the HTML page draws them; each run's code by
    the one rule (its own Report)."""
    from dataclasses import replace

    from stopdoctor import api

    return [(run.result, run.fix, run.evidence, api.generation_report(model, replace(runs, runs=(run,), failed=())).exit_code())
            for run in runs.runs]
