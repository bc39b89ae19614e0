"""People-facing text and JSON for `stopdoctor render`: the prompt with special tokens and
significant whitespace made visible, the token table, and a template comparison.

Convention (printed as a legend line): each newline is shown as `\\n` followed by a real line
break, so the structure stays readable and a trailing newline after the generation prompt is
seen; a space or tab before a line end or a special token is shown as `␣` / `\\t`; special tokens are shown as
written (they are visible text such as <|im_end|>) and, in colour, in bold magenta.

Imports: rich, render.console, prompt (data only).
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Sequence

from rich.markup import escape
from rich.table import Table
from rich.text import Text

from stopdoctor.actions.render import PromptComparison, RenderedPrompt, SpecialSpan
from stopdoctor.reporters.console import capture, text_of
from stopdoctor.reporters.document import header

SCHEMA = "stopdoctor.render/1"
SPECIAL_STYLE = "bold magenta"
WHITESPACE_STYLE = "dim cyan"
LEGEND = ("\\n = newline (a real line break follows) · ␣ = space before a line end or a special token · \\t tab · \\r return · "
          "special tokens as written (bold magenta in colour)")


def escaped(text: str) -> str:
    """One-line form of a token or marker: backslash escapes for newlines, tabs, returns."""
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r")


def quoted(text: str) -> str:
    """`text` on one line in double quotes (`escaped`, and a quote as `\\"`): how render and
    probe-stop print a token, a stop string or a marker."""
    return '"' + escaped(text).replace('"', '\\"') + '"'


def _append_plain(out: Text, text: str, style: str | None = None) -> None:
    """Append ordinary text, showing the whitespace that matters."""
    lines = text.split("\n")
    for number, line in enumerate(lines):
        if number:
            out.append("\\n", style=WHITESPACE_STYLE)
            out.append("\n")
        body = line.rstrip(" \t")
        tail = line[len(body):]
        out.append(body.replace("\t", "\\t").replace("\r", "\\r"), style=style)
        if tail:
            out.append(tail.replace(" ", "␣").replace("\t", "\\t"), style=WHITESPACE_STYLE)


def prompt_text(text: str, spans: Sequence[SpecialSpan]) -> Text:
    """The rendered prompt as rich Text, special tokens styled, whitespace made visible."""
    out = Text()
    at = 0
    for span in sorted(spans, key=lambda s: s.start):
        if span.start < at:
            continue
        _append_plain(out, text[at:span.start])
        _append_plain(out, text[span.start:span.end], SPECIAL_STYLE)
        at = span.end
    _append_plain(out, text[at:])
    return out


def _summary(prompt: RenderedPrompt) -> str:
    parts = []
    if prompt.ids is not None:
        specials = sum(t.special for t in prompt.tokens)
        parts.append(f"{len(prompt.ids)} tokens ({specials} special)")
    parts.append(f"{len(prompt.text)} characters")
    tail = prompt.text[-40:]
    if prompt.add_generation_prompt:
        what = " (generation prompt open)"
    elif prompt.continue_final_message:
        what = " (final message left open)"
    else:
        what = ""
    parts.append(f"ends with {quoted(tail)}{what}")
    return " · ".join(parts)


def _token_table(prompt: RenderedPrompt, color: bool) -> Table:
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold" if color else None)
    table.add_column("index", justify="right")
    table.add_column("id", justify="right")
    table.add_column("token")
    table.add_column("special")
    for token in prompt.tokens[:MAX_TABLE_ROWS]:
        style = SPECIAL_STYLE if token.special else ""
        table.add_row(str(token.index), str(token.id), Text(quoted(token.text), style=style),
                      "special" if token.special else "")
    if len(prompt.tokens) > MAX_TABLE_ROWS:
        table.add_row("…", "", f"{len(prompt.tokens) - MAX_TABLE_ROWS} more tokens (--json lists every one)", "")
    return table


# rich lays a table out in full before printing: 250k rows (a 1M-character prompt) took minutes.
MAX_TABLE_ROWS = 5_000


def _render_one(out, prompt: RenderedPrompt, show_ids: bool, color: bool, width: int) -> None:
    location = prompt.template.location
    out.print(f"template  {escape(prompt.template.name)}  [dim]({escape(str(location))})[/]")
    rule = "─" * min(width, 72)
    out.print(rule, style="dim")
    # The last shown `\n` already carries its real line break.
    out.print(prompt_text(prompt.text, prompt.special_spans), end="" if prompt.text.endswith("\n") else "\n")
    out.print(rule, style="dim")
    out.print(escape(_summary(prompt)))
    if prompt.bos.note:
        out.print(f"[yellow]note[/]  {escape(prompt.bos.note)}")
    for note in prompt.notes:
        out.print(f"note  {escape(note)}")
    if show_ids and prompt.tokens:
        out.print()
        out.print(_token_table(prompt, color))


def _render_comparison(out, comparison: PromptComparison) -> None:
    out.print()
    same_ids = comparison.ids_identical
    ids_word = "" if same_ids is None else (", same ids" if same_ids else ", ids differ")
    if comparison.identical:
        out.print(f"compare   [green]identical text[/]{ids_word}: {escape(comparison.left_label)} "
                  f"and {escape(comparison.right_label)}")
    else:
        out.print(f"compare   [bold red]texts differ[/]{ids_word}: {escape(comparison.left_label)} (-) "
                  f"vs {escape(comparison.right_label)} (+)")
        for line in comparison.diff:
            style = "red" if line.startswith("-") else "green" if line.startswith("+") else \
                "cyan" if line.startswith("@@") else ""
            out.print(Text(line, style=style))
    if comparison.end_of_turn_error:
        out.print(f"end of turn  could not be compared: {escape(comparison.end_of_turn_error)}")
        return
    left = ", ".join(quoted(t) for t in comparison.left_end_of_turn or []) or "(none)"
    right = ", ".join(quoted(t) for t in comparison.right_end_of_turn or []) or "(none)"
    verdict = "[bold red]differ[/]" if comparison.end_of_turn_differs else "[green]same[/]"
    out.print(f"end of turn  {verdict}: {escape(comparison.left_label)} {escape(left)} · "
              f"{escape(comparison.right_label)} {escape(right)}")


def render_prompt_human(prompts: Sequence[RenderedPrompt], comparisons: Sequence[PromptComparison] | None = None,
                        show_ids: bool = False, color: bool = False, width: int = 100) -> str:
    out = capture(color, width)
    out.print(f"[bold]stopdoctor render[/] {escape(prompts[0].model)}")
    out.print(f"[dim]legend    {escape(LEGEND)}[/]")
    # --thinking both renders each conversation twice (on, then off)
    renders = 2 if {"on", "off"} <= {p.thinking for p in prompts} else 1
    for number, prompt in enumerate(prompts):
        if len(prompts) > 1:
            out.print()
        if len(prompts) > renders and number % renders == 0:
            out.print(f"[bold]conversation {number // renders + 1} of {len(prompts) // renders}[/]")
        if prompt.thinking != "default":
            out.print(f"thinking  [bold]{prompt.thinking}[/]  [dim]({escape(prompt.thinking_call)})[/]")
        _render_one(out, prompt, show_ids, color, width)
        if comparisons is not None:
            _render_comparison(out, comparisons[number])
    return text_of(out)


# --------------------------------------------------------------------------------------------
# JSON
# --------------------------------------------------------------------------------------------


def _prompt_json(prompt: RenderedPrompt) -> dict:
    return {
        "model": prompt.model,
        "template": {"name": prompt.template.name, "location": str(prompt.template.location)},
        "messages": prompt.messages,
        "add_generation_prompt": prompt.add_generation_prompt,
        "continue_final_message": prompt.continue_final_message,
        "thinking": prompt.thinking,  # "on", "off" (render --thinking) or "default"
        "thinking_call": prompt.thinking_call or None,
        "text": prompt.text,
        "ids": _Verbatim(json.dumps(prompt.ids)),
        "tokens": _Verbatim(_tokens_json(prompt)),
        "special_spans": [{"start": s.start, "end": s.end, "text": s.text, "id": s.id} for s in prompt.special_spans],
        "bos": {
            "token": prompt.bos.token,
            "written_by_template": prompt.bos.written_by_template,
            "tokenizer_adds_bos": prompt.bos.tokenizer_adds_bos,
            "double_bos_if_reencoded": prompt.bos.note is not None,
            "note": prompt.bos.note,
        },
        "notes": prompt.notes,
    }


class _Verbatim(str):
    """JSON text placed into the document as it is (see `_dumps`)."""


def _tokens_json(prompt: RenderedPrompt) -> str:
    """The token list, one compact object a line. Built as text: a 2M-character prompt has a
    million tokens, and as dicts through json.dumps(indent=2) they took ~1.5 GB."""
    if not prompt.tokens:
        return "[]"
    dumped: dict[int, str] = {}  # the text of each distinct id, JSON-quoted once
    lines = []
    for t in prompt.tokens:
        text = dumped.get(t.id)
        if text is None:
            text = dumped[t.id] = json.dumps(t.text, ensure_ascii=False)
        lines.append(f'{{"index": {t.index}, "id": {t.id}, "text": {text}, '
                     f'"special": {"true" if t.special else "false"}, "start": {t.start}, "end": {t.end}}}')
    return "[\n" + ",\n".join(lines) + "\n]"


def _dumps(document: dict) -> str:
    """json.dumps(indent=2), with each _Verbatim value written as the JSON text it holds."""
    verbatim: list[str] = []
    nonce = secrets.token_hex(16)  # marks no input can hold: it cannot guess them

    def mark(value):
        if isinstance(value, _Verbatim):
            verbatim.append(value)
            return f"{nonce}:{len(verbatim) - 1}"
        if isinstance(value, dict):
            return {k: mark(v) for k, v in value.items()}
        if isinstance(value, list):
            return [mark(v) for v in value]
        return value

    text = json.dumps(mark(document), indent=2, ensure_ascii=False)
    return re.sub(f'"{nonce}:(\\d+)"', lambda m: verbatim[int(m.group(1))], text)


def _comparison_json(comparison: PromptComparison) -> dict:
    return {
        "against": comparison.right_label,
        "template": {"name": comparison.right.template.name, "location": str(comparison.right.template.location)},
        "text": comparison.right.text,
        "ids": _Verbatim(json.dumps(comparison.right.ids)),
        "identical": comparison.identical,
        "ids_identical": comparison.ids_identical,
        "diff": comparison.diff,
        "end_of_turn": {
            "model": comparison.left_end_of_turn,
            "compare": comparison.right_end_of_turn,
            "differs": comparison.end_of_turn_differs,
            "error": comparison.end_of_turn_error,
        },
    }


def render_prompt_json(prompts: Sequence[RenderedPrompt], comparisons: Sequence[PromptComparison] | None = None) -> str:
    """One conversation: one object with `text` and `ids`; several (JSONL input): `conversations`."""
    items = []
    for number, prompt in enumerate(prompts):
        item = _prompt_json(prompt)
        if comparisons is not None:
            item["compare"] = _comparison_json(comparisons[number])
        items.append(item)
    document = {**header(SCHEMA), **items[0]} if len(items) == 1 else {**header(SCHEMA), "conversations": items}
    return _dumps(document) + "\n"
