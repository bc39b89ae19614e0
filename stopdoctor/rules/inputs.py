"""The typed inputs rules check: each rule declares one of these kinds, and the runner gives it
only subjects of that kind (a serving rule never sees a bare model, a logs rule never a model).

Plain frozen dataclasses; imports analysis and the action results they wrap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stopdoctor.analysis.core import Analysis
from stopdoctor.core.records import record
from stopdoctor.core.types import Expectation
from stopdoctor.facts.serving import ServingConfig

if TYPE_CHECKING:  # the commands that build these import them; `inspect` need not (numpy, duckdb's helpers)
    from stopdoctor.labels.result import DatasetLabels
    from stopdoctor.logs.query import LogsSummary
    from stopdoctor.analysis.weights import WeightsReport

# A model's files and what was derived from them: the rules of SD1xx-SD3xx take the `Analysis`
# itself, so `ModelInput` is simply that type.
ModelInput = Analysis


@record
class ServingInput:
    """A model and one serving configuration deployed with it (SD4xx)."""

    analysis: Analysis
    serving: ServingConfig


@record
class ExpectationInput:
    """A model and what the project's configuration asserts about it (SD5xx)."""

    analysis: Analysis
    expectation: Expectation


@record
class LabelsInput:
    """A model and the training labels built from a dataset for it (SD6xx)."""

    analysis: Analysis
    labels: DatasetLabels


@record
class LogsInput:
    """Response logs, read with or without a model (SD7xx)."""

    logs: LogsSummary


@record
class WeightsInput:
    """A model and the rows of its embedding and output matrices that matter for stopping (SD8xx)."""

    analysis: Analysis
    weights: WeightsReport


@record
class ComparisonInput:
    """A model and the original it was converted, quantized or re-uploaded from (`inspect --against`)."""

    analysis: Analysis
    original: Analysis


INPUT_KINDS: dict[type, str] = {
    Analysis: "model",
    ServingInput: "serving",
    ExpectationInput: "expectation",
    LabelsInput: "labels",
    LogsInput: "logs",
    WeightsInput: "weights",
    ComparisonInput: "comparison",
}
