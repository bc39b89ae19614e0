"""The public Python API: one plain function per command, each returning a result object. No
printing, no exiting; errors are `stopdoctor.core.errors.StopdoctorError` (one line, a hint).

    from stopdoctor import api
    result = api.inspect_model("path/to/model")        # or a hub id, or a .gguf file
    for finding in result.findings:
        print(finding.code, finding.message, finding.fix)
    report = api.inspect_report(result)                # what every reporter takes
    report.exit_code()                                 # 0 clean, 1 findings at/above fail-on

Everything outside this module, `stopdoctor.gate.run_gate` and `stopdoctor.config.load_settings`
is internal and may change between versions.
Imports: every stage below it (facts, template, analysis, actions, rules); never reporters or cli.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from stopdoctor.analysis.core import Analysis, analyze
from stopdoctor.core.errors import InputError
from stopdoctor.core.findings import Finding, Report, Severity, Subject
from stopdoctor.core.types import Expectation, ModelSource
from stopdoctor.facts.model_facts import ModelFacts, load_model
from stopdoctor.facts.serving import ServingConfig
from stopdoctor.rules.inputs import ExpectationInput, LabelsInput, LogsInput, ServingInput
from stopdoctor.rules.results import InspectResult, LabelsReport, LogsResult
from stopdoctor.rules.runner import rules_for, run_rules
from stopdoctor.template.limits import render_deadline

def load(spec: str, revision: str | None = None) -> ModelFacts:
    """A model spec (folder, .gguf file, hub id) read into facts; nothing derived yet."""
    return load_model(spec, revision)


def _located(facts: ModelFacts | None, findings: Iterable[Finding]) -> list[Finding]:
    """Findings whose location names a key of a model file, with the key's line filled in."""
    if facts is None:
        return list(findings)
    return [replace(f, location=facts.locate(f.location)) if f.location is not None else f for f in findings]


def model_findings(analysis: Analysis) -> list[Finding]:
    """The model rules (SD1xx-SD3xx) on an analysed model, lines resolved."""
    return _located(analysis.facts, run_rules(analysis))


def inspect_model(spec: str, revision: str | None = None) -> InspectResult:
    """`stopdoctor inspect`: read a model's files, analyse them, run the model rules."""
    facts = load(spec, revision)
    with render_deadline():  # one time limit for all of inspect's template renders
        analysis = analyze(facts)
        findings = model_findings(analysis)
    return InspectResult(facts.source, facts, analysis, findings)


def serving_findings(analysis: Analysis, serving: ServingConfig) -> list[Finding]:
    """The serving rules (SD4xx) on a model and one serving configuration deployed with it."""
    return _located(analysis.facts, run_rules(ServingInput(analysis, serving)))


def expectation_findings(analysis: Analysis, expectation: Expectation) -> list[Finding]:
    """The expectation rules (SD5xx): the model against what the project's configuration asserts."""
    return _located(analysis.facts, run_rules(ExpectationInput(analysis, expectation)))


def rule_codes(kinds: Iterable[type]) -> list[str]:
    """The codes of the rules that check these input kinds (`stopdoctor.rules.inputs`)."""
    return sorted(rule.code for kind in kinds for rule in rules_for(kind))


def inspect_report(result: InspectResult, fail_on: Severity = Severity.ERROR, command: str = "inspect") -> Report:
    """The one report of an inspected model, for any reporter."""
    subject = Subject(result.source.spec, list(result.findings), tuple(rule_codes([Analysis])),
                      _model_files(result.source), result)
    return Report(command, [subject], fail_on)


def _model_files(source: ModelSource) -> dict[str, Path]:
    return dict(source.files)


# --- logs ------------------------------------------------------------------------------------


def logs_findings(report: Any) -> list[Finding]:
    """The logs rules (SD7xx) on a logs report."""
    return run_rules(LogsInput(report))


def analyze_log_files(paths: list[str], model: str | None = None, revision: str | None = None,
                      settings: Any = None, on_progress: Callable[[float], None] | None = None) -> LogsResult:
    """`stopdoctor logs`: read response logs (DuckDB, imported lazily) and check them."""
    from stopdoctor.actions.logs.query import LogsSettings, analyze_logs
    from stopdoctor.actions.logs.vocabulary import model_vocabulary

    vocabulary = model_vocabulary(model, revision) if model else None
    report = analyze_logs(paths, vocabulary, settings or LogsSettings(), on_progress)
    return LogsResult(report, logs_findings(report))


def logs_report(result: LogsResult, paths: list[str], fail_on: Severity = Severity.ERROR) -> Report:
    """The one report of a logs run: the log files are the subject."""
    files = {str(p): Path(p) for p in paths}
    subject = Subject(", ".join(str(p) for p in paths), list(result.findings), tuple(rule_codes([LogsInput])), files, result)
    return Report("logs", [subject], fail_on)


# --- labels ----------------------------------------------------------------------------------


def labels_findings(analysis: Analysis, labels: Any) -> list[Finding]:
    """The labels rules (SD6xx) on a model and the labels built from a dataset."""
    return _located(analysis.facts, run_rules(LabelsInput(analysis, labels)))


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


def labels_report(result: LabelsReport, data: str, fail_on: Severity = Severity.ERROR) -> Report:
    """The one report of a labels run: the model and its dataset are the subject."""
    files = {**_model_files(result.source), Path(data).name: Path(data)}
    subject = Subject(result.source.spec, list(result.findings), tuple(rule_codes([LabelsInput])), files, result)
    return Report("labels", [subject], fail_on)


# --- diff ------------------------------------------------------------------------------------


def diff_models(spec_a: str, spec_b: str, revision_a: str | None = None, revision_b: str | None = None):
    """`stopdoctor diff A B`: what changed between two models (`actions.diff.ModelDiff`; its
    `exit_code()` is 1 when a difference changes where generation stops)."""
    from stopdoctor.actions.diff import diff_analyses

    facts_a, facts_b = load(spec_a, revision_a), load(spec_b, revision_b)
    with render_deadline():
        return diff_analyses(analyze(facts_a), analyze(facts_b))
