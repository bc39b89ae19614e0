"""`stopdoctor logs --engine spark`: the DuckDB engine's analysis run on Apache Spark, for logs
that live in a lake; every shape the DuckDB engine reads, `--field` included.

One source of truth: each Spark task runs the DuckDB engine's own normalising query
(`logs.records.normalise_sql`, built once on the driver) in an embedded DuckDB over its
part of the lines (`mapInArrow`, Arrow batches in and out), and reduces the records it made to
counts and the few rows the report shows (`logs.partial`). The chunks of streamed
responses meet by stream id after a shuffle and are grouped into answers there; Spark sums the
counts. The driver receives only those sums and rows, and the DuckDB engine's own summary reads
them (`logs.query.records_report`): the counts are the DuckDB engine's, not a second
implementation of them.

The executors need stopdoctor (and so duckdb) installed, as they need pyspark: under spark-submit
ship the same environment (`--archives env.tar.gz#env`, PYSPARK_PYTHON=./env/bin/python).

Imports: core, logs (groups, inputs, partial, query, records, report, sql, summary, vocabulary);
pyspark, pyarrow and duckdb lazily.
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from collections.abc import Sequence

from stopdoctor.logs.groups import SAMPLE_LINES, sample_groups
from stopdoctor.logs.partial import RECORD_NAMES, bucketed_sql, part_sql
from stopdoctor.logs.query import RECORD_COLUMNS, connect, open_counted_records, records_report
from stopdoctor.logs.records import normalise_sql, prepared_lines
from stopdoctor.logs.report import LogsSummary, LogsSettings
from stopdoctor.logs.inputs import NOT_UTF8_LINE, check_log_file
from stopdoctor.logs.sql import is_parquet, is_remote, sql_string
from stopdoctor.logs.summary import timeline_bucket
from stopdoctor.logs.vocabulary import TurnVocabulary, builtin_vocabulary
from stopdoctor.core.errors import InputError, MissingDependencyError

# Lines a task normalises in one DuckDB query (binding the query takes ~0.3 s); any size gives the
# same report (STOPDOCTOR_SPARK_CHUNK_LINES sets it: the tests split a fixture into parts of 2 lines).
CHUNK_LINES = 100_000
TASK_MEMORY = "512MB"  # each task's DuckDB; past it, it spills to the temp folder
# The records' columns as Spark types (a record's time is a UTC wall time: TIMESTAMP_NTZ).
SCHEMA = ("file STRING, " + RECORD_COLUMNS.replace("VARCHAR", "STRING").replace("TIMESTAMP", "TIMESTAMP_NTZ")
          + ", weight BIGINT")


def session():
    """The active Spark session, or a local one (`STOPDOCTOR_SPARK_MASTER`, default local[2]);
    under spark-submit the master is the one submitted to. A JVM started here writes its own talk
    (JVM and log4j warnings, progress bars, its Python workers' stderr) to a log file
    (`stopdoctor-spark-*.log` in the temp folder, removed at exit unless STOPDOCTOR_DEBUG is set),
    not to the user's stderr."""
    try:
        from pyspark import SparkConf
        from pyspark.sql import SparkSession
    except ImportError:
        raise MissingDependencyError("--engine spark needs pyspark and a Java runtime",
                                     hint="pip install 'stopdoctor[spark]' (and a JRE 17+, e.g. apt-get install "
                                          "default-jre-headless)") from None
    # pyspark warns that it does not fully support pandas 3; the engine hands Spark Arrow batches
    # (mapInArrow) and never a pandas frame, so the warning says nothing about this run.
    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas", category=FutureWarning)
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    # A local session's Python workers run this interpreter (its stopdoctor, duckdb and pyarrow),
    # not whichever python3 is first on PATH.
    if "SPARK_HOME" not in os.environ:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    conf = SparkConf().setAppName("stopdoctor logs")
    if "SPARK_HOME" not in os.environ or os.environ.get("STOPDOCTOR_SPARK_MASTER"):
        conf.setMaster(os.environ.get("STOPDOCTOR_SPARK_MASTER", "local[2]"))
    conf.set("spark.ui.enabled", "false").set("spark.sql.session.timeZone", "UTC")
    conf.set("spark.ui.showConsoleProgress", "false")  # the command shows its own progress
    # Applies to a local session only: under spark-submit the driver is already running. The driver
    # holds only counts and the rows the report shows; Spark's default 1 GB is enough.
    if os.environ.get("STOPDOCTOR_SPARK_DRIVER_MEMORY"):
        conf.set("spark.driver.memory", os.environ["STOPDOCTOR_SPARK_DRIVER_MEMORY"])
    if "PYSPARK_GATEWAY_PORT" not in os.environ:  # no JVM yet (not under spark-submit): start it quietly
        _start_jvm(conf)
    return SparkSession.builder.config(conf=conf).getOrCreate()


def _start_jvm(conf) -> None:
    """Launch the driver's JVM with its stdout and stderr in a log file, and make its context the
    active one (the session builder then uses it). A JVM that does not start is said in one line,
    with the end of its log."""
    import tempfile

    from pyspark import SparkContext
    from pyspark.java_gateway import launch_gateway

    with tempfile.NamedTemporaryFile("w+b", prefix="stopdoctor-spark-", suffix=".log", delete=False) as log:
        try:
            gateway = launch_gateway(conf, popen_kwargs={"stdout": log, "stderr": log})
        except Exception as error:  # noqa: BLE001 - pyspark's JAVA_GATEWAY_EXITED, or no java to run
            log.seek(0)
            said = [line for line in log.read().decode("utf-8", "replace").splitlines() if line.strip()][-3:]
            raise MissingDependencyError(
                f"--engine spark: the Java runtime did not start ({'; '.join(said) or error})",
                hint=f"Spark 4 needs a JRE 17+ (apt-get install default-jre-headless); its log: {log.name}") from None
    if not os.environ.get("STOPDOCTOR_DEBUG"):  # kept for a look with the debug variable; else gone at exit
        import atexit

        atexit.register(lambda: os.unlink(log.name) if os.path.exists(log.name) else None)
    context = SparkContext(conf=conf, gateway=gateway)
    context.setLogLevel("ERROR")  # Spark's own warnings (a loopback hostname, plan strings cut) stay in the log


def _lines(spark, path: str):
    """The lines of one file (JSONL, .gz, Parquet; any path Spark's file systems open: s3a://,
    gs://, abfss://, hdfs://) as (`line_no`, `line`), numbered from 1 in file order, and how many.

    Numbered without bringing a line to Python: a part's rows are counted (one small job), and a
    line's number is the lines of the parts before it plus its place in its part."""
    from pyspark.sql import functions as F

    if is_parquet(path):
        frame = spark.read.parquet(path)
        if len(frame.columns) == 1 and dict(frame.dtypes)[frame.columns[0]] == "string":
            frame = frame.select(F.col(frame.columns[0]).alias("value"))
        else:
            frame = frame.select(F.to_json(F.struct(*frame.columns)).alias("value"))
    else:
        frame = spark.read.text(path)
    # Spark hands a line's bytes on as they are; a line that is not UTF-8 is one bad line, as the
    # DuckDB engine counts it (a task's DuckDB would refuse the whole part).
    frame = frame.select(F.when(F.is_valid_utf8("value"), F.col("value"))
                         .otherwise(F.lit(NOT_UTF8_LINE.decode())).alias("value"))
    part = F.spark_partition_id()
    counts = dict(frame.groupBy(part.alias("part")).count().collect())
    offsets, total = [], 0
    for index in range(frame.rdd.getNumPartitions()):
        offsets.append(total)
        total += counts.get(index, 0)
    if not total:
        return frame.select(F.lit(0).cast("long").alias("line_no"), F.col("value").alias("line")), 0
    # monotonically_increasing_id is the part's index << 33 plus the row's place in the part.
    place = F.monotonically_increasing_id() - F.shiftleft(part.cast("long"), 33)
    line_no = F.element_at(F.array(*[F.lit(o).cast("long") for o in offsets]), part + 1) + place + 1
    return frame.select(line_no.alias("line_no"), F.col("value").alias("line")), total


def _duckdb():
    con, _ = connect()
    con.execute("SET threads = 1")  # Spark runs the tasks side by side
    con.execute(f"SET memory_limit = {sql_string(os.environ.get('STOPDOCTOR_SPARK_TASK_MEMORY', TASK_MEMORY))}")
    return con


def _out(con, sql: str, arrow_schema):
    table = con.sql(sql).to_arrow_table()
    return table.select(arrow_schema.names).cast(arrow_schema).to_batches()


def _normaliser(query: str, file: str, examples: int, arrow_schema, chunk_lines: int):
    """A task: its lines' records, reduced (`partial.part_sql`), `chunk_lines` lines at a time."""
    def run(batches):
        import pyarrow as pa

        con = _duckdb()
        reduce = part_sql("part", examples)

        def chunk(pending):
            con.register("lines", pa.Table.from_batches(pending))
            con.execute(f"CREATE OR REPLACE TEMP TABLE part AS SELECT {sql_string(file)} AS file, * FROM ({query})")
            con.unregister("lines")
            return _out(con, reduce, arrow_schema)

        pending, size = [], 0
        for batch in batches:
            pending.append(batch)
            size += batch.num_rows
            if size >= chunk_lines:
                yield from chunk(pending)
                pending, size = [], 0
        if pending:
            yield from chunk(pending)
        con.close()
    return run


def _grouper(sql: str, arrow_schema):
    """A task after the shuffle: its streams grouped into answers, its counted rows' times bucketed."""
    def run(batches):
        import pyarrow as pa

        batches = list(batches)
        if not batches:
            return
        con = _duckdb()
        con.register("parts", pa.Table.from_batches(batches))
        yield from _out(con, sql, arrow_schema)
        con.close()
    return run


def counted_records(spark, path: str, vocabulary: TurnVocabulary, settings: LogsSettings):
    """The counted records of one file (Arrow, `partial`'s rows summed over the tasks: all the
    driver receives of it) and its number of lines."""
    import pyarrow as pa
    from pyspark import StorageLevel
    from pyspark.sql import Window
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import to_arrow_schema

    lines, total = _lines(spark, path)
    if not total:
        return None, 0
    schema = spark.createDataFrame([], SCHEMA).schema
    large = str(spark.conf.get("spark.sql.execution.arrow.useLargeVarTypes", "false")).lower() == "true"
    arrow_schema = to_arrow_schema(schema, prefers_large_types=large)
    # The key groups of the first lines (a speed-up only: any groups give the same records).
    groups = {}
    if not settings.overrides:
        con, _ = connect()
        con.register("sample", lines.limit(SAMPLE_LINES).toArrow())
        groups = sample_groups(con, "sample", prepared_lines)
        con.close()
    query = normalise_sql("lines", vocabulary, settings.overrides, groups)
    chunk_lines = int(os.environ.get("STOPDOCTOR_SPARK_CHUNK_LINES", CHUNK_LINES))
    parts = lines.mapInArrow(_normaliser(query, path, settings.examples, arrow_schema, chunk_lines), schema)
    persisted = parts.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        # An Anthropic event's stream is the last message_start's before it in the file, across
        # the parts: resolved here, in line order, before the chunks meet by stream id.
        ordered = Window.partitionBy("shape").orderBy("line_no").rowsBetween(Window.unboundedPreceding, 0)
        parts = persisted.where("chunks <> 0").unionByName(persisted.where("chunks = 0").withColumn(
            "stream_id", F.coalesce(F.col("stream_id"), F.last("stream_id", ignorenulls=True).over(ordered))))
        # The timeline's bucket, from the first and last answer (a stream's time: its first chunk's;
        # Gemini lines of one id are answers split after each line with a finish, as `streams_sql` does).
        segment = Window.partitionBy("shape", "stream_id", "choice").orderBy("line_no").rowsBetween(
            Window.unboundedPreceding, -1)
        answer_no = F.when(F.col("shape") == "gemini", F.coalesce(F.count("finish_raw").over(segment), F.lit(0)))
        answers = parts.where("chunks <> 0 AND shape IS NOT NULL").select("ts").unionByName(
            parts.where("chunks = 0").withColumn("answer_no", answer_no.otherwise(0))
            .groupBy("shape", "stream_id", "choice", "answer_no").agg(F.min("ts").alias("ts")).select("ts"))
        first, last = answers.agg(F.min("ts"), F.max("ts")).first()
        bucket = None if first is None else timeline_bucket(first, last)
        sql = bucketed_sql("parts", path, vocabulary, settings.examples, bucket,
                           None if first is None else first.isoformat(sep=" "),
                           None if last is None else last.isoformat(sep=" "))
        # A stream's chunks meet in one task; every other row goes anywhere.
        route = F.when(F.col("chunks") == 0, F.col("stream_id")).otherwise(F.monotonically_increasing_id().cast("string"))
        grouped = parts.repartition(spark.sparkContext.defaultParallelism, route).mapInArrow(
            _grouper(sql, arrow_schema), schema)
        summed = grouped.groupBy(*RECORD_NAMES).agg(F.sum("weight").cast("long").alias("weight"))
        table = summed.toArrow()
    finally:
        persisted.unpersist()
    return pa.table(table), total


def analyze_logs_spark(paths: Sequence[str], vocabulary: TurnVocabulary | None = None,
                       settings: LogsSettings = LogsSettings()) -> LogsSummary:
    """The report of `logs.query.analyze_logs`, the lines read by Spark."""
    if not paths:
        raise InputError("no log file given", hint="stopdoctor logs --engine spark responses.jsonl [more …]")
    for path in paths:
        if not is_remote(path):
            check_log_file(path)
    vocabulary = vocabulary or builtin_vocabulary()
    started = time.perf_counter()
    spark = session()
    con = open_counted_records()
    lines = 0
    try:
        for path in paths:
            table, count = counted_records(spark, path, vocabulary, settings)
            lines += count
            if table is not None:
                con.register("summed", table)
                con.execute("INSERT INTO counted BY NAME SELECT * FROM summed")
                con.unregister("summed")
    except BaseException:
        con.close()
        raise
    return records_report(con, paths, vocabulary, settings, lines, started)
