"""llama.cpp (`llama-server`, `llama-cli`; `server` before b3100).

Imports: runtimes.engines.engine.
"""

from stopdoctor.runtimes.engines.engine import Engine, SamplingDefaults

ENGINE = Engine(
    name="llama.cpp", listed=3, serving_kind="llamacpp",
    stop_rule="every end-of-generation token of the GGUF vocabulary (llama_vocab_is_eog)",
    stop_rule_source="runtimes/stops.py (llama_vocab_is_eog, src/llama-vocab.cpp)",
    spellings=("llama-cpp",),
    launchers=("llama-server", "llama-cli", "server"),
    launchers_source="llama.cpp tools/server, tools/main; the server binary was `server` before b3100",
    owned_by=("llamacpp",),
    sampling=SamplingDefaults(
        {"temperature": 0.8, "top_p": 0.95, "top_k": 40, "min_p": 0.05, "repetition_penalty": 1.0, "presence_penalty": 0.0},
        "llama.cpp common/common.h common_params_sampling (llama-cpp-python 0.3.36's)"),
)
