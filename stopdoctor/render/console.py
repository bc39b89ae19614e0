"""One place that decides colour and width for people-facing output."""

from __future__ import annotations

import io
import os

from rich.console import Console


def make_console(color: bool | None = None, width: int | None = None, stderr: bool = False) -> Console:
    """color None: auto (off under NO_COLOR or when the stream is not a terminal)."""
    no_color = color is False or (color is None and bool(os.environ.get("NO_COLOR")))
    return Console(stderr=stderr, no_color=no_color, highlight=False, width=width,
                   color_system=None if no_color else "auto", soft_wrap=False)


def capture(color: bool, width: int = 100) -> Console:
    """A console that renders into a string (renderers are pure: text in, text out)."""
    return Console(file=io.StringIO(), force_terminal=color, no_color=not color, color_system="standard" if color else None,
                   width=width, highlight=False, soft_wrap=True, emoji=False)


def text_of(console: Console) -> str:
    return console.file.getvalue()  # type: ignore[attr-defined]
