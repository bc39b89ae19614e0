"""llama-cpp-python (`python -m llama_cpp.server`, `Llama(...)`).

Stop set, llama-cpp-python 0.3.36: `Llama._create_completion` (llama_cpp/llama.py) breaks on
`llama_vocab_is_eog(token)`: llama.cpp's own end-of-generation set; its chat handlers
(`Jinja2ChatFormatter`) add the eos text as a stop string and `[eos_token_id]` as a stopping
criterion, both already in that set.

Imports: facts, runtimes.stops, runtimes.advice, runtimes.engines.engine.
"""

from collections.abc import Sequence

from stopdoctor.facts.model_facts import ModelFacts
from stopdoctor.facts.serving_engines import CommandSyntax
from stopdoctor.runtimes.advice import gguf_eos_advice, llama_cpp_stop_lines
from stopdoctor.runtimes.engines.engine import Engine, HiddenDefault, SamplingDefaults
from stopdoctor.runtimes.stops import RuntimeStops, StopId, stop_ids, tokenizer_eos


def stop_sets(facts: ModelFacts, llama_eog: Sequence[StopId]) -> list[RuntimeStops]:
    if facts.is_gguf:
        return [RuntimeStops("llama-cpp-python", tuple(llama_eog),
                             "llama-cpp-python 0.3.36: llama.cpp's end-of-generation set (llama_vocab_is_eog)")]
    known = bool(stop_ids(tokenizer_eos(facts))) or "tokenizer_config.json" in facts.documents
    return [RuntimeStops("llama-cpp-python", tuple(llama_eog),
                         "llama-cpp-python 0.3.36: llama.cpp's end-of-generation set (llama_vocab_is_eog) after conversion",
                         known)]


def stop_advice(markers: Sequence[tuple[str, int | None]], gguf: str | None) -> str | None:
    """It serves a GGUF: the GGUF's eos is what to set (several markers: llama.cpp's keys)."""
    if any(token_id is None for _, token_id in markers):
        return None
    if len(markers) == 1 and (token_id := markers[0][1]) is not None:
        return gguf_eos_advice(gguf or "MODEL.gguf", token_id)
    return "serve it with llama.cpp " + llama_cpp_stop_lines(markers)


ENGINE = Engine(
    name="llama-cpp-python", listed=7, serving_kind="llama-cpp-python",
    stop_rule="llama.cpp's end-of-generation set (llama_vocab_is_eog)",
    stop_rule_source="llama-cpp-python 0.3.36 llama_cpp/llama.py Llama._create_completion",
    spellings=("llama_cpp_python",),
    launchers=("llama_cpp.server",),
    launchers_source="`python -m llama_cpp.server` (llama_cpp/server/__main__.py)",
    command=CommandSyntax("llama-cpp-python", r"\bllama_cpp\.server\b", ("--model",)),
    stop_sets=stop_sets,
    stop_advice=stop_advice,
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
