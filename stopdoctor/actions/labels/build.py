"""Training labels: would fine-tuning on this dataset teach the model to stop?

Builds input ids and labels for every example of a JSONL dataset the way the common SFT stacks
do, then asks of every assistant span (or plain-text example) whether its end-of-turn (or eos)
token is *trained* (its label is not -100), and if not, why.

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

Imports: model, facts, analysis (the end-of-turn: `analyze(...).end_of_turn[*].text`), sandbox,
errors; `tokenizers` through the vocabulary. Never transformers or torch.
"""

from __future__ import annotations

import bisect
import itertools
import json
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stopdoctor.analysis.core import Analysis
from stopdoctor.core.errors import InputError, TemplateError, require_file
from stopdoctor.facts.model_facts import ModelFacts
from stopdoctor.core.types import ChatTemplate
from stopdoctor.template.sandbox import ChatRenderer, render_deadline

COLLATORS = ("auto", "assistant-only", "completion-only", "full", "pad-id", "axolotl")

# Why an end-of-turn is not trained; each maps to one check (stopdoctor.rules.labels).
NO_GENERATION_MARKERS = "no-generation-markers"  # assistant-only, template has no {% generation %}
OUTSIDE_GENERATION = "outside-generation"  # markers exist but leave the end-of-turn outside
OUTSIDE_COMPLETION = "outside-completion"  # completion-only mask leaves it out
NOT_AN_EOT_TOKEN = "not-an-eot-token"  # axolotl: neither in eot_tokens nor the eos
OUTSIDE_TURN = "outside-turn"  # axolotl: more than 3 tokens after the turn's content
PAD_MASKED = "pad-masked"  # end-of-turn id == pad id under a pad-id-masking collator
TRUNCATED = "truncated"  # past --max-length
ABSENT = "absent"  # not in the text at all (no eos appended, template writes none)
SPLIT = "split"  # several ordinary tokens: no single token to learn or to stop on
CAUSES = (NO_GENERATION_MARKERS, OUTSIDE_GENERATION, OUTSIDE_COMPLETION, NOT_AN_EOT_TOKEN, OUTSIDE_TURN,
          PAD_MASKED, TRUNCATED, ABSENT, SPLIT)

GENERATION_TAG = re.compile(r"\{%-?\s*generation\s*-?%\}")  # transformers' and TRL's test
_CHUNK = 512  # examples rendered and encoded per batch (and per progress update)


@dataclass(frozen=True)
class LabelSettings:
    collator: str = "auto"
    max_length: int | None = None
    append_eos: bool = False
    pad_token: str | None = None  # overrides the tokenizer's pad token (the fix to try)
    template: ChatTemplate | None = None  # another chat template (e.g. one with generation markers)
    # Examples whose ids and labels are always built (the first N: the ones `--show` prints);
    # None: all of them. The others are judged in character space when that gives the same
    # verdict for certain (see `_judge_in_text`), and tokenized only when it may not.
    tokenize_first: int | None = None
    eot_tokens: tuple[str, ...] | None = None  # axolotl's `eot_tokens` (default: the eos token)
    # axolotl's `excess_length_strategy`: "drop" (its default) or "truncate" an example longer than max_length
    excess_length: str = "drop"
    # TRL `packing` / `packing_strategy`: "none", or "bfd" (truncates what overflows max_length),
    # "bfd_split" / "wrapped" (split long examples across packed rows: no token is cut away)
    packing: str = "none"

    @property
    def cut_length(self) -> int | None:
        """The length an example is cut to: max_length, unless packing splits long examples."""
        return None if self.packing in ("bfd_split", "wrapped") else self.max_length


@dataclass(frozen=True)
class Example:
    index: int  # 0-based row number among the non-blank lines
    line: int  # 1-based line in the file
    kind: str  # "messages" | "prompt-completion" | "text"
    row: dict


@dataclass(frozen=True)
class Span:
    """One assistant turn (or a whole text / completion) and its end token."""

    message: int | None  # index of the assistant message; None for text rows
    content: tuple[int, int] | None  # token range of the content (after truncation: may exceed length)
    end_token: int | None  # index of the end-of-turn token, None when absent
    end_id: int | None
    trained: bool
    cause: str | None


@dataclass(frozen=True)
class LabelledExample:
    """One example's verdict. `text`, `ids`, `trained` and `offsets` are kept for the first
    `LabelSettings.tokenize_first` examples (all when None: the ones `--show` prints); beyond
    them they are empty and only the spans' verdicts are kept, so that memory does not grow with
    the dataset's tokens."""

    index: int
    kind: str
    collator: str  # the one applied (auto resolved)
    text: str
    ids: tuple[int, ...]  # after truncation
    trained: tuple[bool, ...]  # label != -100, per token
    offsets: tuple[tuple[int, int], ...]
    full_length: int | None  # before truncation; None when not tokenized
    spans: tuple[Span, ...]
    unlocated: int = 0  # assistant messages whose content the template does not write verbatim
    line: int = 0  # in the data file
    dropped: bool = False  # the trainer leaves it out at --max-length (see `_dropped`): no spans judged

    @property
    def tokenized(self) -> bool:
        return self.full_length is not None

    @property
    def ok(self) -> bool:
        return all(s.trained for s in self.spans)


@dataclass
class LabelsResult:
    facts: ModelFacts
    settings: LabelSettings
    data: str
    template: ChatTemplate | None
    has_generation_markers: bool
    end_markers: list[str]  # the end-of-turn texts looked for after assistant content
    pad_id: int | None
    pad_note: str
    eos_id: int | None
    axolotl_ids: frozenset[int] = frozenset()  # ids the axolotl collator trains after a turn
    examples: list[LabelledExample] = field(default_factory=list)
    bad_lines: list[str] = field(default_factory=list)  # rows skipped as malformed: "line N: why"

    @property
    def spans(self) -> list[Span]:
        return [s for e in self.examples for s in e.spans]

    def failing(self, cause: str) -> list[int]:
        return [e.index for e in self.examples if any(s.cause == cause for s in e.spans)]

    def cause_counts(self) -> dict[str, dict[str, Any]]:
        out = {}
        for cause in CAUSES:
            spans = sum(1 for s in self.spans if s.cause == cause)
            if spans:
                out[cause] = {"spans": spans, "examples": self.failing(cause)}
        return out

    @property
    def checked(self) -> list[LabelledExample]:
        return [e for e in self.examples if e.spans]

    @property
    def dropped(self) -> list[int]:
        return [e.index for e in self.examples if e.dropped]

    @property
    def examples_ok(self) -> int:
        return sum(1 for e in self.checked if e.ok)

    @property
    def spans_ok(self) -> int:
        return sum(1 for s in self.spans if s.trained)

    @property
    def collators(self) -> list[str]:
        return sorted({e.collator for e in self.examples})

    def token_text(self, token_id: int) -> str:
        return self.facts.vocab.text_of(token_id) or f"<id {token_id}>"


# --------------------------------------------------------------------------------------------
# Reading the data
# --------------------------------------------------------------------------------------------


def load_examples(path: str | Path, limit: int | None = None) -> list[Example]:
    """JSONL rows with `messages` (chat), `prompt`/`completion` (strings or message lists), or `text`."""
    examples = list(iter_examples(path, limit))
    if not examples:
        raise InputError(f"{Path(path).name}: holds no example")
    return examples


def iter_examples(path: str | Path, limit: int | None = None, bad: list[str] | None = None) -> Iterator[Example]:
    """`load_examples` one row at a time, so that a dataset's rows need not fit in memory. A bad
    row (not UTF-8, not JSON, no example's shape) is an error when it is reached, or, given `bad`,
    is skipped with its one-line reason appended there (as `logs` counts bad lines and goes on)."""
    return _rows(_data_file(path), limit, bad)


def _data_file(path: str | Path) -> Path:
    require_file(str(path), "data file", "give a JSONL file with one example a line")
    return Path(path)


def _rows(path: Path, limit: int | None, bad: list[str] | None = None) -> Iterator[Example]:
    count = 0
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, 1):
            if limit is not None and count >= limit:
                break
            if not raw.strip():
                continue
            try:
                row = _parse_row(raw, number, path.name)
                kind = _kind(row, f"{path.name} line {number}")
            except InputError as error:
                if bad is None:
                    raise
                why = error.message.removeprefix(f"{path.name}: ").removeprefix(f"{path.name} line {number}: ")
                bad.append(why if why.startswith(f"line {number} ") else f"line {number}: {why}")
                continue
            yield Example(count, number, kind, row)
            count += 1


def _parse_row(raw: bytes, number: int, name: str) -> Any:
    """One JSONL line; every way it can fail is one InputError naming the line."""
    try:
        line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{name}: line {number} is not UTF-8 text (byte {exc.start})",
                         "the data must be UTF-8 JSONL, as the datasets library writes it") from exc
    try:
        return json.loads(line)
    except json.JSONDecodeError as exc:
        raise InputError(f"{name}: line {number} is not JSON: {exc.msg}",
                         "the data must be JSONL: one JSON object a line") from exc
    except RecursionError as exc:
        raise InputError(f"{name}: line {number} holds JSON nested too deeply") from exc
    except ValueError as exc:  # an integer of more digits than int() converts
        raise InputError(f"{name}: line {number} holds an integer of more than "
                         f"{sys.get_int_max_str_digits()} digits") from exc


def count_examples(path: str | Path, limit: int | None = None) -> int:
    """The number of non-blank lines (the examples `iter_examples` yields when every line is
    valid): the total a progress bar counts towards, read without parsing."""
    count = 0
    with _data_file(path).open("rb") as handle:
        for line in handle:
            if line.strip():
                count += 1
                if limit is not None and count >= limit:
                    break
    return count


def _kind(row: Any, where: str) -> str:
    if not isinstance(row, dict):
        raise InputError(f"{where}: an example must be a JSON object", None)
    if "messages" in row:
        messages = row["messages"]
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) and "role" in m for m in messages):
            raise InputError(f"{where}: \"messages\" must be a non-empty list of {{role, content}} objects", None)
        return "messages"
    if "prompt" in row and "completion" in row:
        prompt, completion = row["prompt"], row["completion"]
        if isinstance(prompt, str) and isinstance(completion, str):
            return "prompt-completion"
        if isinstance(prompt, list) and isinstance(completion, list):
            return "prompt-completion"
        raise InputError(f"{where}: \"prompt\" and \"completion\" must both be strings or both message lists", None)
    if isinstance(row.get("text"), str):
        return "text"
    raise InputError(f"{where}: no \"messages\", \"prompt\"/\"completion\" or \"text\" field",
                     "rows need messages (chat), prompt and completion, or text; ShareGPT "
                     "\"conversations\" must be converted to messages first")


# --------------------------------------------------------------------------------------------
# Labelling
# --------------------------------------------------------------------------------------------


@dataclass
class _Prepared:
    """One example rendered to text, before tokenization."""

    example: Example
    collator: str
    text: str
    special: bool  # tokenize with the tokenizer's special tokens (plain text) or not (chat)
    prompt_text: str | None = None  # completion-only: the prompt alone
    generation: list[tuple[int, int]] = field(default_factory=list)
    # chat: (message index, content start, content end, end start, end end) in characters;
    # end None when no end-of-turn follows the content
    turns: list[tuple[int, int, int, int | None, int | None]] = field(default_factory=list)
    expected_from: int = 0  # completion-only chat: first message index of the completion
    unlocated: int = 0


def label_dataset(facts: ModelFacts, analysis: Analysis, examples: Iterable[Example], data: str,
                  settings: LabelSettings = LabelSettings(),
                  progress: Callable[[int, int], None] | None = None, total: int | None = None) -> LabelsResult:
    """Label every example (a list, or `iter_examples` for a dataset read as it goes; then give
    `total`, the count the progress reports towards). Only verdicts are kept per example."""
    _check_settings(settings)
    template = settings.template or facts.template
    vocab = facts.vocab
    tokenizer = _plain_tokenizer(vocab.tokenizer())
    specials = facts.special_token_texts()
    eos_text = specials.get("eos_token")
    eos_id = vocab.id_of(eos_text) if eos_text is not None else None

    pad_text, pad_note = settings.pad_token, "--pad-token"
    if pad_text is None:
        pad_text, pad_note = specials.get("pad_token"), "the tokenizer's pad_token"
    if pad_text is None and eos_text is not None:
        # TRL: `args.pad_token or tokenizer.pad_token or tokenizer.eos_token`; the usual recipe
        # for a tokenizer without one is `tokenizer.pad_token = tokenizer.eos_token`.
        pad_text, pad_note = eos_text, "no pad_token: eos, as TRL and the usual recipe set it"
    pad_id = vocab.id_of(pad_text) if pad_text is not None else None
    if settings.pad_token is not None and pad_id is None:
        raise InputError(f"--pad-token {settings.pad_token!r} is not a token of this vocabulary", None)

    if settings.template is not None:
        markers = _markers_for(facts, settings.template)
    else:
        markers = [e.text for e in analysis.end_of_turn]
    if eos_text and eos_text not in markers:
        markers.append(eos_text)
    end_ids = {vocab.is_single_token(m) for m in markers} - {None}
    if eos_id is not None:
        end_ids.add(eos_id)

    result = LabelsResult(facts, settings, data, template,
                          template is not None and GENERATION_TAG.search(template.source) is not None,
                          markers, pad_id, pad_note, eos_id, _axolotl_ids(settings, template, eos_text, eos_id, vocab))
    eot_res = [re.compile(r"\s{0,4}" + re.escape(m)) for m in markers]
    bound_ok = _bytes_bound_tokens(tokenizer)
    renderer = ChatRenderer(template.source, special_tokens=specials) if template is not None else None
    if total is None:
        examples = list(examples)
        total = len(examples)
    rows = iter(examples)
    done = 0
    while chunk := list(itertools.islice(rows, _CHUNK)):
        _check_kinds(chunk, template, settings, data)
        prepared = [_prepare_or_say_which(e, renderer, settings, eos_text, eot_res) for e in chunk]
        judged = [None if _must_tokenize(p, settings, bound_ok) else _judge_in_text(p, settings, pad_id, result)
                  for p in prepared]
        slow = [p for p, j in zip(prepared, judged) if j is None]
        tokenized = iter(_tokenize_and_label(slow, tokenizer, settings, pad_id, end_ids, result))
        result.examples.extend(j if j is not None else next(tokenized) for j in judged)
        done += len(chunk)
        if progress is not None:
            progress(done, max(done, total))
    return result


def _check_settings(settings: LabelSettings) -> None:
    if settings.collator not in COLLATORS:
        raise InputError(f"unknown collator {settings.collator!r}", f"use one of {', '.join(COLLATORS)}")
    if settings.max_length is not None and settings.max_length < 1:
        raise InputError("--max-length must be at least 1", None)
    if settings.packing not in ("none", "bfd", "bfd_split", "wrapped"):
        raise InputError(f"--packing {settings.packing!r} is not none, bfd, bfd_split or wrapped")
    if settings.packing != "none" and settings.collator in ("axolotl", "pad-id"):
        raise InputError(f"--packing is TRL's (SFTConfig packing_strategy); --collator {settings.collator} does not pack",
                         "Axolotl's sample_packing keeps its excess_length_strategy: see --excess-length")
    if settings.excess_length not in ("drop", "truncate"):
        raise InputError(f"--excess-length {settings.excess_length!r} is not drop or truncate")
    if settings.collator != "axolotl":
        if settings.eot_tokens:
            raise InputError("--eot-token applies to --collator axolotl only")
        if settings.excess_length != "drop":
            raise InputError("--excess-length applies to --collator axolotl only",
                             "TRL truncates (keeping the start) and drops only examples left with no trained token")


def _check_kinds(examples: list[Example], template: ChatTemplate | None, settings: LabelSettings, data: str) -> None:
    if template is None and any(e.kind == "messages" or _chat_pc(e) for e in examples):
        raise InputError("the model has no chat template, so chat rows cannot be rendered",
                         "pass the template the trainer uses with --template FILE")
    if settings.collator in ("assistant-only", "axolotl"):
        plain = next((e for e in examples if e.kind != "messages" and not _chat_pc(e)), None)
        if plain is not None:
            raise InputError(f"{data}: example {plain.index} (line {plain.line}) is not a conversation; "
                             f"{settings.collator} loss needs chat rows",
                             "TRL refuses assistant_only_loss on non-conversational data too; use "
                             "--collator completion-only or full")


def _axolotl_ids(settings: LabelSettings, template: ChatTemplate | None, eos_text: str | None,
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


def _bytes_bound_tokens(tokenizer) -> bool:
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


def _must_tokenize(p: _Prepared, settings: LabelSettings, bound_ok: bool) -> bool:
    if settings.tokenize_first is None or p.example.index < settings.tokenize_first:
        return True
    if p.special or p.collator == "completion-only":
        return True  # post-processor tokens and the prompt/completion boundary need the ids
    if settings.cut_length is not None:
        last_end = max((t[4] for t in p.turns if t[4] is not None), default=0)
        if not bound_ok or len(p.text[:last_end].encode("utf-8")) > settings.cut_length:
            return True  # the end-of-turn may lie past max_length: count the tokens
    return False


def _judge_in_text(p: _Prepared, settings: LabelSettings, pad_id: int | None,
                   result: LabelsResult) -> LabelledExample | None:
    """The verdict without tokenizing, valid when the end-of-turn is one added token (always
    encoded whole, with its exact character span as offsets) and cannot be truncated away. Then
    its label is: trained (full), trained unless it is the pad id (pad-id), trained iff its
    span overlaps a generation block (assistant-only: the token-mask rule of transformers).
    None when some end-of-turn is not an added token: the caller tokenizes."""
    vocab = result.facts.vocab
    spans = []
    for message, c_start, c_end, e_start, e_end in p.turns:
        if e_start is None:
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


def _markers_for(facts: ModelFacts, template: ChatTemplate) -> list[str]:
    """The end-of-turn of another template: the model's analysis, with that template as its only one."""
    import copy

    from stopdoctor.analysis.core import analyze

    other = copy.copy(facts)
    other.templates = [ChatTemplate("default", template.source, template.location)]
    return [e.text for e in analyze(other).end_of_turn]


def _plain_tokenizer(tokenizer):
    """transformers disables the tokenizer.json truncation/padding settings on every call unless
    asked; a copy does the same here without touching the shared tokenizer."""
    if tokenizer.truncation is None and tokenizer.padding is None:
        return tokenizer
    import tokenizers

    copy = tokenizers.Tokenizer.from_str(tokenizer.to_str())
    copy.no_truncation()
    copy.no_padding()
    return copy


def _chat_pc(example: Example) -> bool:
    return example.kind == "prompt-completion" and isinstance(example.row["prompt"], list)


def _resolve(collator: str, example: Example) -> str:
    if collator != "auto":
        return collator
    return "completion-only" if example.kind == "prompt-completion" else "full"


def _prepare_or_say_which(example: Example, *args) -> _Prepared:
    try:
        # Each example gets its own render time limit: the command's shared deadline is for the
        # fixed number of renders of the analysis, and a dataset can hold millions of examples.
        with render_deadline(own=True):
            return _prepare(example, *args)
    except TemplateError as error:  # a template that rejects one example: say which
        raise type(error)(f"example {example.index} (line {example.line}): {error.message}", error.hint,
                          error.line) from error
    except InputError as error:  # a message the renderer refuses (a lone surrogate): say which
        raise InputError(f"example {example.index} (line {example.line}): {error.message}", error.hint) from error


def _prepare(example: Example, renderer: ChatRenderer | None, settings: LabelSettings, eos_text: str | None,
             eot_res) -> _Prepared:
    collator = _resolve(settings.collator, example)
    row = example.row
    if example.kind == "text" or (example.kind == "prompt-completion" and not _chat_pc(example)):
        if example.kind == "text":
            prompt, body = "", row["text"]
        else:
            prompt, body = row["prompt"], row["completion"]
        if settings.append_eos and eos_text and not body.endswith(eos_text):
            body += eos_text  # TRL add_eos
        prepared = _Prepared(example, collator, prompt + body, True)
        if collator == "completion-only" and example.kind == "prompt-completion":
            prepared.prompt_text = prompt
        return prepared

    tools = row.get("tools")
    if isinstance(tools, str):
        try:
            tools = json.loads(tools)
        except json.JSONDecodeError as exc:
            raise InputError(f"\"tools\" is not JSON: {exc.msg}") from exc
    if example.kind == "messages":
        messages = row["messages"]
        prompt_messages = messages[:-1] if messages[-1].get("role") == "assistant" else None
    else:
        messages = row["prompt"] + row["completion"]
        prompt_messages = row["prompt"]
    generation: list[tuple[int, int]] = []
    text = renderer.render(messages, tools=tools, generation_spans=generation)
    prepared = _Prepared(example, collator, text, False, generation=generation)
    if collator == "completion-only":
        if prompt_messages:
            prepared.prompt_text = renderer.render(prompt_messages, tools=tools, add_generation_prompt=True)
            prepared.expected_from = len(prompt_messages)
        else:
            prepared.prompt_text = ""
            prepared.expected_from = len(messages) if prompt_messages is None else 0
    _locate_turns(prepared, messages, eot_res)
    return prepared


def _content_text(message: dict) -> str | None:
    content = message.get("content")
    if isinstance(content, list):  # content blocks: the text blocks, as most templates join them
        content = "".join(b.get("text", "") for b in content if isinstance(b, dict))
    return content.strip() if isinstance(content, str) else None


def _end_after(text: str, end: int, eot_res) -> re.Match | None:
    return next((m for m in (pattern.match(text, end) for pattern in eot_res) if m), None)


def _locate_turns(prepared: _Prepared, messages: list[dict], eot_res) -> None:
    """Find each message's content in the rendered text, in order, and what follows assistant
    content. An assistant content may also occur in the scaffolding before it (content
    "assistant" and the header `<|im_start|>assistant`): the first occurrence followed by an
    end-of-turn wins, among those before the next message's content."""
    text, cursor = prepared.text, 0
    needles = [_content_text(m) for m in messages]
    for number, (message, needle) in enumerate(zip(messages, needles)):
        expected = message.get("role") == "assistant" and number >= prepared.expected_from
        if needle is None:
            prepared.unlocated += expected
            continue
        at = text.find(needle, cursor) if needle else -1
        if at < 0:
            if not expected:
                continue
            if needle:
                prepared.unlocated += 1
                continue
            at = cursor  # empty content: look for the end-of-turn right here
        match = _end_after(text, at + len(needle), eot_res) if expected else None
        if expected and match is None and needle:
            following = next((n for n in needles[number + 1:] if n), None)
            stop = text.find(following, at + 1) if following else -1
            stop = len(text) if stop < 0 else stop
            other = text.find(needle, at + 1)
            while 0 <= other < stop:
                match = _end_after(text, other + len(needle), eot_res)
                if match is not None:
                    at = other
                    break
                other = text.find(needle, other + 1)
        end = at + len(needle)
        cursor = end
        if not expected:
            continue
        if match is None:
            prepared.turns.append((number, at, end, None, None))
        else:
            prepared.turns.append((number, at, end, _marker_start(match), match.end()))
            cursor = match.end()


def _marker_start(match: re.Match) -> int:
    whitespace = len(match.group(0)) - len(match.group(0).lstrip())
    return match.start() + whitespace


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


def _tokenize_and_label(prepared: list[_Prepared], tokenizer, settings: LabelSettings, pad_id: int | None,
                        end_ids: set[int], result: LabelsResult) -> Iterable[LabelledExample]:
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


def _keeps_tokens(p: _Prepared, settings: LabelSettings) -> bool:
    return settings.tokenize_first is None or p.example.index < settings.tokenize_first


def _axolotl_mask(p: _Prepared, ids, offsets, eot_ids: frozenset[int], eos_id: int | None) -> list[bool]:
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


def _spans(p: _Prepared, ids, offsets, trained, kept: int, end_ids: set[int], pad_id, result: LabelsResult):
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
        if e_start is None:
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


def _judge(p: _Prepared, message, token_range, end_token: int, ids, trained, kept, pad_id,
           result: LabelsResult, pieces: list[int]) -> Span:
    end_id = ids[end_token]
    if len(pieces) > 1:
        return Span(message, token_range, end_token, end_id, False, SPLIT)
    if pieces[-1] >= kept:
        return Span(message, token_range, end_token, end_id, False, TRUNCATED)
    if trained[end_token]:
        return Span(message, token_range, end_token, end_id, True, None)
    return Span(message, token_range, end_token, end_id, False, _cause(p, end_id, pad_id, result))


def _cause(p: _Prepared, end_id: int, pad_id: int | None, result: LabelsResult) -> str:
    if p.collator == "pad-id" and end_id == pad_id:
        return PAD_MASKED
    if p.collator == "assistant-only":
        return OUTSIDE_GENERATION if result.has_generation_markers else NO_GENERATION_MARKERS
    if p.collator == "axolotl":
        return NOT_AN_EOT_TOKEN if end_id not in result.axolotl_ids else OUTSIDE_TURN
    return OUTSIDE_COMPLETION
