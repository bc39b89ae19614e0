"""What a served model really stops on: a serving configuration applied to the model's own stop ids.

`served_stops(facts, serving)` asks the engine registry: each engine's module in
`runtimes/engines/` says what its server stops on (`Engine.served_stops`: vLLM, llama.cpp, Ollama),
else its own stop set from the model's files (`Engine.stop_sets`: SGLang, MLX-LM, mlx-vlm,
llama-cpp-python, LMDeploy); an OpenAI-compatible request stops on its own `stop` and
`stop_token_ids` only. Every answer is one `RuntimeStops`, the type of the model's own stop sets.

Imports: facts (the model's facts, the parsed serving file), runtimes.stops, runtimes.engines,
runtimes.engine_stops.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from stopdoctor.facts.model_facts import ModelFacts
from stopdoctor.facts.serving import ServingConfig, read_serving
from stopdoctor.facts.serving_config import REQUEST
from stopdoctor.runtimes.engine_stops import llama_cpp_eog_set
from stopdoctor.runtimes.engines import commands, file_signatures, launcher_kinds, serving_engine
from stopdoctor.runtimes.stops import RuntimeStops, StopId


def load_serving(path: Path, kind: str | None = None) -> ServingConfig:
    """Parse a serving file (`facts.serving.read_serving`); when `kind` is None a command line's
    kind is its launcher's engine in the registry, and an unknown launcher is said to be unknown."""
    return read_serving(path, kind, launcher_kinds(), commands(), file_signatures())


def served_stops(facts: ModelFacts, serving: ServingConfig,
                 model_stops: Sequence[RuntimeStops] | None = None) -> RuntimeStops:
    """The ids (and `texts`, the stop strings) the server stops on, as one stop set named after its
    engine (`complete` False when a file it depends on could not be read). `model_stops`: the
    model's runtime stop sets (`runtimes.engine_stops.all_stops(facts)`, as `Analysis.stops` holds
    them) when already known."""
    engine = serving_engine(serving.kind)
    if engine is not None and engine.served_stops is not None:
        return engine.served_stops(facts, serving, model_stops)
    if engine is not None and engine.stop_sets is not None:
        # the engine's own set from the model's files (its module cites the engine's source)
        found = next((s for s in model_stops or () if s.runtime == engine.name), None)
        if found is None:
            own = engine.stop_sets(facts, llama_cpp_eog_set(facts, model_stops))
            found = next((s for s in own if s.runtime == engine.name), None)
        if found is None:
            return RuntimeStops(engine.name, (), f"{serving.kind} does not load this model format", complete=False)
        return found
    ids = [StopId(s.value, None, serving.location(s)) for s in serving.stop_token_ids]
    return RuntimeStops(REQUEST, tuple(ids), "the request's stop and stop_token_ids",
                        texts=tuple(s.value for s in serving.stop))
