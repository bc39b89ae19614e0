"""tokenizer.json without its merges, read with the json module, for `inspect`'s lookups.

`inspect` asks tokenizer.json for ids, texts, the vocabulary size and the post-processor
(`facts.vocab.for_lookups`). `read_plain` answers those as the `tokenizers` library would, from the
file's text with an empty merges array (~20 ms for SmolLM2, where the library takes ~40 ms for the
same text and ~100 ms for the whole file), for a file in the shape the library writes; anything else
(`None`) is loaded by the library. The ids are the library's (`_added_ids`: tokenizers'
AddedVocabulary.add_tokens); `validate_parts` has the library load the small parts (normalizer,
pre-tokenizer, post-processor, decoder, padding, truncation, the model's options), so what it refuses
there it still refuses, with its message. benchmarks/check_tokenizer_lookups.py compares every
answer with the library's on the real files.
Imports: nothing of stopdoctor's; `tokenizers` inside `validate_parts` only.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

_MAX_ID = 2**32 - 1  # `tokenizers` ids are u32
# What the library writes in every tokenizer.json it saves; a file without one of them is read by
# the library (it may default the key, or refuse the file)
_TOP_KEYS = ("added_tokens", "normalizer", "pre_tokenizer", "post_processor", "decoder", "model")
_DICT_MODELS = ("BPE", "WordPiece", "WordLevel")
_ESCAPED_SURROGATE = re.compile(r"\\u[dD][89abAB]")  # Python's json accepts a lone one, serde_json does not


@dataclass
class PlainTokenizer:
    """The answers of `tokenizers.Tokenizer` that `Vocabulary` asks for, and its added tokens."""

    added: list[tuple[int, str, bool]]  # (id, content, special), the library's id for each
    size: int  # get_vocab_size(with_added_tokens=True)
    processor: dict | None  # the post-processor as JSON
    document: dict = field(repr=False)
    vocab: dict[str, int] = field(default_factory=dict, repr=False)  # the model's text -> id
    _by_id: dict[int, str] | None = field(default=None, repr=False)

    def get_vocab_size(self, with_added_tokens: bool = True) -> int:
        assert with_added_tokens
        return self.size

    def token_to_id(self, text: str) -> int | None:
        """The model vocabulary's id of `text`: `Vocabulary` answers the added tokens itself (its
        by_text), as it does before asking the library."""
        return self.vocab.get(text)

    def id_to_token(self, token_id: int) -> str | None:
        """The model vocabulary's text of `token_id` (the added tokens: `Vocabulary`'s by_id)."""
        if self._by_id is None:
            self._by_id = {i: t for t, i in self.vocab.items()}
        return self._by_id.get(token_id)


def read_plain(text: str) -> PlainTokenizer | None:
    """The tokenizer in `text` (tokenizer.json, its merges array emptied), or None when the file is
    not plainly what the library writes (the library then loads it, and says what is wrong)."""
    if text.startswith("\ufeff") or _ESCAPED_SURROGATE.search(text):
        return None
    try:
        document = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        return None
    if not isinstance(document, dict) or any(key not in document for key in _TOP_KEYS):
        return None
    model = document["model"]
    vocab = _model_vocab(model) if isinstance(model, dict) else None
    if vocab is None:
        return None
    added = _added_ids(document["added_tokens"], vocab)
    processor = document["post_processor"]
    if added is None or (processor is not None and not _plain_processor(processor)):
        return None
    size = len(vocab) + sum(1 for _, content, _ in added if content not in vocab)
    return PlainTokenizer(added, size, processor, document, vocab)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _model_vocab(model: dict) -> dict[str, int] | None:
    """text -> id of a model whose ids are 0..n-1, each once (what every saved tokenizer has)."""
    kind, vocab = model.get("type"), model.get("vocab")
    if kind in _DICT_MODELS and isinstance(vocab, dict):
        ids = vocab.values()
        if not all(type(i) is int for i in ids) or set(ids) != set(range(len(vocab))):
            return None
        return vocab
    if kind == "Unigram" and isinstance(vocab, list):
        pieces: dict[str, int] = {}
        for index, entry in enumerate(vocab):
            if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str)
                    and type(entry[1]) in (int, float)) or entry[0] in pieces:
                return None
            pieces[entry[0]] = index
        return pieces
    return None


def _added_ids(entries: Any, vocab: dict[str, int]) -> list[tuple[int, str, bool]] | None:
    """The added tokens with the ids the library gives them (tokenizers' AddedVocabulary.add_tokens:
    a token of the model's vocabulary keeps its id there, any other takes the next id past the
    vocabulary); None unless each token's own id is that one, each content distinct and non-empty."""
    if not isinstance(entries, list):
        return None
    added: list[tuple[int, str, bool]] = []
    seen: set[str] = set()
    size = len(vocab)
    top: int | None = None
    for entry in entries:
        if not isinstance(entry, dict):
            return None
        token_id, content, special = entry.get("id"), entry.get("content"), entry.get("special")
        if type(token_id) is not int or not isinstance(content, str) or not content or type(special) is not bool:
            return None
        if content in seen or not 0 <= token_id <= _MAX_ID:
            return None
        seen.add(content)
        expected = vocab.get(content)
        if expected is None:
            expected = size if top is None or (top < size and size != 0) else top + 1
        if expected != token_id:
            return None
        top = expected if top is None else max(top, expected)
        added.append((token_id, content, special))
    return added


def _plain_processor(processor: Any) -> bool:
    """A post-processor whose TemplateProcessing parts are lists of pieces, as the library writes
    them (a file may spell a template as a string, which the library parses)."""
    if not isinstance(processor, dict):
        return False
    if processor.get("type") == "Sequence":
        parts = processor.get("processors")
        return isinstance(parts, list) and all(_plain_processor(p) for p in parts)
    if processor.get("type") == "TemplateProcessing":
        return all(isinstance(processor.get(k), list) and all(isinstance(p, dict) for p in processor[k])
                   for k in ("single", "pair"))
    return True


def validate_parts(plain: PlainTokenizer) -> bool:
    """Whether the library loads the file's small parts: its model with an empty vocabulary (the
    merges are empty already), no added tokens."""
    import tokenizers

    model = dict(plain.document["model"])
    if model["type"] == "Unigram":
        unk = model.get("unk_id")
        model["vocab"] = model["vocab"][: unk + 1] if type(unk) is int and unk >= 0 else []
    else:
        model["vocab"] = {}
    try:
        tokenizers.Tokenizer.from_str(json.dumps({**plain.document, "model": model, "added_tokens": []}))
    except Exception:  # noqa: BLE001 - the library raises plain Exception subclasses; the whole load says why
        return False
    return True
