"""The command line: typer only. Each command builds settings, calls `stopdoctor.api`, renders,
and returns an exit code. Shared options are defined once here as `Annotated` aliases.

Exit codes: 0 clean, 1 findings at/above --fail-on, 2 could not run (bad input), 3 internal error.
Heavy modules are imported inside commands so that `stopdoctor --help` stays fast.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import Annotated, TypeVar

import typer
from typer.core import TyperCommand

from stopdoctor import __version__
from stopdoctor.core.errors import EXIT_CANNOT_RUN, EXIT_INTERNAL, StopdoctorError, shorten


class Command(TyperCommand):
    """Usage lines as people write them: `stopdoctor inspect [OPTIONS] MODEL` (typer writes a
    required argument as `{model}`, which reads like a template placeholder or a set)."""

    def collect_usage_pieces(self, ctx) -> list[str]:  # type: ignore[override]
        return [piece[1:-1] if piece.startswith("{") and piece.endswith("}") else piece
                for piece in super().collect_usage_pieces(ctx)]


class _Typer(typer.Typer):
    def command(self, *args, cls=None, **kwargs):  # type: ignore[override]
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
        sys.stdout.write(f"stopdoctor {__version__}\n")
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

MessageOpt = Annotated[list[str] | None, typer.Option(
    "-m", "--message", metavar="ROLE TEXT", help="A message as ROLE TEXT, e.g. -m user \"Hi\" (repeatable).",
    show_default=False)]

F = TypeVar("F", bound=Callable[..., int | None])

# typer cannot declare a repeatable option of two values, so `-m ROLE TEXT` is joined into one
# value before parsing (NUL cannot occur in a command-line argument) and split in the command.
_PAIR_SEPARATOR = "\x00"
_MESSAGE_FLAGS = ("-m", "--message")


class MessagePairCommand(Command):
    def parse_args(self, ctx, args: list[str]) -> list[str]:  # type: ignore[override]
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



def say(message: str) -> None:
    """Talk (progress, hints) goes to stderr; stdout carries data. One write per line, so lines
    from the progress timer and the command never interleave. Control characters (a template's
    escape sequences in an error) are shown as escapes, and a line is never longer than a screenful."""
    from stopdoctor.core.errors import shorten
    from stopdoctor.reporters.console import printable

    sys.stderr.write(printable(shorten(message, 4000)) + "\n")
    sys.stderr.flush()


class working:
    """Progress on stderr for anything that may take more than a second: a spinner on a
    terminal; elsewhere one plain line, printed only if the work is still running after 1 s,
    then a line every `HEARTBEAT` seconds while it runs on (a GGUF's first conversion takes
    minutes on a busy CPU: silence would look like a hang)."""

    FIRST = 1.0
    HEARTBEAT = 30.0

    def __init__(self, message: str) -> None:
        self.message = message
        self._status = None
        self._thread = None
        self._done = None

    def __enter__(self) -> working:
        if sys.stderr.isatty():
            from stopdoctor.reporters.console import make_console

            self._status = make_console(stderr=True).status(self.message)
            self._status.start()
        else:
            import threading

            self._done = threading.Event()
            self._thread = threading.Thread(target=self._plain_lines, daemon=True)
            self._thread.start()
        return self

    def _plain_lines(self) -> None:
        import time

        started = time.monotonic()
        if self._done.wait(self.FIRST):
            return
        say(f"stopdoctor: {self.message}")
        while not self._done.wait(self.HEARTBEAT):
            say(f"stopdoctor: still {self.message.rstrip('…')} ({time.monotonic() - started:.0f} s)")

    def update(self, message: str) -> None:
        """A new stage of long work: the spinner's text on a terminal, else one line each."""
        self.message = message
        if self._status is not None:
            self._status.update(message)
        else:
            say(f"stopdoctor: {message}")

    def __exit__(self, *exc_info) -> None:
        if self._status is not None:
            self._status.stop()
        if self._thread is not None:
            self._done.set()
            self._thread.join()  # a line being written finishes before an error line follows


def handles_errors(command: F) -> F:
    """Known errors become one line plus a hint and exit 2; anything else exits 3 with one line
    (the traceback only when STOPDOCTOR_DEBUG is set)."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        from stopdoctor.template.sandbox import render_deadline

        try:
            with render_deadline():  # one time limit for all the template renders of a command
                code = command(*args, **kwargs)
        except StopdoctorError as error:
            say(f"stopdoctor: error: {error.message}")
            if error.hint:
                say(f"hint: {error.hint}")
            raise typer.Exit(error.exit_code) from None
        except (typer.Exit, typer.Abort, KeyboardInterrupt):
            raise
        except Exception as error:  # noqa: BLE001 - the one place that turns bugs into exit 3
            if os.environ.get("STOPDOCTOR_DEBUG"):
                raise
            say(f"stopdoctor: internal error: {type(error).__name__}: {shorten(str(error))}")
            say("hint: rerun with STOPDOCTOR_DEBUG=1 for the traceback, and report it")
            raise typer.Exit(EXIT_INTERNAL) from None
        raise typer.Exit(code or 0)

    return wrapper  # type: ignore[return-value]


def parse_severity(text: str):
    from stopdoctor.core.findings import Severity

    try:
        return Severity.parse(text)
    except ValueError as error:
        raise StopdoctorError(str(error)) from None


def emit(text: str) -> None:
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except OSError as error:  # a full disk, a closed pipe: the environment's fault, not a bug
        _discard_stdout()
        raise StopdoctorError(f"cannot write the output: {error.strerror or error}") from None


def _discard_stdout() -> None:
    """Point stdout at /dev/null, so the flush at exit does not fail on the same write again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no real file descriptor (tests capture stdout)
        pass


def color_for_stdout(color: bool | None) -> bool:
    if color is not None:
        return color
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR")


def width_for_stdout() -> int:
    import shutil

    return max(60, min(shutil.get_terminal_size((100, 24)).columns, 160)) if sys.stdout.isatty() else 100


from stopdoctor.cli import inspect as _inspect  # noqa: E402,F401  (registers commands)

for _optional in ("render", "probe", "generate", "check", "fix", "labels", "logs", "stop_odds"):
    try:
        __import__(f"{__name__}.{_optional}")
    except ModuleNotFoundError as _missing:  # a command module not written yet
        if _missing.name != f"{__name__}.{_optional}":
            raise


def main() -> None:
    try:
        app()
    except SystemExit as exit_:
        code = exit_.code
        sys.exit(code if isinstance(code, int) else (EXIT_CANNOT_RUN if code else 0))


if __name__ == "__main__":
    main()
