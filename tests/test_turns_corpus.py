"""End-of-turn inference measured on real chat templates against hand labels.

The corpus is fixtures/templates.py `corpus()` (llama.cpp's and xinference's model templates,
fetched from PyPI; shared/realworld read in place; the test GGUFs; the synthetic families), the
labels tests/data/template_labels.json (made by reading each template, never by running stopdoctor).

A template counts as exact when every end-of-turn marker stopdoctor reports (what it would
suggest as a stop) is labelled `end_of_turn` or `also`, and the labelled end-of-turn is among the
tokens it accepts as ending the turn (its markers and the earlier tokens of the same close,
Apriel's `<|end|>` before eos). A next-header template needs every labelled header; a
whitespace-closed one the whitespace style with the next header's text (never whitespace) as the
stop; a never-closing one no marker. A marker is harmful when the
label says it is written inside a turn or as a header (`not_end`), or when it is whitespace: a
stop there would cut answers or never fire.

Special tokens: as tests/corpus.py chooses them (the model's own vocabulary where there is one).
The corpus and each template's analysis are computed once per run (the `template_corpus` session
fixture) and shared by every test here and in test_turn_structure.py.

Run `python tests/test_turns_corpus.py` for the per-source figures and every miss.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.corpus import BOS, EOS, TemplateCorpus  # noqa: E402

pytestmark = pytest.mark.corpus

LABELS = json.loads((Path(__file__).parent / "data" / "template_labels.json").read_text(encoding="utf-8"))["labels"]
# The fresh corpus (fixtures/fresh_templates.py), never tuned on: measured apart.
FRESH_LABELS = json.loads((Path(__file__).parent / "data" / "fresh_template_labels.json").read_text(encoding="utf-8"))["labels"]


@dataclass(frozen=True)
class Outcome:
    name: str
    found: tuple[str, ...]
    style: str
    exact: bool
    harmful: tuple[str, ...]
    error: str | None = None


def _expected(label: dict, eos: str | None) -> tuple[set[str], set[str]]:
    def resolve(texts: list[str]) -> set[str]:
        return {eos if t == "{eos_token}" else t for t in texts if eos or t != "{eos_token}"}

    return resolve(label["end_of_turn"]), resolve(label["end_of_turn"] + label["also"])


def evaluate(corpus: TemplateCorpus, name: str) -> Outcome:
    label = LABELS[name] if name in LABELS else FRESH_LABELS[name]
    analysed = corpus.analysed(name)
    source = corpus.entries[name]
    expected, allowed = _expected(label, analysed.special_tokens.get("eos_token"))
    if analysed.error is not None:
        return Outcome(name, (), "error", False, (), analysed.error.message)
    turns = analysed.turns
    found = tuple(m.text for m in turns.end_of_turn)
    accepted = set(found) | {m.text for m in turns.also_ends}
    not_end = set(label["not_end"])
    harmful = tuple(t for t in found if t in not_end or not t.strip())
    if label["style"] == "whitespace":
        # the label names the whitespace close; the stop is the next turn's header text (a
        # whitespace stop would cut every multi-paragraph answer)
        exact = turns.style == "whitespace" and bool(found) and all(t.strip() and t in source for t in found)
    elif label["style"] == "next-header":
        exact = expected <= set(found) <= allowed
    elif label["style"] == "none":
        exact = not found
    else:
        exact = bool(found) and set(found) <= allowed and bool(expected & accepted)
    return Outcome(name, found, turns.style, exact, harmful)


def labelled(corpus: TemplateCorpus) -> list[str]:
    """The names of the labelled corpus entries; skips when the fetched corpus is absent."""
    if not any(name.startswith("llama.cpp/") for name in corpus.entries):
        pytest.skip("the fetched template corpus is absent; run `python fixtures/realmodels.py`")
    return sorted(name for name in corpus.entries if name in LABELS)


def fresh_labelled(corpus: TemplateCorpus) -> list[str]:
    """The names of the labelled fresh corpus entries; skips when it is not fetched."""
    names = sorted(name for name in corpus.entries if name in FRESH_LABELS)
    if not names:
        pytest.skip("the fresh template corpus is absent; run `python fixtures/fresh_templates.py`")
    return names


@pytest.fixture(scope="module")
def outcomes(template_corpus) -> list[Outcome]:
    return [evaluate(template_corpus, name) for name in labelled(template_corpus)]


def test_end_of_turn_is_exact_on_at_least_98_percent(outcomes):
    exact = sum(o.exact for o in outcomes)
    misses = [f"{o.name}: found {list(o.found)} ({o.style}{', ' + o.error if o.error else ''}), "
              f"labelled {LABELS[o.name]['end_of_turn']}" for o in outcomes if not o.exact]
    assert exact / len(outcomes) >= 0.98, "\n".join(misses)


def test_no_harmful_end_of_turn_on_any_template(outcomes):
    harmful = [f"{o.name}: {list(o.harmful)}" for o in outcomes if o.harmful]
    assert not harmful, "\n".join(harmful)


def test_a_template_fails_only_where_transformers_fails_too(outcomes, template_corpus):
    """Kimi-K2's templates call list.append, which transformers' own immutable sandbox refuses:
    stopdoctor may not render more or less than the runtime it mirrors."""
    import jinja2
    from transformers.utils.chat_template_utils import render_jinja_template

    for outcome in (o for o in outcomes if o.error):
        conversation = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
        with pytest.raises((jinja2.exceptions.TemplateError, TypeError, ValueError)):
            render_jinja_template([conversation], chat_template=template_corpus.entries[outcome.name],
                                  eos_token=EOS, bos_token=BOS)


def test_suggested_stops_obey_the_safe_stop_rule_on_every_template(template_corpus):
    """Label-free: no marker is whitespace, written inside a turn, or a header token (except the
    role header that ends a next-header template)."""
    for name in labelled(template_corpus):
        analysed = template_corpus.analysed(name)
        if analysed.error is not None:
            continue
        turns, known = analysed.turns, analysed.known
        headers = turns.header_tokens(known)
        for marker in turns.end_of_turn:
            assert marker.text.strip(), name
            assert marker.text not in turns.inner, (name, marker.text)
            assert marker.kind == "header" or marker.text not in headers, (name, marker.text)


def static_outcome(corpus: TemplateCorpus, name: str) -> str:
    """What the syntax-tree fallback answers for a template as if nothing rendered: "exact",
    "no answer" or "wrong" against the hand label (a wrong answer would be a harmful stop)."""
    from stopdoctor.template.static_turns import read_close

    label = LABELS[name] if name in LABELS else FRESH_LABELS[name]
    analysed = corpus.analysed(name)
    expected, allowed = _expected(label, analysed.special_tokens.get("eos_token"))
    found = read_close(corpus.entries[name], analysed.special_tokens, analysed.known, "as if nothing rendered")
    if found is None:
        return "no answer"
    if label["style"] == "whitespace":  # the stop is the next header's text, which the tree does not give
        return "wrong"
    return "exact" if found.marker in allowed and (found.marker in expected or not expected) and label["style"] != "none" else "wrong"


def test_the_static_reading_is_never_wrong_on_a_labelled_template(template_corpus):
    """Precision of the fallback for templates that render no plain conversation, measured on
    every labelled template (old and fresh corpus) as if none rendered: silence, never a wrong stop."""
    names = labelled(template_corpus) + sorted(n for n in template_corpus.entries if n in FRESH_LABELS)
    outcomes = {name: static_outcome(template_corpus, name) for name in names}
    wrong = [name for name, outcome in outcomes.items() if outcome == "wrong"]
    assert not wrong, wrong
    assert sum(o == "exact" for o in outcomes.values()) / len(outcomes) >= 0.6


def _report(corpus: TemplateCorpus, names: list[str], labels: dict) -> None:
    rows = [evaluate(corpus, name) for name in names]
    by_source: dict[str, Counter] = {}
    for o in rows:
        count = by_source.setdefault(o.name.split("/")[0], Counter())
        count["templates"] += 1
        count["exact"] += o.exact
        count["harmful"] += bool(o.harmful)
        count["style agrees"] += o.style == labels[o.name]["style"]
    total = Counter()
    for source, count in sorted(by_source.items()):
        total.update(count)
        print(f"{source:12} {count['templates']:4} templates  exact {count['exact']:4}  harmful {count['harmful']}  "
              f"style agrees {count['style agrees']}")
    print(f"{'all':12} {total['templates']:4} templates  exact {total['exact']:4} "
          f"({100 * total['exact'] / max(total['templates'], 1):.1f} %)  harmful {total['harmful']}  style agrees {total['style agrees']}")
    static = Counter(static_outcome(corpus, name) for name in names)
    print(f"{'static':12} {len(names):4} templates  read from the syntax tree alone: exact {static['exact']}, "
          f"no answer {static['no answer']}, wrong {static['wrong']}")
    for o in rows:
        if not o.exact or o.harmful:
            label = labels[o.name]
            print(f"  MISS {o.name}: found {list(o.found)} ({o.style}{'; ' + o.error if o.error else ''}) "
                  f"label {label['end_of_turn']} also {label['also']} ({label['style']})")


def main() -> int:
    corpus = TemplateCorpus()
    _report(corpus, labelled(corpus), LABELS)
    fresh = sorted(name for name in corpus.entries if name in FRESH_LABELS)
    if fresh:
        print("fresh corpus (never tuned on):")
        _report(corpus, fresh, FRESH_LABELS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
