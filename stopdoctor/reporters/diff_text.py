"""`stopdoctor diff`: the differences as text (one line each, stop-relevant first, the template's
rendered diff below) or as one JSON document (schema `stopdoctor.diff/1`). Pure: a diff in, a
string out.

Imports: actions.diff (data only), reporters.inspect_json (the header).
"""

from __future__ import annotations

import json
from typing import Any

from stopdoctor.actions.diff import ModelDiff
from stopdoctor.reporters.document import header


def diff_document(diff: ModelDiff, exit_code: int) -> dict[str, Any]:
    return {
        **header("stopdoctor.diff/1"),
        "a": diff.a,
        "b": diff.b,
        "differences": [{"aspect": d.aspect, "what": d.what, "a": d.before, "b": d.after, "where_a": d.where_a,
                         "where_b": d.where_b, "stop_relevant": d.stop_relevant, "detail": d.detail,
                         "effect": d.effect or None, "why": d.why or None}
                        for d in diff.differences],
        "stop_relevant": len(diff.stop_relevant),
        "worse": len(diff.worse),
        "exit_code": exit_code,  # the Report's: 1 when a difference is stop-relevant
    }


def render_diff_json(diff: ModelDiff, exit_code: int) -> str:
    return json.dumps(diff_document(diff, exit_code), indent=2, ensure_ascii=False, default=str) + "\n"


def value_text(value: object) -> str:
    """A value as a person reads it: a list as its items joined by commas, an absent one as "none"."""
    if value is None or value == []:
        return "none"
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value)
    return str(value)


# The groups, in the order a reader needs them: what got worse leads.
_GROUPS = (("worse in b: generation stops less where it should", lambda d: d.effect == "worse"),
           ("better in b", lambda d: d.effect == "better"),
           ("other changes to where generation stops", lambda d: d.stop_relevant and not d.effect),
           ("other differences (stopping unchanged)", lambda d: not d.stop_relevant and not d.effect))


def render_diff_text(diff: ModelDiff) -> str:
    lines = [f"stopdoctor diff  a: {diff.a}  b: {diff.b}"]
    if not diff.differences:
        lines.append("  no difference in template, end-of-turn, stop ids, special ids, sampling or tokenization")
        return "\n".join(lines) + "\n"
    ordered = []
    for title, belongs in _GROUPS:
        group = [d for d in diff.differences if belongs(d)]
        if not group:
            continue
        lines.append(f"{title}:")
        for d in group:
            mark = "STOP " if d.stop_relevant else "     "
            where = f"  [{d.where_a or '-'} | {d.where_b or '-'}]" if (d.where_a or d.where_b) else ""
            why = f"{d.why}: " if d.why else ""
            if d.aspect == "template":
                lines.append(f"  {mark}{d.aspect:<14} {d.what} differs{where}")
            else:
                lines.append(f"  {mark}{d.aspect:<14} {d.what}: {why}{value_text(d.before)} → {value_text(d.after)}{where}")
        ordered += group
    details = [d.detail for d in ordered if d.detail]
    if details:
        lines.append("")
        lines.extend(detail.rstrip("\n") for detail in details)
    relevant = len(diff.stop_relevant)
    worse = len(diff.worse)
    lines.append("")
    lines.append((f"{worse} change(s) for the worse, " if worse else "")
                 + f"{relevant} stop-relevant difference(s), {len(diff.differences) - relevant} other(s)")
    return "\n".join(lines) + "\n"
