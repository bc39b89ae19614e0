"""The engine registry: one module per engine in this folder, each defining `ENGINE` (an
`engine.Engine`), discovered here. Every command asks `engine(name_or_spelling)`, `engines()` or
`engine_for_launcher(program)`; an engine the registry does not know is None (unknown, never
guessed). Adding an engine is one module here and its tests.

Imports: facts.serving_engines (the command syntax and file signature types), runtimes.engines.*.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache

from stopdoctor.facts.serving_engines import CommandSyntax, FileSignature
from stopdoctor.runtimes.engines.engine import Engine

TYPES_MODULE = "engine"  # the module of types, not an engine


@cache
def engines() -> tuple[Engine, ...]:
    """Every engine module's ENGINE, in report order."""
    found = []
    for module in pkgutil.iter_modules(__path__):
        if module.name != TYPES_MODULE:
            found.append(importlib.import_module(f"{__name__}.{module.name}").ENGINE)
    return tuple(sorted(found, key=lambda e: (e.listed, e.name)))


@cache
def _by_spelling() -> dict[str, Engine]:
    return {spelling: e for e in engines() for spelling in e.names()}


def engine(name: str | None) -> Engine | None:
    """The engine any of whose spellings is `name` (case-insensitive), else None."""
    return _by_spelling().get((name or "").strip().lower())


def registered(name: str) -> Engine:
    """The engine named `name`, which the caller knows is registered (a runtime of a stop set, an
    engine found by the registry itself); a name that is not is a bug, not bad input."""
    found = engine(name)
    if found is None:
        raise KeyError(f"no engine named {name!r} is registered")
    return found


def engine_for_launcher(program: str | None) -> Engine | None:
    """The engine whose server `program` (a program name or a `python -m` module) starts; None for
    any other, even one whose name contains an engine's (`vllm-mlx` is not vLLM)."""
    return next((e for e in engines() if program in e.launchers), None)


def launcher_kinds() -> dict[str, str]:
    """Launcher → serving kind, for the serving-file reader (facts cannot ask runtimes itself)."""
    return {launcher: e.serving_kind for e in engines() if e.serving_kind for launcher in e.launchers}


def hf_runtimes() -> tuple[str, ...]:
    """The core runtimes whose stop ids come from an HF folder's own files."""
    return tuple(e.name for e in engines() if e.hf_core)


def serving_engine(kind: str | None) -> Engine | None:
    """The engine whose `check --serving --kind` name is `kind`; None for a request body or any
    other kind."""
    return next((e for e in engines() if e.serving_kind is not None and e.serving_kind == kind), None)


def commands() -> dict[str, CommandSyntax]:
    """Serving kind → the command syntax of the engines read by the generic command parser."""
    return {e.command.kind: e.command for e in engines() if e.command is not None}


def file_signatures() -> list[FileSignature]:
    """How each engine's serving files are told without --kind, in report order."""
    return [s for e in engines() if (s := e.file_signature()) is not None]
