"""Comparing texts rendered around turns: a rough tokenisation that keeps known special tokens
whole, and the shared starts, ends and spans the turn analysis reads.

Imports: the standard library only.
"""

from __future__ import annotations

import re

# A rough tokenisation for comparing the text around turns when no vocabulary is given:
# chat-control-looking tags, bracket tags, whitespace runs, words, single characters.
PIECE_RE = re.compile(r"<\|[^|<>]*\|>|<[^<>\s]{1,40}>|\[/?[A-Za-z_]{1,20}\]|\s+|[^\s<\[]+|.", re.S)


def split_pieces(text: str, known: list[str]) -> list[str]:
    """`text` in pieces, each known special token (longest first in `known`) one piece."""
    out: list[str] = []
    i = 0
    while i < len(text):
        for special in known:
            if text.startswith(special, i):
                out.append(special)
                i += len(special)
                break
        else:
            match = PIECE_RE.match(text, i)
            assert match is not None  # its last branch, `.` with re.S, matches any character
            # Stop plain-text runs at the start of a known special token.
            piece = match.group(0)
            for special in known:
                cut = piece.find(special)
                if cut > 0:
                    piece = piece[:cut]
            out.append(piece)
            i += len(piece)
    return out


def common_prefix(a: str, b: str, known: list[str]) -> str:
    """The longest run of whole pieces both texts start with."""
    pa, pb = split_pieces(a, known), split_pieces(b, known)
    out = []
    for x, y in zip(pa, pb):
        if x != y:
            break
        out.append(x)
    return "".join(out)


def between(text: str, start: str, end: str | None) -> str | None:
    """The text after the last `start` up to the next `end` (to the end when None)."""
    at = text.rfind(start)
    if at < 0:
        return None
    after = at + len(start)
    if end is None:
        return text[after:]
    stop = text.find(end, after)
    return text[after:stop] if stop >= 0 else None


def first_special(text: str | None, known: list[str], skip: str | None = None) -> str | None:
    """The first non-whitespace piece of `text` when it is a known special token (after `skip`,
    a bos written literally)."""
    if not text:
        return None
    for piece in split_pieces(text, known):
        if piece.strip() and piece != skip:
            return piece if piece in known else None
    return None


def cut_at_opener(text: str, openers: frozenset[str], known: list[str]) -> str:
    """The text up to the first token that opens a turn: what closes the turn, without the
    role-independent start of the next header (`<|start_header_id|>`, `<|im_start|>`)."""
    out = []
    for piece in split_pieces(text, known):
        if piece in openers:
            break
        out.append(piece)
    return "".join(out)


def common_suffix(a: str, b: str, known: list[str]) -> str:
    """The longest run of whole pieces both texts end with."""
    pa, pb = split_pieces(a, known), split_pieces(b, known)
    out: list[str] = []
    for x, y in zip(reversed(pa), reversed(pb)):
        if x != y:
            break
        out.append(x)
    return "".join(reversed(out))
