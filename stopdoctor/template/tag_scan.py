"""Scanning untrusted template text in bounded work, for the reasoning analysis
(`stopdoctor.template.reasoning`): the tag-looking pieces of a text (`tag_spans`: a set lookup a
known length where a tag can start, a long text scanned at its head and tail only) and the
identifiers that may be thinking switches (`switch_names`: one linear word scan, no regex that
backtracks over a 1 MB word).

Imports: the standard library.
"""

from __future__ import annotations

import re

# Tag-looking pieces: <|x|>, <｜x｜>, <x>, </x>, <|x>, <x|>, [X], [/X].
TAG = re.compile(r"<\|[^|<>\s]{1,40}\|>|<｜[^｜<>]{1,40}｜>|<[^<>\s]{1,40}>|\[/?[A-Za-z_]{1,20}\]")
MAX_SCAN_CHARS = 65_536  # a text's characters scanned for tags: its head and its tail
MAX_KNOWN_CHARS = 64  # special-token texts longer than this are taken for no tag
MAX_NAME_CHARS = 64  # a switch name's length
WORD = re.compile(r"[A-Za-z_]+")  # one character class, greedy: no backtracking
SWITCH_WORDS = ("think", "reason", "effort")


def tag_spans(text: str, known: list[str]) -> list[tuple[int, int]]:
    """(start, end) of each tag-looking piece of a text (see `_tags`). A text longer than
    MAX_SCAN_CHARS is scanned at its head and its tail only; a position is tried only where a
    known text or a tag can start, each known length once (a set lookup, not a scan of the list)."""
    if len(text) > MAX_SCAN_CHARS:
        half = MAX_SCAN_CHARS // 2
        tail = len(text) - half
        return [*tag_spans(text[:half], known), *((s + tail, e + tail) for s, e in tag_spans(text[tail:], known))]
    table = _known_table(tuple(known))
    lengths, texts, starts = table
    spans: list[tuple[int, int]] = []
    i, size = 0, len(text)
    while True:
        found = starts.search(text, i)
        if found is None:
            return spans
        i = found.start()
        special = next((length for length in lengths if i + length <= size and text[i:i + length] in texts), None)
        if special is not None:
            spans.append((i, i + special))
            i += special
            continue
        match = TAG.match(text, i)
        if match is not None:
            spans.append(match.span())
            i = match.end()
        else:
            i += 1


_KNOWN_TABLES: dict[tuple[str, ...], tuple[list[int], frozenset[str], re.Pattern]] = {}


def _known_table(known: tuple[str, ...]) -> tuple[list[int], frozenset[str], re.Pattern]:
    """The known texts a tag may be (at most MAX_KNOWN_CHARS each): their lengths, longest
    first, the set of them, and a pattern of the characters a tag or one of them starts with."""
    table = _KNOWN_TABLES.get(known)
    if table is None:
        texts = frozenset(k for k in known if 0 < len(k) <= MAX_KNOWN_CHARS)
        firsts = {k[0] for k in texts} | {"<", "["}
        starts = re.compile("[" + "".join(re.escape(c) for c in sorted(firsts)) + "]")
        table = sorted({len(k) for k in texts}, reverse=True), texts, starts
        if len(_KNOWN_TABLES) > 8:
            _KNOWN_TABLES.clear()
        _KNOWN_TABLES[known] = table
    return table


def switch_names(source: str) -> set[str]:
    """Words of letters and underscores naming thinking, reasoning or effort, not an attribute,
    key or string's tail (not after a word character, `.`, a quote or `[`), at most
    MAX_NAME_CHARS long."""
    names = set()
    for match in WORD.finditer(source):
        name, start, end = match.group(0), match.start(), match.end()
        if len(name) > MAX_NAME_CHARS or not any(word in name for word in SWITCH_WORDS):
            continue
        before = source[start - 1] if start else ""
        after = source[end] if end < len(source) else ""
        if (before and (before.isalnum() or before in "_.'\"[")) or (after and (after.isalnum() or after == "_")):
            continue
        names.add(name)
    return names
