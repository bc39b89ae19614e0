"""The vocabulary as the model files declare it: token text <-> id, and which tokens are special.

Built from tokenizer.json, tokenizer_config.json `added_tokens_decoder`, added_tokens.json, or a GGUF
header. Plain JSON reading; the `tokenizers` library is imported only when encoding is asked for.
Imports: model, errors.
"""

from __future__ import annotations

import os
import re
import stat
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from itertools import repeat
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stopdoctor.core.errors import InputError
from stopdoctor.core.types import Location, Token
from stopdoctor.facts.tokenizer_json import PlainTokenizer, read_plain, validate_parts

if TYPE_CHECKING:  # pragma: no cover
    import tokenizers


# `tokenizers` ids are u32: a larger declared id cannot be any token (and would overflow the call).
MAX_TOKEN_ID = 2**32 - 1
# tokenizer.json of the largest real vocabularies is ~35 MB; `tokenizers` needs ~5x the file in memory.
MAX_TOKENIZER_BYTES = 64 * 1024 * 1024
_SURROGATE = re.compile("[\ud800-\udfff]")


def lone_surrogate(text: str) -> str | None:
    """The first lone surrogate in `text` (JSON and Jinja escapes and undecodable command-line bytes
    make them; no encoder accepts them), else None."""
    found = _SURROGATE.search(text)
    return found.group() if found else None


@dataclass
class Vocabulary:
    """Token ids and texts. `complete` is False when only the added/special tokens are known
    (no tokenizer.json), so "not in the vocabulary" can only be said about ids past `size`."""

    # added/special tokens, and every token of vocabularies known only from JSON configs; the
    # ordinary tokens of tokenizer.json / GGUF are looked up in those on demand
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
    post_processor: dict | None = None  # tokenizer.json "post_processor", for add-bos detection
    gguf_header: Any = None
    # GGUF vocabularies: the ordinary token table, kept as a sequence (not a dict) for speed
    _gguf_tokens: Sequence[str] | None = None
    _gguf_ids: dict[str, int | None] = field(default_factory=dict, repr=False, compare=False)
    _tokenizer: Any = None
    # what answers token_to_id / id_to_token / the size for tokenizer.json: the library's tokenizer
    # of the file without its merges (`_without_merges`), or the whole one
    _lookup: Any = None

    @property
    def size(self) -> int | None:
        """Number of ids the embedding can address: the larger of the known ids and the declared size."""
        known = (max(self.by_id) + 1) if self.by_id else 0
        if self._gguf_tokens is not None:
            known = max(known, len(self._gguf_tokens))
        if self.tokenizer_file is not None:
            known = max(known, self._lookup.get_vocab_size(with_added_tokens=True))
        if self.declared_size is not None:
            return max(known, self.declared_size)
        return known or None

    def id_of(self, text: str) -> int | None:
        if lone_surrogate(text) is not None:
            return None  # not Unicode text, so no token's text (and `tokenizers` refuses it)
        found = self.by_text.get(text)
        if found is None and self.tokenizer_file is not None:
            return self._lookup.token_to_id(text)
        if found is None and self._gguf_tokens is not None:
            return self._gguf_first_ids((text,)).get(text)
        return found

    def ids_of(self, texts: Iterable[str]) -> dict[str, int]:
        """text → `id_of(text)` for each text that has one; a GGUF vocabulary is searched once
        for them all."""
        texts = list(dict.fromkeys(texts))
        if self._gguf_tokens is not None and self.tokenizer_file is None:
            self._gguf_first_ids(t for t in texts if t not in self.by_text and lone_surrogate(t) is None)
        return {text: token_id for text in texts if (token_id := self.id_of(text)) is not None}

    def exact_ids(self, texts: Iterable[str]) -> dict[str, int]:
        """text → id of the token whose text is exactly it, ordinary tokens included (how
        llama.cpp looks tokens up by text); a GGUF vocabulary is searched without decoding it."""
        tokens = self._gguf_tokens
        if tokens is not None and hasattr(tokens, "last_indices"):
            return tokens.last_indices(texts)
        return {text: token_id for text in texts if (token_id := self.id_of(text)) is not None}

    def ids_from(self, first: int) -> list[int]:
        """The ids the tokenizer can produce at or past `first` (an embedding of `first` rows has
        none of them): added tokens listed past it, and the tokenizer file's ids past it."""
        ids = {i for i in self.by_id if i >= first}
        if self.tokenizer_file is not None:
            ids.update(range(first, self._lookup.get_vocab_size(with_added_tokens=True)))
        if self._gguf_tokens is not None:
            ids.update(range(first, len(self._gguf_tokens)))
        return sorted(ids)

    def text_of(self, token_id: int) -> str | None:
        if token_id in self.by_id:
            return self.by_id[token_id]
        if self.tokenizer_file is not None and 0 <= token_id <= MAX_TOKEN_ID:
            return self._lookup.id_to_token(token_id)
        if self._gguf_tokens is not None and 0 <= token_id < len(self._gguf_tokens):
            return self._gguf_tokens[token_id]
        return None

    def is_special(self, token_id: int) -> bool:
        return token_id in self.special_ids

    def is_single_token(self, text: str) -> int | None:
        """The id when `text` is always encoded as one token (a special or added token)."""
        token_id = self.by_text.get(text)  # added and special tokens are always indexed here
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

    def _gguf_first_ids(self, texts: Iterable[str]) -> dict[str, int | None]:
        """The first id of each text among the GGUF's ordinary tokens (None: no such token),
        remembered: only the texts a rule asks about are looked up, never the whole vocabulary
        indexed (262k entries for Gemma)."""
        known = self._gguf_ids
        missing = [t for t in texts if t not in known]
        if missing:
            tokens = self._gguf_tokens or ()
            if hasattr(tokens, "first_indices"):
                found = tokens.first_indices(missing)
            else:
                wanted = set(missing)
                found = {}
                for token_id, token in enumerate(tokens):
                    if token in wanted:
                        found.setdefault(token, token_id)
            for text in missing:
                known[text] = found.get(text)
        return known

    def tokenizer(self) -> tokenizers.Tokenizer:
        """A `tokenizers.Tokenizer` for encoding (tokenizer.json's is loaded with the vocabulary;
        a GGUF vocabulary is converted on first use, then cached)."""
        if self._tokenizer is None and self.tokenizer_file is not None:
            self._tokenizer = _load_tokenizer_file(self.tokenizer_file)  # with its merges, for encoding
        if self._tokenizer is None:
            if self.gguf_header is None:
                raise InputError(
                    "this model has no tokenizer.json (nor a GGUF vocabulary), so text cannot be encoded",
                    hint="add tokenizer.json to the model folder",
                )
            self._tokenizer = _cached_gguf_tokenizer(self.gguf_header)
        return self._tokenizer


def cache_dir() -> Path:
    return Path(os.environ.get("STOPDOCTOR_CACHE") or Path.home() / ".cache" / "stopdoctor")


# The GGUF tokenizers this process already has, by file identity: `diff A A`, `inspect --against`
# and `check` read one file twice, and reading Gemma's cached 262k-token JSON takes ~1 s. Never
# changed once built (a caller that changes one copies it first), so sharing is safe; two kept,
# the two sides of a comparison.
_LOADED_GGUF_TOKENIZERS: dict[str, tokenizers.Tokenizer] = {}
_LOADED_KEPT = 2


def _cached_gguf_tokenizer(header: Any) -> tokenizers.Tokenizer:
    """transformers' GGUF tokenizer conversion takes seconds (15 s for Gemma's 262k vocabulary);
    its result depends only on the file, so it is kept as tokenizer JSON keyed by file identity,
    and the last two are kept in memory too."""
    import tokenizers

    from stopdoctor.facts.gguf_tokenizer import RECIPE_VERSION

    stat = header.path.stat()
    key = f"{header.path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}:{tokenizers.__version__}:{RECIPE_VERSION}"
    tokenizer = _LOADED_GGUF_TOKENIZERS.pop(key, None) or _read_or_convert(header, key)
    _LOADED_GGUF_TOKENIZERS[key] = tokenizer  # most recent last
    while len(_LOADED_GGUF_TOKENIZERS) > _LOADED_KEPT:
        del _LOADED_GGUF_TOKENIZERS[next(iter(_LOADED_GGUF_TOKENIZERS))]
    return tokenizer


def _read_or_convert(header: Any, key: str) -> tokenizers.Tokenizer:
    import hashlib

    import tokenizers

    from stopdoctor.facts.gguf_tokenizer import header_to_tokenizer

    cached = cache_dir() / "gguf-tokenizers" / (hashlib.sha256(key.encode()).hexdigest()[:32] + ".json")
    if cached.is_file():
        try:
            return tokenizers.Tokenizer.from_file(str(cached))
        except Exception:  # noqa: BLE001 - a damaged cache entry is rebuilt
            cached.unlink(missing_ok=True)
    tokenizer = header_to_tokenizer(header)
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        partial = cached.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(tokenizer.to_str())
        partial.replace(cached)
    except OSError:
        pass  # a read-only home only costs speed
    return tokenizer


def _tokenizer_file_error(path: Path, exc: BaseException) -> InputError:
    """A syntax error says where the JSON breaks; valid JSON of the wrong shape (a missing `model`,
    a list) says so, without the parser's line and column, which point at nothing to fix."""
    import json
    import re

    reason = _first_line(exc)
    try:
        with path.open("rb") as handle:
            json.loads(handle.read().decode("utf-8-sig"))
    except (OSError, ValueError, RecursionError):
        return InputError(f"tokenizer.json: cannot be loaded by the tokenizers library: {reason}",
                          hint="runtimes fail to load this file too; fix the JSON syntax")
    reason = re.sub(r" at line \d+ column \d+$", "", reason)
    return InputError(f"tokenizer.json: valid JSON, but not a tokenizer the tokenizers library reads: {reason}",
                      hint="transformers fails on it too; save the tokenizer again with tokenizer.save_pretrained()")


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


def add_tokens(vocab: Vocabulary, ids: Sequence[int], texts: Sequence[str], special: bool, location: Location) -> None:
    """`add_token` for each (id, text) pair, the dictionaries filled in C loops (a GGUF's thousands
    of typed tokens)."""
    deque(map(vocab.by_id.setdefault, ids, texts), maxlen=0)
    deque(map(vocab.by_text.setdefault, texts, ids), maxlen=0)
    vocab.added_ids.update(ids)
    if special:
        vocab.special_ids.update(ids)
    deque(map(vocab.token_locations.setdefault, ids, repeat(location)), maxlen=0)


# Set while a command that never encodes (inspect) reads its model: tokenizer.json is then loaded
# without its merges (`_without_merges`). A command that encodes loads it whole once.
_FOR_LOOKUPS: ContextVar[bool] = ContextVar("stopdoctor_tokenizer_for_lookups", default=False)


@contextmanager
def for_lookups() -> Iterator[None]:
    """tokenizer.json files read inside are loaded for lookups (ids, texts, size, post-processor):
    without a BPE model's merges, and whole only if text is encoded after all."""
    token = _FOR_LOOKUPS.set(True)
    try:
        yield
    finally:
        _FOR_LOOKUPS.reset(token)


def read_tokenizer_file(vocab: Vocabulary, path: Path) -> None:
    """Fill `vocab` from tokenizer.json through the `tokenizers` library. The ids, texts, size and
    post-processor do not depend on a BPE model's merges, which are two thirds of the library's
    load (~65 of ~100 ms for SmolLM2's 49k): inside `for_lookups()` (inspect) the file is loaded
    without them (`_without_merges`) and whole on the first encode (`Vocabulary.tokenizer()`);
    elsewhere (the commands that encode, and `check`) whole at once. Parsing the whole JSON, merges
    included, with the json module was measured as slow as the library. What the library refuses in
    the rest of the file it refuses here, with its message; what it would refuse in the merges array
    (a merge of unknown tokens, a broken array with an intact end) is refused by the commands that
    encode and by `check`."""
    import json

    try:
        info = path.stat()
    except OSError as exc:
        raise InputError(f"tokenizer.json: cannot be read: {exc.strerror or exc}") from exc
    if not stat.S_ISREG(info.st_mode):
        raise InputError("tokenizer.json: is not a regular file (a pipe, socket or device)")
    if info.st_size > MAX_TOKENIZER_BYTES:
        raise InputError(f"tokenizer.json: {info.st_size / 1e6:.0f} MB is larger than the "
                         f"{MAX_TOKENIZER_BYTES / 1e6:.0f} MB a tokenizer file can be (the largest real ones are ~35 MB)")
    tokenizer = _without_merges(path) if _FOR_LOOKUPS.get() else None
    if tokenizer is None:
        tokenizer = vocab._tokenizer = _load_tokenizer_file(path)
    vocab.tokenizer_file = path
    vocab._lookup = tokenizer  # ordinary tokens are looked up through it (no 100k-entry dicts)
    vocab.complete = True
    if isinstance(tokenizer, PlainTokenizer):
        added, vocab.post_processor = tokenizer.added, tokenizer.processor
    else:
        added = [(token_id, token.content, token.special) for token_id, token in tokenizer.get_added_tokens_decoder().items()]
        processor = tokenizer.post_processor
        vocab.post_processor = json.loads(processor.__getstate__()) if processor is not None else None
    location = Location("tokenizer.json", "added_tokens")
    for token_id, content, special in added:
        # Added tokens win over model-vocabulary entries of the same text, as in `tokenizers`.
        vocab.by_id[token_id] = content
        vocab.by_text[content] = token_id
        vocab.added_ids.add(token_id)
        if special:
            vocab.special_ids.add(token_id)
        vocab.token_locations[token_id] = location


# A BPE model's merges as the library writes them: the last key of "model", itself the last key
_MERGES_KEY = re.compile(r'"merges"\s*:\s*\[')
_MERGES_END = re.compile(r"\]\s*\}\s*\}\s*\Z")


def _without_merges(path: Path) -> PlainTokenizer | tokenizers.Tokenizer | None:
    """tokenizer.json with an empty merges array, for lookups only: read with the json module
    (`facts.tokenizer_json`) when in the shape the library writes, else loaded by the library; None
    when the file is not laid out as the library writes it (merges last in the model, the model
    last in the file) or when the library refuses it (the caller's whole load then gives the error)."""
    text = _merges_emptied(path)
    if text is None:
        return None
    plain = read_plain(text)
    if plain is not None and validate_parts(plain):
        return plain
    import tokenizers

    try:
        return tokenizers.Tokenizer.from_str(text)
    except Exception:  # noqa: BLE001 - the whole load says what is wrong
        return None


def _merges_emptied(path: Path) -> str | None:
    """The text of tokenizer.json with its merges array emptied, when the merges are the model's
    last key and the model the file's last (as the library writes them)."""
    try:
        text = path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    end = _MERGES_END.search(text, max(0, len(text) - 4096))
    if end is None:
        return None
    at, key = end.start(), None
    while key is None:  # the last `"merges"` followed by a colon: a key (no string of the array is followed by one)
        at = text.rfind('"merges"', 0, at)
        if at < 0:
            return None
        key = _MERGES_KEY.match(text, at)
    return text[: key.end()] + text[end.start():]


def _load_tokenizer_file(path: Path) -> tokenizers.Tokenizer:
    """tokenizer.json loaded whole by the `tokenizers` library, padding and truncation off."""
    import tokenizers

    try:
        tokenizer = tokenizers.Tokenizer.from_file(str(path))
    except Exception as exc:  # the library raises plain Exception subclasses
        raise _tokenizer_file_error(path, exc) from exc
    # transformers turns the file's padding and truncation off on every call unless asked (a
    # `Fixed` padding of 30 million would pad each prompt to gigabytes); every encode here does too.
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


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
    # The raw (lazy) sequence: single ids decode on demand, so inspect never decodes all 262k.
    tokens = header.metadata.get("tokenizer.ggml.tokens")
    if tokens is None:
        return
    if isinstance(tokens, str) or not isinstance(tokens, Sequence) or not _all_strings(tokens):
        raise InputError(f"{header.path}: tokenizer.ggml.tokens is not an array of strings, so the file has no usable vocabulary",
                         hint="llama.cpp refuses this file too; re-convert the model")
    vocab.gguf_header = header
    vocab._gguf_tokens = tokens
    vocab.complete = True
    # a longer type array describes no token past the list; read from the file's bytes, no numpy
    typed = header.ids_of_types((GGUF_CONTROL, GGUF_USER_DEFINED), len(tokens))
    if typed is not None:
        # llama.cpp matches control and user-defined tokens whole (parse_special), like HF special
        # tokens. Gemma has 6,414 (its <unusedN>): added in C loops, decoded together.
        texts = tokens.texts_at(typed) if hasattr(tokens, "texts_at") else [tokens[i] for i in typed]
        add_tokens(vocab, typed, texts, True, Location(header.path.name, "tokenizer.ggml.token_type"))


def _all_strings(tokens: Sequence[Any]) -> bool:
    from stopdoctor.facts.gguf_strings import LazyStrings

    return isinstance(tokens, LazyStrings) or all(isinstance(t, str) for t in tokens)


def token_texts(vocab: Vocabulary, ids: Iterable[int]) -> list[str]:
    return [vocab.text_of(i) or f"<id {i}>" for i in ids]
