"""Every runtime's stop set for one model: the four core runtimes (`runtimes.stops`), then each
registered engine's own set (`Engine.stop_sets`, in its module in `runtimes/engines/`, which cites
the engine's source and version).

Imports: facts, runtimes.stops, runtimes.engines.
"""

from __future__ import annotations

from collections.abc import Sequence

from stopdoctor.facts.model_facts import ModelFacts
from stopdoctor.runtimes.engines import engines, stop_sets
from stopdoctor.runtimes.stops import RuntimeStops, StopId, effective_stops

LLAMA_CPP_SET = "llama.cpp"  # the core set other engines that load a GGUF through llama.cpp reuse
# The engines' stop sets `inspect` lists (and `generate --stops runtime:NAME` takes), in report order.
ENGINES = tuple(name for e in engines() if e.stop_sets_in_inspect for name in e.stop_set_names())


def all_stops(facts: ModelFacts) -> list[RuntimeStops]:
    """Every runtime's stop set `inspect` lists: the four core runtimes
    (`runtimes.stops.effective_stops`), then the registered engines'."""
    core = effective_stops(facts)
    llama = next(s for s in core if s.runtime == LLAMA_CPP_SET)
    return core + engine_stops(facts, list(llama.stops))


def engine_stops(facts: ModelFacts, llama_eog: Sequence[StopId], in_inspect: bool | None = True) -> list[RuntimeStops]:
    """The registered engines' stop sets; `llama_eog` is llama.cpp's set, already computed;
    `in_inspect=None`: every engine's, listed or not."""
    return stop_sets(facts, llama_eog, in_inspect)
