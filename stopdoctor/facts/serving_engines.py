"""Serving command lines of the engines beyond vLLM, Ollama and llama.cpp: SGLang
(`python -m sglang.launch_server --model-path M`), MLX (`mlx_lm.server --model M`,
`mlx_vlm.server --model M`) and llama-cpp-python (`python -m llama_cpp.server --model M`).
Each becomes a `ServingConfig` whose `kind` names the engine's stop set in `runtimes.engines`.

Imports: core, facts.serving (the config type).
"""

from __future__ import annotations

import re
import shlex
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
