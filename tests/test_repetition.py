"""analysis/repetition.py: the loop measure `generate` (a thought that loops) and `logs` (SD705) share."""

from __future__ import annotations

from stopdoctor.analysis.repetition import REPETITION_MIN_WORDS, loops, repeated_share


def test_too_few_words_are_never_a_loop():
    assert repeated_share("I will check. " * 10) is None and not loops("I will check. " * 10)


def test_a_loop_and_prose():
    loop = " ".join(["I will check the weather now."] * 12)  # 72 words, every 4-gram repeats
    assert repeated_share(loop) > 0.8 and loops(loop)
    prose = " ".join(f"word{i}" for i in range(REPETITION_MIN_WORDS + 10))
    assert repeated_share(prose) == 0 and not loops(prose)


def test_only_the_last_window_counts():
    loop = " ".join(["Wait, let me recount the letters."] * 80)  # 480 words of loop after 600 words of prose
    text = " ".join(f"word{i}" for i in range(600)) + " " + loop
    assert loops(text)
