"""Token labels as each collator builds them, and the verdict on every end-of-turn token.

The collators, as their sources do it (read in transformers 5.24, TRL 1.16, Axolotl 0.19; the
labels of `assistant-only`, `full`, `completion-only` are tested against TRL's SFTTrainer and
`axolotl` against Axolotl's own `chat_template` strategy):

- `assistant-only`: transformers `apply_chat_template(..., return_assistant_tokens_mask=True)`
  (`tokenization_utils_base.py`): the `{% generation %}` blocks' character spans, recorded while
  rendering (`AssistantTracker`, `utils/chat_template_utils.py`), become a token mask — every
  token whose offsets overlap a span is 1. TRL `SFTConfig(assistant_only_loss=True)` sets
  `labels[assistant_masks == 0] = -100` (`trl/trainer/sft_trainer.py`, `build_labels`). A
  template without markers gives an all-zero mask (transformers only warns once).
- `completion-only`: TRL `completion_only_loss` (its default for prompt/completion rows): the
  prompt is rendered alone (with `add_generation_prompt=True` when conversational), the
  completion starts where the prompt's ids and the prompt+completion ids diverge
  (`common_prefix_length`), everything before is -100. Chat rows: the trailing assistant
  message is the completion — what Axolotl's `chat_template` strategy does with
  `train_on_inputs: false` and no `roles_to_train` (`prompt_strategies/chat_template.py`).
- `full`: every real token trained; padding masked through the attention mask (TRL's
  `DataCollatorForLanguageModeling` pads labels with -100; pad-id tokens in the text stay trained).
- `pad-id`: the legacy transformers `DataCollatorForLanguageModeling(mlm=False)`
  (`data/data_collator.py`): `labels[labels == tokenizer.pad_token_id] = -100` — with
  pad == eos this masks every real eos in the text too.
- `axolotl`: Axolotl's `chat_template` strategy with its defaults (`roles_to_train:
  [assistant]`, `train_on_eos: turn`, `train_on_eot` = `train_on_eos`, `eot_tokens` = `[eos_token]`,
  `prompt_strategies/chat_template.py`): each assistant turn's content is trained, then the first
  `eot_tokens` id and the first eos id at most 3 tokens after the content's end. `eot_tokens`
  entries the template text does not contain are dropped (`_validate_eot_and_eos_tokens`).
- `auto`: TRL SFTTrainer's defaults: `completion-only` for prompt/completion rows, `full` otherwise.

Plain-text rows are tokenized with the tokenizer's special tokens (TRL: `processing_class(text=...)`),
chat rows without (`apply_chat_template` renders them itself). TRL appends `eos_token` to text and
completions that do not end with it (`add_eos`); a plain transformers loop does not, hence
`append_eos`. Truncation keeps the start (`truncation_mode="keep_start"`, transformers' default).
Too-long examples the trainer leaves out are reported as dropped, not judged (`_dropped`): TRL
drops those left with no trained token, Axolotl every one longer than `sequence_len` (unless
`excess_length_strategy: truncate`). TRL packing (`packing`, `packing_strategy`, `pack_dataset` in
`trl/data_utils.py`): "bfd" truncates what overflows like plain truncation; "bfd_split" and
"wrapped" split a long example across packed rows, so nothing is cut away.

Imports: core, labels (result, prepare); `tokenizers` objects are passed in. Never transformers or torch.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Iterable, Sequence
from typing import Any

from stopdoctor.core.errors import InputError
from stopdoctor.core.types import ChatTemplate
from stopdoctor.labels.prepare import PreparedExample
from stopdoctor.labels.result import ABSENT, NO_GENERATION_MARKERS, NOT_AN_EOT_TOKEN, OUTSIDE_COMPLETION, OUTSIDE_GENERATION, OUTSIDE_TURN, PAD_MASKED, SPLIT, TRUNCATED, LabelledExample, LabelSettings, DatasetLabels, Span


def axolotl_ids(settings: LabelSettings, template: ChatTemplate | None, eos_text: str | None,
                 eos_id: int | None, vocab) -> frozenset[int]:
    """Axolotl's eot ids: `eot_tokens` (default `[eos_token]`); an entry other than the eos that
    the template text does not contain is dropped; one that is several tokens is an error there."""
    if settings.collator != "axolotl":
        return frozenset()
    texts = list(settings.eot_tokens or ([eos_text] if eos_text else []))
    ids = set() if eos_id is None else {eos_id}
    for text in texts:
        if text != eos_text and (template is None or text not in template.source):
            continue
        token_id = vocab.is_single_token(text)
        if token_id is None:
            raise InputError(f"--eot-token {text!r} is not one token of this vocabulary",
                             "Axolotl refuses it too (\"encoded as multiple tokens\")")
        ids.add(token_id)
    return frozenset(ids)


def bytes_bound_tokens(tokenizer) -> bool:
    """True when no text of n UTF-8 bytes can become more than n tokens: no normalizer, and a
    byte-level pre-tokenizer that adds no prefix space (GPT-2-style BPE: Llama 3, Qwen, SmolLM2).
    Every token then covers at least one byte of the text, added tokens included."""
    if tokenizer.normalizer is not None or tokenizer.pre_tokenizer is None:
        return False
    state = json.loads(tokenizer.pre_tokenizer.__getstate__())
    parts = state.get("pretokenizers", [state]) if state.get("type") == "Sequence" else [state]
    if not any(part.get("type") == "ByteLevel" for part in parts):
        return False
    return all(part.get("type") in ("ByteLevel", "Split", "Digits", "Punctuation", "Whitespace")
               and not part.get("add_prefix_space", False) for part in parts)


def must_tokenize(p: PreparedExample, settings: LabelSettings, bound_ok: bool) -> bool:
    """Whether `p` needs its ids to be judged (`judge_in_text` cannot be sure): the first
    `tokenize_first` examples, plain text and completion-only rows, and any example whose
    end-of-turn may lie past the cut length (`bound_ok`: `bytes_bound_tokens` of the tokenizer)."""
    if settings.tokenize_first is None or p.example.index < settings.tokenize_first:
        return True
    if p.special or p.collator == "completion-only":
        return True  # post-processor tokens and the prompt/completion boundary need the ids
    if settings.cut_length is not None:
        last_end = max((t[4] for t in p.turns if t[4] is not None), default=0)
        if not bound_ok or len(p.text[:last_end].encode("utf-8")) > settings.cut_length:
            return True  # the end-of-turn may lie past max_length: count the tokens
    return False


def judge_in_text(p: PreparedExample, settings: LabelSettings, pad_id: int | None,
                   result: DatasetLabels) -> LabelledExample | None:
    """The verdict without tokenizing, valid when the end-of-turn is one added token (always
    encoded whole, with its exact character span as offsets) and cannot be truncated away. Then
    its label is: trained (full), trained unless it is the pad id (pad-id), trained iff its
    span overlaps a generation block (assistant-only: the token-mask rule of transformers).
    None when some end-of-turn is not an added token: the caller tokenizes."""
    vocab = result.facts.vocab
    spans = []
    for message, c_start, c_end, e_start, e_end in p.turns:
        if e_start is None or e_end is None:  # both or neither
            spans.append(Span(message, None, None, None, False, ABSENT))
            continue
        end_id = vocab.is_single_token(p.text[e_start:e_end])
        if end_id is None:
            return None
        if p.collator == "assistant-only":
            trained = any(e_start < g_end and e_end > g_start for g_start, g_end in p.generation)
        elif p.collator == "pad-id":
            trained = end_id != pad_id
        elif p.collator == "axolotl":
            if end_id in result.axolotl_ids and (e_start != c_end or c_start == c_end):
                return None  # whitespace between (at most 3 tokens apart?) or an empty turn: tokenize
            trained = end_id in result.axolotl_ids
        else:
            trained = True
        spans.append(Span(message, None, None, end_id, trained, None if trained else _cause(p, end_id, pad_id, result)))
    return LabelledExample(p.example.index, p.example.kind, p.collator, "", (), (), (), None, tuple(spans),
                           p.unlocated, p.example.line)


def _mask_from_spans(offsets: Sequence[tuple[int, int]], spans: Sequence[tuple[int, int]]) -> list[bool]:
    """transformers' assistant mask: every token overlapping a span (a single pass, both in order)."""
    mask = [False] * len(offsets)
    span_index = 0
    for token, (start, end) in enumerate(offsets):
        while span_index < len(spans) and start >= spans[span_index][1]:
            span_index += 1
        if span_index == len(spans):
            break
        if end > spans[span_index][0]:
            mask[token] = True
    return mask


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def tokenize_and_label(prepared: list[PreparedExample], tokenizer, settings: LabelSettings, pad_id: int | None,
                        end_ids: set[int], result: DatasetLabels) -> Iterable[LabelledExample]:
    """Encode the examples in batches and build each one's labels as its collator does, then judge
    every end-of-turn; the ids are kept only for the examples `--show` prints."""
    encodings: list[Any] = [None] * len(prepared)
    prompt_ids: list[Any] = [None] * len(prepared)
    for special in (False, True):
        group = [i for i, p in enumerate(prepared) if p.special is special]
        if group:
            for i, encoding in zip(group, tokenizer.encode_batch([prepared[i].text for i in group],
                                                                  add_special_tokens=special)):
                encodings[i] = encoding
        prompts = [i for i in group if prepared[i].prompt_text is not None]
        if prompts:
            for i, encoding in zip(prompts, tokenizer.encode_batch([prepared[i].prompt_text for i in prompts],
                                                                    add_special_tokens=special)):
                prompt_ids[i] = encoding.ids
    limit = settings.cut_length
    for p, encoding, prompt in zip(prepared, encodings, prompt_ids):
        ids, offsets = encoding.ids, encoding.offsets
        n = len(ids)
        if p.collator == "assistant-only":
            trained = _mask_from_spans(offsets, p.generation) if p.generation else [False] * n
        elif p.collator == "completion-only":
            if prompt is None:  # text rows: no prompt, the whole text is the completion
                trained = [True] * n
            else:
                start = _common_prefix(prompt, ids)
                trained = [i >= start for i in range(n)]
        elif p.collator == "pad-id":
            trained = [token != pad_id for token in ids]
        elif p.collator == "axolotl":
            trained = _axolotl_mask(p, ids, offsets, result.axolotl_ids, result.eos_id)
        else:
            trained = [True] * n
        kept = n if limit is None else min(n, limit)
        dropped = _dropped(p.collator, n, kept, trained, settings)
        spans = () if dropped else tuple(_spans(p, ids, offsets, trained, kept, end_ids, pad_id, result))
        if _keeps_tokens(p, settings):
            yield LabelledExample(p.example.index, p.example.kind, p.collator, p.text, tuple(ids[:kept]),
                                  tuple(trained[:kept]), tuple(offsets[:kept]), n, spans, p.unlocated, p.example.line,
                                  dropped)
        else:  # the verdict only: a million examples' tokens do not fit in memory
            yield LabelledExample(p.example.index, p.example.kind, p.collator, "", (), (), (), n, spans,
                                  p.unlocated, p.example.line, dropped)


def _dropped(collator: str, n: int, kept: int, trained: Sequence[bool], settings: LabelSettings) -> bool:
    """Whether the trainer leaves a too-long example out instead of training it truncated: it
    then teaches nothing, so its cut end-of-turn does no harm (SD603 is about the ones trained).
    Axolotl drops every example longer than `sequence_len` (`excess_length_strategy`, default
    "drop": `handle_long_seq_in_dataset`, `utils/data/utils.py`); TRL 1.16 truncates, then drops
    the examples left with no trained label ("Drop examples left fully masked by truncation",
    `sft_trainer.py`; with `packing="bfd"` it keeps them, fully masked: they teach nothing either);
    the transformers pad-id collator drops nothing."""
    if n <= kept:
        return False
    if collator == "axolotl":
        return settings.excess_length == "drop"
    if collator == "pad-id":
        return False
    return not any(trained[:kept])  # with packing="bfd" kept too, but as padding: it teaches nothing


def _keeps_tokens(p: PreparedExample, settings: LabelSettings) -> bool:
    return settings.tokenize_first is None or p.example.index < settings.tokenize_first


def _axolotl_mask(p: PreparedExample, ids, offsets, eot_ids: frozenset[int], eos_id: int | None) -> list[bool]:
    """Axolotl `ChatTemplateStrategy._tokenize_single_prompt` with `train_on_eot`/`train_on_eos`
    = "turn": the turn's content, then the first eot-token id and the first eos id found from
    the content's end, each only if at most 3 tokens away."""
    trained = [False] * len(ids)
    for _message, c_start, c_end, _e_start, _e_end in p.turns:
        content = _tokens_overlapping(offsets, c_start, c_end)
        if not content:
            continue  # Axolotl: an empty turn has no boundaries
        for i in content:
            trained[i] = True
        turn_end = content[-1] + 1
        for wanted in (eot_ids, {eos_id}):
            found = next((i for i in range(turn_end, len(ids)) if ids[i] in wanted), None)
            if found is not None and found - turn_end <= 3:
                trained[found] = True
    return trained


def _tokens_overlapping(offsets: Sequence[tuple[int, int]], start: int, end: int) -> list[int]:
    """Tokens (not zero-width) overlapping [start, end); offsets are in text order."""
    found = []
    low, high = 0, len(offsets)
    while low < high:  # first token ending after `start`
        mid = (low + high) // 2
        if offsets[mid][1] <= start:
            low = mid + 1
        else:
            high = mid
    for i in range(low, len(offsets)):
        s, e = offsets[i]
        if s >= end:
            break
        if e > start and e > s:
            found.append(i)
    return found


def _token_range(offsets: Sequence[tuple[int, int]], start: int, end: int) -> tuple[int, int] | None:
    """(first, last + 1) of `_tokens_overlapping(offsets, start, end)`, by bisection: a long
    content is not walked token by token."""
    first = bisect.bisect_right(offsets, start, key=_end_of)  # first token ending after `start`
    stop = bisect.bisect_left(offsets, end, lo=first, key=_start_of)  # first token starting at/after `end`
    while first < stop and offsets[first][1] <= offsets[first][0]:
        first += 1  # zero-width tokens do not count
    while stop > first and offsets[stop - 1][1] <= offsets[stop - 1][0]:
        stop -= 1
    return (first, stop) if first < stop else None


def _end_of(offset: tuple[int, int]) -> int:
    return offset[1]


def _start_of(offset: tuple[int, int]) -> int:
    return offset[0]


def _spans(p: PreparedExample, ids, offsets, trained, kept: int, end_ids: set[int], pad_id, result: DatasetLabels):
    if p.special:  # text / prompt-completion strings: the example must end with eos (or an end-of-turn)
        body_start = 0
        if p.prompt_text is not None or p.example.kind == "prompt-completion":
            body_start = _first_token_at(offsets, len(p.example.row["prompt"]))
        last = len(ids) - 1
        if last < 0 or ids[last] not in end_ids:
            yield Span(None, (body_start, len(ids)), None, None, False, ABSENT)
            return
        yield _judge(p, None, (body_start, last), last, ids, trained, kept, pad_id, result, [last])
        return
    for message, c_start, c_end, e_start, e_end in p.turns:
        token_range = _token_range(offsets, c_start, c_end)
        if e_start is None or e_end is None:  # both or neither
            yield Span(message, token_range, None, None, False, ABSENT)
            continue
        pieces = _tokens_overlapping(offsets, e_start, e_end)
        if not pieces:
            yield Span(message, token_range, None, None, False, ABSENT)
            continue
        yield _judge(p, message, token_range, pieces[0], ids, trained, kept, pad_id, result, pieces)


def _first_token_at(offsets, char: int) -> int:
    for i, (start, end) in enumerate(offsets):
        if end > char and end > start:
            return i
    return len(offsets)


def _judge(p: PreparedExample, message, token_range, end_token: int, ids, trained, kept, pad_id,
           result: DatasetLabels, pieces: list[int]) -> Span:
    end_id = ids[end_token]
    if len(pieces) > 1:
        return Span(message, token_range, end_token, end_id, False, SPLIT)
    if pieces[-1] >= kept:
        return Span(message, token_range, end_token, end_id, False, TRUNCATED)
    if trained[end_token]:
        return Span(message, token_range, end_token, end_id, True, None)
    return Span(message, token_range, end_token, end_id, False, _cause(p, end_id, pad_id, result))


def _cause(p: PreparedExample, end_id: int, pad_id: int | None, result: DatasetLabels) -> str:
    if p.collator == "pad-id" and end_id == pad_id:
        return PAD_MASKED
    if p.collator == "assistant-only":
        return OUTSIDE_GENERATION if result.has_generation_markers else NO_GENERATION_MARKERS
    if p.collator == "axolotl":
        return NOT_AN_EOT_TOKEN if end_id not in result.axolotl_ids else OUTSIDE_TURN
    return OUTSIDE_COMPLETION
