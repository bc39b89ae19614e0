"""Which tokens of a GGUF vocabulary llama.cpp makes control whatever `tokenizer.ggml.token_type`
says, and the text lists it finds them by.

From llama.cpp `src/llama-vocab.cpp` (`llama_vocab::impl::load`, "auto-detect special tokens by
text" and the end-of-generation list after it): a token whose text is on EOG_TEXTS is always made
control ("control-looking token ... its type will be overridden"); when no key names the eot, eom
or a fill-in-the-middle id, the first token found on that role's list becomes it and is made
control too. A control token is matched whole in text and not rendered in output; an ordinary one
is split and merged like any text. The same lists give llama.cpp's stop set
(`stopdoctor.runtimes.stops`).

Imports nothing from the package.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any  # a numpy array of token types, as the GGUF header holds them

EOG_TEXTS = (
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<｜end▁of▁sentence｜>", "[e~[",
)
EOT_TEXTS = (
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
    "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>", "<end_of_utterance>",
)
EOM_TEXTS = ("<|eom_id|>",)
# Fill-in-the-middle roles and the texts that auto-detect them; pad, rep and sep also end generation.
FIM_TEXTS = {
    "fim_pre": ("<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>",
                "<|code_prefix|>", "<|prefix|>"),
    "fim_suf": ("<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>",
                "<|code_suffix|>", "<|suffix|>"),
    "fim_mid": ("<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>",
                "<|code_middle|>", "<|middle|>"),
    "fim_pad": ("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"),
    "fim_rep": ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"),
    "fim_sep": ("<|file_sep|>",),
}
FIM_EOG_ROLES = ("fim_pad", "fim_rep", "fim_sep")
# Harmony's markers, which llama.cpp always makes user-defined, whatever the file types them
# (llama-vocab.cpp: "quick hack for gpt-oss, always render these tokens"): matched whole in text,
# and shown in output.
USER_DEFINED_TEXTS = ("<|channel|>", "<|message|>", "<|start|>", "<|constrain|>")
CONTROL = 3  # llama.cpp's LLAMA_TOKEN_TYPE_CONTROL


def control_by_text(index: Mapping[str, int], has_key: Callable[[str], bool]) -> set[int]:
    """Ids llama.cpp makes control by their text. `index` maps token text to id; `has_key(role)` is
    whether the GGUF names that role's id (`tokenizer.ggml.{role}_token_id`). A role whose list
    matches several tokens is left out: llama.cpp takes whichever its hash map yields first."""
    out = {index[text] for text in EOG_TEXTS if text in index}
    for role, texts in (("eot", EOT_TEXTS), ("eom", EOM_TEXTS), *FIM_TEXTS.items()):
        found = [index[text] for text in texts if text in index]
        if len(found) == 1 and not has_key(role):
            out.add(found[0])
    return out


def retyped_to_control(tokens: Sequence[str], types: Sequence[int] | Any, has_key: Callable[[str], bool]) -> list[int]:
    """The ids of `control_by_text` that the file does not already type control, in id order."""
    index: dict[str, int] = {}
    for token_id, text in enumerate(tokens):
        index.setdefault(text, token_id)
    return sorted(i for i in control_by_text(index, has_key) if i < len(types) and int(types[i]) != CONTROL)
