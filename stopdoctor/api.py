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
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stopdoctor.analysis.core import Analysis, analyze
from stopdoctor.core.errors import InputError, StopdoctorError
from stopdoctor.core.findings import Finding, Report, Severity, Subject
from stopdoctor.core.records import record, replace
from stopdoctor.core.types import Expectation, ModelSource
from stopdoctor.facts.model_facts import ModelFacts, load_model
from stopdoctor.facts.serving import ServingConfig
from stopdoctor.facts.vocab import for_lookups
from stopdoctor.rules.verdicts import (  # noqa: F401  public: every command's result as the one Report
    FixOutcome, GenerationRun, GenerationRuns, diff_report, fix_report, fragment_report, generation_report,
    probe_stop_report, render_report, rules_report, stop_odds_report)
from stopdoctor.template.limits import render_deadline

if TYPE_CHECKING:
    from stopdoctor.actions.diff import ModelDiff
    from stopdoctor.actions.generate.local import LocalEngine
    from stopdoctor.actions.generate.request import Engine, Prompt, Sampling
    from stopdoctor.actions.generate.run import FragmentVerdict, GenerateResult, ModelContext
    from stopdoctor.actions.generate.server import ServerEngine
    from stopdoctor.labels.result import DatasetLabels
    from stopdoctor.logs.report import LogsSettings, LogsSummary
    from stopdoctor.actions.probe import ProbeReport
    from stopdoctor.actions.probe_server.battery import ServerProbeReport
    from stopdoctor.actions.probe_server.battery import Settings as ProbeSettings
    from stopdoctor.actions.render import RenderResult
    from stopdoctor.actions.stop_odds import Context, StopEvidence, StopOdds
    from stopdoctor.core.types import ChatTemplate
    from stopdoctor.runtimes.stops import RuntimeStops
    from stopdoctor.analysis.weights import WeightsReport
    from stopdoctor.rules.registry import Rule
    from stopdoctor.rules.results import InspectResult, LabelsResult, LogsResult

# Public names that live in modules only some commands need (labels, logs): imported when first
# asked for, so `inspect` does not pay for them (PEP 562).
_LAZY = {
    "COLLATORS": ("stopdoctor.labels.result", "COLLATORS"),  # labels settings
    "LabelSettings": ("stopdoctor.labels.result", "LabelSettings"),
    "RenderResult": ("stopdoctor.actions.render", "RenderResult"),
    "LOGS_READ_DONE": ("stopdoctor.logs.query", "RUNNING_DONE"),  # progress: read, analysing
    "check_budget": ("stopdoctor.actions.generate.request", "check_budget"),  # generate: a budget a diagnosis can use
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attribute = _LAZY[name]
        return getattr(importlib.import_module(module), attribute)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

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
    from stopdoctor.rules.runner import run_rules

    return _located(analysis.facts, run_rules(analysis))


def inspect_model(spec: str, revision: str | None = None, weights: bool = False,
                  against: str | None = None, lookups_only: bool = True) -> InspectResult:
    """`stopdoctor inspect`: read a model's files, analyse them, run the model rules; `weights`:
    also read the embedding/output rows that matter for stopping and run the weights rules;
    `against`: the original the model was converted or re-uploaded from (a spec), whose eos ids
    and sampling keys the model should still carry (SD107, SD108)."""
    from stopdoctor.rules.inputs import ComparisonInput
    from stopdoctor.rules.results import InspectResult
    from stopdoctor.rules.runner import run_rules

    with for_lookups() if lookups_only else nullcontext():  # check: tokenizer.json whole (its merges too)
        facts = load(spec, revision)
        original = load(against) if against is not None else None
    with render_deadline():  # one time limit for all of inspect's template renders
        analysis = analyze(facts)
        findings = model_findings(analysis)
        if original is not None:
            compared = analyze(original)
            findings = sorted([*findings, *_located(facts, run_rules(ComparisonInput(analysis, compared)))],
                              key=lambda f: (-f.severity, f.code))
    result = InspectResult(facts.source, facts, analysis, findings, original=compared if original is not None else None)
    return with_weights(result) if weights else result


def weights_findings(analysis: Analysis, weights: WeightsReport) -> list[Finding]:
    """The weights rules (SD8xx) on a model and the rows read from its weights."""
    from stopdoctor.rules.inputs import WeightsInput
    from stopdoctor.rules.runner import run_rules

    return _located(analysis.facts, run_rules(WeightsInput(analysis, weights)))


def with_weights(result: InspectResult) -> InspectResult:
    """`result` with its weight rows read and judged, and the weights findings added."""
    from stopdoctor.analysis.weights import analyze_weights  # numpy: only --weights reads rows

    report = analyze_weights(result.analysis)
    findings = sorted([*result.findings, *weights_findings(result.analysis, report)], key=lambda f: (-f.severity, f.code))
    return replace(result, findings=findings, weights=report)


def serving_findings(analysis: Analysis, serving: ServingConfig) -> list[Finding]:
    """The serving rules (SD4xx) on a model and one serving configuration deployed with it."""
    from stopdoctor.rules.inputs import ServingInput
    from stopdoctor.rules.runner import run_rules

    return _located(analysis.facts, run_rules(ServingInput(analysis, serving)))


def expectation_findings(analysis: Analysis, expectation: Expectation) -> list[Finding]:
    """The expectation rules (SD5xx): the model against what the project's configuration asserts."""
    from stopdoctor.rules.inputs import ExpectationInput
    from stopdoctor.rules.runner import run_rules

    return _located(analysis.facts, run_rules(ExpectationInput(analysis, expectation)))


def rules() -> list[Rule]:
    """Every registered rule, by code (SD000 check-crashed included)."""
    from stopdoctor.rules.runner import REGISTRY

    return [REGISTRY[code] for code in sorted(REGISTRY)]


def find_rule(code_or_name: str) -> Rule | None:
    """A rule by its code (SD101) or name (pad-is-eos), or None."""
    from stopdoctor.rules.runner import find

    return find(code_or_name)


def rule_codes(kinds: Iterable[type]) -> list[str]:
    """The codes of the rules that check these input kinds (`stopdoctor.rules.inputs`)."""
    from stopdoctor.rules.runner import rules_for

    return sorted(rule.code for kind in kinds for rule in rules_for(kind))


def inspect_report(result: InspectResult, fail_on: Severity = Severity.ERROR, command: str = "inspect") -> Report:
    """The one report of an inspected model, for any reporter."""
    from stopdoctor.rules.inputs import ComparisonInput, WeightsInput

    kinds = [Analysis] + ([WeightsInput] if result.weights is not None else []) + (
        [ComparisonInput] if result.original is not None else [])
    subject = Subject(result.source.spec, list(result.findings), tuple(rule_codes(kinds)),
                      _model_files(result.source), result)
    return Report(command, [subject], fail_on)


def _model_files(source: ModelSource) -> dict[str, Path]:
    return dict(source.files)


# --- logs ------------------------------------------------------------------------------------


def logs_findings(report: LogsSummary) -> list[Finding]:
    """The logs rules (SD7xx) on what the logs query counted."""
    from stopdoctor.rules.inputs import LogsInput
    from stopdoctor.rules.runner import run_rules

    return run_rules(LogsInput(report))


def analyze_log_files(paths: list[str], model: str | None = None, revision: str | None = None,
                      settings: LogsSettings | None = None, on_progress: Callable[[str, float], None] | None = None,
                      engine: str = "duckdb") -> LogsResult:
    """`stopdoctor logs`: read response logs (DuckDB, imported lazily; or Spark, `engine="spark"`) and check them."""
    from stopdoctor.rules.results import LogsResult
    from stopdoctor.logs.query import LogsSettings, analyze_logs
    from stopdoctor.logs.vocabulary import model_vocabulary

    vocabulary = model_vocabulary(model, revision) if model else None
    if engine == "spark":
        from stopdoctor.logs.spark import analyze_logs_spark

        report = analyze_logs_spark(paths, vocabulary, settings or LogsSettings())
    else:
        report = analyze_logs(paths, vocabulary, settings or LogsSettings(), on_progress)
    return LogsResult(report, logs_findings(report))


def logs_report(result: LogsResult, paths: list[str], fail_on: Severity = Severity.ERROR) -> Report:
    """The one report of a logs run: the log files are the subject."""
    from stopdoctor.rules.inputs import LogsInput

    files = {str(p): Path(p) for p in paths}
    subject = Subject(", ".join(str(p) for p in paths), list(result.findings), tuple(rule_codes([LogsInput])), files, result)
    return Report("logs", [subject], fail_on)


# --- labels ----------------------------------------------------------------------------------


def labels_findings(analysis: Analysis, labels: DatasetLabels) -> list[Finding]:
    """The labels rules (SD6xx) on a model and the labels built from a dataset."""
    from stopdoctor.rules.inputs import LabelsInput
    from stopdoctor.rules.runner import run_rules

    return _located(analysis.facts, run_rules(LabelsInput(analysis, labels)))


def check_labels(spec: str, data: str, settings=None, limit: int | None = None, revision: str | None = None,
                 progress=None) -> LabelsResult:
    """`stopdoctor labels`: build the training labels of a dataset and check its end-of-turns."""
    return check_labels_of(load(spec, revision), data, settings, limit, progress)


def check_labels_of(facts: ModelFacts, data: str, settings=None, limit: int | None = None,
                    progress=None) -> LabelsResult:
    """`check_labels` on a model already loaded."""
    from stopdoctor.rules.results import LabelsResult
    from stopdoctor.facts.datasets import count_examples, iter_examples
    from stopdoctor.labels.build import label_dataset
    from stopdoctor.labels.result import LabelSettings

    if limit is not None and limit < 1:  # here, not in the CLI: the API would judge an empty dataset clean
        raise InputError("--limit must be at least 1")
    analysis = analyze(facts)
    total = count_examples(data, limit)
    if not total:
        raise InputError(f"{Path(data).name}: holds no example")
    bad: list[str] = []  # malformed rows are counted and skipped, as logs does with bad lines
    labels = label_dataset(facts, analysis, iter_examples(data, limit, bad), str(data), settings or LabelSettings(),
                           progress, total)
    if not labels.examples and bad:
        raise InputError(f"{Path(data).name}: holds no valid example: {len(bad)} bad line(s), the first {bad[0]}",
                         "rows need messages (chat), prompt and completion, or text, one JSON object a line")
    labels.bad_lines.extend(bad)
    return LabelsResult(facts.source, facts, analysis, labels, labels_findings(analysis, labels))


def labels_report(result: LabelsResult, data: str, fail_on: Severity = Severity.ERROR) -> Report:
    """The one report of a labels run: the model and its dataset are the subject."""
    from stopdoctor.rules.inputs import LabelsInput

    files = {**_model_files(result.source), Path(data).name: Path(data)}
    subject = Subject(result.source.spec, list(result.findings), tuple(rule_codes([LabelsInput])), files, result)
    return Report("labels", [subject], fail_on)


# --- stop-odds -------------------------------------------------------------------------------


def stop_odds(spec: str, data: str | None = None, limit: int | None = None, device: str = "auto",
              revision: str | None = None, batch_size: int | None = None, allow_pickle: bool = False,
              progress: Callable[[str], None] | None = None) -> StopOdds:
    """`stopdoctor stop-odds`: P(end-of-turn) where the template closes the assistant turn, over
    reference conversations or the rows of `data`; a `stopdoctor.actions.stop_odds.StopOdds`.
    Loads the model with torch (imported here, lazily)."""
    from stopdoctor.actions.generate.local import require_torch
    from stopdoctor.actions.stop_odds import measure_stop_odds

    if limit is not None and limit < 1:
        raise InputError("--limit must be at least 1")
    if batch_size is not None and not 1 <= batch_size <= 1024:
        raise InputError("--batch-size must be between 1 and 1024")
    require_torch("stop-odds")  # before reading the model and the data: say so first, in this command's name
    return measure_stop_odds(spec, inspect_model(spec, revision), data, limit, device, batch_size, allow_pickle, progress)


# --- diff ------------------------------------------------------------------------------------


def diff_models(spec_a: str, spec_b: str, revision_a: str | None = None, revision_b: str | None = None) -> ModelDiff:
    """`stopdoctor diff A B`: what changed between two models; `diff_report` makes it the Report
    (a stop-relevant difference is a finding: exit 1)."""
    from stopdoctor.actions.diff import diff_analyses

    facts_a, facts_b = load(spec_a, revision_a), load(spec_b, revision_b)
    with render_deadline():
        return diff_analyses(analyze(facts_a), analyze(facts_b))


# --- render ----------------------------------------------------------------------------------


def read_conversations(path: str | Path) -> list[list[dict]]:
    """A JSON list of messages, or JSONL with one conversation a line, read through the input guards."""
    from stopdoctor.actions.render import load_conversations

    return load_conversations(path)


def read_tools(path: str | Path) -> list[dict]:
    """A JSON list of tool schemas, read through the input guards."""
    from stopdoctor.actions.render import load_tools

    return load_tools(path)


def read_template(path: Path) -> ChatTemplate:
    """A chat template from a file (Jinja text, or a tokenizer_config.json/chat_template.json)."""
    from stopdoctor.actions.render import template_from_file

    return template_from_file(path)


def training_template(path: Path) -> ChatTemplate:
    """A training template file for `labels --template` (Jinja text, named by its file name)."""
    from stopdoctor.core.types import ChatTemplate, Location
    from stopdoctor.facts.model_facts import load_text

    return ChatTemplate(path.name, load_text(path, path.name), Location(path.name))


def render_prompts(spec: str, conversations: list[list[dict]] | None = None, *, tools: list[dict] | None = None,
                   template: str | None = None, compare: str | None = None, add_generation_prompt: bool = True,
                   continue_final_message: bool = False, revision: str | None = None,
                   thinking: str | None = None, typed: bool = False) -> RenderResult:
    """`stopdoctor render`: the prompt the runtime builds for each conversation (the sample one when
    none is given), and with `compare` (a template file or a second model) the differences.
    `thinking` ("on", "off", "both"): a reasoning template rendered as `generate --thinking` calls it
    (both: each conversation twice, on then off). `typed`: the messages were typed on the command
    line (-m), so a role no chat format has and the template never names is refused as a typo."""
    from stopdoctor.actions.render import RenderRequest, render_conversations

    if thinking is not None and (template is not None or compare is not None):
        raise InputError("--thinking switches the model's own template; it does not go with --template or --compare",
                         hint="render each with --thinking on and off in two runs")
    request = RenderRequest(spec, conversations, tools, template, compare, add_generation_prompt,
                            continue_final_message, thinking, typed)
    return render_conversations(load(spec, revision), request, load)


# --- probe-stop ------------------------------------------------------------------------------


def stop_string(text: str) -> str:
    """A stop string as a command line gives it: \\n, \\t, \\r and \\\\ read as escapes (the one rule
    of every command that takes a stop string)."""
    from stopdoctor.actions.probe import parse_escapes

    return parse_escapes(text)


def probe_stops(spec: str, stops: list[str], *, from_template: bool = False, corpus: list[Path] | None = None,
                revision: str | None = None) -> ProbeReport:
    """`stopdoctor probe-stop`: how each stop string tokenizes after typical text with the model's
    tokenizer, where an id match misses it, and whether it fires inside ordinary answers (the
    built-in samples and each `corpus` file); a `stopdoctor.actions.probe.ProbeReport`."""
    from stopdoctor.actions.probe import probe_model, read_corpus

    samples = [read_corpus(path) for path in corpus or []]
    return probe_model(load(spec, revision), stops, from_template=from_template, corpus=samples,
                       corpus_files=[str(p) for p in corpus or []])


# --- logs ------------------------------------------------------------------------------------


def logs_settings(fields: list[str] | None = None, **thresholds: Any) -> LogsSettings:
    """`LogsSettings` for `analyze_log_files`: `fields` as NAME=$.PATH overrides, thresholds by name."""
    from stopdoctor.logs.query import LogsSettings, parse_field_overrides

    return LogsSettings(overrides=parse_field_overrides(fields or []), **thresholds)


def logs_sql(paths: list[str], model: str | None = None, revision: str | None = None,
             settings: LogsSettings | None = None) -> str:
    """The DuckDB SQL that normalises each log file (`logs --show-sql`), to run elsewhere."""
    from stopdoctor.logs.query import LogsSettings, show_sql
    from stopdoctor.logs.vocabulary import model_vocabulary

    return show_sql(paths, model_vocabulary(model, revision) if model else None,
                    settings if settings is not None else LogsSettings())


# --- serving files -----------------------------------------------------------------------------


def read_serving(path: Path, kind: str | None = None) -> ServingConfig:
    """A serving file (vLLM command line or YAML, Ollama Modelfile, llama.cpp command line, request
    body, the other engines' servers), its kind guessed when None."""
    from stopdoctor.runtimes.serving import load_serving

    return load_serving(path, kind)


# --- generate --------------------------------------------------------------------------------


@record
class GenerationPlan:
    """A `generate` request checked before the (slow) model load: the model's context, the prompts
    (two with thinking both), the stop set, and the reference answers a local run measures the
    weights on when it goes to the budget."""

    context: ModelContext
    prompts: list[Prompt]
    stops: RuntimeStops | None  # None for the fragment test
    reference: list[Context] | None = None

    @property
    def stop_set(self) -> RuntimeStops:
        """The stop set a generation stops on; a fragment-test plan has none (it runs `fragment_test`)."""
        if self.stops is None:
            raise TypeError("a fragment-test plan has no stop set: run it with fragment_test")
        return self.stops


def plan_generation(spec: str, revision: str | None = None, *, messages: list[dict] | None = None,
                    messages_file: Path | None = None, prompt: str | None = None, raw: bool = False,
                    thinking: str | None = None, stops: str | None = None, stop_ids: Iterable[int] = (),
                    stop_strings: Iterable[str] = (), max_new_tokens: int = 64, local: bool = True,
                    fragment: bool = False) -> GenerationPlan:
    """`stopdoctor generate`, before any model loads: the prompt rendered (with each thinking mode
    asked for), the stop set resolved (stop strings read with `stop_string`), the prompt checked
    against the model's context. The fragment test builds its own prompts and stops."""
    from stopdoctor.actions.generate.request import build_prompt, check_context, read_messages, resolve_stops
    from stopdoctor.actions.generate.run import load_context

    context = load_context(spec, revision)
    if fragment:
        return GenerationPlan(context, [], None)
    chat = messages if messages is not None else (read_messages(messages_file) if messages_file else None)
    if messages is not None:  # typed with -m: a role that is a typo is refused, as render refuses it
        from stopdoctor.actions.render import check_typed_roles

        check_typed_roles(context.facts.template, messages)
    from stopdoctor.analysis.reasoning_run import thinking_calls

    calls = thinking_calls(context.analysis.reasoning, thinking) if not raw else [None]
    prompts = [build_prompt(context.facts, messages=chat, prompt=prompt, raw=raw, thinking=call) for call in calls]
    stop_set = resolve_stops(context.analysis, stops, list(stop_ids), [stop_string(s) for s in stop_strings])
    reference = None
    if local:
        for built in prompts:
            check_context(context.facts, built, max_new_tokens)
        from stopdoctor.actions.stop_odds import reference_contexts

        # rendered now: if the run goes to the budget, these say whether the weights can end a turn
        reference = reference_contexts(context.facts, context.analysis)
    return GenerationPlan(context, prompts, stop_set, reference)


def check_device(device: str) -> None:
    """Refuse a `generate --device` that cannot be used, before the model or torch loads."""
    from stopdoctor.actions.generate.local import check_device as refuse_unusable

    refuse_unusable(device)


def local_engine(plan: GenerationPlan, device: str = "auto", allow_pickle: bool = False,
                 progress: Callable[[str], None] | None = None) -> LocalEngine:
    """The model loaded with transformers (torch, imported here, lazily)."""
    from stopdoctor.actions.generate.local import LocalEngine

    return LocalEngine.load(plan.context.facts, device=device, allow_pickle=allow_pickle, progress=progress)


def server_engine(plan: GenerationPlan, url: str, spec: str, route: str | None = None, model_name: str | None = None,
                  stream: bool = False, timeout: float = 300.0) -> ServerEngine:
    """An OpenAI-compatible server as the engine for `spec`; `timeout`: one request, connect to last byte."""
    from stopdoctor.actions.generate.server import ServerEngine

    engine = ServerEngine(url, route=route, model_name=model_name, timeout=timeout, facts=plan.context.facts, stream=stream)
    engine.pick_model(spec, plan.context.facts.source.root)
    return engine


def sampling(temperature: float = 0.0, top_p: float = 1.0, seed: int | None = None) -> Sampling:
    """Greedy at temperature 0, as every runtime's temperature=0 is; what no runtime takes is refused."""
    from stopdoctor.actions.generate.request import checked_sampling

    return checked_sampling(temperature, top_p, seed)


def generate(plan: GenerationPlan, engine: Engine, prompt: Prompt, max_new_tokens: int,
             how: Sampling | None = None) -> GenerateResult:
    """One generation of `prompt`, stopped as the plan's stop set says, and diagnosed: a
    `stopdoctor.actions.generate.run.GenerateResult`."""
    from stopdoctor.actions.generate.run import run_generate

    return run_generate(plan.context, engine, prompt, plan.stop_set, max_new_tokens, how or sampling())


def needs_stop_evidence(plan: GenerationPlan, result: GenerateResult) -> bool:
    """A local run that went to the budget with no sign of a runaway: measure whether the weights
    can end a turn at all (a budget spent thinking is said as such, not measured as weights)."""
    thinking_ran_out = result.reasoning is not None and result.reasoning.ran_out_thinking
    return (plan.reference is not None and result.generation.finish_reason == "length"
            and not result.diagnosis.runaway_signs and not thinking_ran_out)


def stop_evidence(plan: GenerationPlan, engine: Engine) -> StopEvidence:
    """P(end-of-turn) on reference answers and the end-of-turn rows: `actions.stop_odds.StopEvidence`."""
    from stopdoctor.actions.stop_odds import stop_evidence as measure

    return measure(plan.context.facts, plan.context.analysis, engine, plan.reference)


def run_generation(plan: GenerationPlan, engine: Engine, max_new_tokens: int, how: Sampling | None = None, served: bool = False,
                   stage: Callable[[str], AbstractContextManager[Any]] | None = None,
                   fixer: Callable[..., Any] | None = None) -> GenerationRuns:
    """`stopdoctor generate`: each prompt of the plan generated and diagnosed, with the fix line for
    the token that should have stopped it (`fixer`: `stopdoctor.fix.generate_fix`, which comes after
    this module; `served`: said for a server) and, for a local run that went to the budget, the stop
    evidence; `stage`: a context around each slow step, given what it does (the CLI's progress line).
    With `--thinking both` a run that fails is kept as failed and the other reported; a single run
    that fails raises."""
    from contextlib import nullcontext

    step = stage or (lambda message: nullcontext())
    runs, failed = [], []
    for built in plan.prompts:
        mode = "" if built.thinking == "default" else f" (thinking {built.thinking})"
        try:
            with step(f"generating up to {max_new_tokens} tokens{mode}…"):
                result = generate(plan, engine, built, max_new_tokens, how)
            missed = result.diagnosis.should_have_stopped
            fix = fixer(plan.context.analysis, missed.id, missed.text, plan.stop_set.runtime, served) if missed and fixer else None
            evidence = None
            if needs_stop_evidence(plan, result):
                with step("the run went to the budget: measuring whether the weights can end a turn…"):
                    evidence = stop_evidence(plan, engine)
            runs.append(GenerationRun(result, fix, evidence))
        except StopdoctorError as error:
            if len(plan.prompts) == 1:
                raise
            failed.append((built.thinking, error))  # `--thinking both`: keep the run that worked
    if not runs:
        raise failed[0][1]
    return GenerationRuns(tuple(runs), tuple(failed), both=len(plan.prompts) > 1)


def fragment_test(plan: GenerationPlan, engine: Engine, max_new_tokens: int) -> FragmentVerdict:
    """The quick base-vs-instruct probe by behaviour: a `FragmentVerdict`."""
    from stopdoctor.actions.generate.run import fragment_test as run_fragment_test

    return run_fragment_test(plan.context, engine, max_new_tokens)


# --- probe-server ----------------------------------------------------------------------------


def probe_server(url: str, model: str | None = None, api_key_env: str | None = None,
                 only: Iterable[str] | None = None, settings: ProbeSettings | None = None,
                 request_s: float | None = None) -> ServerProbeReport:
    """The probe battery against a live server (`actions.probe_server`): a `ServerProbeReport`.
    `api_key_env` names the variable holding the API key (never the key itself: it would land in
    shell history); `request_s` bounds one whole answer (default `Bounds.request_s`). An
    unreachable server or a bad URL raises InputError (exit 2)."""
    import os

    from stopdoctor.actions.probe_server.battery import Settings
    from stopdoctor.actions.probe_server.battery import probe_server as run_battery
    from stopdoctor.actions.probe_server.http import Bounds

    if settings is None and request_s is not None:
        settings = Settings(Bounds(request_s=request_s))

    api_key = None
    if api_key_env is not None:
        api_key = os.environ.get(api_key_env)
        if not api_key:
            raise InputError(f"--api-key-env {api_key_env}: the variable is not set or empty",
                             hint=f"export {api_key_env}=... before running, or leave the option out")
    return run_battery(url, model, api_key, settings or Settings(), only)


def probe_server_report(result: ServerProbeReport) -> Report:
    """The one report of a probe-server run: each failed probe an error finding, each warning a
    warning, so the exit code is 1 exactly when a probe fails."""
    severities = {"fail": Severity.ERROR, "warn": Severity.WARNING}
    findings = [Finding(p.name, p.name, severities[p.status], p.summary, "", evidence={"figures": p.figures})
                for p in result.probes if p.status in severities]
    return Report("probe-server", [Subject(result.url, findings, tuple(p.name for p in result.probes), result=result)])
