"""`stopdoctor logs --engine spark`: the per-line reading (parse, shape, fields) on Apache Spark,
for logs that live in a lake; the flags and the summary then run on the driver over the answers'
rows, in DuckDB, by the same SQL as the DuckDB engine.

One source of truth: the JSON paths and the expressions that detect a line's shape and pick its
fields are `actions.logs.records.scalar_line_sql()`, the very SQL the DuckDB query uses, run by
Spark SQL over `v = array(get_json_object(line, path), ...)` (only the 1-based list indexing and
one type name are rewritten). Spark reads the shapes whose answer is one scalar path: OpenAI
chat and completions (a request+response pair, batch output; vLLM/SGLang stop reasons), Ollama,
TGI and llama.cpp. A file with another shape (Anthropic, Bedrock, Gemini, Responses, streamed
chunks, OpenTelemetry spans) or an n > 1 response is refused with one line naming them.

Imports: core, actions.logs (records, query, report, sql, vocabulary); pyspark and pyarrow lazily.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Sequence

from stopdoctor.actions.logs.query import open_records, records_report
from stopdoctor.actions.logs.records import answers_sql, scalar_line_sql
from stopdoctor.actions.logs.report import LogsReport, LogsSettings
from stopdoctor.actions.logs.sql import is_parquet, sql_string
from stopdoctor.actions.logs.vocabulary import TurnVocabulary, builtin_vocabulary
from stopdoctor.core.errors import InputError, MissingDependencyError

SPARK_SHAPES = ("openai-chat", "openai-completions", "ollama", "tgi", "llama.cpp", "other")


def spark_sql(expr: str) -> str:
    """A field expression of the DuckDB query as Spark SQL: `v[k]` (1-based) -> element_at."""
    return re.sub(r"\bv\[(\d+)\]", r"element_at(v, \1)", expr).replace("AS VARCHAR)", "AS STRING)")


def spark_path(path: str) -> str:
    """A JSON path as get_json_object reads it (`$."@timestamp"` -> `$['@timestamp']`)."""
    return re.sub(r'\."([^"]*)"', lambda m: "['" + m.group(1).replace("'", "\\'") + "']", path)


def lines_query(view: str) -> str:
    """Spark SQL: one row per line of `view` (`line_no`, `line`) with the fields of its one answer."""
    paths, fields = scalar_line_sql()
    values = ", ".join(f"get_json_object(line, {sql_string(spark_path(p))})" for p in paths)
    columns = ", ".join(f"{spark_sql(fields[name])} AS {name}" for name in fields if name != "kind")
    return f"""
WITH prepared AS (
    SELECT line_no, CASE WHEN startswith(line, 'data:') THEN ltrim(substr(line, 6)) ELSE line END AS line FROM {view}
), parsed AS (
    SELECT line_no, line IS NULL OR trim(line) IN ('', '[DONE]') OR startswith(line, 'event:') AS blank,
           CASE WHEN get_json_object(line, '$') IS NOT NULL THEN array({values}) END AS v
    FROM prepared
), kinded AS (
    SELECT *, {spark_sql(fields['kind'])} AS kind FROM parsed
)
SELECT line_no, blank, v IS NULL AND NOT blank AS bad, kind, {columns} FROM kinded
"""


def session():
    """The active Spark session, or a local one (`STOPDOCTOR_SPARK_MASTER`, default local[2]);
    under spark-submit the master is the one submitted to."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise MissingDependencyError("--engine spark needs pyspark and a Java runtime",
                                     hint="pip install 'stopdoctor[spark]' (and a JRE 17+, e.g. apt-get install "
                                          "default-jre-headless)") from None
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    builder = SparkSession.builder.appName("stopdoctor logs")
    if "SPARK_HOME" not in os.environ or os.environ.get("STOPDOCTOR_SPARK_MASTER"):
        builder = builder.master(os.environ.get("STOPDOCTOR_SPARK_MASTER", "local[2]"))
    builder = builder.config("spark.ui.enabled", "false").config("spark.sql.session.timeZone", "UTC")
    # The per-line query is one large expression tree (every shape's fields); Catalyst's planning of
    # it overflows the default 1 GB driver heap (java.lang.OutOfMemoryError seen in the parity test).
    # Applies to a local session only: under spark-submit the driver is already running.
    builder = builder.config("spark.driver.memory", os.environ.get("STOPDOCTOR_SPARK_DRIVER_MEMORY", "3g"))
    return builder.getOrCreate()


def _read(spark, path: str):
    """The lines of one file (JSONL, .gz, Parquet; any path Spark's file systems open: s3a://,
    gs://, abfss://, hdfs://), numbered from 1 in file order."""
    from pyspark.sql import functions as F

    if is_parquet(path):
        frame = spark.read.parquet(path)
        if len(frame.columns) == 1 and dict(frame.dtypes)[frame.columns[0]] == "string":
            frame = frame.select(F.col(frame.columns[0]).alias("value"))
        else:
            frame = frame.select(F.to_json(F.struct(*frame.columns)).alias("value"))
    else:
        frame = spark.read.text(path)
    numbered = frame.rdd.zipWithIndex().map(lambda row: (row[1] + 1, row[0][0]))
    return spark.createDataFrame(numbered, "line_no LONG, line STRING")


def analyze_logs_spark(paths: Sequence[str], vocabulary: TurnVocabulary | None = None,
                       settings: LogsSettings = LogsSettings()) -> LogsReport:
    """The report of `actions.logs.query.analyze_logs`, the lines read by Spark."""
    if settings.overrides:
        raise InputError("--engine spark does not read --field yet: use --engine duckdb")
    vocabulary = vocabulary or builtin_vocabulary()
    started = time.perf_counter()
    spark = session()
    con = open_records()
    lines = 0
    for path in paths:
        _read(spark, path).createOrReplaceTempView("stopdoctor_lines")
        rows = spark.sql(lines_query("stopdoctor_lines"))
        refused = rows.where("kind IS NOT NULL AND (NOT kind IN ({}) OR multi_choice)".format(
            ", ".join(sql_string(s) for s in SPARK_SHAPES))).groupBy("kind").count().collect()
        if refused:
            found = ", ".join(f"{r['kind']} {r['count']}" for r in sorted(refused, key=lambda r: r["kind"]))
            raise InputError(f"{path}: --engine spark reads OpenAI chat/completions (one choice), Ollama, TGI and "
                             f"llama.cpp lines; this file also has {found} (n > 1 included): use --engine duckdb")
        answers = rows.selectExpr(
            "line_no", "0 AS choice", "blank", "bad", "kind", "finish_raw", "CAST(NULL AS STRING) AS finish_hint",
            "scalar_text AS text", "scalar_reasoning AS reasoning", "model", "max_tokens", "output_tokens",
            "reasoning_tokens", "stop_reason", "CAST(NULL AS TIMESTAMP) AS ts", "false AS multi_choice",
            "CAST(NULL AS STRING) AS stream_id")
        con.register("spark_answers", answers.toArrow())
        con.execute(f"INSERT INTO rec SELECT {sql_string(path)} AS file, * FROM ({answers_sql('spark_answers', vocabulary)})")
        con.unregister("spark_answers")
        lines += con.execute("SELECT coalesce(max(line_no), 0) FROM rec WHERE file = ?", [path]).fetchone()[0]
    return records_report(con, paths, vocabulary, settings, lines, started)
