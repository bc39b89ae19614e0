"""Plain data shared by every stage: where a value came from, tokens, templates, model facts.

Frozen dataclasses only; imports nothing from the rest of the package.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Location:
    """Where a value was declared: a file (name relative to the model root) and a key in it."""

    file: str
    key: str | None = None

    def __str__(self) -> str:
        return f"{self.file}:{self.key}" if self.key else self.file


@dataclass(frozen=True)
class Sourced(Generic[T]):
    """A value together with the place that declared it."""

    value: T
    location: Location


@dataclass(frozen=True)
class Token:
    id: int
    text: str
    special: bool


@dataclass(frozen=True)
class ChatTemplate:
    """One chat template; `name` is "default" unless the model ships named templates."""

    name: str
    source: str
    location: Location


@dataclass(frozen=True)
class ModelSource:
    """A model spec resolved into local files. `files` maps a file name to its local path."""

    spec: str
    kind: str  # "folder" | "hub" | "gguf"
    root: Path
    files: dict[str, Path] = field(default_factory=dict)
    revision: str | None = None
