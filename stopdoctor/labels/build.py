"""Training labels: would fine-tuning on this dataset teach the model to stop?

Builds input ids and labels for every example of a JSONL dataset the way the common SFT stacks
do, then asks of every assistant span (or plain-text example) whether its end-of-turn (or eos)
token is *trained* (its label is not -100), and if not, why.

How each collator labels tokens is `labels.collators`; rendering the examples is
`labels.prepare`; the datasets are read by `facts.datasets`. This module runs them over a
dataset in chunks, judging an example in character space when that gives the same verdict for
certain, and keeps only the verdicts.

Imports: core, facts, analysis (the end-of-turn: `analyze(...).end_of_turn[*].text`), template,
labels; `tokenizers` through the vocabulary. Never transformers or torch.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import replace
from collections.abc import Callable, Iterable

from stopdoctor.analysis.core import Analysis
from stopdoctor.core.errors import InputError
from stopdoctor.core.types import ChatTemplate
from stopdoctor.facts.datasets import Example
from stopdoctor.facts.model_facts import ModelFacts
from stopdoctor.template.render import ChatRenderer
from stopdoctor.labels.collators import axolotl_ids, bytes_bound_tokens, judge_in_text, must_tokenize, tokenize_and_label
from stopdoctor.labels.prepare import prepare_example
from stopdoctor.labels.thoughts import judge_thoughts
from stopdoctor.labels.result import COLLATORS, LabelSettings, DatasetLabels

GENERATION_TAG = re.compile(r"\{%-?\s*generation\s*-?%\}")  # transformers' and TRL's test

_CHUNK = 512  # examples rendered and encoded per batch (and per progress update)


def label_dataset(facts: ModelFacts, analysis: Analysis, examples: Iterable[Example], data: str,
                  settings: LabelSettings = LabelSettings(),
                  progress: Callable[[int, int], None] | None = None, total: int | None = None) -> DatasetLabels:
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
    end_ids = {i for m in markers if (i := vocab.is_single_token(m)) is not None}
    if eos_id is not None:
        end_ids.add(eos_id)

    result = DatasetLabels(facts, settings, data, template,
                          template is not None and GENERATION_TAG.search(template.source) is not None,
                          markers, pad_id, pad_note, eos_id, axolotl_ids(settings, template, eos_text, eos_id, vocab))
    eot_res = [re.compile(r"\s{0,4}" + re.escape(m)) for m in markers]
    bound_ok = bytes_bound_tokens(tokenizer)
    renderer = ChatRenderer(template.source, special_tokens=specials) if template is not None else None
    if total is None:
        examples = list(examples)
        total = len(examples)
    rows = iter(examples)
    done = 0
    while chunk := list(itertools.islice(rows, _CHUNK)):
        _check_kinds(chunk, template, settings, data)
        prepared = [prepare_example(e, renderer, settings, eos_text, eot_res) for e in chunk]
        judged = [None if must_tokenize(p, settings, bound_ok) else judge_in_text(p, settings, pad_id, result)
                  for p in prepared]
        slow = [p for p, j in zip(prepared, judged) if j is None]
        tokenized = iter(tokenize_and_label(slow, tokenizer, settings, pad_id, end_ids, result))
        labelled = [j if j is not None else next(tokenized) for j in judged]
        user_header = analysis.turn_headers.get("user")
        for index, p in enumerate(prepared):
            thoughts = judge_thoughts(p, analysis.reasoning, user_header)
            if thoughts is not None:
                labelled[index] = replace(labelled[index], thoughts=thoughts)
        result.examples.extend(labelled)
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
    if template is None and any(e.conversational for e in examples):
        raise InputError("the model has no chat template, so chat rows cannot be rendered",
                         "pass the template the trainer uses with --template FILE")
    if settings.collator in ("assistant-only", "axolotl"):
        plain = next((e for e in examples if not e.conversational), None)
        if plain is not None:
            raise InputError(f"{data}: example {plain.index} (line {plain.line}) is not a conversation; "
                             f"{settings.collator} loss needs chat rows",
                             "TRL refuses assistant_only_loss on non-conversational data too; use "
                             "--collator completion-only or full")


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
