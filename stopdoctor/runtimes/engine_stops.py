"""The engines beyond the four core runtimes: MLX-LM, mlx-vlm, SGLang and llama-cpp-python, each
with the stop ids its generate loop really checks, read from its source (version and function
cited beside each rule).

- MLX-LM 0.32.2: `mlx_lm/utils.py load_config` reads config.json's `eos_token_id` and replaces it
  with generation_config.json's when that value is truthy (`if eos_token_id := ...get(..., False)`:
  an `eos_token_id` of 0 there is ignored); `load()` passes it to `TokenizerWrapper`
  (`mlx_lm/tokenizer_utils.py`), which adds `tokenizer.eos_token_id`; `generate.py
  stream_generate` stops when `token in tokenizer.eos_token_ids`. No GGUF.
- mlx-vlm 0.7.10: `mlx_vlm/utils.py load_config` merges generation_config.json's `eos_token_id`
  over config.json's whenever the key is present (`_merge_generation_config`); `StoppingCriteria`
  stops on that set united with the tokenizer's eos (`resolve_eos_token_ids`). Releases before the
  union (mlx-vlm #244) compared only `tokenizer.eos_token_id`: Gemma 3's `[1, 106]` list was
  ignored and generation ran to max tokens; `mlx-vlm-legacy` is that rule.
- SGLang 0.5.23: `ModelConfig._get_hf_eos_token_id` (srt/configs/model_config.py) = config.json
  `eos_token_id` ∪ generation_config.json `eos_token_id`; `Req._check_token_based_finish`
  (srt/managers/schedule_batch.py) also stops on `tokenizer.eos_token_id` and on the added tokens
  `attach_additional_stop_token_ids` finds (srt/utils/hf_transformers/common.py:
  `<|eom_id|>`, `<|content_model_end_sampling|>`, `<|ifm|im_end|>`). The token that ended a
  request is returned as `matched_stop`.
- llama-cpp-python 0.3.36: `Llama._create_completion` (llama_cpp/llama.py) breaks on
  `llama_vocab_is_eog(token)`: llama.cpp's own end-of-generation set; its chat handlers
  (`Jinja2ChatFormatter`) add the eos text as a stop string and `[eos_token_id]` as a stopping
  criterion, both already in that set.

Imports: core, facts, runtimes.stops.
"""

from __future__ import annotations

from stopdoctor.core.types import Location
from stopdoctor.facts.model_facts import DeclaredId, ModelFacts
from stopdoctor.runtimes.stops import RuntimeStops, StopId, dedupe, effective_stops, tokenizer_eos

ENGINES = ("mlx-lm", "mlx-vlm", "mlx-vlm-legacy", "sglang", "llama-cpp-python")
# SGLang srt/utils/hf_transformers/common.py `_ADDITIONAL_STOP_TOKEN_TEXTS`: added tokens it stops
# on whatever the model's files declare.
SGLANG_ADDITIONAL_STOP_TEXTS = ("<|eom_id|>", "<|content_model_end_sampling|>", "<|ifm|im_end|>")


def _ids(declared: list[DeclaredId]) -> list[StopId]:
    return [StopId(d.id, d.text, d.location) for d in declared if d.id is not None]


def _config_top(facts: ModelFacts) -> list[DeclaredId]:
    """config.json's top-level eos_token_id (what `json.load(config.json).get("eos_token_id")` sees)."""
    return [d for d in facts.declared_for("eos", "config.json") if "." not in (d.location.key or "")]


def _generation(facts: ModelFacts) -> list[DeclaredId]:
    return facts.declared_for("eos", "generation_config.json")


def _generation_raw(facts: ModelFacts) -> object:
    document = facts.documents.get("generation_config.json")
    return document.get("eos_token_id") if isinstance(document, dict) else None


def all_stops(facts: ModelFacts) -> list[RuntimeStops]:
    """Every runtime's stop set: the four core runtimes (`runtimes.stops.effective_stops`), then
    the engines of this module."""
    core = effective_stops(facts)
    llama = next(s for s in core if s.runtime == "llama.cpp")
    return core + engine_stops(facts, list(llama.stops))


def engine_stops(facts: ModelFacts, llama_eog: list[StopId]) -> list[RuntimeStops]:
    """The stop sets of the engines above; `llama_eog` is llama.cpp's set, already computed."""
    if facts.is_gguf:
        return _gguf_engine_stops(facts, llama_eog)
    tokenizer = _ids(tokenizer_eos(facts))
    has_config = "config.json" in facts.documents
    tokenizer_known = bool(tokenizer) or "tokenizer_config.json" in facts.documents
    # MLX-LM: generation_config's value replaces config.json's only when truthy.
    mlx_config = _ids(_generation(facts)) if _generation_raw(facts) else _ids(_config_top(facts))
    # mlx-vlm: the key, when present, replaces config.json's value (even 0 or []).
    vlm_config = (_ids(_generation(facts)) if "eos_token_id" in facts.documents.get("generation_config.json", {})
                  else _ids(_config_top(facts)))
    sglang = _ids(_config_top(facts)) + (_ids(_generation(facts)) if _generation_raw(facts) else []) + tokenizer
    found = facts.vocab.exact_ids(SGLANG_ADDITIONAL_STOP_TEXTS)
    sglang += [StopId(i, t, Location("sglang additional stop tokens")) for t, i in found.items()
               if facts.vocab.token(i) is not None and facts.vocab.is_special(i)]
    return [
        RuntimeStops("mlx-lm", tuple(dedupe(mlx_config + tokenizer)),
                     "mlx-lm 0.32.2: config.json eos_token_id (generation_config.json's when truthy) plus the tokenizer eos",
                     has_config and tokenizer_known),
        RuntimeStops("mlx-vlm", tuple(dedupe(vlm_config + tokenizer)),
                     "mlx-vlm 0.7.10: config.json eos_token_id (generation_config.json's when set) plus the tokenizer eos",
                     has_config and tokenizer_known),
        RuntimeStops("mlx-vlm-legacy", tuple(tokenizer),
                     "mlx-vlm before the eos union (mlx-vlm #244): the tokenizer eos only", tokenizer_known),
        RuntimeStops("sglang", tuple(dedupe(sglang)),
                     "sglang 0.5.23: config.json plus generation_config.json eos_token_id, the tokenizer eos, "
                     "and its additional stop tokens", has_config and tokenizer_known),
        RuntimeStops("llama-cpp-python", tuple(llama_eog),
                     "llama-cpp-python 0.3.36: llama.cpp's end-of-generation set (llama_vocab_is_eog) after conversion",
                     tokenizer_known),
    ]


def _gguf_engine_stops(facts: ModelFacts, llama_eog: list[StopId]) -> list[RuntimeStops]:
    eos = _ids([d for d in facts.declared_for("eos") if d.location.key == "tokenizer.ggml.eos_token_id"])
    found = facts.vocab.exact_ids(SGLANG_ADDITIONAL_STOP_TEXTS)
    extra = [StopId(i, t, Location("sglang additional stop tokens")) for t, i in found.items()]
    return [
        RuntimeStops("sglang", tuple(dedupe(eos + extra)),
                     "sglang 0.5.23 --load-format gguf: the eos transformers reads from the GGUF, plus its additional "
                     "stop tokens (no generation_config.json beside a GGUF)"),
        RuntimeStops("llama-cpp-python", tuple(llama_eog),
                     "llama-cpp-python 0.3.36: llama.cpp's end-of-generation set (llama_vocab_is_eog)"),
    ]
