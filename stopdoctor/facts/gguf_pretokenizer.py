"""How a GGUF's BPE vocabulary splits text before merges: what `tokenizer.ggml.pre` means.

The key is the GGUF format's own, and its meaning is llama.cpp's: `src/llama-vocab.cpp`
(`llama_vocab::impl::load` maps the name to a pre-tokenizer type; the `llm_tokenizer_bpe`
constructor gives each type its list of regular expressions, applied one after the other, each
splitting every piece the previous ones left, matches and the text between them alike). A name
llama.cpp knows but transformers' GGUF converter does not (`smollm`, `gpt-2`, `default`, ...)
leaves transformers on GPT-2's byte-level split, which tokenizes digits and whitespace runs
differently: "   0" or "\\n\\n\\n1" in SmolLM2 got other ids than llama-server's `/tokenize`.

Only the families whose expressions the `tokenizers` library (Oniguruma) runs as llama.cpp does
are listed; the others keep transformers' split. `unreachable` tells which of a vocabulary's tokens
a pre-tokenizer can never produce (it cuts their text apart before merges run): the evidence that
a vocabulary was trained with another one (rule SD272). Measured against llama-server b10434
(tests/test_llama_server.py) on the real SmolLM2 vocabulary with `tokenizer.ggml.pre` rewritten
to each family's name.

Imports: tokenizers, lazily.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from stopdoctor.core.records import record

if TYPE_CHECKING:
    import tokenizers

# llama.cpp's GPT-2 expression: tokenizer.json's without the final `|\s+` (whitespace it leaves
# unmatched still becomes its own piece, so the split is the same).
_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
# llama.cpp writes `(?i:'s|...)` as `(?:'[sS]|...)` for std::regex; Oniguruma takes the original.
_LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
           r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")


@record
class PreTokenizer:
    """One llama.cpp pre-tokenizer type: its expressions, and whether a piece that is itself in the
    vocabulary is taken whole before merges (`ignore_merges`)."""

    type_name: str  # llama.cpp's LLAMA_VOCAB_PRE_TYPE_* name
    regexes: tuple[str, ...]
    ignore_merges: bool = False


DEFAULT = PreTokenizer("DEFAULT", (r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"))
_FALCON = PreTokenizer("FALCON", (r"[\p{P}\$\+<=>\^~\|`]+", _GPT2, r"[0-9][0-9][0-9]"))
_SMOLLM = PreTokenizer("SMOLLM", (r"\p{N}", _GPT2))  # also STARCODER, REFACT, COMMAND_R, ...
_GPT2_TYPE = PreTokenizer("GPT2", (_GPT2,))
_LLAMA3_TYPE = PreTokenizer("LLAMA3", (_LLAMA3,), ignore_merges=True)
_SMAUG = PreTokenizer("SMAUG", (_LLAMA3,))  # DBRX and SMAUG: llama3's expression, merges applied
_CHATGLM4 = PreTokenizer("CHATGLM4", (_LLAMA3,))
_GLM4 = PreTokenizer("CHATGLM4", (_LLAMA3,), ignore_merges=True)
_QWEN2_TYPE = PreTokenizer("QWEN2", (_QWEN2,))

# tokenizer.ggml.pre → type, as llama_vocab::impl::load maps them (BPE vocabularies only).
BY_NAME: dict[str, PreTokenizer] = {
    "default": DEFAULT,
    "falcon": _FALCON,
    **dict.fromkeys(("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b",
                     "mellum2"), _SMOLLM),
    **dict.fromkeys(("gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0",
                     "mellum", "modern-bert", "jina-v1-en", "jina-v2-code", "roberta-bpe", "mpt", "olmo", "jais",
                     "trillion", "granite-docling", "exaone4"), _GPT2_TYPE),
    **dict.fromkeys(("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
                     "jina-v5-nano"), _LLAMA3_TYPE),
    **dict.fromkeys(("dbrx", "smaug-bpe"), _SMAUG),
    "chatglm-bpe": _CHATGLM4,
    **dict.fromkeys(("glm4", "glm5"), _GLM4),
    **dict.fromkeys(("qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez", "stablelm2", "hunyuan",
                     "solar-open", "grok-2"), _QWEN2_TYPE),
}


def llama_cpp_pre_tokenizer(name: str | None) -> PreTokenizer | None:
    """The pre-tokenizer llama.cpp uses for a BPE vocabulary whose `tokenizer.ggml.pre` is `name`
    (absent or empty: DEFAULT, with the "GENERATION QUALITY WILL BE DEGRADED" warning); None for
    a name this table does not hold."""
    if name is None or not name.strip():
        return DEFAULT
    return BY_NAME.get(name)


def apply(backend: tokenizers.Tokenizer, pre: PreTokenizer) -> None:
    """Split `backend`'s text as llama.cpp does: each expression in turn, then GPT-2's byte mapping."""
    from tokenizers import Regex, pre_tokenizers

    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(regex), behavior="isolated") for regex in pre.regexes]
        + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    if pre.ignore_merges and hasattr(backend.model, "ignore_merges"):
        backend.model.ignore_merges = True


def families() -> list[tuple[str, PreTokenizer]]:
    """One (first name, pre-tokenizer) per distinct split in the table, in table order."""
    seen: dict[tuple[str, ...], tuple[str, PreTokenizer]] = {}
    for name, pre in BY_NAME.items():
        seen.setdefault(pre.regexes, (name, pre))
    return list(seen.values())


def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-to-character mapping, reversed: printable bytes stand for themselves, the
    others for the characters from U+0100 on, in byte order."""
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("\u00a1"), ord("\u00ac") + 1), *range(ord("\u00ae"), ord("\u00ff") + 1)]
    shifted = [b for b in range(256) if b not in kept]
    return {**{chr(b): b for b in kept}, **{chr(256 + n): b for n, b in enumerate(shifted)}}


def byte_level_texts(tokens: Sequence[str], types: Iterable[int] | None) -> list[str]:
    """The text of each normal (type 1, or untyped) token of two or more characters of a byte-level
    BPE vocabulary that some split in the table could cut: a token whose bytes are not whole UTF-8
    (a piece of a character) is left out, and so is a word (letters, maybe after one space), which
    every split here keeps whole (` ?\\p{L}+` and its relatives)."""
    table = str.maketrans({char: chr(byte) for char, byte in _byte_decoder().items()})
    kinds = list(types) if types is not None else [1] * len(tokens)
    out = []
    for token, kind in zip(tokens, kinds):
        if int(kind) != 1 or len(token) < 2:
            continue
        try:  # GPT-2's characters back to bytes (each now a code point below 256), then UTF-8
            text = token.translate(table).encode("latin-1").decode("utf-8")
        except (UnicodeEncodeError, UnicodeDecodeError):
            continue
        if (text[1:] if text.startswith(" ") else text).isalpha():
            continue
        out.append(text)
    return out


def _splitter(pre: PreTokenizer):
    from tokenizers import Regex, pre_tokenizers

    return pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(regex), behavior="isolated") for regex in pre.regexes])


def split_text(text: str, pre: PreTokenizer) -> list[str]:
    """The pieces `pre` cuts `text` into before merges."""
    return [piece for piece, _ in _splitter(pre).pre_tokenize_str(text)]


def unreachable(texts: Iterable[str], pre: PreTokenizer, limit: int | None = None) -> list[str]:
    """The texts `pre` splits into two or more pieces: BPE merges run inside one piece, so under
    this pre-tokenizer llama.cpp never produces these tokens. Stops after `limit` of them."""
    split = _splitter(pre)
    out = []
    for text in texts:
        if len(split.pre_tokenize_str(text)) > 1:
            out.append(text)
            if limit is not None and len(out) >= limit:
                break
    return out
