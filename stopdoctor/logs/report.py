"""What `stopdoctor logs` finds, as data: the settings, each problem with its examples, the charts'
figures and the whole report. Frozen dataclasses only.

Imports: nothing from stopdoctor.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field

from stopdoctor.core.records import record

# --------------------------------------------------------------------------------------------
# The report
# --------------------------------------------------------------------------------------------

PROBLEMS = {
    "budget-truncated": "cut by the token budget (finish_reason length)",
    "mid-sentence": "cut by the budget in the middle of a sentence",
    "hallucinated-turn": "ran on into a next user/system turn it wrote itself",
    "ran-past-end-of-turn": "an end-of-turn token's text with more text after it",
    "truncated-but-reported-finished": "reported stop or tool_calls, yet used exactly max_tokens output tokens",
    "degenerate-repetition": "reported stop, but the answer ends in a loop (repeated word 4-grams), or the engine stopped a loop",
    "empty-answer": "reported stop with no answer text",
    "reasoning-consumed-budget": "cut by the budget while reasoning: no answer, or nearly all tokens reasoning",
}


@record
class Example:
    file: str
    line: int
    model: str | None
    finish_reason: str | None  # normalised (stop, length, tool_calls, content_filter, error)
    excerpt: str
    detail: str = ""
    native_finish_reason: str | None = None  # as the provider logged it


@record
class Problem:
    key: str
    description: str
    count: int
    share: float  # of responses
    examples: tuple[Example, ...]
    by_model: dict[str, int] = field(default_factory=dict)


@record
class LogsSettings:
    overrides: Mapping[str, str] = field(default_factory=dict)
    max_length_share: float = 0.05  # SD701 budget-truncation-rate
    max_turn_share: float = 0.0  # SD702 hallucinated-turns-in-logs: any is too many by default
    examples: int = 5


@record
class TokenHistogram:
    """Output tokens of one model at one max_tokens: `bins[i]` counts answers with
    i/BINS <= tokens/max_tokens < (i+1)/BINS; `at_budget` those at (or over) the budget."""

    model: str
    max_tokens: int
    bins: tuple[int, ...]
    at_budget: int
    total: int


@record
class Timeline:
    """Finish reasons per time bucket (UTC): ((bucket start ISO, {finish: count}), ...)."""

    bucket: str  # "1 minute", "1 hour", ...
    rows: tuple[tuple[str, dict[str, int]], ...]


@record
class Charts:
    histograms: tuple[TokenHistogram, ...]
    timeline: Timeline | None
    without_tokens: int  # answers without output tokens or max_tokens: not in any histogram


HISTOGRAM_BINS = 20


@record
class LogsSummary:
    files: tuple[str, ...]
    vocabulary: str
    lines: int
    blank: int
    bad_lines: int
    bad_examples: tuple[tuple[str, int], ...]
    unrecognised: int  # valid JSON with no response in any known shape
    responses: int
    shapes: dict[str, int]
    finish: dict[str, int]
    finish_raw: dict[str, int]
    by_model: dict[str, dict[str, int]]
    by_max_tokens: dict[str, dict[str, int]]
    stop_reasons: dict[str, int]
    problems: dict[str, Problem]
    settings: LogsSettings
    seconds: float
    # every answer flagged with a next turn or a run past end of turn: problem -> ((file, line), …)
    flagged: dict[str, tuple[tuple[str, int], ...]] = field(default_factory=dict)
    multi_choice: int = 0  # answers that are one choice of an n > 1 response (every choice is read)
    finish_native: dict[str, dict[str, int]] = field(default_factory=dict)  # normalised -> provider's value -> count
    streams: int = 0  # streamed answers reassembled from chunks
    chunks: int = 0  # the chunk lines they were reassembled from
    charts: Charts | None = None

    @property
    def length_share(self) -> float:
        return self.finish.get("length", 0) / self.responses if self.responses else 0.0


