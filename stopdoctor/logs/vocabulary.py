"""What marks a next turn in logged text: per template family, the user/system headers and the
special tokens (to strip, as servers do), and the end-of-turn token texts. `builtin_vocabulary`
covers the common families (a log read without --model); `model_vocabulary` is one model's own,
learnt from its template and files.

Imports: core, facts (with --model), analysis (diagnose's TurnEnder; the model's turn structure).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence

from stopdoctor.analysis.diagnose import TurnEnder
from stopdoctor.core.records import record


@record
class TurnVocabulary:
    """What marks a next turn in text: per template family, the user/system headers and the
    special tokens (to strip, as servers do); and the end-of-turn token texts."""

    families: tuple[tuple[str, Mapping[str, str], tuple[str, ...]], ...]  # (name, headers, specials)
    enders: Mapping[int, TurnEnder]
    source: str  # "built-in families" | the model spec

    @functools.cached_property
    def family_words(self) -> tuple[frozenset[str], ...]:
        """Per family, the bare role words its headers leave once specials are stripped."""
        return tuple(frozenset(_bare_words(headers, specials)) for _, headers, specials in self.families)


def _bare_words(headers: Mapping[str, str], specials: Sequence[str]) -> list[str]:
    words = []
    for header in headers.values():
        bare = header
        for special in sorted(specials, key=len, reverse=True):
            bare = bare.replace(special, "")
        if bare != header and re.fullmatch(r"\w+", bare.strip()):
            words.append(bare.strip())
    return words


# The families an unknown model most likely has: headers as their templates write them. Without
# --model a log is read against all of them; each alone is what `diagnose` checks for one model.
_FAMILIES: tuple[tuple[str, dict[str, str], tuple[str, ...]], ...] = (
    ("chatml", {"user": "<|im_start|>user\n", "system": "<|im_start|>system\n"}, ("<|im_start|>", "<|im_end|>")),
    ("llama-3", {"user": "<|start_header_id|>user<|end_header_id|>\n\n",
                 "system": "<|start_header_id|>system<|end_header_id|>\n\n"},
     ("<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|begin_of_text|>")),
    ("gemma", {"user": "<start_of_turn>user\n"}, ("<start_of_turn>", "<end_of_turn>")),
    ("phi-3", {"user": "<|user|>\n", "system": "<|system|>\n"}, ("<|user|>", "<|system|>", "<|end|>", "<|assistant|>")),
    ("granite", {"user": "<|start_of_role|>user<|end_of_role|>", "system": "<|start_of_role|>system<|end_of_role|>"},
     ("<|start_of_role|>", "<|end_of_role|>", "<|end_of_text|>")),
    ("harmony", {"user": "<|start|>user<|message|>", "system": "<|start|>system<|message|>"},
     ("<|start|>", "<|message|>", "<|end|>", "<|return|>")),
    ("deepseek", {"user": "<｜User｜>"}, ("<｜User｜>", "<｜Assistant｜>", "<｜end▁of▁sentence｜>")),
)
# End-of-turn texts no ordinary answer contains (not `</s>`: HTML's strikethrough closes with it).
_ENDERS = ("<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|end|>", "<|endoftext|>", "<|end_of_text|>",
           "<|return|>", "<｜end▁of▁sentence｜>")


def builtin_vocabulary() -> TurnVocabulary:
    """The well-known families and end-of-turn texts: what a log is read against without --model."""
    enders = {-(i + 1): TurnEnder(-(i + 1), text, ("a well-known end-of-turn token",)) for i, text in enumerate(_ENDERS)}
    return TurnVocabulary(_FAMILIES, enders, "built-in families")


def model_vocabulary(spec: str, revision: str | None = None) -> TurnVocabulary:
    """The model's own headers, specials and turn enders, from its template and files."""
    from stopdoctor.analysis.core import analyze
    from stopdoctor.analysis.diagnose import turn_enders, turn_headers
    from stopdoctor.facts.model_facts import load_model

    facts = load_model(spec, revision)
    analysis = analyze(facts)
    specials = tuple(facts.vocab.special_tokens)
    return TurnVocabulary((("model", turn_headers(analysis), specials),), turn_enders(analysis), spec)
