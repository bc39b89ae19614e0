"""Ollama (Modelfiles, `ollama serve`).

Served stops: the GGUF eos id(s) plus `PARAMETER stop` strings.

Imports: facts, runtimes.stops, runtimes.engines.engine.
"""

from collections.abc import Sequence

from stopdoctor.facts.model_facts import ModelFacts
from stopdoctor.facts.serving_config import ServingConfig
from stopdoctor.runtimes.engines.engine import Engine, HiddenDefault, SamplingDefaults
from stopdoctor.runtimes.stops import RuntimeStops, dedupe, stop_ids

NAME = "ollama"


def served_stops(facts: ModelFacts, serving: ServingConfig, model_stops: Sequence[RuntimeStops] | None) -> RuntimeStops:
    # Ollama's llama.cpp runner stops on every EOG id (runner/llamarunner TokenIsEog); its own
    # engine on tokenizer.ggml.eos_token_id plus tokenizer.ggml.eos_token_ids only.
    eos = stop_ids([d for d in facts.declared_for("eos") if facts.is_gguf or d.location.file != "config.json"])
    return RuntimeStops(NAME, tuple(dedupe(eos)), "the GGUF eos id(s) plus PARAMETER stop strings",
                        texts=tuple(s.value for s in serving.stop))


def stop_fix(line: str, serving: ServingConfig, all_ids: bool) -> tuple[str, str]:
    return f"add {line}", "PARAMETER stop"


def stop_advice(markers: Sequence[tuple[str, int | None]], gguf: str | None) -> str:
    return " and ".join(f'PARAMETER stop "{text}"' for text, _ in markers)


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
    name=NAME, listed=8, serving_kind="ollama",
    stop_rule="llama.cpp's end-of-generation set, plus the Modelfile's PARAMETER stop strings",
    stop_rule_source="ollama runner/llamarunner (TokenIsEog); Modelfile PARAMETER stop (runtimes/engines/ollama.py)",
    config_files=("Modelfile*", "*.modelfile"),
    config_content=r"(?im)^\s*FROM\s+\S",  # a Modelfile's FROM line (docs/modelfile.md)
    owned_by=("ollama", "library"),
    served_stops=served_stops,
    stop_advice=stop_advice,
    stop_fix=stop_fix,
    fix_edit="stop-strings",
    template_language="go",  # TEMPLATE is a Go text/template (template/template.go)
    runner_stops_on_eog=True,  # runner/llamarunner TokenIsEog; its own engine: the eos ids only
    context_option="PARAMETER num_ctx",
    # PARAMETER names that mean one of runtimes.sampling.KEYS (api/types.go Options)
    sampling_options={"temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "min_p": "min_p",
                      "repeat_penalty": "repetition_penalty", "presence_penalty": "presence_penalty"},
    served_sampling_keys={"presence_penalty": ("PARAMETER presence_penalty",), "temperature": ("PARAMETER temperature",)},
    defaults=CONTEXT_BY_VRAM,
    sampling=SamplingDefaults(
        {"temperature": 0.8, "top_p": 0.9, "top_k": 40, "min_p": None, "repetition_penalty": 1.1, "presence_penalty": 0.0},
        "ollama api/types.go DefaultOptions (read at commit 00a4cb26)"),
)
