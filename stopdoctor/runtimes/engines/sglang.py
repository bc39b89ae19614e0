"""SGLang (`python -m sglang.launch_server`, `sglang serve`).

Imports: runtimes.engines.engine.
"""

from stopdoctor.runtimes.engines.engine import Engine, HiddenDefault

ENGINE = Engine(
    name="sglang", listed=6, serving_kind="sglang",
    stop_rule="config.json eos ∪ generation_config.json eos ∪ tokenizer eos ∪ a few added stop tokens",
    stop_rule_source="sglang 0.5.23 srt/configs/model_config.py _get_hf_eos_token_id, "
                     "srt/managers/schedule_batch.py Req._check_token_based_finish",
    launchers=("sglang", "sglang.launch_server"),
    launchers_source="the `sglang` console script and `python -m sglang.launch_server`",
    owned_by=("sglang",),
    defaults=(
        HiddenDefault("sglang", "0.5.23", "/v1/completions", "max new tokens", 16, '"max_tokens"',
                      "srt/entrypoints/openai/protocol.py CompletionRequest.max_tokens = 16"),
        HiddenDefault("sglang", "0.5.23", "Engine.generate and /generate", "max new tokens", 128, "max_new_tokens",
                      "srt/sampling/sampling_params.py SamplingParams.max_new_tokens = 128"),
    ),
)
