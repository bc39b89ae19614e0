"""Reasoning-structure analysis on hostile templates (issue #32 "Reasoning-structure analysis"):
40,000 switch-like names, a 1 MB word the old switch regex backtracked over, 4,000-20,000 distinct
tags in the generation prompt, 20,000 special tokens with a long prompt. Each took over a minute
of CPU before; the analysis is bounded by sizes (names weighed, characters scanned, tags paired)
and uses no regex that backtracks over the template's text. The bound asserted is CPU time, and
generous: the work is what is bounded, not the machine's speed."""

from __future__ import annotations

import time

import pytest

from stopdoctor.template.reasoning import analyze_reasoning

CHATML = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
SWITCH = "{% if enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}"


def _prompt(extra: str) -> str:
    return CHATML + "{% if add_generation_prompt %}<|im_start|>assistant\n" + extra + "{% endif %}"


def _names(count: int) -> str:
    return " ".join("xthink" + "".join(chr(97 + i // 26 ** k % 26) for k in range(4)) + " is" for i in range(count))


CASES = {
    "40,000 switch-like names": (_prompt(SWITCH) + "{# " + _names(40_000) + " #}", []),
    "a 1 MB word": (_prompt(SWITCH) + "{# " + "think" * 180_000 + "1 #}", []),
    "20,000 tags in the prompt": (_prompt("".join(f"<t{i}>" for i in range(20_000)) + "<think>\n"), []),
    "4,000 tags and their closers": (_prompt("".join(f"<t{i}>" for i in range(4_000)) + "<think>\n")
                                     + "{# " + "".join(f"</t{i}>" for i in range(4_000)) + " #}", []),
    "20,000 special tokens, a 1.8M-character prompt": (_prompt("{{ '<x>' * 600000 }}<think>\n"),
                                                        [f"<sp{i}>" for i in range(20_000)]),
}


# the 40,000 names (~6 s) in the full suite; the other shapes of hostile text stay in the quick loop
@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.slow) if c.startswith("40,000") else c
                                  for c in CASES])
def test_hostile_templates_are_analysed_in_bounded_work(case):
    source, known = CASES[case]
    started = time.process_time()
    structure = analyze_reasoning(source, None, known)
    assert time.process_time() - started < 40, case  # over 60 s before; ~0.1-3 s now
    if SWITCH in source:  # the template's real switch is still found among the decoys
        assert structure.style == "think-tags" and structure.can_disable == "enable_thinking=false"


def test_a_known_text_at_the_end_of_a_text_is_not_longer_than_the_text():
    from stopdoctor.template.reasoning import _tags

    assert _tags("x<|start|>a<|message|>", ["<|endoftext|>", "<|message|>", "<|start|>"]) == ["<|start|>", "<|message|>"]
