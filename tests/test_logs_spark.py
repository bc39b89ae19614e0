"""`stopdoctor logs --engine spark`: every file through DuckDB and through Spark (one local[2]
session for the test session) gives the same report: every count, every example, the flagged
lines and the charts' figures, for every shape fixture; also with each file split into parts of
two lines (so streams, examples and time spans cross parts) and one example per problem. Slow (a
JVM starts); skipped with the reason when Java or pyspark is missing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stopdoctor.logs.query import analyze_logs
from stopdoctor.logs.report import LogsSettings
from stopdoctor.core.errors import InputError

from .test_logs import SHAPES as MIXED
from .test_logs import RUNAWAY, chat, write_jsonl

ROOT = Path(__file__).resolve().parents[1]
LOGS = ROOT / "fixtures" / "logs"
FIXTURES = sorted((LOGS / "shapes").glob("*.jsonl")) + [LOGS / "responses.jsonl", LOGS / "lies.jsonl"]

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::FutureWarning"),
              pytest.mark.filterwarnings("ignore::ResourceWarning")]


@pytest.fixture
def spark_engine(spark_session):
    from stopdoctor.logs.spark import analyze_logs_spark

    return analyze_logs_spark


def _report(report) -> dict:
    """Everything a report says but its time."""
    return {"lines": (report.lines, report.responses, report.bad_lines, report.blank, report.unrecognised,
                      report.multi_choice, report.streams, report.chunks),
            "bad_examples": report.bad_examples, "shapes": report.shapes, "finish": report.finish,
            "finish_raw": report.finish_raw, "finish_native": report.finish_native, "by_model": report.by_model,
            "by_max_tokens": report.by_max_tokens, "stop_reasons": report.stop_reasons,
            "problems": {k: (p.count, p.by_model, p.examples) for k, p in report.problems.items()},
            "flagged": report.flagged, "charts": report.charts}


def _mixed(tmp_path: Path) -> Path:
    lines = [json.dumps(s) for s, _, _ in MIXED]
    lines[3:3] = ["{not json", "", '["a list"]', '{"some": "other log"}']
    path = tmp_path / "mixed.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    return path


@pytest.mark.parametrize("name", [p.name for p in FIXTURES] + ["mixed.jsonl"])
def test_spark_gives_the_report_duckdb_gives_on_every_shape(spark_engine, tmp_path, name):
    path = _mixed(tmp_path) if name == "mixed.jsonl" else next(p for p in FIXTURES if p.name == name)
    duck, spark = analyze_logs([str(path)]), spark_engine([str(path)])
    assert spark.responses > 0
    assert _report(spark) == _report(duck)


@pytest.mark.parametrize("name", ["openai-stream.jsonl", "anthropic-stream.jsonl", "gemini-stream.jsonl",
                                  "otel-otlp.jsonl", "lies.jsonl", "responses.jsonl"])
def test_the_report_does_not_depend_on_how_spark_splits_the_lines(spark_engine, monkeypatch, name):
    # Parts of two lines: a stream's chunks, a problem's first examples, the first and last
    # timestamps all fall in different parts; one example per problem.
    monkeypatch.setenv("STOPDOCTOR_SPARK_CHUNK_LINES", "2")
    path = str(next(p for p in FIXTURES if p.name == name))
    settings = LogsSettings(examples=1)
    assert _report(spark_engine([path], settings=settings)) == _report(analyze_logs([path], settings=settings))


def test_several_files_and_field_overrides(spark_engine, tmp_path):
    custom = write_jsonl(tmp_path / "custom.jsonl", [
        {"out": {"txt": RUNAWAY, "why": "MAX_TOKENS"}, "meta": {"llm": "ours-7b", "budget": 32}},
        {"out": {"txt": "Fine.", "why": "STOP"}, "meta": {"llm": "ours-7b", "budget": 32}},
    ])
    settings = LogsSettings(overrides={"text": "$.out.txt", "finish_reason": "$.out.why", "model": "$.meta.llm",
                                       "max_tokens": "$.meta.budget"})
    assert _report(spark_engine([str(custom)], settings=settings)) == _report(analyze_logs([str(custom)], settings=settings))
    other = write_jsonl(tmp_path / "other.jsonl", [chat("Cut in the", "length")] * 3)
    both = [str(LOGS / "responses.jsonl"), str(other)]
    assert _report(spark_engine(both)) == _report(analyze_logs(both))


def test_input_with_no_response_is_refused_like_duckdb(spark_engine, tmp_path):
    path = write_jsonl(tmp_path / "none.jsonl", [{"some": "other log"}, "{not json"])
    with pytest.raises(InputError, match="no response recognised"):
        spark_engine([str(path)])


def test_gzip_and_parquet_give_the_report_duckdb_gives(spark_engine, tmp_path):
    import gzip

    import duckdb

    plain = LOGS / "lies.jsonl"
    gz = tmp_path / "lies.jsonl.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    parquet = tmp_path / "lies.parquet"
    duckdb.connect().execute(
        f"COPY (SELECT line FROM read_csv('{plain}', columns={{'line': 'VARCHAR'}}, delim='\x01', quote='', "
        f"escape='', header=false, auto_detect=false)) TO '{parquet}' (FORMAT parquet)")
    for path in (gz, parquet):
        assert _report(spark_engine([str(path)])) == _report(analyze_logs([str(path)])), path.name


def test_every_problem_keeps_its_own_first_examples(spark_engine, monkeypatch, tmp_path):
    # Each problem's examples come from rows no other problem keeps: cut answers that end a
    # sentence (budget-truncated only), cut mid-sentence, bad lines; more of each than shown.
    lines = [chat("Cut, but a sentence.", "length"), "{not json", chat("Fine."), chat("Cut in the", "length"),
             chat("Also cut.", "length"), "{bad", chat("Cut in a", "length"), chat("Fine again."), "{worse"]
    path = write_jsonl(tmp_path / "cuts.jsonl", lines * 3)
    monkeypatch.setenv("STOPDOCTOR_SPARK_CHUNK_LINES", "2")
    for examples in (1, 2):
        settings = LogsSettings(examples=examples)
        assert _report(spark_engine([str(path)], settings=settings)) == _report(analyze_logs([str(path)], settings=settings))


def test_the_timeline_is_the_same_when_spark_counts_rows_in_parts(spark_engine, monkeypatch, tmp_path):
    # A span just past 48 five-minute buckets (so 15 minutes), times off the minute: a counted
    # row's time moves within its bucket, the first and last stay exact, so bucket and counts hold.
    start, span, n = 1_767_225_607, 48 * 300 + 30, 200
    lines = [chat("Fine." if i % 3 else "Cut in the", "stop" if i % 3 else "length", created=start + i * span // (n - 1))
             for i in range(n)]
    for line in lines:
        line["created"] = line["choices"][0].pop("created")
    path = write_jsonl(tmp_path / "timed.jsonl", lines)
    monkeypatch.setenv("STOPDOCTOR_SPARK_CHUNK_LINES", "7")
    duck = analyze_logs([str(path)])
    assert duck.charts.timeline.bucket == "15 minutes"
    assert _report(spark_engine([str(path)])) == _report(duck)


def test_a_line_that_is_not_utf8_is_one_bad_line_as_in_duckdb(spark_engine, tmp_path):
    # The DuckDB engine counts such a line as bad; a Spark task's DuckDB must not fail the job on it.
    good = [json.dumps(chat("Fine.")), json.dumps(chat("Cut in the", "length"))]
    path = tmp_path / "latin1.jsonl"
    path.write_bytes((good[0] + "\n").encode() + '{"a": "café"}\n'.encode("latin-1") + (good[1] + "\n").encode())
    duck = analyze_logs([str(path)])
    assert (duck.responses, duck.bad_lines, duck.bad_examples) == (2, 1, ((str(path), 2),))
    assert _report(spark_engine([str(path)])) == _report(duck)


def test_gemini_responses_sharing_an_id_give_the_report_duckdb_gives(spark_engine, monkeypatch, tmp_path):
    # One id logged whole three times (three answers), the last 4 h 0 min 30 s after the first:
    # just past 48 five-minute buckets, so 15 minutes, only if the last answer's own time counts
    # in the span Spark picks the bucket from; then a stream of another id.
    def line(text, finish, time, response_id="r-1"):
        candidate = {"content": {"role": "model", "parts": [{"text": text}]}, "index": 0}
        if finish:
            candidate["finishReason"] = finish
        return {"candidates": [candidate], "responseId": response_id, "modelVersion": "gemini-2.5-flash",
                "createTime": f"2026-01-01T{time}Z"}

    lines = [line("Rome was founded in 753 BC.", "STOP", t) for t in ("00:00:00", "02:00:00", "04:00:30")]
    lines += [line("Rome was", None, "01:00:00", "s-1"), line(" founded", "MAX_TOKENS", "01:00:00", "s-1")]
    path = write_jsonl(tmp_path / "same-id.jsonl", lines)
    duck = analyze_logs([str(path)])
    assert (duck.responses, duck.streams, duck.chunks) == (4, 1, 2)
    assert duck.charts.timeline.bucket == "15 minutes"
    monkeypatch.setenv("STOPDOCTOR_SPARK_CHUNK_LINES", "2")
    assert _report(spark_engine([str(path)])) == _report(duck)


def test_varied_output_tokens_reach_the_driver_as_counts_per_histogram_bin(spark_engine, monkeypatch, tmp_path):
    # A real log's output tokens vary (seeded random here): 6,000 answers, 2 models, 2 max_tokens,
    # times over 2 hours (24 buckets of 5 minutes), in parts of 500 lines. The driver receives at
    # most one counted row per (time bucket, model, max_tokens, histogram bin: `length` only in the
    # last), the first and last times, and each part's first cut answers (5 examples, cut
    # mid-sentence too: at most 14 parts): not one per distinct output tokens (~6,000 before).
    # The report is still DuckDB's.
    import random

    from stopdoctor.logs.report import HISTOGRAM_BINS
    from stopdoctor.logs.spark import counted_records, session
    from stopdoctor.logs.vocabulary import builtin_vocabulary

    rng, start, lines = random.Random(21), 1_767_225_600, []
    for _ in range(6_000):
        model, budget = rng.choice(["m-a", "m-b"]), rng.choice([256, 1024])
        tokens = rng.randint(1, budget)
        cut = tokens == budget
        answer = chat("Cut in the" if cut else "Fine.", "length" if cut else "stop", model)
        answer.update(created=start + rng.randrange(7_200), usage={"completion_tokens": tokens})
        lines.append({"request": {"model": model, "max_tokens": budget, "messages": []}, "response": answer})
    path = str(write_jsonl(tmp_path / "varied.jsonl", lines))
    monkeypatch.setenv("STOPDOCTOR_SPARK_CHUNK_LINES", "500")
    duck = analyze_logs([path])
    assert duck.charts.timeline.bucket == "5 minutes" and len(duck.charts.histograms) == 4
    assert _report(spark_engine([path])) == _report(duck)
    table, count = counted_records(session(), path, builtin_vocabulary(), LogsSettings())
    assert count == 6_000
    assert set(duck.finish) == {"stop", "length"}
    bound = len(duck.charts.timeline.rows) * 4 * (HISTOGRAM_BINS + 1) + 2 + 14 * 5
    assert table.num_rows <= bound < 6_000 // 2
