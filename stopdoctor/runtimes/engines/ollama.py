"""Ollama (Modelfiles, `ollama serve`).

Imports: runtimes.engines.engine.
"""

from stopdoctor.runtimes.engines.engine import Engine, HiddenDefault, SamplingDefaults

# Ollama's context when neither the Modelfile, the request nor OLLAMA_CONTEXT_LENGTH names num_ctx:
# by the machine's VRAM, read from server/routes.go (ollama 0.33, Aug 2026): `defaultNumCtx` =
# 262144 at 47 GiB or more, 32768 at 23 GiB or more, else 4096. A prompt past it is cut from the
# middle (context shift, llm/llama_server.go `contextShiftPromptLimit`) or refused with 400, and
# generation stops where the context is full.
CONTEXT_BY_VRAM = (
    HiddenDefault("ollama", "0.33", "under 23 GiB of VRAM", "context", 4096, "PARAMETER num_ctx",
                  "server/routes.go defaultNumCtx by VRAM tier (totalVRAM < 23 GiB)"),
    HiddenDefault("ollama", "0.33", "23 to 47 GiB of VRAM", "context", 32768, "PARAMETER num_ctx",
                  "server/routes.go defaultNumCtx by VRAM tier (totalVRAM >= 23 GiB)"),
    HiddenDefault("ollama", "0.33", "47 GiB of VRAM or more", "context", 262144, "PARAMETER num_ctx",
                  "server/routes.go defaultNumCtx by VRAM tier (totalVRAM >= 47 GiB)"),
)

ENGINE = Engine(
    name="ollama", listed=8, serving_kind="ollama",
    stop_rule="llama.cpp's end-of-generation set, plus the Modelfile's PARAMETER stop strings",
    stop_rule_source="runtimes/serving.py (runner/llamarunner TokenIsEog)",
    config_files=("Modelfile*", "*.modelfile"),
    owned_by=("ollama", "library"),
    defaults=CONTEXT_BY_VRAM,
    sampling=SamplingDefaults(
        {"temperature": 0.8, "top_p": 0.9, "top_k": 40, "min_p": None, "repetition_penalty": 1.1, "presence_penalty": 0.0},
        "ollama api/types.go DefaultOptions (read at commit 00a4cb26)"),
)
