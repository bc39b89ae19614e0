"""SD6xx: training labels — would fine-tuning on this data teach the model to stop?

These rules check a `LabelsInput`: a model's analysis and the labels built from a dataset. The
collator behaviour each doc cites was read from the sources: transformers
`tokenization_utils_base.py` (`apply_chat_template`, `return_assistant_tokens_mask`),
`utils/chat_template_utils.py` (`AssistantTracker`), `data/data_collator.py`
(`DataCollatorForLanguageModeling`); TRL `trainer/sft_trainer.py` (`assistant_only_loss`,
`completion_only_loss`, `add_eos`, truncation), `chat_template_utils.py`
(`get_training_chat_template`, `is_chat_template_stop_token_trained`); Axolotl
`prompt_strategies/chat_template.py` (`train_on_eos`, `train_on_eot`, `eot_tokens`).
"""

from __future__ import annotations

from stopdoctor.labels.result import ABSENT, NO_GENERATION_MARKERS, NOT_AN_EOT_TOKEN, OUTSIDE_COMPLETION, OUTSIDE_GENERATION, OUTSIDE_TURN, PAD_MASKED, SPLIT, TRUNCATED, DatasetLabels
from stopdoctor.core.types import Location
from stopdoctor.core.findings import Severity
from stopdoctor.rules.inputs import LabelsInput
from stopdoctor.rules.registry import Rule, rule

_SHOWN_INDICES = 8


def _share(result: DatasetLabels, causes: tuple[str, ...]) -> tuple[str, list[int], int]:
    spans = [s for s in result.spans if s.cause in causes]
    indices = sorted({e.index for e in result.examples for s in e.spans if s.cause in causes})
    shown = ", ".join(str(i) for i in indices[:_SHOWN_INDICES]) + (", …" if len(indices) > _SHOWN_INDICES else "")
    text = (f"{len(indices)} of {len(result.checked)} examples ({len(spans)} of {len(result.spans)} "
            f"end-of-turn tokens; examples {shown})")
    return text, indices, len(spans)


def _end_text(result: DatasetLabels, causes: tuple[str, ...]) -> str:
    ids = sorted({s.end_id for s in result.spans if s.cause in causes and s.end_id is not None})
    if ids:
        return " / ".join(f"{result.token_text(i)} (id {i})" for i in ids)
    return " / ".join(result.end_markers) or "the end-of-turn"


@rule("SD601", "end-of-turn-not-trained", Severity.ERROR, input=LabelsInput)
def end_of_turn_not_trained(subject: LabelsInput, self: Rule):
    """Under assistant-only, Axolotl or completion-only loss the end-of-turn token is masked out of the labels.

    What it checks:
    Builds the labels as `apply_chat_template(..., return_assistant_tokens_mask=True)` and TRL's
    `assistant_only_loss` do: only tokens overlapping a `{% generation %}...{% endgeneration %}`
    block are trained; or as Axolotl's `chat_template` strategy does: the turn's content, then the
    first `eot_tokens` / eos id at most 3 tokens after it (`eot_tokens` defaults to the eos token).
    It looks at the token after each assistant message's content.

    Why it matters:
    A template without generation markers gives an all-zero mask (transformers only warns once);
    a template whose markers close before the end-of-turn trains the content but never the token
    that ends the turn. The loss looks healthy, and the model never learns to stop.

    Example:
    SmolLM2's ChatML template under `--collator assistant-only`: no `{% generation %}`, so
    `<|im_end|>` (id 2) is masked in every example. Axolotl on a Qwen2.5 base model: eos and
    so `eot_tokens` is `<|endoftext|>`, the ChatML template ends turns with `<|im_end|>`, which is
    never trained.

    Fix:
    Use a training template whose generation block includes the end-of-turn, e.g.
    `{% generation %}{{ message['content'] + '<|im_end|>' }}{% endgeneration %}` (TRL swaps in such
    a template for the families it knows, `get_training_chat_template`), or train on the full
    sequence. For Axolotl, list the end-of-turn in `eot_tokens` (e.g. `eot_tokens: ["<|im_end|>"]`).
    """
    result = subject.labels
    causes = (NO_GENERATION_MARKERS, OUTSIDE_GENERATION, OUTSIDE_COMPLETION, NOT_AN_EOT_TOKEN, OUTSIDE_TURN)
    share, indices, spans = _share(result, causes)
    if not spans:
        return
    end = _end_text(result, causes)
    location = result.template.location if result.template else None
    marker = result.end_markers[0] if result.end_markers else "<end-of-turn>"
    generation_fix = ("wrap each assistant message and its end-of-turn in the template's generation block: "
                      f"{{% generation %}}{{{{ message['content'] + '{marker}' }}}}{{% endgeneration %}} "
                      "(check with --template FILE), or train on the full sequence")
    if any(s.cause == NO_GENERATION_MARKERS for s in result.spans):
        message = (f"assistant-only loss, but the chat template has no {{% generation %}} markers: every token is "
                   f"masked, {end} included, in {share}")
        fix = generation_fix
    elif any(s.cause == OUTSIDE_GENERATION for s in result.spans):
        message = f"the template's {{% generation %}} block ends before {end}, so it is masked in {share}"
        fix = generation_fix
    elif any(s.cause == NOT_AN_EOT_TOKEN for s in result.spans):
        trained = ", ".join(result.token_text(i) for i in sorted(result.axolotl_ids)) or "nothing"
        message = (f"Axolotl trains only eot_tokens / eos after a turn ({trained}), not {end}: it is masked "
                   f"in {share}")
        fix = f"set eot_tokens: [\"{marker}\"] in the Axolotl config (train_on_eot: turn)"
        location = None  # the Axolotl config, not a model file
    elif any(s.cause == OUTSIDE_TURN for s in result.spans):
        message = f"{end} lies more than 3 tokens after the turn's content, where Axolotl stops looking, in {share}"
        fix = "close the assistant turn with the end-of-turn right after its content in the template"
    else:
        message = f"the completion mask leaves {end} out of the completion in {share}"
        fix = "end each completion with the end-of-turn (or eos) token, inside the completion"
    yield self.finding(message, fix, location, examples=indices, spans=spans, end_of_turn=end)


@rule("SD602", "pad-masks-eos", Severity.ERROR, input=LabelsInput)
def pad_masks_eos(subject: LabelsInput, self: Rule):
    """The collator masks every pad-id token, and the pad token is the end-of-turn (or eos) token.

    What it checks:
    Builds labels as transformers' `DataCollatorForLanguageModeling(mlm=False)` does
    (`labels[labels == tokenizer.pad_token_id] = -100`) and looks at each end-of-turn token.

    Why it matters:
    With `pad_token = eos_token` (the usual recipe for tokenizers without a pad token) the collator
    cannot tell padding from the real end of an answer: every end-of-turn in the data is masked,
    and the fine-tuned model never learns to stop.

    Example:
    SmolLM2-135M-Instruct: `<|im_end|>` is eos and pad (id 2), so every assistant turn's
    `<|im_end|>` gets label -100.

    Fix:
    Give the tokenizer a distinct pad token (an unused special token, or add `<|pad|>` and resize
    the embeddings), or use a collator that masks padding by the attention mask (TRL's
    `DataCollatorForLanguageModeling`, `DataCollatorForSeq2Seq`).
    """
    result = subject.labels
    share, indices, spans = _share(result, (PAD_MASKED,))
    if not spans:
        return
    end = _end_text(result, (PAD_MASKED,))
    candidate = _distinct_pad(result)
    fix = (f"set a distinct pad token (e.g. tokenizer.pad_token = {candidate!r}; check with --pad-token)"
           if candidate else "add a pad token (e.g. '<|pad|>') and resize the embeddings")
    fix += ", or mask padding by the attention mask instead of the pad id"
    yield self.finding(f"the end-of-turn {end} is also the pad token ({result.pad_note}) and the collator masks "
                       f"every pad id, so it is never trained: {share}", fix,
                       _pad_location(result), examples=indices, spans=spans,
                       pad_id=result.pad_id, suggested_pad_token=candidate)


def _pad_location(result: DatasetLabels) -> Location | None:
    """Where the pad token the collator used is declared: the tokenizer's files first."""
    if result.settings.pad_token is not None:
        return None
    facts = result.facts
    declared = facts.declared_for("pad")
    for file in (*facts.tokenizer_files, *(d.location.file for d in declared)):
        for d in declared:
            if d.location.file == file and d.id == result.pad_id:
                return d.location
    if result.pad_id is not None and result.pad_id == result.eos_id and not declared:
        eos = [d for d in facts.declared_for("eos") if d.id == result.eos_id]
        return eos[0].location if eos else None  # no pad token: eos stands in for it
    return Location("tokenizer_config.json", "pad_token")


def _distinct_pad(result: DatasetLabels) -> str | None:
    vocab = result.facts.vocab
    avoid = set(result.end_markers) | {result.facts.token_text("bos") or ""}
    if result.eos_id is not None:
        avoid.add(vocab.text_of(result.eos_id) or "")
    for text in vocab.special_tokens:
        if text not in avoid and not any(text in m for m in result.end_markers):
            lowered = text.lower()
            if "pad" in lowered or "endoftext" in lowered or "reserved" in lowered or "unused" in lowered:
                return text
    return None


@rule("SD603", "truncation-drops-end-of-turn", Severity.WARNING, input=LabelsInput)
def truncation_drops_end_of_turn(subject: LabelsInput, self: Rule):
    """Examples longer than the training sequence length lose their end-of-turn to truncation.

    What it checks:
    Truncates every example to `--max-length` tokens, keeping the start (transformers' default,
    TRL `truncation_mode="keep_start"`), and looks for end-of-turn tokens cut away. Examples the
    trainer drops instead teach nothing and are not counted: TRL drops those left with no trained
    token, Axolotl (`excess_length_strategy: drop`, its default) every one over the length.

    Why it matters:
    A truncated example trains the answer but not its end: the model learns that answers run on
    past the context, which shows up as rambling or runaway generation.

    Example:
    `--max-length 32` on a 60-token conversation: its final `<|im_end|>` is at position 58.

    Fix:
    Raise the sequence length to the longest example, or drop or split the long examples.
    """
    result = subject.labels
    share, indices, spans = _share(result, (TRUNCATED,))
    if not spans:
        return
    # examples judged without tokenizing are known to fit; the truncated ones were all tokenized
    longest = max(e.full_length for e in result.examples if e.full_length is not None)
    yield self.finding(f"max length {result.settings.max_length} cuts the end-of-turn away in {share}",
                       f"raise max_length to {longest} (the longest example), or drop/split longer examples",
                       None, examples=indices, spans=spans, max_length=result.settings.max_length, longest=longest)


@rule("SD604", "eos-not-appended", Severity.ERROR, input=LabelsInput)
def eos_not_appended(subject: LabelsInput, self: Rule):
    """An example (or assistant turn) has no end-of-turn or eos token at its end.

    What it checks:
    Plain-text and prompt/completion rows must end with eos (after the tokenizer's own special
    tokens); chat rows must have the template's end-of-turn right after each assistant message.

    Why it matters:
    What is not in the text cannot be trained: the model sees answers that simply end and learns
    nothing about stopping. TRL's SFTTrainer appends `eos_token` to text and completions itself
    (`add_eos`); a hand-written loop or a plain transformers Trainer does not.

    Example:
    `{"text": "Once upon a time."}` tokenized without eos.

    Fix:
    Append `eos_token` to every text and completion (the TRL collators model SFTTrainer, which
    does it; `--no-append-eos` models a loop that does not); for chat rows, use a template that
    closes every assistant turn.
    """
    result = subject.labels
    share, indices, spans = _share(result, (ABSENT,))
    if not spans:
        return
    eos = result.token_text(result.eos_id) if result.eos_id is not None else "eos_token"
    chat = any(s.cause == ABSENT and s.message is not None for s in result.spans)
    plain = any(s.cause == ABSENT and s.message is None for s in result.spans)
    parts = []
    if plain:
        parts.append(f"append {eos} to every text and completion (TRL's SFTTrainer does; a plain loop does not)")
    if chat:
        parts.append("close every assistant turn in the chat template with the end-of-turn token")
    what = "no eos at the end" if plain and not chat else "no end-of-turn after the assistant content"
    yield self.finding(f"{what}: {share}", "; ".join(parts),
                       result.template.location if chat and result.template else None,
                       examples=indices, spans=spans, eos=eos)


@rule("SD605", "end-of-turn-split", Severity.ERROR, input=LabelsInput)
def end_of_turn_split(subject: LabelsInput, self: Rule):
    """The end-of-turn text is tokenized as several ordinary tokens in the training data.

    What it checks:
    Maps the end-of-turn after each assistant message to tokens through the model's tokenizer.

    Why it matters:
    Trained as pieces, the model can learn to write the marker but no stop id can match it, and
    Axolotl refuses such an `eot_tokens` entry ("encoded as multiple tokens").

    Example:
    A ChatML template on a Llama-3 vocabulary: `<|im_end|>` becomes `<`, `|`, `im`, `_end`, `|>`.

    Fix:
    Add the marker as a special token (and resize the embeddings), or train with the template made
    for this tokenizer.
    """
    result = subject.labels
    share, indices, spans = _share(result, (SPLIT,))
    if not spans:
        return
    markers = ", ".join(result.end_markers)
    yield self.finding(f"the end-of-turn {markers} is several ordinary tokens in {share}",
                       "add the end-of-turn marker as a special token, or use the chat template made for this tokenizer",
                       result.template.location if result.template else None,
                       examples=indices, spans=spans)


@rule("SD606", "thought-training-mismatch", Severity.WARNING, input=LabelsInput)
def thought_training_mismatch(subject: LabelsInput, self: Rule):
    """Reasoning rows train a thought without its close marker, or keep earlier turns' thoughts the template drops.

    What it checks:
    On a model whose template frames a thought (`<think>…</think>`), every thought in the rendered
    training examples (from `reasoning_content` in an assistant message, or written in its content):
    is its close marker trained when its text is (`full`, `pad-id`, `assistant-only` and
    `completion-only` masks; Axolotl's are not judged here), and does a thought of an earlier turn
    (one a later user turn follows) stay in the text when the model's template drops earlier
    thoughts at inference.

    Why it matters:
    A model trained on thoughts whose `</think>` is masked learns to think and never to stop
    thinking: replies end in the budget inside the thought. Earlier-turn thoughts the template
    strips at inference (Qwen3, DeepSeek-R1) are a train/inference mismatch: the model learns from
    histories it never sees when served, and multi-turn replies drift.

    Example:
    A training template whose `{% generation %}` block starts after `<think>` … `</think>` is written
    but covers the thought and not its close; or a dataset rendered with a template that keeps every
    turn's `<think>` for Qwen3, whose template keeps only the last.

    Fix:
    Put the close marker inside the trained span (move `{% generation %}` to cover `</think>`);
    render training rows with the model's own template, or strip earlier turns' thoughts as it does.
    """
    result = subject.labels
    reasoning = subject.analysis.reasoning
    if reasoning.style != "think-tags":
        return
    where = result.template.location if result.template else None
    untrained = result.thought_examples("close_untrained")
    if untrained:
        shown = ", ".join(str(i) for i in untrained[:_SHOWN_INDICES]) + (", …" if len(untrained) > _SHOWN_INDICES else "")
        yield self.finding(f"{reasoning.close} is masked after a trained thought in {len(untrained)} example(s) "
                           f"(examples {shown}): the model learns to think and never to close the thought",
                           f"train the close marker with the thought (a {{% generation %}} block that covers {reasoning.close})",
                           where, Severity.ERROR, examples=untrained)
    kept = result.thought_examples("earlier_kept")
    if kept and reasoning.history_stripped:
        shown = ", ".join(str(i) for i in kept[:_SHOWN_INDICES]) + (", …" if len(kept) > _SHOWN_INDICES else "")
        yield self.finding(f"earlier turns keep their {reasoning.open}…{reasoning.close} thoughts in {len(kept)} example(s) "
                           f"(examples {shown}), but the model's template drops them at inference: a train/inference mismatch",
                           "render the rows with the model's own template, or strip earlier turns' thoughts as it does",
                           where, examples=kept)
