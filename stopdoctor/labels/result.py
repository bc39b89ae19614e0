"""What label building is asked (`LabelSettings`) and what it answers (`DatasetLabels`): per
example, each assistant span's end-of-turn token and whether its label is trained, or why not.

The causes (`NO_GENERATION_MARKERS`, ...) each map to one check of `stopdoctor.rules.labels`.

Imports: `stopdoctor.core.types`, `stopdoctor.facts.model_facts` (the model the labels are for).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from stopdoctor.core.records import record
from stopdoctor.core.types import ChatTemplate
from stopdoctor.facts.model_facts import ModelFacts

COLLATORS = ("auto", "assistant-only", "completion-only", "full", "pad-id", "axolotl")
# The collators that model TRL's SFTTrainer, which appends eos to texts and completions itself (`add_eos`).
TRL_COLLATORS = ("auto", "assistant-only", "completion-only", "full")

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


@record
class LabelSettings:
    collator: str = "auto"
    max_length: int | None = None
    # None: as the trainer the collator names does (on for TRL's, off for pad-id and axolotl);
    # resolved here so that the API and the CLI label a dataset alike.
    append_eos: bool | None = None
    pad_token: str | None = None  # overrides the tokenizer's pad token (the fix to try)
    template: ChatTemplate | None = None  # another chat template (e.g. one with generation markers)
    # Examples whose ids and labels are always built (the first N: the ones `--show` prints);
    # None: all of them. The others are judged in character space when that gives the same
    # verdict for certain (see `judge_in_text`), and tokenized only when it may not.
    tokenize_first: int | None = None
    eot_tokens: tuple[str, ...] | None = None  # axolotl's `eot_tokens` (default: the eos token)
    # axolotl's `excess_length_strategy`: "drop" (its default) or "truncate" an example longer than max_length
    excess_length: str = "drop"
    # TRL `packing` / `packing_strategy`: "none", or "bfd" (truncates what overflows max_length),
    # "bfd_split" / "wrapped" (split long examples across packed rows: no token is cut away)
    packing: str = "none"

    def __post_init__(self) -> None:
        if self.append_eos is None:
            object.__setattr__(self, "append_eos", self.collator in TRL_COLLATORS)

    @property
    def cut_length(self) -> int | None:
        """The length an example is cut to: max_length, unless packing splits long examples."""
        return None if self.packing in ("bfd_split", "wrapped") else self.max_length


@record
class Span:
    """One assistant turn (or a whole text / completion) and its end token."""

    message: int | None  # index of the assistant message; None for text rows
    content: tuple[int, int] | None  # token range of the content (after truncation: may exceed length)
    end_token: int | None  # index of the end-of-turn token, None when absent
    end_id: int | None
    trained: bool
    cause: str | None


@record
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
    thoughts: Any = None  # stopdoctor.labels.thoughts.ThoughtVerdict: its reasoning, when it holds some

    @property
    def tokenized(self) -> bool:
        return self.full_length is not None

    @property
    def ok(self) -> bool:
        return all(s.trained for s in self.spans)


@dataclass
class DatasetLabels:
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

    def thought_examples(self, what: str) -> list[int]:
        """Examples with a thought verdict whose `what` ("close_untrained", "earlier_kept") is not 0."""
        return [e.index for e in self.examples if e.thoughts is not None and getattr(e.thoughts, what)]

    def token_text(self, token_id: int) -> str:
        return self.facts.vocab.text_of(token_id) or f"<id {token_id}>"
