"""MLX-LM (`mlx_lm.server`, `mlx_lm.generate`).

Stop set, MLX-LM 0.32.2: `mlx_lm/utils.py load_config` reads config.json's `eos_token_id` and
replaces it with generation_config.json's when that value is truthy (`if eos_token_id :=
...get(..., False)`: an `eos_token_id` of 0 there is ignored); `load()` passes it to
`TokenizerWrapper` (`mlx_lm/tokenizer_utils.py`), which adds `tokenizer.eos_token_id`;
`generate.py stream_generate` stops when `token in tokenizer.eos_token_ids`. No GGUF.

Imports: facts, runtimes.stops, runtimes.engines.engine.
"""

from collections.abc import Sequence

from stopdoctor.facts.model_facts import ModelFacts
from stopdoctor.facts.serving_engines import CommandSyntax
from stopdoctor.runtimes.engines.engine import Engine, HiddenDefault
from stopdoctor.runtimes.stops import (RuntimeStops, StopId, config_top_eos, dedupe, generation_file_eos,
                                       generation_file_eos_value, stop_ids, tokenizer_eos)


def stop_sets(facts: ModelFacts, llama_eog: Sequence[StopId]) -> list[RuntimeStops]:
    if facts.is_gguf:
        return []
    tokenizer = stop_ids(tokenizer_eos(facts))
    # generation_config's value replaces config.json's only when truthy.
    config = stop_ids(generation_file_eos(facts)) if generation_file_eos_value(facts) else stop_ids(config_top_eos(facts))
    known = "config.json" in facts.documents and (bool(tokenizer) or "tokenizer_config.json" in facts.documents)
    return [RuntimeStops("mlx-lm", tuple(dedupe(config + tokenizer)),
                         "mlx-lm 0.32.2: config.json eos_token_id (generation_config.json's when truthy) plus the tokenizer eos",
                         known)]


ENGINE = Engine(
    name="mlx-lm", listed=4, serving_kind="mlx-lm",
    stop_rule="generation_config.json eos (when truthy, else config.json's) plus the tokenizer's eos",
    stop_rule_source="mlx-lm 0.32.2 mlx_lm/utils.py load_config, generate.py stream_generate",
    launchers=("mlx_lm.server", "mlx_lm", "mlx-lm"),
    launchers_source="`python -m mlx_lm.server`, the `mlx_lm` / `mlx-lm` console scripts (`mlx_lm server`)",
    command=CommandSyntax("mlx-lm", r"\bmlx[_-]lm(?:\.server|\s+server)\b", ("--model",), ("--max-tokens",)),
    stop_sets=stop_sets,
    defaults=(
        HiddenDefault("mlx-lm", "0.32.2", "mlx_lm.server (request without max_tokens)", "max new tokens", 512,
                      "--max-tokens", "mlx_lm/server.py --max-tokens default=512"),
        HiddenDefault("mlx-lm", "0.32.2", "mlx_lm.generate / stream_generate()", "max new tokens", 256, "max_tokens",
                      "mlx_lm/generate.py stream_generate(max_tokens=256)"),
    ),
)
