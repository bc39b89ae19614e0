"""A two-level read of log lines: a line's key group first (which of the keys the shapes read sit
under each response, request and attribute root: one cheap `json_keys` parse), then only the JSON
paths that can be non-NULL for that group.

Every path the normalising query reads has an anchor: the deepest known root it lies under
(`$.response.body`, `$.result.message`, `$.modelOutput`, `$.response`, `$.request.body`,
`$.request`, `$.modelInput`, `$.attributes`, `$`) and the first key below that root. A path whose
anchor key is absent from the line's object at that root is NULL on that line, so reading only the
paths whose anchors a line has gives exactly the values of reading all of them: the groups change
the speed, never a field. An OpenAI request+response pair reads ~40 paths instead of ~200.

The groups a file has are taken from its first lines (`sample_groups`); a line whose group was not
in the sample is read with every path, as before.

Imports: logs.sql. Builds text; `sample_groups` runs one small query on a connection it is given.
"""

from __future__ import annotations

import re
from stopdoctor.logs.sql import sql_string

# Deepest first: a path is anchored at the first of these it lies strictly under.
ANCHOR_ROOTS = ("$.response.body", "$.request.body", "$.result.message", "$.modelOutput", "$.modelInput",
                "$.response", "$.request", "$.attributes", "$")
SAMPLE_LINES = 20_000  # lines whose groups are read first
MAX_GROUPS = 12  # the most common groups of the sample get a branch of their own

_KEY = re.compile(r'\.(?:"([^"]*)"|([^.\[]+))')


def anchor(path: str) -> str | None:
    """`root index:key` of a JSON path (`$.response.choices[0].text` -> the key `choices` under
    `$.response`), or None for a path not under any root by a plain key (always read)."""
    for index, root in enumerate(ANCHOR_ROOTS):
        if root == "$":
            rest = path[1:] if path.startswith("$") else None
        else:
            rest = path[len(root):] if path.startswith(root) and path[len(root):len(root) + 1] == "." else None
        if rest is None:
            continue
        match = _KEY.match(rest)
        if not match:
            return None
        return f"{index}:{match.group(1) if match.group(1) is not None else match.group(2)}"
    return None


def group_sql(line: str) -> str:
    """The group of a valid JSON line: the keys of its object at each root, as text."""
    return f"CAST(json_keys({line}, {_roots()}) AS VARCHAR)"


def anchors(keys: list[list[str] | None]) -> frozenset[str]:
    """The anchors a group has, from its keys per root (`group_sql` before the cast)."""
    return frozenset(f"{i}:{k}" for i, ks in enumerate(keys) for k in (ks or ()))


def kept(path: str, group: frozenset[str]) -> bool:
    """Whether `path` can be non-NULL on a line whose anchors are `group`."""
    a = anchor(path)
    return a is None or a in group


def sample_groups(con, source: str, prepared, lines: int = SAMPLE_LINES) -> dict[str, frozenset[str]]:
    """The most common groups among the first `lines` lines of `source` (`prepared(relation)` is
    the relation of prepared lines, `line` a JSON text or not), each with its anchors."""
    rows = con.execute(
        f"SELECT {group_sql('line')} AS g, any_value(json_keys(line, {_roots()})), count(*) "
        f"FROM {prepared(f'(SELECT * FROM {source} LIMIT {lines})')} "
        f"WHERE json_valid(line) GROUP BY 1 ORDER BY 3 DESC, 1 LIMIT {MAX_GROUPS}").fetchall()
    return {g: anchors(keys) for g, keys, _ in rows}


def _roots() -> str:
    return "[" + ", ".join(sql_string(r) for r in ANCHOR_ROOTS) + "]"
