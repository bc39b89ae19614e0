"""`stop-odds` as text and as the `stopdoctor.stop-odds/1` JSON document. Pure functions.

Imports: actions.stop_odds (data classes only; nothing here runs a model), reporters.
"""

from __future__ import annotations

import json
from typing import Any

from rich.markup import escape

from stopdoctor.actions.stop_odds import StopOdds
from stopdoctor.reporters.console import capture, text_of
from stopdoctor.reporters.human import visible
from stopdoctor.reporters.document import header


def stop_odds_document(odds: StopOdds) -> dict[str, Any]:
    return {
        **header("stopdoctor.stop-odds/1"),
        "model": odds.model,
        "device": odds.device,
        "data": odds.data,
        "median_p_end_of_turn": odds.median_p_end_of_turn,
        "verdict_rows": odds.verdict_kind,  # the kind of rows the verdict and its median are over
        "median_apart": odds.median_apart,  # plain-text rows beside chat rows: measured, not in the verdict
        "verdict": odds.verdict,
        "reason": odds.reason,
        "tokens": odds.tokens,
        "seconds": round(odds.seconds, 4),
        "tokens_per_second": round(odds.tokens_per_second, 1),
        "examples": [
            {"index": e.context.index, "source": e.context.source, "kind": e.context.kind,
             "context_tokens": len(e.context.ids), "end_of_turn_ids": list(e.context.targets),
             "p_end_of_turn": e.p_end_of_turn, "best_id": e.best_target, "rank": e.rank,
             "answer_end": e.context.preview,
             "top": [{"id": c.id, "text": c.text, "decoded": c.decoded, "p": c.p} for c in e.top]}
            for e in odds.examples
        ],
        "skipped": [{"source": source, "why": why} for source, why in odds.skipped],
    }


def render_stop_odds_json(odds: StopOdds) -> str:
    return json.dumps(stop_odds_document(odds), indent=2, ensure_ascii=False) + "\n"


def render_stop_odds_human(odds: StopOdds, color: bool = False, width: int = 100, vocab_text=None) -> str:
    out = capture(color, width)
    out.print(f"[bold]stopdoctor stop-odds[/] {escape(odds.model)}  [dim]({escape(odds.data or 'built-in conversations')}, "
              f"{odds.device}, {odds.tokens} tokens in {odds.seconds:.2f} s: {odds.tokens_per_second:,.0f} tokens/s)[/]")
    out.print("  P(eot)   rank  answer end                              most likely instead")
    for e in odds.examples:
        top = ", ".join(f"{escape(json.dumps(c.decoded, ensure_ascii=False))} {c.p:.2f}" for c in e.top[:3])
        style = "green" if e.p_end_of_turn >= 0.1 else ("red" if e.p_end_of_turn < 0.01 else "yellow")
        answer = visible(e.context.preview[-36:])
        if odds.apart and e.context.kind != odds.verdict_kind:
            answer = "(text) " + visible(e.context.preview[-29:])  # measured apart: not in the verdict
        out.print(f"  [{style}]{e.p_end_of_turn:6.4f}[/] {e.rank:>6}  {escape(answer):<38}  [dim]{top}[/]")
    for source, why in odds.skipped[:5]:
        out.print(f"  [yellow]skipped[/] {escape(source)}: {escape(why)}")
    if len(odds.skipped) > 5:
        out.print(f"  [yellow]skipped[/] … {len(odds.skipped) - 5} more")
    style = {"stops": "green", "configuration": "yellow", "weak": "yellow"}.get(odds.verdict, "bold red")
    rows = "chat rows, P(end-of-turn)" if odds.verdict_kind == "chat" else "plain-text rows, P(eos) at the end"
    out.print(f"  median   [bold]{odds.median_p_end_of_turn:.4f}[/]  [dim]({len(odds.judged)} {rows})[/]")
    if odds.apart:
        out.print(f"  apart    {odds.median_apart:.4f}  [dim]({len(odds.apart)} plain-text row(s), P(eos) at the end of the "
                  "text: another question, not in the verdict)[/]")
    out.print(f"  verdict  [{style}]{escape(odds.verdict)}[/]: {escape(odds.reason)}")
    return text_of(out)
