"""The per-group read of `stopdoctor logs` (#28, `logs.oneparse`): the same records and the
same report as the general query on every fixture shape and on a file mixing them, and its work
counted in JSON reads a line and in lines left to the general query (never in seconds)."""

from __future__ import annotations

import dataclasses
import random
import re
from pathlib import Path

import pytest

pytest.importorskip("duckdb")

from stopdoctor.logs import query
from stopdoctor.logs.groups import sample_groups
from stopdoctor.logs.oneparse import one_parse_sql
from stopdoctor.logs.query import (
    RECORD_COLUMNS,
    analyze_logs,
    connect,
    normalise_file,
)
from stopdoctor.logs.records import normalise_sql, prepared_lines
from stopdoctor.logs.report import LogsSettings
from stopdoctor.logs.sql import source_sql
from stopdoctor.logs.vocabulary import builtin_vocabulary
from tests.helpers import bench_log_lines

ROOT = Path(__file__).resolve().parents[1]
LOGS = ROOT / "fixtures" / "logs"
FIXTURES = sorted((LOGS / "shapes").glob("*.jsonl")) + [LOGS / "lies.jsonl", LOGS / "responses.jsonl"]
# Valid JSON that is no response, or no object at all: each must stay what the general query says.
ODD_LINES = ["null", "42", '"text"', "[]", "[1, 2]", "{}", "true", '{"response": "a bare string"}',
             '{"choices": {"0": "an object, not a list"}}', '{"response": null, "model": "m"}', "{not json", "",
             '{"choices": [{"text": "n=2, first", "finish_reason": "stop"}, {"text": "second", "finish_reason": "length"}]}',
             # Ollama /api/generate: `response` is the text (an object there is written out as JSON text)
             '{"model": "llama3", "response": "The capital is", "done": true, "done_reason": "length", "eval_count": 3}',
             '{"model": "llama3", "response": {"odd": [1, 2]}, "done": true, "done_reason": "stop"}']


@pytest.fixture(scope="module")
def mixed(tmp_path_factory) -> Path:
    """Every fixture's lines shuffled together with the odd lines and synthetic ones."""
    lines = [line for path in FIXTURES for line in path.read_text().splitlines()] + ODD_LINES + bench_log_lines(300)
    random.Random(1).shuffle(lines)
    path = tmp_path_factory.mktemp("oneparse") / "mixed.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def _records(path: Path, one_parse: bool, sample: int | None = None) -> tuple[list[tuple], int | None]:
    con, _ = connect()
    con.execute(f"CREATE TEMP TABLE rec (file VARCHAR, {RECORD_COLUMNS})")
    original = query._key_groups
    if sample is not None:  # groups from the first `sample` lines only: the other lines' keys unsampled
        query._key_groups = lambda con, source, settings: sample_groups(con, source, prepared_lines, lines=sample)
    try:
        redone = normalise_file(con, str(path), source_sql(str(path)), builtin_vocabulary(), LogsSettings(),
                                one_parse=one_parse)
    finally:
        query._key_groups = original
    rows = con.execute("SELECT * FROM rec ORDER BY ALL").fetchall()
    con.close()
    return rows, redone


@pytest.mark.parametrize("path", FIXTURES + ["mixed"], ids=lambda p: p if isinstance(p, str) else p.name)
def test_one_parse_gives_exactly_the_records_of_the_general_query(path, request):
    path = request.getfixturevalue("mixed") if path == "mixed" else path
    general, none = _records(path, one_parse=False)
    fast, redone = _records(path, one_parse=True)
    assert none is None and redone is not None
    assert fast == general
    assert all(row[1] > 0 for row in fast)  # no line left negated


@pytest.mark.parametrize("sample", [1, 5])
def test_lines_with_keys_the_sample_did_not_have_are_read_again_exactly(mixed, sample):
    general, _ = _records(mixed, one_parse=False)
    fast, redone = _records(mixed, one_parse=True, sample=sample)
    assert fast == general
    assert redone > 100  # most of the mixed lines have keys the first line's group lacks


def test_the_report_is_the_same_with_and_without_the_one_parse_read(mixed, monkeypatch):
    fast = analyze_logs([str(mixed)])
    monkeypatch.setattr(query, "normalise_file", lambda *a, **k: normalise_file(*a, **k, one_parse=False))
    general = analyze_logs([str(mixed)])
    assert dataclasses.replace(fast, seconds=0) == dataclasses.replace(general, seconds=0)
    assert fast.responses > 300 and fast.bad_lines and fast.blank


def _json_calls_on_line(sql: str) -> list[str]:
    return re.findall(r"\b(json_\w+)\(line\b", sql)


def test_the_per_group_read_reads_a_line_once_and_makes_no_list_of_answers():
    """Work, not seconds: a line is read by `json_valid`, its key group (`json_keys`) and one
    `json_extract_string` of its group's paths (a CASE branch per group, evaluated only on the lines
    it matches); no array is read again and no list of answers is made and unnested, as the general
    query does on every line."""
    con, _ = connect()
    source = source_sql(str(LOGS / "responses.jsonl"))
    groups = sample_groups(con, source, prepared_lines)
    fast = one_parse_sql(source, builtin_vocabulary(), groups)
    general = normalise_sql(source, builtin_vocabulary(), groups=groups)
    assert set(_json_calls_on_line(fast)) == {"json_valid", "json_keys", "json_extract_string"}
    assert _json_calls_on_line(fast).count("json_keys") == 1
    # one list read a group, in `CASE grp WHEN g THEN ...`, and an Ollama /api/generate line's `response`
    reads = re.findall(r"WHEN '[^']*' THEN json_extract_string\(line, \[", fast)
    ollama = re.findall(r"WHEN 'ollama' THEN coalesce\([^,]+, json_extract_string\(line, '\$\.response'\)\)", fast)
    assert len(reads) == len(groups) and len(reads) + len(ollama) == _json_calls_on_line(fast).count("json_extract_string")
    assert "unnest" not in fast
    assert "json_extract" in _json_calls_on_line(general) and "unnest" in general
    assert "json_extract" not in _json_calls_on_line(fast)
    assert len(fast) * 3 < len(general)  # and a smaller query to bind


def test_the_synthetic_benchmark_log_needs_no_second_read(tmp_path):
    """On `bench_logs.py`'s log (five shapes, mixed line by line) no line goes to the general query;
    on an OTLP export every line does (spans are lists of answers)."""
    path = tmp_path / "bench.jsonl"
    path.write_text("\n".join(bench_log_lines(3000)) + "\n")
    _, redone = _records(path, one_parse=True)
    assert redone == 0
    otlp = LOGS / "shapes" / "otel-otlp.jsonl"
    _, redone = _records(otlp, one_parse=True)
    assert redone == sum(1 for line in otlp.read_text().splitlines() if line.strip())
