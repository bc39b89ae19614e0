"""Hidden defaults that truncate: the token budget and context each runtime uses when the request
or its configuration says nothing, per runtime and the version whose source was read.

Imports: nothing from stopdoctor.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HiddenDefault:
    runtime: str
    version: str  # the version whose source was read
    applies_to: str  # which entry point uses it
    what: str  # "max new tokens", "context", ...
    value: int
    key: str  # what to set instead
    source: str  # file and function


DEFAULTS = (
    HiddenDefault("vllm", "0.33.0", "/v1/completions", "max new tokens", 16, '"max_tokens"',
                  "vllm/entrypoints/openai/completion/protocol.py CompletionRequest.max_tokens = 16"),
    HiddenDefault("vllm", "0.33.0", "offline LLM.generate", "max new tokens", 16, "SamplingParams(max_tokens=...)",
                  "vllm/sampling_params.py SamplingParams.max_tokens = 16"),
    HiddenDefault("transformers", "4.x/5.x", "model.generate without max_new_tokens", "total length (prompt included)", 20,
                  "max_new_tokens", "generation/configuration_utils.py GenerationConfig.max_length = 20"),
    HiddenDefault("sglang", "0.5.23", "/v1/completions", "max new tokens", 16, '"max_tokens"',
                  "srt/entrypoints/openai/protocol.py CompletionRequest.max_tokens = 16"),
    HiddenDefault("sglang", "0.5.23", "Engine.generate and /generate", "max new tokens", 128, "max_new_tokens",
                  "srt/sampling/sampling_params.py SamplingParams.max_new_tokens = 128"),
    HiddenDefault("llama-cpp-python", "0.3.36", "/v1/completions and Llama.create_completion", "max new tokens", 16,
                  '"max_tokens"', "llama_cpp/server/types.py CreateCompletionRequest.max_tokens = 16; llama.py create_completion"),
    HiddenDefault("llama-cpp-python", "0.3.36", "Llama(...)", "context", 512, "n_ctx", "llama_cpp/llama.py Llama.__init__ n_ctx=512"),
    HiddenDefault("llama-cpp-python", "0.3.36", "python -m llama_cpp.server", "context", 2048, "--n_ctx",
                  "llama_cpp/server/settings.py ModelSettings.n_ctx = 2048"),
    HiddenDefault("mlx-lm", "0.32.2", "mlx_lm.server (request without max_tokens)", "max new tokens", 512, "--max-tokens",
                  "mlx_lm/server.py --max-tokens default=512"),
    HiddenDefault("mlx-lm", "0.32.2", "mlx_lm.generate / stream_generate()", "max new tokens", 256, "max_tokens",
                  "mlx_lm/generate.py stream_generate(max_tokens=256)"),
    HiddenDefault("mlx-vlm", "0.7.10", "mlx_vlm.generate", "max new tokens", 2048, "--max-tokens",
                  "mlx_vlm/generate/common.py DEFAULT_MAX_TOKENS = 2048"),
)

# Ollama's context when neither the Modelfile, the request nor OLLAMA_CONTEXT_LENGTH names num_ctx:
# by the machine's VRAM, read from server/routes.go (ollama 0.33, Aug 2026): `defaultNumCtx` =
# 262144 at 47 GiB or more, 32768 at 23 GiB or more, else 4096. A prompt past it is cut from the
# middle (context shift, llm/llama_server.go `contextShiftPromptLimit`) or refused with 400, and
# generation stops where the context is full.
OLLAMA_CONTEXT = (
    HiddenDefault("ollama", "0.33", "under 23 GiB of VRAM", "context", 4096, "PARAMETER num_ctx",
                  "server/routes.go defaultNumCtx by VRAM tier (totalVRAM < 23 GiB)"),
    HiddenDefault("ollama", "0.33", "23 to 47 GiB of VRAM", "context", 32768, "PARAMETER num_ctx",
                  "server/routes.go defaultNumCtx by VRAM tier (totalVRAM >= 23 GiB)"),
    HiddenDefault("ollama", "0.33", "47 GiB of VRAM or more", "context", 262144, "PARAMETER num_ctx",
                  "server/routes.go defaultNumCtx by VRAM tier (totalVRAM >= 47 GiB)"),
)
DEFAULTS = DEFAULTS + OLLAMA_CONTEXT

# A request body with "prompt" and no "messages" goes to a completions endpoint: these runtimes
# give it 16 new tokens when it names no budget.
COMPLETIONS_DEFAULT = tuple(d for d in DEFAULTS if d.applies_to.startswith("/v1/completions"))
