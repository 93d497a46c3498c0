"""`threadlog._dataclass.dataclass` behaves as `dataclasses.dataclass` does.

It only stops the standard decorator from generating ``__eq__``, ``__hash__`` and
``__repr__`` from source (import time); each case below builds the same class with both and
checks that they agree.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any, ClassVar

import pytest

from threadlog._dataclass import dataclass as shim

BOTH = pytest.mark.parametrize("make", [dataclasses.dataclass, shim], ids=["stdlib", "shim"])


def _frozen(make: Any) -> type:
    @make(frozen=True, slots=True, kw_only=True)
    class Point:
        x: int
        y: str = "a"
        tags: tuple[str, ...] = ()
        note: str = dataclasses.field(default="", compare=False)
        secret: str = dataclasses.field(default="", repr=False)
        KIND: ClassVar[str] = "point"

    return Point


@BOTH
def test_frozen_equality_hash_repr(make: Any) -> None:
    point = _frozen(make)
    a, b = point(x=1, y="b", note="n1"), point(x=1, y="b", note="n2")
    assert a == b and hash(a) == hash(b)  # note has compare=False
    assert a != point(x=2, y="b") and a != (1, "b") and a.__eq__(object()) is NotImplemented
    assert repr(a) == "_frozen.<locals>.Point(x=1, y='b', tags=(), note='n1')"
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.x = 3  # type: ignore[misc]
    assert dataclasses.replace(a, x=5).x == 5 and dataclasses.asdict(a)["y"] == "b"
    assert [f.name for f in dataclasses.fields(a)] == ["x", "y", "tags", "note", "secret"]
    assert point.__match_args__ == () and not hasattr(a, "__dict__")
    assert copy.deepcopy(a) == a and copy.copy(a) == a
    assert len({a, b, point(x=2)}) == 2


@BOTH
def test_mutable_is_unhashable_and_compares_by_value(make: Any) -> None:
    @make(slots=True)
    class Box:
        items: list[int] = dataclasses.field(default_factory=list)
        label: str = ""

    a, b = Box([1]), Box([1])
    assert a == b and Box.__hash__ is None
    with pytest.raises(TypeError):
        hash(a)
    b.items.append(2)
    assert a != b
    assert (
        repr(a)
        == "test_mutable_is_unhashable_and_compares_by_value.<locals>.Box(items=[1], label='')"
    )


@BOTH
def test_subclass_and_exact_class_comparison(make: Any) -> None:
    @make(frozen=True)
    class Base:
        a: int

    @make(frozen=True)
    class Child(Base):
        b: int = 0

    assert Child(1, 2) == Child(1, 2) and Child(1, 0) != Base(1)
    assert repr(Child(1, 2)).endswith("Child(a=1, b=2)")
    assert hash(Child(1, 2)) == hash(Child(1, 2))


@BOTH
def test_the_class_body_wins(make: Any) -> None:
    @make(frozen=True)
    class Secret:
        key: str

        def __repr__(self) -> str:
            return "Secret(***)"

        def __hash__(self) -> int:
            return 7

    @make
    class Eq:
        v: int

        def __eq__(self, other: object) -> bool:
            return True

    assert repr(Secret("k")) == "Secret(***)" and hash(Secret("k")) == 7
    assert Eq(1) == Eq(2) and Eq.__hash__ is None


@BOTH
def test_switches_off_and_empty(make: Any) -> None:
    @make(eq=False, repr=False)
    class Plain:
        v: int = 0

    @make(frozen=True)
    class Empty:
        pass

    a = Plain()
    assert a != Plain() and a == a and hash(a) == object.__hash__(a)
    assert repr(a).startswith("<")
    assert (
        Empty() == Empty() and hash(Empty()) == hash(Empty()) and repr(Empty()).endswith("Empty()")
    )


@BOTH
def test_recursive_repr(make: Any) -> None:
    @make
    class Node:
        children: list[Any] = dataclasses.field(default_factory=list)

    n = Node()
    n.children.append(n)
    assert repr(n).endswith("Node(children=[...])")


def test_same_results_as_stdlib_on_the_event_catalogue() -> None:
    from threadlog.model import events

    created = events.ThreadCreated(format=1, principal="p", config={})
    assert dataclasses.is_dataclass(created)
    assert created == events.ThreadCreated(format=1, principal="p", config={})
    assert created != events.ThreadCreated(format=1, principal="q", config={})
    assert repr(created) == (
        "ThreadCreated(session=None, type='thread.created', format=1, principal='p', config={}, "
        "lineage=None, title=None)"
    )
    with pytest.raises(TypeError):
        hash(created)  # a dict field: unhashable, as the generated __hash__ would find
