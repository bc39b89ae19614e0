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


def test_a_record_is_built_without_generated_code_and_init_compiles_on_first_use() -> None:
    """Work, not seconds: decorating execs nothing; the first instance compiles `__init__` once."""

    @record
    class Lazy:
        a: int
        b: list[int] = field(default_factory=list)

    stub = Lazy.__dict__["__init__"]
    assert stub.__code__.co_filename == __import__("stopdoctor.core.records").core.records.__file__
    assert Lazy.__dict__["__setattr__"].__code__.co_filename == stub.__code__.co_filename
    one, two = Lazy(1), Lazy(2)
    compiled = Lazy.__dict__["__init__"]
    assert compiled is not stub and compiled.__code__.co_filename == "<string>"
    assert one.b == [] and one.b is not two.b and Lazy(3, [4]).b == [4]
    assert Lazy.__init__ is compiled  # a third instance compiled nothing more


def test_a_record_behaves_as_a_frozen_dataclass_where_it_is_built_by_hand() -> None:
    import copy
    import pickle

    made = []

    def checked(self):  # noqa: ANN001, ANN202
        made.append(self.a)

    @record
    class Base:
        a: int
        b: str = "x"

    @record
    class Child(Base):
        c: tuple[int, ...] = (1,)
        __post_init__ = checked

    @dataclasses.dataclass(frozen=True)
    class Plain(Base):  # a plain frozen dataclass over a record
        d: int = 9

    child = Child(2)  # the subclass first: its own __init__ covers the base's fields
    assert made == [2] and (child.a, child.b, child.c) == (2, "x", (1,))
    assert Base(5).b == "x" and Base.b == "x" and not hasattr(Base, "missing")
    assert [f.name for f in dataclasses.fields(Child)] == ["a", "b", "c"]
    assert dataclasses.replace(child, b="y") == Child(2, "y") and made == [2, 2, 2]
    assert Plain(1).d == 9 and [f.name for f in dataclasses.fields(Plain)] == ["a", "b", "d"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        Plain(1).d = 3  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(_R(7, "y", [1]))) == _R(7, "y") and copy.deepcopy(child) == child
    assert Child.__match_args__ == ("a", "b", "c")
    match Base(3, "z"):
        case Base(3, text):
            assert text == "z"
    with pytest.raises(TypeError, match=r"Base.__init__\(\) missing 1 required positional argument: 'a'"):
        Base()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unexpected keyword argument 'z'"):
        Base(1, z=2)  # type: ignore[call-arg]
    assert dataclasses.is_dataclass(child) and Base.__doc__ == "Base(a: int, b: str = 'x')"
    assert repr(Base.__dataclass_params__) == repr(_D.__dataclass_params__)


@pytest.mark.parametrize(("body", "error"), [
    ("a: list[int] = []", "mutable default <class 'list'> for field a is not allowed"),
    ("a: int = 1\n    b: int", "non-default argument 'b' follows default argument"),
    ("a = field(default=1)", "'a' is a field but has no type annotation"),
])
def test_a_record_rejects_at_decoration_what_dataclasses_rejects(body: str, error: str) -> None:
    for decorator in ("record", "dataclasses.dataclass(frozen=True)"):
        code = f"from __future__ import annotations\n@{decorator}\nclass Bad:\n    {body}\n"
        with pytest.raises((TypeError, ValueError), match=error.replace("(", r"\(").replace(")", r"\)")):
            exec(code, {"record": record, "dataclasses": dataclasses, "field": field})  # noqa: S102


def test_a_frozen_record_cannot_extend_a_mutable_dataclass() -> None:
    @dataclasses.dataclass
    class Mutable:
        a: int = 0

    with pytest.raises(TypeError, match="cannot inherit frozen dataclass from a non-frozen one"):
        record(type("Frozen", (Mutable,), {"__annotations__": {"b": "int"}, "b": 1}))


def test_without_the_private_parts_of_dataclasses_a_record_is_a_plain_frozen_dataclass(monkeypatch) -> None:
    """A Python whose `dataclasses` lacks `_DataclassParams` or `_FIELD` gets `dataclasses`' own
    frozen class (with the shared methods), not an import error."""
    from stopdoctor.core import records

    monkeypatch.setattr(records, "_BY_HAND", False)

    @record
    class Plain:
        a: int
        b: list[int] = field(default_factory=list)

    assert Plain.__dict__["__setattr__"].__code__.co_filename == "<string>"  # generated by dataclasses
    assert Plain(1) == Plain(1, []) and repr(Plain(1)).endswith(".Plain(a=1, b=[])") and Plain.__eq__ is records._eq
    with pytest.raises(dataclasses.FrozenInstanceError):
        Plain(1).a = 2  # type: ignore[misc]
