"""The one type an engine module fills in (`Engine`) and the cited values it holds: hidden
defaults, sampling defaults, reasoning parsers, and the engine's behaviour as functions its module
supplies (its stop sets from the model's files, what its server stops on under a serving file, the
line that makes it stop on an end-of-turn). Every value says the engine version and the source file
it was read from.

Imports: core, facts (the model's facts and the parsed serving file, as types), runtimes.stops.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import field

from stopdoctor.core.records import record
from stopdoctor.facts.model_facts import ModelFacts
from stopdoctor.facts.serving_config import ServingConfig
from stopdoctor.facts.serving_engines import CommandSyntax, FileSignature
from stopdoctor.runtimes.stops import RuntimeStops, StopId


@record
class HiddenDefault:
    runtime: str
    version: str  # the version whose source was read
    applies_to: str  # which entry point uses it
    what: str  # "max new tokens", "context", ...
    value: int
    key: str  # what to set instead
    source: str  # file and function


@record
class SamplingDefaults:
    """The sampler values the engine uses when neither the model's files nor the request set them
    (None: the engine does not have that sampler)."""

    values: Mapping[str, object]
    source: str


@record
class ReasoningParser:
    """Server reasoning parsers that read one thought framing."""

    names: frozenset[str]
    framing: str  # "harmony" | "open-ended" (all output before `</think>`) | "open-tag" (needs `<think>` in the output)
    source: str
    until: str | None = None  # the first release that no longer behaves so, when one does


# The engine's own stop sets from the model's files; the second argument is llama.cpp's
# end-of-generation set, already computed (engines that load a GGUF through llama.cpp reuse it).
StopSets = Callable[[ModelFacts, Sequence[StopId]], list[RuntimeStops]]
# What its server stops on: (model facts, serving file, the model's stop sets when known); the set's
# `texts` are the serving file's stop strings, `complete` False when a file it needs is unread.
ServedStops = Callable[[ModelFacts, ServingConfig, Sequence[RuntimeStops] | None], RuntimeStops]
# The line that makes its server stop on end-of-turn markers (text, id when one special token),
# given the model's GGUF file name when it is one; None: the generic generation_config.json advice.
StopAdvice = Callable[[Sequence[tuple[str, int | None]], str | None], str | None]
# SD401's (fix, key) from the advice line, the serving file and whether every marker is one id.
StopFix = Callable[[str, ServingConfig, bool], tuple[str, str]]


@record
class ReasoningControls:
    """A server's own reasoning switches (llama.cpp's `--reasoning`, `--reasoning-budget`)."""

    switch: tuple[str, ...]  # flags that turn thinking off by passing enable_thinking=false to the template
    budget: str  # the flag that caps the thought at N tokens by forcing its close
    legacy_template: str  # the flag that routes around the Jinja template (its parser applies the budget)
    source: str


@record
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
    config_content: str | None = None  # a regex of its serving files' own content (a Modelfile's FROM line)
    mentioned_by: str | None = None  # a regex of a file's text naming it, read when nothing else tells the kind
    owned_by: tuple[str, ...] = ()  # what its `/v1/models` writes in `owned_by`
    hf_core: bool = False  # one of the core runtimes reading an HF folder's own stop ids (rules compare these)
    # Its stop ids come from the generation config alone (transformers): an empty set means the
    # model declares no stop id at all (SD106), not that it misses the end-of-turn.
    generation_config_only: bool = False
    gguf_native: bool = False  # it reads a GGUF's own end-of-generation list (llama.cpp), not one eos as HF loaders do
    defaults: tuple[HiddenDefault, ...] = ()
    sampling: SamplingDefaults | None = None
    reasoning_parsers: tuple[ReasoningParser, ...] = ()
    sources: tuple[str, ...] = field(default=())  # further citations for the values above
    # Its server's command line beyond the launcher: which flags name the model and the budget
    # (engines whose command `facts.serving_engines.parse_engine_command` reads).
    command: CommandSyntax | None = None
    stop_sets: StopSets | None = None
    more_stop_sets: tuple[str, ...] = ()  # names of further sets `stop_sets` returns (an older release's rule)
    # Whether `inspect` lists its stop sets (and `generate --stops runtime:NAME` takes them); an engine
    # added later starts with False, so the listing and its snapshots change only on purpose. Serving
    # checks and probe-server use `stop_sets` either way.
    stop_sets_in_inspect: bool = True
    served_stops: ServedStops | None = None  # None: its own stop set from the model's files
    stop_advice: StopAdvice | None = None
    request_stop_ids: bool = False  # its requests take "stop_token_ids" (named in the generic advice)
    serves_jinja_template: bool = False  # the serving file's --chat-template is a Jinja template it applies
    builtin_template_ends: Mapping[str, str] = field(default_factory=dict)  # --chat-template NAME → what ends its turn
    template_language: str = "jinja"  # how its serving file's own template is written ("go": Ollama's text/template)
    # Its llama.cpp runner stops on every end-of-generation id while its own engine stops on the
    # eos only (Ollama): a marker on llama.cpp's list but not served is a warning, not an error.
    runner_stops_on_eog: bool = False
    # It matches stop strings on the output text with special tokens skipped (vLLM's
    # skip_special_tokens=True): a stop string that is one special token never matches.
    stop_strings_on_visible_text: bool = False
    stop_fix: StopFix | None = None  # None: (the advice line, "--model")
    context_option: str | None = None  # the serving file's option that sets the context (Ollama's PARAMETER num_ctx)
    sampling_options: Mapping[str, str] = field(default_factory=dict)  # serving-file option → sampler (Ollama PARAMETERs)
    # Serving-file options that set presence penalty and temperature (rules/reasoning.py reads them).
    served_sampling_keys: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    reasoning_controls: ReasoningControls | None = None
    # Its --reasoning-parser takes vLLM's parser names with vLLM's behaviour (SGLang's follow them);
    # False: stopdoctor has not read its parsers, and the parser checks leave it alone.
    vllm_parser_names: bool = True
    # What `fix` does with its serving file: "stop-strings" adds the missed end-of-turn markers as
    # stop strings (Ollama's PARAMETER stop); "generation-config" points a --generation-config
    # FOLDER that lacks the end-of-turn back at the model's own (vLLM); None edits nothing.
    fix_edit: str | None = None
    fix_notes: bool = False  # fix prints the SD401/402/405/407 advice for its command line
    # The --generation-config values under which it reads the model's own generation_config.json.
    own_generation_config: tuple[str, ...] = ()
    # What probe-server reads of a live server of this engine:
    server_header: str | None = None  # how its HTTP `Server` header starts (llama.cpp: "llama.cpp")
    version_route: str | None = None  # the route whose JSON `version` names its version
    tokenize_route: str | None = None  # a route that tokenizes {"content", "add_special"} (llama.cpp /tokenize)
    stop_string_kept_on_request: bool = False  # it takes include_stop_str_in_output (vLLM, SGLang)

    def open_tag_parser(self, name: str) -> bool:
        """`name` is one of its reasoning parsers that needs the open tag in the output."""
        return any(name in p.names for p in self.reasoning_parsers if p.framing == "open-tag")

    def file_signature(self) -> FileSignature | None:
        """How its serving files are told without --kind, when they can be."""
        if self.serving_kind is None or not (self.config_files or self.config_content or self.mentioned_by):
            return None
        return FileSignature(self.serving_kind, self.config_files, self.config_content, self.mentioned_by)

    def stop_set_names(self) -> tuple[str, ...]:
        """The `runtime` names of the stop sets `stop_sets` returns."""
        return ((self.name,) + self.more_stop_sets) if self.stop_sets is not None else ()

    def names(self) -> tuple[str, ...]:
        """Every spelling that means this engine, lower case, its own name first."""
        own = (self.name,) + ((self.serving_kind,) if self.serving_kind else ()) + self.spellings
        return tuple(dict.fromkeys(n.lower() for n in own))
