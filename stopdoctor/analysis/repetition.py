"""Degenerate repetition: the share of repeated word 4-grams at the end of a text, the one measure
of a loop that `logs` (SD705, in SQL) and `generate` (a thought that loops until the budget runs
out) share, with its thresholds; and, for a loop with no whitespace in it (`?!?!?!…`, CJK), the
share of repeated character 8-grams of the text's last run of non-space characters.

Imports: the standard library only.
"""

from __future__ import annotations

import re

REPETITION_WINDOW = 400  # words: a loop is at the end of a text, so the last 400 words are scored
REPETITION_MIN_WORDS = 50  # fewer words than this are never a loop
REPETITION_THRESHOLD = 0.5  # share of repeated word 4-grams in the window

# A loop without whitespace is one long last "word". Measured on 67,594 real ChatGPT answers
# (27 end in a run of 200+ non-space characters): loops (`HaHaHa…`, `ohohoh…`) score 0.99+, an
# acronym string 0.81, a URL 0.5; rules and fill-in blanks (`-----`, `\_\_\_`) are not loops.
RUN_MIN_CHARS = 200  # a shorter last run is never scored
RUN_WINDOW = 1000  # characters of the run scored, from its end
RUN_GRAM = 8
RUN_THRESHOLD = 0.9
RUN_RULE_CHARACTERS = r"[-_=*~.#|+\\]+"  # a run of only these is a rule or a blank to fill in


def last_run_share(text: str) -> float | None:
    """1 - distinct / all character 8-grams of the last `RUN_WINDOW` characters of the text's last
    run without whitespace; None for a run under `RUN_MIN_CHARS` or one of rule characters only."""
    run = text.split()[-1] if text.strip() else ""
    if len(run) < RUN_MIN_CHARS or re.fullmatch(RUN_RULE_CHARACTERS, run):
        return None
    run = run[-RUN_WINDOW:]
    grams = [run[i:i + RUN_GRAM] for i in range(len(run) - RUN_GRAM + 1)]
    return 1 - len(set(grams)) / len(grams)


def repeated_share(text: str) -> float | None:
    """1 - distinct / all word 4-grams of the last `REPETITION_WINDOW` words (split at whitespace);
    None when there are fewer than `REPETITION_MIN_WORDS` words. A text that ends in a loop without
    whitespace (`last_run_share` at least `RUN_THRESHOLD`) scores that share instead, if higher."""
    words = re.split(r"\s+", text.strip())[-REPETITION_WINDOW:] if text.strip() else []
    share = None
    if len(words) >= REPETITION_MIN_WORDS:
        grams = [" ".join(words[i:i + 4]) for i in range(len(words) - 3)]
        share = 1 - len(set(grams)) / len(grams)
    run = last_run_share(text)
    if run is not None and run >= RUN_THRESHOLD:
        return max(share or 0.0, run)
    return share


def loops(text: str) -> bool:
    share = repeated_share(text)
    return share is not None and share >= REPETITION_THRESHOLD
