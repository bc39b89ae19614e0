"""vLLM (`vllm serve`, the OpenAI api_server module, `--config` YAML).

Served stops: the tokenizer eos plus the generation config's eos ids; `--generation-config
auto|vllm` reads the model's own file, a folder reads that folder's, a GGUF has none
(`ModelConfig.try_get_generation_config`).

Imports: core, facts, runtimes.stops, runtimes.engines.engine.
"""

from collections.abc import Sequence

from stopdoctor.facts.model_facts import ModelFacts
from stopdoctor.facts.serving import generation_config_eos
from stopdoctor.facts.serving_config import ServingConfig
from stopdoctor.core.types import Location
from stopdoctor.runtimes.engines.engine import Engine, HiddenDefault, ReasoningParser, SamplingDefaults
from stopdoctor.runtimes.stops import (GGUF_EOS_RULE, RuntimeStops, StopId, dedupe, generation_eos, generation_file,
                                       generation_known, gguf_eos, stop_ids, tokenizer_eos, tokenizer_known)

NAME = "vllm"


# --generation-config values that load the model's own generation config for its eos ids; "vllm"
# only drops its sampling defaults (ModelConfig.try_get_generation_config vs get_diff_sampling_param).
OWN_GENERATION_CONFIG = ("auto", "vllm")


def stop_sets(facts: ModelFacts, llama_eog: Sequence[StopId]) -> list[RuntimeStops]:
    if facts.is_gguf:
        return [RuntimeStops(NAME, tuple(gguf_eos(facts)), GGUF_EOS_RULE)]
    stops = dedupe(stop_ids(tokenizer_eos(facts)) + stop_ids(generation_eos(facts)))
    return [RuntimeStops(NAME, tuple(stops), f"tokenizer eos plus {generation_file(facts)} eos_token_id",
                         generation_known(facts) and tokenizer_known(facts))]


def served_stops(facts: ModelFacts, serving: ServingConfig, model_stops: Sequence[RuntimeStops] | None) -> RuntimeStops:
    tokenizer = stop_ids(facts.declared_for("eos") if facts.is_gguf else tokenizer_eos(facts))
    choice = str(serving.generation_config.value) if serving.generation_config else "auto"
    if facts.is_gguf:
        # try_get_generation_config returns None for a GGUF: only the tokenizer eos stops.
        return RuntimeStops(NAME, tuple(dedupe(tokenizer)), "GGUF: the tokenizer eos only")
    if choice in OWN_GENERATION_CONFIG:
        generation = stop_ids(generation_eos(facts))
        return RuntimeStops(NAME, tuple(dedupe(tokenizer + generation)),
                            f"tokenizer eos plus the model's generation config eos_token_id (--generation-config {choice})")
    found = generation_config_eos(serving, choice)
    if found is None:
        return RuntimeStops(NAME, tuple(dedupe(tokenizer)), f"tokenizer eos; --generation-config {choice} could not be read",
                            complete=False)
    folder, ids = found
    where = Location(str(folder / "generation_config.json"), "eos_token_id")
    return RuntimeStops(NAME, tuple(dedupe(tokenizer + [StopId(i, None, where) for i in sorted(ids)])),
                        f"tokenizer eos plus {folder / 'generation_config.json'} eos_token_id")


def stop_fix(line: str, serving: ServingConfig, all_ids: bool) -> tuple[str, str]:
    return line, (serving.generation_config.key if serving.generation_config else "--generation-config")


def stop_advice(markers: Sequence[tuple[str, int | None]], gguf: str | None) -> str | None:
    ids = [token_id for _, token_id in markers if token_id is not None]
    if len(ids) != len(markers):
        return None
    if len(ids) == 1:
        return (f"add {ids[0]} to the model's generation_config.json eos_token_id (stopdoctor fix MODEL --write) "
                f"and serve with --generation-config auto (per request: \"stop_token_ids\": [{ids[0]}])")
    return (f"add {' and '.join(map(str, ids))} to the model's generation_config.json eos_token_id (stopdoctor fix "
            f"MODEL --write) and serve with --generation-config auto (per request: \"stop_token_ids\": {ids})")


ENGINE = Engine(
    name=NAME, listed=1, hf_core=True, serving_kind="vllm",
    stop_rule="the tokenizer's eos plus every generation_config.json eos_token_id",
    stop_rule_source="vllm ModelConfig.try_get_generation_config (the generation config's eos ids join the "
                     "tokenizer eos); served under a serving file: served_stops in this module (runtimes/engines/vllm.py)",
    launchers=("vllm", "vllm.entrypoints.openai.api_server"),
    launchers_source="the `vllm` console script and `python -m vllm.entrypoints.openai.api_server`",
    config_files=("*.yaml", "*.yml"),  # the file given to `vllm serve --config`
    mentioned_by=r"(?<![\w-])vllm(?![\w-])|vllm\.entrypoints",  # not vllm-mlx, not my_vllm
    owned_by=("vllm",),
    stop_sets=stop_sets,
    served_stops=served_stops,
    stop_advice=stop_advice,
    serves_jinja_template=True,
    stop_fix=stop_fix,
    fix_edit="generation-config",
    fix_notes=True,
    own_generation_config=OWN_GENERATION_CONFIG,
    version_route="/version",  # vllm/entrypoints/openai/api_server.py show_version
    stop_string_kept_on_request=True,  # SamplingParams.include_stop_str_in_output
    # SamplingParams.skip_special_tokens defaults to True; stop strings are checked by the
    # detokenizer on the output text (vllm/sampling_params.py, v1/engine/detokenizer.py).
    stop_strings_on_visible_text=True,
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
