"""Every command's result as the one `Report`: what each action found, said as findings, so that one
function (`Report.exit_code`) gives every command its exit code (0 clean, 1 a finding at/above
fail-on, 2 something could not be checked). The rules' findings (inspect, check, labels, logs) are
built in `stopdoctor.api`; here are the verdicts of the commands that judge by running or
comparing something (generate, the fragment test, stop-odds, diff, probe-stop, fix) and of those
that judge nothing (render, rules), whose report has no finding and exits 0.

A verdict finding's code is its name (as probe-server's probes are), not an SD code: it is no
rule, and the rules table stays the rules. The fragment test's is SD501, the rule `check --live`
holds the same probe to.

Imports: core, rules (the registry: SD501); actions' results as types only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from stopdoctor.core.errors import StopdoctorError
from stopdoctor.core.findings import Finding, Report, Severity, Subject
from stopdoctor.core.records import record
from stopdoctor.core.types import MODEL_KINDS, Expectation, a_kind

if TYPE_CHECKING:
    from stopdoctor.actions.diff import ModelDiff
    from stopdoctor.writers.edits import FixPlan
    from stopdoctor.actions.generate.run import FragmentVerdict, GenerateResult
    from stopdoctor.actions.probe import ProbeReport
    from stopdoctor.actions.render import RenderResult
    from stopdoctor.actions.stop_odds import StopEvidence, StopOdds
    from stopdoctor.analysis.core import Analysis
    from stopdoctor.rules.registry import Rule


def verdict(code: str, message: str, severity: Severity = Severity.ERROR, evidence: dict[str, Any] | None = None) -> Finding:
    """A verdict as a finding: its code and name are the verdict's name."""
    return Finding(code, code, severity, message, "", evidence=evidence or {})


# --- generate --------------------------------------------------------------------------------


@record
class GenerationRun:
    """One generation, the fix line for the token that should have stopped it, and the stop evidence
    measured when it went to the budget."""

    result: GenerateResult
    fix: Any = None  # stopdoctor.fix.GenerateFix
    evidence: StopEvidence | None = None


@record
class GenerationRuns:
    """`generate`'s result: its runs (two with `--thinking both`) and the runs that could not run
    (thinking mode, error)."""

    runs: tuple[GenerationRun, ...]
    failed: tuple[tuple[str, StopdoctorError], ...] = ()
    both: bool = False  # `--thinking both`: the JSON is one document per run under `runs`


def generation_findings(run: GenerationRun) -> list[Finding]:
    """A runaway: a next turn written, the budget reached after a turn-ending token, a server that
    stopped a loop or left a stop string, weights that never learned to stop, a thought that loops
    until the budget runs out, a stream that showed other text than the answer."""
    from stopdoctor.analysis.diagnose import runaway

    result, evidence = run.result, run.evidence
    mode = result.request.prompt.thinking
    extra = {"thinking": mode} if mode != "default" else {}
    found = []
    if evidence is not None and evidence.never_stops:
        found.append(verdict("weights-never-stop", "a runaway the weights cause: no stop configuration ends it", evidence=extra))
    if result.reasoning is not None and result.reasoning.runaway:
        found.append(verdict("thought-loops", "a thought that loops until the budget runs out: no budget ends it", evidence=extra))
    why = runaway(result.generation, result.diagnosis)
    if why is not None:
        found.append(verdict("runaway", why, evidence=extra))
    streamed = (result.generation.server or {}).get("stream")
    if streamed is not None and any(issue["kind"] != "no-done" for issue in streamed["issues"]):
        found.append(verdict("stream-differs", "the client saw other text than the answer", evidence=extra))
    return found


def generation_report(spec: str, runs: GenerationRuns) -> Report:
    """`generate`: each runaway a finding; a run that could not run (one of `--thinking both`) a
    subject that could not be checked (exit 2, the other run still reported)."""
    findings = [f for run in runs.runs for f in generation_findings(run)]
    failed = [Subject(f"{spec} (thinking {mode})", error=error) for mode, error in runs.failed]
    return Report("generate", [Subject(spec, findings, result=runs), *failed])


def kind_findings(analysis: Analysis, expectation: Expectation | None, probe: FragmentVerdict) -> list[Finding]:
    """The fragment probe's verdict held against the expected kind (SD501); without one, against
    the static verdict only when that was sure, since a mismatch there means the files describe
    another model (a base model that behaves as base is no defect)."""
    from stopdoctor.rules.runner import REGISTRY

    rule: Rule = REGISTRY["SD501"]
    wanted = expectation.kind if expectation and expectation.kind else None
    static = analysis.verdict.kind if analysis.verdict else "unknown"
    target = wanted or (static if static in MODEL_KINDS else None)
    if target is None or probe.verdict not in MODEL_KINDS or probe.verdict == target:
        return []
    source = "expect-kind" if wanted else "its files (static verdict)"
    location = expectation.location("expect-kind") if wanted and expectation else None
    never_stops = probe.evidence is not None and probe.evidence.never_stops
    fix = "serve the checkpoint the configuration names, or fix its chat template and stop ids"
    if never_stops:
        # the files are fine: the template and stop ids are not what to fix
        fix = ("the weights, not the files: the end-of-turn token was never trained; fine-tune with it in the "
               "labels (`stopdoctor labels`), or serve a checkpoint whose weights end turns (`stopdoctor stop-odds`)")
    return [rule.finding(f"live probe: expected {a_kind(target)} per {source}, it behaves as {probe.verdict}: {probe.reason}",
                          fix, location, expected=target, found=probe.verdict, probe="fragment",
                          weights_never_stop=never_stops)]


def fragment_report(spec: str, analysis: Analysis, probe: FragmentVerdict) -> Report:
    """`generate --fragment-test`: SD501 when the model behaves as another kind than its files say,
    as `check --live` judges it."""
    return Report("fragment-test", [Subject(spec, kind_findings(analysis, None, probe), ("SD501",), result=probe)])


# --- stop-odds, diff, probe-stop -------------------------------------------------------------


def stop_odds_report(odds: StopOdds) -> Report:
    """`stop-odds`: a finding when the weights never learned to stop (median P(end-of-turn) < 0.01)
    or the measurement says the model is broken."""
    findings = [verdict(f"stop-odds-{odds.verdict}", odds.reason)] if odds.verdict in ("weights", "broken") else []
    return Report("stop-odds", [Subject(odds.model, findings, result=odds)])


def diff_report(diff: ModelDiff) -> Report:
    """`diff`: each stop-relevant difference a finding; the others are shown and never fail."""
    findings = [verdict("stop-relevant-difference", f"{d.what}: {d.why or 'it changes where generation stops'}",
                        evidence={"aspect": d.aspect, "effect": d.effect or None}) for d in diff.stop_relevant]
    return Report("diff", [Subject(f"{diff.a} vs {diff.b}", findings, result=diff)])


def probe_stop_report(spec: str, probe: ProbeReport, fail_on_miss: bool = False) -> Report:
    """`probe-stop`: a stop an id match would miss, or one that fires in an ordinary answer, is a
    warning; `--fail-on-miss` makes warnings fail."""
    findings = [verdict("stop-missed", f"{stop.probe.stop!r}: a token-id match would miss it, or it fires inside an answer",
                        Severity.WARNING) for stop in probe.stops if stop.failed]
    fail_on = Severity.WARNING if fail_on_miss else Severity.ERROR
    return Report("probe-stop", [Subject(spec, findings, result=probe)], fail_on)


# --- fix -------------------------------------------------------------------------------------


@record
class FixOutcome:
    """`fix`'s result: the plan, whether it was written, and the findings `check` fails on that no
    edit removes (after a write: what `check` says of the written files)."""

    model: str
    plan: FixPlan
    written: bool
    remaining: tuple[Finding, ...]


def fix_report(outcome: FixOutcome, fail_on: Severity) -> Report:
    """`fix`, as `check` would exit once the shown fixes are in: the remaining findings, and a
    finding for a diff shown but not written (so CI can detect "fix needed")."""
    findings = list(outcome.remaining)
    if outcome.plan.edits and not outcome.written:
        findings.append(verdict("fix-not-written", f"{len(outcome.plan.edits)} file(s) to fix: run again with --write",
                                evidence={"files": [edit.label for edit in outcome.plan.edits]}))
    return Report("fix", [Subject(outcome.model, findings, result=outcome)], fail_on)


# --- commands that judge nothing -------------------------------------------------------------


def render_report(spec: str, result: RenderResult) -> Report:
    """`render`: the prompts; nothing is judged (exit 0)."""
    return Report("render", [Subject(spec, result=result)])


@record
class RuleListing:
    """`rules`: every rule, or the one asked for (`detail`: its whole doc)."""

    rules: tuple[Rule, ...]
    detail: bool = False


def rules_report(rules: Sequence[Rule], detail: bool = False) -> Report:
    return Report("rules", [Subject("rules", result=RuleListing(tuple(rules), detail))])
