"""transformers (`model.generate`, `transformers serve`).

Stop set: the generation config's `eos_token_id` only (generation_config.json, else config.json);
the tokenizer's eos is never consulted. A GGUF: the `tokenizer.ggml.eos_token_id` it loads as eos.

Imports: facts, runtimes.stops, runtimes.engines.engine.
"""

from collections.abc import Sequence

from stopdoctor.facts.model_facts import ModelFacts
from stopdoctor.runtimes.engines.engine import Engine, HiddenDefault, SamplingDefaults
from stopdoctor.runtimes.stops import (GGUF_EOS_RULE, RuntimeStops, StopId, generation_eos, generation_file,
                                       generation_known, gguf_eos, stop_ids)

NAME = "transformers"


def stop_sets(facts: ModelFacts, llama_eog: Sequence[StopId]) -> list[RuntimeStops]:
    if facts.is_gguf:
        return [RuntimeStops(NAME, tuple(gguf_eos(facts)), GGUF_EOS_RULE)]
    return [RuntimeStops(NAME, tuple(stop_ids(generation_eos(facts))), f"{generation_file(facts)} eos_token_id only",
                         generation_known(facts))]


ENGINE = Engine(
    name=NAME, listed=0, hf_core=True, generation_config_only=True,
    stop_rule="generation_config.eos_token_id only; the tokenizer's eos is never consulted",
    stop_rule_source="transformers generation/configuration_utils.py GenerationConfig.eos_token_id",
    stop_sets=stop_sets,
    spellings=("transformers serve",),
    defaults=(
        HiddenDefault("transformers", "4.x/5.x", "model.generate without max_new_tokens", "total length (prompt included)",
                      20, "max_new_tokens", "generation/configuration_utils.py GenerationConfig.max_length = 20"),
    ),
    sampling=SamplingDefaults(
        {"temperature": 1.0, "top_p": 1.0, "top_k": 50, "min_p": None, "repetition_penalty": 1.0, "presence_penalty": None},
        "transformers 5.24 generation/configuration_utils.py GenerationConfig._get_default_generation_params"),
)
