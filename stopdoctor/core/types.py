"""Plain data shared by every stage: where a value came from, tokens, templates, model facts.

Frozen dataclasses only; imports nothing from the rest of the package.
"""

from __future__ import annotations

from dataclasses import field
from pathlib import Path
from typing import Generic, TypeVar

from stopdoctor.core.records import record

T = TypeVar("T")


@record
class Location:
    """Where a value was declared: a file (name relative to the model root, or a path), a key in
    it, and the key's 1-based line when the file is text (resolved by `facts`, where the file is read)."""

    file: str
    key: str | None = None
    line: int | None = None

    def __str__(self) -> str:
        if self.key:
            return f"{self.file}:{self.key}"
        return f"{self.file}:{self.line}" if self.line else self.file


@record
class Sourced(Generic[T]):
    """A value together with the place that declared it."""

    value: T
    location: Location


@record
class Token:
    id: int
    text: str
    special: bool


@record
class ChatTemplate:
    """One chat template; `name` is "default" unless the model ships named templates."""

    name: str
    source: str
    location: Location


@record
class ModelSource:
    """A model spec resolved into local files. `files` maps a file name to its local path."""

    spec: str
    kind: str  # "folder" | "hub" | "gguf"
    root: Path
    files: dict[str, Path] = field(default_factory=dict)
    revision: str | None = None


MODEL_KINDS = ("base", "instruct")  # what a model can be judged (Expectation.kind)


def a_kind(kind: str) -> str:
    """The kind with its article, as a sentence writes it: "an instruct model", "a base model"."""
    return f"{'an' if kind[:1].lower() in 'aeiou' else 'a'} {kind} model"


@record
class Expectation:
    """What a project asserts about one model; `declared_in` is where a failure should point
    (the config file and its key) when the model's own files are not the thing to fix."""

    kind: str | None = None
    end_of_turn: str | None = None
    stops: tuple[str | int, ...] = ()  # token texts or ids that must be effective stop ids
    declared_in: str | None = None  # the config file's path
    lines: tuple[tuple[str, int], ...] = ()  # (key, line) of each expect-* key in the config file

    def location(self, key: str) -> Location | None:
        return Location(self.declared_in, key, dict(self.lines).get(key)) if self.declared_in else None
