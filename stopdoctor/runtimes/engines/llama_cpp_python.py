"""llama-cpp-python (`python -m llama_cpp.server`, `Llama(...)`).

Imports: runtimes.engines.engine.
"""

from stopdoctor.runtimes.engines.engine import Engine, HiddenDefault, SamplingDefaults

ENGINE = Engine(
    name="llama-cpp-python", listed=7, serving_kind="llama-cpp-python",
    stop_rule="llama.cpp's end-of-generation set (llama_vocab_is_eog)",
    stop_rule_source="llama-cpp-python 0.3.36 llama_cpp/llama.py Llama._create_completion",
    spellings=("llama_cpp_python",),
    launchers=("llama_cpp.server",),
    launchers_source="`python -m llama_cpp.server` (llama_cpp/server/__main__.py)",
    owned_by=("me",),
    defaults=(
        HiddenDefault("llama-cpp-python", "0.3.36", "/v1/completions and Llama.create_completion", "max new tokens", 16,
                      '"max_tokens"', "llama_cpp/server/types.py CreateCompletionRequest.max_tokens = 16; "
                      "llama.py create_completion"),
        HiddenDefault("llama-cpp-python", "0.3.36", "Llama(...)", "context", 512, "n_ctx",
                      "llama_cpp/llama.py Llama.__init__ n_ctx=512"),
        HiddenDefault("llama-cpp-python", "0.3.36", "python -m llama_cpp.server", "context", 2048, "--n_ctx",
                      "llama_cpp/server/settings.py ModelSettings.n_ctx = 2048"),
    ),
    sampling=SamplingDefaults(
        {"temperature": 0.8, "top_p": 0.95, "top_k": 40, "min_p": 0.05, "repetition_penalty": 1.0, "presence_penalty": 0.0},
        "llama-cpp-python 0.3.36 llama_cpp/llama.py Llama.create_completion"),
)
