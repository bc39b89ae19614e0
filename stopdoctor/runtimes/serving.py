"""What a served model really stops on: a serving configuration applied to the model's own stop ids.

`served_stops(facts, serving)` follows each engine's source (cited in the SD4xx rule docs,
`stopdoctor/rules/serving.py`):

- vLLM: the tokenizer eos plus the generation config's eos ids; `--generation-config auto|vllm`
  reads the model's own file, a folder reads that folder's, a GGUF has none.
- llama.cpp server: every end-of-generation id (`runtimes.stops`), with `--override-kv` eos/eot/eom
  ids swapped in, plus `-r` strings; `--ignore-eos` drops every id.
- Ollama: the GGUF eos id(s) plus `PARAMETER stop` strings.
- SGLang, MLX-LM, mlx-vlm, llama-cpp-python servers: the engine's own set (`runtimes.engine_stops`).
- an OpenAI-compatible request: its own `stop` and `stop_token_ids` only.

Imports: core, facts (the model's facts, the parsed serving file), runtimes.stops, runtimes.engines,
runtimes.engine_stops.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from stopdoctor.facts.model_facts import ModelFacts
from stopdoctor.facts.serving import ServingConfig, generation_config_eos, read_serving
from stopdoctor.runtimes.engine_stops import ENGINES, all_stops
from stopdoctor.runtimes.engines import launcher_kinds
from stopdoctor.runtimes.stops import RuntimeStops, effective_stops, generation_eos, tokenizer_eos


def load_serving(path: Path, kind: str | None = None) -> ServingConfig:
    """Parse a serving file (`facts.serving.read_serving`); when `kind` is None a command line's
    kind is its launcher's engine in the registry, and an unknown launcher is said to be unknown."""
    return read_serving(path, kind, launcher_kinds())


@dataclass(frozen=True)
class ServingStops:
    ids: frozenset[int]
    texts: tuple[str, ...]
    rule: str
    known: bool = True  # False when a file it depends on could not be read


def served_stops(facts: ModelFacts, serving: ServingConfig,
                 model_stops: Sequence[RuntimeStops] | None = None) -> ServingStops:
    """The ids and strings the server stops on. `model_stops`: the model's runtime stop sets
    (`runtimes.stops.effective_stops(facts)`, as `Analysis.stops` holds them) when already known."""
    if serving.kind == "vllm":
        return _vllm_stops(facts, serving)
    if serving.kind == "llamacpp":
        if serving.ignore_eos is not None and serving.ignore_eos.value:
            return ServingStops(frozenset(), tuple(s.value for s in serving.stop), "--ignore-eos: no end-of-generation id stops")
        stops = model_stops if model_stops is not None else effective_stops(facts)
        ids = set(next(s for s in stops if s.runtime == "llama.cpp").ids)
        for role in ("eos", "eot", "eom"):
            override = serving.kv_overrides.get(f"tokenizer.ggml.{role}_token_id")
            if override is not None:
                ids -= {d.id for d in facts.declared_for(role) if d.id is not None}
                ids.add(override.value)
        return ServingStops(frozenset(ids), tuple(s.value for s in serving.stop),
                            "GGUF eos/eot/eom (after --override-kv) plus llama.cpp's end-of-generation texts")
    if serving.kind == "ollama":
        # Ollama's llama.cpp runner stops on every EOG id (runner/llamarunner TokenIsEog); its own
        # engine on tokenizer.ggml.eos_token_id plus tokenizer.ggml.eos_token_ids only.
        eos = {d.id for d in facts.declared_for("eos") if d.id is not None and (facts.is_gguf or d.location.file != "config.json")}
        return ServingStops(frozenset(eos), tuple(s.value for s in serving.stop),
                            "the GGUF eos id(s) plus PARAMETER stop strings")
    if serving.kind in ENGINES:
        # SGLang, MLX, llama-cpp-python servers: the engine's own set from the model's files
        # (runtimes.engine_stops cites each engine's source).
        stops = list(model_stops) if model_stops is not None else all_stops(facts)
        engine = next((s for s in stops if s.runtime == serving.kind), None)
        if engine is None:
            return ServingStops(frozenset(), (), f"{serving.kind} does not load this model format", known=False)
        return ServingStops(frozenset(engine.ids), (), engine.rule, engine.complete)
    ids = {s.value for s in serving.stop_token_ids}
    return ServingStops(frozenset(ids), tuple(s.value for s in serving.stop), "the request's stop and stop_token_ids")


def _vllm_stops(facts: ModelFacts, serving: ServingConfig) -> ServingStops:
    tokenizer = {d.id for d in (facts.declared_for("eos") if facts.is_gguf else tokenizer_eos(facts)) if d.id is not None}
    choice = str(serving.generation_config.value) if serving.generation_config else "auto"
    if facts.is_gguf:
        # try_get_generation_config returns None for a GGUF: only the tokenizer eos stops.
        return ServingStops(frozenset(tokenizer), (), "GGUF: the tokenizer eos only")
    if choice in ("auto", "vllm"):
        # Both load the model's own generation config for its eos ids; "vllm" only drops its
        # sampling defaults (ModelConfig.try_get_generation_config vs get_diff_sampling_param).
        generation = {d.id for d in generation_eos(facts) if d.id is not None}
        return ServingStops(frozenset(tokenizer | generation), (),
                            f"tokenizer eos plus the model's generation config eos_token_id (--generation-config {choice})")
    found = generation_config_eos(serving, choice)
    if found is None:
        return ServingStops(frozenset(tokenizer), (), f"tokenizer eos; --generation-config {choice} could not be read", known=False)
    folder, generation = found
    return ServingStops(frozenset(tokenizer | generation), (),
                        f"tokenizer eos plus {folder / 'generation_config.json'} eos_token_id")
