"""Response logs read at scale: why did each logged generation end, and did it end for the wrong
reason (cut by the token budget, ran on into a fake next turn)?

The engine is SQL on embedded DuckDB (imported lazily: other commands never pay for it). One
query per file (`logs.oneparse`, with `logs.records.normalise_sql` for the lines it
leaves) reads every line as text (JSONL, .gz, local or any URL DuckDB can open), reads only the
paths its key group can have, picks each field from whichever logged shape the line has, and
materialises a narrow table of normalised records; the distributions are GROUP BYs over that table. The text of an answer is kept only where a cheap SQL prefilter (a superset of what
`diagnose.find_turns` can find) says a next turn may be in it; those few answers are then
diagnosed in Python by `stopdoctor.analysis.diagnose`, the same code `generate --server` uses,
against a `TurnVocabulary` (`logs.vocabulary`).

Imports: core, analysis (diagnose), logs (groups, inputs, oneparse, records, report, sql, summary, vocabulary); duckdb lazily. Never prints.
"""

from __future__ import annotations

import os
import re
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from stopdoctor.analysis.diagnose import FINISH_LENGTH, Diagnosis, Generation, HallucinatedTurn, StopCause, diagnose, headline_turn
from stopdoctor.core.errors import InputError, MissingDependencyError
from stopdoctor.logs.inputs import MEMORY_LIMIT, check_log_file, is_encoding_error, literal_path, read_error, utf8_copy
from stopdoctor.logs.groups import sample_groups
from stopdoctor.logs.oneparse import drop_redone_sql, one_parse_sql, redo_lines
from stopdoctor.logs.records import normalise_sql, prepared_lines, streams_sql
from stopdoctor.logs.report import PROBLEMS, Example, LogsSummary, LogsSettings, Problem
from stopdoctor.logs.summary import BAD_EXAMPLES, charts, lie_problems
from stopdoctor.logs.sql import (OVERRIDABLE, glob_literal, is_parquet, is_remote, source_sql, sql_comment, sql_string,
                                 unnumbered_source_sql)
from stopdoctor.logs.vocabulary import TurnVocabulary, builtin_vocabulary

# --------------------------------------------------------------------------------------------
# Running the query
# --------------------------------------------------------------------------------------------


RECORD_COLUMNS = (
    "line_no BIGINT, choice INTEGER, blank BOOLEAN, bad BOOLEAN, shape VARCHAR, finish_raw VARCHAR, finish VARCHAR, "
    "model VARCHAR, max_tokens VARCHAR, stop_reason VARCHAR, output_tokens BIGINT, reasoning_tokens BIGINT, "
    "ts TIMESTAMP, chunks BIGINT, turn_candidate BOOLEAN, mid_sentence BOOLEAN, candidate_text VARCHAR, tail VARCHAR, "
    "multi_choice BOOLEAN, truncated_finished BOOLEAN, repetition DOUBLE, reasoning_budget BOOLEAN, "
    "reasoning_share DOUBLE, think_ends BIGINT, empty_answer BOOLEAN, empty_stop BOOLEAN, text VARCHAR, reasoning VARCHAR, "
    "finish_hint VARCHAR, stream_id VARCHAR")


def connect():
    """A DuckDB connection in bounded memory (spilling to a temp folder), and the duckdb module."""
    try:
        import duckdb
    except ImportError:
        raise MissingDependencyError("stopdoctor logs needs the duckdb package",
                                     hint="pip install duckdb (or reinstall stopdoctor)") from None

    con = duckdb.connect()
    # Line numbering holds a file's lines until they are numbered; past memory they spill here,
    # not into the working directory (DuckDB's default for an in-memory database).
    con.execute(f"SET temp_directory = {sql_string(str(Path(tempfile.gettempdir()) / 'stopdoctor-duckdb'))}")
    con.execute(f"SET memory_limit = {sql_string(os.environ.get('STOPDOCTOR_LOGS_MEMORY', MEMORY_LIMIT))}")
    con.execute("SET preserve_insertion_order = false")  # rows are ordered by line_no where it matters
    # DuckDB draws its own progress bar on stdout for a long query: stdout carries data (--format
    # json); progress goes through `on_progress` only.
    con.execute("SET enable_progress_bar_print = false")
    return con, duckdb


def show_sql(paths: Sequence[str], vocabulary: TurnVocabulary | None = None,
             settings: LogsSettings = LogsSettings()) -> str:
    """The statements that build the records table `rec` from each file (the normalising query,
    then the grouping of streamed chunks), and the finish-reason counts over it: a script to run
    as it is in another DuckDB (`--show-sql`)."""
    both_line_ends = _check_inputs(paths)
    vocabulary = vocabulary or builtin_vocabulary()
    con, duckdb = connect()
    try:
        out = [f"CREATE TEMP TABLE rec (file VARCHAR, {RECORD_COLUMNS});\n\n"]
        for path in paths:
            try:
                # The script names the file itself (not a link or a copy): a local path's glob
                # characters are escaped.
                source = source_sql(path if is_remote(path) else glob_literal(path), con, path in both_line_ends)
                groups = _key_groups(con, source, settings)
            except duckdb.Error as error:
                if is_encoding_error(str(error)):
                    raise InputError(f"{path}: a line is not UTF-8 text, which the printed script cannot read in DuckDB",
                                     hint="stopdoctor logs without --show-sql counts such a line as a bad line") from None
                raise read_error(path, str(error)) from None
            if groups:
                out.append(f"-- {sql_comment(path)}\n-- each line of a sampled key group: its paths in one read, its answer in place\n"
                           f"{_insert_sql(path, one_parse_sql(source, vocabulary, groups))};\n"
                           "-- the other lines (another key group, several answers): the general query\n"
                           f"{_insert_sql(path, normalise_sql(redo_lines(source, path), vocabulary, groups=groups))};\n"
                           f"{drop_redone_sql(path)};\n")
            else:
                out.append(f"-- {sql_comment(path)}\n"
                           f"{_insert_sql(path, normalise_sql(source, vocabulary, settings.overrides, groups))};\n")
            out.append("-- streamed responses: each stream's chunks grouped into one answer\n"
                       + "".join(f"{statement};\n" for statement in _stream_statements(path, vocabulary)) + "\n")
        out.append("-- the normalised finish reasons\nSELECT finish, count(*) AS answers FROM rec WHERE shape IS NOT NULL "
                   "GROUP BY 1 ORDER BY 2 DESC, 1;\n")
        return "".join(out)
    finally:
        con.close()


def _insert_sql(path: str, query: str) -> str:
    return f"INSERT INTO rec SELECT {sql_string(path)} AS file, * FROM ({query})"


def _stream_statements(path: str, vocabulary: TurnVocabulary) -> list[str]:
    """A file's streamed chunk rows in `rec` replaced by one answer per stream (`streams_sql`)."""
    file = sql_string(path)
    return [f"CREATE OR REPLACE TEMP TABLE chunk_rows AS SELECT * EXCLUDE (file) FROM rec WHERE file = {file} AND chunks = 0",
            f"INSERT INTO rec SELECT {file} AS file, * FROM ({streams_sql('chunk_rows', vocabulary)})",
            f"DELETE FROM rec WHERE file = {file} AND chunks = 0",
            "DROP TABLE chunk_rows"]


def _key_groups(con, source: str, settings: LogsSettings) -> dict[str, frozenset[str]]:
    """The key groups of a file's first lines (`logs.groups`); none for a custom log."""
    if settings.overrides:
        return {}
    return sample_groups(con, source, prepared_lines)


def parse_field_overrides(values: Sequence[str]) -> dict[str, str]:
    """`--field NAME=JSONPATH` (repeatable), e.g. finish_reason=$.output.stop."""
    overrides: dict[str, str] = {}
    for value in values:
        name, sep, path = value.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or name not in OVERRIDABLE or not path.strip().startswith("$"):
            raise InputError(f"--field {value!r}: expected NAME=$.json.path with NAME one of {', '.join(OVERRIDABLE)}",
                             hint="e.g. --field finish_reason=$.output.stop --field text=$.output.text")
        overrides[name] = path.strip()
    return overrides


def _check_inputs(paths: Sequence[str]) -> frozenset[str]:
    """Refuses what `check_log_file` refuses; the local files whose lines end both with CRLF and LF."""
    if not paths:
        raise InputError("no log file given", hint="stopdoctor logs responses.jsonl [more.jsonl.gz …]")
    return frozenset(path for path in paths if not is_remote(path) and check_log_file(path))

RUNNING_DONE = 99.9  # the most progress reported before the query has returned


def _run(con, sql: str, on_progress: Callable[[float], None] | None):
    """Run `sql`; with `on_progress`, in a worker thread while this one reports DuckDB's progress."""
    if on_progress is None:
        return con.execute(sql)
    con.execute("SET enable_progress_bar = true")  # DuckDB tracks progress only when asked…
    con.execute("SET enable_progress_bar_print = false")  # …and must not draw its own on stdout
    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            outcome["result"] = con.execute(sql)
        except BaseException as error:  # noqa: BLE001 - re-raised in the caller's thread
            outcome["error"] = error

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    while worker.is_alive():
        try:
            worker.join(0.1)
        except KeyboardInterrupt:
            con.interrupt()  # stop the query too, not only this thread
            raise
        try:
            done = con.query_progress()
        except Exception:  # noqa: BLE001 - progress is cosmetic
            done = -1
        if done is not None and done >= 0:
            # DuckDB's figure is its scan's: 100 while the rest of the query still runs.
            on_progress(min(done, RUNNING_DONE))
    if "error" in outcome:
        raise outcome["error"]
    on_progress(100.0)
    return outcome["result"]


def analyze_logs(paths: Sequence[str], vocabulary: TurnVocabulary | None = None,
                 settings: LogsSettings = LogsSettings(),
                 on_progress: Callable[[str, float], None] | None = None) -> LogsSummary:
    """Read every file, normalise every line, and summarise. Bad lines are counted, never fatal."""
    both_line_ends = _check_inputs(paths)
    vocabulary = vocabulary or builtin_vocabulary()
    started = time.perf_counter()
    con, duckdb = connect()
    con.execute(f"CREATE TEMP TABLE rec (file VARCHAR, {RECORD_COLUMNS})")
    aliases = tempfile.TemporaryDirectory(prefix="stopdoctor-logs-")
    try:
        lines = _read_files(con, duckdb, paths, vocabulary, settings, on_progress, Path(aliases.name), both_line_ends)
    finally:
        aliases.cleanup()
    return records_report(con, paths, vocabulary, settings, lines, started)


def _read_files(con, duckdb, paths: Sequence[str], vocabulary: TurnVocabulary, settings: LogsSettings,
                on_progress: Callable[[str, float], None] | None, folder: Path,
                both_line_ends: frozenset[str] = frozenset()) -> int:
    """Normalise every file into `rec`; the number of lines read. DuckDB is given each path
    literally (`literal_path`); a file it refuses for a line that is not UTF-8 is read again from a
    copy where that line is bad. `both_line_ends`: the files whose lines end with CRLF and LF."""
    line_counts = 0
    for index, path in enumerate(paths):
        def progress(start: float, span: float, p: str = path):
            if on_progress is None:
                return None
            def report(done: float) -> None:
                value = start + min(done, 100.0) * span / 100
                on_progress(p, 100.0 if value >= 100 else min(value, RUNNING_DONE))
            return report

        readable = path if is_remote(path) else literal_path(path, index, folder)
        for attempt in range(2):
            try:
                source = source_sql(readable, con, path in both_line_ends)
                # On more than STREAMED_THREADS threads a local JSONL file of sampled key groups is
                # parsed on all of them where it lies, in file order, and numbered by the order its
                # records were appended in (`_ordered_read`): no table of its lines (measured: less CPU
                # and memory than the table), and on 2 cores 1.5-1.7x less wall time than numbering as it
                # is read, which keeps the pipeline on one core (benchmarks/RESULTS.md). On one thread,
                # or for a file without key groups, the lines are numbered as read (a table of them
                # for the general query). A remote log is always fetched once into a table of its lines.
                text = not is_parquet(path)
                parallel = text and not is_remote(path) and _threads(con) > STREAMED_THREADS
                groups = _key_groups(con, source, settings) if parallel else None
                tabled = text and (is_remote(path) or parallel) and not groups
                if tabled:
                    _run(con, f"CREATE OR REPLACE TEMP TABLE lines AS SELECT * FROM {source}", progress(0, 40))
                    source = "lines"
                normalise_file(con, path, source, vocabulary, settings, progress(40 if tabled else 0, 60 if tabled else 100),
                               ordered=unnumbered_source_sql(readable, path in both_line_ends) if groups else None,
                               groups=groups)
                con.execute("DROP TABLE IF EXISTS lines")
                break
            except duckdb.Error as error:
                if attempt == 0 and is_encoding_error(str(error)) and not is_parquet(path) and not is_remote(path):
                    readable = utf8_copy(path, index, folder)
                    # no half of the file left from the failed read (a statement that fails writes nothing;
                    # the per-group read and the second read are two)
                    con.execute("DELETE FROM rec WHERE file = ?", [path])
                    continue
                raise read_error(path, str(error)) from None
        line_counts += con.execute("SELECT coalesce(max(line_no), 0) FROM rec WHERE file = ?", [path]).fetchone()[0]
        # A streamed response: its chunk rows grouped into one answer each.
        if con.execute("SELECT count(*) FROM rec WHERE file = ? AND chunks = 0", [path]).fetchone()[0]:
            for statement in _stream_statements(path, vocabulary):
                con.execute(statement)
    return line_counts


# DuckDB threads up to which a local file is numbered as it is read, on one core.
STREAMED_THREADS = 1


def _threads(con) -> int:
    return int(con.execute("SELECT current_setting('threads')").fetchone()[0])


# Fewer lines than this left to the general query: it reads every path (a shorter query to bind)
# rather than only each key group's.
REDO_GROUPED = 10_000


def normalise_file(con, path: str, source: str, vocabulary: TurnVocabulary, settings: LogsSettings,
                   on_progress: Callable[[float], None] | None = None, one_parse: bool = True,
                   ordered: str | None = None, groups: Mapping[str, frozenset[str]] | None = None) -> int | None:
    """`source`'s records into `rec` as `path`'s: the per-group read (`logs.oneparse`), then
    the general query for the lines it left (their number is returned); the general query alone
    (None returned) for a custom log, a file with no JSON line in its sample, or with `one_parse`
    false (the same records, slower).

    With `ordered` (`source`'s lines unnumbered, `sql.unnumbered_source_sql`), the per-group read
    runs on every core over it into a table in file order, and each record is numbered by its row
    there (`_ordered_read`); `source` is then read only for the lines left to the general query.
    `groups`: the key groups when already sampled from `source`."""
    groups = _key_groups(con, source, settings) if groups is None else groups
    if not (groups and one_parse):
        _run(con, _insert_sql(path, normalise_sql(source, vocabulary, settings.overrides, groups)), on_progress)
        return None
    if ordered is None or not _ordered_read(con, path, one_parse_sql(ordered, vocabulary, groups), on_progress):
        _run(con, _insert_sql(path, one_parse_sql(source, vocabulary, groups)), on_progress)
    redo = con.execute("SELECT count(*) FROM rec WHERE file = ? AND line_no < 0", [path]).fetchone()[0]
    if redo:
        query = normalise_sql(redo_lines(source, path), vocabulary, groups=groups if redo >= REDO_GROUPED else None)
        con.execute(_insert_sql(path, query))
        con.execute(drop_redone_sql(path))
    return redo


def _ordered_read(con, path: str, query: str, on_progress: Callable[[float], None] | None) -> bool:
    """`query`'s records into `rec` as `path`'s, numbered by their order: `query` (the per-group read
    of `unnumbered_source_sql`, one record a line, `line_no` 1 or -1 for a line left to the general
    query) is appended to `rec` with DuckDB's `preserve_insertion_order` on, which keeps the order
    of a single-table scan through projections (DuckDB's documented order preservation: a `SELECT`
    from one table function, CTEs of projections only, no join, aggregate or unnest) and the
    `rowid` of a materialised table follows that order; the rows one statement appends have
    consecutive rowids (checked: if they are not, the rows are dropped and False returned, for the
    numbered read to run instead), so `rowid` - the first + 1 is the line number."""
    before = con.execute("SELECT coalesce(max(rowid), -1) FROM rec").fetchone()[0]  # rows of earlier files, or of this path given twice
    con.execute("SET preserve_insertion_order = true")
    try:
        _run(con, _insert_sql(path, query), on_progress)
    finally:
        con.execute("SET preserve_insertion_order = false")
    mine = f"file = ? AND rowid > {before}"
    first, last, rows = con.execute(f"SELECT min(rowid), max(rowid), count(*) FROM rec WHERE {mine}", [path]).fetchone()
    if not rows:
        return True
    if last - first + 1 != rows:  # never seen; DuckDB does not promise it, so the lines are numbered instead
        con.execute(f"DELETE FROM rec WHERE {mine}", [path])
        return False
    con.execute(f"UPDATE rec SET line_no = CASE WHEN line_no < 0 THEN ({first - 1}) - rowid ELSE rowid - ({first - 1}) END "
                f"WHERE {mine}", [path])
    return True


def open_counted_records():
    """A DuckDB connection (bounded memory) with an empty table `counted` of records with a
    `weight` (`logs.partial`: a row kept whole has weight 1, a counted row the number of
    records it stands for), and `rec`, the records table the report reads, as each counted row
    repeated `weight` times: the report's every count is the count of the records."""
    con, _ = connect()
    con.execute(f"CREATE TEMP TABLE counted (file VARCHAR, {RECORD_COLUMNS}, weight BIGINT)")
    con.execute("CREATE TEMP VIEW rec AS SELECT * EXCLUDE (weight, range) FROM counted, range(counted.weight)")
    return con


def records_report(con, paths: Sequence[str], vocabulary: TurnVocabulary, settings: LogsSettings, lines: int,
                   started: float) -> LogsSummary:
    """The report from the records table `rec` (closes `con`); exit 2 when no line was a response."""
    report = _summarise(con, paths, vocabulary, settings, lines)
    con.close()
    if not report.responses:
        raise InputError(
            f"no response recognised in {', '.join(paths)}: {report.lines:,} lines, {report.bad_lines:,} not JSON, "
            f"{report.blank:,} blank, {report.unrecognised:,} JSON without a response in any known shape",
            hint="each line should be a response of a known API (OpenAI, Anthropic, Bedrock, Gemini, Ollama, TGI, "
                 "llama.cpp), an OpenTelemetry GenAI span or a request/response pair; --field NAME=$.path maps another")
    return _with_time(report, time.perf_counter() - started)


def _with_time(report: LogsSummary, seconds: float) -> LogsSummary:
    import dataclasses

    return dataclasses.replace(report, seconds=seconds)


def _rows(con, sql: str) -> list[tuple]:
    return con.execute(sql).fetchall()


def _nested(rows: list[tuple]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for key, finish, count in rows:
        out.setdefault("(not logged)" if key is None else str(key), {})[finish] = count
    return out


def _mask_code(text: str) -> str:
    """Code blocks and inline code spans blanked (same length, newlines kept): an answer that
    shows a template or a transcript in code is quoting it, not writing a turn."""
    def blank(match: re.Match) -> str:
        return re.sub(r"[^\n]", " ", match.group(0))

    text = re.sub(r"(?ms)^[ \t]*(```|~~~).*?(?:^[ \t]*\1[^\n]*$|\Z)", blank, text)
    return re.sub(r"`[^`\n]+`", blank, text)


def _excerpt(text: str, offset: int, before: int = 40, after: int = 60) -> str:
    start = max(0, offset - before)
    return ("…" if start else "") + text[start:offset + after] + ("…" if offset + after < len(text) else "")


# A bare role word is a turn only where a turn could start: at the very start, after a blank
# line, after another role word, or after a line that ends a sentence or a block. "root\nuser\nguest"
# (a list) is not a turn; "Paris.\nsystem\n\nuser\n" (ChatML with its specials stripped) is.
_ENDS_A_BLOCK = re.compile(r"""[.!?…。！？:;)"'”’*`\]>|]\s*$""")


def _plausible_turn(text: str, turn: HallucinatedTurn, words: set[str]) -> bool:
    if turn.source != "role word on its own line":
        return True
    before = text[:turn.offset].rstrip(" \t")
    if not before or before.endswith("\n\n") or not before.endswith("\n"):
        return True  # start of the text, or after a blank line
    previous = before[:-1].rsplit("\n", 1)[-1].strip()
    return not previous or previous in words or bool(_ENDS_A_BLOCK.search(previous))


def diagnose_text(text: str, finish: str, vocabulary: TurnVocabulary) -> Diagnosis:
    """`diagnose` on one logged answer, per template family; the earliest evidence wins.

    Code (fenced or inline) is blanked first, and a bare role word counts only where a turn could
    start (`_plausible_turn`): precision first, an ordinary answer flagged costs more than a miss.
    Only the families that can tell something are asked: those whose header text occurs, plus one
    per new set of bare role words (a family whose headers do not occur finds exactly what another
    family with the same bare words finds)."""
    masked = _mask_code(text)
    generation = Generation(finish, StopCause("length" if finish == FINISH_LENGTH else "eos"), masked)
    stop_ids = list(vocabulary.enders)  # every ender is meant to stop: flag only those followed by more text
    asked: list[tuple[Mapping[str, str], tuple[str, ...]]] = []
    seen_words: set[str] = set()
    for (_, headers, specials), words in zip(vocabulary.families, vocabulary.family_words):
        if not headers or any(h in masked for h in headers.values()) or not words <= seen_words:
            asked.append((headers, specials))
            seen_words |= words
    if not asked:
        asked.append((vocabulary.families[0][1], vocabulary.families[0][2]))
    missed = None
    turns: dict[int, HallucinatedTurn] = {}
    weak_allowed = False
    for headers, specials in asked:
        found = diagnose(generation, vocabulary.enders, stop_ids, headers, specials)
        missed = missed or found.should_have_stopped
        weak_allowed = weak_allowed or not headers
        for turn in found.turns:
            if _plausible_turn(masked, turn, seen_words):
                turns.setdefault(turn.offset, turn)
    ordered = tuple(turns[k] for k in sorted(turns))
    return Diagnosis(missed, None, headline_turn(ordered, weak_allowed=weak_allowed), ordered)


def _summarise(con, paths: Sequence[str], vocabulary: TurnVocabulary, settings: LogsSettings,
               lines: int) -> LogsSummary:
    (blank, bad, unrecognised, responses, multi_choice, streams, chunks), = _rows(con, """
        SELECT count(*) FILTER (blank), count(*) FILTER (bad), count(*) FILTER (shape IS NULL AND NOT blank AND NOT bad),
               count(*) FILTER (shape IS NOT NULL), count(*) FILTER (multi_choice),
               count(*) FILTER (shape LIKE '%-stream'),
               coalesce(sum(chunks) FILTER (shape LIKE '%-stream'), 0) FROM rec""")
    bad_examples = tuple((f, n) for f, n in _rows(con, f"SELECT file, line_no FROM rec WHERE bad ORDER BY file, line_no "
                                                        f"LIMIT {BAD_EXAMPLES}"))
    # The answers' distributions in one scan of the records (one GROUPING SETS aggregate, a few
    # rows a set), then each ordered as before from that small table.
    con.execute("""CREATE OR REPLACE TEMP TABLE dist AS
        SELECT GROUPING(shape, finish, raw, model, max_tokens, stop_reason) AS gid, shape, finish, raw, model,
               max_tokens, stop_reason, count(*) AS n
        FROM (SELECT *, coalesce(finish_raw, '(none)') AS raw FROM rec WHERE shape IS NOT NULL)
        GROUP BY GROUPING SETS ((shape), (finish, raw), (model, finish), (max_tokens, finish), (stop_reason))""")
    # GROUPING()'s bits, shape first: 0 for a column in the set
    sets = {"shape": 0b011111, "finish raw": 0b100111, "model finish": 0b101011, "max_tokens finish": 0b101101,
            "stop_reason": 0b111110}

    def dist(grouping: str, columns: str, order: str, where: str = "") -> list[tuple]:
        return _rows(con, f"SELECT {columns}, sum(n) FROM dist WHERE gid = {sets[grouping]} {where} "
                          f"GROUP BY {', '.join(str(i + 1) for i in range(columns.count(',') + 1))} ORDER BY {order}")

    shapes = dict(dist("shape", "shape", "2 DESC, 1"))
    finish = dict(dist("finish raw", "finish", "2 DESC, 1"))
    finish_raw = dict(dist("finish raw", "raw", "2 DESC, 1"))
    finish_native = _nested(dist("finish raw", "finish, raw", "1, 3 DESC, 2"))
    by_model = _nested(dist("model finish", "model, finish", "1 NULLS LAST, 3 DESC, 2"))
    by_max_tokens = _nested(dist("max_tokens finish", "max_tokens, finish",
                                 "try_cast(max_tokens AS DOUBLE) NULLS LAST, 1, 3 DESC, 2"))
    stop_reasons = {}
    for value, count in dist("stop_reason", "stop_reason", "2 DESC, 1 LIMIT 50", "AND stop_reason IS NOT NULL"):
        stop_reasons[f"id {value}" if re.fullmatch(r"\d+", value) else repr(value)] = count
    con.execute("DROP TABLE dist")

    def share(count: int) -> float:
        return count / responses if responses else 0.0

    def per_model(where: str) -> dict[str, int]:
        return {("(not logged)" if m is None else m): c for m, c in _rows(
            con, f"SELECT model, count(*) FROM rec WHERE {where} GROUP BY 1 ORDER BY 2 DESC, 1 NULLS LAST")}

    n = settings.examples
    problems: dict[str, Problem] = {}
    length_count = finish.get("length", 0)
    length_examples = tuple(Example(f, line, model, "length", tail or "", native_finish_reason=raw)
                            for f, line, model, raw, tail in _rows(
        con, f"SELECT file, line_no, model, finish_raw, tail FROM rec WHERE finish = 'length' "
             f"ORDER BY file, line_no, choice LIMIT {n}"))
    problems["budget-truncated"] = Problem("budget-truncated", PROBLEMS["budget-truncated"], length_count,
                                           share(length_count), length_examples, per_model("finish = 'length'"))
    mid = _rows(con, "SELECT count(*) FROM rec WHERE mid_sentence")[0][0]
    mid_examples = tuple(Example(f, line, model, "length", tail or "", native_finish_reason=raw)
                         for f, line, model, raw, tail in _rows(
        con, f"SELECT file, line_no, model, finish_raw, tail FROM rec WHERE mid_sentence "
             f"ORDER BY file, line_no, choice LIMIT {n}"))
    problems["mid-sentence"] = Problem("mid-sentence", PROBLEMS["mid-sentence"], mid, share(mid), mid_examples,
                                       per_model("mid_sentence"))

    turns: list[Example] = []
    ran_on: list[Example] = []
    turn_models: Counter[str] = Counter()
    ran_models: Counter[str] = Counter()
    # Each distinct candidate answer (text, finish) is diagnosed once; then only the records of those
    # with a finding are fetched, in line order (an answer logged on many lines is not fetched per line).
    findings: dict[tuple[str, str], Diagnosis] = {}
    for text, finish_value in _batches(con, "SELECT DISTINCT candidate_text, finish FROM rec "
                                            "WHERE turn_candidate AND candidate_text IS NOT NULL"):
        diagnosis = diagnose_text(text, finish_value, vocabulary)
        if diagnosis.hallucinated_turn is not None or diagnosis.should_have_stopped is not None:
            findings[(text, finish_value)] = diagnosis
    con.execute("CREATE OR REPLACE TEMP TABLE found AS SELECT unnest(?::VARCHAR[]) AS text, unnest(?::VARCHAR[]) AS finish",
                [[t for t, _ in findings], [f for _, f in findings]])
    for f, line, model, raw, finish_value, text in _batches(
            con, "SELECT file, line_no, model, finish_raw, finish, candidate_text FROM rec r SEMI JOIN found d "
                 "ON r.candidate_text = d.text AND r.finish = d.finish WHERE r.turn_candidate "
                 "ORDER BY file, line_no, choice"):
        found = findings[(text, finish_value)]
        name = "(not logged)" if model is None else model
        if found.hallucinated_turn is not None:
            turn = found.hallucinated_turn
            turns.append(Example(f, line, model, finish_value, _excerpt(text, turn.offset),
                                 f"{turn.role} turn ({turn.source}) at character {turn.offset}", raw))
            turn_models[name] += 1
        missed = found.should_have_stopped
        if missed is not None:
            ran_on.append(Example(f, line, model, finish_value, _excerpt(text, missed.offset or 0),
                                  f"{missed.text} at character {missed.offset}, more text after it", raw))
            ran_models[name] += 1
    con.execute("DROP TABLE found")
    problems["hallucinated-turn"] = Problem("hallucinated-turn", PROBLEMS["hallucinated-turn"], len(turns),
                                            share(len(turns)), tuple(turns[:n]), dict(turn_models.most_common()))
    problems["ran-past-end-of-turn"] = Problem("ran-past-end-of-turn", PROBLEMS["ran-past-end-of-turn"], len(ran_on),
                                               share(len(ran_on)), tuple(ran_on[:n]), dict(ran_models.most_common()))
    # Line numbers of every flagged answer, for callers that need them all (tests, --json).
    flagged = {"hallucinated-turn": tuple((e.file, e.line) for e in turns),
               "ran-past-end-of-turn": tuple((e.file, e.line) for e in ran_on)}
    lies, lie_lines = lie_problems(con, n, responses, per_model)
    problems.update(lies)
    flagged.update(lie_lines)
    return LogsSummary(tuple(paths), vocabulary.source, lines, blank, bad, bad_examples, unrecognised, responses,
                      shapes, finish, finish_raw, by_model, by_max_tokens, stop_reasons, problems, settings, 0.0, flagged,
                      multi_choice, finish_native, streams, chunks, charts(con) if responses else None)


def _batches(con, sql: str, size: int = 10_000):
    """The rows of `sql`, fetched a batch at a time (never the whole result in Python)."""
    result = con.execute(sql)
    while batch := result.fetchmany(size):
        yield from batch
