"""People-facing text and JSON for `stopdoctor labels`: the share of examples whose end-of-turn
is trained, the cause of every failure, the findings, and examples token by token.

Token display (`--show`): tokens are separated by single spaces; a space inside a token is `␣`,
a newline `\\n`, a tab `\\t`; each line starts with the label state of its run of tokens
(`TRAINED` or `masked`), so it reads the same without colour. In colour, trained runs are green,
masked ones dim, special tokens bold magenta.

Imports: rich, render.console, render.inspect_json (header, findings), api, labels (data only).
"""

from __future__ import annotations

import json
from typing import Any

from rich.markup import escape
from rich.text import Text

from stopdoctor.rules.results import LabelsResult
from stopdoctor.labels.result import CAUSES, LabelledExample, DatasetLabels
from stopdoctor.reporters.console import capture, text_of
from stopdoctor.reporters.human import print_findings
from stopdoctor.reporters.document import finding, header, location, summary

SCHEMA = "stopdoctor.labels/1"
SPECIAL_STYLE = "bold magenta"
STATE_STYLE = {True: "green", False: "dim"}
CAUSE_TEXT = {
    "no-generation-markers": "masked: the template has no {% generation %} markers",
    "outside-generation": "masked: outside the template's {% generation %} block",
    "outside-completion": "masked: outside the completion",
    "not-an-eot-token": "masked: not in Axolotl's eot_tokens (nor the eos)",
    "outside-turn": "masked: more than 3 tokens after the turn (Axolotl)",
    "pad-masked": "masked: it is the pad id",
    "truncated": "truncated away by --max-length",
    "absent": "absent: no end-of-turn / eos in the text",
    "split": "several ordinary tokens",
}


def _percent(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "n/a"


def token_display(example: LabelledExample, position: int, result: DatasetLabels) -> str:
    start, end = example.offsets[position]
    token_id = example.ids[position]
    text = example.text[start:end] if end > start else result.token_text(token_id)
    if result.facts.vocab.is_special(token_id):
        return text
    return text.replace("\\", "\\\\").replace(" ", "␣").replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r")


def _runs(example: LabelledExample) -> list[tuple[bool, int, int]]:
    runs: list[tuple[bool, int, int]] = []
    for i, state in enumerate(example.trained):
        if runs and runs[-1][0] == state:
            runs[-1] = (state, runs[-1][1], i + 1)
        else:
            runs.append((state, i, i + 1))
    return runs


def _render_example(out, example: LabelledExample, result: DatasetLabels, width: int) -> None:
    trained = sum(example.trained)
    truncated = f", cut from {example.full_length}" if (example.full_length or 0) > len(example.ids) else ""
    out.print(f"[bold]example {example.index}[/]  ({example.kind}, collator {example.collator}, "
              f"{len(example.ids)} tokens{truncated}, {trained} trained)")
    room = max(20, width - 11)
    vocab = result.facts.vocab
    for state, start, end in _runs(example):
        label = "TRAINED" if state else "masked"
        line, used = Text(f"  {label:<8} ", style=STATE_STYLE[state]), 0
        for position in range(start, end):
            shown = token_display(example, position, result)
            if used and used + len(shown) + 1 > room:
                out.print(line)
                line, used = Text(" " * 11), 0
            if used:
                line.append(" ")
                used += 1
            style = SPECIAL_STYLE if vocab.is_special(example.ids[position]) else STATE_STYLE[state]
            line.append(shown, style=style)
            used += len(shown)
        out.print(line)
    for span in example.spans:
        where = "text" if span.message is None else f"message {span.message}"
        if span.end_token is not None and span.end_id is not None:
            token = f"{result.token_text(span.end_id)} (id {span.end_id}) at token {span.end_token}"
        else:
            token = "no end token"
        verdict = "[green]trained[/]" if span.trained else f"[bold red]{escape(CAUSE_TEXT[str(span.cause)])}[/]"
        out.print(f"  end of {where}: {escape(token)} — {verdict}")
    if example.unlocated:
        out.print(f"  [dim]{example.unlocated} assistant message(s) not written verbatim by the template: not checked[/]")
    out.print()


def render_labels_human(report: LabelsResult, show: int = 0, color: bool = False, width: int = 100) -> str:
    out = capture(color, width)
    result: DatasetLabels = report.labels  # type: ignore[assignment]
    settings = result.settings
    collators = ", ".join(result.collators) or settings.collator
    limit = f", max length {settings.max_length}" if settings.max_length else ""
    if settings.packing != "none":
        limit += f", packing {settings.packing}"
    out.print(f"[bold]stopdoctor labels[/] {escape(report.source.spec)}  data {escape(result.data)}  "
              f"[dim](collator {escape(collators)}{escape(limit)})[/]")
    if result.template is not None:
        markers = "with {% generation %} markers" if result.has_generation_markers else "no {% generation %} markers"
        out.print(f"  template     {escape(result.template.name)} ({escape(str(result.template.location))}), {escape(markers)}")
    ends = " · ".join(result.end_markers) or "(none)"
    pad = (f"{result.token_text(result.pad_id)} (id {result.pad_id}, {result.pad_note})"
           if result.pad_id is not None else "(none)")
    out.print(f"  end of turn  {escape(ends)}   pad {escape(pad)}")

    if show > 0:
        out.print()
    for example in result.examples[:max(0, show)]:
        _render_example(out, example, result, width)

    checked = result.checked
    spans = result.spans
    out.print(f"  examples     {result.examples_ok} of {len(checked)} end every assistant turn with a trained "
              f"end-of-turn ({_percent(result.examples_ok, len(checked))}); {len(result.examples)} read")
    out.print(f"  end tokens   {result.spans_ok} of {len(spans)} trained ({_percent(result.spans_ok, len(spans))})")
    if result.bad_lines:
        more = f" (+{len(result.bad_lines) - 3} more)" if len(result.bad_lines) > 3 else ""
        out.print(f"  bad lines    [yellow]{len(result.bad_lines)} bad lines skipped: "
                  f"{escape('; '.join(result.bad_lines[:3]))}{more}[/]")
    dropped = result.dropped
    if dropped:
        shown = ", ".join(map(str, dropped[:10])) + (", …" if len(dropped) > 10 else "")
        if result.settings.collator == "axolotl":
            why = "longer than --max-length: Axolotl drops them"
        elif result.settings.packing == "bfd":
            why = "nothing trained is left after truncation: they teach nothing"
        else:
            why = "nothing trained is left after truncation: TRL drops them"
        out.print(f"  [dim]dropped      {len(dropped)} example(s), {why} (not checked): {shown}[/]")
    unlocated = sum(e.unlocated for e in result.examples)
    if unlocated:
        out.print(f"  [dim]not checked  {unlocated} assistant message(s) the template does not write verbatim[/]")
    for cause, counts in result.cause_counts().items():
        indices = counts["examples"]
        shown = ", ".join(map(str, indices[:10])) + (", …" if len(indices) > 10 else "")
        out.print(f"  [red]{cause:<22}[/] {counts['spans']} end token(s) in {len(indices)} example(s): {shown}")

    out.print()
    print_findings(out, report.findings)
    return text_of(out)


def _example_json(example: LabelledExample, result: DatasetLabels) -> dict[str, Any]:
    return {
        "index": example.index,
        "kind": example.kind,
        "collator": example.collator,
        "length": example.full_length,
        "tokens": [
            {"id": i, "text": result.token_text(i), "trained": t} for i, t in zip(example.ids, example.trained)
        ],
        "spans": [_span_json(s) for s in example.spans],
    }


def _span_json(span) -> dict[str, Any]:
    return {"message": span.message, "end_token": span.end_token, "end_id": span.end_id,
            "trained": span.trained, "cause": span.cause}


def labels_document(report: LabelsResult, show: int = 0) -> dict[str, Any]:
    result: DatasetLabels = report.labels  # type: ignore[assignment]
    settings = result.settings
    checked, spans = result.checked, result.spans
    causes = result.cause_counts()
    failing = sorted({i for c in causes.values() for i in c["examples"]})
    template = None
    if result.template is not None:
        template = {"name": result.template.name, "location": location(result.template.location),
                    "generation_markers": result.has_generation_markers}
    return {
        **header(SCHEMA),
        "model": {"spec": report.source.spec, "kind": report.source.kind},
        "data": result.data,
        "collator": settings.collator,
        "collators_applied": result.collators,
        "max_length": settings.max_length,
        "packing": settings.packing,
        "append_eos": settings.append_eos,
        "template": template,
        "end_of_turn": result.end_markers,
        "eos_id": result.eos_id,
        "pad": {"id": result.pad_id, "text": result.token_text(result.pad_id) if result.pad_id is not None else None,
                "source": result.pad_note},
        "examples": {"read": len(result.examples), "checked": len(checked), "ok": result.examples_ok,
                     "share_ok": result.examples_ok / len(checked) if checked else None,
                     "dropped": len(result.dropped), "bad_lines": len(result.bad_lines)},
        "dropped_examples": result.dropped,
        "bad_lines": result.bad_lines[:100],
        "spans": {"total": len(spans), "trained": result.spans_ok,
                  "share_trained": result.spans_ok / len(spans) if spans else None,
                  "unlocated": sum(e.unlocated for e in result.examples)},
        "causes": {cause: causes.get(cause, {"spans": 0, "examples": []}) for cause in CAUSES},
        "failing_examples": failing,
        "failures": [{"index": e.index, "line": e.line, "causes": sorted({s.cause for s in e.spans if s.cause})}
                     for e in result.examples if not e.ok],
        "shown": [_example_json(e, result) for e in result.examples[:max(0, show)]],
        "findings": [finding(f) for f in report.findings],
        "summary": summary(report.findings),
    }


def render_labels_json(report: LabelsResult, show: int = 0) -> str:
    return json.dumps(labels_document(report, show), indent=2, ensure_ascii=False) + "\n"
