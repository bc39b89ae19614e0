"""SD27x (template and tokens): tokenizer parity — a GGUF's tokenizer as llama.cpp will build it, against what the model
was trained with.

Read from llama.cpp `src/llama-vocab.cpp` (`llama_vocab::impl::load`, the llama.cpp vendored by
llama-cpp-python 0.3.36): a BPE vocabulary (`tokenizer.ggml.model` gpt2, hybriddna, whitespace)
needs `tokenizer.ggml.merges` ("cannot find tokenizer merges in model file" otherwise, except for
the kimi-k2 pre-tokenizer) and a `tokenizer.ggml.pre` naming its pre-tokenizer; without one it
falls back to `default` and logs "GENERATION QUALITY WILL BE DEGRADED". SentencePiece (`llama`)
and WordPiece vocabularies have no pre-tokenizer. A named pre-tokenizer that cuts apart tokens of
the vocabulary, where another keeps them all whole, is the wrong one (SD272). llama.cpp matches
control and user-defined tokens whole before splitting; a template marker typed as an ordinary
token is split like any text (SD273). And for any model: a tokenizer with ids past the embedding's
rows (`config.json` `vocab_size`), tokens added without `resize_token_embeddings` (SD274).
"""

from __future__ import annotations

import re

from stopdoctor.analysis.core import Analysis
from stopdoctor.core.findings import Severity
from stopdoctor.core.types import Location
from stopdoctor.facts.gguf_pretokenizer import byte_level_texts, families, llama_cpp_pre_tokenizer, split_text, unreachable
from stopdoctor.facts.gguf_special import USER_DEFINED_TEXTS
from stopdoctor.rules.registry import Rule, rule
from stopdoctor.runtimes.stops import llama_cpp_control_by_text

BPE_MODELS = ("gpt2", "hybriddna", "whitespace")
PRE_KEY = "tokenizer.ggml.pre"
# Tokens the named split must cut apart before SD272 speaks: a correct file leaves none (SmolLM2
# under smollm, falcon-40b under falcon, Pythia under gpt-2: 0 of their 1,246-4,605 non-word tokens).
MIN_UNREACHABLE = 10
MAX_VOCAB = 1 << 20  # real vocabularies stop near 262k; past this the split of every token is not spent
TYPE_KEY = "tokenizer.ggml.token_type"
TOKEN_NORMAL = 1  # llama.cpp's LLAMA_TOKEN_TYPE_NORMAL
# Marker-shaped pieces of the template's turn headers and end-of-turn texts: <|im_start|>, [INST].
MARKER = re.compile(r"<[^<>\s]{1,64}>|\[[^\[\]\s]{1,64}\]")
MERGES_KEY = "tokenizer.ggml.merges"


def _bpe_header(analysis: Analysis):
    header = analysis.facts.gguf
    if header is None or header.tokenizer_model not in BPE_MODELS:
        return None
    return header


@rule("SD270", "pre-tokenizer-missing", Severity.WARNING)
def pre_tokenizer_missing(analysis: Analysis, self: Rule):
    """A BPE GGUF names no pre-tokenizer: llama.cpp splits text its `default` way.

    What it checks:
    A GGUF whose `tokenizer.ggml.model` is a BPE vocabulary (gpt2) and that has no
    `tokenizer.ggml.pre` (or an empty one).

    Why it matters:
    The pre-tokenizer decides where words, digits and spaces split before merges apply. With the
    wrong one, llama.cpp encodes the prompt into ids the model never saw in training (it logs
    "GENERATION QUALITY WILL BE DEGRADED"): answers degrade, and turn markers written as text can
    tokenize differently, so a turn is not recognised as ended.

    Example:
    A Llama-3 GGUF converted before llama.cpp added `tokenizer.ggml.pre` (May 2024).

    Fix:
    Convert the model again with a current `convert_hf_to_gguf.py` (it writes the pre-tokenizer it
    recognises by hashing the tokenizer's output), or compare with the HF tokenizer
    (`stopdoctor diff MODEL.gguf HF_FOLDER`).

    How the runtimes decide (source):
    llama.cpp `src/llama-vocab.cpp` `llama_vocab::impl::load`: for a BPE vocabulary,
    `tokenizer_pre.empty()` → "missing pre-tokenizer type, using: 'default'" and
    `LLAMA_VOCAB_PRE_TYPE_DEFAULT`.
    """
    header = _bpe_header(analysis)
    if header is None:
        return
    pre = header.get(PRE_KEY)
    if isinstance(pre, str) and pre.strip():
        return
    file = next(iter(analysis.facts.source.files))
    yield self.finding(
        f"the GGUF's BPE vocabulary ({header.tokenizer_model}) names no pre-tokenizer ({PRE_KEY} is "
        f"{'empty' if isinstance(pre, str) else 'absent'}): llama.cpp falls back to 'default' and warns "
        f"\"GENERATION QUALITY WILL BE DEGRADED\"",
        "convert the model again with a current llama.cpp convert_hf_to_gguf.py",
        Location(file, PRE_KEY), tokenizer_model=header.tokenizer_model)


@rule("SD271", "gguf-merges-missing", Severity.ERROR)
def gguf_merges_missing(analysis: Analysis, self: Rule):
    """A BPE GGUF has no merges: llama.cpp refuses to load it.

    What it checks:
    A GGUF whose `tokenizer.ggml.model` is a BPE vocabulary and that has no `tokenizer.ggml.merges`
    (the kimi-k2 pre-tokenizer needs none).

    Why it matters:
    llama.cpp stops loading with "cannot find tokenizer merges in model file"; other readers
    (transformers' GGUF loader) build a tokenizer that splits every word into bytes.

    Example:
    A GGUF written by a tool that copies the token list but not the merge table.

    Fix:
    Convert the model again from its HF folder (tokenizer.json holds the merges).

    How the runtimes decide (source):
    llama.cpp `src/llama-vocab.cpp` `llama_vocab::impl::load`: `gguf_find_key(ctx, MERGES) == -1`
    throws unless `tokenizer_pre == "kimi-k2"`.
    """
    header = _bpe_header(analysis)
    if header is None or header.get(MERGES_KEY) is not None or header.get(PRE_KEY) == "kimi-k2":
        return
    file = next(iter(analysis.facts.source.files))
    yield self.finding(
        f"the GGUF's BPE vocabulary has no {MERGES_KEY}: llama.cpp refuses to load it "
        f"(\"cannot find tokenizer merges in model file\")",
        "convert the model again from its HF folder (tokenizer.json holds the merges)",
        Location(file, MERGES_KEY))


@rule("SD272", "pre-tokenizer-mismatch", Severity.WARNING)
def pre_tokenizer_mismatch(analysis: Analysis, self: Rule):
    """A BPE GGUF names a pre-tokenizer that cuts apart tokens of its own vocabulary.

    What it checks:
    A byte-level BPE GGUF (`gpt2`) whose `tokenizer.ggml.pre` names a split llama.cpp applies with
    expressions stopdoctor knows: the vocabulary's ordinary tokens are split with it. A token it
    cuts into two or more pieces can never be produced, since merges run inside one piece. At least
    10 such tokens, while another known split keeps every token whole, is the evidence that the
    vocabulary was trained with that other pre-tokenizer. No model-name list is consulted.

    Why it matters:
    llama.cpp encodes every prompt with the named split: text the model saw as one token (a
    whitespace run, a number, `'s`) reaches it as pieces it never met in training, and a turn
    marker or stop string written as text tokenizes differently (llama.cpp #7724: a Llama-3
    vocabulary marked `smaug-bpe`, when that name still split differently; llama.cpp b10434 gives
    `smaug-bpe` llama3's expression).

    Example:
    SmolLM2 (`smollm`) relabelled `llama3`: llama3's `\\s*[\\r\\n]+` cuts 117 of its whitespace
    tokens such as "\\n   ", which the smollm and gpt-2 splits keep whole.

    Fix:
    Convert the model again with a current `convert_hf_to_gguf.py` (it names the pre-tokenizer by
    hashing the HF tokenizer's output), or set `tokenizer.ggml.pre` to the split that fits.

    How the runtimes decide (source):
    llama.cpp `src/llama-vocab.cpp`: `llama_vocab::impl::load` maps the name to a type; the
    `llm_tokenizer_bpe` constructor gives each type its expressions (see
    `stopdoctor/facts/gguf_pretokenizer.py`).
    """
    header = _bpe_header(analysis)
    if header is None or header.tokenizer_model != "gpt2":
        return
    name = header.get(PRE_KEY)
    if not isinstance(name, str) or not name.strip():
        return  # SD270 says so
    declared = llama_cpp_pre_tokenizer(name)
    tokens = header.tokens
    if declared is None or not tokens or len(tokens) > MAX_VOCAB:
        return
    texts = byte_level_texts(tokens, header.token_types)
    cut = unreachable(texts, declared)
    if len(cut) < MIN_UNREACHABLE:
        return
    fits = [(other, pre) for other, pre in families()
            if pre.regexes != declared.regexes and not unreachable(texts, pre, limit=1)]
    if not fits:
        return  # no known split explains the vocabulary either: no evidence which one is right
    examples = ", ".join(repr(text) for text in cut[:3])
    names = ", ".join(f"{other} ({pre.type_name})" for other, pre in fits)
    file = next(iter(analysis.facts.source.files))
    yield self.finding(
        f"{len(cut)} ordinary tokens of the vocabulary ({examples}, ...) can never be produced "
        f"under {PRE_KEY} '{name}': llama.cpp's {declared.type_name} split cuts each of them apart, while "
        f"{names} {'keeps' if len(fits) == 1 else 'keep'} every token whole; the vocabulary was trained with another pre-tokenizer",
        f"convert the model again with a current convert_hf_to_gguf.py, or set {PRE_KEY} to {fits[0][0]!r}",
        Location(file, PRE_KEY), declared=name, unreachable=len(cut), fits=[other for other, _ in fits])


@rule("SD273", "special-token-not-single", Severity.ERROR)
def special_token_not_single(analysis: Analysis, self: Rule):
    """A turn marker the template writes is a token of the GGUF, typed as an ordinary one: llama.cpp
    splits its text into pieces.

    What it checks:
    Each marker-shaped piece (`<...>`, `[...]`) of the template's turn headers and end-of-turn
    texts that is one token of a byte-level BPE GGUF whose `tokenizer.ggml.token_type` says normal
    (1), that llama.cpp does not retype to control by its text (its end-of-generation, end-of-turn
    and fill-in-the-middle lists), and that the GGUF's pre-tokenizer cuts into two or more pieces.

    Why it matters:
    llama.cpp matches only control, user-defined and unknown tokens whole before it splits text
    (`tokenizer_st_partition`); an ordinary token is reached through merges, and merges run inside
    one piece. The prompt then carries `<|`, `im`, `_`, `start`, `|>` where the model was trained
    on one id: it cannot tell where a turn begins or ends (llama.cpp #7062).

    Example:
    SmolLM2 with `<|im_start|>` (id 1) typed 1: llama-server's `/tokenize` gives 7 ids for it.

    Fix:
    Set the token's `tokenizer.ggml.token_type` to 3 (control), or convert the model again
    (`convert_hf_to_gguf.py` types the tokenizer's special tokens as control).

    How the runtimes decide (source):
    llama.cpp `src/llama-vocab.cpp`: `cache_special_tokens` holds the tokens with the CONTROL,
    USER_DEFINED or UNKNOWN attribute; `tokenizer_st_partition` cuts the text at them; the
    "control-looking token" override retypes the texts of its end-of-generation lists.
    """
    header = _bpe_header(analysis)
    if header is None or header.tokenizer_model != "gpt2":
        return
    pre = llama_cpp_pre_tokenizer(header.get(PRE_KEY))
    types = header.token_types
    if pre is None or types is None:
        return
    vocab = analysis.facts.vocab
    retyped = llama_cpp_control_by_text(analysis.facts)
    written = [*analysis.turn_headers.values(), *(marker.text for marker in analysis.end_of_turn)]
    file = next(iter(analysis.facts.source.files))
    for text in dict.fromkeys(m for piece in written for m in MARKER.findall(piece)):
        token_id = vocab.id_of(text)
        if token_id is None or not 0 <= token_id < len(types) or token_id in retyped or text in USER_DEFINED_TEXTS:
            continue  # llama.cpp retypes it (control, or Harmony's user-defined markers) and matches it whole
        if int(types[token_id]) != TOKEN_NORMAL:
            continue
        pieces = split_text(text, pre)
        if len(pieces) < 2:
            continue
        yield self.finding(
            f"the chat template writes {text} (id {token_id}), which the GGUF types as an ordinary token "
            f"({TYPE_KEY}[{token_id}] = 1): llama.cpp matches only control and user-defined tokens whole, and its "
            f"{pre.type_name} split cuts {text} into {len(pieces)} pieces ({' '.join(repr(p) for p in pieces)}) "
            f"before merges, so the model never gets the id it was trained on",
            f"set {TYPE_KEY}[{token_id}] to 3 (control), or convert the model again with a current convert_hf_to_gguf.py",
            Location(file, TYPE_KEY), token_id=token_id, token=text, pieces=len(pieces))


@rule("SD274", "tokenizer-larger-than-embedding", Severity.ERROR)
def tokenizer_larger_than_embedding(analysis: Analysis, self: Rule):
    """The tokenizer has ids past the embedding's rows: tokens added without resizing the model.

    What it checks:
    Every id the tokenizer can produce (`tokenizer.json` with its added tokens,
    `tokenizer_config.json` `added_tokens_decoder`, `added_tokens.json`) against the embedding's
    rows as `config.json` declares them (`vocab_size`); `inspect --weights` also reads the rows
    of the embedding tensor itself.

    Why it matters:
    Tokens added to a tokenizer (`tokenizer.add_tokens`, `add_special_tokens`) need
    `model.resize_token_embeddings(len(tokenizer))`; without it, any prompt that contains one
    indexes past the embedding: transformers fails with `IndexError: index out of range in
    self` (CUDA: a device-side assert), and the model can never emit those tokens.

    Example:
    `2 tokens of the tokenizer have ids past the 49,152 rows of the embedding (config.json vocab_size): <tool_call> (id 49152), </tool_call> (id 49153)`

    Fix:
    Resize the embeddings (`model.resize_token_embeddings(len(tokenizer))`, then train the new
    rows) and save the model again, or drop the added tokens from the tokenizer files.
    """
    vocab = analysis.facts.vocab
    rows = vocab.declared_size
    if rows is None or rows <= 0:
        return
    past = vocab.ids_from(rows)
    if not past:
        return
    shown = ", ".join(f"{vocab.text_of(i) or '?'} (id {i})" for i in past[:5]) + (", ..." if len(past) > 5 else "")
    yield self.finding(
        f"{len(past)} token{'s' if len(past) != 1 else ''} of the tokenizer {'have ids' if len(past) != 1 else 'has an id'} "
        f"past the {rows:,} rows of the embedding (config.json vocab_size): {shown}; a prompt with one fails "
        "(IndexError) and the model can never emit them",
        "resize the embeddings (model.resize_token_embeddings(len(tokenizer))) and train the new rows, "
        "or remove the added tokens from the tokenizer files",
        analysis.facts.locate(Location("config.json", "vocab_size")),
        rows=rows, ids=past[:100], texts=[vocab.text_of(i) for i in past[:100]])
