"""Text Generation Inference (TGI).

Stop set: generation_config.json's `eos_token_id` when it is a list, else the tokenizer's eos.

Imports: facts, runtimes.stops, runtimes.engines.engine.
"""

from collections.abc import Sequence

from stopdoctor.facts.model_facts import ModelFacts
from stopdoctor.runtimes.engines.engine import Engine
from stopdoctor.runtimes.stops import (GGUF_EOS_RULE, RuntimeStops, StopId, generation_eos, gguf_eos, stop_ids,
                                       tokenizer_eos, tokenizer_known)

NAME = "tgi"


def stop_sets(facts: ModelFacts, llama_eog: Sequence[StopId]) -> list[RuntimeStops]:
    if facts.is_gguf:
        return [RuntimeStops(NAME, tuple(gguf_eos(facts)), GGUF_EOS_RULE)]
    if isinstance(facts.documents.get("generation_config.json", {}).get("eos_token_id"), list):
        return [RuntimeStops(NAME, tuple(stop_ids(generation_eos(facts))), "generation_config.json eos_token_id (a list)", True)]
    return [RuntimeStops(NAME, tuple(stop_ids(tokenizer_eos(facts))),
                         "tokenizer eos (generation_config eos is not a list)", tokenizer_known(facts))]


ENGINE = Engine(
    name=NAME, listed=2, hf_core=True,
    stop_rule="generation_config eos_token_id when it is a list, else the tokenizer's eos",
    stop_rule_source="TGI's eos reading as stopdoctor has modelled it (runtimes/engines/tgi.py; its source not re-read here)",
    stop_sets=stop_sets,
    spellings=("text-generation-inference",),
)
