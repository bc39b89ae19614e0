"""The pieces every JSON document shares: the header (schema_version, schema, tool), a location,
a finding, the severity summary. Fields are public interface: add, never rename.

Imports: core only.
"""

from __future__ import annotations

from typing import Any

from stopdoctor import __version__
from stopdoctor.core.findings import Finding, Severity
from stopdoctor.core.types import Location

SCHEMA_VERSION = 1


def header(schema: str) -> dict[str, Any]:
    """The fields every JSON document starts with, whatever the command."""
    return {"schema_version": SCHEMA_VERSION, "schema": schema, "tool": {"name": "stopdoctor", "version": __version__}}


def location(loc: Location | None) -> dict[str, Any] | None:
    return None if loc is None else {"file": loc.file, "key": loc.key, "line": loc.line}


def finding(f: Finding) -> dict[str, Any]:
    return {
        "code": f.code,
        "name": f.name,
        "severity": f.severity.label,
        "message": f.message,
        "fix": f.fix,
        "location": location(f.location),
        "evidence": f.evidence,
    }


def summary(findings: list[Finding]) -> dict[str, int]:
    return {s.label: sum(1 for f in findings if f.severity == s) for s in (Severity.ERROR, Severity.WARNING, Severity.INFO)}
