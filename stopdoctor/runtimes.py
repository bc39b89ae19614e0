"""Effective stop ids: what each runtime would really stop on, computed from `ModelFacts`.

Runtimes disagree, which is why a model can stop under one server and run away under another.
The rules, as read from each runtime's source:

- transformers `generate`: `generation_config.eos_token_id` (int or list). The generation config
  is generation_config.json when it exists, else derived from config.json
  (`GenerationConfig.from_model_config`, which also looks into `text_config`/`decoder`/`generator`).
  The tokenizer's eos is never consulted (generation/utils.py `_prepare_special_tokens`).
- vLLM: the tokenizer's eos id, plus every id of the generation config's `eos_token_id`
  (`SamplingParams.update_from_generation_config` adds them as stop_token_ids); the generation
  config comes from generation_config.json, else config.json (`try_get_generation_config`).
  `--generation-config vllm` does not drop these ids: it only stops the generation config's
  sampling defaults from being applied (`ModelConfig.get_diff_sampling_param`).
- TGI: the generation config's `eos_token_id` when it is a list, else the tokenizer's eos
  (router `HubTokenizerConfig`/`GenerationConfig` handling in launcher/router).
- llama.cpp (and Ollama, which runs it): every end-of-generation (EOG) id: the GGUF eos, eot and
  eom ids plus every vocabulary token whose text is on llama.cpp's EOG list (llama-vocab.cpp,
  `special_eog_ids`). For an HF folder this is what `convert_hf_to_gguf.py` would produce: eos
  from the tokenizer config (config.json as fallback) plus the EOG texts found in the vocabulary.

Imports: model, facts.
"""

from __future__ import annotations

from dataclasses import dataclass

from .facts import DeclaredId, ModelFacts
from .model import Location

RUNTIMES = ("transformers", "vllm", "tgi", "llama.cpp")

# llama.cpp's end-of-turn texts (llama-vocab.cpp, EOT/EOG detection); a token with one of these
# texts ends generation there even when no id declares it.
LLAMA_CPP_EOG_TEXTS = (
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<EOT>",
    "_<EOT>",
    "<｜end▁of▁sentence｜>",
    "<|end_of_text|>",
    "<|eom_id|>",
    "<|return|>",
    "<|call|>",
    "<end_of_utterance>",
)


@dataclass(frozen=True)
class StopId:
    id: int
    text: str | None
    location: Location


@dataclass(frozen=True)
class RuntimeStops:
    runtime: str
    stops: tuple[StopId, ...]
    rule: str  # how this runtime chose them, in one sentence
    complete: bool = True  # False when a file this runtime reads is absent or names an unknown token

    @property
    def ids(self) -> list[int]:
        return sorted({s.id for s in self.stops})


def _stop_ids(declared: list[DeclaredId]) -> list[StopId]:
    return [StopId(d.id, d.text, d.location) for d in declared if d.id is not None]


def generation_eos(facts: ModelFacts) -> list[DeclaredId]:
    """The eos ids of the generation config transformers and vLLM would build."""
    if "generation_config.json" in facts.documents:
        return facts.declared_for("eos", "generation_config.json")
    top = [d for d in facts.declared_for("eos", "config.json") if "." not in (d.location.key or "")]
    return top or facts.declared_for("eos", "config.json")


def tokenizer_eos(facts: ModelFacts) -> list[DeclaredId]:
    """The eos a tokenizer object reports (`tokenizer.eos_token_id`)."""
    for file in facts.tokenizer_files:
        declared = facts.declared_for("eos", file)
        if declared:
            return [d for d in declared[:1] if d.id is not None]
    return []


def effective_stops(facts: ModelFacts) -> list[RuntimeStops]:
    if facts.is_gguf:
        return _gguf_stops(facts)
    generation = generation_eos(facts)
    tokenizer = tokenizer_eos(facts)
    generation_known = "generation_config.json" in facts.documents or "config.json" in facts.documents
    declared_tokenizer = [d for f in ("tokenizer_config.json", "special_tokens_map.json") for d in facts.declared_for("eos", f)]
    tokenizer_known = bool(tokenizer) or (not declared_tokenizer and "tokenizer_config.json" in facts.documents)
    gen_file = "generation_config.json" if "generation_config.json" in facts.documents else "config.json"
    gen_is_list = isinstance(facts.documents.get("generation_config.json", {}).get("eos_token_id"), list)
    out = [
        RuntimeStops("transformers", tuple(_stop_ids(generation)), f"{gen_file} eos_token_id only", generation_known),
        RuntimeStops("vllm", tuple(dedupe(_stop_ids(tokenizer) + _stop_ids(generation))),
                     f"tokenizer eos plus {gen_file} eos_token_id", generation_known and tokenizer_known),
        RuntimeStops(
            "tgi",
            tuple(_stop_ids(generation) if gen_is_list else _stop_ids(tokenizer)),
            "generation_config.json eos_token_id (a list)" if gen_is_list else "tokenizer eos (generation_config eos is not a list)",
            True if gen_is_list else tokenizer_known,
        ),
    ]
    converted = tokenizer or facts.declared_for("eos", "config.json")[:1]
    out.append(RuntimeStops("llama.cpp", tuple(dedupe(_stop_ids(converted) + _eog_by_text(facts))),
                            "after convert_hf_to_gguf: tokenizer eos plus tokens on llama.cpp's end-of-generation list",
                            tokenizer_known or bool(converted)))
    return out


def _gguf_stops(facts: ModelFacts) -> list[RuntimeStops]:
    eos = _stop_ids([d for d in facts.declared_for("eos") if d.location.key == "tokenizer.ggml.eos_token_id"])
    eog = dedupe(eos + _stop_ids(facts.declared_for("eot")) + _stop_ids(facts.declared_for("eom")) + _eog_by_text(facts))
    rule = "GGUF tokenizer.ggml.eos_token_id (transformers/vLLM load it as the eos)"
    return [
        RuntimeStops("transformers", tuple(eos), rule),
        RuntimeStops("vllm", tuple(eos), rule),
        RuntimeStops("tgi", tuple(eos), rule),
        RuntimeStops("llama.cpp", tuple(eog), "GGUF eos/eot/eom ids plus tokens on llama.cpp's end-of-generation list"),
    ]


def _eog_by_text(facts: ModelFacts) -> list[StopId]:
    out = []
    for text in LLAMA_CPP_EOG_TEXTS:
        # these texts only ever exist as added/control tokens; looking only there spares building
        # a text index of a 262k GGUF vocabulary
        token_id = facts.vocab.is_single_token(text)
        if token_id is not None:
            out.append(StopId(token_id, text, Location("llama.cpp end-of-generation list")))
    return out


def primary_runtime(facts: ModelFacts) -> str:
    """The runtime a model's own format runs in: llama.cpp for GGUF, transformers for HF folders.
    Its stop ids are the ones reported as "effective"."""
    return "llama.cpp" if facts.is_gguf else "transformers"


def dedupe(stops: list[StopId]) -> list[StopId]:
    """First declaration of each id wins (it is the one whose file is cited)."""
    seen: set[int] = set()
    out = []
    for stop in stops:
        if stop.id not in seen:
            seen.add(stop.id)
            out.append(stop)
    return out
