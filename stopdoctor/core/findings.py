"""Findings, severities and the one function that maps a result to an exit code.

Plain data; imports model and errors only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from stopdoctor.core.errors import EXIT_FINDINGS, EXIT_OK
from stopdoctor.core.types import Location


class Severity(IntEnum):
    INFO = 1
    WARNING = 2
    ERROR = 3

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, text: str) -> Severity:
        try:
            return cls[text.strip().upper()]
        except KeyError:
            raise ValueError(f"unknown severity {text!r} (use info, warning or error)") from None


@dataclass(frozen=True)
class Finding:
    code: str
    name: str
    severity: Severity
    message: str
    fix: str
    location: Location | None = None
    evidence: dict[str, Any] = field(default_factory=dict)


def exit_code(findings: list[Finding], fail_on: Severity = Severity.ERROR) -> int:
    """0 when nothing reaches `fail_on`, 1 otherwise (2 and 3 come from errors, not findings)."""
    return EXIT_FINDINGS if any(f.severity >= fail_on for f in findings) else EXIT_OK
