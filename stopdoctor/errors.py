"""Known errors: each becomes one line (plus a hint) and a documented exit code in the CLI.

Imports nothing from the rest of the package.
"""

from __future__ import annotations

# Exit codes, documented in the README.
EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_CANNOT_RUN = 2
EXIT_INTERNAL = 3


class StopdoctorError(Exception):
    """An error the user can act on: bad input, a missing file, a template that fails."""

    exit_code = EXIT_CANNOT_RUN

    def __init__(self, message: str, hint: str | None = None) -> None:
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
