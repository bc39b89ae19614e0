"""The `check` gate: its settings and the run that applies them.

Settings come from `stopdoctor.toml` or `[tool.stopdoctor]` in pyproject.toml (searched from the
current directory upward, or `--config FILE`), then `STOPDOCTOR_*` environment variables, then
flags; later layers replace earlier ones key by key. Unknown keys are an error naming the key and
the file: a misspelt `fail_on` must not silently turn a gate off.

`run_gate` runs inspect on each model (and the serving files deployed with it), applies
select/ignore and per-code severities, and returns one `GateReport`; a model that cannot be loaded
is recorded with its error and the others still run. No printing, no exiting.
Imports: errors, model, report, checks, api; `serving` (part of the package from issue 5) lazily.
"""

from __future__ import annotations

import dataclasses
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stopdoctor.rules.runner import REGISTRY
from stopdoctor.rules.registry import Check
from stopdoctor.rules.expect import KINDS, Expectation, expecting
from stopdoctor.core.errors import EXIT_CANNOT_RUN, EXIT_FINDINGS, EXIT_OK, InputError, StopdoctorError, shorten
from stopdoctor.facts.model_facts import load_text
from stopdoctor.core.findings import Finding, Severity, exit_code

try:  # the SD4xx serving checks register on import; select/ignore and SARIF rules must see them
    from stopdoctor.rules import serving as _serving_checks  # noqa: F401
except ModuleNotFoundError as _missing:
    if _missing.name != f"{__package__}.checks.serving":
        raise

CONFIG_NAMES = ("stopdoctor.toml", "pyproject.toml")
MAX_CONFIG_BYTES = 4_000_000  # a pyproject.toml is a few kB  # first match per directory wins
FORMATS = ("human", "json", "sarif", "junit", "github")
ENV_PREFIX = "STOPDOCTOR_"
# A selector is a code prefix ("SD", "SD1", "SD203") or a check name ("pad-is-eos").
PREFIX = re.compile(r"^SD\d{0,3}$", re.IGNORECASE)

TOP_KEYS = {"models", "serving", "fail-on", "select", "ignore", "severity", "model", "format"}
MODEL_KEYS = {"path", "revision", "serving", "expect-kind", "expect-end-of-turn", "expect-stops"}


@dataclass(frozen=True)
class ModelEntry:
    """One model to check: its spec (a folder, .gguf file or hub id), and what goes with it."""

    spec: str
    revision: str | None = None
    serving: tuple[Path, ...] = ()
    expectation: Expectation | None = None


@dataclass(frozen=True)
class Settings:
    models: tuple[ModelEntry, ...] = ()
    serving: tuple[Path, ...] = ()  # deployed with every model
    fail_on: Severity = Severity.ERROR
    select: tuple[str, ...] = ()  # empty: every check
    ignore: tuple[str, ...] = ()
    severity: Mapping[str, Severity] = field(default_factory=dict)  # selector -> severity
    format: str = "human"
    config_file: Path | None = None


# ------------------------------------------------------------------------------------------
# Finding and reading the configuration


def find_config(start: Path) -> Path | None:
    """The nearest stopdoctor.toml, or pyproject.toml with a [tool.stopdoctor] table, at or above `start`."""
    for folder in (start.resolve(), *start.resolve().parents):
        own = folder / "stopdoctor.toml"
        if own.is_file():
            return own
        pyproject = folder / "pyproject.toml"
        if pyproject.is_file():
            tool = _read_toml(pyproject).get("tool")
            if isinstance(tool, dict) and "stopdoctor" in tool:
                return pyproject
    return None


def _read_toml(path: Path) -> dict[str, Any]:
    text = load_text(path, str(path), max_bytes=MAX_CONFIG_BYTES)  # a regular file, UTF-8, small
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise InputError(f"{path}: not valid TOML: {error}") from None
    except RecursionError:
        raise InputError(f"{path}: TOML nested too deeply") from None
    except ValueError as error:  # an integer longer than int() converts
        raise InputError(f"{path}: not valid TOML: {str(error).splitlines()[0]}") from None


def read_config(path: Path) -> Settings:
    """The settings one file declares; relative paths in it are relative to its folder."""
    document = _read_toml(path)
    if path.name == "pyproject.toml":
        tool = document.get("tool", {})
        table = tool.get("stopdoctor") if isinstance(tool, dict) else None
        if table is None:
            raise InputError(f"{path}: has no [tool.stopdoctor] table")
        if not isinstance(table, dict):
            raise InputError(f"{path}: tool.stopdoctor must be a table ([tool.stopdoctor]), found {type(table).__name__}")
        prefix = "tool.stopdoctor."
    else:
        table, prefix = document, ""
    return _settings_from_table(table, path, prefix)


def _settings_from_table(table: dict[str, Any], path: Path, prefix: str) -> Settings:
    _no_unknown(table, TOP_KEYS, path, prefix)
    folder = path.parent
    where = lambda key: f"{path}: {prefix}{key}"  # noqa: E731 - error prefix
    models = [ModelEntry(_model_spec(spec, folder)) for spec in _strings(table.get("models", []), where("models"))]
    for index, entry in enumerate(_list(table.get("model", []), where("model"))):
        key = f"model[{index}]"
        if not isinstance(entry, dict):
            raise InputError(f"{where(key)}: must be a table ([[{prefix}model]])")
        _no_unknown(entry, MODEL_KEYS, path, f"{prefix}{key}.")
        if "path" not in entry or not isinstance(entry["path"], str):
            raise InputError(f"{where(key)}: needs path = \"<model folder, .gguf file or hub id>\"")
        models.append(ModelEntry(
            _model_spec(entry["path"], folder),
            _optional_string(entry, "revision", where(key)),
            tuple(folder / s for s in _strings(entry.get("serving", []), where(f"{key}.serving"))),
            _expectation(entry, path, where(key)),
        ))
    settings = Settings(
        models=merge_models(models),
        serving=tuple(folder / s for s in _strings(table.get("serving", []), where("serving"))),
        select=tuple(_strings(table.get("select", []), where("select"))),
        ignore=tuple(_strings(table.get("ignore", []), where("ignore"))),
        config_file=path,
    )
    if "fail-on" in table:
        settings = dataclasses.replace(settings, fail_on=_severity(table["fail-on"], where("fail-on")))
    if "format" in table:
        settings = dataclasses.replace(settings, format=_format(table["format"], where("format")))
    severities = table.get("severity", {})
    if not isinstance(severities, dict):
        raise InputError(f"{where('severity')}: must be a table of CODE = \"error|warning|info\"")
    settings = dataclasses.replace(settings, severity={
        selector: _severity(value, where(f"severity.{selector}")) for selector, value in severities.items()
    })
    _validate_selectors(settings, str(path))
    return settings


def _no_unknown(table: dict[str, Any], known: set[str], path: Path, prefix: str) -> None:
    for key in table:
        if key not in known:
            near = [k for k in known if k.replace("-", "") == key.replace("_", "").replace("-", "")]
            hint = f"did you mean {near[0]!r}?" if near else f"known keys: {', '.join(sorted(known))}"
            raise InputError(f"{path}: unknown key {prefix}{key}", hint=hint)


def _model_spec(spec: str, folder: Path) -> str:
    # Relative to the config file when it names something there; otherwise a hub id (org/name).
    if not spec.strip():  # "" would name the config's own folder
        raise InputError(f"{folder}: an empty model path in the stopdoctor configuration",
                         hint="name a model folder, a .gguf file or a hub id")
    local = folder / Path(spec).expanduser()
    return str(local) if _exists(local) else spec


def _expectation(entry: dict[str, Any], path: Path, where: str) -> Expectation | None:
    kind = _optional_string(entry, "expect-kind", where)
    if kind is not None and kind not in KINDS:
        raise InputError(f"{where}.expect-kind: {kind!r} is not one of {', '.join(KINDS)}")
    end_of_turn = _optional_string(entry, "expect-end-of-turn", where)
    stops = _list(entry.get("expect-stops", []), f"{where}.expect-stops")
    if any(isinstance(s, bool) or not isinstance(s, (str, int)) for s in stops):
        raise InputError(f"{where}.expect-stops: must list token texts or token ids")
    if kind is None and end_of_turn is None and not stops:
        return None
    return Expectation(kind, end_of_turn, tuple(stops), str(path))


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise InputError(f"{where}: must be a list")
    return value


def _strings(value: Any, where: str) -> list[str]:
    items = _list(value, where)
    if not all(isinstance(item, str) for item in items):
        raise InputError(f"{where}: must be a list of strings")
    return items


def _optional_string(table: dict[str, Any], key: str, where: str) -> str | None:
    value = table.get(key)
    if value is not None and not isinstance(value, str):
        raise InputError(f"{where}.{key}: must be a string")
    return value


def _severity(value: Any, where: str) -> Severity:
    try:
        return Severity.parse(value) if isinstance(value, str) else Severity.parse(repr(value))
    except ValueError as error:
        raise InputError(f"{where}: {error}") from None


def _format(value: Any, where: str) -> str:
    if value not in FORMATS:
        raise InputError(f"{where}: unknown format {value!r} (use {', '.join(FORMATS)})")
    return value


# ------------------------------------------------------------------------------------------
# Layering: file, then environment, then flags


ENV_KEYS = ("CONFIG", "MODELS", "SERVING", "FAIL_ON", "SELECT", "IGNORE", "SEVERITY", "FORMAT")


def from_environment(settings: Settings, environ: Mapping[str, str]) -> Settings:
    """STOPDOCTOR_MODELS / _SERVING / _SELECT / _IGNORE are comma-separated lists,
    STOPDOCTOR_SEVERITY is `SD203=error,SD104=info`, STOPDOCTOR_FAIL_ON and _FORMAT single values.
    Other STOPDOCTOR_* variables (STOPDOCTOR_DEBUG, STOPDOCTOR_CONFIG) are not settings here."""
    def items(name: str) -> list[str] | None:
        value = environ.get(ENV_PREFIX + name)
        return None if value is None else [part.strip() for part in value.split(",") if part.strip()]

    changes: dict[str, Any] = {}
    if (models := items("MODELS")) is not None:
        changes["models"] = merge_models(_entry_for(spec, settings) for spec in models)
    if (serving := items("SERVING")) is not None:
        changes["serving"] = tuple(Path(s) for s in serving)
    for name, key in (("SELECT", "select"), ("IGNORE", "ignore")):
        if (value := items(name)) is not None:
            changes[key] = tuple(value)
    if (pairs := items("SEVERITY")) is not None:
        severity = dict(settings.severity)
        for pair in pairs:
            selector, equals, level = pair.partition("=")
            if not equals:
                raise InputError(f"{ENV_PREFIX}SEVERITY: {pair!r} is not CODE=level")
            severity[selector.strip()] = _severity(level.strip(), f"{ENV_PREFIX}SEVERITY {selector.strip()}")
        changes["severity"] = severity
    if (fail_on := environ.get(ENV_PREFIX + "FAIL_ON")) is not None:
        changes["fail_on"] = _severity(fail_on, f"{ENV_PREFIX}FAIL_ON")
    if (format_ := environ.get(ENV_PREFIX + "FORMAT")) is not None:
        changes["format"] = _format(format_, f"{ENV_PREFIX}FORMAT")
    settings = dataclasses.replace(settings, **changes)
    _validate_selectors(settings, "the environment")
    return settings


def with_flags(settings: Settings, *, models: list[str] | None = None, revision: str | None = None,
               serving: list[str] | None = None, fail_on: str | None = None, select: list[str] | None = None,
               ignore: list[str] | None = None, format: str | None = None) -> Settings:
    """Flags replace what the file and the environment said (None: not given). A model given on
    the command line keeps the expectations and serving files the configuration declares for it."""
    changes: dict[str, Any] = {}
    if models:
        entries = [_entry_for(spec, settings) for spec in models]
        changes["models"] = merge_models(dataclasses.replace(e, revision=revision) if revision else e for e in entries)
    if serving:
        changes["serving"] = tuple(Path(s) for s in serving)
    if fail_on is not None:
        changes["fail_on"] = _severity(fail_on, "--fail-on")
    if select:
        changes["select"] = tuple(_split(select))
    if ignore:
        changes["ignore"] = tuple(_split(ignore))
    if format is not None:
        changes["format"] = _format(format, "--format")
    settings = dataclasses.replace(settings, **changes)
    _validate_selectors(settings, "the command line")
    return settings


def _split(values: list[str]) -> list[str]:
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


def _entry_for(spec: str, settings: Settings) -> ModelEntry:
    """The configured entry for `spec` when it names the same model (its expectation and serving
    files included), else a bare one."""
    wanted = _same_model_key(spec)
    for entry in settings.models:
        if _same_model_key(entry.spec) == wanted:
            return dataclasses.replace(entry, spec=spec)
    return ModelEntry(spec)


def merge_models(entries) -> tuple[ModelEntry, ...]:
    """One entry per model (same resolved path, or same hub id and revision), in first-seen order:
    a model listed in `models = [...]` and again in `[[model]]` is checked once, with the
    expectation and serving files of both (the later expectation's keys win)."""
    merged: dict[tuple[str, str | None], ModelEntry] = {}
    for entry in entries:
        key = (_same_model_key(entry.spec), entry.revision)
        seen = merged.get(key)
        if seen is None:
            merged[key] = entry
            continue
        merged[key] = dataclasses.replace(
            seen,
            serving=tuple(dict.fromkeys((*seen.serving, *entry.serving))),
            expectation=_merge_expectations(seen.expectation, entry.expectation),
        )
    return tuple(merged.values())


def _merge_expectations(first: Expectation | None, second: Expectation | None) -> Expectation | None:
    if first is None or second is None:
        return first or second
    return dataclasses.replace(first, kind=second.kind or first.kind,
                               end_of_turn=second.end_of_turn or first.end_of_turn,
                               stops=second.stops or first.stops)


def _same_model_key(spec: str) -> str:
    path = Path(spec).expanduser()
    return str(path.resolve()) if _exists(path) else spec


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except OSError:  # a name too long for the file system names nothing there
        return False


def load_settings(*, config: Path | None = None, cwd: Path | None = None,
                  environ: Mapping[str, str] | None = None) -> Settings:
    """The file layer (explicit, STOPDOCTOR_CONFIG, or found upward from `cwd`) plus the environment."""
    environ = os.environ if environ is None else environ
    if config is None and environ.get(ENV_PREFIX + "CONFIG"):
        config = Path(environ[ENV_PREFIX + "CONFIG"])
    if config is not None:
        if not config.is_file():
            raise InputError(f"{config}: config file not found")
        settings = read_config(config)
    else:
        found = find_config(cwd or Path.cwd())
        settings = read_config(found) if found else Settings()
    return from_environment(settings, environ)


# ------------------------------------------------------------------------------------------
# Selecting checks and adjusting severities


def matches(selector: str, check: Check) -> int:
    """How specifically `selector` names `check`: 0 not at all, else a rank (a name or a full code
    outranks a prefix, a longer prefix a shorter one)."""
    key = selector.strip()
    if key.lower() == check.name or key.upper() == check.code:
        return 10
    if PREFIX.match(key) and check.code.startswith(key.upper()):
        return len(key)
    return 0


def _validate_selectors(settings: Settings, where: str) -> None:
    for kind, selectors in (("select", settings.select), ("ignore", settings.ignore), ("severity", tuple(settings.severity))):
        for selector in selectors:
            if not any(matches(selector, c) for c in REGISTRY.values()):
                raise InputError(f"{where}: {kind} {selector!r} names no check",
                                 hint="use a code (SD101), a prefix (SD1) or a name (pad-is-eos); `stopdoctor rules` lists them")


def selected(settings: Settings, check: Check) -> bool:
    """Selected and not ignored; the more specific selector wins (select SD1 + ignore SD104, or
    ignore SD1 + select SD104). SD000 check-crashed is kept unless ignored by name or code: a crash
    must not vanish because of a prefix."""
    chosen = max((matches(s, check) for s in settings.select), default=0) if settings.select else 1
    dropped = max((matches(s, check) for s in settings.ignore), default=0)
    if check.code == "SD000":
        return dropped < 10
    return chosen > dropped


def severity_of(settings: Settings, check: Check) -> Severity | None:
    """The configured severity for `check`, most specific selector first; None: keep the finding's own."""
    ranked = [(matches(s, check), level) for s, level in settings.severity.items()]
    ranked = [r for r in ranked if r[0]]
    return max(ranked, key=lambda r: r[0])[1] if ranked else None


def apply(settings: Settings, findings: list[Finding]) -> list[Finding]:
    kept = []
    for finding in findings:
        check = REGISTRY.get(finding.code)
        if check is None:  # a finding from a check not in the registry: keep it as it is
            kept.append(finding)
            continue
        if not selected(settings, check):
            continue
        level = severity_of(settings, check)
        kept.append(finding if level is None else dataclasses.replace(finding, severity=level))
    return sorted(kept, key=lambda f: (-f.severity, f.code))


# ------------------------------------------------------------------------------------------
# Running the gate


@dataclass(frozen=True)
class ModelCheck:
    """The outcome for one model: findings (filtered, severities applied) or the error that stopped it."""

    spec: str
    result: Any = None  # api.InspectResult, None when the model could not be checked
    findings: list[Finding] = field(default_factory=list)
    checks: tuple[str, ...] = ()  # codes of the checks that ran on it
    serving: tuple[Path, ...] = ()
    error: StopdoctorError | None = None
    failed_target: str | None = None  # what could not be read: the model or a serving file
    live: Any = None  # generate.FragmentVerdict of the --live probe, None when it did not run

    @property
    def error_line(self) -> str | None:
        """The error in one line, naming what could not be checked."""
        if self.error is None:
            return None
        target = shorten(self.failed_target or self.spec, 80)
        return self.error.message if target in self.error.message else f"{target}: {self.error.message}"

    @property
    def files(self) -> dict[str, Path]:
        return dict(self.result.source.files) if self.result is not None else {}


@dataclass(frozen=True)
class GateReport:
    models: list[ModelCheck]
    fail_on: Severity
    config_file: Path | None = None
    levels: Mapping[str, Severity] = field(default_factory=dict)  # each check's level after [severity]

    @property
    def findings(self) -> list[Finding]:
        return [f for m in self.models for f in m.findings]

    @property
    def failed(self) -> list[ModelCheck]:
        return [m for m in self.models if m.error is not None]

    def exit_code(self, exit_zero: bool = False) -> int:
        """2 when any model or serving file could not be checked (the rest are still reported),
        else 1 when a finding reaches fail-on (0 with exit_zero), else 0."""
        if self.failed:
            return EXIT_CANNOT_RUN
        code = exit_code(self.findings, self.fail_on)
        return EXIT_OK if exit_zero and code == EXIT_FINDINGS else code


def checks_run(settings: Settings, serving: bool, expectation: bool) -> tuple[str, ...]:
    """The selected checks that apply to a model: SD4xx only with serving files, SD501 only with
    an expectation, SD000 never (it stands for crashes, reported only when one happens)."""
    codes = []
    for code in sorted(REGISTRY):
        check = REGISTRY[code]
        if code == "SD000" or not selected(settings, check):
            continue
        if code.startswith("SD4") and not serving:
            continue
        if code.startswith("SD5") and not expectation:
            continue
        codes.append(code)
    return tuple(codes)


def run_gate(settings: Settings, live: bool = False) -> GateReport:
    """`live`: also run the generate fragment probe on each model (torch; see `live_findings`)."""
    if not settings.models:
        raise InputError("no model to check",
                         hint="pass MODEL arguments, or list models in stopdoctor.toml / [tool.stopdoctor] models")
    from stopdoctor.api import inspect_model

    serving_cache: dict[Path, Any] = {}
    outcomes = []
    for entry in settings.models:
        serving_files = tuple(dict.fromkeys(p.resolve() for p in (*settings.serving, *entry.serving)))
        try:
            with expecting(entry.expectation):
                result = inspect_model(entry.spec, entry.revision)
        except StopdoctorError as error:
            outcomes.append(ModelCheck(entry.spec, serving=serving_files, error=error, failed_target=entry.spec))
            continue
        findings = list(result.findings)
        probe = None
        if live:
            try:
                probe = live_probe(result)
                findings.extend(live_findings(result, entry.expectation, probe))
            except StopdoctorError as error:
                outcomes.append(ModelCheck(entry.spec, result, apply(settings, findings), serving=serving_files,
                                           error=error, failed_target=f"{entry.spec} (live probe)"))
                continue
        for path in serving_files:
            try:
                findings.extend(_serving_findings(result.analysis, path, serving_cache))
            except StopdoctorError as error:
                outcomes.append(ModelCheck(entry.spec, result, apply(settings, findings), serving=serving_files,
                                           error=error, failed_target=str(path), live=probe))
                break
        else:
            codes = checks_run(settings, bool(serving_files), entry.expectation is not None or live)
            outcomes.append(ModelCheck(entry.spec, result, apply(settings, findings), codes, serving_files, live=probe))
    levels = {code: severity_of(settings, check) or check.severity for code, check in REGISTRY.items()}
    return GateReport(outcomes, settings.fail_on, settings.config_file, levels)


def require_live() -> None:
    """--live needs the generate runtime and torch: fail before the static run, not after it."""
    from stopdoctor.core.errors import MissingDependencyError

    try:
        from stopdoctor.actions.generate.run import fragment_test  # noqa: F401 - presence is the check
        from stopdoctor.actions.generate.local import require_torch
    except ModuleNotFoundError as missing:
        if missing.name != f"{__package__}.generate":
            raise
        raise MissingDependencyError("--live needs the generate probe (stopdoctor.actions.generate.run), which this stopdoctor lacks",
                                     hint="drop --live for the static checks") from None
    except ImportError:
        raise MissingDependencyError("--live needs stopdoctor.generate.fragment_test, which this stopdoctor lacks",
                                     hint="drop --live for the static checks") from None
    require_torch()


def live_probe(result: Any) -> Any:
    """Run the fragment probe (does the model answer and end its turn, or continue text?) on the
    model's weights: a `generate.FragmentVerdict`."""
    from stopdoctor.actions.generate.local import LocalEngine
    from stopdoctor.actions.generate.run import ModelContext, fragment_test

    return fragment_test(ModelContext(result.facts, result.analysis), LocalEngine.load(result.facts))


def live_findings(result: Any, expectation: Expectation | None, verdict: Any = None) -> list[Finding]:
    """The fragment probe's verdict held against the expected kind (SD501); without one, against
    the static verdict only when that was sure, since a mismatch there means the files describe
    another model. `verdict`: the probe already run (else it runs here)."""
    if verdict is None:
        verdict = live_probe(result)
    check = REGISTRY["SD501"]
    wanted = expectation.kind if expectation and expectation.kind else None
    static = result.analysis.verdict.kind if result.analysis.verdict else "unknown"
    target = wanted or (static if static in KINDS else None)
    if target is None or verdict.verdict not in KINDS or verdict.verdict == target:
        return []
    source = "expect-kind" if wanted else "its files (static verdict)"
    location = expectation.location("expect-kind") if wanted and expectation else None
    return [check.finding(f"live probe: expected a {target} model per {source}, it behaves as {verdict.verdict}: {verdict.reason}",
                          "serve the checkpoint the configuration names, or fix its chat template and stop ids",
                          location, expected=target, found=verdict.verdict, probe="fragment")]


def _serving_findings(analysis: Any, path: Path, cache: dict[Path, Any]) -> list[Finding]:
    from stopdoctor.api import serving_findings
    from stopdoctor.facts.serving import load_serving

    if path not in cache:
        cache[path] = load_serving(path)
    return serving_findings(analysis, cache[path])
