"""What a serving file sets, as plain data: each value with the key that set it and the key's line.

Imports core and facts.lines only (the parsers in facts.serving and facts.serving_engines build it).
"""

from __future__ import annotations

from dataclasses import field
from pathlib import Path
from typing import Any

from stopdoctor.core.records import record
from stopdoctor.core.types import Location
from stopdoctor.facts.lines import key_line


REQUEST = "request"  # the kind of an OpenAI-compatible request body: no engine, its own stop fields


@record
class Setting:
    """One value from the serving file, with the key (flag, PARAMETER, JSON key) that set it."""

    value: Any
    key: str
    line: int | None = None  # where the parser read it, when the parser knows (Modelfile commands)


@record
class ServingConfig:
    kind: str  # an engine's serving kind (vllm, ollama, llamacpp, sglang, ...) or REQUEST
    path: Path
    text: str
    model: Setting | None = None  # the model the file names (vllm positional/--model, FROM, -m)
    stop: tuple[Setting, ...] = ()  # stop strings (PARAMETER stop, request stop, llama.cpp -r)
    stop_token_ids: tuple[Setting, ...] = ()
    ignore_eos: Setting | None = None
    max_tokens: Setting | None = None
    template: Setting | None = None  # template text (Jinja for vllm/llamacpp file, Go for ollama)
    template_name: Setting | None = None  # llama.cpp built-in template name (--chat-template NAME)
    generation_config: Setting | None = None  # vllm --generation-config (default "auto")
    override_generation_config: Setting | None = None  # vllm, parsed JSON object
    kv_overrides: dict[str, Setting] = field(default_factory=dict)  # llama.cpp --override-kv key → int
    jinja: bool = False  # llama.cpp --jinja
    options: dict[str, Setting] = field(default_factory=dict)  # every flag/key as parsed

    def location(self, key: str | Setting | None = None) -> Location:
        """Where `key` is set: a Setting's own line as the parser recorded it, else the line of the
        first setting read under that key, else the key looked up in the text."""
        setting: Setting | None
        if isinstance(key, Setting):
            setting, key = key, key.key
        else:
            setting = next((s for s in self._settings() if s.key == key and s.line is not None), None)
        if setting is not None and setting.line is not None:
            return Location(str(self.path), key, setting.line)
        return Location(str(self.path), key, key_line(self.text, key))

    def _settings(self) -> list[Setting]:
        single = (self.model, self.ignore_eos, self.max_tokens, self.template, self.template_name,
                  self.generation_config, self.override_generation_config)
        return [s for s in (*single, *self.stop, *self.stop_token_ids, *self.options.values(), *self.kv_overrides.values())
                if s is not None]
