"""Where a key is declared in a text file: its 1-based line, found once when the file is read, so
that no later stage (a reporter) reads the file again to guess it.

`json_key_lines` records every key path of a JSON file where the file is parsed; `key_line` looks a
key up in other text files (TOML, YAML front matter, command lines) that have no such parser here.

Pure functions over text; imports nothing from the package.
"""

from __future__ import annotations

import json
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


# Key paths deeper than this are not recorded ("text_config.eos_token_id" is depth 2; no finding
# names a deeper one), and a container's members past MEMBERS_RECORDED are not either: tokenizer
# files hold 150k-entry vocabularies whose keys no finding names, and recording them would cost
# memory in proportion to the file.
DEPTH_RECORDED = 2
MEMBERS_RECORDED = 4096


def json_key_lines(text: str, depth: int = DEPTH_RECORDED) -> dict[str, int]:
    """The 1-based line of each key path of a JSON text ("eos_token_id", "text_config.eos_token_id",
    "chat_template[1]"), for paths up to `depth` components, as a parser sees them (a nested key
    never stands for a top-level one). One linear pass (a search of single-character classes, and
    json's own scanner over what is not recorded); meant for text json.loads already accepted, and
    never raises on text it did not: what it cannot follow it leaves out."""
    lines: dict[str, int] = {}
    # One frame per open container: [path, is_object, members seen, pending key path or None].
    stack: list[list] = []
    line, counted, pos = 1, 0, 0
    expecting_key = False
    while (token := _TOKEN.search(text, pos)) is not None:
        i = token.start()
        line += text.count("\n", counted, i)  # whitespace is skipped by the search, counted here
        counted = i
        char = text[i]
        pos = token.end()
        if char == '"':
            close = _string_end(text, i + 1)
            if close < 0:
                break
            pos = close + 1
            if stack and stack[-1][1] and expecting_key:
                frame = stack[-1]
                frame[2] += 1
                key = _unescape(text[i + 1:close])
                path = None if key is None or frame[0] is None else f"{frame[0]}.{key}" if frame[0] else key
                frame[3] = path
                if path is not None and len(stack) <= depth and frame[2] <= MEMBERS_RECORDED:
                    lines.setdefault(path, line)
                expecting_key = False
            else:
                _value_start(stack, lines, line, depth)
        elif char in "{[":
            path = _value_start(stack, lines, line, depth)
            if len(stack) >= depth or (stack and stack[-1][2] > MEMBERS_RECORDED):
                # nothing inside is recorded: let json's C scanner step over it (a vocabulary, a
                # rope_scaling table) instead of a Python loop
                try:
                    pos = _SKIPPER.raw_decode(text, i)[1]
                except (ValueError, RecursionError):
                    break
                continue
            stack.append([path, char == "{", 0, None])
            expecting_key = char == "{"
        elif char in "}]":
            if stack:
                stack.pop()
            expecting_key = False
        elif char == ",":
            expecting_key = bool(stack and stack[-1][1])
        else:  # a number or literal
            _value_start(stack, lines, line, depth)
    return lines


# What the scanner stops at: a string's quote, a bracket or comma, or a whole number/literal; single
# character classes only, so a search is linear in the text.
_SKIPPER = json.JSONDecoder()
_TOKEN = re.compile(r'["{}\[\],]|[^\s{}\[\],:"]+')


def _value_start(stack: list[list], lines: dict[str, int], line: int, depth: int) -> str | None:
    """Called where a value starts: its key path (an object member's, or an array element's
    "path[i]", recorded at this line), "" at the top, None for a key that could not be read."""
    if not stack:
        return ""
    frame = stack[-1]
    if frame[1]:
        path, frame[3] = frame[3], None
        return path
    index = frame[2]
    frame[2] += 1
    if frame[0] is None:
        return None
    path = f"{frame[0]}[{index}]"
    if len(stack) <= depth and index < MEMBERS_RECORDED:
        lines.setdefault(path, line)
    return path


def _string_end(text: str, i: int) -> int:
    """The index of the quote closing a JSON string whose body starts at `i`, -1 when none."""
    while True:
        close = text.find('"', i)
        if close < 0:
            return -1
        backslashes = 0
        while text[close - 1 - backslashes] == "\\":
            backslashes += 1
        if backslashes % 2 == 0:
            return close
        i = close + 1


def _unescape(body: str) -> str | None:
    if "\\" not in body:
        return body
    try:
        return json.loads(f'"{body}"')
    except ValueError:
        return None
