"""Plain functions that run the pipeline and return results. No printing, no exiting.

Imports: source, facts, analysis, checks, report.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stopdoctor.analysis.core import Analysis, analyze
from stopdoctor.rules.runner import run_checks
from stopdoctor.core.errors import InputError
from stopdoctor.facts.model_facts import ModelFacts, load_facts
from stopdoctor.core.types import ModelSource
from stopdoctor.core.findings import Finding
from stopdoctor.runtimes.stops import primary_runtime
from stopdoctor.template.limits import render_deadline
from stopdoctor.facts.serving import ServingConfig
from stopdoctor.facts.resolve import resolve

# What a complete HF folder holds for stop diagnosis; anything absent is listed in the report.
EXPECTED_FILES = ("config.json", "generation_config.json", "tokenizer_config.json", "tokenizer.json")


@dataclass(frozen=True)
class InspectResult:
    source: ModelSource
    facts: ModelFacts
    analysis: Analysis
    findings: list[Finding]

    @property
    def missing_files(self) -> list[str]:
        if self.source.kind == "gguf":
            return []
        return [name for name in EXPECTED_FILES if name not in self.source.files]

    @property
    def primary_runtime(self) -> str:
        """The runtime whose stop ids are called "effective": the model's own format's runtime."""
        return primary_runtime(self.facts)


def load(spec: str, revision: str | None = None) -> ModelFacts:
    return load_facts(resolve(spec, revision))


def serving_findings(analysis: Analysis, serving: ServingConfig) -> list[Finding]:
    """Run the SD4xx checks on a model and the serving configuration deployed with it: the
    registered functions, with the config attached to a copy of the analysis (on a plain model
    analysis they see no `serving` attribute and yield nothing)."""
    wrapped = copy.copy(analysis)
    wrapped.serving = serving  # type: ignore[attr-defined]
    return run_checks(wrapped, prefix="SD4")


def inspect_model(spec: str, revision: str | None = None) -> InspectResult:
    facts = load(spec, revision)
    with render_deadline():  # one time limit for all of inspect's template renders
        analysis = analyze(facts)
        findings = run_checks(analysis)
    return InspectResult(facts.source, facts, analysis, findings)


@dataclass(frozen=True)
class LogsResult:
    report: Any  # stopdoctor.actions.logs.query.LogsReport
    findings: list[Finding]


@dataclass(frozen=True)
class _LogsSubject:
    """What the SD7xx checks read: a logs report (no model analysis)."""

    logs: Any


def logs_findings(report: Any) -> list[Finding]:
    """Run the SD7xx checks on a logs report."""
    return run_checks(_LogsSubject(report), prefix="SD7")  # type: ignore[arg-type]


def analyze_log_files(paths: list[str], model: str | None = None, revision: str | None = None,
                      settings: Any = None, on_progress: Any = None) -> LogsResult:
    """`stopdoctor logs`: read response logs (DuckDB, imported lazily) and check them."""
    from stopdoctor.actions.logs.query import LogsSettings, analyze_logs
    from stopdoctor.actions.logs.vocabulary import model_vocabulary

    vocabulary = model_vocabulary(model, revision) if model else None
    report = analyze_logs(paths, vocabulary, settings or LogsSettings(), on_progress)
    return LogsResult(report, logs_findings(report))


def labels_findings(analysis: Analysis, labels) -> list[Finding]:
    """Run the SD6xx checks on a labelled dataset (`stopdoctor.actions.labels.build.LabelsResult`), attached to
    a copy of the analysis as the serving checks get theirs."""
    wrapped = copy.copy(analysis)
    wrapped.labels = labels  # type: ignore[attr-defined]
    return run_checks(wrapped, prefix="SD6")


@dataclass(frozen=True)
class LabelsReport:
    source: ModelSource
    facts: ModelFacts
    analysis: Analysis
    labels: object  # stopdoctor.actions.labels.build.LabelsResult
    findings: list[Finding]


def check_labels(spec: str, data: str, settings=None, limit: int | None = None, revision: str | None = None,
                 progress=None) -> LabelsReport:
    """`stopdoctor labels`: build the training labels of a dataset and check its end-of-turns."""
    return check_labels_of(load(spec, revision), data, settings, limit, progress)


def check_labels_of(facts: ModelFacts, data: str, settings=None, limit: int | None = None,
                    progress=None) -> LabelsReport:
    """`check_labels` on a model already loaded."""
    from stopdoctor.actions.labels.result import LabelSettings
    from stopdoctor.facts.datasets import count_examples, iter_examples
    from stopdoctor.actions.labels.build import label_dataset

    analysis = analyze(facts)
    total = count_examples(data, limit)
    if not total:
        raise InputError(f"{Path(data).name}: holds no example")
    labels = label_dataset(facts, analysis, iter_examples(data, limit), str(data), settings or LabelSettings(),
                           progress, total)
    return LabelsReport(facts.source, facts, analysis, labels, labels_findings(analysis, labels))
