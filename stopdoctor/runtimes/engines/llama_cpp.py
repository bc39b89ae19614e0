"""llama.cpp (`llama-server`, `llama-cli`; `server` before b3100).

Served stops: every end-of-generation id (`runtimes.stops`), with `--override-kv` eos/eot/eom ids
swapped in, plus `-r` strings; `--ignore-eos` drops every id.

Imports: facts, runtimes.stops, runtimes.advice, runtimes.engines.engine.
"""

from collections.abc import Sequence

from stopdoctor.facts.model_facts import ModelFacts
from stopdoctor.facts.serving_config import ServingConfig
from stopdoctor.runtimes.advice import llama_cpp_stop_lines
from stopdoctor.runtimes.engines.engine import Engine, ReasoningControls, SamplingDefaults
from stopdoctor.runtimes.stops import (RuntimeStops, StopId, dedupe, gguf_eos, llama_cpp_eog, stop_ids, tokenizer_eos,
                                       tokenizer_known)

NAME = "llama.cpp"

# llama.cpp built-in templates (src/llama-chat.cpp, llm_chat_apply_template): what each writes
# after an assistant message.
BUILTIN_TEMPLATE_ENDS = {
    "chatml": "<|im_end|>",
    "phi4": "<|im_end|>",
    "phi3": "<|end|>",
    "gemma": "<end_of_turn>",
    "zephyr": "<|endoftext|>",
    "llama3": "<|eot_id|>",
    "llama2": "</s>",
    "llama2-sys": "</s>",
    "llama2-sys-bos": "</s>",
    "llama2-sys-strip": "</s>",
    "mistral-v1": "</s>",
    "mistral-v3": "</s>",
    "mistral-v3-tekken": "</s>",
    "mistral-v7": "</s>",
    "mistral-v7-tekken": "</s>",
    "monarch": "</s>",
}


def stop_sets(facts: ModelFacts, llama_eog: Sequence[StopId]) -> list[RuntimeStops]:
    if facts.is_gguf:
        return [RuntimeStops(NAME, tuple(llama_cpp_eog(facts, gguf_eos(facts))),
                             "llama.cpp end-of-generation set: GGUF eos/eot/eom ids, fim pad/repo/sep ids, tokens on its "
                             "EOG text list")]
    tokenizer = tokenizer_eos(facts)
    converted = tokenizer or facts.declared_for("eos", "config.json")[:1]
    return [RuntimeStops(NAME, tuple(llama_cpp_eog(facts, stop_ids(converted))),
                         "after convert_hf_to_gguf: tokenizer eos plus llama.cpp's end-of-generation rule",
                         tokenizer_known(facts) or bool(converted))]


def served_stops(facts: ModelFacts, serving: ServingConfig, model_stops: Sequence[RuntimeStops] | None) -> RuntimeStops:
    texts = tuple(s.value for s in serving.stop)
    if serving.ignore_eos is not None and serving.ignore_eos.value:
        return RuntimeStops(NAME, (), "--ignore-eos: no end-of-generation id stops", texts=texts)
    own = next((s for s in model_stops or () if s.runtime == NAME), None) or stop_sets(facts, ())[0]
    kept = list(own.stops)
    for role in ("eos", "eot", "eom"):
        override = serving.kv_overrides.get(f"tokenizer.ggml.{role}_token_id")
        if override is not None:
            dropped = {d.id for d in facts.declared_for(role) if d.id is not None}
            kept = [s for s in kept if s.id not in dropped] + [StopId(override.value, None, serving.location(override))]
    return RuntimeStops(NAME, tuple(dedupe(kept)),
                        "GGUF eos/eot/eom (after --override-kv) plus llama.cpp's end-of-generation texts", texts=texts)


def stop_fix(line: str, serving: ServingConfig, all_ids: bool) -> tuple[str, str]:
    return (f"add {line}", "--override-kv") if all_ids else (f"add {line} (or fix the template)", "-r")


def stop_advice(markers: Sequence[tuple[str, int | None]], gguf: str | None) -> str:
    return llama_cpp_stop_lines(markers)


ENGINE = Engine(
    name=NAME, listed=3, serving_kind="llamacpp", gguf_native=True,
    stop_rule="every end-of-generation token of the GGUF vocabulary (llama_vocab_is_eog)",
    stop_rule_source="src/llama-vocab.cpp llama_vocab::impl::load (the end-of-generation list), llama_vocab_is_eog",
    spellings=("llama-cpp",),
    launchers=("llama-server", "llama-cli", "server"),
    mentioned_by=r"llama-server|llama-cli|llama_cpp|llama\.cpp|\bserver\b.*\s-m\s",
    launchers_source="llama.cpp tools/server, tools/main; the server binary was `server` before b3100",
    owned_by=("llamacpp",),
    stop_sets=stop_sets,
    served_stops=served_stops,
    stop_advice=stop_advice,
    serves_jinja_template=True,
    stop_fix=stop_fix,
    fix_notes=True,
    builtin_template_ends=BUILTIN_TEMPLATE_ENDS,
    server_header="llama.cpp",  # tools/server/server.cpp sets `Server: llama.cpp`
    tokenize_route="/tokenize",  # tools/server/server.cpp handle_tokenize
    served_sampling_keys={"presence_penalty": ("--presence-penalty",), "temperature": ("--temp",)},
    reasoning_controls=ReasoningControls(
        ("-rea", "--reasoning"), "--reasoning-budget", "--no-jinja",
        "tools/server/server.cpp and common/arg.cpp (--reasoning, --reasoning-budget), common/chat.cpp"),
    sampling=SamplingDefaults(
        {"temperature": 0.8, "top_p": 0.95, "top_k": 40, "min_p": 0.05, "repetition_penalty": 1.0, "presence_penalty": 0.0},
        "llama.cpp common/common.h common_params_sampling (llama-cpp-python 0.3.36's)"),
)
