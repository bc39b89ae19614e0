"""LMDeploy (`lmdeploy serve api_server MODEL`, `python -m lmdeploy.serve.openai.api_server MODEL`,
`lmdeploy.pipeline`), read at lmdeploy 0.16.0 (commit 1263d5cd, Aug 2026).

Stop set: `AsyncEngine._determine_gen_config` (lmdeploy/serve/core/async_engine.py) takes the
request's stop words as ids, else the chat template's `stop_words`, then
`GenerationConfig.update_from_hf_gen_cfg` (lmdeploy/messages.py) adds the tokenizer's
`eos_token_id` and every `eos_token_id` of the model's generation config (`get_hf_gen_cfg`,
lmdeploy/utils.py: transformers `GenerationConfig.from_pretrained(model_path)`, i.e.
generation_config.json only; `{}` when it is absent). The model's own Jinja template
(`HFChatTemplate`, lmdeploy/model.py) has the tokenizer's eos (and eot) text as its stop words, so a
model with a template of its own stops on the tokenizer eos ∪ generation_config.json eos; a
built-in template lmdeploy matches by the model path (`get_chat_template`: vicuna, llama2,
mistral, ...) may add a stop word of its own, mostly the eos text again. Before v0.7.2 (#3257)
the tokenizer eos was added only when generation_config.json named an eos or the template had stop
words. It does not load GGUF files.

Budgets: the OpenAI routes take `max_completion_tokens`, else `max_tokens`, else None
(lmdeploy/serve/openai/endpoints/common.py; both default to None in serve/openai/protocol.py, whatever
the completions route's docstring says of 16), and None becomes the rest of the session
(`session_len` minus the prompt; `_determine_gen_config`): no hidden cap there. `/generate` and the
offline pipeline have one (below).

Imports: facts, runtimes.stops, runtimes.engines.engine.
"""

from collections.abc import Sequence

from stopdoctor.facts.model_facts import ModelFacts
from stopdoctor.facts.serving_config import ServingConfig
from stopdoctor.facts.serving_engines import CommandSyntax
from stopdoctor.runtimes.engines.engine import Engine, HiddenDefault, SamplingDefaults
from stopdoctor.runtimes.stops import RuntimeStops, StopId, dedupe, generation_file_eos, stop_ids, tokenizer_eos

NAME = "lmdeploy"
VERSION = "0.16.0"


def stop_sets(facts: ModelFacts, llama_eog: Sequence[StopId]) -> list[RuntimeStops]:
    if facts.is_gguf:
        return []  # no GGUF loader: `served_stops` then says it does not load this model format
    tokenizer = stop_ids(tokenizer_eos(facts))
    # Complete only with the model's own template: a built-in one may add stop words.
    known = bool(tokenizer) and bool(facts.templates)
    return [RuntimeStops(NAME, tuple(dedupe(tokenizer + stop_ids(generation_file_eos(facts)))),
                         f"lmdeploy {VERSION}: the tokenizer eos plus generation_config.json eos_token_id "
                         "(GenerationConfig.update_from_hf_gen_cfg)", known)]


def stop_fix(line: str, serving: ServingConfig, all_ids: bool) -> tuple[str, str]:
    """The fix is in the model's files; the finding points at where the command names the model."""
    return line, serving.model.key if serving.model is not None else "api_server"


ENGINE = Engine(
    name=NAME, listed=9, serving_kind=NAME,
    stop_rule="the tokenizer's eos plus every generation_config.json eos_token_id, plus the chat template's stop words",
    stop_rule_source="lmdeploy 0.16.0 lmdeploy/messages.py GenerationConfig.update_from_hf_gen_cfg, "
                     "lmdeploy/serve/core/async_engine.py AsyncEngine._determine_gen_config",
    launchers=("lmdeploy", "lmdeploy.serve.openai.api_server"),
    launchers_source="the `lmdeploy` console script (setup.py, lmdeploy/cli/serve.py `serve api_server MODEL_PATH`) "
                     "and `python -m lmdeploy.serve.openai.api_server` (fire.Fire(serve))",
    owned_by=("lmdeploy",),  # lmdeploy/serve/openai/protocol.py ModelCard.owned_by
    command=CommandSyntax(NAME, r"\blmdeploy\s+serve\s+api_server\b|\blmdeploy\.serve\.openai\.api_server\b",
                          ("--model-path", "--model_path"),
                          model_after=(("serve", "api_server"), ("lmdeploy.serve.openai.api_server",))),
    stop_sets=stop_sets,
    stop_sets_in_inspect=False,
    stop_fix=stop_fix,
    # its parsers (lmdeploy/serve/parsers/reasoning_parser/: default, deepseek-v3, deepseek-v32,
    # deepseek-v4; gpt-oss in _openai_harmony.py) are not vLLM's and are not read here
    vllm_parser_names=False,
    defaults=(
        HiddenDefault(NAME, VERSION, "/generate", "max new tokens", 128, '"max_tokens"',
                      "lmdeploy/serve/openai/protocol.py GenerateReqInput.max_tokens = 128, "
                      "serve/openai/endpoints/common.py"),
        HiddenDefault(NAME, VERSION, "pipeline() and AsyncEngine.generate without a GenerationConfig", "max new tokens",
                      512, "GenerationConfig(max_new_tokens=...)",
                      "lmdeploy/messages.py GenerationConfig.max_new_tokens = 512"),
    ),
    # The server samples (build_generation_config sets do_sample=True) from the model's
    # generation_config.json (`--generation-config auto`, the default), else these; the offline
    # pipeline decodes greedily unless GenerationConfig(do_sample=True).
    sampling=SamplingDefaults(
        {"temperature": 0.8, "top_p": 1.0, "top_k": 50, "min_p": 0.0, "repetition_penalty": 1.0, "presence_penalty": None},
        "lmdeploy 0.16.0 lmdeploy/messages.py GenerationConfig defaults, "
        "lmdeploy/serve/core/generation_config.py build_generation_config"),
)
