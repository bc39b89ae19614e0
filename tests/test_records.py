"""`core.records.record` behaves as `@dataclass(frozen=True)` while sharing `__eq__`/`__hash__`/`__repr__` (#28)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from stopdoctor.core.records import field, record


@record
class _R:
    a: int
    b: str = "x"
    c: list[int] = field(default_factory=list, compare=False, repr=False)
    d: int = field(default=0, hash=False)


@dataclasses.dataclass(frozen=True)
class _D:
    a: int
    b: str = "x"
    c: list[int] = dataclasses.field(default_factory=list, compare=False, repr=False)
    d: int = dataclasses.field(default=0, hash=False)


@record
class _Child(_R):
    e: int = 5


def test_record_matches_a_frozen_dataclass() -> None:
    r, d = _R(1, "y", [3], 4), _D(1, "y", [3], 4)
    assert repr(r).replace("_R(", "_D(") == repr(d)
    assert hash(r) == hash(d)
    assert r == _R(1, "y", [9], 4) and r != _R(1, "y", [3], 5)
    assert r != _Child(1, "y", [3], 4) and (r == (1, "y")) is False
    assert r.__eq__(object()) is NotImplemented
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.a = 2  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del r.a  # type: ignore[misc]
    assert dataclasses.replace(r, a=7) == _R(7, "y", [], 4)
    assert dataclasses.asdict(r) == dataclasses.asdict(d)
    assert repr(_Child(1)) == "_Child(a=1, b='x', d=0, e=5)"
    assert hash(_Child(1)) == hash((1, "x", 5)) and {_R(1), _R(1)} == {_R(1)}


def test_a_class_with_its_own_methods_keeps_them() -> None:
    @record
    class Own:
        a: int

        def __repr__(self) -> str:
            return "own"

    assert repr(Own(1)) == "own" and Own(1) == Own(1) and hash(Own(1)) == hash((1,))


def test_frozen_records_on_the_inspect_path_share_their_methods() -> None:
    """Work, not seconds: no frozen dataclass of the modules `stopdoctor.api` and the `inspect` command
    import generates its own `__eq__`."""
    code = (
        "import dataclasses, sys\n"
        "import stopdoctor.api, stopdoctor.cli.inspect\n"
        "own = []\n"
        "for m in list(sys.modules.values()):\n"
        "    if not getattr(m, '__name__', '').startswith('stopdoctor'): continue\n"
        "    for v in vars(m).values():\n"
        "        p = getattr(v, '__dataclass_params__', None)\n"
        "        if isinstance(v, type) and v.__module__ == m.__name__ and p is not None and p.frozen:\n"
        "            eq = v.__dict__.get('__eq__')\n"
        "            if getattr(getattr(eq, '__code__', None), 'co_filename', '') == '<string>':\n"
        "                own.append(v.__qualname__)\n"
        "print(own)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out
