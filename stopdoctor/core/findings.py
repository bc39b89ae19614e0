"""Findings, severities, the one `Report` every command hands its reporters, and the one function
that maps it to an exit code (`Report.exit_code`).

Plain data; imports core.types and core.errors only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from enum import IntEnum
from pathlib import Path
from typing import Any

from stopdoctor.core.errors import EXIT_CANNOT_RUN, EXIT_FINDINGS, EXIT_OK, StopdoctorError, shorten
from stopdoctor.core.records import record
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


@record
class Finding:
    code: str
    name: str
    severity: Severity
    message: str
    fix: str
    location: Location | None = None
    evidence: dict[str, Any] = field(default_factory=dict)
    baseline: bool = False  # listed in `check --baseline FILE`: accepted, still shown, never fails the gate


@record
class Subject:
    """One thing a command judged (a model, a dataset, a set of logs) and its findings, each with
    its location already resolved (file, key, line). `files` maps the subject's own file names to
    local paths, so a reporter can turn a relative `Location.file` into a path without reading
    anything. `result` is the command's own result (`stopdoctor.rules.results.InspectResult`, …) for the human and
    JSON reporters; `error` is set when the subject could not be checked."""

    name: str
    findings: list[Finding] = field(default_factory=list)
    checks: tuple[str, ...] = ()  # codes of the rules that ran on it
    files: Mapping[str, Path] = field(default_factory=dict)
    result: Any = None
    serving: tuple[Path, ...] = ()
    error: StopdoctorError | None = None
    failed_target: str | None = None  # what could not be read: the model, a serving file, a dataset
    live: Any = None  # the `check --live` probe's verdict, None when it did not run

    @property
    def error_line(self) -> str | None:
        """The error in one line, naming what could not be checked."""
        if self.error is None:
            return None
        target = shorten(self.failed_target or self.name, 80)
        return self.error.message if target in self.error.message else f"{target}: {self.error.message}"


@record
class Report:
    """What every command hands its reporters: the subjects it judged, the severity that fails,
    and each rule's level after configuration. One exit-code function for all commands."""

    command: str
    subjects: list[Subject]
    fail_on: Severity = Severity.ERROR
    config_file: Path | None = None
    levels: Mapping[str, Severity] = field(default_factory=dict)
    baseline: Path | None = None  # the baseline file applied (`check --baseline`), if any

    @property
    def findings(self) -> list[Finding]:
        return [f for s in self.subjects for f in s.findings]

    @property
    def failed(self) -> list[Subject]:
        return [s for s in self.subjects if s.error is not None]

    def exit_code(self, exit_zero: bool = False) -> int:
        """The one exit-code rule of every command: 2 when any subject could not be checked (the
        rest are still reported), else 1 when a finding reaches fail-on (0 with exit_zero; findings
        accepted in a baseline never count), else 0. (3, an internal error, is no report's: the
        CLI's error handler says it.)"""
        if self.failed:
            return EXIT_CANNOT_RUN
        failing = any(f.severity >= self.fail_on and not f.baseline for f in self.findings)
        return EXIT_FINDINGS if failing and not exit_zero else EXIT_OK
