"""Streaming text side of generation: incremental detokenization and stop-string matching.

`IncrementalDetokenizer` turns token ids into text one id at a time, decoding only a small window
of recent ids so the cost per token stays flat however long the output grows. `StopStringMatcher`
finds stop strings in that text stream, including stops split across tokens, and holds back any
tail that could still become a stop so that no part of a stop string is ever emitted.

Imports only the standard library; the tokenizer is passed in (a `tokenizers.Tokenizer`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from stopdoctor.core.records import record

if TYPE_CHECKING:
    import tokenizers

# What lossy UTF-8 decoding writes for bytes that do not (yet) form a character.
REPLACEMENT_CHAR = "\ufffd"


@record
class StopHit:
    """A stop string completed in the generated text.

    `step` is the 0-based index of the generated token whose text completed it; `text_offset` is
    where the stop string starts in the full decoded text (the output ends right before it).
    """

    stop: str
    step: int
    text_offset: int


class IncrementalDetokenizer:
    """Decode a stream of token ids into text, one id at a time, at constant cost per id.

    The prefix/read offset trick of vLLM and TGI: decode the window `ids[prefix:]` and the already
    emitted part `ids[prefix:read]`, and emit the difference. Decoding a window that starts one
    token early (rather than only the new id) keeps decoders that drop a leading space on the first
    token (SentencePiece "▁") and byte-level tokens right. A trailing U+FFFD means a byte-level token
    ended inside a multi-byte character: the text before it is emitted, the rest waits until the
    character completes (or `flush` at the end).
    """

    def __init__(self, tokenizer: tokenizers.Tokenizer, skip_special_tokens: bool = False) -> None:
        self._tokenizer = tokenizer
        self._skip_special = skip_special_tokens
        # Only ids from the window start are kept; older ids are never decoded again.
        self._window: list[int] = []
        self._read = 0  # index in _window where the not-yet-final text starts
        self._prefix_text = ""  # decode(_window[:_read])
        self._emitted_pending = 0  # chars past _prefix_text already emitted while waiting on a char

    def _decode(self, ids: list[int]) -> str:
        return self._tokenizer.decode(ids, skip_special_tokens=self._skip_special)

    def push(self, token_id: int) -> str:
        """Add one generated id; return the text it completed (may be "")."""
        self._window.append(token_id)
        # Diff by length, as TGI does: decoders only append to what the window's prefix decoded to.
        text = self._decode(self._window)
        stable = text.rstrip(REPLACEMENT_CHAR)
        start = len(self._prefix_text) + self._emitted_pending
        new = stable[start:] if len(stable) > start else ""
        if len(stable) < len(text):
            # Waiting for the rest of a character: emit what is final, keep the window.
            self._emitted_pending += len(new)
            return new
        # The window ends on a whole character: slide it so the next decode stays small.
        self._window = self._window[self._read :]
        self._read = len(self._window)
        self._prefix_text = self._decode(self._window)
        self._emitted_pending = 0
        return new

    def flush(self) -> str:
        """End of generation: release text held for an incomplete character (as U+FFFD)."""
        text = self._decode(self._window)
        start = len(self._prefix_text) + self._emitted_pending
        rest = text[start:]
        self._window = []
        self._read = 0
        self._prefix_text = ""
        self._emitted_pending = 0
        return rest


def _prefix_function(text: str) -> list[int]:
    """KMP: for each i, the length of the longest proper prefix of text[:i + 1] that is also its suffix."""
    prefix = [0] * len(text)
    k = 0
    for i in range(1, len(text)):
        while k and text[i] != text[k]:
            k = prefix[k - 1]
        if text[i] == text[k]:
            k += 1
        prefix[i] = k
    return prefix


class StopStringMatcher:
    """Find the first stop string in streamed text without ever emitting any part of it.

    Keeps only a tail of the last max(len(stop)) - 1 characters to search across chunk
    boundaries, so each `feed` costs O(len(new_text) + total stop length), not O(output length).
    When several stops complete in the same chunk, the one that starts first wins (ties: the
    shorter one, which completed first), so the least text is emitted.
    """

    def __init__(self, stops: Sequence[str]) -> None:
        if any(not s for s in stops):
            # An empty stop would match before the first character.
            raise ValueError("stop strings must not be empty")
        self.stops: tuple[str, ...] = tuple(dict.fromkeys(stops))
        self._keep = max((len(s) for s in self.stops), default=1) - 1
        # Per stop: its KMP prefix function, and how much of it the text seen so far ends with
        # (the longest prefix of the stop that is a suffix of the text): what must be held back.
        self._prefix = [_prefix_function(s) for s in self.stops]
        self._matched = [0] * len(self.stops)
        self._tail = ""  # last `_keep` chars of the text seen so far
        self._consumed = 0  # total chars fed
        self._emitted = 0  # total chars released to the caller
        self.hit: StopHit | None = None

    def feed(self, new_text: str, step: int) -> tuple[str, StopHit | None]:
        """Add the text of generated token `step`; return (text safe to emit, hit or None).

        After a hit every further call returns ("", None): generation should have stopped.
        """
        if self.hit is not None or not self.stops:
            if self.hit is None:
                self._consumed += len(new_text)
                self._emitted += len(new_text)
                return new_text, None
            return "", None
        window = self._tail + new_text
        window_start = self._consumed - len(self._tail)
        self._consumed += len(new_text)

        best: tuple[int, int, str] | None = None
        # Any occurrence found must end inside new_text: one lying wholly in the tail would have
        # been found by an earlier feed. Start the search where such an occurrence could begin.
        for stop in self.stops:
            idx = window.find(stop, max(0, len(self._tail) - len(stop) + 1))
            if idx >= 0 and (best is None or (idx, len(stop)) < best[:2]):
                best = (idx, len(stop), stop)
        if best is not None:
            idx, _, stop = best
            # Held-back text always covers the start of a straddling stop, so idx >= emitted.
            out = window[self._emitted - window_start : idx]
            self._emitted = window_start + idx
            self.hit = StopHit(stop=stop, step=step, text_offset=window_start + idx)
            self._tail = ""
            return out, self.hit

        hold = self._advance(new_text)
        release_to = self._consumed - hold
        out = ""
        if release_to > self._emitted:
            out = window[self._emitted - window_start : release_to - window_start]
            self._emitted = release_to
        self._tail = window[-self._keep :] if self._keep else ""
        return out, None

    def _advance(self, new_text: str) -> int:
        """Move every stop's match state over `new_text` (which completes no stop); return the
        length of the longest suffix of the text that is a proper prefix of some stop. Amortised
        O(len(new_text)) per stop (Knuth-Morris-Pratt), so a 100k-character stop costs no more per
        token than a short one."""
        longest = 0
        for number, stop in enumerate(self.stops):
            prefix, k = self._prefix[number], self._matched[number]
            for char in new_text:
                while k and stop[k] != char:
                    k = prefix[k - 1]
                if stop[k] == char:
                    k += 1
                if k == len(stop):  # cannot happen (the caller found no occurrence); stay proper
                    k = prefix[k - 1]
            self._matched[number] = k
            longest = max(longest, k)
        return longest

    def flush(self) -> str:
        """End of generation without a hit: release the held-back text."""
        if self.hit is not None:
            return ""
        held = self._consumed - self._emitted
        out = self._tail[len(self._tail) - held :] if held else ""
        self._emitted = self._consumed
        return out
