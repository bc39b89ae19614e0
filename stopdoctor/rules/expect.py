"""SD5xx: expectations a project declares about its models (`stopdoctor check` configuration).

The rule checks an `ExpectationInput`: the gate builds one for each model that has an expectation
in the configuration; no other command does.
"""

from __future__ import annotations

from stopdoctor.core.findings import Severity
from stopdoctor.core.types import a_kind
from stopdoctor.rules.inputs import ExpectationInput
from stopdoctor.rules.registry import Rule, rule


@rule("SD501", "expectation-failed", Severity.ERROR, input=ExpectationInput)
def expectation_failed(subject: ExpectationInput, self: Rule):
    """The model is not what the project's stopdoctor configuration says it is.

    What it checks:
    The expectations declared for the model in `stopdoctor.toml` or `[tool.stopdoctor]`
    (`expect-kind`, `expect-end-of-turn`, `expect-stops`) against what stopdoctor found: the
    base/instruct verdict, the template's end-of-turn marker, and the effective stop ids of the
    model's own runtime.

    Why it matters:
    A model upload or a template edit can silently swap the end-of-turn token or replace an
    instruct checkpoint with its base sibling; the deployment then runs away or stops early,
    and nothing else in CI notices because the new files are self-consistent.

    Example:
    `expect-end-of-turn = "<|im_end|>"`, but the new revision's template closes turns with
    `<|eot_id|>`.

    Fix:
    Restore the model files the deployment was built for, or update the expectation (and the
    serving configuration) if the change is intended.
    """
    analysis, expectation = subject.analysis, subject.expectation
    if expectation.kind is not None:
        found = analysis.verdict.kind if analysis.verdict else "unknown"
        if found != expectation.kind:
            yield self.finding(
                f"expected {a_kind(expectation.kind)}, stopdoctor judges it {found}",
                "check that the configured model is the checkpoint you deploy, or correct expect-kind",
                expectation.location("expect-kind"), expected=expectation.kind, found=found)
    if expectation.end_of_turn is not None:
        markers = [m.text for m in analysis.end_of_turn]
        if not any(m == expectation.end_of_turn or m.strip() == expectation.end_of_turn.strip() for m in markers):
            template = analysis.facts.template
            shown = ", ".join(repr(m) for m in markers) or "nothing"
            yield self.finding(
                f"expected the template to end a turn with {expectation.end_of_turn!r}, it writes {shown}",
                "restore the chat template the deployment expects, or update expect-end-of-turn and the serving stop list",
                template.location if template else expectation.location("expect-end-of-turn"),
                expected=expectation.end_of_turn, found=markers)
    if expectation.stops:
        primary = analysis.runtime("llama.cpp" if analysis.facts.is_gguf else "transformers")
        ids = set(primary.ids)
        texts = {s.text for s in primary.stops if s.text is not None}
        missing = [s for s in expectation.stops if (s not in ids if isinstance(s, int) else s not in texts)]
        if missing:
            where = primary.stops[0].location if primary.stops else expectation.location("expect-stops")
            yield self.finding(
                f"expected {', '.join(repr(s) for s in missing)} among the {primary.runtime} stop ids, "
                f"which are {primary.ids or 'none'}",
                f"add {', '.join(repr(s) for s in missing)} to the stop ids ({primary.rule})",
                where, expected=list(expectation.stops), found=primary.ids, runtime=primary.runtime)
