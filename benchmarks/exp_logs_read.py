"""Issue #28, branch logs-read: what another JSON read would save in `stopdoctor logs` (in-process,
contenders alternating, CPU = user + system of this process, all DuckDB threads).

Two parts (benchmarks/RESULTS.md, "a structured read, measured"):
  read   the line read alone: DuckDB's minimal count (5 paths), main's read (`json_valid`, the key
         group, one `json_extract_string` of the group's paths), `from_json` of the union of the
         sampled groups' paths, `read_ndjson` with that union as an explicit `columns` schema, and
         the union struct's fields put into a list (what the answer's expressions would index), from
         `from_json` and from `read_ndjson` (the row as a struct).
  e2e    the per-group read's whole normalising query (records written to a table), main's against
         the same query with each group's `json_extract_string` replaced by `from_json` into a struct
         (`struct`), and one `from_json` of the union with no key group (`union`); the records are
         checked equal to main's (EXCEPT ALL both ways).

Run: python benchmarks/exp_logs_read.py FILE [read|e2e] [THREADS] [ROUNDS]
"""

from __future__ import annotations

import json
import re
import resource
import sys
import time

import duckdb

from stopdoctor.logs.groups import group_sql, sample_groups
from stopdoctor.logs.oneparse import one_parse_sql
from stopdoctor.logs.records import BLANK_LINE, one_answer, prepared_lines, records_sql
from stopdoctor.logs.sql import source_sql, sql_string
from stopdoctor.logs.vocabulary import builtin_vocabulary

_STEP = re.compile(r"\.([^.\[]+)(?:\[(\d+)\])?")


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def tree(paths) -> dict:
    """The paths (`$.a.b[0].c`, no negative index or wildcard) as a tree of (key, is a list)."""
    root: dict = {}
    for path in paths:
        node = root
        for key, index in _STEP.findall(path[1:]):
            node = node.setdefault((key, index != ""), {})
    return root


def structure(node: dict, leaf: str = "VARCHAR") -> str:
    """`from_json`'s structure for the tree."""
    def walk(n):
        return leaf if not n else {k: ([walk(v)] if is_list else walk(v)) for (k, is_list), v in n.items()}
    return json.dumps(walk(node))


def sql_type(node: dict) -> str:
    if not node:
        return "VARCHAR"
    return "STRUCT(" + ", ".join(f'"{k}" {sql_type(v)}{"[]" if is_list else ""}' for (k, is_list), v in node.items()) + ")"


def columns(node: dict) -> str:
    """`read_ndjson`'s `columns` for the tree."""
    return "{" + ", ".join(f"'{k}': '{sql_type(v)}{'[]' if is_list else ''}'" for (k, is_list), v in node.items()) + "}"


def access(path: str, var: str) -> str:
    """The struct field of `path` (a JSON index i is DuckDB's list index i + 1)."""
    out = var
    for key, index in _STEP.findall(path[1:]):
        out += f'."{key}"' + (f"[{int(index) + 1}]" if index != "" else "")
    return out


def struct_sql(source: str, groups, union: bool = False) -> str:
    """main's per-group read (`one_parse_sql`) with each group's paths read by `from_json` into a
    struct (`union`: one struct of every sampled group's paths, no key group)."""
    items = [("u", frozenset().union(*groups.values()))] if union else list(groups.items())
    branches = []
    for i, (group, anchors) in enumerate(items):
        paths, kind, cols, many = one_answer(anchors)

        def sub(expr: str, i=i, paths=paths) -> str:
            expr = re.sub(r"\bv\b(?!\[)", f"s{i}", expr)
            return re.sub(r"\bv\[(\d+)\]", lambda m: access(paths[int(m.group(1)) - 1], f"s{i}"), expr)
        branches.append((sql_string(group), paths, sub(kind), {k: sub(c) for k, c in cols.items()}, sub(many)))

    def by_group(pick) -> str:
        return "CASE grp " + " ".join(f"WHEN {b[0]} THEN {pick(b)}" for b in branches) + " END"
    structs = ", ".join(f"CASE WHEN grp = {b[0]} THEN from_json(line, '{structure(tree(b[1]))}') END AS s{i}"
                        for i, b in enumerate(branches))
    names = list(branches[0][3])
    cols_sql = ", ".join(f"{by_group(lambda b, n=name: b[3][n])} AS {name}" for name in names)
    kept = ", ".join(f"CASE WHEN kind IS NOT NULL AND NOT redo THEN {name} END AS {name}" for name in names)
    known = ", ".join(b[0] for b in branches)
    grp = "'u'" if union else group_sql("line")
    return f"""
WITH grouped AS (
    SELECT line_no, line, {BLANK_LINE} AS blank, CASE WHEN json_valid(line) THEN {grp} END AS grp
    FROM {prepared_lines(source)}
), parsed AS (SELECT *, {structs} FROM grouped
), kinded AS (SELECT *, {by_group(lambda b: b[2])} AS kind FROM parsed
), answered AS (
    SELECT line_no, blank, grp IS NULL AND NOT blank AS bad, kind,
           grp IS NOT NULL AND (grp NOT IN ({known}) OR coalesce({by_group(lambda b: b[4])}, false)) AS redo, {cols_sql}
    FROM kinded
), flat AS (
    SELECT CASE WHEN redo THEN -line_no ELSE line_no END AS line_no, blank, bad,
           CASE WHEN NOT redo THEN kind END AS kind, {kept}
    FROM answered
)
{records_sql('flat', builtin_vocabulary())}
"""


def main() -> None:
    path = sys.argv[1]
    part = sys.argv[2] if len(sys.argv) > 2 else "read"
    threads = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 2
    con = duckdb.connect()
    con.execute("SET memory_limit = '512MB'")
    con.execute(f"SET threads = {threads}")
    source = source_sql(path)
    groups = sample_groups(con, source, prepared_lines)
    paths = {sql_string(g): one_answer(a)[0] for g, a in groups.items()}
    union = sorted({p for ps in paths.values() for p in ps})
    print(f"{len(groups)} groups, paths per group {[len(p) for p in paths.values()]}, union {len(union)}")
    if part == "read":
        five = ", ".join(sql_string(p) for p in ["$.response.choices[0].finish_reason", "$.choices[0].finish_reason",
                                                 "$.done_reason", "$.details.finish_reason", "$.stop_type"])
        keyed = f"SELECT line, CASE WHEN json_valid(line) THEN {group_sql('line')} END AS grp FROM {prepared_lines(source)}"
        case = "CASE grp " + " ".join(f"WHEN {g} THEN json_extract_string(line, [{', '.join(sql_string(p) for p in ps)}])"
                                      for g, ps in paths.items()) + " END"
        t = tree(union)
        valid = f"{prepared_lines(source)} WHERE json_valid(line)"
        queries = {
            "minimal (5 paths)": f"SELECT count(v[1]), count(v[3]) FROM (SELECT json_extract_string(line, [{five}]) v FROM {source} WHERE json_valid(line))",
            "main read": f"SELECT count(v), sum(len(v)) FROM (SELECT {case} v FROM ({keyed}))",
            "valid + key group": f"SELECT count(grp) FROM ({keyed})",
            "from_json union": f"SELECT count(s), count(s.response) FROM (SELECT from_json(line, '{structure(t)}') s FROM {valid})",
            "from_json union, fields": f"SELECT count(v), sum(len(v)) FROM (SELECT [{', '.join(access(p, 's') for p in union)}] v "
                                       f"FROM (SELECT from_json(line, '{structure(t)}') s FROM {valid}))",
            "read_ndjson columns": f"SELECT count(*), count(response), count(choices) FROM read_ndjson({sql_string(path)}, columns = {columns(t)}, ignore_errors = true)",
            "read_ndjson columns, fields": f"SELECT count(v), sum(len(v)) FROM (SELECT [{', '.join(access(p, 'r') for p in union)}] v "
                                           f"FROM read_ndjson({sql_string(path)}, columns = {columns(t)}, ignore_errors = true) r)",
        }
    else:
        queries = {"main": one_parse_sql(source, builtin_vocabulary(), groups),
                   "struct": struct_sql(source, groups), "union": struct_sql(source, groups, union=True)}
    figures: dict[str, list[str]] = {k: [] for k in queries}
    for _ in range(rounds):
        for name, query in queries.items():
            start, wall = cpu(), time.perf_counter()
            if part == "read":
                con.execute(query).fetchall()
            else:
                con.execute(f"CREATE OR REPLACE TABLE t_{name} AS {query}")
            figures[name].append(f"{cpu() - start:.2f}/{time.perf_counter() - wall:.2f}")
    for name, runs in figures.items():
        print(f"{name:26s} CPU/wall s: {'  '.join(runs)}")
    if part != "read":
        for name in ("struct", "union"):
            diff = [con.execute(f"SELECT count(*) FROM (SELECT * FROM t_{a} EXCEPT ALL SELECT * FROM t_{b})").fetchone()[0]
                    for a, b in (("main", name), (name, "main"))]
            print(f"records differing from main's, {name}: {diff}")


if __name__ == "__main__":
    main()
