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
