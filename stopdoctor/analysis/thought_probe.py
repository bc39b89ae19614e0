"""Stop strings probed inside a reasoning model's thought: sample thoughts written between the
template's own open and close markers (learnt by `stopdoctor.template.reasoning`), as the model
generates them after the prompt, and where each stop would fire in them.

A thought is long free text: blank lines, "Wait,", "So the answer is", lists. A stop string that
fires there ends the reply before any answer (an eval stop `"\\n\\n"` inside `<think>`:
lm-evaluation-harness PR #3700); a stop on the close marker itself returns an empty answer.

Imports: the standard library, `stopdoctor.template.reasoning` (the structure, as data).
"""

from __future__ import annotations

from collections.abc import Sequence

from stopdoctor.core.records import record
from stopdoctor.template.reasoning import ReasoningStructure

EXCERPT_RADIUS = 30

# Reasoning paragraphs as thinking models write them, written for this project.
SAMPLE_THOUGHTS: list[tuple[str, str]] = [
    ("arithmetic", "Okay, let me think. The user wants 17 times 24.\n\n"
                   "First, 17 times 20 is 340, and 17 times 4 is 68.\n\n"
                   "Wait, let me double-check: 340 + 68 = 408. Yes.\n\n"
                   "So the answer is 408."),
    ("capital", "Okay, the user is asking for the capital of Australia. Many people think it is Sydney, "
                "but that's the largest city.\n\n"
                "Hmm, the capital is Canberra; it was chosen as a compromise between Sydney and Melbourne.\n\n"
                "I should answer briefly and mention that common confusion."),
    ("code", "Let me figure out how to reverse a list in Python.\n\n"
             "Option 1: slicing, items[::-1], returns a new list.\n"
             "Option 2: items.reverse(), in place, returns None.\n\n"
             "Wait, the user may want to keep the original. Slicing is safer.\n\n"
             "Answer: show slicing first, then mention reverse()."),
    ("plan", "Alright, I need to plan a three-step answer.\n\n"
             "1. Restate the question.\n2. Give the key fact.\n3. Add one example.\n\n"
             "But wait — is an example needed? The question is short. Maybe not.\n\n"
             "Let me write it concisely."),
]


@record
class ThoughtMatch:
    """Where a stop string occurs in a sample thought: generation would end there, in the thought."""

    sample: str
    offset: int  # in the generated text (the open marker, when the model writes it, counts)
    excerpt: str
    at_close: bool  # it is the close marker itself (an empty answer, not a cut thought)


@record
class ThoughtProbe:
    """One stop string against the sample thoughts of a reasoning template."""

    stop: str
    open: str | None
    close: str | None
    prefilled: bool  # the prompt writes the open marker: the model's output starts inside the thought
    default_on: bool  # the template thinks with its defaults
    samples_checked: int
    matches: tuple[ThoughtMatch, ...]

    @property
    def firing_samples(self) -> list[str]:
        return list(dict.fromkeys(m.sample for m in self.matches))

    @property
    def fires(self) -> bool:
        return bool(self.matches)


def generated_thought(reasoning: ReasoningStructure, thought: str) -> str:
    """The text a model generates for a thought: the open marker (unless the prompt wrote it), the
    thought, the close marker, as the template frames it."""
    opened = "" if reasoning.prefilled else (reasoning.open or "")
    newline = "\n" if reasoning.style == "think-tags" else ""
    return f"{opened}{newline}{thought}{newline}{reasoning.close or ''}"


def probe_thoughts(reasoning: ReasoningStructure, stops: Sequence[str],
                   samples: Sequence[tuple[str, str]] = tuple(SAMPLE_THOUGHTS)) -> list[ThoughtProbe]:
    """Each stop against each sample thought; [] for a template that shows no thought (nothing is
    probed there: precision first)."""
    if not reasoning.is_reasoning or reasoning.close is None:
        return []
    texts = [(name, generated_thought(reasoning, body)) for name, body in samples]
    out = []
    for stop in stops:
        matches: list[ThoughtMatch] = []
        for name, text in texts:
            at = text.find(stop) if stop else -1
            if at < 0:
                continue  # generation ends at the first match: one per sample
            lo, hi = max(0, at - EXCERPT_RADIUS), min(len(text), at + len(stop) + EXCERPT_RADIUS)
            at_close = at + len(stop) > len(text) - len(reasoning.close)
            matches.append(ThoughtMatch(name, at, text[lo:hi], at_close))
        out.append(ThoughtProbe(stop, reasoning.open, reasoning.close, reasoning.prefilled,
                                reasoning.default_on is not False, len(texts), tuple(matches)))
    return out
