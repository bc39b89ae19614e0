"""What a model card (README.md) says about generation: the output length it recommends.

Imports: core, facts.model_facts.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from stopdoctor.core.errors import StopdoctorError
from stopdoctor.core.records import record
from stopdoctor.core.types import Location, Sourced
from stopdoctor.facts.model_facts import ModelFacts, load_text

MAX_CARD_CHARS = 400_000
# "an output length of 32,768 tokens", "max_new_tokens=32768", "output length of 38,912"
_OUTPUT_LENGTH = re.compile(r"(?:output length|max(?:imum)?[_ ]new[_ ]tokens|max_tokens|generation length)\D{0,40}?(\d{1,3}(?:,\d{3})+|\d{4,6})",
                            re.IGNORECASE)


# Where a length is said: a sentence about benchmarking or the hardest problems names a ceiling,
# not the recommendation for everyday queries (Qwen3: "32,768 tokens for most queries. For
# benchmarking on highly complex problems ... 38,912"); a sentence may name the mode it is for.
_BENCHMARK = re.compile(r"benchmark|competition|highly complex|most challenging", re.IGNORECASE)
_NON_THINKING = re.compile(r"non[- ]?thinking|no[- ]?think|without thinking|thinking (?:is )?(?:off|disabled)", re.IGNORECASE)
_THINKING = re.compile(r"thinking|reasoning", re.IGNORECASE)
_RECOMMENDS = re.compile(r"recommend|suggest|adequate", re.IGNORECASE)


@record
class CardLength:
    """One output length a card states: its value, line, the mode its sentence names
    ("thinking", "non-thinking" or None), whether the sentence is about benchmarking and whether
    it recommends the length (a code sample's `max_new_tokens=512` does not)."""

    value: int
    line: int
    mode: str | None
    benchmark: bool
    recommended: bool


def card_output_tokens(facts: ModelFacts, thinking: bool = True) -> Sourced[int] | None:
    """The output length the card recommends for everyday queries in the mode in use (thinking or
    not), with its line: Qwen3's 32,768 "for most queries", never the 38,912 it suggests for
    benchmarking. A length stated for the other mode only is no recommendation for this one.
    None without a card or without such a length."""
    path = facts.source.files.get("README.md")
    if path is None:
        return None
    lengths = _scan(Path(path))
    mode, other = ("thinking", "non-thinking") if thinking else ("non-thinking", "thinking")
    everyday = [c for c in lengths if not c.benchmark and c.mode != other]
    chosen = [c for c in everyday if c.mode == mode] or everyday
    # the length a sentence recommends; else the largest a sample uses
    chosen = [c for c in chosen if c.recommended] or sorted(chosen, key=lambda c: -c.value)
    if not chosen:  # only ceilings for this mode: the smallest of them is the least it asks for
        chosen = sorted((c for c in lengths if c.mode != other), key=lambda c: c.value)
    return Sourced(chosen[0].value, Location("README.md", None, chosen[0].line)) if chosen else None


def _sentence(text: str, start: int, end: int) -> str:
    """The sentence (or line) around text[start:end]."""
    before = max(text.rfind(". ", 0, start), text.rfind("\n", 0, start))
    ends = [i for i in (text.find(". ", end), text.find("\n", end)) if i >= 0]
    return text[before + 1:min(ends) if ends else len(text)]


@lru_cache(maxsize=64)
def _scan(path: Path) -> tuple[CardLength, ...]:
    try:
        text = load_text(path, "README.md")[:MAX_CARD_CHARS]
    except StopdoctorError:
        return ()  # an unreadable card says nothing; the model's own files are judged elsewhere
    found = []
    for match in _OUTPUT_LENGTH.finditer(text):
        value = int(match.group(1).replace(",", ""))
        if not 256 <= value <= 1_000_000:
            continue
        sentence = _sentence(text, match.start(), match.end())
        mode = "non-thinking" if _NON_THINKING.search(sentence) else "thinking" if _THINKING.search(sentence) else None
        found.append(CardLength(value, text.count("\n", 0, match.start()) + 1, mode, bool(_BENCHMARK.search(sentence)),
                                bool(_RECOMMENDS.search(sentence))))
    return tuple(found)
