"""The one type an engine module fills in (`Engine`) and the cited values it holds: hidden
defaults, sampling defaults, reasoning parsers. Data only: every value says the engine version and
the source file it was read from.

Imports: nothing from stopdoctor.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class HiddenDefault:
    runtime: str
    version: str  # the version whose source was read
    applies_to: str  # which entry point uses it
    what: str  # "max new tokens", "context", ...
    value: int
    key: str  # what to set instead
    source: str  # file and function


@dataclass(frozen=True)
class SamplingDefaults:
    """The sampler values the engine uses when neither the model's files nor the request set them
    (None: the engine does not have that sampler)."""

    values: Mapping[str, object]
    source: str


@dataclass(frozen=True)
class ReasoningParser:
    """Server reasoning parsers that read one thought framing."""

    names: frozenset[str]
    framing: str  # "harmony" | "open-ended" (all output before `</think>`) | "open-tag" (needs `<think>` in the output)
    source: str
    until: str | None = None  # the first release that no longer behaves so, when one does


@dataclass(frozen=True)
class Engine:
    name: str  # the name the stop sets and reports use
    listed: int  # where reports list it: the core runtimes first, in the order stopdoctor has always used
    stop_rule: str  # one line summarising the stop-set rule `runtimes.stops`/`runtimes.engine_stops` cite
    stop_rule_source: str
    spellings: tuple[str, ...] = ()  # other names servers, files and users give it
    serving_kind: str | None = None  # its `check --serving --kind` name, when stopdoctor reads its serving files
    launchers: tuple[str, ...] = ()  # programs or `python -m` modules that start its server
    launchers_source: str = ""
    config_files: tuple[str, ...] = ()  # serving files of its own, by name pattern
    owned_by: tuple[str, ...] = ()  # what its `/v1/models` writes in `owned_by`
    hf_core: bool = False  # one of the core runtimes reading an HF folder's own stop ids (rules compare these)
    defaults: tuple[HiddenDefault, ...] = ()
    sampling: SamplingDefaults | None = None
    reasoning_parsers: tuple[ReasoningParser, ...] = ()
    sources: tuple[str, ...] = field(default=())  # further citations for the values above

    def names(self) -> tuple[str, ...]:
        """Every spelling that means this engine, lower case, its own name first."""
        own = (self.name,) + ((self.serving_kind,) if self.serving_kind else ()) + self.spellings
        return tuple(dict.fromkeys(n.lower() for n in own))
