"""Mechanical fixes for defects that have exactly one safe change, as text edits with a diff.

Model folder (SD101, end-of-turn not a stop id of transformers/vLLM/TGI):
- generation_config.json exists: its `eos_token_id` value is replaced by a list of the old ids
  plus the end-of-turn id(s); the key is added when absent. Only the bytes of that value change.
- generation_config.json is absent but config.json exists: generation_config.json is created
  with config.json's top-level bos/eos/pad ids and the end-of-turn id added to eos. A new file
  rather than an edit of config.json, because TGI reads only a generation_config.json list.
- GGUF file: `tokenizer.ggml.eos_token_id` set to the end-of-turn id, in place, the tensors byte
  for byte the same (`writers.gguf_edit`); the advice `runtimes.advice` gives inspect and check.
- Hub models are not edited (they live in the cache).

Serving file (`--serving`):
- Ollama Modelfile: a `PARAMETER stop "<end-of-turn>"` line after the last PARAMETER line.
- vLLM: `--generation-config DIR` (or `generation-config:` in YAML) whose folder lacks the
  end-of-turn id becomes `auto`, so the model's own (fixed) generation_config.json is used.
- Request body: `"ignore_eos": true` becomes `false`.

Nothing here prints. Imports: core (errors, findings), analysis (as data), runtimes, serving.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

from stopdoctor.core.records import record
from stopdoctor.writers.edits import FileEdit, FixPlan
from stopdoctor.core.errors import InputError
from stopdoctor.core.findings import Finding
from stopdoctor.runtimes.advice import GGUF_EOS_KEY, gguf_eos_advice
from stopdoctor.runtimes.engines import hf_runtimes, serving_engine
from stopdoctor.runtimes.stops import tokenizer_eos

if TYPE_CHECKING:
    from stopdoctor.analysis.core import Analysis
    from stopdoctor.facts.serving import ServingConfig



# --- JSON text surgery ------------------------------------------------------------------------------

_WS = " \t\r\n\ufeff"


def top_level_spans(text: str) -> dict[str, tuple[int, int]]:
    """Key → (start, end) character span of its value in a JSON object's text, top level only."""
    return {key: (start, end) for key, (_, start, end) in _members(text).items()}


def _members(text: str) -> dict[str, tuple[int, int, int]]:
    """Key → (key start, value start, value end) for the top-level members of a JSON object."""
    decoder = json.JSONDecoder()
    i = _skip(text, 0)
    if i >= len(text) or text[i] != "{":
        raise ValueError("not a JSON object")
    i += 1
    spans: dict[str, tuple[int, int, int]] = {}
    while True:
        i = _skip(text, i)
        if text[i] == "}":
            return spans
        if text[i] != '"':
            raise ValueError(f"expected a key at {i}")
        key_start = i
        key, i = json.decoder.scanstring(text, i + 1)  # type: ignore[attr-defined]  # public in CPython, missing in typeshed
        i = _skip(text, i)
        if text[i] != ":":
            raise ValueError(f"expected ':' at {i}")
        start = _skip(text, i + 1)
        _, end = decoder.raw_decode(text, start)
        spans[key] = (key_start, start, end)
        i = _skip(text, end)
        if text[i] == ",":
            i += 1


def _skip(text: str, i: int) -> int:
    while i < len(text) and text[i] in _WS:
        i += 1
    return i


def format_ids(ids: list[int], old_value: str) -> str:
    """A JSON list of ids in the style of the value it replaces (one line, or one id a line)."""
    if "\n" in old_value and old_value.startswith("["):
        inner = re.search(r"\[\s*?\n([ \t]*)", old_value)
        closing = re.search(r"\n([ \t]*)\]$", old_value)
        indent = inner.group(1) if inner else "  "
        return "[\n" + ",\n".join(f"{indent}{i}" for i in ids) + "\n" + (closing.group(1) if closing else "") + "]"
    return "[" + ", ".join(str(i) for i in ids) + "]"


def set_top_level_ids(text: str, key: str, ids: list[int]) -> str:
    """Replace (or add) the top-level `key` with the list `ids`, changing no other byte."""
    members = _members(text)
    if key in members:
        _, start, end = members[key]
        return text[:start] + format_ids(ids, text[start:end]) + text[end:]
    value = format_ids(ids, "")
    brace = _skip(text, 0)
    if not members:
        newline = "\r\n" if "\r\n" in text else "\n"
        close = text.index("}", brace)
        return text[: brace + 1] + f'{newline}  "{key}": {value}{newline}' + text[close:]
    first = min(k for k, _, _ in members.values())
    between = text[brace + 1: first]  # the newline and indentation before the first key
    return text[:first] + f'"{key}": {value},' + between + text[first:]


def set_top_level_literal(text: str, key: str, literal: str) -> str:
    start, end = top_level_spans(text)[key]
    return text[:start] + literal + text[end:]


# --- planning ---------------------------------------------------------------------------------------


def plan_fixes(analysis: Analysis, serving: ServingConfig | None = None) -> FixPlan:
    edits: list[FileEdit] = []
    notes: list[str] = []
    fixes: list[str] = []
    model_edit = _model_edit(analysis, notes)
    if model_edit is not None:
        edits.append(model_edit)
        fixes += ["SD101", "SD106"]  # the end-of-turn becomes a stop id, and so there is one (SD106)
    if serving is not None:
        serving_edits = _serving_edits(analysis, serving, notes)
        edits.extend(serving_edits)
        if serving_edits:  # a request body's edit turns ignore_eos off; the others add the missing stop
            fixes.append("SD405" if serving.kind == "request" else "SD401")
    return FixPlan(tuple(edits), tuple(notes), tuple(dict.fromkeys(fixes)))


def remaining_findings(findings: list[Finding], plan: FixPlan) -> list[Finding]:
    """The findings the plan's edits leave in place: those with no mechanical fix (a template made
    for another tokenizer, a serving flag only a person can choose), most severe first."""
    return sorted((f for f in findings if f.code not in plan.fixes), key=lambda f: (-f.severity, f.code))


def _missing_end_ids(analysis: Analysis) -> list[int]:
    """The safe end-of-turn ids to add when an HF runtime stops on none of them."""
    if not any(analysis.misses_end_of_turn(s.ids) for s in analysis.stops if s.runtime in hf_runtimes()):
        return []
    return [i for i in analysis.primary_stop_ids() if analysis.stop_hazard(i) is None]


def _model_edit(analysis: Analysis, notes: list[str]) -> FileEdit | None:
    facts = analysis.facts
    missing = _missing_end_ids(analysis)
    if not missing:
        return None
    if facts.is_gguf:
        return _gguf_edit(analysis, missing, notes)
    source = facts.source
    if source.kind != "folder":
        notes.append(f"{source.spec} is a hub model: download it to a folder to fix generation_config.json "
                     f"(eos_token_id must include {missing})")
        return None
    generation = source.files.get("generation_config.json")
    if generation is not None:
        text = generation.read_bytes().decode("utf-8")
        document = facts.documents.get("generation_config.json", {})
        current = _ids(document.get("eos_token_id"))
        # no eos_token_id yet: keep the eos the tokenizer (else config.json) declares beside the new ids
        base = current or _ids(facts.documents.get("config.json", {}).get("eos_token_id")) or [
            d.id for d in tokenizer_eos(facts) if d.id is not None]
        wanted = analysis.suggested_stop_ids(base)
        after = set_top_level_ids(text, "eos_token_id", wanted)
        return FileEdit(generation, "generation_config.json", text, after,
                        f"eos_token_id {current} → {wanted}: add the end-of-turn id(s) {missing}")
    if "config.json" in source.files:
        config = facts.documents.get("config.json", {})
        current = _ids(config.get("eos_token_id"))
        wanted = analysis.suggested_stop_ids(current or [d.id for d in tokenizer_eos(facts) if d.id is not None])
        created: dict = {}
        if isinstance(config.get("bos_token_id"), int):
            created["bos_token_id"] = config["bos_token_id"]
        created["eos_token_id"] = wanted
        if isinstance(config.get("pad_token_id"), int):
            created["pad_token_id"] = config["pad_token_id"]
        after = json.dumps(created, indent=2) + "\n"
        return FileEdit(source.root / "generation_config.json", "generation_config.json", None, after,
                        f"create generation_config.json with eos_token_id {wanted} (config.json has {current})")
    notes.append(f"no config.json or generation_config.json to fix; eos_token_id must include {missing}")
    return None


def _gguf_edit(analysis: Analysis, missing: list[int], notes: list[str]):
    """The GGUF's eos set to the end-of-turn id (`runtimes.advice`: the advice inspect and check give)."""
    from stopdoctor.writers.gguf_edit import GgufKeyEdit

    facts = analysis.facts
    path = next(iter(facts.source.files.values()))
    label = path.name
    if facts.source.kind == "hub":
        notes.append(f"{facts.source.spec} is in the hub cache: download it and run {gguf_eos_advice(label, missing[0])}")
        return None
    current = facts.gguf.eos_id
    return GgufKeyEdit(path, label, GGUF_EOS_KEY, current, missing[0],
                       f"{GGUF_EOS_KEY} {current} → {missing[0]}: the end-of-turn "
                       f"{facts.vocab.text_of(missing[0])} becomes the eos every runtime stops on (tensors unchanged)")


def _ids(value) -> list[int]:
    if isinstance(value, bool):
        return []
    if isinstance(value, int):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, int) and not isinstance(v, bool)]
    return []


def _serving_edits(analysis: Analysis, serving: ServingConfig, notes: list[str]) -> list[FileEdit]:
    from stopdoctor.api import serving_findings

    findings = serving_findings(analysis, serving)
    codes = {f.code for f in findings}
    text = serving.text
    label = serving.path.name
    served = serving_engine(serving.kind)
    fix_edit = served.fix_edit if served is not None else None
    if fix_edit == "stop-strings":
        wanted = []
        for finding in findings:
            if finding.code != "SD401":
                continue
            for text in finding.evidence.get("end_of_turns") or [finding.evidence.get("end_of_turn")]:
                if text and text not in wanted:
                    wanted.append(text)
        if not wanted:
            return []
        after = _add_modelfile_stops(serving, wanted)
        return [FileEdit(serving.path, label, text, after, f"add PARAMETER stop for {', '.join(wanted)}")]
    if serving.kind == "request" and "SD405" in codes:
        try:
            after = set_top_level_literal(text, "ignore_eos", "false")
        except (ValueError, KeyError) as exc:
            raise InputError(f"{serving.path}: cannot edit ignore_eos: {exc}") from exc
        return [FileEdit(serving.path, label, text, after, "ignore_eos true → false")]
    if fix_edit == "generation-config" and served is not None and "SD401" in codes:
        choice = str(serving.generation_config.value) if serving.generation_config else "auto"
        if choice in served.own_generation_config:
            return []  # the model's own generation_config.json is what needs the fix
        replaced = _replace_vllm_generation_config(serving)
        if replaced is None:
            notes.append(f"{serving.path}: set --generation-config auto (the folder {choice} lacks the end-of-turn id)")
            return []
        return [FileEdit(serving.path, label, text, replaced, f"--generation-config {choice} → auto")]
    for finding in findings:
        if finding.code in ("SD401", "SD402", "SD405", "SD407") and served is not None and served.fix_notes:
            notes.append(f"{finding.code} {finding.name}: {finding.fix}")
    return []


def _add_modelfile_stops(serving: ServingConfig, stops: list[str]) -> str:
    from stopdoctor.facts.serving import modelfile_commands

    text = serving.text
    newline = "\r\n" if "\r\n" in text else "\n"
    lines = text.splitlines(keepends=True)
    parameter_lines = [line for cmd, _, line in modelfile_commands(serving.path, text) if cmd.startswith("PARAMETER ")]
    added = "".join(f"PARAMETER stop {json.dumps(stop, ensure_ascii=False)}{newline}" for stop in stops)
    if parameter_lines:
        at = max(parameter_lines)  # 1-based line of the last PARAMETER: insert after it
        if not lines[at - 1].endswith(("\n", "\r")):
            lines[at - 1] += newline
        return "".join(lines[:at]) + added + "".join(lines[at:])
    if text and not text.endswith(("\n", "\r")):
        text += newline
    return text + added


def _replace_vllm_generation_config(serving: ServingConfig) -> str | None:
    text = serving.text
    if serving.path.suffix.lower() in (".yaml", ".yml"):
        pattern = re.compile(r"(?m)^(\s*generation[-_]config\s*:\s*)(\S.*?)(\s*)$")
    else:
        pattern = re.compile(r"(--generation-config(?:=|\s+))('[^']*'|\"[^\"]*\"|[^\s\\]+)")
    matches = list(pattern.finditer(text))
    if len(matches) != 1:
        return None
    match = matches[0]
    return text[: match.start(2)] + "auto" + text[match.end(2):]


@record
class GenerateFix:
    """The fix `generate` prints under a runaway: one line, with the file and key to change when
    there is one (as `inspect` names them)."""

    text: str
    file: str | None = None
    key: str | None = None


def generate_fix(analysis: Analysis, missed_id: int | None, missed_text: str | None, stop_source: str,
                 server: bool) -> GenerateFix | None:
    """Where to make the model stop on `missed_id`, the turn-ending token it ran past. `stop_source`
    is the generate stop set's source ("transformers", "vllm", "llama.cpp", "--stop-id", ...)."""
    if missed_id is None or analysis.stop_hazard(missed_id) is not None:
        return None  # never suggest a stop the safe-stop rule refuses
    shown = f"{missed_text} (id {missed_id})" if missed_text else f"id {missed_id}"
    if server:
        quoted = json.dumps(missed_text) if missed_text else None
        ollama = f'; Ollama PARAMETER stop {quoted}' if quoted else ""
        return GenerateFix(
            f'make the server stop on {shown}: per request "stop_token_ids": [{missed_id}] (vLLM, TGI); llama.cpp '
            f"--override-kv tokenizer.ggml.eot_token_id=int:{missed_id}{ollama}; then check its configuration with "
            f"stopdoctor check MODEL --serving FILE")
    if stop_source == "--stop-id":  # the ids were the user's own, in place of the model's
        return GenerateFix(f"add --stop-id {missed_id}")
    facts = analysis.facts
    if facts.is_gguf:
        return GenerateFix(f"serve it with llama.cpp --override-kv tokenizer.ggml.eot_token_id=int:{missed_id} "
                           f"(a GGUF is not edited)", None, "tokenizer.ggml.eot_token_id")
    edit = _model_edit(analysis, [])
    if edit is None:
        return GenerateFix(f"add {missed_id} to the stop ids (generation_config.json eos_token_id)",
                           "generation_config.json", "eos_token_id")
    wanted = json.loads(edit.after).get("eos_token_id")
    return GenerateFix(f'set generation_config.json "eos_token_id": {json.dumps(wanted)}', "generation_config.json",
                       "eos_token_id")


# --- the `fix` command: judged as `check` judges, planned, staged, written ----------------------

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from stopdoctor.config import Settings
    from stopdoctor.core.findings import Severity
    from stopdoctor.rules.verdicts import FixOutcome


@record
class PreparedFix:
    """A fix planned and (with write) staged beside its targets, nothing changed yet: `outcome` says
    what the edits would do and what would remain; `commit` renames the staged files into place."""

    outcome: FixOutcome
    fail_on: Severity  # check's fail-on: what remains at or above it fails
    staged: object | None  # stopdoctor.writers.edits staged files, None without write or edits
    rejudge: Callable[[], list[Finding]]

    def commit(self) -> FixOutcome:
        """Write the staged files; what remains is then what `check` says of the written files, not
        what the plan expected."""
        from dataclasses import replace

        self.staged.commit()  # type: ignore[attr-defined]
        return replace(self.outcome, written=True, remaining=tuple(self.rejudge()))

    def discard(self) -> None:
        """Remove what was staged and not committed (nothing once committed)."""
        if self.staged is not None:
            self.staged.discard()  # type: ignore[attr-defined]


def prepare_fix(spec: str, serving: Path | None = None, kind: str | None = None, revision: str | None = None, *,
                write: bool = False, backup: bool = False, settings: Settings | None = None) -> PreparedFix:
    """`stopdoctor fix`: the model (and a serving file) judged with check's configuration
    (select/ignore/severities, fail-on: the same verdict as `check`), the safe edits planned, and
    with `write` each new file staged beside its target before anything is said: each refusal (a
    link, a FILE.bak in the way, a full disk, a GGUF the editor will not rewrite) is one line and
    nothing changed. A hub model's files are the shared cache: `plan_fixes` plans no edit there."""
    from stopdoctor.api import inspect_model, read_serving, serving_findings
    from stopdoctor.config import apply, load_settings
    from stopdoctor.rules.verdicts import FixOutcome

    chosen = settings if settings is not None else load_settings()

    def judged():
        config = read_serving(serving, kind) if serving is not None else None
        result = inspect_model(spec, revision)
        findings = list(result.findings) + (serving_findings(result.analysis, config) if config is not None else [])
        return config, result, [f for f in apply(chosen, findings) if f.severity >= chosen.fail_on]

    config, result, failing = judged()
    plan = plan_fixes(result.analysis, config)
    staged = None
    if write and plan.edits:
        try:
            staged = plan.stage(backup=backup)
        except InputError as error:  # one line: what was refused, and what to do
            raise InputError(error.message + (f" ({error.hint})" if error.hint else "")) from None
    outcome = FixOutcome(spec, plan, False, tuple(remaining_findings(failing, plan)))
    return PreparedFix(outcome, chosen.fail_on, staged, lambda: judged()[2])
