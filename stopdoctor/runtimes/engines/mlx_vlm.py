"""mlx-vlm (`mlx_vlm.server`, `mlx_vlm.generate`). Releases before the eos union (mlx-vlm #244)
stop on the tokenizer eos only: that stop set is `mlx-vlm-legacy` in `runtimes.engine_stops`.

Imports: runtimes.engines.engine.
"""

from stopdoctor.runtimes.engines.engine import Engine, HiddenDefault

ENGINE = Engine(
    name="mlx-vlm", listed=5, serving_kind="mlx-vlm",
    stop_rule="generation_config.json eos merged over config.json's, plus the tokenizer's eos",
    stop_rule_source="mlx-vlm 0.7.10 mlx_vlm/utils.py load_config (_merge_generation_config), StoppingCriteria",
    launchers=("mlx_vlm.server", "mlx_vlm", "mlx-vlm"),
    launchers_source="`python -m mlx_vlm.server`, the `mlx_vlm` / `mlx-vlm` console scripts",
    defaults=(
        HiddenDefault("mlx-vlm", "0.7.10", "mlx_vlm.generate", "max new tokens", 2048, "--max-tokens",
                      "mlx_vlm/generate/common.py DEFAULT_MAX_TOKENS = 2048"),
    ),
)
