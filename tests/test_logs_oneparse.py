"""The one-parse read of `stopdoctor logs` (#28, `actions.logs.oneparse`): the same records and the
same report as the general query on every fixture shape and on a file mixing them, and the work it
saves counted in JSON parses a line and in lines left to the general query (never in seconds)."""

from __future__ import annotations

import dataclasses
import importlib.util
import random
import re
from pathlib import Path

import pytest

pytest.importorskip("duckdb")

from stopdoctor.actions.logs import query  # noqa: E402
from stopdoctor.actions.logs.groups import sample_groups  # noqa: E402
from stopdoctor.actions.logs.oneparse import one_parse_sql, read_anchors  # noqa: E402
from stopdoctor.actions.logs.query import RECORD_COLUMNS, analyze_logs, connect, normalise_file  # noqa: E402
from stopdoctor.actions.logs.records import normalise_sql, prepared_lines  # noqa: E402
from stopdoctor.actions.logs.report import LogsSettings  # noqa: E402
from stopdoctor.actions.logs.sql import source_sql  # noqa: E402
from stopdoctor.actions.logs.vocabulary import builtin_vocabulary  # noqa: E402

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


def _bench_lines(count: int) -> list[str]:
    """Lines of `benchmarks/bench_logs.py`'s synthetic log (its five shapes, mixed line by line)."""
    spec = importlib.util.spec_from_file_location("bench_logs", ROOT / "benchmarks" / "bench_logs.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rng = random.Random(0)
    return [bench.synthetic_line(i, rng) for i in range(count)]


@pytest.fixture(scope="module")
def mixed(tmp_path_factory) -> Path:
    """Every fixture's lines shuffled together with the odd lines and synthetic ones."""
    lines = [line for path in FIXTURES for line in path.read_text().splitlines()] + ODD_LINES + _bench_lines(300)
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


def test_one_parse_reads_a_line_with_one_json_parse_beside_the_validity_check():
    """Work, not seconds: the one-parse query reads each line's JSON in one `json_extract_string`
    (beside `json_valid`, as DuckDB's own minimal count does; a CASE branch is evaluated only on the
    lines it matches); the general query also reads its key group (`json_keys`) and makes a list of
    answers to unnest."""
    con, _ = connect()
    source = source_sql(str(LOGS / "responses.jsonl"))
    groups = sample_groups(con, source, prepared_lines)
    fast = one_parse_sql(source, builtin_vocabulary(), read_anchors(groups))
    general = normalise_sql(source, builtin_vocabulary(), groups=groups)
    # the list read of every line, and an Ollama /api/generate line's `response` on that shape only
    assert sorted(_json_calls_on_line(fast)) == ["json_extract_string", "json_extract_string", "json_valid"]
    assert len(re.findall(r"json_extract_string\(line, \[", fast)) == 1
    assert re.search(r"WHEN 'ollama' THEN coalesce\(v\[\d+\], json_extract_string\(line, '\$\.response'\)\)", fast)
    assert "unnest" not in fast
    assert "json_keys" in _json_calls_on_line(general) and "unnest" in general
    assert len(fast) * 5 < len(general)  # and a far smaller query to bind


def test_the_synthetic_benchmark_log_needs_no_second_read(tmp_path):
    """On `bench_logs.py`'s log (five shapes, mixed line by line) no line goes to the general query;
    on an OTLP export every line does (spans are lists of answers)."""
    path = tmp_path / "bench.jsonl"
    path.write_text("\n".join(_bench_lines(3000)) + "\n")
    _, redone = _records(path, one_parse=True)
    assert redone == 0
    otlp = LOGS / "shapes" / "otel-otlp.jsonl"
    _, redone = _records(otlp, one_parse=True)
    assert redone == sum(1 for line in otlp.read_text().splitlines() if line.strip())
