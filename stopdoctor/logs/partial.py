"""A part of a log's records reduced to what the summary reads, so that an engine that reads the
log in parts (`logs.spark`) sends counts, not rows, to the driver.

A part's records (`logs.records`, the columns of the records table) become rows with a
`weight`: the rows the summary shows or diagnoses one by one are kept whole (weight 1): every turn
candidate (diagnosed in Python), and per problem the part's first rows in line order, as many as
the summary can print or list; every other row is counted, its columns reduced to those a count
groups by. Whatever the split into parts, the first rows of the whole log are among the first rows
of the parts, so the examples are exact; every count is exact.

Output tokens: the summary reads them only as the histogram's bin against max_tokens (`summary.charts`)
and whether they were logged, so a counted row groups by that bin, not by the raw value, and keeps
one number in it: the bin's least whole number where it falls in the bin (the same in every part, so
Spark sums the parts' rows into one), else the group's least output tokens; 0 where max_tokens is
not a positive number (no bin). On a log of varied output tokens the rows a part sends grow with
the bins, not with the answers.

Timestamps: a counted row's time is moved within its time bucket, never out of it, and the parts'
earliest and latest times are kept exact, so the timeline's bucket (chosen from the span) and its
counts are those of the whole rows: first to the minute (`part_sql`, every bucket is whole
minutes), then, once the span is known, to the timeline's bucket (`bucketed_sql`).

Imports: logs (records, report's bins, sql, summary's limits, conditions and bins, vocabulary).
Builds text only.
"""

from __future__ import annotations

from stopdoctor.logs.records import streams_sql
from stopdoctor.logs.report import HISTOGRAM_BINS
from stopdoctor.logs.sql import sql_string
from stopdoctor.logs.summary import BAD_EXAMPLES, FLAGGED_LIMIT, LIE_CONDITIONS, SIZED_MAX_TOKENS, token_bin
from stopdoctor.logs.vocabulary import TurnVocabulary
from stopdoctor.analysis.repetition import REPETITION_THRESHOLD

# Columns a counted row keeps; the others (line numbers, texts, example details) become NULL.
# A degenerate-repetition score is kept as whether it passed the threshold; output tokens as
# their histogram bin (`_TOKENS`).
COUNTED = ("file", "blank", "bad", "shape", "finish_raw", "finish", "model", "max_tokens", "stop_reason",
           "output_tokens", "ts", "chunks", "turn_candidate", "mid_sentence", "multi_choice", "truncated_finished",
           "repetition", "reasoning_budget", "empty_stop")
RECORD_NAMES = ("file", "line_no", "choice", "blank", "bad", "shape", "finish_raw", "finish", "model", "max_tokens",
                "stop_reason", "output_tokens", "reasoning_tokens", "ts", "chunks", "turn_candidate", "mid_sentence",
                "candidate_text", "tail", "multi_choice", "truncated_finished", "repetition", "reasoning_budget",
                "reasoning_share", "think_ends", "empty_answer", "empty_stop", "text", "reasoning", "finish_hint", "stream_id")


# A counted row's histogram bin, as `summary.charts` reads it; NULL without a positive max_tokens or
# output tokens (guarded: least() and greatest() skip a NULL).
_BIN = (f"CASE WHEN {SIZED_MAX_TOKENS} > 0 AND output_tokens IS NOT NULL "
        f"THEN {token_bin('output_tokens', SIZED_MAX_TOKENS)} END")
# The output tokens a counted row keeps (grouped by `token_bin` and `tokens_logged`): the bin's least
# whole number if the summary puts it in the bin, else the group's least (`least_tokens`); 0 with no bin.
_LEAST = f"try_cast(ceil(token_bin * {SIZED_MAX_TOKENS} / {HISTOGRAM_BINS}.0) AS BIGINT)"
_TOKENS = (f"CASE WHEN token_bin IS NOT NULL THEN CASE WHEN {_LEAST} IS NOT NULL "
           f"AND {token_bin(_LEAST, SIZED_MAX_TOKENS)} = token_bin "
           f"THEN {_LEAST} ELSE least_tokens END WHEN tokens_logged THEN 0 END")


def _kept(relation: str, examples: int) -> str:
    """(line_no, choice) of the rows of `relation` the summary reads one by one."""
    limits = [("bad", BAD_EXAMPLES), ("finish = 'length'", examples), ("mid_sentence", examples)]
    limits += [(condition, max(examples, FLAGGED_LIMIT)) for condition in LIE_CONDITIONS.values()]
    firsts = [f"SELECT * FROM (SELECT line_no, choice FROM {relation} WHERE {condition} "
              f"ORDER BY line_no, choice LIMIT {limit})" for condition, limit in limits]
    return " UNION ".join([f"SELECT line_no, choice FROM {relation} WHERE turn_candidate AND candidate_text IS NOT NULL",
                           *firsts])


def _reduced(relation: str, examples: int, ts: str) -> str:
    """`relation`'s rows (records, answers only: no chunk of a stream) reduced: kept whole or counted,
    a counted row's time mapped by `ts` (an expression over `ts`)."""
    counted = ", ".join(
        {"ts": f"{ts} AS ts", "repetition": f"CASE WHEN repetition >= {REPETITION_THRESHOLD} THEN "
                                            f"{REPETITION_THRESHOLD} END AS repetition"}.get(name, name)
        for name in COUNTED if name != "output_tokens")
    nulls = ", ".join(f"NULL AS {name}" for name in RECORD_NAMES if name not in COUNTED)
    return f"""
    SELECT r.*, 1::BIGINT AS weight FROM {relation} r SEMI JOIN kept k
        ON r.line_no = k.line_no AND r.choice IS NOT DISTINCT FROM k.choice
    UNION ALL BY NAME
    SELECT * EXCLUDE (token_bin, tokens_logged, least_tokens), {_TOKENS} AS output_tokens FROM (
        SELECT {counted}, token_bin, tokens_logged, min(output_tokens) AS least_tokens, {nulls},
               count(*)::BIGINT AS weight FROM (
            SELECT *, {_BIN} AS token_bin, output_tokens IS NOT NULL AS tokens_logged FROM (
                SELECT * FROM {relation} r ANTI JOIN kept k
                    ON r.line_no = k.line_no AND r.choice IS NOT DISTINCT FROM k.choice)
        ) GROUP BY ALL)"""


def part_sql(relation: str, examples: int) -> str:
    """A part of the records (`relation`, every records column): its answers reduced, a counted
    row's time to the minute (the part's earliest and latest times kept); the chunks of streamed
    responses kept whole, to be grouped with the stream's other chunks (`bucketed_sql`)."""
    minute = ("CASE WHEN ts IS NULL THEN NULL WHEN ts = (SELECT lo FROM span) OR ts = (SELECT hi FROM span) THEN ts "
              "ELSE greatest(date_trunc('minute', ts), (SELECT lo FROM span)) END")
    return f"""
WITH answers AS (SELECT * FROM {relation} WHERE coalesce(chunks, 1) <> 0),
span AS (SELECT min(ts) AS lo, max(ts) AS hi FROM answers),
kept AS ({_kept('answers', examples)})
{_reduced('answers', examples, minute)}
UNION ALL BY NAME
SELECT *, 1::BIGINT AS weight FROM {relation} WHERE chunks = 0
"""


def bucketed_sql(relation: str, file: str, vocabulary: TurnVocabulary, examples: int,
                 bucket: str | None, first: str | None, last: str | None) -> str:
    """Reduced parts (`relation`, from `part_sql`, each stream's chunks all in it): the streams
    grouped into answers and reduced, and every counted row's time moved to the start of its
    timeline bucket (`bucket`, chosen from the whole log's `first` and `last` answer times, kept
    exact), never before `first`."""
    if bucket is None:
        moved = "ts"
    else:
        assert first is not None and last is not None  # a bucket is chosen from them
        lo, hi = (f"CAST({sql_string(t)} AS TIMESTAMP)" for t in (first, last))
        moved = (f"CASE WHEN ts IS NULL THEN NULL WHEN ts = {lo} OR ts = {hi} THEN ts "
                 f"ELSE greatest(time_bucket(INTERVAL '{bucket}', ts), {lo}) END")
    chunk_columns = ", ".join(name for name in RECORD_NAMES if name != "file")
    return f"""
WITH chunk_rows AS (SELECT {chunk_columns} FROM {relation} WHERE chunks = 0),
streamed AS (SELECT {sql_string(file)} AS file, * FROM ({streams_sql('chunk_rows', vocabulary)})),
kept AS ({_kept('streamed', examples)})
{_reduced('streamed', examples, moved)}
UNION ALL BY NAME
SELECT * REPLACE (CASE WHEN line_no IS NULL THEN {moved} ELSE ts END AS ts) FROM {relation} WHERE chunks <> 0
"""
