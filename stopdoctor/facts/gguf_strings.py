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
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence
from itertools import repeat
from operator import add, getitem, methodcaller
from typing import TypeAlias

Buffer: TypeAlias = mmap.mmap | bytes
_U64 = struct.Struct("<Q")
_DECODE = methodcaller("decode", "utf-8", "replace")
# A first byte whose table would hold more places than this is not tabled (~1 us a place to read,
# where a whole-text search costs ~0.8 ms for Gemma's 4.4 MB)
_TABLE_PLACES = 16_000


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
        self._found: dict[bytes, list[int]] = {}
        self._tables: dict[int, dict[bytes, list[int]] | None] = {}
        self._bytes: bytes | None = None

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
        """Found by scanning the array's bytes (`_where`): no string is decoded and no index of the
        vocabulary's texts is built (262k entries, ~25 MB for Gemma)."""
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
            indices = self._where(raw)
            if indices:
                found[text] = indices[-1] if last else indices[0]
        return found

    def _where(self, raw: bytes) -> list[int]:
        """The indices whose string is `raw`, ascending (remembered).

        A string of the array is its 8-byte length then its bytes, so a text of 1-255 bytes can only
        be where its length byte, seven zero bytes and its bytes lie. The texts looked up share a
        few first bytes (`<`, `[`, ...): for each, one C scan of the array for the seven zero bytes
        and it (`_first_byte_table`: ~7 ms and 6.6k places for Gemma's `<`) serves every text that
        begins with it. A first byte that begins too many strings (half of Gemma's start with `▁`),
        an empty text or one of 256 bytes or more is searched for whole, with its length (~0.8 ms
        a text). Before, three bytes a string were built to search (~30 ms) and searched per text
        (~0.3 ms). A place counts only where a string of the array starts (a string can hold the
        same bytes)."""
        found = self._found.get(raw)
        if found is None:
            table = self._first_byte_table(raw[0]) if 0 < len(raw) < 256 else None
            places = table.get(raw, ()) if table is not None else self._places(_U64.pack(len(raw)) + raw)
            found = [i for i in map(self._index_at, places) if i is not None]
            self._found[raw] = found
        return found

    def _first_byte_table(self, first: int) -> dict[bytes, list[int]] | None:
        """text → the places of its length prefix, for each text of 1-255 bytes that starts with
        `first` wherever the array's bytes would hold it (some places lie inside a string); None
        when more than `_TABLE_PLACES` places would have to be read (estimated from the first
        eighth of the array: a C count there, ~0.3 ms for Gemma)."""
        if first not in self._tables:
            needle = bytes(7) + bytes((first,))
            table: dict[bytes, list[int]] | None = None
            region = self._region()
            sample = min(len(region), max(len(region) // 8, 1 << 18))
            if region.count(needle, 0, sample) * len(region) <= _TABLE_PLACES * sample:
                table = {}
                buffer = self._buffer
                for at in self._places(needle, shift=1):
                    table.setdefault(buffer[at + 8: at + 8 + buffer[at]], []).append(at)
            self._tables[first] = table
        return self._tables[first]

    def _region(self) -> bytes:
        """The array's bytes (4.4 MB for Gemma), copied once from the map: bytes count and find."""
        if self._bytes is None:
            self._bytes = bytes(self._buffer[self._starts[0]: self._end])
        return self._bytes

    def _places(self, needle: bytes, shift: int = 0) -> list[int]:
        """Each offset in the buffer where `needle` lies within the array, less `shift`."""
        region, base = self._region(), self._starts[0] - shift
        places = []
        at = region.find(needle)
        while at >= 0:
            places.append(at + base)
            at = region.find(needle, at + 1)
        return places

    def _index_at(self, place: int) -> int | None:
        """The index of the string that starts at `place`, None when none does."""
        starts = self._starts
        index = bisect_left(starts, place)
        return index if index < len(starts) and starts[index] == place else None

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LazyStrings):
            other = other.to_list()
        return isinstance(other, (list, tuple)) and self.to_list() == list(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<LazyStrings {self._key}: {len(self)} strings>"
