"""The gate's settings, and which rules they select: nothing runs here.

Settings come from `stopdoctor.toml` or `[tool.stopdoctor]` in pyproject.toml (searched from the
current directory upward, or `--config FILE`), then `STOPDOCTOR_*` environment variables, then
flags; later layers replace earlier ones key by key. Unknown keys are an error naming the key and
the file: a misspelt `fail_on` must not silently turn a gate off. Every expect-* key keeps its line
in the file, so a finding about it points at the right `[[model]]` table.
`stopdoctor.gate.run_gate` runs what the settings select.
Imports: core, facts (the file reader), rules (the registry, for selectors).
"""

from __future__ import annotations

import dataclasses
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import field
from pathlib import Path
from typing import Any

from stopdoctor.core.errors import InputError
from stopdoctor.core.findings import Finding, Severity
from stopdoctor.core.records import record
from stopdoctor.core.types import MODEL_KINDS, Expectation
from stopdoctor.facts.lines import line_at
from stopdoctor.facts.model_facts import load_text
from stopdoctor.rules.registry import Rule
from stopdoctor.reporters.formats import FORMATS as REPORT_FORMATS
from stopdoctor.rules.runner import REGISTRY

CONFIG_NAMES = ("stopdoctor.toml", "pyproject.toml")
MAX_CONFIG_BYTES = 4_000_000  # a pyproject.toml is a few kB  # first match per directory wins
FORMATS = tuple(REPORT_FORMATS)  # every format a Report renders to
ENV_PREFIX = "STOPDOCTOR_"
# A selector is a code prefix ("SD", "SD1", "SD203") or a check name ("pad-is-eos").
PREFIX = re.compile(r"^SD\d{0,3}$", re.IGNORECASE)

TOP_KEYS = {"models", "serving", "fail-on", "select", "ignore", "severity", "model", "format"}
MODEL_KEYS = {"path", "revision", "serving", "expect-kind", "expect-end-of-turn", "expect-stops"}


@record
class ModelEntry:
    """One model to check: its spec (a folder, .gguf file or hub id), and what goes with it."""

    spec: str
    revision: str | None = None
    serving: tuple[Path, ...] = ()
    expectation: Expectation | None = None


@record
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
            tool = _read_toml(pyproject)[0].get("tool")
            if isinstance(tool, dict) and "stopdoctor" in tool:
                return pyproject
    return None


def _read_toml(path: Path) -> tuple[dict[str, Any], str]:
    text = load_text(path, str(path), max_bytes=MAX_CONFIG_BYTES)  # a regular file, UTF-8, small
    try:
        return tomllib.loads(text), text
    except tomllib.TOMLDecodeError as error:
        raise InputError(f"{path}: not valid TOML: {error}") from None
    except RecursionError:
        raise InputError(f"{path}: TOML nested too deeply") from None
    except ValueError as error:  # an integer longer than int() converts
        raise InputError(f"{path}: not valid TOML: {str(error).splitlines()[0]}") from None


def read_config(path: Path) -> Settings:
    """The settings one file declares; relative paths in it are relative to its folder."""
    document, text = _read_toml(path)
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
    return _settings_from_table(table, path, prefix, text)


def _settings_from_table(table: dict[str, Any], path: Path, prefix: str, text: str = "") -> Settings:
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
            _expectation(entry, path, where(key), _entry_lines(text, prefix, index)),
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


def _entry_lines(text: str, prefix: str, index: int) -> tuple[tuple[str, int], ...]:
    """(key, line) of the expect-* keys in the index-th `[[model]]` table of the config text: the
    table runs from its header to the next table header."""
    header = re.compile(rf"^[ \t]*\[\[[ \t]*{re.escape(prefix)}model[ \t]*\]\]", re.MULTILINE)
    starts = [m.end() for m in header.finditer(text)]
    if index >= len(starts):
        return ()
    following = re.compile(r"^[ \t]*\[", re.MULTILINE).search(text, starts[index])
    end = following.start() if following else len(text)
    lines = []
    for key in ("expect-kind", "expect-end-of-turn", "expect-stops"):
        found = re.compile(rf"^[ \t]*[\"']?{re.escape(key)}[\"']?[ \t]*=", re.MULTILINE).search(text, starts[index], end)
        if found:
            lines.append((key, line_at(text, found.start())))
    return tuple(lines)


def _expectation(entry: dict[str, Any], path: Path, where: str, lines: tuple[tuple[str, int], ...] = ()) -> Expectation | None:
    kind = _optional_string(entry, "expect-kind", where)
    if kind is not None and kind not in MODEL_KINDS:
        raise InputError(f"{where}.expect-kind: {kind!r} is not one of {', '.join(MODEL_KINDS)}")
    end_of_turn = _optional_string(entry, "expect-end-of-turn", where)
    stops = _list(entry.get("expect-stops", []), f"{where}.expect-stops")
    if any(isinstance(s, bool) or not isinstance(s, (str, int)) for s in stops):
        raise InputError(f"{where}.expect-stops: must list token texts or token ids")
    if kind is None and end_of_turn is None and not stops:
        return None
    return Expectation(kind, end_of_turn, tuple(stops), str(path), lines)


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


def matches(selector: str, rule: Rule) -> int:
    """How specifically `selector` names `rule`: 0 not at all, else a rank (a name or a full code
    outranks a prefix, a longer prefix a shorter one)."""
    key = selector.strip()
    if key.lower() == rule.name or key.upper() == rule.code:
        return 10
    if PREFIX.match(key) and rule.code.startswith(key.upper()):
        return len(key)
    return 0


def _validate_selectors(settings: Settings, where: str) -> None:
    for kind, selectors in (("select", settings.select), ("ignore", settings.ignore), ("severity", tuple(settings.severity))):
        for selector in selectors:
            if not any(matches(selector, c) for c in REGISTRY.values()):
                raise InputError(f"{where}: {kind} {selector!r} names no rule",
                                 hint="use a code (SD101), a prefix (SD1) or a name (pad-is-eos); `stopdoctor rules` lists them")


def selected(settings: Settings, rule: Rule) -> bool:
    """Selected and not ignored; the more specific selector wins (select SD1 + ignore SD104, or
    ignore SD1 + select SD104). SD000 check-crashed is kept unless ignored by name or code: a crash
    must not vanish because of a prefix."""
    chosen = max((matches(s, rule) for s in settings.select), default=0) if settings.select else 1
    dropped = max((matches(s, rule) for s in settings.ignore), default=0)
    if rule.code == "SD000":
        return dropped < 10
    return chosen > dropped


def severity_of(settings: Settings, rule: Rule) -> Severity | None:
    """The configured severity for `rule`, most specific selector first; None: keep the finding's own."""
    ranked = [(matches(s, rule), level) for s, level in settings.severity.items()]
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
