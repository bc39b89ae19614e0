"""The `check --write-baseline` file (schema `stopdoctor.baseline/1`): one entry per accepted
finding, read back by `stopdoctor.gate.read_baseline`. Fields are public interface: add, never rename.

Imports: reporters.document (the header).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from stopdoctor.reporters.document import header

BASELINE_SCHEMA = "stopdoctor.baseline/1"


def render_baseline_json(entries: Sequence[dict[str, Any]]) -> str:
    return json.dumps({**header(BASELINE_SCHEMA), "findings": list(entries)}, indent=2, ensure_ascii=False) + "\n"
