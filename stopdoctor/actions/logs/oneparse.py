"""The one-parse read of a log file: the keys its first lines have (`actions.logs.groups.sample_groups`)
decide, once per file, the JSON paths read from every line, in one `json_extract_string` call beside
a `json_valid` (the parses DuckDB's own minimal finish-reason count makes; an Ollama /api/generate
line's `response` is read apart), and a line's one answer is its columns, computed in place (no
per-line list of answers to unnest, no key group per line).

Exactness: `read` is the union of the sampled groups' anchors (`actions.logs.groups`). Every path
whose anchor is in it is read; the same parse reads a check path for every other anchor a path of
the general query has (or for its whole root, when nothing of that root is read). A line whose
checks are all NULL has every unread path NULL too, so its values, and the fields computed from
them, are the general query's. A line with a check that is not NULL (keys the sample did not have),
or with a list of answers (OTel spans, n > 1 choices), is written with its line number negated and
read again by the general query (`actions.logs.records.normalise_sql`) over `redo_lines`.

Imports: actions.logs (groups, records, sql, vocabulary). Builds text only; runs nothing.
"""

from __future__ import annotations

from stopdoctor.actions.logs.groups import ANCHOR_ROOTS, anchor
from stopdoctor.actions.logs.records import BLANK_LINE, every_path, one_answer, prepared_lines, records_sql
from stopdoctor.actions.logs.sql import sql_string
from stopdoctor.actions.logs.vocabulary import TurnVocabulary


def _anchor_path(index: int, key: str) -> str:
    root = ANCHOR_ROOTS[index]
    return f'{root}."{key}"'


def check_paths(read: frozenset[str]) -> list[str]:
    """Paths that are all NULL on a line only when every path of the general query whose anchor is
    not in `read` is NULL on it: each such anchor, or its root when nothing at or under that root is read."""
    unread: dict[int, list[str]] = {}
    for a in dict.fromkeys(anchor(p) for p in every_path()):
        if a is not None and a not in read:
            index, _, key = a.partition(":")
            unread.setdefault(int(index), []).append(key)
    read_roots = {int(a.partition(":")[0]) for a in read}
    checks, covered = [], set()
    for index, root in enumerate(ANCHOR_ROOTS):  # deepest first: a nested root before the root it is under
        if index not in unread or index in covered:
            continue
        under = [j for j, other in enumerate(ANCHOR_ROOTS) if other == root or other.startswith(root + ".")]
        if root != "$" and not read_roots.intersection(under):
            checks.append(root)  # nothing under it is read: the root itself NULL
            covered.update(under)
        else:
            checks.extend(_anchor_path(index, key) for key in unread[index])
    return checks


def one_parse_sql(source: str, vocabulary: TurnVocabulary, read: frozenset[str]) -> str:
    """The records of `source`'s lines (`line_no`, `line`) read in one parse each, as
    `normalise_sql` makes them; a line it cannot read exactly is one row with its line number negated."""
    paths, kind, columns, many = one_answer(read)
    checks = check_paths(read)
    listed = ", ".join(sql_string(p) for p in paths + checks)
    unchecked = (f"coalesce({', '.join(f'v[{len(paths) + i + 1}]' for i in range(len(checks)))}) IS NOT NULL"
                 if checks else "false")
    kept = ", ".join(f"CASE WHEN kind IS NOT NULL AND NOT redo THEN {name} END AS {name}" for name in columns)
    return f"""
WITH parsed AS (
    SELECT line_no, line, {BLANK_LINE} AS blank,
           CASE WHEN json_valid(line) THEN json_extract_string(line, [{listed}]) END AS v
    FROM {prepared_lines(source)}
), kinded AS (
    SELECT *, {kind} AS kind FROM parsed
), answered AS (
    SELECT line_no, blank, v IS NULL AND NOT blank AS bad, kind,
           v IS NOT NULL AND ({unchecked} OR coalesce({many}, false)) AS redo,
           {', '.join(f'{expr} AS {name}' for name, expr in columns.items())}
    FROM kinded
), flat AS (
    SELECT CASE WHEN redo THEN -line_no ELSE line_no END AS line_no, blank, bad,
           CASE WHEN NOT redo THEN kind END AS kind, {kept}
    FROM answered
)
{records_sql('flat', vocabulary)}
"""


def redo_lines(source: str, file: str) -> str:
    """The lines of `source` that `one_parse_sql` left to the general query (negated in `rec`)."""
    return (f"(SELECT line_no, line FROM {source} WHERE line_no IN "
            f"(SELECT -line_no FROM rec WHERE file = {sql_string(file)} AND line_no < 0))")


def drop_redone_sql(file: str) -> str:
    """The negated rows `one_parse_sql` wrote, once the general query has read their lines."""
    return f"DELETE FROM rec WHERE file = {sql_string(file)} AND line_no < 0"


def read_anchors(groups: dict[str, frozenset[str]]) -> frozenset[str]:
    """The anchors a file's one parse reads: every sampled group's."""
    return frozenset().union(*groups.values()) if groups else frozenset()
