"""`record`: a frozen dataclass whose `__eq__`, `__hash__` and `__repr__` are shared, not generated.

`@dataclass(frozen=True)` on Python 3.11 writes and `exec`s six methods per class (`__init__`,
`__repr__`, `__eq__`, `__setattr__`, `__delattr__`, `__hash__`); on the cold `inspect` path that
code generation was the largest single cost of importing the package (issue #28). `@record` lets
`dataclasses` generate only what must be per class (`__init__` and the frozen `__setattr__` /
`__delattr__`) and gives every record the same three methods, written once here, that behave as
the generated ones do: equal when the classes are the same and the compared fields are equal,
`NotImplemented` otherwise; the hash of the hashed fields' tuple; `Name(field=value!r, ...)` over the
repr fields, `...` on recursion. `dataclasses.fields`, `replace`, `asdict` and frozenness are unchanged.
A class that writes its own `__eq__`, `__hash__` or `__repr__` gets a plain frozen dataclass.
"""

from __future__ import annotations

import dataclasses
from threading import get_ident
from dataclasses import field, replace
from typing import Any, TypeVar, dataclass_transform

_C = TypeVar("_C", bound=type)

_OWN = ("__eq__", "__hash__", "__repr__")


def _plan(cls: Any) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """The names compared, hashed and shown, as `dataclasses` would choose them (cached per class)."""
    plan: tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]] | None = cls.__dict__.get("_record_plan")
    if plan is None:
        fields = dataclasses.fields(cls)
        plan = (
            tuple(f.name for f in fields if f.compare),
            tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash)),
            tuple(f.name for f in fields if f.repr),
        )
        type.__setattr__(cls, "_record_plan", plan)
    return plan


def _eq(self: Any, other: object) -> Any:
    if other.__class__ is self.__class__:
        names = _plan(self.__class__)[0]
        return tuple([getattr(self, n) for n in names]) == tuple([getattr(other, n) for n in names])
    return NotImplemented


def _hash(self: Any) -> int:
    return hash(tuple([getattr(self, n) for n in _plan(self.__class__)[1]]))


_SHOWING: set[tuple[int, int]] = set()


def _repr(self: Any) -> str:
    key = (id(self), get_ident())
    if key in _SHOWING:
        return "..."
    _SHOWING.add(key)
    try:
        shown = ", ".join(f"{n}={getattr(self, n)!r}" for n in _plan(self.__class__)[2])
        return f"{self.__class__.__qualname__}({shown})"
    finally:
        _SHOWING.discard(key)


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field, dataclasses.Field))
def record(cls: _C) -> _C:
    """`@dataclass(frozen=True)`, with the shared `__eq__` / `__hash__` / `__repr__` above."""
    if any(name in cls.__dict__ for name in _OWN):
        return dataclasses.dataclass(frozen=True)(cls)  # type: ignore[return-value]
    made: Any = dataclasses.dataclass(frozen=True, eq=False, repr=False)(cls)
    made.__eq__ = _eq
    made.__hash__ = _hash
    made.__repr__ = _repr
    return made


__all__ = ["field", "record", "replace"]
