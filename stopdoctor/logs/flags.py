"""The flags each problem of an answer is counted from, as SQL over the normalised answers
(`logs.records`): the finish reason normalised, a turn candidate (`sql.prefilter_sql`), cut
mid-sentence, repetition, reasoning that used the budget, an empty answer, a finish at the budget,
and the end of the text an example shows. The thresholds are the documented ones (README, the rules'
docs); the repetition ones are `analysis.repetition`'s, shared with `generate`.

Imports: logs (shapes, sql, vocabulary), analysis.repetition. Builds text only; runs nothing.
"""

from __future__ import annotations

from stopdoctor.analysis.repetition import (REPETITION_MIN_WORDS, REPETITION_THRESHOLD, REPETITION_WINDOW, RUN_GRAM,
                                            RUN_MIN_CHARS, RUN_RULE_CHARACTERS, RUN_THRESHOLD, RUN_WINDOW)
from stopdoctor.logs.shapes import FINISH_REASONS, STREAMED
from stopdoctor.logs.sql import prefilter_sql, sql_string, whole_number_sql
from stopdoctor.logs.vocabulary import TurnVocabulary

REASONING_SHARE = 0.9  # reasoning tokens of the output tokens, for reasoning-consumed-budget
TAIL = 120  # characters of an answer's end kept for examples

# Which records each problem of a lie counts, as a condition on the records (`logs.summary`).
LIE_CONDITIONS = {
    "truncated-but-reported-finished": "truncated_finished",
    # vLLM's runtime loop stop (finish_reason `repetition`) is a loop the engine cut, not a success
    "degenerate-repetition": f"(repetition >= {REPETITION_THRESHOLD} OR lower(finish) = 'repetition')",
    "reasoning-consumed-budget": "reasoning_budget",
    "empty-answer": "empty_stop",
}
# The records an example can be drawn from (budget-truncated and mid-sentence are cut by the budget; the
# lies): only those keep the end of their text (`tail`).
EXAMPLE_TAILS = "(finish = 'length' OR " + " OR ".join(LIE_CONDITIONS.values()) + ")"


def normalised_finish_sql(raw: str) -> str:
    """`raw` (a provider's finish reason) as one of the five, or as logged when unknown."""
    groups: dict[str, list[str]] = {}
    for spelling, normal in FINISH_REASONS.items():
        groups.setdefault(normal, []).append(spelling)
    whens = " ".join(f"WHEN lower({raw}) IN ({', '.join(sql_string(s) for s in spellings)}) THEN {sql_string(normal)}"
                     for normal, spellings in groups.items())
    return f"CASE WHEN {raw} IS NULL THEN '(none)' {whens} ELSE {raw} END"


def _streamed() -> str:
    return ", ".join(sql_string(kind) for kind in STREAMED)


def derived_sql(relation: str, vocabulary: TurnVocabulary) -> str:
    """Per answer of `relation`: the normalised finish reason and every flag a problem is counted from
    (the module's thresholds). A costly test runs only where it can be true, behind a CASE (DuckDB
    evaluates both sides of an AND on every row, a CASE branch on the rows that reach it)."""
    return rf"""
WITH normalised AS (
    SELECT *, CASE WHEN finish_hint IS NOT NULL THEN finish_hint ELSE {normalised_finish_sql('finish_raw')} END AS finish,
           {prefilter_sql(vocabulary, 'text')} AS turn_candidate
    FROM {relation}
), scored AS (
    SELECT *,
           -- n words need n - 1 whitespace characters (RE2's \s: tab, newline, form feed, return, space)
           CASE WHEN finish = 'stop' AND length(text) >= {REPETITION_MIN_WORDS * 2}
                     AND length(text) - length(translate(text, {_WHITESPACE}, '')) >= {REPETITION_MIN_WORDS - 1}
                THEN string_split_regex(trim(text), '\s+')[-{REPETITION_WINDOW}:] END AS words,
           CASE WHEN finish = 'length' AND text IS NOT NULL
                THEN trim(CASE WHEN contains(text, '<think>') THEN regexp_replace(text, '(?s)<think>.*?(</think>|$)', '', 'g')
                               ELSE text END) END AS visible,
           CASE WHEN finish = 'length' THEN (length(text) - length(replace(text, '</think>', ''))) // 8 END AS think_ends,
           CASE WHEN finish = 'stop' AND length(text) >= {RUN_MIN_CHARS}
                THEN regexp_extract(text, '(\S+)\s*$', 1) END AS last_run
    FROM normalised
), ran AS (
    -- a loop without whitespace: the last run of non-space characters (`analysis.repetition`)
    SELECT *, CASE WHEN length(last_run) >= {RUN_MIN_CHARS}
                   THEN CASE WHEN NOT regexp_full_match(last_run, {sql_string(RUN_RULE_CHARACTERS)})
                             THEN right(last_run, {RUN_WINDOW}) END END AS run
    FROM scored
), shared AS (
    SELECT *, CASE WHEN run IS NOT NULL THEN 1 - len(list_distinct(list_transform(range(1, length(run) - {RUN_GRAM - 2}),
                lambda i: substring(run, i, {RUN_GRAM})))) / (length(run) - {RUN_GRAM - 1}) END AS run_share
    FROM ran
), flagged AS (
SELECT line_no, choice, blank, bad, kind AS shape, finish_raw, finish, model, max_tokens, stop_reason,
       output_tokens, reasoning_tokens, ts,
       {'chunks' if relation == 'streams' else f"CASE WHEN kind IN ({_streamed()}) THEN 0 ELSE 1 END"} AS chunks,
       coalesce(turn_candidate, false) AS turn_candidate,
       CASE WHEN finish = 'length' AND text IS NOT NULL AND rtrim(text) <> ''
            THEN NOT regexp_matches(rtrim(text), {sql_string(_SENTENCE_END_SQL)}) ELSE false END AS mid_sentence,
       CASE WHEN turn_candidate THEN text END AS candidate_text,
       CAST(NULL AS VARCHAR) AS tail,  -- written below, where an example can show it
       coalesce(multi_choice, false) AND kind IS NOT NULL AS multi_choice,
       -- truncated-but-reported-finished: finished by its own account, yet exactly at the budget
       CASE WHEN finish IN ('stop', 'tool_calls') AND output_tokens IS NOT NULL AND max_tokens IS NOT NULL AND NOT coalesce(multi_choice, false)
            THEN coalesce(output_tokens = {whole_number_sql('max_tokens')}, false) ELSE false END AS truncated_finished,
       -- degenerate-repetition: the share of repeated word 4-grams in the last words of a `stop` answer
       -- (or of character 8-grams of a last run without whitespace, when at least RUN_THRESHOLD)
       greatest(CASE WHEN len(words) >= {REPETITION_MIN_WORDS} THEN 1 - len(list_distinct(list_transform(range(1, len(words) - 2),
            lambda i: words[i] || ' ' || words[i + 1] || ' ' || words[i + 2] || ' ' || words[i + 3])))
            / (len(words) - 3) END,
            CASE WHEN run_share >= {RUN_THRESHOLD} THEN run_share END) AS repetition,
       -- reasoning-consumed-budget: cut by the budget with no answer after reasoning, reasoning tokens
       -- at least REASONING_SHARE of the output, or the model closing its reasoning more than once
       CASE WHEN finish = 'length' THEN coalesce(
           (coalesce(visible, '') = '' AND (nullif(reasoning, '') IS NOT NULL OR reasoning_tokens > 0
                                            OR text LIKE '%<think>%' OR (text = '' AND kind LIKE 'openai-c%')))
           OR (output_tokens > 0 AND reasoning_tokens >= {REASONING_SHARE} * output_tokens)
           OR think_ends > 1, false) ELSE false END AS reasoning_budget,
       CASE WHEN output_tokens > 0 THEN reasoning_tokens::DOUBLE / output_tokens END AS reasoning_share,
       think_ends, coalesce(visible, '') = '' AS empty_answer,
       -- empty-answer: reported stop with no answer text (an OpenAI chat answer's missing content too);
       -- not Anthropic's pause_turn, a turn paused on a server tool (normalised stop), not ended
       CASE WHEN finish = 'stop' AND (text IS NOT NULL OR kind LIKE 'openai-c%')
                 AND lower(coalesce(finish_raw, '')) <> 'pause_turn'
            THEN NOT regexp_matches(coalesce(text, ''), '\S') ELSE false END AS empty_stop,
       text, reasoning, finish_hint, stream_id
    FROM shared
)
-- the end of the answer (or of its reasoning) an example shows: only on the records an example can be
-- (cut by the budget, or flagged by a lie); on the others it would be ~100 bytes written for nothing
SELECT * REPLACE (CASE WHEN {EXAMPLE_TAILS} THEN {_tail("rtrim(coalesce(nullif(text, ''), reasoning))")} END AS tail)
FROM flagged
"""


def _tail(shown: str) -> str:
    return f"CASE WHEN length({shown}) > {TAIL} THEN '…' || right({shown}, {TAIL}) ELSE {shown} END"


_WHITESPACE = "(chr(9) || chr(10) || chr(12) || chr(13) || ' ')"  # RE2's \s, counted before a word split
_SENTENCE_END_SQL = r"""[.!?…。！？:;"'”’)\]*`>]$"""
