"""The `logs` report's work (#28, branch logs-fast), counted, never timed: a local file is read
where it lies (no table of its lines), the flags are short-circuited yet equal to their unconditional
formulas on every edge case, and the summary reads the records in a few scans."""

from __future__ import annotations

import dataclasses
import json
import random
import re
from pathlib import Path

import pytest

pytest.importorskip("duckdb")

from stopdoctor.analysis.repetition import (REPETITION_MIN_WORDS, REPETITION_WINDOW, RUN_GRAM, RUN_MIN_CHARS,
                                            RUN_RULE_CHARACTERS, RUN_THRESHOLD, RUN_WINDOW)
from stopdoctor.core.errors import InputError
from stopdoctor.logs import query
from stopdoctor.logs.query import analyze_logs, connect
from stopdoctor.logs.report import LogsSettings
from stopdoctor.logs.flags import REASONING_SHARE, TAIL, derived_sql, normalised_finish_sql
from stopdoctor.logs.sql import prefilter_sql, sql_string
from stopdoctor.logs.vocabulary import builtin_vocabulary
from tests.helpers import bench_log_lines

ROOT = Path(__file__).resolve().parents[1]
LOGS = ROOT / "fixtures" / "logs"

_SENTENCE_END = r"""[.!?…。！？:;"'”’)\]*`>]$"""


def _int(expr: str) -> str:
    return f"try_cast(try_cast({expr} AS DOUBLE) AS BIGINT)"


def unconditional_flags(relation: str, vocabulary) -> str:
    """The flags as plain formulas, every test evaluated on every answer (the records' flags before
    #28's short-circuits): the specification `derived_sql` must equal."""
    return rf"""
WITH normalised AS (
    SELECT *, CASE WHEN finish_hint IS NOT NULL THEN finish_hint ELSE {normalised_finish_sql('finish_raw')} END AS finish,
           {prefilter_sql(vocabulary, 'text')} AS turn_candidate
    FROM {relation}
), scored AS (
    SELECT *,
           CASE WHEN finish = 'stop' AND length(text) >= {REPETITION_MIN_WORDS * 2}
                THEN string_split_regex(trim(text), '\s+')[-{REPETITION_WINDOW}:] END AS words,
           CASE WHEN finish = 'length' AND text IS NOT NULL
                THEN trim(regexp_replace(text, '(?s)<think>.*?(</think>|$)', '', 'g')) END AS visible,
           CASE WHEN finish = 'length' THEN (length(text) - length(replace(text, '</think>', ''))) // 8 END AS think_ends,
           CASE WHEN finish = 'stop' AND length(text) >= {RUN_MIN_CHARS}
                THEN regexp_extract(text, '(\S+)\s*$', 1) END AS last_run
    FROM normalised
), ran AS (
    SELECT *, CASE WHEN length(last_run) >= {RUN_MIN_CHARS} AND NOT regexp_full_match(last_run, {sql_string(RUN_RULE_CHARACTERS)})
                   THEN right(last_run, {RUN_WINDOW}) END AS run
    FROM scored
)
SELECT line_no, choice, blank, bad, kind AS shape, finish_raw, finish, model, max_tokens, stop_reason,
       output_tokens, reasoning_tokens, ts, coalesce(turn_candidate, false) AS turn_candidate,
       finish = 'length' AND text IS NOT NULL AND rtrim(text) <> ''
           AND NOT regexp_matches(rtrim(text), {sql_string(_SENTENCE_END)}) AS mid_sentence,
       CASE WHEN turn_candidate THEN text END AS candidate_text,
       CASE WHEN length(rtrim(coalesce(nullif(text, ''), reasoning))) > {TAIL}
            THEN '…' || right(rtrim(coalesce(nullif(text, ''), reasoning)), {TAIL})
            ELSE rtrim(coalesce(nullif(text, ''), reasoning)) END AS tail,
       coalesce(multi_choice, false) AND kind IS NOT NULL AS multi_choice,
       coalesce(finish IN ('stop', 'tool_calls') AND NOT coalesce(multi_choice, false)
           AND output_tokens = {_int('max_tokens')}, false) AS truncated_finished,
       greatest(CASE WHEN len(words) >= {REPETITION_MIN_WORDS} THEN 1 - len(list_distinct(list_transform(range(1, len(words) - 2),
            lambda i: words[i] || ' ' || words[i + 1] || ' ' || words[i + 2] || ' ' || words[i + 3])))
            / (len(words) - 3) END,
            list_filter([1 - len(list_distinct(list_transform(range(1, length(run) - {RUN_GRAM - 2}),
                lambda i: substring(run, i, {RUN_GRAM})))) / (length(run) - {RUN_GRAM - 1})],
                lambda share: run IS NOT NULL AND share >= {RUN_THRESHOLD})[1]) AS repetition,
       coalesce(finish = 'length' AND (
           (coalesce(visible, '') = '' AND (nullif(reasoning, '') IS NOT NULL OR reasoning_tokens > 0
                                            OR text LIKE '%<think>%' OR (text = '' AND kind LIKE 'openai-c%')))
           OR (output_tokens > 0 AND reasoning_tokens >= {REASONING_SHARE} * output_tokens)
           OR think_ends > 1), false) AS reasoning_budget,
       CASE WHEN output_tokens > 0 THEN reasoning_tokens::DOUBLE / output_tokens END AS reasoning_share,
       think_ends, coalesce(visible, '') = '' AS empty_answer,
       coalesce(finish = 'stop' AND lower(coalesce(finish_raw, '')) <> 'pause_turn' AND NOT regexp_matches(coalesce(text, ''), '\S')
                AND (text IS NOT NULL OR kind LIKE 'openai-c%'), false) AS empty_stop,
       text, reasoning, finish_hint, stream_id
FROM ran
"""


_WORDS = ["a", "b", "loop", "x", "the", "Paris.", "é", "<think>", "</think>", "User:", "user"]
_SEPARATORS = [" ", "\t", "\n", "\x0b", "\u00a0", "  ", "\r\n", "\f", "\u2003"]


def _text(rng: random.Random) -> str | None:
    roll = rng.random()
    if roll < 0.25:  # around REPETITION_MIN_WORDS words, split by every kind of space
        n = rng.choice([REPETITION_MIN_WORDS - 2, REPETITION_MIN_WORDS - 1, REPETITION_MIN_WORDS,
                        REPETITION_MIN_WORDS + 1, 120, REPETITION_WINDOW + 50])
        text = "".join(rng.choice(_WORDS[:6]) + rng.choice(_SEPARATORS) for _ in range(n))
        return rng.choice([text, text.strip(), " " + text, "\n" + text])
    if roll < 0.35:
        return "loop " * rng.choice([20, REPETITION_MIN_WORDS - 1, REPETITION_MIN_WORDS, 200])
    if roll < 0.45:
        return rng.choice(["", " ", "\n\t", "\x0b", "\u00a0", None, "  \n  "])
    if roll < 0.6:
        return rng.choice(["<think>hmm", "<think>a</think>b", "<think>a</think><think>b</think>", "x</think>y</think>",
                           "  <think> </think>  ", "<THINK>a", "<think"]) * rng.choice([1, 3])
    if roll < 0.75:  # a last run without whitespace, around RUN_MIN_CHARS
        return (rng.choice(["", "Sure. "]) + rng.choice(["abc", "-=", "ab", "abcdefghij"])
                * rng.choice([RUN_MIN_CHARS // 3, RUN_MIN_CHARS // 2 + 1, 400]) + rng.choice(["", " ", "\n"]))
    if roll < 0.85:
        return "Sure.\nUser: hi" + rng.choice(["", "\n<|im_start|>user\n", "\nuser\n", "\n```\nUser: x\n```"])
    return rng.choice(["The end.", "cut in the mid", "x" * (TAIL + 10), "y " * 70 + "end", "ends with a quote”"])


def test_the_short_circuited_flags_equal_their_unconditional_formulas():
    """`derived_sql` tests each costly flag only on the answers it can be true for; every column it
    gives equals the plain formula's on edge cases of each test (word counts at the threshold with
    every kind of space, runs at the length limit, <think> blocks, blank texts, budgets as text)."""
    rng = random.Random(28)
    rows = []
    for i in range(4000):
        rows.append((i + 1, 0, False, False,
                     rng.choice(["openai-chat", "openai-completions", "ollama", "anthropic", "tgi", None]),
                     rng.choice(["stop", "length", "tool_calls", "pause_turn", "end_turn", "STOP", None, "eos", "repetition"]),
                     rng.choice([None, None, None, "tool_calls"]), _text(rng),
                     rng.choice([None, "", "think think", "  "]), rng.choice(["m1", None]),
                     rng.choice([None, "40", "40.0", "abc", "1e30", " 40"]), rng.choice([None, 0, 39, 40, 400]),
                     rng.choice([None, 0, 36, 39, 40]), None, None, rng.choice([None, False, True]), None))
    con, _ = connect()
    con.execute("CREATE TEMP TABLE answers (line_no BIGINT, choice INTEGER, blank BOOLEAN, bad BOOLEAN, kind VARCHAR, "
                "finish_raw VARCHAR, finish_hint VARCHAR, text VARCHAR, reasoning VARCHAR, model VARCHAR, "
                "max_tokens VARCHAR, output_tokens BIGINT, reasoning_tokens BIGINT, stop_reason VARCHAR, ts TIMESTAMP, "
                "multi_choice BOOLEAN, stream_id VARCHAR)")
    # one statement: DuckDB's executemany runs an INSERT a row (~20 s for these 4,000)
    con.execute("INSERT INTO answers VALUES " + ", ".join(["(" + ", ".join("?" * 17) + ")"] * len(rows)),
                [value for row in rows for value in row])
    vocabulary = builtin_vocabulary()
    fast = con.execute(f"SELECT * EXCLUDE (chunks) FROM ({derived_sql('answers', vocabulary)}) ORDER BY line_no").fetchall()
    # an answer keeps the end of its text only where an example can show it: cut by the budget, or a lie
    shown = ("finish = 'length' OR truncated_finished OR repetition >= 0.5 OR lower(finish) = 'repetition' "
             "OR reasoning_budget OR empty_stop")
    plain = con.execute(f"SELECT * REPLACE (CASE WHEN {shown} THEN tail END AS tail) "
                        f"FROM ({unconditional_flags('answers', vocabulary)}) ORDER BY line_no").fetchall()
    con.close()
    assert fast == plain
    names = ["mid_sentence", "repetition", "reasoning_budget", "empty_stop", "truncated_finished"]
    columns = [c.split()[0] for c in query.RECORD_COLUMNS.split(", ") if c.split()[0] != "chunks"]
    flagged = {name: sum(1 for row in fast if row[columns.index(name)]) for name in names}
    assert all(count > 20 for count in flagged.values()), flagged  # every flag is exercised both ways
    assert sum(1 for row in fast if row[columns.index("repetition")] is not None) > 100
    tails = [row[columns.index("tail")] for row in fast]
    assert sum(t is not None for t in tails) > 1000 and sum(t is None for t in tails) > 1000  # kept, and dropped


def test_the_word_split_runs_only_where_the_whitespace_allows_enough_words():
    """The repetition score splits a `stop` text into words only when it has at least
    REPETITION_MIN_WORDS - 1 whitespace characters (RE2's \\s), and the <think> regex runs only on a text with
    `<think>`: each behind a CASE branch, so DuckDB evaluates it on those rows only."""
    sql = derived_sql("answers", builtin_vocabulary())
    split = sql.index("string_split_regex(")
    assert "translate(text" in sql[sql.rindex("CASE WHEN", 0, split):split]
    think = sql.index("regexp_replace(text, '(?s)<think>")
    assert "contains(text, '<think>')" in sql[sql.rindex("CASE WHEN", 0, think):think]
    assert "list_filter([" not in sql  # no one-element list and lambda a row for the run's share
    for flag in ("mid_sentence", "truncated_finished", "reasoning_budget", "empty_stop"):
        item = sql[:sql.index(f" AS {flag},")].rsplit(",\n", 1)[1]
        code = " ".join(line for line in item.splitlines() if not line.strip().startswith("--"))
        assert code.strip().startswith("CASE WHEN finish"), flag  # nothing else evaluated on every answer


class _Recorder:
    """A DuckDB connection that keeps the text of every statement run on it."""

    def __init__(self, con) -> None:
        self.con = con
        self.statements: list[str] = []

    def execute(self, sql: str, *args):
        self.statements.append(sql)
        return self.con.execute(sql, *args)

    def __getattr__(self, name: str):
        return getattr(self.con, name)


@pytest.fixture
def recorded(monkeypatch):
    """Every connection `logs.query` opens, recording its statements; DuckDB on `recorded.threads`."""
    made: list[_Recorder] = []

    def connect_recorded():
        con, duckdb = connect()
        con.execute(f"SET threads = {threads[0]}")
        made.append(_Recorder(con))
        return made[-1], duckdb

    threads = [2]
    monkeypatch.setattr(query, "connect", connect_recorded)
    return made, threads


def test_a_local_file_is_read_where_it_lies_twice_in_all(recorded, tmp_path):
    """On up to STREAMED_THREADS threads (one) no table of the lines: the file is scanned by the
    sample of its key groups and by the per-group read, and by nothing else when no line needs the
    general query; a file with lines that do is scanned a third time for those lines only. With more
    threads (2 and up) too, no table of its lines: the per-group read runs on every thread in file
    order and numbers the records by their row ids (`query._ordered_read`)."""
    made, threads = recorded
    threads[0] = query.STREAMED_THREADS
    path = tmp_path / "bench.jsonl"
    path.write_text("\n".join(bench_log_lines(2000)) + "\n")
    report = analyze_logs([str(path)])
    statements = made[-1].statements
    assert not any(re.search(r"TABLE lines\b", s) for s in statements)
    assert sum("read_csv(" in s for s in statements) == 2
    assert not any("preserve_insertion_order = true" in s for s in statements)  # numbered as read, on one core
    assert report.lines == 2000 and report.responses > 1900

    otlp = LOGS / "shapes" / "otel-otlp.jsonl"
    analyze_logs([str(otlp)])
    statements = made[-1].statements
    assert not any(re.search(r"TABLE lines\b", s) for s in statements)
    assert sum("read_csv(" in s for s in statements) == 3  # the sample, the per-group read, the spans' lines

    # With more threads too: the per-group read runs over the unnumbered lines on every thread, into
    # a table kept in file order (preserve_insertion_order on for that statement only), numbered by rowid.
    threads[0] = query.STREAMED_THREADS + 1
    parallel = analyze_logs([str(path)])
    statements = made[-1].statements
    assert not any(re.search(r"TABLE lines\b", s) for s in statements)
    assert sum("read_csv(" in s for s in statements) == 2
    ordered = [i for i, s in enumerate(statements) if "preserve_insertion_order = true" in statements[i - 1]]
    assert len(ordered) == 1 and "ORDINALITY" not in statements[ordered[0]] and "INSERT INTO rec" in statements[ordered[0]]
    assert "preserve_insertion_order = false" in statements[ordered[0] + 1]
    assert dataclasses.replace(parallel, seconds=0) == dataclasses.replace(report, seconds=0)


def _with_blank_and_bad_lines(lines: list[str], rng: random.Random) -> list[str]:
    """`lines` with a blank, a whitespace or a bad JSON line before ~2 %, ~1 % and ~1 % of them."""
    out = []
    for line in lines:
        roll = rng.random()
        out.extend([""] if roll < 0.02 else ["   "] if roll < 0.03 else ["{bad json"] if roll < 0.04 else [])
        out.append(line)
    return out


# plain LF and gzipped CRLF in the quick loop; the other two in the full suite (~4 s each)
@pytest.mark.parametrize("newline, gz", [("\n", False), ("\r\n", True),
                                         pytest.param("\r\n", False, marks=pytest.mark.slow),
                                         pytest.param("\n", True, marks=pytest.mark.slow)])
def test_the_parallel_read_numbers_every_line_as_it_lies(recorded, tmp_path, monkeypatch, newline, gz):
    """The ordered parallel read (`query._ordered_read`) on 4 threads gives every record the line
    number the numbered read gives it, and the bad lines and a line longer than a CSV buffer the
    numbers Python counts, with blank and whitespace lines, CRLF, and a .gz file."""
    import gzip

    made, threads = recorded
    threads[0] = 4
    lines = _with_blank_and_bad_lines(bench_log_lines(30000), random.Random(1))
    long_text = json.dumps({"model": "long", "choices": [{"text": "word " * 400_000 + "User: hi", "finish_reason": "length"}]})
    lines[1234:1234] = [long_text]
    lines[25000:25000] = [long_text]
    text = "".join(line + newline for line in lines).encode()
    path = tmp_path / ("log.jsonl.gz" if gz else "log.jsonl")
    path.write_bytes(gzip.compress(text) if gz else text)

    def records() -> list[tuple]:
        con, duckdb = query.connect()
        con.execute("SET threads = 4")
        con.execute(f"CREATE TEMP TABLE rec (file VARCHAR, {query.RECORD_COLUMNS})")
        assert query._read_files(con, duckdb, [str(path)], builtin_vocabulary(), LogsSettings(), None, tmp_path) == len(lines)
        return con.execute("SELECT * FROM rec ORDER BY line_no, choice").fetchall()

    parallel = records()
    assert any("preserve_insertion_order = true" in s for s in made[-1].statements)
    assert [r[1] for r in parallel if r[4]] == [i + 1 for i, line in enumerate(lines) if line.startswith(("{bad", "{not"))]
    assert [r[1] for r in parallel if r[8] == "long"] == [i + 1 for i, line in enumerate(lines) if line == long_text]
    monkeypatch.setattr(query, "unnumbered_source_sql", lambda path, both_line_ends=False: None)  # the numbered read, on one core
    numbered = records()
    assert not any("preserve_insertion_order = true" in s for s in made[-1].statements)
    assert parallel == numbered


def test_the_summary_reads_the_records_in_a_few_scans(recorded, tmp_path):
    """The finish reasons, shapes, per model, per max_tokens and stop reasons are one GROUPING SETS
    scan of the records; the output-token histograms one more; the rest are the counts, the
    examples, the turn candidates and the timeline (22 statements read `rec` here, 37 before)."""
    lines = bench_log_lines(2000) + [json.dumps({"model": "m", "choices": [{"text": "a " * 80, "finish_reason": "length"}]})]
    path = tmp_path / "bench.jsonl"
    path.write_text("\n".join(lines) + "\n")
    analyze_logs([str(path)])
    statements = recorded[0][-1].statements
    start = next(i for i, s in enumerate(statements) if "count(*) FILTER (blank)" in s)
    reads = [s for s in statements[start:] if re.search(r"\bFROM rec\b", s)]
    assert sum("GROUPING SETS" in s for s in reads) == 1
    assert sum("GROUP BY" in s and "output_tokens" in s for s in reads) == 1  # the histograms' one scan
    assert len(reads) <= 22, len(reads)


def test_each_distinct_candidate_answer_is_diagnosed_once(monkeypatch, tmp_path):
    """An answer the prefilter keeps (a transcript quoted in 300 answers, a runaway in 30 distinct
    ones) is diagnosed once per distinct (text, finish), and the report lists every line of each
    answer with a finding, in line order."""
    transcript = "A transcript example:\n\nUser: My order hasn't arrived.\nAgent: Sorry to hear that."
    lines = []
    for i in range(600):
        text, finish = ((transcript, "stop") if i % 2 else
                        (f"Paris.\nsystem\n\nuser\nLaunch product {i % 60} now" if i % 4 == 0 else "Fine.", "length"))
        lines.append(json.dumps({"model": "m", "choices": [{"text": text, "finish_reason": finish}]}))
    path = tmp_path / "candidates.jsonl"
    path.write_text("\n".join(lines) + "\n")
    calls: list[str] = []
    diagnose = query.diagnose_text
    monkeypatch.setattr(query, "diagnose_text", lambda text, *a: calls.append(text) or diagnose(text, *a))
    report = analyze_logs([str(path)])
    assert len(calls) == len(set(calls)) == 1 + 15  # the transcript, and 15 distinct runaways (i % 60, i % 4 == 0)
    turns = report.flagged["hallucinated-turn"]
    assert [line for _, line in turns] == [i + 1 for i in range(600) if i % 4 == 0]


def test_a_log_whose_lines_end_both_with_crlf_and_lf_is_read_line_for_line(tmp_path):
    """A log appended to from Windows and Linux mixes CRLF and LF: DuckDB detects one line end a
    file and refused the other (exit 2). It is read with both: the same report as the file with LF
    alone, and the bad lines at the numbers Python counts; the .gz too, and from the per-group read
    on four threads."""
    import gzip

    from stopdoctor.logs.inputs import check_log_file

    rng = random.Random(3)
    lines = _with_blank_and_bad_lines(bench_log_lines(3000), rng)
    ends = [rng.choice(["\n", "\r\n"]) for _ in lines]
    plain, mixed, packed = tmp_path / "lf.jsonl", tmp_path / "mixed.jsonl", tmp_path / "mixed.jsonl.gz"
    plain.write_bytes("".join(line + "\n" for line in lines).encode())
    mixed.write_bytes("".join(map("".join, zip(lines, ends))).encode())
    packed.write_bytes(gzip.compress(mixed.read_bytes()))
    assert not check_log_file(str(plain)) and check_log_file(str(mixed)) and check_log_file(str(packed))
    expected = analyze_logs([str(plain)])
    bad = [i + 1 for i, line in enumerate(lines) if line.startswith(("{bad", "{not"))]
    for path in (mixed, packed):
        report = analyze_logs([str(path)])
        assert report.lines == len(lines) and report.bad_lines == expected.bad_lines
        same = repr(dataclasses.replace(report, seconds=0)).replace(str(path), str(plain))  # files named in examples
        assert same == repr(dataclasses.replace(expected, seconds=0))
    con, duckdb = connect()
    con.execute("SET threads = 4")
    con.execute(f"CREATE TEMP TABLE rec (file VARCHAR, {query.RECORD_COLUMNS})")
    read = query._read_files(con, duckdb, [str(mixed)], builtin_vocabulary(), LogsSettings(), None, tmp_path,
                             frozenset([str(mixed)]))
    assert read == len(lines)
    assert [r[0] for r in con.execute("SELECT line_no FROM rec WHERE bad ORDER BY line_no").fetchall()] == bad


@pytest.mark.parametrize(("text", "both"), [
    (b"a\nb\n", False), (b"a\r\nb\r\n", False), (b"a\r\nb\n", True), (b"a\nb\r\n", True),
    (b"a\r\nb\nc\rd\n", False),  # a CR that ends no line: left to DuckDB as before
    (b"a\r\nb\nc\r", False),  # nor one at the very end
    (b"x" * ((1 << 20) - 1) + b"\r\nb\n", True),  # the CRLF across the scan's 1 MB chunks
])
def test_the_line_scan_says_when_lines_end_both_ways(tmp_path, text, both):
    from stopdoctor.logs.inputs import check_log_file

    path = tmp_path / "log.jsonl"
    path.write_bytes(text)
    assert check_log_file(str(path)) is both


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("last", [False, True])
def test_a_line_over_the_limit_is_named_by_its_number_past_the_first_chunks(tmp_path, gz, last):
    """The scan searches bytes and counts no line; the number of a line it refuses is counted
    then: right after several 1 MB chunks of short lines (CRLF among them), as the last line
    without a newline too, plain and gzipped."""
    import gzip

    from stopdoctor.logs.inputs import MAX_LINE_BYTES, check_log_file

    short = [f'{{"n": {i}}}' + ("\r\n" if i % 7 == 0 else "\n") for i in range(250_000)]  # ~3 MB
    long = b'{"x": "' + b"y" * MAX_LINE_BYTES + b'"}'
    data = "".join(short).encode() + long + (b"" if last else b"\n" + b'{"n": 1}\n' * 10)
    path = tmp_path / ("log.jsonl.gz" if gz else "log.jsonl")
    path.write_bytes(gzip.compress(data, compresslevel=1) if gz else data)
    with pytest.raises(InputError, match=rf"line {len(short) + 1:d} is longer than 8 MB"):
        check_log_file(str(path))
    plain = "".join(short).encode()  # the same lines without it: no refusal, both line ends
    path.write_bytes(gzip.compress(plain, compresslevel=1) if gz else plain)
    assert check_log_file(str(path)) is True
