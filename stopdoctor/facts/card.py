"""What a model card (README.md) says about generation: the output length it recommends.

Imports: core, facts.model_facts.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from stopdoctor.core.errors import StopdoctorError
from stopdoctor.core.types import Location, Sourced
from stopdoctor.facts.model_facts import ModelFacts, load_text

MAX_CARD_CHARS = 400_000
# "an output length of 32,768 tokens", "max_new_tokens=32768", "output length of 38,912"
_OUTPUT_LENGTH = re.compile(r"(?:output length|max(?:imum)?[_ ]new[_ ]tokens|max_tokens|generation length)\D{0,40}?(\d{1,3}(?:,\d{3})+|\d{4,6})",
                            re.IGNORECASE)


def card_output_tokens(facts: ModelFacts) -> Sourced[int] | None:
    """The largest output length the card recommends (Qwen3: 32,768), with its line; None without a card."""
    path = facts.source.files.get("README.md")
    if path is None:
        return None
    found = _scan(Path(path))
    return Sourced(found[0], Location("README.md", None, found[1])) if found else None


@lru_cache(maxsize=64)
def _scan(path: Path) -> tuple[int, int] | None:
    try:
        text = load_text(path, "README.md")[:MAX_CARD_CHARS]
    except StopdoctorError:
        return None  # an unreadable card says nothing; the model's own files are judged elsewhere
    best: tuple[int, int] | None = None
    for match in _OUTPUT_LENGTH.finditer(text):
        value = int(match.group(1).replace(",", ""))
        if 256 <= value <= 1_000_000 and (best is None or value > best[0]):
            best = (value, text.count("\n", 0, match.start()) + 1)
    return best
