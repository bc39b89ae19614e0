"""Serving command lines of the engines beyond vLLM, Ollama and llama.cpp: SGLang
(`python -m sglang.launch_server --model-path M`), MLX (`mlx_lm.server --model M`,
`mlx_vlm.server --model M`) and llama-cpp-python (`python -m llama_cpp.server --model M`).
Each becomes a `ServingConfig` whose `kind` names the engine's stop set in `runtimes.engine_stops`.
Which launcher starts which engine is the engine registry's knowledge (`runtimes.engines`), passed in.

Imports: core, facts.serving (the config type).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from pathlib import Path

from stopdoctor.core.errors import InputError
from stopdoctor.facts.serving_config import ServingConfig, Setting

ENGINE_KINDS = ("sglang", "mlx-lm", "mlx-vlm", "llama-cpp-python")
# What names each engine's server in a command line.
ENGINE_PATTERNS = (
    ("sglang", re.compile(r"\bsglang(?:\.launch_server|\s+serve)\b")),
    ("mlx-vlm", re.compile(r"\bmlx[_-]vlm(?:\.server|\s+server)\b")),
    ("mlx-lm", re.compile(r"\bmlx[_-]lm(?:\.server|\s+server)\b")),
    ("llama-cpp-python", re.compile(r"\bllama_cpp\.server\b")),
)
MODEL_FLAGS = {"sglang": ("--model-path", "--model"), "mlx-lm": ("--model",), "mlx-vlm": ("--model",),
               "llama-cpp-python": ("--model",)}
# The flag that sets the default budget of a request that names none (runtimes.defaults).
MAX_TOKENS_FLAGS = {"mlx-lm": ("--max-tokens",), "mlx-vlm": ("--max-tokens",)}


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


def guess_engine(text: str) -> str | None:
    for kind, pattern in ENGINE_PATTERNS:
        if pattern.search(text):
            return kind
    return None


def parse_engine_command(path: Path, text: str, kind: str) -> ServingConfig:
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
    model = next((options[f] for f in MODEL_FLAGS[kind] if f in options), None)
    max_tokens = next((options[f] for f in MAX_TOKENS_FLAGS.get(kind, ()) if f in options), None)
    if max_tokens is not None:
        try:
            max_tokens = Setting(int(max_tokens.value), max_tokens.key)
        except ValueError:
            raise InputError(f"{path}: {max_tokens.key} {max_tokens.value!r} is not an integer") from None
    template = options.get("--chat-template")
    if template is not None and "{" not in str(template.value):
        template = None  # a file or a built-in name: not read here
    return ServingConfig(kind, path, text, model=model, max_tokens=max_tokens, template=template, options=options)
