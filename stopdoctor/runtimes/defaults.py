"""Hidden defaults that truncate: the token budget and context each runtime uses when the request
or its configuration says nothing, gathered from the engine registry (`runtimes.engines`, where each
engine's module cites the version and source it was read from).

Imports: runtimes.engines.
"""

from __future__ import annotations

from stopdoctor.runtimes.engines import engine, engines
from stopdoctor.runtimes.engines.engine import HiddenDefault

DEFAULTS: tuple[HiddenDefault, ...] = tuple(d for e in engines() for d in e.defaults)
# Ollama's context by the machine's VRAM (runtimes/engines/ollama.py cites server/routes.go).
OLLAMA_CONTEXT = tuple(d for d in engine("ollama").defaults if d.what == "context")  # type: ignore[union-attr]  # a registered engine

# A request body with "prompt" and no "messages" goes to a completions endpoint: these runtimes
# give it 16 new tokens when it names no budget.
COMPLETIONS_DEFAULT = tuple(d for d in DEFAULTS if d.applies_to.startswith("/v1/completions"))
