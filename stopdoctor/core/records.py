"""`record`: a frozen dataclass built without `dataclasses`' code generation.

`@dataclass(frozen=True)` on Python 3.11 writes and `exec`s six methods per class (`__init__`,
`__repr__`, `__eq__`, `__setattr__`, `__delattr__`, `__hash__`) and walks each annotation through its
`ClassVar`/`InitVar` checks; on the cold `inspect` path that was the largest single cost of importing
the package (issue #28: 59 classes, ~40 ms of a 0.3 s command). `@record` makes the same class with
no `exec` at decoration time:

- `__eq__`, `__hash__`, `__repr__` are shared by every record, written once here, and behave as the
  generated ones do: equal when the classes are the same and the compared fields are equal,
  `NotImplemented` otherwise; the hash of the hashed fields' tuple; `Name(field=value!r, ...)` over the
  repr fields, `...` on recursion.
- the frozen `__setattr__` / `__delattr__` are closures over the class (what the generated ones test:
  `type(self) is cls or name in fields`, then `FrozenInstanceError`).
- `__init__` is generated as `dataclasses` writes it (`object.__setattr__` per field, default
  factories, `__post_init__`), but compiled on the class's first instantiation: of the 59 records a
  GGUF `inspect` imports, 26 are never made.

`__dataclass_fields__` holds real `dataclasses.Field`s and `__dataclass_params__` those of any frozen
dataclass, so `dataclasses.fields`, `asdict`, `replace`, `is_dataclass` and a plain `@dataclass`
subclass work unchanged. The mistakes `dataclasses` rejects at decoration (a mutable default, a field
without annotation, a required field after a defaulted one, a frozen class over a non-frozen
dataclass) are rejected here at decoration too. Anything this does not cover (`ClassVar`, `InitVar`,
`KW_ONLY`, `field(init=False)` or `kw_only`, `__slots__`, a class writing its own `__init__`,
`__eq__`, `__hash__`, `__repr__`, `__setattr__` or `__delattr__`) gets a plain
`@dataclass(frozen=True)`, with the shared methods where it writes none of its own.
"""

from __future__ import annotations

import abc
import dataclasses
from dataclasses import MISSING, Field, FrozenInstanceError, field, replace
from threading import get_ident
from types import MemberDescriptorType
from typing import Any, Callable, TypeVar, dataclass_transform

_C = TypeVar("_C", bound=type)

_OWN = ("__eq__", "__hash__", "__repr__")
_GENERATED = ("__init__", "__setattr__", "__delattr__", "__slots__", "__match_args__")
_UNCOVERED = ("ClassVar", "InitVar", "KW_ONLY")


# What `@dataclass(frozen=True)` records in `__dataclass_params__`, by the names this Python's
# `_DataclassParams` takes (3.12 added match_args, kw_only, slots, weakref_slot), and the marker
# `dataclasses.fields` keeps a field by: both private to `dataclasses` (3.11-3.13 alike). A Python
# whose `dataclasses` has neither gets plain frozen dataclasses (`_BY_HAND` false), not an error.
_SETTINGS = {"init": True, "repr": True, "eq": True, "order": False, "unsafe_hash": False, "frozen": True,
             "match_args": True, "kw_only": False, "slots": False, "weakref_slot": False}
try:
    _PARAMS: Any = dataclasses._DataclassParams(  # type: ignore[attr-defined]
        **{name: _SETTINGS[name] for name in dataclasses._DataclassParams.__slots__})  # type: ignore[attr-defined]
    _FIELD_KIND: Any = dataclasses._FIELD  # type: ignore[attr-defined]
    _BY_HAND = True
except (AttributeError, KeyError, TypeError):
    _PARAMS = _FIELD_KIND = None
    _BY_HAND = False


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


def _share_methods(cls: Any) -> None:
    cls.__eq__ = _eq
    cls.__hash__ = _hash
    cls.__repr__ = _repr


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field, dataclasses.Field))
def record(cls: _C) -> _C:
    """`@dataclass(frozen=True)`, built as the module docstring says."""
    if any(name in cls.__dict__ for name in _OWN):
        return dataclasses.dataclass(frozen=True)(cls)  # type: ignore[return-value]
    fields = None if not _BY_HAND or any(name in cls.__dict__ for name in _GENERATED) else _fields(cls)
    if fields is None:
        made: Any = dataclasses.dataclass(frozen=True, eq=False, repr=False)(cls)
        _share_methods(made)
        return made
    _check_bases(cls)
    for name, value in list(cls.__dict__.items()):  # the class attribute becomes the default, or goes
        if isinstance(value, Field):
            if value.default is MISSING:
                type.__delattr__(cls, name)
            else:
                type.__setattr__(cls, name, value.default)
    names = tuple(fields)
    target: Any = cls
    target.__dataclass_params__ = _PARAMS
    target.__dataclass_fields__ = fields
    target.__init__ = _lazy_init(cls)
    target.__setattr__, target.__delattr__ = _frozen_methods(cls, names)
    _share_methods(target)
    type.__setattr__(cls, "__match_args__", names)
    if not cls.__doc__:
        target.__doc__ = f"{cls.__name__}({', '.join(_shown_parameter(f) for f in fields.values())})"
    if isinstance(cls, abc.ABCMeta):
        abc.update_abstractmethods(target)
    return cls


def _fields(cls: type) -> dict[str, Field[Any]] | None:
    """The fields, the bases' first, as `dataclasses` collects them; None for what `record` does not
    cover (the caller then uses `dataclasses`). Raises what `dataclasses` raises for a bad class."""
    fields: dict[str, Field[Any]] = {}
    for base in cls.__mro__[-1:0:-1]:
        inherited = base.__dict__.get("__dataclass_fields__")
        if inherited:
            if any(f._field_type is not _FIELD_KIND or not f.init or f.kw_only is not False
                   for f in inherited.values()):
                return None
            fields.update((f.name, f) for f in inherited.values())
    annotations = cls.__dict__.get("__annotations__", {})
    for name, value in cls.__dict__.items():
        if isinstance(value, Field) and name not in annotations:
            raise TypeError(f"{name!r} is a field but has no type annotation")
    for name, annotation in annotations.items():
        if not isinstance(annotation, str) or any(word in annotation for word in _UNCOVERED):
            return None  # a real type (no `from __future__ import annotations`) or a pseudo-field
        default = cls.__dict__.get(name, MISSING)
        if isinstance(default, MemberDescriptorType):
            return None
        made: Field[Any] = default if isinstance(default, Field) else field(default=default)
        if not made.init or made.kw_only not in (MISSING, False):
            return None
        if made.default is not MISSING and made.default.__class__.__hash__ is None:
            raise ValueError(f"mutable default {type(made.default)} for field {name} is not allowed: use default_factory")
        made.name, made.type, made.kw_only = name, annotation, False
        made._field_type = _FIELD_KIND  # type: ignore[attr-defined]
        fields[name] = made
    seen_default = False
    for made in fields.values():
        if made.default is MISSING and made.default_factory is MISSING:
            if seen_default:
                raise TypeError(f"non-default argument {made.name!r} follows default argument")
        else:
            seen_default = True
    return fields


def _check_bases(cls: type) -> None:
    params = [base.__dict__["__dataclass_params__"] for base in cls.__mro__[1:] if "__dataclass_fields__" in base.__dict__]
    if params and not any(p.frozen for p in params):
        raise TypeError("cannot inherit frozen dataclass from a non-frozen one")


def _shown_parameter(made: Field[Any]) -> str:
    shown = f"{made.name}: {made.type}"
    if made.default is not MISSING:
        return f"{shown} = {made.default!r}"
    return f"{shown} = <factory>" if made.default_factory is not MISSING else shown


def _frozen_methods(cls: Any, names: tuple[str, ...]) -> tuple[Callable[..., None], Callable[..., None]]:
    """The `__setattr__` / `__delattr__` a frozen dataclass gets, as closures instead of `exec`."""

    def __setattr__(self: Any, name: str, value: Any) -> None:
        if type(self) is cls or name in names:
            raise FrozenInstanceError(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)

    def __delattr__(self: Any, name: str) -> None:
        if type(self) is cls or name in names:
            raise FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)

    __setattr__.__qualname__ = f"{cls.__qualname__}.__setattr__"
    __delattr__.__qualname__ = f"{cls.__qualname__}.__delattr__"
    return __setattr__, __delattr__


def _lazy_init(cls: Any) -> Callable[..., None]:
    """An `__init__` that compiles the real one (`_compile_init`) on first use and puts it in its place."""

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        real = _compile_init(cls)
        type.__setattr__(cls, "__init__", real)
        real(self, *args, **kwargs)

    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    return __init__


class _Factory:
    """The default of a parameter whose field has a default factory (as `dataclasses` marks it)."""

    def __repr__(self) -> str:
        return "<factory>"


_HAS_FACTORY = _Factory()


def _compile_init(cls: Any) -> Callable[..., None]:
    """The `__init__` `dataclasses` would write for this frozen class, compiled now."""
    namespace: dict[str, Any] = {"__set": object.__setattr__, "__has_factory": _HAS_FACTORY}
    parameters, body = ["__record_self__"], []  # not `self`: a field may be named so (as in `dataclasses`)
    for made in cls.__dataclass_fields__.values():
        name = made.name
        if made.default is not MISSING:
            namespace[f"__default_{name}"] = made.default
            parameters.append(f"{name}=__default_{name}")
            body.append(f"    __set(__record_self__, {name!r}, {name})")
        elif made.default_factory is not MISSING:
            namespace[f"__factory_{name}"] = made.default_factory
            parameters.append(f"{name}=__has_factory")
            body.append(f"    __set(__record_self__, {name!r}, __factory_{name}() if {name} is __has_factory else {name})")
        else:
            parameters.append(name)
            body.append(f"    __set(__record_self__, {name!r}, {name})")
    if hasattr(cls, "__post_init__"):
        body.append("    __record_self__.__post_init__()")
    source = f"def __init__({', '.join(parameters)}):\n" + ("\n".join(body) or "    pass") + "\n"
    exec(source, namespace)  # noqa: S102  our own text: field names are identifiers, values are passed by name
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    return init


__all__ = ["field", "record", "replace"]
