"""Plain functions that run the pipeline and return results. No printing, no exiting.

Imports: source, facts, analysis, checks, report.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from .analysis import Analysis, analyze
from .checks import run_checks
from .facts import ModelFacts, load_facts
from .model import ModelSource
from .report import Finding
from .runtimes import primary_runtime
from .sandbox import render_deadline
from .serving import ServingConfig
from .source import resolve

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
