"""What stopdoctor's engine tables expect of a serving engine at a version: the one question
`probe-server` asks the runtimes stage (`expected_of`), so that an engine registry can answer it
later without the probes changing. Read from `runtimes.stops` (the four core stop rules),
`runtimes.engines` (the other engines) and `runtimes.defaults` (hidden budgets and contexts); an
engine the tables do not know is said to be unknown, never guessed.

Imports: runtimes.defaults, runtimes.engines, runtimes.stops.
"""

from __future__ import annotations

from dataclasses import dataclass

from stopdoctor.runtimes.defaults import DEFAULTS, HiddenDefault
from stopdoctor.runtimes.engines import ENGINES
from stopdoctor.runtimes.stops import RUNTIMES

# One line per engine, each summarising the rule its module cites from the engine's source.
STOP_RULES = {
    "transformers": "generation_config.eos_token_id only; the tokenizer's eos is never consulted",
    "vllm": "the tokenizer's eos plus every generation_config.json eos_token_id",
    "tgi": "generation_config eos_token_id when it is a list, else the tokenizer's eos",
    "llama.cpp": "every end-of-generation token of the GGUF vocabulary (llama_vocab_is_eog)",
    "ollama": "llama.cpp's end-of-generation set, plus the Modelfile's PARAMETER stop strings",
    "sglang": "config.json eos ∪ generation_config.json eos ∪ tokenizer eos ∪ a few added stop tokens",
    "llama-cpp-python": "llama.cpp's end-of-generation set (llama_vocab_is_eog)",
    "mlx-lm": "generation_config.json eos (when truthy, else config.json's) plus the tokenizer's eos",
    "mlx-vlm": "generation_config.json eos merged over config.json's, plus the tokenizer's eos",
}
# The runtime names the tables use for what a server calls itself.
ALIASES = {"llama-cpp": "llama.cpp", "llamacpp": "llama.cpp", "text-generation-inference": "tgi",
           "transformers serve": "transformers", "llama_cpp_python": "llama-cpp-python"}


@dataclass(frozen=True)
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
    """What the tables say of `engine` (any spelling a server uses) at `version`."""
    name = ALIASES.get((engine or "").lower(), (engine or "").lower()) or None
    known = name is not None and (name in RUNTIMES or name in ENGINES or name in STOP_RULES)
    defaults = tuple(d for d in DEFAULTS if d.runtime == name)
    return EngineExpectation(name, version, known, STOP_RULES.get(name or ""), defaults)
