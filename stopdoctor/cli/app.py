"""The typer application, the options every command shares (defined once as `Annotated`
aliases), and the wrapper that turns errors into one line and an exit code.

Exit codes, one rule for every command (`Report.exit_code`): 0 clean, 1 findings at/above
--fail-on, 2 could not run (bad input), 3 internal error.
Imports: core; cli.output.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, TypeVar

import typer
from typer.core import TyperCommand

from stopdoctor import __version__
from stopdoctor.cli.output import say
from stopdoctor.core.errors import EXIT_CANNOT_RUN, EXIT_INTERNAL, StopdoctorError, shorten


class Command(TyperCommand):
    """Usage lines as people write them: `stopdoctor inspect [OPTIONS] MODEL` (typer writes a
    required argument as `{model}`, which reads like a template placeholder or a set)."""

    def collect_usage_pieces(self, ctx) -> list[str]:
        return [piece[1:-1] if piece.startswith("{") and piece.endswith("}") else piece
                for piece in super().collect_usage_pieces(ctx)]


class _Typer(typer.Typer):
    def command(self, *args, cls=None, **kwargs):
        return super().command(*args, cls=cls or Command, **kwargs)


app = _Typer(
    name="stopdoctor",
    help="Diagnose LLM generation that never stops (runaway) or stops too early (truncated).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _print_version(value: bool) -> None:
    if value:
        from stopdoctor.cli.output import emit

        emit(f"stopdoctor {__version__}\n")
        raise typer.Exit(0)


@app.callback()
def _main(version: Annotated[bool, typer.Option("--version", "-V", callback=_print_version, is_eager=True,
                                                help="Print the version and exit.")] = False) -> None:
    """Diagnose LLM generation that never stops (runaway) or stops too early (truncated)."""


ModelArg = Annotated[str, typer.Argument(help="Model folder, hub id (org/name) or .gguf file.", metavar="MODEL",
                                         show_default=False)]
RevisionOpt = Annotated[str | None, typer.Option("--revision", help="Hub revision (branch, tag or commit).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]
ColorOpt = Annotated[bool | None, typer.Option("--color/--no-color", help="Force colour on or off (default: auto; NO_COLOR is honoured).")]
FailOnOpt = Annotated[str, typer.Option("--fail-on", help="Lowest severity that makes the exit code 1: error, warning or info.")]
FormatOpt = Annotated[str | None, typer.Option(
    "--format", help="human, json, sarif, junit or github (default: human; --json is --format json).", show_default=False)]
# The commands whose findings are verdicts, not located rule findings, write people's text and JSON.
PlainFormatOpt = Annotated[str | None, typer.Option(
    "--format", help="human or json (default: human; --json is --format json).", show_default=False)]
OutputOpt = Annotated[Path | None, typer.Option("--output", "-o", help="Write the document to this file instead of stdout.")]

MessageOpt = Annotated[list[str] | None, typer.Option(
    "-m", "--message", metavar="ROLE TEXT", help="A message as ROLE TEXT, e.g. -m user \"Hi\" (repeatable).",
    show_default=False)]

F = TypeVar("F", bound=Callable[..., int | None])

# typer cannot declare a repeatable option of two values, so `-m ROLE TEXT` is joined into one
# value before parsing (NUL cannot occur in a command-line argument) and split in the command.
_PAIR_SEPARATOR = "\x00"
_MESSAGE_FLAGS = ("-m", "--message")


class MessagePairCommand(Command):
    def parse_args(self, ctx, args: list[str]) -> list[str]:
        joined: list[str] = []
        i = 0
        while i < len(args):
            if args[i] == "--":
                joined += args[i:]
                break
            if args[i] in _MESSAGE_FLAGS and i + 2 < len(args):
                joined += [args[i], args[i + 1] + _PAIR_SEPARATOR + args[i + 2]]
                i += 3
                continue
            joined.append(args[i])
            i += 1
        return super().parse_args(ctx, joined)


def message_pairs(values: list[str]) -> list[tuple[str, str]]:
    from stopdoctor.core.errors import InputError

    pairs = []
    for value in values:
        role, sep, text = value.partition(_PAIR_SEPARATOR)
        if not sep:
            raise InputError(f"-m {role}: needs a role and a text", hint='e.g. -m user "What is the capital of France?"')
        pairs.append((role, text))
    return pairs



def is_native_panic(error: BaseException) -> bool:
    """pyo3's PanicException: a Rust panic inside a native library (tokenizers), raised as a
    BaseException so that a bare `except Exception` misses it."""
    kind = type(error)
    return kind.__name__ == "PanicException" and kind.__module__ in ("pyo3_runtime", "builtins")


def handles_errors(command: F) -> F:
    """Known errors become one line plus a hint and exit 2, as does a panic of a native library on
    the input and a stdout that is closed or cannot encode the report; anything else (any
    BaseException but an exit or an interrupt) exits 3 with one line (the traceback only when
    STOPDOCTOR_DEBUG is set)."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        from stopdoctor.template.limits import render_deadline

        try:
            with render_deadline():  # one time limit for all the template renders of a command
                code = command(*args, **kwargs)
        except StopdoctorError as error:
            say(f"stopdoctor: error: {error.message}")
            if error.hint:
                say(f"hint: {error.hint}")
            raise typer.Exit(error.exit_code) from None
        except (typer.Exit, typer.Abort, KeyboardInterrupt, SystemExit, GeneratorExit):
            raise
        except BaseException as error:  # the one place that turns bugs into exit 3
            if os.environ.get("STOPDOCTOR_DEBUG"):
                raise
            if is_native_panic(error):
                # A Rust library (tokenizers) that panics on a file is refusing that file: bad input.
                say(f"stopdoctor: error: a native library failed on this input: {shorten(str(error) or type(error).__name__)}")
                say("hint: the model's tokenizer.json (a pre-tokenizer regex, a padding or truncation setting) "
                    "is one the tokenizers library cannot run; transformers fails on it too")
                raise typer.Exit(EXIT_CANNOT_RUN) from None
            say(f"stopdoctor: internal error: {type(error).__name__}: {shorten(str(error))}")
            say("hint: rerun with STOPDOCTOR_DEBUG=1 for the traceback, and report it")
            raise typer.Exit(EXIT_INTERNAL) from None
        raise typer.Exit(code or 0)

    return wrapper  # type: ignore[return-value]


def chosen_format(format: str | None, json: bool, command: str | None = None) -> str:
    """--format, with --json as its short form; asking for two formats, or one `command` does not
    write, is an error."""
    from stopdoctor.core.errors import InputError
    from stopdoctor.reporters.formats import FORMATS, formats_of, written

    if json and format not in (None, "json"):
        raise InputError(f"--json and --format {format} ask for two formats", hint="pass one of them")
    chosen = "json" if json else (format or "human")
    if command is None and chosen not in FORMATS:
        raise InputError(f"--format {chosen!r} is not one of {', '.join(FORMATS)}")
    if command is not None and chosen not in formats_of(command):
        raise InputError(f"--format {chosen}: {command} writes {written(formats_of(command))}")
    return chosen


def parse_severity(text: str):
    from stopdoctor.core.findings import Severity

    try:
        return Severity.parse(text)
    except ValueError as error:
        raise StopdoctorError(str(error)) from None
