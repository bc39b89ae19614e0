"""transformers (`model.generate`, `transformers serve`).

Imports: runtimes.engines.engine.
"""

from stopdoctor.runtimes.engines.engine import Engine, HiddenDefault, SamplingDefaults

ENGINE = Engine(
    name="transformers", listed=0, hf_core=True, generation_config_only=True,
    stop_rule="generation_config.eos_token_id only; the tokenizer's eos is never consulted",
    stop_rule_source="runtimes/stops.py (transformers GenerationConfig eos handling)",
    spellings=("transformers serve",),
    defaults=(
        HiddenDefault("transformers", "4.x/5.x", "model.generate without max_new_tokens", "total length (prompt included)",
                      20, "max_new_tokens", "generation/configuration_utils.py GenerationConfig.max_length = 20"),
    ),
    sampling=SamplingDefaults(
        {"temperature": 1.0, "top_p": 1.0, "top_k": 50, "min_p": None, "repetition_penalty": 1.0, "presence_penalty": None},
        "transformers 5.24 generation/configuration_utils.py GenerationConfig._get_default_generation_params"),
)
