"""Serving command lines of the engines beyond vLLM, Ollama and llama.cpp (SGLang
`python -m sglang.launch_server --model-path M`, MLX `mlx_lm.server --model M`, llama-cpp-python
`python -m llama_cpp.server --model M`, LMDeploy `lmdeploy serve api_server M`, ...), read by one
parser driven by each engine's `CommandSyntax`. Each becomes a `ServingConfig` whose `kind` names the
engine. Which launcher starts which engine, and each engine's syntax, is the engine registry's
knowledge (`runtimes.engines`), passed in.

Imports: core, facts.serving (the config type).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping
from pathlib import Path

from stopdoctor.core.errors import InputError
from stopdoctor.core.records import record
from stopdoctor.facts.serving_config import ServingConfig, Setting


@record
class CommandSyntax:
    """How one engine's server command line names its model and its default budget (the engine
    module in `runtimes/engines/` fills it in and cites where it read it)."""

    kind: str  # the serving kind the parsed file gets
    pattern: str  # a regex naming the server in a file's text (read when no launcher says it)
    model_flags: tuple[str, ...] = ()
    max_tokens_flags: tuple[str, ...] = ()  # the flag that sets the budget of a request naming none
    # The words that may come before a positional model (`lmdeploy serve api_server MODEL`), one
    # tuple per way to start the server: the model is the word after them when it is no flag.
    model_after: tuple[tuple[str, ...], ...] = ()


@record
class FileSignature:
    """How a serving file of one engine is told when no --kind is given (the engine module fills it
    in): by its name, by content of its own format, or, last, by a mention of the engine."""

    kind: str
    names: tuple[str, ...] = ()  # file name patterns, case-insensitive (fnmatch)
    content: str | None = None  # a regex of its own format's content (a Modelfile's FROM line)
    mentioned: str | None = None  # a regex naming the engine anywhere in the text (read after launchers)


# Words that run another program: the launcher is after them (with their flags and VAR=value).
_RUNNERS = {"exec", "sudo", "nohup", "env", "time", "nice", "uv", "uvx", "run", "poetry", "pipx", "numactl", "taskset"}
# Words that wrap a server in a container or a job: the launcher is somewhere inside, read by name.
_CONTAINERS = {"docker", "podman", "apptainer", "singularity", "kubectl", "srun", "bash", "sh"}
_SETUP = {"export", "set", "cd", "source", ".", "echo", "unset", "ulimit", "mkdir", "pip", "if", "fi", "then", "else"}
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
# an unknown launcher that contains a known name is the one to name in the error
_KNOWN_INSIDE = re.compile(r"vllm|llama[-_.]?(?:cpp|server|cli)|sglang|mlx[-_][lv]", re.IGNORECASE)


def launcher_kind(path: Path, text: str, launchers: Mapping[str, str]) -> str | None:
    """The kind of the first command whose launcher is known (`launchers`: program or `python -m`
    module → serving kind, the engine registry's `runtimes.engines.launcher_kinds()`); None when the file only
    runs containers/shells or no command at all (the caller reads it by content then). Any other
    launcher is unknown, and said so (exit 2): one that merely contains a known name
    (`vllm-mlx serve M`) is never read as that engine."""
    unknown = []
    containers = False
    for line in re.sub(r"\\\r?\n", " ", text).splitlines():
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            continue
        while words and (words[0] in _RUNNERS or words[0].startswith("-") or _ASSIGNMENT.match(words[0])):
            words = words[1:]
        if not words or words[0] in _SETUP or words[0].startswith("#!"):
            continue
        program = words[0].replace("\\", "/").rsplit("/", 1)[-1].removesuffix(".exe")
        if program.startswith("python") and len(words) > 2 and words[1] == "-m":
            program = words[2]
        if program in launchers:  # by its own name: `vllm-mlx` is not vLLM
            return launchers[program]
        if program in _CONTAINERS:
            containers = True
        else:
            unknown.append(program)
    if unknown and not containers:
        named = [p for p in unknown if _KNOWN_INSIDE.search(p)] or unknown
        raise InputError(f"{path}: cannot tell what kind of serving file this is: the launcher {named[0]!r} is not one "
                         f"stopdoctor knows, and it is not read as any of "
                         f"{', '.join(sorted(set(launchers.values())))}",
                         hint="if it runs one of these engines unchanged, write that engine's own command line "
                              "(`fix` also takes --kind KIND)")
    return None


def guess_engine(text: str, commands: Iterable[CommandSyntax]) -> str | None:
    for syntax in commands:
        if re.search(syntax.pattern, text):
            return syntax.kind
    return None


def _positional_model(words: list[str], starts: tuple[tuple[str, ...], ...]) -> Setting | None:
    for after in starts:
        for i in range(len(words) - len(after)):
            if tuple(words[i:i + len(after)]) == after:
                following = words[i + len(after)]
                return None if following.startswith("-") else Setting(following, after[-1])
    return None


def parse_engine_command(path: Path, text: str, syntax: CommandSyntax) -> ServingConfig:
    kind = syntax.kind
    joined = re.sub(r"\\\r?\n", " ", text)
    try:
        words = shlex.split(joined, comments=True)
    except ValueError as exc:
        raise InputError(f"{path}: cannot parse the command line: {exc}") from exc
    options: dict[str, Setting] = {}
    i = 0
    while i < len(words):
        word = words[i]
        if word.startswith("--"):
            name, eq, value = word.partition("=")
            if not eq and i + 1 < len(words) and not words[i + 1].startswith("--"):
                value = words[i + 1]
                i += 1
            options[name] = Setting(value if (eq or value) else "true", name)
        i += 1
    model = next((options[f] for f in syntax.model_flags if f in options), None)
    if model is None and syntax.model_after:
        model = _positional_model(words, syntax.model_after)
    max_tokens = next((options[f] for f in syntax.max_tokens_flags if f in options), None)
    if max_tokens is not None:
        try:
            max_tokens = Setting(int(max_tokens.value), max_tokens.key)
        except ValueError:
            raise InputError(f"{path}: {max_tokens.key} {max_tokens.value!r} is not an integer") from None
    template = options.get("--chat-template")
    if template is not None and "{" not in str(template.value):
        template = None  # a file or a built-in name: not read here
    return ServingConfig(kind, path, text, model=model, max_tokens=max_tokens, template=template, options=options)
