"""GGUF string arrays (a vocabulary, a merge table): where each string starts, and `LazyStrings`,
the array decoded on first use. No numpy: its import (~70 ms, a third of a cold `inspect` of a GGUF)
is not needed to walk 262k strings (`walk_strings`), to decode one, or to find a few texts among them.

Imports: nothing of stopdoctor's.
"""

from __future__ import annotations

import mmap
import struct
import sys
from array import array
from collections.abc import Iterable, Iterator, Sequence
from itertools import repeat
from operator import add, getitem, methodcaller
from typing import TypeAlias

Buffer: TypeAlias = mmap.mmap | bytes
_U64 = struct.Struct("<Q")
_DECODE = methodcaller("decode", "utf-8", "replace")


def walk_strings(buffer: Buffer, pos: int, count: int, size: int) -> tuple[array, int] | None:
    """The offsets of `count` length-prefixed strings from `pos` (`size` bytes in `buffer`), and
    the offset past the last; None when a length runs past the end (the caller's checked walk then
    says where and why).

    One Python step per string (~90 ns: 25 ms for Gemma's 262k tokens, less than numpy's import),
    each reading the full 64-bit length through one of eight `Q` views of the buffer, one per
    offset modulo 8, so no string needs its length checked again. C loops (`bytes.split` at the
    seven NULs of each short length, `map`, `accumulate`) were measured slower: each pass makes
    262k objects.
    """
    if sys.byteorder != "little" or count == 0:
        return _walk_unpacking(buffer, pos, count, size)
    whole = memoryview(buffer)
    views = [whole[r: r + max(0, size - r) // 8 * 8].cast("Q") for r in range(8)]
    starts = array("q", bytes(8 * count))
    try:
        for index in range(count):
            starts[index] = pos
            pos += 8 + views[pos & 7][pos >> 3]
    except (IndexError, OverflowError):
        return None
    finally:
        for view in views:
            view.release()
        whole.release()
    return (starts, pos) if pos <= size else None


def _walk_unpacking(buffer: Buffer, pos: int, count: int, size: int) -> tuple[array, int] | None:
    unpack = _U64.unpack_from
    starts = array("q", bytes(8 * count))
    try:
        for index in range(count):
            starts[index] = pos
            pos += 8 + unpack(buffer, pos)[0]
    except (struct.error, OverflowError):
        return None
    return (starts, pos) if pos <= size else None


def raw_strings(buffer: Buffer, starts: Sequence[int], end: int) -> list[bytes]:
    """The bytes of each string (C loops: one slice per string, no Python step)."""
    begins = map(add, starts, repeat(8))
    stops = [*starts[1:], end]
    return list(map(getitem, repeat(buffer), map(slice, begins, stops)))  # type: ignore[arg-type]


def decode_strings(buffer: Buffer, starts: Sequence[int], end: int) -> list[str]:
    """Each string decoded on its own, U+FFFD for bytes that are not UTF-8 (raw byte tokens)."""
    return list(map(_DECODE, raw_strings(buffer, starts, end)))


class LazyStrings(Sequence[str]):
    """A GGUF string array (a vocabulary, a merge table) decoded on first access.

    Reading the header only has to find where the array ends; decoding 100k+ strings is deferred
    until someone asks for them all, then done once. One string, or the ids of a few texts, never
    decode the rest.
    """

    def __init__(self, buffer: Buffer, starts: array, end: int, key: str) -> None:
        self._buffer = buffer
        self._starts = starts  # offset of each string's 8-byte length prefix
        self._end = end
        self._key = key
        self._items: list[str] | None = None
        self._found: dict[tuple[bytes, bool], int | None] = {}
        self._signature: bytes | None = None

    def to_list(self) -> list[str]:
        if self._items is None:
            self._items = decode_strings(self._buffer, self._starts, self._end)
        return self._items

    def __len__(self) -> int:
        return len(self._starts)

    def __getitem__(self, index):
        if self._items is None and isinstance(index, int):
            # One string (an eos token's text, say) does not need the whole array decoded.
            start = self._starts[index]
            (length,) = _U64.unpack_from(self._buffer, start)
            return self._buffer[start + 8: start + 8 + length].decode("utf-8", "replace")
        return self.to_list()[index]

    def texts_at(self, indices: Sequence[int]) -> list[str]:
        """The strings at `indices` (valid indices), decoded as `self[i]` is, without decoding the rest."""
        if self._items is not None:
            return [self._items[i] for i in indices]
        starts, buffer = self._starts, self._buffer
        begins = [starts[i] + 8 for i in indices]
        stops = [begin + _U64.unpack_from(buffer, begin - 8)[0] for begin in begins]
        return list(map(_DECODE, map(getitem, repeat(buffer), map(slice, begins, stops))))  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_list())

    def last_indices(self, texts: Iterable[str]) -> dict[str, int]:
        """text → the last index whose string is exactly it (llama.cpp's token_to_id keeps the last)."""
        return self._indices(texts, last=True)

    def first_indices(self, texts: Iterable[str]) -> dict[str, int]:
        """text → the first index whose string is exactly it (what a linear search finds)."""
        return self._indices(texts, last=False)

    def _indices(self, texts: Iterable[str], last: bool) -> dict[str, int]:
        """Found through three bytes a string (`_signatures`): no string is decoded and no index of
        the vocabulary's texts is built (262k entries, ~25 MB for Gemma). Searching the array's
        3 MB for each text's bytes was measured at 1-2 ms a text: ~90 texts for a Gemma inspect."""
        # llama.cpp never looks up an empty text; a linear search (`first`) finds an empty token
        wanted = {t.encode("utf-8", "surrogatepass"): t for t in texts if t or not last}
        if not wanted or not len(self._starts):
            return {}
        if self._items is not None:
            texts = set(wanted.values())
            found = {}
            for i, item in enumerate(self._items):
                if item in texts and (last or item not in found):
                    found[item] = i
            return found
        found = {}
        for raw, text in wanted.items():
            index = self._find(raw, last)
            if index is not None:
                found[text] = index
        return found

    def _find(self, raw: bytes, last: bool) -> int | None:
        """The first (last) index whose string is `raw`. Candidates come from `_signatures` (three
        bytes a string: its length's low byte and its last two bytes), a C scan of 3 bytes per
        string; each candidate's bytes are then compared whole."""
        key = (raw, last)
        if key in self._found:
            return self._found[key]
        signatures, starts, buffer = self._signatures(), self._starts, self._buffer
        length = len(raw)
        wanted = bytes((length & 0xFF,)) + (_U64.pack(length) + raw)[-2:]  # as `_signatures` reads a string
        found = None
        at = signatures.rfind(wanted) if last else signatures.find(wanted)
        while at >= 0:
            if not at % 3:
                start = starts[at // 3]
                if _U64.unpack_from(buffer, start)[0] == length and buffer[start + 8: start + 8 + length] == raw:
                    found = at // 3
                    break
            at = signatures.rfind(wanted, 0, at + 2) if last else signatures.find(wanted, at + 1)
        self._found[key] = found
        if found is None:  # no string is `raw`: the search the other way would scan in vain
            self._found[(raw, not last)] = None
        return found

    def _signatures(self) -> bytes:
        """Three bytes a string, built once: the low byte of its length and its last two bytes
        (those of its prefix for a shorter one). List comprehensions (~40 ns a string); chains of
        `map` were measured slower (each makes 262k ints). With two bytes (length, last) Gemma's
        thousands of `<unusedN>` tokens were candidates for every `<...>` text looked up."""
        if self._signature is None:
            starts = self._starts
            # bytes index faster than a map (~35 ns a byte against ~55); the header before the
            # array's end is copied (the array lies in the header: 4.4 MB, 0.3 ms for Gemma)
            buffer = self._buffer[: self._end]
            ends = starts[1:]
            ends.append(self._end)
            signature = bytearray(3 * len(starts))
            signature[0::3] = bytes([buffer[start] for start in starts])
            signature[1::3] = bytes([buffer[end - 2] for end in ends])
            signature[2::3] = bytes([buffer[end - 1] for end in ends])
            self._signature = bytes(signature)
        return self._signature

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LazyStrings):
            other = other.to_list()
        return isinstance(other, (list, tuple)) and self.to_list() == list(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<LazyStrings {self._key}: {len(self)} strings>"
