"""The chat-template corpus (fixtures/templates.py) and its hand labels (tests/data/template_labels.json)
stay in step: every entry has a label and every label an entry, source by source.

Only bookkeeping: whether stopdoctor infers the labelled end of turn is measured elsewhere.
A source that is absent here (llama.cpp/xinference cache not fetched, no shared/realworld, no test GGUFs)
is skipped with a message saying how to get it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fixtures import templates
from stopdoctor.template import turns

pytestmark = pytest.mark.corpus

LABELS_PATH = Path(__file__).parent / "data" / "template_labels.json"
STYLES = set(turns.STYLES)  # the styles stopdoctor itself names
CONFIDENCE = {"high", "medium", "low"}
FIELDS = {"end_of_turn", "also", "style", "not_end", "needs", "note", "confidence"}


def _labels() -> dict[str, dict]:
    return json.loads(LABELS_PATH.read_text(encoding="utf-8"))["labels"]


def _source_entries(source: str) -> dict[str, str]:
    if source == "llama.cpp":
        found = templates.llamacpp_templates()
        if not found:
            pytest.skip(
                f"llama.cpp templates are not in {templates.llamacpp_dir()}; "
                "run `python fixtures/templates.py` (or fixtures/realmodels.py) to fetch them"
            )
    elif source == "xinference":
        found = templates.xinference_templates()
        if not found:
            pytest.skip(
                f"xinference templates are not in {templates.default_templates_dir()}; "
                "run `python fixtures/templates.py` (or fixtures/realmodels.py) to fetch them"
            )
    elif source == "realworld":
        found = templates.realworld_templates()
        if not found:
            pytest.skip(f"{templates.find_realworld()} is absent (it exists only in the development setup)")
    elif source == "gguf":
        found = templates.gguf_templates()
        if not found:
            pytest.skip("the test GGUFs are absent; run `python fixtures/realmodels.py` to build them")
    else:
        found = templates.synth_templates()
    return found


def test_labels_are_well_formed():
    labels = _labels()
    assert labels
    for name, label in labels.items():
        assert set(label) == FIELDS, name
        assert label["style"] in STYLES, name
        assert label["confidence"] in CONFIDENCE, name
        for key in ("end_of_turn", "also", "not_end", "needs"):
            assert isinstance(label[key], list) and all(isinstance(x, str) and x for x in label[key]), (name, key)
        assert isinstance(label["note"], str), name
        # Only a template that never closes may have no end of turn; a stop is never also a non-stop.
        assert bool(label["end_of_turn"]) == (label["style"] != "none"), name
        assert not set(label["end_of_turn"] + label["also"]) & set(label["not_end"]), name


@pytest.mark.parametrize("source", ["llama.cpp", "xinference", "realworld", "gguf", "synth"])
def test_every_entry_has_a_label_and_every_label_an_entry(source):
    entries = _source_entries(source)
    labelled = {name for name in _labels() if name.split("/", 1)[0] == source}
    assert all(isinstance(text, str) and text.strip() for text in entries.values())
    assert sorted(set(entries) - labelled) == [], "corpus entries without a label"
    assert sorted(labelled - set(entries)) == [], "labels without a corpus entry"


def test_corpus_is_the_union_of_the_sources(template_corpus):
    entries = template_corpus.entries
    assert set(templates.synth_templates()) <= set(entries)
    assert all(name.split("/", 1)[0] in {"llama.cpp", "xinference", "realworld", "gguf", "synth", "axolotl", "unsloth"} for name in entries)
