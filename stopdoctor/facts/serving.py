"""Serving configurations: what a server or a request adds to (or takes from) the model's stops.

Parses four kinds of file into one `ServingConfig`, each value with the place it came from:

- `vllm`: a `vllm serve MODEL ...` command line (backslash-newline continuations allowed), or
  the YAML file given to `vllm serve --config`.
- `ollama`: a Modelfile (FROM, TEMPLATE, SYSTEM, PARAMETER; `\"\"\"` multi-line arguments).
- `llamacpp`: a `llama-server ...` command line.
- `request`: an OpenAI-compatible request body (JSON).

What the served model then really stops on is the runtimes' business
(`stopdoctor.runtimes.serving.served_stops`; `runtimes.serving.load_serving` reads a file with
the engine registry's launchers); `stopdoctor.api.serving_findings` runs the SD4xx
checks on a model and a config.

Imports: core, facts (file reading); pyyaml lazily.
"""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from stopdoctor.core.errors import InputError
from stopdoctor.facts.model_facts import load_json, load_text, parse_json
from stopdoctor.facts.serving_config import REQUEST, ServingConfig, Setting
from stopdoctor.facts.serving_engines import CommandSyntax, FileSignature, guess_engine, launcher_kind, parse_engine_command

# The file formats parsed here; the other engines' command lines are read by their `CommandSyntax`.
SERVING_KINDS = ("vllm", "ollama", "llamacpp", "request")
MAX_SERVING_BYTES = 4 * 1024 * 1024
MAX_STOPS = 1024  # stop strings or stop ids in one file


# --- loading -------------------------------------------------------------------------------------


def read_serving(path: Path, kind: str | None, launchers: Mapping[str, str],
                 commands: Mapping[str, CommandSyntax], signatures: Sequence[FileSignature] = ()) -> ServingConfig:
    """Parse a serving file; `kind` is guessed from its name and content when None, a command
    line's by its launcher (`launchers`: program → kind; `commands`: kind → its command syntax;
    both from the engine registry, which `runtimes.serving.load_serving` asks)."""
    path = Path(path)
    text = _read(path)
    kinds = SERVING_KINDS + tuple(commands)
    if kind is not None and kind not in kinds:
        raise InputError(f"unknown serving kind {kind!r}", hint=f"use one of {', '.join(kinds)}")
    kind = kind or guess_kind(path, text, launchers, commands.values(), signatures)
    if kind == REQUEST:
        return _parse_request(path, text)
    if kind in commands:  # the other engines' servers
        return parse_engine_command(path, text, commands[kind])
    return FORMATS.get(kind, _parse_llamacpp_command)(path, text)


def _parse_vllm(path: Path, text: str) -> ServingConfig:
    if path.suffix.lower() in (".yaml", ".yml"):
        return _parse_vllm_yaml(path, text)
    return _parse_vllm_command(path, text)


def _read(path: Path) -> str:
    return load_text(path, str(path), max_bytes=MAX_SERVING_BYTES, encoding="utf-8-sig")


def guess_kind(path: Path, text: str, launchers: Mapping[str, str], commands: Iterable[CommandSyntax],
               signatures: Sequence[FileSignature] = ()) -> str:
    """The kind of a serving file given without --kind: a request body by its JSON; a file of an
    engine's own format by its name or content (`signatures`, from the engine registry, those with
    content of their own first); a command line by its launcher, its command syntax, then by the
    engine it mentions."""
    name = path.name.lower()
    stripped = text.lstrip()
    if name.endswith((".jinja", ".jinja2", ".j2")) or stripped.startswith(("{%", "{{", "{#")):
        # A template starts with "{" too: reading it as request JSON would say "invalid JSON".
        raise InputError(f"{path}: is a Jinja chat template, not a serving configuration",
                         hint="compare it with `stopdoctor render MODEL --compare FILE`; --serving takes a vLLM command "
                              "or YAML, an Ollama Modelfile, a llama.cpp command, or an OpenAI request body (JSON)")
    if name.endswith(".json") or stripped.startswith("{"):
        return REQUEST
    for signature in sorted(signatures, key=lambda s: s.content is None):  # stable: registry order within
        if any(fnmatch.fnmatch(name, pattern.lower()) for pattern in signature.names) \
                or (signature.content is not None and re.search(signature.content, text)):
            return signature.kind

    launched = launcher_kind(path, text, launchers)
    if launched is not None:
        return launched
    engine = guess_engine(text, commands)
    if engine is not None:
        return engine
    for signature in signatures:
        if signature.mentioned is not None and re.search(signature.mentioned, text):
            return signature.kind
    raise InputError(
        f"{path}: cannot tell what kind of serving file this is",
        hint="pass --kind vllm, ollama, llamacpp or request",
    )


# --- command lines --------------------------------------------------------------------------------


def _split_command(path: Path, text: str) -> list[str]:
    joined = re.sub(r"\\\r?\n", " ", text)  # backslash-newline continuations
    try:
        return shlex.split(joined, comments=True)
    except ValueError as exc:
        raise InputError(f"{path}: cannot parse the command line: {exc}") from exc


def _flags(words: list[str], takes_value: Iterable[str], switches: Iterable[str]) -> tuple[dict[str, list[str]], list[str]]:
    """Flag → every value given (a switch gets "true"), and the positional words."""
    takes, switch = set(takes_value), set(switches)
    found: dict[str, list[str]] = {}
    positional: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        if word.startswith("-") and len(word) > 1 and not _is_number(word):
            name, eq, value = word.partition("=")
            if eq:
                found.setdefault(name, []).append(value)
            elif name in switch:
                found.setdefault(name, []).append("true")
            elif name in takes or (i + 1 < len(words) and not words[i + 1].startswith("-")):
                if i + 1 < len(words):
                    found.setdefault(name, []).append(words[i + 1])
                    i += 1
                else:
                    found.setdefault(name, []).append("")
            else:
                found.setdefault(name, []).append("true")
        else:
            positional.append(word)
        i += 1
    return found, positional


def _is_number(word: str) -> bool:
    try:
        float(word)
        return True
    except ValueError:
        return False


VLLM_VALUE_FLAGS = ("--model", "--tokenizer", "--generation-config", "--override-generation-config", "--chat-template",
                    "--config", "--served-model-name", "--max-model-len")
VLLM_SWITCHES = ("--trust-remote-code",)


def _parse_vllm_command(path: Path, text: str) -> ServingConfig:
    words = _split_command(path, text)
    found, positional = _flags(words, VLLM_VALUE_FLAGS, VLLM_SWITCHES)
    options = {name: Setting(values[-1], name) for name, values in found.items()}
    model = options.get("--model")
    if model is None and "serve" in positional:
        after = positional[positional.index("serve") + 1:]
        if after:
            model = Setting(after[0], "serve MODEL")
    settings: dict[str, Setting] = {}
    if "--config" in options:
        config_path = _resolve_relative(path, options["--config"].value)
        if config_path is not None:
            settings = _vllm_yaml_settings(config_path, _read(config_path))
    # Command-line flags win over the --config file (vLLM's argument parser merges that way).
    for name, setting in options.items():
        settings[name] = setting
    if model is None:
        model = settings.get("--model")
    return _vllm_config(path, text, settings, model)


def _parse_vllm_yaml(path: Path, text: str) -> ServingConfig:
    settings = _vllm_yaml_settings(path, text)
    return _vllm_config(path, text, settings, settings.get("--model"))


def _vllm_yaml_settings(path: Path, text: str) -> dict[str, Setting]:
    try:
        import yaml
    except ModuleNotFoundError as exc:  # pragma: no cover - pyyaml is a dependency
        raise InputError("reading a vLLM --config YAML needs pyyaml", hint="pip install pyyaml") from exc
    try:
        data = yaml.load(text, Loader=_bounded_yaml_loader(yaml))  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise InputError(f"{path}: invalid YAML: {str(exc).splitlines()[0]}") from exc
    except RecursionError as exc:
        raise InputError(f"{path}: YAML nested too deeply") from exc
    except ValueError as exc:  # an integer longer than int() converts
        raise InputError(f"{path}: invalid YAML: {str(exc).splitlines()[0] if str(exc) else 'a value that cannot be read'}") from exc
    except _YamlTooBig as exc:
        raise InputError(f"{path}: {exc}", hint="a vLLM config is a short mapping of option names to values") from exc
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise InputError(f"{path}: a vLLM config file is a mapping of option names to values")
    # vLLM accepts the long option names, with dashes or underscores, as keys.
    return {"--" + str(key).replace("_", "-"): Setting(value, str(key)) for key, value in data.items()}


class _YamlTooBig(Exception):
    pass


# YAML aliases let a 1 kB file stand for a value of billions of items (an alias bomb); anything that
# walks or prints the value would expand it. Real vLLM configs hold a few dozen scalars.
MAX_YAML_NODES = 100_000


def _bounded_yaml_loader(yaml: Any) -> type:
    """A SafeLoader that counts every node a reader would see, each alias counting as the whole
    value it repeats, and stops past MAX_YAML_NODES before building anything."""

    class BoundedLoader(yaml.SafeLoader):
        def compose_document(self) -> Any:
            node = super().compose_document()
            _count_nodes(yaml, node)
            return node

    return BoundedLoader


def _count_nodes(yaml: Any, root: Any) -> None:
    sizes: dict[int, int] = {}  # expanded size of each node already counted
    open_nodes: set[int] = set()  # nodes whose children are being counted
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in sizes:
            continue
        if not children_done and id(node) in open_nodes:
            raise _YamlTooBig("an alias refers to a value that contains it (a recursive value)")
        if isinstance(node, yaml.ScalarNode):
            sizes[id(node)] = 1
            continue
        children = [item for pair in node.value for item in pair] if isinstance(node, yaml.MappingNode) else list(node.value)
        if children_done:
            total = 1 + sum(sizes.get(id(child), 0) for child in children)
            if total > MAX_YAML_NODES:
                raise _YamlTooBig(f"its aliases expand to more than {MAX_YAML_NODES} values (an alias bomb)")
            sizes[id(node)] = total
            open_nodes.discard(id(node))
            continue
        open_nodes.add(id(node))
        stack.append((node, True))
        stack.extend((child, False) for child in children if id(child) not in sizes)


def _vllm_config(path: Path, text: str, settings: dict[str, Setting], model: Setting | None) -> ServingConfig:
    override = settings.get("--override-generation-config")
    if override is not None and isinstance(override.value, str):
        try:
            parsed = json.loads(override.value)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}: {override.key} is not valid JSON: {exc.msg}",
                             hint="vLLM refuses to start with it too") from exc
        override = Setting(parsed, override.key)
    if override is not None and not isinstance(override.value, dict):
        raise InputError(f"{path}: {override.key} must be a JSON object")
    generation = settings.get("--generation-config") or Setting("auto", "--generation-config (default)")
    template = settings.get("--chat-template")
    if template is not None:
        if not isinstance(template.value, str):
            raise InputError(f"{path}: {template.key} must be a string (a template file or the template itself)")
        template = Setting(_template_text(path, template.value), template.key)
    return ServingConfig("vllm", path, text, model=model, template=template, generation_config=generation,
                         override_generation_config=override, options=settings)


def _template_text(path: Path, value: str) -> str:
    """vLLM's --chat-template is a file path or the template itself (vllm/entrypoints/chat_utils.py
    load_chat_template: a value that names no file and holds Jinja syntax is used inline)."""
    if any(c in value for c in "{}\n"):
        return value
    resolved = _resolve_relative(path, value)
    if resolved is None:
        raise InputError(f"{path}: chat template file {value!r} not found",
                         hint="give the path relative to the serving file or the current directory")
    return _read(resolved)


def _resolve_relative(path: Path, value: str) -> Path | None:
    candidate = Path(value).expanduser()
    for option in ([candidate] if candidate.is_absolute() else [Path.cwd() / candidate, path.parent / candidate]):
        if _is(option, Path.is_file):
            return option
    return None


def _is(path: Path, test: Any) -> bool:
    try:
        return test(path)
    except OSError:  # a value too long to be a file name (an inline template, say) names no file
        return False


LLAMACPP_VALUE_FLAGS = ("-m", "--model", "--chat-template", "--chat-template-file", "--override-kv", "-r",
                        "--reverse-prompt", "-n", "--n-predict", "-c", "--ctx-size", "-hf", "--hf-repo",
                        "--reasoning-budget", "-rea", "--reasoning", "--reasoning-format", "--presence-penalty",
                        "--temp")
LLAMACPP_SWITCHES = ("--jinja", "--no-jinja", "--ignore-eos", "-cnv", "--conversation", "--special", "-sp")
OVERRIDE_KV = re.compile(r"^(?P<key>[^=]+)=(?P<type>int|float|bool|str):(?P<value>.*)$")


def _parse_llamacpp_command(path: Path, text: str) -> ServingConfig:
    words = _split_command(path, text)
    found, _ = _flags(words, LLAMACPP_VALUE_FLAGS, LLAMACPP_SWITCHES)
    options = {name: Setting(values[-1], name) for name, values in found.items()}
    model = options.get("-m") or options.get("--model") or options.get("-hf") or options.get("--hf-repo")
    overrides: dict[str, Setting] = {}
    for flag in ("--override-kv",):
        for raw in found.get(flag, []):
            # llama.cpp splits one --override-kv value at commas (common/arg.cpp).
            for item in raw.split(","):
                match = OVERRIDE_KV.match(item.strip())
                if match is None:
                    raise InputError(f"{path}: --override-kv {item!r} is not KEY=TYPE:VALUE",
                                     hint="e.g. --override-kv tokenizer.ggml.eos_token_id=int:128009")
                if match["type"] == "int":
                    try:
                        overrides[match["key"]] = Setting(int(match["value"]), f"--override-kv {match['key']}")
                    except ValueError:
                        raise InputError(f"{path}: --override-kv {item!r}: {match['value']!r} is not an int") from None
    stops = tuple(Setting(v, flag) for flag in ("-r", "--reverse-prompt") for v in found.get(flag, []))
    _check_count(path, "-r/--reverse-prompt", len(stops), "stop strings")
    template = template_name = None
    if "--chat-template-file" in options:
        template = Setting(_template_text(path, options["--chat-template-file"].value), "--chat-template-file")
    elif "--chat-template" in options:
        value = options["--chat-template"].value
        if "{" in value:
            template = Setting(value, "--chat-template")
        else:
            template_name = Setting(value, "--chat-template")
    ignore = Setting(True, "--ignore-eos") if "--ignore-eos" in options else None
    max_tokens = options.get("-n") or options.get("--n-predict")
    if max_tokens is not None:
        max_tokens = Setting(_int(path, max_tokens), max_tokens.key)
    return ServingConfig("llamacpp", path, text, model=model, stop=stops, ignore_eos=ignore, max_tokens=max_tokens,
                         template=template, template_name=template_name, kv_overrides=overrides,
                         jinja="--jinja" in options and "--no-jinja" not in options, options=options)


def _int(path: Path, setting: Setting) -> int:
    try:
        return int(setting.value)
    except (TypeError, ValueError):
        raise InputError(f"{path}: {setting.key} {setting.value!r} is not an integer") from None


# --- Ollama Modelfile -----------------------------------------------------------------------------

MODELFILE_LINE = re.compile(r"^\s*(?P<cmd>[A-Za-z]+)\s*(?P<rest>.*)$")


def modelfile_commands(path: Path, text: str) -> list[tuple[str, str, int]]:
    """A Modelfile's (INSTRUCTION, argument, line number) in order; `\"\"\"` arguments span lines.
    `fix` uses the line numbers to add PARAMETER lines after the last one."""
    lines = text.splitlines()
    out = []
    i = 0
    while i < len(lines):
        line = lines[i]
        start = i + 1
        i += 1
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = MODELFILE_LINE.match(line)
        if match is None:
            raise InputError(f"{path}:{start}: not a Modelfile instruction: {line.strip()[:60]!r}")
        cmd, rest = match["cmd"].upper(), match["rest"]
        if cmd == "PARAMETER":
            name, _, value = rest.strip().partition(" ")
            value = value.strip()
            if value.startswith('"""'):
                value, i = _triple(path, lines, i, value, start)
            out.append((f"PARAMETER {name.lower()}", _unquote(value), start))
            continue
        rest = rest.strip()
        if rest.startswith('"""'):
            rest, i = _triple(path, lines, i, rest, start)
        else:
            rest = _unquote(rest)
        out.append((cmd, rest, start))
    return out


def _triple(path: Path, lines: list[str], i: int, first: str, start: int) -> tuple[str, int]:
    body = first[3:]
    if '"""' in body:
        return body[: body.index('"""')], i
    parts = [body]
    while i < len(lines):
        line = lines[i]
        i += 1
        if '"""' in line:
            parts.append(line[: line.index('"""')])
            return "\n".join(parts), i
        parts.append(line)
    raise InputError(f'{path}:{start}: unterminated """ argument')


def _unquote(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] == '"':
        try:
            return json.loads(value)  # Ollama's parser unquotes with Go strconv rules; JSON is close
        except json.JSONDecodeError:
            return value[1:-1]
    return value


def _parse_modelfile(path: Path, text: str) -> ServingConfig:
    commands = modelfile_commands(path, text)
    model = template = None
    stops: list[Setting] = []
    options: dict[str, Setting] = {}
    max_tokens = None
    for cmd, arg, line in commands:
        if cmd == "FROM":
            model = Setting(arg, cmd, line)
        elif cmd == "TEMPLATE":
            template = Setting(arg, cmd, line)
        elif cmd == "PARAMETER stop":
            stops.append(Setting(arg, cmd, line))
        elif cmd == "PARAMETER num_predict":
            try:
                max_tokens = Setting(int(arg), cmd, line)
            except ValueError:
                raise InputError(f"{path}:{line}: num_predict {arg!r} is not an integer") from None
        options.setdefault(cmd, Setting(arg, cmd, line))
    if model is None:
        raise InputError(f"{path}: a Modelfile needs a FROM line")
    _check_count(path, "PARAMETER stop", len(stops), "stop strings")
    return ServingConfig("ollama", path, text, model=model, stop=tuple(stops), max_tokens=max_tokens,
                         template=template, options=options)


# --- request body ---------------------------------------------------------------------------------


# Keys only Ollama's native API (/api/generate, /api/chat) takes: its sampling lives in "options"
# (num_predict, stop), never at the top level as OpenAI-style servers read it.
OLLAMA_NATIVE_KEYS = ("options", "keep_alive", "raw", "think", "context")


def is_ollama_native(body: dict) -> bool:
    """An Ollama /api/generate or /api/chat body (api/types.go GenerateRequest, ChatRequest)."""
    return isinstance(body.get("options"), dict) or any(k in body for k in OLLAMA_NATIVE_KEYS[1:])


def _parse_request(path: Path, text: str) -> ServingConfig:
    body = parse_json(text, str(path), hint=None)
    if not isinstance(body, dict):
        raise InputError(f"{path}: a request body is a JSON object")
    # Ollama's native body: stop and num_predict under "options" (its num_predict is the budget)
    nested = body.get("options") if isinstance(body.get("options"), dict) else {}
    prefix = "options." if nested else ""
    settings = nested if nested else body
    stop = settings.get("stop")
    if stop is None:
        stops: tuple[Setting, ...] = ()
    elif isinstance(stop, str):
        stops = (Setting(stop, f"{prefix}stop"),)
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        _check_count(path, "stop", len(stop), "stop strings")
        stops = tuple(Setting(s, f"{prefix}stop[{i}]") for i, s in enumerate(stop))
    else:
        raise InputError(f"{path}: \"{prefix}stop\" must be a string or a list of strings")
    ids = body.get("stop_token_ids") or []
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise InputError(f"{path}: \"stop_token_ids\" must be a list of integers")
    _check_count(path, "stop_token_ids", len(ids), "stop ids")
    max_tokens = None
    for key in ("num_predict",) if nested else ("max_completion_tokens", "max_tokens"):
        if settings.get(key) is not None:
            if not isinstance(settings[key], int) or isinstance(settings[key], bool):
                raise InputError(f"{path}: \"{prefix}{key}\" must be an integer")
            max_tokens = Setting(settings[key], f"{prefix}{key}")
            break
    ignore = Setting(bool(body["ignore_eos"]), "ignore_eos") if "ignore_eos" in body else None
    model = Setting(body["model"], "model") if isinstance(body.get("model"), str) else None
    return ServingConfig("request", path, text, model=model, stop=stops,
                         stop_token_ids=tuple(Setting(v, f"stop_token_ids[{i}]") for i, v in enumerate(ids)),
                         ignore_eos=ignore, max_tokens=max_tokens,
                         options={k: Setting(v, k) for k, v in body.items()})


def _check_count(path: Path, key: str, count: int, what: str) -> None:
    # Each stop string is tokenized and probed in a dozen contexts by the SD4xx checks.
    if count > MAX_STOPS:
        raise InputError(f"{path}: \"{key}\" lists {count} {what}, more than the {MAX_STOPS} stopdoctor checks",
                         hint="a deployment stops on a handful; this list is not a real configuration")


# --- files a serving option points at ----------------------------------------------------------


def generation_config_eos(serving: ServingConfig, value: str) -> tuple[Path, set[int]] | None:
    """vLLM `--generation-config FOLDER`: the folder (relative to the current directory or to the
    serving file) and the eos ids its generation_config.json (else config.json) declares; None
    when no such folder exists."""
    folder = _resolve_folder(serving.path, value)
    if folder is None:
        return None
    return folder, _generation_folder_eos(folder)


def _resolve_folder(path: Path, value: str) -> Path | None:
    candidate = Path(value).expanduser()
    for option in ([candidate] if candidate.is_absolute() else [Path.cwd() / candidate, path.parent / candidate]):
        if _is(option, Path.is_dir):
            return option
    return None


def _generation_folder_eos(folder: Path) -> set[int]:
    for name in ("generation_config.json", "config.json"):
        file = folder / name
        if file.is_file():
            data = load_json(file, str(file))
            value = data.get("eos_token_id") if isinstance(data, dict) else None
            if isinstance(value, int):
                return {value}
            if isinstance(value, list):
                return {v for v in value if isinstance(v, int)}
            return set()
    return set()


# The file formats parsed here, by the serving kind that names them (the engine registry's
# `serving_kind`); any other kind's command line is read by its `CommandSyntax`.
FORMATS = {"vllm": _parse_vllm, "ollama": _parse_modelfile, "llamacpp": _parse_llamacpp_command}
