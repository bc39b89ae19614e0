"""The records table summarised beyond the finish-reason counts: the problems of finish
reasons that lie (`truncated-but-reported-finished`, `degenerate-repetition`,
`reasoning-consumed-budget`, `empty-answer`, flagged per answer by `logs.flags.derived_sql`) and the
figures the pictures are drawn from (output tokens against max_tokens, finish reasons over time).
Every figure is a GROUP BY in DuckDB; only the examples that are printed come back to Python.

Imports: logs (flags' thresholds and lie conditions, report). Runs SQL on a connection it is given.
"""

from __future__ import annotations

from collections.abc import Callable

from stopdoctor.logs.flags import LIE_CONDITIONS, REASONING_SHARE
from stopdoctor.analysis.repetition import REPETITION_THRESHOLD
from stopdoctor.logs.report import HISTOGRAM_BINS, PROBLEMS, Charts, Example, Problem, Timeline, TokenHistogram

BAD_EXAMPLES = 5  # bad lines whose numbers the report shows
FLAGGED_LIMIT = 10_000  # flagged (file, line) listed per problem of a lie

def _detail(key: str, finish, tail, output_tokens, max_tokens, repetition, reasoning_share, think_ends,
            empty_answer) -> str:
    if key == "truncated-but-reported-finished":
        return f"{output_tokens:,} output tokens = max_tokens {max_tokens}"
    if key == "empty-answer":
        return "finish_reason stop, no answer text"
    if key == "degenerate-repetition":
        if repetition is None or repetition < REPETITION_THRESHOLD:
            return "finish_reason repetition: the engine stopped a loop"
        if tail and not any(c.isspace() for c in tail.strip()):  # scored on a run without whitespace
            return f"{repetition * 100:.0f}% of the character 8-grams of its last run without spaces repeat"
        return f"{repetition * 100:.0f}% of its last word 4-grams repeat"
    parts = []
    if empty_answer:
        parts.append("no answer after the reasoning")
    if reasoning_share is not None and reasoning_share >= REASONING_SHARE:
        parts.append(f"reasoning {reasoning_share * 100:.0f}% of {output_tokens:,} output tokens")
    if think_ends and think_ends > 1:
        parts.append(f"</think> {think_ends} times")
    return ", ".join(parts)


def lie_problems(con, examples: int, responses: int,
                 per_model: Callable[[str], dict[str, int]]) -> tuple[dict[str, Problem], dict[str, tuple]]:
    """The problems of lies with their examples, and every flagged (file, line) of each."""
    problems: dict[str, Problem] = {}
    flagged: dict[str, tuple] = {}
    counts = con.execute("SELECT " + ", ".join(f"count(*) FILTER ({c})" for c in LIE_CONDITIONS.values())
                         + " FROM rec").fetchone()  # one scan for the four counts
    for (key, condition), count in zip(LIE_CONDITIONS.items(), counts):
        rows = con.execute(
            "SELECT file, line_no, model, finish, finish_raw, tail, output_tokens, max_tokens, repetition, "
            f"reasoning_share, think_ends, empty_answer FROM rec WHERE {condition} ORDER BY file, line_no, choice "
            f"LIMIT {examples}").fetchall()
        shown = tuple(Example(f, line, model, finish, tail or "", _detail(key, finish, tail, *rest), native)
                      for f, line, model, finish, native, tail, *rest in rows)
        problems[key] = Problem(key, PROBLEMS[key], count, count / responses if responses else 0.0, shown,
                                per_model(condition) if count else {})
        flagged[key] = tuple(con.execute(f"SELECT file, line_no FROM rec WHERE {condition} "
                                         f"ORDER BY file, line_no, choice LIMIT {FLAGGED_LIMIT}").fetchall())
    return problems, flagged


# A record's max_tokens as the histograms read it (logged as text or a number; NULL if neither).
SIZED_MAX_TOKENS = "try_cast(try_cast(max_tokens AS DOUBLE) AS BIGINT)"


def token_bin(output_tokens: str, max_tokens: str) -> str:
    """SQL: the histogram bin of `output_tokens` against `max_tokens` (SQL expressions, both not
    NULL, max_tokens > 0), a whole number not yet cast: at or past the budget the last bin
    (`HISTOGRAM_BINS`), below 0 -1 (no bin shows it), so that no count of tokens overflows the cast.
    `charts` reads output tokens only through it (and whether they were logged)."""
    return f"greatest(least(floor({output_tokens} * {HISTOGRAM_BINS}.0 / {max_tokens}), {HISTOGRAM_BINS}), -1)"


_BUCKETS = (("1 minute", 60), ("5 minutes", 300), ("15 minutes", 900), ("1 hour", 3600), ("6 hours", 21600),
            ("1 day", 86400), ("7 days", 604800), ("30 days", 2592000))


def charts(con, histograms: int = 6) -> Charts:
    """Output tokens per (model, max_tokens), the most common pairs first, and finish reasons per
    time bucket (at most 48 buckets) when the lines carry timestamps."""
    sized = (f"SELECT coalesce(model, '(not logged)') AS model, {SIZED_MAX_TOKENS} AS mt, "
             "output_tokens FROM rec WHERE shape IS NOT NULL")
    # One scan of the records: the answers counted per (model, max_tokens, bin) where sized (`ok`
    # three-valued, as the conditions below read it), then each figure from that small table.
    con.execute(f"""CREATE OR REPLACE TEMP TABLE sized_bins AS
        SELECT model, mt, ok, CASE WHEN ok THEN CAST({token_bin('output_tokens', 'mt')} AS INTEGER) END AS bin,
               count(*) AS n
        FROM (SELECT *, mt > 0 AND output_tokens IS NOT NULL AS ok FROM ({sized})) GROUP BY ALL""")
    without = con.execute("SELECT coalesce(sum(n), 0) FROM sized_bins WHERE NOT ok").fetchone()[0]
    pairs = con.execute(f"SELECT model, mt, sum(n) FROM sized_bins WHERE ok "
                        f"GROUP BY 1, 2 ORDER BY 3 DESC, 1, 2 LIMIT {histograms}").fetchall()
    shown = []
    for model, max_tokens, total in pairs:
        counts = dict(con.execute("SELECT bin, sum(n) FROM sized_bins WHERE ok AND model = ? AND mt = ? GROUP BY 1",
                                  [model, max_tokens]).fetchall())
        shown.append(TokenHistogram(model, max_tokens, tuple(counts.get(i, 0) for i in range(HISTOGRAM_BINS)),
                                    counts.get(HISTOGRAM_BINS, 0), total))
    con.execute("DROP TABLE sized_bins")
    return Charts(tuple(shown), _timeline(con), without)


def timeline_bucket(first, last) -> str:
    """The timeline's bucket for answers from `first` to `last` (datetimes): at most 48 buckets."""
    span = (last - first).total_seconds()
    return next((name for name, seconds in _BUCKETS if span / seconds <= 48), _BUCKETS[-1][0])


def _timeline(con) -> Timeline | None:
    first, last = con.execute("SELECT min(ts), max(ts) FROM rec WHERE shape IS NOT NULL").fetchone()
    if first is None:
        return None
    bucket = timeline_bucket(first, last)
    rows = con.execute(f"SELECT time_bucket(INTERVAL '{bucket}', ts) AS b, finish, count(*) FROM rec "
                       "WHERE shape IS NOT NULL AND ts IS NOT NULL GROUP BY 1, 2 ORDER BY 1, 3 DESC, 2").fetchall()
    grouped: dict[str, dict[str, int]] = {}
    for start, finish, count in rows:
        grouped.setdefault(start.isoformat(), {})[finish] = count
    return Timeline(bucket, tuple(grouped.items()))
