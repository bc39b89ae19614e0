"""The `rules --json` document (schema `stopdoctor.rules/1`): each rule's code, name, severity,
summary and doc sections. Fields are public interface: add, never rename.

Imports: rules.registry (data only), reporters.document (the header).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from stopdoctor.reporters.document import header
from stopdoctor.rules.registry import Rule


def render_rules_json(checks: Sequence[Rule]) -> str:
    return json.dumps({**header("stopdoctor.rules/1"), "rules": [
        {"code": c.code, "name": c.name, "severity": c.severity.label, "summary": c.summary, "doc": c.sections}
        for c in checks
    ]}, indent=2) + "\n"
