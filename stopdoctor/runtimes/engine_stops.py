"""Every runtime's stop set for one model, each computed by its engine's module in
`runtimes/engines/` (`Engine.stop_sets`, citing the engine's source and version): the four core
runtimes (transformers, vLLM, TGI, llama.cpp) first, then the other engines, in report order.

Imports: facts, runtimes.stops, runtimes.engines.
"""

from __future__ import annotations

from collections.abc import Sequence

from stopdoctor.facts.model_facts import ModelFacts
from stopdoctor.runtimes.engines import engines, registered
from stopdoctor.runtimes.stops import RUNTIMES, RuntimeStops, StopId

LLAMA_CPP_SET = "llama.cpp"  # the core set other engines that load a GGUF through llama.cpp reuse
# The engines' stop sets `inspect` lists beyond the core four (and `generate --stops runtime:NAME`
# takes), in report order.
ENGINES = tuple(name for e in engines() if e.stop_sets_in_inspect for name in e.stop_set_names() if name not in RUNTIMES)


def _core_sets(name: str, facts: ModelFacts) -> list[RuntimeStops]:
    sets = registered(name).stop_sets
    assert sets is not None, name  # every core runtime (and llama.cpp's set) has a stop-set rule
    return sets(facts, ())


def _llama_cpp(facts: ModelFacts) -> list[RuntimeStops]:
    return _core_sets(LLAMA_CPP_SET, facts)


def effective_stops(facts: ModelFacts) -> list[RuntimeStops]:
    """The four core runtimes' stop sets (`runtimes.stops.RUNTIMES`, in that order)."""
    return [s for name in RUNTIMES for s in _core_sets(name, facts)]


def all_stops(facts: ModelFacts) -> list[RuntimeStops]:
    """Every runtime's stop set `inspect` lists: the core runtimes, then the registered engines'."""
    llama = _llama_cpp(facts)
    eog = list(llama[0].stops)
    out: list[RuntimeStops] = []
    for e in engines():
        if e.stop_sets is not None and e.stop_sets_in_inspect:
            out += llama if e is registered(LLAMA_CPP_SET) else e.stop_sets(facts, eog)
    return out


def engine_stops(facts: ModelFacts, llama_eog: Sequence[StopId], in_inspect: bool | None = True) -> list[RuntimeStops]:
    """The stop sets of the engines beyond the core four; `llama_eog` is llama.cpp's set, already
    computed; `in_inspect=None`: every engine's, listed or not."""
    return [s for e in engines() if e.stop_sets is not None and in_inspect in (None, e.stop_sets_in_inspect)
            and e.name not in RUNTIMES for s in e.stop_sets(facts, llama_eog)]


def llama_cpp_eog_set(facts: ModelFacts, model_stops: Sequence[RuntimeStops] | None = None) -> list[StopId]:
    """llama.cpp's end-of-generation set: from `model_stops` when it holds it, else computed."""
    found = next((s for s in model_stops or () if s.runtime == LLAMA_CPP_SET), None)
    return list(found.stops) if found is not None else list(_llama_cpp(facts)[0].stops)
