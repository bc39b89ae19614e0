"""The vocabulary as the model files declare it: token text <-> id, and which tokens are special.

Built from tokenizer.json, tokenizer_config.json `added_tokens_decoder`, added_tokens.json, or a GGUF
header. Plain JSON reading; the `tokenizers` library is imported only when encoding is asked for.
Imports: model, errors.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import InputError
from .model import Location, Token

if TYPE_CHECKING:  # pragma: no cover
    import tokenizers


@dataclass
class Vocabulary:
    """Token ids and texts. `complete` is False when only the added/special tokens are known
    (no tokenizer.json), so "not in the vocabulary" can only be said about ids past `size`."""

    by_text: dict[str, int] = field(default_factory=dict)
    by_id: dict[int, str] = field(default_factory=dict)
    special_ids: set[int] = field(default_factory=set)
    # added tokens are matched whole by the tokenizer, special or not: each is one id
    added_ids: set[int] = field(default_factory=set)
    # where each added/special token was declared, for evidence
    token_locations: dict[int, Location] = field(default_factory=dict)
    complete: bool = False
    declared_size: int | None = None
    tokenizer_file: Path | None = None
    gguf_header: Any = None
    # GGUF vocabularies: the ordinary token table, kept as a sequence (not a dict) for speed
    _gguf_tokens: Sequence[str] | None = None
    _tokenizer: Any = None

    @property
    def size(self) -> int | None:
        """Number of ids the embedding can address: the larger of the known ids and the declared size."""
        known = (max(self.by_id) + 1) if self.by_id else 0
        if self._gguf_tokens is not None:
            known = max(known, len(self._gguf_tokens))
        if self.declared_size is not None:
            return max(known, self.declared_size)
        return known or None

    def id_of(self, text: str) -> int | None:
        found = self.by_text.get(text)
        if found is None and self._gguf_tokens is not None:
            index = self._gguf_index().get(text)
            return index
        return found

    def text_of(self, token_id: int) -> str | None:
        if token_id in self.by_id:
            return self.by_id[token_id]
        if self._gguf_tokens is not None and 0 <= token_id < len(self._gguf_tokens):
            return self._gguf_tokens[token_id]
        return None

    def is_special(self, token_id: int) -> bool:
        return token_id in self.special_ids

    def is_single_token(self, text: str) -> int | None:
        """The id when `text` is always encoded as one token (a special or added token)."""
        token_id = self.id_of(text)
        if token_id is not None and (token_id in self.special_ids or token_id in self.added_ids):
            return token_id
        return None

    def token(self, token_id: int) -> Token | None:
        text = self.text_of(token_id)
        return None if text is None else Token(token_id, text, self.is_special(token_id))

    def knows(self, token_id: int) -> bool | None:
        """True/False when the vocabulary can tell whether the id exists, None when it cannot."""
        if self.text_of(token_id) is not None:
            return True
        size = self.size
        if size is not None and token_id >= size:
            return False
        if token_id < 0:
            return False
        return False if self.complete else None

    @property
    def special_tokens(self) -> dict[str, int]:
        return {self.by_id[i]: i for i in sorted(self.special_ids) if i in self.by_id}

    def _gguf_index(self) -> dict[str, int]:
        cache = getattr(self, "_gguf_index_cache", None)
        if cache is None:
            tokens = list(self._gguf_tokens or ())
            # reversed so that the first id of a duplicated text wins, as in a linear search
            cache = dict(zip(reversed(tokens), range(len(tokens) - 1, -1, -1)))
            self._gguf_index_cache = cache
        return cache

    def tokenizer(self) -> tokenizers.Tokenizer:
        """A `tokenizers.Tokenizer` for encoding; built on first use."""
        if self._tokenizer is None:
            if self.tokenizer_file is not None:
                import tokenizers

                try:
                    self._tokenizer = tokenizers.Tokenizer.from_file(str(self.tokenizer_file))
                except Exception as exc:  # the library raises plain Exception subclasses
                    raise InputError(
                        f"{self.tokenizer_file.name}: cannot be loaded by the tokenizers library: {_first_line(exc)}"
                    ) from exc
            elif self.gguf_header is not None:
                from .gguf import header_to_tokenizer

                self._tokenizer = header_to_tokenizer(self.gguf_header)
            else:
                raise InputError(
                    "this model has no tokenizer.json (nor a GGUF vocabulary), so text cannot be encoded",
                    hint="add tokenizer.json to the model folder",
                )
        return self._tokenizer


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def add_token(vocab: Vocabulary, token_id: int, text: str, special: bool, location: Location) -> None:
    vocab.by_id.setdefault(token_id, text)
    vocab.by_text.setdefault(text, token_id)
    vocab.added_ids.add(token_id)
    if special:
        vocab.special_ids.add(token_id)
    vocab.token_locations.setdefault(token_id, location)


def read_tokenizer_json(vocab: Vocabulary, data: Mapping[str, Any], path: Path) -> None:
    """Fill `vocab` from a parsed tokenizer.json: the model vocabulary and the added tokens."""
    vocab.tokenizer_file = path
    model = data.get("model") or {}
    table = model.get("vocab")
    if isinstance(table, dict):  # BPE, WordPiece, WordLevel
        for text, token_id in table.items():
            if isinstance(token_id, int):
                vocab.by_id.setdefault(token_id, text)
                vocab.by_text.setdefault(text, token_id)
        vocab.complete = True
    elif isinstance(table, list):  # Unigram: [[piece, score], ...]
        for token_id, entry in enumerate(table):
            if isinstance(entry, (list, tuple)) and entry and isinstance(entry[0], str):
                vocab.by_id.setdefault(token_id, entry[0])
                vocab.by_text.setdefault(entry[0], token_id)
        vocab.complete = True
    location = Location("tokenizer.json", "added_tokens")
    for entry in data.get("added_tokens") or ():
        if isinstance(entry, dict) and isinstance(entry.get("id"), int) and isinstance(entry.get("content"), str):
            # Added tokens win over model-vocabulary entries of the same text, as in `tokenizers`.
            vocab.by_id[entry["id"]] = entry["content"]
            vocab.by_text[entry["content"]] = entry["id"]
            vocab.added_ids.add(entry["id"])
            if entry.get("special"):
                vocab.special_ids.add(entry["id"])
            vocab.token_locations[entry["id"]] = location


def read_added_tokens_decoder(vocab: Vocabulary, decoder: Mapping[str, Any]) -> None:
    location = Location("tokenizer_config.json", "added_tokens_decoder")
    for key, entry in decoder.items():
        try:
            token_id = int(key)
        except (TypeError, ValueError):
            continue
        if isinstance(entry, dict) and isinstance(entry.get("content"), str):
            add_token(vocab, token_id, entry["content"], bool(entry.get("special")), location)


def read_added_tokens_json(vocab: Vocabulary, data: Mapping[str, Any]) -> None:
    # added_tokens.json does not say which tokens are special; tokenizer_config decides that.
    location = Location("added_tokens.json")
    for text, token_id in data.items():
        if isinstance(token_id, int) and isinstance(text, str):
            add_token(vocab, token_id, text, False, location)


# GGUF token types (llama.cpp's llama_token_type): 3 = control, 4 = user-defined.
GGUF_CONTROL = 3
GGUF_USER_DEFINED = 4


def mark_declared_special(vocab: Vocabulary, texts: Iterable[str]) -> None:
    """Tokens named as bos/eos/pad/unk or additional_special_tokens are special to transformers
    whatever their `special` flag says."""
    for text in texts:
        token_id = vocab.id_of(text)
        if token_id is not None:
            vocab.special_ids.add(token_id)


def read_gguf_vocab(vocab: Vocabulary, header: Any) -> None:
    tokens = header.tokens
    if tokens is None:
        return
    vocab.gguf_header = header
    vocab._gguf_tokens = tokens
    vocab.complete = True
    types = header.token_types
    if types is not None:
        import numpy as np

        location = Location(header.path.name, "tokenizer.ggml.token_type")
        for token_id in np.flatnonzero((types == GGUF_CONTROL) | (types == GGUF_USER_DEFINED)).tolist():
            # llama.cpp matches control and user-defined tokens whole (parse_special), like HF special tokens.
            add_token(vocab, token_id, tokens[token_id], True, location)


def token_texts(vocab: Vocabulary, ids: Iterable[int]) -> list[str]:
    return [vocab.text_of(i) or f"<id {i}>" for i in ids]
