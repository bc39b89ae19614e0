"""The reasoning block of `inspect`: the JSON object (public names: style, open, close, prefilled,
can_disable, history_stripped, stop_ids_needed) and the human lines.

Imports: analysis (as a type) only.
"""

from __future__ import annotations

from typing import Any

from stopdoctor.analysis.core import Analysis


def reasoning_document(analysis: Analysis) -> dict[str, Any]:
    r = analysis.reasoning
    return {
        "style": r.style,
        "open": r.open,
        "close": r.close,
        "prefilled": r.prefilled,
        "can_disable": r.can_disable,
        "history_stripped": r.history_stripped,
        "stop_ids_needed": analysis.reasoning_stop_ids(),
        "default_on": r.default_on,
        "enable": r.enable,
        "answer_open": r.answer_open,
        "evidence": list(r.evidence),
    }


def reasoning_lines(analysis: Analysis) -> list[str]:
    """Plain lines (the caller escapes and indents them); none for a model that does not reason."""
    r = analysis.reasoning
    if not r.is_reasoning:
        return []
    vocab = analysis.facts.vocab
    stops = ", ".join(f"{vocab.text_of(i) or '?'} ({i})" for i in analysis.reasoning_stop_ids()) or "unknown"
    if r.open is None and r.style == "untagged":
        lines = [f"style untagged: the thought is plain text, the answer follows {r.close or '?'}"]
    else:
        lines = [f"style {r.style}: the thought opens with {r.open or '?'} and closes with {r.close or '?'}"]
    if r.answer_open:
        lines.append(f"the answer opens with {r.answer_open}; {r.close} is no end of turn: never stop on it")
    if r.prefilled:
        opener = r.open or "the thought's opening words"
        lines.append(f"the generation prompt already writes {opener}: the output holds only {r.close}")
    elif r.default_on is False:
        lines.append(f"off by default{f'; on with {r.enable}' if r.enable else ''}")
    if r.can_disable:
        lines.append(f"turned off with {r.can_disable}")
    if r.history_stripped is not None:
        lines.append("earlier turns' thoughts are dropped" if r.history_stripped else "earlier turns' thoughts are kept")
    lines.append(f"stop on {stops}")
    return lines
