"""Known errors: each becomes one line (plus a hint) and a documented exit code in the CLI.

Imports nothing from the rest of the package.
"""

from __future__ import annotations

# Exit codes, documented in the README.
EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_CANNOT_RUN = 2
EXIT_INTERNAL = 3


# An error is one line a person reads: a message quoting a whole file (a 72 MB template, a
# `raise_exception` of a huge string) is cut to this many characters.
MAX_MESSAGE_CHARS = 1000


def shorten(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """`text` cut to about `limit` characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit} more characters)"


class StopdoctorError(Exception):
    """An error the user can act on: bad input, a missing file, a template that fails."""

    exit_code = EXIT_CANNOT_RUN

    def __init__(self, message: str, hint: str | None = None) -> None:
        message = shorten(message)
        hint = None if hint is None else shorten(hint)
        super().__init__(message)
        self.message = message
        self.hint = hint


class InputError(StopdoctorError):
    """The model spec, a file, or an option cannot be used."""


class TemplateError(StopdoctorError):
    """A chat template failed to render (its own raise_exception, a syntax error, a sandbox limit)."""

    def __init__(self, message: str, hint: str | None = None, line: int | None = None) -> None:
        super().__init__(message, hint)
        self.line = line


class MissingDependencyError(StopdoctorError):
    """An optional extra (torch) is needed for this command."""


def require_file(path: str, what: str = "file", hint: str | None = None) -> None:
    """Refuse, in one line, a path that is missing or is no regular file (`/dev/null`, a pipe, a
    folder): 'no such file' is only said of what does not exist."""
    import os
    import stat

    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise InputError(f"{path}: no such {what}", hint) from None
    except OSError as error:
        raise InputError(f"{path}: cannot be read: {error.strerror or error}", hint) from None
    if stat.S_ISDIR(mode):
        raise InputError(f"{path}: is a folder, not a {what}", hint)
    if not stat.S_ISREG(mode):
        raise InputError(f"{path}: is not a regular file (a pipe, socket or device)", hint)
