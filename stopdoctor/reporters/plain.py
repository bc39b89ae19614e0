"""Untrusted text made safe to print: every control character shown as an escape (`\\x1b[2J`
never clears a screen). Apart from `stopdoctor.reporters.console` so that a progress or error
line on stderr does not import rich (~60 ms of a cold `inspect --json`).

Imports: re only.
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
