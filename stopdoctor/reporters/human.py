"""People-facing text for `inspect` and `rules`, rendered with rich into a string."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from stopdoctor.rules.results import InspectResult
from stopdoctor.rules.registry import Rule
from stopdoctor.core.findings import Severity
from stopdoctor.runtimes.stops import RUNTIMES
from stopdoctor.reporters.console import capture, text_of
from stopdoctor.reporters.reasoning_text import reasoning_lines

STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}


def visible(text: str) -> str:
    """Show whitespace that matters: newlines and tabs as escapes."""
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r")


def render_inspect_human(result: InspectResult, color: bool = False, width: int = 100, command: str = "inspect",
                         unfinished: str | None = None) -> str:
    """`unfinished`: why the run stopped before every check ran (a serving file that could not be
    read); the report then never says "No findings.", only what was found before it stopped."""
    out = capture(color, width)
    facts, analysis = result.facts, result.analysis
    out.print(f"[bold]stopdoctor {command}[/] {escape(result.source.spec)}  [dim]({result.source.kind})[/]")
    files = ", ".join(sorted(result.source.files))
    out.print(f"  files     {escape(files)}")
    if result.missing_files:
        out.print(f"  missing   [yellow]{escape(', '.join(result.missing_files))}[/]")
    for config in result.serving:  # `check --serving`: each file read, with its own verdict
        out.print(f"  serving   {escape(str(config.path))}  [dim]({config.kind})[/]  {serving_verdict(config, result.findings)}")
    verdict = analysis.verdict
    assert verdict is not None  # `analyze` always decides one
    clues = "; ".join(f"{e.clue} ({e.weight:+d})" for e in verdict.evidence) or "no clue either way"
    out.print(f"  kind      [bold]{verdict.kind}[/]  score {verdict.score:+d} (instruct at +1 or more with a strong "
              f"clue, base at -2 or less)  [dim]{escape(clues)}[/]")
    if facts.templates:
        names = ", ".join(f"{t.name} ({t.location})" for t in facts.templates)
        out.print(f"  template  {escape(names)}")
    else:
        out.print("  template  [yellow]none[/]")
    style = analysis.turns.style if analysis.turns is not None else "token"
    for marker in analysis.end_of_turn:
        form = "one special token" if marker.single_special else (f"{len(marker.ids)} ordinary tokens" if marker.known else "unknown to this vocabulary")
        if marker.kind == "header":
            form = f"nothing closes the turn: the next turn's header, {form}"
        elif marker.kind == "text":
            form = "only whitespace closes the turn: stop on the next header's text"
        elif style == "only-when-followed":
            form += "; written only when another turn follows"
        if analysis.turns is not None and analysis.turns.static is not None:
            form += "; read from the template's source, not rendered: no plain conversation renders"
        out.print(f"  end of turn  {escape(visible(marker.text))} → ids {list(marker.ids)} ({form})")
    if facts.templates and not analysis.end_of_turn:
        out.print("  end of turn  [red]none: nothing follows assistant content[/]")
    for i, line in enumerate(reasoning_lines(analysis)):
        out.print(f"  {'reasoning' if i == 0 else '':<11}{escape(visible(line))}")
    out.print("  stop ids")
    core = [s for s in analysis.stops if s.runtime in RUNTIMES]
    engines = [s for s in analysis.stops if s.runtime not in RUNTIMES]
    for stops in core:
        parts = ", ".join(f"{s.id} {escape(s.text or '?')} [dim]({escape(str(s.location))})[/]" for s in stops.stops) or "[red]none[/]"
        unsure = "" if stops.complete else "  [yellow](incomplete: a file it reads is missing)[/]"
        out.print(f"    {stops.runtime:<12} {parts}{unsure}")
    if engines:  # one line: each engine's ids (`inspect --json` stop_ids.per_runtime has their sources)
        listed = ", ".join(f"{s.runtime} {s.ids}{'' if s.complete else '?'}" for s in engines)
        out.print(f"    {'engines':<12} [dim]{escape(listed)}[/]")
    from stopdoctor.reporters.sampling_text import print_sampling

    print_sampling(out, facts, result.serving)
    if result.original is not None:
        out.print(f"  against   {escape(result.original.facts.source.spec)}  [dim](eos ids and sampling keys compared)[/]")
    if result.weights is not None:
        from stopdoctor.reporters.weights_text import print_weights

        print_weights(out, result.weights)
    out.print()
    print_findings(out, result.findings, unfinished)
    return text_of(out)


def serving_verdict(config, findings) -> str:
    """What the checks found in one serving file (the findings located in it), as rich markup."""
    own = [f for f in findings if f.location is not None and f.location.file == str(config.path)]
    if not own:
        return "[green]ok[/]: no finding"
    counts = ", ".join(f"{n} {s.label}{'s' if n > 1 and s != Severity.INFO else ''}"
                       for s in (Severity.ERROR, Severity.WARNING, Severity.INFO)
                       if (n := sum(1 for f in own if f.severity == s)))
    worst = max(f.severity for f in own)
    return f"[{STYLE[worst]}]{counts}[/]: {', '.join(dict.fromkeys(f.code for f in own))}"


def _where(location) -> str:
    """file:line then the key, so an editor or terminal can jump to the line the facts recorded."""
    if location.line and location.key:
        return f"{location.file}:{location.line} {location.key}"
    return str(location)


def print_findings(out, findings, unfinished: str | None = None) -> None:
    """The findings block every report ends with: each finding with its fix, then the counts."""
    if unfinished is not None:
        out.print(f"[red]not fully checked:[/] {escape(unfinished)}")
    elif not findings:
        out.print("[green]No findings.[/]")
    for f in findings:
        where = f"  [dim]{escape(_where(f.location))}[/]" if f.location else ""
        accepted = "  [dim](baseline: accepted)[/]" if f.baseline else ""
        out.print(f"[{STYLE[f.severity]}]{f.severity.label:<7}[/] [bold]{f.code}[/] {f.name}{where}{accepted}")
        out.print(f"        {escape(f.message)}")
        out.print(f"        [green]fix:[/] {escape(f.fix)}")
    counts = {s: sum(1 for f in findings if f.severity == s) for s in Severity}
    out.print()
    out.print(f"{counts[Severity.ERROR]} error(s), {counts[Severity.WARNING]} warning(s), {counts[Severity.INFO]} info")


def render_rules_human(checks: list[Rule], color: bool = False, width: int = 100, detail: bool = False) -> str:
    out = capture(color, width)
    if detail:
        for check in checks:
            out.print(f"[bold]{check.code} {check.name}[/]  ({check.severity.label})")
            out.print(escape(check.summary))
            for heading, body in check.sections.items():
                out.print(f"\n[bold]{heading}[/]")
                out.print(escape(body))
            out.print()
        return text_of(out)
    table = Table(box=None, show_header=True, header_style="bold")
    for column in ("code", "name", "severity", "summary"):
        table.add_column(column)
    for check in checks:
        table.add_row(check.code, check.name, check.severity.label, escape(check.summary))
    out.print(table)
    return text_of(out)
