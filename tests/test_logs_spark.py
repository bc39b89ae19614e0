"""`stopdoctor logs --engine spark`: the same files through DuckDB and through Spark (a local[2]
session) give the same counts and the same problem counts; a shape Spark does not read yet is
refused with one line. Slow (a JVM starts); skipped with the reason when Java or pyspark is missing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from stopdoctor.actions.logs.query import analyze_logs
from stopdoctor.core.errors import InputError

from .test_logs import SHAPES as MIXED

ROOT = Path(__file__).resolve().parents[1]
LOGS = ROOT / "fixtures" / "logs"

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::FutureWarning"),
              pytest.mark.filterwarnings("ignore::ResourceWarning")]


@pytest.fixture(scope="module")
def spark_engine():
    if shutil.which("java") is None:
        pytest.skip("no Java runtime: apt-get install -y default-jre-headless (the .ci/run script does)")
    pytest.importorskip("pyspark", reason="pyspark not installed: pip install 'stopdoctor[spark]'")
    from stopdoctor.actions.logs.spark import analyze_logs_spark, session

    session()
    return analyze_logs_spark


def _counts(report):
    return {"lines": (report.lines, report.responses, report.bad_lines, report.blank, report.unrecognised),
            "shapes": report.shapes, "finish": report.finish, "finish_raw": report.finish_raw,
            "finish_native": report.finish_native, "by_model": report.by_model, "by_max_tokens": report.by_max_tokens,
            "stop_reasons": report.stop_reasons,
            "problems": {k: (p.count, p.by_model) for k, p in report.problems.items()}, "flagged": report.flagged}


def _mixed(tmp_path: Path) -> Path:
    lines = [json.dumps(s) for s, _, _ in MIXED]
    lines[3:3] = ["{not json", "", '["a list"]', '{"some": "other log"}']
    path = tmp_path / "mixed.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    return path


def test_spark_gives_the_counts_duckdb_gives(spark_engine, tmp_path):
    for path in (LOGS / "responses.jsonl", LOGS / "lies.jsonl", _mixed(tmp_path)):
        duck, spark = analyze_logs([str(path)]), spark_engine([str(path)])
        assert _counts(spark) == _counts(duck), path.name
        assert spark.responses > 0


def test_a_shape_spark_does_not_read_is_refused_in_one_line(spark_engine):
    with pytest.raises(InputError, match=r"--engine spark reads .*gemini \d+.*use --engine duckdb"):
        spark_engine([str(LOGS / "shapes" / "gemini.jsonl")])
