"""Where the sampling a runtime will use comes from: per runtime, each of temperature, top_p, top_k,
min_p, repetition penalty and presence penalty with the file and key that set it, or the runtime's
own default with the source it was read from.

What each runtime reads (versions and files read):

- transformers 5.24 `generate`: generation_config.json; a key it lacks takes
  `GenerationConfig._get_default_generation_params()` (generation/configuration_utils.py:
  do_sample False, temperature 1.0, top_k 50, top_p 1.0, repetition_penalty 1.0). Sampling only
  happens when `do_sample` is true: otherwise greedy, whatever the temperature says.
- vLLM (main at commit 00388f65): `--generation-config auto` (the default) applies
  generation_config.json's repetition_penalty, temperature, top_k, top_p and min_p
  (`ModelConfig.get_diff_sampling_param`); everything else, and everything for a GGUF (which has no
  generation config), is `SamplingParams`' default (vllm/sampling_params.py: temperature 1.0,
  top_p 1.0, top_k 0 = off, min_p 0.0, repetition_penalty 1.0, presence_penalty 0.0).
  `--generation-config vllm` drops the model's values.
- llama.cpp (`llama-server`, `llama-cli`; vendored by llama-cpp-python 0.3.36):
  `common_init_sampler_from_model` (common/common.cpp) reads the GGUF's `general.sampling.*` keys
  (gguf-py/gguf/constants.py `Keys.General.SAMPLING_*`), unless the command line set that sampler;
  the rest are `common_params_sampling`'s defaults (common/common.h: temp 0.80, top_k 40,
  top_p 0.95, min_p 0.05, penalty_repeat 1.00, penalty_present 0.00). `convert_hf_to_gguf.py`
  writes those keys from generation_config.json (gguf-py/gguf/metadata.py `Metadata.load`:
  temperature→temp, top_k, top_p, min_p, repetition_penalty→penalty_repeat), so an HF folder's
  llama.cpp values are its generation_config.json's.
- llama-cpp-python 0.3.36 (a fork of the sampling code: it ignores `general.sampling.*`):
  `Llama.create_completion` defaults (llama_cpp/llama.py: temperature 0.8, top_p 0.95, min_p 0.05,
  top_k 40, repeat_penalty 1.0, presence_penalty 0.0); its server's request defaults differ only in
  repeat_penalty 1.1 (llama_cpp/server/types.py `repeat_penalty_field`).
- Ollama (ignores `general.sampling.*` too): a Modelfile's `PARAMETER`s, else
  `api.DefaultOptions()` (api/types.go, read at ollama commit 00a4cb26: temperature 0.8, top_k 40,
  top_p 0.9, repeat_penalty 1.1, presence_penalty 0.0; min_p is not in that release's options).
  Releases after that commit may have changed them.
- a request body (`check --serving request.json`): its own keys win over every default.

Imports: core, facts, runtimes.engines.
"""

from __future__ import annotations

import math

from stopdoctor.core.records import record
from stopdoctor.core.types import Location
from stopdoctor.facts.model_facts import GGUF_SAMPLING_KEYS, ModelFacts
from stopdoctor.facts.serving_config import REQUEST, ServingConfig
from stopdoctor.runtimes.engines import engines, serving_engine

KEYS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "presence_penalty")
# The keys vLLM takes from generation_config.json (ModelConfig.get_diff_sampling_param).
VLLM_GENERATION_KEYS = ("repetition_penalty", "temperature", "top_k", "top_p", "min_p")
# The generation_config.json keys a GGUF can carry (facts.model_facts.GGUF_SAMPLING_KEYS).
GGUF_KEYS = tuple(GGUF_SAMPLING_KEYS.values())
# Request body names that mean one of KEYS (an engine's serving-file names: `Engine.sampling_options`).
REQUEST_NAMES = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "min_p": "min_p",
                 "repeat_penalty": "repetition_penalty", "presence_penalty": "presence_penalty",
                 "repetition_penalty": "repetition_penalty"}


# Each engine's own sampling defaults, cited in its module (runtimes/engines/).
RUNTIME_DEFAULTS: dict[str, tuple[dict[str, object], str]] = {
    e.name: (dict(e.sampling.values), e.sampling.source) for e in engines() if e.sampling is not None}
SAMPLING_RUNTIMES = tuple(RUNTIME_DEFAULTS)


@record
class SampledValue:
    key: str  # one of KEYS
    value: object  # None: the runtime does not have this sampler
    source: str  # "generation_config.json temperature", or the default's citation
    location: Location | None = None  # the file and key, when a file set it
    default: bool = False


@record
class RuntimeSampling:
    runtime: str
    values: tuple[SampledValue, ...]
    greedy: bool  # the runtime decodes greedily (transformers without do_sample, temperature 0)
    rule: str

    def get(self, key: str) -> SampledValue | None:
        return next((v for v in self.values if v.key == key), None)


def _from_facts(facts: ModelFacts, keys: tuple[str, ...]) -> dict[str, SampledValue]:
    out = {}
    for key in keys:
        found = facts.sampling.get(key)
        if found is not None and _number(found.value):
            where = found.location
            out[key] = SampledValue(key, found.value, f"{where.file} {where.key}", where)
    return out


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _fill(runtime: str, found: dict[str, SampledValue]) -> tuple[SampledValue, ...]:
    defaults, cited = RUNTIME_DEFAULTS[runtime]
    return tuple(found.get(k) or SampledValue(k, defaults[k], cited, None, True) for k in KEYS)


def _options_engine(serving: ServingConfig | None):
    """The engine whose serving file sets sampling options of its own (Ollama's PARAMETERs), else None."""
    found = serving_engine(serving.kind) if serving is not None else None
    return found if found is not None and found.sampling_options else None


def sets_sampling(serving: ServingConfig) -> bool:
    """A request body or a serving file whose engine takes sampling options from it."""
    return serving.kind == REQUEST or _options_engine(serving) is not None


def _serving_values(serving: ServingConfig) -> dict[str, SampledValue]:
    served = _options_engine(serving)
    names = served.sampling_options if served is not None else REQUEST_NAMES
    out = {}
    for option, setting in serving.options.items():
        name = option.removeprefix("PARAMETER ") if served is not None else option
        key = names.get(name)
        if key is None or key in out:
            continue
        try:
            value = float(setting.value) if not isinstance(setting.value, bool) else None
        except (TypeError, ValueError):
            value = None
        if value is not None and math.isfinite(value):
            if key == "top_k":
                value = int(value)
            line = "" if setting.line is None else f" (line {setting.line})"
            out[key] = SampledValue(key, value, f"{serving.path.name} {setting.key}{line}", serving.location(setting))
    return out


def effective_sampling(facts: ModelFacts, serving: ServingConfig | None = None) -> list[RuntimeSampling]:
    """Each runtime's sampling for this model, and the source of every value. `serving`: a
    Modelfile (Ollama's row) or a request body (its keys win in every row)."""
    hf = not facts.is_gguf
    do_sample = facts.sampling.get("do_sample")
    sampled = bool(do_sample is not None and do_sample.value is True)
    request = _serving_values(serving) if serving is not None and serving.kind == REQUEST else {}
    served = _options_engine(serving)
    # the serving file's own options go to its engine's row (a Modelfile: Ollama's)
    own = {served.name: _serving_values(serving)} if served is not None and serving is not None else {}
    rows: list[tuple[str, dict[str, SampledValue], str, bool | None]] = []
    if hf:
        found = _from_facts(facts, ("temperature", "top_p", "top_k", "min_p", "repetition_penalty"))
        rows.append(("transformers", found, "generation_config.json, else GenerationConfig's defaults; greedy unless "
                     "do_sample is true", not sampled))
        rows.append(("vllm", _from_facts(facts, VLLM_GENERATION_KEYS),
                     "--generation-config auto: generation_config.json's repetition_penalty, temperature, top_k, top_p, "
                     "min_p; else SamplingParams' defaults", None))
        rows.append(("llama.cpp", _from_facts(facts, GGUF_KEYS),
                     "after convert_hf_to_gguf: generation_config.json's values as general.sampling.*; else "
                     "common_params_sampling's defaults", None))
    else:
        rows.append(("vllm", {}, "a GGUF has no generation config: SamplingParams' defaults", None))
        rows.append(("llama.cpp", _from_facts(facts, GGUF_KEYS),
                     "the GGUF's general.sampling.* keys (common_init_sampler_from_model), else "
                     "common_params_sampling's defaults", None))
    rows.append(("llama-cpp-python", {}, "its own defaults: it does not read general.sampling.*", None))
    rows.append(("ollama", own.get("ollama", {}), "the Modelfile's PARAMETERs, else Ollama's defaults: it does not read "
                 "general.sampling.*", None))
    out = []
    for runtime, found, rule, greedy in rows:
        values = _fill(runtime, {**found, **request})
        temperature = next(v.value for v in values if v.key == "temperature")
        if greedy is None or request.get("temperature") is not None:
            greedy = isinstance(temperature, (int, float)) and _number(temperature) and temperature <= 0
        out.append(RuntimeSampling(runtime, values, bool(greedy), rule + ("; the request body's keys win" if request else "")))
    return out

