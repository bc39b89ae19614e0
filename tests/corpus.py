"""The chat-template corpus read and analysed once per test run: `TemplateCorpus` holds
fixtures/templates.py `corpus()` and, per template, the special tokens it is judged with and its
turn structure, each computed on first use. tests/conftest.py gives one to the whole session
(`template_corpus`); `python tests/test_turns_corpus.py` makes its own.

Special tokens: realworld and GGUF entries use their model's own vocabulary. The fetched templates
come without one, so their special tokens are the marker-shaped texts of the template source
(what a tokenizer of that family declares), with sentinels for bos/eos.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from fixtures import fresh_templates, templates
from stopdoctor.core.errors import StopdoctorError
from stopdoctor.template.render import render_chat
from stopdoctor.template.turns import TurnStructure, analyze_turns

EOS, BOS = "<|sd_eos|>", "<|sd_bos|>"
# Marker-shaped texts in a template's string literals: <|...|>, <...>, [...], <｜...｜>, ‹...›-style.
_MARKER = re.compile(r"<\|[^<>|\s'\"]{1,40}\|>|<[A-Za-z_/][A-Za-z0-9_:\-]{1,30}>|\[[A-Z_~][A-Za-z0-9_~\[]{0,25}\]"
                     r"|<｜[^｜<>]{1,40}｜>|‹[^›]{1,40}›|\[e~\[|\]~[a-z]\]|<\|[a-z_]+>|<[a-z_]+\|>|<[^\x00-\x7f<>\s]{1,10}>")
_SAMPLE = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
           {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "Bye"}]
_TOOL = {"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object", "properties": {}}}}


def specials(name: str, source: str) -> tuple[dict[str, str], list[str]]:
    """(special_tokens, known special texts) that template `name` is analysed with."""
    model = model_for(name)
    if model is not None:
        from stopdoctor.api import load

        facts = load(str(model))
        return facts.special_token_texts(), list(facts.vocab.special_tokens)
    special_tokens = {"bos_token": BOS, "eos_token": EOS}
    found = set(_MARKER.findall(source))
    # markers a template builds from pieces ('<|' + role + '|>') show only once rendered
    for messages in (_SAMPLE, _SAMPLE[1:]):
        for tools in (None, [_TOOL]):
            try:
                found |= set(_MARKER.findall(render_chat(source, messages, special_tokens=special_tokens, tools=tools,
                                                         add_generation_prompt=True)))
            except StopdoctorError:
                continue
    return special_tokens, sorted(found)


def model_for(name: str) -> Path | None:
    parts = name.split("/")
    if parts[0] == "realworld":
        return templates.find_realworld() / parts[1]
    if parts[0] == "gguf":
        return templates.expected_paths(hf=False).smollm2_gguf.parent / parts[1]
    return None


@dataclass(frozen=True)
class Analysed:
    """One template's turn structure (or why the analysis refused it) with the tokens it used."""

    name: str
    special_tokens: Mapping[str, str]
    known: tuple[str, ...]
    turns: TurnStructure | None
    error: StopdoctorError | None


class TemplateCorpus:
    def __init__(self) -> None:
        self._entries: Mapping[str, str] | None = None
        self._analysed: dict[str, Analysed] = {}

    @property
    def entries(self) -> Mapping[str, str]:
        """name -> template source, every available source, the fresh corpus too (read once)."""
        if self._entries is None:
            self._entries = MappingProxyType({**templates.corpus(), **fresh_templates.fresh_corpus()})
        return self._entries

    def analysed(self, name: str) -> Analysed:
        if name not in self._analysed:
            source = self.entries[name]
            special_tokens, known = specials(name, source)
            try:
                turns, error = analyze_turns(source, special_tokens, known), None
            except StopdoctorError as refused:
                turns, error = None, refused
            self._analysed[name] = Analysed(name, MappingProxyType(dict(special_tokens)), tuple(known), turns, error)
        return self._analysed[name]
