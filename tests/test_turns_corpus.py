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

Special tokens: realworld and GGUF entries use their model's own vocabulary. The fetched templates
come without one, so their special tokens are the marker-shaped texts of the template source
(what a tokenizer of that family declares), with sentinels for bos/eos.

Run `python tests/test_turns_corpus.py` for the per-source figures and every miss.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from fixtures import templates  # noqa: E402
from stopdoctor.core.errors import StopdoctorError  # noqa: E402
from stopdoctor.template.render import render_chat  # noqa: E402
from stopdoctor.template.turns import analyze_turns  # noqa: E402

LABELS = json.loads((Path(__file__).parent / "data" / "template_labels.json").read_text(encoding="utf-8"))["labels"]
EOS, BOS = "<|sd_eos|>", "<|sd_bos|>"
# Marker-shaped texts in a template's string literals: <|...|>, <...>, [...], <｜...｜>, ‹...›-style.
_MARKER = re.compile(r"<\|[^<>|\s'\"]{1,40}\|>|<[A-Za-z_/][A-Za-z0-9_:\-]{1,30}>|\[[A-Z_~][A-Za-z0-9_~\[]{0,25}\]"
                     r"|<｜[^｜<>]{1,40}｜>|‹[^›]{1,40}›|\[e~\[|\]~[a-z]\]|<\|[a-z_]+>|<[a-z_]+\|>|<[^\x00-\x7f<>\s]{1,10}>")
_SAMPLE = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
           {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "Bye"}]
_TOOL = {"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object", "properties": {}}}}


@dataclass(frozen=True)
class Outcome:
    name: str
    found: tuple[str, ...]
    style: str
    exact: bool
    harmful: tuple[str, ...]
    error: str | None = None


def _specials(name: str, source: str) -> tuple[dict[str, str], list[str]]:
    model = _model_for(name)
    if model is not None:
        from stopdoctor.api import load

        facts = load(str(model))
        return facts.special_token_texts(), list(facts.vocab.special_tokens)
    specials = {"bos_token": BOS, "eos_token": EOS}
    found = set(_MARKER.findall(source))
    # markers a template builds from pieces ('<|' + role + '|>') show only once rendered
    for messages in (_SAMPLE, _SAMPLE[1:]):
        for tools in (None, [_TOOL]):
            try:
                found |= set(_MARKER.findall(render_chat(source, messages, special_tokens=specials, tools=tools,
                                                         add_generation_prompt=True)))
            except StopdoctorError:
                continue
    return specials, sorted(found)


def _model_for(name: str) -> Path | None:
    parts = name.split("/")
    if parts[0] == "realworld":
        return templates.find_realworld() / parts[1]
    if parts[0] == "gguf":
        return templates.expected_paths(hf=False).smollm2_gguf.parent / parts[1]
    return None


def _expected(label: dict, eos: str | None) -> tuple[set[str], set[str]]:
    def resolve(texts: list[str]) -> set[str]:
        return {eos if t == "{eos_token}" else t for t in texts if eos or t != "{eos_token}"}

    return resolve(label["end_of_turn"]), resolve(label["end_of_turn"] + label["also"])


def evaluate(name: str, source: str) -> Outcome:
    label = LABELS[name]
    special_tokens, known = _specials(name, source)
    expected, allowed = _expected(label, special_tokens.get("eos_token"))
    try:
        turns = analyze_turns(source, special_tokens, known)
    except StopdoctorError as error:
        return Outcome(name, (), "error", False, (), error.message)
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


def _corpus() -> dict[str, str]:
    entries = templates.corpus()
    if not any(name.startswith("llama.cpp/") for name in entries):
        pytest.skip("the fetched template corpus is absent; run `python fixtures/realmodels.py`")
    return {name: source for name, source in entries.items() if name in LABELS}


@pytest.fixture(scope="module")
def outcomes() -> list[Outcome]:
    return [evaluate(name, source) for name, source in sorted(_corpus().items())]


def test_end_of_turn_is_exact_on_at_least_98_percent(outcomes):
    exact = sum(o.exact for o in outcomes)
    misses = [f"{o.name}: found {list(o.found)} ({o.style}{', ' + o.error if o.error else ''}), "
              f"labelled {LABELS[o.name]['end_of_turn']}" for o in outcomes if not o.exact]
    assert exact / len(outcomes) >= 0.98, "\n".join(misses)


def test_no_harmful_end_of_turn_on_any_template(outcomes):
    harmful = [f"{o.name}: {list(o.harmful)}" for o in outcomes if o.harmful]
    assert not harmful, "\n".join(harmful)


def test_a_template_fails_only_where_transformers_fails_too(outcomes):
    """Kimi-K2's templates call list.append, which transformers' own immutable sandbox refuses:
    stopdoctor may not render more or less than the runtime it mirrors."""
    import jinja2
    from transformers.utils.chat_template_utils import render_jinja_template

    corpus = _corpus()
    for outcome in (o for o in outcomes if o.error):
        conversation = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
        with pytest.raises((jinja2.exceptions.TemplateError, TypeError, ValueError)):
            render_jinja_template([conversation], chat_template=corpus[outcome.name], eos_token=EOS, bos_token=BOS)


def test_suggested_stops_obey_the_safe_stop_rule_on_every_template():
    """Label-free: no marker is whitespace, written inside a turn, or a header token (except the
    role header that ends a next-header template)."""
    for name, source in sorted(_corpus().items()):
        special_tokens, known = _specials(name, source)
        try:
            turns = analyze_turns(source, special_tokens, known)
        except StopdoctorError:
            continue
        headers = turns.header_tokens(known)
        for marker in turns.end_of_turn:
            assert marker.text.strip(), name
            assert marker.text not in turns.inner, (name, marker.text)
            assert marker.kind == "header" or marker.text not in headers, (name, marker.text)


def main() -> int:
    rows = [evaluate(name, source) for name, source in sorted(_corpus().items())]
    by_source: dict[str, Counter] = {}
    for o in rows:
        count = by_source.setdefault(o.name.split("/")[0], Counter())
        count["templates"] += 1
        count["exact"] += o.exact
        count["harmful"] += bool(o.harmful)
        count["style agrees"] += o.style == LABELS[o.name]["style"]
    total = Counter()
    for source, count in sorted(by_source.items()):
        total.update(count)
        print(f"{source:12} {count['templates']:4} templates  exact {count['exact']:4}  harmful {count['harmful']}  "
              f"style agrees {count['style agrees']}")
    print(f"{'all':12} {total['templates']:4} templates  exact {total['exact']:4} "
          f"({100 * total['exact'] / total['templates']:.1f} %)  harmful {total['harmful']}  style agrees {total['style agrees']}")
    for o in rows:
        if not o.exact or o.harmful:
            label = LABELS[o.name]
            print(f"  MISS {o.name}: found {list(o.found)} ({o.style}{'; ' + o.error if o.error else ''}) "
                  f"label {label['end_of_turn']} also {label['also']} ({label['style']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
