"""Where a key is declared in a text file: its 1-based line, found once when the file is read, so
that no later stage (a reporter) reads the file again to guess it.

Pure functions over text; imports nothing from the package.
"""

from __future__ import annotations

import re

MAX_TEXT_CHARS = 8 * 1024 * 1024  # tokenizer.json can be large; anything bigger is not a config


def key_line(text: str | None, key: str | None) -> int | None:
    """The 1-based line declaring `key` in `text`: a "(line N)" the key carries, else its first
    component ("chat_template[1]" → chat_template) as a JSON key `"key":`, else as a TOML/YAML/
    Modelfile key at a line start, else as a command-line word. None when not found."""
    if not key:
        return None
    given = re.search(r"\(line (\d+)\)", key)
    if given:
        return int(given.group(1))
    first = re.split(r"[.\[]", key, maxsplit=1)[0].strip()
    if not first or text is None or len(text) > MAX_TEXT_CHARS:
        return None
    patterns = (rf'"{re.escape(first)}"\s*:', rf"^\s*{re.escape(first)}\s*[=:]", rf"^\s*{re.escape(first)}\b",
                rf"(^|\s){re.escape(first)}(\s|=|$)")
    for pattern in patterns:
        found = re.search(pattern, text, flags=re.MULTILINE)
        if found:
            return text.count("\n", 0, found.start()) + 1
    return None


def line_at(text: str, offset: int) -> int:
    """The 1-based line of a character offset."""
    return text.count("\n", 0, offset) + 1
