"""The `sampling` section of `inspect`: per runtime, the sampling it will use and where each value
comes from (a file and key, or the runtime's default with its source), and what the model card
recommends. Pure functions: facts in, dict or text out.

Imports: core, facts, runtimes.sampling, reporters.
"""

from __future__ import annotations

from typing import Any

from stopdoctor.facts.card_sampling import card_sampling
from stopdoctor.facts.model_facts import ModelFacts
from stopdoctor.runtimes.sampling import KEYS, RuntimeSampling, effective_sampling, sets_sampling
from stopdoctor.reporters.document import location

SHORT = {"temperature": "temp", "top_p": "top_p", "top_k": "top_k", "min_p": "min_p",
         "repetition_penalty": "rep", "presence_penalty": "presence"}


def _value(value: Any) -> Any:
    return round(value, 6) if isinstance(value, float) else value


def sampling_document(facts: ModelFacts) -> dict[str, Any]:
    rows = effective_sampling(facts)
    card = card_sampling(facts)
    return {
        "declared": {k: {"value": _value(v.value), "location": location(facts.locate(v.location))} for k, v in facts.sampling.items()},
        "card": {k: {"value": v.value, "location": location(v.location)} for k, v in card.items()},
        "per_runtime": {
            r.runtime: {
                "greedy": r.greedy,
                "rule": r.rule,
                "values": {v.key: {"value": _value(v.value), "default": v.default, "source": v.source,
                                   "location": location(facts.locate(v.location))} for v in r.values},
            } for r in rows
        },
    }


def served_sampling_document(facts: ModelFacts, serving: tuple) -> dict[str, Any]:
    """Per Modelfile or request body that changes some runtime's sampling: path → runtime →
    key → {value, default, source} for the rows it changes (`check --serving` JSON)."""
    plain = effective_sampling(facts)
    out: dict[str, Any] = {}
    for config in serving:
        if not sets_sampling(config):
            continue
        rows = {row.runtime: {v.key: {"value": _value(v.value), "default": v.default, "source": v.source} for v in row.values}
                for row, before in zip(effective_sampling(facts, config), plain, strict=True) if row.values != before.values}
        if rows:
            out[str(config.path)] = rows
    return out


def _line(row: RuntimeSampling) -> str:
    parts = []
    for key in KEYS:
        value = row.get(key)
        if value is None or value.value is None:
            continue
        shown = f"{SHORT[key]} {_value(value.value)}"
        parts.append(shown if value.default else f"[bold]{shown}*[/]")  # the mark reads without colour too
    mode = "greedy; " if row.greedy else ""
    return mode + ", ".join(parts)


def print_sampling(out, facts: ModelFacts, serving: tuple = ()) -> None:
    """Shown when the model declares sampling, its card recommends some or a serving file sets
    some: each runtime's values, marked * (and bold) where a file set them (the rest are the
    runtime's defaults); then, per Modelfile or request body checked with it, the rows it changes."""
    from rich.markup import escape  # the JSON document needs no rich

    card = card_sampling(facts)
    setting = [s for s in serving if sets_sampling(s) and _sets_sampling(facts, s)]
    if not facts.sampling and not card and not setting:
        return
    declared = ", ".join(f"{k} {_value(v.value)} ({v.location})" for k, v in facts.sampling.items()) or "none"
    out.print(f"  sampling  declared: {escape(declared)}  [dim](* from the model's files; the rest: runtime defaults)[/]")
    if card:
        listed = ", ".join(f"{k} {v.value}" for k, v in card.items())
        line = min(v.location.line or 0 for v in card.values())
        out.print(f"    {'card':<16} {escape(listed)} [dim](README.md:{line})[/]")
    plain = effective_sampling(facts)
    for row in plain:
        out.print(f"    {row.runtime:<16} {_line(row)}")
    for config in setting:
        out.print(f"    [dim]served with {escape(str(config.path))}:[/]")
        for row, before in zip(effective_sampling(facts, config), plain, strict=True):
            if row.values != before.values:
                out.print(f"    {row.runtime:<16} {_line(row)}")


def _sets_sampling(facts: ModelFacts, serving) -> bool:
    """The serving file changes some runtime's sampling."""
    return any(a.values != b.values for a, b in zip(effective_sampling(facts, serving), effective_sampling(facts), strict=True))
