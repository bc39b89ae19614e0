"""One place that decides colour and width for people-facing output, and that keeps a model's
own text from driving the terminal.

Templates, token texts and error messages come from untrusted files: an escape sequence in them
must show as text (`\\x1b[2J`), never clear the screen or recolour it, with colour on or off. So
every segment of model text is made printable before rich adds its own styling.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterable

from rich.console import Console
from rich.segment import Segment

from stopdoctor.reporters.plain import no_workflow_commands, printable


class _SafeConsole(Console):
    """A Console that escapes control characters in the text it prints (rich's own styling and
    control segments are added after, so colour still works)."""

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        # Per line, after wrapping: a hostile name wrapped or split onto its own line must not
        # start it with a workflow command either.
        return no_workflow_commands(super()._render_buffer(
            segment if segment.control else Segment(printable(segment.text), segment.style, segment.control)
            for segment in buffer))


def make_console(color: bool | None = None, width: int | None = None, stderr: bool = False) -> Console:
    """color None: auto (off under NO_COLOR or when the stream is not a terminal)."""
    no_color = color is False or (color is None and bool(os.environ.get("NO_COLOR")))
    return _SafeConsole(stderr=stderr, no_color=no_color, highlight=False, width=width,
                        color_system=None if no_color else "auto", soft_wrap=False)


def capture(color: bool, width: int = 100) -> Console:
    """A console that renders into a string (renderers are pure: text in, text out)."""
    return _SafeConsole(file=io.StringIO(), force_terminal=color, no_color=not color,
                        color_system="standard" if color else None,
                        width=width, highlight=False, soft_wrap=True, emoji=False)


def text_of(console: Console) -> str:
    return console.file.getvalue()  # type: ignore[attr-defined]
