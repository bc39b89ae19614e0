"""SGLang (`python -m sglang.launch_server`, `sglang serve`).

Stop set, SGLang 0.5.23: `ModelConfig._get_hf_eos_token_id` (srt/configs/model_config.py) =
config.json `eos_token_id` ∪ generation_config.json `eos_token_id`; `Req._check_token_based_finish`
(srt/managers/schedule_batch.py) also stops on `tokenizer.eos_token_id` and on the added tokens
`attach_additional_stop_token_ids` finds (srt/utils/hf_transformers/common.py: `<|eom_id|>`,
`<|content_model_end_sampling|>`, `<|ifm|im_end|>`). The token that ended a request is returned as
`matched_stop`.

Imports: core, facts, runtimes.stops, runtimes.engines.engine.
"""

from collections.abc import Sequence

from stopdoctor.core.types import Location
from stopdoctor.facts.model_facts import ModelFacts
from stopdoctor.facts.serving_engines import CommandSyntax
from stopdoctor.runtimes.engines.engine import Engine, HiddenDefault
from stopdoctor.runtimes.stops import (RuntimeStops, StopId, config_top_eos, dedupe, generation_file_eos,
                                       generation_file_eos_value, stop_ids, tokenizer_eos)

# srt/utils/hf_transformers/common.py `_ADDITIONAL_STOP_TOKEN_TEXTS`: added tokens it stops on
# whatever the model's files declare.
ADDITIONAL_STOP_TEXTS = ("<|eom_id|>", "<|content_model_end_sampling|>", "<|ifm|im_end|>")


def stop_sets(facts: ModelFacts, llama_eog: Sequence[StopId]) -> list[RuntimeStops]:
    found = facts.vocab.exact_ids(ADDITIONAL_STOP_TEXTS)
    if facts.is_gguf:
        eos = stop_ids([d for d in facts.declared_for("eos") if d.location.key == "tokenizer.ggml.eos_token_id"])
        extra = [StopId(i, t, Location("sglang additional stop tokens")) for t, i in found.items()]
        return [RuntimeStops("sglang", tuple(dedupe(eos + extra)),
                             "sglang 0.5.23 --load-format gguf: the eos transformers reads from the GGUF, plus its "
                             "additional stop tokens (no generation_config.json beside a GGUF)")]
    tokenizer = stop_ids(tokenizer_eos(facts))
    stops = (stop_ids(config_top_eos(facts)) + (stop_ids(generation_file_eos(facts)) if generation_file_eos_value(facts) else [])
             + tokenizer)
    stops += [StopId(i, t, Location("sglang additional stop tokens")) for t, i in found.items()
              if facts.vocab.token(i) is not None and facts.vocab.is_special(i)]
    known = "config.json" in facts.documents and (bool(tokenizer) or "tokenizer_config.json" in facts.documents)
    return [RuntimeStops("sglang", tuple(dedupe(stops)),
                         "sglang 0.5.23: config.json plus generation_config.json eos_token_id, the tokenizer eos, "
                         "and its additional stop tokens", known)]


ENGINE = Engine(
    name="sglang", listed=6, serving_kind="sglang",
    stop_rule="config.json eos ∪ generation_config.json eos ∪ tokenizer eos ∪ a few added stop tokens",
    stop_rule_source="sglang 0.5.23 srt/configs/model_config.py _get_hf_eos_token_id, "
                     "srt/managers/schedule_batch.py Req._check_token_based_finish",
    launchers=("sglang", "sglang.launch_server"),
    launchers_source="the `sglang` console script and `python -m sglang.launch_server`",
    command=CommandSyntax("sglang", r"\bsglang(?:\.launch_server|\s+serve)\b", ("--model-path", "--model")),
    stop_sets=stop_sets,
    request_stop_ids=True,  # SamplingParams.stop_token_ids
    version_route="/version",  # srt/entrypoints/http_server.py
    # probe-server has always sent it include_stop_str_in_output; its own request field for a kept
    # stop string is no_stop_trim (srt/entrypoints/openai/protocol.py CompletionRequest): unverified here
    stop_string_kept_on_request=True,
    owned_by=("sglang",),
    defaults=(
        HiddenDefault("sglang", "0.5.23", "/v1/completions", "max new tokens", 16, '"max_tokens"',
                      "srt/entrypoints/openai/protocol.py CompletionRequest.max_tokens = 16"),
        HiddenDefault("sglang", "0.5.23", "Engine.generate and /generate", "max new tokens", 128, "max_new_tokens",
                      "srt/sampling/sampling_params.py SamplingParams.max_new_tokens = 128"),
    ),
)
