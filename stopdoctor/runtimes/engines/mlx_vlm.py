"""mlx-vlm (`mlx_vlm.server`, `mlx_vlm.generate`).

Stop set, mlx-vlm 0.7.10: `mlx_vlm/utils.py load_config` merges generation_config.json's
`eos_token_id` over config.json's whenever the key is present (`_merge_generation_config`);
`StoppingCriteria` stops on that set united with the tokenizer's eos (`resolve_eos_token_ids`).
Releases before the union (mlx-vlm #244) compared only `tokenizer.eos_token_id`: Gemma 3's
`[1, 106]` list was ignored and generation ran to max tokens; `mlx-vlm-legacy` is that rule.

Imports: facts, runtimes.stops, runtimes.engines.engine.
"""

from collections.abc import Sequence

from stopdoctor.facts.model_facts import ModelFacts
from stopdoctor.facts.serving_engines import CommandSyntax
from stopdoctor.runtimes.engines.engine import Engine, HiddenDefault
from stopdoctor.runtimes.stops import (RuntimeStops, StopId, config_top_eos, dedupe, generation_file_eos, stop_ids,
                                       tokenizer_eos)


def stop_sets(facts: ModelFacts, llama_eog: Sequence[StopId]) -> list[RuntimeStops]:
    if facts.is_gguf:
        return []
    tokenizer = stop_ids(tokenizer_eos(facts))
    tokenizer_known = bool(tokenizer) or "tokenizer_config.json" in facts.documents
    # the key, when present, replaces config.json's value (even 0 or []).
    config = (stop_ids(generation_file_eos(facts)) if "eos_token_id" in facts.documents.get("generation_config.json", {})
              else stop_ids(config_top_eos(facts)))
    return [
        RuntimeStops("mlx-vlm", tuple(dedupe(config + tokenizer)),
                     "mlx-vlm 0.7.10: config.json eos_token_id (generation_config.json's when set) plus the tokenizer eos",
                     "config.json" in facts.documents and tokenizer_known),
        RuntimeStops("mlx-vlm-legacy", tuple(tokenizer),
                     "mlx-vlm before the eos union (mlx-vlm #244): the tokenizer eos only", tokenizer_known),
    ]


ENGINE = Engine(
    name="mlx-vlm", listed=5, serving_kind="mlx-vlm",
    stop_rule="generation_config.json eos merged over config.json's, plus the tokenizer's eos",
    stop_rule_source="mlx-vlm 0.7.10 mlx_vlm/utils.py load_config (_merge_generation_config), StoppingCriteria",
    launchers=("mlx_vlm.server", "mlx_vlm", "mlx-vlm"),
    launchers_source="`python -m mlx_vlm.server`, the `mlx_vlm` / `mlx-vlm` console scripts",
    command=CommandSyntax("mlx-vlm", r"\bmlx[_-]vlm(?:\.server|\s+server)\b", ("--model",), ("--max-tokens",)),
    stop_sets=stop_sets,
    more_stop_sets=("mlx-vlm-legacy",),
    defaults=(
        HiddenDefault("mlx-vlm", "0.7.10", "mlx_vlm.generate", "max new tokens", 2048, "--max-tokens",
                      "mlx_vlm/generate/common.py DEFAULT_MAX_TOKENS = 2048"),
    ),
)
