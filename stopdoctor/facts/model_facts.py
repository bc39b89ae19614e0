"""Read a `ModelSource` into one `ModelFacts`: every declared id, token, template and hint, each
with the file and key it came from, so that a finding can point at the line to fix.

`load_model(spec, revision)` is where every command starts: resolve the spec, read the facts.

Plain JSON / GGUF-header reading: no transformers, no torch.
Imports: core, and facts (vocab, resolve; gguf lazily).
"""

from __future__ import annotations

import dataclasses
import json
import re
import stat
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stopdoctor.core.errors import InputError
from stopdoctor.core.records import record
from stopdoctor.core.types import ChatTemplate, Location, ModelSource, Sourced
from stopdoctor.facts.lines import MAX_TEXT_CHARS, json_key_lines, key_line
from stopdoctor.facts.resolve import resolve
from stopdoctor.facts.vocab import Vocabulary, read_added_tokens_decoder, read_added_tokens_json, mark_declared_special, read_gguf_vocab, lone_surrogate, read_tokenizer_file

ROLES = ("bos", "eos", "pad", "unk", "eot", "eom")
# Config files larger than this are not model configuration (real ones stay under a few MB;
# tokenizer.json, read by the tokenizers library, has its own cap in vocab.py); refusing protects
# the memory of a CI runner from a hostile folder.
MAX_JSON_BYTES = 16_000_000
MAX_TEXT_BYTES = 64_000_000
# json.loads builds ~70 bytes per array/object from 2-3 bytes of text: 16 MB of `[],[],…` would
# cost 370 MB. A real tokenizer_config.json with 256k added tokens holds ~260k objects.
MAX_JSON_CONTAINERS = 2_000_000
# Model cards: only the YAML front matter at the top is read.
MAX_CARD_CHARS = 256 * 1024
# Each declared id costs a vocabulary lookup and appears in findings; real lists hold < 10.
MAX_DECLARED_IDS = 1024
# The sampling keys of generation_config.json read as facts (transformers GenerationConfig names).
HF_SAMPLING_KEYS = ("do_sample", "temperature", "top_p", "top_k", "min_p", "repetition_penalty", "presence_penalty")
# llama.cpp's GGUF sampling keys (gguf-py/gguf/constants.py Keys.General.SAMPLING_*, llama.cpp
# vendored by llama-cpp-python 0.3.36; gguf-py/gguf/metadata.py fills them from
# generation_config.json at conversion) under the generation_config.json name they come from.
GGUF_SAMPLING_KEYS = {"general.sampling.temp": "temperature", "general.sampling.top_p": "top_p",
                      "general.sampling.top_k": "top_k", "general.sampling.min_p": "min_p",
                      "general.sampling.penalty_repeat": "repetition_penalty"}
# Nested configs of composite models (vision-language, encoder-decoder) that carry the text
# model's ids; transformers' GenerationConfig.from_model_config looks at the same names.
NESTED_TEXT_CONFIGS = ("text_config", "decoder", "generator", "language_config", "llm_config", "language")


@record
class DeclaredId:
    """One declaration of a special id: `role` (eos, bos, pad, unk, eot, eom), the id (None when a
    token text could not be mapped to an id), the token text when known, and where it was declared."""

    role: str
    id: int | None
    text: str | None
    location: Location


@dataclass
class ModelFacts:
    source: ModelSource
    documents: dict[str, Any] = field(default_factory=dict)  # parsed JSON per file name
    vocab: Vocabulary = field(default_factory=Vocabulary)
    declared: list[DeclaredId] = field(default_factory=list)
    templates: list[ChatTemplate] = field(default_factory=list)
    add_bos: Sourced[bool] | None = None
    names: list[Sourced[str]] = field(default_factory=list)
    architectures: list[str] = field(default_factory=list)
    sampling: dict[str, Sourced[Any]] = field(default_factory=dict)
    base_model: Sourced[str] | None = None
    card_tags: list[str] = field(default_factory=list)
    gguf: Any = None
    notes: list[str] = field(default_factory=list)
    # file name -> key path -> line, recorded where each JSON file is parsed (json_key_lines)
    key_lines: dict[str, dict[str, int]] = field(default_factory=dict, repr=False, compare=False)
    _texts: dict[str, str | None] = field(default_factory=dict, repr=False, compare=False)

    def locate(self, location: Location | None) -> Location | None:
        """`location` with its line filled in when it names a key of one of the model's text files
        (each such file read once, here, so no reporter reads it again)."""
        if location is None or location.line is not None or not location.key or location.file not in self.source.files:
            return location
        if location.file.endswith(".json") and location.file not in self.key_lines:
            self.key_lines[location.file] = json_key_lines(self._text(location.file) or "")
        if location.file in self.key_lines:
            line = _path_line(self.key_lines[location.file], location.key)
        else:
            line = key_line(self._text(location.file), location.key)
        return location if line is None else dataclasses.replace(location, line=line)

    def _text(self, file: str) -> str | None:
        """A model text file, read once (None when binary, too large or unreadable)."""
        if file not in self._texts:
            path = self.source.files[file]
            try:
                small = path.suffix.lower() not in (".gguf", ".safetensors", ".bin") and path.stat().st_size <= MAX_TEXT_CHARS
                self._texts[file] = path.read_text(encoding="utf-8") if small else None
            except (OSError, UnicodeDecodeError):
                self._texts[file] = None
        return self._texts[file]

    # --- convenient views -------------------------------------------------------------
    def declared_for(self, role: str, file: str | None = None) -> list[DeclaredId]:
        return [d for d in self.declared if d.role == role and (file is None or d.location.file == file)]

    @property
    def tokenizer_files(self) -> tuple[str, str]:
        """Where a tokenizer object's special tokens come from, first match wins. transformers
        lets special_tokens_map.json override tokenizer_config.json when the latter has no
        `added_tokens_decoder` (legacy saves; tokenization_utils_base `from_pretrained`)."""
        if "added_tokens_decoder" in self.documents.get("tokenizer_config.json", {}):
            return ("tokenizer_config.json", "special_tokens_map.json")
        return ("special_tokens_map.json", "tokenizer_config.json")

    def token_text(self, role: str) -> str | None:
        """The token text a template sees as `<role>_token` (as transformers passes it)."""
        for file in self.tokenizer_files:
            for declared in self.declared_for(role, file):
                if declared.text is not None:
                    return declared.text
        for declared in self.declared_for(role):
            if declared.id is not None and (text := self.vocab.text_of(declared.id)) is not None:
                return text
        return None

    @property
    def template(self) -> ChatTemplate | None:
        """The template a runtime uses when none is named."""
        for template in self.templates:
            if template.name == "default":
                return template
        return self.templates[0] if self.templates else None

    @property
    def has(self) -> set[str]:
        return set(self.source.files)

    @property
    def is_gguf(self) -> bool:
        return self.gguf is not None

    def special_token_texts(self) -> dict[str, str]:
        """The named special tokens a template sees (`bos_token`, `eos_token`, …), as
        transformers passes them to `apply_chat_template`."""
        out = {}
        for role in ("bos", "eos", "unk", "sep", "pad", "cls", "mask"):
            text = self.token_text(role) if role in ROLES else self._named_token(role)
            if text is not None:
                out[f"{role}_token"] = text
        return out

    def _named_token(self, role: str) -> str | None:
        for file in self.tokenizer_files:
            text = _token_content(self.documents.get(file, {}).get(f"{role}_token"))
            if text is not None:
                return text
        return None


# --- reading -------------------------------------------------------------------------------


def _read_regular(path: Path, name: str, max_bytes: int, what: str) -> bytes:
    """The bytes of a regular file of at most `max_bytes`. Anything else (a named pipe or a device
    would block or never end) is refused before it is opened."""
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            raise InputError(f"{name}: is not a regular file (a pipe, socket or device)", hint="give a file")
        if info.st_size > max_bytes:
            raise InputError(f"{name}: {info.st_size / 1e6:.1f} MB is larger than the {max_bytes / 1e6:.0f} MB {what} can be")
        with path.open("rb") as handle:
            raw = handle.read(max_bytes + 1)  # the file may have grown since stat
    except OSError as exc:
        raise InputError(f"{name}: cannot be read: {exc.strerror or exc}") from exc
    if len(raw) > max_bytes:
        raise InputError(f"{name}: is larger than the {max_bytes / 1e6:.0f} MB {what} can be")
    return raw


def _path_line(lines: Mapping[str, int], key: str) -> int | None:
    """The line of key path `key`, else of the nearest enclosing path recorded (a deeper key than
    json_key_lines records points at its container)."""
    path = key
    while path:
        if path in lines:
            return lines[path]
        cut = max(path.rfind("."), path.rfind("["))
        path = path[:cut] if cut > 0 else ""
    return None


def load_json(path: Path, name: str, max_bytes: int = MAX_JSON_BYTES) -> Any:
    return parse_json(_json_text(path, name, max_bytes), name)


def load_json_lines(path: Path, name: str, max_bytes: int = MAX_JSON_BYTES) -> tuple[Any, dict[str, int]]:
    """The parsed file and the line of each of its key paths (`json_key_lines`), read together."""
    text = _json_text(path, name, max_bytes)
    return parse_json(text, name), json_key_lines(text)


def _json_text(path: Path, name: str, max_bytes: int) -> str:
    raw = _read_regular(path, name, max_bytes, "a configuration file")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{name}: is not UTF-8 text (byte {exc.start})") from exc


def parse_json(text: str, name: str, hint: str | None = "runtimes fail to load this file too; fix the JSON syntax") -> Any:
    """json.loads for untrusted files: every way it can fail is one InputError, and what it builds
    stays small (a bounded count of arrays/objects, no lone surrogates)."""
    containers = text.count("[") + text.count("{")  # an upper bound: brackets inside strings count too
    if containers > MAX_JSON_CONTAINERS:
        raise InputError(f"{name}: holds about {containers} JSON arrays/objects, more than the "
                         f"{MAX_JSON_CONTAINERS} a configuration file can have")
    try:
        # NaN, Infinity and a float past float64 (1e999) are no JSON numbers: read as null (unset), so
        # no report's JSON ever holds them
        value = json.loads(text, parse_constant=lambda constant: None, parse_float=_finite_float)
    except json.JSONDecodeError as exc:
        raise InputError(f"{name}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}", hint=hint) from exc
    except RecursionError as exc:
        raise InputError(f"{name}: JSON nested too deeply") from exc
    except ValueError as exc:  # an integer of more digits than int() converts (sys.get_int_max_str_digits)
        raise InputError(f"{name}: holds an integer of more than {sys.get_int_max_str_digits()} digits",
                         hint="no configuration value needs an integer that long") from exc
    if _SURROGATE_ESCAPE.search(text) and (found := _lone_surrogate(value)) is not None:
        where, char = found
        raise InputError(f"{name}: {where} holds a lone surrogate (\\u{ord(char):04x}), which is not Unicode text",
                         hint="runtimes cannot encode it either; write the character itself or a valid surrogate pair")
    return value


def _finite_float(text: str) -> float | None:
    value = float(text)
    return value if abs(value) != float("inf") else None


# "\\uD800".."\\uDFFF" in the JSON text: only then can the parsed value hold a lone surrogate.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _lone_surrogate(value: Any) -> tuple[str, str] | None:
    """(key path, character) of the first string or key in `value` holding a lone surrogate."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            if (char := lone_surrogate(item)) is not None:
                return where or "a value", char
        elif isinstance(item, dict):
            for key, child in item.items():
                if isinstance(key, str) and (char := lone_surrogate(key)) is not None:
                    return f"a key of {where or 'the document'}", char
                stack.append((child, f"{where}.{key}" if where else str(key)))
        elif isinstance(item, list):
            stack.extend((child, f"{where}[{i}]") for i, child in enumerate(item))
    return None


def load_text(path: Path, name: str, max_bytes: int = MAX_TEXT_BYTES, encoding: str = "utf-8") -> str:
    raw = _read_regular(path, name, max_bytes, "this file")
    try:
        return raw.decode(encoding)
    except UnicodeDecodeError as exc:
        raise InputError(f"{name}: is not UTF-8 text (byte {exc.start})") from exc


def load_model(spec: str, revision: str | None = None) -> ModelFacts:
    """The facts of a MODEL spec (a folder, a hub id, a .gguf file): `resolve`, then `load_facts`."""
    return load_facts(resolve(spec, revision))


def load_facts(source: ModelSource) -> ModelFacts:
    facts = ModelFacts(source=source)
    if source.kind == "gguf":
        _read_gguf(facts, next(iter(source.files.values())))
        return facts
    for name in ("config.json", "generation_config.json", "tokenizer_config.json", "special_tokens_map.json",
                 "added_tokens.json", "chat_template.json"):
        if name in source.files:
            document, facts.key_lines[name] = load_json_lines(source.files[name], name)
            if not isinstance(document, dict):
                raise InputError(f"{name}: expected a JSON object {{…}}, found {_shape(document)}",
                                 hint="runtimes fail to load this file too")
            facts.documents[name] = document
    _read_vocab(facts)
    _read_ids(facts)
    _mark_special(facts)
    _read_templates(facts)
    _read_hints(facts)
    return facts


def _read_vocab(facts: ModelFacts) -> None:
    vocab = facts.vocab
    docs = facts.documents
    if "tokenizer.json" in facts.source.files:
        read_tokenizer_file(vocab, facts.source.files["tokenizer.json"])
    decoder = docs.get("tokenizer_config.json", {}).get("added_tokens_decoder")
    if isinstance(decoder, dict):
        read_added_tokens_decoder(vocab, decoder)
    if "added_tokens.json" in docs:
        read_added_tokens_json(vocab, docs["added_tokens.json"])
    size = docs.get("config.json", {}).get("vocab_size")
    if isinstance(size, int) and not isinstance(size, bool):
        vocab.declared_size = size


def _id_values(value: Any, file: str, key: str) -> list[int] | None:
    """An *_token_id value: int, list of ints, or null. Anything else is a file the runtimes reject."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return [value]
    if isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        _check_id_count(len(value), file, key)
        return list(value)
    raise InputError(
        f"{file}: {key} must be an integer or a list of integers, found {json.dumps(value)[:60]}",
        hint="write the token id, e.g. \"eos_token_id\": [128001, 128009]",
    )


def _check_id_count(count: int, file: str, key: str) -> None:
    if count > MAX_DECLARED_IDS:
        raise InputError(f"{file}: {key} lists {count} ids, more than the {MAX_DECLARED_IDS} stopdoctor reads",
                         hint="a model stops on a handful of ids; this list is not a real configuration")


def _token_content(value: Any) -> str | None:
    # tokenizer_config.json stores special tokens as a string or a serialized AddedToken.
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    return None


def _read_ids(facts: ModelFacts) -> None:
    docs = facts.documents
    for file in ("generation_config.json", "config.json"):
        document = docs.get(file)
        if document is None:
            continue
        scopes: list[tuple[str, Mapping[str, Any]]] = [("", document)]
        if file == "config.json":
            scopes += [(f"{name}.", document[name]) for name in NESTED_TEXT_CONFIGS if isinstance(document.get(name), dict)]
        for prefix, scope in scopes:
            for role in ("bos", "eos", "pad", "unk"):
                key = f"{prefix}{role}_token_id"
                ids = _id_values(scope.get(f"{role}_token_id"), file, key)
                for token_id in ids or ():
                    facts.declared.append(DeclaredId(role, token_id, facts.vocab.text_of(token_id), Location(file, key)))
    for file in ("tokenizer_config.json", "special_tokens_map.json"):
        document = docs.get(file)
        if document is None:
            continue
        for role in ("bos", "eos", "pad", "unk"):
            text = _token_content(document.get(f"{role}_token"))
            if text is not None:
                facts.declared.append(DeclaredId(role, facts.vocab.id_of(text), text, Location(file, f"{role}_token")))


def _mark_special(facts: ModelFacts) -> None:
    texts = [d.text for d in facts.declared if d.text is not None and d.location.file in ("tokenizer_config.json", "special_tokens_map.json")]
    for file in ("tokenizer_config.json", "special_tokens_map.json"):
        extra = facts.documents.get(file, {}).get("additional_special_tokens")
        if isinstance(extra, list):
            texts += [t for t in map(_token_content, extra) if t is not None]
    mark_declared_special(facts.vocab, texts)


def _read_templates(facts: ModelFacts) -> None:
    files = facts.source.files
    # transformers loads chat_template.jinja in preference to the tokenizer_config.json entry.
    if "chat_template.jinja" in files:
        source = load_text(files["chat_template.jinja"], "chat_template.jinja")
        facts.templates.append(ChatTemplate("default", source, Location("chat_template.jinja")))
    value = facts.documents.get("tokenizer_config.json", {}).get("chat_template")
    location = Location("tokenizer_config.json", "chat_template")
    if isinstance(value, str):
        facts.templates.append(ChatTemplate("default", value, location))
    elif isinstance(value, list):
        for index, entry in enumerate(value):
            # transformers reads each entry as entry["name"], entry["template"]: anything else makes
            # it fail to load the tokenizer, so it must not pass here as "no chat template".
            if not (isinstance(entry, dict) and isinstance(entry.get("name"), str) and isinstance(entry.get("template"), str)):
                raise InputError(f"tokenizer_config.json: chat_template[{index}] is not a {{\"name\": …, \"template\": …}} "
                                 f"object of two strings (found {_shape(entry)})",
                                 hint="transformers cannot load this tokenizer either; fix the entry or use a single template string")
            facts.templates.append(ChatTemplate(entry["name"], entry["template"], Location(location.file, f"chat_template[{index}]")))
    elif value is not None:
        raise InputError("tokenizer_config.json: chat_template must be a string or a list of {name, template}")
    processor = facts.documents.get("chat_template.json", {}).get("chat_template")
    if processor is not None and not isinstance(processor, str):
        raise InputError(f"chat_template.json: chat_template must be a string (found {_shape(processor)})")
    if isinstance(processor, str):
        facts.templates.append(ChatTemplate("default", processor, Location("chat_template.json", "chat_template")))
    for name, path in files.items():
        if name.startswith("additional_chat_templates/"):
            facts.templates.append(ChatTemplate(Path(name).stem, load_text(path, name), Location(name)))


def _shape(value: object) -> str:
    """What a JSON value is, in a few words, for an error line (never the value itself: it may be huge)."""
    if isinstance(value, dict):
        keys = ", ".join(repr(k) for k in list(value)[:4])
        return f"an object with keys {keys}" if value else "an empty object"
    return {list: "a list", str: "a string", bool: "a boolean", int: "a number", float: "a number",
            type(None): "null"}.get(type(value), type(value).__name__)


def _read_hints(facts: ModelFacts) -> None:
    docs = facts.documents
    config = docs.get("config.json", {})
    if isinstance(config.get("_name_or_path"), str) and config["_name_or_path"]:
        facts.names.append(Sourced(config["_name_or_path"], Location("config.json", "_name_or_path")))
    if isinstance(config.get("architectures"), list):
        facts.architectures = [a for a in config["architectures"] if isinstance(a, str)]
    tokenizer_config = docs.get("tokenizer_config.json", {})
    if isinstance(tokenizer_config.get("name_or_path"), str) and tokenizer_config["name_or_path"]:
        facts.names.append(Sourced(tokenizer_config["name_or_path"], Location("tokenizer_config.json", "name_or_path")))
    facts.names.append(Sourced(_spec_name(facts.source), Location("(model name)")))
    generation = docs.get("generation_config.json", {})
    for key in HF_SAMPLING_KEYS:
        if key in generation:
            facts.sampling[key] = Sourced(generation[key], Location("generation_config.json", key))
    facts.add_bos = _add_bos(facts)
    if "README.md" in facts.source.files:
        card = _card_metadata(load_text(facts.source.files["README.md"], "README.md")[:MAX_CARD_CHARS])
        base = card.get("base_model")
        if isinstance(base, list):
            base = base[0] if base else None
        if isinstance(base, str):
            facts.base_model = Sourced(base, Location("README.md", "base_model"))
        tags = card.get("tags")
        facts.card_tags = [t for t in tags if isinstance(t, str)] if isinstance(tags, list) else []


def _spec_name(source: ModelSource) -> str:
    if source.kind == "hub":
        return source.spec
    if source.kind == "gguf":
        return next(iter(source.files))
    return source.root.resolve().name


def _add_bos(facts: ModelFacts) -> Sourced[bool] | None:
    tokenizer_config = facts.documents.get("tokenizer_config.json", {})
    # transformers' Llama/Gemma tokenizer classes rebuild the post-processor from this flag.
    if isinstance(tokenizer_config.get("add_bos_token"), bool):
        return Sourced(tokenizer_config["add_bos_token"], Location("tokenizer_config.json", "add_bos_token"))
    if facts.vocab.tokenizer_file is None:
        return None
    bos = facts.token_text("bos")
    processor = facts.vocab.post_processor
    processors = processor.get("processors", []) if isinstance(processor, dict) and processor.get("type") == "Sequence" else [processor]
    for proc in processors:
        if isinstance(proc, dict) and proc.get("type") == "TemplateProcessing":
            single = proc.get("single") or []
            first = single[0] if single else {}
            special = s if isinstance(first, dict) and isinstance(s := first.get("SpecialToken"), dict) else None
            adds = bool(special and (bos is None or special.get("id") == bos))
            return Sourced(adds, Location("tokenizer.json", "post_processor.single"))
    return Sourced(False, Location("tokenizer.json", "post_processor"))


def _card_metadata(text: str) -> dict[str, Any]:
    """The few keys we need from a model card's YAML front matter (no YAML dependency)."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        return {}
    out: dict[str, Any] = {}
    current: str | None = None
    for line in lines[1:200]:
        if line.strip() == "---":
            break
        if line.startswith((" ", "-", "\t")) and current is not None:
            item = line.strip()
            if item.startswith("- "):
                value = item[2:].strip().strip("'\"")
                if not isinstance(out.get(current), list):
                    out[current] = []
                out[current].append(value)
            continue
        key, sep, value = line.partition(":")
        if not sep:
            current = None
            continue
        current = key.strip()
        value = value.strip().strip("'\"")
        out[current] = value if value else []
    return out


def _read_gguf(facts: ModelFacts, path: Path) -> None:
    from stopdoctor.facts.gguf import read_header

    header = read_header(path)
    facts.gguf = header
    read_gguf_vocab(facts.vocab, header)
    file = path.name
    ids = {"bos": header.bos_id, "eos": header.eos_id, "pad": header.pad_id, "unk": header.unk_id,
           "eot": header.eot_id, "eom": header.eom_id}
    keys = {"bos": "bos_token_id", "eos": "eos_token_id", "pad": "padding_token_id", "unk": "unknown_token_id",
            "eot": "eot_token_id", "eom": "eom_token_id"}
    for role in ("fim_pad", "fim_rep", "fim_sep"):  # llama.cpp ends generation on these too
        ids[role], keys[role] = header._id(f"tokenizer.ggml.{role}_token_id"), f"{role}_token_id"
    for role, value in ids.items():
        if value is not None:
            facts.declared.append(DeclaredId(role, value, facts.vocab.text_of(value), Location(file, f"tokenizer.ggml.{keys[role]}")))
    # Ollama's converter writes every generation_config eos here; its own engine stops on them.
    extra = header.get("tokenizer.ggml.eos_token_ids")
    if hasattr(extra, "__len__") and not isinstance(extra, str):
        _check_id_count(len(extra), file, "tokenizer.ggml.eos_token_ids")
    for value in (extra.tolist() if hasattr(extra, "tolist") else extra if isinstance(extra, list) else ()):
        if isinstance(value, int) and not isinstance(value, bool):
            facts.declared.append(DeclaredId("eos", value, facts.vocab.text_of(value), Location(file, "tokenizer.ggml.eos_token_ids")))
    if header.chat_template is not None:
        facts.templates.append(ChatTemplate("default", header.chat_template, Location(file, "tokenizer.chat_template")))
    for name, source in (header.named_chat_templates or {}).items():
        facts.templates.append(ChatTemplate(name, source, Location(file, f"tokenizer.chat_template.{name}")))
    for key in ("general.name", "general.finetune", "general.basename"):
        value = header.get(key)
        if isinstance(value, str) and value:
            facts.names.append(Sourced(value, Location(file, key)))
    facts.names.append(Sourced(path.name, Location("(file name)")))
    if header.architecture:
        facts.architectures = [header.architecture]
    if header.add_bos is not None:
        facts.add_bos = Sourced(bool(header.add_bos), Location(file, "tokenizer.ggml.add_bos_token"))
    for key, name in GGUF_SAMPLING_KEYS.items():
        value = header.get(key)
        # NaN or an infinity is no sampling value (and no JSON number): left out, like a wrong type
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value and abs(value) != float("inf"):
            facts.sampling[name] = Sourced(value, Location(file, key))
    base = header.get("general.base_model.0.name")
    if isinstance(base, str):
        facts.base_model = Sourced(base, Location(file, "general.base_model.0.name"))
