"""vLLM (`vllm serve`, the OpenAI api_server module, `--config` YAML).

Imports: runtimes.engines.engine.
"""

from stopdoctor.runtimes.engines.engine import Engine, HiddenDefault, ReasoningParser, SamplingDefaults

ENGINE = Engine(
    name="vllm", listed=1, hf_core=True, serving_kind="vllm",
    stop_rule="the tokenizer's eos plus every generation_config.json eos_token_id",
    stop_rule_source="runtimes/stops.py and runtimes/serving.py (ModelConfig.try_get_generation_config)",
    launchers=("vllm", "vllm.entrypoints.openai.api_server"),
    launchers_source="the `vllm` console script and `python -m vllm.entrypoints.openai.api_server`",
    config_files=("*.yaml", "*.yml"),  # the file given to `vllm serve --config`
    owned_by=("vllm",),
    defaults=(
        HiddenDefault("vllm", "0.33.0", "/v1/completions", "max new tokens", 16, '"max_tokens"',
                      "vllm/entrypoints/openai/completion/protocol.py CompletionRequest.max_tokens = 16"),
        HiddenDefault("vllm", "0.33.0", "offline LLM.generate", "max new tokens", 16, "SamplingParams(max_tokens=...)",
                      "vllm/sampling_params.py SamplingParams.max_tokens = 16"),
    ),
    sampling=SamplingDefaults(
        {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0, "repetition_penalty": 1.0, "presence_penalty": 0.0},
        "vllm/sampling_params.py SamplingParams defaults (main at 00388f65)"),
    reasoning_parsers=(
        ReasoningParser(frozenset({"openai_gptoss", "gpt_oss", "gptoss"}), "harmony",
                        "vllm/reasoning/gptoss_reasoning_parser.py"),
        # Everything before `</think>` is reasoning, all of the output when none comes.
        ReasoningParser(frozenset({"deepseek_r1"}), "open-ended", "vllm/reasoning/deepseek_r1_reasoning_parser.py"),
        # Needed the open tag in the output until PR #34779.
        ReasoningParser(frozenset({"qwen3"}), "open-tag", "vllm/reasoning/qwen3_reasoning_parser.py", until="0.16.1rc0"),
    ),
)
