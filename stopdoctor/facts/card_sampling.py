"""What a model card (README.md) recommends for sampling: "use Temperature=0.6, TopP=0.95, TopK=20,
and MinP=0" (Qwen3), "temperature of 0.7", "repetition_penalty: 1.05". The first mention of each
key, with its line; a number only when it follows the name closely (`=`, `:`, "of", "to").

Imports: core, facts.model_facts.
"""

from __future__ import annotations

import re
from functools import cache

from stopdoctor.core.errors import StopdoctorError
from stopdoctor.core.types import Location, Sourced
from stopdoctor.facts.model_facts import ModelFacts, load_text

MAX_CARD_CHARS = 400_000
_NAMES = {
    "temperature": r"temperature|temp",
    "top_p": r"top[_ -]?p",
    "top_k": r"top[_ -]?k",
    "min_p": r"min[_ -]?p",
    "repetition_penalty": r"repetition[_ ]penalty|repeat[_ ]penalty",
    "presence_penalty": r"presence[_ ]penalty",
}
_VALUE = r"[`*\"']?\s*(?:=|:|\bof\b|\bto\b|\bat\b)\s*[`*\"']?\s*(-?\d+(?:\.\d+)?)(?![\d.]*[a-zA-Z%])"


@cache
def _patterns() -> dict[str, re.Pattern[str]]:
    """Key → its pattern, compiled on the first card read (six case-insensitive patterns, ~2-3 ms:
    a model without a README.md, a GGUF file, never needs them)."""
    return {key: re.compile(rf"(?<![A-Za-z_])(?:{names})(?![A-Za-z_]){_VALUE}", re.IGNORECASE)
            for key, names in _NAMES.items()}


def _card_text(facts: ModelFacts) -> str | None:
    path = facts.source.files.get("README.md")
    if path is None:
        return None
    try:
        return load_text(path, "README.md")[:MAX_CARD_CHARS]
    except StopdoctorError:
        return None


def card_values(facts: ModelFacts) -> dict[str, set[float]]:
    """Key → every value the card mentions for it (a card may give one per mode: presence penalty
    1.5 for thinking, 0 for coding); a served value among them follows the card."""
    text = _card_text(facts)
    out: dict[str, set[float]] = {}
    for line in (text or "").splitlines():
        for key, pattern in _patterns().items():
            for match in pattern.finditer(line):
                out.setdefault(key, set()).add(float(match[1]))
    return out


def card_sampling(facts: ModelFacts) -> dict[str, Sourced[float]]:
    """Key → the value the card recommends (its first mention), with README.md and its line; {} without a card."""
    text = _card_text(facts)
    if text is None:
        return {}
    out: dict[str, Sourced[float]] = {}
    for number, line in enumerate(text.splitlines(), 1):
        for key, pattern in _patterns().items():
            if key in out:
                continue
            match = pattern.search(line)
            if match is not None:
                value = float(match[1])
                out[key] = Sourced(int(value) if key == "top_k" else value, Location("README.md", None, number))
    return out
