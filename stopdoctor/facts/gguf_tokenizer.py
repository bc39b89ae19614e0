"""The `tokenizers.Tokenizer` transformers builds from a GGUF file, built from our header reader
(`stopdoctor.facts.gguf`) instead of transformers' own, which imports torch; a BPE vocabulary then
splits text as llama.cpp does for its `tokenizer.ggml.pre` (`stopdoctor.facts.gguf_pretokenizer`),
where transformers does not know the name, and a token llama.cpp makes control by its text
(`stopdoctor.facts.gguf_special`: Gemma 3's `</s>`) is special here too.

For render/probe-stop/labels/generate, never for inspect: it imports transformers' GGUF converter
lazily (seconds of import).
Imports: numpy, `stopdoctor.core.errors`, `stopdoctor.facts.gguf`, `stopdoctor.facts.gguf_pretokenizer`,
`stopdoctor.facts.gguf_special`; transformers and tokenizers lazily.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from stopdoctor.core.errors import InputError
from stopdoctor.facts.gguf import GGUFHeader, Keys, LazyStrings
from stopdoctor.facts.gguf_pretokenizer import apply as apply_pre_tokenizer
from stopdoctor.facts.gguf_pretokenizer import llama_cpp_pre_tokenizer
from stopdoctor.facts.gguf_special import USER_DEFINED_TEXTS, retyped_to_control

# Bump when the tokenizer built from a header changes: the converted tokenizer is cached by file.
RECIPE_VERSION = 4

if TYPE_CHECKING:
    import tokenizers

# GGUF key -> the name transformers' GGUF tokenizer builder expects; mirrors
# transformers.integrations.gguf.gguf_tokenizer_mapping.GGUF_TOKENIZER_MAPPING["tokenizer"].
_TRANSFORMERS_TOKENIZER_KEYS = {
    "tokenizer.ggml.model": "tokenizer_type",
    "tokenizer.ggml.pre": "pre_tokenizer_type",
    "tokenizer.ggml.tokens": "tokens",
    "tokenizer.ggml.scores": "scores",
    "tokenizer.ggml.token_type": "token_type",
    "tokenizer.ggml.merges": "merges",
    "tokenizer.ggml.precompiled_charsmap": "precompiled_charsmap",
    "tokenizer.ggml.bos_token_id": "bos_token_id",
    "tokenizer.ggml.eos_token_id": "eos_token_id",
    "tokenizer.ggml.unknown_token_id": "unk_token_id",
    "tokenizer.ggml.padding_token_id": "pad_token_id",
    "tokenizer.ggml.add_space_prefix": "add_prefix_space",
}


def header_to_tokenizer(header: GGUFHeader) -> tokenizers.Tokenizer:
    """The `tokenizers.Tokenizer` that `AutoTokenizer.from_pretrained(dir, gguf_file=...)` builds.

    Uses transformers' own GGUF converter (imported here, lazily: it costs seconds and must stay off
    the inspect path), fed from our header instead of transformers' reader, which imports torch.
    Control tokens (type 3) become special added tokens, user-defined ones (type 4) plain added
    tokens, as transformers does. Slow for SentencePiece vocabularies without merges (Gemma:
    transformers rebuilds the merges from the 262k vocabulary, ~15 s).
    """
    if header.tokens is None:
        raise InputError(f"{header.path}: the GGUF file has no vocabulary ({Keys.LIST}).")
    try:
        from transformers.integrations.gguf.gguf_tokenizer_mapping import convert_gguf_tokenizer
    except ImportError:  # transformers < 5 kept it here
        convert_gguf_tokenizer = __import__("transformers.integrations.ggml", fromlist=["_"]).convert_gguf_tokenizer
    tokenizer_dict: dict[str, Any] = {}
    for key, name in _TRANSFORMERS_TOKENIZER_KEYS.items():
        if key not in header.metadata:
            continue
        value = header.metadata[key]
        # transformers' reader gives plain lists (it tests `token_type or ()`, which a numpy array fails).
        if isinstance(value, LazyStrings):
            value = value.to_list()
        elif isinstance(value, np.ndarray):
            value = value.tolist()
        tokenizer_dict[name] = value
    try:
        backend, _ = convert_gguf_tokenizer(header.architecture or "", tokenizer_dict)
    except Exception as error:  # noqa: BLE001 - an unsupported model type, merges naming no token, ...
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise InputError(f"{header.path}: cannot build its tokenizer from the GGUF vocabulary: {first}",
                         hint="llama.cpp rejects such a vocabulary too; re-convert the model") from None
    if header.tokenizer_model == "gpt2":
        # transformers splits only the llama3/qwen2/gpt-4o/tekken families as llama.cpp does; the
        # others (smollm's single digits, default's punctuation runs) fall back to GPT-2's split.
        pre = llama_cpp_pre_tokenizer(header.get("tokenizer.ggml.pre"))
        if pre is not None:
            apply_pre_tokenizer(backend, pre)
    _control_by_text(backend, header)
    _set_bos_eos(backend, header)
    return backend


def _control_by_text(backend: tokenizers.Tokenizer, header: GGUFHeader) -> None:
    """Make special the tokens llama.cpp makes control by their text, whatever type the file gives
    them: matched whole in text (with parse_special off: plain text), skipped in output."""
    from tokenizers import AddedToken

    tokens, types = header.tokens, header.token_types
    if not tokens or types is None:
        return
    retyped = retyped_to_control(tokens, types, lambda role: f"tokenizer.ggml.{role}_token_id" in header.metadata)
    if retyped:
        backend.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False) for i in retyped])
    # Harmony's markers: user-defined in llama.cpp whatever the file says, matched whole, shown in output
    present = set(tokens)
    harmony = [text for text in USER_DEFINED_TEXTS if text in present]
    if harmony:
        backend.add_tokens([AddedToken(text, special=False, normalized=False) for text in harmony])


def _set_bos_eos(backend: tokenizers.Tokenizer, header: GGUFHeader) -> None:
    """Add BOS/EOS as the file says, as transformers' TokenizersBackend.update_post_processor does
    with the add_bos_token/add_eos_token that get_gguf_tokenizer reads (the converter alone does not)."""
    from tokenizers import processors

    add_bos = header.add_bos
    if add_bos is None:
        # transformers (and llama.cpp) add BOS to a SentencePiece vocabulary that does not say otherwise.
        add_bos = header.tokenizer_model == "llama"
    if header.tokenizer_model == "gemma4":
        add_bos = False  # transformers follows the reference tokenizer here: the chat template writes <bos>
    bos = header.token(header.bos_id) if header.bos_id is not None else None
    eos = header.token(header.eos_id) if header.eos_id is not None else None
    add_bos = add_bos and bos is not None
    add_eos = bool(header.add_eos) and eos is not None
    # The template names each special token by a key of its own, not by its text: a text holding
    # a space or a colon (`<b:s>`) cannot be written in TemplateProcessing's "TOKEN:TYPE" syntax.
    single = f"{'bos:0 ' if add_bos else ''}$A:0{' eos:0' if add_eos else ''}"
    pair = f"{single}{' bos:1' if add_bos else ''} $B:1{' eos:1' if add_eos else ''}"
    special = ([{"id": "bos", "ids": [bos.id], "tokens": [bos.text]}] if add_bos and bos is not None else []) + (
        [{"id": "eos", "ids": [eos.id], "tokens": [eos.text]}] if add_eos and eos is not None else [])
    backend.post_processor = processors.TemplateProcessing(single=single, pair=pair, special_tokens=special)
