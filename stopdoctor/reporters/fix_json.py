"""The `fix --json` document (schema_version 1): the edits a fix would make (or made), each with
its unified diff, and the defects that have no safe mechanical fix. Fields are public interface:
add, never rename. Pure: a plan in, a string out.

Imports: writers.edits, core.findings (data only), reporters.document (the header, a finding's fields).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from stopdoctor.writers.edits import FixPlan
from stopdoctor.core.findings import Finding
from stopdoctor.reporters.document import finding, header


def fix_document(model: str, plan: FixPlan, written: bool, exit_code: int,
                 remaining: Sequence[Finding] = ()) -> dict[str, Any]:
    return {
        **header("stopdoctor.fix/1"),
        "model": model,
        "edits": [{"file": edit.label, "path": str(edit.path), "creates": edit.before is None, "reason": edit.reason,
                   "diff": edit.diff()} for edit in plan.edits],
        "notes": list(plan.notes),
        # findings at/above fail-on that no edit removes: why the exit code is 1 with nothing to fix
        "remaining": [finding(f) for f in remaining],
        "diff": plan.diff() if plan.edits else "",
        "written": written,
        "exit_code": exit_code,
    }


def render_fix_json(model: str, plan: FixPlan, written: bool, exit_code: int, remaining: Sequence[Finding] = ()) -> str:
    return json.dumps(fix_document(model, plan, written, exit_code, remaining), indent=2, ensure_ascii=False) + "\n"
