"""The `check` gate: inspect each configured model, its serving files and its expectation, apply
the settings' select/ignore and severities, and return one `Report`. A model that cannot be loaded
is recorded with its error and the others still run. No printing, no exiting.

Imports: api, config, core, facts, rules, reporters (the baseline file), template (the render deadline); actions.generate and rules.verdicts lazily (only for --live, which needs torch).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from stopdoctor import api
from stopdoctor.analysis.core import Analysis
from stopdoctor.config import Settings, apply, selected, severity_of
from stopdoctor.core.errors import InputError, StopdoctorError
from stopdoctor.core.findings import Finding, Report, Subject
from stopdoctor.core.types import Expectation
from stopdoctor.facts.serving import ServingConfig
from stopdoctor.runtimes.serving import load_serving
from stopdoctor.rules.inputs import ExpectationInput, ServingInput, WeightsInput
from stopdoctor.reporters.baseline_json import BASELINE_SCHEMA
from stopdoctor.rules.results import InspectResult
from stopdoctor.rules.runner import REGISTRY
from stopdoctor.template.limits import render_deadline


def rules_run(settings: Settings, serving: bool, expectation: bool, weights: bool = False) -> tuple[str, ...]:
    """The selected rules that apply to a model: the model rules always, the serving rules only
    with serving files, the expectation rules only with an expectation (or --live), SD000 never
    (it stands for crashes, reported only when one happens)."""
    kinds = [Analysis] + ([ServingInput] if serving else []) + ([ExpectationInput] if expectation else []) \
        + ([WeightsInput] if weights else [])
    return tuple(code for code in api.rule_codes(kinds) if selected(settings, REGISTRY[code]))


def run_gate(settings: Settings, live: bool = False) -> Report:
    """`live`: also run the generate fragment probe on each model (torch; see `live_findings`)."""
    if not settings.models:
        raise InputError("no model to check",
                         hint="pass MODEL arguments, or list models in stopdoctor.toml / [tool.stopdoctor] models")
    serving_cache: dict[Path, ServingConfig] = {}
    subjects = []
    for entry in settings.models:
        serving_files = tuple(dict.fromkeys(p.resolve() for p in (*settings.serving, *entry.serving)))
        try:
            # Each model its own render time limit: the command's limit would also count the
            # earlier models' reading, loading and generating, so the 4th of 4 healthy models failed.
            with render_deadline(own=True):
                result = api.inspect_model(entry.spec, entry.revision, lookups_only=False)
        except StopdoctorError as error:
            subjects.append(Subject(entry.spec, serving=serving_files, error=error, failed_target=entry.spec))
            continue
        files = dict(result.source.files)
        findings = list(result.findings)
        if entry.expectation is not None:
            findings.extend(api.expectation_findings(result.analysis, entry.expectation))
        probe = None
        if live:
            try:
                with render_deadline(own=True):
                    probe = live_probe(result)
                findings.extend(live_findings(result, entry.expectation, probe))
                if probe.evidence is not None and probe.evidence.weights is not None:
                    findings.extend(api.weights_findings(result.analysis, probe.evidence.weights))
            except StopdoctorError as error:
                subjects.append(Subject(entry.spec, apply(settings, findings), files=files, result=result,
                                        serving=serving_files, error=error, failed_target=f"{entry.spec} (live probe)"))
                continue
        for path in serving_files:
            try:
                if path not in serving_cache:
                    serving_cache[path] = load_serving(path)
                with render_deadline(own=True):
                    findings.extend(api.serving_findings(result.analysis, serving_cache[path]))
            except StopdoctorError as error:
                subjects.append(Subject(entry.spec, apply(settings, findings), files=files, result=result,
                                        serving=serving_files, error=error, failed_target=str(path), live=probe))
                break
        else:
            result = replace(result, serving=tuple(serving_cache[p] for p in serving_files))
            codes = rules_run(settings, bool(serving_files), entry.expectation is not None or live,
                              probe is not None and probe.evidence is not None and probe.evidence.weights is not None)
            subjects.append(Subject(entry.spec, apply(settings, findings), codes, files, result, serving_files, live=probe))
    levels = {code: severity_of(settings, check) or check.severity for code, check in REGISTRY.items()}
    return Report("check", subjects, settings.fail_on, settings.config_file, levels)


def require_live() -> None:
    """--live needs torch: fail before the static run, not after it."""
    from stopdoctor.actions.generate.local import require_torch

    require_torch("check --live")


def live_probe(result: InspectResult) -> Any:
    """Run the fragment probe (does the model answer and end its turn, or continue text?) on the
    model's weights: a `FragmentVerdict`. When the chat probe does not end its turn, the stop
    evidence (end-of-turn rows, P(end-of-turn) on reference answers) says whether the weights can."""
    from dataclasses import replace

    from stopdoctor.actions.generate.local import LocalEngine
    from stopdoctor.actions.generate.run import ModelContext, fragment_test
    from stopdoctor.actions.stop_odds import reference_contexts, stop_evidence

    contexts = reference_contexts(result.facts, result.analysis)  # rendered before the (slow) load
    engine = LocalEngine.load(result.facts)
    verdict = fragment_test(ModelContext(result.facts, result.analysis), engine)
    chat = next((p for p in verdict.probes if p.name == "chat question"), None)
    if chat is None or chat.ended_turn:
        return _unless_broken(result, verdict)
    evidence = stop_evidence(result.facts, result.analysis, engine, contexts)
    if evidence.never_stops:
        return replace(verdict, evidence=evidence,
                       reason=f"{verdict.reason}; {evidence.explain()}: its weights never learned to stop")
    return replace(verdict, evidence=evidence)


def _unless_broken(result: InspectResult, verdict: Any) -> Any:
    """The probe's verdict, unless a row the model stops on holds NaN or infinities: then what
    it generated is no evidence (an argmax over NaN picks a token, perhaps the eos) and the
    broken row is (its rows' finding, SD801, runs)."""
    from stopdoctor.actions.stop_odds import StopEvidence
    from stopdoctor.analysis.weights import analyze_weights

    try:
        weights = analyze_weights(result.analysis)
    except (StopdoctorError, ValueError, OSError):
        return verdict  # weights in a form the row reader does not know: the probe's verdict stands
    broken = [w for w in weights.untrained_targets if any("NaN or infinite" in r for r in w.reasons)]
    if not broken:
        return verdict
    row = broken[0]
    evidence = StopEvidence(None, 0, weights, broken=True)
    return replace(verdict, evidence=evidence,
                   reason=f"the weights are broken: {row.text} (id {row.id}) {row.reasons[0].removeprefix('its ')}; "
                          "what the probe generated is no evidence")


def live_findings(result: InspectResult, expectation: Expectation | None, verdict: Any = None) -> list[Finding]:
    """The fragment probe's verdict held against the expected kind (SD501); without one, against
    the static verdict only when that was sure, since a mismatch there means the files describe
    another model. `verdict`: the probe already run (else it runs here)."""
    from stopdoctor.rules.verdicts import kind_findings

    if verdict is None:
        verdict = live_probe(result)
    return kind_findings(result.analysis, expectation, verdict)


# --------------------------------------------------------------------------------------------
# Baseline: findings accepted once stay listed, only new ones fail (as ruff's and mypy's do)
# --------------------------------------------------------------------------------------------

DEFAULT_BASELINE = "stopdoctor-baseline.json"


def _subject_key(name: str, base: Path) -> str:
    """A model as the baseline names it: a local path relative to `base` (so `models/x` and
    `./models/x/` are one model, and the file works from any clone), a hub id as given."""
    path = Path(name)
    if path.exists():
        try:
            return path.resolve().relative_to(base.resolve()).as_posix()
        except ValueError:
            return path.resolve().as_posix()
    return name


def _finding_key(model: str, finding: Finding) -> tuple[str, str, str | None, str | None, str]:
    location = finding.location
    return (model, finding.code, location.file if location else None, location.key if location else None, finding.message)


def write_baseline(report: Report, path: Path, base: Path) -> int:
    """Write every finding of `report` to `path`; the number written."""
    from stopdoctor.reporters.baseline_json import render_baseline_json

    entries = []
    for subject in report.subjects:
        model = _subject_key(subject.name, base)
        for finding in subject.findings:
            key = _finding_key(model, finding)
            entries.append({"model": key[0], "code": key[1], "name": finding.name, "file": key[2], "key": key[3],
                            "message": key[4]})
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render_baseline_json(entries), encoding="utf-8")
    except OSError as error:
        raise InputError(f"{path}: cannot write the baseline: {error.strerror or error}") from None
    return len(entries)


def read_baseline(path: Path) -> set[tuple]:
    import json

    from stopdoctor.core.errors import require_file

    require_file(str(path), "baseline file", hint="create it with: stopdoctor check --baseline FILE --write-baseline")
    hint = "rewrite it with: stopdoctor check --baseline FILE --write-baseline"
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        raise InputError(f"{path}: is not a stopdoctor baseline (not JSON)", hint) from None
    entries = document.get("findings") if isinstance(document, dict) and document.get("schema") == BASELINE_SCHEMA else None
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise InputError(f"{path}: is not a stopdoctor baseline (no {BASELINE_SCHEMA} findings list)", hint)
    return {(e.get("model"), e.get("code"), e.get("file"), e.get("key"), e.get("message")) for e in entries}


def apply_baseline(report: Report, accepted: set[tuple], path: Path, base: Path) -> tuple[Report, int]:
    """`report` with the findings listed in the baseline marked accepted (kept, never failing),
    and the number of baseline entries no longer found (fixed since)."""
    import dataclasses

    seen: set[tuple] = set()
    subjects = []
    for subject in report.subjects:
        model = _subject_key(subject.name, base)
        findings = []
        for finding in subject.findings:
            key = _finding_key(model, finding)
            if key in accepted:
                seen.add(key)
                finding = dataclasses.replace(finding, baseline=True)
            findings.append(finding)
        subjects.append(dataclasses.replace(subject, findings=findings))
    return dataclasses.replace(report, subjects=subjects, baseline=path), len(accepted - seen)
