"""The command line: typer only. Each command builds settings, calls `stopdoctor.api`, renders
through `stopdoctor.reporters`, and returns an exit code. `app.py` holds the application and the
shared options, `output.py` the one output/progress helper, one module per command.

Heavy modules are imported inside commands so that `stopdoctor --help` stays fast.
"""

from __future__ import annotations

import sys

from stopdoctor.cli import check, diff, fix, generate, inspect, labels, logs, probe, probe_server, render, stop_odds  # noqa: F401  registers commands
from stopdoctor.cli.app import app
from stopdoctor.core.errors import EXIT_CANNOT_RUN
from stopdoctor.core.process import tune_for


def main() -> None:
    tune_for(sys.argv[1:])  # again, for a caller that imported this module first (the entry points call it before)
    every_command = app.registered_commands
    app.registered_commands = commands_to_build(sys.argv[1:])
    try:
        app()
    except SystemExit as exit_:
        code = exit_.code
        sys.exit(code if isinstance(code, int) else (EXIT_CANNOT_RUN if code else 0))
    finally:
        app.registered_commands = every_command


def commands_to_build(args: list[str]) -> list:
    """typer turns every registered command into a click command on each run, evaluating each
    one's annotations (~15 ms for all of them); a run whose first argument names a command needs
    only that one. Anything else (`--help`, `--version`, a mistyped name) gets them all, so the
    command list and "No such command" read as before."""
    from typer.main import get_command_name

    every_command = app.registered_commands
    if not args or args[0].startswith("-"):
        return every_command
    named = [info for info in every_command if info.callback is not None
             and (info.name or get_command_name(info.callback.__name__)) == args[0]]
    return named or every_command


if __name__ == "__main__":
    main()
