"""The one output helper of the command line: data to stdout (`emit`, `write_document`), talk to
stderr (`say`), progress for anything slower than a second (`working`), colour and width.

Imports: core, reporters (console; plain for stderr lines, without rich).
"""

from __future__ import annotations

import os
import stat
import sys
from typing import Any
from pathlib import Path

from stopdoctor.core.errors import InputError, StopdoctorError


def say(message: str) -> None:
    """Talk (progress, hints) goes to stderr; stdout carries data. One write per line, so lines
    from the progress timer and the command never interleave. Control characters (a template's
    escape sequences in an error) are shown as escapes, and a line is never longer than a screenful."""
    from stopdoctor.core.errors import shorten
    from stopdoctor.reporters.plain import terminal_safe

    if sys.stderr is None:  # started with stderr closed (`2>&-`): nowhere to talk
        return
    try:
        sys.stderr.write(terminal_safe(shorten(message, 4000)) + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):  # a closed or full stderr: the exit code still says it
        pass


def stderr_is_terminal() -> bool:
    return sys.stderr is not None and sys.stderr.isatty()


def stdout_is_terminal() -> bool:
    return sys.stdout is not None and sys.stdout.isatty()


class working:
    """Progress on stderr for anything that may take more than a second: a spinner on a
    terminal; elsewhere one plain line, printed only if the work is still running after 1 s,
    then a line every `HEARTBEAT` seconds while it runs on (a GGUF's first conversion takes
    minutes on a busy CPU: silence would look like a hang)."""

    FIRST = 1.0
    HEARTBEAT = 30.0

    def __init__(self, message: str) -> None:
        self.message = message
        self._status: Any = None  # rich's Status, imported when used
        self._thread: Any = None  # a threading.Thread, imported when used
        self._done: Any = None  # its threading.Event

    def __enter__(self) -> working:
        if stderr_is_terminal():
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


def emit(text: str) -> None:
    if sys.stdout is None:  # started with stdout closed (`stopdoctor rules >&-`): Python has no sys.stdout
        raise StopdoctorError("cannot write the output: stdout is closed",
                              hint="run it with stdout open, or write the report to a file with -o/--output")
    from stopdoctor.reporters.plain import document_safe

    try:
        sys.stdout.write(document_safe(text))
        sys.stdout.flush()
    except OSError as error:  # a full disk, a closed pipe: the environment's fault, not a bug
        _discard_stdout()
        raise StopdoctorError(f"cannot write the output: {error.strerror or error}") from None
    except UnicodeEncodeError as error:  # PYTHONIOENCODING=ascii, a C locale: the report has → and é
        _discard_stdout()
        raise StopdoctorError(f"cannot write the output: stdout's encoding ({error.encoding}) cannot encode "
                              f"{error.object[error.start:error.start + 1]!a}",
                              hint="set PYTHONIOENCODING=utf-8 (or a UTF-8 locale), or write the report to a file with -o") from None


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
    return stdout_is_terminal() and not os.environ.get("NO_COLOR")


def width_for_stdout() -> int:
    import shutil

    return max(60, min(shutil.get_terminal_size((100, 24)).columns, 160)) if stdout_is_terminal() else 100


def write_document(text: str, output: Path | None, what: str) -> None:
    """The document to stdout, or to `output` (its folder created) with one line on stderr saying so."""
    if output is None:
        emit(text)
        return
    try:
        info = output.stat()
    except OSError:
        info = None  # absent (or unreadable: the write below says why)
    if info is not None and not stat.S_ISREG(info.st_mode):
        # Opening a named pipe for writing blocks until someone reads it; a device is no report file.
        raise InputError(f"{output}: cannot write: not a regular file (a folder, pipe or device)",
                         hint="give -o a file name (an existing file is replaced)")
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        from stopdoctor.reporters.plain import document_safe

        output.write_text(document_safe(text), encoding="utf-8")
    except OSError as error:
        raise InputError(f"{output}: cannot write: {error.strerror or error}") from None
    say(f"stopdoctor: wrote {what} to {output}")


def write_report(report, format: str, output: Path | None, color: bool | None, *, exit_zero: bool = False,
                 show: int = 0, ids: bool = False, trace: bool = False) -> None:
    """Render a `Report` in `format` (stopdoctor.reporters.formats) to stdout or `output`; paths in
    SARIF/JUnit/GitHub are relative to the current directory, colour only on a terminal."""
    from stopdoctor.reporters.formats import Options, render

    options = Options(Path.cwd(), color_for_stdout(color) if output is None else False, width_for_stdout(),
                      exit_zero, show, ids, trace)
    text = render(format, report, options)
    if output is None and not text:
        return  # nothing to show (fix with nothing to change): no empty write
    write_document(text, output, f"{format} report")
