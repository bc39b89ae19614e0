"""MLX-LM (`mlx_lm.server`, `mlx_lm.generate`).

Imports: runtimes.engines.engine.
"""

from stopdoctor.runtimes.engines.engine import Engine, HiddenDefault

ENGINE = Engine(
    name="mlx-lm", listed=4, serving_kind="mlx-lm",
    stop_rule="generation_config.json eos (when truthy, else config.json's) plus the tokenizer's eos",
    stop_rule_source="mlx-lm 0.32.2 mlx_lm/utils.py load_config, generate.py stream_generate",
    launchers=("mlx_lm.server", "mlx_lm", "mlx-lm"),
    launchers_source="`python -m mlx_lm.server`, the `mlx_lm` / `mlx-lm` console scripts (`mlx_lm server`)",
    defaults=(
        HiddenDefault("mlx-lm", "0.32.2", "mlx_lm.server (request without max_tokens)", "max new tokens", 512,
                      "--max-tokens", "mlx_lm/server.py --max-tokens default=512"),
        HiddenDefault("mlx-lm", "0.32.2", "mlx_lm.generate / stream_generate()", "max new tokens", 256, "max_tokens",
                      "mlx_lm/generate.py stream_generate(max_tokens=256)"),
    ),
)
