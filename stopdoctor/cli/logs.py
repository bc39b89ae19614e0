"""`stopdoctor logs FILE…`: how often logged responses stopped for the wrong reason."""

from __future__ import annotations

import math
import os
from typing import Annotated, Any

import typer

from stopdoctor.cli.app import ColorOpt, FailOnOpt, FormatOpt, JsonOpt, OutputOpt, RevisionOpt, app, chosen_format, handles_errors, parse_severity
from stopdoctor.cli.output import emit, stderr_is_terminal, write_document, write_report

# Below this much input the report takes about a second: no progress bar.
PROGRESS_BYTES = 64 * 1024 * 1024


def _share(value: float, flag: str) -> float:
    from stopdoctor.core.errors import InputError

    if not (math.isfinite(value) and 0.0 <= value <= 1.0):
        raise InputError(f"{flag} must be a share between 0 and 1 (e.g. 0.05 for 5%), not {value}")
    return value


class _Progress:
    """A progress bar on stderr (a terminal only) while DuckDB reads one large file after another."""

    def __init__(self, paths: list[str]) -> None:
        self.bar: Any = None  # rich's Progress, imported when used
        self.task: Any = None  # the file being read (one at a time, in order)
        self.finished = True
        sizes = [os.path.getsize(p) if os.path.isfile(p) else PROGRESS_BYTES for p in paths]
        if stderr_is_terminal() and sum(sizes) >= PROGRESS_BYTES:
            from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

            from stopdoctor.reporters.console import make_console

            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(), TimeElapsedColumn(),
                                console=make_console(stderr=True), transient=True)

    def __enter__(self) -> _Progress:
        if self.bar is not None:
            self.bar.start()
        return self

    def __exit__(self, *exc_info) -> None:
        if self.bar is not None:
            self.bar.stop()

    @property
    def callback(self):
        return None if self.bar is None else self.update

    def update(self, path: str, percent: float) -> None:
        from stopdoctor.api import LOGS_READ_DONE as RUNNING_DONE

        name = os.path.basename(path)
        if self.finished:
            self.task, self.finished = self.bar.add_task(f"reading {name}", total=100), False
        if percent >= 100:
            self.bar.update(self.task, total=100, completed=100, description=f"read {name}")
            self.finished = True
        elif percent >= RUNNING_DONE:  # read; the analysis is still running: a pulsing bar
            self.bar.update(self.task, total=None, description=f"analysing {name}")
        else:
            self.bar.update(self.task, completed=percent)


@app.command()
@handles_errors
def logs(
    files: Annotated[list[str], typer.Argument(
        metavar="FILE...", help="JSONL (optionally .gz) or Parquet response logs; local paths or URLs DuckDB can read (s3://, https://).",
        show_default=False)],
    model: Annotated[str | None, typer.Option(
        "--model", help="Model whose chat template says what its turn headers are (folder, hub id or .gguf); "
        "default: the common template families.", show_default=False)] = None,
    field: Annotated[list[str] | None, typer.Option(
        "--field", metavar="NAME=$.PATH", help="Where a field is in a custom log line, e.g. finish_reason=$.out.stop "
        "(text, finish_reason, stop_reason, model, max_tokens; repeatable).", show_default=False)] = None,
    max_length_share: Annotated[float, typer.Option(
        "--max-length-share", help="SD701 budget-truncation-rate fires above this share of finish_reason length.")] = 0.05,
    max_turn_share: Annotated[float, typer.Option(
        "--max-turn-share", help="SD702 hallucinated-turns-in-logs fires above this share of responses (0: any).")] = 0.0,
    examples: Annotated[int, typer.Option("--examples", help="Examples shown per problem.")] = 5,
    html: Annotated[str | None, typer.Option(
        "--html", metavar="FILE", help="Also write the report with its charts as one self-contained HTML page.",
        show_default=False)] = None,
    engine: Annotated[str, typer.Option(
        "--engine", help="duckdb (embedded) or spark (pyspark: a local[2] session, or the cluster under spark-submit; "
        "OpenAI chat/completions, Ollama, TGI and llama.cpp lines).")] = "duckdb",
    show_sql: Annotated[bool, typer.Option(
        "--show-sql", help="Print the query that normalises each file (DuckDB SQL, to run elsewhere) and exit.")] = False,
    revision: RevisionOpt = None,
    json: JsonOpt = False,
    fail_on: FailOnOpt = "error",
    color: ColorOpt = None,
    format: FormatOpt = None,
    output: OutputOpt = None,
) -> int:
    """How often logged responses stopped for the wrong reason: cut by the budget, or ran on into a fake next turn."""
    threshold = parse_severity(fail_on)
    format = chosen_format(format, json, "logs")
    from stopdoctor.core.errors import InputError
    from stopdoctor.api import analyze_log_files, logs_report, logs_settings, logs_sql

    if engine not in ("duckdb", "spark"):
        raise InputError(f"--engine must be duckdb or spark, not {engine!r}")
    if examples < 0 or examples > 1000:
        raise InputError("--examples must be between 0 and 1000")
    settings = logs_settings(field,
                            max_length_share=_share(max_length_share, "--max-length-share"),
                            max_turn_share=_share(max_turn_share, "--max-turn-share"), examples=examples)
    if show_sql:
        emit(logs_sql(files, model, revision, settings))
        return 0

    with _Progress(files) as progress:
        result = analyze_log_files(files, model, revision, settings, progress.callback, engine)
    report = logs_report(result, files, threshold)
    if html:
        from pathlib import Path

        from stopdoctor.reporters.logs_charts import render_logs_html

        write_document(render_logs_html(result), Path(html), "the HTML report")
    write_report(report, format, output, color)
    return report.exit_code()
