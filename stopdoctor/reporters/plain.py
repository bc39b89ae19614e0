"""Untrusted text made safe to print: every control character shown as an escape (`\\x1b[2J`
never clears a screen), and no line that a CI runner would read as a workflow command (a model
name `x\\n::error::forged` in a report run by GitHub Actions is a forged annotation). Apart from `stopdoctor.reporters.console` so that a progress or error
line on stderr does not import rich (~60 ms of a cold `inspect --json`).

Imports: re and html only.
"""

from __future__ import annotations

import re

# C0 controls but newline and tab, DEL, C1 controls (0x9b is a one-byte CSI on some terminals),
# and the bidirectional overrides and isolates that reorder what a reader sees.
_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def printable(text: str) -> str:
    """`text` with every control character shown as an escape (`\\x1b`); newline and tab kept."""
    return _UNPRINTABLE.sub(_escaped, text)


# GitHub's runner reads a line whose start, past whitespace (.NET's Trim: any Unicode space), is `::`
# or the older `##[` as a workflow command. Colour codes before it are skipped as well.
_COMMAND_START = re.compile(r"^((?:[^\S\n]|\x1b\[[0-9;]*m)*)(::|##\[)", re.MULTILINE)


def _defused(match: re.Match[str]) -> str:
    start = match.group(2)
    return match.group(1) + ("\\x3a:" if start == "::" else "\\x23#[")


def no_workflow_commands(text: str) -> str:
    """`text` with the first character of a line-starting `::` or `##[` shown as an escape."""
    return _COMMAND_START.sub(_defused, text)


def terminal_safe(text: str) -> str:
    """What a terminal or CI log may be sent: controls escaped, no line a workflow command."""
    return no_workflow_commands(printable(text))


def html_text(text: str) -> str:
    """Untrusted text for an HTML page: escaped (`<script>` is text), controls and bidi overrides
    shown as escapes, never applied."""
    import html  # only the HTML pages escape: ~1-2 ms a command that writes none

    return html.escape(printable(text))


def html_isolated(text: str) -> str:
    """`html_text` in a `<bdi>`: right-to-left text in a name never reorders what surrounds it."""
    return f"<bdi>{html_text(text)}</bdi>"


# Raw in a document's text but not controls JSON escapes itself: C1 controls (0x9b is a one-byte
# CSI), DEL, the bidi overrides and isolates, and the line and paragraph separators.
_RAW_IN_DOCUMENT = re.compile("[\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def document_safe(text: str) -> str:
    """A finished document (JSON, SARIF, SQL, a report) as it may be written: each character above
    as a `\\uXXXX` escape, which in JSON is the same string and elsewhere shows what was there.
    Human reports and annotations have escaped them already; JSON keeps them in strings only."""
    return _RAW_IN_DOCUMENT.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
