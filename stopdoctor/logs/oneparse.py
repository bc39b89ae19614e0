"""The per-group read of a log file: each line's key group (`logs.groups`: one `json_keys`
parse), then, for a group sampled from the file's first lines, one `json_extract_string` of only the
paths that group can have, and the line's one answer computed in place (no per-line list of answers
to unnest, no array read again, a short query per file): one struct a line from one CASE over the
groups, not a CASE per column (1.7 % fewer instructions, callgrind on 200k lines).

Exactness: a line of a sampled group has every other path NULL (`logs.groups`), so its
fields are the general query's. A valid JSON line of a group the sample did not have, or with a
list of answers (OTel spans, n > 1 choices), is written with its line number negated and read again
by the general query (`logs.records.normalise_sql`) over `redo_lines`.

Measured, and kept out: one `json_extract_string` a line of the union of the sampled groups' paths
with a check path for every other anchor (two parses a line, no `json_keys`) read ~150 paths a line
on a mixed log and cost more than the key group does (benchmarks/RESULTS.md).

Imports: logs (groups, records, sql, vocabulary). Builds text only; runs nothing.
"""

from __future__ import annotations

from collections.abc import Mapping

from stopdoctor.logs.groups import group_sql
from stopdoctor.logs.records import (
    BLANK_LINE,
    one_answer,
    prepared_lines,
    records_sql,
)
from stopdoctor.logs.sql import sql_string
from stopdoctor.logs.vocabulary import TurnVocabulary


def one_parse_sql(source: str, vocabulary: TurnVocabulary, groups: Mapping[str, frozenset[str]]) -> str:
    """The records of `source`'s lines (`line_no`, `line`) of the sampled `groups` (text -> anchors),
    as `normalise_sql` makes them; any other valid JSON line is one row with its line number negated."""
    branches = {sql_string(g): one_answer(anchors) for g, anchors in groups.items()}

    def by_group(pick) -> str:
        return "CASE grp " + " ".join(f"WHEN {g} THEN {pick(b)}" for g, b in branches.items()) + " END"

    def read(branch) -> str:
        paths = branch[0]
        return f"json_extract_string(line, [{', '.join(sql_string(p) for p in paths)}])" if paths else "CAST([] AS VARCHAR[])"

    names = list(next(iter(branches.values()))[2])
    struct = by_group(lambda b: "struct_pack(" + ", ".join(f"{n} := {b[2][n]}" for n in names) + ")")
    columns = f"{struct} AS a"
    kept = ", ".join(f"CASE WHEN kind IS NOT NULL AND NOT redo THEN a.{name} END AS {name}" for name in names)
    return f"""
WITH grouped AS (
    SELECT line_no, line, {BLANK_LINE} AS blank, CASE WHEN json_valid(line) THEN {group_sql('line')} END AS grp
    FROM {prepared_lines(source)}
), parsed AS (
    SELECT *, {by_group(read)} AS v FROM grouped
), kinded AS (
    SELECT *, {by_group(lambda b: b[1])} AS kind FROM parsed
), answered AS (
    SELECT line_no, blank, grp IS NULL AND NOT blank AS bad, kind,
           grp IS NOT NULL AND (v IS NULL OR coalesce({by_group(lambda b: b[3])}, false)) AS redo, {columns}
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
