"""People-facing text and JSON for `stopdoctor probe-stop`.

Texts are shown quoted with backslash escapes (`"\\nUser:"`); each covering token is shown as its
id and the text it writes. Imports: rich, render.console, render.prompt_text (escaping), prompt (data).
"""

from __future__ import annotations

import json

from rich.markup import escape
from rich.table import Table
from rich.text import Text

from stopdoctor.actions.probe import ProbeReport, StopReport
from stopdoctor.reporters.console import capture, text_of
from stopdoctor.reporters.document import header
from stopdoctor.reporters.prompt_text import quoted

SCHEMA = "stopdoctor.probe-stop/1"


def _ids_with_pieces(ids: list[int], pieces: list[str]) -> str:
    return " ".join(f"{i}{quoted(p)}" for i, p in zip(ids, pieces))


def _render_stop(out, stop: StopReport, color: bool) -> None:
    probe = stop.probe
    out.print()
    out.print(Text.assemble(("stop ", "bold"), (quoted(probe.stop), "bold magenta" if color else "")))
    special = f"  = special token id {probe.special_token_id}" if probe.special_token_id is not None else ""
    out.print(f"  standalone  {escape(_ids_with_pieces(probe.standalone_ids, stop.standalone_pieces))}{escape(special)}")
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold" if color else None)
    for name in ("  context", "preceding text", "ids covering the stop", "boundary", "id match"):
        table.add_column(name)
    for ctx in stop.contexts:
        p = ctx.probe
        boundary = Text("aligned", style="green" if color else "") if p.aligned else \
            Text(f"merged with {quoted(p.merged_prefix)}", style="yellow" if color else "")
        fires = Text("fires", style="green" if color else "") if ctx.id_match_fires else \
            Text("MISSES", style="bold red" if color else "")
        table.add_row(f"  {p.context_name}", quoted(p.context), _ids_with_pieces(p.ids, ctx.pieces), boundary, fires)
    out.print(table)
    total = len(stop.contexts)
    if stop.misses:
        out.print(f"  [bold red]verdict[/]  a token-id match on encode(stop) misses in {stop.misses} of {total} contexts; "
                  f"{len(probe.variants)} distinct id sequences; matching the decoded text catches all of them")
    else:
        out.print(f"  [green]verdict[/]  a token-id match on encode(stop) fires in all {total} contexts "
                  f"({len(probe.variants)} id sequence(s)); matching the decoded text fires too")
    if probe.false_positives:
        cut = ("as text only: a stop on the special token's id never fires there" if probe.special_token_id is not None
               else "generation would be cut there")
        out.print(f"  [yellow]false positives[/]  {len(probe.false_positives)} match(es) in {probe.samples_checked} "
                  f"sample answers ({cut}):")
        for fp in probe.false_positives[:8]:
            out.print(f"    {escape(fp.sample)} @{fp.offset}: {escape(quoted(fp.excerpt))}")
        if len(probe.false_positives) > 8:
            out.print(f"    … {len(probe.false_positives) - 8} more (see --json)")
    else:
        out.print(f"  false positives  none in {probe.samples_checked} sample answers")
    _render_thought(out, stop)
    for rec in probe.recommendations:
        out.print(f"  → {escape(rec)}")


def _render_thought(out, stop: StopReport) -> None:
    thought = stop.inside_thought
    if thought is None:
        return
    frame = f"{thought.open or ''}…{thought.close}"
    if not thought.fires:
        out.print(f"  inside thought  fires in none of {thought.samples_checked} sample thoughts ({escape(frame)})")
        return
    closes = all(m.at_close for m in thought.matches)
    what = ("it is the thought's close: the reply ends with an empty answer" if closes
            else "the reply would end inside the thought, before any answer")
    off = "" if thought.default_on else " (thinking is off by default: only when it is turned on)"
    style = "bold red" if thought.default_on else "yellow"
    out.print(f"  [{style}]inside thought[/]  fires in {len(thought.firing_samples)} of {thought.samples_checked} "
              f"sample thoughts ({escape(frame)}): {what}{off}")
    for m in thought.matches[:4]:
        out.print(f"    {escape(m.sample)} @{m.offset}: {escape(quoted(m.excerpt))}")
    out.print(f"  → never stop on {escape(thought.close)}: stop on the end of turn" if closes else
              "  → apply the stop to the answer only (after the reasoning parser splits the thought out), or drop it")


def render_probe_human(report: ProbeReport, color: bool = False, width: int = 100) -> str:
    out = capture(color, width)
    out.print(f"[bold]stopdoctor probe-stop[/] --model {escape(report.model)}")
    endings = ", ".join(quoted(t) for t in report.turn_endings) or "(none: no chat template)"
    out.print(f"template turn endings probed as contexts: {escape(endings)}")
    if report.user_header:
        out.print(f"user-turn header: {escape(quoted(report.user_header))}")
    for stop in report.stops:
        _render_stop(out, stop, color)
    out.print()
    in_thought = [s for s in report.stops if s.fires_inside_thought]
    failed = [s for s in report.stops if s.misses or (s.probe.false_positives and s.probe.special_token_id is None)]
    if in_thought:
        out.print(f"[bold]summary[/]  {len(in_thought)} of {len(report.stops)} stop string(s) fire inside the model's "
                  f"thought ({escape(report.reasoning.open or '')}…{escape(report.reasoning.close or '')}; "
                  "--fail-on-miss exits 1)")
    if failed:
        out.print(f"[bold]summary[/]  {len(failed)} of {len(report.stops)} stop string(s) would be missed by an id "
                  "match or fire inside ordinary answers (--fail-on-miss exits 1)")
    else:
        only_quoted = any(s.probe.false_positives for s in report.stops)
        out.print(f"[bold]summary[/]  all {len(report.stops)} stop string(s) match by id in every context and "
                  + ("fire by id in no sample answer (special tokens quoted as text do not count)" if only_quoted
                     else "fire in no sample answer"))
    return text_of(out)


def _stop_json(stop: StopReport) -> dict:
    probe = stop.probe
    return {
        "stop": probe.stop,
        "standalone_ids": probe.standalone_ids,
        "standalone_tokens": stop.standalone_pieces,
        "special_token_id": probe.special_token_id,
        "contexts": [
            {
                "name": c.probe.context_name,
                "context": c.probe.context,
                "ids": c.probe.ids,
                "tokens": c.pieces,
                "aligned": c.probe.aligned,
                "merged_prefix": c.probe.merged_prefix,
                "exact": c.probe.exact,
                "id_match_fires": c.id_match_fires,
            }
            for c in stop.contexts
        ],
        "id_match_misses": stop.misses,
        "variants": probe.variants,
        "text_match_catches_all": True,  # the decoded text always contains the stop string
        "false_positives": [{"sample": f.sample, "offset": f.offset, "excerpt": f.excerpt} for f in probe.false_positives],
        "samples_checked": probe.samples_checked,
        "recommendations": probe.recommendations,
        "inside_thought": _thought_json(stop.inside_thought),
        "failed": stop.failed,
    }


def _thought_json(thought) -> dict | None:
    """None when the model shows no thought (nothing probed)."""
    if thought is None:
        return None
    return {
        "fires": thought.fires,
        "open": thought.open,
        "close": thought.close,
        "prefilled": thought.prefilled,
        "default_on": thought.default_on,
        "samples_checked": thought.samples_checked,
        "firing_samples": thought.firing_samples,
        "matches": [{"sample": m.sample, "offset": m.offset, "excerpt": m.excerpt, "at_close": m.at_close}
                    for m in thought.matches],
    }


def render_probe_json(report: ProbeReport) -> str:
    document = {
        **header(SCHEMA),
        "model": report.model,
        "turn_endings": report.turn_endings,
        "user_header": report.user_header,
        "reasoning": None if report.reasoning is None else {"style": report.reasoning.style, "open": report.reasoning.open,
                                                            "close": report.reasoning.close},
        "corpus_files": report.corpus_files,
        "notes": report.notes,
        "stops": [_stop_json(s) for s in report.stops],
        "failed": report.failed,
    }
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"
