"""What each command's rules produced for its subject: the result objects `stopdoctor.api` returns
and the reporters read (a model inspected, a dataset labelled, logs read), findings included.

Plain frozen dataclasses; imports facts, analysis and runtimes as data.
"""

from __future__ import annotations

from typing import Any

from stopdoctor.analysis.core import Analysis
from stopdoctor.core.findings import Finding
from stopdoctor.core.records import record
from stopdoctor.core.types import ModelSource
from stopdoctor.facts.model_facts import ModelFacts
from stopdoctor.runtimes.stops import primary_runtime

# What a complete HF folder holds for stop diagnosis; anything absent is listed in the report.
EXPECTED_FILES = ("config.json", "generation_config.json", "tokenizer_config.json", "tokenizer.json")


@record
class InspectResult:
    source: ModelSource
    facts: ModelFacts
    analysis: Analysis
    findings: list[Finding]
    weights: Any = None  # `inspect --weights`: a `stopdoctor.analysis.weights.WeightsReport`
    original: Any = None  # `inspect --against`: the original's `Analysis`
    # `check --serving`: the serving files read with it (a Modelfile's PARAMETERs and a request
    # body's keys change the sampling each runtime uses)
    serving: tuple[Any, ...] = ()

    @property
    def missing_files(self) -> list[str]:
        if self.source.kind == "gguf":
            return []
        return [name for name in EXPECTED_FILES if name not in self.source.files]

    @property
    def primary_runtime(self) -> str:
        """The runtime whose stop ids are called "effective": the model's own format's runtime."""
        return primary_runtime(self.facts)


@record
class LogsResult:
    report: Any  # stopdoctor.logs.report.LogsSummary: what the query counted
    findings: list[Finding]


@record
class LabelsResult:
    source: ModelSource
    facts: ModelFacts
    analysis: Analysis
    labels: object  # stopdoctor.labels.result.DatasetLabels: the labels built per example
    findings: list[Finding]
