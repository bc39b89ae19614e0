"""What stopdoctor expects of a serving engine at a version: the one question `probe-server` asks
the runtimes stage (`expected_of`), answered by the engine registry (`runtimes.engines`: each
engine's stop rule and hidden budgets and contexts); an engine the registry does not know is said
to be unknown, never guessed.

Imports: runtimes.engines, runtimes.engine_stops.
"""

from __future__ import annotations


from stopdoctor.core.records import record
from stopdoctor.runtimes.engine_stops import ENGINES
from stopdoctor.runtimes.engines import engine as registered
from stopdoctor.runtimes.engines.engine import HiddenDefault


@record
class EngineExpectation:
    engine: str | None  # the tables' name, None when the server could not be told
    version: str | None  # what the server says it is
    known: bool  # the tables model this engine
    stop_rule: str | None
    defaults: tuple[HiddenDefault, ...]  # hidden budgets and contexts, with the version read

    def default_budget(self, route: str) -> HiddenDefault | None:
        """The hidden max-new-tokens default for `route` ('chat' or 'completions'), if the tables have one."""
        wanted = "/v1/completions" if route == "completions" else "/v1/chat/completions"
        return next((d for d in self.defaults if d.what == "max new tokens" and d.applies_to.startswith(wanted)), None)


def expected_of(engine: str | None, version: str | None) -> EngineExpectation:
    """What the registry says of `engine` (any spelling a server uses) at `version`."""
    found = registered(engine)
    if found is not None:
        return EngineExpectation(found.name, version, True, found.stop_rule, found.defaults)
    name = (engine or "").lower() or None
    # A stop set without an engine of its own (mlx-vlm-legacy: mlx-vlm before #244) is still modelled.
    return EngineExpectation(name, version, name in ENGINES, None, ())
