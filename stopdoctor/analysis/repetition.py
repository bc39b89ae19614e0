"""Degenerate repetition: the share of repeated word 4-grams at the end of a text, the one measure
of a loop that `logs` (SD705, in SQL) and `generate` (a thought that loops until the budget runs
out) share, with its thresholds.

Imports: the standard library only.
"""

from __future__ import annotations

import re

REPETITION_WINDOW = 400  # words: a loop is at the end of a text, so the last 400 words are scored
REPETITION_MIN_WORDS = 50  # fewer words than this are never a loop
REPETITION_THRESHOLD = 0.5  # share of repeated word 4-grams in the window


def repeated_share(text: str) -> float | None:
    """1 - distinct / all word 4-grams of the last `REPETITION_WINDOW` words (split at whitespace);
    None when there are fewer than `REPETITION_MIN_WORDS` words."""
    words = re.split(r"\s+", text.strip())[-REPETITION_WINDOW:] if text.strip() else []
    if len(words) < REPETITION_MIN_WORDS:
        return None
    grams = [" ".join(words[i:i + 4]) for i in range(len(words) - 3)]
    return 1 - len(set(grams)) / len(grams)


def loops(text: str) -> bool:
    share = repeated_share(text)
    return share is not None and share >= REPETITION_THRESHOLD
