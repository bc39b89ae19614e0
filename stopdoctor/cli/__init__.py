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


def main() -> None:
    try:
        app()
    except SystemExit as exit_:
        code = exit_.code
        sys.exit(code if isinstance(code, int) else (EXIT_CANNOT_RUN if code else 0))


if __name__ == "__main__":
    main()
